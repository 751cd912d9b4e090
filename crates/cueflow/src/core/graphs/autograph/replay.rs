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
use super::window::{clear_events, Window};
use crate::backend::contract::device::{BackendGraph, Done, GraphFlags};
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
    op.read_check = None;
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

/// What the graph's structure needs of a held call: its stream (lane) and kind.
#[derive(Clone, Debug)]
enum Shape<'a> {
    /// An operation after the held calls `inner` (indices into the window).
    Op { lane: usize, inner: &'a [usize] },
    /// An event record; `timing`: of an event that takes timestamps; `internal`: of a join's
    /// own event (no node: nothing outside the window observes it).
    Record {
        lane: usize,
        timing: bool,
        internal: bool,
    },
    /// A wait for the record at `record`.
    Wait { lane: usize, record: usize },
}

impl<'a> Shape<'a> {
    fn of(e: &'a Entry) -> Shape<'a> {
        let lane = e.lane;
        match &e.work {
            EntryWork::Op { inner, .. } => Shape::Op { lane, inner },
            EntryWork::Record { event, internal } => Shape::Record {
                lane,
                timing: event.flags().timing,
                internal: *internal,
            },
            EntryWork::Wait { record, .. } => Shape::Wait {
                lane,
                record: *record,
            },
        }
    }
}

/// The graph's dependencies: per held call, its node's dependencies and its node (node indices
/// in call order; a wait is no node: `None`), and each lane's last operation node.
struct Plan {
    deps: Vec<Option<Vec<usize>>>,
    node_of: Vec<Option<usize>>,
    last: Vec<Option<usize>>,
}

/// What waits for an event depends on the work before its record, not on the record node. A
/// join's own event is recorded by no node (nothing outside the window can observe it, and
/// what waits for it inside follows the work before the record), and a record of any other
/// timing-free event is a leaf (what follows it on its stream does not wait for
/// it either; such records of one stream stay in order among themselves), so that record nodes
/// stay off the launch's critical path (the driver's record nodes cost microseconds each). A
/// timing event's record stays in its stream's order: its timestamp is taken before the
/// stream's next operation starts, as without graphs (EV6's elapsed times).
fn plan(shapes: &[Shape], lanes: usize) -> Plan {
    let mut deps_of: Vec<Option<Vec<usize>>> = vec![None; shapes.len()];
    let mut node_of: Vec<Option<usize>> = vec![None; shapes.len()];
    let mut before: Vec<Vec<usize>> = vec![Vec::new(); shapes.len()];
    let mut last: Vec<Option<usize>> = vec![None; lanes];
    let mut last_record: Vec<Option<usize>> = vec![None; lanes];
    let mut joins: Vec<Vec<usize>> = vec![Vec::new(); lanes];
    // A join's record waited for inside these calls: no node (its wait is an edge). One whose
    // wait comes after them (the part or the signature ended at the record) is recorded by a
    // node as any other, for the wait issued later to find it.
    let mut waited = vec![false; shapes.len()];
    for shape in shapes {
        if let Shape::Wait { record, .. } = *shape {
            waited[record] = true;
        }
    }
    let mut nodes = 0;
    for (i, shape) in shapes.iter().enumerate() {
        // `node`: false for a join's record whose wait is among these calls.
        let (lane, inner, record, leaf, node) = match *shape {
            Shape::Wait { lane, record } => {
                match before[record].is_empty() {
                    true => joins[lane].extend(node_of[record]),
                    false => joins[lane].extend_from_slice(&before[record]),
                }
                continue;
            }
            Shape::Op { lane, inner } => (lane, inner, false, false, true),
            Shape::Record {
                lane,
                timing,
                internal,
            } => (lane, &[][..], true, !timing, !(internal && waited[i])),
        };
        let mut deps: Vec<usize> = last[lane].into_iter().collect();
        match leaf {
            // The joins stay for the stream's next operation.
            true => deps.extend_from_slice(&joins[lane]),
            false => deps.append(&mut joins[lane]),
        }
        deps.extend(inner.iter().filter_map(|&j| node_of[j]));
        deps.sort_unstable();
        deps.dedup();
        if record {
            before[i] = deps.clone();
        }
        if !node {
            continue;
        }
        node_of[i] = Some(nodes);
        if leaf {
            deps.extend(last_record[lane]);
            last_record[lane] = Some(nodes);
        } else {
            last[lane] = Some(nodes);
        }
        deps_of[i] = Some(deps);
        nodes += 1;
    }
    Plan {
        deps: deps_of,
        node_of,
        last,
    }
}

impl Ctx<'_> {
    /// Build and instantiate the graph of `entries` over `lanes`.
    fn instantiate(&self, entries: &[Entry], lanes: &[Lane]) -> Result<Replay> {
        let shapes: Vec<Shape> = entries.iter().map(Shape::of).collect();
        let planned = plan(&shapes, lanes.len());
        let mut nodes: Vec<GraphNode> = Vec::with_capacity(entries.len());
        let mut current = vec![None; entries.len()];
        let mut events = vec![None; entries.len()];
        for (i, (e, deps)) in entries.iter().zip(planned.deps).enumerate() {
            let Some(deps) = deps else { continue };
            let work = match &e.work {
                EntryWork::Wait { .. } => unreachable!("a wait is no node"),
                EntryWork::Record { event, .. } => {
                    events[i] = Some(event.clone());
                    GraphWork::EventRecord(event.clone())
                }
                EntryWork::Op { op, .. } => {
                    if let Work::Launch(l) = &op.work {
                        current[i] = Some(l.clone());
                    }
                    GraphWork::Op(NodeOp::new(node_op(op)))
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
                match self.instantiate(entries, &w.lanes) {
                    Ok(r) => tmpl.parts.push((start, end, r)),
                    Err(_) => {
                        tmpl.failed = true;
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
                clear_events(w);
                w.replayed();
                Ok(())
            }
            Err(Launch1::Before) => {
                // Nothing of the part ran: one by one, and this template never again.
                tmpl.failed = true;
                tmpl.parts.clear();
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

/// Update changed scalars and recorded events (GR6), fork, launch, fill the held completions,
/// join; returns the operations the launch ran.
fn launch(
    ag: &Ctx<'_>,
    r: &mut Replay,
    entries: &[Entry],
    lanes: &[Lane],
) -> std::result::Result<usize, Launch1> {
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
            EntryWork::Wait { .. } => continue,
        };
        ops += 1;
        want |= done.is_some();
        for d in a {
            if !after.iter().any(|x| Arc::ptr_eq(x, d)) {
                after.push(d.clone());
            }
        }
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
    use super::{plan, same_bytes, Shape};

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

    /// The fork/join window: lane 0 runs `a`, records e0; lanes 1 and 2 wait for e0, run one
    /// operation each and record; lane 0 waits for both and runs `b`, then records e3 twice.
    /// Nothing depends on a record node but the next record of its stream.
    #[test]
    fn records_are_leaves_and_waits_follow_the_work_before_them() {
        let shapes = [
            Shape::Op {
                lane: 0,
                inner: &[],
            }, // 0: node 0, a
            Shape::Record {
                lane: 0,
                timing: false,
                internal: false,
            }, // 1: node 1, e0
            Shape::Wait { lane: 1, record: 1 },
            Shape::Op {
                lane: 1,
                inner: &[],
            }, // 3: node 2
            Shape::Record {
                lane: 1,
                timing: false,
                internal: false,
            }, // 4: node 3, e1
            Shape::Wait { lane: 2, record: 1 },
            Shape::Op {
                lane: 2,
                inner: &[],
            }, // 6: node 4
            Shape::Record {
                lane: 2,
                timing: false,
                internal: false,
            }, // 7: node 5, e2
            Shape::Wait { lane: 0, record: 4 },
            Shape::Wait { lane: 0, record: 7 },
            Shape::Op {
                lane: 0,
                inner: &[],
            }, // 10: node 6, b
            Shape::Record {
                lane: 0,
                timing: false,
                internal: false,
            }, // 11: node 7, e3
            Shape::Record {
                lane: 0,
                timing: false,
                internal: false,
            }, // 12: node 8, e3 again
        ];
        let p = plan(&shapes, 3);
        let deps: Vec<Option<Vec<usize>>> = p.deps;
        let want: [Option<&[usize]>; 13] = [
            Some(&[]),
            Some(&[0]),
            None,
            Some(&[0]),
            Some(&[2]),
            None,
            Some(&[0]),
            Some(&[4]),
            None,
            None,
            Some(&[0, 2, 4]),
            Some(&[6, 1]),
            Some(&[6, 7]),
        ];
        let want: Vec<Option<Vec<usize>>> = want.iter().map(|d| d.map(<[usize]>::to_vec)).collect();
        assert_eq!(deps, want);
        assert_eq!(p.last, vec![Some(6), Some(2), Some(4)]);
    }

    /// A join's record is no node when its wait is among the calls, and a leaf record node when
    /// the calls end before its wait (the wait, issued later, must find it recorded).
    #[test]
    fn a_joins_record_is_a_node_only_when_its_wait_is_elsewhere() {
        let op = |lane| Shape::Op { lane, inner: &[] };
        let join = |lane| Shape::Record {
            lane,
            timing: false,
            internal: true,
        };
        let waited = [op(0), join(0), Shape::Wait { lane: 1, record: 1 }, op(1)];
        let p = plan(&waited, 2);
        assert_eq!(p.node_of[1], None);
        assert_eq!(p.deps[3], Some(vec![0]));
        let ended = [op(0), join(0)];
        let p = plan(&ended, 1);
        assert_eq!(p.node_of[1], Some(1));
        assert_eq!(p.deps[1], Some(vec![0]));
    }

    /// A timing event's record stays in its stream's order (what follows waits for it); a wait
    /// for it still follows the work before it.
    #[test]
    fn a_timing_record_stays_in_its_streams_order() {
        let shapes = [
            Shape::Op {
                lane: 0,
                inner: &[],
            },
            Shape::Record {
                lane: 0,
                timing: true,
                internal: false,
            },
            Shape::Op {
                lane: 0,
                inner: &[],
            },
            Shape::Wait { lane: 1, record: 1 },
            Shape::Op {
                lane: 1,
                inner: &[],
            },
        ];
        let deps = plan(&shapes, 2).deps;
        assert_eq!(deps[1], Some(vec![0]));
        assert_eq!(deps[2], Some(vec![1]));
        assert_eq!(deps[4], Some(vec![0]));
    }

    /// A wait for a record with nothing before it in the window follows the record node.
    #[test]
    fn a_wait_for_a_first_record_follows_the_record_node() {
        let shapes = [
            Shape::Record {
                lane: 0,
                timing: false,
                internal: false,
            },
            Shape::Wait { lane: 1, record: 0 },
            Shape::Op {
                lane: 1,
                inner: &[],
            },
        ];
        assert_eq!(plan(&shapes, 2).deps[2], Some(vec![0]));
    }
}
