//! Graphs: captured work (GR1) that can be instantiated once and launched many times as one unit
//! in a stream's order (GR3), keeping every buffer it touches alive (GR4).

use std::sync::Arc;

use crate::api::device::Device;
use crate::api::stream::Stream;
use crate::backend::{BackendEvent, EventFlags};
use crate::core::alloc::{Allocation, MemKind};
use crate::core::hostfn::check_not_in_host_fn;
use crate::core::op::Op;
use crate::error::{Error, Result};

/// One captured operation with the nodes it depends on.
#[derive(Clone)]
pub(crate) struct GraphNode {
    pub op: Op,
    /// Indices of earlier nodes this one depends on.
    pub deps: Vec<usize>,
    /// Index of the captured stream the op came from (0 = the origin stream).
    pub lane: usize,
}

/// A captured graph (cudaGraph_t). Holds its operations, and so their buffers (GR4).
#[derive(Clone)]
pub struct Graph {
    device: Device,
    nodes: Arc<Vec<GraphNode>>,
    lanes: usize,
}

impl Graph {
    pub(crate) fn new(device: Device, nodes: Vec<GraphNode>, lanes: usize) -> Self {
        Graph {
            device,
            nodes: Arc::new(nodes),
            lanes,
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
        let lanes = (0..self.lanes)
            .map(|i| {
                Stream::builder(&self.device)
                    .non_blocking()
                    .name(format!("graph lane {i}"))
                    .build()
            })
            .collect::<Result<Vec<_>>>()?;
        let flags = EventFlags {
            timing: false,
            ..Default::default()
        };
        let backend = &self.device.inner.backend;
        let mut done_events = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let crosses = self.nodes[i + 1..]
                .iter()
                .any(|m| m.lane != n.lane && m.deps.contains(&i));
            done_events.push(if crosses {
                Some(backend.create_event(flags)?)
            } else {
                None
            });
        }
        let start = backend.create_event(flags)?;
        let ends = (0..self.lanes)
            .map(|_| backend.create_event(flags))
            .collect::<Result<Vec<_>>>()?;
        let mut pinned: Vec<Arc<Allocation>> = Vec::new();
        for n in self.nodes.iter() {
            for (m, _) in n.op.accesses() {
                if m.kind() == MemKind::Pinned && !pinned.iter().any(|a| Arc::ptr_eq(a, &m.alloc)) {
                    pinned.push(m.alloc.clone());
                }
            }
        }
        // One lock order for every launch.
        pinned.sort_by_key(|a| a.addr);
        Ok(GraphExec {
            launching: parking_lot::Mutex::new(()),
            pinned,
            graph: self.clone(),
            lanes,
            done_events,
            start,
            ends,
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
    /// Launches share the exec's lanes and events: one launch enqueues at a time (GR3).
    launching: parking_lot::Mutex<()>,
    /// Pinned allocations the graph copies to or from (MM3).
    pinned: Vec<Arc<Allocation>>,
    graph: Graph,
    lanes: Vec<Stream>,
    done_events: Vec<Option<Arc<dyn BackendEvent>>>,
    start: Arc<dyn BackendEvent>,
    ends: Vec<Arc<dyn BackendEvent>>,
}

impl GraphExec {
    /// Run the whole graph as one unit in `stream`'s order (GR3): it starts after the work
    /// enqueued on `stream` before, and work enqueued after waits for all of it.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        check_not_in_host_fn("GraphExec::launch")?;
        stream.check_same_device(&self.graph.device, "GraphExec::launch")?;
        if stream.is_capturing() {
            return Err(Error::Unsupported(
                "launching a graph inside a stream capture".into(),
            ));
        }
        if let Some(e) = self.graph.device.sticky_error() {
            return Err(e);
        }
        let _one_at_a_time = self.launching.lock();
        // MM3: a graph needs no borrow of the pinned buffers it copies, so it checks here that
        // the host holds no view of them, and keeps new views from starting (they wait on
        // these locks, then on the access log) until its copies are enqueued and logged.
        let views: Vec<_> = self.pinned.iter().map(|a| a.host_views.lock()).collect();
        if views.iter().any(|v| **v > 0) {
            return Err(Error::NotPermitted {
                rule: "MM3",
                what: "GraphExec::launch while the host holds a read or write view of a pinned \
                       buffer the graph copies"
                    .into(),
            });
        }
        stream.core.backend.record(&self.start)?;
        for lane in &self.lanes {
            lane.core.backend.wait(&self.start)?;
        }
        for (i, node) in self.graph.nodes.iter().enumerate() {
            let lane = &self.lanes[node.lane];
            for &d in &node.deps {
                if self.graph.nodes[d].lane != node.lane {
                    let ev = self.done_events[d]
                        .as_ref()
                        .expect("instantiate made an event for every cross-lane edge");
                    lane.core.backend.wait(ev)?;
                }
            }
            lane.submit(node.op.clone())?;
            if let Some(ev) = &self.done_events[i] {
                lane.core.backend.record(ev)?;
            }
        }
        for (lane, end) in self.lanes.iter().zip(&self.ends) {
            lane.core.backend.record(end)?;
            stream.core.backend.wait(end)?;
        }
        Ok(())
    }

    /// The graph this was instantiated from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}
