//! Measurements the performance model needs: each stage of a pipeline over the whole buffer
//! alone, both copy directions at once, and the fixed cost of one operation.
//!
//! Every time here is taken with events on a stream of its own, the median of several runs
//! after an untimed warm-up (which also takes one-time costs such as kernel compilation and the
//! first touch of memory out of the figures).

use bytemuck::Pod;

use super::chunked::ChunkedPipeline;
use super::tune::fit_overhead;
use crate::model::StageTimes;
use crate::{
    Device, DeviceBuffer, Event, PinnedBuffer, PinnedSlice, PinnedSliceMut, Result, Stream,
};

/// Median of a sample (NaN for an empty one).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Time what `enqueue` puts on a fresh stream: one untimed warm-up, then the median of `reps`
/// (at least 1) event-timed runs, in milliseconds.
pub fn time_stage(
    dev: &Device,
    reps: usize,
    mut enqueue: impl FnMut(&Stream) -> Result<()>,
) -> Result<f64> {
    let s = Stream::builder(dev).non_blocking().build()?;
    let (a, b) = (Event::new(dev)?, Event::new(dev)?);
    enqueue(&s)?; // warm-up
    s.synchronize()?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        s.record_event(&a)?;
        enqueue(&s)?;
        s.record_event(&b)?;
        b.synchronize()?;
        t.push(Event::elapsed_ms(&a, &b)? as f64);
    }
    Ok(median(t))
}

/// Whole-buffer times of each stage alone, and of both copy directions at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageMeasurement {
    /// Stage times in ns (the model's input).
    pub stages: StageTimes,
    /// Time for one whole-buffer copy in each direction at the same time, in ns.
    pub duplex_ns: f64,
    /// Cores the device's engines share ([`shared_cores`]; 0 on a GPU).
    pub shared_cores: u32,
}

/// Cores the engines of `dev` share, for
/// [`ModelParams::shared_cores`](crate::model::ModelParams::shared_cores): on the host backend,
/// the machine's cores when they are fewer than the device's engine threads (two copy engines
/// and the compute workers), else 0 — as on a GPU, whose engines are hardware of their own.
pub fn shared_cores(dev: &Device) -> u32 {
    let p = dev.properties();
    if p.backend != "host" {
        return 0;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    if cores < p.compute_units.saturating_add(2) {
        cores
    } else {
        0
    }
}

impl StageMeasurement {
    /// Slowdown of each copy direction while the other runs (≥ 1).
    pub fn duplex_slowdown(&self) -> f64 {
        let alone = self.stages.h2d_ns.max(self.stages.d2h_ns);
        (self.duplex_ns / alone).max(1.0)
    }

    /// The lower bound of any pipeline: the larger of the compute time and the time to move
    /// the data both ways at once (or one way after the other, if that is what the machine does).
    pub fn bound_ns(&self) -> f64 {
        self.stages.kernel_ns.max(self.duplex_ns)
    }

    /// The same measurement for a buffer `f` times as large (stage times scale linearly).
    pub fn scaled(&self, f: f64) -> StageMeasurement {
        StageMeasurement {
            stages: StageTimes {
                h2d_ns: self.stages.h2d_ns * f,
                kernel_ns: self.stages.kernel_ns * f,
                d2h_ns: self.stages.d2h_ns * f,
            },
            duplex_ns: self.duplex_ns * f,
            shared_cores: self.shared_cores,
        }
    }
}

/// Measure the stages of a pipeline over the whole buffer, `reps` runs each (median): the
/// copy of `input` into `device`, `work` on `device`, the copy of `device` into `output`, and
/// an H2D copy of `input` beside a D2H copy into `output` from a second device buffer (which
/// this allocates), on two streams at once.
pub fn measure_stages<T: Pod>(
    dev: &Device,
    input: PinnedSlice<'_, T>,
    device: &DeviceBuffer<T>,
    mut output: PinnedSliceMut<'_, T>,
    mut work: impl FnMut(&Stream, &DeviceBuffer<T>) -> Result<()>,
    reps: usize,
) -> Result<StageMeasurement> {
    let h2d = time_stage(dev, reps, |s| s.copy_h2d(device, input.clone()))? * 1e6;
    let kernel = time_stage(dev, reps, |s| work(s, device))? * 1e6;
    let d2h = time_stage(dev, reps, |s| s.copy_d2h(output.range_mut(..)?, device))? * 1e6;
    // Both directions at once: H2D on one stream, D2H of a second buffer on another.
    let other = DeviceBuffer::<T>::new(dev, device.len())?;
    let s2 = Stream::builder(dev).non_blocking().build()?;
    let mut t = Vec::new();
    for rep in 0..=reps.max(1) {
        let (a, b) = (Event::new(dev)?, Event::new(dev)?);
        let origin = Stream::builder(dev).non_blocking().build()?;
        let s1 = Stream::builder(dev).non_blocking().build()?;
        origin.record_event(&a)?;
        s1.wait_event(&a)?;
        s2.wait_event(&a)?;
        s1.copy_h2d(device, input.clone())?;
        s2.copy_d2h(output.range_mut(..)?, &other)?;
        origin.wait_stream(&s1)?;
        origin.wait_stream(&s2)?;
        origin.record_event(&b)?;
        b.synchronize()?;
        if rep > 0 {
            t.push(Event::elapsed_ms(&a, &b)? as f64 * 1e6);
        }
    }
    Ok(StageMeasurement {
        stages: StageTimes {
            h2d_ns: h2d,
            kernel_ns: kernel,
            d2h_ns: d2h,
        },
        duplex_ns: median(t),
        shared_cores: shared_cores(dev),
    })
}

/// Streams of the overhead probe.
pub const PROBE_STREAMS: u32 = 4;
/// Chunks of the overhead probe.
pub const PROBE_CHUNKS: u32 = 32;
/// Elements per chunk of the overhead probe (1 KiB of `f32`).
pub const PROBE_CHUNK_ELEMENTS: usize = 256;

/// What the overhead probe measured and concluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverheadProbe {
    /// Streams of the probe pipeline.
    pub streams: u32,
    /// Chunks of the probe pipeline.
    pub chunks: u32,
    /// Elements of the probe buffer.
    pub elements: usize,
    /// Median measured time of the probe pipeline, in ns.
    pub measured_ns: f64,
    /// The per-operation overhead that makes the model predict `measured_ns`, in ns.
    pub overhead_ns: f64,
}

