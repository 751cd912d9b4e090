//! Conditional nodes (GR9): if, if/else, while and switch nodes whose body runs depending on a
//! condition that kernels of the graph set at run time — from CUDA C with
//! `cudaGraphSetConditional(handle, value)` (declared by [`CONDITIONAL_CUDA_H`]), from a host
//! kernel with [`BlockArgs::set_condition`](crate::BlockArgs::set_condition). The kernel
//! receives the condition as an argument ([`KernelArgs::condition`]).
//!
//! ```
//! use cueflow::{Device, DeviceBuffer, Graph, Kernel, KernelArgs, LaunchConfig, Stream};
//! let dev = Device::host()?;
//! let count = DeviceBuffer::<u32>::new(&dev, 1)?;
//! let mut g = Graph::new(&dev);
//! let cond = g.condition(1, true); // default 1, reset at every launch
//! // The body: count += 1; keep looping while count < 10.
//! let step = Kernel::new("step")
//!     .host(|_, a| {
//!         let c = &mut a.tile_mut::<u32>(0)[0];
//!         *c += 1;
//!         a.set_condition(1, (*c < 10) as u32);
//!     })
//!     .build();
//! let mut body = Graph::new(&dev);
//! body.add_kernel(&[], &step, LaunchConfig::new(1, 1), KernelArgs::new().write(&count).condition(&cond))?;
//! let zero = g.add_memset(&[], &count, 0)?;
//! g.add_while(&[zero], &cond, &body)?;
//! let s = Stream::new(&dev)?;
//! g.instantiate()?.launch(&s)?;
//! let mut out = [0u32];
//! s.read_pageable(&mut out, &count)?;
//! assert_eq!(out[0], 10);
//! # Ok::<(), cueflow::Error>(())
//! ```

use std::panic::Location;
use std::sync::Arc;

use crate::api::graph::{Graph, GraphNodeId};
use crate::api::kernel::KernelArgs;
use crate::api::stream::Stream;
use crate::backend::contract::conditional::CondCell;
use crate::core::graphs::cond::BuildCond;
use crate::core::graphs::def::BuildWork;
use crate::error::{Error, Result};
use crate::types::{CondKind, ConditionId};

/// CUDA C declarations a kernel needs to set a condition under NVRTC: the handle type and
/// `cudaGraphSetConditional`. Add it as a header
/// (`CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H)`) and
/// `#include "cueflow_conditional.h"`.
pub const CONDITIONAL_CUDA_H: &str = "#pragma once\n\
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;\n\
extern \"C\" __device__ __cudart_builtin__ void cudaGraphSetConditional(\n\
    cudaGraphConditionalHandle handle, unsigned int value);\n";

/// A condition of a graph's conditional nodes (cudaGraphConditionalHandle): a value that the
/// graph's kernels set and its conditional nodes test. Cheap to clone.
#[derive(Clone)]
pub struct ConditionHandle {
    pub(crate) cell: Arc<CondCell>,
}

impl std::fmt::Debug for ConditionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConditionHandle({}, default {}, reset {})",
            self.cell.id, self.cell.default, self.cell.reset
        )
    }
}

impl KernelArgs {
    /// A condition the kernel may set (a `cudaGraphConditionalHandle` parameter in CUDA C;
    /// [`BlockArgs::set_condition`](crate::BlockArgs::set_condition) with this argument's
    /// index in a host kernel). Meaningful in a kernel node of the graph that owns the
    /// condition.
    pub fn condition(self, handle: &ConditionHandle) -> Self {
        self.scalar(ConditionId(handle.cell.id))
    }
}

impl Graph {
    /// A new condition of this graph (cudaGraphConditionalHandleCreate). With
    /// `reset_each_launch` it takes `default` at the start of every launch
    /// (cudaGraphCondAssignDefault); without it `default` is not applied: the condition starts
    /// at 0 at the first launch of each instantiation and keeps what the last launch left
    /// (each instantiation its own value; on CUDA, where the driver gives such a handle no
    /// defined first value, cueflow sets it to 0 at the first launch). A condition drives one conditional node, of this graph or of a graph nested in
    /// it (a body, a child graph), as a CUDA handle does: a second node on it, or a node of
    /// another graph, is an [`Error::Graph`] at instantiation; so is a kernel given it in a
    /// graph none of whose conditional nodes it drives.
    pub fn condition(&mut self, default: u32, reset_each_launch: bool) -> ConditionHandle {
        ConditionHandle {
            cell: CondCell::new(default, reset_each_launch, self.def.id),
        }
    }

