//! The timing-free events stream joins (`Stream::wait_stream`) record and wait on, reused
//! (EV2, EV4).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::device::Backend;
use crate::backend::contract::event::BackendEvent;
use crate::error::Result;
use crate::types::EventFlags;

/// The device's timing-free events that joins (`Stream::wait_stream`) record and wait on: one
/// that nothing holds any more — no event, held call, graph or launch — serves the next join
/// (a record makes it stand for the new work, and the waits enqueued before are not affected,
/// EV4), so a join creates no event once the pool has enough.
#[derive(Default)]
pub(crate) struct JoinEvents(Mutex<Vec<Arc<dyn BackendEvent>>>);

/// Pooled join events at most: joins past them make events that go when done with.
const JOIN_POOL: usize = 64;

impl JoinEvents {
    pub fn take(&self, backend: &Arc<dyn Backend>) -> Result<Arc<dyn BackendEvent>> {
        let mut pool = self.0.lock();
        // Only the pool holds it, and only the pool (under its lock) hands it out.
        if let Some(e) = pool.iter().find(|e| Arc::strong_count(e) == 1) {
            return Ok(e.clone());
        }
        let e = backend.create_event(JOIN_FLAGS)?;
        if pool.len() < JOIN_POOL {
            pool.push(e.clone());
        }
        Ok(e)
    }
}

pub(crate) const JOIN_FLAGS: EventFlags = EventFlags {
    timing: false,
    blocking_sync: false,
    interprocess: false,
};
