//! Graph replay against individual launches: `NODES` empty kernels launched one by one on a
//! stream, and the same kernels captured into a graph and launched as one, each timed with
//! events on the stream (device time from before the first kernel to after the last) and
//! divided by the number of kernels — the same measure as `benches/cuda/graph.cu`.

use cueflow::pipeline::median;
use cueflow::{kernels, CaptureMode, Device, Event, Stream};

use crate::errors::CliResult;

/// Kernels per measurement.
pub const NODES: usize = 1000;

/// Per-kernel times of both ways.
#[derive(Clone, Debug)]
pub struct GraphBench {
    /// Kernels per run.
    pub nodes: usize,
    /// Individual launches, µs per kernel, one sample per run.
    pub individual_us: Vec<f64>,
    /// One graph launch, µs per kernel, one sample per run.
    pub graph_us: Vec<f64>,
}

impl GraphBench {
    /// Median µs per kernel, launched one by one.
    pub fn individual(&self) -> f64 {
        median(self.individual_us.clone())
    }

    /// Median µs per kernel, replayed as a graph.
    pub fn graph(&self) -> f64 {
        median(self.graph_us.clone())
    }

    /// How many times faster per kernel the graph replay is.
    pub fn speedup(&self) -> f64 {
        self.individual() / self.graph()
    }
}

/// Time `reps` runs of each way, alternating, after one warm-up run of each.
pub fn measure(dev: &Device, reps: usize) -> CliResult<GraphBench> {
    let s = Stream::builder(dev).non_blocking().build()?;
    let cap = Stream::builder(dev).non_blocking().build()?;
    cap.begin_capture(CaptureMode::Global)?;
    for _ in 0..NODES {
        kernels::empty(&cap)?;
    }
    let exec = cap.end_capture()?.instantiate()?;
    let (a, b) = (Event::new(dev)?, Event::new(dev)?);
    let time = |graph: bool| -> CliResult<f64> {
        s.record_event(&a)?;
        if graph {
            exec.launch(&s)?;
        } else {
            for _ in 0..NODES {
                kernels::empty(&s)?;
            }
        }
        s.record_event(&b)?;
        b.synchronize()?;
        Ok(Event::elapsed_ms(&a, &b)? as f64 * 1e3 / NODES as f64)
    };
    let mut out = GraphBench {
        nodes: NODES,
        individual_us: Vec::with_capacity(reps),
        graph_us: Vec::with_capacity(reps),
    };
    for r in 0..=reps.max(1) {
        let (i, g) = (time(false)?, time(true)?);
        if r > 0 {
            out.individual_us.push(i);
            out.graph_us.push(g);
        }
    }
    Ok(out)
}
