//! The state a CUDA device's backend object, streams, events and graphs share: its context,
//! modules and sticky state, the registry of its streams' keepalive queues (device
//! synchronize), the orphaned work of dropped streams (ST10), completion events for reuse, and
//! the process's open devices and their peer pairs (MD3).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use cudarc::driver::sys;
use parking_lot::Mutex;

use super::context::{now_or_deferred, restoring, run_deferred, Ctx};
use super::driver::{self, CuError, CuResult};
use super::event::CudaEvent;
use super::fault::{blame, Faults, Sticky};
use super::memory;
use super::module::Modules;
use super::queue::{Batch, Entry, StreamQueue};
use crate::backend::contract::kernel::KernelInner;
use crate::error::{Error, Result};
use crate::types::DeviceProperties;
use crate::types::EventFlags;

/// State shared by a device's backend object, streams and events.
pub(super) struct DeviceShared {
    pub ctx: Arc<Ctx>,
    pub device_id: u64,
    pub props: DeviceProperties,
    /// The context's modules, shared with the other devices open on it.
    pub modules: Arc<Modules>,
    pub sticky: Arc<Sticky>,
    /// Whether stream-ordered allocation is available.
    pub pools: bool,
    pub(super) epoch: Instant,
    pub(super) launches: AtomicU64,
    pub(super) streams: Mutex<Vec<Weak<StreamQueue>>>,
    /// Kernels that hold a loaded form for this device (removed when the device goes).
    pub(super) kernels: Mutex<Vec<Weak<KernelInner>>>,
    pub(super) orphans: Mutex<VecDeque<Entry>>,
    pub(super) has_orphans: AtomicBool,
    /// Completion events handed to core (contract rule 7), reused once only this list holds
    /// them: re-recording one that core still holds would change what it stands for.
    pub(super) done_events: Mutex<Vec<Arc<CudaEvent>>>,
    /// Items a stream's keepalive queue may hold before a submission waits (RL1, Q5).
    pub depth: std::sync::atomic::AtomicUsize,
    /// C5 and C7 of `graph_cond.rs` (`host_reach_gate.rs`), shared by the devices open on
    /// this GPU context: the event recorded after the last launch of a graph with conditional
    /// nodes (none before the first), which the next such launch and work reaching host memory
    /// wait for, and the streams' reach events. The lock is held from the waits to the
    /// records, so the launches are ordered as they take it.
    pub(super) gate: Arc<super::host_reach_gate::GpuGate>,
}

/// Completion events kept for reuse at most.
pub(super) const DONE_EVENTS: usize = 512;

/// Every open CUDA device of the process, by cueflow device id: peer copies find the other
/// side's context here (MD3).
pub(super) static DEVICES: Mutex<Vec<(u64, Weak<DeviceShared>)>> = Mutex::new(Vec::new());

/// One side of a GPU pair: its ordinal and its context's life ([`Ctx::instance`]).
pub(super) type PeerSide = (usize, u64);

/// GPU pairs whose peer access was settled — enabled, found impossible, or refused by the
/// driver (the error is kept for [`enable_peer`]'s callers) — lower ordinal first. A context
/// made anew has lost the driver's peer mappings and pool grants, so a pair is settled again
/// once either side's context is another life.
pub(super) type PeerPair = (PeerSide, PeerSide, Result<bool, CuError>);
static PEER_PAIRS: Mutex<Vec<PeerPair>> = Mutex::new(Vec::new());

/// The open device with cueflow id `id`.
pub(super) fn shared_of(id: u64) -> Option<Arc<DeviceShared>> {
    DEVICES
        .lock()
        .iter()
        .find(|(d, _)| *d == id)
        .and_then(|(_, w)| w.upgrade())
}

/// True if GPU `a` can access GPU `b`'s memory directly (`cuDeviceCanAccessPeer`).
pub(super) fn can_access(a: &Ctx, b: &Ctx) -> bool {
    if a.dev == b.dev {
        return true;
    }
    matches!(driver::peer::can_access(a.dev, b.dev), Ok(true))
}

