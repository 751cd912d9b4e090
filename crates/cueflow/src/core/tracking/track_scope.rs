//! The tracking layer's part of a graph launch with event nodes (GR8, [`crate::core::graphs::events`]):
//! the launch's accesses come in *parts* that the event nodes order differently, and the
//! launch's record nodes give their events snapshots of exactly the parts upstream of them.
//!
//! The same steps as a stream call ([`Tracking::run`]), per part:
//!
//! 1. **Ordering (AC5, AC6).** Conflicting pending accesses of other streams become
//!    dependencies of the part's nodes ([`NodesAfter`]; a backend that cannot hold single
//!    nodes holds the launch), and with automatic ordering the part's clock joins theirs.
//! 2. **Races (AC4).** A part's accesses are checked with the stream's clock joined with the
//!    snapshots of the events its upstream wait nodes wait for (and rule 1's joins): a node
//!    that depends on no wait node is not ordered after the waited work.
//! 3. **Stamps (AC2).** Parts downstream of no record node are stamped by the stream, as a
//!    launch without event nodes is. The others are stamped on the graph's *chains*
//!    ([`crate::core::graphs::events`]): each chain (a path of nodes) is an actor of its own,
//!    and a launch gives it as many stamps as it has positions — position `p` of the launch
//!    whose chain time was `t` before is stamped `t + p` (launches of one instantiation run one
//!    after another, GR3). A [`Group`] (the nodes with the same record nodes downstream: runs
//!    of consecutive nodes of chains, `core::graphs::event_sets` rule 3) is stamped on the
//!    chain of its first run, at that run's first position. A record node's event gets the
//!    stream's clock before the launch joined with the snapshots its upstream waits took, with
//!    the clocks the parts it covers joined (rule 1), and each chain raised to the last
//!    position upstream of the record node — which covers exactly the groups upstream of it
//!    (the nodes of a chain upstream of a node are a prefix of the chain) and nothing else of
//!    the launch. The stream's clock after the launch covers all of it.
//! 4. **Completions.** A group's accesses complete with its first record node (each of its
//!    nodes is upstream of every record node of the group); the others with the launch. So an
//!    operation ordered after a group waits for that record node only (AC5).
//!
//! Records keep the part's actor. Two parts' reads of the same bytes replace each other in the
//! access maps only when one chain stamped both (access rule 2): the later position's stamp
//! and completion then cover the earlier's, as they do for a stream's calls.
//!
//! 5. **Order of the records.** A launch's accesses go into the maps in an order the graph's
//!    own allows, so that of two parts' accesses to the same bytes the later in the graph is
//!    the one a write leaves (access rule 2): parts with more record nodes downstream first
//!    (a node upstream of another has every record node of the other downstream too), group
//!    0 last.

use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::backend::contract::device::{Done, GraphLaunched, NodesAfter};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::Part;
use crate::core::streams::ident::StreamIdent;
use crate::core::tracking::access::Rec;
use crate::core::tracking::actors::ActorCell;
use crate::core::tracking::call::{Acc, Accesses, Caller, LaunchPlace, OpInfo, PlaceHosts, What};
use crate::core::tracking::clock::{Actor, VClock};
use crate::core::tracking::history::{who, State};
use crate::core::tracking::locks::{lock_maps, map_of, Locked, MapIndex};
use crate::core::tracking::report::{race_report, Conflict, Later};
use crate::core::tracking::sanitizer::{LintKind, RaceReport};
use crate::core::tracking::track::Tracking;
use crate::error::Result;
use crate::types::Access;

/// The accesses of the nodes with the same wait nodes upstream and the same record nodes
/// downstream.
pub(crate) struct ScopePart {
    /// The nodes (flat indices).
    pub nodes: Vec<usize>,
    pub footprint: Vec<(MemRef, Access, Part)>,
    /// The wait nodes upstream.
    pub waits: WaitsUp,
    /// The part's group (index into the launch's groups).
    pub group: usize,
    /// What reports call the part's accesses.
    pub what: What,
}

/// The nodes with the same record nodes downstream (rule 3); group 0 has none and is stamped
/// by the stream.
pub(crate) struct Group {
    /// The chain that stamps the group (index into the launch's chains) and the first
    /// position of the group's first run on it.
    pub chain: usize,
    pub pos: u64,
    /// How many record nodes are downstream (rule 5), and the first of them (index into the
    /// launch's records, rule 4).
    pub count: usize,
    pub first: usize,
}

