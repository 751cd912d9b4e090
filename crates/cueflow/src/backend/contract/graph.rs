//! Graph nodes as a backend instantiates them (GR1–GR7): the operations of a capture with their
//! dependencies, and memory the capture allocated as placeholders (GR7) that each
//! instantiation maps to memory of its own ([`resolve`]).

use std::sync::Arc;

use super::kernel::KernelArg;
use super::memory::{Allocation, MemRef};
use super::op::{Op, Work};

/// What a graph node does.
#[derive(Clone)]
pub(crate) enum GraphWork {
    /// An operation, as a stream would run it.
    Op(Op),
    /// Allocate `bytes` for slot `slot` (GR7).
    Alloc { slot: usize, bytes: usize },
    /// Free the memory of slot `slot` (GR7).
    Free { slot: usize },
}

/// One captured node with the nodes it depends on.
#[derive(Clone)]
pub(crate) struct GraphNode {
    pub work: GraphWork,
    /// Indices of earlier nodes this one depends on.
    pub deps: Vec<usize>,
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
}

/// A copy of `op` whose references to placeholder memory (GR7) point at `memory(slot)`.
pub(crate) fn resolve(op: &Op, memory: &dyn Fn(usize) -> Arc<Allocation>) -> Op {
    let fix = |m: &MemRef| match m.alloc.graph_slot {
        Some(s) => MemRef {
            alloc: memory(s.slot),
            offset: m.offset,
            len: m.len,
        },
        None => m.clone(),
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
                let args: Vec<KernelArg> = l
                    .args
                    .iter()
                    .map(|a| match a {
                        KernelArg::Buffer {
                            mem,
                            access,
                            elem,
                            elem_name,
                            split,
                        } => KernelArg::Buffer {
                            mem: fix(mem),
                            access: *access,
                            elem: *elem,
                            elem_name,
                            split: *split,
                        },
                        other => other.clone(),
                    })
                    .collect();
                l.args = args.into();
            }
        }
        // Collectives are refused during captures, so graphs hold none; external operations
        // may not touch graph memory (the capture refuses them).
        Work::HostFn(_) | Work::Collective(_) | Work::External(_) => {}
    }
    out
}

/// True if `op` touches memory a capture allocated.
pub(crate) fn touches_placeholder(op: &Op) -> bool {
    let mut any = false;
    op.for_each_access(|m, _, _| any |= m.alloc.graph_slot.is_some());
    any
}
