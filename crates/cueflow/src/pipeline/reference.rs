//! The reference pipeline, as `cueflow demo` and `cueflow bench` run it and as the raw CUDA C++
//! program `benches/cuda/pipeline.cu` runs it: a buffer of `f32` whose element `i` is
//! [`input_value`]`(i)`, the built-in compute kernel ([`kernels::compute`]) in place on each
//! chunk, and every output element checked against the host reference.

use super::chunk::Chunk;
use super::chunked::ChunkedPipeline;
use super::measure::{self, time_stage, ChunkProbe, StageMeasurement};
use super::report::RunReport;
use crate::{kernels, Device, DeviceBuffer, PinnedBuffer, Result, Stream};

/// Input value of element `i` (the same as the C++ reference: never all zeros).
pub fn input_value(i: usize) -> f32 {
    (i % 1000) as f32 * 0.001
}

/// The reference work for one chunk: `iters` compute steps in place.
pub fn compute<S>(iters: u32) -> impl FnMut(&Stream, Chunk<'_, f32, S>) -> Result<()> {
    move |s, c| kernels::compute(s, c.device(), iters)
}

/// Buffers of one pipeline: pinned input and output, and the device buffer worked on in place.
pub struct PipelineBuffers {
    /// Pinned host input.
    pub input: PinnedBuffer<f32>,
    /// Pinned host output.
    pub output: PinnedBuffer<f32>,
    /// Device buffer.
    pub device: DeviceBuffer<f32>,
}

impl PipelineBuffers {
    /// Allocate `elements` floats of each and fill the input.
    pub fn new(dev: &Device, elements: usize) -> Result<Self> {
        let mut input = PinnedBuffer::new(dev, elements)?;
        for (i, x) in input.write()?.iter_mut().enumerate() {
            *x = input_value(i);
        }
        Ok(PipelineBuffers {
            input,
            output: PinnedBuffer::new(dev, elements)?,
            device: DeviceBuffer::new(dev, elements)?,
        })
    }

    /// Elements per buffer.
    pub fn len(&self) -> usize {
        self.input.len()
    }

    /// True for empty buffers.
    pub fn is_empty(&self) -> bool {
        self.input.is_empty()
    }

    /// Bytes per buffer.
    pub fn bytes(&self) -> u64 {
        (self.len() * 4) as u64
    }

    /// One run of `pipe` over these buffers with `iters` compute steps (see [`compute`]).
    pub fn run<S>(&mut self, pipe: &mut ChunkedPipeline<S>, iters: u32) -> Result<RunReport> {
        pipe.run_on(&self.input, &self.device, &mut self.output, compute(iters))
    }

    /// Poison the output (NaN) so a run that skips elements cannot pass verification.
    pub fn poison_output(&mut self) -> Result<()> {
        self.output.write()?.fill(f32::NAN);
        Ok(())
    }

    /// Check every output element against the host reference of `iters` compute steps.
    /// Returns the index and values of the first mismatch.
    pub fn verify(&self, iters: u32) -> Result<std::result::Result<(), String>> {
        let expect: Vec<f32> = (0..1000)
            .map(|i| kernels::compute_reference(input_value(i), iters))
            .collect();
        let out = self.output.read()?;
        for (i, &got) in out.iter().enumerate() {
            let want = expect[i % 1000];
            if got.to_bits() != want.to_bits() {
                return Ok(Err(format!(
                    "element {i}: got {got} ({:#010x}), expected {want} ({:#010x})",
                    got.to_bits(),
                    want.to_bits()
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Measure the stages over the whole buffer with `iters` compute steps (`reps` runs each,
    /// median; see [`measure::measure_stages`]).
    pub fn measure_stages(
        &mut self,
        dev: &Device,
        iters: u32,
        reps: usize,
    ) -> Result<StageMeasurement> {
        measure::measure_stages(
            dev,
            (&self.input).into(),
            &self.device,
            (&mut self.output).into(),
            |s, d| kernels::compute(s, d, iters),
            reps,
        )
    }

    /// Probe the pipeline at each of `chunk_counts` with `iters` compute steps (`reps` rounds;
    /// see [`measure::probe_chunk_sizes`]). Leaves the output as a complete run left it.
    pub fn probe_chunk_sizes(
        &mut self,
        dev: &Device,
        iters: u32,
        m: &StageMeasurement,
        chunk_counts: &[u32],
        reps: usize,
    ) -> Result<Vec<ChunkProbe>> {
        measure::probe_chunk_sizes(
            dev,
            (&self.input).into(),
            &self.device,
            (&mut self.output).into(),
            m,
            chunk_counts,
            |s, d| kernels::compute(s, d, iters),
            reps,
        )
    }

    /// Find `iters` so the compute kernel over the whole buffer takes about as long as the
    /// whole-buffer host→device copy (the balanced case, where streams help most): doubling, then bisection.
    pub fn balance_iters(&mut self, dev: &Device) -> Result<u32> {
        let d = self.device.clone();
        let input = &self.input;
        let target = time_stage(dev, 3, |s| s.copy_h2d(&d, input))?;
        let kernel_ms = |iters: u32| time_stage(dev, 3, |s| kernels::compute(s, &d, iters));
        let (mut lo, mut hi) = (1u32, 1u32);
        while kernel_ms(hi)? < target {
            lo = hi;
            hi = hi.saturating_mul(2);
            if hi >= 1 << 20 {
                return Ok(hi);
            }
        }
        for _ in 0..6 {
            if hi - lo <= 1 {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            if kernel_ms(mid)? < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(hi)
    }
}
