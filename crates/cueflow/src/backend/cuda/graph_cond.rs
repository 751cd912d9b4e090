//! Conditional nodes on CUDA (GR9, CUDA 12.4+; if/else and switch need 12.8+): each condition
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

use super::driver::check;
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
    let mut out = HashMap::new();
    for c in cells {
        let mut h: sys::CUgraphConditionalHandle = 0;
        let flags = if c.reset {
            sys::CU_GRAPH_COND_ASSIGN_DEFAULT
        } else {
            0
        };
        // SAFETY: D2; `h` is a valid out-pointer, `graph` the instantiation's graph, the
        // context current.
        check("cuGraphConditionalHandleCreate", unsafe {
            sys::cuGraphConditionalHandleCreate(&mut h, graph, shared.ctx.raw(), c.default, flags)
        })
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
    let type_ = match c.kind {
        CondKind::If | CondKind::IfElse => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
        CondKind::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
        CondKind::Switch => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
    };
    // SAFETY: an all-zero CUgraphNodeParams is the documented "no parameters" value; the
    // fields that matter are set below.
    let mut p: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_,
        size: c.bodies.len() as u32,
        phGraph_out: std::ptr::null_mut(),
        ctx: shared.ctx.raw(),
    };
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: D2; `deps` are nodes of `b.graph`; `p` is a complete conditional node's
    // parameters; no edge data.
    check("cuGraphAddNode_v2", unsafe {
        sys::cuGraphAddNode_v2(
            &mut node,
            b.graph,
            deps.as_ptr(),
            std::ptr::null(),
            deps.len(),
            &mut p,
        )
    })
    .map_err(|e| shared.fail(e, None))?;
    // SAFETY: the driver filled `phGraph_out` with `size` body graphs (C2), read from the
    // union member written above.
    let bodies: Vec<CUgraph> = unsafe {
        let out = p.__bindgen_anon_1.conditional.phGraph_out;
        std::slice::from_raw_parts(out, c.bodies.len()).to_vec()
    };
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
