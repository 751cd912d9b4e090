//! Host-backend graphs (GR3, GR6, GR7): instantiation compiles the captured DAG once —
//! dependency counts, dependents, the operation of each node with the graph's own memory in
//! place of the capture's placeholders — and a launch is one stream node whose run the engines
//! walk: a node that completes makes its dependents ready, and a ready single-block kernel is
//! run at once by the compute worker that made it ready (no queue, no hand-off), so a chain of
//! small kernels costs a fraction of launching them one by one.
//!
//! Rules:
//! 1. A launch runs after the previous launch of the same graph (launch order, as CUDA does):
//!    the graph's memory (GR7) is shared by its launches.
//! 2. A run completes its stream node after its last graph node completed, so stream order,
//!    events and synchronization treat the launch as one operation (GR3).
//! 3. An update replaces the compiled DAG by a new one; runs already started keep theirs, and
//!    with it the memory their operations hold (GR4, MM2).
//! 4. Event nodes (GR8): a launch makes one marker node per record node and points the event
//!    at it, so waits enqueued after the launch wait for the marker (EV2); the run completes
//!    the marker when the record node is reached, that is once the node's dependencies
//!    completed, however much of the graph is left. A wait node takes, at the launch, the node
//!    its event captured; when the run starts, a *gate* node that depends on it holds the wait
//!    node back by one more dependency, so only the wait node's dependents wait. Both refer
//!    only to work enqueued before the launch, so neither can wait for itself. Nodes that
//!    conflict with pending work of other streams (AC6) are gated the same way, so the rest of
//!    the graph need not wait for that work.
//! 5. Graph memory (GR7) is planned once per instantiation, as CUDA reuses a graph's
//!    addresses: an allocation node ordered after the free node of another slot takes that
//!    slot's memory when it is large enough (so a graph that frees one buffer before it
//!    allocates the next uses one block for both, and its addresses are the same at every
//!    launch). Memory the graph hands out (GR10) is never taken by a later slot.
//! 6. Conditions are the instantiation's own (`conditional` rule 3).

use std::mem::ManuallyDrop;
use std::sync::Arc;

use parking_lot::Mutex;

use super::conditional::CondIds;
use super::memory::{graph_block, GraphMemCount};
use super::sched_node::SchedNode;
use super::sync::{AtomicU32, AtomicUsize, Ordering};
use crate::backend::contract::conditional::CondCell;
use crate::backend::contract::device::{BackendGraph, Done};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::{
    ancestors, conditions, resolve, resolve_shared, GraphNode, GraphWork,
};
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::node_op::NodeOp;
use crate::backend::contract::op::{Op, Work};
use crate::backend::contract::trace::TraceSlot;
use crate::error::{Error, Result};
use crate::types::MemKind;

crate::backend::contract::downcast::as_any!(HostGraph);

/// One node of a compiled graph.
pub(super) struct CNode {
    /// The operation; `None` for allocation and free nodes (ordering points only: the graph's
    /// memory lives as long as the instantiation, as CUDA reserves graph memory's addresses).
    pub op: Option<NodeOp>,
    /// Number of dependencies.
    pub deps: u32,
    /// Nodes that depend on this one.
    pub dependents: Vec<usize>,
    /// For an event node, its index among the graph's record or wait nodes (rule 4).
    pub event: Option<EventNode>,
}

/// An event node of a compiled graph (rule 4): its index in [`Compiled::records`] or
/// [`Compiled::waits`].
#[derive(Clone, Copy)]
pub(super) enum EventNode {
    Record(usize),
    Wait(usize),
}

/// A compiled DAG.
pub(super) struct Compiled {
    pub nodes: Vec<CNode>,
    pub roots: Vec<usize>,
    /// Conditions of the graph's conditional nodes, reset as a launch starts (GR9).
    pub conds: Vec<Arc<CondCell>>,
    /// The events of the record nodes, in node order (rule 4).
    pub records: Vec<Arc<dyn BackendEvent>>,
    /// The wait nodes, in node order: node index and event (rule 4).
    pub waits: Vec<(usize, Arc<dyn BackendEvent>)>,
}

/// An instantiated graph of the host backend.
pub(crate) struct HostGraph {
    compiled: Mutex<Arc<Compiled>>,
    /// The graph's own memory, by slot (GR7; rule 5: slots may share a block).
    memory: Vec<Arc<Allocation>>,
    /// Rule 6: the ids of the instantiation's conditions.
    cond_ids: CondIds,
    /// The stream node of the latest launch (rule 1).
    pub(super) last: Mutex<Option<Arc<SchedNode>>>,
}

