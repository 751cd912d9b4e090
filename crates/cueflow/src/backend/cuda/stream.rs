//! CUDA streams: the legacy default stream is the driver's `CU_STREAM_LEGACY`, so ST4 is the
//! driver's own; blocking streams are `CU_STREAM_DEFAULT` and non-blocking ones
//! `CU_STREAM_NON_BLOCKING` (ST5), created with their clamped priority (ST7). Every submission
//! goes into the stream's keepalive queue ([`super::queue`], rules Q1–Q4), which is what makes
//! MM2 hold and names the faulting kernel (KN2).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{CUstream, CUstream_flags};
use parking_lot::Mutex;

use super::context::{now_or_deferred, restoring};
use super::driver::{self, CuError, St, STREAM_LEGACY};
use super::event::{cuda_event, CudaEvent};
use super::graph::LaunchKeep;
use super::graph_host_reach::op_reaches_host;
use super::host_reach_gate::enqueue_gated;
use super::interop::{Handle, Lent};
use super::launch::{call_external, enqueue, launch_error, prepare};
use super::memory;
use super::queue::{Batch, Keep, Queue, SealAfter, StreamQueue};
use super::shared::DeviceShared;
use crate::backend::contract::device::done_target;
use crate::backend::contract::device::{
    BackendGraph, BackendStream, Done, GraphLaunched, NodesAfter,
};
use crate::backend::contract::event::{BackendEvent, LaterWaits};
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::{Op, Work};
use crate::backend::contract::trace::TraceSlot;
use crate::error::Result;
use crate::types::EventFlags;
use crate::types::{StreamDesc, StreamKind};

mod graph_launch;

crate::backend::contract::downcast::as_any!(CudaStream);

/// A CUDA stream.
pub(crate) struct CudaStream {
    shared: Arc<DeviceShared>,
    q: Arc<StreamQueue>,
    /// The stream as another library holds it (interop).
    lent: Lent,
    /// Enqueues so far ([`BackendStream::enqueued`]): work, waits, stream-ordered memory.
    enqueued: AtomicU64,
    /// The raw handle went out (interop, an adopted stream, a pool allocation): others may
    /// enqueue on it unseen, so [`BackendStream::enqueued`] cannot tell.
    handle_out: AtomicBool,
    /// Waits to enqueue before the stream's next use (contract rule 8).
    later: LaterWaits,
}

impl CudaStream {
    fn wrap(shared: &Arc<DeviceShared>, raw: St, blocking: bool) -> Arc<CudaStream> {
        Self::wrap_with(shared, raw, true, Lent::own(), blocking)
    }

    /// Wrap a stream the caller created and keeps owning (context current, D2); `owner`, if
    /// given, keeps it alive until this wrapper is done with it.
    pub fn adopt(
        shared: &Arc<DeviceShared>,
        raw: CUstream,
        owner: Option<Handle>,
    ) -> Arc<CudaStream> {
        // A stream whose flags cannot be read counts as blocking: ST4 then costs a wait
        // more, never an order less.
        let blocking = !std::ptr::eq(raw, STREAM_LEGACY)
            && driver::stream::is_blocking(St(raw)).unwrap_or(true);
        Self::wrap_with(shared, St(raw), false, Lent::adopted(owner), blocking)
    }

    fn wrap_with(
        shared: &Arc<DeviceShared>,
        raw: St,
        owned: bool,
        lent: Lent,
        blocking: bool,
    ) -> Arc<CudaStream> {
        let q = Arc::new(StreamQueue {
            raw,
            id: StreamQueue::next_id(),
            owned,
            blocking,
            queue: Mutex::new(Queue::default()),
        });
        shared.register(&q);
        Arc::new(CudaStream {
            shared: shared.clone(),
            q,
            lent,
            enqueued: AtomicU64::new(0),
            handle_out: AtomicBool::new(!owned),
            later: LaterWaits::default(),
        })
    }

    /// The device's legacy default stream.
    pub fn legacy(shared: &Arc<DeviceShared>) -> Arc<CudaStream> {
        Self::wrap(shared, St(STREAM_LEGACY), false)
    }

