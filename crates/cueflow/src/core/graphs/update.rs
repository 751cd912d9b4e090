//! Updates in place (GR6, rule 4 of [`crate::core::graphs::exec`]): whether a graph of the same
//! shape may replace an instantiation's nodes, and what changes in the backend's graph.
//!
//! Rules:
//! 1. The shape stays: as many nodes, each with the same dependencies and of the same kind.
//! 2. An operation node may change kernel scalars, kernel buffers of the same size, access
//!    and element type, and the ranges of copies and memsets of the same length and memory
//!    kinds; a host function node its function. An external operation is the caller's work:
//!    only the same one passes.
//! 3. Memory nodes keep their sizes and slots, conditional nodes their condition, kind and
//!    bodies, free nodes of another graph's memory that memory; event nodes may name another
//!    event.
//! 4. Everything is checked before anything changes.

use std::sync::Arc;

use crate::backend::contract::device::BackendGraph;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::contract::op::{Op, Work};
use crate::core::graphs::host_nodes::HostNodes;
use crate::error::{Error, Result};

/// What an update changes in the backend's graph: the operation nodes (rule 2) and the event
/// nodes that name another event (rule 3).
pub(crate) struct Changes {
    ops: Vec<usize>,
    events: Vec<(usize, Arc<dyn BackendEvent>)>,
}

/// What changes at one node.
enum Change {
    None,
    Op,
    Event(Arc<dyn BackendEvent>),
}

/// Rules 1–4: what changes when `new` replaces `old`, or why it cannot.
pub(crate) fn changes(new: &[GraphNode], old: &[GraphNode]) -> Result<Changes> {
    if new.len() != old.len() {
        return Err(Error::GraphUpdate(format!(
            "the graph has {} nodes; this instantiation has {}",
            new.len(),
            old.len()
        )));
    }
    let mut changes = Changes {
        ops: Vec::new(),
        events: Vec::new(),
    };
    for (i, (new, old)) in new.iter().zip(old).enumerate() {
        if new.deps != old.deps {
            return Err(Error::GraphUpdate(format!(
                "node {i} depends on nodes {:?}; in this instantiation on {:?}",
                new.deps, old.deps
            )));
        }
        match node_change(i, &new.work, &old.work)? {
            Change::None => {}
            Change::Op => changes.ops.push(i),
            Change::Event(e) => changes.events.push((i, e)),
        }
    }
    Ok(changes)
}

impl Changes {
    /// Rule 4 at the backend: ask it about every changed node before any changes.
    pub fn check(
        &self,
        backend: &dyn BackendGraph,
        nodes: &[GraphNode],
        hosts: &HostNodes,
    ) -> Result<()> {
        for &i in &self.ops {
            if let Some(op) = nodes[i].op() {
                backend.check_update(i, &hosts.wrap_op(i, op))?;
            }
        }
        Ok(())
    }

    /// Give `backend` the changed nodes of `nodes` (the graph that replaces its own).
    pub fn apply(
        self,
        backend: &dyn BackendGraph,
        nodes: &[GraphNode],
        hosts: &HostNodes,
    ) -> Result<()> {
        for i in self.ops {
            if let Some(op) = nodes[i].op() {
                backend.update(i, &hosts.wrap_op(i, op))?;
            }
        }
        for (i, event) in self.events {
            backend.set_event(i, &event)?;
        }
        Ok(())
    }
}

