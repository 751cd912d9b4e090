//! A device, its streams and its graphs as a backend provides them, and the completion signals
//! that order work across streams (the rules are in the [module docs](super)).

use super::downcast::AsAny;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use super::comm::BackendComm;
use super::event::BackendEvent;
use super::graph::GraphNode;
use super::memory::Allocation;
use super::op::Op;
use super::trace::TraceSlot;
use crate::error::{Error, Result};
use crate::types::EventFlags;
use crate::types::{
    DeviceProperties, PinnedFlags, PoolStats, StreamDesc, StreamKind, SyncMode, DEFAULT_QUEUE_DEPTH,
};

/// The queue depth a new device starts with: `CUEFLOW_QUEUE_DEPTH`, else
/// [`DEFAULT_QUEUE_DEPTH`].
pub(crate) fn initial_queue_depth() -> usize {
    crate::config::queue_depth().unwrap_or(DEFAULT_QUEUE_DEPTH)
}

/// How a backend executes, as far as core's rules depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// The device's engines are threads of this process working on its own memory: two
    /// conflicting accesses must never run at once there (AC6), so core orders them.
    pub shares_host_memory: bool,
    /// Operation times are written on the host clock (a [`TraceSlot`]'s nanoseconds); without
    /// it, they come as timing events that a trace anchors with an event of its own.
    pub host_clock_times: bool,
    /// Every open makes a new, independent device, whatever its ordinal (host:N); without it,
    /// two opens of one ordinal are the same hardware.
    pub independent_opens: bool,
    /// Kernels and external operations run their host side (Rust closures on this machine's
    /// threads); without it, their CUDA side.
    pub runs_host_code: bool,
    /// A kernel can write through an argument declared read-only unseen, so with the
    /// sanitizer on the backend checks such arguments' bytes around the kernel when core
    /// hands it an `Op::read_check` (AC7, CUDA); without it, the backend stops such a write
    /// where it happens or none can happen (the host backend), and core hands it none.
    pub checks_reads_after: bool,
}

/// The completion of one submitted operation, which later work on any stream of the device can
/// be made to wait for (contract rule 7).
pub(crate) trait DoneSignal: AsAny + Send + Sync + 'static {
    /// True once the operation completed. Never blocks.
    fn is_done(&self) -> bool;
    /// True if the operation is known to have completed without asking the device (a
    /// query or wait already saw it): what a caller that waits for pending work anyway
    /// checks, sparing a query the wait makes redundant. Never blocks.
    fn known_done(&self) -> bool {
        self.is_done()
    }
    /// The backend's own signal this one stands for, once there is one: core hands out a
    /// completion for work it holds back (automatic graphs, SPEC AG5) before the work reaches
    /// the backend, and fills it in when the work is issued. `None` for a backend's own.
    fn forward(&self) -> Option<&Done> {
        None
    }
    /// Block this thread until the operation completed: how a backend honours a completion of
    /// another backend's device (rule 7), which its own queues cannot wait for (portable pinned
    /// memory, HM2, is used by streams of devices of both backends).
    fn wait_here(&self) {
        let mut polls = 0u32;
        while !self.is_done() {
            if polls < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            polls = polls.saturating_add(1);
        }
    }
}

/// A shared completion signal.
pub(crate) type Done = Arc<dyn DoneSignal>;

/// What a backend downcasts a completion to: the signal `done` forwards to, or `done` itself
/// ([`DoneSignal::forward`]). Core issues held work before any call that hands its
/// completions to a backend, so a forwarding signal is always filled in by then.
#[inline]
pub(crate) fn done_target(done: &Done) -> &dyn Any {
    match done.forward() {
        Some(real) => real.as_any(),
        None => done.as_any(),
    }
}