    /// A new blocking or non-blocking stream (context current, D2).
    pub fn create(shared: &Arc<DeviceShared>, desc: StreamDesc) -> Result<Arc<CudaStream>> {
        let flags = match desc.kind {
            StreamKind::NonBlocking => CUstream_flags::CU_STREAM_NON_BLOCKING,
            _ => CUstream_flags::CU_STREAM_DEFAULT,
        };
        // D2: the caller made the context current. The priority is clamped by core (ST7).
        let raw = driver::stream::create(flags, desc.priority).map_err(|e| shared.fail(e, None))?;
        let blocking = flags == CUstream_flags::CU_STREAM_DEFAULT;
        Ok(Self::wrap(shared, raw, blocking))
    }

    fn raw(&self) -> St {
        self.q.raw
    }

    /// Something is enqueued on the stream ([`BackendStream::enqueued`]).
    #[inline]
    fn count_enqueue(&self) {
        self.enqueued.fetch_add(1, Ordering::Relaxed);
    }

    /// Enqueue the waits asked for later (contract rule 8), first thing of every call that
    /// enqueues, queries, synchronizes or gives the handle out. Context current (D2).
    #[inline(always)]
    fn settle_later(&self) -> Result<()> {
        match self.later.pending() {
            false => Ok(()),
            true => self.wait_now(),
        }
    }

