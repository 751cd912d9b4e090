//! The host backend: a device made of real threads, so overlap is real and measurable on any
//! machine, and every GPU program can be tested without a GPU.

mod affinity;
pub(crate) mod collective;
mod conditional;
pub(crate) mod cuda_c;
pub(crate) mod cxx;
mod exec;
mod graph;
mod graph_walk;
pub(crate) mod isolate;
mod kernel;
#[cfg(all(test, loom))]
mod loom_models;
mod memory;
mod pool;
mod registered;
mod sched;
mod sched_node;
mod serial;
mod stream;
mod sync;
mod sysinfo;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::memory::{host_alloc, Pool};
use self::sched::Scheduler;
use self::stream::{HostEvent, HostStream, Order};
use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::device::done_target;
use crate::backend::contract::device::{Backend, BackendGraph, BackendStream, Capabilities, Done};
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::GraphNode;
use crate::backend::contract::kernel::KernelInner;
use crate::backend::contract::memory::{Allocation, HostMem, MemRef};
use crate::backend::contract::op::ExternalCuda;
use crate::backend::contract::pool::BackendPool;
use crate::error::{Error, Result};
use crate::types::EventFlags;
use crate::types::ManagedOp;
use crate::types::{Advice, AttachMode};
use crate::types::{ComputeMode, DeviceProperties, PinnedFlags, StreamDesc, StreamKind, SyncMode};
use crate::types::{MemKind, PoolStats};

crate::backend::contract::downcast::as_any!(HostBackend);

/// Priority range of host streams; the same as CUDA's on an H100 so programs port unchanged.
pub(crate) const PRIORITY_LEAST: i32 = 0;
/// Most urgent host priority.
pub(crate) const PRIORITY_GREATEST: i32 = -5;

pub(crate) struct HostBackend {
    props: DeviceProperties,
    sched: Arc<Scheduler>,
    order: Arc<Mutex<Order>>,
    pool: Arc<Pool>,
    legacy: Arc<HostStream>,
    device_id: u64,
    /// Queue depth of every stream (RL1).
    depth: Arc<AtomicUsize>,
    /// The process that runs this device's compiled kernels (HK3), started on first use; the
    /// scheduler's engine threads share it (the CUDA-C launch path).
    worker: Arc<isolate::WorkerSlot>,
    /// The blocks instantiations hold for graph memory (GR12).
    graph_mem: Arc<memory::GraphMemCount>,
}

impl HostBackend {
    /// Open host device `ordinal` with `workers` compute workers (0: one per available core).
    pub fn open(device_id: u64, ordinal: usize, workers: usize) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // Default: one worker per core, but on larger machines leave two cores to the copy
        // engines and the submitting thread (with every core a worker, copies starve).
        let default = if cores > 4 { cores - 2 } else { cores.max(2) };
        let workers = if workers == 0 { default } else { workers } as u32;
        let name = if ordinal == 0 {
            format!("host ({workers} compute workers)")
        } else {
            format!("host:{ordinal} ({workers} compute workers)")
        };
        // Errors name the device with its index (DV3), whatever its display name.
        let worker = Arc::new(isolate::WorkerSlot::new(device_id, workers as usize));
        let copy_engines = affinity::copy_engines(workers);
        let sched = Scheduler::start(
            format!("host:{ordinal} ({workers} compute workers)"),
            workers,
            copy_engines,
            worker.clone(),
        )?;
        let order = Arc::new(Mutex::new(Order::default()));
        let pool = Pool::new(device_id);
        let depth = Arc::new(AtomicUsize::new(
            crate::backend::contract::device::initial_queue_depth(),
        ));
        let legacy = HostStream::new(
            sched.clone(),
            order.clone(),
            pool.clone(),
            StreamDesc {
                kind: StreamKind::Legacy,
                priority: PRIORITY_LEAST,
            },
            depth.clone(),
        );
        let props = DeviceProperties {
            name,
            backend: "host",
            ordinal,
            compute_capability: (9, 0),
            async_engines: copy_engines,
            compute_units: workers,
            warp_size: 32,
            priority_least: PRIORITY_LEAST,
            priority_greatest: PRIORITY_GREATEST,
            total_memory: total_memory(),
            total_constant_memory: 64 * 1024,
            max_threads_per_block: 1024,
            max_block: [1024, 1024, 64],
            max_grid: [i32::MAX as u32, 65535, 65535],
            max_threads_per_multiprocessor: 2048,
            shared_per_block: 48 * 1024,
            max_shared_per_block: 48 * 1024,
            shared_per_multiprocessor: 228 * 1024,
            registers_per_block: 65536,
            clock_rate_khz: sysinfo::cpu_khz().unwrap_or(1_000_000),
            memory_clock_rate_khz: 0,
            memory_bus_width: 0,
            l2_cache_size: sysinfo::l2_bytes().unwrap_or(0),
            concurrent_kernels: true,
            can_map_host_memory: true,
            managed_memory: true,
            concurrent_managed_access: true,
            unified_addressing: true,
            integrated: true,
            pci_ids: (0, 0, 0),
            memory_pools: true,
            max_parameter_bytes: 32_764,
            driver_version: 13_000,
            nvrtc_version: None,
            driver_features: Vec::new(),
            compute_mode: ComputeMode::Default,
        };
        Ok(HostBackend {
            props,
            sched,
            order,
            pool,
            legacy,
            device_id,
            depth,
            worker,
            graph_mem: Arc::default(),
        })
    }

    /// Let this device's compiled kernels reach device `peer`'s memory (A5).
    fn allow_peer(&self, peer: u64) {
        self.worker.allow_peer(peer);
    }

    /// The worker process that runs this device's compiled kernels (HK3): started on first
    /// use, one per device context, so a new device gets a fresh one.
    #[cfg_attr(not(test), allow(dead_code))] // the launch path reaches it through the slot
    pub(crate) fn kernel_worker(
        &self,
    ) -> std::result::Result<Arc<isolate::Worker>, isolate::WorkerFault> {
        self.worker.get()
    }

    /// `alloc`, and once more after the pool gave its idle memory back when the system was
    /// out of memory (RL3: after an out-of-memory error, freeing makes room for every kind
    /// of allocation, not only the pool's).
    fn or_trimmed(&self, alloc: impl Fn() -> Result<Arc<Allocation>>) -> Result<Arc<Allocation>> {
        match alloc() {
            Err(Error::OutOfMemory { .. }) => {
                self.pool.trim(0);
                alloc()
            }
            r => r,
        }
    }
}

