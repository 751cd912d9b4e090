//! The pipeline sweep: every configuration of streams {1, 2, 4, 8, 16} × chunks {1, …, 128}
//! (chunks ≥ streams), timed in interleaved rounds so that drift and background load hit all
//! configurations alike; then the sweep's fastest configuration and the `auto` choice re-timed
//! head to head.

use std::collections::BTreeMap;

use cueflow::pipeline::reference::compute;
use cueflow::pipeline::tune::SizedModel;
use cueflow::pipeline::{median, ChunkedPipeline, PipelineBuffers};
use cueflow::{Device, Event, Stream};

use crate::errors::CliResult;
use crate::progress::Progress;
use crate::runner::run_verified;

/// Stream counts swept.
pub const STREAMS: [u32; 5] = [1, 2, 4, 8, 16];
/// Chunk counts swept.
pub const CHUNKS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

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

/// The pipeline ordered with events against the same with automatic ordering (AC5).
#[derive(Clone, Debug)]
pub struct Ordering {
    /// Events between the streams (the manual pipeline).
    pub events: Point,
    /// No events; the streams order automatically.
    pub automatic: Point,
}

impl Ordering {
    /// Speed of the automatic pipeline relative to the manual one (events time / automatic
    /// time; 1.0 is as fast).
    pub fn speed(&self) -> f64 {
        self.events.median_ms / self.automatic.median_ms
    }
}

/// The pipeline enqueued stream by stream against the same run captured into one graph.
#[derive(Clone, Debug)]
pub struct GraphPipeline {
    /// Streams of the run.
    pub streams: u32,
    /// Chunks of the run.
    pub chunks: u32,
    /// Enqueued stream by stream (events between the streams), ms per run.
    pub stream_ms: Vec<f64>,
    /// Captured once, launched as one graph, ms per run.
    pub graph_ms: Vec<f64>,
}

impl GraphPipeline {
    /// Graph time / stream time, medians (1.0 is as fast).
    pub fn ratio(&self) -> f64 {
        median(self.graph_ms.clone()) / median(self.stream_ms.clone())
    }
}

/// The pipeline over `config` (streams, chunks) run stream by stream against the same run
/// captured once into a graph and launched as one: `rounds` alternating runs of each after one
/// warm-up, every run verified, each timed with events (the stream run between its start and
/// stop events, the graph between events around its launch).
pub fn graph_pipeline(
    dev: &Device,
    bufs: &mut PipelineBuffers,
    iters: u32,
    rounds: usize,
    config: (u32, u32),
    progress: &Progress,
) -> CliResult<GraphPipeline> {
    let (s, c) = config;
    let mut pipe = ChunkedPipeline::new(dev).streams(s).chunks(c).build()?;
    let exec = pipe
        .capture_on(&bufs.input, &bufs.device, &mut bufs.output, compute(iters))?
        .instantiate()?;
    let launcher = Stream::builder(dev).non_blocking().build()?;
    let (a, z) = (Event::new(dev)?, Event::new(dev)?);
    progress.add_steps(((rounds + 1) * 2) as u64);
    let mut out = GraphPipeline {
        streams: s,
        chunks: c,
        stream_ms: Vec::with_capacity(rounds),
        graph_ms: Vec::with_capacity(rounds),
    };
    for round in 0..=rounds {
        progress.phase(format!("pipeline as a graph: round {round}/{rounds}"));
        for graph in [false, true] {
            bufs.poison_output()?;
            let ms = if graph {
                launcher.record_event(&a)?;
                exec.launch(&launcher)?;
                launcher.record_event(&z)?;
                z.synchronize()?;
                f64::from(Event::elapsed_ms(&a, &z)?)
            } else {
                bufs.run(&mut pipe, iters)?.ms()
            };
            let label = if graph { "graph" } else { "streams" };
            bufs.verify(iters)?
                .map_err(|e| crate::errors::CliError::Verify(format!("{label}: {e}")))?;
            if round > 0 {
                if graph {
                    out.graph_ms.push(ms);
                } else {
                    out.stream_ms.push(ms);
                }
            }
            progress.step();
        }
    }
    Ok(out)
}

/// The sweep's results.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The grid, streams-major.
    pub points: Vec<Point>,
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

/// What timing a configuration needs: the device, the buffers, the kernel's steps, the model
/// (for the predictions stored beside the measurements) and the progress bar.
pub struct Timer<'a> {
    /// The device.
    pub dev: &'a Device,
    /// The pipeline's buffers.
    pub bufs: &'a mut PipelineBuffers,
    /// Compute steps per element.
    pub iters: u32,
    /// The model whose predictions are recorded.
    pub model: &'a SizedModel,
    /// Progress bar.
    pub progress: &'a Progress,
}

