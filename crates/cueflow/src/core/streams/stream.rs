//! Streams as core sees them, and the one path every stream-side call takes to the device.
//!
//! Every call — operation, event record, event wait, pageable copy, stream-ordered allocation,
//! query, synchronize — passes the same layers in this order (DESIGN principle 5):
//!
//! 0. the **host-function guard** (HF2);
//! 1. **capture** (GR1, GR2): a capturing stream records the call into its graph, or refuses it
//!    and invalidates the capture; then GR5 for work on the legacy stream — layers 0 and 1 are
//!    [`StreamCore::enter`] (`core/streams/entry.rs`), each call only says what it is there;
//! 2. **tracking** ([`crate::core::tracking::track`]): accesses (AC1), the host-access log (MM3), conflict
//!    ordering on the host backend (AC6), automatic ordering (AC5), happens-before and the race
//!    sanitizer (AC2–AC4);
//! 3. **trace**: the operation is noted with its stream, engine and flow arrows;
//! 4. **backend**: the primitive work is handed over — layers 2 to 4 are `run_tracked`.
//!
//! The public types validate and convert, then call in here; nothing else reaches a backend
//! stream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::backend::contract::device::Done;
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{Op, Part};
use crate::backend::contract::trace::TraceSlot;
use crate::core::devices::device::{DeviceCore, NewStream};
use crate::core::graphs::capture::{
    record_in_capture, wait_in_capture, CaptureSession, CaptureSlot, LaneStream,
};
use crate::core::streams::completion::Completion;
use crate::core::streams::entry::{taken, AtCapture};
use crate::core::streams::event::EventCore;
use crate::core::streams::ident::StreamIdent;
use crate::core::streams::recorder::{Noted, Recorder};
use crate::core::tracking::call::{Accesses, Call, Caller, Seen, Site, What};
use crate::core::tracking::history::Shared;
use crate::error::{Error, Result};
use crate::trace::{Engine, OpKind};
use crate::types::Access;
use crate::types::EventFlags;

/// An op noted in the trace, until the backend took it.
pub(crate) struct Traced {
    recorder: Arc<Recorder>,
    id: u64,
    before: u64,
}

/// Process-unique actor ids for the sanitizer's clocks (0 is the host).
pub(crate) static NEXT_ACTOR: AtomicU64 = AtomicU64::new(1);

/// Core state of a stream, shared by its handles. Its identity ([`StreamIdent`], what the
/// tracking layer sees) is reached through `Deref`.
pub(crate) struct StreamCore {
    ident: StreamIdent,
    /// The capture this stream takes part in, if any (GR1).
    pub capture: Arc<CaptureSlot>,
    /// Trace id of the newest traced op, and trace ids the next op waits on (flow arrows).
    pub(crate) last_trace_op: AtomicU64,
    pub(crate) pending_waits: Mutex<Vec<u64>>,
    /// Id of the recorder that has this stream's name (streams made before tracing started
    /// are named at their first traced call).
    named_in: AtomicU64,
    /// The device's tracking state, told when the stream goes (RL2).
    pub(crate) tracking: OnceLock<Weak<Shared>>,
}

impl std::ops::Deref for StreamCore {
    type Target = StreamIdent;

    #[inline]
    fn deref(&self) -> &StreamIdent {
        &self.ident
    }
}

impl AsRef<StreamIdent> for StreamCore {
    #[inline]
    fn as_ref(&self) -> &StreamIdent {
        &self.ident
    }
}

impl StreamCore {
    /// Stream `n` of the device `device` names (`host:1`, `cuda:0`; reports name it where
    /// streams of several devices meet).
    pub fn new(n: NewStream, device: Arc<str>) -> Self {
        StreamCore {
            ident: StreamIdent {
                id: n.id,
                actor: NEXT_ACTOR.fetch_add(1, Ordering::Relaxed),
                backend: n.backend,
                kind: n.kind,
                priority: n.priority,
                name: n.name.into(),
                device,
                auto: AtomicBool::new(false),
                auto_graph: AtomicBool::new(false),
                tracked: AtomicBool::new(false),
            },
            capture: Arc::default(),
            last_trace_op: AtomicU64::new(0),
            pending_waits: Mutex::new(Vec::new()),
            named_in: AtomicU64::new(0),
            tracking: OnceLock::new(),
        }
    }

    /// `dev`'s recorder while tracing, told this stream's name once.
    #[inline]
    fn recorder(&self, dev: &DeviceCore) -> Option<Arc<Recorder>> {
        let r = dev.recorder()?;
        if self.named_in.swap(r.id, Ordering::Relaxed) != r.id {
            r.name_stream(self.id, self.name.to_string());
        }
        Some(r)
    }

