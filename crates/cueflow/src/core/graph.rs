//! Graphs in core: the nodes a capture produced (GR1) and their replay (GR3). A replay runs on
//! internal lane streams, one per captured stream, through the same path as any other work,
//! so capture, tracking and tracing see every node.

use std::sync::Arc;

use super::alloc::{Allocation, MemKind};
use super::device::DeviceCore;
use super::event::EventCore;
use super::op::Op;
use super::stream::StreamCore;
use super::track::Site;
use crate::backend::{EventFlags, StreamKind};
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

/// An instantiated graph: lane streams and the events that join them.
pub(crate) struct ExecCore {
    dev: Arc<DeviceCore>,
    nodes: Arc<Vec<GraphNode>>,
    /// Launches share the lanes and events: one launch enqueues at a time (GR3).
    launching: parking_lot::Mutex<()>,
    /// Pinned allocations the graph copies to or from (MM3).
    pinned: Vec<Arc<Allocation>>,
    lanes: Vec<Arc<StreamCore>>,
    /// For each node, an event recorded after it when a node of another lane depends on it.
    done_events: Vec<Option<EventCore>>,
    start: EventCore,
    ends: Vec<EventCore>,
}

impl ExecCore {
    /// Prepare `nodes` (captured from `lanes` streams) for launching (cudaGraphInstantiate).
    pub fn new(dev: &Arc<DeviceCore>, nodes: Arc<Vec<GraphNode>>, lanes: usize) -> Result<Self> {
        let lanes = (0..lanes)
            .map(|i| dev.create_stream(StreamKind::NonBlocking, 0, Some(format!("graph lane {i}"))))
            .collect::<Result<Vec<_>>>()?;
        let flags = EventFlags {
            timing: false,
            ..Default::default()
        };
        let mut done_events = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let crosses = nodes[i + 1..]
                .iter()
                .any(|m| m.lane != n.lane && m.deps.contains(&i));
            done_events.push(if crosses {
                Some(EventCore::new(dev, flags)?)
            } else {
                None
            });
        }
        let start = EventCore::new(dev, flags)?;
        let ends = (0..lanes.len())
            .map(|_| EventCore::new(dev, flags))
            .collect::<Result<Vec<_>>>()?;
        let mut pinned: Vec<Arc<Allocation>> = Vec::new();
        for n in nodes.iter() {
            n.op.for_each_access(|m, _, _| {
                if m.kind() == MemKind::Pinned && !pinned.iter().any(|a| Arc::ptr_eq(a, &m.alloc)) {
                    pinned.push(m.alloc.clone());
                }
            });
        }
        // One lock order for every launch.
        pinned.sort_by_key(|a| a.addr);
        Ok(ExecCore {
            dev: dev.clone(),
            nodes,
            launching: parking_lot::Mutex::new(()),
            pinned,
            lanes,
            done_events,
            start,
            ends,
        })
    }

    /// Run the whole graph as one unit in `stream`'s order (GR3).
    pub fn launch(&self, stream: &Arc<StreamCore>, site: Site) -> Result<()> {
        let dev = &self.dev;
        if stream.capture().is_some() {
            return Err(Error::Unsupported(
                "launching a graph inside a stream capture".into(),
            ));
        }
        if let Some(e) = dev.sticky_error() {
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
        stream.record_quiet(dev, &self.start)?;
        for lane in &self.lanes {
            lane.wait_quiet(dev, &self.start, site)?;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let lane = &self.lanes[node.lane];
            for &d in &node.deps {
                if self.nodes[d].lane != node.lane {
                    let ev = self.done_events[d]
                        .as_ref()
                        .expect("instantiate made an event for every cross-lane edge");
                    lane.wait_quiet(dev, ev, site)?;
                }
            }
            lane.submit(dev, node.op.clone(), site)?;
            if let Some(ev) = &self.done_events[i] {
                lane.record_quiet(dev, ev)?;
            }
        }
        for (lane, end) in self.lanes.iter().zip(&self.ends) {
            lane.record_quiet(dev, end)?;
            stream.wait_quiet(dev, end, site)?;
        }
        Ok(())
    }
}
