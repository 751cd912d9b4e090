//! Item 6 (RL1): bounded queues.

use super::*;

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
