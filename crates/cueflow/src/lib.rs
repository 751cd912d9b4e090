//! # cueflow
//!
//! The asynchronous GPU execution model — streams, events, truly asynchronous copies through
//! pinned memory, kernels and host functions on streams, default-stream rules, priorities,
//! stream-ordered memory and capture into graphs — with one semantics (the numbered rules of
//! [`spec`], which errors and these docs cite by id) on two backends: **host** (the default:
//! real threads and copy/compute engines, runs anywhere) and **cuda** (a real NVIDIA GPU
//! through the driver API, loaded at run time).
//!
//! The race sanitizer ([`SanitizeMode`]) warns by default in debug builds and is off in release
//! builds unless `CUEFLOW_SANITIZE` asks for it.
//!
//! | concept | cueflow | CUDA |
//! |---|---|---|
//! | device | [`Device`] (`host`, `cuda:N`, `CUEFLOW_DEVICE`) | `cuDeviceGet`, primary context |
//! | stream | [`Stream`], [`Stream::builder`] (non-blocking, priority) | `cudaStreamCreateWithPriority` |
//! | default stream (legacy / per-thread) | [`Stream::legacy`], [`Stream::per_thread`] | stream `0`, `cudaStreamPerThread` |
//! | query / synchronize | [`Stream::query`], [`Stream::synchronize`], [`Device::synchronize`] | `cudaStreamQuery`, `cudaStreamSynchronize`, `cudaDeviceSynchronize` |
//! | event | [`Event`], [`EventFlags`] | `cudaEventCreateWithFlags` |
//! | record / wait | [`Stream::record_event`], [`Stream::wait_event`] | `cudaEventRecord`, `cudaStreamWaitEvent` |
//! | elapsed time | [`Event::elapsed_ms`] | `cudaEventElapsedTime` |
//! | device memory | [`DeviceBuffer`] (views with [`DeviceBuffer::slice`]) | `cudaMalloc` |
//! | pinned memory | [`PinnedBuffer`] | `cudaHostAlloc` |
//! | portable / mapped pinned memory | [`PinnedFlags::portable`], [`PinnedFlags::mapped`], [`KernelArgs::read_mapped`] | `cudaHostAllocPortable`, `cudaHostAllocMapped`, `cudaHostGetDevicePointer` |
//! | registered memory | [`RegisteredBuffer`] | `cudaHostRegister`, `cudaHostUnregister` |
//! | managed memory | [`ManagedBuffer`], [`Stream::prefetch`], [`Stream::attach_managed`] | `cudaMallocManaged`, `cudaMemPrefetchAsync`, `cudaStreamAttachMemAsync` |
//! | memory pool | [`MemPool`], [`Device::default_pool`], [`Stream::alloc_from_pool`] | `cudaMemPool_t`, `cudaMallocFromPoolAsync` |
//! | async copy | [`Stream::copy_h2d`], [`Stream::copy_d2h`], [`Stream::copy_d2d`] | `cudaMemcpyAsync` |
//! | pageable copy (blocks) | [`Stream::write_pageable`], [`Stream::read_pageable`] | `cudaMemcpyAsync` on pageable memory |
//! | memset | [`Stream::memset`] | `cudaMemsetAsync` |
//! | kernel launch | [`Stream::launch`], [`Kernel`], [`LaunchConfig`] | `kernel<<<grid, block, shmem, stream>>>` |
//! | host function | [`Stream::host_fn`], [`Stream::host_fn_once`], [`Stream::host_task`] (over pinned buffers), [`Stream::add_callback`] (with the stream's status) | `cudaLaunchHostFunc`, `cudaStreamAddCallback` |
//! | stream-ordered memory | [`Stream::alloc_async`], [`Stream::free_async`] | `cudaMallocAsync`, `cudaFreeAsync` |
//! | capture / graph | [`Stream::begin_capture`], [`Graph`], [`GraphExec`] | `cudaStreamBeginCapture`, `cudaGraphLaunch` |
//! | automatic graphs (repeated work replayed as a graph) | [`Device::set_auto_graph`], [`StreamBuilder::auto_graph`], `CUEFLOW_AUTO_GRAPH=1` | capture + `cudaGraphExecKernelNodeSetParams` + `cudaGraphLaunch`, done for you |
//! | graph built node by node | [`Graph::new`], [`Graph::add_kernel`], [`Graph::add_child`], [`Graph::to_dot`] | `cudaGraphAddKernelNode`, `cudaGraphDebugDotPrint` |
//! | conditional node | [`Graph::add_while`], [`ConditionHandle`], [`KernelArgs::condition`] | `cudaGraphConditionalHandleCreate`, `cudaGraphSetConditional` |
//! | graph memory handed out | [`Graph::add_alloc`], [`InstantiateFlags`], [`DeviceBuffer::free`] | `cudaGraphAddMemAllocNode`, `cudaGraphInstantiateFlagAutoFreeOnLaunch`, `cudaFree` |
//! | capture into a graph | [`Stream::begin_capture_to_graph`], [`Graph::conditional_body`] | `cudaStreamBeginCaptureToGraph`, `phGraph_out` |
//! | pageable memory in graph copies | [`PageableBuffer`] | memcpy nodes / captured `cudaMemcpyAsync` on `malloc` memory |
//! | rank of a launched job (torchrun, `srun`, `mpirun`) | [`Communicator::from_env`], [`Device::from_local_rank`], [`LaunchEnv`] (`docs/clusters.md`) | `ncclGetUniqueId` handed out through a TCP store, `ncclCommInitRank` |
//! | chunked copy → work → copy pipeline over several streams | [`pipeline::ChunkedPipeline`] | streams and events as in `benches/cuda/pipeline.cu` |
//! | a cudarc program, without copying (feature `cudarc-interop`) | [`Device::from_cudarc`], [`Stream::from_cudarc`], [`Stream::as_cudarc`], [`DeviceBuffer::from_cudarc`], [`DeviceBuffer::into_cudarc`], [`Stream::cudarc`] | cudarc's `CudaContext`, `CudaStream`, `CudaSlice`; a library call on a stream |
//!
//! ```
//! use cueflow::{Device, DeviceBuffer, Event, PinnedBuffer, Stream};
//!
//! let dev = Device::from_env()?;                       // host unless CUEFLOW_DEVICE says otherwise
//! let s = Stream::builder(&dev).non_blocking().build()?;
//! let mut host = PinnedBuffer::from_slice(&dev, &vec![1.0f32; 1 << 16])?;
//! let d = DeviceBuffer::<f32>::new(&dev, 1 << 16)?;
//! let (start, stop) = (Event::new(&dev)?, Event::new(&dev)?);
//!
//! s.record_event(&start)?;
//! s.copy_h2d(&d, &host)?;                              // returns at once: pinned (CP2)
//! cueflow::kernels::scale(&s, &d, 2.0)?;               // every element times 2
//! s.copy_d2h(&mut host, &d)?;
//! s.record_event(&stop)?;
//!
//! assert!(host.read()?.iter().all(|&x| x == 2.0));    // waits for the copy back (MM3)
//! println!("{:.3} ms", Event::elapsed_ms(&start, &stop)?);
//! # Ok::<(), cueflow::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod api;
mod backend;
mod builtins;
mod cluster;
mod config;
mod core;
mod error;
pub mod kernels;
pub mod model;
mod panics;
pub mod pipeline;
mod rules;
pub mod trace;
mod types;

