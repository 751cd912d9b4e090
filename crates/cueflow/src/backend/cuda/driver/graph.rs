//! Graphs: creation and destruction, nodes (kernel, memcpy, memset, host, memory allocation
//! and free, event record and wait, child graph, empty, conditional on CUDA 12.3+), their
//! conditional handles, instantiation, in-place updates of an instantiation, and launches.
//!
//! Every node is added after `deps`, nodes of the same graph (D1); the structs passed are the
//! CUDA 12.0 layouts these calls take (`CUDA_KERNEL_NODE_PARAMS` is the `_v2` layout, with
//! `kern` and `ctx`, which `cuGraphAddKernelNode_v2` takes since CUDA 12.0).

use cudarc::driver::sys::{
    self, CUcontext, CUdeviceptr, CUgraph, CUgraphConditionalHandle, CUgraphExec, CUgraphNode,
    CUDA_HOST_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS,
    CUDA_MEM_ALLOC_NODE_PARAMS,
};

use super::library;
use super::version::Func;
use super::{check, CuError, CuResult, Ev, St};

/// A new, empty graph (D2).
pub(in crate::backend::cuda) fn create() -> CuResult<CUgraph> {
    let mut g: CUgraph = std::ptr::null_mut();
    // SAFETY: D2; `g` is a valid out-pointer; flags must be 0.
    check("cuGraphCreate", unsafe { sys::cuGraphCreate(&mut g, 0) })?;
    Ok(g)
}

/// Destroy `g`.
///
/// # Safety
/// `g` is a graph the caller owns (from [`create`] or a capture), destroyed once; no
/// instantiation still needs it as its source (the driver copies a graph at instantiation).
pub(in crate::backend::cuda) unsafe fn destroy(g: CUgraph) {
    // SAFETY: the caller's promise.
    let _ = unsafe { sys::cuGraphDestroy(g) };
}

/// Instantiate `g` with `cuGraphInstantiateWithFlags`'s flags (D1, D2).
pub(in crate::backend::cuda) fn instantiate(g: CUgraph, flags: u64) -> CuResult<CUgraphExec> {
    let mut exec: CUgraphExec = std::ptr::null_mut();
    // SAFETY: D1 (`g` is a complete graph of the context), D2; `exec` is a valid out-pointer.
    check("cuGraphInstantiateWithFlags", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut exec, g, flags)
    })?;
    Ok(exec)
}

/// Write `g` as a Graphviz file at `path`, every detail the driver has of its nodes
/// (`CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE`): a debugging aid (D1, D2).
pub(in crate::backend::cuda) fn debug_dot_print(g: CUgraph, path: &std::ffi::CStr) -> CuResult<()> {
    let verbose = sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32;
    // SAFETY: D1 (`g` is a live graph of the context), D2; `path` is a NUL-terminated string
    // that outlives the call.
    check("cuGraphDebugDotPrint", unsafe {
        sys::cuGraphDebugDotPrint(g, path.as_ptr(), verbose)
    })
}

/// Destroy an instantiation.
///
/// # Safety
/// `exec` came from [`instantiate`], is destroyed once, and no launch of it is pending (G1).
pub(in crate::backend::cuda) unsafe fn exec_destroy(exec: CUgraphExec) {
    // SAFETY: the caller's promise.
    let _ = unsafe { sys::cuGraphExecDestroy(exec) };
}

/// Launch `exec` on `s` (D1: both live, the exec kept until the launch completed, G1; D2).
#[inline]
pub(in crate::backend::cuda) fn launch(exec: CUgraphExec, s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, s.0) })
}

/// Upload `exec` in `s`'s order without running it (GR3).
pub(in crate::backend::cuda) fn upload(exec: CUgraphExec, s: St) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuGraphUpload", unsafe { sys::cuGraphUpload(exec, s.0) })
}

/// A node after `deps` made by `add` (the node's out-pointer, the graph, the dependencies).
#[inline]
fn node(
    call: &'static str,
    add: impl FnOnce(*mut CUgraphNode) -> sys::CUresult,
) -> CuResult<CUgraphNode> {
    let mut n: CUgraphNode = std::ptr::null_mut();
    check(call, add(&mut n))?;
    Ok(n)
}