    #[cold]
    fn wait_now(&self) -> Result<()> {
        for event in &self.later.take() {
            let ev = cuda_event(event.as_ref())?;
            self.count_enqueue();
            // D1: the stream and the event are live; D2: the caller's.
            driver::stream::wait_event(self.raw(), ev.raw).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    /// Map a failed call, blaming this stream's oldest pending kernel first. No queue lock held.
    fn fail(&self, e: CuError) -> crate::error::Error {
        self.shared.fail(e, Some(&self.q))
    }

    /// Retire items up to `upto` (Q3) and drop them outside the lock.
    fn retire_upto(&self, upto: u64) {
        let mut done: Vec<Batch> = Vec::new();
        self.q.queue.lock().retire_upto(upto, &mut done);
        drop(done);
    }

    /// A timing event for a traced op.
    fn timing_event(&self) -> Result<Arc<CudaEvent>> {
        CudaEvent::create(&self.shared, &self.shared.ctx, EventFlags::default())
    }
}

impl CudaStream {
    /// `CUEFLOW_LAUNCH_BLOCKING` ([`crate::config::launch_blocking`]): wait for everything
    /// just submitted; a sticky failure blames `kernel` (the launch just made) exactly. Context current (D2).
    fn synchronize_launch(&self, kernel: Option<&str>) -> Result<()> {
        let upto = self.q.queue.lock().watermark();
        match driver::stream::synchronize(self.raw()) {
            Ok(()) => {
                self.retire_upto(upto);
                Ok(())
            }
            Err(e) if e.is_sticky() && kernel.is_some() => {
                Err(self.shared.poison(e, Vec::new(), kernel))
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}

/// Make `s` wait for the completions `after` (contract rule 7). Context current (D2).
fn wait_all(s: St, after: &[Done]) -> std::result::Result<(), CuError> {
    for d in after {
        match done_target(d).downcast_ref::<CudaEvent>() {
            // D1: the stream and the borrowed event are live; D2.
            Some(ev) => driver::stream::wait_event(s, ev.raw)?,
            // Another backend's completion (portable pinned memory, HM2): the GPU cannot wait
            // for it, so the host does, before the work is enqueued.
            None => d.wait_here(),
        }
    }
    Ok(())
}

/// Record the end timing event of a traced item and hand both events to its trace slot.
fn record_timing_end(
    slot: &Option<Arc<TraceSlot>>,
    timing: Option<(Arc<CudaEvent>, Arc<CudaEvent>)>,
    s: St,
) -> std::result::Result<(), CuError> {
    if let (Some(slot), Some((start, end))) = (slot, timing) {
        driver::event::record(end.raw, s)?;
        end.set_recorded();
        let (start, end): (Arc<dyn BackendEvent>, Arc<dyn BackendEvent>) = (start, end);
        *slot.events.lock() = Some((start, end));
    }
    Ok(())
}

impl CudaStream {
    /// With `want`, record a completion event after what was just enqueued (contract rule 7),
    /// unless `r` already failed (which it then may).
    fn record_done(
        &self,
        r: &mut std::result::Result<(), CuError>,
        want: bool,
        s: St,
    ) -> Option<Done> {
        if r.is_err() || !want {
            return None;
        }
        match self.shared.done_event() {
            Ok(ev) => {
                *r = driver::event::record(ev.raw, s);
                r.is_ok().then(|| {
                    ev.set_recorded();
                    ev as Done
                })
            }
            Err(e) => {
                *r = Err(e);
                None
            }
        }
    }
}

/// What a submission keeps in the stream's queue once enqueued (Q1).
pub(super) enum Item {
    /// An operation, with its device-wide launch number if it is a kernel.
    Op(Op, Option<u64>),
    /// A graph launch's exec and operations (graph rule G1).
    Graph(LaunchKeep),
}

/// A submission whose stream is locked and waiting for its dependencies, ready for its work to
/// be enqueued ([`CudaStream::begin`]).
pub(super) struct Begun<'a> {
    q: parking_lot::MutexGuard<'a, Queue>,
    /// Batches a boundary seal retired, dropped once the queue is unlocked (Q3; declared after
    /// `q`, so dropping a whole `Begun` unlocks first).
    retired: Vec<Batch>,
    item: Item,
    pub s: St,
    kernel: Option<Arc<super::module::LoadedKernel>>,
    slot: Option<Arc<TraceSlot>>,
    timing: Option<(Arc<CudaEvent>, Arc<CudaEvent>)>,
}

impl Begun<'_> {
    /// The operation being submitted (`None` for a graph launch).
    pub fn op(&self) -> Option<&Op> {
        match &self.item {
            Item::Op(op, _) => Some(op),
            Item::Graph(_) => None,
        }
    }
}

impl CudaStream {
    /// Everything of a submission before its work is enqueued: bind the context, prepare a
    /// kernel, lock the queue, wait for `after`, seal a batch boundary, record the start timing
    /// event. The queue stays locked until [`finish`](Self::finish) or
    /// [`refused`](Self::refused).
    pub(super) fn begin(&self, mut op: Op, after: &[Done]) -> Result<Begun<'_>> {
        self.shared.enter()?;
        self.shared.maintain();
        let kernel = match &op.work {
            Work::Launch(l) => Some(prepare(&self.shared, l)?),
            _ => None,
        };
        let launch_no = kernel.as_ref().map(|_| self.shared.next_launch());
        let slot = op.trace.take();
        self.lock_and_wait(Item::Op(op, launch_no), kernel, slot, after)
    }

    /// [`begin`](Self::begin) from the timing events on, for any item (context current, D2).
    fn lock_and_wait(
        &self,
        item: Item,
        kernel: Option<Arc<super::module::LoadedKernel>>,
        slot: Option<Arc<TraceSlot>>,
        after: &[Done],
    ) -> Result<Begun<'_>> {
        self.settle_later()?;
        let timing = match &slot {
            Some(_) => Some((self.timing_event()?, self.timing_event()?)),
            None => None,
        };
        self.count_enqueue();
        let s = self.raw();
        // Q5 (RL1): room in the queue first, retiring outside the lock (Q3): a full queue is
        // unlocked to drop what it retired, then locked again (one lock on the common path).
        let limit = self.shared.depth.load(std::sync::atomic::Ordering::Relaxed) as u64;
        let mut q = self.lock_queue();
        if q.held() >= limit {
            let mut retired: Vec<Batch> = Vec::new();
            let room = q.make_room(limit, s, &mut retired);
            drop(q);
            drop(retired);
            if let Err(e) = room {
                return Err(self.fail(e));
            }
            q = self.lock_queue();
        }
        let mut retired: Vec<Batch> = Vec::new();
        let r = (|| -> std::result::Result<(), CuError> {
            wait_all(s, after)?;
            if let Item::Op(op, _) = &item {
                if let Work::Launch(l) = &op.work {
                    if q.needs_boundary(&l.kernel) {
                        q.seal(s, &mut retired)?;
                    }
                }
            }
            if let Some((start, _)) = &timing {
                driver::event::record(start.raw, s)?;
                start.set_recorded();
            }
            Ok(())
        })();
        let b = Begun {
            q,
            retired,
            item,
            s,
            kernel,
            slot,
            timing,
        };
        match r {
            Ok(()) => Ok(b),
            Err(e) => Err(self.refused(b, e)),
        }
    }

    /// The queue's lock for a submission, once no call that must find the context idle runs
    /// ([`super::quiesce`]).
    #[inline]
    fn lock_queue(&self) -> parking_lot::MutexGuard<'_, super::queue::Queue> {
        let quiesce = &self.shared.ctx.quiesce;
        loop {
            let q = self.q.queue.lock();
            if !quiesce.must_wait() {
                return q;
            }
            drop(q);
            quiesce.wait_lowered();
        }
    }

