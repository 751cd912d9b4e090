//! Graph nodes as a backend instantiates them (GR1–GR8): the operations of a capture with their
//! dependencies, memory the capture allocated as placeholders (GR7) that each instantiation
//! maps to memory of its own ([`resolve`]), and the event record and wait nodes of built
//! graphs (GR8).

use std::sync::Arc;

use super::conditional::CondCell;
use super::event::BackendEvent;
use super::kernel::KernelArg;
use super::memory::{Allocation, MemRef};
use super::node_op::NodeOp;
use super::op::{Op, Part, Work};
use crate::trace::OpKind;
use crate::types::Access;
use crate::types::{CondKind, NodeType};

/// What a graph node does.
#[derive(Clone)]
pub(crate) enum GraphWork {
    /// An operation, as a stream would run it.
    Op(NodeOp),
    /// Allocate `bytes` for slot `slot` (GR7).
    Alloc { slot: usize, bytes: usize },
    /// Free the memory of slot `slot` (GR7).
    Free { slot: usize },
    /// Nothing: an ordering point (an empty node, the join of a child graph, GR8).
    Empty,
    /// Free memory another graph's allocation node allocated and left allocated (GR10):
    /// a placeholder while building, the memory that graph's instantiation gave it when
    /// handed to a backend.
    FreeOther { mem: Arc<Allocation> },
    /// A conditional node with its bodies (GR9): boxed, so that the rare large variant does
    /// not set the size of every node (40 bytes against 24).
    Conditional(Box<CondNode>),
    /// Record the event once the node's dependencies completed (GR8,
    /// `cuGraphAddEventRecordNode`): at each launch the event captures the node's ancestors,
    /// not the rest of the graph. The launch returns the node's completion in
    /// [`GraphLaunched::records`](super::device::GraphLaunched).
    EventRecord(Arc<dyn BackendEvent>),
    /// Hold the node's dependents until what the event captured when the launch was enqueued
    /// completed (GR8, EV4, `cuGraphAddEventWaitNode`); the graph's other nodes do not wait.
    EventWait(Arc<dyn BackendEvent>),
}

impl GraphWork {
    /// True for the memory nodes: allocation, free, and free of another graph's memory (GR7,
    /// GR10).
    pub fn is_memory(&self) -> bool {
        matches!(
            self,
            GraphWork::Alloc { .. } | GraphWork::Free { .. } | GraphWork::FreeOther { .. }
        )
    }

    /// What kind of node this is, with its operation's kind: the one classification of graph
    /// nodes (`Graph::nodes`, `Graph::to_dot`, race reports).
    pub fn node_type(&self) -> (Option<OpKind>, NodeType) {
        match self {
            GraphWork::Op(op) => {
                let k = op.kind();
                let t = match k {
                    OpKind::Kernel => NodeType::Kernel,
                    OpKind::CopyH2D
                    | OpKind::CopyD2H
                    | OpKind::CopyD2D
                    | OpKind::CopyH2H
                    | OpKind::CopyPeer => NodeType::Memcpy,
                    OpKind::Memset => NodeType::Memset,
                    OpKind::HostFn => NodeType::Host,
                    _ => NodeType::Other,
                };
                (Some(k), t)
            }
            GraphWork::Alloc { .. } => (None, NodeType::MemAlloc),
            GraphWork::Free { .. } | GraphWork::FreeOther { .. } => (None, NodeType::MemFree),
            GraphWork::Empty => (None, NodeType::Empty),
            GraphWork::Conditional(_) => (None, NodeType::Conditional),
            GraphWork::EventRecord(_) => (None, NodeType::EventRecord),
            GraphWork::EventWait(_) => (None, NodeType::EventWait),
        }
    }
}

/// Indices of earlier nodes a node depends on. Inline up to two: most nodes follow one node
/// (a stream's last) or join two, and a list on the heap cost an allocation per node in
/// capture, flattening and instantiation.
pub(crate) type NodeDeps = smallvec::SmallVec<[usize; 2]>;

/// One captured node with the nodes it depends on.
#[derive(Clone)]
pub(crate) struct GraphNode {
    pub work: GraphWork,
    /// Indices of earlier nodes this one depends on.
    pub deps: NodeDeps,
    /// Index of the captured stream the node came from (0 = the origin stream).
    pub lane: usize,
    /// That stream's id within its device, and where the captured call was written (for
    /// reports that name the node).
    pub stream: u64,
    pub site: Option<&'static std::panic::Location<'static>>,
}

impl GraphNode {
    pub fn op(&self) -> Option<&Op> {
        match &self.work {
            GraphWork::Op(op) => Some(op),
            _ => None,
        }
    }

    /// The node's conditional node, if it is one (GR9).
    pub fn conditional(&self) -> Option<&CondNode> {
        match &self.work {
            GraphWork::Conditional(c) => Some(c),
            _ => None,
        }
    }

