//! How a run of a [`ChunkedPipeline`] is laid out: the counts as given, the choice `auto` made
//! for the run's shape, or a calibration that measures the work first (see [`super::auto`]).

use bytemuck::Pod;

use super::auto::{DeviceProfile, CALIBRATION_RUNS};
use super::calibrated::{Calibrated, Shape};
use super::chunked::ChunkedPipeline;
use super::count::Count;
use super::frame::{Io, Mode, Work};
use super::measure::stage_times;
use super::report::{Chosen, RunReport};
use super::tune::{self, MAX_CHUNKS};
use crate::model::{self, Choice, ModelParams};
use crate::Result;

/// How a run is laid out, or that it must calibrate first.
pub(super) enum Plan {
    Run {
        streams: usize,
        chunks: usize,
        chosen: Chosen,
    },
    Calibrate,
}

impl<S> ChunkedPipeline<S> {
    /// The layout of a run of `shape`: given counts, or `auto`'s choice for this shape, or
    /// none yet.
    pub(super) fn plan(&self, shape: Shape) -> Plan {
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
    pub(super) fn calibrate<I: Pod, O: Pod>(
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
            // Events and stage marks whatever the ordering; only the reported run is traced.
            let mode = Mode {
                events: true,
                marks: true,
                traced: run == CALIBRATION_RUNS && self.trace.is_some(),
            };
            let t = self.frame(io, 1, 1, mode, work)?;
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
    pub(super) fn rechoose(&mut self) {
        if let Some(mut c) = self.calibrated {
            c.choice = self.choice(&c.params, c.shape.elements);
            self.calibrated = Some(c);
        }
    }
}
