//! Stream-ordered memory pools on CUDA (HM5): the device's default pool
//! (`cuDeviceGetDefaultMemPool`, attributes as CUDA sets them) and pools the program creates
//! (`cuMemPoolCreate`), allocation from a given pool (`cuMemAllocFromPoolAsync`), the release
//! threshold, statistics (`cuMemPoolGetAttribute`) and `cuMemPoolTrimTo`.
//!
//! The life of a created pool (issue 27: 10,000 cycles of create, allocate, drop crashed an
//! H100 process):
//! * **P1.** Every block allocated from it holds the pool ([`OwnedPool`]), as its handles do:
//!   the pool is destroyed only after its last block went back, never with allocations
//!   outstanding, and no block outlives its pool's handle.
//! * **P2.** A block goes back with `cuMemFreeAsync` on `free_async`'s stream, else on the
//!   context's internal stream (as default-pool blocks do, [`memory`]); a free on a program's
//!   stream records an event after it, so that P3 can wait for it.
//! * **P3.** The destruction runs on the freeing thread — never in the drop itself, which may
//!   run inside a host function (no driver calls there) and must not block — after every
//!   free of the pool has run (the recorded events, then the internal stream), with the
//!   context still retained (the job holds it): `cuMemPoolDestroy` never meets a pending free
//!   or a released context.
//! * **P4.** Peer access reaches a created pool as it reaches the default pool: at creation
//!   the pool grants every device this one has peer access with, and enabling peer access
//!   later grants the live created pools ([`memory::grant_pool_access`]), so a peer kernel
//!   reading its memory (HM6) does not fault.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr, CUmemPool_attribute as A, CUmemoryPool};
use parking_lot::Mutex;

use super::context::{in_context, in_host_fn, restoring, Ctx};
use super::driver::{self as drv, CuError, CuResult, Ev, St};
use super::memory;
use super::shared::{self, DeviceShared};
use crate::backend::contract::device::BackendStream;
use crate::backend::contract::memory::{Allocation, Release};
use crate::backend::contract::pool::BackendPool;
use crate::error::{Error, Result};
use crate::types::MemKind;
use crate::types::PoolStats;

/// One pool of a device's memory, as a [`MemPool`](crate::MemPool) handle holds it.
pub(super) struct CudaPool {
    shared: Arc<DeviceShared>,
    /// The driver's handle: the device's default pool, or `owned`'s.
    pool: CUmemoryPool,
    /// A pool the program created (P1); `None` for the default pool, which is the driver's.
    owned: Option<Arc<OwnedPool>>,
}

// SAFETY: a CUmemoryPool is a driver handle usable from any thread of the process.
unsafe impl Send for CudaPool {}
// SAFETY: as above; the driver synchronizes calls on one pool.
unsafe impl Sync for CudaPool {}

/// A pool the program created: held by its handles and by every block allocated from it
/// (P1); its drop hands the destruction to the freeing thread (P3).
pub(super) struct OwnedPool {
    ctx: Arc<Ctx>,
    raw: CUmemoryPool,
    /// Events recorded after frees of its blocks on a program's stream, not seen complete yet
    /// (P2).
    frees: Mutex<Vec<Ev>>,
}

// SAFETY: the pool handle and the events are driver identifiers usable from any thread once
// the context is current (D2); the event list is behind a lock.
unsafe impl Send for OwnedPool {}
// SAFETY: as above.
unsafe impl Sync for OwnedPool {}

/// A pool handle that moves to the freeing thread for its destruction.
struct RawPool(CUmemoryPool);

// SAFETY: a driver identifier; only the freeing thread uses it, once.
unsafe impl Send for RawPool {}

impl OwnedPool {
    /// Give block `addr` back (P2) on `stream` (a program's live stream) or, for 0, on the
    /// context's internal stream. Not inside a host function.
    fn free_block(&self, addr: u64, stream: usize) {
        // Where the context was reset, the pool and its memory are gone with it.
        in_context(&self.ctx, || self.free_bound(addr, stream));
    }

