//! Nodes of the host scheduler's dependency graph ([`SchedNode`]; a graph's nodes as core hands
//! them over are `GraphNode`s, which a launch turns into scheduler nodes).
//!
//! Every submitted operation, event record and event wait becomes a [`SchedNode`]. A node
//! depends on its stream predecessor, on the work an awaited event captured, and on
//! legacy-stream barriers (ST4); it becomes ready when all of them completed, and it is then
//! dispatched to its engine (operations) or completed on the spot (markers: records and waits
//! take no engine time).
//!
//! Protocol (the numbers are cited in `// Rule N` comments):
//! 1. `done` is set only while holding the node's `links` lock, and dependents are only added
//!    under that lock after checking `done`; so a dependent is either counted and later
//!    released by the completer, or never counted.
//! 2. A node's `deps_left` starts at 1 (the submitter's guard) and the submitter drops the guard
//!    after linking; whoever brings it to zero dispatches the node, exactly once.
//! 3. A host thread about to sleep on a node sets the node's `wake` flag before re-checking
//!    `done`; completers set `done` before reading `wake` (both SeqCst), so a sleeping waiter is
//!    always woken — and only completions that someone waits for wake anybody.
//! 4. (The backlog's, below.)
//! 5. The thread running a node's operation may take the work of the node's one dependent
//!    that waits for nothing else ([`SchedNode::take_successor`]): nobody else can dispatch
//!    it (only this node's completion releases it). The thread runs that work after its own
//!    and then completes only the first node; the completion releases the dependent, finds
//!    its work gone and completes it in turn. So a stream's queued launches can run as one
//!    piece of engine work (R5 in `isolate/ring.rs`), each completing in order after all ran.
//!
//! `loom_models.rs` checks rules 1-3 over every interleaving (`scripts/loom.sh`).

use std::sync::Arc;

use super::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};

use crate::backend::contract::op::Op;

crate::backend::contract::downcast::as_any!(SchedNode);

/// What a node does once ready.
pub(super) enum SchedWork {
    /// An operation for an engine.
    Op(Op),
    /// A graph launch: the engines walk its DAG, then the node completes.
    Graph(super::graph::GraphJob),
    /// A gate of graph nodes (graph rule 4): once ready, completes and releases nodes `.1` of
    /// the run.
    GraphGate(std::sync::Arc<super::graph::GraphRun>, Vec<usize>),
    /// A record, a wait or a free: completes as soon as it is ready.
    Marker,
}

pub(super) struct Links {
    pub dependents: Vec<Arc<SchedNode>>,
    pub work: Option<SchedWork>,
}

/// The scheduler a node belongs to, as far as its nodes need it (the scheduler implements it,
/// so nodes stay below the scheduler).
pub(super) trait Home: Send + Sync {
    /// `node`, of this home, became ready: dispatch it (MD2: another device's completion made
    /// it ready).
    fn ready_node(self: Arc<Self>, node: Arc<SchedNode>);
    /// Block the calling thread until `node`, of this home, is done.
    fn wait_node(self: Arc<Self>, node: &SchedNode);
}

/// One unit of scheduled work.
pub(super) struct SchedNode {
    /// The scheduler (device) the node belongs to: a node that another device's work made
    /// ready is dispatched and completed by its own scheduler (MD2).
    pub home: std::sync::Weak<dyn Home>,
    /// Submission sequence number; breaks priority ties first-come first-served.
    pub seq: u64,
    /// Stream priority (lower is more urgent, ST7).
    pub priority: i32,
    done: AtomicBool,
    /// A host thread sleeps until this node is done (rule 3).
    wake: AtomicBool,
    deps_left: AtomicUsize,
    /// Host-clock time of completion; what events report (EV6).
    pub completed_ns: AtomicU64,
    pub links: Mutex<Links>,
    /// The backlog of the stream that submitted it (RL1), told when it completes.
    backlog: Option<Arc<Backlog>>,
}

/// The work pending on one stream (RL1): submitted nodes not yet complete. A submission at
/// the bound waits until the stream's oldest work completes, as a CUDA launch waits when the
/// launch queue is full; the queue (and its memory) stays bounded however far ahead of the
/// device a program runs.
///
/// Wake-up protocol (rule 4): a submitter announces itself in `waiting` before re-checking
/// `pending` under `lock`; a completer decrements `pending` before reading `waiting` (both
/// SeqCst) and notifies under `lock`; so a waiting submitter is always woken.
#[derive(Default)]
pub(super) struct Backlog {
    pending: AtomicUsize,
    waiting: AtomicUsize,
    // parking_lot's, not the loom shim's: the backlog's timed waits are outside the modelled
    // protocols (rules 1-3), and loom has no timed wait.
    lock: parking_lot::Mutex<()>,
    cv: parking_lot::Condvar,
}