impl Group {
    /// Group 0: the nodes with no record node downstream.
    pub fn none() -> Group {
        Group {
            chain: usize::MAX,
            pos: 0,
            count: 0,
            first: usize::MAX,
        }
    }
}

/// A chain of the graph with a group on it: the actor that stamps its groups (rule 3).
pub(crate) struct Chain {
    pub actor: Actor,
    /// Its place among the sanitizer's live actors, once the sanitizer needed it.
    cell: Option<Arc<ActorCell>>,
    /// Stamps given so far.
    time: u64,
    /// Positions on the chain: the stamps a launch gives.
    len: u64,
}

impl Chain {
    pub fn new(actor: Actor, len: u64) -> Chain {
        Chain {
            actor,
            cell: None,
            time: 0,
            len,
        }
    }

    /// The stamps given so far and the actor's cell, for a chain whose stamps must go on
    /// (an update of the same graph).
    pub fn continue_from(&mut self, old: &Chain) {
        self.actor = old.actor;
        self.cell = old.cell.clone();
        self.time = old.time;
    }
}

/// The wait nodes upstream of a node: for each chain of the graph with wait nodes (index into
/// the launch's wait chains, ascending), how many of its first wait nodes — those upstream of
/// a node on a chain are a prefix of the chain's (`core::graphs::event_sets` rule 2).
pub(crate) type WaitsUp = Vec<(usize, usize)>;

/// A wait node's side: the event's clock snapshot and the event.
pub(crate) struct WaitSide<'a> {
    pub clock: &'a Mutex<Option<Arc<VClock>>>,
    pub event: &'a dyn BackendEvent,
}

/// A record node's side: where its event's snapshot goes, the wait nodes upstream, and the
/// last position upstream on each chain that has one (index into the launch's chains,
/// ascending).
pub(crate) struct RecordSide<'a> {
    pub clock: &'a Mutex<Option<Arc<VClock>>>,
    pub waits: &'a [(usize, usize)],
    pub upstream: &'a [(usize, u64)],
}

impl RecordSide<'_> {
    /// True if group `g` is upstream of the record node (rule 3).
    fn covers(&self, g: &Group) -> bool {
        match self.upstream.binary_search_by_key(&g.chain, |e| e.0) {
            Ok(i) => self.upstream[i].1 >= g.pos,
            Err(_) => false,
        }
    }
}

/// One launch as the layer sees it.
pub(crate) struct ScopedLaunch<'a> {
    pub parts: &'a [ScopePart],
    pub groups: &'a [Group],
    pub chains: &'a mut [Chain],
    pub waits: Vec<WaitSide<'a>>,
    /// Each chain's wait nodes (indices into `waits`), in chain order.
    pub wait_chains: &'a [Vec<usize>],
    pub records: Vec<RecordSide<'a>>,
    /// Places the launch's host nodes (HF1), before the backend may run them.
    pub hosts: Option<PlaceHosts<'a>>,
}

impl ScopedLaunch<'_> {
    /// The actor of part `p`'s accesses.
    fn actor(&self, s: &StreamIdent, p: usize) -> Actor {
        match self.parts[p].group {
            0 => s.actor,
            g => self.chains[self.groups[g].chain].actor,
        }
    }
}

/// The maps a scoped launch holds locked, its accesses by part, and the earlier accesses each
/// part conflicts with (rule 1: per part, each earlier access once).
struct Locks {
    maps: SmallVec<[Locked; 2]>,
    accs: Vec<(usize, Acc)>,
    conflicts: Vec<(usize, Conflict)>,
}

impl Locks {
    fn take(launch: &ScopedLaunch<'_>, s: &StreamIdent) -> Locks {
        let mut maps: SmallVec<[Locked; 2]> = SmallVec::new();
        let mut index: MapIndex = None;
        let mut accs: Vec<(usize, Acc)> = Vec::new();
        for (p, part) in launch.parts.iter().enumerate() {
            for (m, kind, which) in &part.footprint {
                let map = map_of(&mut maps, &mut index, m);
                let acc = Acc {
                    map,
                    range: m.range(),
                    kind: *kind,
                    part: *which,
                };
                accs.push((p, acc));
            }
        }
        lock_maps(&mut maps);
        let mut conflicts: Vec<(usize, Conflict)> = Vec::new();
        for (p, acc) in &accs {
            let map = maps[acc.map].guard.as_ref().expect("locked above");
            map.conflicts(&acc.range, acc.kind, launch.actor(s, *p), |rec, overlap| {
                // The stream's own earlier work comes before every node of the launch (ST1).
                if rec.actor != s.actor
                    && !conflicts.iter().any(|(q, c)| q == p && c.rec.id == rec.id)
                {
                    let acc = acc.clone();
                    conflicts.push((
                        *p,
                        Conflict {
                            rec: rec.clone(),
                            overlap,
                            acc,
                        },
                    ));
                }
            });
        }
        Locks {
            maps,
            accs,
            conflicts,
        }
    }
}

