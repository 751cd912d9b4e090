//! The CUDA driver API, wrapped once: one checked function per driver call, grouped by area,
//! as cudarc's `driver/result.rs` wraps each call once. The rest of the CUDA backend calls
//! these and makes no `sys::cu…` call of its own (a rule of the layer check,
//! `crates/cueflow-layers`); the driver layer's own tests check that every function it calls
//! is one the floor checks for, and that each newer one is called behind a check.
//!
//! | file | area |
//! |---|---|
//! | `library.rs` | opening `libcuda` with libloading, its version, which optional functions it has |
//! | `version.rs` | versions, the functions newer than CUDA 12.0, features and what they need |
//! | `context.rs` | initialization, devices, primary and own contexts, flags, memory info |
//! | `memory.rs` | allocation and release, registration, copies, memset, pools, managed memory |
//! | `stream.rs` | streams, host functions, stream capture |
//! | `event.rs` | events: create, record, query, synchronize, elapsed time |
//! | `module.rs` | modules, functions and their parameters, the linker, kernel launches |
//! | `graph.rs` | graphs: nodes, conditional handles, instantiation, updates, launches |
//! | `peer.rs` | peer access and peer copies |
//! | `nvrtc.rs` | NVRTC: finding the one that matches the driver, and its calls |
//!
//! Each wrapper makes the unsafe call, turns the result code into a [`CuResult`] whose error
//! names the call ([`CuError::to_error`] maps it onto [`Error`]), and is `#[inline]`, so a
//! wrapped call costs what the raw call did. A wrapper is a safe `fn` when all it needs of its
//! caller are the two rules every call site of this backend keeps (the `// SAFETY:` comments
//! cite them):
//!
//! * **D1 (handles).** Every handle passed to the driver was created by this backend for the
//!   context of the call and has not been destroyed; the owning object destroys it exactly once,
//!   in its `Drop`.
//! * **D2 (context).** The owning context was made current on the calling thread by
//!   `Ctx::bind` (`super::context`) before the call.
//!
//! It is an `unsafe fn`, with a `# Safety` section, when it needs more: memory that stays valid
//! (copies, frees, registrations), pointers the driver keeps (host functions, kernel
//! arguments), handles of foreign origin.
//!
//! Functions newer than CUDA 12.0 are called only where the driver exports them
//! ([`library::api`]); without them a wrapper takes the older entry point where there is one,
//! or returns a [`CuError`] marked [`missing`](CuError::missing), which maps onto
//! [`Error::Unsupported`] naming the version the call needs — never cudarc's panic.

pub(super) mod context;
pub(super) mod event;
pub(super) mod graph;
pub(super) mod library;
pub(super) mod memory;
pub(super) mod module;
pub(super) mod nvrtc;
pub(super) mod peer;
pub(super) mod stream;
pub(super) mod version;

use std::ffi::CStr;

use cudarc::driver::sys::{self, CUevent, CUresult, CUstream};

use crate::error::Error;

/// The legacy default stream's handle (`CU_STREAM_LEGACY`): the driver applies ST4 to it.
pub(super) const STREAM_LEGACY: CUstream = 0x1 as CUstream;

/// A failed driver call: which function, and the code it returned.
#[derive(Clone, Copy, Debug)]
pub(super) struct CuError {
    /// The driver function.
    pub call: &'static str,
    /// What it returned.
    pub code: CUresult,
    /// The driver does not have the function (`call` names it): nothing was called.
    pub missing: bool,
}

/// Result of a driver call.
pub(super) type CuResult<T> = std::result::Result<T, CuError>;

impl CuError {
    /// `call` returned `code`.
    pub const fn new(call: &'static str, code: CUresult) -> CuError {
        CuError {
            call,
            code,
            missing: false,
        }
    }

    /// The driver lacks `call`, a function newer than it: nothing was called.
    pub const fn missing(call: &'static str) -> CuError {
        CuError {
            call,
            code: CUresult::CUDA_ERROR_NOT_SUPPORTED,
            missing: true,
        }
    }
}

thread_local! {
    /// Driver calls this thread made through [`check`] and [`check_ready`] (every checked
    /// wrapper), and their names while [`log_calls`] is on: what a code path costs in driver
    /// calls, for tests and benchmarks (automatic graphs' replays, issue 31).
    static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static LOG: std::cell::RefCell<Option<Vec<&'static str>>> = const { std::cell::RefCell::new(None) };
}

/// Threads whose driver calls [`LOG`] records now: each call looks at its thread's log only
/// while some thread logs (a thread-local lookup per driver call otherwise).
static LOGGING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[inline]
fn counted(call: &'static str) {
    CALLS.with(|c| c.set(c.get() + 1));
    if LOGGING.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        LOG.with(|l| {
            if let Some(v) = l.borrow_mut().as_mut() {
                v.push(call);
            }
        });
    }
}

/// Driver calls this thread made so far.
pub(in crate::backend::cuda) fn calls() -> u64 {
    CALLS.with(|c| c.get())
}

