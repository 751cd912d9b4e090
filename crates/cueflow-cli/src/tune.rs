//! `auto`: choose streams and chunks with the performance model, from measurements.
//!
//! 1. [`pipeline::measure_stages`] gives the whole-buffer time of each stage alone and of both
//!    copy directions at once (the duplex slowdown).
//! 2. [`probe_overhead`] estimates the fixed cost of one operation: it runs the real pipeline
//!    over a tiny buffer, where moving and computing the data takes next to nothing, and solves
//!    the model for the per-operation overhead that reproduces the measured time.
//! 3. [`params`] builds [`ModelParams`] (one compute slot: kernels serialize, as in the seeds)
//!    and [`choose`] asks [`model::choose`] for the best configuration.

use cueflow::model::{self, Choice, ModelParams, StageTimes};
use cueflow::pipeline::{self, Pipeline, PipelineBuffers, StageMeasurement};
use cueflow::Device;

use crate::args::Count;
use crate::errors::CliResult;

/// Most streams `auto` considers (and the largest stream count the bench sweeps).
pub const MAX_STREAMS: u32 = 16;
/// Most chunks `auto` considers (and the largest chunk count the bench sweeps).
pub const MAX_CHUNKS: u32 = 128;

/// Streams of the overhead probe.
const PROBE_STREAMS: u32 = 4;
/// Chunks of the overhead probe.
const PROBE_CHUNKS: u32 = 32;
/// Elements per chunk of the overhead probe (1 KiB).
const PROBE_CHUNK_ELEMENTS: usize = 256;

/// What the overhead probe measured and concluded.
#[derive(Clone, Copy, Debug)]
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

/// Model parameters from a stage measurement and a per-operation overhead.
pub fn params(m: &StageMeasurement, overhead_ns: f64) -> ModelParams {
    ModelParams {
        stages: m.stages,
        per_op_overhead_ns: overhead_ns.max(0.0),
        duplex_slowdown: m.duplex_slowdown(),
        compute_slots: 1,
    }
}

/// Estimate the per-operation overhead: median of `reps` runs of the pipeline over
/// [`PROBE_CHUNKS`] chunks of 1 KiB on [`PROBE_STREAMS`] streams (after a warm-up run), then
/// the overhead `o` for which [`model::predict_concurrent`] gives that time, with the stage times
/// of `m` (measured over `full_elements`) scaled down to the probe's size.
pub fn probe_overhead(
    dev: &Device,
    m: &StageMeasurement,
    full_elements: usize,
    iters: u32,
    reps: usize,
) -> CliResult<OverheadProbe> {
    let elements = PROBE_CHUNKS as usize * PROBE_CHUNK_ELEMENTS;
    let mut bufs = PipelineBuffers::new(dev, elements)?;
    let p = Pipeline::new(dev, PROBE_STREAMS as usize)?;
    p.run(&mut bufs, PROBE_CHUNKS as usize, iters)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        times.push(p.run(&mut bufs, PROBE_CHUNKS as usize, iters)? * 1e6);
    }
    let measured_ns = pipeline::median(times);
    let f = elements as f64 / full_elements.max(1) as f64;
    let tiny = StageMeasurement {
        stages: StageTimes {
            h2d_ns: m.stages.h2d_ns * f,
            kernel_ns: m.stages.kernel_ns * f,
            d2h_ns: m.stages.d2h_ns * f,
        },
        duplex_ns: m.duplex_ns * f,
    };
    let overhead_ns = fit_overhead(&tiny, PROBE_STREAMS, PROBE_CHUNKS, measured_ns);
    Ok(OverheadProbe {
        streams: PROBE_STREAMS,
        chunks: PROBE_CHUNKS,
        elements,
        measured_ns,
        overhead_ns,
    })
}

