//! Stream capture (GR1, GR2): while a stream captures, its operations — and those of streams
//! that join it by waiting on an event recorded in the capture — become nodes of a graph instead
//! of running. Captures live in core, so every backend captures identically.
//!
//! Rules implemented here:
//! 1. A capture cannot begin on the legacy stream, nor on a stream already capturing (GR1).
//! 2. Each capturing stream has a *frontier*: the nodes its next operation depends on. An
//!    operation becomes a node depending on the frontier, and the frontier becomes that node.
//! 3. Recording an event in a capture snapshots the frontier; waiting on it joins the waiting
//!    stream to the capture (or, already in it, adds the snapshot to its frontier).
//! 4. Synchronizing or querying a capturing stream or a captured event, and calls the capture
//!    mode forbids (device synchronize, synchronous copies and allocations), are refused and
//!    invalidate the capture; ending it then fails and yields no graph (GR2).
//! 5. The capture must end on the stream that began it, with every joined stream's work joined
//!    back into it (GR1).
//! 6. While a global or thread-local capture takes in a blocking stream, work on the legacy
//!    default stream (which would have to wait for the capturing stream, ST4) is refused and
//!    invalidates the capture (GR5).
//! 7. Stream-ordered allocation and free inside a capture become allocation and free nodes
//!    (GR7): the allocation is a placeholder slot that only the graph's own nodes may use, after
//!    its allocation node and before its free node, and every slot is freed in the capture.
//! 8. A capture ends with the stream that began it: dropping that stream while it captures
//!    (say, an early return by `?` after a call invalidated the capture) abandons the capture —
//!    its nodes and the buffers they hold are released, it stops counting for rules 4 and 6 on
//!    every thread, and the streams that joined it capture no more (issue 16, item 3). A
//!    capture whose origin stream lives on stays in force, invalidated or not, until
//!    `end_capture`, as CUDA's does.
//! 9. A capture may go into an existing graph (`cudaStreamBeginCaptureToGraph`, [`begin_to`]):
//!    its nodes are that graph's (their memory, conditions and node ids carry its id), the
//!    origin stream's first nodes depend on the given nodes of it (stand-in nodes here, one per
//!    dependency, mapped back when the nodes are spliced in), and its slots are numbered on
//!    from the graph's. Only [`end_to`] with that graph ends such a capture.

use crate::backend::contract::node_op::OpArena;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use parking_lot::Mutex;

use crate::backend::contract::graph::{GraphNode, GraphWork, NodeDeps};
use crate::backend::contract::memory::{Allocation, GraphSlot};
use crate::backend::contract::op::Op;
use crate::core::graphs::capture_memory::check_graph_memory_from;
use crate::core::graphs::capture_slot::Slot;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::tracking::call::Site;
use crate::core::tracking::clock::Actor;
use crate::error::{Error, Result};
use crate::types::StreamKind;

/// Which threads' potentially unsafe calls a capture forbids (GR2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Unsafe calls from any thread are refused and invalidate the capture.
    Global,
    /// Only unsafe calls from the capturing thread count.
    ThreadLocal,
    /// Unsafe calls are allowed; only calls on the capture's own streams and events count.
    Relaxed,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// A stream's place in captures: the capture it takes part in (GR1). The stream owns it; the
/// captures it joins hold it weakly, so that ending a capture can clear it without knowing
/// what a stream is.
pub(crate) type CaptureSlot = Slot<Arc<CaptureSession>>;

/// A stream as a capture sees it: its id within the device, its actor, its kind and its
/// capture slot. (Captures take this rather than the stream, which sits above them.)
#[derive(Clone, Copy)]
pub(crate) struct LaneStream<'a> {
    pub id: u64,
    pub actor: Actor,
    pub kind: StreamKind,
    pub capture: &'a Arc<CaptureSlot>,
}

impl LaneStream<'_> {
    /// The capture the stream takes part in; one that ended without the stream noticing (its
    /// origin stream was dropped, rule 8) is forgotten here.
    pub fn capture(&self) -> Option<Arc<CaptureSession>> {
        current(self.capture)
    }
}

