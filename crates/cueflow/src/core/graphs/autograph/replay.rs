//! A window's held calls as one graph (SPEC AG3): built from the calls with their stream order,
//! event joins and dependencies, instantiated once, updated where kernel scalars changed, and
//! launched on the window's first stream with every other stream of the window forked off
//! before and joined after.
//!
//! The join costs no call of its own: the graph ends with a record node of the join event
//! after every stream's last node, and each other stream waits for it lazily
//! ([`wait_later`]: before its next enqueue, query or synchronize), so a
//! stream that runs nothing but replays between them is never waited on. The join event's
//! later records are this graph's later launches, each of which the stream's own later
//! calls follow anyway (they hold the stream's part of the window, in its order). A blocking
//! stream joins at once: the legacy stream's work orders after its queue (ST4).
//!
//! [`wait_later`]: crate::backend::contract::device::BackendStream::wait_later

use crate::backend::contract::node_op::NodeOp;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::SmallVec;

use super::entry::{Ctx, Entry, EntryWork, Lane};
use super::key::{alloc_addr, Places};
use super::plan::{plan, Shape};
use super::window::{clear_events, Window};
use crate::backend::contract::device::{BackendGraph, Done, GraphFlags};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::{GraphNode, GraphWork};
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{Op, Work};
use crate::error::Result;
use crate::types::EventFlags;

/// An instantiated template.
pub(super) struct Replay {
    exec: Arc<dyn BackendGraph>,
    /// The node of each held call (records and operations; waits have none).
    node_of: Vec<Option<usize>>,
    /// The operation each operation node holds now, to see which kernel scalars changed;
    /// `None` for a node let go of after its launch (`renewed`).
    current: Vec<Option<Op>>,
    /// The held calls whose operations use memory a call of the window allocated (named by
    /// place, AG2): after each launch their nodes let go of it (`BackendGraph::release`), so
    /// it goes back to the pool with the launch, and each window gives them its own.
    renewed: Vec<usize>,
    /// The event each record node records now: a window that repeats the signature with new
    /// events (signatures name events by place) gives the nodes its own before the launch.
    events: Vec<Option<Arc<dyn BackendEvent>>>,
    /// The dependencies inside the window of each held call the graph was built with (its
    /// edges besides stream order and event joins): a window whose calls have others is
    /// built anew.
    /// `None` where no held call had any (the common case).
    inner: Option<Vec<SmallVec<[usize; 2]>>>,
    /// Events that fork the window's other streams off the first (before the launch) and
    /// join them back (after: recorded by the graph's last node).
    fork: Vec<Arc<dyn BackendEvent>>,
    join: Option<Arc<dyn BackendEvent>>,
    /// Per other stream, its [`enqueued`] number right after it
    /// joined the last launch: while it is the same, the stream has nothing the next launch
    /// is not already ordered after, and needs no fork.
    ///
    /// [`enqueued`]: crate::backend::contract::device::BackendStream::enqueued
    joined: Vec<Option<u64>>,
}

/// `op` as a graph node holds it: no trace slot, no read check (neither is held, AG5).
fn node_op(op: &Op) -> Op {
    let mut op = op.clone();
    op.trace = None;
    op.set_read_check(None);
    op
}

/// The dependencies inside the window of a held call.
fn inner_of(e: &Entry) -> &[usize] {
    match &e.work {
        EntryWork::Op { inner, .. } => inner,
        _ => &[],
    }
}

fn scalars_differ(a: &Launch, b: &Launch) -> bool {
    a.args.iter().zip(b.args.iter()).any(|(x, y)| {
        matches!((x, y), (KernelArg::Scalar { bytes: bx, .. }, KernelArg::Scalar { bytes: by, .. }) if !same_bytes(bx, by))
    })
}

/// What a held operation changes in its node, which the signature it repeats names the same
/// (AG3): kernel scalars or a memset's byte, or memory named by place (another allocation of
/// the window).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    None,
    Scalars,
    Memory,
}