    /// [`free_block`](Self::free_block) with the context current (D2).
    fn free_bound(&self, addr: u64, stream: usize) {
        let ctx = &self.ctx;
        let s = if stream != 0 {
            St(stream as sys::CUstream)
        } else {
            ctx.free_stream
        };
        // SAFETY: `addr` came from cuMemAllocFromPoolAsync on this pool, which is alive (this
        // object), and is freed once (Release runs once, with no operation left that touches
        // it: MM2); `s` is a live stream of the context (free_async's, held by its caller, or
        // the context's own).
        let freed = unsafe { drv::memory::free_async(addr as CUdeviceptr, s) };
        if freed.is_err() {
            return;
        }
        ctx.pool_frees
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if stream != 0 {
            self.note_free(s);
        }
    }

    /// Record an event after a free on a program's stream (P2), dropping those that
    /// completed. Without an event the destruction still comes after the free in the
    /// driver's own order (it defers a destruction with frees pending).
    fn note_free(&self, s: St) {
        let mut frees = self.frees.lock();
        frees.retain(|&e| {
            let pending = matches!(drv::event::query(e), Ok(false));
            if !pending {
                drv::event::destroy(e);
            }
            pending
        });
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        if let Ok(e) = drv::event::create(flags) {
            match drv::event::record(e, s) {
                Ok(()) => frees.push(e),
                Err(_) => drv::event::destroy(e),
            }
        }
    }
}

impl Drop for OwnedPool {
    fn drop(&mut self) {
        let ctx = self.ctx.clone();
        let raw = RawPool(self.raw);
        let frees = std::mem::take(self.frees.get_mut());
        // P3: on the freeing thread, after every free of the pool ran.
        // (Inline, and then bound back after, where the freeing thread could not start.)
        memory::later(move || {
            restoring(|| {
                let raw = raw;
                if !ctx.usable() || ctx.bind().is_err() {
                    // Reset with its context: its handles are gone, so none is used again.
                    memory::destroy_created_pool(raw.0, false);
                    return;
                }
                for e in frees {
                    let _ = drv::event::synchronize(e);
                    drv::event::destroy(e);
                }
                let _ = drv::stream::synchronize(ctx.free_stream);
                memory::destroy_created_pool(raw.0, true);
            })
        });
    }
}

/// How a block of a created pool goes back (P1, P2): it holds the pool until then.
struct FromPool {
    pool: Arc<OwnedPool>,
}

impl Release for FromPool {
    fn release(&self, addr: u64, _bytes: usize) {
        if in_host_fn() {
            // No driver call inside a host function: the freeing thread gives it back, the
            // pool held until then.
            let pool = self.pool.clone();
            memory::later(move || pool.free_block(addr, 0));
        } else {
            self.pool.free_block(addr, memory::free_on());
        }
    }
}

impl CudaPool {
    /// The device's default pool.
    pub fn default_of(shared: &Arc<DeviceShared>) -> CuResult<Self> {
        let pool = drv::memory::default_pool(shared.ctx.dev)?;
        Ok(CudaPool {
            shared: shared.clone(),
            pool,
            owned: None,
        })
    }

    /// A new pool of device memory on this device (`cuMemPoolCreate`), CUDA's defaults,
    /// reachable by the device's peers (P4).
    pub fn create(shared: &Arc<DeviceShared>) -> CuResult<Self> {
        let props = drv::memory::device_pool_props(shared.ctx.ordinal as i32);
        // D2: the caller made the context current.
        let pool = drv::memory::pool_create(&props)?;
        let owned = Arc::new(OwnedPool {
            ctx: shared.ctx.clone(),
            raw: pool,
            frees: Mutex::new(Vec::new()),
        });
        // P4 (a failed grant leaves peer copies staged and is reported by the peer's use).
        shared::with_enabled_peers(shared.ctx.ordinal, |peers| {
            memory::created_pool(shared.ctx.ordinal, pool, peers)
        });
        Ok(CudaPool {
            shared: shared.clone(),
            pool,
            owned: Some(owned),
        })
    }

