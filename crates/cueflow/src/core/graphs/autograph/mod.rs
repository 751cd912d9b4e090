//! Automatic graphs (SPEC AG1–AG6): a device recognises stream work that repeats between host
//! observations, captures it into a graph once and replays the graph instead of issuing the
//! calls one by one.
//!
//! Where it sits: below the tracking layer and the trace, just above the backend. Every call
//! passes capture, tracking (sanitizer, automatic ordering, host-access log) and trace at its
//! call as without the mode (AG5); only the hand-over to the backend may be held back. The
//! protocol, per device, behind one lock (the window's):
//!
//! 1. **Windows.** The calls between two host observations form a window; its *signature* is
//!    the sequence of its holdable calls' [`Key`](key::Key)s up to the first call that is not
//!    holdable (AG2). At the end of a window (a host observation, AG4) its signature is
//!    remembered: the last [`MAX_SIGNATURES`](window::MAX_SIGNATURES) are.
//! 2. **Holding.** At the start of a window every remembered signature is live. A holdable
//!    call whose key continues some live signature is held; the others drop out. A call that
//!    continues none, or is not holdable, first issues everything held, in enqueue order, then
//!    goes to the backend itself, and nothing more is held in that window.
//! 3. **Replay.** When the held calls make up a whole live signature they run as its graph
//!    (`replay`): instantiated the first time, its kernel scalars and recorded events updated
//!    in place where they changed (GR6: a signature names events by place, `key`), launched on the window's first stream after the other streams' earlier
//!    work, which then wait for the launch, lazily (AG3). A long window runs in parts, each
//!    its own graph, as the held calls reach a part's end (`parts`). A replay's calls stay in
//!    the window until later calls are held at their places (`Window::hold`), which keeps the
//!    allocator's frees in step with the next window's allocations.
//! 4. **Completions.** The tracking layer may ask a held call for its completion: it gets a
//!    [`Deferred`](deferred::Deferred) one, filled in with the backend's own when the call is
//!    issued (alone, or as the graph launch). Within the window such completions are graph
//!    dependencies; anything that would hand one to the backend or wait for it issues the held
//!    work first ([`AutoGraph::before_other`], [`deferred::issued`]), and a backend follows a
//!    filled one to its own signal (`done_target`).
//! 5. **Cost when off.** A device never put in the mode pays one relaxed load per call
//!    ([`AutoGraph::engaged`]); everything else is behind it.
//! 6. **Cold devices.** A device whose recorded windows keep bringing new signatures stops
//!    recording (`cold`): its calls go to the backend as they come, and every 16th window is
//!    recorded again, so work that starts repeating is still found (AG2).
//! 7. **Temporaries.** A stream-ordered allocation of the device's pool is made at its call
//!    and is a place of the signature; memory it made is named by that place (`key`), and its
//!    held free keeps the memory with the template after the replay (`Template::spare`), for
//!    the next window's allocation at that place once nothing else holds it (AG6). Nodes over
//!    such memory get the window's own before each launch and let go of it after (`replay`).

mod cold;
mod deferred;
mod entry;
mod key;
mod parts;
mod plan;
mod replay;
mod window;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use smallvec::SmallVec;

pub(crate) use deferred::issued;
use deferred::{Deferred, Settle};
use entry::{Counters, Ctx, Entry, EntryWork, Lane};
use key::Call;
use window::{Admit, Window};

use crate::backend::contract::device::{Backend, Done};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::Op;
use crate::core::streams::ident::StreamIdent;
use crate::error::{Error, Result};
use crate::types::StreamKind;

