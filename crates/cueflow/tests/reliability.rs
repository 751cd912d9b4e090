//! Reliability under long runs and exhausted resources (SPEC RL1–RL5, ER2, MD4; issue 16, items
//! 2 and 5–9): each test is the regression test of one item, written as the program that
//! showed it.
//!
//! Tests that measure the process (memory, threads, stderr) or lower its limits (`ulimit -v`
//! through `setrlimit(RLIMIT_AS)`) run their body in a child process of this test binary, alone
//! (the parent checks what the child printed and how it exited), so that other tests' threads
//! and memory do not count and a lowered limit reaches nobody else. CUDA variants print
//! `SKIP cuda: <reason>` and pass where no GPU is present.

use std::io::Write;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cueflow::{
    kernels, CaptureMode, Communicator, Device, DeviceBuffer, Error, Event, Kernel, KernelArgs,
    LaunchConfig, PinnedBuffer, Result, SanitizeMode, Stream,
};

/// Set in a child process to the name of the test it runs.
const CHILD_ENV: &str = "CUEFLOW_RELIABILITY_CHILD";

/// In the parent: run test `name` alone in a child process with `env` and return its output.
/// In that child: `None` (run the body).
fn child(name: &str, env: &[(&str, &str)]) -> Option<Output> {
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == name) {
        return None;
    }
    let out = child::rerun(name, CHILD_ENV, env);
    Some(out)
}

/// The child's output as text, for assertion messages.
fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Assert the child passed and printed `marker` on stdout; returns (stdout, stderr).
fn child_passed(out: &Output, marker: &str) -> (String, String) {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success() && stdout.contains(marker),
        "child failed ({:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// A line the harness does not capture (CI logs show it).
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The CUDA device, or `None` after printing why the CUDA variant is skipped.
fn cuda() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            say(format_args!("SKIP cuda: {e}"));
            None
        }
    }
}

#[path = "common/child.rs"]
mod child;
#[path = "common/rss.rs"]
mod rss;
use rss::rss;

/// Peak resident set size of this process image so far, in bytes (`VmHWM`; not `getrusage`,
/// whose high-water mark a child inherits from the parent it was forked from).
fn peak_rss() -> usize {
    status("VmHWM") * 1024
}

/// A field (in kB, or a count) of `/proc/self/status`.
fn status(field: &str) -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Lower this process's address-space limit to what it maps now plus `headroom` bytes
/// (`ulimit -v`; works for root too, unlike `RLIMIT_NPROC`).
fn limit_address_space(headroom: usize) {
    let now = status("VmSize") * 1024;
    let lim = libc::rlimit {
        rlim_cur: (now + headroom) as libc::rlim_t,
        rlim_max: (now + headroom) as libc::rlim_t,
    };
    // SAFETY: a valid rlimit; lowering a limit needs no privilege.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
    assert_eq!(r, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// A host function that holds its stream until `open` is set (at most 20 s).
fn gate(s: &Stream) -> Arc<AtomicBool> {
    let open = Arc::new(AtomicBool::new(false));
    let o = open.clone();
    s.host_fn(move || {
        let t = Instant::now();
        while !o.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_micros(200));
        }
    })
    .unwrap();
    open
}

// ---------------------------------------------------------------------------------------------
// Item 2 (MD4) and item 9's message: a rank that gave up is never read, and says so.

/// A rank whose collective timed out returns; its buffers are freed; the late rank then runs
/// the call. It must fault with the first rank's reason, never read the freed input (which
/// was a SIGSEGV in `memcpy` before), and never say `ranks not arrived: []`.
#[test]
fn collective_timeout_never_reads_a_freed_input() {
    let devs = [Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
    let comm = Communicator::with_timeout(&devs, Duration::from_millis(300)).unwrap();
    let s: Vec<Stream> = devs.iter().map(|d| Stream::new(d).unwrap()).collect();
    // 16 MiB: allocated with mmap and unmapped when freed, so a read after the free faults.
    let n = 4 << 20;
    let x: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, n).unwrap())
        .collect();
    let y: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, 2 * n).unwrap())
        .collect();
    s[1].host_fn(|| std::thread::sleep(Duration::from_millis(1200)))
        .unwrap();
    comm.all_gather(&[(&s[0], &x[0], &y[0]), (&s[1], &x[1], &y[1])])
        .unwrap();
    let e0 = s[0].synchronize().unwrap_err();
    assert!(e0.to_string().contains("timed out"), "{e0}");
    // Rank 0's call returned: its memory goes now.
    let (mut x, mut y) = (x, y);
    drop((x.remove(0), y.remove(0)));
    let e1 = s[1].synchronize().unwrap_err();
    let msg = e1.to_string();
    assert!(
        msg.contains("rank 0") && msg.contains("gave up"),
        "the late rank says who gave up: {msg}"
    );
    assert!(!msg.contains("[]"), "no empty list of missing ranks: {msg}");
    // The communicator refuses later calls at once instead of waiting out a timeout.
    drop(comm);
}

