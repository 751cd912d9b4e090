//! What the tracking layer remembers of a device between calls (sanitizer on): each stream's
//! vector clock, the live blocking streams, and the races and lints reported so far, with the
//! lints themselves (AC4's pageable-copy and legacy-stream hints).
//!
//! Nothing here outlives its object (RL2): a dropped stream's state goes at the device's next
//! tracked call ([`Graveyard`]) and its actor is retired or becomes a zombie
//! ([`crate::core::tracking::actors`]); clocks are compacted as they grow (actors rule 6); reports and lints
//! are kept once per call site (pair), which the program's code bounds.

use std::collections::{BTreeMap, HashSet};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};

use crate::core::streams::ident::StreamIdent;
use crate::core::tracking::actors::{self, ActorCell};
use crate::core::tracking::call::{Accesses, Site, What, Who};
use crate::core::tracking::clock::{Actor, VClock};
use crate::core::tracking::sanitizer::{Lint, LintKind, RaceReport};
use crate::trace::OpKind;
use crate::types::StreamKind;

pub(crate) struct StreamState {
    pub(crate) vc: Arc<VClock>,
    /// The stream's place in the live set of actors.
    pub(crate) cell: Arc<ActorCell>,
    pub(crate) kind: StreamKind,
    /// Host clock version last joined.
    pub(crate) host_version: u64,
    /// First pinned copy, for the pageable-copy lint.
    pub(crate) pinned_copy: Option<Site>,
    /// The snapshot joined last by a wait: joining it again changes nothing (clocks only grow).
    pub(crate) last_waited: Option<Arc<VClock>>,
}

/// A stream's clock before a call entered it ([`State::enter`]).
#[must_use = "a refused call puts the stream's clock back (State::undo_enter)"]
pub(crate) struct Entered {
    vc: Arc<VClock>,
    host_version: u64,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) streams: BTreeMap<Actor, StreamState>,
    /// The join of the clocks of the device's dropped streams: their work may still be
    /// pending, and a device synchronize observes it (ST9, ST10) — with everything that work
    /// came after, such as the nodes a graph launch's record nodes cover, whose actor only
    /// the launching stream's clock carries (`crate::core::tracking::track_scope` rule 3). Compacted as
    /// every clock is (actors rule 6): entries of retired actors carry nothing.
    buried: Arc<VClock>,
    /// The same for the dropped blocking streams, which the legacy stream waits for (ST4).
    buried_blocking: Arc<VClock>,
    /// Live blocking streams, for the legacy lint.
    pub(crate) blocking: Vec<Weak<dyn AsRef<StreamIdent> + Send + Sync>>,
    pub(crate) reports: Vec<RaceReport>,
    pub(crate) reported: HashSet<(usize, usize)>,
    pub(crate) lints: Vec<Lint>,
    pub(crate) linted: HashSet<(LintKind, usize)>,
}

/// The host's clock and its version (bumped on every change), one for the process: a host
/// synchronization with one device orders later calls on every device (MD2).
pub(crate) static HOST_CLOCK: std::sync::LazyLock<Mutex<(Arc<VClock>, u64)>> =
    std::sync::LazyLock::new(|| Mutex::new((Arc::new(VClock::EMPTY), 0)));

pub(crate) fn site_key(s: Site) -> usize {
    s as *const Location<'static> as usize
}

impl State {
    pub(crate) fn stream(&mut self, s: &StreamIdent) -> &mut StreamState {
        self.streams.entry(s.actor).or_insert_with(|| {
            s.tracked.store(true, Ordering::Release);
            StreamState {
                vc: Arc::default(),
                cell: ActorCell::new(s.actor),
                kind: s.kind,
                host_version: 0,
                pinned_copy: None,
                last_waited: None,
            }
        })
    }

