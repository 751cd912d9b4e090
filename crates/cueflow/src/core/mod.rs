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
