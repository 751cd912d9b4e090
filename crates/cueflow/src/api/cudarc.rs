//! cudarc interop (feature `cudarc-interop`, on by default): a cudarc program's context,
//! streams and slices handed to cueflow, and cueflow's handed to cudarc, without copying.
//!
//! * [`Device::from_cudarc`] — the cueflow device of a cudarc `CudaContext`: both hold the
//!   GPU's primary context (each its own reference: `cuDevicePrimaryCtxRetain`/`Release` are
//!   counted by the driver, so neither releases it under the other).
//!   [`Device::cudarc_context`] goes the other way.
//! * [`Stream::from_cudarc`] keeps the cudarc stream alive while cueflow uses it and never
//!   destroys it; [`Stream::as_cudarc`] lends a cueflow stream as a cudarc `CudaStream` that
//!   does not own it (cudarc's `wrap_borrowed_stream`): cueflow keeps the raw stream alive
//!   while cudarc holds that handle, even past the cueflow stream.
//! * [`DeviceBuffer::from_cudarc`] / [`from_cudarc_on`](DeviceBuffer::from_cudarc_on) adopt a
//!   `CudaSlice` (cueflow owns it, and frees it through cudarc's drop after the last use,
//!   MM2); [`DeviceBuffer::into_cudarc`] gives it back; [`Stream::cudarc`] lends any cueflow
//!   memory to cudarc calls for one operation.
//!
//! cudarc's own event tracking (a read and a write event per `CudaSlice`) and cueflow's
//! tracking meet at the hand-overs only: adopting waits for the uses cudarc's events track,
//! and a slice given back is idle. In between cueflow alone orders and tracks the memory;
//! cudarc's views of it ([`CudarcView`](crate::CudarcView)) carry no events.

use std::any::Any;
use std::ffi::c_void;
use std::sync::{Arc, Weak};

use bytemuck::Pod;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut, DriverError};
use parking_lot::Mutex;

use crate::api::device::Device;
use crate::api::memory::DeviceBuffer;
use crate::api::stream::Stream;
use crate::core::devices::open_device::OpenDevice;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::stream::StreamCore;
use crate::error::{Error, Result};
use crate::types::OwnerDrop;

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Error {
        Error::Driver {
            call: "cudarc",
            code: e.error_name().map_or_else(
                |_| format!("CUresult {}", e.0 as u32),
                |n| n.to_string_lossy().into_owned(),
            ),
        }
    }
}

/// cudarc's context object as a device keeps it: dropped where driver calls are allowed.
struct KeptContext {
    ctx: Option<Arc<CudaContext>>,
    drop_owner: OwnerDrop,
}

impl Drop for KeptContext {
    fn drop(&mut self) {
        if let Some(c) = self.ctx.take() {
            (self.drop_owner)(Box::new(c));
        }
    }
}

/// Devices that keep a cudarc context, by the raw context: `from_cudarc` of the same context
/// is the same device.
static DEVICES: Mutex<Vec<(usize, Weak<OpenDevice>)>> = Mutex::new(Vec::new());

/// Streams lent to or adopted from cudarc, by (device id, raw stream): a cudarc handle of a
/// stream cueflow knows comes back as that stream.
static STREAMS: Mutex<Vec<(u64, usize, Weak<StreamCore>)>> = Mutex::new(Vec::new());

/// Held while `Device::from_cudarc` looks for the device and opens it, so that two threads
/// adopting one context get one device.
static OPENING: Mutex<()> = Mutex::new(());

fn remember_stream(device: &Device, raw: usize, core: &Arc<StreamCore>) {
    let mut s = STREAMS.lock();
    s.retain(|(_, _, w)| w.strong_count() > 0);
    s.push((device.id(), raw, Arc::downgrade(core)));
}

impl Device {
    /// The cueflow device of a cudarc context (zero-copy interop, with [`Stream::from_cudarc`],
    /// [`DeviceBuffer::from_cudarc`]): a CUDA device on the same GPU's primary context, which
    /// both keep (each its own reference, counted by the driver). The same context gives the
    /// same device while it is open, including a device whose
    /// [`cudarc_context`](Self::cudarc_context) it is.
    ///
    /// Refused: a context that is not its GPU's primary context ([`Error::Unsupported`]:
    /// cueflow runs on the primary context), or a device that runs on a context of its own
    /// after an unrecoverable fault (ER2).
    pub fn from_cudarc(ctx: &Arc<CudaContext>) -> Result<Device> {
        if !ctx.is_primary() {
            return Err(Error::Unsupported(
                "Device::from_cudarc: the cudarc context is not its GPU's primary context \
                 (CudaContext::new makes one); cueflow runs on the primary context"
                    .into(),
            ));
        }
        check_not_in_host_fn("Device::from_cudarc")?;
        let key = ctx.cu_ctx() as usize;
        let _opening = OPENING.lock();
        let known = {
            let mut d = DEVICES.lock();
            d.retain(|(_, w)| w.strong_count() > 0);
            d.iter()
                .filter(|(k, _)| *k == key)
                .find_map(|(_, w)| w.upgrade())
        };
        if let Some(inner) = known {
            return Ok(Device { inner });
        }
        let dev = Device::cuda(ctx.ordinal())?;
        dev.keep_context(ctx.clone(), "Device::from_cudarc")?;
        Ok(dev)
    }

