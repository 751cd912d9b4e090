//! [`Stream`]: an ordered queue of device work (ST1–ST10), and the one submit path every
//! operation passes through: validation, capture, tracing, host-access tracking.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::api::device::Device;
use crate::api::event::Event;
use crate::api::kernel::{Kernel, KernelArgs, LaunchConfig};
use crate::api::memory::{DeviceBuffer, PinnedSlice, PinnedSliceMut};
use crate::backend::{BackendStream, EventFlags, StreamDesc, StreamKind};
use crate::core::alloc::{MemKind, MemRef};
use crate::core::capture::{CaptureMode, CaptureSession};
use crate::core::hostfn::check_not_in_host_fn;
use crate::core::op::{Op, Work};
use crate::error::{Error, Result};
use crate::trace::{Engine, OpKind};
use bytemuck::Pod;

/// Core state of a stream, shared by its handles.
pub(crate) struct StreamCore {
    pub id: u64,
    pub backend: Arc<dyn BackendStream>,
    pub kind: StreamKind,
    pub priority: i32,
    /// The capture this stream takes part in, if any (GR1).
    pub capture: Mutex<Option<Arc<CaptureSession>>>,
    /// Trace id of the newest traced op, and trace ids the next op waits on (flow arrows).
    pub last_trace_op: AtomicU64,
    pub pending_waits: Mutex<Vec<u64>>,
}

impl StreamCore {
    pub fn new(id: u64, backend: Arc<dyn BackendStream>, kind: StreamKind, priority: i32) -> Self {
        StreamCore {
            id,
            backend,
            kind,
            priority,
            capture: Mutex::new(None),
            last_trace_op: AtomicU64::new(0),
            pending_waits: Mutex::new(Vec::new()),
        }
    }

    pub fn capture(&self) -> Option<Arc<CaptureSession>> {
        self.capture.lock().clone()
    }
}

thread_local! {
    /// Per-thread default streams of this thread, by device id (ST6).
    /// Weak, so a dropped device's per-thread streams (and their memory) are not kept alive
    /// by every thread that once used them.
    static PER_THREAD: RefCell<HashMap<u64, std::sync::Weak<StreamCore>>> =
        RefCell::new(HashMap::new());
}

/// An ordered queue of device work. Cheap to clone; clones are the same stream.
///
/// Dropping the last handle with work pending returns at once; the work still completes (ST10).
///
/// ```
/// use cueflow::{Device, Stream, DeviceBuffer, PinnedBuffer};
/// let dev = Device::host()?;
/// let s = Stream::builder(&dev).non_blocking().priority(-1).build()?;
/// let host = PinnedBuffer::from_slice(&dev, &[1.0f32; 1024])?;
/// let d = DeviceBuffer::<f32>::new(&dev, 1024)?;
/// s.copy_h2d(&d, &host)?;          // returns at once (CP2)
/// cueflow::kernels::scale(&s, &d, 2.0)?;
/// let mut out = vec![0.0f32; 1024];
/// s.read_pageable(&mut out, &d)?;  // pageable: returns when the data arrived (CP3)
/// assert!(out.iter().all(|&x| x == 2.0));
/// # Ok::<(), cueflow::Error>(())
/// ```
#[derive(Clone)]
pub struct Stream {
    pub(crate) device: Device,
    pub(crate) core: Arc<StreamCore>,
}

/// Builds a [`Stream`] with flags and a priority (cudaStreamCreateWithPriority).
pub struct StreamBuilder<'d> {
    device: &'d Device,
    non_blocking: bool,
    priority: i32,
    name: Option<String>,
}

impl StreamBuilder<'_> {
    /// Create a non-blocking stream: it takes no part in the legacy stream's ordering (ST5).
    pub fn non_blocking(mut self) -> Self {
        self.non_blocking = true;
        self
    }

    /// Priority: lower is more urgent. Clamped into the device's range, never refused (ST7).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Name shown in traces.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Create the stream.
    pub fn build(self) -> Result<Stream> {
        check_not_in_host_fn("Stream::build")?;
        // ER2: a poisoned device refuses new streams too (cudaStreamCreate returns the error).
        if let Some(e) = self.device.sticky_error() {
            return Err(e);
        }
        let props = self.device.properties();
        let (lo, hi) = (props.priority_greatest, props.priority_least);
        let priority = self.priority.clamp(lo.min(hi), lo.max(hi));
        let kind = if self.non_blocking {
            StreamKind::NonBlocking
        } else {
            StreamKind::Blocking
        };
        let backend = self
            .device
            .inner
            .backend
            .create_stream(StreamDesc { kind, priority })?;
        let id = self
            .device
            .inner
            .next_stream
            .fetch_add(1, Ordering::Relaxed);
        let s = Stream {
            device: self.device.clone(),
            core: Arc::new(StreamCore::new(id, backend, kind, priority)),
        };
        s.name_in_trace(self.name.unwrap_or_else(|| format!("stream {id}")));
        Ok(s)
    }
}

