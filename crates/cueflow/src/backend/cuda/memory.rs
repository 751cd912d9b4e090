//! Device memory (`cuMemAlloc`), pinned host memory (`cuMemHostAlloc`) and stream-ordered memory
//! from the device's default pool (`cuMemAllocAsync` / `cuMemFreeAsync`), each wrapped in an
//! [`Allocation`] whose [`Release`] frees it when the last holder is gone (MM2).
//!
//! Holders are the user's handles and the operations in the streams' keepalive queues, which
//! drop an operation only once the device finished it ([`super::queue`]). So a `Release` runs
//! with no device work left that touches the memory, on whatever thread dropped the last holder.
//! Device memory — synchronous allocations included — comes from the device's pool, so it goes
//! back with `cuMemFreeAsync`, which never blocks. `cuMemFree` and `cuMemFreeHost` would wait for
//! all running work while holding a driver lock that stalls other threads' allocations, copies
//! and launches (seen on an H100: a `PinnedBuffer` allocation hung behind a free and a running
//! kernel; `benches/cuda/holdup_probe.cu`), so idle pinned blocks are cached for reuse up to a
//! bound ([`super::pinned_cache`]) and those past it are freed only when every stream of the
//! context is idle and none can start ([`free_evicted_if_idle`]); any other `cuMemFree` runs
//! on a freeing thread once the context is idle ([`super::quiesce::Quiesce::once_idle`]). No
//! drop ever waits for running work, and no driver call is made inside a host function (a
//! CUDA callback).

use std::cell::Cell;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use cudarc::driver::sys::{self, CUdeviceptr, CUmemoryPool};

use super::context::{in_context, in_host_fn, now_or_deferred, Ctx};
use super::driver::{self, CuError, CuResult, St};
use super::pinned_cache::Block;
use crate::backend::contract::memory::{Allocation, HostMem, Release};
use crate::types::MemKind;
use crate::types::PinnedFlags;

thread_local! {
    /// Set by `free_async` around dropping its handle: the stream a pool block that is freed
    /// right then goes back on, in stream order (MM1).
    static FREE_ON: Cell<usize> = const { Cell::new(0) };
}

/// The stream a block dropped right now goes back on: `free_async`'s stream while it drops its
/// handle, else none (0).
pub(super) fn free_on() -> usize {
    FREE_ON.with(|f| f.get())
}

#[derive(Clone, Copy)]
enum Kind {
    /// `cuMemHostAlloc` memory.
    Pinned,
    /// Default-pool memory from `cuMemAllocAsync`.
    Pool,
    /// Managed memory from `cuMemAllocManaged` (freed by the freeing thread: `cuMemFree`
    /// synchronizes).
    Managed,
}

struct Free {
    ctx: Arc<Ctx>,
    kind: Kind,
    /// Capacity of a pinned block (its size class), for the cache.
    cap: usize,
    /// `cuMemHostAlloc` flags of a pinned block, for the cache.
    host_flags: u32,
}

/// Pinned blocks are cached by size class: whole 64 KiB units.
fn pinned_class(bytes: usize) -> usize {
    bytes.max(1).next_multiple_of(64 << 10)
}

/// Free `addr` now in `ctx`, binding back what was current before (a release may run in the
/// middle of another device's calls).
fn free_now(ctx: &Ctx, kind: Kind, addr: u64, stream: usize) {
    in_context(ctx, || free_bound(ctx, kind, addr, stream));
}