fn change(new: &Work, old: &Work) -> Change {
    let other = |a: &MemRef, b: &MemRef| !Arc::ptr_eq(&a.alloc, &b.alloc);
    let memory = match (new, old) {
        (Work::Launch(a), Work::Launch(b)) => a.args.iter().zip(b.args.iter()).any(|(x, y)| {
            matches!((x, y), (KernelArg::Buffer { mem: mx, .. }, KernelArg::Buffer { mem: my, .. }) if other(mx, my))
        }),
        (Work::Copy { dst, src }, Work::Copy { dst: d, src: s }) => other(dst, d) || other(src, s),
        (Work::Memset { dst, .. }, Work::Memset { dst: d, .. }) => other(dst, d),
        _ => false,
    };
    match (new, old) {
        _ if memory => Change::Memory,
        (Work::Launch(a), Work::Launch(b)) if scalars_differ(a, b) => Change::Scalars,
        (Work::Memset { value: a, .. }, Work::Memset { value: b, .. }) if a != b => Change::Scalars,
        _ => Change::None,
    }
}

/// `a == b` for a scalar's bytes, the usual 4 and 8 as one load each, not a call to
/// `memcmp` (a replay compares every kernel scalar of its window before it launches).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    fn word<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
        s.try_into().ok()
    }
    match (a.len(), b.len()) {
        (4, 4) => word::<4>(a).map(u32::from_ne_bytes) == word::<4>(b).map(u32::from_ne_bytes),
        (8, 8) => word::<8>(a).map(u64::from_ne_bytes) == word::<8>(b).map(u64::from_ne_bytes),
        _ => a == b,
    }
}

impl Ctx<'_> {
    /// Build and instantiate the graph of `entries` over `lanes`.
    fn instantiate(&self, entries: &[Entry], lanes: &[Lane], places: &Places) -> Result<Replay> {
        let shapes: Vec<Shape> = entries.iter().map(Shape::of).collect();
        let planned = plan(&shapes, lanes.len());
        let mut nodes: Vec<GraphNode> = Vec::with_capacity(entries.len());
        let mut current = vec![None; entries.len()];
        let mut events = vec![None; entries.len()];
        for (i, (e, deps)) in entries.iter().zip(planned.deps).enumerate() {
            let Some(deps) = deps else { continue };
            let work = match &e.work {
                EntryWork::Wait { .. } | EntryWork::Alloc | EntryWork::Free { .. } => {
                    unreachable!("no node")
                }
                EntryWork::Record { event, .. } => {
                    events[i] = Some(event.clone());
                    GraphWork::EventRecord(event.clone())
                }
                EntryWork::Op { op, .. } => {
                    let op = node_op(op);
                    current[i] = Some(op.clone());
                    GraphWork::Op(NodeOp::new(op))
                }
            };
            nodes.push(GraphNode {
                work,
                deps: deps.into(),
                lane: e.lane,
                stream: e.stream_id,
                site: None,
            });
        }
        let (node_of, last) = (planned.node_of, planned.last);
        let quiet = EventFlags {
            timing: false,
            ..Default::default()
        };
        let join = if lanes.len() > 1 {
            let join = self.backend.create_event(quiet)?;
            // The join: after every stream's last node, so after the whole launch.
            let mut deps: Vec<usize> = last.iter().flatten().copied().collect();
            deps.sort_unstable();
            nodes.push(GraphNode {
                work: GraphWork::EventRecord(join.clone()),
                deps: deps.into(),
                lane: 0,
                stream: entries[0].stream_id,
                site: None,
            });
            Some(join)
        } else {
            None
        };
        // The launch's per-record completions are not used (its records are the program's).
        let flags = GraphFlags {
            no_record_completions: true,
            ..GraphFlags::default()
        };
        let exec = self.backend.instantiate_graph(&nodes, flags)?;
        let fork = (1..lanes.len())
            .map(|_| self.backend.create_event(quiet))
            .collect::<Result<Vec<_>>>()?;
        self.stats.graphs.fetch_add(1, Ordering::Relaxed);
        Ok(Replay {
            exec,
            node_of,
            current,
            renewed: renewed_of(entries, places),
            events,
            joined: vec![None; fork.len()],
            inner: entries
                .iter()
                .any(|e| !inner_of(e).is_empty())
                .then(|| entries.iter().map(|e| inner_of(e).into()).collect()),
            fork,
            join,
        })
    }

    /// Run the held calls of `w`, which make up calls `w.part_start..end` of template `t`, as
    /// the graph of that part (AG2, AG3); where that fails, mark the template failed and issue
    /// them one by one (AG5).
    pub(super) fn replay(&self, w: &mut Window, t: usize, end: usize) -> Result<()> {
        let entries = &w.entries[..w.held];
        let start = w.part_start;
        let tmpl = &mut w.templates[t];
        let inner_held = w.inner_held;
        let built_for = |r: &Replay| match (&r.inner, inner_held) {
            // Neither has dependencies inside the window: the common case, compared at once.
            (None, false) => true,
            (Some(inner), true) => {
                inner.len() == entries.len()
                    && inner
                        .iter()
                        .zip(entries)
                        .all(|(i, e)| i[..] == *inner_of(e))
            }
            _ => false,
        };
        let found = tmpl.parts.iter().position(|p| (p.0, p.1) == (start, end));
        let k = match found {
            Some(k) if built_for(&tmpl.parts[k].2) => k,
            _ => {
                if let Some(k) = found {
                    tmpl.parts.swap_remove(k); // Other dependencies inside: other edges.
                }
                match self.instantiate(entries, &w.lanes, &w.allocated) {
                    Ok(r) => tmpl.parts.push((start, end, r)),
                    Err(_) => {
                        tmpl.failed = true;
                        tmpl.spare.clear(); // AG6: never taken again; back to the pool.
                        return self.issue_held(w);
                    }
                }
                tmpl.parts.len() - 1
            }
        };
        let r = &mut tmpl.parts[k].2;
        match launch(self, r, entries, &w.lanes) {
            Ok(ops) => {
                self.stats.replays.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .replayed_calls
                    .fetch_add(ops as u64, Ordering::Relaxed);
                release_window_memory(r);
                keep_freed_memory(w, t);
                clear_events(w);
                w.replayed();
                Ok(())
            }
            Err(Launch1::Before) => {
                // Nothing of the part ran: one by one, and this template never again.
                tmpl.failed = true;
                tmpl.parts.clear();
                tmpl.spare.clear();
                self.issue_held(w)
            }
            Err(Launch1::After(e)) => {
                clear_events(w);
                w.replayed();
                Err(e)
            }
        }
    }
}

