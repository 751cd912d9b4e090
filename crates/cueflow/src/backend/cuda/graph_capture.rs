//! G5 of the native graphs (`graph.rs`): work that a call enqueues on a stream — an external
//! operation's CUDA side, a member's NCCL collective (GR11) — added to a graph by letting the
//! driver capture a scratch stream into it (`cuStreamBeginCaptureToGraph`), after the node's
//! dependencies; an empty node after what was enqueued stands for the operation.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUgraph, CUgraphNode};

use super::driver::check;
use super::launch::call_external;
use super::shared::DeviceShared;
use crate::backend::contract::op::ExternalWork;
use crate::error::{Error, Result};

/// Add `x`'s CUDA work to `g` after `deps` (G5): its closure called on a scratch stream that
/// the driver captures into `g`; returns an empty node after whatever it enqueued, which
/// stands for the operation (context current, D2).
pub(super) fn capture_external(
    shared: &Arc<DeviceShared>,
    x: &ExternalWork,
    g: CUgraph,
    deps: &[CUgraphNode],
) -> Result<CUgraphNode> {
    let what = format!("external operation `{}`", x.name);
    capture_calls(shared, &what, g, deps, |s| call_external(shared, x, s))
}

/// A non-blocking stream of the current context for one capture (destroyed by the caller).
fn scratch_stream(shared: &Arc<DeviceShared>) -> Result<super::driver::St> {
    let mut raw: sys::CUstream = std::ptr::null_mut();
    // SAFETY: D2; `raw` is a valid out-pointer.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    })
    .map_err(|e| shared.fail(e, None))?;
    Ok(super::driver::St(raw))
}

/// G5 for any work enqueued by a call on a stream (an external operation's CUDA side, an NCCL
/// collective, GR11): `call` runs on a scratch stream the driver captures into `g` after
/// `deps`; returns an empty node after what it enqueued. `call` returns its own outcome and
/// whether the context could be bound again.
fn capture_calls(
    shared: &Arc<DeviceShared>,
    what: &str,
    g: CUgraph,
    deps: &[CUgraphNode],
    call: impl FnOnce(super::driver::St) -> (Result<()>, Result<()>),
) -> Result<CUgraphNode> {
    let fail = |e| shared.fail(e, None);
    let scratch = scratch_stream(shared)?;
    let raw = scratch.0;
    // SAFETY: D2; `raw` is the live stream made above, not capturing; `g` is this
    // instantiation's graph and `deps` nodes of it; no edge data.
    let begun = check("cuStreamBeginCaptureToGraph", unsafe {
        sys::cuStreamBeginCaptureToGraph(
            raw,
            g,
            deps.as_ptr(),
            std::ptr::null(),
            deps.len(),
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    });
    let (called, bound) = match begun {
        Ok(()) => call(scratch),
        Err(e) => (Err(fail(e)), Ok(())),
    };
    // What a node enqueued next would depend on: the ends of the captured work (or `deps`
    // when the closure enqueued nothing). Copied out before the capture ends.
    let mut ends: Vec<CUgraphNode> = Vec::new();
    let mut ended = Ok(());
    if begun.is_ok() {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut id, mut graph_out): (sys::cuuint64_t, CUgraph) = (0, std::ptr::null_mut());
        let (mut out, mut edges, mut n): (*const CUgraphNode, *const sys::CUgraphEdgeData, usize) =
            (std::ptr::null(), std::ptr::null(), 0);
        // SAFETY: D2; every out-pointer is valid; the returned array lives until the next
        // call on the stream, and is copied before it.
        let info = check("cuStreamGetCaptureInfo_v3", unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                raw,
                &mut status,
                &mut id,
                &mut graph_out,
                &mut out,
                &mut edges,
                &mut n,
            )
        });
        if info.is_ok() && !out.is_null() {
            // SAFETY: the driver returned `n` nodes at `out` (read just above).
            ends = unsafe { std::slice::from_raw_parts(out, n) }.to_vec();
        }
        let mut captured: CUgraph = std::ptr::null_mut();
        // SAFETY: D2; ends the capture begun above (into `g`, which it returns again).
        ended = info.and(check("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(raw, &mut captured)
        }));
    }
    super::driver::stream_destroy(scratch);
    called?;
    bound?;
    ended.map_err(|e| {
        Error::Capture(format!(
            "{what}: the driver could not capture what its CUDA side enqueued ({}); inside a \
             graph it must only enqueue capturable work on the stream it is given (no \
             synchronization, no other stream)",
            e.to_error()
        ))
    })?;
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: D2; `ends` are nodes of `g`.
    check("cuGraphAddEmptyNode", unsafe {
        sys::cuGraphAddEmptyNode(&mut node, g, ends.as_ptr(), ends.len())
    })
    .map_err(fail)?;
    Ok(node)
}

/// GR11: a member's NCCL call captured on a scratch stream into a graph of its own, added to
/// `g` after `deps` as a child graph node (the driver clones it). Not captured into `g`
/// itself, as other stream work is (`capture_calls`): NCCL keeps its capture state per graph
/// and joins a call to the previous call captured into the same graph through its internal
/// stream, which a new capture session into that graph cannot depend on — on two H200s
/// (NCCL 2.28) the second collective of one graph failed with "dependency created on
/// uncaptured work in another stream". A graph per call is what NCCL sees when a program
/// captures several graphs one after another.
pub(super) fn capture_child(
    shared: &Arc<DeviceShared>,
    what: &str,
    g: CUgraph,
    deps: &[CUgraphNode],
    call: impl FnOnce(super::driver::St) -> Result<()>,
) -> Result<CUgraphNode> {
    let fail = |e| shared.fail(e, None);
    let scratch = scratch_stream(shared)?;
    let raw = scratch.0;
    // SAFETY: D2; `raw` is the live stream made above, not capturing.
    let begun = check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(
            raw,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    });
    let called = match begun {
        Ok(()) => call(scratch),
        Err(e) => Err(fail(e)),
    };
    let mut child: CUgraph = std::ptr::null_mut();
    let ended = if begun.is_ok() {
        // SAFETY: D2; ends the capture begun above; `child` is a valid out-pointer.
        check("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(raw, &mut child)
        })
    } else {
        Ok(())
    };
    super::driver::stream_destroy(scratch);
    let added = (|| {
        called?;
        ended.map_err(|e| {
            Error::Capture(format!(
                "{what}: the driver could not capture the NCCL call ({})",
                e.to_error()
            ))
        })?;
        let mut node: CUgraphNode = std::ptr::null_mut();
        // SAFETY: D2; `deps` are nodes of `g`; `child` is the graph the capture returned,
        // which the driver clones into the node.
        check("cuGraphAddChildGraphNode", unsafe {
            sys::cuGraphAddChildGraphNode(&mut node, g, deps.as_ptr(), deps.len(), child)
        })
        .map_err(fail)?;
        Ok(node)
    })();
    if !child.is_null() {
        // SAFETY: `child` came from cuStreamEndCapture above and is ours; the node holds a
        // clone of it.
        unsafe {
            sys::cuGraphDestroy(child);
        }
    }
    added
}

/// How a graph enqueues a member's NCCL call on the stream it captures (GR11); set by the
/// NCCL module when a communicator is made (a graph can hold a collective only then), so this
/// module needs no import of it.
pub(super) static NCCL_CAPTURE: std::sync::OnceLock<
    fn(&crate::backend::contract::op::CollectiveWork, super::driver::St) -> Result<()>,
> = std::sync::OnceLock::new();
