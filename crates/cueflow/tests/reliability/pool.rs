//! Item 5 (RL3, HM5): the pool reuses across sizes, gives back, and recovers from OOM.

use super::*;

/// 10,000 distinct sizes, eight live at a time, in two runs. Without device work and with no
/// synchronization at all, the pool never holds more than twice the peak of live bytes. With
/// a kernel on each buffer and a synchronization every 32 allocations, it never holds more
/// than twice the peak of the bytes the program still has claims on (live, or freed since
/// the last synchronization and maybe still used by a kernel: MM2 keeps those). A
/// synchronization gives everything idle back (HM5, threshold 0), and the process's memory
/// stays within the pool's bound. (It grew to 2.1 GB for 2,000 sizes before.)
#[test]
fn pool_soak_of_distinct_sizes_stays_within_twice_peak_live() {
    if let Some(out) = child(
        "pool_soak_of_distinct_sizes_stays_within_twice_peak_live",
        &[],
    ) {
        let (stdout, _) = child_passed(&out, "POOL-OK");
        for l in stdout.lines().filter(|l| l.contains("POOL-OK")) {
            say(format_args!("{l}"));
        }
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    let s = Stream::new(&dev).unwrap();
    let start = rss();
    for (with_kernels, sync_every) in [(false, usize::MAX), (true, 32)] {
        let mut live: std::collections::VecDeque<DeviceBuffer<f32>> = Default::default();
        let (mut claimed, mut freed, mut peak, mut max_reserved, mut max_rss) =
            (0usize, 0usize, 0usize, 0usize, 0usize);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..10_000usize {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Distinct sizes: 10,000 values spread over 1..=65,536 elements (up to 256 KiB).
            let len = 1 + (i * 6553 + (x >> 60) as usize) % 65_536;
            let b = s.alloc_async::<f32>(len).unwrap();
            if with_kernels {
                kernels::fill(&s, &b, 1.0).unwrap();
            }
            claimed += len * 4;
            peak = peak.max(claimed + freed);
            max_reserved = max_reserved.max(dev.pool_reserved_bytes().unwrap_or(0));
            live.push_back(b);
            if live.len() > 8 {
                let old = live.pop_front().unwrap();
                claimed -= old.byte_len();
                if with_kernels {
                    freed += old.byte_len();
                }
                s.free_async(old).unwrap();
            }
            if i % sync_every == sync_every - 1 {
                s.synchronize().unwrap();
                freed = 0;
            }
            if i % 256 == 0 {
                max_rss = max_rss.max(rss());
            }
        }
        for b in live.drain(..) {
            s.free_async(b).unwrap();
        }
        s.synchronize().unwrap();
        let after = dev.pool_reserved_bytes().unwrap();
        println!(
            "POOL-OK {}: reserved at most {max_reserved} B, peak claimed {peak} B ({:.2} x), \
             after a synchronization {after} B; the process grew by {} KiB at most",
            if with_kernels {
                "kernels, sync every 32"
            } else {
                "no device work, no sync"
            },
            max_reserved as f64 / peak as f64,
            max_rss.saturating_sub(start) >> 10
        );
        assert!(
            max_reserved <= 2 * peak,
            "pool reserved {max_reserved} > 2 x peak {peak}"
        );
        assert_eq!(after, 0, "a synchronization gives idle memory back (HM5)");
        assert!(
            max_rss.saturating_sub(start) <= 2 * peak + (32 << 20),
            "the process grew by {} B with {peak} B claimed at most",
            max_rss - start
        );
    }
}

/// Run out of memory (`ulimit -v`), free everything, synchronize: `alloc_async`,
/// `DeviceBuffer::new` and `PinnedBuffer::new` of 128 MiB all succeed again.
#[test]
fn out_of_memory_is_recoverable() {
    if let Some(out) = child("out_of_memory_is_recoverable", &[("MALLOC_ARENA_MAX", "2")]) {
        child_passed(&out, "OOM-OK");
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    let s = Stream::new(&dev).unwrap();
    const MIB128: usize = 128 << 20;
    limit_address_space(1 << 30);
    let mut held = Vec::new();
    let err = loop {
        match s.alloc_async::<u8>(MIB128) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
        assert!(held.len() < 64, "the limit did not bite");
    };
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
    for b in held.drain(..) {
        s.free_async(b).unwrap();
    }
    s.synchronize().unwrap();
    let a = s.alloc_async::<u8>(MIB128).expect("alloc_async after OOM");
    s.free_async(a).unwrap();
    s.synchronize().unwrap();
    let d = DeviceBuffer::<u8>::new(&dev, MIB128).expect("DeviceBuffer::new after OOM");
    drop(d);
    let p = PinnedBuffer::<u8>::new(&dev, MIB128).expect("PinnedBuffer::new after OOM");
    drop(p);
    println!("OOM-OK after {err}");
}