/// [`free_now`] with `ctx` current (D2).
fn free_bound(ctx: &Ctx, kind: Kind, addr: u64, stream: usize) {
    // Errors cannot be reported from a drop; a poisoned context fails these calls harmlessly.
    match kind {
        // SAFETY: `addr` came from cuMemHostAlloc in this context and is freed once (Release
        // runs once, after every holder is gone, so no operation touches it any more: MM2).
        Kind::Pinned => unsafe {
            let _ = driver::memory::host_free(addr as usize as *mut std::ffi::c_void);
        },
        // SAFETY: `addr` came from cuMemAllocManaged in this context and is freed once, with
        // no operation left that touches it (MM2).
        Kind::Managed => unsafe {
            let _ = driver::memory::free(addr);
        },
        Kind::Pool => {
            let s = if stream != 0 {
                St(stream as sys::CUstream)
            } else {
                ctx.free_stream
            };
            // SAFETY: `addr` came from cuMemAllocAsync in this context and is freed once, with
            // no operation left that touches it (MM2); `s` is a live stream of the context
            // (free_async's stream, held by its caller, or the context's own stream).
            let _ = unsafe { driver::memory::free_async(addr as CUdeviceptr, s) };
            ctx.pool_frees
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Release for Free {
    fn release(&self, addr: u64, _bytes: usize) {
        let stream = free_on();
        match self.kind {
            // Stream-ordered frees never block: give the block back right here.
            Kind::Pool if !in_host_fn() => free_now(&self.ctx, Kind::Pool, addr, stream),
            // Idle pinned blocks wait in the cache for the next allocation of their class;
            // those past its bound are freed once the device is idle (RL3, `evict`).
            Kind::Pinned if self.ctx.usable() => {
                let block = Block {
                    addr,
                    cap: self.cap,
                    flags: self.host_flags,
                };
                let old = self.ctx.pinned_cache.keep(block);
                if !old.is_empty() {
                    evict(&self.ctx, old);
                }
            }
            // cuMemFree and cuMemFreeHost synchronize with the whole device: a drop must not
            // wait for unrelated running work (or for a kernel that waits for this thread), so
            // the freeing thread does it.
            kind => FREER.free(self.ctx.clone(), kind, addr),
        }
    }
}

/// Driver work a drop handed to the freeing thread.
type FreeJob = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct FreeQueue {
    jobs: Vec<FreeJob>,
    /// Jobs taken by the freeing thread and not finished yet.
    in_flight: usize,
    /// The thread is running (false: not started, or it could not be started).
    started: bool,
}

/// The process's freeing thread: frees memory whose last holder is gone (and destroys pools,
/// [`super::pool`]), so no drop blocks and no driver call runs inside a host function. Jobs
/// run in the order they were queued.
struct Freer {
    queue: Mutex<FreeQueue>,
    work: Condvar,
    drained: Condvar,
}

static FREER: Freer = Freer {
    queue: Mutex::new(FreeQueue {
        jobs: Vec::new(),
        in_flight: 0,
        started: false,
    }),
    work: Condvar::new(),
    drained: Condvar::new(),
};

/// Run `job` on the freeing thread, after every job queued before it (or here, or after the
/// host function this runs in, when no thread could be started).
pub(super) fn later(job: impl FnOnce() + Send + 'static) {
    FREER.push(Box::new(job));
}

impl Freer {
    fn free(&'static self, ctx: Arc<Ctx>, kind: Kind, addr: u64) {
        self.push(Box::new(move || {
            in_context(&ctx, || {
                // A stream-ordered free (one from inside a host function) never waits.
                if matches!(kind, Kind::Pool) {
                    free_bound(&ctx, kind, addr, 0);
                } else {
                    ctx.quiesce.once_idle(|| free_bound(&ctx, kind, addr, 0));
                }
            })
        }));
    }

    fn push(&'static self, job: FreeJob) {
        let mut q = self.queue.lock();
        if !q.started {
            q.started = std::thread::Builder::new()
                .name("cueflow-cuda-free".into())
                .spawn(move || self.run())
                .is_ok();
        }
        if q.started {
            q.jobs.push(job);
            self.work.notify_one();
        } else {
            drop(q);
            // No thread: run it here (or after the host function, where no driver call may
            // run).
            now_or_deferred(job);
        }
    }

    fn run(&'static self) {
        loop {
            let jobs = {
                let mut q = self.queue.lock();
                while q.jobs.is_empty() {
                    self.work.wait(&mut q);
                }
                let jobs = std::mem::take(&mut q.jobs);
                q.in_flight = jobs.len();
                jobs
            };
            // A job may queue more (a pool's last block hands its destruction on): the lock
            // is not held while they run.
            for job in jobs {
                job();
            }
            let mut q = self.queue.lock();
            q.in_flight = 0;
            if q.jobs.is_empty() {
                self.drained.notify_all();
            }
        }
    }

    /// Wait until every queued free happened (before retrying an allocation that ran out).
    fn flush(&self) {
        let mut q = self.queue.lock();
        while q.started && (!q.jobs.is_empty() || q.in_flight > 0) {
            self.drained.wait(&mut q);
        }
    }
}

/// Wait until every job queued on the freeing thread so far ran (a registration a drop handed
/// on is over then).
pub(super) fn flush_frees() {
    FREER.flush();
}

/// Run `alloc`; when it runs out of memory, wait for the pending frees and try once more.
fn retry_oom<T>(mut alloc: impl FnMut() -> CuResult<T>) -> CuResult<T> {
    match alloc() {
        Err(e) if e.code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            FREER.flush();
            alloc()
        }
        r => r,
    }
}

/// [`retry_oom`] for page-locked memory: out of memory, the idle cached blocks go back to
/// the system first (RL3).
pub(super) fn retry_oom_pinned<T>(
    ctx: &Arc<Ctx>,
    mut alloc: impl FnMut() -> CuResult<T>,
) -> CuResult<T> {
    retry_oom(|| match alloc() {
        Err(e) if e.code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            // Out of memory the idle blocks go (the alternative is the error): each on the
            // freeing thread once the context is idle, as any other free (`once_idle`).
            let evicted = std::mem::take(&mut *ctx.evicted.lock());
            for old in ctx.pinned_cache.drain().into_iter().chain(evicted) {
                FREER.free(ctx.clone(), Kind::Pinned, old.addr);
            }
            Err(e)
        }
        r => r,
    })
}

/// Keep `blocks`, let go of by the pinned cache, until [`free_evicted_if_idle`] finds every
/// stream of the context idle.
fn evict(ctx: &Ctx, blocks: Vec<Block>) {
    ctx.evicted.lock().extend(blocks);
    ctx.evicting
        .store(true, std::sync::atomic::Ordering::Release);
}

/// Give the pinned blocks the cache let go of back to the system if every stream of the
/// context is idle and none can start meanwhile ([`super::quiesce`]): `cuMemFreeHost` then
/// finds no running kernel to wait for while it holds up other threads' calls. Called where
/// the program waited for the device (synchronizations) and before a pinned allocation;
/// one load when nothing was let go of. Context current (D2), not inside a host function.
pub(super) fn free_evicted_if_idle(ctx: &Ctx) {
    use std::sync::atomic::Ordering;
    if !ctx.evicting.load(Ordering::Acquire) || in_host_fn() {
        return;
    }
    ctx.quiesce.when_idle(|| {
        let mut evicted = ctx.evicted.lock();
        for b in evicted.drain(..) {
            free_bound(ctx, Kind::Pinned, b.addr, 0);
        }
        ctx.evicting.store(false, Ordering::Release);
    });
}

/// Synchronous device allocation (cudaMalloc), from the device's pool: allocated in order on
/// the context's internal stream, which is then synchronized, so any stream may use the memory
/// at once. Its free (`cuMemFreeAsync`) never blocks. The caller made the context current and
/// maps errors (out of memory names the size).
pub(super) fn alloc_device(
    ctx: &Arc<Ctx>,
    device_id: u64,
    bytes: usize,
) -> CuResult<Arc<Allocation>> {
    let alloc = alloc_async(ctx, device_id, bytes, ctx.free_stream)?;
    driver::stream::synchronize(ctx.free_stream)?;
    Ok(alloc)
}

/// Page-locked host memory (cudaHostAlloc): not write-combined unless asked for; portable
/// (HM2) and mapped (HM3) as `flags` say.
pub(super) fn alloc_pinned(
    ctx: &Arc<Ctx>,
    device_id: u64,
    bytes: usize,
    flags: PinnedFlags,
) -> CuResult<Arc<Allocation>> {
    let mut f = 0;
    if flags.write_combined {
        f |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
    }
    if flags.portable {
        f |= sys::CU_MEMHOSTALLOC_PORTABLE;
    }
    if flags.mapped {
        f |= sys::CU_MEMHOSTALLOC_DEVICEMAP;
    }
    let cap = pinned_class(bytes);
    free_evicted_if_idle(ctx);
    let p = match ctx.pinned_cache.take(cap, f) {
        Some(addr) => addr as usize as *mut std::ffi::c_void,
        // D2: the caller made the context current.
        None => retry_oom_pinned(ctx, || driver::memory::host_alloc(cap, f))?,
    };
    let device_view = if flags.mapped {
        super::host_mem::device_view(p as *mut u8)?
    } else {
        0
    };
    Ok(Allocation::new_host(
        p as usize as u64,
        bytes,
        MemKind::Pinned,
        device_id,
        HostMem {
            portable: flags.portable,
            mapped: flags.mapped,
            device_view,
        },
        Box::new(Free {
            ctx: ctx.clone(),
            kind: Kind::Pinned,
            cap,
            host_flags: f,
        }),
    ))
}

/// Wrap managed memory `cuMemAllocManaged` gave (HM4): valid on the host and every device,
/// freed with `cuMemFree` on the freeing thread when its last holder drops (MM2).
pub(super) fn managed_block(
    ctx: &Arc<Ctx>,
    device_id: u64,
    p: CUdeviceptr,
    bytes: usize,
) -> Arc<Allocation> {
    Allocation::new_host(
        p,
        bytes,
        MemKind::Managed,
        device_id,
        HostMem {
            portable: true,
            mapped: true,
            device_view: 0,
        },
        Box::new(Free {
            ctx: ctx.clone(),
            kind: Kind::Managed,
            cap: 0,
            host_flags: 0,
        }),
    )
}

/// Wrap a block `cuMemAllocAsync` or `cuMemAllocFromPoolAsync` gave: it goes back with
/// `cuMemFreeAsync` when its last holder drops (MM2).
pub(super) fn pool_block(
    ctx: &Arc<Ctx>,
    device_id: u64,
    p: CUdeviceptr,
    bytes: usize,
) -> Arc<Allocation> {
    Allocation::new(
        p,
        bytes,
        MemKind::Device,
        device_id,
        Box::new(Free {
            ctx: ctx.clone(),
            kind: Kind::Pool,
            cap: 0,
            host_flags: 0,
        }),
    )
}

/// Stream-ordered allocation from the default pool (MM1). The caller made the context current.
pub(super) fn alloc_async(
    ctx: &Arc<Ctx>,
    device_id: u64,
    bytes: usize,
    stream: St,
) -> CuResult<Arc<Allocation>> {
    // D1: `stream` is a live stream of this context; D2: the caller made it current.
    let p = retry_oom(|| driver::memory::alloc_async(bytes.max(1), stream))?;
    Ok(pool_block(ctx, device_id, p, bytes))
}

/// Give `alloc` back in stream order on `stream` (MM1, MM2).
///
/// If this was the last holder (no operation still holds it: they all completed and were
/// retired), the block goes back to the pool on `stream` right away (`cuMemFreeAsync`), so a
/// later `alloc_async` on the stream can reuse it without a host synchronization. Otherwise it
/// goes back when the last holder drops, on the context's internal stream.
pub(super) fn free_async(alloc: Arc<Allocation>, stream: St) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FREE_ON.with(|f| f.set(0));
        }
    }
    let _reset = Reset;
    FREE_ON.with(|f| f.set(stream.0 as usize));
    drop(alloc);
}