/// What automatic graphs did on a device so far ([`Device::auto_graph_stats`]).
///
/// [`Device::auto_graph_stats`]: crate::Device::auto_graph_stats
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoGraphStats {
    /// Graphs instantiated from recognised windows.
    pub graphs: u64,
    /// Graph launches that replaced a window's calls.
    pub replays: u64,
    /// Operations (launches, copies, memsets) run by those launches.
    pub replayed_ops: u64,
    /// Held operations that were issued one by one after all (AG4).
    pub issued_one_by_one: u64,
    /// Kernel nodes whose scalar arguments were updated before a replay (AG3).
    pub scalar_updates: u64,
    /// Operation nodes given memory the window allocated anew before a replay (a stream-ordered
    /// temporary allocated and freed in each window, named by place, AG2).
    pub memory_updates: u64,
    /// Event record nodes given the window's own event before a replay: the window repeated
    /// the signature with new events (AG2 names events by place).
    pub event_updates: u64,
    /// Backend stream calls those replays made: each graph launch, and the event records
    /// and waits that order a window's other streams around it (AG3). A replay of a window
    /// over one stream, or over non-blocking streams with nothing enqueued since the last
    /// replay, makes the launch only: the graph records its join, and the other streams wait
    /// for it only once they are used (their wait is not counted here).
    pub replay_stream_calls: u64,
    /// Windows a cold device issued as they came, unrecorded: its windows had stopped
    /// repeating (AG2).
    pub cold_windows: u64,
    /// Stream-ordered allocations of a window served by the memory the last replay's free
    /// gave back at the same place, with no call to the backend (AG6).
    pub memory_reused: u64,
    /// Times an allocation that found the device out of memory made the mode let go of the
    /// memory it kept (the freed memory above and its graphs), then tried once more (AG6).
    pub memory_let_go: u64,
}

/// `CUEFLOW_AUTO_GRAPH=1` turns the mode on for every device the process opens (AG1).
fn from_env() -> bool {
    crate::config::auto_graph()
}

/// One device's automatic-graph state.
pub(crate) struct AutoGraph {
    me: Weak<AutoGraph>,
    backend: Arc<dyn Backend>,
    /// Set once the mode was ever turned on for the device or one of its streams (rule 5).
    engaged: AtomicBool,
    device_on: AtomicBool,
    /// A window is open: a signature is being recorded (rule 1).
    busy: AtomicBool,
    /// The window's signature is still being recorded (not sealed by a call that is never
    /// held): such a call must seal it (rule 2).
    recording: AtomicBool,
    /// The device is cold: calls go to the backend unrecorded (AG2, `cold`).
    cold: AtomicBool,
    /// A call passed through a cold device since the last host observation.
    cold_calls: AtomicBool,
    window: Mutex<Window>,
    stats: Counters,
}

impl AutoGraph {
    pub fn new(backend: Arc<dyn Backend>) -> Arc<AutoGraph> {
        let on = from_env();
        Arc::new_cyclic(|me| AutoGraph {
            me: me.clone(),
            backend,
            engaged: AtomicBool::new(on),
            device_on: AtomicBool::new(on),
            busy: AtomicBool::new(false),
            recording: AtomicBool::new(false),
            cold: AtomicBool::new(false),
            cold_calls: AtomicBool::new(false),
            window: Mutex::new(Window::default()),
            stats: Counters::default(),
        })
    }

