//! Your own kernel in the chunked copy → compute → copy pipeline.
//!
//! A kernel written here — CUDA C for a GPU (compiled by NVRTC at its first launch) and a Rust
//! closure doing the same arithmetic for the host backend — runs over a buffer through
//! [`ChunkedPipeline`]: once on one stream in one chunk (the serial model), once with
//! the streams × chunks the performance model chooses (`auto`). Every output element is checked
//! against a host reference, and the two times are compared.
//!
//! ```text
//! cargo run --release -p cueflow --example 03_user_kernel -- [MiB] [steps]
//! CUEFLOW_DEVICE=cuda:0 cargo run --release -p cueflow --example 03_user_kernel
//! ```
//!
//! `MiB` is the buffer size (default 1024; `64` runs in a few seconds on the host backend),
//! `steps` the iterations of the kernel per element (default 16): more steps, more compute
//! per byte copied.

use std::error::Error;

use cueflow::pipeline::{median, Chosen, ChunkedPipeline};
use cueflow::{Device, Kernel, KernelArgs, LaunchConfig, PinnedBuffer};

/// The logistic map `x ← r·x·(1 − x)`, `steps` times per element: chaotic, so any difference in
/// a single rounding shows in the result. Each operation is rounded on its own (`_rn`
/// intrinsics; Rust never fuses `a * b + c`), so both implementations agree bit for bit.
const SOURCE: &str = r#"
extern "C" __global__ void logistic(float* x, unsigned int steps, unsigned long long n)
{
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float v = x[i];
    for (unsigned int k = 0; k < steps; ++k) {
        v = __fmul_rn(__fmul_rn(3.7f, v), __fsub_rn(1.0f, v));
    }
    x[i] = v;
}
"#;

/// The map's parameter.
const R: f32 = 3.7;

/// The kernel, for both backends.
pub fn logistic_kernel() -> Kernel {
    Kernel::new("logistic")
        .cuda_source(SOURCE, "logistic")
        .host(|_, args| {
            let steps: u32 = args.scalar(1);
            let tile = args.tile_mut::<f32>(0);
            // Steps outside, elements inside, so the loop vectorizes; each element still sees
            // the same operations in the same order.
            for _ in 0..steps {
                for v in tile.iter_mut() {
                    *v = (R * *v) * (1.0 - *v);
                }
            }
        })
        .build()
}

/// The host reference for one element.
pub fn reference(mut v: f32, steps: u32) -> f32 {
    for _ in 0..steps {
        v = (R * v) * (1.0 - v);
    }
    v
}

/// Input element `i`: in (0, 1), where the map stays.
pub fn input_value(i: usize) -> f32 {
    (i % 1000 + 1) as f32 / 1002.0
}

/// What [`run`] measured.
pub struct Outcome {
    /// Median time of the one-stream, one-chunk runs, ms.
    pub serial_ms: f64,
    /// Median time of the pipelined runs, ms.
    pub pipelined_ms: f64,
    /// Streams and chunks `auto` chose.
    pub streams: usize,
    /// Chunks `auto` chose.
    pub chunks: usize,
}

/// Run the kernel over `elements` floats with `steps` steps: serial and pipelined, a warm-up
/// run and `reps` timed runs each, every output verified.
pub fn run(
    dev: &Device,
    elements: usize,
    steps: u32,
    reps: usize,
) -> Result<Outcome, Box<dyn Error>> {
    let kernel = logistic_kernel();
    let values: Vec<f32> = (0..elements).map(input_value).collect();
    let input = PinnedBuffer::from_slice(dev, &values)?;
    let mut output = PinnedBuffer::<f32>::new(dev, elements)?;
    let expect: Vec<f32> = (0..1000)
        .map(|i| reference(input_value(i), steps))
        .collect();

    // The work of one chunk: one launch of the kernel over the chunk's device memory.
    let mut work = |s: &cueflow::Stream, c: cueflow::pipeline::Chunk<'_, f32>| {
        let x = c.device();
        s.launch(
            &kernel,
            LaunchConfig::for_elements(x.len(), 256),
            KernelArgs::new()
                .write(x)
                .scalar(steps)
                .scalar(x.len() as u64),
        )
    };
    let mut serial = ChunkedPipeline::new(dev).streams(1).chunks(1).build()?;
    let mut pipelined = ChunkedPipeline::new(dev).build()?; // streams × chunks: auto

    let (mut ts, mut tp) = (Vec::new(), Vec::new());
    let (mut streams, mut chunks) = (0, 0);
    for rep in 0..=reps {
        for (pipe, times) in [(&mut serial, &mut ts), (&mut pipelined, &mut tp)] {
            output.write()?.fill(f32::NAN); // a skipped element cannot pass
            let r = pipe.run(&input, &mut output, &mut work)?;
            verify(&output, &expect)?;
            if rep > 0 {
                times.push(r.ms());
            }
            if matches!(r.chosen, Chosen::Auto { .. }) {
                (streams, chunks) = (r.streams, r.chunks);
            }
        }
    }
    Ok(Outcome {
        serial_ms: median(ts),
        pipelined_ms: median(tp),
        streams,
        chunks,
    })
}

/// Every element equal, bit for bit, to the reference (`expect[i % 1000]`).
fn verify(output: &PinnedBuffer<f32>, expect: &[f32]) -> Result<(), Box<dyn Error>> {
    let out = output.read()?;
    match out
        .iter()
        .enumerate()
        .find(|(i, x)| x.to_bits() != expect[i % 1000].to_bits())
    {
        Some((i, x)) => Err(format!("element {i}: got {x}, expected {}", expect[i % 1000]).into()),
        None => Ok(()),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let mib: f64 = args.next().map_or(Ok(1024.0), |a| a.parse())?;
    let steps: u32 = args.next().map_or(Ok(16), |a| a.parse())?;
    let elements = (mib * 1024.0 * 1024.0 / 4.0) as usize;
    if elements == 0 {
        return Err("the buffer must hold at least one f32".into());
    }
    let dev = Device::from_env()?;
    println!(
        "device {}: {mib} MiB of f32, {steps} steps of the logistic map per element",
        dev.properties().name
    );
    let o = run(&dev, elements, steps, 3)?;
    println!("  one stream, one chunk      {:9.2} ms", o.serial_ms);
    println!(
        "  auto: {:2} streams × {:3} chunks {:7.2} ms   speedup {:.2}×",
        o.streams,
        o.chunks,
        o.pipelined_ms,
        o.serial_ms / o.pipelined_ms
    );
    println!("  every output element verified against the host reference");
    Ok(())
}
