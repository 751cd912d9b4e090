//! Graph launches and uploads on a CUDA stream (GR3): each goes through the stream's keepalive
//! queue like any submission, which keeps the exec and its operations until the device is
//! past it (Q1, graph rule G1).

use std::sync::Arc;

use super::super::driver;
use super::super::graph::{CudaGraph, LaunchKeep};
use super::super::host_reach_gate::enqueue_gated;
use super::{CudaStream, Item};
use crate::backend::contract::device::{BackendGraph, Done, GraphLaunched, NodesAfter};
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::trace::TraceSlot;
use crate::error::Result;

impl CudaStream {
    /// Enter the device (D2) and take what the queue keeps of `graph` for a launch or upload:
    /// its exec and its operations as they are now (G1, G2).
    fn entered_keep<'g>(
        &self,
        graph: &'g Arc<dyn BackendGraph>,
    ) -> Result<(&'g CudaGraph, LaunchKeep)> {
        self.shared.enter()?;
        self.shared.maintain();
        let g: &CudaGraph = downcast(graph.as_ref(), "graph")?;
        let keep = LaunchKeep {
            handle: g.handle.clone(),
            _ops: g.ops.lock().clone(),
        };
        Ok((g, keep))
    }

    pub(super) fn launch_exec(
        &self,
        graph: &Arc<dyn BackendGraph>,
        after: &[Done],
        nodes_after: Vec<NodesAfter>,
        want_done: bool,
        trace: Option<Arc<TraceSlot>>,
    ) -> Result<GraphLaunched> {
        let (g, keep) = self.entered_keep(graph)?;
        // The driver cannot hold single nodes of a launch: the whole launch waits.
        let merged: Vec<Done>;
        let after = if nodes_after.is_empty() {
            after
        } else {
            let nodes = nodes_after.into_iter().flat_map(|n| n.after);
            merged = after.iter().cloned().chain(nodes).collect();
            &merged
        };
        let b = self.lock_and_wait(Item::Graph(keep), None, trace, after)?;
        // C7 of `graph_cond.rs`: a graph without conditional nodes reaching host memory.
        let reaches = || g.reaches_host;
        let launch = || g.launch(&self.q);
        let after_first = match enqueue_gated(&self.shared, &self.q, reaches, launch) {
            Ok((after_first, noted)) => after_first.and(noted),
            Err(e) => return Err(self.refused(b, e)),
        };
        // Enqueued: kept until the device is past it (Q1, graph rule G1).
        let records = g.launched();
        let done = self.finish(b, None, want_done)?;
        // GR9: the launch is enqueued and kept, but its start nodes stay enabled (the next
        // launch would restart the conditions): said as the launch's error.
        after_first.map_err(|e| self.fail(e))?;
        if crate::config::launch_blocking() {
            self.synchronize_launch(Some(super::super::queue::GRAPH_CANDIDATE))?;
        }
        Ok(GraphLaunched { done, records })
    }

    /// Upload `graph` in this stream's order without running it (`cuGraphUpload`): its later
    /// launch, on any stream, starts without the upload's work.
    pub(super) fn upload_exec(&self, graph: &Arc<dyn BackendGraph>) -> Result<()> {
        let (g, keep) = self.entered_keep(graph)?;
        let b = self.lock_and_wait(Item::Graph(keep), None, None, &[])?;
        // D1: the exec lives in `b`'s keep until the device is past the upload (G1); D2:
        // entered above.
        if let Err(e) = driver::graph::upload(g.handle.exec, b.s) {
            return Err(self.refused(b, e));
        }
        self.finish(b, None, false).map(drop)
    }
}
