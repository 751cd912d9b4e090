//! A window's held calls as one graph (SPEC AG3): built from the calls with their stream order,
//! event joins and dependencies, instantiated once, updated where kernel scalars changed, and
//! launched on the window's first stream with every other stream of the window forked off
//! before and joined after.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::entry::{Ctx, Entry, EntryWork};
use super::window::{clear_events, Window};
use crate::backend::contract::device::{BackendGraph, BackendStream, Done, GraphFlags};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::contract::op::{Op, Work};
use crate::error::Result;
use crate::types::EventFlags;

/// An instantiated template.
pub(super) struct Replay {
    exec: Arc<dyn BackendGraph>,
    /// The node of each held call (records and operations; waits have none).
    node_of: Vec<Option<usize>>,
    /// The launch each kernel node holds now, to see which scalars changed.
    current: Vec<Option<Launch>>,
    /// Events that fork the window's other streams off the first (before the launch) and
    /// join them back (after).
    fork: Vec<Arc<dyn BackendEvent>>,
    join: Option<Arc<dyn BackendEvent>>,
}

/// The streams of `entries` in order of first appearance (lane 0 launches the graph).
fn lanes(entries: &[Entry]) -> Vec<(u64, Arc<dyn BackendStream>)> {
    let mut lanes: Vec<(u64, Arc<dyn BackendStream>)> = Vec::new();
    for e in entries {
        if !lanes.iter().any(|(a, _)| *a == e.actor) {
            lanes.push((e.actor, e.stream.clone()));
        }
    }
    lanes
}

/// `op` as a graph node holds it: no trace slot, no read check (neither is held, AG5).
fn node_op(op: &Op) -> Op {
    let mut op = op.clone();
    op.trace = None;
    op.read_check = None;
    op
}

fn scalars_differ(a: &Launch, b: &Launch) -> bool {
    a.args.iter().zip(b.args.iter()).any(|(x, y)| {
        matches!((x, y), (KernelArg::Scalar { bytes: bx, .. }, KernelArg::Scalar { bytes: by, .. }) if bx != by)
    })
}

impl Ctx<'_> {
    /// Build and instantiate the graph of `entries`.
    fn instantiate(&self, entries: &[Entry]) -> Result<Replay> {
        let lanes = lanes(entries);
        let lane_of = |actor: u64| lanes.iter().position(|(a, _)| *a == actor).unwrap_or(0);
        let mut nodes: Vec<GraphNode> = Vec::with_capacity(entries.len());
        let mut node_of: Vec<Option<usize>> = vec![None; entries.len()];
        let mut last: Vec<Option<usize>> = vec![None; lanes.len()];
        let mut joins: Vec<Vec<usize>> = vec![Vec::new(); lanes.len()];
        let mut current = vec![None; entries.len()];
        for (i, e) in entries.iter().enumerate() {
            let lane = lane_of(e.actor);
            let work = match &e.work {
                EntryWork::Wait { record, .. } => {
                    joins[lane].extend(node_of[*record]);
                    continue;
                }
                EntryWork::Record(ev) => GraphWork::EventRecord(ev.clone()),
                EntryWork::Op { op, .. } => {
                    if let Work::Launch(l) = &op.work {
                        current[i] = Some(l.clone());
                    }
                    GraphWork::Op(node_op(op))
                }
            };
            let mut deps: Vec<usize> = last[lane].into_iter().collect();
            deps.append(&mut joins[lane]);
            if let EntryWork::Op { inner, .. } = &e.work {
                deps.extend(inner.iter().filter_map(|&j| node_of[j]));
            }
            deps.sort_unstable();
            deps.dedup();
            node_of[i] = Some(nodes.len());
            last[lane] = Some(nodes.len());
            nodes.push(GraphNode {
                work,
                deps,
                lane,
                stream: e.stream_id,
                site: None,
            });
        }
        let exec = self
            .backend
            .instantiate_graph(&nodes, GraphFlags::default())?;
        let quiet = EventFlags {
            timing: false,
            ..Default::default()
        };
        let fork = (1..lanes.len())
            .map(|_| self.backend.create_event(quiet))
            .collect::<Result<Vec<_>>>()?;
        let join = if lanes.len() > 1 {
            Some(self.backend.create_event(quiet)?)
        } else {
            None
        };
        self.stats.graphs.fetch_add(1, Ordering::Relaxed);
        Ok(Replay {
            exec,
            node_of,
            current,
            fork,
            join,
        })
    }

    /// Run the held calls of `w`, which make up template `t`, as its graph (AG2, AG3); where
    /// that fails, mark the template failed and issue them one by one (AG5).
    pub(super) fn replay(&self, w: &mut Window, t: usize) -> Result<()> {
        let entries = std::mem::take(&mut w.entries);
        let tmpl = &mut w.templates[t];
        if tmpl.replay.is_none() {
            match self.instantiate(&entries) {
                Ok(r) => tmpl.replay = Some(r),
                Err(_) => {
                    tmpl.failed = true;
                    w.entries = entries;
                    return self.issue_held(w);
                }
            }
        }
        let r = tmpl.replay.as_mut().expect("instantiated above");
        let mut entries = entries;
        match launch(self, r, &entries) {
            Ok(()) => {
                let ops = entries
                    .iter()
                    .filter(|e| matches!(e.work, EntryWork::Op { .. }))
                    .count();
                self.stats.replays.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .replayed_calls
                    .fetch_add(ops as u64, Ordering::Relaxed);
                clear_events(w);
                entries.clear();
                w.entries = entries; // Its capacity serves the next window.
                Ok(())
            }
            Err(Launch1::Before) => {
                // Nothing of the window ran: one by one, and this graph never again.
                tmpl.failed = true;
                tmpl.replay = None;
                w.entries = entries;
                self.issue_held(w)
            }
            Err(Launch1::After(e)) => {
                clear_events(w);
                Err(e)
            }
        }
    }
}

