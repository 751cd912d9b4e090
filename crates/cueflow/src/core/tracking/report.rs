//! The sanitizer's race reports (AC4): both accesses, why nothing orders them, and the
//! smallest fix.

use std::ops::Range;

use crate::backend::contract::graph::GraphNode;
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::Part;
use crate::core::graphs::order::{node_operation, NodeAccess, Unordered};
use crate::core::streams::hostfn::{GraphHostNode, NodeWrite};
use crate::core::tracking::access::Rec;
use crate::core::tracking::call::{Acc, OpInfo, Site, What, Who};
use crate::core::tracking::clock::VClock;
use crate::core::tracking::sanitizer::{RaceAccess, RaceReport};
use crate::trace::OpKind;
use crate::types::{Access, Side, StreamKind};

/// One conflict found for a new access.
pub(crate) struct Conflict {
    pub rec: Rec,
    pub overlap: Range<usize>,
    pub acc: Acc,
}

/// The later side of a race: who makes the call, what it is, where it was written, and the
/// clock it was checked with.
pub(crate) struct Later<'a> {
    pub who: &'a Who,
    pub what: &'a What,
    pub site: Site,
    pub vc: &'a VClock,
}

/// Build the report for a conflict `c`, on `alloc`, of earlier operation `info` with the
/// `later` call.
pub(crate) fn race_report(
    c: &Conflict,
    alloc: &Allocation,
    info: &OpInfo,
    later: Later<'_>,
) -> RaceReport {
    let Later {
        who: later,
        what,
        site,
        vc,
    } = later;
    let earlier_acc = RaceAccess {
        stream: info.who.stream.as_ref().map(|s| s.0),
        actor: info.who.describe() + &info.who.of_device_beside(later),
        operation: info.what.describe(c.rec.part),
        access: c.rec.kind,
        bytes: c.rec.range.clone(),
        site: info.site,
    };
    let later_acc = RaceAccess {
        stream: later.stream.as_ref().map(|s| s.0),
        actor: later.describe() + &later.of_device_beside(&info.who),
        operation: what.describe(c.acc.part),
        access: c.acc.kind,
        bytes: c.acc.range.clone(),
        site,
    };
    let mut why = explain(info, later, vc);
    let names = (info.what.describe(Part::Whole), what.describe(Part::Whole));
    let mut fix = fix_hint(&earlier_acc, &later_acc, (&info.who, later), names);
    // GR8: a graph's event nodes order only some of its nodes.
    if let What::GraphNodes { which, .. } = &info.what {
        why.push_str(&format!(
            "; a graph's event record node captures only the nodes it depends on, and graph \
             node(s) {which} are upstream of no record node whose event {} waited on (GR8)",
            later.short()
        ));
        fix.push_str(&format!(
            "; or, in the graph, make the event record node whose event {} waits on depend on \
             graph node(s) {which}",
            later.short()
        ));
    }
    if let What::GraphNodes { which, .. } = what {
        why.push_str(&format!(
            "; a graph's event wait node holds back only the nodes that depend on it, and graph \
             node(s) {which} depend on no wait node whose event covers the earlier access (GR8)"
        ));
        fix.push_str(&format!(
            "; or, in the graph, make graph node(s) {which} depend on an event wait node on an \
             event recorded after the earlier access"
        ));
    }
    RaceReport {
        allocation: describe_alloc(alloc),
        overlap: c.overlap.clone(),
        earlier: earlier_acc,
        later: later_acc,
        why,
        fix,
    }
}

/// `device allocation of 4096 bytes at 0x7f…`.
fn describe_alloc(a: &Allocation) -> String {
    if let Some(g) = a.graph_slot {
        return format!("graph allocation {} ({} bytes, GR7)", g.slot, a.bytes);
    }
    let kind = match a.kind.side() {
        Side::Device => "device",
        Side::Host => "pinned host",
    };
    format!("{kind} allocation of {} bytes at {:#x}", a.bytes, a.addr)
}

/// The report for two nodes of one graph that conflict with no path between them (graph
/// order rule 4); `fallback` stands for a node's call site where the graph has none. `body`
/// names the conditional node's body the nodes are in (GR9), `None` for the launched graph.
pub(crate) fn graph_race_report(
    nodes: &[GraphNode],
    u: &Unordered,
    fallback: Site,
    body: Option<&str>,
) -> RaceReport {
    let node = |i: usize| match body {
        None => format!("graph node {i}"),
        Some(b) => format!("node {i} of {b}"),
    };
    let side = |a: &NodeAccess| {
        let n = &nodes[a.node];
        RaceAccess {
            stream: Some(n.stream),
            actor: format!("{} (stream {})", node(a.node), n.stream),
            operation: node_operation(n, &u.alloc, a.part),
            access: a.kind,
            bytes: a.bytes.clone(),
            site: n.site.unwrap_or(fallback),
        }
    };
    let (earlier, later) = (side(&u.earlier), side(&u.later));
    let (i, j) = (node(u.earlier.node), node(u.later.node));
    let why = format!(
        "no path of dependencies leads from {i} to {j}: neither a dependency of a built \
         graph nor, in a capture, stream order or an event recorded after the first and \
         waited on before the second orders them, so a launch may run both at once"
    );
    let fix = format!(
        "make {j} (the {} at {}) depend on {i} (the {} at {}): in a built graph, list it \
         among the node's dependencies or call Graph::add_dependency; in a capture, record \
         an event on stream {} after the first and make stream {} wait on it \
         (Stream::wait_event) before the second",
        later.operation,
        later.site,
        earlier.operation,
        earlier.site,
        earlier.stream.unwrap_or(0),
        later.stream.unwrap_or(0)
    );
    RaceReport {
        allocation: describe_alloc(&u.alloc),
        overlap: u.overlap.clone(),
        earlier,
        later,
        why,
        fix,
    }
}

