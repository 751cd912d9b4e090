//! The accesses of one allocation, by byte range (SPEC AC1): for every byte, the last write and
//! the reads and atomic accesses since it, each with who made it, the completion of the
//! operation that made it, and (with the sanitizer on) where and when.
//!
//! This one structure serves four layers of core's path:
//! - **MM3**: host access to pinned memory waits for the pending device accesses it conflicts
//!   with;
//! - **AC6**: on the host backend a new operation depends on the pending accesses it conflicts
//!   with, so conflicting accesses never run at once;
//! - **AC5**: a stream in automatic-ordering mode waits for exactly those, too;
//! - **AC4**: the sanitizer checks the conflicting accesses for a happens-before edge.
//!
//! Rules of the map:
//! 1. Segments are disjoint byte ranges keyed by their start; bytes no access touched have no
//!    segment. Each segment holds one state for all its bytes.
//! 2. A write replaces the state of its bytes (it conflicts with, and so comes after, everything
//!    it overwrote); a read or an atomic access joins the read or atomic set, replacing an
//!    earlier one by the same actor (an actor's accesses are ordered among themselves, ST1).
//! 3. Conflicts (AC3): a read conflicts with the last write and with atomics; an atomic access
//!    with the last write and with reads; a write with all three. Accesses by the same actor
//!    never conflict. Disjoint ranges never conflict.
//! 4. Segments with equal state are merged after each access, so a write over many segments
//!    leaves one; the number of segments is bounded by the distinct range boundaries in use.
//! 5. Without the sanitizer, entries whose operation completed carry no information and are
//!    dropped when their segment is next touched; with it, neither do entries of retired
//!    actors (`crate::core::tracking::actors` rule 3) whose operation completed.
//!
//! Cost: `O(log n + k)` per access for `n` segments of which `k` overlap the range.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::types::Access;

use crate::backend::contract::device::Done;
use crate::backend::contract::op::Part;
use crate::core::tracking::call::OpInfo;

use crate::core::tracking::clock::Actor;

/// The next record id, process-wide: the map of one allocation holds the accesses of every
/// device that touches it (peer copies, collectives, portable host memory), so an id must name
/// one access among all devices' (rule 4's segment equality, a call's deduplication of its
/// conflicts). Ids counted per device named two accesses of two devices alike: a call then
/// merged one's conflict into the other's and missed it, or merged segments whose states
/// differ.
static NEXT_REC_ID: AtomicU64 = AtomicU64::new(1);

/// `n` fresh record ids, unique in the process.
pub(crate) fn rec_ids(n: usize) -> Range<u64> {
    let first = NEXT_REC_ID.fetch_add(n as u64, Ordering::Relaxed);
    first..first + n as u64
}

/// One access as the map keeps it.
#[derive(Clone)]
pub(crate) struct Rec {
    /// Unique per access in the process ([`rec_ids`]): segment equality, deduplication.
    pub id: u64,
    pub actor: Actor,
    pub kind: Access,
    /// Which part of its operation made the access, and the whole range it accessed.
    pub part: Part,
    pub range: Range<usize>,
    /// Completion of the operation; `None` once complete or when it completed at the call.
    pub done: Option<Done>,
    /// Sanitizer data; `None` while the sanitizer is off.
    pub info: Option<Arc<OpInfo>>,
}

impl Rec {
    /// True if the operation may still be running: asked of the device, or (`Ask::Nobody`,
    /// for a caller that waits for what it finds anyway) unless known to be done.
    fn pending(&self, ask: Ask) -> bool {
        self.done.as_ref().is_some_and(|d| match ask {
            Ask::Device => !d.is_done(),
            Ask::Nobody => !d.known_done(),
        })
    }

    /// True if the entry still matters: its operation may be running, or the sanitizer needs
    /// its history (rule 5).
    fn live(&self) -> bool {
        self.live_as(Ask::Device)
    }

    /// [`live`](Self::live), with `ask` saying how a completion counts as pending.
    fn live_as(&self, ask: Ask) -> bool {
        self.info.as_ref().is_some_and(|i| !i.cell.retired()) || self.pending(ask)
    }
}

#[derive(Clone, Default)]
struct Seg {
    end: usize,
    write: Option<Rec>,
    reads: Vec<Rec>,
    atomics: Vec<Rec>,
}