// ---------------------------------------------------------------------------------------------
// Item 5 (RL3, HM5): the pool reuses across sizes, gives back, and recovers from OOM.

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
    if std::env::var(CHILD_ENV).is_err() && cuda().is_none() {
        return;
    }
    if let Some(out) = child("created_pool_churn_cuda", &[]) {
        let (stdout, _) = child_passed(&out, "CHURN-OK");
        for l in stdout.lines().filter(|l| l.contains("CHURN-OK")) {
            say(format_args!("{l}"));
        }
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

// ---------------------------------------------------------------------------------------------
// Item 6 (RL1): bounded queues.

/// One million empty kernels enqueued with no synchronization behind a kernel that keeps the
/// device busy for 500 ms: the process's peak memory stays within 64 MB of where it started
/// (it was 437 bytes a kernel, 420 MB for a million), and after the drain it is back within
/// 16 MB.
#[test]
fn deep_queue_memory_is_bounded() {
    if let Some(out) = child("deep_queue_memory_is_bounded", &[]) {
        let (stdout, _) = child_passed(&out, "DEEP-OK");
        say(format_args!(
            "{}",
            stdout.lines().find(|l| l.contains("DEEP-OK")).unwrap_or("")
        ));
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    let s = Stream::new(&dev).unwrap();
    kernels::empty(&s).unwrap();
    s.synchronize().unwrap();
    let n = 1_000_000;
    let start = rss();
    let t = Instant::now();
    let mut peak = start;
    // The device is busy for a while first: without a bound, the queue grows meanwhile.
    kernels::spin(&s, Duration::from_millis(500), 1).unwrap();
    for i in 0..n {
        kernels::empty(&s).unwrap();
        if i % 10_000 == 0 {
            peak = peak.max(rss());
        }
    }
    let enqueued = t.elapsed();
    s.synchronize().unwrap();
    let drained = t.elapsed();
    let after = rss();
    // The kernel's high-water mark covers the moments between samples.
    peak = peak.max(peak_rss());
    let grew = peak.saturating_sub(start);
    println!(
        "DEEP-OK {n} kernels: peak +{} KiB, after the drain +{} KiB, enqueue {:?}, drain {:?} \
         (queue depth {})",
        grew >> 10,
        after.saturating_sub(start) >> 10,
        enqueued,
        drained,
        dev.queue_depth()
    );
    assert!(grew <= 64 << 20, "peak memory grew by {grew} B");
    assert!(
        after.saturating_sub(start) <= 16 << 20,
        "memory stayed after the drain: +{} B",
        after - start
    );
}

/// At the queue depth an enqueue waits for the stream's oldest work (as a CUDA launch waits
/// when the launch queue is full), and goes on once it completed.
#[test]
fn an_enqueue_at_the_queue_depth_waits() {
    let dev = Device::host_with_workers(2).unwrap();
    dev.set_queue_depth(8);
    assert_eq!(dev.queue_depth(), 8);
    let s = Stream::new(&dev).unwrap();
    let open = gate(&s);
    let (tx, rx) = mpsc::channel();
    let s2 = s.clone();
    let t = std::thread::spawn(move || {
        for i in 0..20 {
            kernels::empty(&s2).unwrap();
            tx.send(i).unwrap();
        }
    });
    // Seven more fit behind the gate; the eighth waits while the gate is closed.
    let mut sent = 0;
    while let Ok(i) = rx.recv_timeout(Duration::from_millis(300)) {
        sent = i + 1;
    }
    assert_eq!(sent, 7, "enqueues past the depth must wait");
    open.store(true, Ordering::SeqCst);
    t.join().unwrap();
    s.synchronize().unwrap();
}

/// CUDA: a deep queue of empty kernels drains and its memory stays bounded (the drain time
/// against raw CUDA is `examples/deep_queue.rs` and `benches/cuda/deep_queue.cu`).
#[test]
fn cuda_deep_queue_drains_with_bounded_memory() {
    let Some(dev) = cuda() else { return };
    let s = Stream::new(&dev).unwrap();
    kernels::empty(&s).unwrap();
    s.synchronize().unwrap();
    let start = rss();
    let mut peak = start;
    for i in 0..200_000 {
        kernels::empty(&s).unwrap();
        if i % 10_000 == 0 {
            peak = peak.max(rss());
        }
    }
    s.synchronize().unwrap();
    assert!(peak - start <= 64 << 20, "grew by {} B", peak - start);
}

// ---------------------------------------------------------------------------------------------
// Item 7 (RL4): completions in their own order.

fn completions_resolve_in_their_own_order(dev: &Device) {
    // An older completion that stays pending: a kernel gate (a host-function gate would hold
    // the device's host-function runner, which resolves completions, as on CUDA).
    let old = Stream::new(dev).unwrap();
    let flag = DeviceBuffer::<u32>::new(dev, 1).unwrap();
    kernels::wait_flag(&old, &flag, 1, Duration::from_secs(20)).unwrap();
    let pending = old.record().unwrap();
    let c_old = pending.completion().unwrap();
    // Work already done: its completion resolves now.
    let s = Stream::new(dev).unwrap();
    kernels::empty(&s).unwrap();
    let done = s.record().unwrap();
    s.synchronize().unwrap();
    // Work still pending but short: its completion resolves when it is done.
    let short = Stream::new(dev).unwrap();
    kernels::spin(&short, Duration::from_millis(30), 1).unwrap();
    let soon = short.record().unwrap();
    let never = Event::new(dev).unwrap();
    let (c_done, c_soon, c_never) = (
        done.completion().unwrap(),
        soon.completion().unwrap(),
        never.completion().unwrap(),
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for c in [c_done, c_never, c_soon] {
            tx.send(c.wait()).unwrap();
        }
    });
    for what in [
        "a done event",
        "a never-recorded event",
        "a short pending event",
    ] {
        let r = rx.recv_timeout(Duration::from_secs(3));
        assert!(
            matches!(r, Ok(Ok(()))),
            "the completion of {what} waited behind an unrelated pending one: {r:?}"
        );
    }
    let opener = Stream::new(dev).unwrap();
    kernels::set_flag(&opener, &flag, 1).unwrap();
    c_old.wait().unwrap();
}

#[test]
fn completions_resolve_in_their_own_order_host() {
    completions_resolve_in_their_own_order(&Device::host().unwrap());
}

#[test]
fn completions_resolve_in_their_own_order_cuda() {
    if let Some(dev) = cuda() {
        completions_resolve_in_their_own_order(&dev);
    }
}

// ---------------------------------------------------------------------------------------------
// Item 8 (RL5, ER2): faults that never lie.

fn host_read_after_a_sticky_fault_returns_the_fault(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = DeviceBuffer::<f32>::new(dev, 1 << 17).unwrap();
    let mut p = PinnedBuffer::<f32>::new(dev, 1 << 17).unwrap();
    kernels::fault(&s).unwrap();
    // The copy may be refused (the fault already seen) or enqueued and discarded.
    let _ = s.copy_d2h(&mut p, &d);
    let _ = s.synchronize();
    match p.read() {
        Err(e) => assert!(e.is_sticky(), "{e:?}"),
        Ok(_) => panic!("a host read after a sticky fault returned Ok (ER2)"),
    }
    assert!(p.write().is_err());
}

#[test]
fn host_read_after_a_sticky_fault_returns_the_fault_host() {
    host_read_after_a_sticky_fault_returns_the_fault(&Device::host().unwrap());
}

/// On CUDA a fault poisons the whole process's contexts: the body runs in a child.
#[test]
fn host_read_after_a_sticky_fault_returns_the_fault_cuda() {
    const NAME: &str = "host_read_after_a_sticky_fault_returns_the_fault_cuda";
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == NAME) {
        host_read_after_a_sticky_fault_returns_the_fault(&Device::cuda(0).unwrap());
        println!("READ-OK");
        return;
    }
    if cuda().is_some() {
        child_passed(&child(NAME, &[]).expect("the parent"), "READ-OK");
    }
}