/// The held calls among `entries` that are operations over memory a call of the window
/// allocated (`places`).
fn renewed_of(entries: &[Entry], places: &Places) -> Vec<usize> {
    let uses_window_memory = |e: &Entry| {
        let EntryWork::Op { op, .. } = &e.work else {
            return false;
        };
        let mut window = false;
        op.for_each_access(|m, _, _| window |= places.contains_key(&alloc_addr(&m.alloc)));
        window
    };
    let used = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| uses_window_memory(e));
    used.map(|(i, _)| i).collect()
}

/// After a launch: the nodes over memory the window allocated let go of it (`renewed`).
fn release_window_memory(r: &mut Replay) {
    for &i in &r.renewed {
        if let Some(node) = r.node_of[i] {
            r.exec.release(node);
            r.current[i] = None;
        }
    }
}

/// The held frees of a replayed part, after its launch: the memory each gives back stays with
/// template `t` for the next window's allocation at its place (`Template::spare`). Not given
/// to the pool, it is reused with no call to the backend; let go of (the template ages, or the
/// allocation finds it still held), it goes back to the pool once its last holder is done
/// (MM2).
fn keep_freed_memory(w: &mut Window, t: usize) {
    let spare = &mut w.templates[t].spare;
    for e in &mut w.entries[..w.held] {
        if let EntryWork::Free { alloc, place } = &mut e.work {
            if let Some(alloc) = alloc.take() {
                spare.retain(|s| s.0 != *place);
                spare.push((*place, alloc));
            }
        }
    }
}

