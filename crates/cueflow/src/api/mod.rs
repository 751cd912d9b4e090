//! The public, validating types. Every call checks its input and refuses misuse with a typed
//! error before anything is enqueued (ER3).

pub mod collective;
pub mod conditional;
#[cfg(feature = "cudarc-interop")]
pub mod cudarc;
#[cfg(feature = "cudarc-interop")]
pub mod cudarc_op;
pub mod device;
pub mod event;
pub mod future;
pub mod graph;
pub mod graph_builder;
pub mod graph_capture;
pub mod host_flag;
pub mod host_memory;
pub mod hostfn;
pub mod interop;
pub mod kernel;
pub mod launch;
pub mod managed;
pub mod memory;
pub mod pageable;
pub mod pool;
pub mod stream;
