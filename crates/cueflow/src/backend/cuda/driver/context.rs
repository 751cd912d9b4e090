//! Devices and contexts: counting and naming devices, their attributes, the primary context
//! (retain, release, reset, flags), contexts of cueflow's own, the current context, and the
//! context-wide calls (synchronize, memory info, priority range).

use std::ffi::c_char;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdevice_attribute};

use super::library;
use super::version::{Entry, Func, Old};
use super::{check, check_waited, CuError, CuResult};

/// Number of devices (the driver is loaded and initialized).
#[inline]
pub(in crate::backend::cuda) fn device_count() -> CuResult<i32> {
    let mut n = 0;
    // SAFETY: initialized driver (the caller loaded it); `n` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

/// The handle of device `ordinal` (below [`device_count`]).
#[inline]
pub(in crate::backend::cuda) fn device(ordinal: i32) -> CuResult<CUdevice> {
    let mut dev = 0;
    // SAFETY: `dev` is a valid out-pointer; an ordinal out of range is an error code.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

/// Attribute `a` of `dev`.
#[inline]
pub(in crate::backend::cuda) fn attribute(dev: CUdevice, a: CUdevice_attribute) -> CuResult<i32> {
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer; a bad handle or attribute is an error code.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, a, dev)
    })?;
    Ok(v)
}

/// The name of `dev`.
pub(in crate::backend::cuda) fn name(dev: CUdevice) -> CuResult<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` has room for the 256 bytes passed as its length.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev)
    })?;
    buf[buf.len() - 1] = 0;
    // SAFETY: NUL-terminated: the driver wrote a C string into `buf`, whose last byte is 0.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(s.to_string_lossy().into_owned())
}

/// Total memory of `dev` in bytes.
pub(in crate::backend::cuda) fn total_mem(dev: CUdevice) -> CuResult<usize> {
    let mut total = 0usize;
    // SAFETY: `total` is a valid out-pointer.
    check("cuDeviceTotalMem_v2", unsafe {
        sys::cuDeviceTotalMem_v2(&mut total, dev)
    })?;
    Ok(total)
}

/// The driver's CUDA version (`cuDriverGetVersion`).
pub(in crate::backend::cuda) fn driver_version() -> CuResult<i32> {
    let mut v = 0;
    // SAFETY: needs no initialization; `v` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

/// Retain the primary context of `dev` (balanced by [`primary_release`]).
pub(in crate::backend::cuda) fn primary_retain(dev: CUdevice) -> CuResult<CUcontext> {
    let mut raw: CUcontext = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut raw, dev)
    })?;
    Ok(raw)
}

/// Release one reference to the primary context of `dev`.
///
/// # Safety
/// Balances one [`primary_retain`] of the caller, once; no object of the caller uses the
/// context afterwards unless it holds another reference.
pub(in crate::backend::cuda) unsafe fn primary_release(dev: CUdevice) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuDevicePrimaryCtxRelease_v2", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(dev)
    })
}

/// Destroy every allocation and all state of the primary context of `dev`.
///
/// # Safety
/// No object still uses a handle of that context (they are gone or marked dead).
pub(in crate::backend::cuda) unsafe fn primary_reset(dev: CUdevice) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuDevicePrimaryCtxReset_v2", unsafe {
        sys::cuDevicePrimaryCtxReset_v2(dev)
    })
}

/// Set the flags the primary context of `dev` is (re)created with.
pub(in crate::backend::cuda) fn primary_set_flags(dev: CUdevice, flags: u32) -> CuResult<()> {
    // SAFETY: invalid flags are an error code.
    check("cuDevicePrimaryCtxSetFlags_v2", unsafe {
        sys::cuDevicePrimaryCtxSetFlags_v2(dev, flags)
    })
}

/// Make `ctx` current on this thread.
///
/// # Safety
/// `ctx` is a live context (retained or created by the caller, D1).
#[inline]
pub(in crate::backend::cuda) unsafe fn set_current(ctx: CUcontext) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// The calling thread's current context (null when none is).
#[inline]
pub(in crate::backend::cuda) fn current() -> CuResult<CUcontext> {
    let mut cur: CUcontext = std::ptr::null_mut();
    // SAFETY: `cur` is a valid out-pointer; cuCtxGetCurrent has no other precondition.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut cur) })?;
    Ok(cur)
}

/// Create a context of cueflow's own on `dev` with no creation parameters, current on this
/// thread: `cuCtxCreate_v4` where the driver has it (CUDA 12.5), else `cuCtxCreate_v2`.
pub(in crate::backend::cuda) fn create(dev: CUdevice) -> CuResult<CUcontext> {
    let mut raw: CUcontext = std::ptr::null_mut();
    let api = library::api();
    match api.pick(Func::CtxCreateV4, Old::CtxCreateV2) {
        // SAFETY: the driver has the function (checked); `raw` is a valid out-pointer; no
        // creation parameters (null), no flags.
        Ok(Entry::New) => check("cuCtxCreate_v4", unsafe {
            sys::cuCtxCreate_v4(&mut raw, std::ptr::null_mut(), 0, dev)
        })?,
        Ok(Entry::Old) => {
            let f = library::loaded()
                .and_then(|d| d.old.ctx_create_v2)
                .ok_or(CuError::missing("cuCtxCreate_v2"))?;
            // SAFETY: `f` is the driver's cuCtxCreate_v2 (its C signature, library.rs);
            // `raw` is a valid out-pointer; no flags.
            check("cuCtxCreate_v2", unsafe { f(&mut raw, 0, dev) })?
        }
        Err(_) => return Err(CuError::missing("cuCtxCreate_v4")),
    }
    Ok(raw)
}

/// Destroy a context [`create`] made.
///
/// # Safety
/// `ctx` came from [`create`], is destroyed once, and nothing uses it any more.
pub(in crate::backend::cuda) unsafe fn destroy(ctx: CUcontext) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuCtxDestroy_v2", unsafe { sys::cuCtxDestroy_v2(ctx) })
}

/// Wait for all work of the current context (D2).
#[inline]
pub(in crate::backend::cuda) fn synchronize() -> CuResult<()> {
    // SAFETY: D2; no arguments.
    check_waited("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })
}

/// `(least, greatest)` stream priority of the current context (D2).
pub(in crate::backend::cuda) fn stream_priority_range() -> CuResult<(i32, i32)> {
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: D2; valid out-pointers.
    check("cuCtxGetStreamPriorityRange", unsafe {
        sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
    })?;
    Ok((least, greatest))
}

/// The flags of the current context (D2).
pub(in crate::backend::cuda) fn flags() -> CuResult<u32> {
    let mut flags = 0u32;
    // SAFETY: D2; `flags` is a valid out-pointer.
    check("cuCtxGetFlags", unsafe { sys::cuCtxGetFlags(&mut flags) })?;
    Ok(flags)
}

/// Change the flags of the current, active context (D2) — CUDA 12.1's `cuCtxSetFlags`; a
/// [missing](CuError::missing) error on an older driver.
pub(in crate::backend::cuda) fn set_flags(flags: u32) -> CuResult<()> {
    if !library::api().has(Func::CtxSetFlags) {
        return Err(CuError::missing("cuCtxSetFlags"));
    }
    // SAFETY: D2; the driver has the function (checked); invalid flags are an error code.
    check("cuCtxSetFlags", unsafe { sys::cuCtxSetFlags(flags) })
}

/// `(free, total)` device memory of the current context (D2).
pub(in crate::backend::cuda) fn mem_info() -> CuResult<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: D2; valid out-pointers.
    check("cuMemGetInfo_v2", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}
