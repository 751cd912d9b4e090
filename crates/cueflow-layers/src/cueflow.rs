//! cueflow's rules, one line each (DESIGN.md: api → core → backend; the backends know only the
//! contract and their own drivers, as wgpu-hal knows nothing of wgpu-core).
//!
//! `config` is such a bottom module: every layer may read its settings, it imports none of
//! them, and it alone names `CUEFLOW_*` variables.
//!
//! `types` is the other: the value types every layer names, importing no layer, and the only
//! home of public types the backend contract used to define.
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
    Rule::no_public_items_in("no public type is defined in the backend contract", &["backend::contract"]).known(CONTRACT_DEFINES_HOST_KERNEL_TYPES),
    Rule::no_path("config imports no layer", &["config"], &["api", "core", "backend", "cluster", "kernels", "pipeline", "trace", "model"]),
    Rule::names_only_in("no CUEFLOW_ variable is named outside config", "CUEFLOW_", &["config"]),
    Rule::calls_only_in("the environment is read by config and the readers of other programs' conventions", "env::var", ENV_READERS),
    Rule::every_test_file_runs("every file under tests/ is compiled into a test target"),
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

/// The operations the api builds and core hands to a backend unchanged (`Op`, `Work`,
/// `MemRef`, `Allocation`, `Launch`, `KernelArg`, `GraphWork`, …) are the contract's, and the
/// api names them there (core re-exports nothing upward). The value types moved to `types`
/// (issue #28); these go when the api builds operations through core.
const API_BUILDS_CONTRACT_OPERATIONS: &[&str] = &[
    "src/api/collective.rs -> src/backend/contract/comm.rs",
    "src/api/collective.rs -> src/backend/contract/memory.rs",
    "src/api/collective.rs -> src/backend/contract/op.rs",
    "src/api/conditional.rs -> src/backend/contract/conditional.rs",
    "src/api/cudarc.rs -> src/backend/contract/device.rs",
    "src/api/graph.rs -> src/backend/contract/device.rs",
    "src/api/graph.rs -> src/backend/contract/graph.rs",
    "src/api/graph_builder.rs -> src/backend/contract/graph.rs",
    "src/api/graph_builder.rs -> src/backend/contract/memory.rs",
    "src/api/graph_builder.rs -> src/backend/contract/op.rs",
    "src/api/hostfn.rs -> src/backend/contract/device.rs",
    "src/api/hostfn.rs -> src/backend/contract/memory.rs",
    "src/api/hostfn.rs -> src/backend/contract/op.rs",
    "src/api/interop.rs -> src/backend/contract/device.rs",
    "src/api/interop.rs -> src/backend/contract/memory.rs",
    "src/api/interop.rs -> src/backend/contract/op.rs",
    "src/api/kernel.rs -> src/backend/contract/kernel.rs",
    "src/api/kernel.rs -> src/backend/contract/memory.rs",
    "src/api/managed.rs -> src/backend/contract/managed.rs",
    "src/api/memory.rs -> src/backend/contract/memory.rs",
    "src/api/pool.rs -> src/backend/contract/pool.rs",
    "src/api/stream.rs -> src/backend/contract/memory.rs",
    "src/api/stream.rs -> src/backend/contract/op.rs",
];

/// What a host kernel is and sees of its arguments: `BlockArgs` reads a launch's validated
/// arguments (`Launch`, `KernelArg`, `MemRef`), which are the contract's, so it stays beside
/// them until a launch's arguments reach it through a type of `types`.
const CONTRACT_DEFINES_HOST_KERNEL_TYPES: &[&str] = &[
    "src/backend/contract/kernel.rs: BlockArgs",
    "src/backend/contract/kernel.rs: HostKernelFn",
];