impl Tracking {
    /// The layer's part of a graph launch with event nodes on `s` (rules 1–4); `submit`
    /// enqueues the launch after the dependencies, with its completion when asked for.
    pub fn run_scoped(
        &self,
        by: Caller<'_>,
        launch: &mut ScopedLaunch<'_>,
        submit: impl FnOnce(Vec<NodesAfter>, bool) -> Result<GraphLaunched>,
    ) -> Result<()> {
        let s = by.stream;
        let has = launch.parts.iter().any(|p| !p.footprint.is_empty());
        let auto = has && (self.auto_device() || s.auto());
        let order = has && (self.serialize || auto);
        let pinned = launch
            .parts
            .iter()
            .any(|p| p.footprint.iter().any(|(m, ..)| m.kind().is_host()));
        let want_done = order || pinned || (has && self.any_auto());
        let mut st = self.clocks().then(|| self.lock());
        let entered = st.as_mut().map(|st| st.enter(s, by.legacy, true));
        let mut locks = Locks::take(launch, s);
        let (deps, joined) = per_part(&locks, launch.parts.len(), order, auto && st.is_some());
        let nodes_after = || -> Vec<NodesAfter> {
            deps.iter()
                .zip(launch.parts)
                .filter(|(d, _)| !d.is_empty())
                .map(|(d, part)| NodesAfter {
                    nodes: part.nodes.clone(),
                    after: d.clone(),
                })
                .collect()
        };
        let (Some(mut st), Some(entered)) = (st, entered) else {
            let launched = submit(nodes_after(), want_done)?;
            record(launch, s, &mut locks, &launched, None);
            return Ok(());
        };
        // Rule 2.
        let base = st.check_clock(s, by.legacy, true);
        let waited: Vec<Option<Arc<VClock>>> = launch
            .waits
            .iter()
            .map(|w| w.clock.lock().clone())
            .collect();
        let waited = Waited::new(launch.wait_chains, waited);
        let clock_of = |p: usize| {
            let mut vc = base.clone();
            VClock::join_into(&mut vc, &joined[p]);
            for snap in waited.upstream(&launch.parts[p].waits) {
                VClock::join_into(&mut vc, snap);
            }
            vc
        };
        let refusal = self.scoped_races(&mut st, by, launch, &locks, clock_of);
        if !matches!(refusal, Ok(None)) {
            // Refused (error mode) or about to panic (panic mode): nothing is enqueued.
            st.undo_enter(s, &entered);
        }
        if let Some(race) = refusal? {
            drop((st, locks));
            panic!("{race}");
        }
        place_hosts(launch, s, &base, &waited.snapshots);
        let launched = match submit(nodes_after(), want_done) {
            Ok(launched) => launched,
            Err(e) => {
                st.undo_enter(s, &entered);
                return Err(e);
            }
        };
        let infos = after_launch(&mut st, by, launch, &waited, &joined);
        record(launch, s, &mut locks, &launched, Some(&infos));
        Ok(())
    }

    /// Rule 2: the races of the launch's parts (each checked with its own clock, `clock_of`)
    /// and the lints of its wait nodes and stream, reported as the mode says; `Err` refuses
    /// the launch, a race returned is for the caller to panic with once the locks are gone.
    fn scoped_races(
        &self,
        st: &mut State,
        by: Caller<'_>,
        launch: &ScopedLaunch<'_>,
        locks: &Locks,
        clock_of: impl Fn(usize) -> Arc<VClock>,
    ) -> Result<Option<RaceReport>> {
        let (s, site) = (by.stream, by.site);
        for w in &launch.waits {
            if !w.event.recorded() {
                let message = format!(
                    "a graph launched on {} has an event wait node on an event that was never \
                     recorded, which orders nothing (EV3); record the event before the launch",
                    who(s).describe()
                );
                st.lint(LintKind::WaitNeverRecorded, message, site);
            }
        }
        let mut races: Vec<RaceReport> = Vec::new();
        let later = who(s);
        for (p, c) in &locks.conflicts {
            let Some(info) = &c.rec.info else { continue };
            let vc = clock_of(*p);
            if !info.cell.retired() && !vc.covers(info.actor, info.time) {
                let alloc = &locks.maps[c.acc.map].alloc;
                let what = &launch.parts[*p].what;
                let l = Later {
                    who: &later,
                    what,
                    site,
                    vc: &vc,
                };
                races.push(race_report(c, alloc, info, l));
            }
        }
        let what = What::Graph(0);
        st.lint_stream_call(s, &Accesses::None, &what, site);
        self.handle_races(st, races)
    }
}

