//! A graph launch past the entry layers (GR3): what the launch is ([`GraphLaunch`]), and the
//! launch of a graph without event nodes as one call through tracking, trace and backend. A
//! graph with event nodes launches through its scope instead (`events.rs`, graph_build rule 4).
//!
//! The path of a launch, file by file: the API's `GraphExec::launch` (`api/graph.rs`) →
//! [`ExecCore::launch`](crate::core::graphs::exec::ExecCore::launch), which passes the entry
//! layers once (`streams/entry.rs`: host-function guard, capture, GR5) and checks the graph's
//! own rules (MM3, graph memory) → [`launch_whole`] here or `EventScope::launch` → the
//! tracking layer (`tracking/track.rs`, `tracking/track_scope.rs`) → the trace slot
//! (`StreamCore::trace_graph`) → the backend's `launch_graph`.

use std::sync::Arc;

use crate::backend::contract::device::{BackendGraph, Done};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{Op, Part};
use crate::core::devices::device::DeviceCore;
use crate::core::streams::stream::StreamCore;
use crate::core::tracking::call::{Accesses, Call, Caller, PlaceHosts, Site, What};
use crate::error::Result;
use crate::types::Access;

/// One launch of an instantiated graph, as the layers past the entry see it.
pub(crate) struct GraphLaunch<'a> {
    pub stream: &'a Arc<StreamCore>,
    pub dev: &'a DeviceCore,
    /// The backend's instantiation.
    pub graph: &'a Arc<dyn BackendGraph>,
    /// The graph's node count (the trace's).
    pub nodes: usize,
    pub site: Site,
    /// `Some` when the graph hands memory out (graph_mem rule 4): the launch runs after these
    /// completions too, and returns its own.
    pub memory: Option<&'a [Done]>,
    /// `Some` when the graph has host nodes: places them (HF1), for the tracking layer to call.
    pub hosts: Option<PlaceHosts<'a>>,
}

impl GraphLaunch<'_> {
    /// The completions the launch runs after, and whether it returns its own.
    pub fn after(&self) -> (&[Done], bool) {
        (self.memory.unwrap_or_default(), self.memory.is_some())
    }

    /// The caller as the tracking layer sees it.
    pub fn caller(&self) -> Caller<'_> {
        Caller {
            stream: self.stream,
            legacy: self.dev.legacy_actor,
            site: self.site,
        }
    }
}

/// Launch a graph without event nodes: one call through the tracking layer, whose accesses
/// are the graph's `footprint`, traced as one operation.
pub(crate) fn launch_whole(
    l: &GraphLaunch<'_>,
    footprint: &[(MemRef, Access, Part)],
) -> Result<Option<Done>> {
    let (stream, dev) = (l.stream, l.dev);
    let (after, want_done) = l.after();
    if !dev.track.wants(stream, &Accesses::Many(footprint)) {
        // Nothing to track (as for single operations in `submit`): straight to the backend.
        let slot = stream.trace_graph(dev, l.nodes);
        let launched = stream
            .backend
            .launch_graph(l.graph, after, Vec::new(), want_done, slot)?;
        return Ok(launched.done);
    }
    let what = |_: Option<&Op>| What::Graph(l.nodes);
    let mut done_out = None;
    dev.track.run(
        l.caller(),
        Call::graph(footprint, l.hosts),
        what,
        |_, deps, want| {
            let slot = stream.trace_graph(dev, l.nodes);
            let deps = crate::core::graphs::mem::and_frees(deps, after);
            let launched =
                stream
                    .backend
                    .launch_graph(l.graph, &deps, Vec::new(), want || want_done, slot)?;
            done_out = if want_done {
                launched.done.clone()
            } else {
                None
            };
            Ok(launched.done)
        },
    )?;
    Ok(done_out)
}