impl Timer<'_> {
    /// Time every grid configuration: one verified warm-up round, then `reps` timed rounds
    /// (the last one verified too), each round running every configuration once.
    pub fn sweep(&mut self, reps: usize) -> CliResult<Sweep> {
        let configs = grid(self.bufs.len());
        let points = self.time(&configs, reps, "sweep")?;
        let best = points
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.median_ms.total_cmp(&b.1.median_ms))
            .map(|(i, _)| i)
            .unwrap_or(0);
        Ok(Sweep { points, best })
    }

    /// Re-time two configurations against each other in `rounds` fresh alternating rounds.
    /// The sweep's fastest median is the minimum of many noisy medians and so flatters its
    /// configuration (the winner's curse); an independent measurement of the winner does not.
    pub fn head_to_head(
        &mut self,
        rounds: usize,
        best: (u32, u32),
        auto: (u32, u32),
    ) -> CliResult<(Point, Point)> {
        let mut v = self.time(&[best, auto], rounds, "best vs auto")?;
        let auto = v.pop().expect("two points");
        let best = v.pop().expect("two points");
        Ok((best, auto))
    }

    /// The pipeline at (streams, chunks) ordered with events against the same pipeline with no
    /// events, ordering automatically (AC5), both timed on the host (event timing needs the
    /// events the automatic one does without): a verified warm-up round, then `rounds`
    /// alternating rounds, the last one verified.
    pub fn ordering(&mut self, rounds: usize, config: (u32, u32)) -> CliResult<Ordering> {
        let (s, c) = config;
        let mut pipes = [
            ChunkedPipeline::new(self.dev)
                .streams(s)
                .chunks(c)
                .build()?,
            ChunkedPipeline::new(self.dev)
                .streams(s)
                .chunks(c)
                .auto_order()
                .build()?,
        ];
        self.progress.add_steps(((rounds + 1) * 2) as u64);
        let mut samples = [Vec::with_capacity(rounds), Vec::with_capacity(rounds)];
        for round in 0..=rounds {
            self.progress.phase(format!(
                "events vs automatic ordering: round {round}/{rounds}"
            ));
            for (i, p) in pipes.iter_mut().enumerate() {
                let poison = round == 0 || round == rounds;
                if poison {
                    self.bufs.poison_output()?;
                }
                let ms = self.bufs.run(p, self.iters)?.wall_ms;
                if poison {
                    let label = if i == 0 {
                        "events"
                    } else {
                        "automatic ordering"
                    };
                    self.bufs
                        .verify(self.iters)?
                        .map_err(|e| crate::errors::CliError::Verify(format!("{label}: {e}")))?;
                }
                if round > 0 {
                    samples[i].push(ms);
                }
                self.progress.step();
            }
        }
        let point = |v: &Vec<f64>| Point {
            streams: s,
            chunks: c,
            median_ms: median(v.clone()),
            samples_ms: v.clone(),
            predicted_ms: self.model.predict(s, c) / 1e6,
        };
        Ok(Ordering {
            events: point(&samples[0]),
            automatic: point(&samples[1]),
        })
    }

    /// Time `configs` (streams, chunks): a verified warm-up round, then `reps` timed rounds
    /// (the last one verified too), each running every configuration once, in order.
    fn time(&mut self, configs: &[(u32, u32)], reps: usize, what: &str) -> CliResult<Vec<Point>> {
        // One pipeline per stream count, its chunk count set before each run.
        let mut pipelines: BTreeMap<u32, ChunkedPipeline> = BTreeMap::new();
        for &(s, c) in configs {
            if let std::collections::btree_map::Entry::Vacant(e) = pipelines.entry(s) {
                e.insert(
                    ChunkedPipeline::new(self.dev)
                        .streams(s)
                        .chunks(c)
                        .build()?,
                );
            }
        }
        self.progress.add_steps(((reps + 1) * configs.len()) as u64);
        let mut samples = vec![Vec::with_capacity(reps); configs.len()];
        for round in 0..=reps {
            self.progress.phase(if round == 0 {
                format!("{what}: warm-up round")
            } else {
                format!("{what}: round {round}/{reps}")
            });
            for (i, &(s, c)) in configs.iter().enumerate() {
                let p = pipelines.get_mut(&s).expect("a pipeline per stream count");
                p.set_chunks(c)?;
                if round == 0 || round == reps {
                    let label = format!("{s} streams × {c} chunks");
                    let ms = run_verified(p, self.bufs, self.iters, &label)?;
                    if round > 0 {
                        samples[i].push(ms);
                    }
                } else {
                    samples[i].push(self.bufs.run(p, self.iters)?.ms());
                }
                self.progress.step();
            }
        }
        Ok(configs
            .iter()
            .zip(samples)
            .map(|(&(s, c), v)| Point {
                streams: s,
                chunks: c,
                median_ms: median(v.clone()),
                samples_ms: v,
                predicted_ms: self.model.predict(s, c) / 1e6,
            })
            .collect())
    }
}

impl Sweep {
    /// Typical run-to-run noise: the median over the grid of each point's relative MAD.
    pub fn noise(&self) -> f64 {
        median(self.points.iter().map(Point::relative_mad).collect())
    }

    /// The grid point of a configuration, if it was swept.
    pub fn point(&self, streams: u32, chunks: u32) -> Option<&Point> {
        self.points
            .iter()
            .find(|p| p.streams == streams && p.chunks == chunks)
    }

    /// How many grid points have a lower median than the configuration (streams, chunks).
    pub fn rank(&self, streams: u32, chunks: u32) -> usize {
        match self.point(streams, chunks) {
            Some(me) => self
                .points
                .iter()
                .filter(|p| p.median_ms < me.median_ms)
                .count(),
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_has_chunks_at_least_streams() {
        let g = grid(1 << 20);
        assert_eq!(g.len(), 8 + 7 + 6 + 5 + 4);
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