    /// This device's context as cudarc's `CudaContext` (its GPU's primary context), for cudarc
    /// calls beside cueflow's; made on first use (`CudaContext::new`) unless the device came
    /// from one ([`from_cudarc`](Self::from_cudarc)). `Unsupported` on the host backend.
    pub fn cudarc_context(&self) -> Result<Arc<CudaContext>> {
        if let Some(ctx) = self.kept_context() {
            return Ok(ctx);
        }
        check_not_in_host_fn("Device::cudarc_context")?;
        if self.inner.raw_context().is_none() {
            return Err(self.not_cuda("Device::cudarc_context"));
        }
        // cudarc's loader panics on the first driver function it cannot find; its CUDA 13
        // bindings make a context with cuCtxCreate_v4 (CUDA 12.5). Refused before it can.
        let props = self.properties();
        if props.driver_version < CUDARC_DRIVER {
            return Err(Error::driver_too_old(
                "Device::cudarc_context (a context for cudarc's CUDA 13 bindings)",
                CUDARC_DRIVER,
                props.driver_version,
            ));
        }
        let ctx = CudaContext::new(props.ordinal)?;
        self.keep_context(ctx, "Device::cudarc_context")
    }

    fn kept_context(&self) -> Option<Arc<CudaContext>> {
        let kept = self.inner.interop.get()?.downcast_ref::<KeptContext>()?;
        kept.ctx.clone()
    }

    /// Keep `ctx` as this device's cudarc context (the first one kept stays), after checking
    /// it is the device's context.
    fn keep_context(&self, ctx: Arc<CudaContext>, call: &str) -> Result<Arc<CudaContext>> {
        self.check_cudarc(&ctx, call)?;
        let key = ctx.cu_ctx() as usize;
        let kept = KeptContext {
            ctx: Some(ctx),
            drop_owner: self.inner.owner_drop(),
        };
        if self.inner.interop.set(Box::new(kept)).is_ok() {
            let mut d = DEVICES.lock();
            d.retain(|(_, w)| w.strong_count() > 0);
            d.push((key, Arc::downgrade(&self.inner)));
        }
        self.kept_context().ok_or_else(|| {
            Error::Unsupported(format!(
                "{call}: this device keeps another library's context object, not cudarc's"
            ))
        })
    }

    /// Refuse a cudarc object of another context than this device's; from now on the backend
    /// checks the current context before trusting its own cache (cudarc binds its own).
    fn check_cudarc(&self, ctx: &CudaContext, call: &str) -> Result<()> {
        let Some(raw) = self.inner.share_context() else {
            return Err(self.not_cuda(call));
        };
        if raw != ctx.cu_ctx() as *mut c_void {
            return Err(Error::InvalidHandle(format!(
                "{call}: the cudarc object belongs to the context of CUDA device {} \
                 ({:p}), not to device {}'s ({raw:p}){}",
                ctx.ordinal(),
                ctx.cu_ctx(),
                self.inner.describe(),
                if ctx.ordinal() == self.properties().ordinal {
                    ": this device runs on a context of its own after a fault (ER2)"
                } else {
                    ""
                }
            )));
        }
        Ok(())
    }

    fn not_cuda(&self, call: &str) -> Error {
        Error::Unsupported(format!(
            "{call}: cudarc works on CUDA devices; device {} is a {} device",
            self.inner.describe(),
            self.properties().backend
        ))
    }
}

