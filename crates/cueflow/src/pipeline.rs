//! The seeds' pipeline: copy a buffer to the device, run a kernel over it, copy it back —
//! either serially (one stream, whole buffer) or chunked over several streams so that the
//! host→device copies, the kernels and the device→host copies of different chunks overlap
//! (seed 000 §1.2, seed 002).
//!
//! Chunk `c` goes to stream `c % streams`; on its stream it is copied in, computed on in place
//! ([`kernels::compute`]) and copied out. Timing uses events on an origin stream that every
//! pipeline stream waits on and that waits on all of them, exactly as the raw CUDA C++ reference
//! in `benches/cuda/pipeline.cu` does, so the two measure the same thing.
//!
//! [`Pipeline::automatic`] builds the same pipeline without a single event: its streams order
//! automatically (SPEC AC5), which for disjoint chunks inserts no wait at all.

use crate::api::memory::chunk_ranges;
use crate::kernels;
use crate::model::StageTimes;
use crate::{Device, DeviceBuffer, Event, EventFlags, PinnedBuffer, Result, Stream};

/// Input value of element `i` (the same as the C++ reference: never all zeros).
pub fn input_value(i: usize) -> f32 {
    (i % 1000) as f32 * 0.001
}

/// Buffers of one pipeline: pinned input and output, and the device buffer worked on in place.
pub struct PipelineBuffers {
    /// Pinned host input.
    pub input: PinnedBuffer<f32>,
    /// Pinned host output.
    pub output: PinnedBuffer<f32>,
    /// Device buffer.
    pub device: DeviceBuffer<f32>,
}

impl PipelineBuffers {
    /// Allocate `elements` floats of each and fill the input.
    pub fn new(dev: &Device, elements: usize) -> Result<Self> {
        let mut input = PinnedBuffer::new(dev, elements)?;
        for (i, x) in input.write()?.iter_mut().enumerate() {
            *x = input_value(i);
        }
        Ok(PipelineBuffers {
            input,
            output: PinnedBuffer::new(dev, elements)?,
            device: DeviceBuffer::new(dev, elements)?,
        })
    }

    /// Elements per buffer.
    pub fn len(&self) -> usize {
        self.input.len()
    }

    /// True for empty buffers.
    pub fn is_empty(&self) -> bool {
        self.input.is_empty()
    }

    /// Bytes per buffer.
    pub fn bytes(&self) -> u64 {
        (self.len() * 4) as u64
    }

    /// Poison the output (NaN) so a run that skips elements cannot pass verification.
    pub fn poison_output(&mut self) -> Result<()> {
        self.output.write()?.fill(f32::NAN);
        Ok(())
    }

    /// Check every output element against the host reference of `iters` compute steps.
    /// Returns the index and values of the first mismatch.
    pub fn verify(&self, iters: u32) -> Result<std::result::Result<(), String>> {
        let expect: Vec<f32> = (0..1000)
            .map(|i| kernels::compute_reference(input_value(i), iters))
            .collect();
        let out = self.output.read()?;
        for (i, &got) in out.iter().enumerate() {
            let want = expect[i % 1000];
            if got.to_bits() != want.to_bits() {
                return Ok(Err(format!(
                    "element {i}: got {got} ({:#010x}), expected {want} ({:#010x})",
                    got.to_bits(),
                    want.to_bits()
                )));
            }
        }
        Ok(Ok(()))
    }
}

/// Streams and events of a pipeline configuration, created once and reused across runs.
pub struct Pipeline {
    origin: Stream,
    streams: Vec<Stream>,
    ends: Vec<Event>,
    start: Event,
    stop: Event,
    /// No events between streams: they order automatically (AC5).
    automatic: bool,
}

impl Pipeline {
    /// `streams` non-blocking streams named `stream 1..=n`, ordered with events.
    pub fn new(dev: &Device, streams: usize) -> Result<Self> {
        Self::build(dev, streams, false)
    }

    /// The same pipeline with no event between streams: its streams order automatically
    /// (AC5). Runs are timed on the host ([`run_wall`](Self::run_wall)).
    pub fn automatic(dev: &Device, streams: usize) -> Result<Self> {
        Self::build(dev, streams, true)
    }

