//! Native CUDA graphs (GR3, GR6, GR7): core's captured DAG becomes a `CUgraph` through the
//! explicit node API — kernel, memcpy, memset, host, memory allocation and free nodes, and what
//! external operations enqueue, captured by the driver — with the capture's dependencies as
//! edges, instantiated once into a `CUgraphExec`; a launch is one `cuGraphLaunch`.
//!
//! Why the node API and not the driver's stream capture: core already holds the captured DAG
//! (it captures identically on every backend, with its own validation, GR1/GR2), and building
//! from it keeps one capture model; the node handles it returns are what in-place updates need.
//!
//! Rules (cited as G1–G4 by the `// SAFETY:` comments):
//! * **G1.** The graph, the exec and the callback data of host nodes live in one [`ExecHandle`]
//!   that each launch puts in its stream's keepalive queue (Q1), so what the driver's launches
//!   use is freed only after every launch that uses them completed, whatever the program drops
//!   (MM2, GR4). The driver objects themselves go when the program's last handle does
//!   ([`CudaGraph`]'s drop): the driver frees an exec with launches in flight once they
//!   complete, so its destroy, ~1.4 us a node, costs the program's drop as `cudaGraphExecDestroy`
//!   does, not whichever later call on the stream retires the last launch.
//! * **G2.** Each launch also keeps the operations as they were at launch (with their memory),
//!   so an update that swaps a buffer never frees what an enqueued launch still uses.
//! * **G3.** Memory of allocation nodes belongs to the graph: the driver maps it at the
//!   allocation node and unmaps it at the free node of each launch (GR7); every slot has both.
//! * **G4.** Kernel parameters are copied by the driver when a node is added or updated, so the
//!   argument arrays need to live only for the call.
//! * **G5.** An external operation's CUDA side is called once per instantiation, on a scratch
//!   stream the driver captures straight into the instantiation's graph after the node's
//!   dependencies (`cuStreamBeginCaptureToGraph`, thread-local mode); an empty node after the
//!   ends of what it enqueued stands for the operation. Its work, memory nodes included, then
//!   runs at every launch, as a library's work does under CUDA stream capture.
//! * **G6.** Event record and wait nodes (GR8) are the driver's own
//!   (`cuGraphAddEventRecordNode`, `cuGraphAddEventWaitNode`), so their scope is CUDA's. The
//!   exec handle keeps every event a node named at instantiation until the exec is destroyed
//!   (G1); one an update gives is kept by the snapshot each later launch takes (`Current`),
//!   so an event replaced again goes once the launches that name it are done. Beside each
//!   record node goes a record node of an event of the exec's own, with the same
//!   dependencies: the completion a launch hands back for the record node (core orders
//!   conflicting accesses after exactly that, AC5). A later launch records it again, which can
//!   only make a wait on it longer, never shorter, and never on work enqueued after the wait.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUgraph, CUgraphNode};
use parking_lot::Mutex;

use super::driver::{self, graph as dg, CuResult};
use super::event::{cuda_event, CudaEvent};
use super::graph_capture::{capture_child, capture_external, NCCL_CAPTURE};
use super::graph_cond::FirstLaunch;
use super::graph_cond::{DriverDeps, Role};
use super::graph_renew::same_for_driver;
use super::launch::{
    copy_node_ctx, host_fn_trampoline, prepare, prepare_node, with_node_params, LastKernel,
};
use super::queue::HostFnCall;
use super::shared::DeviceShared;
use crate::backend::contract::device::{BackendGraph, Done, GraphFlags};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::{resolve, resolve_shared, GraphNode, GraphWork};
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::node_op::NodeOp;
use crate::backend::contract::op::{HostFn, Op, Work};
use crate::error::{Error, Result};
use crate::types::EventFlags;
use crate::types::MemKind;

mod handle;

pub(super) use handle::{Current, ExecHandle, LaunchKeep};

crate::backend::contract::downcast::as_any!(CudaGraph);

