//! Host-backend streams and events: per-stream FIFO tails, event captures, and the legacy
//! default stream's barriers (ST1, ST4–ST6, EV1–EV6).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::graph::{Compiled, GraphJob, HostGraph, LaunchEvents};
use super::memory::Pool;
use super::sched::Scheduler;
use super::sched_node::{Backlog, SchedNode, SchedWork};
use crate::backend::contract::device::done_target;
use crate::backend::contract::device::{
    BackendGraph, BackendStream, Done, GraphLaunched, NodesAfter,
};
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::event::{BackendEvent, LaterWaits};
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::{Op, Work};
use crate::backend::contract::trace::TraceSlot;
use crate::error::{Error, Result};
use crate::types::EventFlags;
use crate::types::{StreamDesc, StreamKind};

/// The last node submitted to a stream; what a record captures and a synchronize waits for.
pub(super) type Tail = Arc<Mutex<Option<Arc<SchedNode>>>>;

/// Device-wide ordering state for ST4 and device synchronize.
#[derive(Default)]
pub(super) struct Order {
    /// The newest legacy-stream node with its epoch (counted under this lock, so epochs follow
    /// the legacy stream's order); later blocking-stream work depends on it (ST4).
    last_legacy: Option<(u64, Arc<SchedNode>)>,
    /// Tails of every stream alive or with work pending: (blocking?, tail).
    streams: Vec<(bool, Tail)>,
}

impl Order {
    pub fn register(&mut self, kind: StreamKind, tail: Tail) {
        // Forget streams that were dropped and whose work is done.
        self.streams.retain(|(_, t)| {
            Arc::strong_count(t) > 1 || t.lock().as_ref().is_some_and(|n| !n.is_done())
        });
        self.streams.push((kind == StreamKind::Blocking, tail));
    }

    /// Snapshot of every stream's last node, for device synchronize (ST9).
    pub fn all_tails(&self) -> Vec<Arc<SchedNode>> {
        self.streams
            .iter()
            .filter_map(|(_, t)| t.lock().clone())
            .collect()
    }
}

pub(crate) struct HostStream {
    sched: Arc<Scheduler>,
    order: Arc<Mutex<Order>>,
    pool: Arc<Pool>,
    desc: StreamDesc,
    tail: Tail,
    /// Epoch of the newest legacy node this stream already depends on.
    seen_legacy: Mutex<u64>,
    /// Work pending on the stream, bounded by the device's queue depth (RL1).
    backlog: Arc<Backlog>,
    depth: Arc<AtomicUsize>,
    /// Nodes enqueued so far ([`BackendStream::enqueued`]).
    enqueued: AtomicU64,
    /// Waits to enqueue before the stream's next use (contract rule 8).
    later: LaterWaits,
}

impl HostStream {
    pub(super) fn new(
        sched: Arc<Scheduler>,
        order: Arc<Mutex<Order>>,
        pool: Arc<Pool>,
        desc: StreamDesc,
        depth: Arc<AtomicUsize>,
    ) -> Arc<Self> {
        let tail: Tail = Arc::new(Mutex::new(None));
        order.lock().register(desc.kind, tail.clone());
        Arc::new(HostStream {
            sched,
            order,
            pool,
            desc,
            tail,
            seen_legacy: Mutex::new(0),
            backlog: Arc::default(),
            depth,
            enqueued: AtomicU64::new(0),
            later: LaterWaits::default(),
        })
    }

    /// Link a new node behind this stream's tail (ST1) and the legacy rules (ST4), plus `extra`
    /// and the completions `after` (contract rule 7).
    ///
    /// RL1: at the device's queue depth this waits, before taking any lock of the stream or
    /// the device, until the stream's oldest work completed. That never deadlocks: the work
    /// waited for is already submitted and depends only on submitted work, and completing it
    /// takes no lock a submitter holds (engines take only the scheduler's and the pool's).
    fn enqueue(
        &self,
        work: SchedWork,
        extra: Option<&Arc<SchedNode>>,
        after: &[Done],
    ) -> Arc<SchedNode> {
        self.settle_later();
        self.backlog.admit(self.depth.load(Ordering::Relaxed));
        self.enqueued.fetch_add(1, Ordering::Relaxed);
        let node = self
            .sched
            .begin(work, self.desc.priority, Some(self.backlog.clone()));
        // The common case (a created stream) links at most two dependencies; no allocation.
        let prev: Option<Arc<SchedNode>>;
        let mut legacy: Option<Arc<SchedNode>> = None;
        let mut blocking_tails: Vec<Arc<SchedNode>> = Vec::new();
        match self.desc.kind {
            StreamKind::NonBlocking => {
                prev = self.tail.lock().replace(node.clone());
            }
            StreamKind::Blocking => {
                let order = self.order.lock();
                if let Some((epoch, l)) = &order.last_legacy {
                    let mut seen = self.seen_legacy.lock();
                    if *epoch > *seen {
                        *seen = *epoch;
                        legacy = Some(l.clone());
                    }
                }
                prev = self.tail.lock().replace(node.clone());
            }
            StreamKind::Legacy => {
                let mut order = self.order.lock();
                prev = self.tail.lock().replace(node.clone());
                for (blocking, t) in &order.streams {
                    if *blocking {
                        if let Some(n) = &*t.lock() {
                            if !n.is_done() {
                                blocking_tails.push(n.clone());
                            }
                        }
                    }
                }
                let epoch = order.last_legacy.as_ref().map_or(1, |(e, _)| e + 1);
                order.last_legacy = Some((epoch, node.clone()));
            }
        }
        for d in prev
            .iter()
            .chain(&legacy)
            .chain(&blocking_tails)
            .chain(extra)
        {
            node.depend_on(d);
        }
        for d in after {
            match done_target(d).downcast_ref::<SchedNode>() {
                Some(n) => node.depend_on(n),
                // Another backend's completion (portable pinned memory, HM2): waited for on
                // this thread before the node is released (the scheduler waits on nodes only).
                None => d.wait_here(),
            }
        }
        self.sched.release(node.clone());
        node
    }