impl HostGraph {
    /// Compile `nodes` (rules of `core::graphs::exec`).
    pub fn compile(
        nodes: &[GraphNode],
        device_id: u64,
        graph_mem: &Arc<GraphMemCount>,
    ) -> Result<HostGraph> {
        let private = super::conditional::private_conditions(nodes);
        let (nodes, cond_ids) = match private {
            Some((nodes, ids)) => (std::borrow::Cow::Owned(nodes), ids),
            None => (std::borrow::Cow::Borrowed(nodes), CondIds::default()),
        };
        let nodes = &nodes[..];
        let memory = plan_memory(nodes, device_id, graph_mem)?;
        let (mut records, mut waits) = (Vec::new(), Vec::new());
        let mut cnodes: Vec<CNode> = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let event = match &n.work {
                GraphWork::EventRecord(e) => {
                    records.push(e.clone());
                    Some(EventNode::Record(records.len() - 1))
                }
                GraphWork::EventWait(e) => {
                    waits.push((i, e.clone()));
                    Some(EventNode::Wait(waits.len() - 1))
                }
                _ => None,
            };
            cnodes.push(CNode {
                op: match &n.work {
                    GraphWork::Conditional(c) => Some(NodeOp::new(super::conditional::op_of(c))),
                    // Shared with core's nodes unless placeholder memory needs resolving.
                    GraphWork::Op(op) => Some(resolve_shared(op, &|slot| memory[slot].clone())),
                    _ => None,
                },
                deps: n.deps.len() as u32,
                dependents: Vec::new(),
                event,
            });
        }
        for (i, n) in nodes.iter().enumerate() {
            for &d in &n.deps {
                cnodes[d].dependents.push(i);
            }
        }
        for op in cnodes.iter().filter_map(|n| n.op.as_ref()) {
            if let Work::Launch(l) = &op.work {
                if super::cuda_c::uses_c(&l.kernel) {
                    super::cuda_c::prepare(l)?;
                }
            }
        }
        let roots = (0..cnodes.len()).filter(|&i| cnodes[i].deps == 0).collect();
        let conds = conditions(nodes);
        Ok(HostGraph {
            compiled: Mutex::new(Arc::new(Compiled {
                nodes: cnodes,
                roots,
                conds,
                records,
                waits,
            })),
            memory,
            cond_ids,
            last: Mutex::new(None),
        })
    }

    /// The DAG launches use now.
    pub(super) fn current(&self) -> Arc<Compiled> {
        self.compiled.lock().clone()
    }

    /// Rule 3: a new DAG made of the current one by `change`; runs already started keep
    /// theirs.
    fn replace(&self, change: impl FnOnce(&mut Compiled)) {
        let mut c = self.compiled.lock();
        let mut next = Compiled {
            nodes: c
                .nodes
                .iter()
                .map(|n| CNode {
                    op: n.op.clone(),
                    deps: n.deps,
                    dependents: n.dependents.clone(),
                    event: n.event,
                })
                .collect(),
            roots: c.roots.clone(),
            conds: c.conds.clone(),
            records: c.records.clone(),
            waits: c.waits.clone(),
        };
        change(&mut next);
        *c = Arc::new(next);
    }
}

impl BackendGraph for HostGraph {
    fn update(&self, node: usize, op: &Op) -> Result<()> {
        let memory = &self.memory;
        let resolved = resolve(&self.cond_ids.op(op), &|slot| memory[slot].clone());
        // Rule 3: a new DAG; the old one stays with the runs that hold it.
        self.replace(|c| c.nodes[node].op = Some(NodeOp::new(resolved)));
        Ok(())
    }

    fn set_event(&self, node: usize, event: &Arc<dyn BackendEvent>) -> Result<()> {
        let Some(which) = self.current().nodes.get(node).and_then(|n| n.event) else {
            return Err(Error::GraphUpdate(format!(
                "node {node} is not an event node"
            )));
        };
        self.replace(|c| match which {
            EventNode::Record(k) => c.records[k] = event.clone(),
            EventNode::Wait(k) => c.waits[k].1 = event.clone(),
        });
        Ok(())
    }

    fn slot_memory(&self, slot: usize) -> Option<Arc<Allocation>> {
        self.memory.get(slot).cloned()
    }

    /// The node keeps its operation's addresses only (rule 3: runs already started keep
    /// theirs), so the memory can go back to its pool once those runs are done.
    fn release(&self, node: usize) {
        let c = self.current();
        let Some(op) = c.nodes.get(node).and_then(|n| n.op.as_ref()) else {
            return;
        };
        let hollow = NodeOp::new(op.hollow());
        drop(c);
        self.replace(|c| c.nodes[node].op = Some(hollow));
    }
}