fn total_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        pages as u64 * size as u64
    } else {
        0
    }
}

impl Drop for HostBackend {
    fn drop(&mut self) {
        // ST10/EV8: pending work still runs; the engines stop once it is done. With none left
        // they stop now and are joined, so devices opened and dropped in a loop never pile up
        // threads (RL2).
        self.sched.shut_down();
        self.sched.join_engines();
    }
}

impl Backend for HostBackend {
    fn set_kernel_timeout(&self, limit: Option<std::time::Duration>) -> Result<()> {
        self.worker.set_limit(limit);
        Ok(())
    }

    fn prepare_kernel(&self, kernel: &Arc<KernelInner>) -> Result<()> {
        if cuda_c::uses_c(kernel) {
            cuda_c::load(kernel)?;
        }
        Ok(())
    }

    fn host_path(&self, kernel: &Arc<KernelInner>) -> Result<Option<crate::types::HostPath>> {
        if cuda_c::uses_c(kernel) {
            return cuda_c::host_path(kernel).map(Some);
        }
        Ok(None)
    }

    fn properties(&self) -> &DeviceProperties {
        &self.props
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        let total = self.props.total_memory;
        Ok((
            sysinfo::available_bytes().unwrap_or(total).min(total),
            total,
        ))
    }

    fn set_sync_mode(&self, mode: SyncMode) -> Result<()> {
        self.sched.set_blocking_sync(mode == SyncMode::BlockingSync);
        Ok(())
    }

    fn legacy_stream(&self) -> Arc<dyn BackendStream> {
        self.legacy.clone()
    }

    fn create_stream(&self, desc: StreamDesc) -> Result<Arc<dyn BackendStream>> {
        if desc.kind == StreamKind::Legacy {
            return Err(Error::Unsupported(
                "a second legacy stream cannot be created".into(),
            ));
        }
        Ok(HostStream::new(
            self.sched.clone(),
            self.order.clone(),
            self.pool.clone(),
            desc,
            self.depth.clone(),
        ))
    }

    fn create_event(&self, flags: EventFlags) -> Result<Arc<dyn BackendEvent>> {
        Ok(Arc::new(HostEvent::new(self.sched.clone(), flags)))
    }

