//! [`Stream`]: an ordered queue of device work (ST1–ST10). Every call validates its arguments
//! and converts them, then takes core's one path to the device (`core::streams::stream`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::Arc;

use crate::api::device::Device;
use crate::api::event::Event;
use crate::api::kernel::{Kernel, KernelArgs, LaunchConfig};
use crate::api::memory::{DeviceBuffer, PinnedSlice, PinnedSliceMut};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{Op, Work};
use crate::core::streams::event::EventCore;
use crate::core::streams::stream::StreamCore;
use crate::error::{Error, Result};
use crate::types::MemKind;
use crate::types::StreamKind;
use bytemuck::Pod;

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
    auto_order: bool,
    auto_graph: bool,
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

    /// Name shown in traces and sanitizer reports.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Order automatically (AC5): each operation waits for exactly the earlier conflicting
    /// accesses on other streams. See [`Stream::set_auto_order`].
    pub fn auto_order(mut self) -> Self {
        self.auto_order = true;
        self
    }

    /// Automatic graphs (AG1): work this stream repeats between host observations is replayed
    /// as a graph. See [`Stream::set_auto_graph`].
    pub fn auto_graph(mut self) -> Self {
        self.auto_graph = true;
        self
    }

    /// Create the stream.
    pub fn build(self) -> Result<Stream> {
        let props = self.device.properties();
        let (lo, hi) = (props.priority_greatest, props.priority_least);
        let priority = self.priority.clamp(lo.min(hi), lo.max(hi));
        let kind = if self.non_blocking {
            StreamKind::NonBlocking
        } else {
            StreamKind::Blocking
        };
        let dev = &self.device.inner;
        let core = dev.create_stream(kind, priority, self.name)?;
        if self.auto_order {
            core.set_auto(dev, true);
        }
        if self.auto_graph {
            core.set_auto_graph(dev, true)?;
        }
        Ok(Stream {
            device: self.device.clone(),
            core,
        })
    }
}