    /// A `cuuint64_t` attribute (the only kind read here). D1: the pool is alive (the default
    /// pool always, a created one while `owned` holds it, P1).
    fn get(&self, a: A) -> CuResult<u64> {
        drv::memory::pool_get_u64(self.pool, a)
    }

    /// Set a `cuuint64_t` attribute (D1, as `get`).
    fn set(&self, a: A, v: u64) -> CuResult<()> {
        drv::memory::pool_set_u64(self.pool, a, v)
    }
}

fn err(e: CuError) -> Error {
    e.to_error()
}

impl BackendPool for CudaPool {
    fn alloc_on(&self, stream: &dyn BackendStream, bytes: usize) -> Result<Arc<Allocation>> {
        self.shared.enter()?;
        let raw = stream.raw_handle().ok_or_else(|| {
            Error::Unsupported("a pool allocation on a stream of another backend".into())
        })?;
        // D1: `raw` is a live stream of this device's context, held by the caller, and the
        // pool is alive (see `get`); D2: entered above.
        let p =
            drv::memory::alloc_from_pool_async(bytes.max(1), self.pool, St(raw as sys::CUstream))
                .map_err(|e| self.shared.alloc_error(e, "memory pool", bytes))?;
        Ok(match &self.owned {
            // P1: the block holds its pool.
            Some(pool) => Allocation::new(
                p,
                bytes,
                MemKind::Device,
                self.shared.device_id,
                Box::new(FromPool { pool: pool.clone() }),
            ),
            None => memory::pool_block(&self.shared.ctx, self.shared.device_id, p, bytes),
        })
    }

    fn release_threshold(&self) -> Result<u64> {
        self.shared.enter()?;
        self.get(A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).map_err(err)
    }

    fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.shared.enter()?;
        self.set(A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
            .map_err(err)
    }

    fn trim_to(&self, keep: u64) -> Result<()> {
        self.shared.enter()?;
        // D1: a live pool (see `get`); D2: entered above.
        drv::memory::pool_trim_to(self.pool, usize::try_from(keep).unwrap_or(usize::MAX))
            .map_err(err)
    }

    fn stats(&self) -> Result<PoolStats> {
        self.shared.enter()?;
        Ok(PoolStats {
            reserved: self
                .get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
                .map_err(err)?,
            reserved_high: self
                .get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
                .map_err(err)?,
            used: self.get(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT).map_err(err)?,
            used_high: self.get(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH).map_err(err)?,
        })
    }

    fn reset_peaks(&self) -> Result<()> {
        self.shared.enter()?;
        // Setting a high-water mark to 0 resets it to the current value (CUDA's rule).
        self.set(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
            .and_then(|()| self.set(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0))
            .map_err(err)
    }
}

/// The default pool of a device without stream-ordered pools: every call fails typed.
pub(super) struct NoPool;

fn no_pools() -> Error {
    Error::Unsupported("this device has no stream-ordered memory pools".into())
}

impl BackendPool for NoPool {
    fn alloc_on(&self, _: &dyn BackendStream, _: usize) -> Result<Arc<Allocation>> {
        Err(no_pools())
    }
    fn release_threshold(&self) -> Result<u64> {
        Err(no_pools())
    }
    fn set_release_threshold(&self, _: u64) -> Result<()> {
        Err(no_pools())
    }
    fn trim_to(&self, _: u64) -> Result<()> {
        Err(no_pools())
    }
    fn stats(&self) -> Result<PoolStats> {
        Err(no_pools())
    }
    fn reset_peaks(&self) -> Result<()> {
        Err(no_pools())
    }
}
