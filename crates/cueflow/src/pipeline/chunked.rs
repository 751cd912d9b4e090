//! [`ChunkedPipeline`]: the type, its runs, and how a run's layout is decided.

use bytemuck::Pod;

use super::auto::{stage_times, Calibrated, DeviceProfile, Shape, CALIBRATION_RUNS};
use super::builder::ChunkedPipelineBuilder;
use super::chunk::{Chunk, MapChunk};
use super::frame::{Io, Work};
use super::tune::{self, MAX_CHUNKS};
use super::workspace::{ScratchPool, Workspace};
use super::{Chosen, Count, RunReport};
use crate::model::{self, Choice, ModelParams};
use crate::{
    Device, DeviceBuffer, Error, Event, EventFlags, PinnedSlice, PinnedSliceMut, Result, Stream,
};

/// The seeds' chunked copy → work → copy pipeline, for any work: see the
/// [module documentation](super) for what a run enqueues and how it is timed.
///
/// Build one with [`ChunkedPipeline::new`] and run it as often as needed: the streams, events,
/// device memory and scratch are created once and reused. `S` is the type of the per-stream
/// scratch ([`ChunkedPipelineBuilder::scratch`]); `()` when there is none.
pub struct ChunkedPipeline<S = ()> {
    pub(super) device: Device,
    streams_count: Count,
    chunks_count: Count,
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
    memory: Workspace,
    pub(super) scratch: ScratchPool<S>,
    calibrated: Option<Calibrated>,
}

/// How a run is laid out, or that it must calibrate first.
enum Plan {
    Run {
        streams: usize,
        chunks: usize,
        chosen: Chosen,
    },
    Calibrate,
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

