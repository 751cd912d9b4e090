//! The synchronization types of the host scheduler's lock-free protocols (the node rules 1–3 of
//! `node.rs`, the ready counters of graph runs in `graph.rs`), in one place so that loom can
//! stand in for them: std's atomics and parking_lot's mutex normally, loom's under `cfg(loom)`
//! (`scripts/loom.sh`), where `loom_models.rs` explores every interleaving of those protocols.
//!
//! `Arc` stays std's in both: nodes are shared as `Arc<dyn DoneSignal>` and point back at their
//! scheduler through a `Weak`, neither of which loom's `Arc` offers; the protocols' state is the
//! atomics and the lock, which loom models.

#[cfg(not(loom))]
pub(super) use parking_lot::Mutex;
#[cfg(not(loom))]
pub(super) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

#[cfg(loom)]
pub(super) use self::loom_mutex::Mutex;
#[cfg(loom)]
pub(super) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

pub(super) use std::sync::atomic::Ordering;

/// loom's mutex with parking_lot's interface (no poisoning), as tokio's `loom/mocked.rs` does.
#[cfg(loom)]
mod loom_mutex {
    pub(in crate::backend::host) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(in crate::backend::host) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(in crate::backend::host) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }
}
