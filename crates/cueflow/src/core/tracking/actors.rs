//! The sanitizer's actors, and when their clock entries may be forgotten (SPEC RL2, AC2).
//!
//! Every stream the sanitizer tracks is an actor with an entry in vector clocks ([`VClock`]).
//! Streams come and go by the million in a long-running program; clocks that kept an entry for
//! every actor ever seen grew without bound, and every join and check with them (issue 16,
//! item 4). The rules below say when an actor's entries carry nothing any more, so that every
//! clock holds entries of *live* actors only, plus a bounded slack.
//!
//! 1. **Consumption.** A clock entry `(a, t)` is only ever consumed by a check of a recorded
//!    access of actor `a` (`covers(a, time)`: the sanitizer's race check, its report, and the
//!    host's unchecked views). Joins and comparisons only move entries around.
//! 2. **Live.** An actor is live from its first tracked call ([`ActorCell::new`]) until it is
//!    retired; the live set is process-wide, as clocks cross devices (MD2) and the host's
//!    clock is one.
//! 3. **Retired by observation.** Once an actor's stream is dropped (it makes no more
//!    accesses) and the host's clock covers its last operation (a host synchronization
//!    observed all its work), every later operation of every stream — which joins the host's
//!    clock before it is checked (AC2) — and every later host access covers every access the
//!    actor made. The actor is retired: its records count as covered by every check and the
//!    access maps drop them (access rule 5), so nothing consumes its entries (rule 1). A check
//!    on the actor's own device runs under that device's state lock, as the retirement does,
//!    so it sees the retirement only after the observation; a check on another device (a peer
//!    copy) that read the host's clock just before the observation may already see it — that
//!    call ran concurrently with the observing host call, and the host is one actor.
//! 4. **Retired by forgetting.** Once a dropped actor's last record is gone (overwritten, or
//!    its allocation freed), nothing can consume its entries either: the last holder of its
//!    [`ActorCell`] (records hold it through their operation) retires it on drop.
//! 5. **Dropped, not yet retired.** A dropped actor whose work the host has not observed and
//!    whose records remain is a *zombie*: it is retired by rule 3 when the host's clock next
//!    advances past its last operation, or by rule 4. Zombies are bounded by the records that
//!    hold them.
//! 6. **Compaction.** A clock that grew past twice the live set (plus [`SLACK`]) drops the
//!    entries of actors outside it ([`compact`]). After a compaction a clock holds at most the
//!    live actors, so the next one comes only after as many new entries again: amortized O(1)
//!    per entry, and a clock's size — the cost of every join and check — stays proportional
//!    to the live actors, not to every actor the process ever had.
//! 7. **No reuse.** Actor ids are never reused, so an entry dropped by compaction can never be
//!    mistaken for another actor's, and a snapshot that still carries it (an event's, a
//!    record's) is merely larger than it needs to be.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;

use crate::core::tracking::clock::{Actor, VClock, HOST};

/// Entries a clock may carry beyond twice the live set before it is compacted (rule 6).
pub(crate) const SLACK: usize = 32;

/// The live set (rule 2) and its size.
static LIVE: LazyLock<Mutex<HashSet<Actor>>> = LazyLock::new(Default::default);
static LIVE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// A zombie (rule 5) and its last operation's time.
type Zombie = (Weak<ActorCell>, u64);

/// The zombies of the process.
static ZOMBIES: LazyLock<Mutex<Vec<Zombie>>> = LazyLock::new(Default::default);

/// One actor's place in the live set; records of its accesses hold it (rule 4).
pub(crate) struct ActorCell {
    pub actor: Actor,
    retired: AtomicBool,
}

impl ActorCell {
    /// A new live actor (rule 2).
    pub fn new(actor: Actor) -> Arc<ActorCell> {
        if LIVE.lock().insert(actor) {
            LIVE_COUNT.fetch_add(1, Ordering::Relaxed);
        }
        Arc::new(ActorCell {
            actor,
            retired: AtomicBool::new(false),
        })
    }