/// An instantiated graph of the CUDA backend.
pub(crate) struct CudaGraph {
    shared: Arc<DeviceShared>,
    pub(super) handle: Arc<ExecHandle>,
    nodes: Vec<CUgraphNode>,
    /// Graph memory by slot (G3), as allocations that release nothing.
    memory: Vec<Option<Arc<Allocation>>>,
    /// The driver's conditional handles by condition id (GR9).
    conds: std::collections::HashMap<u64, sys::CUgraphConditionalHandle>,
    /// The start nodes of the conditions without reset, until the first launch (GR9, C3 of
    /// `graph_cond.rs`).
    first_launch: Option<FirstLaunch>,
    /// The operations as resolved now and the events updates gave (G2, G6).
    pub(super) ops: Mutex<Arc<Current>>,
    /// True if the graph has event record nodes (G6).
    records: bool,
    /// C7 of `graph_cond.rs`: no conditional node, and a node that reaches host memory.
    pub(super) reaches_host: bool,
}

/// The program's last handle of the instantiation is gone: the driver objects go now, what
/// pending launches use stays with them (G1).
impl Drop for CudaGraph {
    fn drop(&mut self) {
        self.handle.release_driver_objects();
    }
}

// SAFETY: node handles are identifiers used only with the context current (D2).
unsafe impl Send for CudaGraph {}
// SAFETY: as above; mutable state is behind mutexes.
unsafe impl Sync for CudaGraph {}

/// A memcpy node's parameters: `n` bytes between two of pinned host and device memory.
fn memcpy_params(dst: &MemRef, src: &MemRef, n: usize) -> sys::CUDA_MEMCPY3D {
    use sys::CUmemorytype::{CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_UNIFIED};
    let side = |m: &MemRef| match m.kind() {
        // Managed memory (HM4): a unified address the driver resolves.
        MemKind::Managed => (CU_MEMORYTYPE_UNIFIED, std::ptr::null_mut(), m.addr()),
        MemKind::Pinned | MemKind::Registered | MemKind::Pageable => {
            (CU_MEMORYTYPE_HOST, m.addr() as usize as *mut c_void, 0)
        }
        MemKind::Device => (CU_MEMORYTYPE_DEVICE, std::ptr::null_mut(), m.addr()),
    };
    let (src_type, src_host, src_device) = side(src);
    let (dst_type, dst_host, dst_device) = side(dst);
    // Every field named: the struct holds enums, for which all-zero bytes are not a value.
    sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: src_type,
        srcHost: src_host,
        srcDevice: src_device,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: dst_type,
        dstHost: dst_host,
        dstDevice: dst_device,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: n,
        Height: 1,
        Depth: 1,
    }
}

fn memset_params(dst: &MemRef, value: u8) -> sys::CUDA_MEMSET_NODE_PARAMS {
    sys::CUDA_MEMSET_NODE_PARAMS {
        dst: dst.addr(),
        pitch: dst.len,
        value: value as u32,
        elementSize: 1,
        width: dst.len,
        height: 1,
    }
}

/// The host function of a host node: the op's own, or the copy between two pinned buffers.
fn host_fn_of(op: &Op) -> Option<(HostFn, String)> {
    match &op.work {
        Work::HostFn(h) => Some((h.f.clone(), h.fault_name())),
        Work::Copy { dst, src } if dst.kind().is_host() && src.kind().is_host() => {
            let (d, s, n) = (dst.addr() as usize, src.addr() as usize, dst.len);
            let copy: HostFn = Arc::new(move || {
                // SAFETY: core checked both ranges are in bounds and disjoint (CP4); the
                // launch keeps the op, and with it both allocations, until it completed (G2).
                unsafe { std::ptr::copy_nonoverlapping(s as *const u8, d as *mut u8, n) }
            });
            Some((copy, "host-to-host copy".into()))
        }
        _ => None,
    }
}

/// The driver's instantiation flags for `flags`.
fn driver_flags(flags: GraphFlags) -> u64 {
    match flags.auto_free_on_launch {
        // GR10: the driver frees what the previous launch left allocated.
        true => {
            sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0 as u64
        }
        false => 0,
    }
}