/// Give the record node of held call `i` the window's event `ev`, where it records another.
fn set_event(
    ag: &Ctx<'_>,
    r: &mut Replay,
    i: usize,
    ev: &Arc<dyn BackendEvent>,
) -> std::result::Result<(), Launch1> {
    let (Some(node), Some(old)) = (r.node_of[i], &r.events[i]) else {
        return Ok(());
    };
    if Arc::ptr_eq(old, ev) {
        return Ok(());
    }
    r.exec.set_event(node, ev).map_err(|_| Launch1::Before)?;
    r.events[i] = Some(ev.clone());
    ag.stats.event_updates.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Where a launch failed: before any of the window ran (the calls can still go one by one),
/// or after.
enum Launch1 {
    Before,
    After(crate::error::Error),
}

/// Bring each node of `r` up to the held calls (GR6): changed kernel scalars, memory the
/// window allocated anew, the window's own events; returns the completions outside the
/// window the launch waits for, whether a held call wants its completion, and the number of
/// operations.
fn renew(
    ag: &Ctx<'_>,
    r: &mut Replay,
    entries: &[Entry],
) -> std::result::Result<(Vec<Done>, bool, usize), Launch1> {
    let mut after: Vec<Done> = Vec::new();
    let (mut want, mut ops) = (false, 0);
    for (i, e) in entries.iter().enumerate() {
        let (op, a, done) = match &e.work {
            EntryWork::Op {
                op, after, done, ..
            } => (op, after, done),
            EntryWork::Record { event, .. } => {
                set_event(ag, r, i, event)?;
                continue;
            }
            EntryWork::Wait { .. } | EntryWork::Alloc | EntryWork::Free { .. } => continue,
        };
        ops += 1;
        want |= done.is_some();
        for d in a {
            if !after.iter().any(|x| Arc::ptr_eq(x, d)) {
                after.push(d.clone());
            }
        }
        let Some(node) = r.node_of[i] else {
            continue;
        };
        let changed = match &r.current[i] {
            Some(old) => change(&op.work, &old.work),
            None => Change::Memory, // Let go of after the last launch.
        };
        if changed != Change::None {
            let new = node_op(op);
            r.exec.update(node, &new).map_err(|_| Launch1::Before)?;
            r.current[i] = Some(new);
            let counter = match changed {
                Change::Scalars => &ag.stats.updates,
                _ => &ag.stats.memory_updates,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok((after, want, ops))
}

/// Bring the nodes up to the held calls ([`renew`]), fork, launch, fill the held completions,
/// join; returns the operations the launch ran.
fn launch(
    ag: &Ctx<'_>,
    r: &mut Replay,
    entries: &[Entry],
    lanes: &[Lane],
) -> std::result::Result<usize, Launch1> {
    let (after, want, ops) = renew(ag, r, entries)?;
    let origin = &lanes[0].stream;
    let calls = &ag.stats.stream_calls;
    for (k, (lane, ev)) in lanes[1..].iter().zip(&r.fork).enumerate() {
        // A stream with nothing enqueued since it joined the last launch is ordered before
        // this one already (AG3), unless it is a blocking stream and the origin is not: it
        // would wait for legacy work the origin does not (ST5).
        let mark = r.joined[k].take();
        if mark.is_some() && lane.stream.enqueued() == mark && (!lane.blocking || lanes[0].blocking)
        {
            continue;
        }
        calls.fetch_add(2, Ordering::Relaxed);
        lane.stream.record(ev).map_err(|_| Launch1::Before)?;
        origin.wait(ev).map_err(|_| Launch1::Before)?;
    }
    // A refused launch enqueued nothing: the calls go one by one (the forks only order).
    calls.fetch_add(1, Ordering::Relaxed);
    let launched = origin
        .launch_graph(&r.exec, &after, Vec::new(), want, None)
        .map_err(|_| Launch1::Before)?;
    if want {
        for e in entries {
            if let EntryWork::Op { done: Some(d), .. } = &e.work {
                d.fill(launched.done.clone());
            }
        }
    }
    if let Some(join) = &r.join {
        // The graph recorded the join; each other stream waits for it (see the module doc).
        for (k, lane) in lanes[1..].iter().enumerate() {
            if lane.blocking {
                calls.fetch_add(1, Ordering::Relaxed);
                lane.stream.wait(join).map_err(Launch1::After)?;
            } else {
                lane.stream.wait_later(join).map_err(Launch1::After)?;
            }
            r.joined[k] = lane.stream.enqueued();
        }
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    #[test]
    fn scalar_bytes_compare_by_length_and_value() {
        assert!(same_bytes(&[1, 2, 3], &[1, 2, 3]));
        assert!(!same_bytes(&[1, 2, 3], &[1, 2, 4]));
        assert!(!same_bytes(&[1, 2, 0], &[1, 2]));
        assert!(same_bytes(&7u32.to_ne_bytes(), &7u32.to_ne_bytes()));
        assert!(!same_bytes(&7u32.to_ne_bytes(), &8u32.to_ne_bytes()));
        assert!(same_bytes(&7u64.to_ne_bytes(), &7u64.to_ne_bytes()));
        assert!(!same_bytes(
            &7u64.to_ne_bytes(),
            &(7u64 << 40).to_ne_bytes()
        ));
        assert!(!same_bytes(&7u64.to_ne_bytes(), &7u32.to_ne_bytes()));
        assert!(same_bytes(&[7; 24], &[7; 24]));
        assert!(!same_bytes(&[7; 24], &[[7; 23].as_slice(), &[8]].concat()));
        assert!(same_bytes(&[], &[]));
    }
}