/// An empty node (D1, D2).
pub(in crate::backend::cuda) fn add_empty(
    g: CUgraph,
    deps: &[CUgraphNode],
) -> CuResult<CUgraphNode> {
    // SAFETY: D1 (`deps` are nodes of `g`), D2; the out-pointer is valid.
    node("cuGraphAddEmptyNode", |n| unsafe {
        sys::cuGraphAddEmptyNode(n, g, deps.as_ptr(), deps.len())
    })
}

/// A graph-memory allocation node; the driver writes the address into `p.dptr` (D1, D2).
pub(in crate::backend::cuda) fn add_mem_alloc(
    g: CUgraph,
    deps: &[CUgraphNode],
    p: &mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CuResult<CUgraphNode> {
    // SAFETY: D1, D2; `p` is a complete parameter set (pool properties zero beyond what is
    // set, `memory::device_pool_props`).
    node("cuGraphAddMemAllocNode", |n| unsafe {
        sys::cuGraphAddMemAllocNode(n, g, deps.as_ptr(), deps.len(), p)
    })
}

/// A node that frees graph memory at `dptr` (D1, D2).
///
/// # Safety
/// `dptr` came from an allocation node (of this graph, or of another instantiation's whose
/// memory is allocated now, GR10), and nothing ordered after this node uses it.
pub(in crate::backend::cuda) unsafe fn add_mem_free(
    g: CUgraph,
    deps: &[CUgraphNode],
    dptr: CUdeviceptr,
) -> CuResult<CUgraphNode> {
    // SAFETY: the caller's promise; D1, D2.
    node("cuGraphAddMemFreeNode", |n| unsafe {
        sys::cuGraphAddMemFreeNode(n, g, deps.as_ptr(), deps.len(), dptr)
    })
}

/// An event record node (D1: the event lives until the exec is destroyed, G6; D2).
pub(in crate::backend::cuda) fn add_event_record(
    g: CUgraph,
    deps: &[CUgraphNode],
    e: Ev,
) -> CuResult<CUgraphNode> {
    // SAFETY: D1, D2.
    node("cuGraphAddEventRecordNode", |n| unsafe {
        sys::cuGraphAddEventRecordNode(n, g, deps.as_ptr(), deps.len(), e.0)
    })
}

/// An event wait node (D1: the event lives until the exec is destroyed, G6; D2).
pub(in crate::backend::cuda) fn add_event_wait(
    g: CUgraph,
    deps: &[CUgraphNode],
    e: Ev,
) -> CuResult<CUgraphNode> {
    // SAFETY: D1, D2.
    node("cuGraphAddEventWaitNode", |n| unsafe {
        sys::cuGraphAddEventWaitNode(n, g, deps.as_ptr(), deps.len(), e.0)
    })
}

/// A host node.
///
/// # Safety
/// `p.userData`, and what `p.fn_` reads through it, stays valid until every instantiation of
/// the graph is destroyed (G1); the function makes no driver call.
pub(in crate::backend::cuda) unsafe fn add_host(
    g: CUgraph,
    deps: &[CUgraphNode],
    p: &CUDA_HOST_NODE_PARAMS,
) -> CuResult<CUgraphNode> {
    // SAFETY: the caller's promise; D1, D2.
    node("cuGraphAddHostNode", |n| unsafe {
        sys::cuGraphAddHostNode(n, g, deps.as_ptr(), deps.len(), p)
    })
}

/// A kernel node.
///
/// # Safety
/// As [`super::module::launch`] for `p.kernelParams` (copied by the driver, G4); the function
/// stays loaded and the memory it uses valid while launches of the graph run (G1, G2).
pub(in crate::backend::cuda) unsafe fn add_kernel(
    g: CUgraph,
    deps: &[CUgraphNode],
    p: &CUDA_KERNEL_NODE_PARAMS,
) -> CuResult<CUgraphNode> {
    // SAFETY: the caller's promise; D1, D2.
    node("cuGraphAddKernelNode_v2", |n| unsafe {
        sys::cuGraphAddKernelNode_v2(n, g, deps.as_ptr(), deps.len(), p)
    })
}

/// A memcpy node of context `ctx`.
///
/// # Safety
/// The ranges `p` describes stay valid while launches of the graph run (G2).
pub(in crate::backend::cuda) unsafe fn add_memcpy(
    g: CUgraph,
    deps: &[CUgraphNode],
    p: &CUDA_MEMCPY3D,
    ctx: CUcontext,
) -> CuResult<CUgraphNode> {
    // SAFETY: the caller's promise; D1, D2.
    node("cuGraphAddMemcpyNode", |n| unsafe {
        sys::cuGraphAddMemcpyNode(n, g, deps.as_ptr(), deps.len(), p, ctx)
    })
}

/// A memset node of context `ctx`.
///
/// # Safety
/// The range `p` describes stays valid while launches of the graph run (G2).
pub(in crate::backend::cuda) unsafe fn add_memset(
    g: CUgraph,
    deps: &[CUgraphNode],
    p: &CUDA_MEMSET_NODE_PARAMS,
    ctx: CUcontext,
) -> CuResult<CUgraphNode> {
    // SAFETY: the caller's promise; D1, D2.
    node("cuGraphAddMemsetNode", |n| unsafe {
        sys::cuGraphAddMemsetNode(n, g, deps.as_ptr(), deps.len(), p, ctx)
    })
}

/// A child graph node: the driver clones `child` into it (D1, D2).
pub(in crate::backend::cuda) fn add_child(
    g: CUgraph,
    deps: &[CUgraphNode],
    child: CUgraph,
) -> CuResult<CUgraphNode> {
    // SAFETY: D1 (`child` is a live graph of the context), D2.
    node("cuGraphAddChildGraphNode", |n| unsafe {
        sys::cuGraphAddChildGraphNode(n, g, deps.as_ptr(), deps.len(), child)
    })
}

/// A conditional handle on `g` for context `ctx` (CUDA 12.3), with its default value and
/// `CU_GRAPH_COND_ASSIGN_DEFAULT` when `reset` (D1, D2).
pub(in crate::backend::cuda) fn conditional_handle(
    g: CUgraph,
    ctx: CUcontext,
    default: u32,
    reset: bool,
) -> CuResult<CUgraphConditionalHandle> {
    if !library::api().has(Func::GraphConditionalHandleCreate) {
        return Err(CuError::missing("cuGraphConditionalHandleCreate"));
    }
    let flags = if reset {
        sys::CU_GRAPH_COND_ASSIGN_DEFAULT
    } else {
        0
    };
    let mut h: CUgraphConditionalHandle = 0;
    // SAFETY: D1, D2; the driver has the function (checked); `h` is a valid out-pointer.
    check("cuGraphConditionalHandleCreate", unsafe {
        sys::cuGraphConditionalHandleCreate(&mut h, g, ctx, default, flags)
    })?;
    Ok(h)
}

/// A conditional node (CUDA 12.3's `cuGraphAddNode_v2`) of `kind` with `bodies` body graphs on
/// `handle`: the node and its body graphs, which the driver made and owns (C2 of
/// `graph_cond.rs`).
pub(in crate::backend::cuda) fn add_conditional(
    g: CUgraph,
    deps: &[CUgraphNode],
    handle: CUgraphConditionalHandle,
    kind: sys::CUgraphConditionalNodeType,
    bodies: u32,
    ctx: CUcontext,
) -> CuResult<(CUgraphNode, Vec<CUgraph>)> {
    if !library::api().has(Func::GraphAddNodeV2) {
        return Err(CuError::missing("cuGraphAddNode_v2"));
    }
    // SAFETY: an all-zero CUgraphNodeParams is the documented "no parameters" value; the
    // fields that matter are set below.
    let mut p: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_: kind,
        size: bodies,
        phGraph_out: std::ptr::null_mut(),
        ctx,
    };
    // SAFETY: D1, D2; the driver has the function (checked); `p` is a complete conditional
    // node's parameters; no edge data.
    let n = node("cuGraphAddNode_v2", |n| unsafe {
        sys::cuGraphAddNode_v2(n, g, deps.as_ptr(), std::ptr::null(), deps.len(), &mut p)
    })?;
    // SAFETY: the driver filled `phGraph_out` with `bodies` graphs, read from the union
    // member written above.
    let out = unsafe { p.__bindgen_anon_1.conditional.phGraph_out };
    let graphs = if out.is_null() {
        Vec::new()
    } else {
        // SAFETY: as above: `bodies` graphs at `out`, valid for the node's lifetime.
        unsafe { std::slice::from_raw_parts(out, bodies as usize) }.to_vec()
    };
    Ok((n, graphs))
}

