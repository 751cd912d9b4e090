//! The keepalive queue of one stream: what keeps each submitted operation's memory, kernel and
//! host function alive until the device finished it (SPEC MM2), and what names the kernel when a
//! fault surfaces (KN2).
//!
//! Rules (cited as Q1–Q5 by the `// SAFETY:` comments of the stream code):
//!
//! * **Q1.** Every submitted item (an [`Op`], a host function's callback data) is pushed into the stream's *open batch* right after the driver accepted it,
//!   under the queue lock that was held while enqueuing it, so queue order is stream order.
//! * **Q2.** A batch is *sealed* by recording a pooled, timing-disabled marker event on the stream
//!   after its last item. The stream seals right after an item that holds a host function or
//!   the last reference to some memory (so that memory is given back as soon as the device is
//!   past it); once the open batch holds memory and is [`SEAL_AFTER`] old, its age read at
//!   each power of two of its items from the 2nd (memory the caller let go of after
//!   enqueueing waits about that much enqueue time longer, at most until the batch is
//!   [`SEAL_EVERY`] long, and retiring may wait some seals more, [`QUIET_SEALS`]); once it is
//!   [`SEAL_EVERY`] items long ([`SEAL_EVERY_BARE`] when no item holds memory; half the
//!   queue's depth where that is fewer) (so the queue stays short); and before a launch of a
//!   kernel that would be the batch's [`BATCH_KERNELS`]+1st distinct one (so a fault's candidates stay few). Kernel launches
//!   and graph launches share batches: a fault names every kernel of the batches not known to
//!   be complete ("kernels of a graph launch" for graph launches, whichever graph), and
//!   `CUEFLOW_LAUNCH_BLOCKING=1` names the exact one (RL5). A seal at every change of kernel
//!   put an event record (~0.36 us of host time on an H200) between two launches of a
//!   program that alternates kernels, which most do.
//!   A stream of copies, launches over the caller's buffers and graph launches therefore
//!   records one event per batch, not one per item.
//! * **Q3.** A batch is *retired* (dropped, which may free memory) only when the device is known
//!   to be past it: its marker completed (`cuEventQuery` at sealing time, or
//!   `cuEventSynchronize` during a stream synchronize), or a stream query, stream synchronize or
//!   device synchronize that started after its last item succeeded. Retiring happens on an API
//!   thread, never in a host-function callback, and outside the queue lock.
//! * **Q4.** A dropped stream's sealed batches move to its device's orphan list (ST10), which is
//!   retired the same way; the device waits for them before unloading its modules.
//! * **Q5.** (RL1) A stream holds at most the device's queue depth of items: a submission at
//!   the bound first synchronizes with the oldest sealed marker and retires what completed
//!   (outside the queue lock, Q3), as a CUDA launch waits when the launch queue is full. The
//!   queue's memory, its markers and the driver's pending work stay bounded however far ahead
//!   of the GPU a program runs, and a deep queue's markers are recycled instead of created.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::driver::{self, CuResult, Ev, St};
use crate::backend::contract::kernel::{KernelArg, KernelInner};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{HostFn, Op, Work};

/// Seal the open batch once it has this many items (Q2), or half the queue's depth if that is
/// fewer (so a shallow queue waits for its older half at the bound, not for all of it). Each
/// batch costs an event record and, when it is retired by a query, the first query of a
/// completed event (~1.4 us on an H200's host): at 32 items that was ~0.05 us a graph
/// launch, a sixth of what cueflow added to one (`percall_profile` on an H200: graph
/// launches 1.231 -> 1.199 x raw, launches mixed with graph launches 1.164 -> 1.122 x).
pub(super) const SEAL_EVERY: usize = 128;

/// Seal an open batch that holds no memory (launches over no buffers, RL1) once it has this
/// many items: it frees nothing when retired, so its marker only bounds the queue and names
/// fault candidates. Fewer markers in a deep queue of such
/// launches: 200,000 empty kernels recorded 6,250 markers, each a fresh event (the spare list
/// held 64), all pending on the GPU at once, while raw CUDA records none.
pub(super) const SEAL_EVERY_BARE: usize = 256;

