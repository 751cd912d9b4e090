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

// ---------------------------------------------------------------------------------------------
// Issue 27, item 2: created pools churned.

/// 10,000 cycles of `create_pool` → allocate from it → a kernel on the block → drop, the block
/// and the pool going in every order a program can give them: freed in stream order with the
/// free still pending when the pool goes; dropped without a free; the pool dropped first and
/// the block freed after; freed on another stream after an event wait; both dropped inside a
/// host function. Every 100 cycles a block's contents are read back. Nothing crashes (it was a
/// SIGSEGV on an H100), every value is right, the device ends unpoisoned, and the process does
/// not grow with the cycles.
fn pool_churn(dev: &Device, cycles: usize) -> Result<String> {
    const N: usize = 4096;
    let s = Stream::new(dev)?;
    let other = Stream::new(dev)?;
    let (mut start, mut checked) = (0usize, 0usize);
    for i in 0..cycles {
        if i == cycles / 10 {
            dev.synchronize()?;
            start = rss(); // after a warm-up: pools, threads and caches exist by now
        }
        let pool = dev.create_pool()?;
        let b = s.alloc_from_pool::<u32>(&pool, N + i % 1024)?;
        let byte = (i % 251) as u8 + 1;
        s.memset(&b, byte)?;
        if i % 100 == 0 {
            let word = u32::from_ne_bytes([byte; 4]);
            let got = s.read_value(&b.slice(N - 1..N)?)?;
            assert_eq!(got, word, "cycle {i}: the block of a fresh pool reads back");
            checked += 1;
        }
        match i % 5 {
            0 => {
                s.free_async(b)?; // the free may still be pending when the pool goes
                drop(pool);
            }
            1 => {
                drop(b); // never freed: given back when the memset is done
                drop(pool);
            }
            2 => {
                drop(pool); // the pool goes first; its block outlives the handle
                s.free_async(b)?;
            }
            3 => {
                let done = s.record()?;
                other.wait_event(&done)?;
                other.free_async(b)?;
                drop(pool);
            }
            _ => s.host_fn_once(move || {
                drop(b); // inside a host function, where no driver call may run
                drop(pool);
            })?,
        }
    }
    dev.synchronize()?;
    let grew = rss().saturating_sub(start);
    assert_eq!(dev.sticky_error(), None);
    // The host backend's pools are this process's memory: a dead pool left listed shows
    // (1.5 MiB over 9,000 cycles before the fix). A GPU's driver keeps caches of its own.
    let bound = if dev.properties().backend == "host" {
        768 << 10
    } else {
        64 << 20
    };
    assert!(
        grew < bound,
        "the process grew by {} KiB over {cycles} pool cycles",
        grew >> 10
    );
    Ok(format!(
        "CHURN-OK {} {cycles} cycles, {checked} read back, grew {} KiB after warm-up",
        dev.properties().backend,
        grew >> 10
    ))
}

