//! [`ChunkedPipeline`]: the type, its configuration, and the streams it keeps.

use super::builder::ChunkedPipelineBuilder;
use super::calibrated::Calibrated;
use super::count::Count;
use super::workspace::{ScratchPool, Workspace};
use crate::model::{Choice, ModelParams};
use crate::{Device, Error, Event, EventFlags, Result, Stream};

/// The chunked copy → work → copy pipeline over several streams, for any work: see the
/// [module documentation](super) for what a run enqueues and how it is timed.
///
/// Build one with [`ChunkedPipeline::new`] and run it as often as needed: the streams, events,
/// device memory and scratch are created once and reused. `S` is the type of the per-stream
/// scratch ([`ChunkedPipelineBuilder::scratch`]); `()` when there is none.
pub struct ChunkedPipeline<S = ()> {
    pub(super) device: Device,
    pub(super) streams_count: Count,
    pub(super) chunks_count: Count,
    pub(super) automatic: bool,
    pub(super) trace: Option<String>,
    pub(super) origin: Stream,
    /// `stream 1..=n`, created as layouts need them.
    pub(super) streams: Vec<Stream>,
    /// One synchronization-only event per stream: its end of a run, which the origin waits on.
    pub(super) ends: Vec<Event>,
    pub(super) start: Event,
    pub(super) stop: Event,
    /// Recorded after the input copy and after the work in calibration runs.
    pub(super) marks: [Event; 2],
    pub(super) memory: Workspace,
    pub(super) scratch: ScratchPool<S>,
    pub(super) calibrated: Option<Calibrated>,
}

impl ChunkedPipeline<()> {
    /// Start building a pipeline on `device`.
    ///
    /// ```
    /// use cueflow::pipeline::ChunkedPipeline;
    /// use cueflow::{kernels, Device, PinnedBuffer};
    ///
    /// let dev = Device::host()?;
    /// let input = PinnedBuffer::from_slice(&dev, &vec![1.5f32; 4096])?;
    /// let mut output = PinnedBuffer::<f32>::new(&dev, 4096)?;
    /// let mut pipe = ChunkedPipeline::new(&dev).streams(4).chunks(16).build()?;
    /// let report = pipe.run(&input, &mut output, |s, c| kernels::scale(s, c.device(), 2.0))?;
    /// assert_eq!((report.streams, report.chunks), (4, 16));
    /// assert!(output.read()?.iter().all(|&x| x == 3.0));
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    #[allow(clippy::new_ret_no_self)] // A builder, as `ChunkedPipeline::new(&dev)…build()` reads.
    pub fn new(device: &Device) -> ChunkedPipelineBuilder<()> {
        ChunkedPipelineBuilder::new(device)
    }
}

impl<S> ChunkedPipeline<S> {
    pub(super) fn from_builder(b: ChunkedPipelineBuilder<S>) -> Result<Self> {
        check_count("streams", b.streams)?;
        check_count("chunks", b.chunks)?;
        let dev = &b.device;
        let mut p = ChunkedPipeline {
            origin: Stream::builder(dev).non_blocking().name("origin").build()?,
            streams: Vec::new(),
            ends: Vec::new(),
            start: Event::new(dev)?,
            stop: Event::new(dev)?,
            marks: [Event::new(dev)?, Event::new(dev)?],
            memory: Workspace::default(),
            scratch: ScratchPool::new(b.scratch),
            calibrated: None,
            streams_count: b.streams,
            chunks_count: b.chunks,
            automatic: b.automatic,
            trace: b.trace,
            device: b.device,
        };
        if let Count::Fixed(n) = p.streams_count {
            p.ensure_streams(n as usize)?;
        }
        Ok(p)
    }

    /// The device the pipeline runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The stream and chunk counts as configured (`auto` or fixed).
    pub fn layout(&self) -> (Count, Count) {
        (self.streams_count, self.chunks_count)
    }

    /// Change the stream count for later runs. A choice `auto` made for the other count is
    /// made again from the same calibration; nothing is measured anew.
    pub fn set_streams(&mut self, n: impl Into<Count>) -> Result<()> {
        let n = n.into();
        check_count("streams", n)?;
        self.streams_count = n;
        self.rechoose();
        Ok(())
    }

    /// Change the chunk count for later runs (see [`set_streams`](Self::set_streams)).
    pub fn set_chunks(&mut self, n: impl Into<Count>) -> Result<()> {
        let n = n.into();
        check_count("chunks", n)?;
        self.chunks_count = n;
        self.rechoose();
        Ok(())
    }

    /// Trace later runs under `label` (see [`ChunkedPipelineBuilder::trace`]), or stop tracing.
    pub fn set_trace(&mut self, label: Option<String>) {
        self.trace = label;
    }

    /// True if the streams order automatically instead of through events
    /// ([`ChunkedPipelineBuilder::auto_order`]).
    pub fn is_auto_order(&self) -> bool {
        self.automatic
    }

    /// The origin stream: it records the start and stop events, every pipeline stream waits on
    /// it at the start of a run, and it waits on all of them at the end. Its id names its track
    /// in a trace.
    pub fn origin(&self) -> &Stream {
        &self.origin
    }

    /// The pipeline streams created so far, `stream 1..=n`: chunk `c` of a run over `n`
    /// streams runs on `streams()[c % n]`.
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    /// What `auto` chose for the last calibrated shape, with the model's prediction; `None`
    /// before the first calibration.
    pub fn auto_choice(&self) -> Option<Choice> {
        self.calibrated.map(|c| c.choice)
    }

    /// The model parameters of the last calibration: the work's measured stage times and the
    /// device profile's overhead and duplex slowdown.
    pub fn model(&self) -> Option<ModelParams> {
        self.calibrated.map(|c| c.params)
    }

    /// Forget the calibration, so that the next run with an `auto` count measures the work
    /// again (for instance because the work changed).
    pub fn recalibrate(&mut self) {
        self.calibrated = None;
    }

    /// Streams, end events and scratch for a run over `streams` streams whose longest chunk
    /// has `max_len` elements.
    pub(super) fn prepare(&mut self, streams: usize, max_len: usize) -> Result<()> {
        self.ensure_streams(streams)?;
        self.scratch.ensure(&self.streams[..streams], max_len)
    }

    fn ensure_streams(&mut self, n: usize) -> Result<()> {
        let sync_only = EventFlags {
            timing: false,
            ..Default::default()
        };
        while self.streams.len() < n {
            let b = Stream::builder(&self.device)
                .non_blocking()
                .name(format!("stream {}", self.streams.len() + 1));
            let s = if self.automatic {
                b.auto_order().build()?
            } else {
                b.build()?
            };
            self.ends.push(Event::with_flags(&self.device, sync_only)?);
            self.streams.push(s);
        }
        Ok(())
    }
}

/// A count of 0 cannot run.
fn check_count(what: &str, n: Count) -> Result<()> {
    if n == Count::Fixed(0) {
        return Err(Error::InvalidLayout(format!(
            "0 {what}: a pipeline needs at least one (or `auto`)"
        )));
    }
    Ok(())
}
