//! The one error type of cueflow.
//!
//! Misuse that can be seen at the call is refused with a validation variant that names the sizes,
//! handles and the SPEC rule involved (ER3); nothing is enqueued then. Backends return only what a
//! caller could not foresee: out of memory, a lost device, a driver error code, or a sticky fault
//! (KN2/ER2) that poisons the device until a new one is opened.

use std::fmt;

/// Result alias used throughout cueflow.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, typed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Work is still pending. Returned by `elapsed` on incomplete events (EV6); never sticky (ER1).
    #[error("not ready: {0}")]
    NotReady(&'static str),

    /// A copy or memset range falls outside its buffer, or two sides differ in length (CP4).
    #[error("out of bounds ({rule}): {what}")]
    OutOfBounds {
        /// SPEC rule id.
        rule: &'static str,
        /// What was asked, with the sizes.
        what: String,
    },

    /// A launch configuration the device cannot run (KN1).
    #[error("invalid launch configuration for kernel `{kernel}` (KN1): {why}")]
    InvalidLaunch {
        /// Kernel name.
        kernel: String,
        /// What is wrong with the shape.
        why: String,
    },

    /// Kernel arguments that do not match what the launch declared or what the kernel reads.
    #[error("invalid kernel argument for `{kernel}`: {why}")]
    InvalidArgument {
        /// Kernel name.
        kernel: String,
        /// Which argument and why.
        why: String,
    },

    /// A chunked pipeline that cannot run as configured: zero streams or chunks, or more chunks
    /// than elements (an empty buffer has none to split).
    #[error("invalid pipeline layout: {0}")]
    InvalidLayout(String),

    /// A handle used with an object it cannot be used with: another device, a never-recorded
    /// event in `elapsed`, an event without timing (ER3, EV6).
    #[error("invalid handle: {0}")]
    InvalidHandle(String),

    /// A runtime call made where it is not permitted, such as from inside a host function (HF2).
    #[error("not permitted ({rule}): {what}")]
    NotPermitted {
        /// SPEC rule id.
        rule: &'static str,
        /// The call that was refused.
        what: String,
    },

    /// A call that is illegal while a stream capture is under way; it invalidated the capture (GR2).
    #[error("illegal during stream capture (GR2): {0}; the capture is now invalidated")]
    CaptureIllegal(String),

    /// Ending a capture that an illegal call invalidated; no graph is produced (GR2).
    #[error("stream capture was invalidated (GR2) by: {0}")]
    CaptureInvalidated(String),

    /// Capture misuse: begin on the legacy stream, end on another stream, unjoined work (GR1).
    #[error("capture error (GR1): {0}")]
    Capture(String),

    /// A graph that cannot be instantiated as built (GR8): a cycle, a node of another graph,
    /// graph memory used outside its allocation's lifetime. The message names the node.
    #[error("graph error (GR8): {0}")]
    Graph(String),

    /// A graph update that would change the graph's shape; the instantiation is unchanged (GR6).
    #[error("graph update refused (GR6): {0}; the instantiation is unchanged")]
    GraphUpdate(String),

    /// A kernel faulted; the device is poisoned and every later call returns this (KN2, ER2).
    #[error("kernel `{kernel}` faulted on device {device}: {detail} (sticky: open a new device to recover)")]
    KernelFault {
        /// The device that is now poisoned.
        device: String,
        /// The kernel that faulted.
        kernel: String,
        /// What happened (panic message, CUDA error name).
        detail: String,
    },

    /// Device memory or pinned memory could not be allocated.
    #[error("out of memory: {what} ({bytes} bytes)")]
    OutOfMemory {
        /// Which kind of memory.
        what: &'static str,
        /// Requested size.
        bytes: usize,
    },

    /// The system refused a resource other than memory that the call needed: a thread (the
    /// host backend's engines, a completion watcher), a handle. Typed, never a panic; freeing
    /// what holds such resources (dropping devices) makes later calls succeed again.
    #[error("out of resources: {0}")]
    OutOfResources(String),

    /// A backend is not available on this machine (no driver library, no device, feature off).
    #[error("backend unavailable: {0}")]
    Unavailable(String),

    /// A device string or variable that names no backend.
    #[error("unknown device `{0}`: expected `host` or `cuda:N`")]
    UnknownDevice(String),

    /// Run-time kernel compilation failed; carries the compiler log.
    #[error("kernel compilation failed for `{kernel}`: {log}")]
    Compile {
        /// Kernel or module name.
        kernel: String,
        /// Compiler log.
        log: String,
    },

    /// Compile options NVRTC could not take (KC1): refused before anything is compiled or
    /// enqueued, on every backend.
    #[error("invalid compile options for `{kernel}` (KC1): {why}")]
    InvalidOptions {
        /// Kernel name.
        kernel: String,
        /// Which option and why.
        why: String,
    },

    /// A host function panicked (HF3); the device is poisoned and every later call returns
    /// this (ER2), as after a kernel fault.
    #[error("host function `{name}` faulted on device {device}: {detail} (sticky: open a new device to recover)")]
    HostFnFault {
        /// The device that is now poisoned.
        device: String,
        /// The host function's name (`host function` when it was given none).
        name: String,
        /// What happened (the panic message and where).
        detail: String,
    },

    /// A feature the chosen backend or situation does not support.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// The race sanitizer refused a call that would complete a data race (AC4, `error` mode);
    /// nothing was enqueued. The report names both accesses, why nothing orders them, and the
    /// fix.
    #[error("{0}")]
    Race(Box<crate::core::sanitizer::RaceReport>),

    /// A collective its members do not agree on (lengths, types) or that its library refused
    /// (MD4).
    #[error("collective (MD4): {0}")]
    Collective(String),

    /// A process started by a launcher (torchrun, `srun`, `mpirun`) could not meet the other
    /// ranks of its job (MD5); the [`LaunchError`](crate::LaunchError) says how.
    #[error("launch (MD5): {0}")]
    Launch(#[from] crate::cluster::LaunchError),

    /// A driver call failed with a code cueflow does not map to a more specific variant.
    #[error("driver error in {call}: {code}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The driver's error name.
        code: String,
    },
}

impl Error {
    /// True for the sticky errors that poison a device (KN2, ER2).
    pub fn is_sticky(&self) -> bool {
        matches!(self, Error::KernelFault { .. } | Error::HostFnFault { .. })
    }

    pub(crate) fn bounds(rule: &'static str, what: impl fmt::Display) -> Self {
        Error::OutOfBounds {
            rule,
            what: what.to_string(),
        }
    }
}
