//! From measurements to a layout: model parameters, the per-operation overhead that explains
//! a measured run, and the streams × chunks the model predicts to be fastest.
//!
//! `auto` ([`super::auto`]) and the `cueflow` command (`demo`, `bench`) choose the same way:
//! [`params`] from a [`StageMeasurement`] and an overhead, then [`choose`].

use super::count::Count;
use super::measure::{ChunkProbe, StageMeasurement};
use crate::model::{self, Choice, ModelParams};

/// Most streams `auto` considers (and the largest stream count `cueflow bench` sweeps).
pub const MAX_STREAMS: u32 = 16;
/// Most chunks `auto` considers (and the largest chunk count `cueflow bench` sweeps).
pub const MAX_CHUNKS: u32 = 128;

/// The chunk counts `auto` chooses among up to `max_chunks`: the powers of two, from 1.
pub fn candidate_chunks(max_chunks: u32) -> Vec<u32> {
    std::iter::successors(Some(1u32), |c| c.checked_mul(2))
        .take_while(|&c| c <= max_chunks.max(1))
        .collect()
}

/// Model parameters from a stage measurement and a per-operation overhead: the measured
/// stages, duplex slowdown and shared cores, and one compute slot (kernels serialize, as in the
/// idealized model).
pub fn params(m: &StageMeasurement, overhead_ns: f64) -> ModelParams {
    ModelParams {
        stages: m.stages,
        per_op_overhead_ns: overhead_ns.max(0.0),
        duplex_slowdown: m.duplex_slowdown(),
        compute_slots: 1,
        shared_cores: m.shared_cores,
    }
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

/// The model at every chunk count: parameters from whole-buffer measurements (`base`), and
/// where the pipeline was probed at a chunk count ([`probe_chunk_sizes`]), the stage times and
/// per-operation overhead measured there.
///
/// [`probe_chunk_sizes`]: super::measure::probe_chunk_sizes
#[derive(Clone, Debug, PartialEq)]
pub struct SizedModel {
    /// Parameters from the whole-buffer stage measurement and the overhead probe.
    pub base: ModelParams,
    /// Probes at chunk counts, in any order.
    pub probes: Vec<ChunkProbe>,
}

impl SizedModel {
    /// A model without probes: `base` at every chunk count.
    pub fn flat(base: ModelParams) -> Self {
        SizedModel {
            base,
            probes: Vec::new(),
        }
    }

    /// The probe that describes `chunks` chunks: the one whose chunk count is nearest on a
    /// logarithmic scale (the fewer chunks of two as near), if any.
    pub fn probe_at(&self, chunks: u32) -> Option<&ChunkProbe> {
        let dist = |p: &ChunkProbe| {
            (f64::from(p.chunks.max(1)) / f64::from(chunks.max(1)))
                .ln()
                .abs()
        };
        self.probes
            .iter()
            .min_by(|a, b| dist(a).total_cmp(&dist(b)).then(a.chunks.cmp(&b.chunks)))
    }

    /// The model's parameters for `chunks` chunks: `base` with the stage times and overhead of
    /// [`probe_at`](Self::probe_at), where there is one.
    pub fn at(&self, chunks: u32) -> ModelParams {
        match self.probe_at(chunks) {
            Some(p) => ModelParams {
                stages: p.stages,
                per_op_overhead_ns: p.overhead_ns.max(0.0),
                ..self.base
            },
            None => self.base,
        }
    }

    /// Predicted time of `streams` × `chunks`, in ns.
    pub fn predict(&self, streams: u32, chunks: u32) -> f64 {
        model::predict_concurrent(&self.at(chunks), streams, chunks)
    }
}

/// The configuration to run: fixed counts as given, `auto` ones chosen by the model among
/// powers of two (streams up to [`MAX_STREAMS`], chunks up to `max_chunks`, chunks ≥ streams).
/// With both `auto` this is exactly [`model::choose`]; with one fixed, the same search and the
/// same tie rule (within 1% of the best, fewest chunks, then fewest streams) over what is left.
/// A fixed count of 0 counts as 1.
pub fn choose(p: &ModelParams, streams: Count, chunks: Count, max_chunks: u32) -> Choice {
    choose_by(|_| *p, streams, chunks, max_chunks)
}

/// [`choose`] with the parameters of `m` at each chunk count ([`SizedModel::at`]).
pub fn choose_sized(m: &SizedModel, streams: Count, chunks: Count, max_chunks: u32) -> Choice {
    choose_by(|c| m.at(c), streams, chunks, max_chunks)
}

/// [`choose`] with the parameters `params_at(chunks)` at each chunk count
/// ([`model::choose_by`]).
pub fn choose_by(
    params_at: impl Fn(u32) -> ModelParams,
    streams: Count,
    chunks: Count,
    max_chunks: u32,
) -> Choice {
    let max_chunks = max_chunks.max(1);
    let fixed = |s: u32, c: u32| Choice {
        streams: s,
        chunks: c,
        predicted_ns: model::predict_concurrent(&params_at(c), s, c),
    };
    match (streams, chunks) {
        (Count::Fixed(s), Count::Fixed(c)) => fixed(s.max(1), c.max(1)),
        (Count::Auto, Count::Auto) => model::choose_by(&params_at, MAX_STREAMS, max_chunks),
        (Count::Fixed(s), Count::Auto) => {
            let s = s.max(1);
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
            let c = c.max(1);
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
/// chunks, then the fewest streams. `cands` is never empty (the callers push at least one).
fn pick(cands: Vec<Choice>) -> Choice {
    let best = cands
        .iter()
        .map(|c| c.predicted_ns)
        .fold(f64::INFINITY, f64::min);
    let first = cands[0];
    cands
        .into_iter()
        .filter(|c| c.predicted_ns <= best * 1.01)
        .min_by(|a, b| (a.chunks, a.streams).cmp(&(b.chunks, b.streams)))
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StageTimes;

    fn meas(t: f64) -> StageMeasurement {
        StageMeasurement {
            stages: StageTimes::balanced(t),
            duplex_ns: t,
            shared_cores: 0,
        }
    }

    #[test]
    fn sized_model_takes_the_nearest_probe() {
        let base = params(&meas(10e6), 3e3);
        let probe = |chunks: u32, t: f64, o: f64| ChunkProbe {
            streams: 4.min(chunks),
            chunks,
            measured_ns: 0.0,
            stages: StageTimes::balanced(t),
            overhead_ns: o,
        };
        let m = SizedModel {
            base,
            probes: vec![probe(64, 6e6, 50e3), probe(8, 9e6, 10e3)],
        };
        assert_eq!(m.at(64).stages.kernel_ns, 6e6);
        assert_eq!(m.at(128).per_op_overhead_ns, 50e3);
        assert_eq!(m.at(16).stages.kernel_ns, 9e6);
        assert_eq!(m.at(1).stages.kernel_ns, 9e6);
        assert_eq!(m.probe_at(23).map(|p| p.chunks), Some(64));
        // Equally near on a log scale: the fewer chunks.
        let tie = SizedModel {
            base,
            probes: vec![probe(32, 6e6, 0.0), probe(8, 9e6, 0.0)],
        };
        assert_eq!(tie.probe_at(16).map(|p| p.chunks), Some(8));
        assert_eq!(m.at(32).duplex_slowdown, base.duplex_slowdown);
        assert_eq!(SizedModel::flat(base).at(32), base);
        // A flat model chooses as `choose` does.
        assert_eq!(
            choose_sized(
                &SizedModel::flat(base),
                Count::Auto,
                Count::Auto,
                MAX_CHUNKS
            ),
            choose(&base, Count::Auto, Count::Auto, MAX_CHUNKS)
        );
        assert_eq!(candidate_chunks(128), vec![1, 2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(candidate_chunks(0), vec![1]);
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
        // Zero counts as one.
        let z = choose(&p, Count::Fixed(0), Count::Fixed(0), MAX_CHUNKS);
        assert_eq!((z.streams, z.chunks), (1, 1));
    }
}
