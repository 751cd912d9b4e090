//! Graphs in core (GR1–GR7): the nodes a capture produced, their instantiation by the backend
//! (a native `CUgraphExec` on CUDA, a compiled DAG the engines walk on the host), launches that
//! pass core's path as one call (tracking, trace), and updates in place.
//!
//! Rules:
//! 1. A launch is one stream operation (GR3): one backend submission, ordered by its stream;
//!    launches of one instantiation run one after another, as CUDA orders them.
//! 2. For the tracking layer a launch is one call whose accesses are the graph's footprint: the
//!    byte ranges its nodes touch, merged per allocation and kind. Ordering and host-access
//!    waits (AC5, AC6, MM3) therefore wait for, and on, the whole launch — except in a graph
//!    with event nodes, whose parts the event nodes order apart ([`crate::core::graphs::events`]).
//! 3. Memory a capture allocated (GR7) is a placeholder: each instantiation maps its slots to
//!    memory of its own, allocated and freed by the graph's own nodes; no call outside the graph
//!    may touch it.
//! 4. An update (GR6) may change kernel scalars, kernel buffers of the same size, and copy and
//!    memset ranges of the same length; anything else changes the graph's shape and is refused
//!    before anything changes.
//! 5. Nodes inside one graph obey AC3–AC6 as stream operations do ([`crate::core::graphs::order`]):
//!    with the sanitizer on, nodes that conflict with no path between them (in the graph, or
//!    in one body of a conditional node: a body runs as a graph of its own) are reported at
//!    instantiation and at every update (in error mode, refused) — after the checks that
//!    refuse a malformed graph, which never runs; on a device that serializes
//!    conflicts (the host backend, AC6) the backend instantiates the graph with extra
//!    dependencies that run such nodes in capture order. An update that changes which nodes
//!    conflict instantiates the backend's graph again with the new dependencies; launches
//!    already enqueued keep the old one (GR4).
//! 6. Memory beyond the graph (GR10, [`crate::core::graphs::mem`]): every slot's placeholder is bound
//!    to this instantiation's memory (its address), and the slots a graph allocates and never
//!    frees are handed to the program at each launch; free nodes of another graph's memory free
//!    what that graph's instantiation bound. A launch is refused while memory it would
//!    allocate is still allocated (unless it frees on launch) or memory it would free is not;
//!    for the tracking layer it writes all of both. It waits for the frees that dropped
//!    buffers made, and frees next what no one holds.
//! 7. A graph with memory nodes has one instantiation at a time (as CUDA allows one): a second
//!    is refused while the first lives ([`Claim`]); the memory's binding would be ambiguous
//!    (two instantiations' launches would hand out one buffer).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::device::Done;
use crate::backend::contract::device::{BackendGraph, GraphFlags};
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{HostCall, Op, Part, Work};
use crate::core::devices::device::DeviceCore;
use crate::core::graphs::events::EventScope;
use crate::core::graphs::host_nodes::HostNodes;
use crate::core::graphs::instantiate::{check_nodes, instantiate, resolve};
use crate::core::graphs::launch::{launch_whole, GraphLaunch};
use crate::core::graphs::mem;
use crate::core::streams::entry::AtCapture;
use crate::core::streams::event::EventCore;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::stream::StreamCore;
use crate::core::tracking::call::{LaunchPlace, Site};
use crate::core::tracking::clock::VClock;
use crate::error::{Error, Result};
use crate::types::Access;

/// The footprint of a graph's nodes (rule 2): per allocation and access kind, the merged byte
/// ranges; placeholder memory is the graph's own and left out.
pub(crate) fn footprint<'a>(
    nodes: impl IntoIterator<Item = &'a GraphNode>,
) -> Vec<(MemRef, Access, Part)> {
    let mut by: Vec<(Arc<Allocation>, Access, Vec<Range<usize>>)> = Vec::new();
    for n in nodes {
        // GR9: a conditional node's footprint is that of every body that may run.
        n.for_each_access(&mut |m, kind, _| {
            if m.alloc.graph_slot.is_some() || m.len == 0 {
                return;
            }
            match by
                .iter_mut()
                .find(|(a, k, _)| Arc::ptr_eq(a, &m.alloc) && *k == kind)
            {
                Some((_, _, ranges)) => ranges.push(m.range()),
                None => by.push((m.alloc.clone(), kind, vec![m.range()])),
            }
        });
    }
    let mut out = Vec::new();
    // Writes first: a read recorded after a write of the same launch keeps both.
    by.sort_by_key(|(_, k, _)| *k != Access::Write);
    for (alloc, kind, mut ranges) in by {
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::new();
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        for r in merged {
            let mem = MemRef {
                alloc: alloc.clone(),
                offset: r.start,
                len: r.len(),
            };
            out.push((mem, kind, Part::Whole));
        }
    }
    out
}

