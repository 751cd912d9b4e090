//! Peers: whether one GPU can reach another's memory, enabling that path, and copies between
//! the memory of two GPUs.

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUresult};

use super::{check, CuResult, St};

/// Whether `dev` can access `peer`'s memory directly.
pub(in crate::backend::cuda) fn can_access(dev: CUdevice, peer: CUdevice) -> CuResult<bool> {
    let mut can = 0;
    // SAFETY: `can` is a valid out-pointer; bad handles are an error code.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, dev, peer)
    })?;
    Ok(can == 1)
}

/// Let the current context (D2) access `peer`'s memory; already enabled counts as done.
pub(in crate::backend::cuda) fn enable_access(peer: CUcontext) -> CuResult<()> {
    // SAFETY: D1 (`peer` is a live context of another GPU), D2.
    match unsafe { sys::cuCtxEnablePeerAccess(peer, 0) } {
        CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        code => check("cuCtxEnablePeerAccess", code),
    }
}

/// Copy `n` bytes from `src` in context `src_ctx` to `dst` in `dst_ctx`, in `s`'s order.
///
/// # Safety
/// Both ranges are device memory of their contexts, valid for `n` bytes until the copy
/// completed (MM2); both contexts are live; `s` is a live stream of the current context
/// (D1, D2).
#[inline]
pub(in crate::backend::cuda) unsafe fn copy_async(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
    s: St,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, s.0)
    })
}
