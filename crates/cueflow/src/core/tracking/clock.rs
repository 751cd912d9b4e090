//! Vector clocks for happens-before (SPEC AC2).
//!
//! Every actor (a stream, or the host) counts its own operations; its clock says, for every
//! actor, how many of that actor's operations happen before the actor's next one. An access
//! stamped `(actor a, time t)` happens before a later access by `b` iff `b`'s clock has
//! `clock[a] >= t`.

/// Who made an access: a stream (by its process-unique actor id) or the host.
pub(crate) type Actor = u64;

/// The host's actor id; streams start at 1.
pub(crate) const HOST: Actor = 0;

/// A vector clock: `(actor, time)` pairs sorted by actor; absent actors are at time 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct VClock(Vec<(Actor, u64)>);

impl VClock {
    /// The clock of an actor that knows of nothing.
    pub const EMPTY: VClock = VClock(Vec::new());

    /// The time of `actor`.
    pub fn get(&self, actor: Actor) -> u64 {
        match self.0.binary_search_by_key(&actor, |e| e.0) {
            Ok(i) => self.0[i].1,
            Err(_) => 0,
        }
    }

    /// Advance `actor` by one; returns the new time.
    pub fn tick(&mut self, actor: Actor) -> u64 {
        match self.0.binary_search_by_key(&actor, |e| e.0) {
            Ok(i) => {
                self.0[i].1 += 1;
                self.0[i].1
            }
            Err(i) => {
                self.0.insert(i, (actor, 1));
                1
            }
        }
    }

    /// Pointwise maximum with `other`; true if anything changed.
    pub fn join(&mut self, other: &VClock) -> bool {
        if self.dominates(other) {
            return false;
        }
        let mut out = Vec::with_capacity(self.0.len().max(other.0.len()));
        let (mut i, mut j) = (0, 0);
        let (a, b) = (&self.0, &other.0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(&x), Some(&y)) if x.0 == y.0 => {
                    out.push((x.0, x.1.max(y.1)));
                    i += 1;
                    j += 1;
                }
                (Some(&x), Some(&y)) if x.0 < y.0 => {
                    out.push(x);
                    i += 1;
                }
                (Some(_), Some(&y)) => {
                    out.push(y);
                    j += 1;
                }
                (Some(&x), None) => {
                    out.push(x);
                    i += 1;
                }
                (None, Some(&y)) => {
                    out.push(y);
                    j += 1;
                }
                (None, None) => unreachable!(),
            }
        }
        self.0 = out;
        true
    }

    /// The clock whose entries are the largest time of each actor among `entries` (in any
    /// order, actors repeated or not): one sort. The join of many clocks is this over all
    /// their entries (joining them one by one copies the growing result once per clock).
    pub fn of_entries(entries: impl IntoIterator<Item = (Actor, u64)>) -> VClock {
        let mut all: Vec<(Actor, u64)> = entries.into_iter().filter(|e| e.1 > 0).collect();
        // Each actor's largest time first, then one entry per actor.
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        all.dedup_by_key(|e| e.0);
        VClock(all)
    }

    /// True if every entry of `other` is covered: joining it would change nothing.
    pub fn dominates(&self, other: &VClock) -> bool {
        // Both sorted by actor: one merge walk.
        let mut mine = self.0.iter().peekable();
        other.0.iter().all(|&(a, t)| {
            while mine.next_if(|e| e.0 < a).is_some() {}
            mine.peek().is_some_and(|e| e.0 == a && e.1 >= t)
        })
    }

    /// Join `other` into a shared clock, copying it only if the join changes something.
    pub fn join_into(target: &mut std::sync::Arc<VClock>, other: &VClock) {
        if !target.dominates(other) {
            std::sync::Arc::make_mut(target).join(other);
        }
    }

    /// Raise `actor`'s entry to at least `time`.
    pub fn raise(&mut self, actor: Actor, time: u64) {
        if time == 0 {
            return;
        }
        match self.0.binary_search_by_key(&actor, |e| e.0) {
            Ok(i) => self.0[i].1 = self.0[i].1.max(time),
            Err(i) => self.0.insert(i, (actor, time)),
        }
    }

    /// The `(actor, time)` entries, sorted by actor.
    pub fn entries(&self) -> &[(Actor, u64)] {
        &self.0
    }

    /// Number of actors with an entry.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Keep the entries of the actors `keep` accepts (compaction, `crate::core::tracking::actors` rule 6).
    pub fn retain(&mut self, mut keep: impl FnMut(Actor) -> bool) {
        self.0.retain(|e| keep(e.0));
    }

    /// True if the access `(actor, time)` happens before the next access of this clock's owner.
    pub fn covers(&self, actor: Actor, time: u64) -> bool {
        self.get(actor) >= time
    }
}

