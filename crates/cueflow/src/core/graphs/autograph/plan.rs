//! The structure of a window's graph (SPEC AG3): which held call is a node, and each
//! node's dependencies — stream order, event joins (a wait follows the work before its
//! record), the dependencies the tracking layer gave — with record nodes kept off the launch's
//! critical path.

use super::entry::{Entry, EntryWork};
/// What the graph's structure needs of a held call: its stream (lane) and kind.
#[derive(Clone, Debug)]
pub(super) enum Shape<'a> {
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
    /// A stream-ordered allocation or free: no node (the allocation was made at its call,
    /// the free follows the launch).
    Memory,
}

impl<'a> Shape<'a> {
    pub fn of(e: &'a Entry) -> Shape<'a> {
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
            EntryWork::Alloc | EntryWork::Free { .. } => Shape::Memory,
        }
    }
}

/// The graph's dependencies: per held call, its node's dependencies and its node (node indices
/// in call order; a wait is no node: `None`), and each lane's last operation node.
pub(super) struct Plan {
    pub deps: Vec<Option<Vec<usize>>>,
    pub node_of: Vec<Option<usize>>,
    pub last: Vec<Option<usize>>,
}

/// What waits for an event depends on the work before its record, not on the record node. A
/// join's own event is recorded by no node (nothing outside the window can observe it, and
/// what waits for it inside follows the work before the record), and a record of any other
/// timing-free event is a leaf (what follows it on its stream does not wait for
/// it either; such records of one stream stay in order among themselves), so that record nodes
/// stay off the launch's critical path (the driver's record nodes cost microseconds each). A
/// timing event's record stays in its stream's order: its timestamp is taken before the
/// stream's next operation starts, as without graphs (EV6's elapsed times).
pub(super) fn plan(shapes: &[Shape], lanes: usize) -> Plan {
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
            Shape::Memory => continue,
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

#[cfg(test)]
mod tests {
    use super::{plan, Shape};

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