/// An instantiated graph as a backend provides it (GR3, GR6): launched through
/// [`BackendStream::launch_graph`].
pub(crate) trait BackendGraph: AsAny + Send + Sync + 'static {
    /// Give node `node` (an operation node) the operation `op`, whose shape core checked
    /// against the node's (GR6). Launches already enqueued keep what they had.
    fn update(&self, node: usize, op: &Op) -> Result<()>;
    /// Whether [`update`](Self::update) would refuse `op` at `node` for a reason of the
    /// backend's own (CUDA: a memcpy node keeps its memory's contexts): asked of every changed
    /// node before any changes, so a refused update leaves the graph as it was (GR6).
    fn check_update(&self, _node: usize, _op: &Op) -> Result<()> {
        Ok(())
    }
    /// The memory this instantiation gives allocation slot `slot` (GR7, GR10): what a stream
    /// uses and frees when the graph's allocation outlives the launch.
    fn slot_memory(&self, slot: usize) -> Option<Arc<Allocation>> {
        let _ = slot;
        None
    }
    /// Give event record or wait node `node` the event `event` (GR6). Launches already
    /// enqueued keep what they had.
    fn set_event(&self, node: usize, event: &Arc<dyn BackendEvent>) -> Result<()>;
    /// Let go of the memory of operation node `node` past the launches enqueued so far (they
    /// keep theirs): its caller gives the node its operation again ([`update`](Self::update))
    /// before any later launch. A backend that runs the node's operation itself keeps it.
    fn release(&self, node: usize) {
        let _ = node;
    }
}

/// Completions that some nodes of a graph launch start after (contract rule 7 per node, AC5,
/// AC6): each of `nodes` waits for all of `after`. A backend may make the whole launch wait
/// for them instead.
pub(crate) struct NodesAfter {
    pub nodes: Vec<usize>,
    pub after: Vec<Done>,
}

/// What a graph launch hands back (GR3, GR8).
pub(crate) struct GraphLaunched {
    /// The launch's completion, when asked for.
    pub done: Option<Done>,
    /// The completion of each event record node of this launch, in node order: it completes
    /// when the node's dependencies did (and with them the work the stream had before the
    /// launch), whatever else of the graph still runs.
    pub records: Vec<Done>,
}

/// How a graph is instantiated (cudaGraphInstantiateFlags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GraphFlags {
    /// Free what the previous launch allocated and nothing freed, at the next launch
    /// (cudaGraphInstantiateFlagAutoFreeOnLaunch, GR10).
    pub auto_free_on_launch: bool,
    /// The caller does not use [`GraphLaunched::records`] (automatic graphs): a backend may
    /// skip what it adds to a record node to complete it by itself (CUDA: a second record
    /// node of its own event per record node).
    pub no_record_completions: bool,
}