    fn alloc_device(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        self.or_trimmed(|| {
            host_alloc(
                bytes,
                MemKind::Device,
                self.device_id,
                false,
                HostMem::default(),
            )
        })
    }

    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        // Write-combining changes only speed on a GPU system; host memory is host memory.
        let host = HostMem {
            portable: flags.portable,
            mapped: flags.mapped,
            device_view: 0,
        };
        self.or_trimmed(|| host_alloc(bytes, MemKind::Pinned, self.device_id, true, host))
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: PinnedFlags,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        // SAFETY: forwarded from the caller (the range stays valid until the release).
        Ok(unsafe { registered::register(ptr, bytes, self.device_id, flags, owner) })
    }

    fn alloc_managed(&self, bytes: usize, _attach: AttachMode) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        // All memory of a host device is this process's memory: managed memory is pinned
        // memory that every device's streams and kernels may use.
        let host = HostMem {
            portable: true,
            mapped: true,
            device_view: 0,
        };
        self.or_trimmed(|| host_alloc(bytes, MemKind::Managed, self.device_id, false, host))
    }

    fn managed_side(&self, _mem: &MemRef, _op: ManagedOp) -> Result<Option<ExternalCuda>> {
        // Prefetching and attaching change where pages live and what a GPU without concurrent
        // managed access allows; here the memory is host memory already (a no-op, HM4).
        Ok(None)
    }

    fn advise(&self, _mem: &MemRef, _advice: Advice) -> Result<()> {
        self.sched.check() // Advice changes only speed: accepted, no effect (HM4).
    }

    fn default_pool(&self) -> Arc<dyn BackendPool> {
        self.pool.clone()
    }

    fn create_pool(&self) -> Result<Arc<dyn BackendPool>> {
        self.sched.check()?;
        let pool = Pool::new(self.device_id);
        self.pool.adopt(&pool);
        Ok(pool)
    }

    fn alloc_staging(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        self.or_trimmed(|| {
            host_alloc(
                bytes,
                MemKind::Pinned,
                self.device_id,
                false,
                HostMem::default(),
            )
        })
    }

    fn can_access_peer(&self, other: &dyn Backend) -> bool {
        // Every host device's memory is this process's memory.
        other.as_any().is::<HostBackend>()
    }

    fn enable_peer(&self, other: &dyn Backend) -> Result<bool> {
        let Ok(o) = downcast::<HostBackend, _>(other, "device") else {
            // A device of another backend: no direct path (core asks only within a backend).
            return Ok(false);
        };
        // Both directions (MD3): each device's compiled kernels may now reach the other's memory.
        self.allow_peer(o.device_id);
        o.allow_peer(self.device_id);
        Ok(true)
    }

    fn capabilities(&self) -> Capabilities {
        // The engines are this process's threads over its own heap (AC6), timed on the host
        // clock, and every open is a device of its own (MD1). A write through a read argument
        // cannot happen in a closure (it gets `&[T]`) and faults in the kernel worker, which
        // maps such arguments read-only (AC7); nothing is checked after a kernel (AC7 lists
        // the CUDA C launches in this process as not verified).
        Capabilities {
            shares_host_memory: true,
            host_clock_times: true,
            independent_opens: true,
            runs_host_code: true,
            checks_reads_after: false,
        }
    }

    fn comm_group(
        &self,
        devices: &[&dyn Backend],
        deadline: std::time::Duration,
    ) -> Result<Vec<Arc<dyn BackendComm>>> {
        Ok(collective::HostComm::group(devices.len(), deadline)
            .into_iter()
            .map(|m| Arc::new(m) as Arc<dyn BackendComm>)
            .collect())
    }

    fn comm_join(
        &self,
        id: &[u8],
        ranks: usize,
        rank: usize,
        deadline: std::time::Duration,
    ) -> Result<Arc<dyn BackendComm>> {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Arc::new(collective::HostComm::shared(
            &hex, ranks, rank, deadline,
        )))
    }

    fn comm_unique_id(&self) -> Result<Vec<u8>> {
        collective::unique_id()
    }

    fn instantiate_graph(
        &self,
        nodes: &[GraphNode],
        _flags: crate::backend::contract::device::GraphFlags,
    ) -> Result<Arc<dyn BackendGraph>> {
        // GR10: the graph's memory lives as long as the instantiation (and what a stream
        // still holds of it), so freeing at the next launch needs nothing here.
        self.sched.check()?;
        Ok(Arc::new(graph::HostGraph::compile(
            nodes,
            self.device_id,
            &self.graph_mem,
        )?))
    }

    fn wait_done(&self, done: &Done) -> Result<()> {
        match done_target(done).downcast_ref::<sched_node::SchedNode>() {
            Some(n) => Scheduler::wait_any(n),
            // Another backend's completion (portable pinned memory, HM2).
            None => done.wait_here(),
        }
        self.sched.check()
    }

    fn synchronize(&self) -> Result<()> {
        let tails = self.order.lock().all_tails();
        for t in tails {
            self.sched.wait(&t, false);
        }
        self.pool.synchronized(); // HM5, RL3.
        self.sched.check()
    }

    fn sticky_error(&self) -> Option<Error> {
        self.sched.sticky()
    }

    fn sticky_probe(&self) -> crate::types::StickyProbe {
        // The scheduler has no drop of its own to run: holding it keeps no thread or device.
        let sched = self.sched.clone();
        Arc::new(move || sched.sticky())
    }

    fn now_ns(&self) -> u64 {
        self.sched.now_ns()
    }

    fn set_queue_depth(&self, ops: usize) {
        self.depth.store(ops.max(1), Ordering::Relaxed);
    }

    fn queue_depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    fn pool_reserved(&self) -> Option<usize> {
        Some(self.pool.reserved())
    }

    fn graph_memory(&self) -> Result<PoolStats> {
        Ok(self.graph_mem.stats())
    }

    fn reset_graph_memory_high(&self) -> Result<()> {
        self.graph_mem.reset_high();
        Ok(())
    }

    fn trim_graph_memory(&self) -> Result<()> {
        // GR12: every block belongs to a live instantiation (or to what still uses it), and
        // goes with it: nothing is kept that a trim could give back.
        Ok(())
    }
}
