//! One device's window (SPEC AG2, AG4): the calls held back, the signature so far, the
//! remembered signatures with their graphs, and what ends a window.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use super::cold::Backoff;
use super::entry::{Ctx, Entry, EntryWork, Lane};
use super::key::{alloc_addr, ByAddress, Call, Keys, Places};
use super::parts;
use super::replay::Replay;
use crate::backend::contract::device::Done;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::memory::Allocation;
use crate::error::Result;

/// Signatures a device remembers (AG2).
pub(super) const MAX_SIGNATURES: usize = 4;
/// Calls of one signature at most (AG2); a longer window holds nothing past them.
pub(super) const MAX_CALLS: usize = 4096;
/// Replayed calls dropped right after their graph's launch, at most (`Window::replayed`).
const DROP_AFTER_LAUNCH: usize = 64;

/// A remembered signature and its graphs.
pub(super) struct Template {
    pub keys: Keys,
    /// The graph of each part a window ran, by its calls `start..end` (the whole template
    /// `0..keys.len()` for a window that runs in one).
    pub parts: Vec<(usize, usize, Replay)>,
    /// Where a window repeating it may run the calls held so far as a part (`parts.rs`).
    pub cuts: Vec<usize>,
    /// Instantiation or launch failed once: never tried again (AG5).
    pub failed: bool,
    /// Windows ended since it last matched (AG6).
    pub misses: u32,
    /// Memory the frees of its last replay gave back, by the place of the allocation that
    /// made it: the next window's allocation at that place takes it where nothing else holds
    /// it any more (its launches done, no handle left), with no call to the backend (AG6).
    pub spare: Vec<(usize, Arc<Allocation>)>,
}

#[derive(Default)]
pub(super) struct Window {
    /// Generation: held completions of this window carry it.
    pub gen: u64,
    /// The held calls, the first [`held`](Self::held); after them the calls the last replay
    /// ran, each dropped when a call is held at its place. A replay's calls go one at a time
    /// so, not all at once: the allocator then hands a freed call's memory to the next call
    /// (a window of a thousand launches freed at once cost ~500 instructions a call more).
    /// A short part's calls go right after its launch instead (`replayed`).
    pub entries: Vec<Entry>,
    pub held: usize,
    /// Some held call depends on another held call (`EntryWork::Op::inner`): a replay then
    /// compares those dependencies with its graph's edges.
    pub inner_held: bool,
    /// The streams of the held calls, in order of their first held call.
    pub lanes: SmallVec<[Lane; 4]>,
    /// Calls of the window's signature so far.
    pub len: usize,
    /// The window's place of the first held call (after the parts that ran).
    pub part_start: usize,
    /// The signature's keys, built only once the window stops repeating a remembered one:
    /// while it repeats `source`, they are that template's first `len` (the fast path, no key
    /// is built); then empty.
    pub keys: Keys,
    /// Memory for the next signature's keys: an evicted template's, or those of a window that
    /// repeated a remembered signature.
    pub spare: Keys,
    /// A template whose first `len` keys are the window's, while `keys` is empty.
    pub source: Option<usize>,
    /// Templates the window still matches.
    pub live: SmallVec<[usize; 4]>,
    /// No held call before this place of the window can complete a template it repeats or
    /// end a part ([`Ctx::complete`] looks no further until then): the shortest live
    /// template's end or the next part end, whichever comes first. Live templates only drop
    /// out during a window, so a place computed before they did is never too late.
    pub stop: usize,
    /// True while calls are held (the window matches some template so far).
    pub holding: bool,
    /// True once a call that is never held came: the signature ends there.
    pub sealed: bool,
    /// The template replayed in this window.
    pub launched: Option<usize>,
    pub templates: Vec<Template>,
    /// The held-record flags of events recorded by held calls.
    pub events: Vec<Arc<AtomicBool>>,
    /// The events recorded by calls of the signature so far, held or issued, each with the
    /// place in the signature of its latest record: a wait on one is part of the signature
    /// (AG2), named by that place, so a window that records the signature (issuing its calls)
    /// sees the cross-stream waits a later window holds. Weak: no other event takes the
    /// address until the window ends, while a join's event, done with, can serve the next
    /// join (`EventCore::join`).
    /// By the event's address: a loop of `Stream::record` names a new event each call.
    pub recorded: HashMap<usize, (Weak<dyn BackendEvent>, usize), BuildHasherDefault<ByAddress>>,
    /// The stream-ordered allocations made by calls of the signature so far, with their
    /// places: memory they made is named by place in keys (AG2).
    pub allocated: Places,
    /// Whether the device's windows repeat (`cold`).
    pub backoff: Backoff,
}

