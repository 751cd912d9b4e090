//! [`Event`]: a marker in a stream, for timing and cross-stream synchronization (EV1–EV8).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::api::device::Device;
use crate::api::stream::Stream;
use crate::backend::{BackendEvent, EventFlags};
use crate::core::capture::CapturedRef;
use crate::core::hostfn::check_not_in_host_fn;
use crate::error::{Error, Result};

pub(crate) struct EventCore {
    pub device: Device,
    pub backend: Arc<dyn BackendEvent>,
    pub flags: EventFlags,
    /// Trace id of the op the event last captured (for flow arrows).
    pub trace_op: AtomicU64,
    /// Set when the event was last recorded inside a capture (GR1).
    pub captured: Mutex<Option<CapturedRef>>,
}

impl EventCore {
    pub fn clear_capture(&self) {
        *self.captured.lock() = None;
    }
}

/// A marker in a stream. Cheap to clone; clones are the same event.
///
/// ```
/// use cueflow::{Device, Stream, Event, DeviceBuffer};
/// let dev = Device::host()?;
/// let s = Stream::new(&dev)?;
/// let d = DeviceBuffer::<f32>::new(&dev, 1 << 20)?;
/// let (start, stop) = (Event::new(&dev)?, Event::new(&dev)?);
/// s.record_event(&start)?;
/// cueflow::kernels::scale(&s, &d, 2.0)?;
/// s.record_event(&stop)?;
/// stop.synchronize()?;
/// println!("kernel took {:.3} ms", Event::elapsed_ms(&start, &stop)?);
/// # Ok::<(), cueflow::Error>(())
/// ```
#[derive(Clone)]
pub struct Event {
    pub(crate) inner: Arc<EventCore>,
}

impl Event {
    /// A timing event (cudaEventCreate).
    pub fn new(device: &Device) -> Result<Event> {
        Self::with_flags(device, EventFlags::default())
    }

    /// An event with explicit flags (EV7). An inter-process event needs timing off.
    pub fn with_flags(device: &Device, flags: EventFlags) -> Result<Event> {
        check_not_in_host_fn("Event::with_flags")?;
        // ER2: a poisoned device refuses new events too (cudaEventCreate returns the error).
        if let Some(e) = device.sticky_error() {
            return Err(e);
        }
        if flags.interprocess && flags.timing {
            return Err(Error::InvalidHandle(
                "an inter-process event must be created with timing disabled (EV7)".into(),
            ));
        }
        let backend = device.inner.backend.create_event(flags)?;
        Ok(Event {
            inner: Arc::new(EventCore {
                device: device.clone(),
                backend,
                flags,
                trace_op: AtomicU64::new(0),
                captured: Mutex::new(None),
            }),
        })
    }

    /// The device the event belongs to.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The creation flags.
    pub fn flags(&self) -> EventFlags {
        self.inner.flags
    }

    /// Record on `stream`: same as [`Stream::record_event`].
    pub fn record(&self, stream: &Stream) -> Result<()> {
        stream.record_event(self)
    }

    /// True once the captured work is done; true for a never-recorded event (EV3, EV5). Never
    /// blocks. Not-ready is an answer, not an error (ER1).
    pub fn query(&self) -> Result<bool> {
        check_not_in_host_fn("Event::query")?;
        self.refuse_if_captured("query of an event recorded in a capture")?;
        self.inner.backend.query()
    }

    /// Block until the captured work is done (EV5). Returns at once for a never-recorded event.
    pub fn synchronize(&self) -> Result<()> {
        check_not_in_host_fn("Event::synchronize")?;
        self.refuse_if_captured("synchronize of an event recorded in a capture")?;
        self.inner.backend.synchronize()
    }

    /// Milliseconds between the completion of `start` and of `end` (EV6). Fails with
    /// [`Error::NotReady`] while either is pending and with [`Error::InvalidHandle`] if either
    /// was never recorded or has timing disabled.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        check_not_in_host_fn("Event::elapsed_ms")?;
        if !start.inner.device.same(&end.inner.device) {
            return Err(Error::InvalidHandle(
                "elapsed between events of different devices".into(),
            ));
        }
        for (which, e) in [("start", start), ("end", end)] {
            if !e.inner.flags.timing {
                return Err(Error::InvalidHandle(format!(
                    "elapsed: the {which} event was created with timing disabled (EV6)"
                )));
            }
            if e.inner.captured.lock().is_some() {
                return Err(Error::InvalidHandle(format!(
                    "elapsed: the {which} event was recorded inside a capture"
                )));
            }
            if !e.inner.backend.recorded() {
                return Err(Error::InvalidHandle(format!(
                    "elapsed: the {which} event was never recorded (EV6)"
                )));
            }
        }
        if !start.inner.backend.query()? || !end.inner.backend.query()? {
            return Err(Error::NotReady(
                "elapsed on an event whose work is pending (EV6)",
            ));
        }
        start.inner.backend.elapsed_ms(end.inner.backend.as_ref())
    }

    /// A future that resolves when the work this event captured *now* has completed (EV2: a
    /// later re-record does not change it). Resolves at once for a never-recorded event (EV3).
    pub fn completion(&self) -> Result<crate::api::future::Completion> {
        check_not_in_host_fn("Event::completion")?;
        self.refuse_if_captured("completion of an event recorded in a capture")?;
        let dev = &self.inner.device.inner;
        let notifier = match dev.notifier.get() {
            Some(n) => n.clone(),
            None => {
                let s = dev.backend.create_stream(crate::backend::StreamDesc {
                    kind: crate::backend::StreamKind::NonBlocking,
                    priority: dev.backend.properties().priority_least,
                })?;
                dev.notifier.get_or_init(|| s).clone()
            }
        };
        let snapshot = dev.backend.create_event(EventFlags {
            timing: false,
            ..Default::default()
        })?;
        notifier.wait(&self.inner.backend)?;
        notifier.record(&snapshot)?;
        Ok(dev.watcher.watch(snapshot))
    }

    fn refuse_if_captured(&self, what: &str) -> Result<()> {
        let captured = self.inner.captured.lock().clone();
        if let Some(c) = captured {
            if c.session.is_active() {
                return Err(c.session.invalidate(what));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({:?})", self.inner.flags)
    }
}
