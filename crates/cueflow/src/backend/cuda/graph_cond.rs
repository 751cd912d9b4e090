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
//! * **C3.** A condition without reset starts at 0 at the first launch of each instantiation
//!   and keeps what the last launch left (GR9, as the host backend's cells do). The driver
//!   defines no first value without `CU_GRAPH_COND_ASSIGN_DEFAULT` (a fresh handle may hold
//!   what a destroyed graph's handle left), so the top-level graph gets one *start node* per
//!   such condition: a kernel node ([`START_SOURCE`]) that sets it to 0, which every root node
//!   of the graph depends on. After the exec's first launch is enqueued, the start nodes are
//!   disabled in the exec (`cuGraphNodeSetEnabled`: later launches only; a disabled node is an
//!   empty node), under a lock that every launch of the exec takes, so no second launch runs
//!   them ([`FirstLaunch`]). Each instantiation builds its own graph and exec, so each has its
//!   own start nodes; in-place updates (GR6) change other nodes only. Graphs whose conditions
//!   all reset get no start node.
//! * **C4.** The conditional nodes of one graph (the top-level graph, and each body) run one
//!   after another: each depends on the one added before it ([`Chain`]). Two while loops of one
//!   graph running at once make the driver fail the launch (`CUDA_ERROR_LAUNCH_FAILED`, sticky
//!   for the process): `benches/cuda/while_load_probe.cu` faults within 20 s alone on an H100
//!   (driver 580.159) with two unordered while nodes, and ran 111,918 iterations clean with
//!   the same graph and one edge between them (its modes c, d and s). Nodes are added in a
//!   topological order (dependencies are earlier nodes), so the extra edges make no cycle; they
//!   only take away concurrency between conditional nodes, which the spec never promises.
//! * **C5.** Graphs with conditional nodes run one at a time on a device: each launch of one
//!   waits for the device's previous such launch, on whichever stream (an event, the device's
//!   `cond_gate`, recorded after each). The driver fails these too: in the same probe, two
//!   graphs of one while loop each, launched on two streams at once, fault alone within 20 s
//!   (mode p; a while loop beside an if node too, mode r), and ran 120,688 iterations clean
//!   on one stream (mode q). Launches of graphs without conditional nodes are not touched.
//! * **C6.** No node that makes the device reach host memory (a kernel on pinned, mapped,
//!   registered or managed memory; a copy of managed memory) runs beside a conditional node
//!   of its graph: each such node depends on the conditional node added before it, and the
//!   next conditional node depends on it ([`Chain`]). Kernels on host memory beside a while
//!   loop fail the launch the same way (`graph_host_reach.rs` has the probes).
//! * **C7.** Across the device's streams, work that reaches host memory (C6's kind, and
//!   graphs without conditional nodes that hold such a node) and launches of graphs with
//!   conditional nodes never run at once: each waits for the other kind enqueued before it,
//!   once the device has instantiated a graph with conditional nodes
//!   (`host_reach_gate.rs`). The driver fails these the same way.

use std::any::TypeId;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock};

use cudarc::driver::sys::{self, CUgraph, CUgraphConditionalHandle, CUgraphExec, CUgraphNode};
use parking_lot::Mutex;

use super::driver::{self, graph as dg, version::Feature, CuResult, St};
use super::graph::Builder;
use super::shared::DeviceShared;
use crate::backend::contract::graph::CondNode;
use crate::backend::contract::graph::{conditions, GraphNode, GraphWork};
use crate::backend::contract::kernel::{KernelArg, KernelInner, Launch};
use crate::error::{Error, Result};
use crate::types::CudaCode;
use crate::types::{CondKind, ConditionId};

/// What a node is to [`Chain`]: a conditional node, a node that reaches host memory (C6,
/// [`reaches_host`](super::graph_host_reach::reaches_host)), or neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Conditional,
    HostReach,
    Other,
}

impl Role {
    pub fn of(work: &GraphWork) -> Role {
        match work {
            GraphWork::Conditional(_) => Role::Conditional,
            w if super::graph_host_reach::reaches_host(w) => Role::HostReach,
            _ => Role::Other,
        }
    }
}

/// A node's dependencies as the driver takes them: inline up to four (one allocation a node
/// less in an instantiation).
pub(super) type DriverDeps<N> = smallvec::SmallVec<[N; 4]>;

/// C4 and C6: the extra dependencies that make a graph's conditional nodes run one after
/// another, and never beside a node that reaches host memory. Nodes are added in a
/// topological order, so an edge from an earlier node to a later one makes no cycle. Generic
/// over the node type so that the rules are tested without a driver.
pub(super) struct Chain<N> {
    /// The conditional node added last.
    last: Option<N>,
    /// Nodes reaching host memory added since then.
    host: Vec<N>,
}

