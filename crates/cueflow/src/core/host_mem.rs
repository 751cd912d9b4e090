//! Registered host memory and memory pools as core sees them (HM1, HM5): the process-wide
//! registry that refuses overlapping registrations (ER3), and the device's calls that make
//! registrations and pools.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::device::DeviceCore;
use super::{Allocation, PinnedFlags};
use crate::backend::contract::pool::BackendPool;
use crate::error::{Error, Result};

/// Registered ranges of the process: start address → end address (HM1). CUDA registrations
/// are per process, whatever the device, so this is too.
static REGISTERED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// One claimed range; dropping it (when the registration's release ran) frees the range.
pub(crate) struct Claim {
    start: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        REGISTERED.lock().remove(&self.start);
    }
}

/// Claim `start..start + bytes`, or refuse it when any byte is registered already (HM1, ER3).
fn claim(start: usize, bytes: usize) -> Result<Claim> {
    let end = start
        .checked_add(bytes)
        .ok_or_else(|| Error::NotPermitted {
            rule: "HM1",
            what: format!("registering {bytes} bytes at {start:#x}: the range wraps around"),
        })?;
    let mut map = REGISTERED.lock();
    // The last registration starting before `end` is the only one that can overlap.
    if let Some((&s, &e)) = map.range(..end).next_back() {
        if e > start {
            return Err(Error::NotPermitted {
                rule: "HM1",
                what: format!(
                    "registering host memory {start:#x}..{end:#x}: bytes {:#x}..{:#x} are \
                     registered already (unregister them first)",
                    s.max(start),
                    e.min(end)
                ),
            });
        }
    }
    map.insert(start, end);
    Ok(Claim { start })
}

impl DeviceCore {
    /// Page-lock `bytes` at `ptr` for the life of the returned allocation (HM1), portable and
    /// mapped as `flags` say (portable whatever they say on a device with unified addressing,
    /// HM2); `owner` is dropped after the registration ended.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` stays valid, and nobody but the allocation's holders touches it,
    /// until the allocation's release ran (the owner's drop).
    pub unsafe fn register_host(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: PinnedFlags,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<Allocation>> {
        if bytes == 0 {
            return Err(Error::NotPermitted {
                rule: "HM1",
                what: "registering an empty range (cudaHostRegister refuses 0 bytes)".into(),
            });
        }
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        let claim = claim(ptr as usize, bytes)?;
        // The claim goes with the owner: released once the registration ended.
        let owner: Box<dyn Any + Send + Sync> = Box::new((owner, claim));
        let flags = flags.as_applied_by(self.properties());
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.register_host(ptr, bytes, flags, owner) }
    }

    /// The device's default stream-ordered pool (HM5).
    pub fn default_pool(&self) -> Arc<dyn BackendPool> {
        self.backend.default_pool()
    }

    /// A new pool of the device's memory (HM5).
    pub fn create_pool(&self) -> Result<Arc<dyn BackendPool>> {
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        self.backend.create_pool()
    }
}

/// Device pairs `(from, to)` whose kernels the program let reach each other's memory with
/// `enable_peer_access` (HM6), by device id. Both directions are entered, as the call enables
/// both.
static PEER_KERNELS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

impl DeviceCore {
    /// Let kernels of this device and of `other` use each other's memory (HM6); called after
    /// the backend enabled the direct path.
    pub fn grant_peer_kernels(&self, other: &DeviceCore) {
        let mut list = PEER_KERNELS.lock();
        for pair in [(self.id, other.id), (other.id, self.id)] {
            if !list.contains(&pair) {
                list.push(pair);
            }
        }
    }

    /// Revoke [`grant_peer_kernels`](Self::grant_peer_kernels) in both directions (HM6).
    pub fn revoke_peer_kernels(&self, other: &DeviceCore) {
        PEER_KERNELS
            .lock()
            .retain(|&(a, b)| !((a, b) == (self.id, other.id) || (a, b) == (other.id, self.id)));
    }

    /// True if kernels of this device may use `alloc`, memory of another device, because the
    /// program enabled peer access between the two (HM6).
    pub fn peer_enabled(&self, alloc: &Allocation) -> bool {
        alloc.kind == super::MemKind::Device
            && PEER_KERNELS.lock().contains(&(self.id, alloc.device_id))
    }
}