/// The capture in `slot`, forgetting one that ended (rule 8).
#[inline]
pub(crate) fn current(slot: &CaptureSlot) -> Option<Arc<CaptureSession>> {
    if !slot.maybe_occupied() {
        return None; // The common case: no lock taken.
    }
    occupied(slot)
}

/// [`current`] once the slot may hold a capture.
#[inline(never)]
fn occupied(slot: &CaptureSlot) -> Option<Arc<CaptureSession>> {
    let mut slot = slot.lock();
    if slot.as_ref().is_some_and(|s| !s.is_active()) {
        *slot = None;
    }
    slot.clone()
}

struct Lane {
    stream: Weak<CaptureSlot>,
    stream_id: u64,
    blocking: bool,
    frontier: NodeDeps,
}

#[derive(Default)]
struct State {
    nodes: Vec<GraphNode>,
    lanes: Vec<Lane>,
    invalidated: Option<String>,
    /// Placeholder allocations (rule 7), by slot.
    slots: Vec<Arc<Allocation>>,
    /// Conditional nodes (GR9) by node index, as graphs build them (`graph_cond`'s type).
    conds: Vec<(usize, Conditional)>,
    /// The program's holds on other graphs' memory that free nodes free (GR10).
    keep: Vec<Arc<dyn Any + Send + Sync>>,
    /// Where the captured operations are kept (no allocation a node).
    ops: OpArena,
}

/// A conditional node as the graph that takes it builds it (of a type this file does not name).
pub(crate) type Conditional = Arc<dyn Any + Send + Sync>;

/// What a capture into an existing graph knows of it (rule 9).
#[derive(Clone, Copy)]
pub(crate) struct Target {
    /// The graph's id.
    pub graph: u64,
    /// Its number of nodes and of allocation slots.
    pub nodes: usize,
    pub slots: usize,
    /// The number of its nodes the capture's first nodes depend on.
    pub deps: usize,
}

/// One capture in progress.
pub(crate) struct CaptureSession {
    pub id: u64,
    mode: CaptureMode,
    owner: ThreadId,
    /// The stream that began the capture (id within the device): it alone ends it (rules 5, 8).
    pub(crate) origin: u64,
    /// The origin stream's process-unique actor id (rule 8: ids repeat across devices).
    pub(crate) origin_actor: Actor,
    /// The graph the nodes go into: its id (the session's own for a plain capture), and
    /// what the capture knows of it when it existed before (rule 9).
    graph: u64,
    target: Option<Target>,
    active: AtomicBool,
    state: Mutex<State>,
}

/// Where an event recorded in a capture points: a snapshot of a frontier (rule 3).
#[derive(Clone)]
pub(crate) struct CapturedRef {
    pub session: Arc<CaptureSession>,
    frontier: NodeDeps,
}

impl CaptureSession {
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Rule 8: the origin stream went away while capturing. The capture ends without a graph;
    /// what it held is released here, outside its lock.
    pub(crate) fn abandon(&self) {
        if !self.active.swap(false, Ordering::AcqRel) {
            return; // Already ended.
        }
        let state = std::mem::replace(
            &mut *self.state.lock(),
            State {
                invalidated: Some("the stream that began the capture was dropped".into()),
                ..State::default()
            },
        );
        drop(state);
    }

    /// Mark the capture invalid (rule 4) and return the error for the offending call.
    pub fn invalidate(&self, what: &str) -> Error {
        let mut s = self.state.lock();
        s.invalidated.get_or_insert_with(|| what.to_string());
        Error::CaptureIllegal(what.to_string())
    }

    fn lane_of(state: &mut State, stream: LaneStream<'_>) -> usize {
        match state.lanes.iter().position(|l| l.stream_id == stream.id) {
            Some(i) => i,
            None => {
                state.lanes.push(Lane {
                    stream: Arc::downgrade(stream.capture),
                    stream_id: stream.id,
                    blocking: stream.kind == StreamKind::Blocking,
                    frontier: NodeDeps::new(),
                });
                state.lanes.len() - 1
            }
        }
    }

