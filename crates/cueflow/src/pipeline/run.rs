//! The runs of a [`ChunkedPipeline`]: checked before anything is enqueued, then laid out
//! ([`plan`](super::plan)) and enqueued ([`frame`](super::frame)).

use bytemuck::Pod;

use super::calibrated::Shape;
use super::chunk::{Chunk, MapChunk};
use super::chunked::ChunkedPipeline;
use super::count::Count;
use super::frame::{Io, Mode, Work};
use super::plan::Plan;
use super::report::RunReport;
use crate::{
    CaptureMode, Device, DeviceBuffer, Error, Graph, PinnedSlice, PinnedSliceMut, Result, Stream,
};

impl<S> ChunkedPipeline<S> {
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
        let io = self.io_on("run_on", input.into(), device, output.into())?;
        self.execute(io, &mut |s, p| work(s, p.chunk()))
    }

    /// The memory of a run through the caller's device buffer, checked (ER3).
    fn io_on<'a, T: Pod>(
        &self,
        call: &str,
        input: PinnedSlice<'a, T>,
        device: &'a DeviceBuffer<T>,
        output: PinnedSliceMut<'a, T>,
    ) -> Result<Io<'a, T, T>> {
        self.check(
            call,
            input.device(),
            input.len(),
            output.device(),
            output.len(),
        )?;
        self.check_other(
            call,
            "device buffer",
            device.device(),
            device.len(),
            input.len(),
        )?;
        Ok(Io {
            input,
            output,
            dev_in: device,
            dev_out: device,
        })
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

    /// Capture one [`run_on`](Self::run_on) into a graph instead of running it (GR1): the
    /// event frame and every chunk — input copy, `work`, output copy on stream `c % streams`,
    /// the streams joined by events — become one graph; once instantiated, each launch does a
    /// whole run (GR3) with one call. The graph keeps `input`, `device` and `output` alive
    /// (GR4); launch it on any stream of the device and wait for that stream before reading
    /// `output`.
    ///
    /// A layout left `auto` is chosen first, which runs the calibration runs of
    /// [`run`](Self::run) for real when this size has none yet. Refused as `run_on` refuses;
    /// an error from `work` ends the capture and is returned.
    pub fn capture_on<'i, 'o, T: Pod>(
        &mut self,
        input: impl Into<PinnedSlice<'i, T>>,
        device: &DeviceBuffer<T>,
        output: impl Into<PinnedSliceMut<'o, T>>,
        mut work: impl FnMut(&Stream, Chunk<'_, T, S>) -> Result<()>,
    ) -> Result<Graph> {
        let mut io = self.io_on("capture_on", input.into(), device, output.into())?;
        let work: &mut Work<'_, T, T, S> = &mut |s, p| work(s, p.chunk());
        let n = io.input.len();
        let shape = Shape {
            elements: n,
            input_bytes: n * std::mem::size_of::<T>(),
            output_bytes: n * std::mem::size_of::<T>(),
        };
        if let Plan::Calibrate = self.plan(shape) {
            self.calibrate(&mut io, shape, work)?;
        }
        let Plan::Run {
            streams, chunks, ..
        } = self.plan(shape)
        else {
            return Err(Error::InvalidLayout(
                "ChunkedPipeline::capture_on: no layout after calibration".into(),
            ));
        };
        self.prepare(streams, n.div_ceil(chunks))?;
        let ranges = crate::api::memory::chunk_ranges(n, chunks)?;
        self.origin.begin_capture(CaptureMode::ThreadLocal)?;
        let enqueued = self.enqueue(
            &mut io,
            &self.streams[..streams],
            &ranges,
            true,
            false,
            work,
        );
        let graph = self.origin.end_capture();
        enqueued?;
        graph
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
        let mode = Mode {
            events: !self.automatic,
            marks: false,
            traced: self.trace.is_some(),
        };
        let t = self.frame(&mut io, streams, chunks, mode, work)?;
        Ok(t.report(streams, chunks, chosen))
    }
}