    /// The stream's clock before its next call: everything the host did before the call
    /// happens before it, and, when the call enqueues work on the stream (`node`: the backend
    /// makes that work wait, ST4–ST6), the legacy stream's edges. A call that enqueues nothing
    /// — a wait on an event already done or never recorded, a stream-ordered allocation or
    /// free — gets no such edge from the backend, so the stream's clock takes none: a host
    /// synchronization of the stream afterwards would otherwise count as observing blocking
    /// streams' work that is still running (see [`check_clock`](Self::check_clock) for its
    /// own accesses).
    ///
    /// Returns the stream's clock as it was, for [`undo_enter`](Self::undo_enter).
    pub(crate) fn enter(&mut self, s: &StreamIdent, legacy_actor: Actor, node: bool) -> Entered {
        let (host, hv) = {
            let h = HOST_CLOCK.lock();
            (h.0.clone(), h.1)
        };
        let edges = if node {
            self.legacy_edges(s, legacy_actor)
        } else {
            Vec::new()
        };
        let st = self.stream(s);
        let before = Entered {
            vc: st.vc.clone(),
            host_version: st.host_version,
        };
        if st.host_version != hv {
            st.host_version = hv;
            VClock::join_into(&mut st.vc, &host);
        }
        for e in edges {
            VClock::join_into(&mut st.vc, &e);
        }
        actors::compact(&mut st.vc);
        before
    }

    /// Put `s`'s clock back as it was before a call [entered](Self::enter) it, when the call
    /// was refused or its backend failed: it enqueued nothing (ER3), so it orders nothing —
    /// neither the legacy stream's edges it would have had (ST4), nor a wait automatic
    /// ordering would have inserted (AC5). A host synchronization of the stream afterwards
    /// must not count as observing that work.
    pub(crate) fn undo_enter(&mut self, s: &StreamIdent, before: &Entered) {
        let st = self.stream(s);
        st.vc = before.vc.clone();
        st.host_version = before.host_version;
    }

    /// The clocks the legacy stream's rules order a call on `s` after (ST4–ST6): the legacy
    /// stream's for a blocking stream; every blocking stream's, live or dropped but not yet
    /// retired, for the legacy stream.
    fn legacy_edges(&self, s: &StreamIdent, legacy_actor: Actor) -> Vec<Arc<VClock>> {
        match s.kind {
            StreamKind::Blocking => self
                .streams
                .get(&legacy_actor)
                .map(|l| l.vc.clone())
                .into_iter()
                .collect(),
            StreamKind::Legacy => {
                let mut v: Vec<Arc<VClock>> = self
                    .streams
                    .values()
                    .filter(|o| o.kind == StreamKind::Blocking)
                    .map(|o| o.vc.clone())
                    .collect();
                if self.buried_blocking.len() > 0 {
                    v.push(self.buried_blocking.clone());
                }
                v
            }
            StreamKind::NonBlocking => Vec::new(),
        }
    }

    /// The clock a call's accesses are checked with: the stream's, and for a call that
    /// enqueues nothing (`!node`), the legacy stream's edges too, as the program's semantics
    /// give them (a stream-ordered free on the legacy stream comes after blocking streams'
    /// work, ST4) without the stream's clock keeping them (see [`enter`](Self::enter)).
    pub(crate) fn check_clock(
        &mut self,
        s: &StreamIdent,
        legacy_actor: Actor,
        node: bool,
    ) -> Arc<VClock> {
        let mut vc = self.stream(s).vc.clone();
        if !node {
            for e in self.legacy_edges(s, legacy_actor) {
                VClock::join_into(&mut vc, &e);
            }
        }
        vc
    }

    pub(crate) fn observe(&mut self, vc: &VClock) {
        let mut h = HOST_CLOCK.lock();
        if !h.0.dominates(vc) {
            Arc::make_mut(&mut h.0).join(vc);
            actors::compact(&mut h.0);
            h.1 += 1;
            // Actors rule 5: zombies the host has now observed retire.
            actors::host_advanced(&h.0);
        }
    }

    /// Forget the stream of `actor`, which was dropped (RL2): its clock joins the buried
    /// ones, and its actor retires at once if the host observed all its work, or becomes a
    /// zombie (actors rules 3–5).
    pub(crate) fn bury(&mut self, actor: Actor) {
        let Some(ss) = self.streams.remove(&actor) else {
            return;
        };
        let last = ss.vc.get(actor);
        let h = HOST_CLOCK.lock();
        actors::died(&ss.cell, last, &h.0);
        drop(h);
        VClock::join_into(&mut self.buried, &ss.vc);
        actors::compact(&mut self.buried);
        if ss.kind == StreamKind::Blocking {
            VClock::join_into(&mut self.buried_blocking, &ss.vc);
            actors::compact(&mut self.buried_blocking);
        }
        drop(ss);
        self.blocking.retain(|w| w.strong_count() > 0);
    }