/// Rule 5: the memory of each slot of `nodes` (topologically ordered).
fn plan_memory(
    nodes: &[GraphNode],
    device_id: u64,
    graph_mem: &Arc<GraphMemCount>,
) -> Result<Vec<Arc<Allocation>>> {
    let slots = nodes
        .iter()
        .filter_map(|n| match n.work {
            GraphWork::Alloc { slot, .. } => Some(slot + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if slots == 0 {
        return Ok(Vec::new());
    }
    // Blocks that a free node gave back: (block, the free node).
    let mut free: Vec<(Arc<Allocation>, usize)> = Vec::new();
    let mut memory: Vec<Option<Arc<Allocation>>> = vec![None; slots];
    for (i, n) in nodes.iter().enumerate() {
        match n.work {
            GraphWork::Alloc { slot, bytes } => {
                let before = ancestors(nodes, i);
                let reuse = free
                    .iter()
                    .enumerate()
                    .filter(|(_, (b, f))| before[*f] && b.bytes >= bytes)
                    .min_by_key(|(_, (b, _))| b.bytes)
                    .map(|(k, _)| k);
                memory[slot] = Some(match reuse {
                    Some(k) => free.swap_remove(k).0,
                    None => graph_block(bytes, device_id, graph_mem)?,
                });
            }
            GraphWork::Free { slot } => {
                if let Some(Some(b)) = memory.get(slot) {
                    free.push((b.clone(), i));
                }
            }
            _ => {}
        }
    }
    // Every slot has its allocation node (core checks GR7).
    Ok(memory
        .into_iter()
        .map(|m| m.unwrap_or_else(|| Allocation::borrowed(0, 0, MemKind::Device, device_id)))
        .collect())
}

/// What a launch's stream node runs: the DAG as it was at launch (rule 3), and its event
/// nodes' part (rule 4).
pub(crate) struct GraphJob {
    pub compiled: Arc<Compiled>,
    pub trace: Option<Arc<TraceSlot>>,
    /// The launch's part of rule 4; `None` for a graph without event nodes and a launch that
    /// holds no single node (boxed: most launches have none).
    pub events: Option<Box<LaunchEvents>>,
}

/// One launch's event nodes and held nodes (rule 4).
pub(crate) struct LaunchEvents {
    /// One marker per record node, completed when the run reaches the node.
    pub markers: Vec<Arc<SchedNode>>,
    /// Nodes held until completions: a wait node until what its event captured at the
    /// launch, and nodes that conflict with earlier work of other streams (AC6) until it.
    pub gated: Vec<(Vec<usize>, Vec<Done>)>,
}

/// One run of a graph, walked by the engines.
pub(crate) struct GraphRun {
    /// Dropped first when the run goes, before its stream node completes (see [`Drop`]).
    pub job: ManuallyDrop<GraphJob>,
    /// Dependencies not yet completed, per node.
    pub left: Vec<AtomicU32>,
    /// Nodes not yet completed.
    pub remaining: AtomicUsize,
    /// The launch's stream node, completed after the last graph node (rule 2).
    pub node: Arc<SchedNode>,
    /// Set when the last node completed: what completes the stream node once the run is
    /// dropped ([`GraphRun::on_drop`]).
    completes: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// The stream node of a run completes when the last engine thread lets go of the run, after
/// its job — the graph's nodes with the memory, registrations and host functions they hold —
/// was dropped: a host wait for the launch returns only when nothing of the run holds them
/// any more (HM1: dropping the graph after a synchronize lets go of its registrations at
/// once, so the memory can be registered again).
impl Drop for GraphRun {
    fn drop(&mut self) {
        // SAFETY: `job` is dropped here once, and `self` is never used after this drop.
        unsafe { ManuallyDrop::drop(&mut self.job) };
        if let Some(complete) = self.completes.get_mut().take() {
            complete();
        }
    }
}

impl GraphRun {
    pub fn new(node: Arc<SchedNode>, job: GraphJob) -> Arc<GraphRun> {
        let left = job
            .compiled
            .nodes
            .iter()
            .map(|n| AtomicU32::new(n.deps))
            .collect();
        let remaining = AtomicUsize::new(job.compiled.nodes.len());
        Arc::new(GraphRun {
            job: ManuallyDrop::new(job),
            left,
            remaining,
            node,
            completes: Mutex::new(None),
        })
    }

    /// Complete the run's stream node with `complete` once the run is dropped (its last node
    /// completed).
    pub fn on_drop(&self, complete: Box<dyn FnOnce() + Send>) {
        *self.completes.lock() = Some(complete);
    }

    /// One dependency of node `i` completed; true when that made it ready.
    pub fn release(&self, i: usize) -> bool {
        self.left[i].fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Give node `i` one more dependency (a gate, rule 4), before the run starts.
    pub fn hold(&self, i: usize) {
        self.left[i].fetch_add(1, Ordering::AcqRel);
    }

    /// True while node `i` has dependencies left; for a root, before the run starts: it has
    /// a gate.
    pub fn held(&self, i: usize) -> bool {
        self.left[i].load(Ordering::Acquire) != 0
    }

    /// SchedNode `i` completed; true when it was the last one.
    pub fn finish_one(&self) -> bool {
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }
}
