//! Conditional nodes on CUDA (GR9; `if` and `while` need a CUDA 12.3 driver, `if`/`else` and
//! `switch` 12.8, else [`Error::Unsupported`](crate::Error::Unsupported) names the version): each condition
//! of the graph becomes a driver conditional handle made on the instantiation's graph
//! (`cuGraphConditionalHandleCreate`, with `CU_GRAPH_COND_ASSIGN_DEFAULT` when it resets at
//! each launch), every kernel argument that names the condition gets the handle in its place
//! (the kernel calls `cudaGraphSetConditional` on it), and a conditional node is added with
//! `cuGraphAddNode_v2`; the driver creates its body graphs, which are filled with the body's
//! nodes like the top-level graph.
//!
//! Rules (cited by the `// SAFETY:` comments as C1–C2):
//! * **C1.** Handles are made before any node, on the top-level graph, so kernels anywhere in
//!   the graph (before the conditional node, or in its bodies) can name them.
//! * **C2.** Body graphs belong to their conditional node: the driver made them and destroys
//!   them with the top-level graph, so they are filled and never destroyed here.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUgraph, CUgraphNode};

use super::driver::{self, graph as dg, version::Feature};
use super::graph::Builder;
use super::shared::DeviceShared;
use crate::backend::contract::conditional::{CondCell, CondKind, ConditionId};
use crate::backend::contract::graph::CondNode;
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::error::Result;

/// C1: a driver handle for every condition of `nodes` (context current, D2).
pub(super) fn create_handles(
    shared: &Arc<DeviceShared>,
    graph: CUgraph,
    nodes: &[GraphNode],
) -> Result<HashMap<u64, sys::CUgraphConditionalHandle>> {
    let mut cells: Vec<Arc<CondCell>> = Vec::new();
    for n in nodes {
        if let GraphWork::Conditional(c) = &n.work {
            c.cells(&mut cells);
        }
    }
    if !cells.is_empty() {
        driver::library::api().require(Feature::ConditionalIfWhile)?;
    }
    let mut out = HashMap::new();
    for c in cells {
        // D1: `graph` is the instantiation's; D2: the context is current.
        let h = dg::conditional_handle(graph, shared.ctx.raw(), c.default, c.reset)
            .map_err(|e| shared.fail(e, None))?;
        out.insert(c.id, h);
    }
    Ok(out)
}

/// `l` with every condition-id argument replaced by its driver handle (a clone only when it
/// has one).
pub(super) fn with_handles(
    l: &Launch,
    conds: &HashMap<u64, sys::CUgraphConditionalHandle>,
) -> Launch {
    let is_cond = |a: &KernelArg| matches!(a, KernelArg::Scalar { ty, .. } if *ty == TypeId::of::<ConditionId>());
    if !l.args.iter().any(is_cond) {
        return l.clone();
    }
    let args: Vec<KernelArg> = l
        .args
        .iter()
        .map(|a| match a {
            KernelArg::Scalar {
                bytes,
                size,
                ty,
                ty_name,
            } if *ty == TypeId::of::<ConditionId>() => {
                let id = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
                let h = conds.get(&id).copied().unwrap_or(0);
                KernelArg::Scalar {
                    bytes: smallvec::SmallVec::from_slice(&h.to_le_bytes()),
                    size: *size,
                    ty: *ty,
                    ty_name,
                }
            }
            other => other.clone(),
        })
        .collect();
    let mut out = l.clone();
    out.args = args.into();
    out
}

/// Add conditional node `c` after `deps` to `b`'s graph, and fill its bodies (C2).
pub(super) fn add_conditional(
    b: &mut Builder<'_>,
    c: &CondNode,
    deps: &[CUgraphNode],
) -> Result<CUgraphNode> {
    let shared = b.shared;
    // G1/G2: the bodies' operations (and their memory) live as long as the exec.
    b.handle.bodies.lock().push(c.clone());
    let handle = b.conds.get(&c.cell.id).copied().unwrap_or(0);
    let (type_, feature) = match c.kind {
        CondKind::If => (
            sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            Feature::ConditionalIfWhile,
        ),
        CondKind::While => (
            sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
            Feature::ConditionalIfWhile,
        ),
        CondKind::IfElse => (
            sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            Feature::ConditionalElseSwitch,
        ),
        CondKind::Switch => (
            sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
            Feature::ConditionalElseSwitch,
        ),
    };
    driver::library::api().require(feature)?;
    // D1: `deps` are nodes of `b.graph`; D2.
    let (node, bodies) = dg::add_conditional(
        b.graph,
        deps,
        handle,
        type_,
        c.bodies.len() as u32,
        shared.ctx.raw(),
    )
    .map_err(|e| shared.fail(e, None))?;
    for (graph, body) in bodies.into_iter().zip(&c.bodies) {
        let mut sub = Builder {
            shared,
            handle: b.handle,
            graph,
            conds: b.conds.clone(),
            nodes: Vec::with_capacity(body.len()),
            memory: Vec::new(),
        };
        for n in body.iter() {
            let deps: Vec<CUgraphNode> = n.deps.iter().map(|&d| sub.nodes[d]).collect();
            let (node, _) = sub.add_node(&n.work, &deps)?;
            sub.nodes.push(node);
        }
    }
    Ok(node)
}