/// A clock shared between graph nodes: `base` with one actor raised on top. A node with one
/// dependency on the same chain takes its dependency's base and raises its own place, so a
/// run of such nodes shares one base (a chain after a join of W branches otherwise copied the
/// join's W entries at every node: time and memory N·W).
#[derive(Clone, Debug)]
pub(crate) struct SharedClock {
    base: std::sync::Arc<VClock>,
    top: Option<(Actor, u64)>,
}

impl From<VClock> for SharedClock {
    fn from(vc: VClock) -> SharedClock {
        SharedClock {
            base: std::sync::Arc::new(vc),
            top: None,
        }
    }
}

impl SharedClock {
    /// The time of `actor`.
    pub fn get(&self, actor: Actor) -> u64 {
        let top = self.top.filter(|t| t.0 == actor).map_or(0, |t| t.1);
        self.base.get(actor).max(top)
    }

    /// True if the access `(actor, time)` is covered.
    pub fn covers(&self, actor: Actor, time: u64) -> bool {
        self.get(actor) >= time
    }

    /// The entries, sorted by actor.
    pub fn entries(&self) -> impl Iterator<Item = (Actor, u64)> + '_ {
        let base = self.base.entries();
        let at = self
            .top
            .map_or(base.len(), |(a, _)| base.partition_point(|e| e.0 < a));
        let replaced = self
            .top
            .is_some_and(|(a, _)| base.get(at).is_some_and(|e| e.0 == a));
        let top = self
            .top
            .map(|(a, t)| (a, if replaced { t.max(base[at].1) } else { t }));
        let rest = at + usize::from(replaced);
        base[..at]
            .iter()
            .copied()
            .chain(top)
            .chain(base[rest..].iter().copied())
    }

    /// Number of actors with an entry.
    pub fn len(&self) -> usize {
        let new_top = self.top.is_some_and(|(a, _)| self.base.get(a) == 0);
        self.base.len() + usize::from(new_top)
    }

    /// The clock as one [`VClock`].
    pub fn to_clock(&self) -> VClock {
        let mut vc = (*self.base).clone();
        if let Some((a, t)) = self.top {
            vc.raise(a, t);
        }
        vc
    }

    /// This clock with `actor` raised to `time`: the same base when the top is `actor`'s or
    /// empty, a new one otherwise.
    pub fn raised(&self, actor: Actor, time: u64) -> SharedClock {
        match self.top {
            Some((a, t)) if a != actor => {
                let mut vc = (*self.base).clone();
                vc.raise(a, t);
                SharedClock {
                    base: std::sync::Arc::new(vc),
                    top: Some((actor, time)),
                }
            }
            top => SharedClock {
                base: self.base.clone(),
                top: Some((actor, top.map_or(time, |(_, t)| t.max(time)))),
            },
        }
    }

    /// True if `other` shares this clock's base.
    #[cfg(test)]
    pub fn same_base(&self, other: &SharedClock) -> bool {
        std::sync::Arc::ptr_eq(&self.base, &other.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `of_entries` over several clocks is their sequential join, for clocks that overlap in actors at random.
    #[test]
    fn one_sort_of_all_entries_is_the_joins_one_by_one() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..50 {
            let clocks: Vec<VClock> = (0..next(40))
                .map(|_| {
                    let mut c = VClock::default();
                    for _ in 0..next(6) {
                        c.raise(next(30), 1 + next(100));
                    }
                    c
                })
                .collect();
            let mut one_by_one = VClock::default();
            for c in &clocks {
                one_by_one.join(c);
            }
            assert_eq!(
                VClock::of_entries(clocks.iter().flat_map(|c| c.entries().iter().copied())).0,
                one_by_one.0
            );
        }
    }

    #[test]
    fn tick_join_cover() {
        let mut a = VClock::default();
        let mut b = VClock::default();
        assert_eq!(a.tick(1), 1);
        assert_eq!(a.tick(1), 2);
        b.tick(2);
        assert!(!b.covers(1, 2));
        assert!(b.join(&a));
        assert!(b.covers(1, 2) && b.covers(2, 1) && !b.covers(1, 3));
        assert!(!b.join(&a), "joining again changes nothing");
        a.tick(3);
        b.join(&a);
        assert_eq!(b, VClock(vec![(1, 2), (2, 1), (3, 1)]));
    }
}

