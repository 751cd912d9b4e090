//! Events as core sees them: the backend event, what a capture made of its last record, and the
//! sanitizer's snapshot of the recording stream's clock (EV1–EV8, AC2).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::event::BackendEvent;
use crate::core::devices::device::DeviceCore;
use crate::core::graphs::capture::CapturedRef;
use crate::core::graphs::capture_slot::Slot;
use crate::core::streams::completion::Completion;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::join_events::JOIN_FLAGS;
use crate::core::tracking::clock::VClock;
use crate::error::{Error, Result};
use crate::types::EventFlags;

pub(crate) struct EventCore {
    pub device: Arc<DeviceCore>,
    pub backend: Arc<dyn BackendEvent>,
    pub flags: EventFlags,
    /// Trace id of the op the event last captured (for flow arrows).
    pub trace_op: AtomicU64,
    /// Set when the event was last recorded inside a capture (GR1); its flag answers every
    /// record and wait of an event never recorded in one without a lock.
    pub captured: Slot<CapturedRef>,
    /// The recording stream's clock at the last record (sanitizer on).
    pub clock: Mutex<Option<Arc<VClock>>>,
    /// Set while automatic graphs hold the event's last record (AG4).
    pub autograph_held: Arc<AtomicBool>,
    /// A stream join's own event ([`EventCore::join`]): nothing outside the join observes
    /// it, so a replay need not record it (AG3).
    pub internal: bool,
}

impl EventCore {
    pub fn new(device: &Arc<DeviceCore>, flags: EventFlags) -> Result<EventCore> {
        check_not_in_host_fn("Event::new")?;
        // ER2: a poisoned device refuses new events too (cudaEventCreate returns the error).
        if let Some(e) = device.sticky_error() {
            return Err(e);
        }
        if flags.interprocess && flags.timing {
            return Err(Error::InvalidHandle(
                "an inter-process event must be created with timing disabled (EV7)".into(),
            ));
        }
        device.mark_used();
        let backend = device.backend.create_event(flags)?;
        Ok(EventCore::with_backend(device, backend, flags, false))
    }

    /// A timing-free event for one join of two streams (`Stream::wait_stream`), from the
    /// device's pool ([`JoinEvents`]).
    pub fn join(device: &Arc<DeviceCore>) -> Result<EventCore> {
        check_not_in_host_fn("Stream::wait_stream")?;
        if let Some(e) = device.sticky_error() {
            return Err(e); // ER2, as a new event would answer.
        }
        device.mark_used();
        let backend = device.join_events.take(&device.backend)?;
        Ok(EventCore::with_backend(device, backend, JOIN_FLAGS, true))
    }

    fn with_backend(
        device: &Arc<DeviceCore>,
        backend: Arc<dyn BackendEvent>,
        flags: EventFlags,
        internal: bool,
    ) -> EventCore {
        EventCore {
            device: device.clone(),
            backend,
            flags,
            trace_op: AtomicU64::new(0),
            captured: Slot::default(),
            clock: Mutex::new(None),
            autograph_held: Arc::default(),
            internal,
        }
    }

    pub fn clear_capture(&self) {
        self.captured.clear();
    }

    /// True once the captured work is done (EV3, EV5); a done answer synchronizes (AC2).
    pub fn query(&self) -> Result<bool> {
        check_not_in_host_fn("Event::query")?;
        self.refuse_if_captured("query of an event recorded in a capture")?;
        self.device.autograph.observe()?; // AG4
        let seen = self.device.track.seen_event(&self.clock);
        let done = self.backend.query()?;
        if done {
            self.device.track.observed(seen);
        }
        Ok(done)
    }

    /// Block until the captured work is done (EV5).
    pub fn synchronize(&self) -> Result<()> {
        check_not_in_host_fn("Event::synchronize")?;
        self.refuse_if_captured("synchronize of an event recorded in a capture")?;
        self.device.autograph.observe()?; // AG4
        let seen = self.device.track.seen_event(&self.clock);
        self.backend.synchronize()?;
        self.device.track.observed(seen);
        Ok(())
    }

    /// Milliseconds between the completions of `start` and `end` (EV6). An answer observes
    /// both completions (AC2).
    pub fn elapsed_ms(start: &EventCore, end: &EventCore) -> Result<f32> {
        check_not_in_host_fn("Event::elapsed_ms")?;
        for (which, e) in [("start", start), ("end", end)] {
            if !e.flags.timing {
                return Err(Error::InvalidHandle(format!(
                    "elapsed: the {which} event was created with timing disabled (EV6)"
                )));
            }
            if e.captured.get().is_some() {
                return Err(Error::InvalidHandle(format!(
                    "elapsed: the {which} event was recorded inside a capture"
                )));
            }
            if !e.backend.recorded() {
                return Err(Error::InvalidHandle(format!(
                    "elapsed: the {which} event was never recorded (EV6)"
                )));
            }
        }
        start.device.autograph.observe()?; // AG4
        end.device.autograph.observe()?;
        let track = &start.device.track;
        let seen = (track.seen_event(&start.clock), track.seen_event(&end.clock));
        if !start.backend.query()? || !end.backend.query()? {
            return Err(Error::NotReady(
                "elapsed on an event whose work is pending (EV6)",
            ));
        }
        let ms = start.backend.elapsed_ms(end.backend.as_ref())?;
        track.observed(seen.0);
        track.observed(seen.1);
        Ok(ms)
    }

    /// A future for the work this event captured now (EV2: a later re-record does not change
    /// it). Resolves at once for a never-recorded event (EV3).
    pub fn completion(&self) -> Result<Completion> {
        check_not_in_host_fn("Event::completion")?;
        self.refuse_if_captured("completion of an event recorded in a capture")?;
        self.device.autograph.observe()?; // AG4
        let dev = &self.device;
        let seen = dev.track.seen_event(&self.clock);
        // RL4: work already done resolves now, whatever else is pending (EV3 too: a
        // never-recorded event answers done).
        if self.backend.query()? {
            return Ok(Completion::resolved(dev, seen));
        }
        let notifier = dev.notifier()?;
        let snapshot = dev.backend.create_event(EventFlags {
            timing: false,
            ..Default::default()
        })?;
        notifier.wait(&self.backend)?;
        notifier.record(&snapshot)?;
        dev.watcher.watch(snapshot, notifier.as_ref(), dev, seen)
    }

    fn refuse_if_captured(&self, what: &str) -> Result<()> {
        let captured = self.captured.get();
        if let Some(c) = captured {
            if c.session.is_active() {
                return Err(c.session.invalidate(what));
            }
        }
        Ok(())
    }
}
