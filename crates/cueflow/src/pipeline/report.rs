//! [`RunReport`]: what one pipeline run did and how long it took.

use crate::trace::Trace;

/// Where a run's streams × chunks came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Chosen {
    /// Both counts were given.
    Given,
    /// The run measured the work for `auto`: one stream, one chunk, each stage timed with
    /// events. Its output is complete like any other run's; later runs of the same size use
    /// what the model chose from it.
    Calibration,
    /// The performance model chose at least one of the counts.
    Auto {
        /// The model's prediction for the chosen layout, in milliseconds.
        predicted_ms: f64,
    },
}

/// What one run of a [`ChunkedPipeline`](super::ChunkedPipeline) did. Nothing was verified:
/// checking the output is the caller's business.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Streams the chunks were spread over (chunk `c` on stream `c % streams`).
    pub streams: usize,
    /// Chunks the buffer was cut into.
    pub chunks: usize,
    /// Whether the layout was given, chosen by the model, or a calibration.
    pub chosen: Chosen,
    /// Time between the start and stop events on the origin stream, in milliseconds: the
    /// device-side time of the whole run, measured as `benches/cuda/pipeline.cu` measures it.
    /// `None` for a run of a pipeline that orders automatically (it has no events); its
    /// calibration runs, which time each stage with events, have one.
    pub device_ms: Option<f64>,
    /// Host time from before the first enqueue until the host saw the last chunk done, in
    /// milliseconds: the same measure for both orderings.
    pub wall_ms: f64,
    /// The run's timeline, when the pipeline traces
    /// ([`ChunkedPipelineBuilder::trace`](super::ChunkedPipelineBuilder::trace)): streams named
    /// `{label}: origin` and `{label}: stream k`, only those with operations.
    pub trace: Option<Trace>,
}

impl RunReport {
    /// The run's time in milliseconds: [`device_ms`](Self::device_ms) where there is one,
    /// else [`wall_ms`](Self::wall_ms).
    pub fn ms(&self) -> f64 {
        self.device_ms.unwrap_or(self.wall_ms)
    }
}
