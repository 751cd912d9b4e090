//! Building graphs node by node (GR8), as `cudaGraphAdd*Node` does: each `add_*` method takes
//! the nodes the new node depends on and returns its id. Buffers are checked as the stream
//! calls check them (device, CP4 lengths and overlap, KC4 arguments); the graph's shape — no
//! cycles, graph memory used only inside its allocation's lifetime — is checked when it is
//! instantiated ([`Graph::instantiate`]), with the node named in the error.

use std::panic::Location;
use std::sync::Arc;

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::event::Event;
use crate::api::graph::{Graph, GraphNodeId};
use crate::api::hostfn::HostIo;
use crate::api::hostfn::{check_host_accesses, repeatable_host_call};
use crate::api::kernel::{Kernel, KernelArgs, LaunchConfig};
use crate::api::memory::{DeviceBuffer, PinnedSlice, PinnedSliceMut};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::Work;
use crate::core::graphs::def::{BuildWork, GraphDef};
use crate::error::{Error, Result};
use crate::types::Access;

type Site = &'static Location<'static>;

impl Graph {
    /// An empty graph on `device` (cudaGraphCreate), to build node by node (GR8).
    ///
    /// ```
    /// use cueflow::{Device, DeviceBuffer, Graph, PinnedBuffer, Stream};
    /// let dev = Device::host()?;
    /// let host = PinnedBuffer::from_slice(&dev, &[1.0f32; 256])?;
    /// let d = DeviceBuffer::<f32>::new(&dev, 256)?;
    /// let mut g = Graph::new(&dev);
    /// let up = g.add_copy_h2d(&[], &d, &host)?;
    /// let scale = g.add_host(&[up], || {})?;
    /// let _done = g.add_empty(&[scale])?;
    /// assert_eq!(g.node_count(), 3);
    /// let s = Stream::new(&dev)?;
    /// g.instantiate()?.launch(&s)?;
    /// s.synchronize()?;
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn new(device: &Device) -> Graph {
        Graph {
            device: device.clone(),
            def: Arc::new(GraphDef::new()),
        }
    }

    pub(crate) fn add(
        &mut self,
        work: BuildWork,
        deps: &[GraphNodeId],
        site: Site,
    ) -> Result<GraphNodeId> {
        // The node's label is worded only for the error (it cost a third of adding a node).
        let deps = self.indices_for(deps, || crate::core::graphs::def::label(&work))?;
        let index = Arc::make_mut(&mut self.def).add(work, deps, site)?;
        Ok(self.node_id(index))
    }

    /// The indices of `nodes`, each checked to be a node of this graph (GR8: a node of
    /// another graph is refused whatever its index; `what` names the node being added).
    pub(crate) fn indices(&self, nodes: &[GraphNodeId], what: &str) -> Result<Vec<usize>> {
        Ok(self.indices_for(nodes, || what.to_string())?.into_vec())
    }

    /// [`indices`](Self::indices), with the name of the node being added worded only for an
    /// error.
    fn indices_for(
        &self,
        nodes: &[GraphNodeId],
        what: impl FnOnce() -> String,
    ) -> Result<smallvec::SmallVec<[usize; 2]>> {
        match nodes.iter().find(|n| n.graph != self.def.id) {
            Some(n) => Err(Error::Graph(format!(
                "{} names node {} of another graph: a node id belongs to the graph that \
                 returned it (and to that graph's copies)",
                what(),
                n.index
            ))),
            None => {
                // Pushed one by one: collecting into the small vector cost ~60 instructions a
                // node, a tenth of adding a kernel node.
                let mut out = smallvec::SmallVec::new();
                for n in nodes {
                    out.push(n.index);
                }
                Ok(out)
            }
        }
    }

    /// `node`'s index if it is a node of this graph.
    fn own(&self, node: GraphNodeId) -> Option<usize> {
        (node.graph == self.def.id && node.index < self.def.nodes.len()).then_some(node.index)
    }

    fn add_op(&mut self, deps: &[GraphNodeId], work: Work, site: Site) -> Result<GraphNodeId> {
        // One `make_mut` a node (a locked instruction), after the dependencies are checked.
        let deps = self.indices_for(deps, || crate::core::graphs::def::op_label(&work))?;
        let index = Arc::make_mut(&mut self.def).add_op(work, deps, site)?;
        Ok(self.node_id(index))
    }

    fn check_mem(&self, m: &MemRef, call: &str) -> Result<()> {
        self.check_mem_named(m, call, "buffer")
    }