impl CudaGraph {
    /// Build and instantiate `nodes` (context current, D2).
    pub fn instantiate(
        shared: &Arc<DeviceShared>,
        nodes: &[GraphNode],
        flags: GraphFlags,
    ) -> Result<CudaGraph> {
        // D2: the caller made the context current.
        let graph = dg::create().map_err(|e| shared.fail(e, None))?;
        // From here on the handle owns the graph; on an error below it destroys it.
        let mut handle = ExecHandle {
            ctx: shared.ctx.clone(),
            _shared: shared.clone(),
            graph,
            exec: std::ptr::null_mut(),
            released: Default::default(),
            borrowed: Default::default(),
        };
        let conds = super::graph_cond::create_handles(shared, graph, nodes)?;
        // C3 of `graph_cond.rs`: every root node after the start nodes.
        let start = super::graph_cond::add_start_nodes(shared, graph, &conds.unreset)?;
        let mut b = Builder {
            shared,
            handle: &handle,
            graph,
            conds: conds.by_id,
            nodes: Vec::with_capacity(nodes.len()),
            memory: Vec::new(),
            // Only a graph's own allocation nodes make placeholders its operations use (GR7);
            // a conditional node's bodies are resolved as before, whatever they hold.
            placeholders: nodes
                .iter()
                .any(|n| n.work.is_memory() || matches!(n.work, GraphWork::Conditional(_))),
            own_records: !flags.no_record_completions,
            last_kernel: LastKernel::default(),
        };
        let mut ops = Vec::with_capacity(nodes.len());
        let mut chain = super::graph_cond::Chain::new();
        let mut reaches_host = false;
        for n in nodes {
            let mut deps: DriverDeps<CUgraphNode> = DriverDeps::new();
            if n.deps.is_empty() {
                deps.extend_from_slice(&start);
            } else {
                n.deps.iter().for_each(|&d| deps.push(b.nodes[d]));
            }
            // C4 and C6 of `graph_cond.rs`: conditional nodes one after another, and never
            // beside a node that reaches host memory.
            let role = Role::of(&n.work);
            chain.order(role, &mut deps);
            let (node, op) = b.add_node(&n.work, &deps)?;
            chain.added(role, node);
            reaches_host |= role == Role::HostReach;
            b.nodes.push(node);
            ops.push(op);
        }
        let (built, memory, conds) = (b.nodes, b.memory, b.conds);
        // D1: `graph` is complete; D2.
        handle.exec =
            dg::instantiate(graph, driver_flags(flags)).map_err(|e| shared.fail(e, None))?;
        if let Some(dir) = crate::config::graph_dot() {
            super::graph_dot::write_dot(graph, &dir);
        }
        if !conds.is_empty() {
            // C7: from now on the device keeps its streams' reach events.
            super::host_reach_gate::watch(shared).map_err(|e| shared.fail(e, None))?;
        }
        let records = !handle.borrowed.events.lock().records.is_empty();
        let handle = Arc::new(handle);
        Ok(CudaGraph {
            records,
            reaches_host: reaches_host && conds.is_empty(),
            shared: shared.clone(),
            handle,
            nodes: built,
            memory,
            conds,
            first_launch: FirstLaunch::new(start),
            ops: Mutex::new(Arc::new(Current::of(ops))),
        })
    }
}

/// Adds core's nodes to a driver graph (the instantiation's, or a conditional node's body).
pub(super) struct Builder<'a> {
    pub shared: &'a Arc<DeviceShared>,
    pub handle: &'a ExecHandle,
    /// The graph nodes are added to.
    pub graph: CUgraph,
    /// The driver's conditional handle of each condition id (GR9).
    pub conds: std::collections::HashMap<u64, sys::CUgraphConditionalHandle>,
    pub nodes: Vec<CUgraphNode>,
    pub memory: Vec<Option<Arc<Allocation>>>,
    /// False when no operation can name placeholder memory (the graph has no memory nodes):
    /// each is then used as it is, unless a trace slot needs dropping.
    pub placeholders: bool,
    /// Record nodes get a second record of the exec's own event, their completion
    /// ([`CudaGraph::launched`]); not where the caller said it does not use them.
    pub own_records: bool,
    /// The kernel the last kernel node loaded ([`prepare_node`]).
    pub last_kernel: LastKernel,
}