impl Window {
    /// Build the keys of the signature so far from the template it repeated (the window
    /// stops repeating it, or ends).
    pub fn materialize(&mut self) {
        if let (true, Some(t)) = (self.keys.len() < self.len, self.source) {
            self.keys.extend_from(&self.templates[t].keys, self.len);
        }
    }

    /// The place in the signature of the latest record of `event` by a call of the signature
    /// so far.
    pub fn record_place(&self, event: &Arc<dyn BackendEvent>) -> Option<usize> {
        self.recorded.get(&event_addr(event)).map(|r| r.1)
    }

    /// A call of the signature at `place` recorded `event`.
    pub fn note_record(&mut self, event: &Arc<dyn BackendEvent>, place: usize) {
        self.recorded
            .entry(event_addr(event))
            .and_modify(|r| r.1 = place)
            .or_insert_with(|| (Arc::downgrade(event), place));
    }

    /// The place in the signature of the call that allocated `alloc`, if a call of the
    /// signature so far did.
    pub fn alloc_place(&self, alloc: &Arc<Allocation>) -> Option<usize> {
        self.allocated.get(&alloc_addr(alloc)).map(|p| p.1)
    }

    /// The memory the last replay of a template the window still repeats freed at place
    /// `place` (every such template allocates there as this call does), if nothing else holds
    /// it any more: no launch that used it is pending and no handle of the program is left
    /// (MM2), so it may serve a new allocation as it is.
    pub fn take_spare(&mut self, place: usize) -> Option<Arc<Allocation>> {
        for &t in &self.live {
            let spare = &mut self.templates[t].spare;
            let Some(k) = spare.iter().position(|s| s.0 == place) else {
                continue;
            };
            let (_, alloc) = spare.swap_remove(k);
            // Otherwise it goes back to the pool once its last holder is done.
            if Arc::strong_count(&alloc) == 1 {
                // A new allocation to the tracking layer (AG5): its last life's accesses, the
                // free among them, are not the new one's (the sanitizer would see races).
                crate::core::memory::alloc::forget_accesses(&alloc);
                return Some(alloc);
            }
        }
        None
    }

    /// A call of the signature at `place` allocated `alloc`.
    pub fn note_alloc(&mut self, alloc: &Arc<Allocation>, place: usize) {
        self.allocated
            .insert(alloc_addr(alloc), (Arc::downgrade(alloc), place));
    }

    /// The position of the latest held record of `event`.
    pub fn held_record(&self, event: &Arc<dyn BackendEvent>) -> Option<usize> {
        self.entries[..self.held]
            .iter()
            .rposition(|e| match &e.work {
                EntryWork::Record { event: ev, .. } => Arc::ptr_eq(ev, event),
                _ => false,
            })
    }

    /// Hold `entry` after the held calls, dropping the replayed call in its place.
    #[inline]
    pub fn hold(&mut self, entry: Entry) {
        if let EntryWork::Op { inner, .. } = &entry.work {
            self.inner_held |= !inner.is_empty();
        }
        match self.entries.get_mut(self.held) {
            Some(spent) => *spent = entry,
            None => self.entries.push(entry),
        }
        self.held += 1;
    }

    /// The calls held so far have run as a graph: they stay as the replayed calls.
    pub fn replayed(&mut self) {
        self.held = 0;
        self.inner_held = false;
        self.lanes.clear();
        // A short part's calls go now, while the device runs its graph: dropped at the next
        // window's holds they would delay the next replay's launch (the device idles until
        // then). A long part's go one at a time (see `entries`).
        if self.entries.len() <= DROP_AFTER_LAUNCH {
            self.entries.clear();
        }
    }
}

/// An event's key in [`Window::recorded`]: its allocation's address, which the weak reference
/// kept beside it keeps from being reused while the window lasts.
fn event_addr(event: &Arc<dyn BackendEvent>) -> usize {
    Arc::as_ptr(event) as *const () as usize
}

/// What [`Ctx::admit`] decided for a call.
pub(super) enum Admit {
    /// Hold it, at this position.
    Hold(usize),
    /// Issue it now: what was held went first.
    Issue,
}