    fn build(dev: &Device, streams: usize, automatic: bool) -> Result<Self> {
        let origin = Stream::builder(dev).non_blocking().name("origin").build()?;
        let streams = (0..streams.max(1))
            .map(|i| {
                let b = Stream::builder(dev)
                    .non_blocking()
                    .name(format!("stream {}", i + 1));
                if automatic {
                    b.auto_order().build()
                } else {
                    b.build()
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let sync_only = EventFlags {
            timing: false,
            ..Default::default()
        };
        let ends = streams
            .iter()
            .map(|_| Event::with_flags(dev, sync_only))
            .collect::<Result<Vec<_>>>()?;
        Ok(Pipeline {
            origin,
            streams,
            ends,
            start: Event::new(dev)?,
            stop: Event::new(dev)?,
            automatic,
        })
    }

    /// Number of pipeline streams.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// The origin stream: the timing events are recorded on it, every pipeline stream waits on
    /// it at the start of a run, and it waits on all of them at the end. Its id names its track
    /// in a trace.
    pub fn origin(&self) -> &Stream {
        &self.origin
    }

    /// The pipeline streams, `stream 1..=n`: chunk `c` runs on `stream_handles()[c % n]`.
    pub fn stream_handles(&self) -> &[Stream] {
        &self.streams
    }

    /// True if the streams order automatically instead of through events.
    pub fn is_automatic(&self) -> bool {
        self.automatic
    }

    /// Enqueue one run over `chunks` chunks with `iters` compute steps and return its time in
    /// milliseconds: event-timed on the device, or for an [automatic](Self::automatic)
    /// pipeline, which has no events, timed on the host as [`run_wall`](Self::run_wall).
    pub fn run(&self, bufs: &mut PipelineBuffers, chunks: usize, iters: u32) -> Result<f64> {
        if self.automatic {
            return self.run_wall(bufs, chunks, iters);
        }
        self.enqueue(bufs, chunks, iters)?;
        self.stop.synchronize()?;
        Ok(Event::elapsed_ms(&self.start, &self.stop)? as f64)
    }

    /// One run timed on the host, from before the first enqueue until the host has seen every
    /// chunk done, in milliseconds: the same measure for both orderings.
    pub fn run_wall(&self, bufs: &mut PipelineBuffers, chunks: usize, iters: u32) -> Result<f64> {
        let t = std::time::Instant::now();
        self.enqueue(bufs, chunks, iters)?;
        if self.automatic {
            for s in &self.streams {
                s.synchronize()?;
            }
        } else {
            self.stop.synchronize()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    fn enqueue(&self, bufs: &mut PipelineBuffers, chunks: usize, iters: u32) -> Result<()> {
        let ranges = chunk_ranges(bufs.len(), chunks)?;
        if !self.automatic {
            self.origin.record_event(&self.start)?;
            for s in &self.streams {
                s.wait_event(&self.start)?;
            }
        }
        for (c, r) in ranges.into_iter().enumerate() {
            let s = &self.streams[c % self.streams.len()];
            let d = bufs.device.slice(r.clone())?;
            s.copy_h2d(&d, bufs.input.range(r.clone())?)?;
            kernels::compute(s, &d, iters)?;
            s.copy_d2h(bufs.output.range_mut(r)?, &d)?;
        }
        if !self.automatic {
            for (s, e) in self.streams.iter().zip(&self.ends) {
                s.record_event(e)?;
                self.origin.wait_event(e)?;
            }
            self.origin.record_event(&self.stop)?;
        }
        Ok(())
    }
}

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

/// Time one stage alone, median of `reps` event-timed runs, in ms.
fn time_stage(
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
#[derive(Clone, Copy, Debug)]
pub struct StageMeasurement {
    /// Stage times in ns (the model's input).
    pub stages: StageTimes,
    /// Time for one whole-buffer copy in each direction at the same time, in ns.
    pub duplex_ns: f64,
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
}

/// Measure the stages over the whole buffer (`reps` runs each, median).
pub fn measure_stages(
    dev: &Device,
    bufs: &mut PipelineBuffers,
    iters: u32,
    reps: usize,
) -> Result<StageMeasurement> {
    let d = bufs.device.clone();
    let h2d = time_stage(dev, reps, |s| s.copy_h2d(&d, &bufs.input))? * 1e6;
    let kernel = time_stage(dev, reps, |s| kernels::compute(s, &d, iters))? * 1e6;
    let d2h = time_stage(dev, reps, |s| s.copy_d2h(&mut bufs.output, &d))? * 1e6;
    // Both directions at once: H2D on one stream, D2H of a second buffer on another.
    let other = DeviceBuffer::<f32>::new(dev, bufs.len())?;
    let s2 = Stream::builder(dev).non_blocking().build()?;
    let mut t = Vec::new();
    for rep in 0..=reps.max(1) {
        let (a, b) = (Event::new(dev)?, Event::new(dev)?);
        let origin = Stream::builder(dev).non_blocking().build()?;
        let s1 = Stream::builder(dev).non_blocking().build()?;
        origin.record_event(&a)?;
        s1.wait_event(&a)?;
        s2.wait_event(&a)?;
        s1.copy_h2d(&d, &bufs.input)?;
        s2.copy_d2h(&mut bufs.output, &other)?;
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
    })
}

/// Find `iters` so the compute kernel over the whole buffer takes about as long as the
/// whole-buffer host→device copy (the seeds' balanced case): doubling, then bisection.
pub fn balance_iters(dev: &Device, bufs: &mut PipelineBuffers) -> Result<u32> {
    let d = bufs.device.clone();
    let target = time_stage(dev, 3, |s| s.copy_h2d(&d, &bufs.input))?;
    let kernel_ms = |iters: u32| time_stage(dev, 3, |s| kernels::compute(s, &d, iters));
    let (mut lo, mut hi) = (1u32, 1u32);
    while kernel_ms(hi)? < target {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi >= 1 << 20 {
            return Ok(hi);
        }
    }
    for _ in 0..6 {
        if hi - lo <= 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        if kernel_ms(mid)? < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}
