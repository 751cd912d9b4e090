//! Memory: device and stream-ordered allocation and release, pinned and registered host
//! memory, managed memory (allocation, prefetch, advice, attachment), copies and memset on
//! streams, and memory pools.

use std::ffi::c_void;

use cudarc::driver::sys::{
    self, CUdevice, CUdeviceptr, CUmemAccessDesc, CUmemLocation, CUmemLocationType, CUmemPoolProps,
    CUmemPool_attribute, CUmem_advise, CUmemoryPool,
};

use super::library;
use super::version::{Entry, Func, Old};
use super::{check, check_waited, CuError, CuResult, St};

/// `bytes` from the device's default pool, in `s`'s order (D1, D2).
#[inline]
pub(in crate::backend::cuda) fn alloc_async(bytes: usize, s: St) -> CuResult<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // SAFETY: D1 (`s` is a live stream of the current context), D2; `p` is a valid
    // out-pointer.
    check("cuMemAllocAsync", unsafe {
        sys::cuMemAllocAsync(&mut p, bytes, s.0)
    })?;
    Ok(p)
}

/// `bytes` from `pool`, in `s`'s order (D1, D2).
#[inline]
pub(in crate::backend::cuda) fn alloc_from_pool_async(
    bytes: usize,
    pool: CUmemoryPool,
    s: St,
) -> CuResult<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // SAFETY: D1 (`pool` and `s` are live handles of the current context), D2; `p` is a valid
    // out-pointer.
    check("cuMemAllocFromPoolAsync", unsafe {
        sys::cuMemAllocFromPoolAsync(&mut p, bytes, pool, s.0)
    })?;
    Ok(p)
}

/// Give `addr` back to its pool in `s`'s order.
///
/// # Safety
/// `addr` came from a stream-ordered allocation (or a graph's allocation node) of the current
/// context (D2), is freed once, and no work enqueued before this free on other streams without
/// an ordering edge still uses it (MM2); `s` is a live stream of the context (D1).
#[inline]
pub(in crate::backend::cuda) unsafe fn free_async(addr: CUdeviceptr, s: St) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemFreeAsync", unsafe { sys::cuMemFreeAsync(addr, s.0) })
}

/// `bytes` of device memory outside any pool, synchronously (D2): scratch that lives as
/// long as the process.
pub(in crate::backend::cuda) fn alloc(bytes: usize) -> CuResult<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // SAFETY: D2; `p` is a valid out-pointer.
    check("cuMemAlloc_v2", unsafe {
        sys::cuMemAlloc_v2(&mut p, bytes)
    })?;
    Ok(p)
}

/// Free memory of [`alloc`] or `cuMemAllocManaged` (waits for the device's work).
///
/// # Safety
/// `addr` came from [`alloc`] or [`alloc_managed`] in the current context (D2), is freed
/// once, and no work uses it any more (MM2).
pub(in crate::backend::cuda) unsafe fn free(addr: CUdeviceptr) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check_waited("cuMemFree_v2", || unsafe { sys::cuMemFree_v2(addr) })
}

/// `bytes` of page-locked host memory with `cuMemHostAlloc`'s `flags` (D2).
pub(in crate::backend::cuda) fn host_alloc(bytes: usize, flags: u32) -> CuResult<*mut c_void> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: D2; `p` is a valid out-pointer.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut p, bytes, flags)
    })?;
    Ok(p)
}

/// Free memory of [`host_alloc`] (waits for the device's work).
///
/// # Safety
/// `p` came from [`host_alloc`] in the current context (D2), is freed once, and nothing uses
/// it any more (MM2).
pub(in crate::backend::cuda) unsafe fn host_free(p: *mut c_void) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check_waited("cuMemFreeHost", || unsafe { sys::cuMemFreeHost(p) })
}

/// Page-lock `bytes` at `p` with `cuMemHostRegister`'s `flags` (D2).
///
/// # Safety
/// `p..p + bytes` is memory of this process that stays valid until [`host_unregister`].
pub(in crate::backend::cuda) unsafe fn host_register(
    p: *mut c_void,
    bytes: usize,
    flags: u32,
) -> CuResult<()> {
    // SAFETY: the caller's promise; D2.
    check("cuMemHostRegister", unsafe {
        sys::cuMemHostRegister_v2(p, bytes, flags)
    })
}