impl Seg {
    fn is_empty(&self) -> bool {
        self.write.is_none() && self.reads.is_empty() && self.atomics.is_empty()
    }

    /// Same state (rule 4).
    fn same_state(&self, o: &Seg) -> bool {
        let same =
            |a: &[Rec], b: &[Rec]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.id == y.id);
        self.write.as_ref().map(|r| r.id) == o.write.as_ref().map(|r| r.id)
            && same(&self.reads, &o.reads)
            && same(&self.atomics, &o.atomics)
    }

    fn prune(&mut self) {
        if self.write.as_ref().is_some_and(|w| !w.live()) {
            self.write = None;
        }
        if !self.reads.is_empty() {
            self.reads.retain(Rec::live);
        }
        if !self.atomics.is_empty() {
            self.atomics.retain(Rec::live);
        }
    }

    fn apply(&mut self, rec: &Rec) {
        match rec.kind {
            Access::Write => {
                self.write = Some(rec.clone());
                if !self.reads.is_empty() {
                    self.reads.clear();
                }
                if !self.atomics.is_empty() {
                    self.atomics.clear();
                }
            }
            Access::Read => replace_or_push(&mut self.reads, rec),
            Access::Atomic => replace_or_push(&mut self.atomics, rec),
        }
    }
}

fn replace_or_push(v: &mut Vec<Rec>, rec: &Rec) {
    match v.iter_mut().find(|r| r.actor == rec.actor) {
        Some(r) => *r = rec.clone(),
        None => v.push(rec.clone()),
    }
}

/// How a conflict search tells a pending access ([`AccessMap::conflicts_asking`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Ask the device about completions not known to be done (a query each).
    Device,
    /// Count them as pending without asking.
    Nobody,
}

/// A new access as a conflict search sees it: its kind, its actor and how a completion counts
/// as pending.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe {
    pub kind: Access,
    pub actor: Actor,
    pub ask: Ask,
}

/// The access map of one allocation.
#[derive(Default)]
pub(crate) struct AccessMap {
    segs: BTreeMap<usize, Seg>,
}

impl AccessMap {
    /// Visit every recorded access that conflicts with a new access of `kind` by `actor` to
    /// `range` (rule 3), with the overlapping bytes. An access spanning several segments is
    /// visited once per segment. Without the sanitizer only pending accesses are visited.
    pub fn conflicts(
        &self,
        range: &Range<usize>,
        kind: Access,
        actor: Actor,
        visit: impl FnMut(&Rec, Range<usize>),
    ) {
        let probe = Probe {
            kind,
            actor,
            ask: Ask::Device,
        };
        self.conflicts_asking(range, probe, visit)
    }

    /// [`conflicts`](Self::conflicts), with `probe.ask` saying how a completion counts as
    /// pending: asked of the device, or pending unless known done ([`Ask::Nobody`], for a
    /// caller that waits for every conflict it finds: the wait makes a query redundant).
    pub fn conflicts_asking(
        &self,
        range: &Range<usize>,
        probe: Probe,
        mut visit: impl FnMut(&Rec, Range<usize>),
    ) {
        if range.is_empty() {
            return;
        }
        // Fast path: a segment starts where `range` does and covers it; segments are disjoint,
        // so no other one overlaps.
        if let Some(seg) = self.segs.get(&range.start) {
            if seg.end >= range.end {
                Self::visit_seg(seg, range.clone(), probe, &mut visit);
                return;
            }
        }
        // The segment that starts before `range` may reach into it.
        let first = self
            .segs
            .range(..range.start)
            .next_back()
            .filter(|(_, s)| s.end > range.start)
            .map(|(k, _)| *k)
            .unwrap_or(range.start);
        for (&start, seg) in self.segs.range(first..range.end) {
            let overlap = start.max(range.start)..seg.end.min(range.end);
            Self::visit_seg(seg, overlap, probe, &mut visit);
        }
    }

    /// Rule 3 for one segment.
    fn visit_seg(
        seg: &Seg,
        overlap: Range<usize>,
        probe: Probe,
        visit: &mut impl FnMut(&Rec, Range<usize>),
    ) {
        let Probe { kind, actor, ask } = probe;
        let mut check = |r: &Rec| {
            if r.actor != actor && kind.conflicts_with(r.kind) && r.live_as(ask) {
                visit(r, overlap.clone());
            }
        };
        if let Some(w) = &seg.write {
            check(w);
        }
        if kind != Access::Read {
            seg.reads.iter().for_each(&mut check);
        }
        if kind != Access::Atomic {
            seg.atomics.iter().for_each(&mut check);
        }
    }

