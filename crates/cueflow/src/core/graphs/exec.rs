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
//!    before anything changes ([`crate::core::graphs::update`]).
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

use crate::backend::contract::node_op::NodeOp;
use std::collections::hash_map::{Entry, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::device::Done;
use crate::backend::contract::device::{BackendGraph, GraphFlags};
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::kernel::Launch;
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{HostCall, Op, Part, Work};
use crate::core::devices::device::DeviceCore;
use crate::core::graphs::def::{Flat, GraphDef};
use crate::core::graphs::events::EventScope;
use crate::core::graphs::host_nodes::HostNodes;
use crate::core::graphs::instantiate::{check_nodes, instantiate, resolve};
use crate::core::graphs::launch::{launch_whole, GraphLaunch};
use crate::core::graphs::mem::{self, Beyond};
use crate::core::graphs::update;
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
    // Where each (allocation, access) is in `by`: a graph may touch thousands of buffers, and
    // a search of `by` per access made instantiation quadratic in them.
    let mut place: HashMap<(*const Allocation, Access), usize> = HashMap::new();
    for n in nodes {
        // GR9: a conditional node's footprint is that of every body that may run.
        n.for_each_access(&mut |m, kind, _| {
            if m.alloc.graph_slot.is_some() || m.len == 0 {
                return;
            }
            match place.entry((Arc::as_ptr(&m.alloc), kind)) {
                Entry::Occupied(at) => by[*at.get()].2.push(m.range()),
                Entry::Vacant(at) => {
                    at.insert(by.len());
                    by.push((m.alloc.clone(), kind, vec![m.range()]));
                }
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

/// Pinned allocations the graph copies to or from, in one lock order (MM3): those of its
/// footprint (`launch_footprint`, which holds every allocation its nodes touch but their own
/// placeholders, device memory all), found there rather than by another walk of the nodes.
fn pinned_of(footprint: &[(MemRef, Access, Part)]) -> Vec<Arc<Allocation>> {
    let mut pinned: Vec<Arc<Allocation>> = footprint
        .iter()
        .filter(|(m, _, _)| m.kind().is_host())
        .map(|(m, _, _)| m.alloc.clone())
        .collect();
    // Each allocation once, found by sorting (a search per access was quadratic in them).
    pinned.sort_by_key(|a| (a.addr, Arc::as_ptr(a)));
    pinned.dedup_by(|a, b| Arc::ptr_eq(a, b));
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
    /// GR10 (rule 6): the memory beyond the graph.
    beyond: Beyond,
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
        if !nodes.iter().any(|n| n.work.is_memory()) {
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

/// Rule 6: bind each of `slots` that `backend` gives memory to that memory, for
/// instantiation `id`; the slots bound.
fn bind_slots(
    dev: &Arc<DeviceCore>,
    backend: &dyn BackendGraph,
    slots: &[Arc<Allocation>],
    beyond: &Beyond,
    id: u64,
) -> Vec<Arc<Allocation>> {
    let mut bound = Vec::new();
    for p in slots {
        if let Some(mem) = p.graph_slot.and_then(|g| backend.slot_memory(g.slot)) {
            mem::bind(p, mem, id, beyond.hands_out(p), freer(dev));
            bound.push(p.clone());
        }
    }
    bound
}

/// Rules 2 and 6: what a launch of `nodes` accesses, the memory beyond the graph included.
fn launch_footprint(nodes: &[GraphNode], beyond: &Beyond) -> Vec<(MemRef, Access, Part)> {
    let mut fp = footprint(nodes.iter());
    fp.extend(beyond.footprint());
    fp
}

/// A flattened graph's nodes, the events of its event nodes, and where each node of its
/// definition went.
fn flat_parts(flat: Flat) -> (Arc<Vec<GraphNode>>, GraphEvents, Vec<usize>) {
    let events = GraphEvents {
        waits: flat.waits,
        records: flat.records,
    };
    (Arc::new(flat.nodes), events, flat.index)
}

impl ExecCore {
    /// Instantiate `def` on `dev`'s backend (cudaGraphInstantiate, with
    /// cudaGraphInstantiateFlagAutoFreeOnLaunch where `auto_free_on_launch`): flattened
    /// (`core::graphs::def` rules 2–4) and checked (rule 5). Also returns where each node of
    /// `def` went in the flattened graph.
    #[track_caller]
    pub fn new(
        dev: &Arc<DeviceCore>,
        def: &GraphDef,
        auto_free_on_launch: bool,
    ) -> Result<(Self, Vec<usize>)> {
        let site = std::panic::Location::caller();
        let (nodes, events, index) = flat_parts(def.flatten()?);
        check_not_in_host_fn("Graph::instantiate")?;
        if let Some(e) = dev.sticky_error() {
            return Err(e);
        }
        let flags = GraphFlags {
            auto_free_on_launch,
            no_record_completions: false,
        };
        let claim = Claim::take(&def.claim, &nodes)?;
        let slots = &def.slots[..];
        let beyond = Beyond::of(&nodes, slots);
        for p in &beyond.hands_out {
            mem::check_rebind(p)?;
        }
        let scope = EventScope::new(&nodes, &events, &beyond, None);
        let among = |i| EventScope::node_place(scope.as_ref(), i);
        let hosts = HostNodes::new(&nodes, &among, site);
        let resolved = hosts.wrap(resolve(&nodes)?);
        let extra = check_nodes(dev, &nodes, site)?;
        let backend = instantiate(dev, &resolved, &extra, flags)?;
        let id = NEXT_EXEC.fetch_add(1, Ordering::Relaxed);
        let bound = bind_slots(dev, &*backend, slots, &beyond, id);
        let footprint = launch_footprint(&nodes, &beyond);
        let exec = ExecCore {
            dev: dev.clone(),
            flags,
            id,
            bound,
            _claim: claim,
            state: Mutex::new(ExecState {
                pinned: pinned_of(&footprint),
                footprint,
                beyond,
                nodes,
                backend,
                extra,
                events,
                scope,
                last_launch: Mutex::new(None),
                hosts,
            }),
        };
        Ok((exec, index))
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
        let views: Vec<_> = if st.pinned.is_empty() {
            Vec::new() // The common case, without the iterator's collect.
        } else {
            st.pinned
                .iter()
                .map(|a| crate::core::memory::alloc::state(a).host_views.lock())
                .collect()
        };
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
        let beyond = !st.beyond.is_empty();
        let after = match beyond {
            true => st.beyond.check_launch(self.flags.auto_free_on_launch)?,
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
            memory: (!st.beyond.hands_out.is_empty()).then_some(&after[..]),
            hosts: begun.is_some().then_some(&place),
        };
        let joined = dev
            .track
            .join_previous_launch(stream, dev.legacy_actor, &st.last_launch);
        let launched = match st.scope.as_mut() {
            // graph_build rule 4: event nodes scope what the launch orders.
            Some(scope) => scope.launch(&launch),
            None => launch_whole(&launch, &st.footprint),
        };
        let done = match launched {
            Ok(done) => done,
            Err(e) => {
                dev.track.undo_join(stream, joined);
                return Err(e);
            }
        };
        if let Some(begun) = begun {
            begun.launched();
        }
        dev.track
            .on_record(stream, dev.legacy_actor, &st.last_launch);
        if beyond {
            for p in st.beyond.commit_launch(done) {
                stream.free_async(dev, p, site)?;
            }
        }
        Ok(())
    }

    /// GR3: prepare this instantiation's launches in `stream`'s order, running none of its
    /// nodes (`cudaGraphUpload`); serialized with its launches and updates by its lock.
    pub fn upload(&self, stream: &Arc<StreamCore>) -> Result<()> {
        let dev = &self.dev;
        let capture = AtCapture::unsupported("uploading a graph inside a stream capture");
        stream.enter(dev, "GraphExec::upload", capture, Some("a graph upload"))?;
        if let Some(e) = dev.sticky_error() {
            return Err(e);
        }
        let st = self.state.lock();
        dev.autograph.before_other()?; // AG4: it reaches the backend.
        stream.backend.upload_graph(&st.backend)
    }

    /// Update from `def`, a graph of the same shape (GR6, rules 4 and 5); returns where each
    /// node of `def` went in the flattened graph.
    #[track_caller]
    pub fn update_from(&self, def: &GraphDef) -> Result<Vec<usize>> {
        let (nodes, events, index) = flat_parts(def.flatten()?);
        self.update(&nodes, Some(events))?;
        Ok(index)
    }

    /// Update from `nodes`, a graph of the same shape (GR6, rules 4 and 5).
    #[track_caller]
    pub fn update(&self, nodes: &Arc<Vec<GraphNode>>, events: Option<GraphEvents>) -> Result<()> {
        let site = std::panic::Location::caller();
        check_not_in_host_fn("GraphExec::update")?;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let changes = update::changes(nodes, &st.nodes)?;
        let extra = check_nodes(&self.dev, nodes, site)?;
        if extra != st.extra {
            self.instantiate_again(st, nodes, extra)?;
        } else {
            changes.check(&*st.backend, nodes, &st.hosts)?;
            changes.apply(&*st.backend, nodes, &st.hosts)?;
        }
        st.footprint = launch_footprint(nodes, &st.beyond);
        st.pinned = pinned_of(&st.footprint);
        st.nodes = nodes.clone();
        if let Some(events) = events {
            st.events = events;
        }
        st.scope = EventScope::new(nodes, &st.events, &st.beyond, st.scope.as_ref());
        let among = |i| EventScope::node_place(st.scope.as_ref(), i);
        st.hosts.update(nodes, &among, site);
        Ok(())
    }

    /// Rule 5 at an update: other nodes conflict now, so the backend's graph of `nodes` needs
    /// other edges (`extra`). It has memory of its own (rule 6): what the program holds must
    /// not be allocated.
    fn instantiate_again(
        &self,
        st: &mut ExecState,
        nodes: &[GraphNode],
        extra: Vec<Vec<usize>>,
    ) -> Result<()> {
        if let Some(p) = st.beyond.hands_out.iter().find(|p| mem::is_live(p)) {
            return Err(Error::GraphUpdate(format!(
                "this update instantiates the graph again (other nodes conflict now), but graph \
                 allocation of {} bytes it handed out is still allocated: free it first",
                p.bytes
            )));
        }
        let resolved = st.hosts.wrap(resolve(nodes)?);
        let backend = instantiate(&self.dev, &resolved, &extra, self.flags)?;
        bind_slots(&self.dev, &*backend, &self.bound, &st.beyond, self.id);
        st.backend = backend;
        st.extra = extra;
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
                work: GraphWork::Op(NodeOp::new(Op::new(Work::Launch(launch)))),
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
        let nothing = || Op::new(Work::HostFn(Box::new(HostCall::new(Arc::new(|| {})))));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::contract::op::{Op, Work};
    use crate::types::MemKind;

    fn memset(alloc: &Arc<Allocation>, offset: usize, len: usize) -> GraphNode {
        let dst = MemRef {
            alloc: alloc.clone(),
            offset,
            len,
        };
        GraphNode {
            work: GraphWork::Op(NodeOp::new(Op::new(Work::Memset { dst, value: 0 }))),
            deps: Default::default(),
            lane: 0,
            stream: 1,
            site: None,
        }
    }

    /// Rule 2: one entry per allocation and merged range, whatever order the nodes touch the
    /// allocations in (many allocations, interleaved), in the order they were first touched.
    #[test]
    fn footprint_merges_each_allocations_ranges_across_interleaved_nodes() {
        let allocs: Vec<_> = (0..40)
            .map(|i| Allocation::borrowed(0x1000 * (i + 1), 256, MemKind::Device, 0))
            .collect();
        let mut nodes = Vec::new();
        for part in 0..4 {
            for a in &allocs {
                // Parts 0, 1 and 3 of each allocation: two merged ranges, [0, 128) and
                // [192, 256).
                if part != 2 {
                    nodes.push(memset(a, part * 64, 64));
                }
            }
        }
        let fp = footprint(nodes.iter());
        assert_eq!(fp.len(), 2 * allocs.len());
        for (i, a) in allocs.iter().enumerate() {
            let ranges: Vec<_> = fp[2 * i..2 * i + 2]
                .iter()
                .map(|(m, access, _)| {
                    assert!(Arc::ptr_eq(&m.alloc, a));
                    assert_eq!(*access, Access::Write);
                    m.range()
                })
                .collect();
            assert_eq!(ranges, [0..128, 192..256]);
        }
    }
}