/// Item 2 on the host backend, in a process of its own (a crash fails this test cleanly).
#[test]
fn created_pool_churn_host() {
    if let Some(out) = child("created_pool_churn_host", &[]) {
        let (stdout, _) = child_passed(&out, "CHURN-OK");
        for l in stdout.lines().filter(|l| l.contains("CHURN-OK")) {
            say(format_args!("{l}"));
        }
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    println!("{}", pool_churn(&dev, 10_000).unwrap());
}

/// Item 2 on a GPU (the H100 crashed here), in a process of its own.
#[test]
fn created_pool_churn_cuda() {
    if cuda_in_child("created_pool_churn_cuda", &[], "CHURN-OK") {
        return;
    }
    let dev = Device::cuda(0).unwrap();
    println!("{}", pool_churn(&dev, 10_000).unwrap());
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

/// AG6, P6: out of memory, automatic graphs let go of the memory they keep. A stream in the
/// mode replays windows with a temporary of `block` bytes, and keeps the block each replay
/// frees for the next window; afterwards as many such blocks fit — stream-ordered on a stream
/// outside the mode, then `DeviceBuffer::new` — as before the windows ran. (The kept block
/// made the last of them fail, where it would not have failed without the mode.)
fn out_of_memory_with_automatic_graphs(dev: &Device, block: usize) -> String {
    let plain = Stream::builder(dev).non_blocking().build().unwrap();
    let auto = Stream::builder(dev)
        .non_blocking()
        .auto_graph()
        .build()
        .unwrap();
    // How many blocks fit, each way; all given back afterwards.
    let fit = || -> (usize, usize) {
        let mut held = Vec::new();
        while let Ok(b) = plain.alloc_async::<u8>(block) {
            held.push(b);
            assert!(held.len() < 256, "memory did not run out");
        }
        let stream_ordered = held.len();
        for b in held.drain(..) {
            plain.free_async(b).unwrap();
        }
        plain.synchronize().unwrap();
        let mut synchronous = Vec::new();
        while let Ok(b) = DeviceBuffer::<u8>::new(dev, block) {
            synchronous.push(b);
            assert!(synchronous.len() < 256, "memory did not run out");
        }
        (stream_ordered, synchronous.len())
    };
    let before = fit();
    for _ in 0..6 {
        let t = auto.alloc_async::<u8>(block).unwrap();
        auto.memset(&t, 7).unwrap();
        auto.free_async(t).unwrap();
        auto.synchronize().unwrap();
    }
    let kept = dev.auto_graph_stats();
    assert!(kept.replays >= 4 && kept.memory_reused >= 3, "{kept:?}");
    let after = fit();
    assert_eq!(
        after, before,
        "blocks that fit (stream-ordered, synchronous)"
    );
    let stats = dev.auto_graph_stats();
    assert!(stats.memory_let_go >= 1, "{stats:?}");
    format!(
        "AG-OOM-OK {before:?} blocks of {block} bytes fit before the windows and after; {stats:?}"
    )
}

/// [`out_of_memory_with_automatic_graphs`] on the host backend, out of memory by `ulimit -v`.
#[test]
fn out_of_memory_lets_automatic_graphs_go() {
    let name = "out_of_memory_lets_automatic_graphs_go";
    if let Some(out) = child(name, &[("MALLOC_ARENA_MAX", "2")]) {
        child_passed(&out, "AG-OOM-OK");
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    limit_address_space(1 << 30);
    println!("{}", out_of_memory_with_automatic_graphs(&dev, 128 << 20));
}

/// [`out_of_memory_with_automatic_graphs`] on a GPU, out of device memory in 8 GiB blocks:
/// alone (the other CUDA tests of this binary would find no memory meanwhile), and until the
/// memory the child process held is the device's again (it comes back a moment after the
/// process ended: the tests after it found none, on an H200). Ignored by default: in 1 of 6
/// runs of the binary's CUDA tests on an H200 the tests after it still found no memory.
#[test]
#[ignore = "takes all of the GPU's memory; run it alone: reliability --ignored out_of_memory"]
fn out_of_memory_lets_automatic_graphs_go_cuda() {
    let name = "out_of_memory_lets_automatic_graphs_go_cuda";
    if !in_child(name) {
        hold_gpu(true);
        let Some(dev) = cuda() else {
            return;
        };
        let (free, _) = dev.mem_info().unwrap();
        let (stdout, _) = child_passed(&child(name, &[]).expect("the parent"), "AG-OOM-OK");
        for l in stdout.lines().filter(|l| l.contains("AG-OOM-OK")) {
            say(format_args!("{l}"));
        }
        let t = Instant::now();
        while dev.mem_info().unwrap().0 + (1 << 30) < free && t.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        say(format_args!(
            "the child's memory was back {:?} after it ended",
            t.elapsed()
        ));
        return;
    }
    let dev = Device::cuda(0).unwrap();
    println!("{}", out_of_memory_with_automatic_graphs(&dev, 8 << 30));
}

/// Leave room for `blocks` blocks of `block` bytes under the lowered limit, and half a block
/// more (what else the process maps meanwhile, a thread's stack, must not take a block's room:
/// with the room exact, 1 run in 9 failed so), but never room for one more block: the rest is
/// held by the returned buffers.
fn fill_but(dev: &Device, block: usize, blocks: usize) -> Vec<DeviceBuffer<u8>> {
    let (mut big, mut small) = (Vec::new(), Vec::new());
    while let Ok(b) = DeviceBuffer::<u8>::new(dev, block) {
        big.push(b);
        assert!(big.len() < 64, "the limit did not bite");
    }
    while let Ok(b) = DeviceBuffer::<u8>::new(dev, block / 16) {
        small.push(b);
        assert!(small.len() < 64, "the limit did not bite");
    }
    big.truncate(big.len().saturating_sub(blocks));
    small.truncate(small.len().saturating_sub(8));
    big.extend(small);
    big
}

/// AG6: a free the window holds gives its memory back before an allocation fails. Room for
/// one 128 MiB block; each window allocates and frees one, then allocates another (which must
/// take the first one's memory), sets it and frees it. Every window's second allocation
/// succeeds with the mode as without it. (Before, the held free was not counted as memory the
/// mode keeps: no let-go, no retry, and every window after the first failed there.)
#[test]
fn a_held_free_gives_its_memory_to_an_allocation_out_of_memory() {
    let name = "a_held_free_gives_its_memory_to_an_allocation_out_of_memory";
    if let Some(out) = child(name, &[("MALLOC_ARENA_MAX", "2")]) {
        child_passed(&out, "HELD-FREE-OK");
        return;
    }
    const BLOCK: usize = 128 << 20;
    let dev = Device::host_with_workers(2).unwrap();
    let plain = Stream::builder(&dev).non_blocking().build().unwrap();
    let auto = Stream::builder(&dev)
        .non_blocking()
        .auto_graph()
        .build()
        .unwrap();
    limit_address_space(1 << 30);
    let _held = fill_but(&dev, BLOCK, 1);
    let windows = |s: &Stream| -> Vec<bool> {
        (0..6)
            .map(|_| {
                let a = s.alloc_async::<u8>(BLOCK).unwrap();
                s.free_async(a).unwrap();
                let ok = match s.alloc_async::<u8>(BLOCK) {
                    Ok(b) => {
                        s.memset(&b, 7).unwrap();
                        s.free_async(b).unwrap();
                        true
                    }
                    Err(_) => false,
                };
                s.synchronize().unwrap();
                ok
            })
            .collect()
    };
    let without = windows(&plain);
    assert!(without.iter().all(|&ok| ok), "{without:?}");
    let with = windows(&auto);
    assert_eq!(with, without, "{:?}", dev.auto_graph_stats());
    println!("HELD-FREE-OK {:?}", dev.auto_graph_stats());
}

/// AG6: two threads out of memory at once both try again. Room for two 64 MiB blocks, which the
/// windows of a stream in the mode keep (the memory its replays freed); then two threads call
/// `DeviceBuffer::new` at once, 30 rounds: every call succeeds. (Before, the thread whose
/// let-go found nothing left to let go, the other having just let go of it, gave up: a failure
/// in about half the rounds.)
#[test]
fn two_threads_out_of_memory_at_once_both_allocate() {
    let name = "two_threads_out_of_memory_at_once_both_allocate";
    // No reserved arena (CUEFLOW_HOST_ARENA=0): the warm-up below would make it before the
    // limit, and the limit would then not bite.
    let env = [("MALLOC_ARENA_MAX", "1"), ("CUEFLOW_HOST_ARENA", "0")];
    if let Some(out) = child(name, &env) {
        child_passed(&out, "TWO-OOM-OK");
        return;
    }
    const BLOCK: usize = 64 << 20;
    let dev = Device::host_with_workers(2).unwrap();
    let auto = Stream::builder(&dev)
        .non_blocking()
        .auto_graph()
        .build()
        .unwrap();
    // Two threads made before the limit (their stacks count), each allocating on a signal.
    type Reply = std::result::Result<DeviceBuffer<u8>, String>;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (go, rx) = mpsc::channel::<(Device, Arc<std::sync::Barrier>)>();
            let (tx, done) = mpsc::channel::<Reply>();
            std::thread::spawn(move || {
                while let Ok((d, start)) = rx.recv() {
                    start.wait();
                    let _ = tx.send(DeviceBuffer::<u8>::new(&d, BLOCK).map_err(|e| e.to_string()));
                }
            });
            (go, done)
        })
        .collect();
    // A round whose windows find no room (the process's other mappings vary a little under the
    // limit: 2 runs in 12 found one block's room short, the mode keeping nothing then) tests
    // nothing and is skipped; false then.
    let round = |round: usize, failed: &mut Vec<(usize, String)>| -> bool {
        for _ in 0..4 {
            let a = auto.alloc_async::<u8>(BLOCK).unwrap();
            let Ok(b) = auto.alloc_async::<u8>(BLOCK) else {
                auto.free_async(a).unwrap();
                auto.synchronize().unwrap();
                return false;
            };
            auto.memset(&a, 1).unwrap();
            auto.memset(&b, 2).unwrap();
            auto.free_async(a).unwrap();
            auto.free_async(b).unwrap();
            auto.synchronize().unwrap();
        }
        let kept = dev.auto_graph_stats().memory_let_go;
        let start = Arc::new(std::sync::Barrier::new(2));
        for (go, _) in &workers {
            go.send((dev.clone(), start.clone())).unwrap();
        }
        let got: Vec<Reply> = workers
            .iter()
            .map(|(_, done)| done.recv().unwrap())
            .collect();
        if let Some(Err(e)) = got.iter().find(|g| g.is_err()) {
            failed.push((round, e.clone()));
        }
        // Under the limit the threads found the memory kept by the mode: the round tested the
        // let-go (the warm-up, round 0, runs without the limit).
        let let_go = dev.auto_graph_stats().memory_let_go;
        assert!(
            round == 0 || let_go > kept,
            "round {round}: the threads needed no let-go"
        );
        true
    };
    // Once before the limit: every thread the device starts lazily exists when the room is
    // measured (one started later takes a block's room).
    round(0, &mut Vec::new());
    limit_address_space(1 << 30);
    let mut failed = Vec::new();
    // The room is measured again each round: what else the process maps grows a little.
    let ran = (1..=30)
        .filter(|&r| {
            let _held = fill_but(&dev, BLOCK, 2);
            round(r, &mut failed)
        })
        .count();
    assert!(
        ran >= 20,
        "only {ran} of 30 rounds found room for their windows"
    );
    assert!(
        failed.is_empty(),
        "{failed:?}; {:?}",
        dev.auto_graph_stats()
    );
    println!("TWO-OOM-OK {ran} rounds, {:?}", dev.auto_graph_stats());
}

/// The address of a pinned buffer's memory (written once, so it is resident).
fn pinned_at(b: &mut PinnedBuffer<u8>) -> usize {
    let mut w = b.write().unwrap();
    w.fill(1);
    w.as_ptr() as usize
}

/// RL3 for pinned memory (CUDA): freed pinned blocks are kept for reuse only up to
/// `CUEFLOW_PINNED_CACHE_MAX_BYTES` (32M here); the rest is freed at the next synchronization
/// that finds the device idle. A freed block is reused by the next
/// allocation of its size; 64 buffers of distinct sizes (~290 MiB), and pageable copies of
/// distinct sizes, which stage through pinned memory of their own size, leave at most the
/// bound idle, and the process gives the rest back; a block above the bound stays while it
/// is the only one, and is reused. (Before the bound, every distinct size stayed page-locked
/// until the device was dropped.)
#[test]
fn pinned_cache_stays_within_its_bound_cuda() {
    let env = [("CUEFLOW_PINNED_CACHE_MAX_BYTES", "32M")];
    if cuda_in_child(
        "pinned_cache_stays_within_its_bound_cuda",
        &env,
        "PINNED-OK",
    ) {
        return;
    }
    const MIB: usize = 1 << 20;
    let bound = 32 * MIB;
    let dev = Device::cuda(0).unwrap();
    let idle = || {
        dev.pinned_cached_bytes()
            .expect("CUDA counts its idle pinned bytes")
    };
    let mut a = PinnedBuffer::<u8>::new(&dev, 3 * MIB).unwrap();
    let at = pinned_at(&mut a);
    drop(a);
    assert_eq!(idle(), 3 * MIB, "a freed block is kept");
    let mut again = PinnedBuffer::<u8>::new(&dev, 3 * MIB).unwrap();
    assert_eq!(
        pinned_at(&mut again),
        at,
        "the next allocation of its size reuses it"
    );
    drop(again);
    let start = rss();
    let (mut freed, mut held, mut peak) = (0, Vec::new(), 0);
    for k in 0..64 {
        let len = 2 * MIB + k * (64 << 10);
        let mut b = PinnedBuffer::<u8>::new(&dev, len).unwrap();
        pinned_at(&mut b);
        // Eight live at a time: resident memory shows the pinned blocks.
        held.push(b);
        if held.len() > 8 {
            let b = held.remove(0);
            freed += b.len();
            drop(b);
        }
        peak = peak.max(rss().saturating_sub(start));
        // What the cache let go of is freed where the program waits for the idle device.
        dev.synchronize().unwrap();
        assert!(idle() <= bound, "{} idle bytes after {k} sizes", idle());
    }
    for b in held.drain(..) {
        let len = b.len();
        drop(b);
        freed += len;
        dev.synchronize().unwrap();
        assert!(
            idle() <= bound,
            "{} idle bytes after the last frees",
            idle()
        );
    }
    for k in 0..16 {
        let len = MIB + k * (128 << 10);
        let d = DeviceBuffer::from_slice(&dev, &vec![7u8; len]).unwrap();
        assert_eq!(d.to_vec().unwrap()[len - 1], 7);
        freed += 2 * len;
        dev.synchronize().unwrap();
        assert!(
            idle() <= bound,
            "{} idle bytes after {k} pageable copies",
            idle()
        );
    }
    // Blocks let go of are freed at a synchronization that finds the device idle.
    dev.synchronize().unwrap();
    assert!(idle() <= bound, "{} idle bytes after a synchronize", idle());
    let t = Instant::now();
    while rss() > start + bound + 64 * MIB && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let grown = rss().saturating_sub(start);
    assert!(
        grown <= bound + 64 * MIB,
        "resident memory grew {} MiB after {} MiB of pinned memory was freed",
        grown / MIB,
        freed / MIB
    );
    let mut big = PinnedBuffer::<u8>::new(&dev, 64 * MIB).unwrap();
    let big_at = pinned_at(&mut big);
    drop(big);
    dev.synchronize().unwrap();
    assert_eq!(
        idle(),
        64 * MIB,
        "the newest block stays alone above the bound"
    );
    let mut big = PinnedBuffer::<u8>::new(&dev, 64 * MIB).unwrap();
    assert_eq!(pinned_at(&mut big), big_at, "and is reused");
    println!(
        "PINNED-OK {} MiB freed, resident memory grew {} MiB at the peak, {} MiB at the end, \
         {} MiB idle at most",
        freed / MIB,
        peak / MIB,
        grown / MIB,
        bound / MIB
    );
}

/// RL3 for pinned memory (CUDA): a pinned allocation that runs out of memory gives the idle
/// cached blocks back and tries again. With the cache unbounded, eight freed blocks (~540
/// MiB) stay mapped; under an address-space limit of what is mapped plus 96 MiB, a 256 MiB
/// pinned buffer is allocated only once they are gone.
#[test]
fn pinned_out_of_memory_gives_cached_blocks_back_cuda() {
    let name = "pinned_out_of_memory_gives_cached_blocks_back_cuda";
    let env = [("CUEFLOW_PINNED_CACHE_MAX_BYTES", "unlimited")];
    if cuda_in_child(name, &env, "PINNED-OOM-OK") {
        return;
    }
    const MIB: usize = 1 << 20;
    let dev = Device::cuda(0).unwrap();
    for k in 0..8 {
        let mut b = PinnedBuffer::<u8>::new(&dev, (64 + k) * MIB).unwrap();
        pinned_at(&mut b);
    }
    let cached = dev.pinned_cached_bytes().unwrap();
    assert!(cached >= 500 * MIB, "{} MiB cached", cached / MIB);
    limit_address_space(96 * MIB);
    let mut b = PinnedBuffer::<u8>::new(&dev, 256 * MIB)
        .expect("a pinned allocation after the cache gave its blocks back");
    pinned_at(&mut b);
    assert_eq!(
        dev.pinned_cached_bytes(),
        Some(0),
        "every idle block went back"
    );
    println!(
        "PINNED-OOM-OK 256 MiB allocated under a 96 MiB headroom, {} MiB given back",
        cached / MIB
    );
}

/// RL3 without holding anyone up (CUDA): blocks the pinned cache lets go of are freed only when
/// no stream of the device runs anything (`cuMemFreeHost` waits for running kernels and holds
/// up other threads' calls meanwhile). While a kernel waits for a flag, 64 MiB of pinned
/// buffers are freed (bound 1M) and another stream synchronizes: the blocks stay, and a
/// 4-byte write from this thread opens the kernel at once; once the kernel is done, a
/// synchronize gives them back.
#[test]
fn pinned_blocks_go_back_only_while_nothing_runs_cuda() {
    let name = "pinned_blocks_go_back_only_while_nothing_runs_cuda";
    let env = [("CUEFLOW_PINNED_CACHE_MAX_BYTES", "1M")];
    if cuda_in_child(name, &env, "PINNED-IDLE-OK") {
        return;
    }
    const MIB: usize = 1 << 20;
    let dev = Device::cuda(0).unwrap();
    let held = || dev.pinned_cached_bytes().unwrap();
    let (gated, other, opener) = (
        Stream::new(&dev).unwrap(),
        Stream::new(&dev).unwrap(),
        Stream::new(&dev).unwrap(),
    );
    let flag = DeviceBuffer::from_slice(&dev, &[0u32]).unwrap();
    kernels::wait_flag(&gated, &flag, 1, Duration::from_secs(10)).unwrap();
    for k in 0..16 {
        let mut b = PinnedBuffer::<u8>::new(&dev, 4 * MIB + k * (64 << 10)).unwrap();
        pinned_at(&mut b);
    }
    kernels::empty(&other).unwrap();
    other.synchronize().unwrap();
    let while_running = held();
    assert!(
        while_running > 32 * MIB,
        "{} MiB let go of while a kernel ran were freed under it",
        while_running / MIB
    );
    let t = Instant::now();
    opener.write_value(&flag, 1).unwrap();
    let opened_in = t.elapsed();
    gated.synchronize().unwrap();
    assert!(
        opened_in < Duration::from_secs(1),
        "the write that opens the kernel took {opened_in:?}"
    );
    dev.synchronize().unwrap();
    assert!(
        held() <= 4 * MIB + 15 * (64 << 10),
        "{} bytes still held",
        held()
    );
    println!(
        "PINNED-IDLE-OK {} MiB held while the kernel ran, the opening write took {opened_in:?}, \
         {} bytes held after",
        while_running / MIB,
        held()
    );
}