/// Clocks against a model that keeps every actor's time in a plain array, over random ticks
/// and joins (also what `scripts/miri.sh` runs).
#[cfg(test)]
mod model_tests {
    use std::sync::Arc;

    use super::*;

    const ACTORS: usize = 6;

    fn model_of(c: &VClock) -> [u64; ACTORS] {
        std::array::from_fn(|a| c.get(a as Actor))
    }

    #[test]
    fn random_ticks_and_joins_match_a_model() {
        let steps = if cfg!(miri) { 300 } else { 20_000 };
        let mut seed = 11u64;
        let mut below = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut clocks = vec![VClock::EMPTY; 4];
        let mut models = [[0u64; ACTORS]; 4];
        for _ in 0..steps {
            let i = below(4) as usize;
            if below(3) == 0 {
                let a = below(ACTORS as u64) as usize;
                models[i][a] += 1;
                assert_eq!(clocks[i].tick(a as Actor), models[i][a]);
            } else {
                let j = below(4) as usize;
                let other = clocks[j].clone();
                let dominated = (0..ACTORS).all(|a| models[i][a] >= models[j][a]);
                assert_eq!(clocks[i].dominates(&other), dominated);
                let theirs = models[j];
                for (mine, t) in models[i].iter_mut().zip(theirs) {
                    *mine = (*mine).max(t);
                }
                assert_eq!(clocks[i].join(&other), !dominated);
            }
            assert_eq!(model_of(&clocks[i]), models[i]);
            // Entries stay sorted by actor, without duplicates or zero times.
            assert!(clocks[i].0.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(clocks[i].0.iter().all(|e| e.1 > 0));
            for a in 0..ACTORS as Actor {
                let t = models[i][a as usize];
                assert!(clocks[i].covers(a, t) && !clocks[i].covers(a, t + 1));
            }
        }
    }

    #[test]
    fn join_into_copies_a_shared_clock_only_when_it_changes() {
        let mut own = VClock::default();
        own.tick(1);
        own.tick(2);
        let mut shared = Arc::new(own.clone());
        let other_holder = shared.clone();
        // Nothing new: no copy.
        let mut old = VClock::default();
        old.tick(1);
        VClock::join_into(&mut shared, &old);
        assert!(Arc::ptr_eq(&shared, &other_holder));
        // Something new: a copy, the other holder keeps the old clock.
        let mut newer = VClock::default();
        newer.tick(3);
        VClock::join_into(&mut shared, &newer);
        assert!(!Arc::ptr_eq(&shared, &other_holder));
        assert_eq!(*other_holder, own);
        assert_eq!(shared.get(3), 1);
        assert_eq!(shared.get(1), 1);
    }

    /// A shared clock's entries, length and times are those of the clock it stands for, and
    /// raising its top actor keeps the base.
    #[test]
    fn a_shared_clock_is_its_base_with_the_top_raised() {
        let mut base = VClock::default();
        base.raise(2, 5);
        base.raise(7, 1);
        let s = SharedClock::from(base.clone());
        for (actor, time) in [(1, 3), (2, 4), (2, 9), (7, 2), (9, 1)] {
            let r = s.raised(actor, time);
            let mut want = base.clone();
            want.raise(actor, time);
            assert_eq!(
                r.entries().collect::<Vec<_>>(),
                want.entries(),
                "{actor} {time}"
            );
            assert_eq!((r.len(), r.to_clock()), (want.len(), want.clone()));
            assert!(r.same_base(&s) && r.covers(actor, time) && !r.covers(actor, time + 10));
            // Again on the same actor: the base stays; on another: a new one, with both.
            assert!(r.raised(actor, time + 1).same_base(&s));
            let other = r.raised(actor + 100, 1);
            assert!(!other.same_base(&s));
            assert!(other.covers(actor, time) && other.covers(actor + 100, 1));
        }
    }
}
