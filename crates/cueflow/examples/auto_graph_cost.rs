//! Host instructions per held call of automatic graphs (SPEC AG2), two programs:
//!
//! - a window of `calls` `kernels::scale` launches on one stream, then a synchronize, repeated
//!   `windows` times: `held_windows` on a stream in the mode (every call held, the window
//!   replayed), `plain_windows` on a stream outside it;
//! - a fork/join window over four streams (24 calls: 14 launches, 4 records, 6 waits, as in
//!   the `auto_graph` example), `held_forkjoin` and `plain_forkjoin`, `windows * 10` times.
//!
//! The first windows record the signatures and instantiate the graphs (`warm`, not measured).
//! `scripts/autograph-instructions.sh` counts each function's instructions with callgrind and
//! divides by its calls.
//!
//! Run: `cargo run --release -p cueflow --example auto_graph_cost [windows] [calls]`; prints
//! what the mode did, so a run whose windows were not replayed shows it, and the fork/join
//! windows' host time per call, held and plain (run natively under `tools/null-driver`, on a
//! GPU machine too: cueflow's own time there, the driver doing nothing).

use std::time::Instant;

use cueflow::{kernels, Device, DeviceBuffer, Event, Result, Stream};

/// `calls` launches on `s`, then a synchronize, `windows` times.
fn windows_of(s: &Stream, d: &DeviceBuffer<f32>, windows: usize, calls: usize) -> Result<()> {
    for _ in 0..windows {
        for _ in 0..calls {
            kernels::scale(s, d, 1.0)?;
        }
        s.synchronize()?;
    }
    Ok(())
}

/// The buffers and events of the fork/join window.
struct ForkJoin {
    ev: Vec<Event>,
    src: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    xs: Vec<DeviceBuffer<f32>>,
}

impl ForkJoin {
    fn new(dev: &Device) -> Result<ForkJoin> {
        Ok(ForkJoin {
            ev: (0..4).map(|_| Event::new(dev)).collect::<Result<_>>()?,
            src: DeviceBuffer::from_slice(dev, &[1.0f32; 1024])?,
            y: DeviceBuffer::new(dev, 1024)?,
            xs: (0..4)
                .map(|_| DeviceBuffer::new(dev, 1024))
                .collect::<Result<_>>()?,
        })
    }

    /// `windows` fork/join windows over `s`, each ended by a synchronize.
    fn run(&self, s: &[Stream], windows: usize) -> Result<()> {
        for _ in 0..windows {
            kernels::scale(&s[0], &self.src, 1.0)?;
            s[0].record_event(&self.ev[0])?;
            for k in 1..4 {
                s[k].wait_event(&self.ev[0])?;
                kernels::fill(&s[k], &self.xs[k], 0.0)?;
                kernels::saxpy(&s[k], k as f32, &self.src, &self.xs[k])?;
                kernels::scale(&s[k], &self.xs[k], 1.0)?;
                s[k].record_event(&self.ev[k])?;
                s[0].wait_event(&self.ev[k])?;
            }
            kernels::fill(&s[0], &self.y, 0.0)?;
            for x in &self.xs[1..] {
                kernels::saxpy(&s[0], 1.0, x, &self.y)?;
            }
            s[0].synchronize()?;
        }
        Ok(())
    }
}

/// The measured windows of the stream in the mode: every call held, each window one replay.
#[inline(never)]
fn held_windows(s: &Stream, d: &DeviceBuffer<f32>, windows: usize, calls: usize) -> Result<()> {
    std::hint::black_box("held"); // Not folded into plain_windows: callgrind names each.
    windows_of(s, d, windows, calls)
}

/// The same windows on a stream outside the mode.
#[inline(never)]
fn plain_windows(s: &Stream, d: &DeviceBuffer<f32>, windows: usize, calls: usize) -> Result<()> {
    std::hint::black_box("plain");
    windows_of(s, d, windows, calls)
}

/// Fork/join windows over streams in the mode.
#[inline(never)]
fn held_forkjoin(f: &ForkJoin, s: &[Stream], windows: usize) -> Result<()> {
    std::hint::black_box("held");
    f.run(s, windows)
}

/// Fork/join windows over streams outside the mode.
#[inline(never)]
fn plain_forkjoin(f: &ForkJoin, s: &[Stream], windows: usize) -> Result<()> {
    std::hint::black_box("plain");
    f.run(s, windows)
}

/// Windows that record the signatures and instantiate the graphs (not measured).
#[inline(never)]
fn warm(s: &Stream, d: &DeviceBuffer<f32>, calls: usize) -> Result<()> {
    windows_of(s, d, 3, calls)
}

fn streams(dev: &Device, auto: bool) -> Result<Vec<Stream>> {
    (0..4)
        .map(|_| {
            let b = Stream::builder(dev).non_blocking();
            if auto {
                b.auto_graph().build()
            } else {
                b.build()
            }
        })
        .collect()
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let windows = args.next().flatten().unwrap_or(20);
    let calls = args.next().flatten().unwrap_or(1000);
    let dev = Device::from_env()?;
    let (held, plain) = (streams(&dev, true)?, streams(&dev, false)?);
    let d = DeviceBuffer::from_slice(&dev, &[1.0f32; 256])?;
    let f = ForkJoin::new(&dev)?;
    // Each program warms up right before it is measured: the other's graphs go meanwhile
    // (AG6: two windows without a replay), not while it is measured.
    warm(&held[0], &d, calls)?;
    warm(&plain[0], &d, calls)?;
    let warmed = dev.auto_graph_stats();
    held_windows(&held[0], &d, windows, calls)?;
    plain_windows(&plain[0], &d, windows, calls)?;
    let mid = dev.auto_graph_stats();
    f.run(&held, 3)?;
    f.run(&plain, 3)?;
    let warmed_fj = dev.auto_graph_stats();
    let t = Instant::now();
    held_forkjoin(&f, &held, windows * 10)?;
    let held_ns = t.elapsed().as_nanos() as f64 / (windows * 10 * 24) as f64;
    let t = Instant::now();
    plain_forkjoin(&f, &plain, windows * 10)?;
    let plain_ns = t.elapsed().as_nanos() as f64 / (windows * 10 * 24) as f64;
    let st = dev.auto_graph_stats();
    // What the measured windows did (the warm-ups left out).
    let during =
        |f: fn(&cueflow::AutoGraphStats) -> u64| f(&st) - f(&warmed_fj) + f(&mid) - f(&warmed);
    assert_eq!(
        during(|s| s.graphs),
        0,
        "graphs instantiated while measured"
    );
    println!(
        "windows={windows} calls={calls} forkjoin_windows={} replays={} replayed_ops={} \
         issued_one_by_one={}",
        windows * 10,
        during(|s| s.replays),
        during(|s| s.replayed_ops),
        during(|s| s.issued_one_by_one),
    );
    // Host time, for a native run beside the counts (under tools/null-driver: cueflow's own).
    println!("forkjoin ns_per_call held={held_ns:.0} plain={plain_ns:.0}");
    // tools/null-driver computes nothing: its runs count instructions, their data means nothing.
    if dev.properties().name.starts_with("null device") {
        println!("results not checked: the null driver computes nothing");
        return Ok(());
    }
    assert_eq!(d.to_vec()?, vec![1.0f32; 256]);
    assert_eq!(f.y.to_vec()?, vec![6.0f32; 1024]);
    Ok(())
}