    fn check(&self) -> Result<()> {
        self.sched.check()
    }

    /// Enqueue the waits asked for later (contract rule 8), first thing of every enqueue,
    /// query and synchronize.
    #[inline(always)]
    fn settle_later(&self) {
        if self.later.pending() {
            self.wait_now();
        }
    }

    #[cold]
    fn wait_now(&self) {
        for event in &self.later.take() {
            // Checked when asked (`wait_later`): a host event.
            if let Ok(ev) = host_event(event) {
                self.wait_captured(ev);
            }
        }
    }

    /// EV4: make later work wait for what `ev` captured now.
    #[inline(always)]
    fn wait_captured(&self, ev: &HostEvent) {
        let captured = ev.captured.lock().clone();
        match captured {
            // EV3: a never-recorded event stands for no work.
            None => {}
            Some(n) if n.is_done() => {}
            Some(n) => {
                self.enqueue(SchedWork::Marker, Some(&n), &[]);
            }
        }
    }

    /// Graph rule 4 for one launch of `compiled`: a marker per record node, and the nodes
    /// held until completions — wait nodes until what their events captured now (before this
    /// launch's records), and `nodes_after`.
    fn event_part(
        &self,
        compiled: &Compiled,
        nodes_after: Vec<NodesAfter>,
    ) -> Result<LaunchEvents> {
        for e in &compiled.records {
            host_event(e)?;
        }
        let mut gated: Vec<(Vec<usize>, Vec<Done>)> = Vec::new();
        for (i, e) in &compiled.waits {
            if let Some(w) = host_event(e)?.captured.lock().clone() {
                gated.push((vec![*i], vec![w as Done]));
            }
        }
        for n in nodes_after {
            if !n.after.is_empty() && !n.nodes.is_empty() {
                gated.push((n.nodes, n.after));
            }
        }
        let markers = compiled
            .records
            .iter()
            .map(|_| {
                self.sched
                    .begin(SchedWork::Marker, self.desc.priority, None)
            })
            .collect();
        Ok(LaunchEvents { markers, gated })
    }
}

impl BackendStream for HostStream {
    fn submit(&self, op: Op, after: &[Done], want_done: bool) -> Result<Option<Done>> {
        self.check()?;
        if let Work::Launch(l) = &op.work {
            if super::cuda_c::uses_c(&l.kernel) {
                super::cuda_c::prepare(l)?;
            }
        }
        if let Work::Collective(c) = &op.work {
            // The engine thread that runs it takes the communicator back (collective::run).
            downcast::<super::collective::HostComm, _>(c.comm.as_ref(), "communicator")?;
        }
        let node = self.enqueue(SchedWork::Op(op), None, after);
        Ok(want_done.then_some(node as Done))
    }

    fn record(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        self.check()?;
        let ev = host_event(event)?;
        let node = self.enqueue(SchedWork::Marker, None, &[]);
        *ev.captured.lock() = Some(node); // EV2: replaces what the event captures.
        Ok(())
    }

    fn wait(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        self.check()?;
        let ev = host_event(event)?;
        self.settle_later(); // Before this wait reads what the event captured.
        self.wait_captured(ev);
        Ok(())
    }

    fn wait_later(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        self.check()?;
        host_event(event)?;
        self.enqueued.fetch_add(1, Ordering::Relaxed); // A wait, if a later one.
        self.later.push(event);
        Ok(())
    }