/// Make peer copies between `a` and `b` take the direct path when the GPUs allow it, once per
/// pair (both directions), then make `current` the context again. Returns whether the path is
/// direct (`Ok(false)`: the GPUs cannot reach each other, copies are staged), or the driver's
/// refusal (copies are staged then too).
pub(super) fn enable_peer(a: &DeviceShared, b: &DeviceShared, current: &Ctx) -> CuResult<bool> {
    let side = |c: &Ctx| (c.ordinal, c.instance);
    let (x, y) = match a.ctx.ordinal <= b.ctx.ordinal {
        true => (side(&a.ctx), side(&b.ctx)),
        false => (side(&b.ctx), side(&a.ctx)),
    };
    if x.0 == y.0 {
        return Ok(true);
    }
    let mut pairs = PEER_PAIRS.lock();
    if let Some(r) = settled(&mut pairs, x, y) {
        return r;
    }
    let mut r = Ok(can_access(&a.ctx, &b.ctx) && can_access(&b.ctx, &a.ctx));
    if matches!(r, Ok(true)) {
        for (from, to) in [(a, b), (b, a)] {
            // D2: `from` is bound first; D1: `to.ctx` is a live context of another GPU.
            let enabled = from
                .ctx
                .bind()
                .and_then(|()| driver::peer::enable_access(to.ctx.raw()));
            // Device memory comes from pools: grant `from` access to `to`'s.
            let enabled = enabled.and_then(|()| {
                memory::grant_pool_access(to.ctx.dev, to.ctx.ordinal, from.ctx.ordinal)
            });
            if let Err(e) = enabled {
                r = Err(e);
                break;
            }
        }
        let _ = current.bind();
    }
    pairs.push((x, y, r));
    r
}

/// What `pairs` settled for GPUs `x` and `y` (lower ordinal first), if it was for these
/// lives of their contexts; a pair settled for earlier lives is forgotten.
pub(super) fn settled(
    pairs: &mut Vec<PeerPair>,
    x: PeerSide,
    y: PeerSide,
) -> Option<CuResult<bool>> {
    let k = pairs.iter().position(|p| (p.0 .0, p.1 .0) == (x.0, y.0))?;
    if (pairs[k].0, pairs[k].1) == (x, y) {
        return Some(pairs[k].2);
    }
    let _ = pairs.swap_remove(k);
    None
}

/// Call `f` with the GPUs (ordinals) that GPU `ordinal` has peer access with (or had in an
/// earlier life of either context, until [`settled`] forgets the pair; granting a pool to
/// such a GPU is harmless), while no
/// [`enable_peer`] can run (a pool created meanwhile is granted to every peer, P4 of
/// [`super::pool`]).
pub(super) fn with_enabled_peers(ordinal: usize, f: impl FnOnce(&[usize])) {
    let pairs = PEER_PAIRS.lock();
    let peers: Vec<usize> = pairs
        .iter()
        .filter(|(_, _, r)| matches!(r, Ok(true)))
        .filter_map(|&((x, _), (y, _), _)| match ordinal {
            o if o == x => Some(y),
            o if o == y => Some(x),
            _ => None,
        })
        .collect();
    f(&peers);
}

impl DeviceShared {
    /// A timing-free event for a completion signal: a free one from the list, or a new one.
    /// Context current (D2).
    pub fn done_event(self: &Arc<Self>) -> CuResult<Arc<CudaEvent>> {
        let mut list = self.done_events.lock();
        if let Some(e) = list.iter().find(|e| Arc::strong_count(e) == 1) {
            return Ok(e.clone());
        }
        let e = CudaEvent::create_raw(
            self,
            &self.ctx,
            EventFlags {
                timing: false,
                ..Default::default()
            },
        )?;
        if list.len() < DONE_EVENTS {
            list.push(e.clone());
        }
        Ok(e)
    }

