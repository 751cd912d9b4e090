//! Access tracking, ordering and the race sanitizer: the layer of the entry path where every
//! operation's accesses meet the accesses before them.
//!
//! Owns: the per-device tracking state and its protocol lock ([`track::Tracking`]); what a call
//! is to this layer ([`call`]: its site, accesses and record); byte-range access maps
//! ([`access`]); vector clocks and their actors ([`clock`], [`actors`]); what the sanitizer
//! remembers between calls ([`history`]); host access to device-touched memory
//! ([`host_access`]); race reports and lints ([`report`], [`sanitizer`]);
//! declared reads checked after the fact ([`read_check`]); the access maps a call holds locked
//! and the order they are locked in ([`locks`]); and a graph launch's accesses part by part,
//! ordered by its event nodes ([`track_scope`]).
//!
//! Rules kept here: AC1–AC7 (accesses, happens-before, races, automatic ordering, the
//! serialized host engines), MM3 (host views wait for the device), RL2 (forgotten actors), and
//! the clock joins that ST4–ST6, EV2, EV4 and MD2 ask for.
//!
//! # Fields
//!
//! [`track::Tracking`], one per device, lives in `DeviceCore::track`:
//! - `serialize`: fixed when the device opens (AC6, the host backend).
//! - `mode`, `auto_device`, `auto_streams`: atomics the API's settings write; every call reads
//!   them without a lock to decide whether it needs the layer at all.
//! - `shared` ([`history::Shared`]): the *protocol lock*. Its `state` mutex is held by a call
//!   from before its operation reaches the backend until its accesses are recorded; only this
//!   folder locks it, always before any allocation's access map. `dead` and `any_dead` are the
//!   streams dropped while the state was held: a stream's drop pushes there without waiting,
//!   the next holder of `state` buries them.
//! - `late`: lints a backend reports after the call (AC7 on CUDA), behind their own mutex.
//!
//! An allocation's access map (`memory::alloc::AllocState::access`) is locked by this folder
//! only, after the protocol lock, several at once in address order ([`locks::lock_maps`]).

pub(crate) mod access;
pub(crate) mod actors;
pub(crate) mod call;
pub(crate) mod clock;
pub(crate) mod history;
mod host_access;
pub(crate) mod locks;
pub(crate) mod read_check;
pub(crate) mod report;
pub(crate) mod sanitizer;
pub(crate) mod track;
pub(crate) mod track_scope;
