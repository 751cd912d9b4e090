//! Graphs: captured work (GR1) that can be instantiated once and launched many times as one unit
//! in a stream's order (GR3), keeping every buffer it touches alive (GR4).

use std::panic::Location;
use std::sync::Arc;

use crate::api::device::Device;
use crate::api::stream::Stream;
use crate::core::graphs::capture::Captured;
use crate::core::graphs::def::{label, node_type, GraphDef};
use crate::core::graphs::exec::ExecCore;
use crate::error::Result;
use crate::trace::OpKind;
pub use crate::types::NodeType;

/// A graph (cudaGraph_t): captured from streams (GR1) or built node by node (GR8), or both.
/// Holds its operations, and so their buffers (GR4). A value: [`Clone`] copies it
/// (cudaGraphClone), and node ids, conditions and graph memory of the original are the copy's
/// too — so a graph with memory nodes and its copies have one instantiation at a time between
/// them (CUDA allows one, and no clone of such a graph).
#[derive(Clone)]
pub struct Graph {
    pub(crate) device: Device,
    pub(crate) def: Arc<GraphDef>,
}

/// A node of a [`Graph`]: what the `add_*` methods return and take as dependencies. It names
/// its graph too (and the graph's copies, which keep its nodes): given to another graph, it is
/// refused with [`Error::Graph`](crate::Error::Graph) (GR8), whatever its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GraphNodeId {
    pub(crate) graph: u64,
    pub(crate) index: usize,
}

impl GraphNodeId {
    pub(crate) fn new(graph: u64, index: usize) -> Self {
        GraphNodeId { graph, index }
    }

    /// The node's index (what [`NodeInfo::index`] and [`GraphExec::set_kernel_args`] use).
    pub fn index(self) -> usize {
        self.index
    }
}

impl From<GraphNodeId> for usize {
    fn from(n: GraphNodeId) -> usize {
        n.index
    }
}

/// A node of the graph an instantiation was made from, as
/// [`GraphExec::set_kernel_args`] takes it: a [`GraphNodeId`] (checked to be of that graph)
/// or a bare index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecNode {
    graph: Option<u64>,
    index: usize,
}

impl From<GraphNodeId> for ExecNode {
    fn from(n: GraphNodeId) -> Self {
        ExecNode {
            graph: Some(n.graph),
            index: n.index,
        }
    }
}

impl From<usize> for ExecNode {
    fn from(index: usize) -> Self {
        ExecNode { graph: None, index }
    }
}