/// Pinned allocations the graph copies to or from, in one lock order (MM3).
fn pinned_of(nodes: &[GraphNode]) -> Vec<Arc<Allocation>> {
    let mut pinned: Vec<Arc<Allocation>> = Vec::new();
    for n in nodes {
        n.for_each_access(&mut |m, _, _| {
            if m.kind().is_host() && !pinned.iter().any(|a| Arc::ptr_eq(a, &m.alloc)) {
                pinned.push(m.alloc.clone());
            }
        });
    }
    pinned.sort_by_key(|a| a.addr);
    pinned
}

struct ExecState {
    /// The nodes as captured (placeholders unresolved), with updates applied.
    nodes: Arc<Vec<GraphNode>>,
    footprint: Vec<(MemRef, Access, Part)>,
    pinned: Vec<Arc<Allocation>>,
    /// The backend's instantiation, and the extra dependencies it was given (rule 5).
    backend: Arc<dyn BackendGraph>,
    extra: Vec<Vec<usize>>,
    /// The graph's event nodes (graph_build rule 4), and what each orders at a launch.
    events: GraphEvents,
    scope: Option<EventScope>,
    /// GR10 (rule 6): placeholders of the allocations the graph hands out, and of other
    /// graphs' memory its free nodes free.
    hands_out: Vec<Arc<Allocation>>,
    frees_other: Vec<Arc<Allocation>>,
    /// GR3: the tracking layer's snapshot of the stream the last launch was on, right after
    /// it; the next launch, on any stream, is ordered after it.
    last_launch: Mutex<Option<Arc<VClock>>>,
    /// HF1: the host nodes, and where each launch runs them.
    hosts: HostNodes,
}

/// The event nodes of a graph (graph_build rule 4): node index and event.
#[derive(Clone, Default)]
pub(crate) struct GraphEvents {
    pub waits: Vec<(usize, Arc<EventCore>)>,
    pub records: Vec<(usize, Arc<EventCore>)>,
}

/// Rule 7: held by the one instantiation of a graph with memory nodes.
pub(crate) struct Claim(Arc<AtomicBool>);

