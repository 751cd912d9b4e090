//! Events: creation with the driver's flags, destruction, record, query, synchronize, and the
//! time between two (`cuEventElapsedTime_v2` on CUDA 12.8+, `cuEventElapsedTime` before).

use cudarc::driver::sys;

use super::library;
use super::version::{Entry, Func, Old};
use super::{check, check_ready, check_waited, CuError, CuResult, Ev, St};

/// An event with the driver's `CU_EVENT_*` flags (D2).
pub(in crate::backend::cuda) fn create(flags: u32) -> CuResult<Ev> {
    let mut e = std::ptr::null_mut();
    // SAFETY: D2; `e` is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, flags)
    })?;
    Ok(Ev(e))
}

/// Destroy `e` (returns at once even while it is pending, EV8).
#[inline]
pub(in crate::backend::cuda) fn destroy(e: Ev) {
    // SAFETY: D1 (the caller owns `e` and destroys it once), D2.
    let _ = check("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(e.0) }); // EV8: returns at once
}

/// Record `e` on `s`.
#[inline]
pub(in crate::backend::cuda) fn record(e: Ev, s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuEventRecord", unsafe { sys::cuEventRecord(e.0, s.0) })
}

/// Query `e`: `Ok(true)` when complete, `Ok(false)` when not ready.
#[inline]
pub(in crate::backend::cuda) fn query(e: Ev) -> CuResult<bool> {
    // SAFETY: D1, D2.
    check_ready("cuEventQuery", unsafe { sys::cuEventQuery(e.0) })
}

/// Block until `e` completed.
#[inline]
pub(in crate::backend::cuda) fn synchronize(e: Ev) -> CuResult<()> {
    // SAFETY: D1, D2.
    check_waited("cuEventSynchronize", || unsafe {
        sys::cuEventSynchronize(e.0)
    })
}

/// Milliseconds between `start` and `end` (both recorded with timing, EV6). The error keeps
/// the driver's code: `CUDA_ERROR_NOT_READY`, `CUDA_ERROR_INVALID_HANDLE` mean what EV6 says.
pub(in crate::backend::cuda) fn elapsed_ms(start: Ev, end: Ev) -> CuResult<f32> {
    let mut ms = 0f32;
    let (call, r) = match library::api().pick(Func::EventElapsedTimeV2, Old::EventElapsedTime) {
        // SAFETY: D1, D2; the driver has the function (checked); `ms` is a valid out-pointer.
        Ok(Entry::New) => ("cuEventElapsedTime_v2", unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, start.0, end.0)
        }),
        Ok(Entry::Old) => {
            let f = library::loaded()
                .and_then(|d| d.old.event_elapsed_time)
                .ok_or(CuError::missing("cuEventElapsedTime"))?;
            // SAFETY: D1, D2; `f` is the driver's cuEventElapsedTime (its C signature,
            // library.rs); `ms` is a valid out-pointer.
            ("cuEventElapsedTime", unsafe { f(&mut ms, start.0, end.0) })
        }
        Err(_) => return Err(CuError::missing("cuEventElapsedTime_v2")),
    };
    check(call, r)?;
    Ok(ms)
}
