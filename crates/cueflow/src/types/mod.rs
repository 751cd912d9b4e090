//! The value types every layer names: what the program passes in and reads back (device
//! properties, flags, grid shapes, memory locations, access declarations, collective and
//! conditional kinds, CUDA code and compile options), and what core and the backends exchange
//! of them.
//!
//! The bottom of the crate, as `wgpu-types` is under `wgpu-core` and `wgpu-hal`: the api, core
//! and both backends import these from here, and this module imports no layer
//! (`crates/cueflow-layers` checks it). Public value types are defined here, not in the backend
//! contract (checked too); the crate root re-exports the public ones.
//!
//! One file per area: [`device`], [`event`], [`memory`], [`kernel`], [`host_kernel`] (what a
//! host kernel sees of its launch), [`compile`], [`collective`], [`conditional`], [`graph`];
//! every public name is re-exported here, so a type is always `crate::types::Name`.

pub(crate) mod collective;
pub(crate) mod compile;
pub(crate) mod conditional;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod host_kernel;
pub(crate) mod kernel;
pub(crate) mod memory;

pub(crate) use collective::CollectiveDesc;
pub use collective::{CollectiveKind, ElemType, ReduceOp};
pub use compile::{CompileOptions, CudaCode};
pub use conditional::{CondKind, ConditionId};
pub use device::{
    ComputeMode, DeviceProperties, DriverFeature, PinnedFlags, StreamDesc, StreamKind, SyncMode,
    DEFAULT_QUEUE_DEPTH,
};
pub(crate) use device::{OwnerDrop, StickyProbe};
pub use event::EventFlags;
pub use graph::NodeType;
pub use host_kernel::{BlockArgs, HostKernelFn};
pub use kernel::{BlockCtx, Dim3, HostPath};
pub(crate) use memory::ManagedOp;
pub use memory::{Access, Advice, AttachMode, MemKind, MemLocation, PoolStats, Side};