/// Distinct kernels whose launches one batch may hold (Q2): the most a fault's candidates name
/// per batch.
pub(super) const BATCH_KERNELS: usize = 8;

/// Seal an open batch that holds memory once its first item is this old (Q2).
pub(super) const SEAL_AFTER: Duration = Duration::from_micros(100);

/// Sealed batches a stream keeps before a seal with no spare marker polls for completed ones
/// ([`Queue::seal`]).
const POLL_AT: usize = 32;

/// Seals between two settled polls that found a pending marker ([`Queue::poll_settled`]).
const QUIET_SEALS: u32 = 16;

/// Spare marker events kept per stream for reuse: enough for a queue at the default depth
/// (RL1) in batches of 32 (a stream sealed at changes of kernel or by age makes batches
/// shorter than [`SEAL_EVERY`]), so a deep queue of launches creates no events once warm.
const SPARE_MARKERS: usize = crate::types::DEFAULT_QUEUE_DEPTH / 32 + 32;

/// One thing kept alive for the device. Never read: holding it, then dropping it at retirement,
/// is the point.
#[allow(dead_code)]
pub(super) enum Keep {
    /// A submitted operation, with its memory references and kernel.
    Op(Op),
    /// The host function a `cuLaunchHostFunc` callback borrows.
    HostFn(Box<HostFnCall>),
    /// A graph launch's exec and operations (graph rules G1, G2), held opaquely: the queue
    /// only keeps them until the device is past the launch.
    /// (The exec's handle and its operations, as two shared references: no allocation per
    /// launch.)
    Graph(GraphKeep),
}

/// What a graph launch keeps, opaquely: its exec's handle and its operations.
pub(super) type GraphKeep = [Arc<dyn std::any::Any + Send + Sync>; 2];

/// What a host-function callback receives: the function and the device's sticky state.
pub(super) struct HostFnCall {
    /// The user's function.
    pub f: HostFn,
    /// Its name, for a fault (HF3).
    pub name: String,
    /// Where a panic inside it is recorded.
    pub sticky: Arc<super::fault::Sticky>,
}

/// Items between two markers.
#[derive(Default)]
pub(super) struct Batch {
    keeps: Vec<Keep>,
    /// The distinct kernels of its launches, each with the device-wide number of its oldest
    /// launch in the batch, oldest first (at most [`BATCH_KERNELS`], Q2).
    kernels: SmallVec<[(u64, Arc<KernelInner>); BATCH_KERNELS]>,
    /// Stream item number of its newest item.
    last_item: u64,
    /// When its first item was pushed.
    opened: Option<Instant>,
    /// It holds graph launches (of any graphs, whose fault candidate is one, RL5).
    graphs: bool,
    /// Whether any item holds memory (Q2: it seals after [`SEAL_EVERY`] items, not
    /// [`SEAL_EVERY_BARE`]).
    memory: bool,
}

/// How a graph launch is named among the candidates of a fault (RL5).
pub(super) const GRAPH_CANDIDATE: &str = "kernels of a graph launch";

impl Batch {
    fn is_empty(&self) -> bool {
        self.keeps.is_empty()
    }

    /// An empty batch whose item list is a kept one ([`super::batch_lists`]).
    fn fresh() -> Batch {
        Batch {
            keeps: super::batch_lists::take(),
            ..Batch::default()
        }
    }

    /// Its launches as fault candidates: (launch number, kernel name) per distinct kernel,
    /// and [`GRAPH_CANDIDATE`] numbered `u64::MAX` when it holds graph launches (RL5).
    fn launches(&self, out: &mut Vec<(u64, String)>) {
        out.extend(self.kernels.iter().map(|(n, k)| (*n, k.name.clone())));
        if self.graphs {
            out.push((u64::MAX, GRAPH_CANDIDATE.to_string()));
        }
    }

    /// Its items.
    pub(super) fn keeps_mut(&mut self) -> &mut Vec<Keep> {
        &mut self.keeps
    }
}

