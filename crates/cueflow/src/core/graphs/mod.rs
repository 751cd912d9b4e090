//! Graphs: stream capture, graphs built node by node, instantiation, launch and update,
//! graph memory, event and conditional nodes, and automatic graphs.
//!
//! Owns: captures ([`capture`], GR1, GR2; [`capture_memory`], GR7's check at the end of a
//! capture); the graph definition that building and capture both produce and its flattening
//! into the node list backends take ([`def`], GR8); conditional nodes ([`cond`], GR9); the
//! Graphviz diagram ([`dot`]); nodes in conflict ([`order`], AC3–AC6 for graphs); graph memory
//! ([`mem`], GR7, GR10); event record and wait nodes and the launch of a graph that has them
//! ([`events`]); instantiated graphs, their launches and updates ([`exec`], GR3–GR6; what an
//! update may change, [`update`]) and what instantiation checks first ([`instantiate`]:
//! malformed graphs, races); a launch past the entry layers ([`launch`]: the whole path of a
//! launch is in its module doc); and automatic graphs ([`autograph`], AG1–AG6).
//!
//! A new node type touches six files: a variant of the contract's `GraphWork`, its
//! `node_type` and, where it touches memory, `GraphNode::for_each_access`
//! (`backend/contract/graph.rs`); its `NodeType` with that type's diagram shape and report noun
//! if it is a new kind (`types/graph.rs`); in [`def`] its `BuildWork` constructor, label and
//! flattening; each backend's run of it (`backend/host/graph.rs`, `backend/cuda/graph.rs`);
//! and the API's constructor (`api/graph_builder.rs`). An update refuses it as a different
//! kind of node until [`update`] says what may change in place.
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
pub(crate) mod capture_slot;
mod chains;
pub(crate) mod cond;
pub(crate) mod def;
pub(crate) mod dot;
mod event_sets;
pub(crate) mod events;
pub(crate) mod exec;
mod host_nodes;
mod instantiate;
pub(crate) mod launch;
pub(crate) mod mem;
pub(crate) mod order;
mod update;