/// A device as a backend provides it.
pub(crate) trait Backend: AsAny + Send + Sync + 'static {
    fn properties(&self) -> &DeviceProperties;
    /// Free and total device memory in bytes (DV1, `cuMemGetInfo`).
    fn mem_info(&self) -> Result<(u64, u64)>;
    /// How host threads wait for this device from now on (DV2). Core calls it only before the
    /// device's first work.
    fn set_sync_mode(&self, mode: SyncMode) -> Result<()>;
    /// Stop kernels that run longer than `limit` (`None`: no limit) with the device's sticky
    /// fault (HK4). The default refuses: a backend that cannot stop a running kernel says so.
    fn set_kernel_timeout(&self, limit: Option<std::time::Duration>) -> Result<()> {
        let _ = limit;
        Err(crate::error::Error::Unsupported(
            "a kernel time limit on this backend: a kernel running on a GPU cannot be stopped \
             (HK4 is the host backend's)"
                .into(),
        ))
    }
    /// Compile and load `kernel` for this device now (KC2), so its first launch costs what a
    /// later one does. The default does nothing (nothing to load).
    fn prepare_kernel(&self, kernel: &std::sync::Arc<super::kernel::KernelInner>) -> Result<()> {
        let _ = kernel;
        Ok(())
    }
    /// How this device runs `kernel`'s threads from its CUDA C on the host
    /// ([`HostPath`](crate::types::HostPath)), compiling it if needed; `None` when it does not
    /// run CUDA C on the host (a closure, or another backend). The default: `None`.
    fn host_path(
        &self,
        kernel: &std::sync::Arc<super::kernel::KernelInner>,
    ) -> Result<Option<crate::types::HostPath>> {
        let _ = kernel;
        Ok(None)
    }
    /// The device's legacy default stream.
    fn legacy_stream(&self) -> Arc<dyn BackendStream>;
    fn create_stream(&self, desc: StreamDesc) -> Result<Arc<dyn BackendStream>>;
    fn create_event(&self, flags: EventFlags) -> Result<Arc<dyn BackendEvent>>;
    /// Synchronous device allocation.
    fn alloc_device(&self, bytes: usize) -> Result<Arc<Allocation>>;
    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<Arc<Allocation>>;
    /// Page-lock `bytes` of memory the program owns at `ptr` for the life of the returned
    /// allocation (HM1, `cuMemHostRegister`): its release unregisters the range, then drops
    /// `owner` (which may own the memory). Core has checked that no registration overlaps.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` stays valid, and is touched by nobody but the holders of the
    /// allocation, until the release ran.
    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: PinnedFlags,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Arc<Allocation>>;
    /// Managed memory valid on the host and on every device (HM4, `cuMemAllocManaged`),
    /// attached as `attach` says (global or host). Zeroed.
    fn alloc_managed(
        &self,
        bytes: usize,
        attach: crate::types::AttachMode,
    ) -> Result<Arc<Allocation>>;
    /// The device side of a stream operation on managed memory `mem` (HM4), run as an
    /// external operation's CUDA side; `None` where the operation changes nothing but speed
    /// (the host backend, whose memory is all host memory).
    fn managed_side(
        &self,
        mem: &super::memory::MemRef,
        op: crate::types::ManagedOp,
    ) -> Result<Option<super::op::ExternalCuda>>;
    /// Apply `advice` to managed memory `mem` for this device (HM4, `cuMemAdvise`).
    fn advise(&self, mem: &super::memory::MemRef, advice: crate::types::Advice) -> Result<()>;
    /// The device's default stream-ordered pool (HM5).
    fn default_pool(&self) -> Arc<dyn super::pool::BackendPool>;
    /// A new pool of this device's memory (HM5, `cuMemPoolCreate`).
    fn create_pool(&self) -> Result<Arc<dyn super::pool::BackendPool>>;
    /// Host memory the copy engines can reach, for staging pageable copies (CP3); need not be
    /// zeroed.
    fn alloc_staging(&self, bytes: usize) -> Result<Arc<Allocation>>;
    /// Block until `done` completed (then check the sticky error).
    fn wait_done(&self, done: &Done) -> Result<()>;
    /// True if this device reaches `other`'s memory directly (MD3).
    fn can_access_peer(&self, other: &dyn Backend) -> bool;
    /// Turn on the direct path between this device and `other` (both directions): `Ok(true)`
    /// when peer copies now go direct, `Ok(false)` when they are staged (MD3).
    fn enable_peer(&self, other: &dyn Backend) -> Result<bool>;
    /// Members of a new communicator over `devices` (this backend's kind, one per device,
    /// rank = position), waiting at most `deadline` for each other where the backend can
    /// (MD4).
    fn comm_group(
        &self,
        devices: &[&dyn Backend],
        deadline: Duration,
    ) -> Result<Vec<Arc<dyn BackendComm>>>;
    /// Member `rank` of `ranks` on this device, meeting the others (in any process) under `id`.
    fn comm_join(
        &self,
        id: &[u8],
        ranks: usize,
        rank: usize,
        deadline: Duration,
    ) -> Result<Arc<dyn BackendComm>>;
    /// A fresh id for [`comm_join`](Self::comm_join).
    fn comm_unique_id(&self) -> Result<Vec<u8>>;
    /// The driver context (CUDA's `CUcontext`), for interop; `None` on the host backend.
    fn raw_context(&self) -> Option<*mut std::ffi::c_void> {
        None
    }
    /// Wrap a stream created elsewhere (CUDA: a `CUstream` of this device's context), without
    /// taking it over: it is not destroyed with the wrapper. Returns its kind and priority.
    /// `owner`, when given, is what keeps the raw stream alive (another library's handle on
    /// it): kept until the wrapper is done with the raw stream, then dropped where driver
    /// calls are allowed, and lent by [`BackendStream::lend`].
    fn adopt_stream(
        &self,
        raw: *mut std::ffi::c_void,
        owner: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Result<(Arc<dyn BackendStream>, StreamKind, i32)> {
        let _ = (raw, owner);
        Err(Error::Unsupported(
            "this backend's streams have no raw handle to adopt".into(),
        ))
    }
    /// The driver context for another library that makes it current on the threads cueflow
    /// uses too (cudarc binds its context before each call): from now on the backend asks
    /// which context is current instead of trusting the one it made current last. `None` on
    /// the host backend.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    fn share_context(&self) -> Option<*mut std::ffi::c_void> {
        None
    }
    /// How an object that frees what it owns with driver calls (a cudarc `CudaSlice` an
    /// adopted allocation keeps) is dropped: where driver calls are allowed, never inside one
    /// of this backend's host functions. The default drops it at once.
    fn owner_drop(&self) -> crate::types::OwnerDrop {
        drop
    }
    /// Enqueue the parts of one collective call made for several members of this process at
    /// once, in rank order (MD4); returns each part's completion. The default enqueues them
    /// one by one, which suits backends whose members never block each other at enqueue;
    /// NCCL needs them in one group.
    fn submit_group(&self, parts: Vec<GroupPart>) -> Result<Vec<Option<Done>>> {
        parts
            .into_iter()
            .map(|p| p.stream.submit(p.op, &p.after, p.want_done))
            .collect()
    }
    /// What core must know of how this backend executes, instead of asking its name.
    fn capabilities(&self) -> Capabilities;
    /// Instantiate captured nodes (GR3): dependencies are indices of earlier nodes — on a
    /// device whose engines share the host's memory, with the extra ones core adds so that
    /// conflicting nodes never run at once (AC6) — and memory a capture allocated is a
    /// placeholder for each instantiation to map (GR7, see
    /// [`resolve`](super::graph::resolve)).
    fn instantiate_graph(
        &self,
        nodes: &[GraphNode],
        flags: GraphFlags,
    ) -> Result<Arc<dyn BackendGraph>>;
    /// Block until all work on every stream of the device is done (ST9).
    fn synchronize(&self) -> Result<()>;
    /// Let go of what work the device finished still holds, without waiting for any work:
    /// a backend that keeps finished operations until it next looks (CUDA's keepalive
    /// queues) looks now. Orders nothing (HM1: another device's unregister).
    fn retire_finished(&self) -> Result<()> {
        Ok(())
    }
    /// The sticky error, if the device is poisoned (ER2).
    fn sticky_error(&self) -> Option<Error>;
    /// [`sticky_error`](Self::sticky_error) as something work may hold and call from any
    /// thread, a host function's included: holding it keeps no device alive and dropping it
    /// makes no driver call (a stream callback's status, HF4).
    fn sticky_probe(&self) -> crate::types::StickyProbe;
    /// Host-clock nanoseconds on the clock that traces and host timestamps use.
    fn now_ns(&self) -> u64;
    /// Bound the work pending on each stream of the device to `ops` submissions (RL1): at the
    /// bound a submission waits for the stream's oldest work.
    fn set_queue_depth(&self, ops: usize);
    /// The bound of [`set_queue_depth`](Self::set_queue_depth).
    fn queue_depth(&self) -> usize;
    /// Bytes the device's stream-ordered pool holds from the system, where the backend keeps
    /// that count itself (HM5 statistics; the host backend's pool).
    fn pool_reserved(&self) -> Option<usize> {
        None
    }
    /// The device memory graph allocations take (GR12), as CUDA's graph memory attributes
    /// report it.
    fn graph_memory(&self) -> Result<PoolStats>;
    /// Start the high-water marks of [`graph_memory`](Self::graph_memory) again from now.
    fn reset_graph_memory_high(&self) -> Result<()>;
    /// Give back graph memory no graph allocation uses (GR12, `cudaDeviceGraphMemTrim`).
    fn trim_graph_memory(&self) -> Result<()>;
    /// Bytes of freed pinned memory the backend still holds, kept for reuse or not given back
    /// yet (RL3); `None` where it keeps none (the host backend).
    fn pinned_cached(&self) -> Option<usize> {
        None
    }
    /// Driver calls the calling thread made so far, and (`log`) their names since the last
    /// call that asked, logging on from now until a call with `log` false; `None` where there
    /// is no driver (the host backend).
    fn driver_calls(&self, log: bool) -> Option<(u64, Vec<&'static str>)> {
        let _ = log;
        None
    }
}

