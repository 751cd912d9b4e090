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
use crate::trace::{OpKind, Trace};
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

/// Streams of the chunk-size probe at `chunks` chunks: four, or one per chunk.
pub fn chunk_probe_streams(chunks: u32) -> u32 {
    PROBE_STREAMS.min(chunks.max(1))
}

/// What the pipeline costs at one chunk count, measured under concurrency by
/// [`probe_chunk_sizes`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkProbe {
    /// Streams of the probe run ([`chunk_probe_streams`]).
    pub streams: u32,
    /// Chunks of the probe run.
    pub chunks: u32,
    /// Median time of the probe run, in ns.
    pub measured_ns: f64,
    /// Each stage's operations summed over the chunks, as the engines ran them beside each
    /// other (median of the runs, from the run's trace), with the duplex slowdown the model
    /// applies taken out again: the model's stage times at this chunk size.
    pub stages: StageTimes,
    /// The per-operation overhead for which the model, with these stage times, predicts
    /// `measured_ns` (hand-offs between engines, waits for a core: what the operations' own
    /// times do not show).
    pub overhead_ns: f64,
}

/// Per-stage time of the operations of a traced pipeline run, in ns: each operation from its
/// start to its end on its engine, where a copy that ran while the other direction was copying
/// too counts at `1 / duplex` of that time (the model slows it by `duplex` there).
pub fn stage_work(trace: &Trace, duplex: f64) -> StageTimes {
    let stage = |k: OpKind| match k {
        OpKind::CopyH2D => Some(0usize),
        OpKind::Kernel => Some(1),
        OpKind::CopyD2H => Some(2),
        _ => None,
    };
    let ops: Vec<(usize, u64, u64)> = trace
        .ops
        .iter()
        .filter_map(|o| Some((stage(o.kind)?, o.start_ns, o.end_ns.max(o.start_ns))))
        .collect();
    // Boundaries where the set of running copies changes, and how many of each direction run.
    let mut edges: Vec<(u64, usize, i32)> = Vec::new();
    for &(st, a, b) in &ops {
        if st != 1 {
            edges.push((a, st, 1));
            edges.push((b, st, -1));
        }
    }
    edges.sort_unstable();
    let mut both: Vec<(u64, u64)> = Vec::new(); // intervals with both directions copying
    let mut running = [0i32; 3];
    for (i, &(t, st, d)) in edges.iter().enumerate() {
        running[st] += d;
        if let Some(&(next, _, _)) = edges.get(i + 1) {
            if next > t && running[0] > 0 && running[2] > 0 {
                both.push((t, next));
            }
        }
    }
    let slow = if duplex.is_finite() {
        duplex.max(1.0)
    } else {
        1.0
    };
    let mut sum = [0.0f64; 3];
    for &(st, a, b) in &ops {
        let mut t = (b - a) as f64;
        if st != 1 {
            let overlap: u64 = both
                .iter()
                .map(|&(lo, hi)| hi.min(b).saturating_sub(lo.max(a)))
                .sum();
            t -= overlap as f64 * (1.0 - 1.0 / slow);
        }
        sum[st] += t;
    }
    StageTimes {
        h2d_ns: sum[0],
        kernel_ns: sum[1],
        d2h_ns: sum[2],
    }
}