impl Stream {
    /// A cudarc stream as a cueflow stream of `device`, without copying or taking it over:
    /// cueflow keeps the `Arc` until it is done with the stream (its last operation seen
    /// complete) and never destroys it. cudarc's default stream is the device's legacy stream
    /// ([`Stream::legacy`]); a stream cueflow lent ([`as_cudarc`](Self::as_cudarc)) comes back
    /// as that stream, so each raw stream is one stream to the sanitizer.
    ///
    /// Refused: a stream of another context ([`Error::InvalidHandle`]), cudarc's per-thread
    /// stream ([`Error::Unsupported`]: use [`Stream::per_thread`]).
    pub fn from_cudarc(device: &Device, stream: Arc<CudaStream>) -> Result<Stream> {
        device.check_cudarc(stream.context(), "Stream::from_cudarc")?;
        let raw = stream.cu_stream() as usize;
        match raw {
            0 | 1 => return Ok(Stream::legacy(device)),
            2 => {
                return Err(Error::Unsupported(
                    "Stream::from_cudarc: cudarc's per-thread default stream; use \
                     Stream::per_thread"
                        .into(),
                ))
            }
            _ => {}
        }
        // Looked up and adopted under one lock: one cueflow stream per raw stream.
        let mut known = STREAMS.lock();
        known.retain(|(_, _, w)| w.strong_count() > 0);
        let same = |(d, r, _): &&(u64, usize, Weak<StreamCore>)| *d == device.id() && *r == raw;
        let core = match known.iter().filter(same).find_map(|(_, _, w)| w.upgrade()) {
            Some(core) => core,
            None => {
                let owner: Arc<dyn Any + Send + Sync> = stream;
                let core = device.inner.adopt_stream(raw as *mut c_void, Some(owner))?;
                known.push((device.id(), raw, Arc::downgrade(&core)));
                core
            }
        };
        Ok(Stream {
            device: device.clone(),
            core,
        })
    }

    /// This stream as a cudarc `CudaStream` that does not own it (cudarc's
    /// `wrap_borrowed_stream`), for cudarc calls and library handles (`CudaBlas::new`): made
    /// once and shared. cueflow keeps the raw stream alive while any clone of it is held, even
    /// past this stream's last handle. A stream that came from cudarc gives back cudarc's own.
    ///
    /// Work enqueued on it directly is invisible to cueflow (its memory, ordering and
    /// lifetimes are the caller's business, as with [`Stream::raw_cuda_stream`]); for work over
    /// cueflow memory use [`Stream::cudarc`], which declares it.
    ///
    /// Refused on the host backend, and for a stream adopted with
    /// [`from_raw_cuda`](Stream::from_raw_cuda), whose lifetime only its creator knows
    /// ([`Error::Unsupported`]).
    pub fn as_cudarc(&self) -> Result<Arc<CudaStream>> {
        let ctx = self.device.cudarc_context()?;
        let core = &self.core;
        let lent = core.backend.lend(&mut |raw| {
            remember_stream(&self.device, raw as usize, core);
            // SAFETY: `raw` is this stream's live handle, a stream of `ctx` (checked when the
            // context was kept). The backend keeps it alive while the returned handle is held
            // anywhere (a dropped stream whose lent handle is still held lingers until it is
            // not). Ordering work cudarc enqueues on it directly is the caller's, as the docs
            // above say; cueflow memory reaches cudarc only through declared operations.
            let s = unsafe { ctx.wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream) };
            s as Arc<dyn Any + Send + Sync>
        });
        let lent = lent.ok_or_else(|| {
            Error::Unsupported(format!(
                "Stream::as_cudarc: {} has no cudarc handle: {}",
                self.core.label(),
                if self.device.inner.raw_context().is_none() {
                    "cudarc works on CUDA devices"
                } else {
                    "it was adopted from a raw handle (Stream::from_raw_cuda), whose lifetime \
                     its creator keeps; wrap the raw stream with cudarc yourself"
                }
            ))
        })?;
        lent.downcast::<CudaStream>().map_err(|_| {
            Error::InvalidHandle(format!(
                "Stream::as_cudarc: {} was adopted from another library",
                self.core.label()
            ))
        })
    }
}

/// The oldest driver cudarc's bindings (feature `cuda-13000`) make a context on: CUDA 12.5.
const CUDARC_DRIVER: u32 = 12050;

/// [`DeviceBuffer::into_cudarc`] refused: why, and the buffer, handed back unchanged.
pub struct IntoCudarcError<T> {
    /// Why (boxed: the refusal stays small beside the buffer it hands back).
    pub error: Box<Error>,
    /// The buffer, as it was.
    pub buffer: DeviceBuffer<T>,
}

impl<T> std::fmt::Display for IntoCudarcError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl<T> std::fmt::Debug for IntoCudarcError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl<T> std::error::Error for IntoCudarcError<T> {}