/// Undo [`host_register`] of `p`.
///
/// # Safety
/// `p` was registered in the current context (D2), once, and no work uses it any more (MM2).
pub(in crate::backend::cuda) unsafe fn host_unregister(p: *mut c_void) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check_waited("cuMemHostUnregister", || unsafe {
        sys::cuMemHostUnregister(p)
    })
}

/// The device address of mapped host memory at `p` (D2).
///
/// # Safety
/// `p` is mapped pinned or registered memory of the current context.
pub(in crate::backend::cuda) unsafe fn host_device_pointer(
    p: *mut c_void,
) -> CuResult<CUdeviceptr> {
    let mut d: CUdeviceptr = 0;
    // SAFETY: the caller's promise; `d` is a valid out-pointer; the flags must be 0.
    check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0)
    })?;
    Ok(d)
}

/// `bytes` of managed memory attached as `flags` say (D2).
pub(in crate::backend::cuda) fn alloc_managed(bytes: usize, flags: u32) -> CuResult<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // SAFETY: D2; `p` is a valid out-pointer; invalid flags are an error code.
    check("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(&mut p, bytes, flags)
    })?;
    Ok(p)
}

/// Set `n` bytes at `dst` to `value`, synchronously.
///
/// # Safety
/// `dst..dst + n` is memory of the current context (D2) that no work uses meanwhile.
pub(in crate::backend::cuda) unsafe fn memset_d8(
    dst: CUdeviceptr,
    value: u8,
    n: usize,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dst, value, n) })
}

/// Set `n` bytes at `dst` to `value` in `s`'s order.
///
/// # Safety
/// `dst..dst + n` is device memory that stays valid until the memset completed (MM2); `s` is
/// a live stream of the current context (D1, D2).
#[inline]
pub(in crate::backend::cuda) unsafe fn memset_d8_async(
    dst: CUdeviceptr,
    value: u8,
    n: usize,
    s: St,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(dst, value, n, s.0)
    })
}

/// Copy `n` bytes from host memory `src` to device memory `dst` in `s`'s order.
///
/// # Safety
/// Both ranges are valid for `n` bytes until the copy completed (MM2) and do not overlap;
/// `src` is pinned for the copy to be asynchronous; `s` is live (D1, D2).
#[inline]
pub(in crate::backend::cuda) unsafe fn copy_htod_async(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    s: St,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemcpyHtoDAsync_v2", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src, n, s.0)
    })
}

/// Copy `n` bytes from device memory `src` to host memory `dst` in `s`'s order.
///
/// # Safety
/// As [`copy_htod_async`], the other way.
#[inline]
pub(in crate::backend::cuda) unsafe fn copy_dtoh_async(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    s: St,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemcpyDtoHAsync_v2", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst, src, n, s.0)
    })
}

/// Copy `n` bytes between two device ranges in `s`'s order.
///
/// # Safety
/// As [`copy_htod_async`], both device memory of the current context.
#[inline]
pub(in crate::backend::cuda) unsafe fn copy_dtod_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    s: St,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemcpyDtoDAsync_v2", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, n, s.0)
    })
}

/// Copy `n` bytes between two unified addresses (managed memory) in `s`'s order.
///
/// # Safety
/// As [`copy_htod_async`], both unified addresses.
#[inline]
pub(in crate::backend::cuda) unsafe fn copy_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    s: St,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemcpyAsync", unsafe {
        sys::cuMemcpyAsync(dst, src, n, s.0)
    })
}

/// A memory location of the driver's (`CUmemLocation`): the host, or device `ordinal`.
pub(in crate::backend::cuda) fn location(host: bool, ordinal: i32) -> CUmemLocation {
    if host {
        CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        }
    } else {
        CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal,
        }
    }
}

/// `CU_DEVICE_CPU` of the CUDA headers (a macro, not in the bindings): the host, for the
/// calls that take a device.
const DEVICE_CPU: CUdevice = -1;

/// The device a location-less (pre-12.2) managed-memory call takes for `at`: the host as
/// `CU_DEVICE_CPU` (-1), a device by its handle.
fn device_of(at: CUmemLocation) -> CuResult<CUdevice> {
    match at.type_ {
        CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST => Ok(DEVICE_CPU),
        _ => super::context::device(at.id),
    }
}

