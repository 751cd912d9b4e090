//! Memory pools (HM5): [`MemPool`], the device's default pool or one the program creates,
//! with its release threshold, statistics and trimming; [`Stream::alloc_from_pool`] allocates
//! from a given pool in stream order (`cudaMallocFromPoolAsync`).

use std::panic::Location;

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::memory::DeviceBuffer;
use crate::api::stream::Stream;
use crate::core::memory::pool::PoolCore;
use crate::error::{Error, Result};
use crate::types::PoolStats;

/// A stream-ordered memory pool of one device (`cudaMemPool_t`). Cheap to clone.
///
/// After a fault poisoned the device, every call returns its sticky error (ER2).
///
/// Attributes are CUDA's unless the program sets them: the release threshold starts at 0, so
/// idle memory above it goes back to the system at the next synchronization of a stream or
/// of the device (on both backends). Setting it to `u64::MAX` keeps freed memory for reuse.
///
/// ```
/// # use cueflow::{Device, Stream};
/// let dev = Device::from_env()?;
/// let pool = dev.default_pool();
/// assert_eq!(pool.release_threshold()?, 0); // CUDA's default
/// let s = Stream::new(&dev)?;
/// let b = s.alloc_async::<f32>(1 << 16)?;
/// s.free_async(b)?;
/// s.synchronize()?; // idle memory above the threshold is released here
/// assert!(pool.stats()?.reserved_high >= 1 << 18);
/// # Ok::<(), cueflow::Error>(())
/// ```
#[derive(Clone)]
pub struct MemPool {
    device: Device,
    inner: PoolCore,
    default: bool,
}

impl MemPool {
    /// The device the pool's memory is on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// True for the device's default pool.
    pub fn is_default(&self) -> bool {
        self.default
    }

    /// Idle bytes the pool keeps at a synchronization (`cudaMemPoolAttrReleaseThreshold`).
    pub fn release_threshold(&self) -> Result<u64> {
        self.live()?;
        self.inner.release_threshold()
    }

    /// Set the release threshold: at each synchronization, idle memory above it goes back to
    /// the system. `u64::MAX` keeps everything for reuse; 0 (CUDA's default) keeps nothing.
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.live()?;
        self.inner.set_release_threshold(bytes)
    }

    /// Give idle memory back until the pool holds at most `keep` idle bytes
    /// (`cudaMemPoolTrimTo`). Memory handed out is never released.
    pub fn trim_to(&self, keep: u64) -> Result<()> {
        self.live()?;
        self.inner.trim_to(keep)
    }

    /// Reserved and used bytes with their high-water marks (`cudaMemPoolAttrReservedMem*`,
    /// `cudaMemPoolAttrUsedMem*`). On the host backend `used` counts whole blocks (a request
    /// rounded up to its size class), as CUDA counts its own granularity.
    pub fn stats(&self) -> Result<PoolStats> {
        self.live()?;
        self.inner.stats()
    }

    /// Set both high-water marks to the current values.
    pub fn reset_peaks(&self) -> Result<()> {
        self.live()?;
        self.inner.reset_peaks()
    }

    /// ER2: after a fault every pool call returns the device's sticky error, as every CUDA
    /// call does (whatever the backend would answer).
    fn live(&self) -> Result<()> {
        self.device.sticky_error().map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemPool({}, {})",
            self.device.inner.describe(),
            if self.default { "default" } else { "created" }
        )
    }
}

impl Device {
    /// The device's default stream-ordered pool (`cudaDeviceGetDefaultMemPool`), which
    /// [`Stream::alloc_async`] allocates from.
    pub fn default_pool(&self) -> MemPool {
        MemPool {
            device: self.clone(),
            inner: self.inner.default_pool(),
            default: true,
        }
    }

    /// A new pool of this device's memory with CUDA's default attributes
    /// (`cudaMemPoolCreate`); allocate from it with [`Stream::alloc_from_pool`]. It is
    /// destroyed when its last handle goes; memory allocated from it stays valid until freed.
    pub fn create_pool(&self) -> Result<MemPool> {
        Ok(MemPool {
            device: self.clone(),
            inner: self.inner.create_pool()?,
            default: false,
        })
    }
}

impl Stream {
    /// Allocate `len` elements from `pool` in stream order (`cudaMallocFromPoolAsync`, MM1);
    /// free with [`Stream::free_async`]. The pool must be of this stream's device (ER3).
    /// Inside a capture only [`Stream::alloc_async`] (the default pool) is supported.
    #[track_caller]
    pub fn alloc_from_pool<T: Pod>(&self, pool: &MemPool, len: usize) -> Result<DeviceBuffer<T>> {
        self.check_same_device(&pool.device, "alloc_from_pool")?;
        pool.live()?;
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "memory pool",
                bytes: usize::MAX,
            })?;
        let mem = self.core.alloc_async(
            &self.device.inner,
            bytes,
            Some(&*pool.inner),
            Location::caller(),
        )?;
        Ok(DeviceBuffer::from_alloc(&self.device, mem.alloc, len))
    }
}