    /// Every access the node may make: its operation's, or (GR9) those of every body of a
    /// conditional node that may run. Generic, not `dyn`: instantiation walks every node of a
    /// graph this way, and an indirect call per node cost more than most nodes' accesses.
    #[inline]
    pub fn for_each_access<F: FnMut(&MemRef, Access, Part)>(&self, f: &mut F) {
        match &self.work {
            GraphWork::Op(op) => op.for_each_access(f),
            GraphWork::Conditional(c) => {
                for b in &c.bodies {
                    for n in b.iter() {
                        n.for_each_access(f);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every condition the conditional nodes of `nodes` and their bodies use, once each (GR9).
pub(crate) fn conditions(nodes: &[GraphNode]) -> Vec<Arc<CondCell>> {
    let mut cells = Vec::new();
    for c in nodes.iter().filter_map(GraphNode::conditional) {
        c.cells(&mut cells);
    }
    cells
}

/// Which nodes of `nodes` come before node `i` (follow its dependencies), by index.
pub(crate) fn ancestors(nodes: &[GraphNode], i: usize) -> Vec<bool> {
    let mut seen = vec![false; nodes.len()];
    let mut todo = nodes[i].deps.clone();
    while let Some(n) = todo.pop() {
        if !std::mem::replace(&mut seen[n], true) {
            todo.extend(nodes[n].deps.iter().copied());
        }
    }
    seen
}

/// A copy of `op` whose references to placeholder memory (GR7) point at `memory(slot)`.
pub(crate) fn resolve(op: &Op, memory: &dyn Fn(usize) -> Arc<Allocation>) -> Op {
    resolve_with(op, &|a| a.graph_slot.map(|s| memory(s.slot)))
}

/// [`resolve`] for an operation a graph node shares: the node's own where nothing needs
/// resolving (no placeholder memory, no trace slot), so that instantiating a graph of
/// thousands of nodes copies none of their operations.
pub(crate) fn resolve_shared(op: &NodeOp, memory: &dyn Fn(usize) -> Arc<Allocation>) -> NodeOp {
    if op.trace.is_none() && !touches_placeholder(op) {
        return op.clone();
    }
    NodeOp::new(resolve(op, memory))
}

/// A copy of `op` whose references to placeholder memory point at what `memory` maps each
/// placeholder to (left as they are where it maps to `None`).
pub(crate) fn resolve_with(
    op: &Op,
    memory: &dyn Fn(&Arc<Allocation>) -> Option<Arc<Allocation>>,
) -> Op {
    let fix = |m: &MemRef| match memory(&m.alloc) {
        Some(alloc) if m.alloc.graph_slot.is_some() => MemRef {
            alloc,
            offset: m.offset,
            len: m.len,
        },
        _ => m.clone(),
    };
    let mut out = op.clone();
    out.trace = None;
    match &mut out.work {
        Work::Copy { dst, src } | Work::Word { dst, src } => {
            *dst = fix(dst);
            *src = fix(src);
        }
        Work::Memset { dst, .. } => *dst = fix(dst),
        Work::Launch(l) => {
            if l.args.iter().any(
                |a| matches!(a, KernelArg::Buffer { mem, .. } if mem.alloc.graph_slot.is_some()),
            ) {
                l.set_args(l.args_with_memory(fix));
            }
        }
        // GR11: a captured collective may use the capture's memory.
        Work::Collective(c)
            if c.send.alloc.graph_slot.is_some() || c.recv.alloc.graph_slot.is_some() =>
        {
            *c = Arc::new(super::op::CollectiveWork {
                comm: c.comm.clone(),
                desc: c.desc,
                send: fix(&c.send),
                recv: fix(&c.recv),
            });
        }
        // GR11: an external operation over the capture's memory gets the instantiation's.
        Work::External(x) if x.accesses.iter().any(|(m, _)| m.alloc.graph_slot.is_some()) => {
            *x = Arc::new(super::op::ExternalWork {
                name: x.name.clone(),
                accesses: x.accesses.iter().map(|(m, a)| (fix(m), *a)).collect(),
                cuda: x.cuda.clone(),
                host: x.host.clone(),
            });
        }
        Work::HostFn(_) | Work::Collective(_) | Work::External(_) => {}
    }
    out
}

/// True if `op` touches memory a capture allocated.
#[inline]
pub(crate) fn touches_placeholder(op: &Op) -> bool {
    let mut any = false;
    op.for_each_access(|m, _, _| any |= m.alloc.graph_slot.is_some());
    any
}

/// A conditional node: its kind, condition and bodies (each topologically ordered).
#[derive(Clone)]
pub(crate) struct CondNode {
    pub kind: CondKind,
    pub cell: Arc<CondCell>,
    pub bodies: Vec<Arc<Vec<GraphNode>>>,
}

impl CondNode {
    /// Rule 3: the body to run now, if any (a while node asks again after each run).
    pub fn pick(&self) -> Option<&Arc<Vec<GraphNode>>> {
        let v = self.cell.get();
        match self.kind {
            CondKind::If | CondKind::While => (v != 0).then(|| &self.bodies[0]),
            CondKind::IfElse => Some(&self.bodies[if v != 0 { 0 } else { 1 }]),
            CondKind::Switch => self.bodies.get(v as usize),
        }
    }

    /// Every condition cell this node and its bodies use, once each.
    pub fn cells(&self, out: &mut Vec<Arc<CondCell>>) {
        if !out.iter().any(|c| Arc::ptr_eq(c, &self.cell)) {
            out.push(self.cell.clone());
        }
        for c in self
            .bodies
            .iter()
            .flat_map(|b| b.iter().filter_map(GraphNode::conditional))
        {
            c.cells(out);
        }
    }
}
