//! Two kernels per chunk, chained through a scratch buffer of each stream.
//!
//! Raw 16-bit sensor counts go in, calibrated `f32` values come out: on each chunk, kernel 1
//! (`decode`) subtracts the dark level and applies the gain into the stream's scratch buffer,
//! kernel 2 (`compress`) maps that onto (−1, 1) into the chunk's output. The input and output
//! differ in element type ([`ChunkedPipeline::run_map`]), the intermediate never leaves the
//! device, and chunks on one stream share its scratch one after another while the other streams
//! use theirs. Every output element is checked against a host reference.
//!
//! ```text
//! cargo run --release -p cueflow --example 04_two_stage -- [MiB of input]
//! ```
//!
//! The default is 256 MiB of 16-bit input (512 MiB of output).

use std::error::Error;

use cueflow::pipeline::ChunkedPipeline;
use cueflow::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream};

/// Both kernels in CUDA C; `_rn` intrinsics round each operation on its own, as Rust does.
const SOURCE: &str = r#"
extern "C" __global__ void decode(float* tmp, const unsigned short* raw, float dark, float gain,
                                  unsigned long long n)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        tmp[i] = __fmul_rn(__fsub_rn((float)raw[i], dark), gain);
    }
}

extern "C" __global__ void compress(float* out, const float* tmp, unsigned long long n)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __fdiv_rn(tmp[i], __fadd_rn(1.0f, fabsf(tmp[i])));
    }
}
"#;

/// Dark level subtracted from every count.
const DARK: f32 = 100.0;
/// Gain applied after the dark subtraction.
const GAIN: f32 = 0.001;
/// Streams of the pipeline.
const STREAMS: u32 = 4;
/// Chunks of the pipeline.
const CHUNKS: u32 = 16;

/// Kernel 1: `tmp = (raw − dark) · gain`.
pub fn decode_kernel() -> Kernel {
    Kernel::new("decode")
        .cuda_source(SOURCE, "decode")
        .host(|ctx, a| {
            let raw = a.input::<u16>(1);
            let (dark, gain): (f32, f32) = (a.scalar(2), a.scalar(3));
            let lo = ctx.thread_range().start as usize;
            for (k, t) in a.tile_mut::<f32>(0).iter_mut().enumerate() {
                *t = (f32::from(raw[lo + k]) - dark) * gain;
            }
        })
        .build()
}

/// Kernel 2: `out = tmp / (1 + |tmp|)`.
pub fn compress_kernel() -> Kernel {
    Kernel::new("compress")
        .cuda_source(SOURCE, "compress")
        .host(|ctx, a| {
            let tmp = a.input::<f32>(1);
            let lo = ctx.thread_range().start as usize;
            for (k, y) in a.tile_mut::<f32>(0).iter_mut().enumerate() {
                let t = tmp[lo + k];
                *y = t / (1.0 + t.abs());
            }
        })
        .build()
}

/// The host reference of both stages for one count.
pub fn reference(raw: u16) -> f32 {
    let t = (f32::from(raw) - DARK) * GAIN;
    t / (1.0 + t.abs())
}

/// Raw count `i` of the input.
pub fn raw_value(i: usize) -> u16 {
    (i.wrapping_mul(2_654_435_761) >> 7) as u16
}

/// [`CHUNKS`], or one per element for a tiny input.
fn chunks_for(elements: usize) -> u32 {
    CHUNKS.min(u32::try_from(elements).unwrap_or(u32::MAX))
}

/// Run both stages over `elements` counts; returns the run's time in ms after verifying
/// every output element.
pub fn run(dev: &Device, elements: usize) -> Result<f64, Box<dyn Error>> {
    let (decode, compress) = (decode_kernel(), compress_kernel());
    let raw: Vec<u16> = (0..elements).map(raw_value).collect();
    let input = PinnedBuffer::from_slice(dev, &raw)?;
    let mut output = PinnedBuffer::<f32>::new(dev, elements)?;
    let mut pipe = ChunkedPipeline::new(dev)
        .streams(STREAMS)
        .chunks(chunks_for(elements))
        // Each stream's intermediate buffer, as long as the longest chunk.
        .scratch(|s: &Stream, len| DeviceBuffer::<f32>::new(s.device(), len))
        .build()?;
    let mut ms = 0.0;
    for _ in 0..2 {
        // The first run warms up (kernel compilation, first touch of memory); the second is timed.
        output.write()?.fill(f32::NAN);
        let report = pipe.run_map(&input, &mut output, |s, c| {
            let n = c.len();
            let tmp = c.scratch().slice(..n)?;
            let cfg = LaunchConfig::for_elements(n, 256);
            s.launch(
                &decode,
                cfg,
                KernelArgs::new()
                    .write(&tmp)
                    .read(c.input())
                    .scalar(DARK)
                    .scalar(GAIN)
                    .scalar(n as u64),
            )?;
            s.launch(
                &compress,
                cfg,
                KernelArgs::new()
                    .write(c.output())
                    .read(&tmp)
                    .scalar(n as u64),
            )
        })?;
        ms = report.ms();
        let out = output.read()?;
        if let Some((i, y)) = out
            .iter()
            .enumerate()
            .find(|&(i, y)| y.to_bits() != reference(raw[i]).to_bits())
        {
            return Err(format!("element {i}: got {y}, expected {}", reference(raw[i])).into());
        }
    }
    Ok(ms)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mib: f64 = std::env::args().nth(1).map_or(Ok(256.0), |a| a.parse())?;
    let elements = (mib * 1024.0 * 1024.0 / 2.0) as usize;
    if elements == 0 {
        return Err("the input must hold at least one 16-bit count".into());
    }
    let dev = Device::from_env()?;
    let ms = run(&dev, elements)?;
    println!(
        "device {}: {mib} MiB of u16 → f32 through decode → compress on {STREAMS} streams × {} chunks: {ms:.2} ms; every element verified",
        dev.properties().name,
        chunks_for(elements)
    );
    Ok(())
}
