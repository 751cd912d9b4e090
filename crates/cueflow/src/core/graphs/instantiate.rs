//! What instantiating a graph does before and at the backend's instantiation (graph exec
//! rules 5 and 6, [`crate::core::graphs::exec`]): the checks that refuse a malformed graph,
//! then the races among its nodes (AC3, AC4) and, on a device that serializes conflicts (AC6),
//! the extra dependencies that keep them apart; then the backend's instantiation.

use std::sync::Arc;

use crate::backend::contract::device::{BackendGraph, GraphFlags};
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::core::devices::device::DeviceCore;
use crate::core::graphs::{mem, order};
use crate::core::tracking::call::Site;
use crate::core::tracking::report::graph_race_report;
use crate::core::tracking::sanitizer::{RaceReport, SanitizeMode};
use crate::error::{Error, Result};

/// Rule 5 before instantiating `nodes` on `dev`: report the races (at `site` where a node has
/// no call site of its own), and return the extra dependencies the backend needs (all empty
/// where it needs none).
pub(super) fn check_nodes(
    dev: &DeviceCore,
    nodes: &[GraphNode],
    site: Site,
) -> Result<Vec<Vec<usize>>> {
    if dev.track.mode() != SanitizeMode::Off {
        let mut races = Vec::new();
        node_races(nodes, site, None, &mut races);
        dev.track.graph_races(races)?;
    }
    Ok(if dev.track.serializes() {
        order::extra_deps(nodes)
    } else {
        vec![Vec::new(); nodes.len()]
    })
}

/// Rule 5's races among `nodes`, and among the nodes of each body of their conditional nodes,
/// whose nodes run as the body's own dependencies allow (GR9; a conditional node stands for
/// all its bodies among `nodes`). `body` names the body `nodes` are, `None` for the graph.
fn node_races(nodes: &[GraphNode], site: Site, body: Option<&str>, out: &mut Vec<RaceReport>) {
    out.extend(
        order::races(nodes)
            .iter()
            .map(|u| graph_race_report(nodes, u, site, body)),
    );
    for (i, n) in nodes.iter().enumerate() {
        if let GraphWork::Conditional(c) = &n.work {
            for (b, inner) in c.bodies.iter().enumerate() {
                let name = match body {
                    None => format!("graph node {i}'s body {b}"),
                    Some(outer) => format!("node {i}'s body {b} of {outer}"),
                };
                node_races(inner, site, Some(&name), out);
            }
        }
    }
}

/// `nodes` as the backend instantiates them, or the error that refuses them: GR9's
/// conditions checked, and free nodes of other graphs' memory given the memory bound to it
/// (rule 6). Called before the races are checked (rule 5): a graph refused here never runs,
/// so nothing in it races, and the error says what is wrong with it.
pub(super) fn resolve(nodes: &[GraphNode]) -> Result<std::borrow::Cow<'_, [GraphNode]>> {
    crate::core::graphs::cond::check_conditions(nodes)?;
    if !nodes
        .iter()
        .any(|n| matches!(n.work, GraphWork::FreeOther { .. }))
    {
        return Ok(std::borrow::Cow::Borrowed(nodes));
    }
    let mut owned = nodes.to_vec();
    for (i, n) in owned.iter_mut().enumerate() {
        if let GraphWork::FreeOther { mem } = &n.work {
            let Some(real) = mem::bound(mem) else {
                return Err(Error::Graph(format!(
                    "node {i} frees memory of another graph that was never instantiated: \
                     instantiate the graph that allocates it first (GR10)"
                )));
            };
            n.work = GraphWork::FreeOther { mem: real };
        }
    }
    Ok(std::borrow::Cow::Owned(owned))
}

/// Instantiate `nodes` (as [`resolve`] returned them) with `extra` dependencies on `dev`'s
/// backend.
pub(super) fn instantiate(
    dev: &DeviceCore,
    nodes: &[GraphNode],
    extra: &[Vec<usize>],
    flags: GraphFlags,
) -> Result<Arc<dyn BackendGraph>> {
    if extra.iter().all(Vec::is_empty) {
        dev.backend.instantiate_graph(nodes, flags)
    } else {
        dev.backend
            .instantiate_graph(&order::with_extra(nodes, extra), flags)
    }
}