/// CUDA: with other kernels in flight, the fault names `cf_fault` among the candidates and
/// says there are several, or names it alone — never another kernel alone; with
/// `CUEFLOW_LAUNCH_BLOCKING=1` it names exactly `cf_fault`. Each in a child process (a fault
/// poisons the process's contexts).
#[test]
fn cuda_fault_names_the_candidates_or_the_kernel() {
    const NAME: &str = "cuda_fault_names_the_candidates_or_the_kernel";
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == NAME) {
        let blocking = std::env::var("CUEFLOW_LAUNCH_BLOCKING").is_ok();
        let dev = Device::cuda(0).unwrap();
        let s = Stream::new(&dev).unwrap();
        let d = DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap();
        for _ in 0..4 {
            kernels::fill(&s, &d, 1.0).unwrap();
        }
        let e = match kernels::fault(&s) {
            Err(e) => e,
            Ok(()) => s.synchronize().unwrap_err(),
        };
        let Error::KernelFault { kernel, detail, .. } = &e else {
            panic!("expected a kernel fault, got {e:?}")
        };
        println!("{e}");
        if blocking {
            assert_eq!(kernel, "cf_fault", "{e}");
        } else if kernel != "cf_fault" {
            assert!(
                kernel.starts_with("one of:")
                    && kernel.contains("cf_fault")
                    && detail.contains("any of them"),
                "{e}"
            );
        }
        println!("FAULT-OK");
        return;
    }
    if cuda().is_none() {
        return;
    }
    for env in [&[][..], &[("CUEFLOW_LAUNCH_BLOCKING", "1")][..]] {
        let (stdout, _) = child_passed(&child(NAME, env).expect("the parent"), "FAULT-OK");
        say(format_args!(
            "{}",
            stdout.lines().find(|l| l.contains("faulted")).unwrap_or("")
        ));
    }
}

