//! Event record and wait nodes of an instantiated graph, with CUDA's scope (GR8, graph_build
//! rule 4): what each orders at a launch, and the launch of a graph that has them.
//!
//! Rules:
//! 1. **Record.** A record node's event captures, at every launch, the work its stream had
//!    before the launch and the node's ancestors in the graph — nothing else of the graph
//!    (`cuGraphAddEventRecordNode`: "to capture execution of the node's dependencies"). The
//!    backend completes the record when those ancestors completed, however much of the graph
//!    is left; work that waits on the event may run beside the rest of the graph.
//! 2. **Wait.** A wait node holds back its descendants until the work its event captured when
//!    the launch was enqueued completed (EV4 at the launch; the launch's own records are not
//!    seen); the graph's other nodes do not wait for it.
//! 3. **Tracking.** The sanitizer and automatic ordering see the graph's accesses in parts
//!    ([`ScopePart`]): the nodes with the same wait nodes upstream and in the same group, the
//!    nodes with the same record nodes downstream ([`super::event_sets`], which keeps those
//!    sets without a list per node). A part is checked after the events of its upstream wait
//!    nodes only, and a record node's event covers the parts upstream of it only
//!    ([`crate::core::tracking::track_scope`]). Ordering (AC5, AC6) holds the nodes of a part
//!    that conflict with earlier work, not the launch, where the backend can (the host
//!    backend).
//! 4. **Capture.** A wait node whose event was last recorded inside a capture still under way
//!    refuses the launch and invalidates the capture (GR2), as a query of that event does; a
//!    capture's own cross-stream records and waits are edges of the captured graph, never
//!    event nodes (capture rule 3).
//! 5. A graph without event nodes has no scope: its launch is the one call of `core::graphs::exec`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::backend::contract::device::Done;
use crate::backend::contract::graph::GraphNode;
use crate::core::graphs::chains::Chains;
use crate::core::graphs::event_sets::{Grouping, WaitSets};
use crate::core::graphs::exec::{footprint, GraphEvents};
use crate::core::graphs::launch::GraphLaunch;
use crate::core::graphs::mem::{written_footprint, Beyond};
use crate::core::streams::event::EventCore;
use crate::core::tracking::call::{Accesses, What};
use crate::core::tracking::track_scope::{
    Chain, Group, RecordSide, ScopePart, ScopedLaunch, WaitSide, WaitsUp,
};
use crate::error::Result;

/// A record node: its event, the wait nodes upstream of it, and the last position upstream
/// of it on each chain that has one (index into the scope's chains, ascending).
struct RecordNode {
    event: Arc<EventCore>,
    waits: WaitsUp,
    upstream: Vec<(usize, u64)>,
}

/// The event nodes of a graph and what each orders (rules 1–3).
pub(crate) struct EventScope {
    records: Vec<RecordNode>,
    waits: Vec<(usize, Arc<EventCore>)>,
    parts: Vec<ScopePart>,
    groups: Vec<Group>,
    chains: Vec<Chain>,
    /// Each node's wait nodes upstream and group (rules 1, 2).
    wait_sets: WaitSets,
    node_group: Vec<usize>,
}

/// Rule 3: the parts of the nodes that access anything, by (waits upstream, group), in the
/// order of their first node, each with its footprint (the memory beyond the graph its nodes
/// write included).
fn parts(
    nodes: &[GraphNode],
    upstream: &[WaitsUp],
    node_group: &[usize],
    beyond: &Beyond,
) -> Vec<ScopePart> {
    let mut part_of: HashMap<(WaitsUp, usize), usize> = HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let writes_beyond = !beyond.written_by(node).is_empty();
        if !writes_beyond && footprint(std::iter::once(node)).is_empty() {
            continue;
        }
        let key = (upstream[i].clone(), node_group[i]);
        let p = *part_of.entry(key).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[p].push(i);
    }
    let mut keys: Vec<((WaitsUp, usize), usize)> = part_of.into_iter().collect();
    keys.sort_by_key(|(_, p)| *p);
    keys.into_iter()
        .map(|((waits, group), p)| {
            let m = &members[p];
            let mut fp = footprint(m.iter().map(|&i| &nodes[i]));
            let written = m.iter().flat_map(|&i| beyond.written_by(&nodes[i]));
            fp.extend(written_footprint(written));
            ScopePart {
                nodes: m.clone(),
                footprint: fp,
                waits,
                group,
                what: part_what(nodes.len(), m),
            }
        })
        .collect()
}

/// `graph launch (12 nodes), nodes 3, 4`: a part as reports name it (the first few nodes).
fn part_what(total: usize, nodes: &[usize]) -> What {
    const SHOWN: usize = 6;
    let mut which: Vec<String> = nodes.iter().take(SHOWN).map(|i| i.to_string()).collect();
    if nodes.len() > SHOWN {
        which.push(format!("… ({} in all)", nodes.len()));
    }
    What::GraphNodes {
        nodes: total,
        which: which.join(", ").into(),
    }
}

