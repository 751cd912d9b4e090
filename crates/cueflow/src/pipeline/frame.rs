//! One run of a pipeline on the device: the event frame around the chunks, the chunks
//! themselves, and the timing and trace of the run.
//!
//! With events (the default) the frame is that of `benches/cuda/pipeline.cu`: the origin
//! stream records `start`, every stream of the run waits on it, chunk `c` is enqueued on stream
//! `c % streams` as input copy → work → output copy, then every stream records its end event,
//! the origin waits on all of them and records `stop`. Without events (automatic ordering) the
//! chunks are enqueued alone and the host waits for each stream.

use std::ops::Range;
use std::time::Instant;

use bytemuck::Pod;

use super::chunk::{Chunk, MapChunk, Place};
use super::chunked::ChunkedPipeline;
use super::report::{Chosen, RunReport};
use crate::api::memory::chunk_ranges;
use crate::model::StageTimes;
use crate::trace::Trace;
use crate::{DeviceBuffer, Event, PinnedSlice, PinnedSliceMut, Result, Stream};

/// The memory of a run: host input and output, and the device memory chunks are copied into
/// and out of (the same buffer for an in-place run).
pub(super) struct Io<'a, I, O> {
    pub input: PinnedSlice<'a, I>,
    pub output: PinnedSliceMut<'a, O>,
    pub dev_in: &'a DeviceBuffer<I>,
    pub dev_out: &'a DeviceBuffer<O>,
}

/// What the work of one chunk is given, before it is shaped into a [`Chunk`] or [`MapChunk`].
pub(super) struct Parts<'a, I, O, S> {
    place: Place,
    input: &'a DeviceBuffer<I>,
    output: &'a DeviceBuffer<O>,
    scratch: &'a S,
}

impl<'a, I, O, S> Parts<'a, I, O, S> {
    /// The chunk of an in-place run (where `input` and `output` view the same memory).
    pub fn chunk(self) -> Chunk<'a, I, S> {
        Chunk {
            place: self.place,
            device: self.input,
            scratch: self.scratch,
        }
    }

    /// The chunk of a run with separate input and output memory.
    pub fn map_chunk(self) -> MapChunk<'a, I, O, S> {
        MapChunk {
            place: self.place,
            input: self.input,
            output: self.output,
            scratch: self.scratch,
        }
    }
}

/// The per-chunk work, as the frame calls it.
pub(super) type Work<'w, I, O, S> = dyn FnMut(&Stream, Parts<'_, I, O, S>) -> Result<()> + 'w;

/// How a run is framed and what it records.
#[derive(Clone, Copy)]
pub(super) struct Mode {
    /// The event frame (else the streams order themselves).
    pub events: bool,
    /// Record the stage marks too (one chunk only: a calibration run).
    pub marks: bool,
    /// Record the run's timeline.
    pub traced: bool,
}

/// The times (and trace) of one run.
pub(super) struct Timing {
    device_ms: Option<f64>,
    wall_ms: f64,
    /// Stage times, for a calibration run.
    pub stages: Option<StageTimes>,
    trace: Option<Trace>,
}

impl Timing {
    pub fn report(self, streams: usize, chunks: usize, chosen: Chosen) -> RunReport {
        RunReport {
            streams,
            chunks,
            chosen,
            device_ms: self.device_ms,
            wall_ms: self.wall_ms,
            trace: self.trace,
        }
    }
}