/// Prefetch `n` bytes of managed memory at `addr` to `at` in `s`'s order:
/// `cuMemPrefetchAsync_v2` (CUDA 12.2) by location, else `cuMemPrefetchAsync` by device.
///
/// # Safety
/// `addr..addr + n` is managed memory that stays allocated until the prefetch completed
/// (MM2); `s` is a live stream of the current context (D1, D2).
pub(in crate::backend::cuda) unsafe fn prefetch_async(
    addr: CUdeviceptr,
    n: usize,
    at: CUmemLocation,
    s: St,
) -> CuResult<()> {
    match library::api().pick(Func::MemPrefetchAsyncV2, Old::MemPrefetchAsync) {
        // SAFETY: the caller's promise; the driver has the function (checked); no flags.
        Ok(Entry::New) => check("cuMemPrefetchAsync", unsafe {
            sys::cuMemPrefetchAsync_v2(addr, n, at, 0, s.0)
        }),
        Ok(Entry::Old) => {
            let f = library::loaded()
                .and_then(|d| d.old.mem_prefetch_async)
                .ok_or(CuError::missing("cuMemPrefetchAsync"))?;
            let dev = device_of(at)?;
            // SAFETY: the caller's promise; `f` is the driver's cuMemPrefetchAsync (its C
            // signature, library.rs).
            check("cuMemPrefetchAsync", unsafe { f(addr, n, dev, s.0) })
        }
        Err(_) => Err(CuError::missing("cuMemPrefetchAsync_v2")),
    }
}

/// Advise the driver about `n` bytes of managed memory at `addr` for `at`:
/// `cuMemAdvise_v2` (CUDA 12.2) by location, else `cuMemAdvise` by device.
///
/// # Safety
/// `addr..addr + n` is managed memory of this process, allocated for the call.
pub(in crate::backend::cuda) unsafe fn advise(
    addr: CUdeviceptr,
    n: usize,
    advice: CUmem_advise,
    at: CUmemLocation,
) -> CuResult<()> {
    match library::api().pick(Func::MemAdviseV2, Old::MemAdvise) {
        // SAFETY: the caller's promise; the driver has the function (checked).
        Ok(Entry::New) => check("cuMemAdvise", unsafe {
            sys::cuMemAdvise_v2(addr, n, advice, at)
        }),
        Ok(Entry::Old) => {
            let f = library::loaded()
                .and_then(|d| d.old.mem_advise)
                .ok_or(CuError::missing("cuMemAdvise"))?;
            let dev = device_of(at)?;
            // SAFETY: the caller's promise; `f` is the driver's cuMemAdvise (its C
            // signature, library.rs).
            check("cuMemAdvise", unsafe { f(addr, n, advice, dev) })
        }
        Err(_) => Err(CuError::missing("cuMemAdvise_v2")),
    }
}

/// Attach managed memory at `addr` (a whole allocation, length 0) to `s` as `flags` say.
///
/// # Safety
/// `addr` starts a managed allocation that stays allocated until the attachment completed;
/// `s` is a live stream of the current context (D1, D2).
pub(in crate::backend::cuda) unsafe fn attach_async(
    s: St,
    addr: CUdeviceptr,
    flags: u32,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuStreamAttachMemAsync", unsafe {
        sys::cuStreamAttachMemAsync(s.0, addr, 0, flags)
    })
}

/// The default memory pool of `dev`.
pub(in crate::backend::cuda) fn default_pool(dev: CUdevice) -> CuResult<CUmemoryPool> {
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer; a bad device is an error code.
    check("cuDeviceGetDefaultMemPool", unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, dev)
    })?;
    Ok(pool)
}

/// Pool properties for pinned device memory on device `ordinal`, every other field zero: the
/// reserved bytes of CUDA 12.0's `CUmemPoolProps` (where CUDA 12.2 put `maxSize` and 12.6
/// `usage`, whose zero means "the default") must be zero.
pub(in crate::backend::cuda) fn device_pool_props(ordinal: i32) -> CUmemPoolProps {
    // SAFETY: every field is an integer, an enum whose zero is a valid value (INVALID /
    // NONE), a pointer or reserved bytes, so all-zero bytes are a valid value.
    let mut props: CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = location(false, ordinal);
    props
}