    /// Record `rec` over `range` (rules 1, 2, 4, 5).
    pub fn record(&mut self, range: Range<usize>, rec: &Rec) {
        if range.is_empty() {
            return;
        }
        // Fast path: the range is exactly one segment (a buffer or chunk used again). No merge
        // is needed: only this segment holds the new entry, so no neighbour has its state.
        if let Some(seg) = self.segs.get_mut(&range.start) {
            if seg.end == range.end {
                if rec.kind != Access::Write {
                    seg.prune(); // A write replaces everything anyway.
                }
                seg.apply(rec);
                return;
            }
        }
        self.split_at(range.start);
        self.split_at(range.end);
        // Fill the gaps inside `range` with empty segments, then apply to every segment.
        let mut at = range.start;
        let mut gaps = Vec::new();
        for (&start, seg) in self.segs.range(range.start..range.end) {
            if start > at {
                gaps.push((at, start));
            }
            at = seg.end;
        }
        if at < range.end {
            gaps.push((at, range.end));
        }
        for (lo, hi) in gaps {
            self.segs.insert(
                lo,
                Seg {
                    end: hi,
                    ..Seg::default()
                },
            );
        }
        for (_, seg) in self.segs.range_mut(range.start..range.end) {
            seg.prune();
            seg.apply(rec);
        }
        self.merge_around(range);
    }

    /// Drop entries that carry nothing any more (rule 5) within `range`.
    #[cfg(test)]
    pub fn prune(&mut self, range: Range<usize>) {
        let keys: Vec<usize> = self.segs.range(..range.end).map(|(k, _)| *k).collect();
        for k in keys {
            if let Some(seg) = self.segs.get_mut(&k) {
                if seg.end <= range.start {
                    continue;
                }
                seg.prune();
                if seg.is_empty() {
                    self.segs.remove(&k);
                }
            }
        }
    }

    /// Make `at` a segment boundary if a segment covers it.
    fn split_at(&mut self, at: usize) {
        let Some((&start, seg)) = self.segs.range_mut(..at).next_back() else {
            return;
        };
        if seg.end <= at {
            return;
        }
        let mut tail = seg.clone();
        seg.end = at;
        tail.end = tail.end.max(at);
        debug_assert!(start < at);
        self.segs.insert(at, tail);
    }

    /// Merge runs of adjacent segments with equal state from just before `range` to just
    /// after it, and drop empty ones (rule 4).
    fn merge_around(&mut self, range: Range<usize>) {
        let mut at = self
            .segs
            .range(..range.start)
            .next_back()
            .map_or(range.start, |(k, _)| *k);
        let mut prev: Option<usize> = None;
        while let Some((&k, seg)) = self.segs.range(at..).next() {
            if k > range.end {
                break;
            }
            at = k + 1;
            if seg.is_empty() {
                self.segs.remove(&k);
                prev = None;
                continue;
            }
            if let Some(p) = prev {
                let ps = &self.segs[&p];
                if ps.end == k && ps.same_state(seg) {
                    let end = seg.end;
                    self.segs.remove(&k);
                    self.segs.get_mut(&p).expect("previous segment").end = end;
                    continue;
                }
            }
            prev = Some(k);
        }
    }

    /// Number of segments (tests and statistics).
    #[cfg(test)]
    pub fn segments(&self) -> usize {
        self.segs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, actor: Actor, kind: Access) -> Rec {
        // An always-pending completion, so entries stay live without sanitizer data.
        struct Never;
        crate::backend::contract::downcast::as_any!(Never);
        impl crate::backend::contract::device::DoneSignal for Never {
            fn is_done(&self) -> bool {
                false
            }
        }
        Rec {
            id,
            actor,
            kind,
            part: Part::Whole,
            range: 0..0,
            done: Some(Arc::new(Never)),
            info: None,
        }
    }

    fn conflicts(m: &AccessMap, r: Range<usize>, kind: Access, actor: Actor) -> Vec<u64> {
        let mut ids = Vec::new();
        m.conflicts(&r, kind, actor, |rec, _| {
            if !ids.contains(&rec.id) {
                ids.push(rec.id)
            }
        });
        ids.sort();
        ids
    }

