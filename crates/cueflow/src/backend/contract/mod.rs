//! The backend contract: what a device must execute, and nothing of the rules.
//!
//! Backends import this module (and their own drivers) only; core drives them through it, as
//! wgpu-core drives wgpu-hal.
//!
//! Core (with the public API in front of it) validates every call, decides the capture, tracing,
//! access and lifetime questions, and hands a backend primitive work in the order the program
//! enqueued it: operations ([`Op`](op::Op)), event records and event waits, per stream. A backend's only
//! duties are the execution rules a device itself implements:
//!
//! 1. Operations of one stream run one after another, in submission order (ST1).
//! 2. A wait makes the stream's later work wait for what the event captured at the call (EV4).
//! 3. A record captures everything submitted to the stream before it (EV1, EV2).
//! 4. The legacy stream and blocking streams order against each other (ST4, ST5).
//! 5. Every [`Op`](op::Op) is dropped, with the memory references it holds, only after it completed (MM2).
//! 6. A kernel fault poisons the device; every later call returns it (KN2, ER2).
//! 7. An operation submitted with completion signals of earlier operations ([`Done`](device::Done)) starts
//!    only after they completed, and when asked, the backend hands back the operation's own
//!    signal (core orders conflicting accesses with them, AC5 and AC6, and host views, MM3).
//!    A graph launch takes them per node too ([`NodesAfter`](device::NodesAfter)), and hands
//!    back one per event record node (GR8).
//! 8. A wait asked for later ([`wait_later`](device::BackendStream::wait_later)) is enqueued
//!    before the stream's next enqueue, query or synchronize, and before its handle goes out;
//!    it waits for what its event captured then (automatic graphs' joins, AG3).
//!
//! The host backend implements these with engines and a dependency scheduler; the CUDA backend
//! maps them onto driver streams and events.

//!
//! One file per object, imported downward only: [`memory`] (raw allocations and the byte ranges
//! operations hold), [`event`], [`trace`] (where times are written), [`compile`] (CUDA code and compile options), [`kernel`] (launches and
//! what a host kernel sees of a block), [`comm`] (collectives), [`op`] (the operations),
//! [`graph`] (captured nodes), [`device`] (the device, stream and graph objects).

pub(crate) mod comm;
pub(crate) mod conditional;
pub(crate) mod device;
pub(crate) mod downcast;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod kernel;
pub(crate) mod memory;
pub(crate) mod node_op;
pub(crate) mod op;
pub(crate) mod pool;
pub(crate) mod trace;