/// A new memory pool (D2).
pub(in crate::backend::cuda) fn pool_create(props: &CUmemPoolProps) -> CuResult<CUmemoryPool> {
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: D2; `props` is a valid properties struct (reserved bytes zero,
    // [`device_pool_props`]); `pool` is a valid out-pointer.
    check("cuMemPoolCreate", unsafe {
        sys::cuMemPoolCreate(&mut pool, props)
    })?;
    Ok(pool)
}

/// Destroy `pool`.
///
/// # Safety
/// `pool` came from [`pool_create`], is destroyed once, no block of it is allocated and no
/// free of it is pending.
pub(in crate::backend::cuda) unsafe fn pool_destroy(pool: CUmemoryPool) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check_waited("cuMemPoolDestroy", || unsafe {
        sys::cuMemPoolDestroy(pool)
    })
}

/// A `cuuint64_t` attribute of `pool` (D1).
pub(in crate::backend::cuda) fn pool_get_u64(
    pool: CUmemoryPool,
    a: CUmemPool_attribute,
) -> CuResult<u64> {
    let mut v: u64 = 0;
    // SAFETY: D1 (`pool` is live); the attributes read through this take a cuuint64_t, which
    // `v` is (the callers ask only for such attributes).
    check("cuMemPoolGetAttribute", unsafe {
        sys::cuMemPoolGetAttribute(pool, a, &mut v as *mut u64 as *mut c_void)
    })?;
    Ok(v)
}

/// Set a `cuuint64_t` attribute of `pool` (D1).
pub(in crate::backend::cuda) fn pool_set_u64(
    pool: CUmemoryPool,
    a: CUmemPool_attribute,
    mut v: u64,
) -> CuResult<()> {
    // SAFETY: D1 (`pool` is live); as `pool_get_u64`, the attribute takes a cuuint64_t.
    check("cuMemPoolSetAttribute", unsafe {
        sys::cuMemPoolSetAttribute(pool, a, &mut v as *mut u64 as *mut c_void)
    })
}

/// Release memory `pool` holds above `keep` bytes (D1).
pub(in crate::backend::cuda) fn pool_trim_to(pool: CUmemoryPool, keep: usize) -> CuResult<()> {
    // SAFETY: D1 (`pool` is live).
    check("cuMemPoolTrimTo", unsafe {
        sys::cuMemPoolTrimTo(pool, keep)
    })
}

/// A graph memory attribute of device `dev` (GR12); all four are `cuuint64_t`.
pub(in crate::backend::cuda) fn graph_mem_get(
    dev: CUdevice,
    a: sys::CUgraphMem_attribute,
) -> CuResult<u64> {
    let mut v: u64 = 0;
    // SAFETY: `v` is a cuuint64_t, what every graph memory attribute is; a bad device is an
    // error code.
    check("cuDeviceGetGraphMemAttribute", unsafe {
        sys::cuDeviceGetGraphMemAttribute(dev, a, &mut v as *mut u64 as *mut c_void)
    })?;
    Ok(v)
}

/// Reset a high-water mark of device `dev`'s graph memory (GR12): the driver takes only 0.
pub(in crate::backend::cuda) fn graph_mem_reset(
    dev: CUdevice,
    a: sys::CUgraphMem_attribute,
) -> CuResult<()> {
    let mut zero: u64 = 0;
    // SAFETY: as `graph_mem_get`; the driver reads the cuuint64_t during the call.
    check("cuDeviceSetGraphMemAttribute", unsafe {
        sys::cuDeviceSetGraphMemAttribute(dev, a, &mut zero as *mut u64 as *mut c_void)
    })
}

/// Give back device `dev`'s graph memory that no graph allocation uses (GR12).
pub(in crate::backend::cuda) fn graph_mem_trim(dev: CUdevice) -> CuResult<()> {
    // SAFETY: a bad device is an error code.
    check("cuDeviceGraphMemTrim", unsafe {
        sys::cuDeviceGraphMemTrim(dev)
    })
}

/// Let device `ordinal` read and write `pool`'s memory (D1).
pub(in crate::backend::cuda) fn pool_grant(pool: CUmemoryPool, ordinal: i32) -> CuResult<()> {
    let desc = CUmemAccessDesc {
        location: location(false, ordinal),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: D1 (`pool` is live); `desc` is one valid access descriptor.
    check("cuMemPoolSetAccess", unsafe {
        sys::cuMemPoolSetAccess(pool, &desc, 1)
    })
}
