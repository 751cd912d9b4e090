//! Conditional nodes on the host backend (GR9): a conditional node runs as one engine task that
//! reads its condition when the node starts and runs the chosen body — for a while node, again
//! and again while the condition holds — node after node in the body's topological order, on
//! that one engine thread (nested conditional nodes likewise). The body's kernels set the
//! condition through their host side (`BlockArgs::set_condition`), so the next check sees it.
//!
//! Rules:
//! 1. A body runs as its nodes' dependencies allow, one node at a time: the same results as
//!    CUDA, with less parallelism inside the body.
//! 2. Conditions that reset take their default value when a launch starts
//!    ([`Compiled::conds`](super::graph::Compiled), see `start_graph`).
//! 3. Each instantiation has conditions of its own ([`private_conditions`]), as each CUDA
//!    executable graph has its handles' values: two instantiations of one graph launched at
//!    once on two streams each count their own loop.

use crate::backend::contract::node_op::NodeOp;
use std::collections::HashMap;
use std::sync::Arc;

use super::exec::{parts, run_parts};
use crate::backend::contract::conditional::{map_condition_args, CondCell};
use crate::backend::contract::graph::CondNode;
use crate::backend::contract::graph::{conditions, GraphNode, GraphWork};
use crate::backend::contract::op::{HostCall, Op, Work};

/// One step of a compiled body.
enum Step {
    Op(Op),
    Cond(Arc<Compiled>),
}

/// A conditional node with its bodies compiled.
struct Compiled {
    node: CondNode,
    bodies: Vec<Vec<Step>>,
}

fn compile_body(nodes: &[GraphNode]) -> Vec<Step> {
    nodes
        .iter()
        .filter_map(|n| match &n.work {
            GraphWork::Op(op) => Some(Step::Op(Op::clone(op))),
            GraphWork::Conditional(c) => Some(Step::Cond(Arc::new(compile(c)))),
            _ => None,
        })
        .collect()
}

fn compile(c: &CondNode) -> Compiled {
    Compiled {
        node: c.clone(),
        bodies: c.bodies.iter().map(|b| compile_body(b)).collect(),
    }
}

fn run_steps(steps: &[Step]) {
    for s in steps {
        match s {
            Step::Op(op) => run_parts(op, 0..parts(op)),
            Step::Cond(c) => run(c),
        }
    }
}

/// Rule 1 (the choice of body: `CondNode::pick`).
fn run(c: &Compiled) {
    loop {
        let Some(body) = c.node.pick() else { return };
        let i = c
            .node
            .bodies
            .iter()
            .position(|b| Arc::ptr_eq(b, body))
            .unwrap_or(0);
        run_steps(&c.bodies[i]);
        if c.node.kind != crate::types::CondKind::While {
            return;
        }
    }
}

/// The engine task a conditional node runs as.
pub(super) fn op_of(c: &CondNode) -> Op {
    let compiled = Arc::new(compile(c));
    let mut call = HostCall::new(Arc::new(move || run(&compiled)));
    call.name = Some(format!("{:?} node", c.kind).to_lowercase().into());
    Op::new(Work::HostFn(Box::new(call)))
}

/// Rule 3: `nodes` with a condition of their own in place of each condition of their
/// conditional nodes (kernel arguments naming one included, bodies too), and the ids the
/// copies have in place of the originals'; `None` when they have no conditional node.
pub(super) fn private_conditions(nodes: &[GraphNode]) -> Option<(Vec<GraphNode>, CondIds)> {
    let cells = conditions(nodes);
    if cells.is_empty() {
        return None;
    }
    let copies: HashMap<u64, Arc<CondCell>> =
        cells.iter().map(|c| (c.id, c.private_copy())).collect();
    let ids = CondIds(copies.iter().map(|(&old, new)| (old, new.id)).collect());
    Some((rewrite(nodes, &copies, &ids), ids))
}

/// Rule 3: the id of each original condition's copy.
#[derive(Default)]
pub(super) struct CondIds(HashMap<u64, u64>);

impl CondIds {
    /// `op` with the copies' ids in its condition arguments.
    pub fn op(&self, op: &Op) -> Op {
        match &op.work {
            Work::Launch(l) if !self.0.is_empty() => {
                match map_condition_args(l, &|id| self.0.get(&id).copied().unwrap_or(id)) {
                    Some(l) => {
                        let mut out = op.clone();
                        out.work = Work::Launch(l);
                        out
                    }
                    None => op.clone(),
                }
            }
            _ => op.clone(),
        }
    }
}

fn rewrite(
    nodes: &[GraphNode],
    copies: &HashMap<u64, Arc<CondCell>>,
    ids: &CondIds,
) -> Vec<GraphNode> {
    nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            match &n.work {
                GraphWork::Op(op) => n.work = GraphWork::Op(NodeOp::new(ids.op(op))),
                GraphWork::Conditional(c) => {
                    n.work = GraphWork::Conditional(Box::new(CondNode {
                        kind: c.kind,
                        cell: copies.get(&c.cell.id).cloned().unwrap_or(c.cell.clone()),
                        bodies: c
                            .bodies
                            .iter()
                            .map(|b| Arc::new(rewrite(b, copies, ids)))
                            .collect(),
                    }))
                }
                _ => {}
            }
            n
        })
        .collect()
}