    /// Run `work` over `input` chunk by chunk, in place on device memory the pipeline keeps
    /// between runs, into `output` (the same length and type as `input`). Blocks until the
    /// output has arrived.
    ///
    /// `work(stream, chunk)` enqueues the work of one chunk on `stream`, over
    /// [`chunk.device()`](Chunk::device): one kernel, several, a library call. It must enqueue
    /// on the stream it is given and touch only the chunk's memory and its scratch; an error
    /// it returns ends the run (the chunks already enqueued still complete) and is returned.
    ///
    /// Refused, with nothing enqueued: buffers of another device
    /// ([`Error::InvalidHandle`]), `input` and `output` of different lengths
    /// ([`Error::OutOfBounds`]), an empty input or more fixed chunks than elements
    /// ([`Error::InvalidLayout`]).
    pub fn run<'i, 'o, T: Pod>(
        &mut self,
        input: impl Into<PinnedSlice<'i, T>>,
        output: impl Into<PinnedSliceMut<'o, T>>,
        mut work: impl FnMut(&Stream, Chunk<'_, T, S>) -> Result<()>,
    ) -> Result<RunReport> {
        let (input, output) = (input.into(), output.into());
        self.check(
            "run",
            input.device(),
            input.len(),
            output.device(),
            output.len(),
        )?;
        let dev = self.memory.view::<T>(&self.device, 0, input.len())?;
        let io = Io {
            input,
            output,
            dev_in: &dev,
            dev_out: &dev,
        };
        self.execute(io, &mut |s, p| work(s, p.chunk()))
    }

    /// [`run`](Self::run) through the caller's device buffer `device` (as long as `input`),
    /// which holds the output of the work when the run returns.
    pub fn run_on<'i, 'o, T: Pod>(
        &mut self,
        input: impl Into<PinnedSlice<'i, T>>,
        device: &DeviceBuffer<T>,
        output: impl Into<PinnedSliceMut<'o, T>>,
        mut work: impl FnMut(&Stream, Chunk<'_, T, S>) -> Result<()>,
    ) -> Result<RunReport> {
        let (input, output) = (input.into(), output.into());
        self.check(
            "run_on",
            input.device(),
            input.len(),
            output.device(),
            output.len(),
        )?;
        self.check_other(
            "run_on",
            "device buffer",
            device.device(),
            device.len(),
            input.len(),
        )?;
        let io = Io {
            input,
            output,
            dev_in: device,
            dev_out: device,
        };
        self.execute(io, &mut |s, p| work(s, p.chunk()))
    }

    /// Run `work` from `input` (elements of `I`) to `output` (as many elements of `O`): each
    /// chunk's input is copied into device memory [`MapChunk::input`], the work writes
    /// [`MapChunk::output`], which is copied out. Otherwise as [`run`](Self::run).
    pub fn run_map<'i, 'o, I: Pod, O: Pod>(
        &mut self,
        input: impl Into<PinnedSlice<'i, I>>,
        output: impl Into<PinnedSliceMut<'o, O>>,
        mut work: impl FnMut(&Stream, MapChunk<'_, I, O, S>) -> Result<()>,
    ) -> Result<RunReport> {
        let (input, output) = (input.into(), output.into());
        self.check(
            "run_map",
            input.device(),
            input.len(),
            output.device(),
            output.len(),
        )?;
        let n = input.len();
        let dev_in = self.memory.view::<I>(&self.device, 0, n)?;
        let dev_out = self.memory.view::<O>(&self.device, 1, n)?;
        let io = Io {
            input,
            output,
            dev_in: &dev_in,
            dev_out: &dev_out,
        };
        self.execute(io, &mut |s, p| work(s, p.map_chunk()))
    }

    /// Refuse a run that cannot work, before anything is enqueued (ER3).
    fn check(
        &self,
        call: &str,
        in_dev: &Device,
        in_len: usize,
        out_dev: &Device,
        out_len: usize,
    ) -> Result<()> {
        self.check_other(call, "input", in_dev, in_len, in_len)?;
        self.check_other(call, "output", out_dev, out_len, in_len)?;
        if in_len == 0 {
            return Err(Error::InvalidLayout(format!(
                "ChunkedPipeline::{call}: the input is empty; there is nothing to cut into chunks"
            )));
        }
        if let Count::Fixed(c) = self.chunks_count {
            if c as usize > in_len {
                return Err(Error::InvalidLayout(format!(
                    "ChunkedPipeline::{call}: {c} chunks of {in_len} elements: a chunk needs at least one"
                )));
            }
        }
        Ok(())
    }

    /// `what` must belong to the pipeline's device and hold `want` elements.
    fn check_other(
        &self,
        call: &str,
        what: &str,
        dev: &Device,
        len: usize,
        want: usize,
    ) -> Result<()> {
        if !dev.same(&self.device) {
            return Err(Error::InvalidHandle(format!(
                "ChunkedPipeline::{call}: the {what} belongs to {dev:?}, the pipeline to {:?}",
                self.device
            )));
        }
        if len != want {
            return Err(Error::bounds(
                "CP4",
                format!("ChunkedPipeline::{call}: the {what} has {len} elements but the input has {want}"),
            ));
        }
        Ok(())
    }

    /// Decide the layout, then run: the planned layout, or a calibration.
    fn execute<I: Pod, O: Pod>(
        &mut self,
        mut io: Io<'_, I, O>,
        work: &mut Work<'_, I, O, S>,
    ) -> Result<RunReport> {
        let n = io.input.len();
        let shape = Shape {
            elements: n,
            input_bytes: n * std::mem::size_of::<I>(),
            output_bytes: n * std::mem::size_of::<O>(),
        };
        let (streams, chunks, chosen) = match self.plan(shape) {
            Plan::Run {
                streams,
                chunks,
                chosen,
            } => (streams, chunks, chosen),
            Plan::Calibrate => return self.calibrate(&mut io, shape, work),
        };
        self.prepare(streams, n.div_ceil(chunks))?;
        let traced = self.trace.is_some();
        let t = self.frame(
            &mut io,
            streams,
            chunks,
            !self.automatic,
            false,
            traced,
            work,
        )?;
        Ok(t.report(streams, chunks, chosen))
    }

    fn plan(&self, shape: Shape) -> Plan {
        match (self.streams_count, self.chunks_count) {
            (Count::Fixed(s), Count::Fixed(c)) => Plan::Run {
                streams: s as usize,
                chunks: c as usize,
                chosen: Chosen::Given,
            },
            _ => match self.calibrated {
                Some(c) if c.shape == shape => Plan::Run {
                    streams: c.choice.streams as usize,
                    chunks: c.choice.chunks as usize,
                    chosen: Chosen::Auto {
                        predicted_ms: c.choice.predicted_ns / 1e6,
                    },
                },
                _ => Plan::Calibrate,
            },
        }
    }

    /// Measure the work for `auto` (see [`super::auto`]): warm-up and timed runs on one stream
    /// in one chunk, then the model's choice for this shape. Returns the last timed run.
    fn calibrate<I: Pod, O: Pod>(
        &mut self,
        io: &mut Io<'_, I, O>,
        shape: Shape,
        work: &mut Work<'_, I, O, S>,
    ) -> Result<RunReport> {
        let profile = DeviceProfile::of(&self.device)?;
        let n = shape.elements;
        self.prepare(1, n)?;
        let mut samples = Vec::with_capacity(CALIBRATION_RUNS);
        let mut last = None;
        for run in 0..=CALIBRATION_RUNS {
            let traced = run == CALIBRATION_RUNS && self.trace.is_some();
            let t = self.frame(io, 1, 1, true, true, traced, work)?;
            if run > 0 {
                samples.extend(t.stages);
            }
            last = Some(t);
        }
        let params = profile.params(stage_times(&samples));
        self.calibrated = Some(Calibrated {
            shape,
            params,
            choice: self.choice(&params, n),
        });
        let last = last.expect("at least one calibration run");
        Ok(last.report(1, 1, Chosen::Calibration))
    }

    /// The model's layout for `n` elements under the configured counts.
    fn choice(&self, params: &ModelParams, n: usize) -> Choice {
        let max_chunks = MAX_CHUNKS.min(u32::try_from(n).unwrap_or(u32::MAX));
        let c = tune::choose(params, self.streams_count, self.chunks_count, max_chunks);
        if c.chunks as usize <= n {
            return c;
        }
        // A fixed stream count above the element count: one chunk per element.
        let chunks = n as u32;
        Choice {
            chunks,
            predicted_ns: model::predict_concurrent(params, c.streams, chunks),
            ..c
        }
    }

    /// After a count changed: choose again from the calibration, if there is one.
    fn rechoose(&mut self) {
        if let Some(mut c) = self.calibrated {
            c.choice = self.choice(&c.params, c.shape.elements);
            self.calibrated = Some(c);
        }
    }

    /// Streams, end events and scratch for a run over `streams` streams whose longest chunk
    /// has `max_len` elements.
    fn prepare(&mut self, streams: usize, max_len: usize) -> Result<()> {
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
