//! Events as a backend provides them (EV1–EV7), and the waits a stream enqueues later
//! (contract rule 8).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::types::EventFlags;

use super::downcast::AsAny;

use crate::error::Result;

/// An event as a backend provides it.
pub(crate) trait BackendEvent: AsAny + Send + Sync + 'static {
    #[allow(dead_code)] // Part of the contract; core keeps its own copy of the flags today.
    fn flags(&self) -> EventFlags;
    /// True when the captured work is done, or nothing was ever captured (EV3, EV5).
    fn query(&self) -> Result<bool>;
    /// Block until the captured work is done (EV5).
    fn synchronize(&self) -> Result<()>;
    /// True once recorded at least once.
    fn recorded(&self) -> bool;
    /// Milliseconds from `self`'s completion to `end`'s (EV6). Core checks the flags and the
    /// recorded state first.
    fn elapsed_ms(&self, end: &dyn BackendEvent) -> Result<f32>;
}

/// The waits a stream was asked to enqueue later ([`wait_later`], contract rule 8), until its
/// next enqueue, query, synchronize or handle given out takes them.
///
/// [`wait_later`]: super::device::BackendStream::wait_later
#[derive(Default)]
pub(crate) struct LaterWaits {
    /// Set while `events` holds some: the fast path of every stream call is this one load.
    any: AtomicBool,
    events: Mutex<SmallVec<[Arc<dyn BackendEvent>; 2]>>,
}

impl LaterWaits {
    /// Wait for `event` later (once, however often it is asked).
    pub fn push(&self, event: &Arc<dyn BackendEvent>) {
        let id = |e: &Arc<dyn BackendEvent>| Arc::as_ptr(e) as *const ();
        let mut v = self.events.lock();
        if !v.iter().any(|e| id(e) == id(event)) {
            v.push(event.clone());
        }
        self.any.store(true, Ordering::Release);
    }

    /// True if waits are to be enqueued ([`take`](Self::take)): the one load of every call.
    #[inline(always)]
    pub fn pending(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The waits to enqueue now: the stream enqueues them before what it was called for.
    #[cold]
    pub fn take(&self) -> SmallVec<[Arc<dyn BackendEvent>; 2]> {
        let mut v = self.events.lock();
        self.any.store(false, Ordering::Relaxed);
        std::mem::take(&mut *v)
    }
}
