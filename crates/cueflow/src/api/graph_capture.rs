//! Stream capture (GR1, GR2): [`Stream::begin_capture`] and [`Stream::end_capture`], and
//! capture into an existing graph (`cudaStreamBeginCaptureToGraph`, GR1, GR8): a stream's work
//! becomes nodes of a graph the program already has — after nodes of it that it names — such as
//! the body of a conditional node ([`Graph::conditional_body`]), which CUDA programs fill this
//! way (graphConditionalNodes).
//!
//! The graph is borrowed for the whole capture, so nothing else changes it meanwhile; the
//! capture ends with [`GraphCapture::end`] (dropping the guard abandons it: nothing is added).
//! Core captures as for [`Stream::begin_capture`] on every backend, so what a capture may do
//! (and what invalidates it, GR2) is the same.

use crate::api::graph::{Graph, GraphNodeId};
use crate::api::stream::Stream;
use crate::core::graphs::capture::{begin, begin_to, end, end_to, CaptureMode, Target};
use crate::error::{Error, Result};

/// A capture into an existing graph in progress ([`Stream::begin_capture_to_graph`]).
#[must_use = "the capture adds nothing until `end`"]
pub struct GraphCapture<'g> {
    stream: Stream,
    graph: &'g mut Graph,
    deps: Vec<usize>,
    ended: bool,
}

impl Stream {
    /// Begin capturing this stream's work into a graph instead of running it (GR1).
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        // ER2: captures do not reach the backend, so the sticky error is checked here.
        if let Some(e) = self.device.sticky_error() {
            return Err(e);
        }
        begin(&self.device.inner.captures, self.core.lane(), mode)
    }

    /// End the capture this stream began and return the graph (GR1, GR2).
    pub fn end_capture(&self) -> Result<Graph> {
        let captured = end(&self.device.inner.captures, self.core.lane())?;
        Ok(Graph::new_captured(self.device.clone(), captured))
    }

    /// True while this stream takes part in a capture.
    pub fn is_capturing(&self) -> bool {
        self.core.capture().is_some()
    }

    /// Begin capturing this stream's work into `graph` (cudaStreamBeginCaptureToGraph): the
    /// captured operations become nodes of `graph`, the first ones after `deps` (nodes of
    /// `graph`), and memory the capture allocates, conditions it ties and conditional nodes
    /// it adds are `graph`'s. End it with [`GraphCapture::end`]; [`end_capture`] refuses it.
    /// Refused as [`begin_capture`] is (the legacy stream, a stream already capturing), for a
    /// graph of another device ([`Error::InvalidHandle`]) and for `deps` of another graph
    /// ([`Error::Graph`]).
    ///
    /// [`end_capture`]: Stream::end_capture
    /// [`begin_capture`]: Stream::begin_capture
    pub fn begin_capture_to_graph<'g>(
        &self,
        graph: &'g mut Graph,
        deps: &[GraphNodeId],
        mode: CaptureMode,
    ) -> Result<GraphCapture<'g>> {
        if !graph.device.same(self.device()) {
            return Err(Error::InvalidHandle(
                "Stream::begin_capture_to_graph: the graph belongs to another device than the \
                 stream"
                    .into(),
            ));
        }
        let mut deps = graph.indices(deps, "Stream::begin_capture_to_graph")?;
        deps.sort_unstable();
        deps.dedup();
        // ER2: captures do not reach the backend, so the sticky error is checked here.
        if let Some(e) = self.device.sticky_error() {
            return Err(e);
        }
        let target = Target {
            graph: graph.def.id,
            nodes: graph.def.nodes.len(),
            slots: graph.def.slots.len(),
            deps: deps.len(),
        };
        begin_to(
            &self.device.inner.captures,
            self.core.lane(),
            mode,
            Some(target),
        )?;
        Ok(GraphCapture {
            stream: self.clone(),
            graph,
            deps,
            ended: false,
        })
    }
}

impl GraphCapture<'_> {
    /// End the capture (cudaStreamEndCapture): what it captured joins the graph. Returns the
    /// nodes it added, in capture order. Fails as [`Stream::end_capture`] fails (an
    /// invalidated capture, a joined stream not joined back), adding nothing.
    pub fn end(mut self) -> Result<Vec<GraphNodeId>> {
        self.ended = true;
        let s = &self.stream;
        let captured = end_to(
            &s.device.inner.captures,
            s.core.lane(),
            Some(self.graph.def.id),
        )?;
        let added = std::sync::Arc::make_mut(&mut self.graph.def).splice(captured, &self.deps)?;
        Ok(added.into_iter().map(|i| self.graph.node_id(i)).collect())
    }
}

impl Drop for GraphCapture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // Abandoned: the capture ends, and what it captured is dropped.
            let s = &self.stream;
            let _ = end_to(
                &s.device.inner.captures,
                s.core.lane(),
                Some(self.graph.def.id),
            );
        }
    }
}

impl std::fmt::Debug for GraphCapture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphCapture into {:?}", self.graph)
    }
}