    /// The device never saw the item (`e` stopped it before or while enqueueing): drop it and
    /// map the error.
    pub(super) fn refused(&self, b: Begun<'_>, e: CuError) -> crate::error::Error {
        let mut blamed = Vec::new();
        b.q.pending_launches(&mut blamed);
        drop(b.q);
        if let (Item::Op(op, _), false) = (&b.item, e.is_sticky()) {
            if let Work::Launch(l) = &op.work {
                if let Some(err) = launch_error(&e, l) {
                    return err;
                }
            }
        }
        self.shared.fail_blaming(e, blamed)
    }

    /// Everything after the item's work was enqueued (context current, D2): from here on the
    /// item is kept whatever fails (Q1); end timing, completion, sealing when due (always after
    /// a graph launch, a host function or the last reference to some memory, Q2).
    pub(super) fn finish(
        &self,
        b: Begun<'_>,
        call: Option<Box<super::queue::HostFnCall>>,
        want_done: bool,
    ) -> Result<Option<Done>> {
        let Begun {
            mut q,
            retired: mut done,
            item,
            s,
            slot,
            timing,
            ..
        } = b;
        let mut r = record_timing_end(&slot, timing, s);
        let mut when = match item {
            Item::Op(op, launch_no) => q.push_op(op, launch_no),
            Item::Graph(keep) => {
                // Q2: the exec and operations a launch keeps are the GraphExec's too, so the
                // launch seals like an op over its caller's buffers, unless the exec was
                // dropped meanwhile (then it is given back as soon as the device is past it).
                // Sealing after every launch cost ~2.5 us of host time per launch.
                let when = if keep.last_reference() {
                    SealAfter::Now
                } else {
                    SealAfter::Soon
                };
                q.push_graph([keep.handle, keep._ops]);
                when
            }
        };
        if let Some(call) = call {
            q.push(Keep::HostFn(call));
            when = SealAfter::Now;
        }
        let depth = self.shared.depth.load(std::sync::atomic::Ordering::Relaxed);
        if r.is_ok() && q.seal_due(when, depth) {
            r = q
                .seal(s, &mut done)
                .and_then(|()| q.poll_settled(&mut done));
        }
        // After the seal's marker: whoever waits for the completion finds the stream idle
        // once it returns, not still running cueflow's own marker (ST8 right after a
        // synchronous read, which waits for exactly this completion).
        let done_signal = self.record_done(&mut r, want_done, s);
        let mut blamed = Vec::new();
        if r.is_err() {
            q.pending_launches(&mut blamed);
        }
        drop(q);
        super::batch_lists::drop_retired(&mut done);
        r.map_err(|e| self.shared.fail_blaming(e, blamed))?;
        Ok(done_signal)
    }

