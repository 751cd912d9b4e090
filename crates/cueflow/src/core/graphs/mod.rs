//! Graphs: stream capture, graphs built node by node, instantiation, launch and update,
//! graph memory, event and conditional nodes, and automatic graphs.
//!
//! Owns: captures ([`capture`], GR1, GR2; [`capture_memory`], GR7's check at the end of a
//! capture); the graph definition that building and capture both produce and its flattening
//! into the node list backends take ([`def`], GR8); conditional nodes ([`cond`], GR9); the
//! Graphviz diagram ([`dot`]); nodes in conflict ([`order`], AC3–AC6 for graphs); graph memory
//! ([`mem`], GR7, GR10); event record and wait nodes and the launch of a graph that has them
//! ([`events`]); instantiated graphs, their launches and updates ([`exec`], GR3–GR6); a launch
//! past the entry layers ([`launch`]: the whole path of a launch is in its module doc); and
//! automatic graphs ([`autograph`], AG1–AG6).
//!
//! A new node type is a variant of the contract's `GraphWork` (`backend/contract/graph.rs`),
//! built in [`def`] (`BuildWork`, its label and flattening), labelled in [`dot`], ordered in
//! [`order`] where it touches memory, and run by each backend (`backend/host/graph.rs`,
//! `backend/cuda/graph.rs`), with the API's constructor in `api/graph_builder.rs`.
//!
//! Rules kept here: GR1–GR11 and AG1–AG6.
//!
//! # Fields
//!
//! [`capture::CaptureRegistry`], one per device (`DeviceCore::captures`): `active` counts the
//! live sessions so that a call outside any capture pays one atomic load; `sessions` (mutex)
//! lists them for the mode checks of GR2. Only [`capture`] writes either.
//!
//! [`capture::CaptureSession`], shared by the streams that take part: `id`, `mode`, `owner`,
//! `origin`, `origin_actor`, `graph` and `target` are fixed at begin; `active` is cleared once,
//! by the origin stream's end (or an invalidation); `state` (mutex: nodes, lanes, placeholder
//! slots, conditional nodes, holds) is written by every call captured into the session, one at
//! a time.
//!
//! [`exec::ExecCore`], shared by the API's `GraphExec` and its launches: `dev`, `flags`, `id`,
//! `bound` and the claim are fixed at instantiation; `state` (mutex) holds the nodes, their
//! footprint, the backend instantiation and the event nodes, and is held for the whole of a
//! launch or an update, so that they run one at a time (rule 1 of [`exec`]).

pub(crate) mod autograph;
pub(crate) mod capture;
mod capture_memory;
pub(crate) mod cond;
pub(crate) mod def;
pub(crate) mod dot;
pub(crate) mod events;
pub(crate) mod exec;
pub(crate) mod launch;
pub(crate) mod mem;
pub(crate) mod order;