/// Rules 1–3 for node `i`.
fn node_change(i: usize, new: &GraphWork, old: &GraphWork) -> Result<Change> {
    Ok(match (new, old) {
        (GraphWork::Op(a), GraphWork::Op(b)) => {
            same_op(a, b).map_err(|why| Error::GraphUpdate(format!("node {i}: {why}")))?;
            Change::Op
        }
        (GraphWork::EventRecord(a), GraphWork::EventRecord(b))
        | (GraphWork::EventWait(a), GraphWork::EventWait(b)) => match Arc::ptr_eq(a, b) {
            true => Change::None,
            false => Change::Event(a.clone()),
        },
        (GraphWork::Alloc { bytes: a, .. }, GraphWork::Alloc { bytes: b, .. }) if a == b => {
            Change::None
        }
        (GraphWork::Free { slot: a }, GraphWork::Free { slot: b }) if a == b => Change::None,
        (GraphWork::Empty, GraphWork::Empty) => Change::None,
        (GraphWork::Conditional(a), GraphWork::Conditional(b))
            if Arc::ptr_eq(&a.cell, &b.cell)
                && a.kind == b.kind
                && a.bodies.len() == b.bodies.len()
                && a.bodies
                    .iter()
                    .zip(&b.bodies)
                    .all(|(x, y)| Arc::ptr_eq(x, y)) =>
        {
            Change::None
        }
        (GraphWork::FreeOther { mem: a }, GraphWork::FreeOther { mem: b }) if Arc::ptr_eq(a, b) => {
            Change::None
        }
        _ => {
            return Err(Error::GraphUpdate(format!(
                "node {i} is a different kind of node than in this instantiation"
            )))
        }
    })
}

/// Rule 2: `new` may replace `old` in place; else why not.
fn same_op(new: &Op, old: &Op) -> std::result::Result<(), String> {
    match (&new.work, &old.work) {
        (Work::Launch(a), Work::Launch(b)) => same_launch(a, b),
        (Work::Copy { dst: d1, src: s1 }, Work::Copy { dst: d2, src: s2 })
        | (Work::Word { dst: d1, src: s1 }, Work::Word { dst: d2, src: s2 }) => {
            if d1.len != d2.len || (s1.kind(), d1.kind()) != (s2.kind(), d2.kind()) {
                return Err(format!(
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
                return Err(format!(
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
        (Work::External(a), Work::External(_)) => Err(format!(
            "external operation `{}` is not the one of this instantiation: its work cannot be \
             updated in place (instantiate the new graph)",
            a.name
        )),
        _ => Err(format!(
            "a {} in place of a {}",
            new.kind().label(),
            old.kind().label()
        )),
    }
}

/// Rule 2 for a launch: the same kernel and launch shape, arguments that may change in place.
fn same_launch(a: &Launch, b: &Launch) -> std::result::Result<(), String> {
    if !Arc::ptr_eq(&a.kernel, &b.kernel) {
        if a.kernel.name == b.kernel.name {
            return Err(format!(
                "another `Kernel` named `{}` in place of the node's (a node keeps the kernel \
                 object it was made with: pass that one, or a clone of it)",
                a.kernel.name
            ));
        }
        return Err(format!(
            "kernel `{}` in place of `{}`",
            a.kernel.name, b.kernel.name
        ));
    }
    if (a.grid, a.block, a.shared_bytes) != (b.grid, b.block, b.shared_bytes) {
        return Err(format!(
            "launch shape grid {:?} block {:?} shared {} in place of grid {:?} block {:?} \
             shared {}",
            a.grid, a.block, a.shared_bytes, b.grid, b.block, b.shared_bytes
        ));
    }
    if a.args.len() != b.args.len() {
        return Err(format!(
            "{} arguments in place of {}",
            a.args.len(),
            b.args.len()
        ));
    }
    match a
        .args
        .iter()
        .zip(b.args.iter())
        .position(|(x, y)| !same_arg(x, y))
    {
        Some(j) => Err(format!(
            "argument {j} changes type, access or size (only scalars of the same type and \
             buffers of the same size can be updated)"
        )),
        None => Ok(()),
    }
}

/// Rule 2 for a kernel argument: a scalar of the same type and size, or a buffer of the same
/// size, access, element type and side of the bus.
fn same_arg(new: &KernelArg, old: &KernelArg) -> bool {
    match (new, old) {
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
        ) => m1.len == m2.len && a1 == a2 && e1 == e2 && m1.kind().side() == m2.kind().side(),
        (
            KernelArg::Scalar {
                ty: t1, size: s1, ..
            },
            KernelArg::Scalar {
                ty: t2, size: s2, ..
            },
        ) => t1 == t2 && s1 == s2,
        _ => false,
    }
}