/// A stream as a backend provides it.
pub(crate) trait BackendStream: AsAny + Send + Sync + 'static {
    /// Enqueue one operation (ST1, ST3) after the completions `after` (rule 7). Core has
    /// validated it. With `want_done`, returns the operation's completion signal.
    fn submit(&self, op: Op, after: &[Done], want_done: bool) -> Result<Option<Done>>;
    /// Capture the stream's submitted work in `event` (EV1, EV2).
    fn record(&self, event: &Arc<dyn BackendEvent>) -> Result<()>;
    /// Make later work wait for what `event` captured now (EV4). Never blocks the host.
    fn wait(&self, event: &Arc<dyn BackendEvent>) -> Result<()>;
    /// Make later work wait for `event` (contract rule 8): the wait is enqueued only before
    /// the stream's next enqueue, query or synchronize, or before its handle goes out, and
    /// waits for what `event` captured then. Core asks it where the event's later records are
    /// only ever ordered before the stream's later work anyway (an automatic graph's join,
    /// AG3), so that a stream given nothing new costs no call. The default waits now.
    fn wait_later(&self, event: &Arc<dyn BackendEvent>) -> Result<()> {
        self.wait(event)
    }
    /// Enqueue one launch of `graph` (GR3) after `after`, its nodes also after `nodes_after`,
    /// filling `trace` with its times; with `want_done`, returns the launch's completion, and
    /// always its record nodes'. Launches of one graph run in launch order. The launch's event
    /// record nodes capture their events now (EV2: later waits see this launch's records) and
    /// its wait nodes take what their events captured now, before this launch's own records
    /// (GR8).
    fn launch_graph(
        &self,
        graph: &Arc<dyn BackendGraph>,
        after: &[Done],
        nodes_after: Vec<NodesAfter>,
        want_done: bool,
        trace: Option<Arc<TraceSlot>>,
    ) -> Result<GraphLaunched>;
    /// Prepare `graph`'s launches ahead of time in this stream's order, running none of its
    /// nodes (GR3, `cudaGraphUpload`). The default: nothing to prepare (the host backend).
    fn upload_graph(&self, graph: &Arc<dyn BackendGraph>) -> Result<()> {
        let _ = graph;
        Ok(())
    }
    /// True when all submitted work is done (ST8).
    fn query(&self) -> Result<bool>;
    /// Block until all submitted work is done (ST9).
    fn synchronize(&self) -> Result<()>;
    /// MM1: allocate in stream order.
    fn alloc_async(&self, bytes: usize) -> Result<Arc<Allocation>>;
    /// MM1: give `alloc` back in stream order. The memory may be reused by later allocations on
    /// this stream at once and elsewhere once the free has executed, but never while another
    /// holder (an operation, a user view) still references it (MM2).
    fn free_async(&self, alloc: Arc<Allocation>) -> Result<()>;
    /// GR10: free, in stream order, memory a graph's allocation node allocated and the graph
    /// did not free (`alloc` is what [`BackendGraph::slot_memory`] gave). The memory stays the
    /// graph's: its next launch allocates it again.
    fn free_graph_memory(&self, alloc: &Arc<Allocation>) -> Result<()> {
        let _ = alloc;
        Ok(())
    }
    /// A number that changes whenever work, a wait (a later one too) or memory is enqueued on
    /// the stream (by any call of this trait, a collective or anything given the raw handle);
    /// `None` where the backend cannot tell (the default; a stream whose raw handle went out).
    /// Automatic graphs skip the fork of a stream whose number did not change since it joined
    /// their last launch (AG3: it has nothing the launch is not already ordered after).
    fn enqueued(&self) -> Option<u64> {
        None
    }
    /// The driver's stream handle (CUDA's `CUstream`), for interop; `None` on the host backend.
    fn raw_handle(&self) -> Option<*mut std::ffi::c_void> {
        None
    }
    /// This stream as another library holds it (a cudarc `CudaStream` that does not own the
    /// raw stream): what `make` builds from the raw handle, made once and kept with the stream;
    /// a stream adopted with an owner lends that owner. When the stream is dropped while
    /// something else still holds what it lent, the raw stream outlives it: it is destroyed
    /// once nothing but the stream's own reference is left. `None` where nothing can be lent
    /// (the host backend; a raw stream adopted without an owner, whose lifetime is the
    /// caller's).
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    fn lend(
        &self,
        make: &mut dyn FnMut(*mut std::ffi::c_void) -> Arc<dyn Any + Send + Sync>,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let _ = make;
        None
    }
}

/// One member's part of a group call, past core's checks and tracking: its op (a
/// [`Work::Collective`](super::op::Work::Collective)) for its stream, after `after`.
pub(crate) struct GroupPart {
    pub stream: Arc<dyn BackendStream>,
    pub op: Op,
    pub after: Vec<Done>,
    pub want_done: bool,
}