impl Drop for Stream {
    /// AG4: dropping a stream's last handle issues what automatic graphs hold (ST10: its work
    /// still runs).
    fn drop(&mut self) {
        let ag = &self.device.inner.autograph;
        if ag.engaged() && Arc::strong_count(&self.core) == 1 {
            ag.observe_if_free();
        }
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
            auto_order: false,
            auto_graph: false,
        }
    }

    /// The device's legacy default stream (ST4).
    pub fn legacy(device: &Device) -> Stream {
        device.inner.mark_used(); // DV2: the device's first work may follow.
        Stream {
            device: device.clone(),
            core: device.inner.legacy.clone(),
        }
    }

    /// The calling thread's per-thread default stream on `device` (ST6): a blocking stream of
    /// its own for each host thread.
    pub fn per_thread(device: &Device) -> Result<Stream> {
        let existing = PER_THREAD.with(|m| m.borrow().get(&device.id()).and_then(|w| w.upgrade()));
        let core = match existing {
            Some(c) => c,
            None => {
                let name = format!("per-thread default ({:?})", std::thread::current().id());
                let s = Stream::builder(device).name(name).build()?;
                PER_THREAD.with(|m| {
                    let mut m = m.borrow_mut();
                    m.retain(|_, w| w.strong_count() > 0);
                    m.insert(device.id(), Arc::downgrade(&s.core));
                });
                s.core.clone()
            }
        };
        Ok(Stream {
            device: device.clone(),
            core,
        })
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Stream id (0 is the legacy stream), as traces and sanitizer reports show it.
    pub fn id(&self) -> u64 {
        self.core.id
    }

    /// The name traces and sanitizer reports show.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The priority after clamping (ST7).
    pub fn priority(&self) -> i32 {
        self.core.priority
    }

    /// How the stream takes part in the legacy stream's ordering.
    pub fn kind(&self) -> StreamKind {
        self.core.kind
    }

    /// Automatic ordering (AC5): while on, each new operation on this stream waits for exactly
    /// the earlier accesses on other streams it conflicts with — the last writer of what it
    /// reads, every reader since the last write of what it writes — byte range by byte range,
    /// so chunks of one buffer on several streams stay concurrent. Accesses are recorded
    /// device-wide from the moment any stream turns this on; earlier work is not.
    pub fn set_auto_order(&self, on: bool) {
        self.core.set_auto(&self.device.inner, on);
    }

    /// Automatic graphs (AG1–AG6): while on, a sequence of work that this stream (with the
    /// other streams in the mode, joined by events) repeats between host observations —
    /// synchronizations, queries, host reads — is held back once recognised and runs as one
    /// graph launch, instantiated once and replayed, with changed kernel scalars updated in
    /// place. Results, errors, the sanitizer and automatic ordering are as without the mode;
    /// anything that differs from the recognised sequence runs one by one. Off issues what is
    /// held. Never on for the legacy default stream. See `docs/graphs.md`.
    pub fn set_auto_graph(&self, on: bool) -> Result<()> {
        self.core.set_auto_graph(&self.device.inner, on)
    }

    /// True while this stream is in automatic-graph mode (itself, or its whole device).
    pub fn auto_graph(&self) -> bool {
        self.device.inner.autograph.stream_on(&self.core)
    }

    /// True while this stream orders automatically (itself, or its whole device).
    pub fn auto_order(&self) -> bool {
        self.core.auto() || self.device.auto_order()
    }

    /// True when every operation enqueued before the call has completed (ST8). Never blocks.
    /// A `true` answer synchronizes: later host calls are ordered after that work (AC2).
    pub fn query(&self) -> Result<bool> {
        self.core.query(&self.device.inner)
    }

    /// Block until every operation enqueued before the call has completed (ST9).
    pub fn synchronize(&self) -> Result<()> {
        self.core.synchronize(&self.device.inner)
    }

    /// Make all work enqueued after this call wait for what `event` captured now (EV4). The
    /// event may belong to another device of the same backend (MD2).
    #[track_caller]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if !self.device.same(event.device()) {
            let (mine, theirs) = (
                self.device.properties().backend,
                event.device().properties().backend,
            );
            if mine != theirs {
                return Err(Error::InvalidHandle(format!(
                    "wait_event: an event of the {theirs} backend on a stream of the {mine} \
                     backend"
                )));
            }
            if self.is_capturing() {
                return Err(Error::Unsupported(
                    "a capturing stream waiting on an event of another device".into(),
                ));
            }
        }
        self.core
            .wait(&self.device.inner, &event.inner, Location::caller())
    }

    /// Capture the work enqueued so far in `event` (EV1, EV2).
    pub fn record_event(&self, event: &Event) -> Result<()> {
        self.check_same_device(event.device(), "record_event")?;
        self.core.record(&self.device.inner, &event.inner)
    }

    /// Create a timing event and record it here.
    ///
    /// A new event each call. Under automatic graphs a window that does this each time round
    /// still repeats (a signature names a record by place, not by its event, AG2); a replay
    /// gives its record node each window's new event.
    pub fn record(&self) -> Result<Event> {
        let e = Event::new(&self.device)?;
        self.record_event(&e)?;
        Ok(e)
    }

    /// A future that resolves when every operation enqueued so far has completed (`.await` on
    /// device work). The host does not block; see [`Completion`](crate::api::future::Completion).
    pub fn completion(&self) -> Result<crate::api::future::Completion> {
        self.core.completion(&self.device.inner.core)
    }

    /// Make this stream's later work wait for everything enqueued on `other` so far.
    ///
    /// Through a timing-free event of the device's own, which nothing else sees: joins reuse
    /// such events once they are done with (no event is created per call once the device has
    /// enough), and automatic graphs replay a window of joins without recording them (AG2:
    /// a wait is named by the record it waits for; AG3).
    #[track_caller]
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        other.check_same_device(&self.device, "wait_stream")?;
        let e = EventCore::join(&self.device.inner.core)?;
        other.core.record(&other.device.inner, &e)?;
        self.core.wait(&self.device.inner, &e, Location::caller())
    }

    /// Asynchronous copy from pinned host memory to the device (CP1, CP2). Returns before any
    /// byte moves.
    #[track_caller]
    pub fn copy_h2d<'a, T: Pod>(
        &self,
        dst: &DeviceBuffer<T>,
        src: impl Into<PinnedSlice<'a, T>>,
    ) -> Result<()> {
        let src = src.into();
        self.copy(dst.mem(), src.mem(), "copy_h2d", Location::caller())
    }

    /// Asynchronous copy from the device into pinned host memory (CP1, CP2).
    #[track_caller]
    pub fn copy_d2h<'a, T: Pod>(
        &self,
        dst: impl Into<PinnedSliceMut<'a, T>>,
        src: &DeviceBuffer<T>,
    ) -> Result<()> {
        let dst = dst.into();
        self.copy(dst.mem(), src.mem(), "copy_d2h", Location::caller())
    }

    /// Asynchronous device-to-device copy (CP1).
    #[track_caller]
    pub fn copy_d2d<T: Pod>(&self, dst: &DeviceBuffer<T>, src: &DeviceBuffer<T>) -> Result<()> {
        self.copy(dst.mem(), src.mem(), "copy_d2d", Location::caller())
    }

    /// Asynchronous host-to-host copy between pinned buffers, in stream order (CP1).
    #[track_caller]
    pub fn copy_h2h<'a, 'b, T: Pod>(
        &self,
        dst: impl Into<PinnedSliceMut<'a, T>>,
        src: impl Into<PinnedSlice<'b, T>>,
    ) -> Result<()> {
        let (dst, src) = (dst.into(), src.into());
        self.copy(dst.mem(), src.mem(), "copy_h2h", Location::caller())
    }

    /// Copy between device memory of two devices (MD3), in this stream's order (ST1/ST2): the
    /// stream may belong to either device, or a third one of the same backend. CUDA uses the
    /// direct peer path when the two GPUs can reach each other
    /// ([`Device::can_access_peer`](crate::Device::can_access_peer)) and stages through the
    /// host otherwise. Captured into a graph, such a copy needs the direct path on CUDA: without
    /// it the graph's instantiation is refused as [`Error::Unsupported`].
    #[track_caller]
    pub fn copy_peer<T: Pod>(&self, dst: &DeviceBuffer<T>, src: &DeviceBuffer<T>) -> Result<()> {
        let call = "copy_peer";
        let backend = self.device.properties().backend;
        for (what, b) in [("destination", dst.device()), ("source", src.device())] {
            if b.properties().backend != backend {
                return Err(Error::InvalidHandle(format!(
                    "{call}: the {what} is memory of the {} backend, the stream of the \
                     {backend} backend",
                    b.properties().backend
                )));
            }
        }
        let (dst, src) = (dst.mem(), src.mem());
        self.copy_checked(dst, src, call, Location::caller())
    }

    fn copy(&self, dst: MemRef, src: MemRef, call: &'static str, site: Site) -> Result<()> {
        self.check_mem_named(&dst, call, "destination")?;
        self.check_mem_named(&src, call, "source")?;
        self.copy_checked(dst, src, call, site)
    }

    /// The checks every copy shares (CP4), then the copy.
    fn copy_checked(&self, dst: MemRef, src: MemRef, call: &'static str, site: Site) -> Result<()> {
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
        self.submit(Op::new(Work::Copy { dst, src }), site)
    }

    /// Set every byte of `dst` to `value`, in stream order (CP1).
    #[track_caller]
    pub fn memset<T: Pod>(&self, dst: &DeviceBuffer<T>, value: u8) -> Result<()> {
        let dst = dst.mem();
        self.check_mem(&dst, "memset")?;
        self.submit(Op::new(Work::Memset { dst, value }), Location::caller())
    }

    /// Write `value` into the one element of `dst` with a single atomic 32-bit store, in
    /// stream order (like cuStreamWriteValue32). A flag written this way may be read by kernels
    /// on other streams that access it atomically ([`KernelArgs::atomic`]) while they run:
    /// atomic accesses do not race with each other (AC3). It needs no compute unit (host
    /// backend: no engine at all; CUDA: one 4-byte copy-engine transfer), so it runs even while
    /// every compute unit is busy.
    #[track_caller]
    pub fn write_value(&self, dst: &DeviceBuffer<u32>, value: u32) -> Result<()> {
        let dst = self.value_word(dst, "write_value")?;
        self.core
            .write_value(&self.device.inner, &dst, value, Location::caller())
    }

    /// Read the one element of `src` with a single atomic 32-bit load, in stream order, and
    /// return it. **Blocks** until the read ran, like [`read_pageable`](Self::read_pageable),
    /// but an atomic read does not race with atomic writes on other streams (AC3), so it can
    /// watch a flag that running kernels update.
    #[track_caller]
    pub fn read_value(&self, src: &DeviceBuffer<u32>) -> Result<u32> {
        let src = self.value_word(src, "read_value")?;
        self.core
            .read_value(&self.device.inner, &src, Location::caller())
    }

    fn value_word(&self, buf: &DeviceBuffer<u32>, call: &'static str) -> Result<MemRef> {
        let m = buf.mem();
        self.check_mem(&m, call)?;
        debug_assert_eq!(m.kind(), MemKind::Device);
        if m.len != 4 {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "{call}: needs a one-element view (buffer.slice(i..i + 1)), not {} elements",
                    m.len / 4
                ),
            ));
        }
        Ok(m)
    }

    /// Copy from pageable host memory (a plain slice) to the device. **Blocks** until `src` has
    /// been read, so `src` may be reused at once (CP3); use pinned memory for asynchrony. The
    /// device write itself is ordered by the stream, not by the return (AC3).
    #[track_caller]
    pub fn write_pageable<T: Pod>(&self, dst: &DeviceBuffer<T>, src: &[T]) -> Result<()> {
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
        self.core
            .write_pageable(&self.device.inner, &dst, src, Location::caller())
    }

    /// Copy from the device into pageable host memory. **Blocks** until the data has arrived
    /// (CP3).
    #[track_caller]
    pub fn read_pageable<T: Pod>(&self, dst: &mut [T], src: &DeviceBuffer<T>) -> Result<()> {
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
        self.core
            .read_pageable(&self.device.inner, dst, &src, Location::caller())
    }

    /// Launch `kernel` with `config` and `args` (KN1). Checked at the call: shape, arguments,
    /// buffers on this device, no written buffer overlapping another argument, and no graph's
    /// condition handle unless the stream is capturing (GR9: only a kernel node of its graph
    /// may set a condition).
    #[track_caller]
    pub fn launch(&self, kernel: &Kernel, config: LaunchConfig, args: KernelArgs) -> Result<()> {
        let launch = kernel.launch_record(&self.device, config, args)?;
        if !self.is_capturing() {
            crate::api::kernel::refuse_condition_outside_graph(&launch)?;
        }
        self.submit(Op::new(Work::Launch(launch)), Location::caller())
    }

    /// Run `f` on the host after all earlier work on this stream and before any later work
    /// starts (HF1). `f` must not call cueflow; such calls are refused (HF2). `Fn` because a
    /// captured graph runs it at every launch; [`host_fn_once`](Self::host_fn_once) takes an
    /// `FnOnce`, and [`host_task`](Self::host_task) one that reads and writes pinned buffers
    /// (HF3). A panic inside it poisons the device with [`Error::HostFnFault`].
    #[track_caller]
    pub fn host_fn(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        self.submit(
            Op::new(Work::HostFn(Box::new(
                crate::core::streams::hostfn::stream_call(f, None, std::sync::Arc::new([])),
            ))),
            Location::caller(),
        )
    }

    /// Allocate `len` elements in stream order (MM1): usable by later work on this stream;
    /// other streams must wait on an event recorded after this call first.
    #[track_caller]
    pub fn alloc_async<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "device memory",
                bytes: usize::MAX,
            })?;
        let mem = self
            .core
            .alloc_async(&self.device.inner, bytes, None, Location::caller())?;
        Ok(DeviceBuffer::from_alloc(&self.device, mem.alloc, len))
    }

    /// Free `buf` in stream order (MM1): the memory is released once earlier work on this stream
    /// is done, and never while any operation or other handle still uses it (MM2). For the
    /// sanitizer the free is a write of the whole allocation by this stream.
    ///
    /// `buf` may belong to another device (MD2, as `cudaFreeAsync` takes any stream): its own
    /// device gives it back to its pool once the last operation that uses it is done. Graph
    /// memory (GR10) goes back only on a stream of its own device.
    #[track_caller]
    pub fn free_async<T: Pod>(&self, buf: DeviceBuffer<T>) -> Result<()> {
        let foreign = self.check_same_device(buf.device(), "free_async of graph memory (GR10)");
        // The hold goes after the free was enqueued: its drop would free the memory itself.
        let (alloc, hold) = buf.into_parts();
        if let (Err(e), Some(_)) = (foreign, alloc.graph_slot) {
            return Err(e);
        }
        let r = self
            .core
            .free_async(&self.device.inner, alloc, Location::caller());
        drop(hold);
        r
    }

    /// Hand `op` to core's path.
    pub(crate) fn submit(&self, op: Op, site: Site) -> Result<()> {
        self.core.submit(&self.device.inner, op, site)
    }

    pub(crate) fn check_mem(&self, m: &MemRef, call: &str) -> Result<()> {
        self.check_mem_named(m, call, "buffer")
    }

    /// [`check_mem`](Self::check_mem) for memory the message names `what` (a copy's
    /// source or destination).
    fn check_mem_named(&self, m: &MemRef, call: &str, what: &str) -> Result<()> {
        // Portable host memory serves every device's streams (HM2).
        if !m.alloc.usable_on(self.device.id()) {
            // Pinned memory gets here only from a device without unified addressing.
            let fix = if m.kind().is_host() {
                ": it is pinned memory that is not portable; allocate or register it with \
                 PinnedFlags::default().portable() to use it on every device (HM2)"
            } else {
                ""
            };
            return Err(Error::InvalidHandle(format!(
                "{call}: the {what} belongs to another device than {} of device {}{fix}",
                self.core.label(),
                self.device.inner.describe()
            )));
        }
        Ok(())
    }

    pub(crate) fn check_same_device(&self, other: &Device, call: &str) -> Result<()> {
        if !self.device.same(other) {
            return Err(Error::InvalidHandle(format!(
                "{call}: the object belongs to device {}, not to device {} of {}",
                other.inner.describe(),
                self.device.inner.describe(),
                self.core.label()
            )));
        }
        Ok(())
    }
}

/// Where a call was written.
type Site = &'static Location<'static>;

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Stream({}, {:?}, priority {})",
            self.core.id, self.core.kind, self.core.priority
        )
    }
}