/// The memory of `slot`; core orders every use after the slot's allocation node (GR7), so it
/// is there — a placeholder of no bytes otherwise, which no driver call would accept.
fn slot_memory(memory: &[Option<Arc<Allocation>>], slot: usize) -> Arc<Allocation> {
    memory
        .get(slot)
        .cloned()
        .flatten()
        .unwrap_or_else(|| Allocation::borrowed(0, 0, MemKind::Device, u64::MAX))
}

impl Builder<'_> {
    /// Add one node after `deps`; returns it and the resolved operation.
    pub fn add_node(
        &mut self,
        work: &GraphWork,
        deps: &[CUgraphNode],
    ) -> Result<(CUgraphNode, Option<NodeOp>)> {
        let shared = self.shared;
        let fail = |e| shared.fail(e, None);
        let g = self.graph;
        // D1 for every node below: `deps` are nodes of this graph; D2: the caller's.
        match work {
            GraphWork::Alloc { slot, bytes, .. } => {
                let mut p = sys::CUDA_MEM_ALLOC_NODE_PARAMS {
                    poolProps: driver::memory::device_pool_props(shared.ctx.ordinal as i32),
                    accessDescs: std::ptr::null(),
                    accessDescCount: 0,
                    bytesize: (*bytes).max(1),
                    dptr: 0,
                };
                let node = dg::add_mem_alloc(g, deps, &mut p).map_err(fail)?;
                // Built graphs (GR8) may add slots in any order: memory is kept by slot.
                if self.memory.len() <= *slot {
                    self.memory.resize(*slot + 1, None);
                }
                self.memory[*slot] = Some(Allocation::borrowed(
                    p.dptr,
                    *bytes,
                    MemKind::Device,
                    shared.device_id,
                ));
                Ok((node, None))
            }
            GraphWork::Free { slot } => {
                // Core orders every free node after its allocation node (GR7, GR8).
                let Some(Some(mem)) = self.memory.get(*slot) else {
                    return Err(Error::Unsupported(format!(
                        "free node for graph allocation {slot} before its allocation node"
                    )));
                };
                // SAFETY: the address came from this graph's allocation node (G3), ordered
                // before this free node (core, GR7).
                let node = unsafe { dg::add_mem_free(g, deps, mem.addr) }.map_err(fail)?;
                Ok((node, None))
            }
            GraphWork::Op(op) => {
                let memory = &self.memory;
                let op = match self.placeholders || op.trace.is_some() {
                    true => resolve_shared(op, &|slot| slot_memory(memory, slot)),
                    false => op.clone(),
                };
                let node = self.add_op_node(&op, deps)?;
                Ok((node, Some(op)))
            }
            GraphWork::FreeOther { mem } => {
                // SAFETY: core handed the memory another instantiation's allocation node gave
                // its slot (GR10), and frees it here only while it is allocated.
                let node = unsafe { dg::add_mem_free(g, deps, mem.addr) }.map_err(fail)?;
                Ok((node, None))
            }
            GraphWork::Conditional(c) => {
                let node = super::graph_cond::add_conditional(self, c, deps)?;
                Ok((node, None))
            }
            GraphWork::Empty => Ok((dg::add_empty(g, deps).map_err(fail)?, None)),
            GraphWork::EventRecord(event) => {
                let ev = cuda_event(event.as_ref())?;
                // D1: the event is live, and the exec handle keeps it until the exec is
                // destroyed (G6).
                let node = dg::add_event_record(g, deps, ev.raw).map_err(fail)?;
                let own = if self.own_records {
                    let own = CudaEvent::create(
                        shared,
                        &shared.ctx,
                        EventFlags {
                            timing: false,
                            ..Default::default()
                        },
                    )?;
                    // D1: both events are live and kept by the exec handle (G6).
                    dg::add_event_record(g, deps, own.raw).map_err(fail)?;
                    Some(own)
                } else {
                    None
                };
                let mut events = self.handle.borrowed.events.lock();
                events.held.push(event.clone());
                let index = self.nodes.len();
                events.records.push((index, event.clone(), own));
                Ok((node, None))
            }
            GraphWork::EventWait(event) => {
                let ev = cuda_event(event.as_ref())?;
                // D1: the event is live and kept by the exec handle until the exec is destroyed
                // (G6).
                let node = dg::add_event_wait(g, deps, ev.raw).map_err(fail)?;
                self.handle.borrowed.events.lock().held.push(event.clone());
                Ok((node, None))
            }
        }
    }

    fn add_op_node(&self, op: &Op, deps: &[CUgraphNode]) -> Result<CUgraphNode> {
        let shared = self.shared;
        let fail = |e| shared.fail(e, None);
        let g = self.graph;
        let ctx = shared.ctx.raw();
        // Kernel nodes, most of a graph, skip the host-node test.
        let host = match &op.work {
            Work::Launch(_) => None,
            _ => host_fn_of(op),
        };
        if let Some((f, name)) = host {
            let call = Box::new(HostFnCall {
                f,
                name,
                sticky: shared.sticky.clone(),
            });
            let p = sys::CUDA_HOST_NODE_PARAMS {
                fn_: Some(host_fn_trampoline),
                userData: &*call as *const HostFnCall as *mut c_void,
            };
            // SAFETY: D2. The callback data stays in the exec handle until the exec is
            // destroyed (G1); the Box's heap address does not move; the trampoline makes no
            // driver call.
            let node = unsafe { dg::add_host(g, deps, &p) }.map_err(fail)?;
            self.handle.borrowed.calls.lock().push(call);
            return Ok(node);
        }
        let node = match &op.work {
            Work::Launch(l) => {
                // GR9: condition ids become the driver's handles.
                let l = &*super::graph_cond::with_handles(l, &self.conds);
                prepare_node(shared, l, &self.last_kernel, |k| {
                    // SAFETY: D2; `p` points at arguments that outlive the call (G4); the
                    // function stays loaded while the exec handle holds the device (G1);
                    // buffer addresses stay valid while launches hold the op (G2).
                    with_node_params(l, k, |p| unsafe { dg::add_kernel(g, deps, p) })
                })?
                .map_err(fail)?
            }
            Work::Copy { dst, src } | Work::Word { dst, src } if dst.len > 0 => {
                let p = memcpy_params(dst, src, dst.len);
                // MD3: peer access first; a body's nodes run in the graph's context.
                let node_ctx = copy_node_ctx(dst, src, shared, g != self.handle.graph)?;
                // SAFETY: D2; core checked both ranges (CP4); launches keep the op (G2); the
                // exec handle keeps the node's context (below).
                let node = unsafe { dg::add_memcpy(g, deps, &p, node_ctx.raw()) }.map_err(fail)?;
                if node_ctx.raw() != ctx {
                    self.handle.borrowed.peers.lock().push(node_ctx);
                }
                node
            }
            Work::Memset { dst, value } if dst.len > 0 => {
                let p = memset_params(dst, *value);
                // SAFETY: D2; core checked the range (CP4); launches keep the op (G2).
                unsafe { dg::add_memset(g, deps, &p, ctx) }.map_err(fail)?
            }
            Work::External(x) => capture_external(shared, x, g, deps)?,
            // GR11: the member's NCCL call, captured by the driver into this graph.
            Work::Collective(c) => {
                let what = format!("collective {}", c.desc.kind.name());
                let Some(enqueue) = NCCL_CAPTURE.get() else {
                    return Err(Error::Unsupported(
                        "a collective in a graph needs NCCL, which is not loaded".into(),
                    ));
                };
                capture_child(shared, &what, g, deps, fail, |s| enqueue(c, s))?
            }
            // Zero-length copies and memsets do nothing: an empty node keeps the edges.
            _ => dg::add_empty(g, deps).map_err(fail)?,
        };
        Ok(node)
    }
}