/// CUDA (Q2 with graph launches batched): a fault after graph launches names the faulting
/// kernel (alone or among candidates), never only the graph; a fault inside a graph launched
/// after kernel launches names the graph's kernels (alone or among candidates), never only
/// the earlier kernel. Each in a child process (a fault poisons the process's contexts).
#[test]
fn cuda_fault_beside_graph_launches_names_the_right_candidates() {
    const NAME: &str = "cuda_fault_beside_graph_launches_names_the_right_candidates";
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == NAME) {
        let fault_in_graph = std::env::var("FAULT_IN_GRAPH").is_ok();
        let dev = Device::cuda(0).unwrap();
        let s = Stream::new(&dev).unwrap();
        let d = DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        if fault_in_graph {
            kernels::fault(&s).unwrap();
        } else {
            kernels::fill(&s, &d, 1.0).unwrap();
        }
        let exec = s.end_capture().unwrap().instantiate().unwrap();
        let launched = if fault_in_graph {
            for _ in 0..4 {
                kernels::fill(&s, &d, 1.0).unwrap();
            }
            exec.launch(&s)
        } else {
            for _ in 0..4 {
                exec.launch(&s).unwrap();
            }
            kernels::fault(&s)
        };
        let e = match launched {
            Err(e) => e,
            Ok(()) => s.synchronize().unwrap_err(),
        };
        let Error::KernelFault { kernel, .. } = &e else {
            panic!("expected a kernel fault, got {e:?}")
        };
        println!("{e}");
        let culprit = if fault_in_graph {
            "kernels of a graph launch"
        } else {
            "cf_fault"
        };
        assert!(
            kernel == culprit || (kernel.starts_with("one of:") && kernel.contains(culprit)),
            "{e}"
        );
        println!("FAULT-OK");
        return;
    }
    if cuda().is_none() {
        return;
    }
    for env in [&[][..], &[("FAULT_IN_GRAPH", "1")][..]] {
        let (stdout, _) = child_passed(&child(NAME, env).expect("the parent"), "FAULT-OK");
        say(format_args!(
            "{}",
            stdout.lines().find(|l| l.contains("faulted")).unwrap_or("")
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Item 9: typed errors, quiet caught panics, bounded threads.

/// Open devices until threads run out (`ulimit -v`): a typed `OutOfResources`, no panic; and
/// once they are dropped, a device opens and runs again.
#[test]
fn running_out_of_threads_is_a_typed_error() {
    if let Some(out) = child(
        "running_out_of_threads_is_a_typed_error",
        &[("MALLOC_ARENA_MAX", "2")],
    ) {
        let (_, stderr) = child_passed(&out, "THREADS-OK");
        assert!(!stderr.contains("panicked"), "{stderr}");
        return;
    }
    // Warm up what the first device and kernel allocate once per process.
    let warm = Device::host_with_workers(2).unwrap();
    kernels::empty(&Stream::new(&warm).unwrap()).unwrap();
    warm.synchronize().unwrap();
    drop(warm);
    limit_address_space(192 << 20);
    let mut devs = Vec::new();
    let err = loop {
        match Device::host_with_workers(4) {
            Ok(d) => devs.push(d),
            Err(e) => break e,
        }
        assert!(devs.len() < 10_000, "the limit did not bite");
    };
    assert!(matches!(err, Error::OutOfResources(_)), "{err:?}");
    let opened = devs.len();
    drop(devs);
    let dev = Device::host_with_workers(4).expect("a device after the others were dropped");
    let s = Stream::new(&dev).unwrap();
    kernels::empty(&s).unwrap();
    s.synchronize().unwrap();
    println!("THREADS-OK after {opened} devices: {err}");
}

/// Opening and dropping devices (each with a stream, a kernel and a completion) keeps the
/// thread count bounded: engines and completion watchers go with their device.
#[test]
fn device_churn_keeps_threads_bounded() {
    if let Some(out) = child("device_churn_keeps_threads_bounded", &[]) {
        let (stdout, _) = child_passed(&out, "CHURN-OK");
        say(format_args!(
            "{}",
            stdout
                .lines()
                .find(|l| l.contains("CHURN-OK"))
                .unwrap_or("")
        ));
        return;
    }
    let base = status("Threads");
    let mut most = base;
    for _ in 0..300 {
        let dev = Device::host_with_workers(2).unwrap();
        let s = Stream::new(&dev).unwrap();
        kernels::empty(&s).unwrap();
        s.completion().unwrap().wait().unwrap();
        s.record().unwrap().completion().unwrap().wait().unwrap();
        s.synchronize().unwrap();
        most = most.max(status("Threads"));
    }
    println!("CHURN-OK threads: {base} at the start, {most} at most");
    assert!(
        most <= base + 16,
        "threads piled up: {base} at the start, {most} at most"
    );
}

/// Panics that cueflow catches and returns as errors (a faulting host kernel, a panicking host
/// function, a collective timeout) print nothing; a program's own panic still prints.
#[test]
fn caught_panics_print_nothing() {
    if let Some(out) = child("caught_panics_print_nothing", &[]) {
        let (_, stderr) = child_passed(&out, "QUIET-OK");
        assert!(
            !stderr.contains("cueflow-")
                && !stderr.contains("illegal address")
                && !stderr.contains("a host function's panic")
                && !stderr.contains("timed out"),
            "a caught panic was printed:\n{stderr}"
        );
        assert!(
            stderr.contains("the program's own panic"),
            "the program's own panic must still print:\n{stderr}"
        );
        return;
    }
    let check = |r: Result<()>| {
        let e = r.unwrap_err();
        assert!(e.is_sticky(), "{e:?}");
    };
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    kernels::fault(&s).unwrap();
    check(s.synchronize());
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    s.host_fn(|| panic!("a host function's panic")).unwrap();
    check(s.synchronize());
    let devs = [Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
    let comm = Communicator::with_timeout(&devs, Duration::from_millis(50)).unwrap();
    let s: Vec<Stream> = devs.iter().map(|d| Stream::new(d).unwrap()).collect();
    let b: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, 16).unwrap())
        .collect();
    s[1].host_fn(|| std::thread::sleep(Duration::from_millis(300)))
        .unwrap();
    comm.all_reduce(
        &[(&s[0], &b[0], &b[0]), (&s[1], &b[1], &b[1])],
        cueflow::ReduceOp::Sum,
    )
    .unwrap();
    check(s[0].synchronize());
    check(s[1].synchronize());
    let own = std::panic::catch_unwind(|| panic!("the program's own panic"));
    assert!(own.is_err());
    println!("QUIET-OK");
}

// ---------------------------------------------------------------------------------------------
// Item 3 (GR2): abandoned and invalidated captures end with their stream.

/// The device takes work again, from this thread and another: a synchronous allocation, a
/// device synchronize, a new global capture.
fn device_is_usable(dev: &Device) {
    let d = DeviceBuffer::<f32>::new(dev, 64).expect("a synchronous allocation");
    dev.synchronize().expect("a device synchronize");
    let other = dev.clone();
    std::thread::spawn(move || {
        DeviceBuffer::<f32>::new(&other, 64).expect("an allocation from another thread");
        other
            .synchronize()
            .expect("a synchronize from another thread");
    })
    .join()
    .unwrap();
    let s = Stream::new(dev).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&s, &d, 2.0).unwrap();
    s.end_capture()
        .unwrap()
        .instantiate()
        .unwrap()
        .launch(&s)
        .unwrap();
    s.synchronize().unwrap();
    let mut out = vec![0.0f32; 64];
    s.read_pageable(&mut out, &d).unwrap();
    assert!(out.iter().all(|&x| x == 2.0));
}

/// Dropping a stream while it captures (global mode, with a joined stream still alive).
fn dropped_while_capturing(dev: &Device) {
    let d = DeviceBuffer::<f32>::new(dev, 64).unwrap();
    let joined = Stream::new(dev).unwrap();
    {
        let s = Stream::new(dev).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        kernels::fill(&s, &d, 1.0).unwrap();
        joined.wait_event(&s.record().unwrap()).unwrap();
        kernels::scale(&joined, &d, 3.0).unwrap();
    }
    device_is_usable(dev);
    // The joined stream captures no more: its work runs.
    assert!(!joined.is_capturing());
    kernels::fill(&joined, &d, 5.0).unwrap();
    joined.synchronize().unwrap();
}

/// Returning early by `?` after a call invalidated the capture: the stream goes with the scope.
fn early_return_after_invalidation(dev: &Device) {
    fn captured(dev: &Device, d: &DeviceBuffer<f32>) -> Result<cueflow::Graph> {
        let s = Stream::new(dev)?;
        s.begin_capture(CaptureMode::Global)?;
        kernels::fill(&s, d, 1.0)?;
        dev.synchronize()?; // Illegal in a capture: invalidates it, and `?` returns.
        s.end_capture()
    }
    let d = DeviceBuffer::<f32>::new(dev, 64).unwrap();
    assert!(matches!(captured(dev, &d), Err(Error::CaptureIllegal(_))));
    device_is_usable(dev);
}

/// A thread that abandons its capture leaves the device usable for every other thread.
fn abandoned_in_another_thread(dev: &Device) {
    let d2 = dev.clone();
    std::thread::spawn(move || {
        let s = Stream::new(&d2).unwrap();
        let b = DeviceBuffer::<f32>::new(&d2, 64).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        kernels::fill(&s, &b, 1.0).unwrap();
        // A failed call, then the thread ends with the stream.
        assert!(DeviceBuffer::<f32>::new(&d2, 8).is_err());
    })
    .join()
    .unwrap();
    device_is_usable(dev);
}

#[test]
fn a_stream_dropped_while_capturing_ends_its_capture_host() {
    dropped_while_capturing(&Device::host().unwrap());
}

#[test]
fn an_early_return_after_an_invalidated_capture_ends_it_host() {
    early_return_after_invalidation(&Device::host().unwrap());
}

#[test]
fn a_capture_abandoned_by_another_thread_ends_with_its_stream_host() {
    abandoned_in_another_thread(&Device::host().unwrap());
}

#[test]
fn abandoned_captures_end_with_their_stream_cuda() {
    if let Some(dev) = cuda() {
        dropped_while_capturing(&dev);
        early_return_after_invalidation(&dev);
        abandoned_in_another_thread(&dev);
    }
}

// ---------------------------------------------------------------------------------------------
// Item 1 (AC6, AC4): graph nodes that conflict are never run at once on the host backend, and
// the sanitizer reports them at instantiation.

/// A host kernel that writes its whole buffer (one block) and counts the times another launch
/// of it was inside at the same moment: each holds `&mut` to the same tile, so any overlap is
/// two live `&mut` to one memory — undefined behaviour.
fn exclusive_writer() -> (Kernel, Arc<AtomicUsize>) {
    let inside = Arc::new(AtomicUsize::new(0));
    let together = Arc::new(AtomicUsize::new(0));
    let (i, t) = (inside.clone(), together.clone());
    let k = Kernel::new("rel_exclusive_writer")
        .host(move |_, a| {
            let tile = a.tile_mut::<u32>(0);
            if i.fetch_add(1, Ordering::SeqCst) > 0 {
                t.fetch_add(1, Ordering::SeqCst);
            }
            tile.fill(a.scalar::<u32>(1));
            std::thread::sleep(Duration::from_millis(3));
            if i.load(Ordering::SeqCst) > 1 {
                t.fetch_add(1, Ordering::SeqCst);
            }
            i.fetch_sub(1, Ordering::SeqCst);
        })
        .build();
    (k, together)
}

fn write_all(s: &Stream, k: &Kernel, buf: &DeviceBuffer<u32>, id: u32) -> Result<()> {
    s.launch(
        k,
        LaunchConfig::new(1, buf.len() as u32),
        KernelArgs::new().write(buf).scalar(id),
    )
}

/// Capture `first` and `second` on two streams forked from the origin by an event, with no
/// event between them (joined back into the origin at the end).
fn forked(
    dev: &Device,
    first: impl FnOnce(&Stream) -> Result<()>,
    second: impl FnOnce(&Stream) -> Result<()>,
) -> cueflow::Graph {
    let origin = Stream::new(dev).unwrap();
    let (a, b) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    origin.begin_capture(CaptureMode::Global).unwrap();
    let fork = origin.record().unwrap();
    a.wait_event(&fork).unwrap();
    b.wait_event(&fork).unwrap();
    first(&a).unwrap();
    second(&b).unwrap();
    origin.wait_event(&a.record().unwrap()).unwrap();
    origin.wait_event(&b.record().unwrap()).unwrap();
    origin.end_capture().unwrap()
}

#[test]
fn conflicting_graph_nodes_never_run_at_once_host() {
    let dev = Device::host_with_workers(4).unwrap();
    dev.set_sanitize(SanitizeMode::Off);
    let buf = DeviceBuffer::<u32>::new(&dev, 64).unwrap();
    let other = DeviceBuffer::<u32>::new(&dev, 64).unwrap();
    let (k, together) = exclusive_writer();
    // The same two launches on plain streams: AC6 serializes them.
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    for _ in 0..10 {
        write_all(&a, &k, &buf, 1).unwrap();
        write_all(&b, &k, &buf, 2).unwrap();
    }
    dev.synchronize().unwrap();
    assert_eq!(
        together.load(Ordering::SeqCst),
        0,
        "streams ran them at once"
    );
    // In a graph.
    let g = forked(
        &dev,
        |s| write_all(s, &k, &buf, 1),
        |s| write_all(s, &k, &buf, 2),
    );
    let exec = g.instantiate().unwrap();
    let s = Stream::new(&dev).unwrap();
    for _ in 0..20 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(
        together.load(Ordering::SeqCst),
        0,
        "a graph replay ran two conflicting kernels at once"
    );
    // An update that makes disjoint nodes conflict gets the same guarantee.
    let disjoint = forked(
        &dev,
        |s| write_all(s, &k, &buf, 1),
        |s| write_all(s, &k, &other, 2),
    );
    let exec = disjoint.instantiate().unwrap();
    exec.update(&g).unwrap();
    for _ in 0..20 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(
        together.load(Ordering::SeqCst),
        0,
        "an updated graph ran two conflicting kernels at once"
    );
}

/// The sanitizer reports two unordered graph nodes writing one buffer at instantiation, naming
/// both (kernel and call site); error mode refuses the instantiation; a joined graph is clean.
fn graph_races_are_reported(dev: &Device) {
    let buf = DeviceBuffer::<f32>::new(dev, 256).unwrap();
    dev.set_sanitize(SanitizeMode::Warn);
    dev.take_sanitizer_reports();
    let line = line!() + 3;
    let g = forked(
        dev,
        |s| kernels::fill(s, &buf, 1.0),
        |s| kernels::scale(s, &buf, 2.0),
    );
    assert!(dev.sanitizer_reports().is_empty(), "capturing runs nothing");
    let exec = g.instantiate().unwrap();
    let reports = dev.take_sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let r = &reports[0];
    assert!(r.earlier.actor.contains("graph node 0"), "{r}");
    assert!(r.later.actor.contains("graph node 1"), "{r}");
    assert!(r.earlier.operation.contains("cf_fill_f32"), "{r}");
    assert!(r.later.operation.contains("cf_scale_f32"), "{r}");
    assert_eq!(r.earlier.site.line(), line, "{r}");
    assert_eq!(r.later.site.line(), line + 1, "{r}");
    let s = Stream::new(dev).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    // Error mode: refused.
    dev.set_sanitize(SanitizeMode::Error);
    assert!(matches!(g.instantiate(), Err(Error::Race(_))));
    dev.take_sanitizer_reports();
    // A correct graph (the second stream waits for the first) is never reported.
    let origin = Stream::new(dev).unwrap();
    let (a, b) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let small = DeviceBuffer::<f32>::new(dev, 8).unwrap();
    origin.begin_capture(CaptureMode::Global).unwrap();
    a.wait_event(&origin.record().unwrap()).unwrap();
    kernels::fill(&a, &buf, 1.0).unwrap();
    b.wait_event(&a.record().unwrap()).unwrap();
    kernels::scale(&b, &buf, 2.0).unwrap();
    kernels::fill(&origin, &small, 0.0).unwrap();
    origin.wait_event(&b.record().unwrap()).unwrap();
    let ok = origin.end_capture().unwrap().instantiate().unwrap();
    ok.launch(&s).unwrap();
    s.synchronize().unwrap();
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:#?}");
    dev.set_sanitize(SanitizeMode::Off);
}

#[test]
fn graph_races_are_reported_at_instantiation_host() {
    graph_races_are_reported(&Device::host().unwrap());
}

#[test]
fn graph_races_are_reported_at_instantiation_cuda() {
    if let Some(dev) = cuda() {
        graph_races_are_reported(&dev);
    }
}

// ---------------------------------------------------------------------------------------------
// Item 4 (RL2): the sanitizer forgets dropped streams without forgetting a race. The soak of
// every mode is `tests/soak.rs`.

/// A dropped stream whose work no host call observed still races; one ordered before a live
/// stream by an event stays ordered however many streams come and go meanwhile (clocks are
/// compacted); once the host observed it, it is forgotten.
#[test]
fn dropped_streams_are_forgotten_without_losing_races() {
    let dev = Device::host().unwrap();
    dev.set_sanitize(SanitizeMode::Warn);
    let buf = DeviceBuffer::<f32>::new(&dev, 256).unwrap();
    let nb = || Stream::builder(&dev).non_blocking().build().unwrap();
    let gate_flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    // Unobserved and unordered: a race, after the writer is gone.
    {
        let a = nb();
        kernels::wait_flag(&a, &gate_flag, 1, Duration::from_secs(20)).unwrap();
        kernels::fill(&a, &buf, 1.0).unwrap();
    }
    let b = nb();
    kernels::scale(&b, &buf, 2.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    kernels::set_flag(&nb(), &gate_flag, 1).unwrap();
    dev.synchronize().unwrap();
    // Ordered by an event, then dropped unobserved; then many streams come and go, each known
    // to `b` through an event, so `b`'s clock is compacted many times.
    {
        let a = nb();
        kernels::wait_flag(&a, &gate_flag, 2, Duration::from_secs(20)).unwrap();
        kernels::fill(&a, &buf, 1.0).unwrap();
        b.wait_event(&a.record().unwrap()).unwrap();
    }
    let small = DeviceBuffer::<f32>::new(&dev, 4).unwrap();
    for i in 0..500 {
        let s = nb();
        kernels::fill(&s, &small, i as f32).unwrap();
        b.wait_event(&s.record().unwrap()).unwrap();
        s.synchronize().unwrap();
    }
    kernels::scale(&b, &buf, 2.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:#?}");
    kernels::set_flag(&nb(), &gate_flag, 2).unwrap();
    b.synchronize().unwrap();
    // Observed: a new stream is ordered after all of it.
    kernels::fill(&nb(), &buf, 3.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:#?}");
    dev.synchronize().unwrap();
}

/// Found by the fuzzer: a wait on the legacy stream for an event that is already done (or was
/// never recorded) enqueues nothing, so it does not make the legacy stream wait for blocking
/// streams (ST4); a host synchronization of the legacy stream afterwards observes none of
/// their work, and a race with it is still a race (the sanitizer missed it, and with dropped
/// streams forgotten, reported a race between ordered work instead).
#[test]
fn a_legacy_wait_that_enqueues_nothing_orders_nothing() {
    let dev = Device::host().unwrap();
    dev.set_sanitize(SanitizeMode::Warn);
    let x = DeviceBuffer::<f32>::new(&dev, 256).unwrap();
    let flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    let a = Stream::new(&dev).unwrap();
    kernels::wait_flag(&a, &flag, 1, Duration::from_secs(20)).unwrap();
    kernels::fill(&a, &x, 1.0).unwrap();
    let legacy = Stream::legacy(&dev);
    legacy.wait_event(&Event::new(&dev).unwrap()).unwrap();
    legacy.synchronize().unwrap();
    let b = Stream::builder(&dev).non_blocking().build().unwrap();
    kernels::fill(&b, &x, 2.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    let opener = Stream::builder(&dev).non_blocking().build().unwrap();
    kernels::set_flag(&opener, &flag, 1).unwrap();
    dev.synchronize().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(reports[0].earlier.operation.contains("cf_fill_f32"));
}
