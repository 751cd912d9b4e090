//! CUDA events (EV1–EV8): `cuEventCreate` with the flags of [`EventFlags`], a recorded flag
//! the driver does not expose, and the sticky-error check on every call (ER2).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use cudarc::driver::sys::{CUevent_flags, CUresult};

use super::context::{in_context, now_or_deferred, Ctx};
use super::driver::{event as ev, CuResult, Ev};
use super::fault::Faults;
use crate::backend::contract::device::DoneSignal;
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::event::BackendEvent;
use crate::error::{Error, Result};
use crate::types::EventFlags;

crate::backend::contract::downcast::as_any!(CudaEvent);

/// A driver event of one device.
pub(crate) struct CudaEvent {
    /// The device, for the sticky state and fault blame. Weak: an event can sit in an
    /// allocation's access log that an orphaned operation holds (no cycle through the device).
    device: Weak<dyn Faults>,
    ctx: Arc<Ctx>,
    pub(super) raw: Ev,
    flags: EventFlags,
    recorded: AtomicBool,
    /// Records so far ([`set_recorded`](Self::set_recorded)), and the newest one a query or
    /// synchronize saw complete: the driver's first query of an event after it completed
    /// costs about 1.5 µs on an H100 (a stream synchronize or an event synchronize about
    /// nothing more than the wait), so an event seen complete is not asked about again until
    /// it is recorded again (EV4 still holds: a record starts a new count).
    records: AtomicU64,
    seen_complete: AtomicU64,
}

impl CudaEvent {
    /// Create an event (context current, D2).
    pub fn create<D: Faults + 'static>(
        device: &Arc<D>,
        ctx: &Arc<Ctx>,
        flags: EventFlags,
    ) -> Result<Arc<CudaEvent>> {
        Self::create_raw(device, ctx, flags).map_err(|e| device.fail(e))
    }

    /// Create an event, with the driver's error (context current, D2).
    pub fn create_raw<D: Faults + 'static>(
        device: &Arc<D>,
        ctx: &Arc<Ctx>,
        flags: EventFlags,
    ) -> CuResult<Arc<CudaEvent>> {
        let mut f = 0u32;
        if !flags.timing {
            f |= CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        }
        if flags.blocking_sync {
            f |= CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        if flags.interprocess {
            f |= CUevent_flags::CU_EVENT_INTERPROCESS as u32;
        }
        let raw = ev::create(f)?;
        Ok(Arc::new(CudaEvent {
            device: Arc::downgrade(device) as Weak<dyn Faults>,
            ctx: ctx.clone(),
            raw,
            flags,
            recorded: AtomicBool::new(false),
            records: AtomicU64::new(0),
            seen_complete: AtomicU64::new(u64::MAX),
        }))
    }

    /// Note a successful record on a stream.
    pub fn set_recorded(&self) {
        self.records.fetch_add(1, Ordering::AcqRel);
        if !self.recorded.load(Ordering::Relaxed) {
            self.recorded.store(true, Ordering::Release);
        }
    }

    /// Whether the newest record was seen complete already.
    fn known_complete(&self) -> bool {
        self.seen_complete.load(Ordering::Acquire) == self.records.load(Ordering::Acquire)
    }

    /// The device, checked for a sticky error and with its context current.
    fn enter(&self) -> Result<Arc<dyn Faults>> {
        let d = self
            .device
            .upgrade()
            .ok_or_else(|| Error::InvalidHandle("the event's device was dropped".into()))?;
        d.enter()?;
        Ok(d)
    }
}

/// The CUDA event behind a backend event.
pub(super) fn cuda_event(e: &dyn BackendEvent) -> Result<&CudaEvent> {
    downcast(e, "event")
}

impl BackendEvent for CudaEvent {
    fn flags(&self) -> EventFlags {
        self.flags
    }

    fn query(&self) -> Result<bool> {
        let d = self.enter()?;
        if !self.recorded() || self.known_complete() {
            return Ok(true); // EV3, or seen complete (ER2 checked by `enter`)
        }
        let record = self.records.load(Ordering::Acquire);
        let done = ev::query(self.raw).map_err(|e| d.fail(e))?;
        // ER2: a host function that panicked poisoned the device, not the event.
        if done {
            self.seen_complete.store(record, Ordering::Release);
            d.enter()?;
        }
        Ok(done)
    }

    fn synchronize(&self) -> Result<()> {
        let d = self.enter()?;
        if !self.recorded() || self.known_complete() {
            return Ok(()); // EV3, or seen complete
        }
        let record = self.records.load(Ordering::Acquire);
        ev::synchronize(self.raw).map_err(|e| d.fail(e))?;
        self.seen_complete.store(record, Ordering::Release);
        // ER2: as in `query`.
        d.enter()
    }

    fn recorded(&self) -> bool {
        self.recorded.load(Ordering::Acquire)
    }

    fn elapsed_ms(&self, end: &dyn BackendEvent) -> Result<f32> {
        let end = cuda_event(end)?;
        let d = self.enter()?;
        if !self.flags.timing || !end.flags.timing {
            return Err(Error::InvalidHandle(
                "elapsed: an event was created with timing disabled (EV6)".into(),
            ));
        }
        // D1: both events are live (`self` and `end` are borrowed); D2: entered above.
        match ev::elapsed_ms(self.raw, end.raw) {
            Ok(ms) => Ok(ms),
            Err(e) if e.code == CUresult::CUDA_ERROR_NOT_READY => Err(Error::NotReady(
                "elapsed on an event whose work is pending (EV6)",
            )),
            Err(e) if e.code == CUresult::CUDA_ERROR_INVALID_HANDLE => Err(Error::InvalidHandle(
                "elapsed: an event was never recorded or has timing disabled (EV6)".into(),
            )),
            Err(e) if e.missing => Err(e.to_error()),
            Err(e) => Err(d.fail(e)),
        }
    }
}

/// A recorded event is the completion signal of what it captured (contract rule 7).
impl DoneSignal for CudaEvent {
    fn is_done(&self) -> bool {
        // A failed query means the device is poisoned: nothing will run any more.
        BackendEvent::query(self).unwrap_or(true)
    }

    fn known_done(&self) -> bool {
        !self.recorded() || self.known_complete()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // EV8: returns at once even while pending; the driver frees it after completion.
        let (ctx, raw) = (self.ctx.clone(), self.raw);
        now_or_deferred(move || in_context(&ctx, || ev::destroy(raw)));
    }
}
