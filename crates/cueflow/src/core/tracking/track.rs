//! The access-tracking layer of core's path (SPEC AC1–AC6, MM3): one place where every
//! operation's accesses meet the accesses before them.
//!
//! Per device, behind one lock (the *protocol lock*), held from before an operation reaches the
//! backend until its accesses are recorded, so no two operations can miss each other:
//!
//! 1. **Ordering.** A new operation's conflicting pending accesses by other streams become
//!    backend dependencies when the device serializes conflicts (the host backend, AC6) or the
//!    stream orders automatically (AC5). The dependencies are completion signals ([`Done`]) the
//!    backend handed back for the earlier operations, so the wait is for exactly them.
//! 2. **Host access (MM3).** A host view of pinned memory waits for the pending device accesses
//!    it conflicts with.
//! 3. **Happens-before (AC2).** With the sanitizer on, every stream and the host carry a vector
//!    clock. An operation joins the host's clock (it was enqueued after everything the host did
//!    before), legacy and blocking streams join each other's (ST4–ST6), a record snapshots the
//!    stream's clock into the event, a wait joins the snapshot (EV2, EV4), and a host
//!    synchronization that observed completion joins what it observed into the host's clock.
//!    Automatic ordering's inserted waits are happens-before edges too.
//! 4. **Races (AC3, AC4).** A conflicting earlier access that the new access's clock does not
//!    cover is a race: reported with both sides, why, and the fix.
//!
//! What is recorded: with the sanitizer off and no ordering needed, nothing (CUDA's default
//! path for device memory pays one branch); otherwise each access goes into its allocation's
//! [`AccessMap`](crate::core::tracking::access::AccessMap).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::backend::contract::device::Done;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::op::{Op, Work};
use crate::core::streams::ident::StreamIdent;
use crate::core::tracking::access::Rec;
use crate::core::tracking::call::{
    Acc, Accesses, Call, Caller, LaunchPlace, OpInfo, Seen, Site, What, Who,
};
use crate::core::tracking::clock::Actor;
use crate::core::tracking::clock::VClock;
use crate::core::tracking::history::{who, Entered, Shared, State};
use crate::core::tracking::locks::{lock_maps, map_of, Held, Locked, MapIndex};
use crate::core::tracking::report::{race_report, Conflict, Later};
use crate::core::tracking::sanitizer::{Lint, LintKind, RaceReport, SanitizeMode};
use crate::error::{Error, Result};
use crate::types::StreamKind;

/// The tracking state of one device.
pub(crate) struct Tracking {
    /// AC6: conflicting accesses never run at once (the host backend).
    pub(crate) serialize: bool,
    /// AC7: the backend checks read arguments after a kernel when asked (CUDA).
    checks_reads_after: bool,
    mode: AtomicU8,
    /// Device-wide automatic ordering (AC5).
    auto_device: AtomicBool,
    /// Streams with automatic ordering on.
    auto_streams: AtomicUsize,
    /// The sanitizer's state, shared with the device's streams (RL2).
    shared: Arc<Shared>,
    /// Lints a backend reports after the call (AC7 on CUDA).
    late: Arc<crate::core::tracking::read_check::LateLints>,
}

/// `CUEFLOW_AUTO_ORDER=1` turns automatic ordering on for every device the process opens.
fn auto_from_env() -> bool {
    crate::config::auto_order()
}

fn mode_to_u8(m: SanitizeMode) -> u8 {
    match m {
        SanitizeMode::Off => 0,
        SanitizeMode::Warn => 1,
        SanitizeMode::Error => 2,
        SanitizeMode::Panic => 3,
    }
}

impl Tracking {
    pub fn new(serialize: bool, checks_reads_after: bool) -> Result<Tracking> {
        Ok(Tracking {
            serialize,
            checks_reads_after,
            mode: AtomicU8::new(mode_to_u8(SanitizeMode::from_env())),
            auto_device: AtomicBool::new(auto_from_env()),
            auto_streams: AtomicUsize::new(0),
            shared: Arc::default(),
            late: Arc::default(),
        })
    }