    fn add_conditional(
        &mut self,
        deps: &[GraphNodeId],
        handle: &ConditionHandle,
        kind: CondKind,
        bodies: &[&Graph],
        site: &'static Location<'static>,
    ) -> Result<GraphNodeId> {
        let bodies = body_defs(&self.device, bodies)?;
        let node = BuildCond::new(kind, handle.cell.clone(), bodies, self.def.id)?;
        self.add(BuildWork::Cond(node), deps, site)
    }

    /// Body `i` of conditional node `node`, to change in place (the body graphs
    /// `cudaGraphAddNode` hands out for a conditional node): add nodes to it, or capture into
    /// it ([`Stream::begin_capture_to_graph`]). The change is written into the node when the
    /// returned guard is dropped; the body is checked (GR9: no event, memory or host nodes)
    /// when the graph is instantiated. Refused with [`Error::Graph`] when `node` is no conditional
    /// node of this graph or has no body `i`.
    ///
    /// ```
    /// use cueflow::{CaptureMode, Device, DeviceBuffer, Graph, Kernel, KernelArgs, LaunchConfig, Stream};
    /// let dev = Device::host()?;
    /// let count = DeviceBuffer::<u32>::new(&dev, 1)?;
    /// let mut g = Graph::new(&dev);
    /// let cond = g.condition(1, true);
    /// let node = g.add_while(&[], &cond, &Graph::new(&dev))?; // an empty body, filled below
    /// let step = Kernel::new("step")
    ///     .host(|_, a| {
    ///         let c = &mut a.tile_mut::<u32>(0)[0];
    ///         *c += 1;
    ///         a.set_condition(1, (*c < 5) as u32);
    ///     })
    ///     .build();
    /// let s = Stream::new(&dev)?;
    /// {
    ///     let mut body = g.conditional_body(node, 0)?;
    ///     let capture = s.begin_capture_to_graph(&mut body, &[], CaptureMode::Global)?;
    ///     s.launch(&step, LaunchConfig::new(1, 1), KernelArgs::new().write(&count).condition(&cond))?;
    ///     capture.end()?;
    /// }
    /// g.instantiate()?.launch(&s)?;
    /// assert_eq!(s.read_value(&count)?, 5);
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn conditional_body(&mut self, node: GraphNodeId, i: usize) -> Result<BodyMut<'_>> {
        let index = self.indices(&[node], "conditional_body")?[0];
        let cond = match self.def.nodes.get(index).map(|n| &n.work) {
            Some(BuildWork::Cond(c)) => c.clone(),
            _ => {
                return Err(Error::Graph(format!(
                    "conditional_body: node {index} is not a conditional node"
                )))
            }
        };
        let Some(body) = cond.bodies.get(i) else {
            return Err(Error::Graph(format!(
                "conditional_body: node {index} has {} bodies, not a body {i}",
                cond.bodies.len()
            )));
        };
        let body = Graph {
            device: self.device.clone(),
            def: body.clone(),
        };
        Ok(BodyMut {
            parent: self,
            node: index,
            i,
            body,
        })
    }
}

/// A conditional node's body being changed ([`Graph::conditional_body`]): a [`Graph`]
/// (it dereferences to one) that goes back into its node when dropped.
pub struct BodyMut<'g> {
    parent: &'g mut Graph,
    node: usize,
    i: usize,
    body: Graph,
}

impl std::ops::Deref for BodyMut<'_> {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.body
    }
}

impl std::ops::DerefMut for BodyMut<'_> {
    fn deref_mut(&mut self) -> &mut Graph {
        &mut self.body
    }
}

impl Drop for BodyMut<'_> {
    fn drop(&mut self) {
        let def = Arc::make_mut(&mut self.parent.def);
        if let BuildWork::Cond(c) = &def.nodes[self.node].work {
            def.nodes[self.node].work = BuildWork::Cond(c.with_body(self.i, self.body.def.clone()));
        }
    }
}

impl std::fmt::Debug for BodyMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "body {} of node {}: {:?}", self.i, self.node, self.body)
    }
}