impl Stream {
    /// A blocking stream with default priority (cudaStreamCreate).
    pub fn new(device: &Device) -> Result<Stream> {
        Self::builder(device).build()
    }

    /// Start building a stream with flags and priority.
    pub fn builder(device: &Device) -> StreamBuilder<'_> {
        StreamBuilder {
            device,
            non_blocking: false,
            priority: 0,
            name: None,
        }
    }

    /// The device's legacy default stream (ST4).
    pub fn legacy(device: &Device) -> Stream {
        Stream {
            device: device.clone(),
            core: device.inner.legacy.clone(),
        }
    }

    /// The calling thread's per-thread default stream on `device` (ST6): a blocking stream of
    /// its own for each host thread.
    pub fn per_thread(device: &Device) -> Result<Stream> {
        check_not_in_host_fn("Stream::per_thread")?;
        let existing = PER_THREAD.with(|m| m.borrow().get(&device.id()).and_then(|w| w.upgrade()));
        let core = match existing {
            Some(c) => c,
            None => {
                let s = Stream::builder(device).build()?;
                s.name_in_trace(format!(
                    "per-thread default ({:?})",
                    std::thread::current().id()
                ));
                PER_THREAD.with(|m| {
                    let mut m = m.borrow_mut();
                    m.retain(|_, w| w.strong_count() > 0);
                    m.insert(device.id(), Arc::downgrade(&s.core));
                });
                s.core
            }
        };
        Ok(Stream {
            device: device.clone(),
            core,
        })
    }

    fn name_in_trace(&self, name: String) {
        if let Some(r) = self.device.recorder() {
            r.name_stream(self.core.id, name);
        }
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Stream id (0 is the legacy stream), as traces show it.
    pub fn id(&self) -> u64 {
        self.core.id
    }

    /// The priority after clamping (ST7).
    pub fn priority(&self) -> i32 {
        self.core.priority
    }

    /// How the stream takes part in the legacy stream's ordering.
    pub fn kind(&self) -> StreamKind {
        self.core.kind
    }

    /// True when every operation enqueued before the call has completed (ST8). Never blocks.
    pub fn query(&self) -> Result<bool> {
        check_not_in_host_fn("Stream::query")?;
        self.refuse_if_capturing("query of a capturing stream")?;
        self.core.backend.query()
    }

    /// Block until every operation enqueued before the call has completed (ST9).
    pub fn synchronize(&self) -> Result<()> {
        check_not_in_host_fn("Stream::synchronize")?;
        self.refuse_if_capturing("synchronize of a capturing stream")?;
        self.core.backend.synchronize()
    }

    /// Make all work enqueued after this call wait for what `event` captured now (EV4).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        check_not_in_host_fn("Stream::wait_event")?;
        self.check_same_device(event.device(), "wait_event")?;
        if crate::core::capture::wait_in_capture(self, event)? {
            return Ok(());
        }
        self.core.backend.wait(&event.inner.backend)?;
        if let Some(r) = self.device.recorder() {
            let waited = event.inner.trace_op.load(Ordering::Relaxed);
            let (id, _) = r.op(
                OpKind::EventWait,
                Engine::None,
                self.core.id,
                0,
                "wait".into(),
                self.device.now_ns(),
                // The arrow goes to the next real operation (pending_waits), which runs after
                // the waited work; the marker itself only has its enqueue time.
                Vec::new(),
            );
            self.core.last_trace_op.store(id, Ordering::Relaxed);
            if waited != 0 {
                self.core.pending_waits.lock().push(waited);
            }
        }
        Ok(())
    }

    /// Capture the work enqueued so far in `event` (EV1, EV2).
    pub fn record_event(&self, event: &Event) -> Result<()> {
        check_not_in_host_fn("Stream::record_event")?;
        self.check_same_device(event.device(), "record_event")?;
        if crate::core::capture::record_in_capture(self, event)? {
            return Ok(());
        }
        event.inner.clear_capture();
        self.core.backend.record(&event.inner.backend)?;
        if let Some(r) = self.device.recorder() {
            let last = self.core.last_trace_op.load(Ordering::Relaxed);
            event.inner.trace_op.store(last, Ordering::Relaxed);
            r.op(
                OpKind::EventRecord,
                Engine::None,
                self.core.id,
                0,
                "record".into(),
                self.device.now_ns(),
                Vec::new(),
            );
        }
        Ok(())
    }

    /// Create a timing event and record it here.
    pub fn record(&self) -> Result<Event> {
        let e = Event::new(&self.device)?;
        self.record_event(&e)?;
        Ok(e)
    }

    /// A future that resolves when every operation enqueued so far has completed (`.await` on
    /// device work). The host does not block; see [`Completion`](crate::api::future::Completion).
    pub fn completion(&self) -> Result<crate::api::future::Completion> {
        check_not_in_host_fn("Stream::completion")?;
        if let Some(session) = self.core.capture() {
            return Err(session.invalidate("completion of a capturing stream"));
        }
        let ev = self.device.inner.backend.create_event(EventFlags {
            timing: false,
            ..Default::default()
        })?;
        self.core.backend.record(&ev)?;
        Ok(self.device.inner.watcher.watch(ev))
    }

    /// Make this stream's later work wait for everything enqueued on `other` so far.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        let e = Event::with_flags(
            &self.device,
            EventFlags {
                timing: false,
                ..Default::default()
            },
        )?;
        other.record_event(&e)?;
        self.wait_event(&e)
    }

    /// Asynchronous copy from pinned host memory to the device (CP1, CP2). Returns before any
    /// byte moves.
    pub fn copy_h2d<'a, T: Pod>(
        &self,
        dst: &DeviceBuffer<T>,
        src: impl Into<PinnedSlice<'a, T>>,
    ) -> Result<()> {
        let src = src.into();
        self.copy(dst.mem(), src.mem(), "copy_h2d")
    }

    /// Asynchronous copy from the device into pinned host memory (CP1, CP2).
    pub fn copy_d2h<'a, T: Pod>(
        &self,
        dst: impl Into<PinnedSliceMut<'a, T>>,
        src: &DeviceBuffer<T>,
    ) -> Result<()> {
        let dst = dst.into();
        self.copy(dst.mem(), src.mem(), "copy_d2h")
    }

    /// Asynchronous device-to-device copy (CP1).
    pub fn copy_d2d<T: Pod>(&self, dst: &DeviceBuffer<T>, src: &DeviceBuffer<T>) -> Result<()> {
        self.copy(dst.mem(), src.mem(), "copy_d2d")
    }

    /// Asynchronous host-to-host copy between pinned buffers, in stream order (CP1).
    pub fn copy_h2h<'a, 'b, T: Pod>(
        &self,
        dst: impl Into<PinnedSliceMut<'a, T>>,
        src: impl Into<PinnedSlice<'b, T>>,
    ) -> Result<()> {
        let (dst, src) = (dst.into(), src.into());
        self.copy(dst.mem(), src.mem(), "copy_h2h")
    }

    fn copy(&self, dst: MemRef, src: MemRef, call: &'static str) -> Result<()> {
        check_not_in_host_fn(call)?;
        self.check_mem(&dst, call)?;
        self.check_mem(&src, call)?;
        if dst.len != src.len {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "{call}: destination is {} bytes but source is {} bytes",
                    dst.len, src.len
                ),
            ));
        }
        if dst.overlaps(&src) {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "{call}: source bytes {:?} and destination bytes {:?} of one allocation overlap",
                    src.range(),
                    dst.range()
                ),
            ));
        }
        self.submit(Op::new(Work::Copy { dst, src }))
    }

    /// Set every byte of `dst` to `value`, in stream order (CP1).
    pub fn memset<T: Pod>(&self, dst: &DeviceBuffer<T>, value: u8) -> Result<()> {
        check_not_in_host_fn("memset")?;
        let dst = dst.mem();
        self.check_mem(&dst, "memset")?;
        self.submit(Op::new(Work::Memset { dst, value }))
    }

    /// Copy from pageable host memory (a plain slice) to the device. **Blocks** until `src` has
    /// been read, so `src` may be reused at once (CP3); use pinned memory for asynchrony.
    pub fn write_pageable<T: Pod>(&self, dst: &DeviceBuffer<T>, src: &[T]) -> Result<()> {
        check_not_in_host_fn("write_pageable")?;
        let dst = dst.mem();
        self.check_mem(&dst, "write_pageable")?;
        let src: &[u8] = bytemuck::cast_slice(src);
        if dst.len != src.len() {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "write_pageable: device range is {} bytes but the slice is {} bytes",
                    dst.len,
                    src.len()
                ),
            ));
        }
        self.check_sync_call("pageable copy (synchronous, CP3)")?;
        let t0 = self.device.now_ns();
        self.core.backend.write_pageable(&dst, src)?;
        self.trace_blocking(
            OpKind::CopyH2D,
            Engine::CopyH2D,
            dst.len,
            "pageable H2D (blocking)",
            t0,
        );
        Ok(())
    }

    /// Copy from the device into pageable host memory. **Blocks** until the data has arrived
    /// (CP3).
    pub fn read_pageable<T: Pod>(&self, dst: &mut [T], src: &DeviceBuffer<T>) -> Result<()> {
        check_not_in_host_fn("read_pageable")?;
        let src = src.mem();
        self.check_mem(&src, "read_pageable")?;
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        if src.len != dst.len() {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "read_pageable: device range is {} bytes but the slice is {} bytes",
                    src.len,
                    dst.len()
                ),
            ));
        }
        self.check_sync_call("pageable copy (synchronous, CP3)")?;
        let t0 = self.device.now_ns();
        self.core.backend.read_pageable(dst, &src)?;
        self.trace_blocking(
            OpKind::CopyD2H,
            Engine::CopyD2H,
            src.len,
            "pageable D2H (blocking)",
            t0,
        );
        Ok(())
    }

    fn trace_blocking(&self, kind: OpKind, engine: Engine, bytes: usize, name: &str, t0: u64) {
        if let Some(r) = self.device.recorder() {
            let (id, slot) = r.op(
                kind,
                engine,
                self.core.id,
                bytes as u64,
                name.into(),
                t0,
                Vec::new(),
            );
            if let Some(slot) = slot {
                slot.set_times(t0, self.device.now_ns());
            }
            self.core.last_trace_op.store(id, Ordering::Relaxed);
        }
    }

    /// Launch `kernel` with `config` and `args` (KN1). Checked at the call: shape, arguments,
    /// buffers on this device, no written buffer overlapping another argument.
    pub fn launch(&self, kernel: &Kernel, config: LaunchConfig, args: KernelArgs) -> Result<()> {
        check_not_in_host_fn("launch")?;
        let launch = kernel.prepare(&self.device, config, args)?;
        self.submit(Op::new(Work::Launch(launch)))
    }

    /// Run `f` on the host after all earlier work on this stream and before any later work
    /// starts (HF1). `f` must not call cueflow; such calls are refused (HF2).
    pub fn host_fn(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        check_not_in_host_fn("host_fn")?;
        self.submit(Op::new(Work::HostFn(Arc::new(f))))
    }

    /// Allocate `len` elements in stream order (MM1): usable by later work on this stream;
    /// other streams must wait on an event recorded after this call first.
    pub fn alloc_async<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        check_not_in_host_fn("alloc_async")?;
        if self.core.capture().is_some() {
            return Err(Error::Unsupported(
                "stream-ordered allocation inside a stream capture".into(),
            ));
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "device memory",
                bytes: usize::MAX,
            })?;
        let alloc = self.core.backend.alloc_async(bytes)?;
        self.trace_marker(OpKind::Alloc, bytes);
        Ok(DeviceBuffer::from_alloc(&self.device, alloc, len))
    }

    /// Free `buf` in stream order (MM1): the memory is released once earlier work on this stream
    /// is done, and never while any operation or other handle still uses it (MM2).
    pub fn free_async<T: Pod>(&self, buf: DeviceBuffer<T>) -> Result<()> {
        check_not_in_host_fn("free_async")?;
        if self.core.capture().is_some() {
            return Err(Error::Unsupported(
                "stream-ordered free inside a stream capture".into(),
            ));
        }
        self.check_same_device(buf.device(), "free_async")?;
        let bytes = buf.mem().alloc.bytes;
        self.core.backend.free_async(buf.into_alloc())?;
        self.trace_marker(OpKind::Free, bytes);
        Ok(())
    }

    fn trace_marker(&self, kind: OpKind, bytes: usize) {
        if let Some(r) = self.device.recorder() {
            r.op(
                kind,
                Engine::None,
                self.core.id,
                bytes as u64,
                kind.label().into(),
                self.device.now_ns(),
                Vec::new(),
            );
        }
    }

    /// Begin capturing this stream's work into a graph instead of running it (GR1).
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        check_not_in_host_fn("begin_capture")?;
        // ER2: captures do not reach the backend, so the sticky error is checked here.
        if let Some(e) = self.device.sticky_error() {
            return Err(e);
        }
        crate::core::capture::begin(self, mode)
    }

    /// End the capture this stream began and return the graph (GR1, GR2).
    pub fn end_capture(&self) -> Result<crate::api::graph::Graph> {
        check_not_in_host_fn("end_capture")?;
        crate::core::capture::end(self)
    }

    /// True while this stream takes part in a capture.
    pub fn is_capturing(&self) -> bool {
        self.core.capture().is_some()
    }

    /// The one path every operation takes to the device: capture, tracing, host-access log.
    pub(crate) fn submit(&self, mut op: Op) -> Result<()> {
        if let Some(session) = self.core.capture() {
            return session.add_op(self, op);
        }
        if let Some(r) = self.device.recorder() {
            let waits = std::mem::take(&mut *self.core.pending_waits.lock());
            let (id, slot) = r.op(
                op.kind(),
                op.engine(),
                self.core.id,
                op.bytes(),
                op.name(),
                self.device.now_ns(),
                waits,
            );
            op.trace = slot;
            self.core.last_trace_op.store(id, Ordering::Relaxed);
        }
        // Only copies can touch pinned memory (kernels and memsets take device memory).
        let pinned: Vec<(MemRef, bool)> = match &op.work {
            Work::Copy { .. } => op
                .accesses()
                .into_iter()
                .filter(|(m, _)| m.kind() == MemKind::Pinned)
                .collect(),
            _ => Vec::new(),
        };
        self.core.backend.submit(op)?;
        if !pinned.is_empty() {
            self.log_pinned_access(pinned)?;
        }
        Ok(())
    }

    /// MM3: remember which pinned bytes the just-submitted work touches, with an event that
    /// completes after it.
    pub(crate) fn log_pinned_access(&self, pinned: Vec<(MemRef, bool)>) -> Result<()> {
        let flags = EventFlags {
            timing: false,
            ..Default::default()
        };
        let inner = &self.device.inner;
        let done = inner
            .event_pool
            .take(|| inner.backend.create_event(flags))?;
        self.core.backend.record(&done)?;
        let mut finished = Vec::new();
        for (m, writes) in pinned {
            finished.extend(m.alloc.access.lock().push(m.range(), writes, done.clone()));
        }
        drop(done);
        inner.event_pool.give(finished);
        Ok(())
    }

    pub(crate) fn check_mem(&self, m: &MemRef, call: &str) -> Result<()> {
        if m.alloc.device_id != self.device.id() {
            return Err(Error::InvalidHandle(format!(
                "{call}: buffer belongs to another device than stream {}",
                self.core.id
            )));
        }
        Ok(())
    }

    pub(crate) fn check_same_device(&self, other: &Device, call: &str) -> Result<()> {
        if !self.device.same(other) {
            return Err(Error::InvalidHandle(format!(
                "{call}: object belongs to another device than stream {}",
                self.core.id
            )));
        }
        Ok(())
    }

    fn refuse_if_capturing(&self, what: &str) -> Result<()> {
        if let Some(session) = self.core.capture() {
            return Err(session.invalidate(what));
        }
        Ok(())
    }

    /// GR2: synchronous calls are refused on a capturing stream and, depending on the capture
    /// modes in force, anywhere on the device.
    fn check_sync_call(&self, what: &str) -> Result<()> {
        self.refuse_if_capturing(what)?;
        self.device.inner.captures.check_unsafe_call(what)
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Stream({}, {:?}, priority {})",
            self.core.id, self.core.kind, self.core.priority
        )
    }
}
