//! The chunked copy → compute → copy pipeline for any work: copy a buffer to the device chunk by
//! chunk, run *your* work on each chunk, copy it back, with the chunks spread over several
//! streams so that host→device copies, the work and device→host copies of different chunks
//! overlap. [`reference`](mod@reference) is the pipeline `cueflow demo` and `cueflow bench`
//! run, with a built-in kernel.
//!
//! A [`ChunkedPipeline`] takes pinned input and output ([`PinnedBuffer`](crate::PinnedBuffer)s
//! or ranges of them) and a closure `work(stream, chunk)` that enqueues the work of one chunk
//! on the given stream: one kernel, several, a library call. Chunk `c` runs on stream
//! `c % streams` as input copy → `work` → output copy. The streams × chunks are given, or
//! `auto` ([`Count::Auto`], the default): chosen by the performance model ([`crate::model`])
//! from measurements of the device, made once per process, and of the work, made by the first
//! run ([`auto`]). A run blocks until the output has arrived and returns a [`RunReport`]: what
//! ran, whether `auto` chose it, how long it took, and on request its timeline. It verifies
//! nothing; checking the output is the caller's business.
//!
//! # Timing
//! Each run is framed by events exactly as the raw CUDA C++ reference
//! `benches/cuda/pipeline.cu` frames it, so the two measure the same thing: an origin stream
//! records `start`, every pipeline stream waits on it, the chunks are enqueued, every stream
//! records an end event that the origin waits on, and the origin records `stop`.
//! [`RunReport::device_ms`] is the time between `start` and `stop`. A pipeline built with
//! [`auto_order`](ChunkedPipelineBuilder::auto_order) has no event at all: its streams order
//! automatically (SPEC AC5), which for disjoint chunks inserts no wait, and it is timed on the
//! host ([`RunReport::wall_ms`]).
//!
//! # Your own work in the pipeline
//! A kernel of your own (CUDA C for GPUs, a Rust closure for the host backend), run over a
//! buffer with streams × chunks chosen by the model:
//!
//! ```
//! use cueflow::pipeline::ChunkedPipeline;
//! use cueflow::{Device, Kernel, KernelArgs, LaunchConfig, PinnedBuffer};
//!
//! // x = x * x + 1: CUDA C for a GPU, the same arithmetic in Rust for the host backend.
//! let square_plus_one = Kernel::new("square_plus_one")
//!     .cuda_source(
//!         r#"extern "C" __global__ void square_plus_one(float* x, unsigned long long n) {
//!             unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
//!             if (i < n) x[i] = __fadd_rn(__fmul_rn(x[i], x[i]), 1.0f);
//!         }"#,
//!         "square_plus_one",
//!     )
//!     .host(|_, args| {
//!         for x in args.tile_mut::<f32>(0) {
//!             *x = *x * *x + 1.0;
//!         }
//!     })
//!     .build();
//!
//! let dev = Device::from_env()?;
//! let input = PinnedBuffer::from_slice(&dev, &vec![3.0f32; 1 << 20])?;
//! let mut output = PinnedBuffer::<f32>::new(&dev, 1 << 20)?;
//! let mut pipe = ChunkedPipeline::new(&dev).build()?; // streams × chunks: auto
//! for _ in 0..2 {
//!     // The first run measures the work for `auto`; the second runs what the model chose.
//!     let run = pipe.run(&input, &mut output, |stream, chunk| {
//!         let x = chunk.device();
//!         stream.launch(
//!             &square_plus_one,
//!             LaunchConfig::for_elements(x.len(), 256),
//!             KernelArgs::new().write(x).scalar(x.len() as u64),
//!         )
//!     })?;
//!     let (s, c, ms) = (run.streams, run.chunks, run.ms());
//!     println!("{s} streams × {c} chunks ({:?}): {ms:.2} ms", run.chosen);
//! }
//! assert!(output.read()?.iter().all(|&x| x == 10.0));
//! # Ok::<(), cueflow::Error>(())
//! ```
//!
//! Per-stream scratch for chains of kernels ([`ChunkedPipelineBuilder::scratch`]), input and
//! output of different element types ([`ChunkedPipeline::run_map`]) and the caller's own device
//! buffer ([`ChunkedPipeline::run_on`]) are there too; the examples `03_user_kernel` and
//! `04_two_stage` show them whole.
//!
//! # Refused
//! Misuse is refused before anything is enqueued, with a typed [`Error`](crate::Error): a
//! count of 0 or more fixed chunks than elements, or an empty input, is
//! [`InvalidLayout`](crate::Error::InvalidLayout); input, output or device buffer of different
//! lengths is [`OutOfBounds`](crate::Error::OutOfBounds) (CP4); a buffer of another device is
//! [`InvalidHandle`](crate::Error::InvalidHandle) (ER3).

pub mod auto;
mod builder;
mod calibrated;
mod chunk;
mod chunked;
mod count;
mod frame;
pub mod measure;
mod plan;
pub mod reference;
mod report;
mod run;
pub mod tune;
mod workspace;

pub use auto::DeviceProfile;
pub use builder::ChunkedPipelineBuilder;
pub use chunk::{Chunk, MapChunk};
pub use chunked::ChunkedPipeline;
pub use count::{Count, ParseCountError};
pub use measure::median;
pub use reference::PipelineBuffers;
pub use report::{Chosen, RunReport};