    /// True once the actor is retired: its accesses are covered by every later check.
    #[inline]
    pub fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Rule 3 (or 4): leave the live set.
    fn retire(&self) {
        if !self.retired.swap(true, Ordering::AcqRel) && LIVE.lock().remove(&self.actor) {
            LIVE_COUNT.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for ActorCell {
    /// Rule 4: no record of the actor is left, nor its stream.
    fn drop(&mut self) {
        self.retire();
    }
}

/// The stream of `cell` was dropped after its operation `last` (0: it made none); `host` is
/// the host's clock, read under its lock (which the caller holds, so that the host cannot
/// advance unseen in between, rule 5).
pub(crate) fn died(cell: &Arc<ActorCell>, last: u64, host: &VClock) {
    if host.covers(cell.actor, last) {
        cell.retire(); // Rule 3.
    } else {
        ZOMBIES.lock().push((Arc::downgrade(cell), last));
    }
}

/// The host's clock advanced to `host` (called under its lock): retire the zombies it covers
/// now, forget those retired by rule 4.
pub(crate) fn host_advanced(host: &VClock) {
    let mut z = ZOMBIES.lock();
    if z.is_empty() {
        return;
    }
    z.retain(|(w, last)| match w.upgrade() {
        Some(cell) if host.covers(cell.actor, *last) => {
            cell.retire();
            false
        }
        Some(_) => true,
        None => false,
    });
}

/// Rule 6: drop the entries of retired actors from `vc` once it is large enough to need it.
pub(crate) fn compact(vc: &mut Arc<VClock>) {
    let live = LIVE_COUNT.load(Ordering::Relaxed);
    if vc.len() <= 2 * live + SLACK {
        return;
    }
    compact_now(vc);
}

/// Drop the entries of every actor outside the live set from `vc` (the host's stays).
fn compact_now(vc: &mut Arc<VClock>) {
    let live = LIVE.lock();
    Arc::make_mut(vc).retain(|a| a == HOST || live.contains(&a));
}

/// Actors live now (tests and statistics).
#[cfg(test)]
pub(crate) fn live_count() -> usize {
    LIVE_COUNT.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actors_retire_by_observation_or_forgetting_and_clocks_compact() {
        // Ids far from the streams' own (tests run in one process).
        let base: Actor = 1 << 40;
        let cells: Vec<_> = (0..200).map(|i| ActorCell::new(base + i)).collect();
        let mut vc = Arc::new(VClock::default());
        for c in &cells {
            Arc::make_mut(&mut vc).tick(c.actor);
        }
        let mut host = VClock::default();
        // Half die observed (rule 3), half die unobserved and stay (rule 5).
        for (i, c) in cells.iter().enumerate() {
            if i % 2 == 0 {
                host.tick(c.actor);
            }
            died(c, 1, &host);
        }
        assert!(cells.iter().step_by(2).all(|c| c.retired()));
        assert!(cells.iter().skip(1).step_by(2).all(|c| !c.retired()));
        // The host observes the rest later (rule 5).
        for c in cells.iter().skip(1).step_by(2).take(50) {
            host.tick(c.actor);
        }
        host_advanced(&host);
        let retired = cells.iter().filter(|c| c.retired()).count();
        assert_eq!(retired, 150);
        // Rule 6: the 50 still live (and whatever other tests keep live) remain.
        compact_now(&mut vc);
        let kept: Vec<Actor> = (0..200)
            .map(|i| base + i)
            .filter(|&a| vc.get(a) > 0)
            .collect();
        assert_eq!(kept.len(), 50, "{kept:?}");
        // Rule 4: the last holders go.
        drop(cells);
        assert!(LIVE.lock().iter().all(|&a| a < base));
        assert!(live_count() < 10_000);
    }
}