    /// The state, with the streams dropped since buried (RL2).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    pub fn mode(&self) -> SanitizeMode {
        match self.mode.load(Ordering::Relaxed) {
            0 => SanitizeMode::Off,
            1 => SanitizeMode::Warn,
            2 => SanitizeMode::Error,
            _ => SanitizeMode::Panic,
        }
    }

    pub fn set_mode(&self, m: SanitizeMode) {
        let _g = self.lock();
        self.mode.store(mode_to_u8(m), Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn clocks(&self) -> bool {
        self.mode.load(Ordering::Relaxed) != 0
    }

    pub fn set_auto_device(&self, on: bool) {
        let _g = self.lock();
        self.auto_device.store(on, Ordering::Relaxed);
    }

    pub fn auto_device(&self) -> bool {
        self.auto_device.load(Ordering::Relaxed)
    }

    /// A stream turned automatic ordering on (`+1`) or off (`-1`).
    pub fn stream_auto_changed(&self, on: bool) {
        let _g = self.lock();
        if on {
            self.auto_streams.fetch_add(1, Ordering::Relaxed);
        } else {
            self.auto_streams.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// True if some stream may order automatically, so every access must be recorded.
    #[inline]
    pub(crate) fn any_auto(&self) -> bool {
        self.auto_device.load(Ordering::Relaxed) || self.auto_streams.load(Ordering::Relaxed) > 0
    }

    /// Remember a new stream (the legacy lint needs the blocking ones); its drop tells this
    /// state (RL2).
    /// Returns the state for the stream to keep, to tell it when it goes.
    pub fn register_stream<S: AsRef<StreamIdent> + Send + Sync + 'static>(
        &self,
        s: &Arc<S>,
    ) -> Weak<Shared> {
        if (**s).as_ref().kind == StreamKind::Blocking {
            let peer: Weak<S> = Arc::downgrade(s);
            let peer: Weak<dyn AsRef<StreamIdent> + Send + Sync> = peer;
            let mut st = self.lock();
            st.blocking.retain(|w| w.strong_count() > 0);
            st.blocking.push(peer);
        }
        Arc::downgrade(&self.shared)
    }

    /// True if a call with `accesses` on `s` needs this layer at all. Cheap: the untracked
    /// path (CUDA's default for device memory, accessless work) pays only this.
    #[inline]
    pub fn wants(&self, s: &StreamIdent, accesses: &Accesses<'_>) -> bool {
        if self.clocks() {
            return true;
        }
        accesses.any()
            && (self.serialize || self.any_auto() || s.auto() || accesses.touches_pinned())
    }

    /// The layer's part of `call` by stream `s` (legacy actor `legacy`), around `submit`, which
    /// hands the call's operation to the backend with the dependencies and whether a completion
    /// signal is wanted:
    ///
    /// 1. lock the maps of the allocations the call touches (and, with the sanitizer, the
    ///    clocks) until the accesses are recorded, so no other call sees the maps in between;
    /// 2. find the conflicting earlier accesses: dependencies for the backend (AC5, AC6),
    ///    happens-before edges (AC5) and races (AC4) — a race refuses the call in error mode
    ///    and panics in panic mode, before anything is enqueued;
    /// 3. `submit`; if it fails nothing is recorded;
    /// 4. record the accesses with the backend's completion signal, advance the clock.
    ///
    /// Returns what a host wait for the call's completion observes (AC2).
    #[inline]
    pub fn run(
        &self,
        by: Caller<'_>,
        call: Call<'_>,
        what: impl FnOnce(Option<&Op>) -> What,
        submit: impl FnOnce(Option<Op>, &[Done], bool) -> Result<Option<Done>>,
    ) -> Result<Seen> {
        self.run_held(by, call, what, None, submit)
    }

    /// [`run`](Self::run) for one member of a group call, whose locks the group took
    /// beforehand ([`lock_group`](Self::lock_group)). Inlined into each stream call's path (its
    /// closures are the caller's).
    #[inline]
    pub fn run_held<'t>(
        &'t self,
        by: Caller<'_>,
        mut call: Call<'_>,
        what: impl FnOnce(Option<&Op>) -> What,
        held: Option<Held<'t>>,
        submit: impl FnOnce(Option<Op>, &[Done], bool) -> Result<Option<Done>>,
    ) -> Result<Seen> {
        let s = by.stream;
        let accesses = call.accesses();
        let has = accesses.any();
        let auto = has && (self.auto_device.load(Ordering::Relaxed) || s.auto());
        // HF3: a host function's views are safe only if no earlier conflicting access still runs.
        let order = has && (self.serialize || auto || accesses.host_views());
        let pinned = has && accesses.touches_pinned();
        let (mut st, maps) = match held {
            Some(h) => (h.state, h.maps),
            None => (self.clocks().then(|| self.lock()), SmallVec::new()),
        };
        let entered = st.as_mut().map(|st| st.enter(s, by.legacy, call.node));
        // Completions are recorded whenever a later call may have to wait for this one: on
        // the host backend (AC6), once any stream orders automatically (AC5), for pinned
        // memory (MM3).
        let want_done = order || pinned || (has && self.any_auto());
        let mut t = Ticket {
            state: None,
            maps,
            index: None,
            accs: SmallVec::new(),
            conflicts: SmallVec::new(),
            deps: SmallVec::new(),
            want_done,
            actor: s.actor,
            who: None,
            what: None,
            site: by.site,
        };
        t.lock(&accesses);
        t.order_after_conflicts(order, st.as_deref_mut().filter(|_| auto), s);
        let (Some(mut st), Some(entered)) = (st, entered) else {
            let done = submit(call.op.take(), &t.deps, t.want_done)?;
            return Ok(t.commit(done));
        };
        place_host_work(&mut st, s, &call);
        let what = what(call.op.as_ref());
        let refusal = self.races(&mut st, by, &call, &t, &what);
        if !matches!(refusal, Ok(None)) {
            // Refused (error mode) or about to panic (panic mode): nothing is enqueued.
            st.undo_enter(s, &entered);
        }
        if let Some(race) = refusal? {
            drop((st, t));
            panic!("{race}");
        }
        t.state = Some(st);
        t.who = Some(who(s));
        t.what = Some(what);
        match submit(call.op.take(), &t.deps, t.want_done) {
            Ok(done) => Ok(t.commit(done)),
            Err(e) => {
                if let Some(st) = t.state.as_mut() {
                    st.undo_enter(s, &entered);
                }
                Err(e)
            }
        }
    }

    /// The sanitizer's part of `call` (clocks held in `st`): the races among the ticket's
    /// conflicts and the stream's lints, reported as the mode says. `Err` refuses the call
    /// (error mode); a race returned is for the caller to panic with once it released the
    /// locks (panic mode).
    fn races(
        &self,
        st: &mut State,
        by: Caller<'_>,
        call: &Call<'_>,
        t: &Ticket<'_>,
        what: &What,
    ) -> Result<Option<RaceReport>> {
        let s = by.stream;
        let mut races = Vec::new();
        if !t.conflicts.is_empty() {
            let vc = st.check_clock(s, by.legacy, call.node);
            let later = who(s);
            for c in &t.conflicts {
                let Some(info) = &c.rec.info else { continue };
                // Actors rule 3: a retired actor's accesses are covered by every check, even
                // one whose clock lost the actor's entries to compaction while the backend
                // still reports the operation running.
                if !info.cell.retired() && !vc.covers(info.actor, info.time) {
                    let alloc = &t.maps[c.acc.map].alloc;
                    let l = Later {
                        who: &later,
                        what,
                        site: by.site,
                        vc: &vc,
                    };
                    races.push(race_report(c, alloc, info, l));
                }
            }
        }
        st.lint_stream_call(s, &call.accesses(), what, by.site);
        self.handle_races(st, races)
    }

    /// The races one call found, by mode (AC4): each kept and printed once per pair of call
    /// sites in warn mode; the first returned as [`Error::Race`] in error mode, or returned for
    /// the caller to panic with once its locks are released in panic mode.
    pub(super) fn handle_races(
        &self,
        st: &mut State,
        mut races: Vec<RaceReport>,
    ) -> Result<Option<RaceReport>> {
        if races.is_empty() {
            return Ok(None);
        }
        let fresh: Vec<RaceReport> = races.iter().filter(|r| st.add_report(r)).cloned().collect();
        match self.mode() {
            SanitizeMode::Error => Err(Error::Race(Box::new(races.swap_remove(0)))),
            SanitizeMode::Panic => Ok(Some(races.swap_remove(0))),
            _ => {
                for r in fresh {
                    eprintln!("{r}");
                }
                Ok(None)
            }
        }
    }

    /// An event record on `s` (sanitizer on): the event's snapshot becomes `s`'s clock (EV1).
    pub fn on_record(&self, s: &StreamIdent, legacy: Actor, slot: &Mutex<Option<Arc<VClock>>>) {
        if !self.clocks() {
            return;
        }
        let mut st = self.lock();
        // A record is never refused: the clock it enters with stays.
        let _kept = st.enter(s, legacy, true);
        *slot.lock() = Some(st.stream(s).vc.clone());
    }

    /// GR3: a launch of an instantiated graph on `s` comes after the graph's previous launch,
    /// on whatever stream that was (the backends order launches of one graph): joins the
    /// snapshot that launch left in `slot` ([`on_record`](Self::on_record) after it).
    ///
    /// Returns the stream's clock before the join, for [`undo_join`](Self::undo_join) when the
    /// launch is refused or fails (`None` with the sanitizer off).
    pub fn join_previous_launch(
        &self,
        s: &StreamIdent,
        legacy: Actor,
        slot: &Mutex<Option<Arc<VClock>>>,
    ) -> Option<Entered> {
        if !self.clocks() {
            return None;
        }
        let mut st = self.lock();
        let before = st.enter(s, legacy, false);
        if let Some(vc) = slot.lock().clone() {
            VClock::join_into(&mut st.stream(s).vc, &vc);
        }
        Some(before)
    }

    /// Undo a [`join_previous_launch`](Self::join_previous_launch) whose launch enqueued
    /// nothing (ER3): the stream is not after the graph's previous launch.
    pub fn undo_join(&self, s: &StreamIdent, before: Option<Entered>) {
        if let Some(before) = before {
            self.lock().undo_enter(s, &before);
        }
    }

    /// A wait on `s` for `event` (EV4): joins the event's snapshot; lints a never-recorded one.
    /// The legacy stream's edges are left to the next operation: a backend enqueues nothing
    /// for a wait on work already done. Inlined into the stream's wait: without clocks it is
    /// one check.
    #[inline]
    pub fn on_wait(
        &self,
        s: &StreamIdent,
        legacy: Actor,
        clock: &Mutex<Option<Arc<VClock>>>,
        event: &dyn BackendEvent,
        site: Site,
    ) {
        if self.clocks() {
            self.join_wait(s, legacy, clock, event, site);
        }
    }

    /// [`on_wait`](Self::on_wait) with clocks.
    fn join_wait(
        &self,
        s: &StreamIdent,
        legacy: Actor,
        clock: &Mutex<Option<Arc<VClock>>>,
        event: &dyn BackendEvent,
        site: Site,
    ) {
        let mut st = self.lock();
        // A wait is never refused: the clock it enters with stays.
        let _kept = st.enter(s, legacy, false);
        if let Some(vc) = clock.lock().clone() {
            let ss = st.stream(s);
            if !ss.last_waited.as_ref().is_some_and(|l| Arc::ptr_eq(l, &vc)) {
                VClock::join_into(&mut ss.vc, &vc);
                ss.last_waited = Some(vc);
            }
        }
        if !event.recorded() {
            let message = format!(
                "{} waits on an event that was never recorded, which orders nothing (EV3); \
                 record it on the stream whose work should come first, before this wait",
                who(s).describe()
            );
            st.lint(LintKind::WaitNeverRecorded, message, site);
        }
    }

    /// What a host synchronization of `s` will have observed once it returns.
    pub fn seen_stream(&self, s: &StreamIdent) -> Seen {
        if !self.clocks() {
            return Seen::none();
        }
        let mut st = self.lock();
        Seen(Some(st.stream(s).vc.clone()))
    }

    /// What a host wait on an event with snapshot `slot` will have observed.
    pub fn seen_event(&self, slot: &Mutex<Option<Arc<VClock>>>) -> Seen {
        if !self.clocks() {
            return Seen::none();
        }
        Seen(slot.lock().clone())
    }

    /// What a device synchronize will have observed: every stream.
    pub fn before_device_sync(&self) -> Seen {
        if !self.clocks() {
            return Seen::none();
        }
        Seen(Some(Arc::new(self.lock().all_streams())))
    }

    /// A host call observed the completion of `seen` (AC2): later host calls come after it.
    pub fn observed(&self, seen: Seen) {
        if let Some(vc) = seen.0 {
            self.lock().observe(&vc);
        }
    }

    /// True if conflicting accesses must never run at once on this device (AC6).
    pub fn serializes(&self) -> bool {
        self.serialize
    }

    /// The races between the nodes of a graph being instantiated (AC4, graph order rule 4),
    /// handled as a stream call's races are: kept and printed once per pair of call sites in
    /// warn mode, the first one returned as [`Error::Race`] in error mode, a panic in panic
    /// mode.
    pub fn graph_races(&self, mut races: Vec<RaceReport>) -> Result<()> {
        if races.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        let fresh: Vec<RaceReport> = races.iter().filter(|r| st.add_report(r)).cloned().collect();
        drop(st);
        match self.mode() {
            SanitizeMode::Error => Err(Error::Race(Box::new(races.swap_remove(0)))),
            SanitizeMode::Panic => panic!("{}", races[0]),
            _ => {
                for r in fresh {
                    eprintln!("{r}");
                }
                Ok(())
            }
        }
    }

    /// Races reported so far (once per pair of call sites).
    pub fn reports(&self) -> Vec<RaceReport> {
        self.lock().reports.clone()
    }

    /// Take the races reported so far, and forget which pairs were seen.
    pub fn take_reports(&self) -> Vec<RaceReport> {
        let mut st = self.lock();
        st.reported.clear();
        std::mem::take(&mut st.reports)
    }

    /// Lints so far.
    pub fn lints(&self) -> Vec<Lint> {
        let mut v = self.lock().lints.clone();
        v.extend(self.late.get());
        v
    }

    /// Take the lints so far.
    pub fn take_lints(&self) -> Vec<Lint> {
        let mut st = self.lock();
        st.linted.clear();
        let mut v = std::mem::take(&mut st.lints);
        v.extend(self.late.take());
        v
    }

    /// With the sanitizer on, ask the backend to check `op`'s read-declared arguments after
    /// the kernel where it cannot stop a write through one (AC7): only a backend that checks
    /// them so, and only for a launch that has such arguments — an op with a check is issued
    /// by itself, never held in an automatic graph (AG5).
    pub fn ask_read_check(&self, op: &mut Op, site: Site) {
        if !(self.checks_reads_after && self.clocks()) {
            return;
        }
        if let Work::Launch(l) = &op.work {
            if l.unaliased_reads().next().is_some() {
                op.set_read_check(Some(crate::core::tracking::read_check::read_check(
                    &self.late, l, site,
                )));
            }
        }
    }
}

/// The layer's part of one call, between its start and the backend's acceptance: holds the
/// maps of the touched allocations locked (and the clocks, with the sanitizer on), so that no
/// other call can see the maps between the check and the record.
struct Ticket<'a> {
    state: Option<MutexGuard<'a, State>>,
    maps: SmallVec<[Locked; 2]>,
    /// `maps`'s index once they are many ([`map_of`]).
    index: MapIndex,
    accs: SmallVec<[Acc; 3]>,
    /// The earlier accesses the call's conflict with, each record once.
    conflicts: SmallVec<[Conflict; 2]>,
    deps: SmallVec<[Done; 2]>,
    want_done: bool,
    actor: Actor,
    who: Option<Who>,
    what: Option<What>,
    site: Site,
}

