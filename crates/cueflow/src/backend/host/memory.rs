//! Host-backend memory: device memory and pinned memory are heap blocks; pinned blocks are also
//! locked into RAM (`mlock`, best effort) as page-locked memory is on a GPU system. The
//! stream-ordered pool (MM1) recycles blocks without host synchronization.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::backend::contract::memory::{Allocation, MemKind, Release};
use crate::error::{Error, Result};

/// Alignment of every block: a page, which also satisfies any element type and CUDA's 256 bytes.
const ALIGN: usize = 4096;

fn layout(bytes: usize) -> Layout {
    Layout::from_size_align(bytes.max(1), ALIGN).expect("allocation size overflows a Layout")
}

struct Dealloc {
    locked: bool,
}

impl Release for Dealloc {
    fn release(&self, addr: u64, bytes: usize) {
        let ptr = addr as usize as *mut u8;
        if self.locked {
            // SAFETY: the range was locked by `host_alloc` and is still mapped.
            unsafe { libc::munlock(ptr as *const libc::c_void, bytes.max(1)) };
        }
        // SAFETY: `ptr` came from `alloc_zeroed(layout(bytes))` and is released exactly once
        // (Allocation::drop calls `release` once, after every holder is gone).
        unsafe { dealloc(ptr, layout(bytes)) };
    }
}

/// Allocate a zeroed, page-aligned block. `lock` pins it in RAM where the system allows.
pub(super) fn host_alloc(
    bytes: usize,
    kind: MemKind,
    device_id: u64,
    lock: bool,
) -> Result<Arc<Allocation>> {
    if bytes > isize::MAX as usize - ALIGN {
        return Err(Error::OutOfMemory {
            what: "host-backend memory",
            bytes,
        });
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc_zeroed(layout(bytes)) };
    if ptr.is_null() {
        return Err(Error::OutOfMemory {
            what: "host-backend memory",
            bytes,
        });
    }
    // SAFETY: ptr..ptr+bytes is a live allocation we own. Failure (RLIMIT_MEMLOCK) only means
    // the pages stay pageable, which changes no semantics on the host backend.
    let locked = lock && unsafe { libc::mlock(ptr as *const libc::c_void, bytes.max(1)) } == 0;
    Ok(Allocation::new(
        ptr as usize as u64,
        bytes,
        kind,
        device_id,
        Box::new(Dealloc { locked }),
    ))
}

/// The device's stream-ordered memory pool (MM1).
///
/// A freed block waits in `retired` until its `Arc` is held by the pool alone, which means every
/// operation that used it, on any stream, has completed and dropped its reference (MM2). It is
/// then handed to the next allocation of the same size, with no host synchronization. Blocks go
/// back to the system only when the device is dropped.
pub(crate) struct Pool {
    me: Weak<Pool>,
    device_id: u64,
    inner: Mutex<PoolInner>,
}

#[derive(Default)]
struct PoolInner {
    /// Freed blocks that may still be in use, by rounded size.
    retired: HashMap<usize, Vec<Arc<Allocation>>>,
    /// Idle blocks (address) by rounded size.
    idle: HashMap<usize, Vec<u64>>,
    /// Bytes currently owned by the pool (live, retired or idle).
    reserved: usize,
}

/// Return a pool block to the idle list instead of the system.
struct ToPool {
    pool: Weak<Pool>,
    rounded: usize,
}

impl Release for ToPool {
    fn release(&self, addr: u64, _bytes: usize) {
        match self.pool.upgrade() {
            Some(p) => p
                .inner
                .lock()
                .idle
                .entry(self.rounded)
                .or_default()
                .push(addr),
            None => Dealloc { locked: false }.release(addr, self.rounded),
        }
    }
}

/// Size class of a pool block, or `None` when the size cannot be allocated at all.
fn rounded(bytes: usize) -> Option<usize> {
    bytes
        .max(1)
        .checked_next_multiple_of(256)
        .filter(|&r| r <= isize::MAX as usize - ALIGN)
}

impl Pool {
    pub fn new(device_id: u64) -> Arc<Pool> {
        Arc::new_cyclic(|me| Pool {
            me: me.clone(),
            device_id,
            inner: Mutex::new(PoolInner::default()),
        })
    }

    pub fn alloc(&self, bytes: usize) -> Result<Arc<Allocation>> {
        let size = rounded(bytes).ok_or(Error::OutOfMemory {
            what: "stream-ordered pool",
            bytes,
        })?;
        let addr = {
            let mut inner = self.inner.lock();
            // Blocks whose holders are all gone become idle now.
            if let Some(list) = inner.retired.get_mut(&size) {
                let mut i = 0;
                let mut freed = Vec::new();
                while i < list.len() {
                    if Arc::strong_count(&list[i]) == 1 {
                        freed.push(list.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
                drop(inner);
                drop(freed); // Runs ToPool::release, which takes the lock.
                inner = self.inner.lock();
            }
            inner.idle.get_mut(&size).and_then(|v| v.pop())
        };
        let addr = match addr {
            Some(a) => {
                // SAFETY: an idle block is `size` bytes that nothing references any more.
                unsafe { (a as usize as *mut u8).write_bytes(0, bytes) };
                a
            }
            None => {
                // SAFETY: non-zero size layout.
                let ptr = unsafe { alloc_zeroed(layout(size)) };
                if ptr.is_null() {
                    return Err(Error::OutOfMemory {
                        what: "stream-ordered pool",
                        bytes,
                    });
                }
                self.inner.lock().reserved += size;
                ptr as usize as u64
            }
        };
        Ok(Allocation::new(
            addr,
            bytes,
            MemKind::Device,
            self.device_id,
            Box::new(ToPool {
                pool: self.me.clone(),
                rounded: size,
            }),
        ))
    }

    /// Take a freed allocation; it becomes reusable once nothing else holds it.
    pub fn retire(&self, alloc: Arc<Allocation>) {
        // Every pool block's size was rounded successfully when it was allocated.
        let size = rounded(alloc.bytes).unwrap_or(usize::MAX);
        self.inner
            .lock()
            .retired
            .entry(size)
            .or_default()
            .push(alloc);
    }

    /// Bytes the pool holds from the system.
    pub fn reserved(&self) -> usize {
        self.inner.lock().reserved
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let inner = std::mem::take(&mut *self.inner.lock());
        for (size, addrs) in inner.idle {
            for a in addrs {
                Dealloc { locked: false }.release(a, size);
            }
        }
        // Retired blocks still referenced elsewhere fall back to plain deallocation when their
        // last holder drops (ToPool finds the pool gone).
        drop(inner.retired);
    }
}
