//! ST10 on CUDA: what happens to a dropped stream's queue and handle.

use super::context::forget_bound;
use super::driver;
use super::interop::{destroy_own, Handle};
use super::queue::{Batch, Queue, StreamQueue};
use super::shared::DeviceShared;

/// ST10: the stream is destroyed at once; its unfinished batches are sealed and handed to the
/// device, which retires them once their markers complete (Q4). What the stream lent, or was
/// adopted with, goes once the raw stream is done with ([`super::interop`]).
pub(super) fn retire_dropped(shared: &DeviceShared, q: &StreamQueue, lent: Option<Handle>) {
    // Held until the work went to the orphans: C7's walk (`host_reach_gate.rs`) then finds it
    // either in the queue, with the stream alive, or among the orphans.
    let mut queue = q.queue.lock();
    let (mut sealed, open, mut spare) = queue.take_all();
    let ctx = &shared.ctx;
    if !ctx.usable() || ctx.bind().is_err() {
        return; // The context was reset: there is no work and no handle left.
    }
    let poisoned = shared.check().is_err();
    if open.has_items() && !poisoned {
        match Queue::seal_taken(open, &mut spare, q.raw) {
            Ok(e) => sealed.push_back(e),
            Err(open) => {
                // No marker: wait instead of dropping under running work (MM2).
                let _ = driver::stream::synchronize(q.raw);
                drop(open);
            }
        }
    }
    for m in spare {
        driver::event::destroy(m);
    }
    if q.owned {
        destroy_own(ctx, q.raw, lent);
    } else {
        drop(lent);
        forget_bound(); // An owner's drop (a cudarc stream) binds its context.
    }
    if poisoned {
        let batches: Vec<Batch> = sealed.into_iter().map(|e| e.finish(false)).collect();
        drop(batches);
    } else {
        shared.adopt(sealed);
    }
    drop(queue);
}
