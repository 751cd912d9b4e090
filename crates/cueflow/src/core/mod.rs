//! The ordering model, once for every backend: operation records, capture, lifetime and
//! host-access tracking, the host-function guard and the trace recorder.

pub(crate) mod access;
pub(crate) mod alloc;
pub(crate) mod capture;
pub(crate) mod hostfn;
pub(crate) mod op;
pub(crate) mod recorder;
