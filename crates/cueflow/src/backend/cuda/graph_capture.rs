//! G5 of the native graphs (`graph.rs`): work that a call enqueues on a stream — an external
//! operation's CUDA side, a member's NCCL collective (GR11) — added to a graph by letting the
//! driver capture a scratch stream into it (`cuStreamBeginCaptureToGraph`, CUDA 12.3), after
//! the node's dependencies; an empty node after what was enqueued stands for the operation.
//!
//! On a driver older than CUDA 12.3 the work is captured into a graph of its own and added as
//! a child graph node, as NCCL calls always are (GR11): the same work at every launch, except
//! graph memory — the driver refuses a child graph that allocates or frees it, and that is
//! [`Error::Unsupported`] naming CUDA 12.3.

use std::sync::Arc;

use cudarc::driver::sys::{CUgraph, CUgraphNode};

use super::driver::version::{needs, Feature};
use super::driver::{self, graph as dg, CuError, St};
use super::launch::call_external;
use super::shared::DeviceShared;
use crate::backend::contract::op::ExternalWork;
use crate::error::{Error, Result};

/// Add `x`'s CUDA work to `g` after `deps` (G5): its closure called on a scratch stream that
/// the driver captures into `g`; returns the node that stands for the operation (context
/// current, D2).
pub(super) fn capture_external(
    shared: &Arc<DeviceShared>,
    x: &ExternalWork,
    g: CUgraph,
    deps: &[CUgraphNode],
) -> Result<CUgraphNode> {
    let what = format!("external operation `{}`", x.name);
    let api = driver::library::api();
    if api.supports(Feature::CaptureToGraph) {
        return capture_calls(shared, &what, g, deps, |s| call_external(shared, x, s));
    }
    let refused = |e: CuError| {
        let need = Feature::CaptureToGraph.needs();
        match needs(
            &format!("graph memory inside {what} in a graph"),
            need,
            api.version,
        ) {
            Error::Unsupported(m) => Error::Unsupported(format!(
                "{m}; the driver refused it as a child graph ({})",
                e.describe()
            )),
            other => other,
        }
    };
    capture_child(shared, &what, g, deps, refused, |s| {
        let (called, bound) = call_external(shared, x, s);
        called.and(bound)
    })
}

/// A non-blocking stream of the current context for one capture (destroyed by the caller).
fn scratch_stream(shared: &Arc<DeviceShared>) -> Result<St> {
    // D2: the caller's.
    driver::stream::create_scratch().map_err(|e| shared.fail(e, None))
}

/// The error for a capture the driver could not make of what `what` enqueued.
fn not_captured(what: &str, e: CuError) -> Error {
    Error::Capture(format!(
        "{what}: the driver could not capture what its CUDA side enqueued ({}); inside a graph \
         it must only enqueue capturable work on the stream it is given (no synchronization, no \
         other stream)",
        e.to_error()
    ))
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
    call: impl FnOnce(St) -> (Result<()>, Result<()>),
) -> Result<CUgraphNode> {
    let fail = |e| shared.fail(e, None);
    let scratch = scratch_stream(shared)?;
    let (called, bound, ends, ended) = shared.ctx.quiesce.gate.capturing(|| {
        // SAFETY: D2; `scratch` is the live stream made above, not capturing; `g` is this
        // instantiation's graph and `deps` nodes of it.
        let begun = unsafe { driver::stream::begin_capture_to_graph(scratch, g, deps) };
        let (called, bound) = match begun {
            Ok(()) => call(scratch),
            Err(e) => (Err(fail(e)), Ok(())),
        };
        // What a node enqueued next would depend on: the ends of the captured work (or
        // `deps` when the closure enqueued nothing), copied out before the capture ends; then
        // the capture ends (into `g`, which the driver returns again).
        let (ends, ended) = match begun {
            Ok(()) => {
                let ends = driver::stream::capture_ends(scratch);
                let ended = driver::stream::end_capture(scratch);
                (
                    ends.clone().unwrap_or_default(),
                    ends.and(ended.map(|_| ())),
                )
            }
            Err(_) => (Vec::new(), Ok(())),
        };
        (called, bound, ends, ended)
    });
    driver::stream::destroy(scratch);
    called?;
    bound?;
    ended.map_err(|e| not_captured(what, e))?;
    // D1: `ends` are nodes of `g`.
    dg::add_empty(g, &ends).map_err(fail)
}

/// Work captured on a scratch stream into a graph of its own, added to `g` after `deps` as a
/// child graph node (the driver clones it); `refused` maps the driver's refusal of the child.
///
/// GR11 (a member's NCCL call) always takes this way, not [`capture_calls`]: NCCL keeps its
/// capture state per graph and joins a call to the previous call captured into the same graph
/// through its internal stream, which a new capture session into that graph cannot depend on —
/// on two H200s (NCCL 2.28) the second collective of one graph failed with "dependency created
/// on uncaptured work in another stream". A graph per call is what NCCL sees when a program
/// captures several graphs one after another.
pub(super) fn capture_child(
    shared: &Arc<DeviceShared>,
    what: &str,
    g: CUgraph,
    deps: &[CUgraphNode],
    refused: impl FnOnce(CuError) -> Error,
    call: impl FnOnce(St) -> Result<()>,
) -> Result<CUgraphNode> {
    let fail = |e| shared.fail(e, None);
    let scratch = scratch_stream(shared)?;
    let (called, child) = shared.ctx.quiesce.gate.capturing(|| {
        // D1: the live stream made above, not capturing; D2.
        let begun = driver::stream::begin_capture(scratch);
        let called = match begun {
            Ok(()) => call(scratch),
            Err(e) => Err(fail(e)),
        };
        let child = match begun {
            Ok(()) => driver::stream::end_capture(scratch),
            Err(e) => Err(e),
        };
        (called, child)
    });
    driver::stream::destroy(scratch);
    let child = match (called, child) {
        (Err(e), child) => {
            if let Ok(c) = child {
                // SAFETY: the graph the capture made is ours, unused, destroyed once.
                unsafe { dg::destroy(c) };
            }
            return Err(e);
        }
        (Ok(()), Err(e)) => return Err(not_captured(what, e)),
        (Ok(()), Ok(c)) => c,
    };
    // D1: `deps` are nodes of `g`, `child` the graph the capture returned, which the driver
    // clones into the node.
    let added =
        dg::add_child(g, deps, child).map_err(|e| if e.is_sticky() { fail(e) } else { refused(e) });
    // SAFETY: `child` came from the capture above and is ours; the node holds a clone of it.
    unsafe { dg::destroy(child) };
    added
}

/// How a graph enqueues a member's NCCL call on the stream it captures (GR11); set by the
/// NCCL module when a communicator is made (a graph can hold a collective only then), so this
/// module needs no import of it.
pub(super) static NCCL_CAPTURE: std::sync::OnceLock<
    fn(&crate::backend::contract::op::CollectiveWork, St) -> Result<()>,
> = std::sync::OnceLock::new();