    /// The stream as errors name it (DV3): `stream 3`, or `stream 3 ("upload")` when it has a
    /// label of its own.
    pub fn label(&self) -> String {
        if self.name.as_ref() == format!("stream {}", self.id) {
            format!("stream {}", self.id)
        } else {
            format!("stream {} (\"{}\")", self.id, self.name)
        }
    }

    /// The capture this stream takes part in; one that ended without this stream noticing
    /// (its origin stream was dropped, capture rule 8) is forgotten here.
    pub fn capture(&self) -> Option<Arc<CaptureSession>> {
        crate::core::graphs::capture::current(&self.capture)
    }

    /// This stream as a capture sees it.
    pub fn lane(&self) -> LaneStream<'_> {
        LaneStream {
            id: self.id,
            actor: self.actor,
            kind: self.kind,
            capture: &self.capture,
        }
    }

    /// Turn automatic ordering on or off for this stream.
    pub fn set_auto(&self, dev: &DeviceCore, on: bool) {
        if self.auto.swap(on, Ordering::Relaxed) != on {
            dev.track.stream_auto_changed(on);
        }
    }

    /// Turn automatic graphs on or off for this stream (AG1); off issues what is held.
    pub fn set_auto_graph(&self, dev: &DeviceCore, on: bool) -> Result<()> {
        if on {
            dev.autograph.engage();
        }
        self.auto_graph.store(on, Ordering::Relaxed);
        if on {
            Ok(())
        } else {
            dev.autograph.observe()
        }
    }

    /// Enqueue `op` (ST1, ST3): captured, or tracked, traced and handed to the backend.
    pub fn submit(self: &Arc<Self>, dev: &DeviceCore, op: Op, site: Site) -> Result<()> {
        let mut captured = Some(op);
        let take = |s: &StreamCore| {
            let session = s.capture()?;
            let op = captured.take().expect("taken once");
            Some(session.add_op(s.lane(), op, site))
        };
        let entered = self.enter(
            dev,
            "Stream: enqueue",
            AtCapture::Take(take),
            Some("an operation"),
        );
        if entered?.is_some() {
            return Ok(());
        }
        let mut op = captured.expect("not captured");
        let what = |op: Option<&Op>| What::of(op.expect("a call with an operation"));
        if crate::backend::contract::graph::touches_placeholder(&op) {
            // GR7, GR10: live graph memory only; the completion is a use of it (graph_mem 3).
            let (op, held) = crate::core::graphs::mem::resolve_stream_op(&op)?;
            let (done, _) = self.run_tracked(dev, Call::op(op), what, site, true)?;
            crate::core::graphs::mem::used(&held, done);
            return Ok(());
        }
        if !dev.track.wants(self, &Accesses::Op(&op)) {
            let traced = self.trace_op(dev, &mut op);
            let submitted = if dev.autograph.engaged() {
                dev.autograph.submit(self, op, &[], false, true) // AG2
            } else {
                self.backend.submit(op, &[], false)
            };
            if let Err(e) = submitted {
                self.untrace(traced);
                return Err(e);
            }
            return Ok(());
        }
        self.run_tracked_as(dev, Call::op(op), what, site, Ask::Holdable)?;
        Ok(())
    }

    /// Pass `call` through the tracking layer, trace its operation and hand it to the backend
    /// (past the capture layer); returns the operation's completion (always asked for when
    /// `need_done`) and what waiting for it observes.
    pub(crate) fn run_tracked(
        &self,
        dev: &DeviceCore,
        call: Call<'_>,
        what: impl FnOnce(Option<&Op>) -> What,
        site: Site,
        need_done: bool,
    ) -> Result<(Option<Done>, Seen)> {
        let ask = match need_done {
            true => Ask::Done,
            false => Ask::Plain,
        };
        self.run_tracked_as(dev, call, what, site, ask)
    }

    /// [`run_tracked`](Self::run_tracked) with what the call asks of its completion
    /// ([`Ask`]). A call that needs its completion is synchronous: a host observation (AG4).
    fn run_tracked_as(
        &self,
        dev: &DeviceCore,
        call: Call<'_>,
        what: impl FnOnce(Option<&Op>) -> What,
        site: Site,
        ask: Ask,
    ) -> Result<(Option<Done>, Seen)> {
        let (need_done, holdable) = (ask == Ask::Done, ask == Ask::Holdable);
        let engaged = dev.autograph.engaged();
        if engaged && need_done {
            dev.autograph.observe()?;
        }
        let mut done_out = None;
        let by = Caller {
            stream: self,
            legacy: dev.legacy_actor,
            site,
        };
        let seen = dev.track.run(by, call, what, |op, deps, want| {
            let Some(mut op) = op else {
                return Ok(None);
            };
            dev.track.ask_read_check(&mut op, site);
            let traced = self.trace_op(dev, &mut op);
            let submitted = if engaged {
                let holdable = holdable && !need_done;
                dev.autograph
                    .submit(self, op, deps, want || need_done, holdable)
            } else {
                self.backend.submit(op, deps, want || need_done)
            };
            let done = match submitted {
                Ok(done) => done,
                Err(e) => {
                    self.untrace(traced);
                    return Err(e);
                }
            };
            done_out.clone_from(&done);
            Ok(done)
        })?;
        Ok((done_out, seen))
    }

    /// Note `op` in the trace, if one is recorded; the token takes it back ([`untrace`]) when
    /// the backend refuses the op (ER3: a refused call enqueues nothing, in traces too).
    ///
    /// [`untrace`]: Self::untrace
    #[inline]
    pub(crate) fn trace_op(&self, dev: &DeviceCore, op: &mut Op) -> Option<Traced> {
        match self.recorder(dev) {
            None => None, // The common case: no trace is recorded.
            Some(r) => self.trace_op_in(dev, op, r),
        }
    }

    /// [`trace_op`](Self::trace_op) while `r` records the trace.
    #[inline(never)]
    fn trace_op_in(&self, dev: &DeviceCore, op: &mut Op, r: Arc<Recorder>) -> Option<Traced> {
        let waits = std::mem::take(&mut *self.pending_waits.lock());
        let noted = Noted {
            kind: op.kind(),
            engine: op.engine(),
            bytes: op.bytes(),
            name: op.name(),
            waits_on: waits,
        };
        let (id, slot) = r.op(self.id, dev.now_ns(), noted);
        op.trace = slot;
        r.note_first_call(id, &op.work);
        let before = self.last_trace_op.swap(id, Ordering::Relaxed);
        Some(Traced {
            recorder: r,
            id,
            before,
        })
    }

    /// Take back what [`trace_op`](Self::trace_op) noted for an op the backend refused.
    pub(crate) fn untrace(&self, traced: Option<Traced>) {
        if let Some(t) = traced {
            t.recorder.withdraw(t.id);
            let _ = self.last_trace_op.compare_exchange(
                t.id,
                t.before,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    fn trace_marker(&self, dev: &DeviceCore, kind: OpKind, bytes: u64, name: &str) -> u64 {
        match self.recorder(dev) {
            Some(r) => {
                let noted = Noted {
                    kind,
                    engine: Engine::None,
                    bytes,
                    name: name.into(),
                    waits_on: Vec::new(),
                };
                let (id, _) = r.op(self.id, dev.now_ns(), noted);
                id
            }
            None => 0,
        }
    }

    /// Capture the work enqueued so far in `event` (EV1, EV2).
    pub fn record(self: &Arc<Self>, dev: &DeviceCore, event: &EventCore) -> Result<()> {
        let take = |s: &StreamCore| taken(record_in_capture(s.lane(), &event.captured));
        let entered = self.enter(
            dev,
            "Stream::record_event",
            AtCapture::Take(take),
            Some("an event record"),
        );
        if entered?.is_some() {
            return Ok(());
        }
        self.record_quiet(dev, event)?;
        if dev.recorder().is_some() {
            let last = self.last_trace_op.load(Ordering::Relaxed);
            event.trace_op.store(last, Ordering::Relaxed);
            self.trace_marker(dev, OpKind::EventRecord, 0, "record");
        }
        Ok(())
    }

    /// A record past the capture layer and without a trace marker (graph replays).
    pub fn record_quiet(&self, dev: &DeviceCore, event: &EventCore) -> Result<()> {
        event.clear_capture();
        dev.track.on_record(self, dev.legacy_actor, &event.clock);
        if dev.autograph.engaged() {
            let holdable = dev.recorder().is_none();
            let held = (&event.autograph_held, event.internal);
            return dev.autograph.record(self, &event.backend, held, holdable);
        }
        self.backend.record(&event.backend)
    }

    /// Make later work wait for what `event` captured now (EV4).
    pub fn wait(self: &Arc<Self>, dev: &DeviceCore, event: &EventCore, site: Site) -> Result<()> {
        let take = |s: &StreamCore| taken(wait_in_capture(s.lane(), &event.captured));
        let entered = self.enter(
            dev,
            "Stream::wait_event",
            AtCapture::Take(take),
            Some("an event wait"),
        );
        if entered?.is_some() {
            return Ok(());
        }
        self.wait_quiet(dev, event, site)?;
        if dev.recorder().is_some() {
            let waited = event.trace_op.load(Ordering::Relaxed);
            // The arrow goes to the next real operation (pending_waits), which runs after the
            // waited work; the marker itself only has its enqueue time.
            let id = self.trace_marker(dev, OpKind::EventWait, 0, "wait");
            self.last_trace_op.store(id, Ordering::Relaxed);
            if waited != 0 {
                self.pending_waits.lock().push(waited);
            }
        }
        Ok(())
    }

    /// A wait past the capture layer and without a trace marker (graph replays).
    pub fn wait_quiet(&self, dev: &DeviceCore, event: &EventCore, site: Site) -> Result<()> {
        dev.track
            .on_wait(self, dev.legacy_actor, &event.clock, &*event.backend, site);
        if event.autograph_held.load(Ordering::Acquire)
            && !Arc::ptr_eq(&event.device.autograph, &dev.autograph)
        {
            event.device.autograph.before_other()?; // AG4: a held record of another device.
        }
        if dev.autograph.engaged() {
            let holdable = dev.recorder().is_none();
            return dev.autograph.wait(self, &event.backend, holdable);
        }
        self.backend.wait(&event.backend)
    }

    /// True when every operation enqueued before the call has completed (ST8).
    pub fn query(&self, dev: &DeviceCore) -> Result<bool> {
        let refuse = AtCapture::refuse("query of a capturing stream");
        self.enter(dev, "Stream::query", refuse, None)?;
        dev.autograph.observe()?; // AG4
        let seen = dev.track.seen_stream(self);
        let done = self.backend.query()?;
        if done {
            dev.track.observed(seen); // AC2: a query that answered done synchronizes.
        }
        Ok(done)
    }

    /// Block until every operation enqueued before the call has completed (ST9).
    pub fn synchronize(&self, dev: &DeviceCore) -> Result<()> {
        let refuse = AtCapture::refuse("synchronize of a capturing stream");
        self.enter(dev, "Stream::synchronize", refuse, None)?;
        dev.autograph.observe()?; // AG4
        let seen = dev.track.seen_stream(self);
        self.backend.synchronize()?;
        dev.track.observed(seen);
        Ok(())
    }

    /// A future for everything enqueued so far.
    pub fn completion(&self, dev: &Arc<DeviceCore>) -> Result<Completion> {
        let refuse = AtCapture::refuse("completion of a capturing stream");
        self.enter(dev, "Stream::completion", refuse, None)?;
        dev.autograph.observe()?; // AG4
        let ev = dev.backend.create_event(EventFlags {
            timing: false,
            ..Default::default()
        })?;
        let seen = dev.track.seen_stream(self);
        self.backend.record(&ev)?;
        dev.watcher.watch(ev, self.backend.as_ref(), dev, seen)
    }

    /// MM1: allocate `bytes` in stream order; inside a capture, an allocation node (GR7).
    pub fn alloc_async(
        self: &Arc<Self>,
        dev: &DeviceCore,
        bytes: usize,
        pool: Option<&dyn crate::backend::contract::pool::BackendPool>,
        site: Site,
    ) -> Result<MemRef> {
        let take = |s: &StreamCore| {
            let session = s.capture()?;
            if pool.is_some() {
                return Some(Err(Error::Unsupported(
                    "allocating from an explicit pool inside a capture (only the default pool \
                     makes graph memory nodes here)"
                        .into(),
                )));
            }
            Some(
                session
                    .alloc(s.lane(), bytes, dev.id, site)
                    .map(|a| whole(a, bytes)),
            )
        };
        let legacy = Some("a stream-ordered allocation");
        if let Some(mem) = self.enter(dev, "Stream::alloc_async", AtCapture::Take(take), legacy)? {
            return Ok(mem);
        }
        let alloc = match pool {
            Some(p) => {
                dev.autograph.before_other()?; // AG4
                dev.autograph
                    .or_let_go(|| p.alloc_on(self.backend.as_ref(), bytes))?
            }
            // AG2: the default pool's allocations are calls of a window's signature.
            None if dev.autograph.engaged() => {
                let holdable = dev.recorder().is_none();
                let make = || self.backend.alloc_async(bytes);
                dev.autograph.alloc(self, bytes, holdable, make)?
            }
            None => dev
                .autograph
                .or_let_go(|| self.backend.alloc_async(bytes))?,
        };
        let mem = whole(alloc, bytes);
        // For the sanitizer, the allocation is a write by this stream: another stream must wait
        // for it before using the memory (MM1).
        let call = Call::one(None, &mem, Access::Write, Part::Whole);
        self.run_tracked(dev, call, |_| What::Alloc, site, false)?;
        self.trace_marker(dev, OpKind::Alloc, bytes as u64, OpKind::Alloc.label());
        Ok(mem)
    }

    /// MM1: free `alloc` in stream order; for ordering purposes a write of all of it. Inside
    /// a capture, a free node (GR7).
    pub fn free_async(
        self: &Arc<Self>,
        dev: &DeviceCore,
        alloc: Arc<Allocation>,
        site: Site,
    ) -> Result<()> {
        let take = |s: &StreamCore| Some(s.capture()?.free(s.lane(), &alloc, site));
        let legacy = Some("a stream-ordered free");
        if let Some(()) = self.enter(dev, "Stream::free_async", AtCapture::Take(take), legacy)? {
            return Ok(());
        }
        // AG2: a free of memory the window allocated is a call of its signature, held like
        // the others; any other free issues the held work first (AG4).
        let own = alloc.device_id == dev.id;
        if !own || alloc.graph_slot.is_some() {
            dev.autograph.before_other()?;
        }
        if alloc.graph_slot.is_some() {
            // GR10: memory a launched graph handed out goes back to that graph.
            let real = crate::core::graphs::mem::stream_free(&alloc)?;
            let mem = whole(real.clone(), real.bytes);
            let call = Call::one(None, &mem, Access::Write, Part::Whole);
            self.run_tracked(dev, call, |_| What::Free, site, false)?;
            self.backend.free_graph_memory(&real)?;
            crate::core::graphs::mem::mark_freed(&alloc);
            self.trace_marker(dev, OpKind::Free, real.bytes as u64, OpKind::Free.label());
            return Ok(());
        }
        let bytes = alloc.bytes;
        let mem = whole(alloc.clone(), bytes);
        let call = Call::one(None, &mem, Access::Write, Part::Whole);
        self.run_tracked(dev, call, |_| What::Free, site, false)?;
        drop(mem);
        if own && dev.autograph.engaged() {
            let holdable = dev.recorder().is_none();
            dev.autograph.free(self, alloc, holdable)?;
        } else if own {
            self.backend.free_async(alloc)?;
        } else {
            // MD2: another device's memory. Its own device releases it when the last holder
            // goes (MM2): the operations of every device that use it hold it until they are
            // done, so nothing it is freed under can still run.
            drop(alloc);
        }
        self.trace_marker(dev, OpKind::Free, bytes as u64, OpKind::Free.label());
        Ok(())
    }

    pub(crate) fn trace_graph(&self, dev: &DeviceCore, nodes: usize) -> Option<Arc<TraceSlot>> {
        let r = self.recorder(dev)?;
        let waits = std::mem::take(&mut *self.pending_waits.lock());
        let noted = Noted {
            kind: OpKind::Graph,
            engine: Engine::Compute,
            bytes: 0,
            name: format!("graph ({nodes} nodes)"),
            waits_on: waits,
        };
        let (id, slot) = r.op(self.id, dev.now_ns(), noted);
        self.last_trace_op.store(id, Ordering::Relaxed);
        slot
    }
}

impl Drop for StreamCore {
    /// Capture rule 8: a capture ends with the stream that began it. RL2: the sanitizer's
    /// state of the stream goes with it.
    fn drop(&mut self) {
        if self.tracked.load(Ordering::Acquire) {
            if let Some(t) = self.tracking.get().and_then(Weak::upgrade) {
                t.stream_dropped(self.actor);
            }
        }
        if let Some(session) = self.capture.lock().take() {
            if session.origin_actor == self.actor {
                session.abandon();
            }
        }
    }
}

/// A reference to the first `len` bytes of `alloc`.
pub(crate) fn whole(alloc: Arc<Allocation>, len: usize) -> MemRef {
    MemRef {
        alloc,
        offset: 0,
        len,
    }
}

/// What a tracked call asks of its completion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// The caller needs it (a synchronous call).
    Done,
    /// Only what tracking wants.
    Plain,
    /// Only what tracking wants, and automatic graphs may hold the call (AG2).
    Holdable,
}
