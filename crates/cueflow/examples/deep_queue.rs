//! A deep queue (SPEC RL1, issue 16 item 6): N empty kernels on one stream with no
//! synchronization in between, then one synchronize. Prints the drain time (first launch to the
//! synchronize's return), the enqueue time, and how much the process's memory grew at its peak
//! (`VmHWM`, so the first run's figure is the one to read) and after the drain. Twin of `benches/cuda/deep_queue.cu` (raw `cuLaunchKernel`): on a GPU,
//! compare this `ms=` with that one's, from the same machine.
//!
//! Run: `cargo run --release -p cueflow --example deep_queue [n] [reps] [busy_ms]` (defaults
//! 200000, 5, 0; `busy_ms` puts a kernel that keeps the device busy that long at the head),
//! with `CUEFLOW_DEVICE=cuda:0` for a GPU; `CUEFLOW_QUEUE_DEPTH` sets the bound of pending work
//! per stream. Prints one `RESULT deep_queue ...` line (the median run).

use std::time::Instant;

use cueflow::{kernels, Device, Result, Stream};

/// Resident set size now, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The process's peak resident set size so far, in bytes (`VmHWM`).
fn peak_rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let n = args.next().flatten().unwrap_or(200_000);
    let reps = args.next().flatten().unwrap_or(5).max(1);
    let busy_ms = args.next().flatten().unwrap_or(0) as u64;
    let dev = Device::from_env()?;
    let s = Stream::builder(&dev).non_blocking().build()?;
    println!(
        "# deep queue through cueflow: {n} empty kernels, {reps} runs, {} (queue depth {})",
        dev.properties().name,
        dev.queue_depth()
    );
    let start = rss();
    let mut runs = Vec::new();
    for r in 0..reps {
        kernels::empty(&s)?;
        s.synchronize()?;
        let mut peak = rss();
        let t = Instant::now();
        if busy_ms > 0 {
            // The device is busy first: an unbounded queue would grow meanwhile.
            kernels::spin(&s, std::time::Duration::from_millis(busy_ms), 1)?;
        }
        for i in 0..n {
            kernels::empty(&s)?;
            if i % 16_384 == 0 {
                peak = peak.max(rss());
            }
        }
        let enqueue = t.elapsed();
        s.synchronize()?;
        let drain = t.elapsed();
        let after = rss();
        peak = peak.max(peak_rss());
        println!(
            "run {r}: enqueue {:.1} ms, drain {:.1} ms, peak +{} KiB, after the drain +{} KiB",
            enqueue.as_secs_f64() * 1e3,
            drain.as_secs_f64() * 1e3,
            peak.saturating_sub(start) >> 10,
            after.saturating_sub(start) >> 10
        );
        runs.push((
            drain,
            enqueue,
            peak.saturating_sub(start),
            after.saturating_sub(start),
        ));
    }
    runs.sort_by_key(|r| r.0);
    let (drain, enqueue, peak, after) = runs[runs.len() / 2];
    let ms = drain.as_secs_f64() * 1e3;
    println!(
        "RESULT deep_queue backend={} n={n} ms={ms:.2} enqueue_ms={:.2} us_per_kernel={:.3} \
         peak_growth_kib={} after_drain_kib={}",
        dev.properties().backend,
        enqueue.as_secs_f64() * 1e3,
        ms * 1e3 / n as f64,
        peak >> 10,
        after >> 10
    );
    Ok(())
}