impl Graph {
    /// The device the graph belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn new_captured(device: Device, captured: Captured) -> Self {
        Graph {
            device,
            def: Arc::new(GraphDef::captured(captured)),
        }
    }

    /// The id of `node` in this graph.
    pub(crate) fn node_id(&self, index: usize) -> GraphNodeId {
        GraphNodeId::new(self.def.id, index)
    }

    /// Number of nodes (a child graph counts as one).
    pub fn node_count(&self) -> usize {
        self.def.nodes.len()
    }

    /// Number of edges between nodes.
    pub fn edge_count(&self) -> usize {
        self.def.nodes.iter().map(|n| n.deps.len()).sum()
    }

    /// The edges as (from, to) pairs (cudaGraphGetEdges).
    pub fn edges(&self) -> Vec<(GraphNodeId, GraphNodeId)> {
        let mut out = Vec::new();
        for (i, n) in self.def.nodes.iter().enumerate() {
            for &d in &n.deps {
                out.push((self.node_id(d), self.node_id(i)));
            }
        }
        out
    }

    /// The nodes that depend on no other (cudaGraphGetRootNodes).
    pub fn root_nodes(&self) -> Vec<GraphNodeId> {
        (0..self.def.nodes.len())
            .filter(|&i| self.def.nodes[i].deps.is_empty())
            .map(|i| self.node_id(i))
            .collect()
    }

    /// Every node's id, in the order they were added (captured nodes in capture order).
    pub fn node_ids(&self) -> Vec<GraphNodeId> {
        (0..self.def.nodes.len()).map(|i| self.node_id(i)).collect()
    }

    /// The nodes in the order they were added: what each does and what it depends on. Node
    /// indices are what [`GraphExec::set_kernel_args`] takes.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.def
            .nodes
            .iter()
            .enumerate()
            .map(|(index, n)| {
                let (kind, node_type) = node_type(&n.work);
                NodeInfo {
                    index,
                    what: label(&n.work),
                    kind,
                    node_type,
                    deps: n.deps.to_vec(),
                }
            })
            .collect()
    }

    /// Number of captured streams (lanes of parallel work); 1 for a built graph.
    pub fn lanes(&self) -> usize {
        self.def.lanes
    }

    /// Prepare the graph for launching (cudaGraphInstantiate): a native `CUgraphExec` on
    /// CUDA, a compiled DAG its engines walk on the host backend. Memory the graph allocates
    /// (GR7) gets this instantiation's own memory, whose addresses its buffers report
    /// ([`DeviceBuffer::device_addr`](crate::DeviceBuffer::device_addr)). A malformed graph —
    /// a dependency cycle, graph memory used outside its allocation's lifetime, a condition of
    /// another graph (GR9) — is refused with [`Error::Graph`](crate::Error::Graph) naming the
    /// node (GR8). A graph with memory nodes has one instantiation at a time, as in CUDA: a
    /// second (of it or of a copy) is refused with
    /// [`Error::NotPermitted`](crate::Error::NotPermitted) (`GR7`) while the first lives, as is
    /// one while memory the earlier one handed out is still allocated (`GR10`).
    #[track_caller]
    pub fn instantiate(&self) -> Result<GraphExec> {
        self.instantiate_with(InstantiateFlags::default())
    }

    /// [`instantiate`](Self::instantiate) with flags (cudaGraphInstantiateWithFlags).
    /// Memory the graph's allocation nodes hand out (allocations with no free node in the
    /// graph, GR10) is the same buffer, at the same address, at every launch: free it after a
    /// launch — a stream's `free_async`, another graph's free node,
    /// [`DeviceBuffer::free`](crate::DeviceBuffer::free), or dropping its buffers — before
    /// launching again, or instantiate with
    /// [`auto_free_on_launch`](InstantiateFlags::auto_free_on_launch).
    #[track_caller]
    pub fn instantiate_with(&self, flags: InstantiateFlags) -> Result<GraphExec> {
        let (core, index) = ExecCore::new(
            &self.device.inner.core,
            &self.def,
            flags.auto_free_on_launch,
        )?;
        Ok(GraphExec {
            core,
            device: self.device.clone(),
            graph: parking_lot::Mutex::new((self.clone(), index)),
        })
    }
}

/// How a graph is instantiated (cudaGraphInstantiateFlags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstantiateFlags {
    /// At each launch, free what the previous launch allocated and nothing freed since
    /// (cudaGraphInstantiateFlagAutoFreeOnLaunch, GR10).
    pub auto_free_on_launch: bool,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Graph({} nodes, {} edges, {} lanes)",
            self.node_count(),
            self.edge_count(),
            self.lanes()
        )
    }
}

/// One node of a [`Graph`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Position in the order nodes were added (capture order for captured nodes).
    pub index: usize,
    /// Kernel name, or a short label (`H2D copy`, `alloc 4096 bytes`, `free`, `empty`).
    pub what: String,
    /// The operation's kind; `None` for memory, empty, event and child-graph nodes.
    pub kind: Option<OpKind>,
    /// The node's type, as `cudaGraphNodeGetType` reports it.
    pub node_type: NodeType,
    /// Nodes this one depends on.
    pub deps: Vec<usize>,
}