impl Ctx<'_> {
    /// AG2: a holdable call comes; decide whether it is held. Held work that stops matching
    /// is issued first (AG4); a call that is never held (`call` has no key) seals the window.
    pub(super) fn admit(&self, w: &mut Window, call: &Call<'_>) -> Result<Admit> {
        if w.sealed {
            return Ok(Admit::Issue);
        }
        if w.len >= MAX_CALLS {
            self.seal(w)?;
            return Ok(Admit::Issue);
        }
        let pos = w.len;
        if pos == 0 {
            self.busy.store(true, Ordering::Release);
            self.recording.store(true, Ordering::Release);
            w.live.clear();
            w.live
                .extend((0..w.templates.len()).filter(|&t| !w.templates[t].failed));
            w.holding = !w.live.is_empty();
            w.source = None;
            w.stop = 0; // `complete` looks at the first held call and sets it.
        }
        if w.holding {
            // The fast path: the call is compared with the templates' keys at `pos` in place.
            let first = w.live[0];
            let (templates, places) = (&w.templates, &w.allocated);
            let repeats = |t: usize| {
                templates[t]
                    .keys
                    .get(pos)
                    .is_some_and(|k| call.is(k, places))
            };
            if w.live.len() == 1 {
                // The common case once a window's first calls chose its template.
                if !repeats(first) {
                    w.live.clear();
                }
            } else {
                w.live.retain(|t| repeats(*t));
            }
            if let Some(&t) = w.live.first() {
                w.source = Some(t);
                w.len += 1;
                return Ok(Admit::Hold(pos));
            }
            w.holding = false;
            w.source = Some(first);
            self.issue_held(w)?;
        }
        w.materialize();
        if !w.keys.push(call, &w.allocated) {
            self.seal(w)?;
            return Ok(Admit::Issue);
        }
        w.len += 1;
        Ok(Admit::Issue)
    }

    /// After holding the call at `pos`: replay a template it completes, or the part of one it
    /// ends (AG2).
    pub(super) fn complete(&self, w: &mut Window, pos: usize) -> Result<()> {
        let end = pos + 1;
        if end < w.stop {
            return Ok(()); // The common case: a call in the middle of a template.
        }
        let done = w
            .live
            .iter()
            .copied()
            .find(|&t| w.templates[t].keys.len() == end);
        if let Some(t) = done {
            w.holding = false;
            w.launched = Some(t);
            w.source = Some(t);
            return self.replay(w, t, end);
        }
        let templates = &w.templates;
        let cuts = w.live.iter().map(|&t| templates[t].cuts.contains(&end));
        if !parts::cut_here(end, cuts) {
            let shortest = w.live.iter().map(|&t| templates[t].keys.len());
            let next_end = shortest.filter(|&n| n > end).min().unwrap_or(usize::MAX);
            w.stop = next_end.min(parts::next_part_end(end + 1));
            return Ok(());
        }
        let t = w.live[0];
        w.launched = Some(t);
        let r = self.replay(w, t, end);
        if r.is_err() || w.templates[t].failed {
            w.holding = false; // Its calls went one by one or failed; nothing more is held.
        } else {
            w.part_start = end;
            w.gen += 1; // Completions of the part are the launch's, no longer held calls.
        }
        r
    }

    /// A call that is never held comes (AG4): issue what is held; the signature ends.
    pub(super) fn seal(&self, w: &mut Window) -> Result<()> {
        w.holding = false;
        // Before the window's first holdable call there is no signature to end.
        w.sealed = w.len > 0;
        let issued = self.issue_held(w);
        // Lowered only once the held calls are issued: a call that finds it lowered goes to
        // the backend without the window's lock (`before_other`), and must not pass a held
        // call of its stream that is being issued (a cold device's call overtook its
        // stream's held fill: conformance `ag2_threads_on_a_cold_device_keep_their_results`,
        // on an H200).
        self.recording.store(false, Ordering::Release);
        issued
    }

    /// Out of memory (AG6): let go of the memory the mode keeps, so that an allocation can
    /// try once more: what is held is issued first (the signature ends there; a held free has
    /// not given its memory back yet), then the calls the last replay ran, the memory replays
    /// freed for the next windows and every remembered signature's graphs go (a later window
    /// instantiates anew).
    pub(super) fn let_go_of_memory(&self, w: &mut Window) -> Result<()> {
        let keeps = |t: &Template| !t.parts.is_empty() || !t.spare.is_empty();
        // Held calls and the last replay's, or a template's graphs and freed memory.
        if w.entries.is_empty() && !w.templates.iter().any(keeps) {
            return Ok(());
        }
        let issued = self.seal(w);
        w.entries.clear(); // Issued: only the last replay's calls were left.
        for t in &mut w.templates {
            t.parts.clear();
            t.spare.clear();
        }
        self.stats.let_go.fetch_add(1, Ordering::Relaxed);
        issued
    }

    /// A host observation (AG4): issue what is held, remember the signature, start anew.
    pub(super) fn end_window(&self, w: &mut Window) -> Result<()> {
        w.holding = false;
        let issued = self.issue_held(w);
        if w.launched.is_none() {
            w.entries.clear(); // No replay in this window: the last one's calls go now.
        }
        if w.len > 0 {
            // A window that repeated a whole template is that template (no key was built).
            let whole = w
                .source
                .filter(|&t| w.keys.is_empty() && w.templates[t].keys.len() == w.len);
            let mut keys = Keys::default();
            let same = whole.or_else(|| {
                w.materialize();
                keys = std::mem::replace(&mut w.keys, std::mem::take(&mut w.spare));
                w.templates.iter().position(|t| t.keys.same(&keys))
            });
            let kept: SmallVec<[usize; 2]> = same.into_iter().chain(w.launched).collect();
            age(&mut w.templates, Some(&kept));
            if w.backoff.recorded(w.len, !kept.is_empty()) {
                self.cold.store(true, Ordering::Release); // AG2: windows stopped repeating.
            }
            if same.is_none() {
                if w.templates.len() >= MAX_SIGNATURES {
                    let stalest = (0..w.templates.len())
                        .max_by_key(|&i| w.templates[i].misses)
                        .unwrap_or(0);
                    let evicted = w.templates.remove(stalest).keys;
                    w.spare.recycle(evicted);
                }
                w.templates.push(Template {
                    cuts: parts::cuts_of(&keys),
                    keys,
                    parts: Vec::new(),
                    failed: false,
                    misses: 0,
                    spare: Vec::new(),
                });
            } else {
                w.spare.recycle(keys); // A repeat: its keys' memory serves the next signature.
            }
        }
        w.len = 0;
        w.part_start = 0;
        w.recorded.clear();
        w.allocated.clear();
        w.keys.clear();
        w.source = None;
        w.gen += 1;
        w.live.clear();
        w.sealed = false;
        w.launched = None;
        self.recording.store(false, Ordering::Release);
        self.busy.store(false, Ordering::Release);
        issued
    }

    /// Issue every held call one by one, in enqueue order (AG2, AG4); the first error is
    /// returned once all were tried.
    pub(super) fn issue_held(&self, w: &mut Window) -> Result<()> {
        if w.held == 0 {
            return Ok(());
        }
        let mut entries = std::mem::take(&mut w.entries);
        let lanes = std::mem::take(&mut w.lanes);
        entries.truncate(w.held); // The replayed calls after them go.
        w.held = 0;
        w.inner_held = false;
        self.stats.one_by_one.fetch_add(
            entries
                .iter()
                .filter(|e| matches!(e.work, EntryWork::Op { .. }))
                .count() as u64,
            Ordering::Relaxed,
        );
        let mut reals: Vec<Option<Done>> = vec![None; entries.len()];
        let mut first_err = None;
        for (i, e) in entries.drain(..).enumerate() {
            let stream = &lanes[e.lane].stream;
            let r = match e.work {
                EntryWork::Op {
                    op,
                    mut after,
                    inner,
                    done,
                } => {
                    after.extend(inner.iter().filter_map(|&j| reals[j].clone()));
                    let r = stream.submit(op, &after, done.is_some());
                    let real = r.as_ref().ok().cloned().flatten();
                    if let Some(d) = done {
                        d.fill(real.clone());
                    }
                    reals[i] = real;
                    r.map(drop)
                }
                EntryWork::Record { event, .. } => stream.record(&event),
                EntryWork::Wait { event, .. } => stream.wait(&event),
                // The allocation was made at its call; its free goes in its place.
                EntryWork::Alloc => Ok(()),
                EntryWork::Free { alloc, .. } => match alloc {
                    Some(alloc) => stream.free_async(alloc),
                    None => Ok(()),
                },
            };
            if let Err(err) = r {
                first_err.get_or_insert(err);
            }
        }
        w.entries = entries; // Empty, with its capacity for the next window.
        clear_events(w);
        first_err.map_or(Ok(()), Err)
    }
}

/// A window ended: templates other than `kept` (the one it repeated or replayed) count one more
/// miss, and one missed twice lets its graphs go (AG6).
pub(super) fn age(templates: &mut [Template], kept: Option<&[usize]>) {
    for (i, t) in templates.iter_mut().enumerate() {
        if kept.is_some_and(|k| k.contains(&i)) {
            t.misses = 0;
        } else {
            t.misses += 1;
            if t.misses >= 2 {
                t.parts.clear(); // AG6: its buffers go once it is not replayed.
                t.spare.clear();
            }
        }
    }
}

/// The window's events have no held record any more.
pub(super) fn clear_events(w: &mut Window) {
    for f in w.events.drain(..) {
        f.store(false, Ordering::Release);
    }
}
