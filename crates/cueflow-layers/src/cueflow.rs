//! cueflow's rules, one line each (DESIGN.md: api → core → backend; the backends know only the
//! contract and their own drivers, as wgpu-hal knows nothing of wgpu-core).
//!
//! `config` is such a bottom module: every layer may read its settings, it imports none of
//! them, and it alone names `CUEFLOW_*` variables.
//!
//! `types` is the other: the value types every layer names, importing no layer, and the only
//! home of public types the backend contract used to define. A public type that reads the
//! contract's data does so through a trait of `types` that the contract implements
//! (`BlockArgs` reads a launch through `types::host_kernel::LaunchView`).
//!
//! Functions are measured too: none over 80 lines and none with more than five parameters in
//! the api, core or a backend (issue #28's readable enqueue path), so that a call's path reads
//! as named steps.
//!
//! To add a rule, add a line. A subsystem folder of core that must not know another is
//! `Rule::no_path("…", &["core::memory"], &["core::graphs"])`. What breaks a rule today and is
//! being moved goes on its known list, which may only shrink.
//!
//! Core's stream path keeps the circle rule by taking the lower object where it needs only part
//! of the upper one: streams, events and captures take the device core (`core/devices/device.rs`),
//! which knows no stream — the legacy stream belongs to the device as the API opens it
//! (`core/devices/open_device.rs`); captures take a stream's identity and capture slot
//! (`capture::LaneStream`) and an event's capture snapshot, not the stream or the event;
//! tracking takes a stream's identity (`core/streams/ident.rs`) and completions the device
//! through a trait (`CompletionDevice`). Circles of two files remain (`core/graphs/exec.rs` and
//! `core/graphs/events.rs`, `core/streams/entry.rs` and `core/streams/stream.rs`, and six more outside core).

use crate::rules::Rule;

/// The rules `tests/cueflow.rs` checks cueflow's source against.
#[rustfmt::skip] // one rule a line
pub const RULES: &[Rule] = &[
    Rule::no_path("backends import nothing of core", &["backend"], &["core"]),
    Rule::no_path("the api reaches no backend", &["api"], &["backend"]).known(API_BUILDS_CONTRACT_OPERATIONS),
    Rule::no_path("the api reaches neither backend", &["api"], &["backend::host", "backend::cuda"]),
    Rule::no_path("core and backends import neither api nor kernels", &["core", "backend"], &["api", "kernels"]),
    Rule::no_path("the host backend imports nothing of the CUDA backend", &["backend::host"], &["backend::cuda"]),
    Rule::no_path("the CUDA backend imports nothing of the host backend", &["backend::cuda"], &["backend::host"]),
    Rule::no_path("the contract imports no backend", &["backend::contract"], &["backend::host", "backend::cuda"]),
    Rule::no_circle_over("no import circle of more than two files", 2),
    Rule::no_file_over("no file of src or tests over 700 lines", 700, &["src", "tests"]),
    Rule::calls_only_in("no driver call outside the driver layer", "sys::cu", &["backend::cuda::driver"]),
    Rule::calls_only_in("every dynamic library opens through libloading", "dlopen", &[]),
    Rule::no_path("types import no layer", &["types"], &["api", "core", "backend", "cluster", "kernels", "pipeline", "trace", "model"]),
    Rule::no_public_items_in("no public type is defined in the backend contract", &["backend::contract"]),
    Rule::no_path("config imports no layer", &["config"], &["api", "core", "backend", "cluster", "kernels", "pipeline", "trace", "model"]),
    Rule::names_only_in("no CUEFLOW_ variable is named outside config", "CUEFLOW_", &["config"]),
    Rule::calls_only_in("the environment is read by config and the readers of other programs' conventions", "env::var", ENV_READERS),
    Rule::every_test_file_runs("every file under tests/ is compiled into a test target"),
    Rule::no_fn_over("no function over 80 lines in the api, core or a backend", 80, &["api", "core", "backend"]).known(LONG_FUNCTIONS_OFF_THE_ENQUEUE_PATH),
    Rule::no_fn_with_params_over("no function with more than 5 parameters in the api, core or a backend", 5, &["api", "core", "backend"]).known(MANY_PARAMETERS_OFF_THE_ENQUEUE_PATH),
];

/// Where the environment may be read: `config` (every `CUEFLOW_*` variable) and the modules
/// that interpret another program's convention (config's module docs list what each reads).
const ENV_READERS: &[&str] = &[
    "config",
    "cluster::env",
    "backend::kernel_cache",
    "backend::cuda::headers",
    "backend::cuda::driver::library",
    "backend::cuda::nccl",
    "backend::host::cxx",
];

