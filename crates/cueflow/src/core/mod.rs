//! The ordering model, once for every backend: devices, streams and events as core sees them,
//! the one path every stream-side call takes (capture, access tracking, trace, backend),
//! operation records, graphs, the host-function guard and the trace recorder.

pub(crate) mod access;
pub(crate) mod alloc;
pub(crate) mod capture;
pub(crate) mod clock;
pub(crate) mod collective;
pub(crate) mod completion;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod hostfn;
pub(crate) mod kernel;
pub(crate) mod op;
pub(crate) mod panics;
pub(crate) mod recorder;
pub(crate) mod sanitizer;
pub(crate) mod stream;
pub(crate) mod track;
