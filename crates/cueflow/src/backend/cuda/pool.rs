//! Stream-ordered memory pools on CUDA (HM5): the device's default pool
//! (`cuDeviceGetDefaultMemPool`, attributes as CUDA sets them) and pools the program creates
//! (`cuMemPoolCreate`), allocation from a given pool (`cuMemAllocFromPoolAsync`), the release
//! threshold, statistics (`cuMemPoolGetAttribute`) and `cuMemPoolTrimTo`.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr, CUmemPool_attribute as A, CUmemoryPool};

use super::driver::{check, CuError, CuResult};
use super::memory;
use super::shared::DeviceShared;
use crate::backend::contract::device::BackendStream;
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::pool::{BackendPool, PoolStats};
use crate::error::{Error, Result};

/// One pool of a device's memory.
pub(super) struct CudaPool {
    shared: Arc<DeviceShared>,
    pool: CUmemoryPool,
    /// Created by the program (destroyed with this object); the default pool is the driver's.
    owned: bool,
}

// SAFETY: a CUmemoryPool is a driver handle usable from any thread of the process.
unsafe impl Send for CudaPool {}
// SAFETY: as above; the driver synchronizes calls on one pool.
unsafe impl Sync for CudaPool {}

impl CudaPool {
    /// The device's default pool.
    pub fn default_of(shared: &Arc<DeviceShared>) -> CuResult<Self> {
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `dev` is a valid device; `pool` is a valid out-pointer.
        check("cuDeviceGetDefaultMemPool", unsafe {
            sys::cuDeviceGetDefaultMemPool(&mut pool, shared.ctx.dev)
        })?;
        Ok(CudaPool {
            shared: shared.clone(),
            pool,
            owned: false,
        })
    }

    /// A new pool of device memory on this device (`cuMemPoolCreate`), CUDA's defaults.
    pub fn create(shared: &Arc<DeviceShared>) -> CuResult<Self> {
        // SAFETY: every field of the properties is an integer, an enum whose zero is a valid
        // value (INVALID / NONE) or a pointer, so all-zero bytes are a valid value; the fields
        // that matter are set below.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: shared.ctx.ordinal as i32,
        };
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: D2 (the caller made the context current); valid properties and out-pointer.
        check("cuMemPoolCreate", unsafe {
            sys::cuMemPoolCreate(&mut pool, &props)
        })?;
        Ok(CudaPool {
            shared: shared.clone(),
            pool,
            owned: true,
        })
    }

    fn get(&self, a: A) -> CuResult<u64> {
        let mut v: u64 = 0;
        // SAFETY: the attributes read here all take a cuuint64_t, which `v` is.
        check("cuMemPoolGetAttribute", unsafe {
            sys::cuMemPoolGetAttribute(self.pool, a, &mut v as *mut u64 as *mut std::ffi::c_void)
        })?;
        Ok(v)
    }

    fn set(&self, a: A, mut v: u64) -> CuResult<()> {
        // SAFETY: the attributes written here all take a cuuint64_t, which `v` is.
        check("cuMemPoolSetAttribute", unsafe {
            sys::cuMemPoolSetAttribute(self.pool, a, &mut v as *mut u64 as *mut std::ffi::c_void)
        })
    }
}

impl Drop for CudaPool {
    fn drop(&mut self) {
        if self.owned && self.shared.ctx.usable() && self.shared.ctx.bind().is_ok() {
            // SAFETY: created by `create` and destroyed once. With blocks still allocated the
            // driver defers the release until they are freed.
            let _ = unsafe { sys::cuMemPoolDestroy(self.pool) };
        }
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
        let mut p: CUdeviceptr = 0;
        // SAFETY: D1 (`raw` is a live stream of this device's context, held by the caller),
        // D2; `p` is a valid out-pointer.
        check("cuMemAllocFromPoolAsync", unsafe {
            sys::cuMemAllocFromPoolAsync(&mut p, bytes.max(1), self.pool, raw as sys::CUstream)
        })
        .map_err(|e| self.shared.alloc_error(e, "memory pool", bytes))?;
        Ok(memory::pool_block(
            &self.shared.ctx,
            self.shared.device_id,
            p,
            bytes,
        ))
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
        // SAFETY: D2; a live pool.
        check("cuMemPoolTrimTo", unsafe {
            sys::cuMemPoolTrimTo(self.pool, usize::try_from(keep).unwrap_or(usize::MAX))
        })
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
