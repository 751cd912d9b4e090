//! The ordering model, once for every backend: devices, streams and events as core sees them,
//! the one path every stream-side call takes (capture, access tracking, trace, backend),
//! operation records, graphs, the host-function guard and the trace recorder.

pub(crate) mod access;
pub(crate) mod actors;
pub(crate) mod alloc;
pub(crate) mod call;
pub(crate) mod capture;
mod capture_memory;
pub(crate) mod clock;
pub(crate) mod completion;
pub(crate) mod device;
pub(crate) mod entry;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod graph_build;
pub(crate) mod graph_cond;
pub(crate) mod graph_dot;
pub(crate) mod graph_events;
pub(crate) mod graph_mem;
pub(crate) mod graph_order;
pub(crate) mod group;
pub(crate) mod history;
pub(crate) mod host_mem;
pub(crate) mod hostfn;
pub(crate) mod managed;
pub(crate) mod open_device;
pub(crate) mod pageable;
pub(crate) mod read_check;
pub(crate) mod recorder;
pub(crate) mod report;
pub(crate) mod sanitizer;
pub(crate) mod stream;
pub(crate) mod stream_ident;
pub(crate) mod stream_sync;
pub(crate) mod track;
pub(crate) mod track_scope;

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
