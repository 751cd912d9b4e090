//! API overhead and copy bandwidth, each measured against a reference taken in the same run:
//!
//! - host-side cost of enqueuing an empty kernel, an event record and a stream wait, and of a
//!   launch + stream synchronize round trip, as the median over batches of many calls. The
//!   references are the least a threaded runtime can do: for enqueues, an `mpsc` send of a boxed
//!   closure to a worker thread; for the round trip, an atomic ping-pong with a spinning thread.
//!   The targets and CUDA's numbers on an H100 are printed beside them.
//! - pinned host-to-device copy bandwidth, as a fraction of `copy_from_slice` of the same size.

use std::time::Instant;

use cueflow::pipeline::median;
use cueflow::{kernels, Device, DeviceBuffer, Event, PinnedBuffer, Stream};

use super::reference::{PingPong, RefQueue};
use crate::errors::CliResult;

/// The reference of the enqueue costs.
pub const ENQUEUE_REFERENCE: &str = "mpsc send of a boxed closure to a worker thread";
/// The reference of the launch + synchronize round trip.
pub const ROUND_TRIP_REFERENCE: &str =
    "atomic ping-pong with a spinning worker thread (the floor of a hand-off and back)";

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Batches per operation; the result is the median over batches.
    pub batches: usize,
    /// Calls per batch (round trips: a quarter of this).
    pub ops: usize,
    /// Bytes of the bandwidth copy.
    pub copy_bytes: usize,
    /// Timed copies (and reference copies).
    pub copy_reps: usize,
}

/// One measured API cost.
#[derive(Clone, Debug)]
pub struct ApiCost {
    /// What was measured.
    pub name: &'static str,
    /// Median over batches of the per-call time, ns.
    pub median_ns: f64,
    /// Fastest batch's per-call time, ns.
    pub min_ns: f64,
    /// Calls per batch.
    pub ops_per_batch: usize,
    /// The reference measured in the same run, ns per call (median over batches).
    pub reference_ns: f64,
    /// What the reference is.
    pub reference: &'static str,
    /// The target, ns.
    pub target_ns: Option<f64>,
    /// CUDA on an H100, ns (from the issue).
    pub cuda_h100_ns: Option<f64>,
}

/// Pinned H2D bandwidth and its reference.
#[derive(Clone, Debug)]
pub struct Bandwidth {
    /// Bytes per copy.
    pub bytes: usize,
    /// Event-timed pinned H2D copies, ns.
    pub h2d_ns: Vec<f64>,
    /// `copy_from_slice` of the same size, ns.
    pub reference_ns: Vec<f64>,
}

impl Bandwidth {
    /// Median H2D rate in GB/s.
    pub fn h2d_gbps(&self) -> f64 {
        self.bytes as f64 / median(self.h2d_ns.clone())
    }

    /// Median reference rate in GB/s.
    pub fn reference_gbps(&self) -> f64 {
        self.bytes as f64 / median(self.reference_ns.clone())
    }
}

/// Per-call ns of `batches` batches of `ops` calls each; `run` does one batch's calls and
/// returns their elapsed ns; `settle` runs after each batch, untimed.
fn batched(
    batches: usize,
    ops: usize,
    mut run: impl FnMut() -> CliResult<f64>,
    mut settle: impl FnMut() -> CliResult<()>,
) -> CliResult<Vec<f64>> {
    let mut v = Vec::with_capacity(batches);
    for _ in 0..batches.max(1) {
        let ns = run()?;
        settle()?;
        v.push(ns / ops.max(1) as f64);
    }
    Ok(v)
}