    /// Rule 2.
    pub fn add_op(&self, stream: LaneStream<'_>, op: Op, site: Site) -> Result<()> {
        let mut bad = None;
        op.for_each_access(|m, _, _| match m.alloc.graph_slot {
            Some(g) if g.capture != self.graph => bad = Some("memory another graph allocated"),
            // GR11: external operations may declare this capture's memory; their CUDA side
            // gets its address per instantiation.
            _ => {}
        });
        if let Some(what) = bad {
            return Err(Error::InvalidHandle(format!(
                "a captured operation touches {what}: it is usable only by that graph's own \
                 nodes (GR7)"
            )));
        }
        self.add_node_with(stream, |s| GraphWork::Op(s.ops.push(op)), site)
            .map(|_| ())
    }

    fn add_node(&self, stream: LaneStream<'_>, work: GraphWork, site: Site) -> Result<()> {
        self.add_node_at(stream, work, site).map(|_| ())
    }

    /// [`add_node`](Self::add_node), returning the node's index.
    fn add_node_at(&self, stream: LaneStream<'_>, work: GraphWork, site: Site) -> Result<usize> {
        self.add_node_with(stream, |_| work, site)
    }

    /// [`add_node_at`](Self::add_node_at) of the node `work` makes under the state's lock.
    fn add_node_with(
        &self,
        stream: LaneStream<'_>,
        work: impl FnOnce(&mut State) -> GraphWork,
        site: Site,
    ) -> Result<usize> {
        let mut s = self.state.lock();
        if let Some(why) = &s.invalidated {
            return Err(Error::CaptureInvalidated(why.clone()));
        }
        let work = work(&mut s);
        let lane = Self::lane_of(&mut s, stream);
        let deps = std::mem::take(&mut s.lanes[lane].frontier);
        s.nodes.push(GraphNode {
            work,
            deps,
            lane,
            stream: stream.id,
            site: Some(site),
        });
        let idx = s.nodes.len() - 1;
        s.lanes[lane].frontier = smallvec::smallvec![idx];
        Ok(idx)
    }

    /// Rule 7: an allocation node; returns the placeholder memory.
    pub fn alloc(
        &self,
        stream: LaneStream<'_>,
        bytes: usize,
        device_id: u64,
        site: Site,
    ) -> Result<Arc<Allocation>> {
        let first = self.target.map_or(0, |t| t.slots);
        let (slot, mem) = {
            let mut s = self.state.lock();
            let slot = first + s.slots.len();
            let mem = Allocation::placeholder(
                bytes,
                device_id,
                GraphSlot {
                    capture: self.graph,
                    slot,
                },
            );
            s.slots.push(mem.clone());
            (slot, mem)
        };
        self.add_node(stream, GraphWork::Alloc { slot, bytes }, site)?;
        Ok(mem)
    }

    /// Rule 7: a free node for memory this capture allocated, or (GR10) memory another
    /// graph's instantiation hands out.
    pub fn free(&self, stream: LaneStream<'_>, alloc: &Arc<Allocation>, site: Site) -> Result<()> {
        match alloc.graph_slot {
            Some(g) if g.capture == self.graph => {
                self.add_node(stream, GraphWork::Free { slot: g.slot }, site)
            }
            Some(_) if crate::core::graphs::mem::bound(alloc).is_some() => {
                let hold = crate::core::graphs::mem::holder_of(alloc);
                self.add_node(stream, GraphWork::FreeOther { mem: alloc.clone() }, site)?;
                self.state.lock().keep.extend(hold);
                Ok(())
            }
            _ => Err(Error::Unsupported(
                "freeing memory inside a capture that the capture did not allocate (a graph \
                 frees only its own allocations, GR7)"
                    .into(),
            )),
        }
    }

    /// True if the capture takes in a blocking stream (rule 6).
    fn has_blocking_lane(&self) -> bool {
        self.state.lock().lanes.iter().any(|l| l.blocking)
    }