impl Backlog {
    /// Wait until fewer than `limit` nodes are pending, then count one more.
    pub fn admit(&self, limit: usize) {
        let limit = limit.max(1);
        if self.pending.load(Ordering::SeqCst) >= limit {
            self.waiting.fetch_add(1, Ordering::SeqCst); // Rule 4.
            let mut g = self.lock.lock();
            while self.pending.load(Ordering::SeqCst) >= limit {
                self.cv
                    .wait_for(&mut g, std::time::Duration::from_millis(20));
            }
            drop(g);
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    fn done_one(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst); // Rule 4.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }
}

impl SchedNode {
    pub fn new(
        home: std::sync::Weak<dyn Home>,
        seq: u64,
        priority: i32,
        work: SchedWork,
        backlog: Option<Arc<Backlog>>,
    ) -> Arc<SchedNode> {
        Arc::new(SchedNode {
            home,
            seq,
            priority,
            done: AtomicBool::new(false),
            wake: AtomicBool::new(false),
            deps_left: AtomicUsize::new(1), // Rule 2: the submitter's guard.
            completed_ns: AtomicU64::new(0),
            links: Mutex::new(Links {
                dependents: Vec::new(),
                work: Some(work),
            }),
            backlog,
        })
    }

    #[inline]
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Announce a host thread that is about to sleep until this node is done (rule 3).
    pub fn want_wake(&self) {
        self.wake.store(true, Ordering::SeqCst);
    }

    /// Whether a host thread may be sleeping on this node; read after `done` is set (rule 3).
    pub fn wants_wake(&self) -> bool {
        self.wake.load(Ordering::SeqCst)
    }

    /// Make `self` wait for `dep`. Must be called before the guard is released.
    pub fn depend_on(self: &Arc<Self>, dep: &SchedNode) {
        let mut links = dep.links.lock();
        // Rule 1: checked under the lock that `done` is set under.
        if !dep.done.load(Ordering::SeqCst) {
            self.deps_left.fetch_add(1, Ordering::AcqRel);
            links.dependents.push(self.clone());
        }
    }

    /// Drop one dependency (or the guard); true when this made the node ready.
    pub fn release_one(&self) -> bool {
        self.deps_left.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Take the node's work for execution.
    pub fn take_work(&self) -> Option<SchedWork> {
        self.links.lock().work.take()
    }

    /// The operation of this node's one dependent, taken from it when the dependent waits
    /// for nothing but this node, belongs to the same scheduler and `accept` takes the
    /// operation (rule 5). Call only while running this node's own work.
    pub fn take_successor(&self, accept: impl FnOnce(&Op) -> bool) -> Option<(Arc<SchedNode>, Op)> {
        let d = match self.links.lock().dependents.as_slice() {
            [d] => d.clone(),
            _ => return None,
        };
        // Counted while this node is not done: 1 means this node is all it waits for (the
        // submitter's guard is gone, rule 2, and counts never grow after it).
        let same_home = std::ptr::addr_eq(d.home.as_ptr(), self.home.as_ptr());
        if !same_home || d.deps_left.load(Ordering::SeqCst) != 1 {
            return None;
        }
        let mut links = d.links.lock();
        match &links.work {
            Some(SchedWork::Op(op)) if accept(op) => {}
            _ => return None,
        }
        let Some(SchedWork::Op(op)) = links.work.take() else {
            unreachable!("checked above, under the same lock")
        };
        drop(links);
        Some((d, op))
    }

    /// Mark complete at `now_ns`; returns the dependents to release.
    pub fn mark_done(&self, now_ns: u64) -> Vec<Arc<SchedNode>> {
        self.completed_ns.store(now_ns, Ordering::Relaxed);
        let mut links = self.links.lock();
        self.done.store(true, Ordering::SeqCst); // Rule 1.
        let dependents = std::mem::take(&mut links.dependents);
        drop(links);
        if let Some(b) = &self.backlog {
            b.done_one();
        }
        dependents
    }
}

/// A node is the completion signal of its operation (backend contract rule 7).
impl crate::backend::contract::device::DoneSignal for SchedNode {
    fn is_done(&self) -> bool {
        SchedNode::is_done(self)
    }
}