/// A sealed batch and the marker recorded after it.
pub(super) struct Entry {
    marker: Ev,
    batch: Batch,
}

impl Entry {
    /// The batch's launches as fault candidates ([`Queue::pending_launches`]).
    pub fn launches(&self, out: &mut Vec<(u64, String)>) {
        self.batch.launches(out);
    }

    /// True once the marker completed (context current, D2).
    pub fn query(&self) -> CuResult<bool> {
        driver::event::query(self.marker)
    }

    /// Wait for the marker, then give the marker back to the driver and return the batch.
    pub fn finish(self, wait: bool) -> Batch {
        if wait {
            let _ = driver::event::synchronize(self.marker);
        }
        driver::event::destroy(self.marker);
        self.batch
    }
}

/// The keepalive queue of one stream.
#[derive(Default)]
pub(super) struct Queue {
    /// Number of the newest item (items are numbered from 1).
    items: u64,
    /// Number of the newest retired item: `items - retired` are held (RL1, Q5).
    retired: u64,
    sealed: VecDeque<Entry>,
    open: Batch,
    spare: Vec<Ev>,
    /// Marker events this queue created (the rest were reused).
    created: u64,
    /// Seals to go before [`Queue::poll_settled`] asks the driver again, after a poll found a
    /// pending marker.
    quiet_polls: u32,
    /// The stream was dropped: its work went to the device's orphans ([`Queue::take_all`]).
    dropped: bool,
    /// Synchronize walks in progress ([`Queue::begin_walk`]). A walk waits on a marker outside
    /// the lock, so a marker retired meanwhile by another thread's submission is held back in
    /// `held_back`, neither recorded again (the walk would wait for later work) nor destroyed.
    walkers: u32,
    held_back: Vec<Ev>,
}

impl Queue {
    /// Marker events this queue created so far.
    #[cfg(test)]
    pub fn markers_created(&self) -> u64 {
        self.created
    }

    /// The newest item's number: a query or synchronize that starts now covers items up to it.
    pub fn watermark(&self) -> u64 {
        self.items
    }

    /// Items not retired yet: the work the stream may still have pending (RL1).
    pub fn held(&self) -> u64 {
        self.items - self.retired
    }

    /// True once the stream was dropped (its driver stream may be destroyed already).
    pub fn dropped(&self) -> bool {
        self.dropped
    }