    /// True if the capture's mode makes calls of the current thread count (GR2, GR5).
    fn forbids_here(&self, me: ThreadId) -> bool {
        match self.mode {
            CaptureMode::Global => true,
            CaptureMode::ThreadLocal => self.owner == me,
            CaptureMode::Relaxed => false,
        }
    }
}

/// The captures in progress on one device, for the mode checks of rule 4.
#[derive(Default)]
pub(crate) struct CaptureRegistry {
    active: AtomicUsize,
    sessions: Mutex<Vec<Arc<CaptureSession>>>,
}

impl CaptureRegistry {
    /// Refuse a potentially unsafe call (`what`) if a capture's mode forbids it here (GR2).
    pub fn check_unsafe_call(&self, what: &str) -> Result<()> {
        if self.active.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let me = std::thread::current().id();
        let mut refused = None;
        for s in self.live_sessions().iter() {
            if s.forbids_here(me) {
                refused = Some(s.invalidate(what));
            }
        }
        refused.map_or(Ok(()), Err)
    }

    /// The captures in force, after forgetting those that ended without `end_capture`
    /// (rule 8).
    fn live_sessions(&self) -> parking_lot::MutexGuard<'_, Vec<Arc<CaptureSession>>> {
        let mut v = self.sessions.lock();
        let before = v.len();
        v.retain(|s| s.is_active());
        let gone = before - v.len();
        if gone > 0 {
            self.active.fetch_sub(gone, Ordering::AcqRel);
        }
        v
    }

    /// Rule 6: refuse work on the legacy default stream (`what`) while a global or thread-local
    /// capture takes in a blocking stream (GR5).
    pub fn check_legacy_work(&self, what: &str) -> Result<()> {
        if self.active.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let me = std::thread::current().id();
        let mut refused = None;
        for s in self.live_sessions().iter() {
            if s.forbids_here(me) && s.has_blocking_lane() {
                refused = Some(s.invalidate(&format!(
                    "{what} on the legacy default stream while a blocking stream is captured \
                     (it would have to wait for the capture, GR5)"
                )));
            }
        }
        refused.map_or(Ok(()), Err)
    }

    fn add(&self, s: Arc<CaptureSession>) {
        self.live_sessions().push(s);
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    fn remove(&self, id: u64) {
        let mut v = self.sessions.lock();
        let before = v.len();
        v.retain(|s| s.id != id);
        if v.len() < before {
            self.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Rule 1.
pub(crate) fn begin(
    captures: &CaptureRegistry,
    stream: LaneStream<'_>,
    mode: CaptureMode,
) -> Result<()> {
    begin_to(captures, stream, mode, None)
}

/// Rules 1 and 9: a capture into the graph `target` describes, or into a new graph.
pub(crate) fn begin_to(
    captures: &CaptureRegistry,
    stream: LaneStream<'_>,
    mode: CaptureMode,
    target: Option<Target>,
) -> Result<()> {
    check_not_in_host_fn("Stream::begin_capture")?;
    if stream.kind == StreamKind::Legacy {
        return Err(Error::Capture(
            "the legacy default stream cannot be captured".into(),
        ));
    }
    let mut slot = stream.capture.lock();
    if slot.as_ref().is_some_and(|s| s.is_active()) {
        return Err(Error::Capture(format!(
            "stream {} is already capturing",
            stream.id
        )));
    }
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    // Rule 9: stand-ins for the graph's nodes the capture depends on.
    let stubs = target.map_or(0, |t| t.deps);
    let nodes = (0..stubs)
        .map(|_| GraphNode {
            work: GraphWork::Empty,
            deps: NodeDeps::new(),
            lane: 0,
            stream: stream.id,
            site: None,
        })
        .collect();
    let session = Arc::new(CaptureSession {
        id,
        mode,
        owner: std::thread::current().id(),
        origin: stream.id,
        origin_actor: stream.actor,
        graph: target.map_or(id, |t| t.graph),
        target,
        active: AtomicBool::new(true),
        state: Mutex::new(State {
            nodes,
            lanes: vec![Lane {
                stream: Arc::downgrade(stream.capture),
                stream_id: stream.id,
                blocking: stream.kind == StreamKind::Blocking,
                frontier: (0..stubs).collect(),
            }],
            ..State::default()
        }),
    });
    captures.add(session.clone());
    *slot = Some(session);
    Ok(())
}

/// What a finished capture yields: its nodes and the number of captured streams (lanes).
pub(crate) struct Captured {
    pub nodes: Vec<GraphNode>,
    pub lanes: usize,
    /// The graph's id (its placeholders carry it) and the capture's placeholder allocations
    /// by slot (numbered on from the target's, rule 9).
    pub id: u64,
    pub slots: Vec<Arc<Allocation>>,
    /// Conditional nodes by index, and what the graph keeps (GR9, GR10).
    pub conds: Vec<(usize, Conditional)>,
    pub keep: Vec<Arc<dyn Any + Send + Sync>>,
    /// Leading stand-ins for nodes of the target graph (rule 9).
    pub stubs: usize,
}

/// Rules 4 and 5.
pub(crate) fn end(captures: &CaptureRegistry, stream: LaneStream<'_>) -> Result<Captured> {
    end_to(captures, stream, None)
}

/// Rules 4, 5 and 9: end the capture on `stream`, which goes into graph `target` (or, with
/// `None`, into a new graph).
pub(crate) fn end_to(
    captures: &CaptureRegistry,
    stream: LaneStream<'_>,
    target: Option<u64>,
) -> Result<Captured> {
    check_not_in_host_fn("Stream::end_capture")?;
    let Some(session) = stream.capture() else {
        return Err(Error::Capture(format!(
            "stream {} is not capturing",
            stream.id
        )));
    };
    if session.target.map(|t| t.graph) != target {
        return Err(Error::Capture(match target {
            None => format!(
                "the capture on stream {} goes into an existing graph: end it with the \
                 GraphCapture that Stream::begin_capture_to_graph returned",
                stream.id
            ),
            Some(_) => format!(
                "the capture on stream {} does not go into this graph",
                stream.id
            ),
        }));
    }
    if session.origin != stream.id {
        return Err(Error::Capture(format!(
            "capture began on stream {} and must end there, not on stream {}",
            session.origin, stream.id
        )));
    }
    // Only one caller ends a session: a second, racing end finds it inactive.
    if !session.active.swap(false, Ordering::AcqRel) {
        return Err(Error::Capture(format!(
            "the capture on stream {} is already being ended",
            stream.id
        )));
    }
    captures.remove(session.id);
    let state = std::mem::take(&mut *session.state.lock());
    for lane in &state.lanes {
        if let Some(slot) = lane.stream.upgrade() {
            let mut c = slot.lock();
            if c.as_ref().is_some_and(|s| s.id == session.id) {
                *c = None;
            }
        }
    }
    if let Some(why) = state.invalidated {
        return Err(Error::CaptureInvalidated(why));
    }
    check_lanes_joined(&state, session.origin)?;
    let first = session.target.map_or(0, |t| t.slots);
    check_graph_memory_from(&state.nodes, first, state.slots.len())?;
    Ok(Captured {
        lanes: state.lanes.len(),
        nodes: state.nodes,
        id: session.graph,
        slots: state.slots,
        conds: state.conds,
        keep: state.keep,
        stubs: session.target.map_or(0, |t| t.deps),
    })
}

/// Rule 5: every lane's frontier must be reachable from the origin's frontier.
fn check_lanes_joined(state: &State, origin: u64) -> Result<()> {
    // (A flag per node: a hashed set cost ~400 instructions a node of a long capture.)
    let mut reach = vec![false; state.nodes.len()];
    let mut todo: Vec<usize> = state.lanes[0].frontier.to_vec();
    while let Some(n) = todo.pop() {
        if !std::mem::replace(&mut reach[n], true) {
            todo.extend(state.nodes[n].deps.iter().copied());
        }
    }
    for lane in &state.lanes[1..] {
        if lane.frontier.iter().any(|&n| !reach[n]) {
            return Err(Error::Capture(format!(
                "stream {} joined the capture but its work was not joined back into stream {} \
                 (record an event on it and wait on that event from the origin stream)",
                lane.stream_id, origin
            )));
        }
    }
    Ok(())
}

/// Rule 7: every node that uses a slot comes after its allocation node and before its free
/// node.
#[cfg(test)]
fn check_graph_memory(nodes: &[GraphNode], slots: usize) -> Result<()> {
    check_graph_memory_from(nodes, 0, slots)
}

/// A conditional node (GR9) added to the capture in progress on `stream`, after what the
/// stream captured so far (cudaGraphAddNode + cudaStreamUpdateCaptureDependencies).
/// `make` builds the node for the id of the graph the capture goes into; returns that id and
/// the node's index there.
pub(crate) fn add_conditional(
    stream: LaneStream<'_>,
    make: impl FnOnce(u64) -> Result<Conditional>,
    site: Site,
) -> Result<(u64, usize)> {
    let Some(session) = stream.capture() else {
        return Err(Error::Capture(format!(
            "stream {} is not capturing: a conditional node joins a capture in progress",
            stream.id
        )));
    };
    let node = make(session.graph)?;
    // An empty node in the capture's list; the graph gets the conditional node in its place.
    let index = session.add_node_at(stream, GraphWork::Empty, site)?;
    session.state.lock().conds.push((index, node));
    let (stubs, base) = session.target.map_or((0, 0), |t| (t.deps, t.nodes));
    Ok((session.graph, base + index - stubs))
}

/// Rule 3, record side. Returns true when the record was captured.
pub(crate) fn record_in_capture(
    stream: LaneStream<'_>,
    event_captured: &Slot<CapturedRef>,
) -> Result<bool> {
    let Some(session) = stream.capture() else {
        return Ok(false);
    };
    let mut s = session.state.lock();
    if let Some(why) = &s.invalidated {
        return Err(Error::CaptureInvalidated(why.clone()));
    }
    let lane = CaptureSession::lane_of(&mut s, stream);
    let frontier = s.lanes[lane].frontier.clone();
    drop(s);
    *event_captured.lock() = Some(CapturedRef {
        session: session.clone(),
        frontier,
    });
    Ok(true)
}

/// Rule 3, wait side. Returns true when the wait was handled by the capture.
pub(crate) fn wait_in_capture(
    stream: LaneStream<'_>,
    event_captured: &Slot<CapturedRef>,
) -> Result<bool> {
    let captured = event_captured.get().filter(|c| c.session.is_active());
    let mine = stream.capture();
    match (captured, mine) {
        (None, None) => Ok(false),
        (None, Some(session)) => Err(session
            .invalidate("a capturing stream waited on an event recorded outside the capture")),
        (Some(c), Some(session)) if c.session.id != session.id => {
            Err(session.invalidate("a stream of one capture waited on an event of another"))
        }
        (Some(c), mine) => {
            let mut s = c.session.state.lock();
            if let Some(why) = &s.invalidated {
                return Err(Error::CaptureInvalidated(why.clone()));
            }
            let lane = CaptureSession::lane_of(&mut s, stream);
            for n in &c.frontier {
                if !s.lanes[lane].frontier.contains(n) {
                    s.lanes[lane].frontier.push(*n);
                }
            }
            drop(s);
            if mine.is_none() {
                *stream.capture.lock() = Some(c.session.clone());
            }
            Ok(true)
        }
    }
}

/// The capture bookkeeping that needs no device or stream: the graph-memory check of rule 7
/// and the mode checks of rules 4 and 6 (also what `scripts/miri.sh` runs). Frontiers (rules
/// 2, 3, 5) need streams and are covered by the conformance tests.
#[cfg(test)]
#[path = "capture_tests.rs"]
mod tests;
