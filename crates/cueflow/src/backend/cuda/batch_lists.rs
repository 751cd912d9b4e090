//! Item lists of retired keepalive batches, emptied and kept for the next batches the same
//! thread seals ([`super::queue`]). A stream whose kernel launches alternate with graph launches
//! seals a batch per call (Q2), and allocating and freeing each batch's list was ~150 of the
//! ~1,930 instructions a graph launch cost under `tools/null-driver` (issue 31: the per-call
//! costs at raw; `examples/percall_profile.rs 1 10000` under callgrind: 1,929 → 1,777 a graph
//! launch, 1,845 → 1,834 an empty kernel launch). Per thread, so taking and giving back a list
//! needs no lock.

use std::cell::RefCell;

use super::queue::{Batch, Keep};

/// Emptied lists kept per thread.
const KEPT: usize = 32;
/// Lists longer than this go back to the allocator (a batch of a deep queue of bare launches):
/// a batch that holds memory is at most this long (Q2).
const MAX_CAPACITY: usize = super::queue::SEAL_EVERY;
/// Items the kept lists of a thread may hold in all (~80 KiB): a few lists of full batches, or
/// all [`KEPT`] of short ones (a stream sealing at every call).
const KEPT_ITEMS: usize = 1024;

thread_local! {
    static LISTS: RefCell<Vec<Vec<Keep>>> = const { RefCell::new(Vec::new()) };
}

/// An empty item list for a new batch: a kept one if this thread has one.
pub(super) fn take() -> Vec<Keep> {
    LISTS
        .try_with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.pop()))
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Drop retired batches — outside the queue's lock (Q3): dropping their items may free memory
/// and run other drops — and keep their emptied lists.
#[inline]
pub(super) fn drop_retired(done: &mut Vec<Batch>) {
    if !done.is_empty() {
        keep_lists(done);
    }
}

/// [`drop_retired`] of some batches.
#[inline(never)]
fn keep_lists(done: &mut Vec<Batch>) {
    let _ = LISTS.try_with(|l| {
        for batch in done.iter_mut() {
            let keeps = batch.keeps_mut();
            keeps.clear();
            let cap = keeps.capacity();
            if cap == 0 || cap > MAX_CAPACITY {
                continue;
            }
            if let Ok(mut l) = l.try_borrow_mut() {
                let held: usize = l.iter().map(Vec::capacity).sum();
                if l.len() < KEPT && held + cap <= KEPT_ITEMS {
                    l.push(std::mem::take(keeps));
                }
            }
        }
    });
    done.clear();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A batch of `n` graph-launch items, each holding `held`.
    fn batch(n: usize, held: &Arc<u32>) -> Batch {
        let mut b = Batch::default();
        for _ in 0..n {
            let item: Arc<dyn std::any::Any + Send + Sync> = held.clone();
            b.keeps_mut().push(Keep::Graph([item.clone(), item]));
        }
        b
    }

    #[test]
    fn retired_items_are_dropped_and_their_lists_reused() {
        let held = Arc::new(7u32);
        let mut done = vec![batch(3, &held), batch(MAX_CAPACITY + 1, &held)];
        assert_eq!(Arc::strong_count(&held), 1 + 2 * (3 + MAX_CAPACITY + 1));
        drop_retired(&mut done);
        assert!(done.is_empty());
        assert_eq!(Arc::strong_count(&held), 1, "every item was dropped");
        // The short list is kept (emptied); the long one went back to the allocator.
        let reused = take();
        assert!(reused.is_empty() && (3..=MAX_CAPACITY).contains(&reused.capacity()));
        assert_eq!(take().capacity(), 0, "only the short list was kept");
    }

    #[test]
    fn at_most_kept_lists_stay() {
        let held = Arc::new(0u32);
        let mut done: Vec<Batch> = (0..KEPT + 5).map(|_| batch(1, &held)).collect();
        drop_retired(&mut done);
        let kept = std::iter::from_fn(|| Some(take()))
            .take_while(|l| l.capacity() > 0)
            .count();
        assert_eq!(kept, KEPT);
    }
}