impl Ticket<'_> {
    /// For the conflicts found: the completions of those still pending become the call's
    /// dependencies where the call is ordered (`order`: AC5, AC6), and with automatic ordering
    /// the inserted wait puts `s` after each (`auto_clocks`: the clocks, when both apply).
    fn order_after_conflicts(
        &mut self,
        order: bool,
        mut auto_clocks: Option<&mut State>,
        s: &StreamIdent,
    ) {
        for c in &self.conflicts {
            if order {
                if let Some(d) = c.rec.done.as_ref().filter(|d| !d.is_done()) {
                    self.deps.push(d.clone());
                }
            }
            // AC5: the inserted wait (or the completion core just saw) orders the two.
            if let (Some(st), Some(info)) = (auto_clocks.as_deref_mut(), &c.rec.info) {
                VClock::join_into(&mut st.stream(s).vc, &info.vc);
            }
        }
    }

    /// Lock the maps of the allocations `accesses` touch (adding to the maps a group locked
    /// beforehand) and find the earlier accesses they conflict with.
    #[inline]
    fn lock(&mut self, accesses: &Accesses<'_>) {
        let t = self;
        accesses.for_each(|m, kind, part| {
            let map = map_of(&mut t.maps, &mut t.index, m);
            t.accs.push(Acc {
                map,
                range: m.range(),
                kind,
                part,
            });
        });
        lock_maps(&mut t.maps);
        for acc in &t.accs {
            let map = t.maps[acc.map].guard.as_ref().expect("locked above");
            map.conflicts(&acc.range, acc.kind, t.actor, |rec, overlap| {
                if !t.conflicts.iter().any(|c| c.rec.id == rec.id) {
                    t.conflicts.push(Conflict {
                        rec: rec.clone(),
                        overlap,
                        acc: acc.clone(),
                    });
                }
            });
        }
    }

    /// The backend accepted the call; `done` is its completion (`None`: not asked for, or the
    /// call completed before returning). Records the accesses, advances the clock, and returns
    /// what a host wait for this call's completion observes: the stream's clock right after it.
    fn commit(&mut self, done: Option<Done>) -> Seen {
        let info = match (self.state.as_mut(), self.who.take(), self.what.take()) {
            (Some(st), Some(who), Some(what)) => {
                let actor = self.actor;
                let ss = st
                    .streams
                    .get_mut(&actor)
                    .expect("begin entered the stream's clock");
                let time = Arc::make_mut(&mut ss.vc).tick(actor);
                Some(Arc::new(OpInfo {
                    actor,
                    cell: ss.cell.clone(),
                    who,
                    vc: ss.vc.clone(),
                    time,
                    site: self.site,
                    what,
                }))
            }
            _ => None,
        };
        let seen = Seen(info.as_ref().map(|i| i.vc.clone()));
        if done.is_none() && info.is_none() {
            return seen;
        }
        let ids = crate::core::tracking::access::rec_ids(self.accs.len());
        for (acc, id) in self.accs.iter().zip(ids) {
            let rec = Rec {
                id,
                actor: self.actor,
                kind: acc.kind,
                part: acc.part,
                range: acc.range.clone(),
                done: done.clone(),
                info: info.clone(),
            };
            let map = self.maps[acc.map].guard.as_mut().expect("locked by begin");
            map.record(acc.range.clone(), &rec);
        }
        seen
    }
}

/// HF1: the place of a host function `call` enqueues, and of a graph launch's host nodes, in
/// `s`'s order, given before the backend may run them; the call's stamp is the stream's next
/// tick.
fn place_host_work(st: &mut State, s: &StreamIdent, call: &Call<'_>) {
    let vc = st.stream(s).vc.clone();
    if let Some(op) = call.op.as_ref() {
        crate::core::streams::hostfn::place(op, &vc, s.actor);
    }
    if let Some(hosts) = call.hosts {
        let stamps = vec![(s.actor, vc.get(s.actor) + 1)];
        hosts(&LaunchPlace {
            before: &vc,
            waited: &[],
            stamps,
        });
    }
}