    /// Make `s` wait for the work of `entries` not seen complete yet (D2); true if any.
    pub fn wait_for_entries<'a>(s: St, entries: impl Iterator<Item = &'a Entry>) -> CuResult<bool> {
        let mut any = false;
        for e in entries {
            if !matches!(e.query(), Ok(true)) {
                // D1: the entry's marker is alive while the caller holds the list.
                driver::stream::wait_event(s, e.marker)?;
                any = true;
            }
        }
        Ok(any)
    }

    /// Q5 (RL1): wait until fewer than `limit` items are held, by sealing the open batch
    /// when it holds them all and synchronizing with the oldest marker, then retiring what
    /// completed into `out` (to drop outside the lock, Q3). Context current (D2).
    pub fn make_room(&mut self, limit: u64, stream: St, out: &mut Vec<Batch>) -> CuResult<()> {
        while self.held() >= limit.max(1) {
            if self.sealed.is_empty() {
                self.seal(stream, out)?;
            }
            let Some(front) = self.sealed.front() else {
                return Ok(());
            };
            driver::event::synchronize(front.marker)?;
            self.poll(out)?;
        }
        Ok(())
    }

    /// Keep `item` (Q1).
    #[inline]
    pub fn push(&mut self, item: Keep) {
        if self.open.keeps.capacity() == 0 {
            self.open.keeps.reserve(8);
        }
        if self.open.keeps.is_empty() {
            self.open.opened = Some(Instant::now());
        }
        self.items += 1;
        self.open.last_item = self.items;
        self.open.memory |= !matches!(item, Keep::Op(_));
        self.open.keeps.push(item);
    }

    /// Keep a submitted op (Q1); `launch_no` numbers launches device-wide. Returns when the
    /// open batch is sealed after it ([`seal_after`]).
    #[inline]
    pub fn push_op(&mut self, op: Op, launch_no: Option<u64>) -> SealAfter {
        let when = seal_after(&op);
        if let (Work::Launch(l), Some(n)) = (&op.work, launch_no) {
            // Newest first: a launch mostly repeats the kernel before it.
            let ks = &mut self.open.kernels;
            if !ks.iter().rev().any(|(_, k)| Arc::ptr_eq(k, &l.kernel)) {
                ks.push((n, l.kernel.clone()));
            }
        }
        self.open.memory |= when != SealAfter::Later;
        self.push(Keep::Op(op));
        when
    }

    /// Items in the open batch.
    pub fn open_len(&self) -> usize {
        self.open.keeps.len()
    }

    /// True when the open batch must be sealed after an item sealed `when` (Q2), on a stream
    /// whose queue holds at most `depth` items (Q5).
    pub fn seal_due(&self, when: SealAfter, depth: usize) -> bool {
        let half = (depth / 2).max(1);
        match when {
            SealAfter::Now => true,
            SealAfter::Soon => {
                let n = self.open_len();
                // The age is read at each power of two from the 2nd item, not at every one: a
                // clock read is ~30 ns on an H100's host, a tenth of cueflow's own cost of a
                // graph launch. Not at the 1st: the batch was opened by this very call (a
                // batch sealed right before it, as after a host function). A batch
                // that stops growing was read young; one that grows on seals by length, or at
                // its next read once old.
                n >= SEAL_EVERY.min(half)
                    || (n >= 2
                        && n.is_power_of_two()
                        && self.open.opened.is_some_and(|t| t.elapsed() >= SEAL_AFTER))
            }
            SealAfter::Later if self.open.memory => self.open_len() >= SEAL_EVERY.min(half),
            SealAfter::Later => self.open_len() >= SEAL_EVERY_BARE.min(half),
        }
    }

    /// True when a launch of `k` must first seal the open batch: it holds launches of
    /// [`BATCH_KERNELS`] distinct kernels, none of them `k` (Q2).
    #[inline]
    pub fn needs_boundary(&self, k: &Arc<KernelInner>) -> bool {
        let ks = &self.open.kernels;
        ks.len() >= BATCH_KERNELS && !ks.iter().any(|(_, x)| Arc::ptr_eq(x, k))
    }

    /// Keep a graph launch (Q1).
    pub fn push_graph(&mut self, keep: GraphKeep) {
        self.open.graphs = true;
        self.push(Keep::Graph(keep));
    }

    /// Seal the open batch with a marker recorded on `stream` (Q2). With no spare marker left,
    /// the batches that completed are retired into `out` first (to drop outside the lock, Q3)
    /// and their markers reused. Context current (D2).
    pub fn seal(&mut self, stream: St, out: &mut Vec<Batch>) -> CuResult<()> {
        if self.open.is_empty() {
            return Ok(());
        }
        if self.spare.is_empty() && self.sealed.len() >= POLL_AT {
            // A stream sealed at boundaries (launches cycling through more kernels than a
            // batch holds) is polled nowhere else: without this its markers were retired
            // only when the queue was full, and every seal in between created an event. Not at
            // every seal: each poll's query is the costly first one of a completed event, and
            // one query retires the whole run of completed batches (their markers then serve
            // the next seals).
            self.poll_settled(out)?;
        }
        let marker = match self.spare.pop() {
            Some(m) => m,
            None => {
                self.created += 1;
                driver::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)?
            }
        };
        if let Err(e) = driver::event::record(marker, stream) {
            self.spare.push(marker);
            return Err(e);
        }
        self.sealed.push_back(Entry {
            marker,
            batch: std::mem::replace(&mut self.open, Batch::fresh()),
        });
        self.quiet_polls = self.quiet_polls.saturating_sub(1);
        Ok(())
    }

    /// A synchronize walk starts waiting on this queue's markers outside its lock: retired
    /// markers are held back until [`end_walk`](Self::end_walk).
    pub fn begin_walk(&mut self) {
        self.walkers += 1;
    }

    /// A walk [`begun`](Self::begin_walk) ended; the last one hands the held-back markers on.
    pub fn end_walk(&mut self) {
        self.walkers -= 1;
        if self.walkers == 0 {
            for m in std::mem::take(&mut self.held_back) {
                self.recycle(m);
            }
        }
    }

    /// Retire the sealed batches whose markers completed, oldest first (Q3).
    pub fn poll(&mut self, out: &mut Vec<Batch>) -> CuResult<()> {
        self.poll_upto(self.sealed.len(), out)
    }

    /// [`poll`](Self::poll), leaving the newest marker alone (just recorded, it is pending), and
    /// only once [`QUIET_SEALS`] seals passed since a poll last found a pending marker.
    pub fn poll_settled(&mut self, out: &mut Vec<Batch>) -> CuResult<()> {
        if self.quiet_polls > 0 {
            return Ok(());
        }
        self.poll_upto(self.sealed.len().saturating_sub(1), out)
    }

    /// Retire the completed batches among the oldest `n` sealed ones. The markers of one stream
    /// complete in stream order, so one query of the `n`-th tells about all before it, and
    /// otherwise a binary search finds the newest completed one: a few queries however many
    /// batches retire. (The first query of an event after it completed costs ~1.8 us on an
    /// H100, ten times a repeated one: `examples/percall_profile.rs`, events row.)
    fn poll_upto(&mut self, n: usize, out: &mut Vec<Batch>) -> CuResult<()> {
        if n == 0 {
            return Ok(());
        }
        let done = match driver::event::query(self.sealed[n - 1].marker)? {
            true => n,
            false => {
                self.quiet_polls = QUIET_SEALS;
                // Invariant: the first `lo` are complete, the one at `hi` is pending.
                let (mut lo, mut hi) = (0, n - 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if driver::event::query(self.sealed[mid].marker)? {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        };
        for _ in 0..done {
            let e = self.sealed.pop_front().expect("done <= n sealed");
            self.retired = e.batch.last_item;
            self.recycle(e.marker);
            out.push(e.batch);
        }
        Ok(())
    }

    /// Retire every item numbered `upto` or lower: the device is past them (Q3).
    pub fn retire_upto(&mut self, upto: u64, out: &mut Vec<Batch>) {
        while self
            .sealed
            .front()
            .is_some_and(|e| e.batch.last_item <= upto)
        {
            let e = self.sealed.pop_front().expect("front exists");
            self.retired = e.batch.last_item;
            self.recycle(e.marker);
            out.push(e.batch);
        }
        if !self.open.is_empty() && self.sealed.is_empty() && self.open.last_item <= upto {
            self.retired = self.open.last_item;
            out.push(std::mem::take(&mut self.open));
        }
    }

    /// The first sealed batch with a launch among items up to `upto`: its marker and last item.
    pub fn next_launch_marker(&self, upto: u64) -> Option<(Ev, u64)> {
        self.sealed
            .iter()
            .take_while(|e| e.batch.last_item <= upto)
            .find(|e| !e.batch.kernels.is_empty())
            .map(|e| (e.marker, e.batch.last_item))
    }

    /// Every launch not known to be complete, as (launch number, kernel name), one per distinct
    /// kernel of a batch: the candidates of a fault (RL5). A graph launch counts as launch
    /// number `u64::MAX` named `kernels of a graph launch`.
    pub fn pending_launches(&self, out: &mut Vec<(u64, String)>) {
        for b in self.sealed.iter().map(|e| &e.batch).chain([&self.open]) {
            b.launches(out);
        }
    }

    /// Empty the queue for a dropped stream: sealed entries, the open batch and spare markers.
    /// The queue counts as dropped from then on ([`Queue::dropped`]).
    pub fn take_all(&mut self) -> (VecDeque<Entry>, Batch, Vec<Ev>) {
        self.dropped = true;
        (
            std::mem::take(&mut self.sealed),
            std::mem::take(&mut self.open),
            std::mem::take(&mut self.spare),
        )
    }

    /// Seal `open` (taken from a dropped stream) with one of `spare` or a new marker; gives
    /// the batch back when no marker could be recorded. (The batch is large for an error, ~200
    /// bytes with its kernel list inline, but this runs once per dropped stream.)
    #[allow(clippy::result_large_err)]
    pub fn seal_taken(
        open: Batch,
        spare: &mut Vec<Ev>,
        stream: St,
    ) -> std::result::Result<Entry, Batch> {
        let marker = match spare.pop() {
            Some(m) => m,
            None => match driver::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) {
                Ok(m) => m,
                Err(_) => return Err(open),
            },
        };
        if driver::event::record(marker, stream).is_err() {
            spare.push(marker);
            return Err(open);
        }
        Ok(Entry {
            marker,
            batch: open,
        })
    }

    fn recycle(&mut self, marker: Ev) {
        if self.walkers > 0 {
            self.held_back.push(marker);
        } else if self.spare.len() < SPARE_MARKERS {
            self.spare.push(marker);
        } else {
            driver::event::destroy(marker);
        }
    }
}

impl Batch {
    /// Whether anything is kept.
    pub fn has_items(&self) -> bool {
        !self.is_empty()
    }
}

/// When the batch an op joins is sealed (Q2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SealAfter {
    /// Right after the op: it holds a host function, or the last reference to some memory,
    /// which is given back as soon as the device is past it.
    Now,
    /// Once the open batch is [`SEAL_AFTER`](SEAL_AFTER) old or
    /// [`SEAL_EVERY`](SEAL_EVERY) long (half the queue's depth if that is fewer): the op
    /// holds memory its caller holds too, which is not given back when the op completes
    /// anyway.
    Soon,
    /// Once the open batch is [`SEAL_EVERY_BARE`](SEAL_EVERY_BARE) long (or
    /// `SEAL_EVERY` when another of its items holds memory): the op holds no memory.
    Later,
}