impl<T> From<IntoCudarcError<T>> for Error {
    fn from(e: IntoCudarcError<T>) -> Error {
        *e.error
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Adopt a cudarc slice without copying: cueflow owns it from now on and drops it — cudarc
    /// frees the memory — once every handle and every operation using it is gone (MM2).
    ///
    /// The host first waits for the slice's pending cudarc work: its stream up to now (the
    /// allocation, uploads) and the uses on other streams its events track. Then every cueflow
    /// stream may use the buffer at once, as after [`DeviceBuffer::from_slice`]. To adopt
    /// without waiting, in a stream's order, use [`from_cudarc_on`](Self::from_cudarc_on).
    /// Refused: a slice of another context ([`Error::InvalidHandle`]).
    pub fn from_cudarc(device: &Device, mut slice: CudaSlice<T>) -> Result<DeviceBuffer<T>> {
        device.check_cudarc(slice.context(), "DeviceBuffer::from_cudarc")?;
        let s = slice.stream().clone();
        // cudarc's protocol for a write on `s`: `s` waits for the slice's read and write
        // events (when cudarc tracks them); then the host waits for `s`.
        let addr = slice.device_ptr_mut(&s).0;
        s.synchronize()?;
        adopt(device, addr, slice)
    }

    /// Adopt a cudarc slice without copying, in `stream`'s order: `stream` waits (on the
    /// device, the host does not) for the slice's cudarc work — its own stream up to now and
    /// the uses its events track — and the adoption counts as a write on `stream` (AC1): work
    /// of other streams must follow it as it would follow an allocation on `stream` (MM1),
    /// which automatic ordering does and the sanitizer checks. Ownership as
    /// [`from_cudarc`](Self::from_cudarc). Refused on a capturing stream.
    #[track_caller]
    pub fn from_cudarc_on(stream: &Stream, mut slice: CudaSlice<T>) -> Result<DeviceBuffer<T>> {
        let device = stream.device();
        device.check_cudarc(slice.context(), "DeviceBuffer::from_cudarc_on")?;
        if stream.is_capturing() {
            return Err(Error::Unsupported(
                "DeviceBuffer::from_cudarc_on on a capturing stream".into(),
            ));
        }
        let cs = stream.as_cudarc()?;
        // cudarc's protocol for a write on `cs` makes it wait for the slice's tracked uses;
        // joining the slice's stream covers its allocation and its work so far.
        let addr = slice.device_ptr_mut(&cs).0;
        cs.join(slice.stream())?;
        let buf = adopt(device, addr, slice)?;
        stream
            .cudarc("DeviceBuffer::from_cudarc_on")
            .writes(&buf)
            .run(|_| Ok(()))?;
        Ok(buf)
    }

    /// Give an adopted slice back to cudarc, without copying ([`from_cudarc`](Self::from_cudarc)
    /// made it): the memory must be idle, so cudarc may use it on any stream at once.
    ///
    /// Refused — the buffer handed back in the error — unless this handle is the whole buffer
    /// and the only holder of its memory: no other handle or view, no graph, and no operation
    /// that the device has not been seen to finish (synchronize the streams that used it
    /// first). Waiting here instead would mean a device-wide synchronization hidden in a
    /// conversion, and could never end for memory a graph holds. Memory cueflow allocated has
    /// no cudarc slice to give back: lend it to cudarc calls with [`Stream::cudarc`].
    pub fn into_cudarc(self) -> std::result::Result<CudaSlice<T>, IntoCudarcError<T>> {
        self.take_owner::<CudaSlice<T>>(
            "DeviceBuffer::into_cudarc",
            "only memory adopted from cudarc (DeviceBuffer::from_cudarc) goes back as a \
             CudaSlice; lend cueflow's own memory to cudarc calls with Stream::cudarc",
        )
        .map_err(|refused| {
            let (error, buffer) = *refused;
            IntoCudarcError {
                error: Box::new(error),
                buffer,
            }
        })
    }
}

/// The buffer over `slice`'s memory at `addr`, keeping the slice as its owner.
fn adopt<T: Pod>(device: &Device, addr: u64, slice: CudaSlice<T>) -> Result<DeviceBuffer<T>> {
    let len = slice.len();
    if len == 0 {
        return Err(Error::InvalidHandle(
            "DeviceBuffer::from_cudarc: an empty slice has no memory to adopt".into(),
        ));
    }
    // SAFETY: `addr` is the slice's device memory of `len` elements of `T` in this device's
    // context (checked by the caller), allocated by cudarc with the driver's alignment; it
    // stays valid until the slice, kept as the owner, is dropped, and nothing else uses it:
    // the slice was moved here, and its pending work is ordered before cueflow's (the
    // callers).
    unsafe { DeviceBuffer::from_raw_parts(device, addr, len, slice) }
}