/// An instantiated graph (cudaGraphExec_t): launch it on any stream of its device, many times.
///
/// ```
/// use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Stream};
/// let dev = Device::host()?;
/// let s = Stream::builder(&dev).non_blocking().build()?;
/// let (a, b) = (DeviceBuffer::<f32>::new(&dev, 1024)?, DeviceBuffer::<f32>::new(&dev, 1024)?);
/// let capture = |d: &DeviceBuffer<f32>, f: f32| {
///     s.begin_capture(CaptureMode::Global)?;
///     let tmp = s.alloc_async::<f32>(d.len())?; // allocation node (GR7)
///     s.copy_d2d(&tmp, d)?;
///     kernels::scale(&s, &tmp, f)?;
///     s.copy_d2d(d, &tmp)?;
///     s.free_async(tmp)?; // free node
///     s.end_capture()
/// };
/// let exec = capture(&a, 2.0)?.instantiate()?;
/// for _ in 0..1000 {
///     exec.launch(&s)?; // one submission per replay
/// }
/// exec.update(&capture(&b, 3.0)?)?; // same shape: updated in place (GR6)
/// exec.launch(&s)?;
/// s.synchronize()?;
/// # Ok::<(), cueflow::Error>(())
/// ```
pub struct GraphExec {
    pub(crate) core: ExecCore,
    /// The device of the graph (an update keeps it): what a launch checks, without the lock.
    device: Device,
    /// The graph, and where each of its nodes went in the instantiated (flattened) graph.
    pub(crate) graph: parking_lot::Mutex<(Graph, Vec<usize>)>,
}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphExec of {:?}", self.graph.lock().0)
    }
}

impl GraphExec {
    /// Run the whole graph as one unit in `stream`'s order (GR3): it starts after the work
    /// enqueued on `stream` before, and work enqueued after waits for all of it.
    #[track_caller]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        stream.check_same_device(&self.device, "GraphExec::launch")?;
        self.core.launch(&stream.core, Location::caller())
    }

    /// Prepare this graph's launches ahead of time, in `stream`'s order, without running any
    /// of its nodes (GR3; `cudaGraphUpload`): a first launch otherwise does that work itself,
    /// on the launch's path. A later launch on any stream finds it done. On the host backend
    /// there is nothing to prepare.
    #[track_caller]
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        stream.check_same_device(&self.device, "GraphExec::upload")?;
        self.core.upload(&stream.core)
    }

    /// Update in place from `graph`, a capture of the same shape (cudaGraphExecUpdate, GR6):
    /// kernel scalar arguments, kernel buffer arguments of the same size, and copy and memset
    /// ranges of the same length (and values) may differ; a different shape — another node
    /// count, dependency, kernel, launch shape, copy direction or length — is refused with
    /// [`Error::GraphUpdate`](crate::Error::GraphUpdate) and leaves this instantiation as it
    /// was. Launches already enqueued run as they were enqueued.
    #[track_caller]
    pub fn update(&self, graph: &Graph) -> Result<()> {
        let mut current = self.graph.lock();
        if !graph.device.same(&current.0.device) {
            return Err(crate::error::Error::InvalidHandle(
                "GraphExec::update with a graph of another device".into(),
            ));
        }
        let index = self.core.update_from(&graph.def)?;
        *current = (graph.clone(), index);
        Ok(())
    }

    /// Give kernel node `node` new arguments (cudaGraphExecKernelNodeSetParams, GR6): scalars
    /// of the same types and buffers of the same sizes, with `config` the node's launch shape.
    /// Anything else is refused with [`Error::GraphUpdate`](crate::Error::GraphUpdate).
    pub fn set_kernel_args(
        &self,
        node: impl Into<ExecNode>,
        kernel: &crate::api::kernel::Kernel,
        config: crate::api::kernel::LaunchConfig,
        args: crate::api::kernel::KernelArgs,
    ) -> Result<()> {
        let node = node.into();
        let (device, flat) = {
            let g = self.graph.lock();
            if node.graph.is_some_and(|id| id != g.0.def.id) {
                return Err(crate::error::Error::GraphUpdate(format!(
                    "set_kernel_args: node {} is a node of another graph than the one this \
                     instantiation was made from (or last updated from)",
                    node.index
                )));
            }
            (
                g.0.device.clone(),
                g.1.get(node.index).copied().unwrap_or(usize::MAX),
            )
        };
        let launch = kernel.launch_record(&device, config, args)?;
        self.core.set_kernel(flat, launch)
    }

    /// The graph this was instantiated from, or last updated from.
    pub fn graph(&self) -> Graph {
        self.graph.lock().0.clone()
    }
}