/// Q2 for `op`. Sealing records an event on the stream, which costs the host about 2.5 us and
/// the device about 1 us (measured on an H200 with 1 MiB peer copies): most ops do not need
/// one of their own.
pub(super) fn seal_after(op: &Op) -> SealAfter {
    let mut held = false;
    let mut last = false;
    let mut see = |m: &MemRef| {
        held = true;
        // The op's reference is the only one (staging memory, or the caller let go): no
        // other handle can appear, because handles are only made from handles.
        last |= Arc::strong_count(&m.alloc) == 1;
    };
    match &op.work {
        Work::HostFn(_) => return SealAfter::Now,
        Work::Copy { dst, src } | Work::Word { dst, src } => {
            see(dst);
            see(src);
        }
        Work::Memset { dst, .. } => see(dst),
        Work::Collective(c) => {
            see(&c.send);
            see(&c.recv);
        }
        Work::External(x) => x.accesses.iter().for_each(|(m, _)| see(m)),
        Work::Launch(l) => l.args.iter().for_each(|a| {
            if let KernelArg::Buffer { mem, .. } = a {
                see(mem)
            }
        }),
    }
    match (held, last) {
        (_, true) => SealAfter::Now,
        (true, false) => SealAfter::Soon,
        (false, false) => SealAfter::Later,
    }
}

/// A stream's driver handle and keepalive queue; the device finds it through a weak reference
/// for device synchronize and fault blame.
pub(super) struct StreamQueue {
    /// The driver stream.
    pub raw: St,
    /// Never the same for two queues of the process, where a driver handle may come again
    /// once its stream was destroyed ([`StreamQueue::next_id`]).
    pub id: u64,
    /// False for a stream adopted from elsewhere: its creator destroys it.
    pub owned: bool,
    /// A blocking stream (ST4): synchronizes with the legacy stream. False for the legacy
    /// stream itself and for non-blocking streams.
    pub blocking: bool,
    /// What the device has not been seen to finish yet.
    pub queue: Mutex<Queue>,
}

impl StreamQueue {
    /// An id for a new queue.
    pub fn next_id() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