impl CudaGraph {
    /// A launch was enqueued (G6): its record nodes' events count as recorded, and each
    /// node's completion is the exec's own event beside it (none without own records).
    pub(super) fn launched(&self) -> Vec<Done> {
        if !self.records {
            return Vec::new();
        }
        let events = self.handle.borrowed.events.lock();
        events
            .records
            .iter()
            .filter_map(|(_, event, own)| {
                if let Ok(ev) = cuda_event(event.as_ref()) {
                    ev.set_recorded();
                }
                let own = own.as_ref()?;
                own.set_recorded();
                Some(own.clone() as Done)
            })
            .collect()
    }
}

impl BackendGraph for CudaGraph {
    fn slot_memory(&self, slot: usize) -> Option<Arc<Allocation>> {
        self.memory.get(slot).cloned().flatten()
    }

    fn set_event(&self, i: usize, event: &Arc<dyn BackendEvent>) -> Result<()> {
        let shared = &self.shared;
        shared.enter()?;
        let ev = cuda_event(event.as_ref())?;
        let (exec, node) = (self.handle.exec, self.nodes[i]);
        let mut events = self.handle.borrowed.events.lock();
        let record = events.records.iter().position(|r| r.0 == i);
        // D1: `node` is a record (or wait) node of this exec (core checked the node's kind,
        // GR6); the snapshot below keeps the event for every later launch, and each earlier
        // launch keeps the event it named (G6). D2: entered above.
        let r = match record {
            Some(_) => dg::exec_set_record_event(exec, node, ev.raw),
            None => dg::exec_set_wait_event(exec, node, ev.raw),
        };
        r.map_err(|e| shared.fail(e, None))?;
        let mut current = self.ops.lock();
        let given = &mut Arc::make_mut(&mut current).events;
        match given.iter_mut().find(|g| g.0 == i) {
            Some(g) => g.1 = event.clone(),
            None => given.push((i, event.clone())),
        }
        if let Some(k) = record {
            events.records[k].1 = event.clone();
        }
        Ok(())
    }