impl<N: Copy + PartialEq> Chain<N> {
    pub fn new() -> Self {
        Chain {
            last: None,
            host: Vec::new(),
        }
    }

    /// Add to `deps`, for the node about to be added: for a conditional node, the conditional
    /// node before it (C4) and the nodes reaching host memory since (C6); for a node reaching
    /// host memory, the conditional node before it (C6). None that is a dependency already.
    #[inline]
    pub fn order(&self, role: Role, deps: &mut DriverDeps<N>) {
        let mut add = |n: N| {
            if !deps.contains(&n) {
                deps.push(n);
            }
        };
        match role {
            Role::Conditional => self
                .last
                .into_iter()
                .chain(self.host.iter().copied())
                .for_each(&mut add),
            Role::HostReach => self.last.into_iter().for_each(&mut add),
            Role::Other => {}
        }
    }

    /// Note the node just added.
    #[inline]
    pub fn added(&mut self, role: Role, node: N) {
        match role {
            Role::Conditional => {
                self.last = Some(node);
                self.host.clear();
            }
            Role::HostReach => self.host.push(node),
            Role::Other => {}
        }
    }
}

/// The start kernel (C3): condition `h` takes `value`.
const START_SOURCE: &str = r#"
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);
extern "C" __global__ void cf_condition_start(cudaGraphConditionalHandle h, unsigned int value) {
    cudaGraphSetConditional(h, value);
}
"#;

/// The value a condition without reset starts at (C3; GR9, `Graph::condition`).
const START_VALUE: u32 = 0;

/// The start kernel, compiled once per device (the module cache).
static START: LazyLock<Arc<KernelInner>> = LazyLock::new(|| {
    Arc::new(KernelInner {
        name: "cf_condition_start".into(),
        host: None,
        cuda: Some(CudaCode::Source {
            code: START_SOURCE.into(),
            entry: "cf_condition_start".into(),
            options: Default::default(),
        }),
        loaded: Default::default(),
    })
});

/// The driver's handles of a graph's conditions (C1), and those that need a start node (C3).
pub(super) struct Handles {
    /// By condition id.
    pub by_id: HashMap<u64, CUgraphConditionalHandle>,
    /// The handles of the conditions without reset.
    pub unreset: Vec<CUgraphConditionalHandle>,
}

/// C1: a driver handle for every condition of `nodes` (context current, D2).
pub(super) fn create_handles(
    shared: &Arc<DeviceShared>,
    graph: CUgraph,
    nodes: &[GraphNode],
) -> Result<Handles> {
    let cells = conditions(nodes);
    if !cells.is_empty() {
        driver::library::api().require(Feature::ConditionalIfWhile)?;
    }
    let mut out = Handles {
        by_id: HashMap::new(),
        unreset: Vec::new(),
    };
    for c in cells {
        // D1: `graph` is the instantiation's; D2: the context is current.
        let h = dg::conditional_handle(graph, shared.ctx.raw(), c.default, c.reset)
            .map_err(|e| shared.fail(e, None))?;
        out.by_id.insert(c.id, h);
        if !c.reset {
            out.unreset.push(h);
        }
    }
    Ok(out)
}