    /// What the window's operations use.
    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            backend: &self.backend,
            busy: &self.busy,
            recording: &self.recording,
            cold: &self.cold,
            stats: &self.stats,
        }
    }

    /// True once the mode was ever on for the device or one of its streams (rule 5).
    #[inline]
    pub fn engaged(&self) -> bool {
        self.engaged.load(Ordering::Relaxed)
    }

    /// A stream turned the mode on (AG1).
    pub fn engage(&self) {
        self.engaged.store(true, Ordering::Relaxed);
    }

    /// Turn the mode on or off for every stream of the device (AG1); off issues what is held
    /// and lets the graphs go (AG6).
    pub fn set_device(&self, on: bool) -> Result<()> {
        if on {
            self.engage();
            self.device_on.store(true, Ordering::Relaxed);
            return Ok(());
        }
        self.device_on.store(false, Ordering::Relaxed);
        let mut w = self.window.lock();
        let r = self.ctx().end_window(&mut w);
        w.templates.clear();
        w.entries.clear();
        w.backoff = Default::default();
        self.cold.store(false, Ordering::Release);
        r
    }

    pub fn device_on(&self) -> bool {
        self.device_on.load(Ordering::Relaxed)
    }

    /// True if `s` is in the mode (AG1).
    pub fn stream_on(&self, s: &StreamIdent) -> bool {
        s.kind != StreamKind::Legacy && (s.auto_graph() || self.device_on())
    }

    /// True if a call on `s` may be held or recorded: `s` is in the mode and the device is
    /// not cold (AG2); a call that passes a cold device marks its window.
    #[inline]
    fn records(&self, s: &StreamIdent) -> bool {
        if !self.stream_on(s) {
            return false;
        }
        if self.cold.load(Ordering::Acquire) {
            // Written once a window, not per call: threads calling at once share the line.
            if !self.cold_calls.load(Ordering::Relaxed) {
                self.cold_calls.store(true, Ordering::Relaxed);
            }
            return false;
        }
        true
    }

    /// AG4: a call that is not held is about to reach the backend; held work goes first.
    #[inline]
    pub fn before_other(&self) -> Result<()> {
        if self.recording.load(Ordering::Acquire) {
            let mut w = self.window.lock();
            return self.ctx().seal(&mut w);
        }
        Ok(())
    }

    /// AG4: a host observation: held work goes, the window ends.
    #[inline]
    pub fn observe(&self) -> Result<()> {
        if self.busy.load(Ordering::Acquire) {
            let mut w = self.window.lock();
            return self.ctx().end_window(&mut w);
        }
        if self.cold_calls.load(Ordering::Relaxed) {
            let mut w = self.window.lock();
            self.cold_window_ended(&mut w);
        }
        Ok(())
    }

    /// A window of a cold device ended (once, whichever observation ends it).
    fn cold_window_ended(&self, w: &mut Window) {
        if self.cold_calls.swap(false, Ordering::Relaxed) {
            window::age(&mut w.templates, None); // AG6, as if it had been recorded.
            self.stats.cold_windows.fetch_add(1, Ordering::Relaxed);
            if w.backoff.passed() {
                self.cold.store(false, Ordering::Release); // The next window is recorded.
            }
        }
    }

    /// [`observe`](Self::observe) where waiting for the window's lock could deadlock (a
    /// stream dropped on a thread that runs device work): skipped when the lock is taken; its
    /// holder issues the held work.
    pub fn observe_if_free(&self) {
        let in_host_fn = crate::core::streams::hostfn::check_not_in_host_fn("drop").is_err();
        let open = self.busy.load(Ordering::Acquire) || self.cold_calls.load(Ordering::Relaxed);
        if open && !in_host_fn {
            if let Some(mut w) = self.window.try_lock() {
                if self.busy.load(Ordering::Acquire) {
                    let _ = self.ctx().end_window(&mut w);
                } else {
                    self.cold_window_ended(&mut w);
                }
            }
        }
    }

    /// Hand `op` on `s` to the backend after `deps` (with its completion when `want`), or hold
    /// it (rule 2); `holdable` is false for calls that must reach the backend now (synchronous
    /// calls, traced ones).
    pub fn submit(
        &self,
        s: &StreamIdent,
        op: Op,
        deps: &[Done],
        want: bool,
        holdable: bool,
    ) -> Result<Option<Done>> {
        if !(holdable && op.trace.is_none() && op.read_check().is_none() && self.records(s)) {
            self.before_other()?;
            return s.backend.submit(op, deps, want);
        }
        let mut w = self.window.lock();
        if let Some(e) = self.backend.sticky_error() {
            return Err(e); // ER2, as the backend would answer (AG5).
        }
        let call = Call::Op {
            actor: s.actor,
            op: &op,
        };
        if let Admit::Hold(pos) = self.ctx().admit(&mut w, &call)? {
            // Held calls it depends on, by their place among the held calls (the window's
            // part). A call admitted to be held issued nothing before it, so which of its
            // dependencies are held is what it was at the call.
            let mut inner: SmallVec<[usize; 2]> = SmallVec::new();
            let mut after = Vec::new();
            for d in deps {
                match deferred::held(d) {
                    Some(h) if !h.filled() && h.gen == w.gen => inner.push(h.entry),
                    _ => after.push(d.clone()),
                }
            }
            let done = want.then(|| {
                let me = self.me.clone() as Weak<dyn Settle>;
                Deferred::new(me, w.gen, w.held)
            });
            let work = EntryWork::Op {
                op,
                after,
                inner,
                done: done.clone(),
            };
            self.hold(&mut w, s, work);
            self.ctx().complete(&mut w, pos)?;
            return Ok(done.map(|d| d as Done));
        }
        s.backend.submit(op, deps, want)
    }

    /// Record `event` on `s` now, or hold the record (rule 2). `held`: the event's held-record
    /// flag, and whether the event is a join's own (`EventCore::internal`).
    pub fn record(
        &self,
        s: &StreamIdent,
        event: &Arc<dyn BackendEvent>,
        (held, internal): (&Arc<AtomicBool>, bool),
        holdable: bool,
    ) -> Result<()> {
        if !(holdable && self.records(s)) {
            self.before_other()?;
            return s.backend.record(event);
        }
        let mut w = self.window.lock();
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        let call = Call::Record {
            actor: s.actor,
            event,
            internal,
        };
        let place = w.len;
        let admitted = self.ctx().admit(&mut w, &call)?;
        if w.len > place {
            w.note_record(event, place); // A call of the signature.
        }
        if let Admit::Hold(pos) = admitted {
            held.store(true, Ordering::Release);
            w.events.push(held.clone());
            let work = EntryWork::Record {
                event: event.clone(),
                internal,
            };
            self.hold(&mut w, s, work);
            return self.ctx().complete(&mut w, pos);
        }
        s.backend.record(event)
    }

    /// Make `s` wait for `event` now, or hold the wait when the event's record is held in this
    /// window (rule 2); a wait on an event recorded by an issued call of the signature is part
    /// of it, issued now; a wait on any other event is not holdable.
    pub fn wait(
        &self,
        s: &StreamIdent,
        event: &Arc<dyn BackendEvent>,
        holdable: bool,
    ) -> Result<()> {
        if !(holdable && self.records(s)) {
            self.before_other()?;
            return s.backend.wait(event);
        }
        let mut w = self.window.lock();
        let place = w.record_place(event);
        match (w.held_record(event), place) {
            (Some(record), Some(place)) => {
                let call = Call::Wait {
                    actor: s.actor,
                    record: place,
                };
                if let Admit::Hold(pos) = self.ctx().admit(&mut w, &call)? {
                    let work = EntryWork::Wait {
                        event: event.clone(),
                        record,
                    };
                    self.hold(&mut w, s, work);
                    return self.ctx().complete(&mut w, pos);
                }
            }
            // Recorded by an issued call of the signature (the window records it): part of
            // the signature, issued now.
            (None, Some(place)) if !w.sealed => {
                let call = Call::Wait {
                    actor: s.actor,
                    record: place,
                };
                self.ctx().admit(&mut w, &call)?;
            }
            _ => self.ctx().seal(&mut w)?,
        }
        s.backend.wait(event)
    }

    /// A stream-ordered allocation on `s` (MM1) from the device's pool, made by `make` now:
    /// later calls use its memory, and the held calls before it do not. Part of the
    /// window's signature (AG2): the memory is named by the place of this call, so a window
    /// that allocates its temporaries anew each time repeats.
    pub fn alloc(
        &self,
        s: &StreamIdent,
        bytes: usize,
        holdable: bool,
        make: impl Fn() -> Result<Arc<Allocation>>,
    ) -> Result<Arc<Allocation>> {
        if !(holdable && self.records(s)) {
            self.before_other()?;
            return self.or_let_go(make);
        }
        let mut w = self.window.lock();
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        let call = Call::Alloc {
            actor: s.actor,
            bytes,
        };
        let place = w.len;
        let admitted = self.ctx().admit(&mut w, &call)?;
        let spare = match admitted {
            Admit::Hold(pos) => w.take_spare(pos),
            Admit::Issue => None,
        };
        if spare.is_some() {
            self.stats.reused.fetch_add(1, Ordering::Relaxed);
        }
        let made = match spare.map_or_else(&make, Ok) {
            // AG6: the memory the mode keeps goes (what is held is issued), then once more,
            // whatever went now: another thread's let-go may have given back what it kept.
            Err(Error::OutOfMemory { .. }) => {
                self.ctx().let_go_of_memory(&mut w)?;
                make()
            }
            made => made,
        };
        let alloc = match made {
            Ok(alloc) => alloc,
            Err(e) => {
                // Nothing was allocated: what is held goes, and nothing more is held (the
                // window counted this call; a let-go that found nothing kept sealed nothing).
                self.ctx().seal(&mut w)?;
                return Err(e);
            }
        };
        if w.len > place {
            w.note_alloc(&alloc, place); // A call of the signature.
        }
        if let (Admit::Hold(pos), false) = (admitted, w.sealed) {
            self.hold(&mut w, s, EntryWork::Alloc);
            self.ctx().complete(&mut w, pos)?;
        }
        Ok(alloc)
    }

    /// `alloc`, and once more after the mode let go of the memory it keeps if the device
    /// was out of memory (AG6): an allocation the program makes fails only where it would
    /// without the mode.
    ///
    /// The allocation is tried again whether or not this call let go of anything: a thread
    /// that failed at the same time as another may find the memory the other's let-go gave
    /// back.
    pub fn or_let_go<T>(&self, alloc: impl Fn() -> Result<T>) -> Result<T> {
        match alloc() {
            Err(Error::OutOfMemory { .. }) if self.engaged() => {
                let mut w = self.window.lock();
                self.ctx().let_go_of_memory(&mut w)?;
                drop(w);
                alloc()
            }
            r => r,
        }
    }

    /// A stream-ordered free of `alloc` on `s` (MM1): held when a call of the window made it
    /// (issued after the launch that runs the calls before it), otherwise a call that is
    /// never held (AG4).
    pub fn free(&self, s: &StreamIdent, alloc: Arc<Allocation>, holdable: bool) -> Result<()> {
        if !(holdable && self.records(s)) {
            self.before_other()?;
            return s.backend.free_async(alloc);
        }
        let mut w = self.window.lock();
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        let Some(place) = w.alloc_place(&alloc) else {
            self.ctx().seal(&mut w)?;
            drop(w);
            return s.backend.free_async(alloc);
        };
        let call = Call::Free {
            actor: s.actor,
            alloc: place,
        };
        if let Admit::Hold(pos) = self.ctx().admit(&mut w, &call)? {
            let work = EntryWork::Free {
                alloc: Some(alloc),
                place,
            };
            self.hold(&mut w, s, work);
            return self.ctx().complete(&mut w, pos);
        }
        drop(w);
        s.backend.free_async(alloc)
    }

    fn hold(&self, w: &mut Window, s: &StreamIdent, work: EntryWork) {
        let lane = match w.lanes.iter().position(|l| l.actor == s.actor) {
            Some(lane) => lane,
            None => {
                w.lanes.push(Lane {
                    actor: s.actor,
                    stream: s.backend.clone(),
                    blocking: s.kind == StreamKind::Blocking,
                });
                w.lanes.len() - 1
            }
        };
        w.hold(Entry {
            lane,
            stream_id: s.id,
            work,
        });
    }

    /// What the mode did so far.
    pub fn stats(&self) -> AutoGraphStats {
        let c = &self.stats;
        AutoGraphStats {
            graphs: c.graphs.load(Ordering::Relaxed),
            replays: c.replays.load(Ordering::Relaxed),
            replayed_ops: c.replayed_calls.load(Ordering::Relaxed),
            issued_one_by_one: c.one_by_one.load(Ordering::Relaxed),
            scalar_updates: c.updates.load(Ordering::Relaxed),
            memory_updates: c.memory_updates.load(Ordering::Relaxed),
            event_updates: c.event_updates.load(Ordering::Relaxed),
            replay_stream_calls: c.stream_calls.load(Ordering::Relaxed),
            cold_windows: c.cold_windows.load(Ordering::Relaxed),
            memory_reused: c.reused.load(Ordering::Relaxed),
            memory_let_go: c.let_go.load(Ordering::Relaxed),
        }
    }
}

impl Settle for AutoGraph {
    fn settle(&self) -> Result<()> {
        self.observe()
    }
}