/// Start (`on`) or stop logging this thread's driver calls by name; returns what was logged
/// since the last call.
pub(in crate::backend::cuda) fn log_calls(on: bool) -> Vec<&'static str> {
    use std::sync::atomic::Ordering::Relaxed;
    LOG.with(|l| {
        let mut l = l.borrow_mut();
        let was = l.take();
        if was.is_some() {
            LOGGING.fetch_sub(1, Relaxed);
        }
        if on {
            LOGGING.fetch_add(1, Relaxed);
            *l = Some(Vec::new());
        }
        was.unwrap_or_default()
    })
}

/// Turn a driver result code into a [`CuResult`].
#[inline]
pub(super) fn check(call: &'static str, code: CUresult) -> CuResult<()> {
    counted(call);
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError::new(call, code))
    }
}

/// [`check`] for a call that may wait for running device work (frees, unregistrations,
/// synchronizations). With `CUEFLOW_CUDA_DEBUG` set, one that took half a second or more is
/// noted on stderr with its thread (the test harness names threads after tests), when it
/// started and a backtrace: what names the call that held another thread's call up.
#[inline]
pub(super) fn check_waited(call: &'static str, f: impl FnOnce() -> CUresult) -> CuResult<()> {
    let start = std::time::Instant::now();
    let code = f();
    let took = start.elapsed();
    if took >= std::time::Duration::from_millis(500) && crate::config::cuda_debug() {
        note_waited(call, took);
    }
    check(call, code)
}

/// The note of [`check_waited`], on stderr directly (a test harness captures only `print!`).
#[cold]
fn note_waited(call: &'static str, took: std::time::Duration) {
    use std::io::Write;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let started = now.saturating_sub(took);
    let thread = std::thread::current();
    let _ = writeln!(
        std::io::stderr(),
        "cueflow cuda: {call} on thread {:?} took {} ms (started at {}.{:03} s since the epoch)\n{}",
        thread.name().unwrap_or("unnamed"),
        took.as_millis(),
        started.as_secs(),
        started.subsec_millis(),
        std::backtrace::Backtrace::force_capture()
    );
}

/// `CUDA_SUCCESS` as `Ok(true)`, `CUDA_ERROR_NOT_READY` as `Ok(false)` (queries).
#[inline]
pub(super) fn check_ready(call: &'static str, code: CUresult) -> CuResult<bool> {
    counted(call);
    match code {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(CuError::new(call, code)),
    }
}

/// The driver's name for a result code (`CUDA_ERROR_ILLEGAL_ADDRESS`), or its number.
pub(super) fn error_name(code: CUresult) -> String {
    if library::loaded().is_some() {
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: cuGetErrorName needs no context and writes a pointer to a static string;
        // the driver is loaded (checked above), so cudarc's lookup finds the symbol.
        let r = unsafe { sys::cuGetErrorName(code, &mut p) };
        if r == CUresult::CUDA_SUCCESS && !p.is_null() {
            // SAFETY: on success `p` points to a NUL-terminated static string of the driver.
            return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        }
    }
    format!("CUresult {}", code as u32)
}

impl CuError {
    /// True for the codes that poison the context (KN2, ER2): faults inside a kernel.
    pub fn is_sticky(&self) -> bool {
        use CUresult::*;
        !self.missing
            && matches!(
                self.code,
                CUDA_ERROR_ILLEGAL_ADDRESS
                    | CUDA_ERROR_LAUNCH_FAILED
                    | CUDA_ERROR_ILLEGAL_INSTRUCTION
                    | CUDA_ERROR_MISALIGNED_ADDRESS
                    | CUDA_ERROR_INVALID_ADDRESS_SPACE
                    | CUDA_ERROR_INVALID_PC
                    | CUDA_ERROR_HARDWARE_STACK_ERROR
                    | CUDA_ERROR_ASSERT
                    | CUDA_ERROR_LAUNCH_TIMEOUT
                    | CUDA_ERROR_ECC_UNCORRECTABLE
            )
    }

    /// The code's name followed by the call, for error details.
    pub fn describe(&self) -> String {
        if self.missing {
            return format!("{} is missing from this driver", self.call);
        }
        format!("{} (reported by {})", error_name(self.code), self.call)
    }

    /// The error for a non-sticky failure: out of memory, a function the driver lacks
    /// ([`Error::Unsupported`] naming the version it needs), or the driver's error name.
    pub fn to_error(self) -> Error {
        if self.missing {
            let api = library::api();
            return match version::Func::of_symbol(self.call) {
                Some(f) => api.missing(f),
                None => Error::Unsupported(format!(
                    "{} is missing from this CUDA {} driver",
                    self.call, api.version
                )),
            };
        }
        match self.code {
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory {
                what: self.call,
                bytes: 0,
            },
            _ => Error::Driver {
                call: self.call,
                code: error_name(self.code),
            },
        }
    }
}

/// A driver event handle that may move between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ev(pub CUevent);

// SAFETY: driver handles are plain identifiers, valid on any thread once the owning context is
// current there (D2); the driver serializes its own state.
unsafe impl Send for Ev {}
// SAFETY: as above; the handle is never dereferenced on the Rust side.
unsafe impl Sync for Ev {}

/// A driver stream handle that may move between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct St(pub CUstream);

// SAFETY: as for `Ev`.
unsafe impl Send for St {}
// SAFETY: as for `Ev`.
unsafe impl Sync for St {}

#[cfg(test)]
mod tests;