impl EventScope {
    /// The scope of the event nodes `events` of `nodes` (rules 1–3), `None` for a graph
    /// without any (rule 5). `beyond` is the graph's memory beyond the graph
    /// (`core::graphs::exec` rule 6), written by the node that allocates or frees it. `old`:
    /// the scope of the same graph before an update, whose groups' stamps go on.
    pub fn new(
        nodes: &[GraphNode],
        events: &GraphEvents,
        beyond: &Beyond,
        old: Option<&EventScope>,
    ) -> Option<EventScope> {
        if events.records.is_empty() && events.waits.is_empty() {
            return None;
        }
        let reach = Chains::of(nodes);
        let wait_nodes: Vec<usize> = events.waits.iter().map(|w| w.0).collect();
        let record_nodes: Vec<usize> = events.records.iter().map(|r| r.0).collect();
        let wait_sets = WaitSets::new(&reach, &wait_nodes);
        let Grouping {
            groups,
            mut chains,
            node_group,
            upstream: chain_upstream,
        } = Grouping::new(&reach, &record_nodes);
        if let Some(old) = old.filter(|o| o.chains.len() == chains.len()) {
            for (c, o) in chains.iter_mut().zip(&old.chains) {
                c.continue_from(o);
            }
        }
        let parts = parts(nodes, &wait_sets.of_node, &node_group, beyond);
        let records = events
            .records
            .iter()
            .zip(chain_upstream)
            .map(|((node, event), on_chains)| RecordNode {
                event: event.clone(),
                waits: wait_sets.of_node[*node].clone(),
                upstream: on_chains,
            })
            .collect();
        Some(EventScope {
            records,
            waits: events.waits.clone(),
            parts,
            groups,
            chains,
            wait_sets,
            node_group,
        })
    }

    /// Node `i`'s wait nodes upstream (indices into the launch's waits) and its group, in
    /// `scope` (none and group 0 without one).
    pub fn node_place(scope: Option<&EventScope>, i: usize) -> (Vec<usize>, usize) {
        scope.map_or((Vec::new(), 0), |s| (s.wait_sets.list(i), s.node_group[i]))
    }

    /// Launch `graph` on `stream` with this scope (rules 1–4): through the tracking layer
    /// where it is wanted, then the record nodes' events are this launch's (EV2).
    pub fn launch(&mut self, l: &GraphLaunch<'_>) -> Result<Option<Done>> {
        let (stream, dev) = (l.stream, l.dev);
        let traced = self.before_launch(l)?;
        let tracked = dev.track.wants(stream, &Accesses::None)
            || self
                .parts
                .iter()
                .any(|p| dev.track.wants(stream, &Accesses::Many(&p.footprint)));
        let done = if tracked {
            self.launch_tracked(l)?
        } else {
            let (after, want_done) = l.after();
            let slot = stream.trace_graph(dev, l.nodes);
            let launched =
                stream
                    .backend
                    .launch_graph(l.graph, after, Vec::new(), want_done, slot)?;
            launched.done
        };
        let op = stream.last_trace_op.load(Ordering::Relaxed);
        for r in &self.records {
            r.event.clear_capture();
            if traced {
                r.event.trace_op.store(op, Ordering::Relaxed);
            }
        }
        Ok(done)
    }

    /// Rule 4 (no wait node on an event recorded in a live capture), and the trace's flow
    /// arrows from the waited work to the launch; true when the launch is traced.
    fn before_launch(&self, l: &GraphLaunch<'_>) -> Result<bool> {
        for (_, e) in &self.waits {
            let captured = e.captured.get();
            if let Some(c) = captured.filter(|c| c.session.is_active()) {
                return Err(c.session.invalidate(
                    "a graph launch whose event wait node waits on an event recorded in the \
                     capture",
                ));
            }
        }
        let traced = l.dev.recorder().is_some();
        if traced {
            let mut pending = l.stream.pending_waits.lock();
            for (_, e) in &self.waits {
                match e.trace_op.load(Ordering::Relaxed) {
                    0 => {}
                    id => pending.push(id),
                }
            }
        }
        Ok(traced)
    }

    /// The launch through the tracking layer (`tracking/track_scope.rs`), part by part.
    fn launch_tracked(&mut self, l: &GraphLaunch<'_>) -> Result<Option<Done>> {
        let (stream, dev) = (l.stream, l.dev);
        let (after, want_done) = l.after();
        let mut launch = ScopedLaunch {
            parts: &self.parts,
            groups: &self.groups,
            chains: &mut self.chains,
            wait_chains: &self.wait_sets.chains,
            waits: self
                .waits
                .iter()
                .map(|(_, e)| WaitSide {
                    clock: &e.clock,
                    event: &*e.backend,
                })
                .collect(),
            records: self
                .records
                .iter()
                .map(|r| RecordSide {
                    clock: &r.event.clock,
                    waits: &r.waits,
                    upstream: &r.upstream,
                })
                .collect(),
            hosts: l.hosts,
        };
        let mut done_out = None;
        dev.track
            .run_scoped(l.caller(), &mut launch, |nodes_after, want| {
                let slot = stream.trace_graph(dev, l.nodes);
                let launched = stream.backend.launch_graph(
                    l.graph,
                    after,
                    nodes_after,
                    want || want_done,
                    slot,
                )?;
                done_out = if want_done {
                    launched.done.clone()
                } else {
                    None
                };
                Ok(launched)
            })?;
        Ok(done_out)
    }
}