    /// `Err` with the sticky error once the device is poisoned (ER2).
    #[inline]
    pub fn check(&self) -> Result<()> {
        match self.sticky.get() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Make the context current (D2), after the sticky check.
    #[inline]
    pub fn enter(&self) -> Result<()> {
        self.check()?;
        self.ctx.bind().map_err(|e| self.fail(e, None))
    }

    /// Number the next launch, device-wide (fault blame picks the oldest).
    pub fn next_launch(&self) -> u64 {
        self.launches.fetch_add(1, Ordering::Relaxed)
    }

    /// Map a failed driver call onto an error. A sticky code poisons the device and names the
    /// kernels not known to be complete on any stream as the candidates (RL5). The caller
    /// must not hold any stream's queue lock. (`_hint`, the stream the call failed on, no
    /// longer narrows the blame: a fault surfaces on whichever stream looks first, which named
    /// a kernel of that stream even when another stream's kernel faulted.)
    pub fn fail(&self, e: CuError, _hint: Option<&StreamQueue>) -> Error {
        self.fail_blaming(e, Vec::new())
    }

    /// As [`fail`](Self::fail), with candidates the caller already collected (under a queue
    /// lock it has released since); every stream's pending launches are added.
    pub fn fail_blaming(&self, e: CuError, mut candidates: Vec<(u64, String)>) -> Error {
        if !e.is_sticky() {
            return e.to_error();
        }
        self.pending_launches(&mut candidates);
        self.poison(e, candidates, None)
    }

    /// Poison the device with `e`, blaming `candidates` (launch number, kernel name): the one
    /// kernel when there is one, every distinct name and a note that the device cannot say
    /// which one otherwise (RL5), or `exact` when the caller knows (a synchronized launch).
    pub fn poison(
        &self,
        e: CuError,
        mut candidates: Vec<(u64, String)>,
        exact: Option<&str>,
    ) -> Error {
        if let Some(err) = self.sticky.get() {
            return err;
        }
        self.ctx.mark_poisoned();
        candidates.sort();
        let mut names: Vec<String> = Vec::new();
        for (_, k) in candidates {
            if !names.contains(&k) {
                names.push(k);
            }
        }
        let (kernel, detail) = blame(exact, &names, e.describe());
        self.sticky.set(Error::KernelFault {
            device: self.props.name.clone(),
            kernel,
            detail,
        })
    }

    /// Every launch not known to be complete, on any stream or orphaned batch.
    fn pending_launches(&self, out: &mut Vec<(u64, String)>) {
        let queues = self.live_queues();
        for e in self.orphans.lock().iter() {
            e.launches(out);
        }
        for q in queues {
            q.queue.lock().pending_launches(out);
        }
    }

    /// The queues of the streams alive now.
    fn live_queues(&self) -> Vec<Arc<StreamQueue>> {
        self.streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Register a stream's queue for device synchronize and fault blame.
    pub fn register(&self, q: &Arc<StreamQueue>) {
        self.ctx.quiesce.register(q);
        let mut s = self.streams.lock();
        s.retain(|w| w.strong_count() > 0);
        s.push(Arc::downgrade(q));
    }

    /// Note that `k` keeps a loaded form for this device.
    pub fn loaded_by(&self, k: &Arc<KernelInner>) {
        self.kernels.lock().push(Arc::downgrade(k));
    }

    /// Take a dropped stream's sealed batches (ST10).
    pub fn adopt(&self, entries: VecDeque<Entry>) {
        if entries.is_empty() {
            return;
        }
        self.orphans.lock().extend(entries);
        self.has_orphans.store(true, Ordering::Release);
    }

    /// Cheap housekeeping at each submit: deferred drops, finished orphaned work. Context
    /// current (D2).
    #[inline]
    pub fn maintain(&self) {
        run_deferred();
        super::interop::poll_lingering();
        if self.has_orphans.load(Ordering::Acquire) {
            self.poll_orphans();
        }
    }

    fn poll_orphans(&self) {
        let mut done: Vec<Entry> = Vec::new();
        if let Some(mut o) = self.orphans.try_lock() {
            while o.front().is_some_and(|e| matches!(e.query(), Ok(true))) {
                done.extend(o.pop_front());
            }
            if o.is_empty() {
                self.has_orphans.store(false, Ordering::Release);
            }
        }
        let batches: Vec<Batch> = done.into_iter().map(|e| e.finish(false)).collect();
        drop(batches);
    }

    /// Host nanoseconds since the device was opened.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Retire what the device finished, asking the driver without waiting (Q3): a stream the
    /// driver says is idle gives back everything it held, a busy one its completed batches,
    /// the orphan list its completed entries. Waits for no work and orders nothing.
    pub(super) fn retire_finished(&self) -> Result<()> {
        self.enter()?;
        self.maintain();
        for q in self.live_queues() {
            let mut done: Vec<Batch> = Vec::new();
            let r = {
                // Under the queue's lock: a dropped stream's handle may be gone (Q4).
                let mut queue = q.queue.lock();
                if queue.dropped() {
                    continue;
                }
                let upto = queue.watermark();
                // D1: the stream lives while its queue is not dropped; D2: entered above.
                match driver::stream::query(q.raw) {
                    Ok(true) => {
                        queue.retire_upto(upto, &mut done);
                        Ok(())
                    }
                    Ok(false) => queue.poll(&mut done),
                    Err(e) => Err(e),
                }
            };
            drop(done); // Q3: outside the lock.
            r.map_err(|e| self.fail(e, None))?;
        }
        Ok(())
    }

    pub(super) fn synchronize(&self) -> Result<()> {
        self.enter()?;
        self.maintain();
        let queues: Vec<(Arc<StreamQueue>, u64)> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|q| {
                let w = q.queue.lock().watermark();
                (q, w)
            })
            .collect();
        // D2: entered above.
        if let Err(e) = self.ctx.quiesce.gate.synchronize_context() {
            return Err(self.fail(e, None));
        }
        // The orphans stay listed during the synchronize (C7's walk waits for them, see
        // `host_reach_gate.rs`); those there before it are complete now, and come first.
        let mut done: Vec<Batch> = Vec::new();
        {
            let mut o = self.orphans.lock();
            while o.front().is_some_and(|e| matches!(e.query(), Ok(true))) {
                done.extend(o.pop_front().map(|e| e.finish(false)));
            }
            if o.is_empty() {
                self.has_orphans.store(false, Ordering::Release);
            }
        }
        for (q, w) in queues {
            q.queue.lock().retire_upto(w, &mut done);
        }
        drop(done);
        // HM5: memory the retired work gave back reaches the pool's release at this
        // synchronization (see `memory::settle_pool_frees`).
        if self.ctx.pool_frees.swap(0, Ordering::Relaxed) > 0 {
            // D2: entered above.
            let gate = &self.ctx.quiesce.gate;
            gate.synchronize_context().map_err(|e| self.fail(e, None))?;
        }
        memory::free_evicted_if_idle(&self.ctx);
        // ER2: a host function that panicked meanwhile poisoned the device, not a stream.
        self.check()
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        // Every stream, event and backend handle of the device is gone. Orphaned work may still
        // run: wait for it (on a helper thread, so the drop itself never blocks), then unload the
        // modules it may use (Q4).
        // Kernels that outlive the device (the built-ins are statics) forget its functions.
        for k in std::mem::take(&mut *self.kernels.lock()) {
            if let Some(k) = k.upgrade() {
                k.loaded.forget(self.device_id);
            }
        }
        let ctx = self.ctx.clone();
        let orphans = std::mem::take(&mut *self.orphans.lock());
        let modules = self.modules.clone();
        let poisoned = self.sticky.get().is_some();
        let background = !poisoned && !orphans.is_empty();
        let cleanup = move || {
            restoring(|| {
                if !ctx.usable() || ctx.bind().is_err() {
                    return;
                }
                let batches: Vec<Batch> =
                    orphans.into_iter().map(|e| e.finish(!poisoned)).collect();
                drop(batches);
                // Unloaded with the context, not now: another device may run kernels on it.
                ctx.retired_modules.lock().push(modules);
                drop(ctx);
            })
        };
        now_or_deferred(move || {
            if !background {
                return cleanup();
            }
            let job = Arc::new(Mutex::new(Some(cleanup)));
            let theirs = job.clone();
            let spawned = std::thread::Builder::new()
                .name("cueflow-cuda-reaper".into())
                .spawn(move || theirs.lock().take().map_or((), |f| f()));
            if spawned.is_err() {
                // No helper thread: wait here rather than free under running work (MM2).
                if let Some(f) = job.lock().take() {
                    f();
                }
            }
        });
    }
}

impl DeviceShared {
    /// Map a failed allocation: out of memory names what and how much.
    pub fn alloc_error(&self, e: CuError, what: &'static str, bytes: usize) -> Error {
        if e.code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { what, bytes }
        } else {
            self.fail(e, None)
        }
    }
}