impl Claim {
    /// Rule 7: claim `flag` (a graph's, shared by its copies) for an instantiation of
    /// `nodes`; `None` when they hold no memory node.
    pub fn take(flag: &Arc<AtomicBool>, nodes: &[GraphNode]) -> Result<Option<Claim>> {
        let memory = nodes.iter().any(|n| {
            matches!(
                n.work,
                GraphWork::Alloc { .. } | GraphWork::Free { .. } | GraphWork::FreeOther { .. }
            )
        });
        if !memory {
            return Ok(None);
        }
        if flag.swap(true, Ordering::AcqRel) {
            return Err(Error::NotPermitted {
                rule: "GR7",
                what: "instantiating a graph with memory nodes while an instantiation of it (or \
                       of a copy of it) lives: such a graph has one at a time, as in CUDA — \
                       drop the other GraphExec first"
                    .into(),
            });
        }
        Ok(Some(Claim(flag.clone())))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

static NEXT_EXEC: AtomicU64 = AtomicU64::new(1);

/// An instantiated graph.
pub(crate) struct ExecCore {
    dev: Arc<DeviceCore>,
    flags: GraphFlags,
    /// Rule 6: this instantiation's id, and the placeholders it bound.
    id: u64,
    bound: Vec<Arc<Allocation>>,
    /// Rule 7.
    _claim: Option<Claim>,
    /// Launches and updates one at a time (rule 1).
    state: Mutex<ExecState>,
}

/// Rule 6: the placeholders of the slots `nodes` allocate and never free (of `slots`), and of
/// the other graphs' memory they free.
fn memory_beyond(
    nodes: &[GraphNode],
    slots: &[Arc<Allocation>],
) -> (Vec<Arc<Allocation>>, Vec<Arc<Allocation>>) {
    let mut allocated = vec![false; slots.len()];
    let mut freed = vec![false; slots.len()];
    let mut others = Vec::new();
    for n in nodes {
        match &n.work {
            GraphWork::Alloc { slot, .. } if *slot < slots.len() => allocated[*slot] = true,
            GraphWork::Free { slot } if *slot < slots.len() => freed[*slot] = true,
            GraphWork::FreeOther { mem } => others.push(mem.clone()),
            _ => {}
        }
    }
    let hands_out = (0..slots.len())
        .filter(|&s| allocated[s] && !freed[s])
        .map(|s| slots[s].clone())
        .collect();
    (hands_out, others)
}

/// Rule 6: the footprint of the memory a launch allocates for the program or frees for another
/// graph: all of it, written.
pub(crate) fn beyond_footprint(
    placeholders: impl Iterator<Item = Arc<Allocation>>,
) -> Vec<(MemRef, Access, Part)> {
    placeholders
        .filter_map(|p| mem::bound(&p))
        .map(|real| {
            let len = real.bytes;
            (
                MemRef {
                    alloc: real,
                    offset: 0,
                    len,
                },
                Access::Write,
                Part::Whole,
            )
        })
        .collect()
}

impl ExecCore {
    /// Instantiate `nodes` on `dev`'s backend (cudaGraphInstantiate), after checking them
    /// (rule 5).
    #[track_caller]
    pub fn new(
        dev: &Arc<DeviceCore>,
        nodes: Arc<Vec<GraphNode>>,
        events: GraphEvents,
        slots: &[Arc<Allocation>],
        flags: GraphFlags,
        claim: &Arc<AtomicBool>,
    ) -> Result<Self> {
        let site = std::panic::Location::caller();
        check_not_in_host_fn("Graph::instantiate")?;
        if let Some(e) = dev.sticky_error() {
            return Err(e);
        }
        let claim = Claim::take(claim, &nodes)?;
        let (hands_out, frees_other) = memory_beyond(&nodes, slots);
        for p in &hands_out {
            mem::check_rebind(p)?;
        }
        let scope = EventScope::new(&nodes, &events, &hands_out, &frees_other, None);
        let among = |i| EventScope::node_place(scope.as_ref(), i);
        let hosts = HostNodes::new(&nodes, &among, site);
        let resolved = hosts.wrap(resolve(&nodes)?);
        let extra = check_nodes(dev, &nodes, site)?;
        let backend = instantiate(dev, &resolved, &extra, flags)?;
        // Rule 6: every slot is bound to this instantiation's memory.
        let id = NEXT_EXEC.fetch_add(1, Ordering::Relaxed);
        let mut bound = Vec::new();
        for p in slots {
            if let Some(mem) = p.graph_slot.and_then(|g| backend.slot_memory(g.slot)) {
                let handed_out = hands_out.iter().any(|h| Arc::ptr_eq(h, p));
                mem::bind(p, mem, id, handed_out, freer(dev));
                bound.push(p.clone());
            }
        }
        let mut fp = footprint(nodes.iter());
        fp.extend(beyond_footprint(
            hands_out.iter().chain(frees_other.iter()).cloned(),
        ));
        Ok(ExecCore {
            dev: dev.clone(),
            flags,
            id,
            bound,
            _claim: claim,
            state: Mutex::new(ExecState {
                hands_out,
                frees_other,
                footprint: fp,
                pinned: pinned_of(&nodes),
                nodes,
                backend,
                extra,
                events,
                scope,
                last_launch: Mutex::new(None),
                hosts,
            }),
        })
    }

    /// Run the whole graph as one unit in `stream`'s order (GR3, rule 1).
    pub fn launch(&self, stream: &Arc<StreamCore>, site: Site) -> Result<()> {
        let dev = &self.dev;
        // The entry layers, as for every stream call: the host-function guard, the capture
        // (which takes no graph launch: refused, the capture goes on) and GR5.
        let capture = AtCapture::unsupported("launching a graph inside a stream capture");
        stream.enter(dev, "GraphExec::launch", capture, Some("a graph launch"))?;
        if let Some(e) = dev.sticky_error() {
            return Err(e);
        }
        let mut guard = self.state.lock();
        let st = &mut *guard;
        // MM3: a graph needs no borrow of the pinned buffers it copies, so it checks here that
        // the host holds no view of them, and keeps new views from starting (they wait on
        // these locks, then on the access map) until the launch is enqueued and recorded.
        let views: Vec<_> = st
            .pinned
            .iter()
            .map(|a| crate::core::memory::alloc::state(a).host_views.lock())
            .collect();
        if views.iter().any(|v| **v > 0) {
            return Err(Error::NotPermitted {
                rule: "MM3",
                what: "GraphExec::launch while the host holds a read or write view of a pinned \
                       buffer the graph copies"
                    .into(),
            });
        }
        let nodes = st.nodes.len();
        // Rule 6 (GR10): memory handed out must be freed before it is allocated again.
        let beyond = !(st.hands_out.is_empty() && st.frees_other.is_empty());
        let after = match beyond {
            true => mem::check_launch(
                &st.hands_out,
                &st.frees_other,
                self.flags.auto_free_on_launch,
            )?,
            false => Vec::new(),
        };
        dev.autograph.before_other()?; // AG4
        let hosts = &st.hosts;
        let place = |at: &LaunchPlace<'_>| hosts.place(at);
        let begun = hosts.begin_launch();
        let launch = GraphLaunch {
            stream,
            dev,
            graph: &st.backend,
            nodes,
            site,
            memory: (!st.hands_out.is_empty()).then_some(&after[..]),
            hosts: begun.is_some().then_some(&place),
        };
        dev.track
            .join_previous_launch(stream, dev.legacy_actor, &st.last_launch);
        let done = match st.scope.as_mut() {
            // graph_build rule 4: event nodes scope what the launch orders.
            Some(scope) => scope.launch(&launch)?,
            None => launch_whole(&launch, &st.footprint)?,
        };
        if let Some(begun) = begun {
            begun.launched();
        }
        dev.track
            .on_record(stream, dev.legacy_actor, &st.last_launch);
        if beyond {
            for p in mem::commit_launch(&st.hands_out, &st.frees_other, done) {
                stream.free_async(dev, p, site)?;
            }
        }
        Ok(())
    }

    /// Update from `nodes`, a graph of the same shape (GR6, rules 4 and 5).
    #[track_caller]
    pub fn update(&self, nodes: &Arc<Vec<GraphNode>>, events: Option<GraphEvents>) -> Result<()> {
        let site = std::panic::Location::caller();
        check_not_in_host_fn("GraphExec::update")?;
        let mut st = self.state.lock();
        if nodes.len() != st.nodes.len() {
            return Err(Error::GraphUpdate(format!(
                "the graph has {} nodes; this instantiation has {}",
                nodes.len(),
                st.nodes.len()
            )));
        }
        let (mut changed, mut events_changed) = (Vec::new(), Vec::new());
        for (i, (new, old)) in nodes.iter().zip(st.nodes.iter()).enumerate() {
            if new.deps != old.deps {
                return Err(Error::GraphUpdate(format!(
                    "node {i} depends on nodes {:?}; in this instantiation on {:?}",
                    new.deps, old.deps
                )));
            }
            match (&new.work, &old.work) {
                (GraphWork::Op(a), GraphWork::Op(b)) => {
                    same_shape(i, a, b)?;
                    changed.push(i);
                }
                (GraphWork::Alloc { bytes: a, .. }, GraphWork::Alloc { bytes: b, .. })
                    if a == b => {}
                (GraphWork::Free { slot: a }, GraphWork::Free { slot: b }) if a == b => {}
                (GraphWork::Empty, GraphWork::Empty) => {}
                (GraphWork::EventRecord(a), GraphWork::EventRecord(b))
                | (GraphWork::EventWait(a), GraphWork::EventWait(b)) => {
                    if !Arc::ptr_eq(a, b) {
                        events_changed.push((i, a.clone()));
                    }
                }
                (GraphWork::Conditional(a), GraphWork::Conditional(b))
                    if Arc::ptr_eq(&a.cell, &b.cell)
                        && a.kind == b.kind
                        && a.bodies.len() == b.bodies.len()
                        && a.bodies
                            .iter()
                            .zip(&b.bodies)
                            .all(|(x, y)| Arc::ptr_eq(x, y)) => {}
                (GraphWork::FreeOther { mem: a }, GraphWork::FreeOther { mem: b })
                    if Arc::ptr_eq(a, b) => {}
                _ => {
                    return Err(Error::GraphUpdate(format!(
                        "node {i} is a different kind of node than in this instantiation"
                    )))
                }
            }
        }
        let extra = check_nodes(&self.dev, nodes, site)?;
        if extra != st.extra {
            // Rule 5: other nodes conflict now; the backend's graph needs other edges. It has
            // memory of its own (rule 6): what the program holds must not be allocated.
            if let Some(p) = st.hands_out.iter().find(|p| mem::is_live(p)) {
                return Err(Error::GraphUpdate(format!(
                    "this update instantiates the graph again (other nodes conflict now), \
                     but graph allocation of {} bytes it handed out is still allocated: free \
                     it first",
                    p.bytes
                )));
            }
            let resolved = st.hosts.wrap(resolve(nodes)?);
            let backend = instantiate(&self.dev, &resolved, &extra, self.flags)?;
            for p in &self.bound {
                if let Some(mem) = p.graph_slot.and_then(|g| backend.slot_memory(g.slot)) {
                    let handed_out = st.hands_out.iter().any(|h| Arc::ptr_eq(h, p));
                    mem::bind(p, mem, self.id, handed_out, freer(&self.dev));
                }
            }
            st.backend = backend;
            st.extra = extra;
        } else {
            for i in changed {
                if let Some(op) = nodes[i].op() {
                    st.backend.update(i, &st.hosts.wrap_op(i, op))?;
                }
            }
            for (i, event) in events_changed {
                st.backend.set_event(i, &event)?;
            }
        }
        let mut fp = footprint(nodes.iter());
        fp.extend(beyond_footprint(
            st.hands_out.iter().chain(st.frees_other.iter()).cloned(),
        ));
        st.footprint = fp;
        st.pinned = pinned_of(nodes);
        st.nodes = nodes.clone();
        if let Some(events) = events {
            st.events = events;
        }
        let (events, old) = (&st.events, st.scope.as_ref());
        let scope = EventScope::new(nodes, events, &st.hands_out, &st.frees_other, old);
        st.scope = scope;
        let st = &mut *st;
        let among = |i| EventScope::node_place(st.scope.as_ref(), i);
        st.hosts.update(nodes, &among, site);
        Ok(())
    }

    /// Give kernel node `node` the launch `launch` (same kernel and shape, GR6).
    #[track_caller]
    pub fn set_kernel(&self, node: usize, launch: Launch) -> Result<()> {
        check_not_in_host_fn("GraphExec::set_kernel_args")?;
        let nodes = {
            let st = self.state.lock();
            let Some(n) = st.nodes.get(node) else {
                return Err(Error::GraphUpdate(format!(
                    "no node {node}: the graph has {} nodes",
                    st.nodes.len()
                )));
            };
            let mut nodes = (*st.nodes).clone();
            nodes[node] = GraphNode {
                work: GraphWork::Op(Op::new(Work::Launch(launch))),
                deps: n.deps.clone(),
                lane: n.lane,
                stream: n.stream,
                site: n.site,
            };
            Arc::new(nodes)
        };
        self.update(&nodes, None)
    }
}

/// `dev` as graph memory's frees see it (graph_mem rule 4).
fn freer(dev: &Arc<DeviceCore>) -> std::sync::Weak<dyn mem::Freer> {
    let weak: std::sync::Weak<dyn mem::Freer> = Arc::downgrade(dev) as _;
    weak
}

impl mem::Freer for DeviceCore {
    fn free_after(&self, real: &Arc<Allocation>, uses: &[Done]) -> Result<Option<Done>> {
        let nothing = || Op::new(Work::HostFn(HostCall::new(Arc::new(|| {}))));
        let s = self.notifier()?;
        s.submit(nothing(), uses, false)?;
        s.free_graph_memory(real)?;
        s.submit(nothing(), &[], true)
    }

    fn synchronize(&self) -> Result<()> {
        DeviceCore::synchronize(self)
    }

    fn wait(&self, done: &Done) -> Result<()> {
        self.backend.wait_done(done)
    }
}

impl Drop for ExecCore {
    fn drop(&mut self) {
        mem::unbind(&self.bound, self.id);
    }
}

/// Rule 4 for one node: `new` may replace `old` in place.
fn same_shape(i: usize, new: &Op, old: &Op) -> Result<()> {
    let bad = |why: String| Err(Error::GraphUpdate(format!("node {i}: {why}")));
    match (&new.work, &old.work) {
        (Work::Launch(a), Work::Launch(b)) => {
            if !Arc::ptr_eq(&a.kernel, &b.kernel) {
                return bad(format!(
                    "kernel `{}` in place of `{}`",
                    a.kernel.name, b.kernel.name
                ));
            }
            if (a.grid, a.block, a.shared_bytes) != (b.grid, b.block, b.shared_bytes) {
                return bad(format!(
                    "launch shape grid {:?} block {:?} shared {} in place of grid {:?} block {:?} \
                     shared {}",
                    a.grid, a.block, a.shared_bytes, b.grid, b.block, b.shared_bytes
                ));
            }
            if a.args.len() != b.args.len() {
                return bad(format!(
                    "{} arguments in place of {}",
                    a.args.len(),
                    b.args.len()
                ));
            }
            for (j, (x, y)) in a.args.iter().zip(b.args.iter()).enumerate() {
                match (x, y) {
                    (
                        KernelArg::Buffer {
                            mem: m1,
                            access: a1,
                            elem: e1,
                            ..
                        },
                        KernelArg::Buffer {
                            mem: m2,
                            access: a2,
                            elem: e2,
                            ..
                        },
                    ) if m1.len == m2.len
                        && a1 == a2
                        && e1 == e2
                        && m1.kind().side() == m2.kind().side() => {}
                    (
                        KernelArg::Scalar {
                            ty: t1, size: s1, ..
                        },
                        KernelArg::Scalar {
                            ty: t2, size: s2, ..
                        },
                    ) if t1 == t2 && s1 == s2 => {}
                    _ => {
                        return bad(format!(
                            "argument {j} changes type, access or size (only scalars of the \
                             same type and buffers of the same size can be updated)"
                        ))
                    }
                }
            }
            Ok(())
        }
        (Work::Copy { dst: d1, src: s1 }, Work::Copy { dst: d2, src: s2 })
        | (Work::Word { dst: d1, src: s1 }, Work::Word { dst: d2, src: s2 }) => {
            if d1.len != d2.len || (s1.kind(), d1.kind()) != (s2.kind(), d2.kind()) {
                return bad(format!(
                    "a {}-byte {:?}→{:?} copy in place of a {}-byte {:?}→{:?} copy",
                    d1.len,
                    s1.kind(),
                    d1.kind(),
                    d2.len,
                    s2.kind(),
                    d2.kind()
                ));
            }
            Ok(())
        }
        (Work::Memset { dst: a, .. }, Work::Memset { dst: b, .. }) => {
            if a.len != b.len {
                return bad(format!(
                    "a {}-byte memset in place of a {}-byte one",
                    a.len, b.len
                ));
            }
            Ok(())
        }
        (Work::HostFn(_), Work::HostFn(_)) => Ok(()),
        // The work an external operation enqueued is the caller's: cueflow cannot tell what an
        // update would change in it.
        (Work::External(a), Work::External(b)) if Arc::ptr_eq(a, b) => Ok(()),
        (Work::External(a), Work::External(_)) => bad(format!(
            "external operation `{}` is not the one of this instantiation: its work cannot be \
             updated in place (instantiate the new graph)",
            a.name
        )),
        _ => bad(format!(
            "a {} in place of a {}",
            new.kind().label(),
            old.kind().label()
        )),
    }
}
