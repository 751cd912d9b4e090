//! Where a backend writes an operation's execution times while a trace is recorded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::event::BackendEvent;

/// Timing events recorded before and after an operation.
pub(crate) type EventPair = (Arc<dyn BackendEvent>, Arc<dyn BackendEvent>);

/// Where a backend writes an op's execution times.
///
/// The host backend stores nanoseconds directly. A backend without a host-readable device clock
/// (CUDA) stores a pair of timing events instead; core's recorder converts them when the trace
/// is collected, relative to an event recorded when tracing started.
#[derive(Default)]
pub(crate) struct TraceSlot {
    pub start_ns: AtomicU64,
    pub end_ns: AtomicU64,
    pub events: Mutex<Option<EventPair>>,
}

impl TraceSlot {
    pub fn set_times(&self, start_ns: u64, end_ns: u64) {
        self.start_ns.store(start_ns, Ordering::Relaxed);
        self.end_ns.store(end_ns, Ordering::Release);
    }
}