/// Rule 3: each record node's event gets the stream's clock `before` the launch joined with
/// the snapshots of the wait nodes upstream and the clocks `joined` into the parts it covers,
/// each chain raised to its last position upstream (`bases`: the chains' times before).
fn record_snapshots(
    launch: &ScopedLaunch<'_>,
    before: &VClock,
    bases: &[u64],
    waited: &Waited,
    joined: &[VClock],
) -> Vec<Arc<VClock>> {
    // Rule 1's joins, of the parts that have any (automatic ordering's waits).
    let joins: Vec<usize> = (0..launch.parts.len())
        .filter(|&j| launch.parts[j].group != 0 && joined[j].len() > 0)
        .collect();
    let mut snapshots = Vec::with_capacity(launch.records.len());
    for side in &launch.records {
        let mut vc = before.clone();
        for snap in waited.upstream(side.waits) {
            vc.join(snap);
        }
        for &j in &joins {
            if side.covers(&launch.groups[launch.parts[j].group]) {
                vc.join(&joined[j]);
            }
        }
        for &(c, pos) in side.upstream {
            vc.raise(launch.chains[c].actor, bases[c] + pos);
        }
        let vc = Arc::new(vc);
        *side.clock.lock() = Some(vc.clone());
        snapshots.push(vc);
    }
    snapshots
}

/// Rule 3, once the backend took the launch: the record nodes' events get their snapshots,
/// the stream's clock advances past the launch, and each part gets the record its accesses
/// are recorded with.
fn after_launch(
    st: &mut State,
    by: Caller<'_>,
    launch: &mut ScopedLaunch<'_>,
    waited: &Waited,
    joined: &[VClock],
) -> Vec<Arc<OpInfo>> {
    let s = by.stream;
    let before = st.stream(s).vc.clone();
    // Each chain's time before the launch: position `p` is stamped `base + p`.
    let bases: Vec<u64> = launch.chains.iter().map(|c| c.time).collect();
    for c in launch.chains.iter_mut() {
        c.time += c.len;
        let actor = c.actor;
        c.cell.get_or_insert_with(|| ActorCell::new(actor));
    }
    let snapshots = record_snapshots(launch, &before, &bases, waited, joined);
    let ss = st.stream(s);
    let after = Arc::make_mut(&mut ss.vc);
    for snap in waited
        .snapshots
        .iter()
        .flatten()
        .map(|v| &**v)
        .chain(joined)
    {
        after.join(snap);
    }
    for c in launch.chains.iter() {
        after.raise(c.actor, c.time);
    }
    let time = after.tick(s.actor);
    let (after, cell) = (ss.vc.clone(), ss.cell.clone());
    let later = who(s);
    launch
        .parts
        .iter()
        .map(|part| {
            let g = &launch.groups[part.group];
            let (actor, cell, vc, time) = match part.group {
                0 => (s.actor, cell.clone(), after.clone(), time),
                _ => {
                    let c = &launch.chains[g.chain];
                    (
                        c.actor,
                        c.cell.clone().expect("made above"),
                        snapshots[g.first].clone(),
                        bases[g.chain] + g.pos,
                    )
                }
            };
            Arc::new(OpInfo {
                actor,
                cell,
                who: later.clone(),
                vc,
                time,
                site: by.site,
                what: part.what.clone(),
            })
        })
        .collect()
}

