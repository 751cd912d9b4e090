//! What `auto` keeps of a calibration: the shape of the runs it measured and the model it fitted
//! and chose with (a leaf, so that the pipeline can hold it without importing `auto`).

use crate::model::{Choice, ModelParams};

/// The shape of a run as far as `auto` cares: a choice made for one shape is reused only for
/// runs of the same shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub elements: usize,
    pub input_bytes: usize,
    pub output_bytes: usize,
}

/// What a calibration found for one shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Calibrated {
    pub shape: Shape,
    pub params: ModelParams,
    pub choice: Choice,
}