    #[test]
    fn disjoint_and_adjacent_ranges_do_not_conflict() {
        let mut m = AccessMap::default();
        m.record(0..100, &rec(1, 1, Access::Write));
        assert!(conflicts(&m, 100..200, Access::Write, 2).is_empty());
        assert_eq!(conflicts(&m, 99..200, Access::Read, 2), vec![1]);
    }

    #[test]
    fn reader_sets_and_writes() {
        let mut m = AccessMap::default();
        m.record(0..100, &rec(1, 1, Access::Write));
        m.record(0..50, &rec(2, 2, Access::Read));
        m.record(25..100, &rec(3, 3, Access::Read));
        // A write conflicts with the last write and every read since.
        assert_eq!(conflicts(&m, 0..100, Access::Write, 4), vec![1, 2, 3]);
        assert_eq!(conflicts(&m, 60..70, Access::Write, 4), vec![1, 3]);
        // A read conflicts only with the write.
        assert_eq!(conflicts(&m, 0..100, Access::Read, 4), vec![1]);
        // Own accesses never conflict.
        assert_eq!(conflicts(&m, 0..10, Access::Write, 2), vec![1]);
        // A write replaces everything it covers, and segments merge.
        m.record(0..100, &rec(4, 4, Access::Write));
        assert_eq!(m.segments(), 1);
        assert_eq!(conflicts(&m, 0..100, Access::Write, 5), vec![4]);
    }

    #[test]
    fn atomics_conflict_only_with_plain_accesses() {
        let mut m = AccessMap::default();
        m.record(0..4, &rec(1, 1, Access::Atomic));
        assert!(conflicts(&m, 0..4, Access::Atomic, 2).is_empty());
        assert_eq!(conflicts(&m, 0..4, Access::Read, 2), vec![1]);
        assert_eq!(conflicts(&m, 0..4, Access::Write, 2), vec![1]);
    }

    #[test]
    fn a_later_access_by_the_same_actor_replaces_its_earlier_one() {
        let mut m = AccessMap::default();
        m.record(0..10, &rec(1, 1, Access::Read));
        m.record(0..10, &rec(2, 1, Access::Read));
        assert_eq!(conflicts(&m, 0..10, Access::Write, 2), vec![2]);
    }

    #[test]
    fn chunks_stay_separate_and_completed_entries_go() {
        struct Done;
        crate::backend::contract::downcast::as_any!(Done);
        impl crate::backend::contract::device::DoneSignal for Done {
            fn is_done(&self) -> bool {
                true
            }
        }
        let mut m = AccessMap::default();
        for c in 0..8u64 {
            let r = (c as usize * 10)..(c as usize + 1) * 10;
            m.record(r, &rec(c + 1, c + 1, Access::Write));
        }
        assert_eq!(m.segments(), 8);
        assert_eq!(conflicts(&m, 15..35, Access::Read, 99), vec![2, 3, 4]);
        let done = Rec {
            done: Some(Arc::new(Done)),
            ..rec(100, 50, Access::Write)
        };
        m.record(0..80, &done);
        m.prune(0..80);
        assert_eq!(m.segments(), 0);
    }

    #[test]
    fn a_waiting_search_counts_unknown_completions_as_pending_without_asking() {
        use std::sync::atomic::{AtomicU32, Ordering};
        /// Complete, but nobody saw it yet: asking costs a query (counted).
        struct Unseen(AtomicU32);
        crate::backend::contract::downcast::as_any!(Unseen);
        impl crate::backend::contract::device::DoneSignal for Unseen {
            fn is_done(&self) -> bool {
                self.0.fetch_add(1, Ordering::Relaxed);
                true
            }
            fn known_done(&self) -> bool {
                false
            }
        }
        let signal = Arc::new(Unseen(AtomicU32::new(0)));
        let mut m = AccessMap::default();
        let write = Rec {
            done: Some(signal.clone()),
            ..rec(1, 1, Access::Write)
        };
        m.record(0..10, &write);
        let found = |ask| {
            let mut ids = Vec::new();
            let probe = Probe {
                kind: Access::Read,
                actor: 2,
                ask,
            };
            m.conflicts_asking(&(0..10), probe, |r, _| ids.push(r.id));
            ids
        };
        // Asking the device: one query, which says it is done; nothing to wait for.
        assert_eq!(found(Ask::Device), Vec::<u64>::new());
        assert_eq!(signal.0.load(Ordering::Relaxed), 1);
        // Not asking: the caller waits for it, and no query is made.
        assert_eq!(found(Ask::Nobody), vec![1]);
        assert_eq!(signal.0.load(Ordering::Relaxed), 1);
    }
}