    /// What a device synchronize observes: every stream's clock, live or dropped.
    pub(crate) fn all_streams(&mut self) -> VClock {
        let mut all = (*self.buried).clone();
        for s in self.streams.values() {
            all.join(&s.vc);
        }
        all
    }

    /// Keep `r` once per pair of call sites; true if it is new.
    pub(crate) fn add_report(&mut self, r: &RaceReport) -> bool {
        let key = (site_key(r.earlier.site), site_key(r.later.site));
        if self.reported.insert(key) {
            self.reports.push(r.clone());
            true
        } else {
            false
        }
    }

    /// Lints of a stream call (sanitizer on): pageable copies beside pinned ones, legacy work
    /// that serializes blocking streams.
    pub(crate) fn lint_stream_call(
        &mut self,
        s: &StreamIdent,
        accesses: &Accesses<'_>,
        what: &What,
        site: Site,
    ) {
        match what {
            What::Op(OpKind::CopyH2D | OpKind::CopyD2H) if accesses.touches_pinned() => {
                let ss = self.stream(s);
                ss.pinned_copy.get_or_insert(site);
            }
            What::Pageable(_) => {
                if let Some(pinned) = self.stream(s).pinned_copy {
                    let message = format!(
                        "pageable copy on {} blocks the host until it is done (CP3), while this \
                         stream's copies elsewhere (as at {pinned}) use pinned memory and run \
                         asynchronously; copy through a PinnedBuffer to keep the overlap",
                        who(s).describe()
                    );
                    self.lint(LintKind::PageableCopy, message, site);
                }
            }
            _ => {}
        }
        if s.kind == StreamKind::Legacy {
            let pending = self
                .blocking
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|b| matches!((**b).as_ref().backend.query(), Ok(false)))
                .map(|b| (*b).as_ref().id)
                .collect::<Vec<_>>();
            if pending.len() >= 2 {
                let message = format!(
                    "work on the legacy default stream while blocking streams {pending:?} have \
                     work pending: it waits for all of them and they all wait for it (ST4), so \
                     they no longer overlap; use a non-blocking stream, or Stream::per_thread"
                );
                self.lint(LintKind::LegacySerializes, message, site);
            }
        }
    }

    pub(crate) fn lint(&mut self, kind: LintKind, message: String, site: Site) {
        if self.linted.insert((kind, site_key(site))) {
            let l = Lint {
                kind,
                message,
                site,
            };
            eprintln!("{l}");
            self.lints.push(l);
        }
    }
}

/// A device's tracking state, shared with its streams so that a dropped stream's state goes
/// with it (RL2).
#[derive(Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Actors of dropped streams not yet buried: a stream's drop may run while the state is
    /// locked (a temporary handle dropped inside the layer), so it only tries the lock and
    /// otherwise leaves its actor here for the next holder.
    dead: Mutex<Vec<Actor>>,
    any_dead: AtomicBool,
}

impl Shared {
    /// The state, with the streams dropped meanwhile buried.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock();
        self.drain(&mut st);
        st
    }

    fn drain(&self, st: &mut State) {
        if !self.any_dead.load(Ordering::Acquire) {
            return;
        }
        let dead = {
            let mut d = self.dead.lock();
            self.any_dead.store(false, Ordering::Release);
            std::mem::take(&mut *d)
        };
        for a in dead {
            st.bury(a);
        }
    }

    /// Stream `actor`, which the state knew, was dropped: bury it now if the state is free,
    /// else at the next lock.
    pub(crate) fn stream_dropped(&self, actor: Actor) {
        self.dead.lock().push(actor);
        self.any_dead.store(true, Ordering::Release);
        if let Some(mut st) = self.state.try_lock() {
            self.drain(&mut st);
        }
    }
}

/// Who makes calls on stream `s`.
pub(crate) fn who(s: &StreamIdent) -> Who {
    Who::stream(s.id, s.name.clone(), s.kind, s.device.clone())
}
