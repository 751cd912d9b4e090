//! Per-call host CPU time, for the examples that measure what a call costs the caller
//! (`enqueue_cost`, `host_reach_gate_cost`). CPU time of the calling thread rather than wall
//! time: on a small machine the host backend's engine threads take the core from the caller
//! at random, which wall time would count and CPU time does not.

use cueflow::{Device, Result};

/// CPU time of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median over `batches` of the per-call time of `calls` calls of `f` (given the call's
/// index); the device is synchronized between batches, untimed.
pub fn measure(
    dev: &Device,
    batches: usize,
    calls: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let mut per_call = Vec::with_capacity(batches);
    for b in 0..batches + 2 {
        dev.synchronize()?;
        let t = thread_cpu_ns();
        for i in 0..calls {
            f(i)?;
        }
        let ns = (thread_cpu_ns() - t) / calls as f64;
        if b >= 2 {
            per_call.push(ns); // The first two batches warm caches and pools.
        }
    }
    dev.synchronize()?;
    Ok(median(per_call))
}

/// The program's `[batches] [calls]` arguments (31 and 200 when not given; at least 1 each).
pub fn batches_and_calls() -> (usize, usize) {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let batches = args.next().flatten().unwrap_or(31);
    let calls = args.next().flatten().unwrap_or(200);
    (batches.max(1), calls.max(1))
}