fn elapsed_ns(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

/// Measure the four API costs. `tick` is called after each.
pub fn measure_api(dev: &Device, st: Settings, mut tick: impl FnMut()) -> CliResult<Vec<ApiCost>> {
    let s = Stream::builder(dev).non_blocking().build()?;
    let other = Stream::builder(dev).non_blocking().build()?;
    let ev = Event::new(dev)?;
    let q = RefQueue::new();
    let (b, n) = (st.batches, st.ops.max(4));
    let n_rt = (n / 4).max(1);
    // Warm-up: first launch, lazily built kernels, thread wake-ups.
    for _ in 0..n.min(256) {
        kernels::empty(&s)?;
        q.send(Box::new(|| {}));
    }
    s.synchronize()?;
    q.drain();

    let sync = || -> CliResult<()> { Ok(s.synchronize()?) };
    let q_sync = || -> CliResult<()> {
        q.drain();
        Ok(())
    };
    let q_enqueue = || -> CliResult<f64> {
        let t = Instant::now();
        for _ in 0..n {
            q.send(Box::new(|| {}));
        }
        Ok(elapsed_ns(t))
    };

    let mut out = Vec::new();
    let mut push = |name, samples: Vec<f64>, refs: Vec<f64>, reference, ops, target, cuda| {
        out.push(ApiCost {
            name,
            min_ns: samples.iter().copied().fold(f64::INFINITY, f64::min),
            median_ns: median(samples),
            ops_per_batch: ops,
            reference_ns: median(refs),
            reference,
            target_ns: target,
            cuda_h100_ns: cuda,
        });
    };

    let launch = batched(
        b,
        n,
        || {
            let t = Instant::now();
            for _ in 0..n {
                kernels::empty(&s)?;
            }
            Ok(elapsed_ns(t))
        },
        sync,
    )?;
    let r = batched(b, n, q_enqueue, q_sync)?;
    push(
        "empty kernel launch (enqueue)",
        launch,
        r,
        ENQUEUE_REFERENCE,
        n,
        Some(500.0),
        Some(2_900.0),
    );
    tick();

    let record = batched(
        b,
        n,
        || {
            let t = Instant::now();
            for _ in 0..n {
                s.record_event(&ev)?;
            }
            Ok(elapsed_ns(t))
        },
        sync,
    )?;
    let r = batched(b, n, q_enqueue, q_sync)?;
    push(
        "event record",
        record,
        r,
        ENQUEUE_REFERENCE,
        n,
        Some(500.0),
        Some(160.0),
    );
    tick();

    other.record_event(&ev)?;
    let wait = batched(
        b,
        n,
        || {
            let t = Instant::now();
            for _ in 0..n {
                s.wait_event(&ev)?;
            }
            Ok(elapsed_ns(t))
        },
        sync,
    )?;
    let r = batched(b, n, q_enqueue, q_sync)?;
    push(
        "stream wait event",
        wait,
        r,
        ENQUEUE_REFERENCE,
        n,
        None,
        None,
    );
    tick();

    let rt = batched(
        b,
        n_rt,
        || {
            let t = Instant::now();
            for _ in 0..n_rt {
                kernels::empty(&s)?;
                s.synchronize()?;
            }
            Ok(elapsed_ns(t))
        },
        || Ok(()),
    )?;
    let pp = PingPong::new();
    for _ in 0..100 {
        pp.round_trip();
    }
    let r = batched(
        b,
        n_rt,
        || {
            let t = Instant::now();
            for _ in 0..n_rt {
                pp.round_trip();
            }
            Ok(elapsed_ns(t))
        },
        || Ok(()),
    )?;
    drop(pp);
    push(
        "launch + stream synchronize",
        rt,
        r,
        ROUND_TRIP_REFERENCE,
        n_rt,
        Some(5_000.0),
        Some(9_800.0),
    );
    tick();
    Ok(out)
}

/// Pinned H2D copies of `st.copy_bytes`, event-timed, interleaved with `copy_from_slice` of the
/// same size between two pre-touched `Vec`s.
pub fn measure_bandwidth(dev: &Device, st: Settings) -> CliResult<Bandwidth> {
    let n = (st.copy_bytes / 4).max(1);
    let mut src = PinnedBuffer::<f32>::new(dev, n)?;
    src.write()?.fill(1.0);
    let dst = DeviceBuffer::<f32>::new(dev, n)?;
    let s = Stream::builder(dev).non_blocking().build()?;
    let (a, b) = (Event::new(dev)?, Event::new(dev)?);
    let host_src = vec![1.0f32; n];
    let mut host_dst = vec![2.0f32; n];
    // Warm-up: fault in every page on both sides.
    s.copy_h2d(&dst, &src)?;
    s.synchronize()?;
    host_dst.copy_from_slice(&host_src);

    let mut h2d = Vec::with_capacity(st.copy_reps);
    let mut reference = Vec::with_capacity(st.copy_reps);
    for _ in 0..st.copy_reps.max(1) {
        s.record_event(&a)?;
        s.copy_h2d(&dst, &src)?;
        s.record_event(&b)?;
        b.synchronize()?;
        h2d.push(f64::from(Event::elapsed_ms(&a, &b)?) * 1e6);

        let t = Instant::now();
        host_dst.copy_from_slice(&host_src);
        std::hint::black_box(&mut host_dst);
        reference.push(elapsed_ns(t));
    }
    Ok(Bandwidth {
        bytes: n * 4,
        h2d_ns: h2d,
        reference_ns: reference,
    })
}