/// Enable or disable kernel, memcpy or memset node `node` of `exec` (a disabled node is an
/// empty node) for the launches after this call; launches already enqueued keep what they had
/// (D1: `node` is a node of the graph `exec` was instantiated from; D2).
pub(in crate::backend::cuda) fn exec_set_enabled(
    exec: CUgraphExec,
    node: CUgraphNode,
    enabled: bool,
) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuGraphNodeSetEnabled", unsafe {
        sys::cuGraphNodeSetEnabled(exec, node, enabled as u32)
    })
}

/// Point record node `node` of `exec` at `e` (D1: `e` kept until the exec is destroyed, G6).
pub(in crate::backend::cuda) fn exec_set_record_event(
    exec: CUgraphExec,
    node: CUgraphNode,
    e: Ev,
) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuGraphExecEventRecordNodeSetEvent", unsafe {
        sys::cuGraphExecEventRecordNodeSetEvent(exec, node, e.0)
    })
}

/// Point wait node `node` of `exec` at `e` (D1: `e` kept until the exec is destroyed, G6).
pub(in crate::backend::cuda) fn exec_set_wait_event(
    exec: CUgraphExec,
    node: CUgraphNode,
    e: Ev,
) -> CuResult<()> {
    // SAFETY: D1, D2.
    check("cuGraphExecEventWaitNodeSetEvent", unsafe {
        sys::cuGraphExecEventWaitNodeSetEvent(exec, node, e.0)
    })
}

