//! Calls that wait for running kernels, made only while nothing runs and nothing can start
//! (the pinned cache's evictions, and the freeing thread's registration ends and frees,
//! [`Quiesce::once_idle`]). `cuMemFreeHost` waits for every running kernel of its context
//! while holding a driver lock that holds up other threads' launches and copies
//! (`benches/cuda/holdup_probe.cu`): a kernel that waits for such a call of the host (a flag
//! set by a copy) then waits forever. A context synchronize first narrows that to kernels
//! launched right after it; this closes it for the context's cueflow streams:
//!
//! 1. Every submission on a stream of the context looks at the context's `raised` flag under
//!    its stream's queue lock ([`Quiesce::must_wait`]) and, when it is raised, lets go of the
//!    lock and waits until it is lowered ([`Quiesce::wait_lowered`]) — a load, no locked
//!    instruction, on the common path.
//! 2. [`Quiesce::when_idle`] raises the flag, then takes each stream's queue lock in turn (so a
//!    submission that looked before the flag went up has finished enqueueing) and asks the
//!    driver whether the stream is idle. Only if every stream is does it run the call; then it
//!    lowers the flag. A queue lock it cannot take within a millisecond (its holder may be
//!    waiting for the device) counts as busy: the caller tries again later.
//!
//! One `Quiesce` serves every cueflow device of a GPU's primary context (each open device has a
//! `Ctx` of its own, and those waiting calls wait for all of them), so a call made for one
//! device (or for a device already gone, on the freeing thread) looks at the streams of all.
//! Work other code enqueues on streams cueflow does not know (its own streams in the same
//! context) is not covered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::capture_gate::CaptureGate;
use super::driver;
use super::queue::StreamQueue;

#[derive(Default)]
pub(super) struct Quiesce {
    raised: AtomicBool,
    /// Held by the one `when_idle` that raised the flag: another would lower it under it.
    owner: Mutex<()>,
    queues: Mutex<Vec<Weak<StreamQueue>>>,
    /// The context's synchronizations and the backend's captures kept apart.
    pub gate: CaptureGate,
}

impl Quiesce {
    /// A stream of the context: [`when_idle`](Self::when_idle) looks at it.
    pub fn register(&self, q: &Arc<StreamQueue>) {
        let mut qs = self.queues.lock();
        qs.retain(|w| w.strong_count() > 0);
        qs.push(Arc::downgrade(q));
    }

    /// Under a stream's queue lock, before enqueueing: true if the submission must let go of
    /// the lock and [`wait_lowered`](Self::wait_lowered) first.
    #[inline]
    pub fn must_wait(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// Wait (with no queue lock held) until the flag is lowered: for the driver calls of one
    /// [`when_idle`](Self::when_idle) on an idle device.
    pub fn wait_lowered(&self) {
        while self.raised.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    /// Run `call` if every stream of the context is idle, with no submission on them able to
    /// start meanwhile; false (and `call` not run) if some stream is busy, or another thread
    /// is in here. Context current (D2).
    pub fn when_idle(&self, call: impl FnOnce()) -> bool {
        let Some(_owner) = self.owner.try_lock() else {
            return false;
        };
        let queues: Vec<Arc<StreamQueue>> = self
            .queues
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        self.raised.store(true, Ordering::SeqCst);
        let idle = queues.iter().all(|q| {
            let Some(queue) = q.queue.try_lock_for(Duration::from_millis(1)) else {
                return false;
            };
            // D1: the stream lives while its queue is not dropped.
            queue.dropped() || matches!(driver::stream::query(q.raw), Ok(true))
        });
        if idle {
            call();
        }
        self.raised.store(false, Ordering::Release);
        idle
    }

    /// Run `call`, a driver call that waits for every running kernel of the context (context
    /// current, D2), once no stream runs anything and none can start meanwhile: after a
    /// synchronize, which waits without holding anyone up, a kernel another thread launches
    /// before the call would be waited for under the driver's lock — and if that kernel waits
    /// for a copy of that thread's, both wait until the kernel gives up (seen: a registration's
    /// end on the freeing thread behind a conformance test's gate kernel, on an H200). So:
    /// synchronize, run `call` if nothing runs, else try again. A context that stays busy
    /// through [`IDLE_TRIES`] synchronizes (work submitted back to back by other threads), or
    /// whose synchronize fails (a fault: nothing runs), gets the call anyway, as `cudaFree`
    /// would.
    pub fn once_idle(&self, call: impl FnOnce()) {
        let mut call = Some(call);
        for _ in 0..IDLE_TRIES {
            if self.gate.synchronize_context().is_err() {
                break;
            }
            let ran = self.when_idle(|| {
                if let Some(c) = call.take() {
                    c();
                }
            });
            if ran {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(c) = call.take() {
            c();
        }
    }
}

/// Tries of [`Quiesce::once_idle`] before it makes its call anyway. A try fails only when work
/// was submitted between its synchronize and its look at the streams, and the next synchronize
/// waits for that work, so a kernel racing one free costs a try or two; a device fed back to
/// back costs every try a synchronize, which delays the frees queued behind on the freeing
/// thread: a few tries, not many.
const IDLE_TRIES: u32 = 10;
