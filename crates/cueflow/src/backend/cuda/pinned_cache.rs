//! Idle pinned blocks kept for the next allocation of their size class (RL3): a pageable copy
//! stages through pinned memory of its own size, and programs drop and allocate pinned buffers
//! in loops, where `cuMemHostAlloc` costs milliseconds per GiB. The cache is bounded: past
//! its limit of idle bytes the oldest blocks go back to the system (the caller frees them once
//! the device is idle), so allocating many distinct sizes does not page-lock more and more of
//! the machine. The newest block stays even alone above the bound (a program that
//! frees and allocates one large buffer each step keeps reusing it), unless the bound is 0.
//! Pure bookkeeping: no driver call is made here.

use std::collections::VecDeque;

use parking_lot::Mutex;

/// One idle `cuMemHostAlloc` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Block {
    pub addr: u64,
    /// Its size class (bytes allocated).
    pub cap: usize,
    /// Its `cuMemHostAlloc` flags.
    pub flags: u32,
}

#[derive(Default)]
struct Blocks {
    /// Oldest first.
    idle: VecDeque<Block>,
    bytes: u64,
}

pub(super) struct PinnedCache {
    blocks: Mutex<Blocks>,
    /// Idle bytes kept at most (`u64::MAX`: unbounded).
    limit: u64,
}

impl PinnedCache {
    pub fn new(limit: u64) -> PinnedCache {
        PinnedCache {
            blocks: Mutex::new(Blocks::default()),
            limit,
        }
    }

    /// An idle block of exactly this class and flags, taken out of the cache.
    pub fn take(&self, cap: usize, flags: u32) -> Option<u64> {
        let mut b = self.blocks.lock();
        // Newest first: the block freed last is the likeliest to be warm in the caches.
        let i = b
            .idle
            .iter()
            .rposition(|k| k.cap == cap && k.flags == flags)?;
        let block = b.idle.remove(i)?;
        b.bytes -= block.cap as u64;
        Some(block.addr)
    }

    /// Keep `block`, freed just now; returns the blocks that no longer fit (oldest first),
    /// which the caller gives back to the system.
    pub fn keep(&self, block: Block) -> Vec<Block> {
        let mut b = self.blocks.lock();
        b.bytes += block.cap as u64;
        b.idle.push_back(block);
        let mut out = Vec::new();
        while b.bytes > self.limit && (b.idle.len() > 1 || self.limit == 0) {
            let Some(old) = b.idle.pop_front() else { break };
            b.bytes -= old.cap as u64;
            out.push(old);
        }
        out
    }

    /// Every idle block, taken out of the cache (an allocation ran out of memory, or the
    /// context goes away).
    pub fn drain(&self) -> Vec<Block> {
        let mut b = self.blocks.lock();
        b.bytes = 0;
        b.idle.drain(..).collect()
    }

    /// Idle bytes kept now.
    pub fn bytes(&self) -> u64 {
        self.blocks.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn block(addr: u64, mib: usize) -> Block {
        Block {
            addr,
            cap: mib * MIB,
            flags: 0,
        }
    }

    #[test]
    fn many_distinct_sizes_stay_within_the_bound_oldest_going_first() {
        let c = PinnedCache::new(10 * MIB as u64);
        let mut gone = Vec::new();
        for i in 1..=6 {
            gone.extend(c.keep(block(i, i as usize)));
        }
        // 21 MiB freed: 1..4 fit (10 MiB), 5 pushes out 1, 2, 3 (leaving 4 + 5), 6 pushes out
        // 4 and 5.
        assert!(c.bytes() <= 10 * MIB as u64, "{} idle bytes", c.bytes());
        let gone_addrs: Vec<u64> = gone.iter().map(|b| b.addr).collect();
        assert_eq!(gone_addrs, vec![1, 2, 3, 4, 5], "oldest first");
        assert_eq!(c.take(6 * MIB, 0), Some(6));
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn the_newest_block_stays_alone_above_the_bound_and_is_reused() {
        let c = PinnedCache::new(MIB as u64);
        assert!(
            c.keep(block(7, 64)).is_empty(),
            "kept alone above the bound"
        );
        assert_eq!(c.bytes(), 64 * MIB as u64);
        assert_eq!(c.take(64 * MIB, 0), Some(7));
        assert!(c.keep(block(7, 64)).is_empty());
        let gone = c.keep(block(8, 32));
        assert_eq!(gone, vec![block(7, 64)], "the older block goes");
        assert_eq!(c.bytes(), 32 * MIB as u64);
    }

    #[test]
    fn a_zero_bound_keeps_nothing() {
        let c = PinnedCache::new(0);
        assert_eq!(c.keep(block(1, 1)), vec![block(1, 1)]);
        assert_eq!(c.bytes(), 0);
        assert_eq!(c.take(MIB, 0), None);
    }

    #[test]
    fn take_matches_class_and_flags_and_drain_empties() {
        let c = PinnedCache::new(u64::MAX);
        c.keep(block(1, 2));
        c.keep(Block {
            addr: 2,
            cap: 2 * MIB,
            flags: 4,
        });
        c.keep(block(3, 2));
        assert_eq!(c.take(2 * MIB, 4), Some(2));
        assert_eq!(c.take(2 * MIB, 0), Some(3), "newest of the class first");
        assert_eq!(c.take(3 * MIB, 0), None);
        assert_eq!(c.drain(), vec![block(1, 2)]);
        assert_eq!(c.bytes(), 0);
    }
}