/// C3: a start node in `graph` for each handle of `unreset` (none when it is empty), before
/// any other node (context current, D2).
pub(super) fn add_start_nodes(
    shared: &Arc<DeviceShared>,
    graph: CUgraph,
    unreset: &[CUgraphConditionalHandle],
) -> Result<Vec<CUgraphNode>> {
    if unreset.is_empty() {
        return Ok(Vec::new());
    }
    let k = super::launch::load(shared, &START).map_err(|e| {
        Error::Unsupported(format!(
            "a condition without reset needs cueflow's condition-start kernel on CUDA, which \
             could not be had: {e}"
        ))
    })?;
    let mut nodes = Vec::with_capacity(unreset.len());
    for &handle in unreset {
        let (mut h, mut v) = (handle, START_VALUE);
        let mut params = [
            &mut h as *mut CUgraphConditionalHandle as *mut c_void,
            &mut v as *mut u32 as *mut c_void,
        ];
        let p = sys::CUDA_KERNEL_NODE_PARAMS {
            func: k.func,
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 1,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: D2; the two parameters (an 8-byte handle, a 4-byte value, as the kernel
        // declares them) outlive the call, which copies them (G4); the function stays loaded
        // while the exec handle holds the device (G1); the kernel touches no memory.
        let node = unsafe { dg::add_kernel(graph, &[], &p) }.map_err(|e| shared.fail(e, None))?;
        nodes.push(node);
    }
    Ok(nodes)
}

/// C3: an exec's start nodes, enabled until its first launch was enqueued.
pub(super) struct FirstLaunch {
    nodes: Vec<CUgraphNode>,
    /// True until the first launch was enqueued; held across every launch of the exec.
    pending: Mutex<bool>,
}

impl FirstLaunch {
    /// The start nodes `nodes` of an exec not launched yet; `None` when there are none.
    pub fn new(nodes: Vec<CUgraphNode>) -> Option<FirstLaunch> {
        (!nodes.is_empty()).then(|| FirstLaunch {
            nodes,
            pending: Mutex::new(true),
        })
    }

    /// Launch `exec` on `s` (D1, D2, as [`dg::launch`]); after its first launch, disable the
    /// start nodes for the launches that follow. `Err`: nothing was enqueued; `Ok(Err)`: the
    /// launch was enqueued, and disabling the start nodes failed.
    pub fn launch(&self, exec: CUgraphExec, s: St) -> CuResult<CuResult<()>> {
        let mut pending = self.pending.lock();
        dg::launch(exec, s)?;
        if !std::mem::replace(&mut *pending, false) {
            return Ok(Ok(()));
        }
        // D1: the start nodes are nodes of the graph `exec` was instantiated from.
        Ok(self
            .nodes
            .iter()
            .try_for_each(|&n| dg::exec_set_enabled(exec, n, false)))
    }
}

/// `l` with every condition-id argument replaced by its driver handle (a clone only when it
/// has one).
#[inline]
pub(super) fn with_handles<'l>(
    l: &'l Launch,
    conds: &HashMap<u64, sys::CUgraphConditionalHandle>,
) -> Cow<'l, Launch> {
    let is_cond = |a: &KernelArg| matches!(a, KernelArg::Scalar { ty, .. } if *ty == TypeId::of::<ConditionId>());
    if !l.args.iter().any(is_cond) {
        return Cow::Borrowed(l);
    }
    Cow::Owned(handles_replaced(l, conds))
}

/// [`with_handles`] for a launch that has a condition-id argument: out of line, so that the
/// launches of a graph without conditional nodes pay one scan of their arguments.
#[cold]
fn handles_replaced(l: &Launch, conds: &HashMap<u64, sys::CUgraphConditionalHandle>) -> Launch {
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
    out.set_args(args.into());
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
    b.handle.borrowed.bodies.lock().push(c.clone());
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
            placeholders: true,
            own_records: b.own_records,
            last_kernel: Default::default(),
        };
        let mut chain = Chain::new();
        for n in body.iter() {
            let mut deps: DriverDeps<CUgraphNode> = n.deps.iter().map(|&d| sub.nodes[d]).collect();
            let role = Role::of(&n.work);
            chain.order(role, &mut deps);
            let (node, _) = sub.add_node(&n.work, &deps)?;
            chain.added(role, node);
            sub.nodes.push(node);
        }
    }
    Ok(node)
}

#[cfg(test)]
mod chain_tests {
    use super::{Chain, Role};

    fn chained(roles: &[Role], given: &[&[usize]]) -> Vec<Vec<usize>> {
        let mut chain = Chain::new();
        let mut got = Vec::new();
        for (i, (&role, deps)) in roles.iter().zip(given).enumerate() {
            let mut deps = super::DriverDeps::from_slice(deps);
            chain.order(role, &mut deps);
            chain.added(role, i);
            got.push(deps.to_vec());
        }
        got
    }

    /// C4: nodes 0..6 where 1, 3 and 4 are conditional: 3 waits for 1, 4 for 3, and no other
    /// node gets an extra dependency; one already there is not added twice.
    #[test]
    fn c4_conditional_nodes_run_one_after_another() {
        use Role::{Conditional as C, Other as O};
        let given: [&[usize]; 6] = [&[], &[], &[0], &[], &[3], &[1]];
        let got = chained(&[O, C, O, C, C, O], &given);
        let want: Vec<Vec<usize>> = vec![vec![], vec![], vec![0], vec![1], vec![3], vec![1]];
        assert_eq!(got, want);
    }

    /// C6: nodes reaching host memory (0, 2, 3, 6) come before the next conditional node (1
    /// after 0; 4 after 2 and 3) and after the last one (2, 3 after 1; 6 after 4); other
    /// nodes (5) get nothing. So none runs beside a conditional node.
    #[test]
    fn c6_nodes_reaching_host_memory_never_run_beside_a_conditional_node() {
        use Role::{Conditional as C, HostReach as H, Other as O};
        let given: [&[usize]; 7] = [&[], &[], &[], &[2], &[], &[], &[5]];
        let got = chained(&[H, C, H, H, C, O, H], &given);
        let want: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![1],
            vec![2, 1],
            vec![1, 2, 3],
            vec![],
            vec![5, 4],
        ];
        assert_eq!(got, want);
    }
}