/// Pools the program created and that are not destroyed yet, as (device ordinal, handle):
/// enabling peer access later grants them too (P4 of [`super::pool`]).
static CREATED_POOLS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Let GPU `peer` read and write `pool`'s memory (`cuMemPoolSetAccess`). D1: `pool` is a
/// live pool (the default pool, or a created one still listed in CREATED_POOLS, whose lock
/// the caller holds).
fn set_pool_access(pool: CUmemoryPool, peer_ordinal: usize) -> std::result::Result<(), CuError> {
    driver::memory::pool_grant(pool, peer_ordinal as i32)
}

/// Let GPU `peer` read and write the memory of `dev`'s pools: its default pool, where
/// cueflow's device memory lives, and the pools the program created on it (P4 of
/// [`super::pool`]). `cuCtxEnablePeerAccess` covers `cuMemAlloc` memory only; without this
/// grant the driver stages every peer copy of pool memory through the host (seen on two H200s:
/// 38 GB/s instead of the NVLink's 390), and a peer kernel reading it faults.
pub(super) fn grant_pool_access(
    dev: sys::CUdevice,
    dev_ordinal: usize,
    peer_ordinal: usize,
) -> std::result::Result<(), CuError> {
    let pool = driver::memory::default_pool(dev)?;
    let created = CREATED_POOLS.lock();
    set_pool_access(pool, peer_ordinal)?;
    for &(_, p) in created.iter().filter(|&&(o, _)| o == dev_ordinal) {
        set_pool_access(p as CUmemoryPool, peer_ordinal)?;
    }
    Ok(())
}