/// New parameters for host node `node` of `exec`.
///
/// # Safety
/// As [`add_host`].
pub(in crate::backend::cuda) unsafe fn exec_set_host(
    exec: CUgraphExec,
    node: CUgraphNode,
    p: &CUDA_HOST_NODE_PARAMS,
) -> CuResult<()> {
    // SAFETY: the caller's promise; D1, D2.
    check("cuGraphExecHostNodeSetParams", unsafe {
        sys::cuGraphExecHostNodeSetParams(exec, node, p)
    })
}

/// New parameters for kernel node `node` of `exec`.
///
/// # Safety
/// As [`add_kernel`].
pub(in crate::backend::cuda) unsafe fn exec_set_kernel(
    exec: CUgraphExec,
    node: CUgraphNode,
    p: &CUDA_KERNEL_NODE_PARAMS,
) -> CuResult<()> {
    // SAFETY: the caller's promise; D1, D2.
    check("cuGraphExecKernelNodeSetParams_v2", unsafe {
        sys::cuGraphExecKernelNodeSetParams_v2(exec, node, p)
    })
}

/// New parameters for memcpy node `node` of `exec`.
///
/// # Safety
/// As [`add_memcpy`].
pub(in crate::backend::cuda) unsafe fn exec_set_memcpy(
    exec: CUgraphExec,
    node: CUgraphNode,
    p: &CUDA_MEMCPY3D,
    ctx: CUcontext,
) -> CuResult<()> {
    // SAFETY: the caller's promise; D1, D2.
    check("cuGraphExecMemcpyNodeSetParams", unsafe {
        sys::cuGraphExecMemcpyNodeSetParams(exec, node, p, ctx)
    })
}

/// New parameters for memset node `node` of `exec`.
///
/// # Safety
/// As [`add_memset`].
pub(in crate::backend::cuda) unsafe fn exec_set_memset(
    exec: CUgraphExec,
    node: CUgraphNode,
    p: &CUDA_MEMSET_NODE_PARAMS,
    ctx: CUcontext,
) -> CuResult<()> {
    // SAFETY: the caller's promise; D1, D2.
    check("cuGraphExecMemsetNodeSetParams", unsafe {
        sys::cuGraphExecMemsetNodeSetParams(exec, node, p, ctx)
    })
}
