//! Registered host memory and memory pools as core sees them (HM1, HM5): the process-wide
//! registry that refuses overlapping registrations (ER3), and the device's calls that make
//! registrations and pools.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::pool::PoolCore;
use crate::backend::contract::memory::Allocation;
use crate::core::devices::device::DeviceCore;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::error::{Error, Result};
use crate::types::PinnedFlags;

/// Page-locked ranges of the process (HM1): registrations, and the memory of pinned and
/// managed allocations, which is page-locked by its allocation (`cudaHostRegister` of it
/// fails with `cudaErrorHostMemoryAlreadyRegistered`). CUDA registrations are per process,
/// whatever the device, so this is too. Entries never overlap.
static LOCKED: Mutex<Locked> = Mutex::new(Locked {
    ranges: BTreeMap::new(),
    next_id: 0,
    prune_at: 64,
});

struct Locked {
    /// Start address → the range.
    ranges: BTreeMap<usize, Range>,
    next_id: u64,
    /// Entries at which dead allocations' entries are dropped next.
    prune_at: usize,
}

struct Range {
    end: usize,
    /// Tells a claim from the one that replaced it at the same start.
    id: u64,
    /// The allocation that page-locks it, or `None` for a registration. An allocation's
    /// entry goes when it is found dead (its memory may be reused from the moment its
    /// release ran, before anything of it could remove the entry).
    alloc: Option<Weak<Allocation>>,
}

impl Range {
    fn live(&self) -> bool {
        self.alloc.as_ref().is_none_or(|a| a.strong_count() > 0)
    }
}

impl Locked {
    /// Starts of the entries overlapping `start..end` (entries do not overlap, so those
    /// before `end` whose end passes `start`, going down).
    fn overlapping(&self, start: usize, end: usize) -> Vec<usize> {
        self.ranges
            .range(..end)
            .rev()
            .take_while(|(_, r)| r.end > start)
            .map(|(&s, _)| s)
            .collect()
    }

    fn insert(&mut self, start: usize, end: usize, alloc: Option<Weak<Allocation>>) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.ranges.insert(start, Range { end, id, alloc });
        if self.ranges.len() >= self.prune_at {
            self.ranges.retain(|_, r| r.live());
            self.prune_at = (2 * self.ranges.len()).max(64);
        }
        id
    }
}

/// One registration's range; dropping it (when the registration's release ran) frees the
/// range, unless a newer claim replaced it.
pub(crate) struct Claim {
    start: usize,
    id: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut locked = LOCKED.lock();
        if locked
            .ranges
            .get(&self.start)
            .is_some_and(|r| r.id == self.id)
        {
            locked.ranges.remove(&self.start);
        }
    }
}

/// Claim `start..start + bytes` for a registration, or refuse it when any byte is page-locked
/// already: registered, or pinned or managed memory (HM1, ER3). A registration in the way may
/// be ending on the backend's freeing thread (a release inside another call is handed on
/// there): then `wait_for_ends` waits for such ends, once, and the claim is tried again.
fn claim(start: usize, bytes: usize, wait_for_ends: impl FnOnce()) -> Result<Claim> {
    let end = start
        .checked_add(bytes)
        .ok_or_else(|| Error::NotPermitted {
            rule: "HM1",
            what: format!("registering {bytes} bytes at {start:#x}: the range wraps around"),
        })?;
    let mut wait_for_ends = Some(wait_for_ends);
    loop {
        let mut locked = LOCKED.lock();
        let Some((s, registered)) = first_locked(&mut locked, start, end) else {
            let id = locked.insert(start, end, None);
            return Ok(Claim { start, id });
        };
        if registered {
            if let Some(wait) = wait_for_ends.take() {
                drop(locked);
                wait();
                continue;
            }
        }
        let by = if registered {
            "registered already (unregister them first)"
        } else {
            "page-locked already by a pinned or managed allocation (a PinnedBuffer or \
             ManagedBuffer needs no registration)"
        };
        return Err(Error::NotPermitted {
            rule: "HM1",
            what: format!(
                "registering host memory {start:#x}..{end:#x}: bytes {:#x}..{:#x} are {by}",
                s.max(start),
                locked.ranges[&s].end.min(end)
            ),
        });
    }
}

/// The first live page-locked range overlapping `start..end` (its start, and whether it is a
/// registration rather than an allocation); dead allocations' ranges met on the way go.
fn first_locked(locked: &mut Locked, start: usize, end: usize) -> Option<(usize, bool)> {
    for s in locked.overlapping(start, end) {
        let r = &locked.ranges[&s];
        if !r.live() {
            locked.ranges.remove(&s); // a dead allocation's: its bytes are free
            continue;
        }
        return Some((s, r.alloc.is_none()));
    }
    None
}