    fn launch_graph(
        &self,
        graph: &Arc<dyn BackendGraph>,
        after: &[Done],
        nodes_after: Vec<NodesAfter>,
        want_done: bool,
        trace: Option<Arc<TraceSlot>>,
    ) -> Result<GraphLaunched> {
        self.check()?;
        let g: &HostGraph = downcast(graph.as_ref(), "graph")?;
        // Graph rule 4 waits on this backend's nodes: another backend's completions are
        // waited for here, first (portable pinned memory, HM2).
        for d in nodes_after.iter().flat_map(|n| &n.after) {
            if downcast::<SchedNode, _>(d.as_ref(), "completion").is_err() {
                d.wait_here();
            }
        }
        // Graph rule 1: after the previous launch of the same graph.
        let mut last = g.last.lock();
        let compiled = g.current();
        if compiled.records.is_empty() && compiled.waits.is_empty() && nodes_after.is_empty() {
            let job = GraphJob {
                compiled,
                trace,
                events: None,
            };
            let node = self.enqueue(SchedWork::Graph(job), last.as_ref(), after);
            *last = Some(node.clone());
            return Ok(GraphLaunched {
                done: want_done.then_some(node as Done),
                records: Vec::new(),
            });
        }
        let events = self.event_part(&compiled, nodes_after)?;
        let markers = events.markers.clone();
        let job = GraphJob {
            compiled: compiled.clone(),
            trace,
            events: Some(Box::new(events)),
        };
        let node = self.enqueue(SchedWork::Graph(job), last.as_ref(), after);
        *last = Some(node.clone());
        for (e, m) in compiled.records.iter().zip(&markers) {
            if let Ok(ev) = host_event(e) {
                *ev.captured.lock() = Some(m.clone()); // EV2, graph rule 4.
            }
        }
        Ok(GraphLaunched {
            done: want_done.then_some(node as Done),
            records: markers.into_iter().map(|m| m as Done).collect(),
        })
    }

    fn enqueued(&self) -> Option<u64> {
        Some(self.enqueued.load(Ordering::Relaxed))
    }

    fn query(&self) -> Result<bool> {
        self.check()?;
        self.settle_later();
        Ok(self.tail.lock().as_ref().is_none_or(|n| n.is_done()))
    }

    fn synchronize(&self) -> Result<()> {
        self.settle_later();
        let tail = self.tail.lock().clone();
        if let Some(n) = tail {
            self.sched.wait(&n, false);
        }
        // HM5, RL3: idle pool memory above the release threshold goes back now.
        self.pool.synchronized();
        self.check()
    }

    fn alloc_async(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.check()?;
        self.pool.alloc(bytes)
    }

    fn free_async(&self, alloc: Arc<Allocation>) -> Result<()> {
        self.check()?;
        // MM1/MM2: the pool hands the block out again only once every holder (the ops on this
        // stream and any other) has let go of it; no host synchronization is involved.
        self.pool.retire(alloc);
        Ok(())
    }
}

fn host_event(e: &Arc<dyn BackendEvent>) -> Result<&HostEvent> {
    downcast(e.as_ref(), "event")
}

crate::backend::contract::downcast::as_any!(HostStream, HostEvent);

pub(crate) struct HostEvent {
    sched: Arc<Scheduler>,
    flags: EventFlags,
    captured: Mutex<Option<Arc<SchedNode>>>,
}

impl HostEvent {
    pub(super) fn new(sched: Arc<Scheduler>, flags: EventFlags) -> Self {
        HostEvent {
            sched,
            flags,
            captured: Mutex::new(None),
        }
    }
}

impl BackendEvent for HostEvent {
    fn flags(&self) -> EventFlags {
        self.flags
    }

    fn query(&self) -> Result<bool> {
        self.sched.check()?;
        Ok(self.captured.lock().as_ref().is_none_or(|n| n.is_done()))
    }

    fn synchronize(&self) -> Result<()> {
        let captured = self.captured.lock().clone();
        if let Some(n) = captured {
            self.sched.wait(&n, self.flags.blocking_sync);
        }
        self.sched.check()
    }

    fn recorded(&self) -> bool {
        self.captured.lock().is_some()
    }

    fn elapsed_ms(&self, end: &dyn BackendEvent) -> Result<f32> {
        let end: &HostEvent = downcast(end, "event")?;
        // Two statements: `elapsed(e, e)` locks the same mutex twice, and a guard temporary of
        // the first lock would still be alive in a single `let (a, b) = (.., ..)`.
        let a = self.captured.lock().clone();
        let b = end.captured.lock().clone();
        let (Some(a), Some(b)) = (a, b) else {
            return Err(Error::InvalidHandle(
                "elapsed on an event that was never recorded (EV6)".into(),
            ));
        };
        if !a.is_done() || !b.is_done() {
            return Err(Error::NotReady(
                "elapsed on an event whose work is pending (EV6)",
            ));
        }
        let (t0, t1) = (
            a.completed_ns.load(std::sync::atomic::Ordering::Relaxed) as f64,
            b.completed_ns.load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
        Ok(((t1 - t0) / 1e6) as f32)
    }
}
