//! Registered host memory on the host backend (HM1): memory the program owns, locked into RAM
//! (`mlock`, best effort) for the life of the registration, as `cuMemHostRegister` page-locks
//! it on a GPU system. Its allocation is pinned memory like any other, so copies through it
//! are asynchronous (CP2) and host access obeys MM3; the release unlocks the range and then
//! drops what owns the memory, once no operation holds it any more (MM2).

use std::any::Any;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::memory::{Allocation, HostMem, Release};
use crate::types::{MemKind, PinnedFlags};

/// Unlocks the range, then lets the owner go.
struct Unregister {
    locked: bool,
    owner: Mutex<Option<Box<dyn Any + Send + Sync>>>,
}

impl Release for Unregister {
    fn release(&self, addr: u64, bytes: usize) {
        if self.locked {
            // SAFETY: the range was locked by `register` and is still valid: the owner, which
            // keeps it so, is dropped only below.
            unsafe { libc::munlock(addr as usize as *const libc::c_void, bytes.max(1)) };
        }
        drop(self.owner.lock().take());
    }
}

/// Register `bytes` at `ptr` (see [`Backend::register_host`](crate::backend::contract::device::Backend::register_host)).
///
/// # Safety
/// `ptr..ptr + bytes` stays valid until the allocation's release ran.
pub(super) unsafe fn register(
    ptr: *mut u8,
    bytes: usize,
    device_id: u64,
    flags: PinnedFlags,
    owner: Box<dyn Any + Send + Sync>,
) -> Arc<Allocation> {
    // SAFETY: the range is valid (the caller's guarantee). A failure (RLIMIT_MEMLOCK) leaves
    // the pages pageable, which changes no semantics on the host backend.
    let locked = bytes > 0 && unsafe { libc::mlock(ptr as *const libc::c_void, bytes) } == 0;
    Allocation::new_host(
        ptr as usize as u64,
        bytes,
        MemKind::Registered,
        device_id,
        HostMem {
            portable: flags.portable,
            mapped: flags.mapped,
            device_view: 0,
        },
        Box::new(Unregister {
            locked,
            owner: Mutex::new(Some(owner)),
        }),
    )
}