/// The graphs of `bodies`, each of `device`.
fn body_defs(
    device: &crate::api::device::Device,
    bodies: &[&Graph],
) -> Result<Vec<Arc<crate::core::graphs::def::GraphDef>>> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if b.device.same(device) {
                Ok(b.def.clone())
            } else {
                Err(Error::InvalidHandle(format!(
                    "conditional body {i} belongs to another device"
                )))
            }
        })
        .collect()
}

impl ConditionHandle {
    /// A condition not tied to a graph yet, for conditional nodes added to a capture in
    /// progress ([`Stream::capture_while`] and the like): it belongs to the first graph (or
    /// capture) a conditional node on it is added to; see [`Graph::condition`].
    pub fn new(default: u32, reset_each_launch: bool) -> ConditionHandle {
        ConditionHandle {
            cell: CondCell::new(default, reset_each_launch, 0),
        }
    }
}

impl Stream {
    /// Add a conditional node to the capture in progress on this stream, after what it
    /// captured so far (cudaGraphAddNode on the capture's graph, then
    /// cudaStreamUpdateCaptureDependencies): the stream's next work follows it (GR9, GR1).
    /// Returns the node, a node of the graph the capture ends with: its bodies can be
    /// changed there ([`Graph::conditional_body`]).
    #[track_caller]
    pub fn capture_conditional(
        &self,
        kind: ConditionalKind,
        handle: &ConditionHandle,
        bodies: &[&Graph],
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        let kind = match kind {
            ConditionalKind::If => CondKind::If,
            ConditionalKind::IfElse => CondKind::IfElse,
            ConditionalKind::While => CondKind::While,
            ConditionalKind::Switch => CondKind::Switch,
        };
        let bodies = body_defs(self.device(), bodies)?;
        let cell = handle.cell.clone();
        let make = |graph| {
            let node = BuildCond::new(kind, cell, bodies, graph)?;
            Ok(node as crate::core::graphs::capture::Conditional)
        };
        let (graph, index) =
            crate::core::graphs::capture::add_conditional(self.core.lane(), make, site)?;
        Ok(GraphNodeId::new(graph, index))
    }

    /// [`capture_conditional`](Self::capture_conditional) of a while node.
    #[track_caller]
    pub fn capture_while(&self, handle: &ConditionHandle, body: &Graph) -> Result<GraphNodeId> {
        self.capture_conditional(ConditionalKind::While, handle, &[body])
    }
}

/// The kinds of conditional node (cudaGraphConditionalNodeType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionalKind {
    /// Body 0 when the condition is non-zero.
    If,
    /// Body 0 when non-zero, body 1 when zero.
    IfElse,
    /// Body 0 while the condition is non-zero.
    While,
    /// Body `n` when the condition is `n`.
    Switch,
}

impl Graph {
    /// An if node: `body` runs when the condition is non-zero as the node starts.
    #[track_caller]
    pub fn add_if(
        &mut self,
        deps: &[GraphNodeId],
        handle: &ConditionHandle,
        body: &Graph,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        self.add_conditional(deps, handle, CondKind::If, &[body], site)
    }

    /// An if/else node: `then` runs when the condition is non-zero, `otherwise` when it is
    /// zero (CUDA 12.8+ on the GPU).
    #[track_caller]
    pub fn add_if_else(
        &mut self,
        deps: &[GraphNodeId],
        handle: &ConditionHandle,
        then: &Graph,
        otherwise: &Graph,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        self.add_conditional(deps, handle, CondKind::IfElse, &[then, otherwise], site)
    }

    /// A while node: `body` runs again and again while the condition is non-zero, checked
    /// before every iteration (a kernel of the body typically sets it).
    #[track_caller]
    pub fn add_while(
        &mut self,
        deps: &[GraphNodeId],
        handle: &ConditionHandle,
        body: &Graph,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        self.add_conditional(deps, handle, CondKind::While, &[body], site)
    }

    /// A switch node: body `n` runs when the condition is `n`; none when it is out of range
    /// (CUDA 12.8+ on the GPU).
    #[track_caller]
    pub fn add_switch(
        &mut self,
        deps: &[GraphNodeId],
        handle: &ConditionHandle,
        bodies: &[&Graph],
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        self.add_conditional(deps, handle, CondKind::Switch, bodies, site)
    }
}