/// The report for an unchecked host read, at `site`, of `read` bytes by graph host node `host`
/// of bytes that node `w.node` of its graph writes, which no path of dependencies orders with
/// it (HF1 in graphs).
pub(crate) fn graph_host_race_report(
    host: &GraphHostNode,
    w: &NodeWrite,
    read: Range<usize>,
    site: Site,
) -> RaceReport {
    let (i, j) = (w.node, host.node);
    let overlap = read.start.max(w.bytes.start)..read.end.min(w.bytes.end);
    let earlier = RaceAccess {
        stream: Some(w.stream),
        actor: format!("graph node {i} (stream {})", w.stream),
        operation: w.operation.clone(),
        access: w.kind,
        bytes: w.bytes.clone(),
        site: w.site,
    };
    let later = RaceAccess {
        stream: None,
        actor: format!("the host function of graph node {j}"),
        operation: What::HostUnchecked.describe(Part::Host),
        access: Access::Read,
        bytes: read,
        site,
    };
    RaceReport {
        allocation: describe_alloc(&w.alloc),
        overlap,
        why: format!(
            "no path of dependencies leads from graph node {i} to graph node {j} or back, so a \
             launch may run the host function while graph node {i} writes these bytes (HF1: a \
             host node comes after the nodes it depends on only)"
        ),
        fix: format!(
            "make graph node {j} (the host function) depend on graph node {i} (the {} at {}), \
             or the other way round: in a built graph, list it among the node's dependencies \
             or call Graph::add_dependency; in a capture, order the two on the streams",
            earlier.operation, earlier.site
        ),
        earlier,
        later,
    }
}

/// Why the earlier access `info` does not happen before the later one (clock `vc`).
fn explain(info: &OpInfo, later: &Who, vc: &VClock) -> String {
    let a = info.who.short() + &info.who.of_device_beside(later);
    let b = later.short() + &later.of_device_beside(&info.who);
    let known = vc.get(info.actor);
    let mut why = if known == 0 {
        format!(
            "nothing orders {b} after {a}: no event recorded on {a} after the earlier access \
             was waited on by {b}, and no host synchronization observed it"
        )
    } else {
        format!(
            "{b} is ordered only after the first {known} operation(s) of {a} (through an event \
             wait or a host synchronization), and the earlier access is its operation {}",
            info.time
        )
    };
    let kinds = (
        info.who.stream.as_ref().map(|s| s.2),
        later.stream.as_ref().map(|s| s.2),
    );
    if matches!(
        kinds,
        (Some(StreamKind::Legacy), Some(StreamKind::NonBlocking))
            | (Some(StreamKind::NonBlocking), Some(StreamKind::Legacy))
    ) {
        why.push_str(
            "; a non-blocking stream takes no part in the legacy default stream's implicit \
             ordering (ST5)",
        );
    }
    if matches!(info.what, What::Pageable(OpKind::CopyH2D)) {
        why.push_str(
            "; a pageable host-to-device copy returns once its source was read, not once the \
             device write landed (CP3)",
        );
    }
    if later.stream.is_none() {
        why.push_str("; as_slice_unchecked does not wait for device work (MM3's opt-out)");
    }
    why
}

/// The smallest change that orders `earlier` before `later`; `names` are the two operations'
/// names without the part.
fn fix_hint(
    earlier: &RaceAccess,
    later: &RaceAccess,
    (earlier_who, later_who): (&Who, &Who),
    names: (String, String),
) -> String {
    let (first, second) = names;
    match (earlier.stream, later_who.stream.as_ref()) {
        (Some(a), Some((b, ..))) => {
            let a = format!("stream {a}{}", earlier_who.of_device_beside(later_who));
            let b = format!("stream {b}{}", later_who.of_device_beside(earlier_who));
            format!(
                "record an event on {a} after the {first} at {} and make {b} wait on it \
                 (Stream::wait_event) before the {second} at {}; or turn on automatic \
                 ordering for {b}",
                earlier.site, later.site
            )
        }
        (Some(a), None) => format!(
            "synchronize stream {a} (or an event recorded after the {first} at {}) before the \
             host access at {}, or use PinnedBuffer::read/write, which wait for exactly that \
             work",
            earlier.site, later.site
        ),
        _ => format!(
            "order the {second} at {} after the {first} at {} with an event or a \
             synchronization",
            later.site, earlier.site
        ),
    }
}