/// Record the launch's accesses in their maps (rule 4): each with its part's completion (when
/// asked for) and, with the sanitizer, its part's record.
fn record(
    launch: &ScopedLaunch<'_>,
    s: &StreamIdent,
    locks: &mut Locks,
    launched: &GraphLaunched,
    infos: Option<&[Arc<OpInfo>]>,
) {
    let (maps, accs) = (&mut locks.maps, &locks.accs);
    let done_of = |p: usize| -> Option<Done> {
        match launch.parts[p].group {
            0 => launched.done.clone(),
            g => launched.records.get(launch.groups[g].first).cloned(),
        }
    };
    // Rule 5: a later write replaces an earlier one's state (access rule 2), so parts go in
    // an order the graph's own allows — more record nodes downstream first, group 0 (none)
    // last: every record node downstream of a node is downstream of the nodes upstream of it,
    // so of two nodes in different groups that access the same bytes in order, the earlier
    // has more. (In part order, a part of nodes before a record node, recorded after a part
    // of nodes that overwrite its bytes later, left its write as the bytes' last one: a later
    // operation waited for the record node only.)
    let mut order: Vec<usize> = (0..accs.len()).collect();
    let downstream = |i: &usize| launch.groups[launch.parts[accs[*i].0].group].count;
    order.sort_by_key(|i| std::cmp::Reverse(downstream(i)));
    let ids = crate::core::tracking::access::rec_ids(accs.len());
    for ((p, acc), id) in order.into_iter().map(|i| &accs[i]).zip(ids) {
        // Without the launch's own completion none was asked for: nothing waits for it.
        let done = launched.done.as_ref().and_then(|_| done_of(*p));
        let info = infos.map(|v| v[*p].clone());
        if done.is_none() && info.is_none() {
            continue;
        }
        let rec = Rec {
            id,
            actor: launch.actor(s, *p),
            kind: acc.kind,
            part: acc.part,
            range: acc.range.clone(),
            done,
            info,
        };
        let map = maps[acc.map].guard.as_mut().expect("locked above");
        map.record(acc.range.clone(), &rec);
    }
}

/// The wait nodes' snapshots at a launch (by wait), and rule 2's joins of them: for each chain
/// with wait nodes, the join of the snapshots of its first `k` wait nodes at `[k - 1]`
/// (shared where a wait adds nothing).
struct Waited {
    snapshots: Vec<Option<Arc<VClock>>>,
    prefixes: Vec<Vec<Arc<VClock>>>,
}

impl Waited {
    fn new(chains: &[Vec<usize>], snapshots: Vec<Option<Arc<VClock>>>) -> Waited {
        let prefixes = chains
            .iter()
            .map(|waits| {
                let mut acc = Arc::new(VClock::default());
                waits
                    .iter()
                    .map(|&w| {
                        if let Some(snap) = &snapshots[w] {
                            VClock::join_into(&mut acc, snap);
                        }
                        acc.clone()
                    })
                    .collect()
            })
            .collect();
        Waited {
            snapshots,
            prefixes,
        }
    }

    /// The snapshots that cover the waits `up` (one per chain with wait nodes upstream).
    fn upstream<'w>(&'w self, up: &'w [(usize, usize)]) -> impl Iterator<Item = &'w VClock> {
        up.iter().map(|&(c, k)| &*self.prefixes[c][k - 1])
    }
}

/// Rule 1, per part: the pending completions of the conflicts each part's nodes wait for
/// where the launch is ordered (`order`), and the clocks automatic ordering's waits put each
/// part after (`auto_clocks`: automatic ordering with the sanitizer's clocks).
fn per_part(
    locks: &Locks,
    parts: usize,
    order: bool,
    auto_clocks: bool,
) -> (Vec<Vec<Done>>, Vec<VClock>) {
    let mut deps: Vec<Vec<Done>> = vec![Vec::new(); parts];
    let mut joined: Vec<VClock> = vec![VClock::default(); parts];
    for (p, c) in &locks.conflicts {
        if order {
            if let Some(d) = c.rec.done.as_ref().filter(|d| !d.is_done()) {
                deps[*p].push(d.clone());
            }
        }
        // AC5: the inserted wait orders the part's nodes after it.
        if let (true, Some(info)) = (auto_clocks, &c.rec.info) {
            joined[*p].join(&info.vc);
        }
    }
    (deps, joined)
}

/// HF1 in graphs: the place of the launch's host nodes, given before the backend may run them
/// — after `base` and the wait nodes' snapshots (`waited`), with rule 3's stamps as
/// `after_launch` will give them.
fn place_hosts(
    launch: &ScopedLaunch<'_>,
    s: &StreamIdent,
    base: &Arc<VClock>,
    waited: &[Option<Arc<VClock>>],
) {
    if let Some(hosts) = launch.hosts {
        let mut stamps = vec![(s.actor, base.get(s.actor) + 1)];
        stamps.extend(launch.groups.iter().skip(1).map(|g| {
            let c = &launch.chains[g.chain];
            (c.actor, c.time + g.pos)
        }));
        hosts(&LaunchPlace {
            before: base,
            waited,
            stamps,
        });
    }
}