/// What the api still names in the contract (issue #28 shrank it from 23 entries to 15): the
/// memory its buffers are (`Allocation`, `MemRef`: every buffer, view and argument), the
/// operations it builds and core hands to a backend unchanged (`Op`, `Work`, `HostCall`,
/// `Launch`, `KernelArg`, `KernelInner`, `ExternalWork`, `CollectiveWork`), and two backend
/// objects its handles hold (a communicator member, a condition cell; a pool is held through
/// core's `PoolCore`). Value types
/// live in `types`, graph nodes are built by `core::graphs` (`BuildWork`), instantiation
/// flags by `ExecCore`. The rest goes when core owns the handle of an allocation and builds
/// the operations from the api's validated parts.
const API_BUILDS_CONTRACT_OPERATIONS: &[&str] = &[
    "src/api/collective.rs -> src/backend/contract/comm.rs",
    "src/api/collective.rs -> src/backend/contract/memory.rs",
    "src/api/collective.rs -> src/backend/contract/op.rs",
    "src/api/conditional.rs -> src/backend/contract/conditional.rs",
    "src/api/graph_builder.rs -> src/backend/contract/memory.rs",
    "src/api/graph_builder.rs -> src/backend/contract/op.rs",
    "src/api/hostfn.rs -> src/backend/contract/memory.rs",
    "src/api/hostfn.rs -> src/backend/contract/op.rs",
    "src/api/interop.rs -> src/backend/contract/memory.rs",
    "src/api/interop.rs -> src/backend/contract/op.rs",
    "src/api/kernel.rs -> src/backend/contract/kernel.rs",
    "src/api/kernel.rs -> src/backend/contract/memory.rs",
    "src/api/memory.rs -> src/backend/contract/memory.rs",
    "src/api/stream.rs -> src/backend/contract/memory.rs",
    "src/api/stream.rs -> src/backend/contract/op.rs",
];

/// Functions over 80 lines outside the path a call takes to its backend (issue #28: none on
/// it): the host backend's CUDA C compiler (`cuda_c`, one statement form a function), the
/// kernel worker's dispatch, the host backend's opening, its collectives' run on the engines,
/// and the CUDA backend's graph instantiation. They go as they are next changed.
const LONG_FUNCTIONS_OFF_THE_ENQUEUE_PATH: &[&str] = &[
    "src/backend/cuda/graph.rs: Builder::add_node",
    "src/backend/host/collective.rs: shared_run",
    "src/backend/host/cuda_c/lanes/analysis.rs: is_pure",
    "src/backend/host/cuda_c/lanes/analysis.rs: resolve_node",
    "src/backend/host/cuda_c/lanes/build.rs: Builder::lane",
    "src/backend/host/cuda_c/lanes/build.rs: Builder::stmt",
    "src/backend/host/cuda_c/lanes/build_flow.rs: Builder::if_stmt",
    "src/backend/host/cuda_c/lanes/build_flow.rs: Builder::loop_stmt",
    "src/backend/host/cuda_c/lanes/build_flow.rs: Builder::warp_stmt",
    "src/backend/host/cuda_c/lanes/emit.rs: Emitter::chunk",
    "src/backend/host/cuda_c/lanes/emit.rs: Emitter::thread_loop",
    "src/backend/host/cuda_c/lanes/mod.rs: lanes",
    "src/backend/host/cuda_c/lanes/variance.rs: Facts::stmt",
    "src/backend/host/cuda_c/mod.rs: build",
    "src/backend/host/mod.rs: HostBackend::open",
];

/// Functions with more than five parameters (`self` not counted) outside core and the api.
/// Three wrap a driver function with its own parameters (`driver::module::launch` is
/// `cuLaunchKernel`'s, on the enqueue path; `peer::copy_async` is `cuMemcpyPeerAsync`'s;
/// `add_conditional`): the driver layer's rule is one wrapper per driver call, shaped as it
/// is. The others are off the enqueue path: allocation, registration, module compilation,
/// capture of a child graph, the host collectives' rendezvous and the CUDA C compiler.
const MANY_PARAMETERS_OFF_THE_ENQUEUE_PATH: &[&str] = &[
    "src/backend/contract/memory.rs: Allocation::new_host",
    "src/backend/cuda/driver/graph.rs: add_conditional",
    "src/backend/cuda/driver/module.rs: launch",
    "src/backend/cuda/driver/peer.rs: copy_async",
    "src/backend/cuda/graph_capture.rs: capture_child",
    "src/backend/cuda/host_mem.rs: register",
    "src/backend/cuda/module.rs: compile_unit",
    "src/backend/host/collective.rs: Rendezvous::wait_until",
    "src/backend/host/collective.rs: shared_run",
    "src/backend/host/cuda_c/compiler.rs: compile",
];
