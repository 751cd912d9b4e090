//! The ordering model, once for every backend, one folder per subsystem:
//!
//! - [`streams`]: streams and events as core sees them and the one path every stream call takes
//!   (the entry layers: host-function guard → capture → tracking → trace → backend);
//! - [`tracking`]: access tracking, automatic ordering and the race sanitizer;
//! - [`graphs`]: capture, graphs built node by node, instantiation, launch, graph memory,
//!   automatic graphs;
//! - [`memory`]: core's state of an allocation, registered, managed and pageable host memory;
//! - [`devices`]: the device core every layer's per-device state hangs from, the device as the
//!   API opens it, calls that span devices.
//!
//! Each folder's module doc says what it owns, which rules it keeps, and who may touch which
//! field of its shared state.

pub(crate) mod devices;
pub(crate) mod graphs;
pub(crate) mod memory;
pub(crate) mod streams;
pub(crate) mod tracking;

// The backend contract's descriptions as the public API sees them: the API converts its input
// into these and calls core; it never reaches a backend. (`pub` for the types the crate
// exports, so that the API can re-export them.)
pub use crate::backend::contract::comm::ReduceOp;
pub(crate) use crate::backend::contract::comm::{
    BackendComm, CollectiveDesc, CollectiveKind, ElemType,
};
pub(crate) use crate::backend::contract::conditional::{CondCell, CondKind, ConditionId};
pub use crate::backend::contract::device::{DeviceProperties, PinnedFlags, StreamKind, SyncMode};
pub(crate) use crate::backend::contract::device::{GraphFlags, OwnerDrop, StickyProbe};
pub use crate::backend::contract::event::EventFlags;
pub(crate) use crate::backend::contract::graph::{GraphNode, GraphWork};
pub use crate::backend::contract::kernel::{
    BlockArgs, BlockCtx, CompileOptions, CudaCode, Dim3, HostKernelFn, HostPath,
};
pub(crate) use crate::backend::contract::kernel::{KernelArg, KernelInner, Launch, Split};
pub(crate) use crate::backend::contract::managed::ManagedOp;
pub use crate::backend::contract::managed::{Advice, AttachMode, MemLocation};
pub use crate::backend::contract::memory::Access;
pub(crate) use crate::backend::contract::memory::{Allocation, MemKind, MemRef, Release};
pub(crate) use crate::backend::contract::op::{
    CollectiveWork, ExternalCuda, ExternalHost, ExternalWork, HostCall, Op, Work,
};
pub(crate) use crate::backend::contract::pool::BackendPool;
pub use crate::backend::contract::pool::PoolStats;