    /// [`check_mem`](Self::check_mem) for memory the message names `what` (a copy's
    /// source or destination).
    fn check_mem_named(&self, m: &MemRef, call: &str, what: &str) -> Result<()> {
        if m.alloc.device_id != self.device.id() {
            return Err(Error::InvalidHandle(format!(
                "Graph::{call}: the {what} belongs to another device than the graph's"
            )));
        }
        Ok(())
    }

    #[track_caller]
    fn copy(
        &mut self,
        deps: &[GraphNodeId],
        dst: MemRef,
        src: MemRef,
        call: &str,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        self.check_mem_named(&dst, call, "destination")?;
        self.check_mem_named(&src, call, "source")?;
        if dst.len != src.len {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "Graph::{call}: destination is {} bytes but source is {} bytes",
                    dst.len, src.len
                ),
            ));
        }
        if dst.overlaps(&src) {
            return Err(Error::bounds(
                "CP4",
                format!(
                    "Graph::{call}: source bytes {:?} and destination bytes {:?} of one \
                     allocation overlap",
                    src.range(),
                    dst.range()
                ),
            ));
        }
        self.add_op(deps, Work::Copy { dst, src }, site)
    }

    /// A kernel node (cudaGraphAddKernelNode): `kernel` with `config` and `args`, checked as
    /// [`Stream::launch`](crate::Stream::launch) checks them.
    #[track_caller]
    pub fn add_kernel(
        &mut self,
        deps: &[GraphNodeId],
        kernel: &Kernel,
        config: LaunchConfig,
        args: KernelArgs,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        let launch = kernel.launch_record(&self.device, config, args)?;
        self.add_op(deps, Work::Launch(launch), site)
    }

    /// A host-to-device copy node from pinned or pageable ([`PageableBuffer`](crate::PageableBuffer))
    /// memory (cudaGraphAddMemcpyNode).
    #[track_caller]
    pub fn add_copy_h2d<'a, T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        dst: &DeviceBuffer<T>,
        src: impl Into<PinnedSlice<'a, T>>,
    ) -> Result<GraphNodeId> {
        self.copy(deps, dst.mem(), src.into().mem(), "add_copy_h2d")
    }

    /// A device-to-host copy node into pinned or pageable memory (cudaGraphAddMemcpyNode).
    #[track_caller]
    pub fn add_copy_d2h<'a, T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        dst: impl Into<PinnedSliceMut<'a, T>>,
        src: &DeviceBuffer<T>,
    ) -> Result<GraphNodeId> {
        self.copy(deps, dst.into().mem(), src.mem(), "add_copy_d2h")
    }

    /// A device-to-device copy node (cudaGraphAddMemcpyNode).
    #[track_caller]
    pub fn add_copy_d2d<T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        dst: &DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<GraphNodeId> {
        self.copy(deps, dst.mem(), src.mem(), "add_copy_d2d")
    }

    /// A host-to-host copy node between pinned or pageable buffers (cudaGraphAddMemcpyNode).
    #[track_caller]
    pub fn add_copy_h2h<'a, 'b, T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        dst: impl Into<PinnedSliceMut<'a, T>>,
        src: impl Into<PinnedSlice<'b, T>>,
    ) -> Result<GraphNodeId> {
        self.copy(deps, dst.into().mem(), src.into().mem(), "add_copy_h2h")
    }

    /// A memset node setting every byte of `dst` to `value` (cudaGraphAddMemsetNode).
    #[track_caller]
    pub fn add_memset<T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        dst: &DeviceBuffer<T>,
        value: u8,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        let dst = dst.mem();
        self.check_mem(&dst, "add_memset")?;
        self.add_op(deps, Work::Memset { dst, value }, site)
    }

    /// A host node running `f` at every launch (cudaGraphAddHostNode); as for
    /// [`Stream::host_fn`](crate::Stream::host_fn), `f` must not call cueflow (HF2).
    #[track_caller]
    pub fn add_host(
        &mut self,
        deps: &[GraphNodeId],
        f: impl Fn() + Send + Sync + 'static,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        let call =
            crate::backend::contract::op::HostCall::new(crate::core::streams::hostfn::guarded(f));
        self.add_op(deps, Work::HostFn(Box::new(call)), site)
    }

    /// A host node over pinned buffers (HF3), run at every launch: declare what it reads
    /// and writes on the returned [`GraphHostTask`], then give it its body. Its accesses are
    /// the graph's like any node's (AC1, MM3).
    pub fn add_host_task(
        &mut self,
        deps: &[GraphNodeId],
        name: impl Into<String>,
    ) -> GraphHostTask<'_> {
        GraphHostTask {
            graph: self,
            deps: deps.to_vec(),
            name: name.into(),
            accesses: Vec::new(),
        }
    }

    /// An empty node (cudaGraphAddEmptyNode): an ordering point.
    #[track_caller]
    pub fn add_empty(&mut self, deps: &[GraphNodeId]) -> Result<GraphNodeId> {
        self.add(BuildWork::empty(), deps, Location::caller())
    }

    /// An event record node (cudaGraphAddEventRecordNode). At each launch `event` captures
    /// the nodes this one depends on (transitively) and the stream's work before the launch,
    /// and completes when they did, while the rest of the graph may still run (GR8): work
    /// that waits on it is ordered after those nodes only.
    #[track_caller]
    pub fn add_event_record(&mut self, deps: &[GraphNodeId], event: &Event) -> Result<GraphNodeId> {
        self.check_event(event, "add_event_record")?;
        self.add(
            BuildWork::Record(event.inner.clone()),
            deps,
            Location::caller(),
        )
    }

    /// An event wait node (cudaGraphAddEventWaitNode). At each launch the nodes that depend
    /// on this one (transitively) wait until what `event` captured when the launch was
    /// enqueued completed; the graph's other nodes start without waiting (GR8).
    #[track_caller]
    pub fn add_event_wait(&mut self, deps: &[GraphNodeId], event: &Event) -> Result<GraphNodeId> {
        self.check_event(event, "add_event_wait")?;
        self.add(
            BuildWork::Wait(event.inner.clone()),
            deps,
            Location::caller(),
        )
    }

    fn check_event(&self, event: &Event, call: &str) -> Result<()> {
        if !event.device().same(&self.device) {
            return Err(Error::InvalidHandle(format!(
                "Graph::{call}: the event belongs to another device than the graph's"
            )));
        }
        Ok(())
    }

    /// A child graph node (cudaGraphAddChildGraphNode): a copy of `child` — captured or built
    /// — that runs as one node. A child may not hold memory nodes, as in CUDA.
    #[track_caller]
    pub fn add_child(&mut self, deps: &[GraphNodeId], child: &Graph) -> Result<GraphNodeId> {
        if !child.device.same(&self.device) {
            return Err(Error::InvalidHandle(
                "Graph::add_child: the child graph belongs to another device".into(),
            ));
        }
        self.add(
            BuildWork::Child(child.def.clone()),
            deps,
            Location::caller(),
        )
    }

    /// The graph of child-graph node `node`, if it is one (cudaGraphChildGraphNodeGetGraph).
    pub fn child_graph(&self, node: GraphNodeId) -> Option<Graph> {
        match &self.def.nodes.get(self.own(node)?)?.work {
            BuildWork::Child(c) => Some(Graph {
                device: self.device.clone(),
                def: c.clone(),
            }),
            _ => None,
        }
    }

    /// A memory allocation node of `len` elements (cudaGraphAddMemAllocNode, GR7): the buffer
    /// is usable by this graph's nodes ordered after the node (and before its free node). Its
    /// address is the instantiation's (0 until the graph is instantiated; CUDA gives it when
    /// the node is added). Without a free node in the graph, each launch hands the memory to
    /// the program (GR10): the buffer's handles hold it, and when the last is dropped it is
    /// freed after the work that used it.
    #[track_caller]
    pub fn add_alloc<T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        len: usize,
    ) -> Result<(GraphNodeId, DeviceBuffer<T>)> {
        let site = Location::caller();
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "graph memory",
                bytes: usize::MAX,
            })?;
        let device_id = self.device.id();
        let deps = self.indices(deps, "an allocation node")?;
        let (node, mem) = Arc::make_mut(&mut self.def).add_alloc(bytes, device_id, &deps, site)?;
        Ok((
            self.node_id(node),
            DeviceBuffer::from_alloc(&self.device, mem, len),
        ))
    }

    /// A memory free node (cudaGraphAddMemFreeNode) for `buf`: memory an allocation node of
    /// this graph allocated (GR7), or memory another graph's allocation node hands out (GR10:
    /// that graph must be instantiated before this one, and each launch of this one must
    /// follow one of that one).
    #[track_caller]
    pub fn add_free<T: Pod>(
        &mut self,
        deps: &[GraphNodeId],
        buf: &DeviceBuffer<T>,
    ) -> Result<GraphNodeId> {
        let site = Location::caller();
        let mem = buf.mem();
        if let Some(slot) = self.def.slot_of(&mem.alloc) {
            return self.add(BuildWork::free(slot), deps, site);
        }
        if mem.alloc.graph_slot.is_none() {
            return Err(Error::InvalidHandle(
                "Graph::add_free: the buffer was not allocated by a graph's allocation node \
                 (GR7, GR10)"
                    .into(),
            ));
        }
        // GR10: memory another graph hands out; its instantiation must exist by the time this
        // graph is instantiated. The node holds the memory as the program's buffers do (the
        // memory is not freed for the program while a graph can still free it).
        let hold = crate::core::graphs::mem::holder(&mem.alloc);
        let node = self.add(BuildWork::free_other(mem.alloc), deps, site)?;
        Arc::make_mut(&mut self.def).keep.push(hold);
        Ok(node)
    }

    /// Add the edge `from` → `to` (cudaGraphAddDependencies). An edge that closes a cycle is
    /// refused when the graph is instantiated (GR8).
    pub fn add_dependency(&mut self, from: GraphNodeId, to: GraphNodeId) -> Result<()> {
        let ends = self.indices(&[from, to], "an edge")?;
        Arc::make_mut(&mut self.def).add_edge(ends[0], ends[1])
    }

    /// The nodes `node` depends on (cudaGraphNodeGetDependencies); none for a node of
    /// another graph.
    pub fn dependencies(&self, node: GraphNodeId) -> Vec<GraphNodeId> {
        self.own(node)
            .map(|i| {
                let deps = &self.def.nodes[i].deps;
                deps.iter().map(|&d| self.node_id(d)).collect()
            })
            .unwrap_or_default()
    }

    /// The nodes that depend on `node` (cudaGraphNodeGetDependentNodes); none for a node of
    /// another graph.
    pub fn dependents(&self, node: GraphNodeId) -> Vec<GraphNodeId> {
        let Some(node) = self.own(node) else {
            return Vec::new();
        };
        (0..self.def.nodes.len())
            .filter(|&i| self.def.nodes[i].deps.contains(&node))
            .map(|i| self.node_id(i))
            .collect()
    }

    /// The graph as a Graphviz (DOT) diagram, as `cudaGraphDebugDotPrint` writes one: a
    /// vertex per node with its index and what it does, an arrow per dependency, child graphs
    /// as clusters (GR8).
    pub fn to_dot(&self) -> String {
        crate::core::graphs::dot::to_dot(&self.def)
    }

    /// Write [`to_dot`](Self::to_dot) to `path` (cudaGraphDebugDotPrint).
    pub fn write_dot(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        std::fs::write(path.as_ref(), self.to_dot()).map_err(|e| {
            Error::InvalidHandle(format!(
                "Graph::write_dot to {}: {e}",
                path.as_ref().display()
            ))
        })
    }
}

