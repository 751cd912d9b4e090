//! The one error type of cueflow.
//!
//! Misuse that can be seen at the call is refused with a validation variant that names the
//! sizes, handles and the rule of the specification involved (ER3); nothing is enqueued then.
//! Backends return only what a caller could not foresee: out of memory, a lost device, a driver
//! error code, or a sticky fault (KN2/ER2) that poisons the device until a new one is opened.
//!
//! A message that cites rules ends with what each one means (`src/rules.rs`), and `Debug`
//! prints the message too, so an error returned from `main` reads as it is meant to.

use std::fmt;

/// Result alias used throughout cueflow.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, typed.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Work is still pending. Returned by `elapsed` on incomplete events (EV6); never sticky (ER1).
    NotReady(&'static str),

    /// A copy or memset range falls outside its buffer, or two sides differ in length (CP4).
    OutOfBounds {
        /// Rule id of the specification (`docs/spec.md`).
        rule: &'static str,
        /// What was asked, with the sizes.
        what: String,
    },

    /// A launch configuration the device cannot run (KN1).
    InvalidLaunch {
        /// Kernel name.
        kernel: String,
        /// What is wrong with the shape.
        why: String,
    },

    /// Kernel arguments that do not match what the launch declared or what the kernel reads.
    InvalidArgument {
        /// Kernel name.
        kernel: String,
        /// Which argument and why.
        why: String,
    },

    /// A chunked pipeline that cannot run as configured: zero streams or chunks, or more chunks
    /// than elements (an empty buffer has none to split).
    InvalidLayout(String),

    /// A handle used with an object it cannot be used with: another device, a never-recorded
    /// event in `elapsed`, an event without timing (ER3, EV6).
    InvalidHandle(String),

    /// A runtime call made where it is not permitted, such as from inside a host function (HF2).
    NotPermitted {
        /// Rule id of the specification (`docs/spec.md`).
        rule: &'static str,
        /// The call that was refused.
        what: String,
    },

    /// A call that is illegal while a stream capture is under way; it invalidated the capture (GR2).
    CaptureIllegal(String),

    /// Ending a capture that an illegal call invalidated; no graph is produced (GR2).
    CaptureInvalidated(String),

    /// Capture misuse: begin on the legacy stream, end on another stream, unjoined work (GR1).
    Capture(String),

    /// A graph that cannot be instantiated as built (GR8): a cycle, a node of another graph,
    /// graph memory used outside its allocation's lifetime. The message names the node.
    Graph(String),

    /// A graph update that would change the graph's shape; the instantiation is unchanged (GR6).
    GraphUpdate(String),

    /// A kernel faulted; the device is poisoned and every later call returns this (KN2, ER2).
    KernelFault {
        /// The device that is now poisoned.
        device: String,
        /// The kernel that faulted.
        kernel: String,
        /// What happened (panic message, CUDA error name).
        detail: String,
    },

    /// Device memory or pinned memory could not be allocated.
    OutOfMemory {
        /// Which kind of memory.
        what: &'static str,
        /// Requested size.
        bytes: usize,
    },

    /// The system refused a resource other than memory that the call needed: a thread (the
    /// host backend's engines, a completion watcher), a handle. Typed, never a panic; freeing
    /// what holds such resources (dropping devices) makes later calls succeed again.
    OutOfResources(String),

    /// A backend is not available on this machine (no driver library, no device, feature off).
    Unavailable(String),

    /// A device string or variable that names no backend.
    UnknownDevice(String),

    /// Run-time kernel compilation failed; carries the compiler log.
    Compile {
        /// Kernel or module name.
        kernel: String,
        /// Compiler log.
        log: String,
    },

    /// Compile options NVRTC could not take (KC1): refused before anything is compiled or
    /// enqueued, on every backend.
    InvalidOptions {
        /// Kernel name.
        kernel: String,
        /// Which option and why.
        why: String,
    },

    /// A host function panicked (HF3); the device is poisoned and every later call returns
    /// this (ER2), as after a kernel fault.
    HostFnFault {
        /// The device that is now poisoned.
        device: String,
        /// The host function's name (`host function` when it was given none).
        name: String,
        /// What happened (the panic message and where).
        detail: String,
    },

    /// A feature the chosen backend or situation does not support.
    Unsupported(String),

    /// The race sanitizer refused a call that would complete a data race (AC4, `error` mode);
    /// nothing was enqueued. The report names both accesses, why nothing orders them, and the
    /// fix.
    Race(Box<crate::core::tracking::sanitizer::RaceReport>),

    /// A collective its members do not agree on (lengths, types) or that its library refused
    /// (MD4).
    Collective(String),

    /// A process started by a launcher (torchrun, `srun`, `mpirun`) could not meet the other
    /// ranks of its job (MD5); the [`LaunchError`](crate::LaunchError) says how.
    Launch(#[from] crate::cluster::LaunchError),

    /// A driver call failed with a code cueflow does not map to a more specific variant.
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

    /// For an [`Error::Unsupported`] that says the CUDA driver at hand is too old for what was
    /// asked, the driver version it needs, encoded as `DeviceProperties::driver_version` is
    /// (1000 × major + 10 × minor: 12030 is CUDA 12.3); `None` for every other error. A
    /// program that can do without the feature (a test, an example) tells "this driver is too
    /// old" apart from a failure with it: skip when the version is newer than the device's
    /// driver, fail otherwise.
    pub fn needed_driver_version(&self) -> Option<u32> {
        let Error::Unsupported(m) = self else {
            return None;
        };
        let v = m.split(NEEDS_DRIVER).nth(1)?.split(' ').next()?;
        let (major, minor) = v.split_once('.')?;
        Some(major.parse::<u32>().ok()? * 1000 + minor.parse::<u32>().ok()? * 10)
    }

    /// `what` needs a CUDA driver of version `need` and this one is `have` (both encoded as
    /// `DeviceProperties::driver_version` is): the one wording of that, which
    /// [`needed_driver_version`](Self::needed_driver_version) reads back.
    pub(crate) fn driver_too_old(what: &str, need: u32, have: u32) -> Self {
        let v = |x: u32| format!("{}.{}", x / 1000, x % 1000 / 10);
        Error::Unsupported(format!(
            "{what} {NEEDS_DRIVER}{} driver or newer (this driver is CUDA {})",
            v(need),
            v(have)
        ))
    }
}

/// What comes before the version in an [`Error::driver_too_old`] message.
const NEEDS_DRIVER: &str = "needs a CUDA ";

/// An error's message as the variant words it, before the meanings of the rules it cites.
struct Message<'a>(&'a Error);

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Error::NotReady(m) => write!(f, "not ready: {m}"),
            Error::OutOfBounds { rule, what } => write!(f, "out of bounds ({rule}): {what}"),
            Error::InvalidLaunch { kernel, why } => write!(f, "invalid launch configuration for kernel `{kernel}` (KN1): {why}"),
            Error::InvalidArgument { kernel, why } => write!(f, "invalid kernel argument for `{kernel}`: {why}"),
            Error::InvalidLayout(m) => write!(f, "invalid pipeline layout: {m}"),
            Error::InvalidHandle(m) => write!(f, "invalid handle: {m}"),
            Error::NotPermitted { rule, what } => write!(f, "not permitted ({rule}): {what}"),
            Error::CaptureIllegal(m) => write!(f, "illegal during stream capture (GR2): {m}; the capture is now invalidated"),
            Error::CaptureInvalidated(m) => write!(f, "stream capture was invalidated (GR2) by: {m}"),
            Error::Capture(m) => write!(f, "capture error (GR1): {m}"),
            Error::Graph(m) => write!(f, "graph error (GR8): {m}"),
            Error::GraphUpdate(m) => write!(f, "graph update refused (GR6): {m}; the instantiation is unchanged"),
            Error::KernelFault { detail, device, kernel } => write!(f, "kernel `{kernel}` faulted on device {device}: {detail} (sticky: open a new device to recover)"),
            Error::OutOfMemory { bytes, what } => write!(f, "out of memory: {what} ({bytes} bytes)"),
            Error::OutOfResources(m) => write!(f, "out of resources: {m}"),
            Error::Unavailable(m) => write!(f, "backend unavailable: {m}"),
            Error::UnknownDevice(m) => write!(f, "unknown device `{m}`: expected `host` or `cuda:N`"),
            Error::Compile { kernel, log } => write!(f, "kernel compilation failed for `{kernel}`: {log}"),
            Error::InvalidOptions { kernel, why } => write!(f, "invalid compile options for `{kernel}` (KC1): {why}"),
            Error::HostFnFault { detail, device, name } => write!(f, "host function `{name}` faulted on device {device}: {detail} (sticky: open a new device to recover)"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Race(m) => write!(f, "{m}"),
            Error::Collective(m) => write!(f, "collective (MD4): {m}"),
            Error::Launch(e) => write!(f, "launch (MD5): {e}"),
            Error::Driver { call, code } => write!(f, "driver error in {call}: {code}"),
        }
    }
}

/// The message, then what each rule it cites means: `out of bounds (CP4): … (CP4: a copy or
/// memset stays within its buffers …)`.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = Message(self).to_string();
        f.write_str(&message)?;
        crate::rules::explain(&message, f)
    }
}

/// The same text as [`Display`](fmt::Display), so that `fn main() -> cueflow::Result<()>` and
/// `unwrap` print the message rather than the variant's fields.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