/// The specification: every rule cueflow's backends obey, by id (`docs/spec.md` of the
/// repository). Error messages and documentation cite these ids (`MM3`, `CP4`, …).
#[doc = include_str!("../docs/spec.md")]
pub mod spec {}

/// The Rust examples of the README and of the `docs/` pages are doc tests, so they compile and
/// run as written (`tests/readme.rs` checks that every page with one is listed here). Only
/// doc tests read these files, which a published package does not carry.
#[cfg(doctest)]
mod markdown_examples {
    #[doc = include_str!("../../../README.md")]
    struct Readme;
    #[doc = include_str!("../../../docs/graphs.md")]
    struct Graphs;
    #[doc = include_str!("../../../docs/multi-device.md")]
    struct MultiDevice;
    #[cfg(feature = "cudarc-interop")]
    #[doc = include_str!("../../../docs/interop.md")]
    struct Interop;
}

pub use api::collective::{Communicator, Element, Part as CollectivePart, UniqueId};
pub use api::conditional::{BodyMut, ConditionHandle, ConditionalKind, CONDITIONAL_CUDA_H};
#[cfg(feature = "cudarc-interop")]
pub use api::cudarc::IntoCudarcError;
#[cfg(feature = "cudarc-interop")]
pub use api::cudarc_op::{
    CallParts, CudarcCall, CudarcError, CudarcOp, CudarcPush, CudarcSlot, CudarcView,
    CudarcViewMut, CudarcViews, Reads, Writes,
};
pub use api::device::{Device, DeviceSpec};
pub use api::event::Event;
pub use api::future::Completion;
pub use api::graph::{
    ExecNode, Graph, GraphExec, GraphNodeId, InstantiateFlags, NodeInfo, NodeType,
};
pub use api::graph_builder::GraphHostTask;
pub use api::graph_capture::GraphCapture;
pub use api::host_flag::HostFlag;
pub use api::host_memory::RegisteredBuffer;
pub use api::hostfn::{HostIo, HostTask};
pub use api::interop::{External, ExternalIo, RawCuda};
pub use api::kernel::{Kernel, KernelArgs, KernelBuilder, LaunchConfig};
pub use api::managed::ManagedBuffer;
pub use api::memory::{
    chunk_ranges, DeviceBuffer, HostRead, HostWrite, PinnedBuffer, PinnedSlice, PinnedSliceMut,
};
pub use api::pageable::PageableBuffer;
pub use api::pool::MemPool;
pub use api::stream::{Stream, StreamBuilder};
pub use cluster::{LaunchEnv, LaunchError, Launcher};
pub use core::graphs::autograph::AutoGraphStats;
pub use core::graphs::capture::CaptureMode;
pub use core::tracking::sanitizer::{Lint, LintKind, RaceAccess, RaceReport, SanitizeMode};
/// The cudarc crate cueflow's interop speaks (feature `cudarc-interop`): use this one, so
/// that its types are the ones cueflow takes.
#[cfg(feature = "cudarc-interop")]
pub use cudarc;
pub use error::{Error, Result};
pub use types::{
    Access, Advice, AttachMode, BlockArgs, BlockCtx, CompileOptions, ComputeMode, CudaCode,
    DeviceProperties, Dim3, DriverFeature, EventFlags, HostKernelFn, HostPath, MemLocation,
    PinnedFlags, PoolStats, ReduceOp, StreamKind, SyncMode, DEFAULT_QUEUE_DEPTH,
};
