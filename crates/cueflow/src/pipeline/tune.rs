//! From measurements to a layout: model parameters, the per-operation overhead that explains
//! a measured run, and the streams × chunks the model predicts to be fastest.
//!
//! `auto` ([`super::auto`]) and the `cueflow` command (`demo`, `bench`) choose the same way:
//! [`params`] from a [`StageMeasurement`] and an overhead, then [`choose`].

use super::count::Count;
use super::measure::StageMeasurement;
use crate::model::{self, Choice, ModelParams};

/// Most streams `auto` considers (and the largest stream count `cueflow bench` sweeps).
pub const MAX_STREAMS: u32 = 16;
/// Most chunks `auto` considers (and the largest chunk count `cueflow bench` sweeps).
pub const MAX_CHUNKS: u32 = 128;

/// Model parameters from a stage measurement and a per-operation overhead: the measured
/// stages, duplex slowdown and shared cores, and one compute slot (kernels serialize, as in the
/// seeds).
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

/// The configuration to run: fixed counts as given, `auto` ones chosen by the model among
/// powers of two (streams up to [`MAX_STREAMS`], chunks up to `max_chunks`, chunks ≥ streams).
/// With both `auto` this is exactly [`model::choose`]; with one fixed, the same search and the
/// same tie rule (within 1% of the best, fewest chunks, then fewest streams) over what is left.
/// A fixed count of 0 counts as 1.
pub fn choose(p: &ModelParams, streams: Count, chunks: Count, max_chunks: u32) -> Choice {
    let max_chunks = max_chunks.max(1);
    let fixed = |s: u32, c: u32| Choice {
        streams: s,
        chunks: c,
        predicted_ns: model::predict_concurrent(p, s, c),
    };
    match (streams, chunks) {
        (Count::Fixed(s), Count::Fixed(c)) => fixed(s.max(1), c.max(1)),
        (Count::Auto, Count::Auto) => model::choose(p, MAX_STREAMS, max_chunks),
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
