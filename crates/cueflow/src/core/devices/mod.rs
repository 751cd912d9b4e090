//! The device as core sees it and as the API opens it, and calls that span devices.
//!
//! Owns: [`device::DeviceCore`], the backend and the per-device state of every layer of the
//! entry path; [`open_device::OpenDevice`], the device core with its legacy stream (ST4), above
//! streams so that the device core below them knows no stream; and group calls ([`group`],
//! MD4: one operation on each of several streams of different devices, as one call).
//!
//! Rules kept here: DV2 (device flags fixed from the first use), MD1–MD4, RL4 (the
//! device's notifier streams), ST10 (device synchronize).
//!
//! # Fields
//!
//! [`device::DeviceCore`], shared by every stream, event, allocation and graph of the device:
//! - `id`, `spec`, `backend`, `legacy_actor`, `trace_path`: fixed when the device opens;
//!   `backend` is reached through core only (the API calls `DeviceCore`'s methods).
//! - `captures` (`graphs::capture`), `track` (`tracking::track`), `autograph`
//!   (`graphs::autograph`): each layer's per-device state, touched by that layer only, under
//!   its own locks (see each folder's fields).
//! - `tracing`, `recorder`: the trace layer's (`streams::recorder`); `tracing` is the one
//!   relaxed load an untraced call pays, `recorder` is locked to install or take a recorder.
//! - `watcher`: the device's fault watcher (sticky errors).
//! - `next_stream`: stream ids, an atomic counter.
//! - `notifiers` (mutex): the private streams completions use (RL4), made on demand.
//! - `used`: set by the first stream, event or allocation; from then on the flags are fixed
//!   (DV2).
//!
//! [`open_device::OpenDevice`]: `core` and `legacy` fixed at open; `interop` set once by the
//! API's interop layer.

pub(crate) mod device;
pub(crate) mod group;
pub(crate) mod open_device;