    /// An external operation: the caller's closure enqueues its work on this stream after
    /// the dependencies, between cueflow's own items, so timing, completion and the keepalive
    /// queue cover it. Whatever the closure returns, the op is kept (it may have enqueued
    /// work that uses its memory, Q1).
    fn submit_external(
        &self,
        op: Op,
        x: &crate::backend::contract::op::ExternalWork,
        after: &[Done],
        want_done: bool,
    ) -> Result<Option<Done>> {
        let b = self.begin(op, after)?;
        let reaches = || b.op().is_some_and(op_reaches_host);
        let called = enqueue_gated(&self.shared, &self.q, reaches, || {
            Ok(call_external(&self.shared, x, b.s))
        });
        let ((r, bound), noted) = match called {
            Ok(called) => called,
            Err(e) => return Err(self.refused(b, e)),
        };
        let done = self.finish(b, None, want_done);
        noted.map_err(|e| self.fail(e))?;
        r?;
        bound?;
        done
    }

    /// The device this stream belongs to.
    pub(super) fn shared(&self) -> &Arc<DeviceShared> {
        &self.shared
    }

    /// Marker events the stream's keepalive queue created so far.
    #[cfg(test)]
    pub(super) fn markers_created(&self) -> u64 {
        self.q.queue.lock().markers_created()
    }
}

impl CudaStream {
    /// The handle goes out: what others enqueue on it must follow the waits asked for later
    /// (contract rule 8). A failure to enqueue them is the device's (the driver's error poisons
    /// it, and the next call reports it); the handle goes out either way.
    fn settle_handed_out(&self) {
        if self.shared.enter().is_ok() {
            let _ = self.settle_later();
        }
    }
}

impl BackendStream for CudaStream {
    fn submit(&self, op: Op, after: &[Done], want_done: bool) -> Result<Option<Done>> {
        if let Work::External(x) = &op.work {
            let x = x.clone();
            return self.submit_external(op, &x, after, want_done);
        }
        if super::legacy_order::copy_skips_st4(&op) {
            super::legacy_order::wait_for_st4_partners(&self.shared, &self.q)
                .map_err(|e| self.fail(e))?;
        }
        let b = self.begin(op, after)?;
        let op = b.op().expect("begun with an op");
        // C7 of `graph_cond.rs`: work reaching host memory, apart from conditional graphs.
        let (call, noted) = match enqueue_gated(
            &self.shared,
            &self.q,
            || op_reaches_host(op),
            || enqueue(b.s, op, b.kernel.as_deref(), &self.shared),
        ) {
            Ok(enqueued) => enqueued,
            Err(e) => return Err(self.refused(b, e)),
        };
        let kernel = match &op.work {
            Work::Launch(l) if crate::config::launch_blocking() => Some(l.kernel.name.clone()),
            _ => None,
        };
        let done = self.finish(b, call, want_done)?;
        noted.map_err(|e| self.fail(e))?;
        if crate::config::launch_blocking() {
            self.synchronize_launch(kernel.as_deref())?;
        }
        Ok(done)
    }

    fn launch_graph(
        &self,
        graph: &Arc<dyn BackendGraph>,
        after: &[Done],
        nodes_after: Vec<NodesAfter>,
        want_done: bool,
        trace: Option<Arc<TraceSlot>>,
    ) -> Result<GraphLaunched> {
        self.launch_exec(graph, after, nodes_after, want_done, trace)
    }

    fn upload_graph(&self, graph: &Arc<dyn BackendGraph>) -> Result<()> {
        self.upload_exec(graph)
    }

    fn record(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        let ev = cuda_event(event.as_ref())?;
        self.shared.enter()?;
        self.settle_later()?;
        driver::event::record(ev.raw, self.raw()).map_err(|e| self.fail(e))?;
        ev.set_recorded();
        Ok(())
    }

    fn wait(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        let ev = cuda_event(event.as_ref())?;
        self.shared.enter()?;
        self.settle_later()?;
        self.count_enqueue();
        // D1: the stream and the borrowed event are live; D2: entered above. EV3: waiting on a
        // never-recorded event is a no-op in the driver.
        driver::stream::wait_event(self.raw(), ev.raw).map_err(|e| self.fail(e))
    }