/// A host node over pinned buffers being described ([`Graph::add_host_task`]): as
/// [`HostTask`](crate::HostTask), but run at every launch of the graph, so its body is `Fn`.
#[must_use = "nothing is added until `run`"]
pub struct GraphHostTask<'g> {
    graph: &'g mut Graph,
    deps: Vec<GraphNodeId>,
    name: String,
    accesses: Vec<(MemRef, Access)>,
}

impl GraphHostTask<'_> {
    /// The node reads `buf`: [`HostIo::read`] with this declaration's index.
    pub fn reads<'b, T: Pod>(mut self, buf: impl Into<PinnedSlice<'b, T>>) -> Self {
        self.accesses.push((buf.into().mem(), Access::Read));
        self
    }

    /// The node writes (and may read) `buf`: [`HostIo::write`] with this declaration's index.
    pub fn writes<'b, T: Pod>(mut self, buf: impl Into<PinnedSlice<'b, T>>) -> Self {
        self.accesses.push((buf.into().mem(), Access::Write));
        self
    }

    /// Add the node with its body. Refused as [`HostTask::run`](crate::HostTask::run) refuses:
    /// a buffer of another device, device memory, written ranges that overlap another.
    #[track_caller]
    pub fn run(self, f: impl Fn(HostIo<'_>) + Send + Sync + 'static) -> Result<GraphNodeId> {
        let site = Location::caller();
        let graph = self.graph;
        check_host_accesses(&self.name, &self.accesses, |m| {
            graph.check_mem(m, "add_host_task")
        })?;
        let call = repeatable_host_call(self.name, self.accesses, f);
        let deps = self.deps;
        graph.add_op(&deps, Work::HostFn(Box::new(call)), site)
    }
}