/// The map against a byte-by-byte model of rules 2, 3 and 5 over random accesses, and its
/// segments against rules 1 and 4 after every one (also what `scripts/miri.sh` runs).
#[cfg(test)]
mod model_tests {
    use super::*;
    use crate::backend::contract::device::DoneSignal;

    struct Signal(bool);
    crate::backend::contract::downcast::as_any!(Signal);
    impl DoneSignal for Signal {
        fn is_done(&self) -> bool {
            self.0
        }
    }

    /// One byte of the model: the last write and the reads and atomics since, as
    /// (id, actor, kind, live).
    #[derive(Clone, Default)]
    struct Byte {
        write: Option<(u64, Actor, Access, bool)>,
        others: Vec<(u64, Actor, Access, bool)>,
    }

    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
        fn range(&mut self, size: usize) -> Range<usize> {
            let a = self.below(size as u64 + 1) as usize;
            let b = self.below(size as u64 + 1) as usize;
            a.min(b)..a.max(b)
        }
        fn kind(&mut self) -> Access {
            [Access::Read, Access::Write, Access::Atomic][self.below(3) as usize]
        }
    }

    /// Rules 1 and 4: disjoint, non-empty, in order, no empty segment, no two adjacent
    /// segments with one state.
    fn check_segments(m: &AccessMap) {
        let mut prev: Option<(usize, &Seg)> = None;
        for (&start, seg) in &m.segs {
            assert!(start < seg.end, "empty segment at {start}");
            assert!(!seg.is_empty(), "segment at {start} holds nothing");
            if let Some((pstart, p)) = prev {
                assert!(p.end <= start, "segments at {pstart} and {start} overlap");
                assert!(
                    p.end < start || !p.same_state(seg),
                    "segments at {pstart} and {start} were not merged"
                );
            }
            prev = Some((start, seg));
        }
    }

    #[test]
    fn random_accesses_match_a_byte_model() {
        const SIZE: usize = 48;
        let steps = if cfg!(miri) { 120 } else { 3000 };
        let mut rng = Lcg(7);
        let mut map = AccessMap::default();
        let mut bytes = vec![Byte::default(); SIZE];
        let mut seen = 0;
        for id in 1..=steps {
            let range = rng.range(SIZE);
            let kind = rng.kind();
            let actor = rng.below(4);
            // Query before recording: the conflicts of this access, byte by byte.
            let mut got: Vec<(usize, u64)> = Vec::new();
            map.conflicts(&range, kind, actor, |rec, over| {
                got.extend(over.map(|b| (b, rec.id)));
            });
            got.sort_unstable();
            got.dedup();
            let mut want: Vec<(usize, u64)> = Vec::new();
            for b in range.clone() {
                let byte = &bytes[b];
                for &(rid, ractor, rkind, live) in byte.write.iter().chain(&byte.others) {
                    if live && ractor != actor && kind.conflicts_with(rkind) {
                        want.push((b, rid));
                    }
                }
            }
            want.sort_unstable();
            want.dedup();
            assert_eq!(got, want, "step {id}: {kind:?} by {actor} over {range:?}");
            seen += got.len();

            // Record it; one in four completed already (rule 5).
            let live = rng.below(4) != 0;
            let rec = Rec {
                id,
                actor,
                kind,
                part: Part::Whole,
                range: range.clone(),
                done: Some(Arc::new(Signal(!live))),
                info: None,
            };
            map.record(range.clone(), &rec);
            for b in range {
                let byte = &mut bytes[b];
                let entry = (id, actor, kind, live);
                if kind == Access::Write {
                    *byte = Byte {
                        write: Some(entry),
                        others: Vec::new(),
                    };
                } else {
                    match byte.others.iter_mut().find(|e| e.1 == actor && e.2 == kind) {
                        Some(e) => *e = entry,
                        None => byte.others.push(entry),
                    }
                }
            }
            check_segments(&map);
        }
        assert!(
            seen > steps as usize,
            "the accesses conflict often enough to test something"
        );
    }
}