    fn release(&self, i: usize) {
        let mut current = self.ops.lock();
        if let Some(op) = current.ops[i].as_ref().map(|o| o.hollow()) {
            Arc::make_mut(&mut current).ops[i] = Some(NodeOp::new(op));
        }
    }

    /// A memcpy node keeps its memory's contexts (`cuGraphExecMemcpyNodeSetParams`): an update
    /// that gives either side device memory of another GPU than before is refused.
    fn check_update(&self, i: usize, op: &Op) -> Result<()> {
        let op = resolve(op, &|slot| slot_memory(&self.memory, slot));
        let gpus = |d: &MemRef, s: &MemRef| {
            [d, s].map(|m| (m.kind() == MemKind::Device).then_some(m.alloc.device_id))
        };
        let moved = match (&op.work, self.ops.lock().ops[i].as_ref().map(|o| &o.work)) {
            (
                Work::Copy { dst, src } | Work::Word { dst, src },
                Some(Work::Copy { dst: d, src: s } | Work::Word { dst: d, src: s }),
            ) => gpus(d, s) != gpus(dst, src),
            _ => false,
        };
        match moved {
            false => Ok(()),
            true => Err(Error::Unsupported(
                "an update that moves a copy's device memory to another GPU on CUDA (a memcpy \
                 node keeps its memory's contexts): instantiate the graph again"
                    .into(),
            )),
        }
    }

