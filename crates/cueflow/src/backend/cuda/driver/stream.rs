//! Streams: creation and destruction, queries and synchronization, waits on events, host
//! functions, and stream capture (into a new graph, or into an existing one on CUDA 12.3+).

use std::ffi::c_void;

use cudarc::driver::sys::{
    self, CUgraph, CUgraphNode, CUhostFn, CUstreamCaptureMode, CUstreamCaptureStatus,
    CUstream_flags,
};

use super::library;
use super::version::Func;
use super::{check, check_ready, check_waited, CuError, CuResult, Ev, St, STREAM_LEGACY};

/// A new stream of the current context (D2) with `cuStreamCreateWithPriority`'s flags and
/// priority.
pub(in crate::backend::cuda) fn create(flags: CUstream_flags, priority: i32) -> CuResult<St> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: D2; `raw` is a valid out-pointer; an out-of-range priority is clamped.
    check("cuStreamCreateWithPriority", unsafe {
        sys::cuStreamCreateWithPriority(&mut raw, flags as u32, priority)
    })?;
    Ok(St(raw))
}

/// Destroy `s` (returns at once; pending work still completes, ST10). The legacy stream and a
/// null handle are left alone.
#[inline]
pub(in crate::backend::cuda) fn destroy(s: St) {
    if s.0 != STREAM_LEGACY && !s.0.is_null() {
        // SAFETY: D1 (the owner destroys its stream once; never the legacy handle), D2.
        let _ = unsafe { sys::cuStreamDestroy_v2(s.0) };
    }
}

/// Query `s`: `Ok(true)` when all its work is done.
#[inline]
pub(in crate::backend::cuda) fn query(s: St) -> CuResult<bool> {
    // SAFETY: D1, D2.
    check_ready("cuStreamQuery", unsafe { sys::cuStreamQuery(s.0) })
}

/// Block until all work on `s` is done.
#[inline]
pub(in crate::backend::cuda) fn synchronize(s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check_waited("cuStreamSynchronize", || unsafe {
        sys::cuStreamSynchronize(s.0)
    })
}

/// Whether `s` is a blocking stream (created without `CU_STREAM_NON_BLOCKING`, ST4).
pub(in crate::backend::cuda) fn is_blocking(s: St) -> CuResult<bool> {
    let mut flags = 0u32;
    // SAFETY: D1, D2; `flags` is a valid out-pointer.
    check("cuStreamGetFlags", unsafe {
        sys::cuStreamGetFlags(s.0, &mut flags)
    })?;
    Ok(flags & CUstream_flags::CU_STREAM_NON_BLOCKING as u32 == 0)
}

/// Make `s` wait for the work `e` captured (EV4; a never-recorded event is no wait, EV3).
#[inline]
pub(in crate::backend::cuda) fn wait_event(s: St, e: Ev) -> CuResult<()> {
    // SAFETY: D1 (both live), D2.
    check("cuStreamWaitEvent", unsafe {
        sys::cuStreamWaitEvent(s.0, e.0, 0)
    })
}

/// `(flags, priority)` of a stream created elsewhere.
///
/// # Safety
/// `s` is a live stream of the current context (D2); the caller vouches for it (it did not
/// create it).
pub(in crate::backend::cuda) unsafe fn flags_and_priority(s: St) -> CuResult<(u32, i32)> {
    let (mut flags, mut priority) = (0u32, 0i32);
    // SAFETY: the caller's promise; valid out-pointers.
    check("cuStreamGetFlags", unsafe {
        sys::cuStreamGetFlags(s.0, &mut flags)
    })?;
    // SAFETY: as above.
    check("cuStreamGetPriority", unsafe {
        sys::cuStreamGetPriority(s.0, &mut priority)
    })?;
    Ok((flags, priority))
}

/// Enqueue host function `f(user)` on `s`.
///
/// # Safety
/// `user` stays valid, and whatever `f` reads through it, until the callback returned; `f`
/// makes no driver call; `s` is live (D1, D2).
#[inline]
pub(in crate::backend::cuda) unsafe fn launch_host_func(
    s: St,
    f: CUhostFn,
    user: *mut c_void,
) -> CuResult<()> {
    // SAFETY: the caller's promise.
    check("cuLaunchHostFunc", unsafe {
        sys::cuLaunchHostFunc(s.0, f, user)
    })
}

/// Begin capturing `s` into a new graph, in thread-local mode (D1, D2; `s` not capturing).
pub(in crate::backend::cuda) fn begin_capture(s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(
            s.0,
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    })
}

/// Begin capturing `s` into `g` after `deps`, in thread-local mode: CUDA 12.3's
/// `cuStreamBeginCaptureToGraph`, [missing](CuError::missing) before.
///
/// # Safety
/// `g` is a live graph of the current context and `deps` nodes of it; `s` is live and not
/// capturing (D1, D2).
pub(in crate::backend::cuda) unsafe fn begin_capture_to_graph(
    s: St,
    g: CUgraph,
    deps: &[CUgraphNode],
) -> CuResult<()> {
    if !library::api().has(Func::StreamBeginCaptureToGraph) {
        return Err(CuError::missing("cuStreamBeginCaptureToGraph"));
    }
    // SAFETY: the caller's promise; the driver has the function (checked); no edge data.
    check("cuStreamBeginCaptureToGraph", unsafe {
        sys::cuStreamBeginCaptureToGraph(
            s.0,
            g,
            deps.as_ptr(),
            std::ptr::null(),
            deps.len(),
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    })
}

/// The nodes that work enqueued next on capturing `s` would depend on (CUDA 12.3's
/// `cuStreamGetCaptureInfo_v3`), copied out.
pub(in crate::backend::cuda) fn capture_ends(s: St) -> CuResult<Vec<CUgraphNode>> {
    if !library::api().has(Func::StreamGetCaptureInfoV3) {
        return Err(CuError::missing("cuStreamGetCaptureInfo_v3"));
    }
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let (mut id, mut graph): (sys::cuuint64_t, CUgraph) = (0, std::ptr::null_mut());
    let (mut out, mut edges, mut n): (*const CUgraphNode, *const sys::CUgraphEdgeData, usize) =
        (std::ptr::null(), std::ptr::null(), 0);
    // SAFETY: D1, D2; the driver has the function (checked); every out-pointer is valid.
    check("cuStreamGetCaptureInfo_v3", unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            s.0,
            &mut status,
            &mut id,
            &mut graph,
            &mut out,
            &mut edges,
            &mut n,
        )
    })?;
    if out.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the driver returned `n` nodes at `out`, valid until the next call on the
    // stream; copied here.
    Ok(unsafe { std::slice::from_raw_parts(out, n) }.to_vec())
}

/// End the capture of `s`: the graph it made (null when it was captured into a given graph,
/// which the caller already owns).
pub(in crate::backend::cuda) fn end_capture(s: St) -> CuResult<CUgraph> {
    let mut g: CUgraph = std::ptr::null_mut();
    // SAFETY: D1, D2; `g` is a valid out-pointer.
    check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(s.0, &mut g)
    })?;
    Ok(g)
}

/// A non-blocking stream without a priority (a scratch stream for a capture, D2).
pub(in crate::backend::cuda) fn create_scratch() -> CuResult<St> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: D2; `raw` is a valid out-pointer.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut raw, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    })?;
    Ok(St(raw))
}
