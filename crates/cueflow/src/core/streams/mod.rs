//! Streams and events as core sees them, and the one path every stream call takes to the
//! device (DESIGN principle 5).
//!
//! Owns: [`stream::StreamCore`] and the path of [`stream::StreamCore::submit`] and its
//! siblings; the entry layers written once ([`entry`]: host-function guard → capture → tracking
//! → trace → backend); the host-function guard itself ([`hostfn`], HF2); the synchronous calls
//! of a stream ([`sync`]: pageable copies CP3, 4-byte reads and writes); what tracking knows of
//! a stream ([`ident`]); events ([`event`], EV1–EV8); `.await` on stream and event work
//! ([`completion`], RL4); and the trace recorder every call passes ([`recorder`]).
//!
//! Rules kept here: ST1–ST10 (ordering within and between streams, the legacy stream), EV1–EV8,
//! HF2, CP3, ER3 (misuse refused before anything is enqueued) and RL4.
//!
//! # Fields
//!
//! [`stream::StreamCore`] is shared by the API's `Stream` handles, the device's tracking state
//! and captures:
//! - `ident` ([`ident::StreamIdent`]): written once at creation; every layer reads it. Its
//!   `auto`, `auto_graph` and `tracked` flags are atomics: the API sets `auto`/`auto_graph`,
//!   only the tracking layer (`tracking::history`) sets `tracked`, under the device's
//!   tracking-state lock.
//! - `capture`: the capture slot (a mutex around the session the stream takes part in); only
//!   `graphs::capture` sets or clears it, while beginning, joining or ending a capture; the
//!   capture layer of every call reads it.
//! - `last_trace_op`, `pending_waits`, `named_in`: the trace layer's ([`recorder`]), and a graph
//!   launch's flow arrows (`graphs::events`); atomics and a short-held mutex, touched only
//!   while a recorder is installed.
//! - `tracking`: set once, when `devices::open_device` registers the stream with the device's
//!   tracking state; read by the stream's drop to tell that state it went (RL2).
//!
//! [`event::EventCore`] is shared by the API's `Event` handles, captures and graph event nodes:
//! `device`, `backend` and `flags` are fixed at creation; `captured` (the capture layer's) and
//! `clock` (the tracking layer's, sanitizer on) are each behind their own mutex and written by
//! a record, read by a wait; `trace_op` is the trace layer's; `autograph_held` is written by
//! `graphs::autograph` only.

pub(crate) mod completion;
pub(crate) mod entry;
pub(crate) mod event;
pub(crate) mod hostfn;
pub(crate) mod ident;
pub(crate) mod join_events;
pub(crate) mod recorder;
pub(crate) mod stream;
pub(crate) mod sync;
