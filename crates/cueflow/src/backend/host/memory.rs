//! Host-backend memory: device memory and pinned memory are heap blocks; pinned blocks are also
//! locked into RAM (`mlock`, best effort) as page-locked memory is on a GPU system. The
//! stream-ordered pool (MM1) recycles blocks without host synchronization.
//!
//! Every block comes from the shared device-memory arena ([`super::isolate::arena`]) where the
//! system has one, so compiled kernels can run over it in a worker process (HK3); the two
//! functions [`block_alloc`] and [`block_free`] are the only place that knows.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::isolate::arena::Owner;
use crate::backend::contract::memory::{Allocation, HostMem, Release};
use crate::error::{Error, Result};
use crate::types::{MemKind, PoolStats};

/// Alignment of every heap block: a page, which also satisfies any element type and CUDA's 256
/// bytes. (Arena blocks of device memory are 256-byte aligned and end at their guard page.)
const ALIGN: usize = 4096;

fn layout(bytes: usize) -> Layout {
    Layout::from_size_align(bytes.max(1), ALIGN).expect("allocation size overflows a Layout")
}

/// A zeroed block of `bytes` bytes (at least one): from the arena where there is one (HK3;
/// device memory 256-byte aligned against a guard page, other kinds page-aligned), else from the
/// heap, aligned to [`ALIGN`]. Device memory is reachable by the kernels of device
/// `device_id` (and its peers) only, every other kind by every device's (A5).
pub(super) fn block_alloc(bytes: usize, kind: MemKind, device_id: u64) -> Option<*mut u8> {
    if let Some(arena) = super::isolate::arena::global() {
        let owner = match kind {
            MemKind::Device => Owner::Device(device_id),
            _ => Owner::Shared,
        };
        return arena.alloc(bytes, owner);
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc_zeroed(layout(bytes)) };
    (!ptr.is_null()).then_some(ptr)
}

/// Give back a block of `bytes` bytes from [`block_alloc`].
///
/// # Safety
/// `ptr` came from `block_alloc(bytes)`, is given back once, and nothing uses it any more.
pub(super) unsafe fn block_free(ptr: *mut u8, bytes: usize) {
    match super::isolate::arena::global() {
        Some(arena) if arena.contains(ptr as usize) => arena.free(ptr),
        // SAFETY: the caller's contract: the block came from `alloc_zeroed(layout(bytes))`.
        _ => unsafe { dealloc(ptr, layout(bytes)) },
    }
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
        // SAFETY: `ptr` came from `block_alloc(bytes)` and is released exactly once
        // (Allocation::drop calls `release` once, after every holder is gone).
        unsafe { block_free(ptr, bytes) };
    }
}

/// Allocate a zeroed block (see [`block_alloc`] for its alignment). `lock` pins it in RAM where
/// the system allows. Every host-backend allocation outside the stream-ordered pool comes from
/// here — device, pinned, portable and mapped memory (`host` says which kind of pinned memory
/// it is).
pub(super) fn host_alloc(
    bytes: usize,
    kind: MemKind,
    device_id: u64,
    lock: bool,
    host: HostMem,
) -> Result<Arc<Allocation>> {
    if bytes > isize::MAX as usize - ALIGN {
        return Err(Error::OutOfMemory {
            what: "host-backend memory",
            bytes,
        });
    }
    let Some(ptr) = block_alloc(bytes, kind, device_id) else {
        return Err(Error::OutOfMemory {
            what: "host-backend memory",
            bytes,
        });
    };
    // SAFETY: ptr..ptr+bytes is a live allocation we own. Failure (RLIMIT_MEMLOCK) only means
    // the pages stay pageable, which changes no semantics on the host backend.
    let locked = lock && unsafe { libc::mlock(ptr as *const libc::c_void, bytes.max(1)) } == 0;
    let release = Box::new(Dealloc { locked });
    Ok(if kind.is_host() {
        Allocation::new_host(ptr as usize as u64, bytes, kind, device_id, host, release)
    } else {
        Allocation::new(ptr as usize as u64, bytes, kind, device_id, release)
    })
}

/// The host backend's graph memory (GR12): the bytes of the blocks that instantiations
/// planned (`graph::plan_memory`) and that are still allocated, and their high-water mark.
/// Each instantiation holds its blocks from when it is made until it and every launch and
/// buffer that uses them are gone, so the bytes used and reserved are the same.
#[derive(Default)]
pub(super) struct GraphMemCount {
    now: AtomicU64,
    high: AtomicU64,
}

impl GraphMemCount {
    fn add(&self, bytes: u64) {
        let now = self.now.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.high.fetch_max(now, Ordering::Relaxed);
    }