/// Where a launch failed: before any of the window ran (the calls can still go one by one),
/// or after.
enum Launch1 {
    Before,
    After(crate::error::Error),
}

/// Update changed scalars (GR6), fork, launch, fill the held completions, join.
fn launch(ag: &Ctx<'_>, r: &mut Replay, entries: &[Entry]) -> std::result::Result<(), Launch1> {
    for (i, e) in entries.iter().enumerate() {
        let EntryWork::Op { op, .. } = &e.work else {
            continue;
        };
        let (Work::Launch(new), Some(old), Some(node)) = (&op.work, &r.current[i], r.node_of[i])
        else {
            continue;
        };
        if scalars_differ(new, old) {
            r.exec
                .update(node, &node_op(op))
                .map_err(|_| Launch1::Before)?;
            r.current[i] = Some(new.clone());
            ag.stats.updates.fetch_add(1, Ordering::Relaxed);
        }
    }
    let lanes = lanes(entries);
    let mut after: Vec<Done> = Vec::new();
    let mut want = false;
    for e in entries {
        if let EntryWork::Op { after: a, done, .. } = &e.work {
            want |= done.is_some();
            for d in a {
                if !after.iter().any(|x| Arc::ptr_eq(x, d)) {
                    after.push(d.clone());
                }
            }
        }
    }
    let origin = &lanes[0].1;
    for ((_, s), ev) in lanes[1..].iter().zip(&r.fork) {
        s.record(ev).map_err(|_| Launch1::Before)?;
        origin.wait(ev).map_err(|_| Launch1::Before)?;
    }
    // A refused launch enqueued nothing: the calls go one by one (the forks only order).
    let launched = origin
        .launch_graph(&r.exec, &after, Vec::new(), want, None)
        .map_err(|_| Launch1::Before)?;
    for e in entries {
        if let EntryWork::Op { done: Some(d), .. } = &e.work {
            d.fill(launched.done.clone());
        }
    }
    if let Some(join) = &r.join {
        origin.record(join).map_err(Launch1::After)?;
        for (_, s) in &lanes[1..] {
            s.wait(join).map_err(Launch1::After)?;
        }
    }
    Ok(())
}
