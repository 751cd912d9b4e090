//! Thin checked access to the driver API: result codes, error names and their mapping onto
//! [`Error`], `Send` wrappers for driver handles, and the per-thread current-context cache.
//!
//! Every driver call of this backend goes through `cudarc::driver::sys` and is turned into a
//! [`CuResult`] by [`check`]. Two rules hold at every call site (the `// SAFETY:` comments cite
//! them):
//!
//! * **D1 (handles).** Every handle passed to the driver was created by this backend for the
//!   context of the call and has not been destroyed; the owning object destroys it exactly once,
//!   in its `Drop`.
//! * **D2 (context).** The owning context was made current on the calling thread by
//!   [`super::context::Ctx::bind`] before the call.
//!
//! The loader ([`super::loader`]) has checked that the library and every symbol used here exist
//! before the first call, so cudarc's lazy symbol lookup cannot panic.

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
}

/// Result of a driver call.
pub(super) type CuResult<T> = std::result::Result<T, CuError>;

/// Turn a driver result code into a [`CuResult`].
#[inline]
pub(super) fn check(call: &'static str, code: CUresult) -> CuResult<()> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError { call, code })
    }
}

/// The driver's name for a result code (`CUDA_ERROR_ILLEGAL_ADDRESS`), or its number.
pub(super) fn error_name(code: CUresult) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName needs no context and writes a pointer to a static string.
    let r = unsafe { sys::cuGetErrorName(code, &mut p) };
    if r == CUresult::CUDA_SUCCESS && !p.is_null() {
        // SAFETY: on success `p` points to a NUL-terminated static string owned by the driver.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("CUresult {}", code as u32)
    }
}

impl CuError {
    /// True for the codes that poison the context (KN2, ER2): faults inside a kernel.
    pub fn is_sticky(&self) -> bool {
        use CUresult::*;
        matches!(
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
        format!("{} (reported by {})", error_name(self.code), self.call)
    }

    /// The error for a non-sticky failure: out of memory, or the driver's error name.
    pub fn to_error(self) -> Error {
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

/// Create an event with the driver's `CU_EVENT_*` flags.
pub(super) fn event_create(flags: u32) -> CuResult<Ev> {
    let mut e: CUevent = std::ptr::null_mut();
    // SAFETY: D2; `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, flags)
    })?;
    Ok(Ev(e))
}

/// Destroy an event (returns at once even while it is pending, EV8).
pub(super) fn event_destroy(e: Ev) {
    // SAFETY: D1 (the caller owns `e` and destroys it once), D2.
    let _ = unsafe { sys::cuEventDestroy_v2(e.0) };
}

/// Record `e` on `s`.
pub(super) fn event_record(e: Ev, s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuEventRecord", unsafe { sys::cuEventRecord(e.0, s.0) })
}

/// Query `e`: `Ok(true)` when complete, `Ok(false)` when not ready.
pub(super) fn event_query(e: Ev) -> CuResult<bool> {
    // SAFETY: D1, D2.
    let r = unsafe { sys::cuEventQuery(e.0) };
    match r {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(CuError {
            call: "cuEventQuery",
            code,
        }),
    }
}

/// Block until `e` completed.
pub(super) fn event_synchronize(e: Ev) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuEventSynchronize", unsafe {
        sys::cuEventSynchronize(e.0)
    })
}

/// Query `s`: `Ok(true)` when all its work is done.
pub(super) fn stream_query(s: St) -> CuResult<bool> {
    // SAFETY: D1, D2.
    let r = unsafe { sys::cuStreamQuery(s.0) };
    match r {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(CuError {
            call: "cuStreamQuery",
            code,
        }),
    }
}

/// Block until all work on `s` is done.
pub(super) fn stream_synchronize(s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(s.0)
    })
}

/// Destroy `s` (returns at once; pending work still completes, ST10).
pub(super) fn stream_destroy(s: St) {
    if s.0 != STREAM_LEGACY && !s.0.is_null() {
        // SAFETY: D1 (the owner destroys its stream once; never the legacy handle), D2.
        let _ = unsafe { sys::cuStreamDestroy_v2(s.0) };
    }
}