/// Measure what the pipeline costs at each of `chunk_counts`, where it matters: the pipeline
/// itself (input → `work` → output, over `device`) at [`chunk_probe_streams`] × that many
/// chunks, one untimed round and then `reps` rounds that each run every chunk count twice
/// (so drift hits all alike): timed, then traced for the operations' own times. For each count: the median run time, the stage times the
/// engines showed beside each other (see [`ChunkProbe::stages`], duplex slowdown of `m`), and
/// the per-operation overhead that makes the model of those stages predict the run time.
///
/// Whole-buffer stage times ([`measure_stages`]) describe a chunk only where costs scale with
/// bytes, as a GPU's do; on the host backend a chunk that stays in the caches copies and
/// computes faster per byte than a buffer streamed from memory, operations that run beside
/// each other slow each other (shared caches, memory and cores), and engine threads that wait
/// for a core or a wake-up leave gaps. This measures all of it at the sizes that are chosen
/// among. On a GPU each count gives about the whole-buffer stages and the same overhead.
#[allow(clippy::too_many_arguments)]
pub fn probe_chunk_sizes<T: Pod>(
    dev: &Device,
    input: PinnedSlice<'_, T>,
    device: &DeviceBuffer<T>,
    mut output: PinnedSliceMut<'_, T>,
    m: &StageMeasurement,
    chunk_counts: &[u32],
    mut work: impl FnMut(&Stream, &DeviceBuffer<T>) -> Result<()>,
    reps: usize,
) -> Result<Vec<ChunkProbe>> {
    let counts: Vec<u32> = chunk_counts
        .iter()
        .map(|&c| c.max(1))
        .filter(|&c| c as usize <= input.len())
        .collect();
    let mut pipes = counts
        .iter()
        .map(|&c| {
            ChunkedPipeline::new(dev)
                .streams(chunk_probe_streams(c))
                .chunks(c)
                .build()
        })
        .collect::<Result<Vec<_>>>()?;
    let duplex = m.duplex_slowdown();
    let mut times = vec![Vec::with_capacity(reps); counts.len()];
    let mut stages = vec![Vec::with_capacity(reps); counts.len()];
    for round in 0..=reps.max(1) {
        for (i, p) in pipes.iter_mut().enumerate() {
            // Timed untraced (tracing costs the host backend's threads time), then traced
            // for the operations' own times.
            for traced in [false, true] {
                p.set_trace(traced.then(|| "chunk probe".to_string()));
                let r = p.run_on(input.clone(), device, output.range_mut(..)?, |s, c| {
                    work(s, c.device())
                })?;
                if round == 0 {
                    continue;
                }
                match &r.trace {
                    Some(tr) => stages[i].push(stage_work(tr, duplex)),
                    None => times[i].push(r.ms() * 1e6),
                }
            }
        }
    }
    Ok(counts
        .iter()
        .enumerate()
        .map(|(i, &chunks)| {
            let streams = chunk_probe_streams(chunks);
            let measured_ns = median(times[i].clone());
            let st = if stages[i].is_empty() {
                m.stages
            } else {
                stage_times(&stages[i])
            };
            let at = StageMeasurement {
                stages: st,
                duplex_ns: duplex * st.h2d_ns.max(st.d2h_ns),
                shared_cores: m.shared_cores,
            };
            ChunkProbe {
                streams,
                chunks,
                measured_ns,
                stages: st,
                overhead_ns: fit_overhead(&at, streams, chunks, measured_ns),
            }
        })
        .collect())
}

/// Stage times from calibration runs: the median of each stage, in ns.
pub(crate) fn stage_times(samples: &[StageTimes]) -> StageTimes {
    let of = |f: fn(&StageTimes) -> f64| median(samples.iter().map(f).collect());
    StageTimes {
        h2d_ns: of(|s| s.h2d_ns),
        kernel_ns: of(|s| s.kernel_ns),
        d2h_ns: of(|s| s.d2h_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Engine, TraceOp};

    fn op(kind: OpKind, start_ns: u64, end_ns: u64) -> TraceOp {
        let engine = match kind {
            OpKind::CopyH2D => Engine::CopyH2D,
            OpKind::CopyD2H => Engine::CopyD2H,
            _ => Engine::Compute,
        };
        TraceOp {
            id: 0,
            kind,
            stream: 1,
            engine,
            bytes: 0,
            name: String::new(),
            enqueue_ns: 0,
            start_ns,
            end_ns,
            waits_on: Vec::new(),
        }
    }

    #[test]
    fn stage_work_takes_the_duplex_slowdown_out_of_overlapping_copies() {
        let trace = Trace {
            device: String::new(),
            streams: Vec::new(),
            ops: vec![
                op(OpKind::CopyH2D, 0, 100),
                op(OpKind::CopyD2H, 50, 150),
                op(OpKind::Kernel, 0, 150),
            ],
            clock_sync: None,
        };
        let st = stage_work(&trace, 2.0);
        // 50 ns of each copy ran beside the other: they count half.
        assert_eq!(st.h2d_ns, 75.0);
        assert_eq!(st.d2h_ns, 75.0);
        assert_eq!(st.kernel_ns, 150.0);
        let alone = stage_work(&trace, 1.0);
        assert_eq!((alone.h2d_ns, alone.d2h_ns), (100.0, 100.0));
    }
}