    fn update(&self, i: usize, op: &Op) -> Result<()> {
        let shared = &self.shared;
        let memory = &self.memory;
        let op = resolve(op, &|slot| slot_memory(memory, slot));
        let mut current = self.ops.lock();
        if current.ops[i]
            .as_ref()
            .is_some_and(|o| same_for_driver(o, &op))
        {
            // The node has it already: only the operation kept for launches changes (G2).
            Arc::make_mut(&mut current).ops[i] = Some(NodeOp::new(op));
            return Ok(());
        }
        drop(current);
        shared.enter()?;
        let (exec, node, ctx) = (self.handle.exec, self.nodes[i], shared.ctx.raw());
        let fail = |e| shared.fail(e, None);
        if let Some((f, name)) = host_fn_of(&op) {
            let call = Box::new(HostFnCall {
                f,
                name,
                sticky: shared.sticky.clone(),
            });
            let p = sys::CUDA_HOST_NODE_PARAMS {
                fn_: Some(host_fn_trampoline),
                userData: &*call as *const HostFnCall as *mut c_void,
            };
            // SAFETY: D2; the new callback data joins the exec handle's (G1).
            unsafe { dg::exec_set_host(exec, node, &p) }.map_err(fail)?;
            self.handle.borrowed.calls.lock().push(call);
        } else {
            match &op.work {
                Work::Launch(l) => {
                    let l = &*super::graph_cond::with_handles(l, &self.conds);
                    let k = prepare(shared, l)?;
                    // SAFETY: as for adding the node (G4).
                    with_node_params(l, &k, |p| unsafe { dg::exec_set_kernel(exec, node, p) })
                        .map_err(fail)?;
                }
                Work::Copy { dst, src } | Work::Word { dst, src } if dst.len > 0 => {
                    let p = memcpy_params(dst, src, dst.len);
                    // MD3: as when added (`check_update` refused other GPUs' memory).
                    let node_ctx = copy_node_ctx(dst, src, shared, false)?;
                    // SAFETY: as for adding the node; core checked the shape (GR6).
                    unsafe { dg::exec_set_memcpy(exec, node, &p, node_ctx.raw()) }.map_err(fail)?;
                }
                Work::Memset { dst, value } if dst.len > 0 => {
                    let p = memset_params(dst, *value);
                    // SAFETY: as for adding the node; core checked the shape (GR6).
                    unsafe { dg::exec_set_memset(exec, node, &p, ctx) }.map_err(fail)?;
                }
                _ => {} // Empty nodes: nothing to change.
            }
        }
        // G2: a new snapshot (unless none was launched since the last); launches already
        // enqueued keep theirs.
        Arc::make_mut(&mut self.ops.lock()).ops[i] = Some(NodeOp::new(op));
        Ok(())
    }
}

impl CudaGraph {
    /// Launch the exec on `s`. Graph launches are serialized per exec by the driver; the
    /// caller keeps the exec handle and the operations for the launch (G1, G2). `Err`: nothing
    /// was enqueued; `Ok(Err)`: the launch was enqueued, and what follows a first launch (its
    /// start nodes disabled, C3 of `graph_cond.rs`) failed.
    pub(super) fn launch(&self, q: &super::queue::StreamQueue) -> CuResult<CuResult<()>> {
        let s = q.raw;
        if self.conds.is_empty() {
            return self.launch_exec(s);
        }
        // C5 of `graph_cond.rs`: after the device's last launch of a graph with conditional
        // nodes, on whichever stream it was. Events taken out of the gate are dropped after its
        // lock, on every path (declared before it).
        let mut released = super::host_reach_gate::Released::new();
        let mut gate = self.shared.gate.state.lock();
        // Made before the launch: after it, only a sticky error can leave it unrecorded.
        let event = match gate.last.clone() {
            Some(event) => event,
            None => super::host_reach_gate::gate_event(&self.shared)?,
        };
        if let Some(last) = gate.last.as_ref() {
            // D1: the stream and the gate event are live; D2.
            driver::stream::wait_event(s, last.raw)?;
        }
        // C7: after work of other streams that reaches host memory.
        gate.wait_for_reaches(q, &mut released)?;
        let launched = self.launch_exec(s)?;
        // D1, D2. Not recorded: the next such launch is not ordered after this one (said as
        // the launch's error, as a failure after a first launch is).
        let recorded = driver::event::record(event.raw, s);
        if recorded.is_ok() {
            gate.last = Some(event);
            gate.launched(q.id);
        }
        Ok(launched.and(recorded))
    }

    /// Launch the exec on `s` (C3's first launch included).
    fn launch_exec(&self, s: driver::St) -> CuResult<CuResult<()>> {
        // D1: the exec is alive (the caller holds its handle and keeps it for the launch, G1;
        // the stream is live); D2.
        match &self.first_launch {
            None => dg::launch(self.handle.exec, s).map(Ok),
            Some(first) => first.launch(self.handle.exec, s),
        }
    }
}