impl Faults for DeviceShared {
    fn enter(&self) -> Result<()> {
        DeviceShared::enter(self)
    }

    fn fail(&self, e: CuError) -> Error {
        DeviceShared::fail(self, e, None)
    }
}

#[cfg(test)]
mod peer_pair_tests {
    use super::{settled, PeerPair};
    use crate::backend::cuda::driver::CuError;
    use cudarc::driver::sys::CUresult;

    /// A pair settled for one life of each context answers for that life only; once either
    /// side's context is another life, the pair is forgotten and settled again.
    #[test]
    fn a_pair_settled_for_earlier_contexts_is_settled_again() {
        let refused = CuError::new("cuCtxEnablePeerAccess", CUresult::CUDA_ERROR_INVALID_VALUE);
        let mut pairs: Vec<PeerPair> =
            vec![((0, 1), (1, 2), Ok(true)), ((0, 1), (2, 3), Err(refused))];
        assert!(matches!(
            settled(&mut pairs, (0, 1), (1, 2)),
            Some(Ok(true))
        ));
        assert!(matches!(settled(&mut pairs, (0, 1), (2, 3)), Some(Err(_))));
        // Device 1's context was made anew (its devices all dropped, or a reset).
        assert!(settled(&mut pairs, (0, 1), (1, 4)).is_none());
        assert_eq!(pairs.len(), 1, "the stale pair is forgotten");
        assert!(
            settled(&mut pairs, (0, 1), (1, 2)).is_none(),
            "not found again"
        );
        assert!(matches!(settled(&mut pairs, (0, 1), (2, 3)), Some(Err(_))));
        assert!(
            settled(&mut pairs, (1, 4), (2, 3)).is_none(),
            "a pair never settled"
        );
    }
}
