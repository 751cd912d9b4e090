//! Graphs: captured work (GR1) that can be instantiated once and launched many times as one unit
//! in a stream's order (GR3), keeping every buffer it touches alive (GR4).

use std::sync::Arc;

use crate::api::device::Device;
use crate::core::capture::Captured;
use crate::core::graph::ExecCore;
use crate::core::{GraphNode, GraphWork};
use crate::error::Result;
use crate::trace::OpKind;

/// A captured graph (cudaGraph_t). Holds its operations, and so their buffers (GR4).
#[derive(Clone)]
pub struct Graph {
    device: Device,
    nodes: Arc<Vec<GraphNode>>,
    lanes: usize,
}

impl Graph {
    /// The device the graph was captured on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn new(device: Device, captured: Captured) -> Self {
        Graph {
            device,
            nodes: Arc::new(captured.nodes),
            lanes: captured.lanes,
        }
    }

    /// Number of operations captured.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of edges between operations (within and across the captured streams).
    pub fn edge_count(&self) -> usize {
        self.nodes.iter().map(|n| n.deps.len()).sum()
    }

    /// The nodes in capture order: what each does and what it depends on. Node indices are
    /// what [`GraphExec::set_kernel_args`] takes.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, n)| NodeInfo {
                index,
                what: match &n.work {
                    GraphWork::Op(op) => op.name(),
                    GraphWork::Alloc { bytes, .. } => format!("alloc {bytes} bytes"),
                    GraphWork::Free { .. } => "free".into(),
                },
                kind: n.op().map(|op| op.kind()),
                deps: n.deps.clone(),
            })
            .collect()
    }

    /// Number of captured streams (lanes of parallel work).
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// Prepare the graph for launching (cudaGraphInstantiate): a native `CUgraphExec` on
    /// CUDA, a compiled DAG its engines walk on the host backend. Memory the capture allocated
    /// (GR7) gets this instantiation's own memory.
    #[track_caller]
    pub fn instantiate(&self) -> Result<GraphExec> {
        Ok(GraphExec {
            core: ExecCore::new(&self.device.inner, self.nodes.clone())?,
            graph: parking_lot::Mutex::new(self.clone()),
        })
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Graph({} nodes, {} edges, {} lanes)",
            self.node_count(),
            self.edge_count(),
            self.lanes
        )
    }
}

/// One node of a [`Graph`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Position in capture order.
    pub index: usize,
    /// Kernel name, or a short label (`H2D copy`, `alloc 4096 bytes`, `free`).
    pub what: String,
    /// The operation's kind; `None` for allocation and free nodes.
    pub kind: Option<OpKind>,
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
    pub(crate) graph: parking_lot::Mutex<Graph>,
}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphExec of {:?}", *self.graph.lock())
    }
}

impl GraphExec {
    /// Update in place from `graph`, a capture of the same shape (cudaGraphExecUpdate, GR6):
    /// kernel scalar arguments, kernel buffer arguments of the same size, and copy and memset
    /// ranges of the same length (and values) may differ; a different shape — another node
    /// count, dependency, kernel, launch shape, copy direction or length — is refused with
    /// [`Error::GraphUpdate`](crate::Error::GraphUpdate) and leaves this instantiation as it
    /// was. Launches already enqueued run as they were enqueued.
    #[track_caller]
    pub fn update(&self, graph: &Graph) -> Result<()> {
        let mut current = self.graph.lock();
        if !graph.device.same(&current.device) {
            return Err(crate::error::Error::InvalidHandle(
                "GraphExec::update with a graph of another device".into(),
            ));
        }
        self.core.update(&graph.nodes)?;
        *current = graph.clone();
        Ok(())
    }

    /// Give kernel node `node` new arguments (cudaGraphExecKernelNodeSetParams, GR6): scalars
    /// of the same types and buffers of the same sizes, with `config` the node's launch shape.
    /// Anything else is refused with [`Error::GraphUpdate`](crate::Error::GraphUpdate).
    pub fn set_kernel_args(
        &self,
        node: usize,
        kernel: &crate::api::kernel::Kernel,
        config: crate::api::kernel::LaunchConfig,
        args: crate::api::kernel::KernelArgs,
    ) -> Result<()> {
        let device = self.graph.lock().device.clone();
        let launch = kernel.launch_record(&device, config, args)?;
        self.core.set_kernel(node, launch)
    }

    /// The graph this was instantiated from, or last updated from.
    pub fn graph(&self) -> Graph {
        self.graph.lock().clone()
    }
}