    /// The figures as CUDA's graph memory attributes give them (used = reserved here).
    pub fn stats(&self) -> PoolStats {
        let (now, high) = (
            self.now.load(Ordering::Relaxed),
            self.high.load(Ordering::Relaxed),
        );
        PoolStats {
            reserved: now,
            reserved_high: high,
            used: now,
            used_high: high,
        }
    }

    /// The high-water marks start again from what is held now.
    pub fn reset_high(&self) {
        self.high
            .store(self.now.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Frees a graph block and takes its bytes off the count.
struct GraphBlock {
    count: Arc<GraphMemCount>,
}

impl Release for GraphBlock {
    fn release(&self, addr: u64, bytes: usize) {
        Dealloc { locked: false }.release(addr, bytes);
        self.count.now.fetch_sub(bytes as u64, Ordering::Relaxed);
    }
}

/// A block of graph memory for an instantiation (GR12), counted in `count` while allocated.
pub(super) fn graph_block(
    bytes: usize,
    device_id: u64,
    count: &Arc<GraphMemCount>,
) -> Result<Arc<Allocation>> {
    let refused = Error::OutOfMemory {
        what: "host-backend graph memory",
        bytes,
    };
    if bytes > isize::MAX as usize - ALIGN {
        return Err(refused);
    }
    let ptr = block_alloc(bytes, MemKind::Device, device_id).ok_or(refused)?;
    count.add(bytes as u64);
    let release = Box::new(GraphBlock {
        count: count.clone(),
    });
    Ok(Allocation::new(
        ptr as usize as u64,
        bytes,
        MemKind::Device,
        device_id,
        release,
    ))
}

/// The device's stream-ordered memory pool (MM1, HM5, RL3).
///
/// Design (issue 16 item 5; the earlier pool reused a block only for the same size and never
/// gave memory back, so 2,000 distinct sizes with 2 MiB live grew the process to 2.1 GB):
///
/// * **P1 Lifetime.** A block handed out goes back to the pool when the last reference to its
///   [`Allocation`] drops: the program's handle (freed with `free_async`, or dropped) and every
///   operation that uses it, on any stream, have let go, so nothing can touch it (MM2). No
///   host synchronization is involved (MM1).
/// * **P2 Size classes.** A request is rounded up to a class: multiples of 256 bytes up to
///   4 KiB, then eight classes per power of two (at most 12.5 % rounding).
/// * **P3 Reuse across sizes.** An allocation takes the smallest idle block of at least its
///   class and at most 5/4 of it (best fit in a map ordered by size), so blocks freed for one
///   size serve nearby sizes instead of piling up per size. Blocks are not split: a block
///   serves one allocation at a time, which keeps every block one system allocation (one
///   `dealloc`, no coalescing, no fragmentation inside the pool).
/// * **P4 Bounded reserve.** Before it asks the system for a new block, the pool gives back
///   idle blocks, largest first, until what it holds (`reserved`, counting the new block) is
///   at most twice the bytes the program has live (requested and not yet back, P1). Frees do
///   not grow `reserved`, so it never exceeds twice the peak of live bytes, whatever sizes
///   come and go between synchronizations.
/// * **P5 Release threshold (HM5).** At a stream or device synchronization, idle blocks above
///   the release threshold (CUDA's default: 0) go back to the system, largest first.
/// * **P6 Out of memory.** When the system refuses a block, the pool gives back every idle
///   block and tries once more before it reports [`Error::OutOfMemory`]; synchronous
///   allocations of the device do the same ([`Pool::trim`]), so freeing everything makes
///   every allocation possible again.
pub(crate) struct Pool {
    me: Weak<Pool>,
    device_id: u64,
    /// Bytes of idle blocks kept at a synchronization (P5).
    release_threshold: AtomicU64,
    inner: Mutex<PoolInner>,
    /// Pools the program created on the device (the default pool's list): a synchronization
    /// of the device or of a stream releases their idle memory too (P5).
    adopted: Mutex<Vec<Weak<Pool>>>,
}

#[derive(Default)]
struct PoolInner {
    /// Idle blocks (addresses) by capacity (P3).
    idle: BTreeMap<usize, Vec<u64>>,
    idle_bytes: usize,
    /// Bytes currently owned by the pool: blocks handed out and idle ones.
    reserved: usize,
    /// Bytes requested by the blocks handed out and not back yet (P4).
    live: usize,
    /// High-water marks of `reserved` and of the bytes handed out (`reserved - idle_bytes`).
    reserved_high: usize,
    used_high: usize,
}

impl PoolInner {
    /// Bytes of blocks handed out.
    pub(super) fn used(&self) -> usize {
        self.reserved - self.idle_bytes
    }

    /// Raise the high-water marks to the current values.
    fn note_highs(&mut self) {
        self.reserved_high = self.reserved_high.max(self.reserved);
        self.used_high = self.used_high.max(self.used());
    }

    /// Take the idle blocks to give back until `over(self)` is false, largest first (P4, P5).
    fn evict(&mut self, out: &mut Vec<(u64, usize)>, over: impl Fn(&PoolInner) -> bool) {
        while over(self) {
            let Some(mut last) = self.idle.last_entry() else {
                return;
            };
            let cap = *last.key();
            let addr = last.get_mut().pop().expect("no empty lists are kept");
            if last.get().is_empty() {
                last.remove();
            }
            self.idle_bytes -= cap;
            self.reserved -= cap;
            out.push((addr, cap));
        }
    }
}

/// Give blocks back to the system (outside the pool's lock).
fn dealloc_all(blocks: Vec<(u64, usize)>) {
    for (addr, cap) in blocks {
        Dealloc { locked: false }.release(addr, cap);
    }
}

/// Return a pool block to the pool instead of the system (P1).
struct ToPool {
    pool: Weak<Pool>,
    capacity: usize,
}

impl Release for ToPool {
    fn release(&self, addr: u64, bytes: usize) {
        match self.pool.upgrade() {
            Some(p) => {
                let mut inner = p.inner.lock();
                inner.live -= bytes;
                inner.idle_bytes += self.capacity;
                inner.idle.entry(self.capacity).or_default().push(addr);
            }
            None => Dealloc { locked: false }.release(addr, self.capacity),
        }
    }
}

/// Size class of a pool block (P2), or `None` when the size cannot be allocated at all.
pub(super) fn class(bytes: usize) -> Option<usize> {
    let n = bytes.max(1);
    // Eight classes between each power of two and the next.
    let step = if n <= 4096 {
        256
    } else {
        (1usize << (usize::BITS - 1 - n.leading_zeros())) / 8
    };
    n.checked_next_multiple_of(step)
        .filter(|&r| r <= isize::MAX as usize - ALIGN)
}

impl Pool {
    pub fn new(device_id: u64) -> Arc<Pool> {
        Arc::new_cyclic(|me| Pool {
            me: me.clone(),
            device_id,
            release_threshold: AtomicU64::new(0),
            inner: Mutex::new(PoolInner::default()),
            adopted: Mutex::new(Vec::new()),
        })
    }

    pub fn alloc(&self, bytes: usize) -> Result<Arc<Allocation>> {
        let oom = Error::OutOfMemory {
            what: "stream-ordered pool",
            bytes,
        };
        let cap = class(bytes).ok_or(oom.clone())?;
        let mut evicted = Vec::new();
        let reused = {
            let mut inner = self.inner.lock();
            // P3: the best fit among idle blocks of this class up to 5/4 of it.
            let fit = inner
                .idle
                .range(cap..=cap + cap / 4)
                .next()
                .map(|(&c, _)| c);
            match fit {
                Some(c) => {
                    let list = inner.idle.get_mut(&c).expect("found above");
                    let addr = list.pop().expect("no empty lists are kept");
                    if list.is_empty() {
                        inner.idle.remove(&c);
                    }
                    inner.idle_bytes -= c;
                    inner.live += bytes;
                    inner.note_highs();
                    Some((addr, c))
                }
                None => {
                    // P4: room for the new block within twice the live bytes.
                    let live = inner.live + bytes;
                    inner.evict(&mut evicted, |i| i.reserved + cap > 2 * live);
                    None
                }
            }
        };
        dealloc_all(evicted);
        let (addr, cap) = match reused {
            Some((addr, c)) => {
                // SAFETY: an idle block is `c >= bytes` bytes that nothing references (P1).
                unsafe { (addr as usize as *mut u8).write_bytes(0, bytes) };
                (addr, c)
            }
            None => {
                let ptr = match self.system_alloc(cap) {
                    Some(p) => p,
                    None => {
                        // P6: give back every idle block and try once more.
                        self.trim(0);
                        self.system_alloc(cap).ok_or(oom)?
                    }
                };
                let mut inner = self.inner.lock();
                inner.reserved += cap;
                inner.live += bytes;
                inner.note_highs();
                (ptr as usize as u64, cap)
            }
        };
        Ok(Allocation::new(
            addr,
            bytes,
            MemKind::Device,
            self.device_id,
            Box::new(ToPool {
                pool: self.me.clone(),
                capacity: cap,
            }),
        ))
    }

    fn system_alloc(&self, cap: usize) -> Option<*mut u8> {
        block_alloc(cap, MemKind::Device, self.device_id)
    }

    /// Take a freed allocation: it comes back to the pool once nothing else holds it (P1).
    pub fn retire(&self, alloc: Arc<Allocation>) {
        drop(alloc);
    }

    /// Give idle blocks back to the system until at most `keep` bytes of them are left (P5,
    /// P6).
    pub fn trim(&self, keep: usize) {
        let mut evicted = Vec::new();
        self.inner
            .lock()
            .evict(&mut evicted, |i| i.idle_bytes > keep);
        dealloc_all(evicted);
    }

    /// A synchronization happened: idle memory above the release threshold goes back (P5),
    /// in this pool and in the pools adopted by it.
    pub fn synchronized(&self) {
        let keep = self.release_threshold.load(Ordering::Relaxed);
        self.trim(usize::try_from(keep).unwrap_or(usize::MAX));
        let adopted: Vec<Arc<Pool>> = {
            let mut list = self.adopted.lock();
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for p in adopted {
            p.synchronized();
        }
    }

    /// Have synchronizations of this (the default) pool's device release `other`'s idle
    /// memory too (P5). Pools dropped since leave the list here as well as at a
    /// synchronization, so a program that creates and drops pools without synchronizing keeps
    /// a bounded list (issue 27: 10,000 cycles left 10,000 dead entries).
    pub fn adopt(&self, other: &Arc<Pool>) {
        let mut list = self.adopted.lock();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(other));
    }

    /// Pools adopted and not forgotten yet (a test's view of [`adopt`](Self::adopt)).
    #[cfg(test)]
    fn adopted_len(&self) -> usize {
        self.adopted.lock().len()
    }

    /// Bytes the pool holds from the system.
    pub fn reserved(&self) -> usize {
        self.inner.lock().reserved
    }

    /// The release threshold (P5).
    pub fn threshold(&self) -> u64 {
        self.release_threshold.load(Ordering::Relaxed)
    }

    /// Set the release threshold (P5).
    pub fn set_threshold(&self, bytes: u64) {
        self.release_threshold.store(bytes, Ordering::Relaxed);
    }

    /// Reserved, reserved high, used, used high.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let i = self.inner.lock();
        (i.reserved, i.reserved_high, i.used(), i.used_high)
    }

    /// Set the high-water marks to the current values.
    pub fn reset_highs(&self) {
        let mut i = self.inner.lock();
        i.reserved_high = i.reserved;
        i.used_high = i.used();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let inner = std::mem::take(&mut *self.inner.lock());
        for (cap, addrs) in inner.idle {
            for a in addrs {
                Dealloc { locked: false }.release(a, cap);
            }
        }
        // Blocks still handed out fall back to plain deallocation when their last holder
        // drops (ToPool finds the pool gone).
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_by_at_most_an_eighth() {
        assert_eq!(class(0), Some(256));
        assert_eq!(class(4096), Some(4096));
        assert_eq!(class(4097), Some(4096 + 512));
        for n in [5000usize, 65_537, 1 << 20, (1 << 20) + 1, 123_456_789] {
            let c = class(n).unwrap();
            assert!(c >= n && c - n <= n / 8 + 256, "{n} -> {c}");
        }
        assert_eq!(class(usize::MAX), None);
    }

    #[test]
    fn reuse_across_sizes_and_a_bounded_reserve() {
        let pool = Pool::new(0);
        let (mut peak_live, mut live, mut max_reserved) = (0usize, 0usize, 0usize);
        let mut held: std::collections::VecDeque<Arc<Allocation>> = Default::default();
        let mut x = 12345u64;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bytes = 1 + (x >> 33) as usize % (256 << 10);
            let a = pool.alloc(bytes).unwrap();
            live += bytes;
            peak_live = peak_live.max(live);
            held.push_back(a);
            if held.len() > 8 {
                live -= held.front().unwrap().bytes;
                pool.retire(held.pop_front().unwrap());
            }
            max_reserved = max_reserved.max(pool.reserved());
        }
        assert!(
            max_reserved <= 2 * peak_live,
            "reserved {max_reserved} > 2 x peak live {peak_live}"
        );
        drop(held);
        pool.synchronized();
        assert_eq!(pool.reserved(), 0, "threshold 0: everything idle goes back");
    }

    /// Issue 27: pools created and dropped 10,000 times with no synchronization, each with a
    /// block allocated from it (given back after the pool went, or before), leave the default
    /// pool's list of adopted pools bounded, and every block goes back to the system.
    #[test]
    fn created_pools_do_not_pile_up_without_synchronization() {
        let default = Pool::new(0);
        for i in 0..10_000 {
            let pool = Pool::new(0);
            default.adopt(&pool);
            let block = pool.alloc(1000 + i % 4096).unwrap();
            if i % 2 == 0 {
                drop(pool); // the block outlives its pool: it goes to the system
                drop(block);
            } else {
                drop(block);
                drop(pool);
            }
        }
        assert!(
            default.adopted_len() <= 1,
            "{} dropped pools still listed",
            default.adopted_len()
        );
    }
}
