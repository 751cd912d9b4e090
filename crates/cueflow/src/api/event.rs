//! [`Event`]: a marker in a stream, for timing and cross-stream synchronization (EV1–EV8).

use std::sync::Arc;

use crate::api::device::Device;
use crate::api::stream::Stream;
use crate::core::streams::event::EventCore;
use crate::error::{Error, Result};
use crate::types::EventFlags;

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
    device: Device,
    pub(crate) inner: Arc<EventCore>,
}

impl Event {
    /// Record on `stream`: same as [`Stream::record_event`].
    pub fn record(&self, stream: &Stream) -> Result<()> {
        stream.record_event(self)
    }

    /// A timing event (cudaEventCreate).
    pub fn new(device: &Device) -> Result<Event> {
        Self::with_flags(device, EventFlags::default())
    }

    /// An event with explicit flags (EV7). An inter-process event needs timing off.
    pub fn with_flags(device: &Device, flags: EventFlags) -> Result<Event> {
        Ok(Event {
            device: device.clone(),
            inner: Arc::new(EventCore::new(&device.inner.core, flags)?),
        })
    }

    /// The device the event belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The creation flags.
    pub fn flags(&self) -> EventFlags {
        self.inner.flags
    }

    /// True once the captured work is done; true for a never-recorded event (EV3, EV5). Never
    /// blocks. Not-ready is an answer, not an error (ER1). A `true` answer synchronizes: later
    /// host calls are ordered after that work (AC2).
    pub fn query(&self) -> Result<bool> {
        self.inner.query()
    }

    /// Block until the captured work is done (EV5). Returns at once for a never-recorded event.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }

    /// Milliseconds between the completion of `start` and of `end` (EV6). Fails with
    /// [`Error::NotReady`] while either is pending and with [`Error::InvalidHandle`] if either
    /// was never recorded or has timing disabled.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        if !start.device.same(&end.device) {
            return Err(Error::InvalidHandle(
                "elapsed between events of different devices".into(),
            ));
        }
        EventCore::elapsed_ms(&start.inner, &end.inner)
    }

    /// A future that resolves when the work this event captured *now* has completed (EV2: a
    /// later re-record does not change it). Resolves at once for a never-recorded event (EV3).
    pub fn completion(&self) -> Result<crate::api::future::Completion> {
        self.inner.completion()
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({:?})", self.inner.flags)
    }
}