/// What a registration's backend drops once the registration ended: the claim, then the owner
/// (tuple fields drop in order). Once the owner gave the memory back to the allocator, a new
/// allocation at the same address may be registered at once (another thread's, while this
/// drop runs on an engine thread): its bytes must be unclaimed by then. (The owner went
/// first before: the host fuzzer's two-device program failed one `RegisteredBuffer::register`
/// of a fresh `Vec` with "registered already".)
fn with_claim(claim: Claim, owner: Box<dyn Any + Send + Sync>) -> Box<dyn Any + Send + Sync> {
    Box::new((claim, owner))
}

/// Run `f`, which drops a memory handle the program held: a release it causes may wait for
/// the device right here, as the program's own `cudaHostUnregister` would (HM1).
pub(crate) fn dropping_own_handle(f: impl FnOnce()) {
    crate::backend::contract::memory::dropping_own_handle(f)
}

/// Note that pinned or managed allocation `alloc` page-locks its bytes (HM1): registering
/// any of them is refused while it lives. Entries it overlaps are stale by construction (an
/// allocation is fresh memory).
pub(crate) fn note_locked(alloc: &Arc<Allocation>) {
    let start = alloc.addr as usize;
    let end = start.saturating_add(alloc.bytes.max(1));
    let mut locked = LOCKED.lock();
    for s in locked.overlapping(start, end) {
        locked.ranges.remove(&s);
    }
    locked.insert(start, end, Some(Arc::downgrade(alloc)));
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
        let claim = claim(ptr as usize, bytes, || {
            // Not inside a host function: what it would wait for may be queued behind it.
            if check_not_in_host_fn("RegisteredBuffer::register").is_ok() {
                // Every backend's: a CUDA registration may be ending where a host one claims.
                crate::backend::flush_releases();
            }
        })?;
        let owner = with_claim(claim, owner);
        let flags = flags.as_applied_by(self.properties());
        // SAFETY: forwarded from the caller.
        unsafe { self.backend.register_host(ptr, bytes, flags, owner) }
    }

    /// The device's default stream-ordered pool (HM5).
    pub fn default_pool(&self) -> PoolCore {
        PoolCore::new(self.backend.default_pool())
    }

    /// A new pool of the device's memory (HM5).
    pub fn create_pool(&self) -> Result<PoolCore> {
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        self.backend.create_pool().map(PoolCore::new)
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
        alloc.kind == crate::types::MemKind::Device
            && PEER_KERNELS.lock().contains(&(self.id, alloc.device_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::MemKind;

    /// Entries of dead allocations go: found dead by a registration over their bytes, and
    /// pruned as entries pile up, so 10,000 pinned allocations at ever new addresses leave a
    /// bounded registry; a live allocation's bytes stay refused.
    #[test]
    fn dead_allocations_leave_the_registry() {
        let base = 0x7000_0000_0000usize;
        let live = Allocation::borrowed(base as u64, 4096, MemKind::Pinned, 0);
        note_locked(&live);
        for i in 1..10_000usize {
            let a = Allocation::borrowed((base + i * 8192) as u64, 4096, MemKind::Pinned, 0);
            note_locked(&a);
        }
        assert!(LOCKED.lock().ranges.len() < 200, "dead entries piled up");
        assert!(
            claim(base + 4000, 200, || panic!("no registration is in the way")).is_err(),
            "a live allocation's bytes"
        );
        let freed = claim(base + 8192, 4096, || {}).expect("a dead allocation's bytes are free");
        drop(freed);
        drop(live);
        drop(claim(base, 4096, || {}).expect("free once the allocation is gone"));
    }

    /// A registration's bytes are unclaimed before its owner gives them back to the allocator:
    /// the owner's drop finds them free to claim.
    #[test]
    fn the_claim_goes_before_the_owner() {
        struct Owner(usize);
        impl Drop for Owner {
            fn drop(&mut self) {
                let c = claim(self.0, 64, || {});
                assert!(
                    c.is_ok(),
                    "the owner's bytes were still claimed when it dropped"
                );
            }
        }
        let base = 0x7200_0000_0000usize;
        let done = with_claim(claim(base, 64, || {}).unwrap(), Box::new(Owner(base)));
        drop(done);
    }

    /// A registration in the way may be ending elsewhere (HM1: a release inside another call
    /// is handed to the backend's freeing thread): the claim waits for such ends once and
    /// tries again, and is refused if the registration is still there.
    #[test]
    fn a_claim_waits_once_for_registrations_that_are_ending() {
        let base = 0x7100_0000_0000usize;
        let ending = std::cell::Cell::new(Some(claim(base, 4096, || {}).unwrap()));
        let waits = std::cell::Cell::new(0);
        let wait = || {
            waits.set(waits.get() + 1);
            drop(ending.take()); // Its end happened meanwhile.
        };
        let second = claim(base + 100, 100, wait).expect("free once the first one ended");
        assert_eq!(waits.get(), 1);
        let third = claim(base, 200, || waits.set(waits.get() + 1));
        assert!(
            third.is_err(),
            "a registration that stays is refused after one wait"
        );
        assert_eq!(waits.get(), 2);
        drop(second);
    }
}
