//! The pipeline sweep: every configuration of streams {1, 2, 4, 8} × chunks {1, …, 64}
//! (chunks ≥ streams), plus the `auto` choice, timed in interleaved rounds so that drift and
//! background load hit all configurations alike.

use std::collections::BTreeMap;

use cueflow::model::{self, Choice, ModelParams};
use cueflow::pipeline::{median, Pipeline, PipelineBuffers};
use cueflow::Device;

use crate::errors::CliResult;
use crate::progress::Progress;
use crate::runner::run_verified;

/// Stream counts swept.
pub const STREAMS: [u32; 4] = [1, 2, 4, 8];
/// Chunk counts swept.
pub const CHUNKS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// One timed configuration.
#[derive(Clone, Debug)]
pub struct Point {
    /// Streams.
    pub streams: u32,
    /// Chunks.
    pub chunks: u32,
    /// Every timed run, ms.
    pub samples_ms: Vec<f64>,
    /// Median of the samples, ms.
    pub median_ms: f64,
    /// The model's prediction, ms.
    pub predicted_ms: f64,
}

impl Point {
    /// Median absolute deviation of the samples, relative to their median: the run-to-run
    /// noise of this configuration.
    pub fn relative_mad(&self) -> f64 {
        let dev: Vec<f64> = self
            .samples_ms
            .iter()
            .map(|x| (x - self.median_ms).abs())
            .collect();
        median(dev) / self.median_ms
    }
}

/// The sweep's results.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The grid, streams-major.
    pub points: Vec<Point>,
    /// The `auto` configuration, timed separately (it may repeat a grid point).
    pub auto: Point,
    /// Index of the fastest grid point (lowest median).
    pub best: usize,
}

/// The grid configurations that fit a buffer of `elements` elements.
pub fn grid(elements: usize) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    for s in STREAMS {
        for c in CHUNKS {
            if c >= s && c as usize <= elements {
                v.push((s, c));
            }
        }
    }
    v
}

/// Time every grid configuration and `auto`: one verified warm-up round, then `reps` timed
/// rounds (the last one verified too), each round running every configuration once.
pub fn run(
    dev: &Device,
    bufs: &mut PipelineBuffers,
    iters: u32,
    reps: usize,
    params: &ModelParams,
    auto: Choice,
    progress: &Progress,
) -> CliResult<Sweep> {
    let mut configs = grid(bufs.len());
    configs.push((auto.streams, auto.chunks));
    let mut pipelines: BTreeMap<u32, Pipeline> = BTreeMap::new();
    for &(s, _) in &configs {
        if let std::collections::btree_map::Entry::Vacant(e) = pipelines.entry(s) {
            e.insert(Pipeline::new(dev, s as usize)?);
        }
    }
    progress.add_steps(((reps + 1) * configs.len()) as u64);
    let mut samples = vec![Vec::with_capacity(reps); configs.len()];
    for round in 0..=reps {
        progress.phase(if round == 0 {
            "sweep: warm-up round".to_string()
        } else {
            format!("sweep: round {round}/{reps}")
        });
        for (i, &(s, c)) in configs.iter().enumerate() {
            let p = &pipelines[&s];
            let what = format!("{s} streams × {c} chunks");
            if round == 0 || round == reps {
                let ms = run_verified(p, bufs, c as usize, iters, &what)?;
                if round > 0 {
                    samples[i].push(ms);
                }
            } else {
                samples[i].push(p.run(bufs, c as usize, iters)?);
            }
            progress.step();
        }
    }
    let mut points: Vec<Point> = configs
        .iter()
        .zip(samples)
        .map(|(&(s, c), v)| Point {
            streams: s,
            chunks: c,
            median_ms: median(v.clone()),
            samples_ms: v,
            predicted_ms: model::predict_concurrent(params, s, c) / 1e6,
        })
        .collect();
    let auto = points.pop().expect("auto is in the list");
    let best = points
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.median_ms.total_cmp(&b.1.median_ms))
        .map(|(i, _)| i)
        .unwrap_or(0);
    Ok(Sweep { points, auto, best })
}

impl Sweep {
    /// Typical run-to-run noise: the median over the grid of each point's relative MAD.
    pub fn noise(&self) -> f64 {
        median(self.points.iter().map(Point::relative_mad).collect())
    }

    /// How many grid points have a lower median than `auto` (0: auto beats them all).
    pub fn auto_rank(&self) -> usize {
        self.points
            .iter()
            .filter(|p| p.median_ms < self.auto.median_ms)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_has_chunks_at_least_streams() {
        let g = grid(1 << 20);
        assert_eq!(g.len(), 7 + 6 + 5 + 4);
        assert!(g.iter().all(|&(s, c)| c >= s));
        assert_eq!(grid(3), vec![(1, 1), (1, 2), (2, 2)]);
    }

    #[test]
    fn noise_is_relative_mad() {
        let p = Point {
            streams: 1,
            chunks: 1,
            samples_ms: vec![9.0, 10.0, 11.0, 10.0, 30.0],
            median_ms: 10.0,
            predicted_ms: 10.0,
        };
        assert!((p.relative_mad() - 0.1).abs() < 1e-12);
    }
}
