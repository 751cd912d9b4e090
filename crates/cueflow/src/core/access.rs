//! Pending device accesses to pinned memory, so the host never touches bytes a device
//! operation may still be reading or writing (SPEC MM3).
//!
//! Every operation that touches a pinned allocation is followed by a completion event on its
//! stream; the event and the byte range go into the allocation's log. Host access to a range
//! waits for the logged events that conflict with it: a host read waits for device writes to the
//! range, a host write for device reads and writes. Entries whose event has completed are pruned
//! as new ones arrive, so the log stays as short as the work in flight.

use std::ops::Range;
use std::sync::Arc;

use crate::backend::BackendEvent;
use crate::error::Result;

struct Pending {
    range: Range<usize>,
    device_writes: bool,
    done: Arc<dyn BackendEvent>,
}

/// The log of one allocation.
#[derive(Default)]
pub(crate) struct AccessLog {
    pending: Vec<Pending>,
}

impl AccessLog {
    /// Note that work ending with `done` touches `range` (writing it if `device_writes`).
    /// Returns the events of entries that completed, for reuse.
    pub fn push(
        &mut self,
        range: Range<usize>,
        device_writes: bool,
        done: Arc<dyn BackendEvent>,
    ) -> Vec<Arc<dyn BackendEvent>> {
        let mut finished = Vec::new();
        self.pending.retain(|p| {
            let complete = matches!(p.done.query(), Ok(true));
            if complete {
                finished.push(p.done.clone());
            }
            !complete
        });
        self.pending.push(Pending {
            range,
            device_writes,
            done,
        });
        finished
    }

    /// Events the host must wait for before it reads (`host_writes == false`) or writes `range`.
    pub fn conflicts(&self, range: &Range<usize>, host_writes: bool) -> Vec<Arc<dyn BackendEvent>> {
        self.pending
            .iter()
            .filter(|p| p.range.start < range.end && range.start < p.range.end)
            .filter(|p| host_writes || p.device_writes)
            .map(|p| p.done.clone())
            .collect()
    }
}

/// Wait until the host may access `range` of an allocation whose log is `log`.
pub(crate) fn wait_for_host_access(
    log: &parking_lot::Mutex<AccessLog>,
    range: Range<usize>,
    host_writes: bool,
) -> Result<()> {
    let events = log.lock().conflicts(&range, host_writes);
    for e in events {
        e.synchronize()?;
    }
    Ok(())
}

/// Timing-free events for access logs, reused once no log refers to them any more (creating a
/// driver event per pinned copy would cost microseconds on CUDA).
#[derive(Default)]
pub(crate) struct EventPool {
    free: parking_lot::Mutex<Vec<Arc<dyn BackendEvent>>>,
}

impl EventPool {
    /// A free event, or a new one from `create`.
    pub fn take(
        &self,
        create: impl FnOnce() -> Result<Arc<dyn BackendEvent>>,
    ) -> Result<Arc<dyn BackendEvent>> {
        match self.free.lock().pop() {
            Some(e) => Ok(e),
            None => create(),
        }
    }

    /// Give back events; only those nothing else holds are kept (a re-record would otherwise
    /// change what another holder waits for, EV2).
    pub fn give(&self, events: Vec<Arc<dyn BackendEvent>>) {
        let mut free = self.free.lock();
        for e in events {
            if Arc::strong_count(&e) == 1 && free.len() < 256 {
                free.push(e);
            }
        }
    }
}
