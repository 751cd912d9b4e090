//! The host pool as the contract's [`BackendPool`] (HM5): the default pool of a host device
//! and the pools a program creates share one implementation ([`Pool`]); a pool created on the
//! device is adopted by its default pool, so synchronizations release its idle memory too.

use std::sync::Arc;

use super::memory::Pool;
use crate::backend::contract::device::BackendStream;
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::pool::BackendPool;
use crate::error::Result;
use crate::types::PoolStats;

impl BackendPool for Pool {
    fn alloc_on(&self, _stream: &dyn BackendStream, bytes: usize) -> Result<Arc<Allocation>> {
        // A host pool hands a block out only once nothing holds it (P1), whichever stream
        // freed it, so the stream adds no condition.
        self.alloc(bytes)
    }

    fn release_threshold(&self) -> Result<u64> {
        Ok(self.threshold())
    }

    fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.set_threshold(bytes);
        Ok(())
    }

    fn trim_to(&self, keep: u64) -> Result<()> {
        self.trim(usize::try_from(keep).unwrap_or(usize::MAX));
        Ok(())
    }

    fn stats(&self) -> Result<PoolStats> {
        let (reserved, reserved_high, used, used_high) = self.counts();
        Ok(PoolStats {
            reserved: reserved as u64,
            reserved_high: reserved_high as u64,
            used: used as u64,
            used_high: used_high as u64,
        })
    }

    fn reset_peaks(&self) -> Result<()> {
        self.reset_highs();
        Ok(())
    }
}