/// Estimate the fixed cost of one operation: the median of `reps` runs (after a warm-up run)
/// of the pipeline over [`PROBE_CHUNKS`] chunks of [`PROBE_CHUNK_ELEMENTS`] zeroed elements on
/// [`PROBE_STREAMS`] streams, each chunk running `work`, where moving and computing the data
/// takes next to nothing; then the overhead `o` for which
/// [`model::predict_concurrent`](crate::model::predict_concurrent) gives
/// that time, with the stage times of `m` (measured over `full_elements`) scaled down to the
/// probe's size.
pub fn probe_overhead<T: Pod>(
    dev: &Device,
    m: &StageMeasurement,
    full_elements: usize,
    mut work: impl FnMut(&Stream, &DeviceBuffer<T>) -> Result<()>,
    reps: usize,
) -> Result<OverheadProbe> {
    let elements = PROBE_CHUNKS as usize * PROBE_CHUNK_ELEMENTS;
    let input = PinnedBuffer::<T>::new(dev, elements)?;
    let mut output = PinnedBuffer::<T>::new(dev, elements)?;
    let device = DeviceBuffer::<T>::new(dev, elements)?;
    let mut p = ChunkedPipeline::new(dev)
        .streams(PROBE_STREAMS)
        .chunks(PROBE_CHUNKS)
        .build()?;
    let mut once = || {
        p.run_on(&input, &device, &mut output, |s, c| work(s, c.device()))
            .map(|r| r.ms())
    };
    once()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        times.push(once()? * 1e6);
    }
    let measured_ns = median(times);
    let tiny = m.scaled(elements as f64 / full_elements.max(1) as f64);
    let overhead_ns = fit_overhead(&tiny, PROBE_STREAMS, PROBE_CHUNKS, measured_ns);
    Ok(OverheadProbe {
        streams: PROBE_STREAMS,
        chunks: PROBE_CHUNKS,
        elements,
        measured_ns,
        overhead_ns,
    })
}