/// Note a pool the program created on device `ordinal` and grant it to `peers`, the devices
/// peer access is enabled with (P4; the caller holds the peer list, so no enabling slips
/// between). A failed grant is left to the peer's use to report.
pub(super) fn created_pool(ordinal: usize, pool: CUmemoryPool, peers: &[usize]) {
    let mut created = CREATED_POOLS.lock();
    created.push((ordinal, pool as usize));
    for &peer in peers {
        let _ = set_pool_access(pool, peer);
    }
}

/// Destroy a created pool (P3), or only forget it (`destroy` false: its context was reset):
/// it leaves the list first, so no grant uses the handle after. To destroy, the context is
/// current, every block of the pool went back and every free of it ran.
pub(super) fn destroy_created_pool(pool: CUmemoryPool, destroy: bool) {
    let mut created = CREATED_POOLS.lock();
    created.retain(|&(_, p)| p != pool as usize);
    if destroy {
        // SAFETY: created by `CudaPool::create`, destroyed once (its `OwnedPool` dropped
        // once); nothing holds it any more (P1) and no free of it is pending (P3).
        let _ = unsafe { driver::memory::pool_destroy(pool) };
    }
}

/// Check that device `dev` has a default pool for stream-ordered memory (HM5).
///
/// The pool's attributes stay as CUDA sets them: release threshold 0, so idle memory goes back
/// to the system at each synchronization. (Before issue 19, cueflow silently set the default
/// pool's threshold to the maximum; a program that wants that keeps memory with
/// `MemPool::set_release_threshold(u64::MAX)` on `Device::default_pool`.)
pub(super) fn configure_pool(dev: sys::CUdevice) -> std::result::Result<(), CuError> {
    driver::memory::default_pool(dev).map(|_| ())
}

/// After a synchronization retired work (HM5): if that gave memory back to a pool
/// (`cuMemFreeAsync` on `stream` or the context's free stream, both idle by now), synchronize
/// those streams again, so the driver releases what the pool holds above its release threshold
/// at this synchronization, as a CUDA program's `cudaStreamSynchronize` would, not at the next.
pub(super) fn settle_pool_frees(ctx: &Ctx, stream: St) -> CuResult<()> {
    if ctx.pool_frees.swap(0, std::sync::atomic::Ordering::Relaxed) == 0 {
        return Ok(());
    }
    driver::stream::synchronize(ctx.free_stream)?;
    driver::stream::synchronize(stream)
}