/// The overhead `o ≥ 0` for which the model of `m` predicts `measured_ns` for `streams` ×
/// `chunks` (bisection: the prediction grows with `o`). 0 when even `o = 0` predicts more.
pub fn fit_overhead(m: &StageMeasurement, streams: u32, chunks: u32, measured_ns: f64) -> f64 {
    if !measured_ns.is_finite() || measured_ns <= 0.0 {
        return 0.0;
    }
    let predict = |o: f64| model::predict_concurrent(&params(m, o), streams, chunks);
    if predict(0.0) >= measured_ns {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0, measured_ns);
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if predict(mid) < measured_ns {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The configuration to run: fixed counts as given, `auto` ones chosen by the model among
/// powers of two (streams up to [`MAX_STREAMS`], chunks up to `max_chunks`, chunks ≥ streams).
/// With both `auto` this is exactly [`model::choose`]; with one fixed, the same search and the
/// same tie rule (within 1% of the best, fewest chunks, then fewest streams) over what is left.
pub fn choose(p: &ModelParams, streams: Count, chunks: Count, max_chunks: u32) -> Choice {
    let max_chunks = max_chunks.max(1);
    let fixed = |s: u32, c: u32| Choice {
        streams: s,
        chunks: c,
        predicted_ns: model::predict_concurrent(p, s, c),
    };
    match (streams, chunks) {
        (Count::Fixed(s), Count::Fixed(c)) => fixed(s, c),
        (Count::Auto, Count::Auto) => model::choose(p, MAX_STREAMS, max_chunks),
        (Count::Fixed(s), Count::Auto) => {
            let mut cands = Vec::new();
            let mut c = s;
            loop {
                cands.push(fixed(s, c));
                match c.checked_mul(2) {
                    Some(n) if n <= max_chunks => c = n,
                    _ => break,
                }
            }
            pick(cands)
        }
        (Count::Auto, Count::Fixed(c)) => {
            let mut cands = Vec::new();
            let mut s = 1u32;
            while s <= MAX_STREAMS && s <= c {
                cands.push(fixed(s, c));
                s *= 2;
            }
            pick(cands)
        }
    }
}

/// `model::choose`'s rule: among candidates within 1% of the best prediction, the fewest
/// chunks, then the fewest streams.
fn pick(cands: Vec<Choice>) -> Choice {
    let best = cands
        .iter()
        .map(|c| c.predicted_ns)
        .fold(f64::INFINITY, f64::min);
    cands
        .into_iter()
        .filter(|c| c.predicted_ns <= best * 1.01)
        .min_by(|a, b| (a.chunks, a.streams).cmp(&(b.chunks, b.streams)))
        .expect("at least one candidate")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meas(t: f64) -> StageMeasurement {
        StageMeasurement {
            stages: StageTimes::balanced(t),
            duplex_ns: t,
        }
    }

    #[test]
    fn fit_recovers_the_overhead() {
        let m = meas(1e3);
        let truth = params(&m, 40e3);
        let t = model::predict_concurrent(&truth, 4, 32);
        let o = fit_overhead(&m, 4, 32, t);
        assert!((o - 40e3).abs() < 1.0, "{o}");
        assert_eq!(fit_overhead(&m, 4, 32, 1.0), 0.0);
        assert_eq!(fit_overhead(&m, 4, 32, f64::NAN), 0.0);
    }

    #[test]
    fn choose_respects_fixed_counts() {
        let p = params(&meas(10e6), 30e3);
        let both = choose(&p, Count::Auto, Count::Auto, MAX_CHUNKS);
        assert_eq!(both, model::choose(&p, MAX_STREAMS, MAX_CHUNKS));
        let s = choose(&p, Count::Fixed(2), Count::Auto, MAX_CHUNKS);
        assert_eq!(s.streams, 2);
        assert!(s.chunks >= 2 && s.chunks.is_power_of_two());
        let c = choose(&p, Count::Auto, Count::Fixed(6), MAX_CHUNKS);
        assert_eq!(c.chunks, 6);
        assert!(c.streams <= 6);
        let f = choose(&p, Count::Fixed(3), Count::Fixed(9), MAX_CHUNKS);
        assert_eq!((f.streams, f.chunks), (3, 9));
        // More streams than the chunk limit: the fixed stream count is still honoured.
        let big = choose(&p, Count::Fixed(128), Count::Auto, MAX_CHUNKS);
        assert_eq!((big.streams, big.chunks), (128, 128));
    }
}