    fn query(&self) -> Result<bool> {
        self.shared.enter()?;
        self.settle_later()?;
        let upto = self.q.queue.lock().watermark();
        match driver::stream::query(self.raw()) {
            Ok(true) => {
                self.retire_upto(upto);
                // ER2: a host function that panicked poisoned the device, not the stream.
                self.shared.check().map(|()| true)
            }
            Ok(false) => {
                let mut done: Vec<Batch> = Vec::new();
                let r = self.q.queue.lock().poll(&mut done);
                drop(done);
                r.map(|()| false).map_err(|e| self.fail(e))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn synchronize(&self) -> Result<()> {
        self.shared.enter()?;
        self.settle_later()?;
        let upto = {
            let mut q = self.q.queue.lock();
            q.begin_walk();
            q.watermark()
        };
        // Wait batch by batch for those with launches, so that a fault surfaces at the batch
        // (and so the kernel) that caused it, and memory is given back as work completes. The
        // marker is waited on outside the lock: the walk keeps other threads' retirements from
        // recording it again or destroying it meanwhile.
        let walk = (|| loop {
            let next = self.q.queue.lock().next_launch_marker(upto);
            let Some((marker, last)) = next else {
                return Ok(());
            };
            driver::event::synchronize(marker)?;
            self.retire_upto(last);
        })();
        self.q.queue.lock().end_walk();
        walk.map_err(|e| self.fail(e))?;
        driver::stream::synchronize(self.raw()).map_err(|e| self.fail(e))?;
        self.retire_upto(upto);
        super::memory::settle_pool_frees(&self.shared.ctx, self.raw()).map_err(|e| self.fail(e))?;
        super::memory::free_evicted_if_idle(&self.shared.ctx);
        // ER2: a host function that panicked while this call waited poisoned the device
        // without failing the stream (its callback returned normally): report it here too.
        self.shared.check()
    }

    fn alloc_async(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.shared.enter()?;
        self.settle_later()?;
        self.count_enqueue();
        self.shared.maintain();
        let (ctx, id) = (&self.shared.ctx, self.shared.device_id);
        let r = if self.shared.pools {
            memory::alloc_async(ctx, id, bytes, self.raw())
        } else {
            // Without pools, synchronous memory satisfies MM1 trivially.
            memory::alloc_device(ctx, id, bytes)
        };
        r.map_err(|e| self.shared.alloc_error(e, "stream-ordered pool", bytes))
    }

    fn free_async(&self, alloc: Arc<Allocation>) -> Result<()> {
        self.shared.enter()?;
        self.settle_later()?;
        self.count_enqueue();
        memory::free_async(alloc, self.raw());
        Ok(())
    }

    fn free_graph_memory(&self, alloc: &Arc<Allocation>) -> Result<()> {
        self.shared.enter()?;
        self.settle_later()?;
        self.count_enqueue();
        // SAFETY: D1, D2: the address is what a graph's allocation node gave (GR10), live
        // (core checked); freed in this stream's order, as cudaFreeAsync of graph memory is.
        unsafe { driver::memory::free_async(alloc.addr, self.raw()) }
            .map_err(|e| self.shared.fail(e, None))
    }

    fn enqueued(&self) -> Option<u64> {
        (!self.handle_out.load(Ordering::Relaxed)).then(|| self.enqueued.load(Ordering::Relaxed))
    }

    fn raw_handle(&self) -> Option<*mut std::ffi::c_void> {
        self.handle_out.store(true, Ordering::Relaxed);
        self.settle_handed_out();
        Some(self.raw().0 as *mut std::ffi::c_void)
    }

    fn lend(&self, make: &mut dyn FnMut(*mut std::ffi::c_void) -> Handle) -> Option<Handle> {
        self.handle_out.store(true, Ordering::Relaxed);
        self.settle_handed_out();
        self.lent.lend(self.raw(), make)
    }

    fn wait_later(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        cuda_event(event.as_ref())?;
        self.count_enqueue(); // A wait, if a later one ([`BackendStream::enqueued`]).
        self.later.push(event);
        Ok(())
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let (shared, q, lent) = (self.shared.clone(), self.q.clone(), self.lent.take());
        // A stream dropped by the last holder of an operation another device retires (its
        // queue holds the stream) binds its context in that device's calls: bound back after.
        now_or_deferred(move || {
            restoring(|| super::stream_drop::retire_dropped(&shared, &q, lent))
        });
    }
}
