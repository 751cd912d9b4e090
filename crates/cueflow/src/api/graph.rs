//! Graphs: captured work (GR1) that can be instantiated once and launched many times as one unit
//! in a stream's order (GR3), keeping every buffer it touches alive (GR4).

use std::panic::Location;
use std::sync::Arc;

use crate::api::device::Device;
use crate::api::stream::Stream;
use crate::core::capture::Captured;
use crate::core::graph::{ExecCore, GraphNode};
use crate::core::hostfn::check_not_in_host_fn;
use crate::error::Result;

/// A captured graph (cudaGraph_t). Holds its operations, and so their buffers (GR4).
#[derive(Clone)]
pub struct Graph {
    device: Device,
    nodes: Arc<Vec<GraphNode>>,
    lanes: usize,
}

impl Graph {
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

    /// Number of captured streams (lanes of parallel work).
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// Prepare the graph for launching (cudaGraphInstantiate).
    pub fn instantiate(&self) -> Result<GraphExec> {
        check_not_in_host_fn("Graph::instantiate")?;
        Ok(GraphExec {
            core: ExecCore::new(&self.device.inner, self.nodes.clone(), self.lanes)?,
            graph: self.clone(),
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

/// An instantiated graph (cudaGraphExec_t): launch it on any stream of its device, many times.
pub struct GraphExec {
    core: ExecCore,
    graph: Graph,
}

impl GraphExec {
    /// Run the whole graph as one unit in `stream`'s order (GR3): it starts after the work
    /// enqueued on `stream` before, and work enqueued after waits for all of it.
    #[track_caller]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        check_not_in_host_fn("GraphExec::launch")?;
        stream.check_same_device(&self.graph.device, "GraphExec::launch")?;
        self.core.launch(&stream.core, Location::caller())
    }

    /// The graph this was instantiated from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}
