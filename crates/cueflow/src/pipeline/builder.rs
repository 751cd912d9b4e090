//! [`ChunkedPipelineBuilder`]: the layout, ordering, tracing and scratch of a pipeline.

use super::chunked::ChunkedPipeline;
use super::count::Count;
use super::workspace::MakeScratch;
use crate::{Device, Result, Stream};

/// Builds a [`ChunkedPipeline`]; start with [`ChunkedPipeline::new`].
///
/// By default both counts are `auto`, the streams are ordered with events, nothing is traced
/// and there is no scratch (`S = ()`).
pub struct ChunkedPipelineBuilder<S = ()> {
    pub(super) device: Device,
    pub(super) streams: Count,
    pub(super) chunks: Count,
    pub(super) automatic: bool,
    pub(super) trace: Option<String>,
    pub(super) scratch: MakeScratch<S>,
}

impl ChunkedPipelineBuilder<()> {
    pub(super) fn new(device: &Device) -> Self {
        ChunkedPipelineBuilder {
            device: device.clone(),
            streams: Count::Auto,
            chunks: Count::Auto,
            automatic: false,
            trace: None,
            scratch: Box::new(|_, _| Ok(())),
        }
    }
}

impl<S> ChunkedPipelineBuilder<S> {
    /// Streams to spread the chunks over: a number (`.streams(4)`) or [`Count::Auto`].
    pub fn streams(mut self, n: impl Into<Count>) -> Self {
        self.streams = n.into();
        self
    }

    /// Chunks to cut each run's buffer into: a number (`.chunks(32)`) or [`Count::Auto`].
    /// A run with more chunks than elements is refused.
    pub fn chunks(mut self, n: impl Into<Count>) -> Self {
        self.chunks = n.into();
        self
    }

    /// Both counts `auto` (the default): chosen by the performance model, see
    /// [`super::auto`].
    pub fn auto(self) -> Self {
        self.streams(Count::Auto).chunks(Count::Auto)
    }

    /// No events between the streams: they order automatically (SPEC AC5), which for disjoint
    /// chunks inserts no wait at all. Runs are then timed on the host only
    /// ([`RunReport::wall_ms`](super::RunReport::wall_ms)).
    pub fn auto_order(mut self) -> Self {
        self.automatic = true;
        self
    }

    /// Record each run's timeline into [`RunReport::trace`](super::RunReport::trace), with
    /// the streams named `{label}: origin` and `{label}: stream k`. A traced run starts and
    /// stops the device's trace itself ([`Device::start_trace`], [`Device::stop_trace`], which
    /// synchronizes the device), so do not trace the device around it at the same time.
    pub fn trace(mut self, label: impl Into<String>) -> Self {
        self.trace = Some(label.into());
        self
    }

    /// Per-stream scratch for the work: `make(stream, max_chunk_len)` is called for each
    /// pipeline stream before its first chunk, and again for all of them when a run's chunks
    /// are longer than those the scratch was made for, or less than half as long (so that the
    /// whole-buffer chunk of `auto`'s calibration does not leave a whole buffer of scratch on
    /// every stream). The scratch may be longer than a chunk: slice it to
    /// [`Chunk::len`](super::Chunk::len). The work gets its stream's value through
    /// [`Chunk::scratch`](super::Chunk::scratch); chunks on one stream share it, one after
    /// another, so intermediate results never cross streams.
    ///
    /// ```
    /// use cueflow::pipeline::ChunkedPipeline;
    /// use cueflow::{Device, DeviceBuffer};
    /// let dev = Device::host()?;
    /// let pipe = ChunkedPipeline::new(&dev)
    ///     .streams(2)
    ///     .chunks(8)
    ///     .scratch(|s, len| DeviceBuffer::<f32>::new(s.device(), len))
    ///     .build()?;
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn scratch<S2>(
        self,
        make: impl FnMut(&Stream, usize) -> Result<S2> + Send + 'static,
    ) -> ChunkedPipelineBuilder<S2> {
        ChunkedPipelineBuilder {
            device: self.device,
            streams: self.streams,
            chunks: self.chunks,
            automatic: self.automatic,
            trace: self.trace,
            scratch: Box::new(make),
        }
    }

    /// Create the pipeline: its origin stream, its events, and the streams of a fixed stream
    /// count (an `auto` count creates them when it has chosen). Fails with
    /// [`Error::InvalidLayout`](crate::Error::InvalidLayout) for a count of 0.
    pub fn build(self) -> Result<ChunkedPipeline<S>> {
        ChunkedPipeline::from_builder(self)
    }
}
