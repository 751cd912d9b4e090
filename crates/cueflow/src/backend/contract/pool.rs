//! Stream-ordered memory pools as a backend provides them (HM5): the device's default pool and
//! pools the program creates, their release threshold, statistics and trimming.

use crate::types::PoolStats;

use std::sync::Arc;

use super::device::BackendStream;
use super::memory::Allocation;
use crate::error::Result;

/// One stream-ordered pool of device memory.
pub(crate) trait BackendPool: Send + Sync + 'static {
    /// Allocate `bytes` from this pool in `stream`'s order (MM1, `cuMemAllocFromPoolAsync`).
    fn alloc_on(&self, stream: &dyn BackendStream, bytes: usize) -> Result<Arc<Allocation>>;
    /// Idle bytes the pool keeps at a synchronization (`cudaMemPoolAttrReleaseThreshold`).
    fn release_threshold(&self) -> Result<u64>;
    /// Set the release threshold.
    fn set_release_threshold(&self, bytes: u64) -> Result<()>;
    /// Give idle memory back to the system until the pool holds at most `keep` bytes of it
    /// (`cuMemPoolTrimTo`).
    fn trim_to(&self, keep: u64) -> Result<()>;
    /// The statistics.
    fn stats(&self) -> Result<PoolStats>;
    /// Set both high-water marks to the current values.
    fn reset_peaks(&self) -> Result<()>;
}