impl<S> ChunkedPipeline<S> {
    /// Enqueue one run over `streams` streams (created already) in `chunks` chunks, wait for
    /// it, and time it.
    pub(super) fn frame<I: Pod, O: Pod>(
        &self,
        io: &mut Io<'_, I, O>,
        streams: usize,
        chunks: usize,
        mode: Mode,
        work: &mut Work<'_, I, O, S>,
    ) -> Result<Timing> {
        let Mode {
            events,
            marks,
            traced,
        } = mode;
        let ranges = chunk_ranges(io.input.len(), chunks)?;
        let used = &self.streams[..streams];
        if traced {
            self.device.start_trace()?;
        }
        let t0 = Instant::now();
        let done = self
            .enqueue(io, used, &ranges, events, marks, work)
            .and_then(|()| match events {
                true => self.stop.synchronize(),
                false => used.iter().try_for_each(Stream::synchronize),
            });
        let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        // Stop tracing even when the run failed, so the device does not go on recording.
        let trace = traced.then(|| self.device.stop_trace());
        done?;
        let trace = match trace {
            Some(t) => Some(self.named(t?, used)),
            None => None,
        };
        let ms = |a: &Event, b: &Event| Event::elapsed_ms(a, b).map(f64::from);
        let stages = if marks {
            Some(StageTimes {
                h2d_ns: ms(&self.start, &self.marks[0])? * 1e6,
                kernel_ns: ms(&self.marks[0], &self.marks[1])? * 1e6,
                d2h_ns: ms(&self.marks[1], &self.stop)? * 1e6,
            })
        } else {
            None
        };
        Ok(Timing {
            device_ms: if events {
                Some(ms(&self.start, &self.stop)?)
            } else {
                None
            },
            wall_ms,
            stages,
            trace,
        })
    }

    /// Enqueue the frame and the chunks. After a failed chunk the frame is still closed, so a
    /// later run cannot overlap what this one left enqueued; the first error is returned.
    pub(super) fn enqueue<I: Pod, O: Pod>(
        &self,
        io: &mut Io<'_, I, O>,
        used: &[Stream],
        ranges: &[Range<usize>],
        events: bool,
        marks: bool,
        work: &mut Work<'_, I, O, S>,
    ) -> Result<()> {
        let mut result = Ok(());
        if events {
            result = self.origin.record_event(&self.start);
            for s in used {
                result = result.and_then(|()| s.wait_event(&self.start));
            }
        }
        for (c, r) in ranges.iter().enumerate() {
            if result.is_err() {
                break;
            }
            let place = Place {
                index: c,
                stream: c % used.len(),
                range: r.clone(),
            };
            result = self.enqueue_chunk(io, &used[place.stream], place, marks, work);
        }
        if events {
            let joined = self.join(used);
            result = result.and(joined);
        }
        result
    }

    /// One chunk on its stream: input copy → work → output copy.
    fn enqueue_chunk<I: Pod, O: Pod>(
        &self,
        io: &mut Io<'_, I, O>,
        s: &Stream,
        place: Place,
        marks: bool,
        work: &mut Work<'_, I, O, S>,
    ) -> Result<()> {
        let r = place.range.clone();
        let d_in = io.dev_in.slice(r.clone())?;
        let d_out = io.dev_out.slice(r.clone())?;
        s.copy_h2d(&d_in, io.input.range(r.clone())?)?;
        if marks {
            s.record_event(&self.marks[0])?;
        }
        let scratch = self.scratch.get(place.stream);
        work(
            s,
            Parts {
                place,
                input: &d_in,
                output: &d_out,
                scratch,
            },
        )?;
        if marks {
            s.record_event(&self.marks[1])?;
        }
        s.copy_d2h(io.output.range_mut(r)?, &d_out)
    }

    /// Every stream records its end, the origin waits on them all and records `stop`.
    fn join(&self, used: &[Stream]) -> Result<()> {
        for (s, e) in used.iter().zip(&self.ends) {
            s.record_event(e)?;
            self.origin.wait_event(e)?;
        }
        self.origin.record_event(&self.stop)
    }

    /// Name the trace's streams after the run's label; list only streams with operations.
    fn named(&self, mut trace: Trace, used: &[Stream]) -> Trace {
        let label = self.trace.as_deref().unwrap_or("pipeline");
        let mut names = vec![(self.origin.id(), format!("{label}: origin"))];
        for (i, s) in used.iter().enumerate() {
            names.push((s.id(), format!("{label}: stream {}", i + 1)));
        }
        trace.streams = names
            .into_iter()
            .filter(|(id, _)| trace.ops.iter().any(|o| o.stream == *id))
            .collect();
        trace
    }
}
