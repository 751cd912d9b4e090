//! Host-side cost of enqueuing, per operation kind: what a program pays per call on top of the
//! device work. Each figure is the median over batches of the per-call CPU time of the calling
//! thread over a batch of calls (the device is synchronized between batches, untimed). CPU time
//! rather than wall time: on a small machine the host backend's engine threads take the core
//! from the caller at random, which wall time would count and CPU time does not.
//!
//! The ordering layers are chosen by the environment, so the same program measures every mode:
//! `CUEFLOW_SANITIZE=warn` (race sanitizer), `CUEFLOW_AUTO_ORDER=1` (automatic ordering),
//! neither (the default). `scripts/enqueue-cost.sh` runs all three, and a build of an earlier
//! commit, alternately, and prints the ratios.
//!
//! Run: `cargo run --release -p cueflow --example enqueue_cost [batches] [calls]`, with
//! `CUEFLOW_DEVICE=cuda:0` for a GPU. Prints one `op median_ns` line per operation.

use cueflow::{kernels, Device, DeviceBuffer, Event, EventFlags, PinnedBuffer, Result, Stream};

/// CPU time of the calling thread, in nanoseconds.
fn thread_cpu_ns() -> f64 {
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

/// Median over `batches` of the per-call time of `calls` calls of `f`.
fn measure(
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

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let batches = args.next().flatten().unwrap_or(31);
    let calls = args.next().flatten().unwrap_or(200);
    let dev = Device::from_env()?;
    eprintln!("device: {}", dev.properties().name);

    const CHUNK: usize = 1024; // 4 KiB of f32 per chunk
    let streams: Vec<Stream> = (0..4)
        .map(|_| Stream::builder(&dev).non_blocking().build())
        .collect::<Result<_>>()?;
    let s = &streams[0];
    let d = DeviceBuffer::<f32>::new(&dev, 4 * CHUNK)?;
    let chunks = d.chunks(4)?;
    let host = PinnedBuffer::<f32>::new(&dev, CHUNK)?;
    let one = d.slice(0..CHUNK)?;
    let sync_only = EventFlags {
        timing: false,
        ..Default::default()
    };
    let ev = Event::with_flags(&dev, sync_only)?;
    s.record_event(&ev)?;

    let rows: Vec<(&str, f64)> = vec![
        (
            "launch_empty",
            measure(&dev, batches, calls, |_| kernels::empty(s))?,
        ),
        (
            "launch_buffer",
            measure(&dev, batches, calls, |_| kernels::scale(s, &one, 1.0))?,
        ),
        (
            "launch_4_streams_chunks",
            measure(&dev, batches, calls, |i| {
                kernels::scale(&streams[i % 4], &chunks[i % 4], 1.0)
            })?,
        ),
        (
            "copy_h2d_pinned_4k",
            measure(&dev, batches, calls, |_| s.copy_h2d(&one, &host))?,
        ),
        (
            "event_record",
            measure(&dev, batches, calls, |_| s.record_event(&ev))?,
        ),
        (
            "stream_wait",
            measure(&dev, batches, calls, |_| streams[1].wait_event(&ev))?,
        ),
    ];
    for (name, ns) in rows {
        println!("{name} {ns:.1}");
    }
    Ok(())
}
