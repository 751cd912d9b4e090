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

#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::{batches_and_calls, measure};

fn main() -> Result<()> {
    let (batches, calls) = batches_and_calls();
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
