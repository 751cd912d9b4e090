//! The host backend: a device made of real threads, so overlap is real and measurable on any
//! machine, and every GPU program can be tested without a GPU.

mod affinity;
pub(crate) mod collective;
mod exec;
mod graph;
mod memory;
mod node;
mod sched;
mod stream;

use std::sync::Arc;

use parking_lot::Mutex;

use self::memory::{host_alloc, Pool};
use self::sched::Scheduler;
use self::stream::{HostEvent, HostStream, Order};
use crate::backend::{
    Backend, BackendEvent, BackendGraph, BackendStream, DeviceProperties, Done, EventFlags,
    PinnedFlags, StreamDesc, StreamKind,
};
use crate::core::alloc::{Allocation, MemKind};
use crate::core::collective::BackendComm;
use crate::core::graph::GraphNode;
use crate::error::{Error, Result};

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
        let sched = Scheduler::start(name.clone(), workers);
        let order = Arc::new(Mutex::new(Order::default()));
        let pool = Pool::new(device_id);
        let legacy = HostStream::new(
            sched.clone(),
            order.clone(),
            pool.clone(),
            StreamDesc {
                kind: StreamKind::Legacy,
                priority: PRIORITY_LEAST,
            },
        );
        let props = DeviceProperties {
            name,
            backend: "host",
            ordinal,
            async_engines: 2,
            compute_units: workers,
            priority_least: PRIORITY_LEAST,
            priority_greatest: PRIORITY_GREATEST,
            total_memory: total_memory(),
            max_threads_per_block: 1024,
            max_grid: [i32::MAX as u32, 65535, 65535],
            max_shared_per_block: 48 * 1024,
            memory_pools: true,
        };
        Ok(HostBackend {
            props,
            sched,
            order,
            pool,
            legacy,
            device_id,
        })
    }

    /// Bytes held by the stream-ordered pool.
    #[allow(dead_code)]
    pub fn pool_reserved(&self) -> usize {
        self.pool.reserved()
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
        // ST10/EV8: pending work still runs; the engines stop once it is done.
        self.sched.shut_down();
    }
}

impl Backend for HostBackend {
    fn properties(&self) -> &DeviceProperties {
        &self.props
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
        ))
    }

    fn create_event(&self, flags: EventFlags) -> Result<Arc<dyn BackendEvent>> {
        Ok(Arc::new(HostEvent::new(self.sched.clone(), flags)))
    }

    fn alloc_device(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        host_alloc(bytes, MemKind::Device, self.device_id, false)
    }

    fn alloc_pinned(&self, bytes: usize, _flags: PinnedFlags) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        host_alloc(bytes, MemKind::Pinned, self.device_id, true)
    }

    fn alloc_staging(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.sched.check()?;
        host_alloc(bytes, MemKind::Pinned, self.device_id, false)
    }

    fn can_access_peer(&self, other: &dyn Backend) -> bool {
        // Every host device's memory is this process's memory.
        other.as_any().is::<HostBackend>()
    }

    fn enable_peer(&self, other: &dyn Backend) -> Result<bool> {
        Ok(self.can_access_peer(other))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
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

    fn instantiate_graph(&self, nodes: &[GraphNode]) -> Result<Arc<dyn BackendGraph>> {
        self.sched.check()?;
        Ok(Arc::new(graph::HostGraph::compile(nodes, self.device_id)?))
    }

    fn wait_done(&self, done: &Done) -> Result<()> {
        if let Some(n) = done.as_any().downcast_ref::<node::Node>() {
            Scheduler::wait_any(n);
        }
        self.sched.check()
    }

    fn synchronize(&self) -> Result<()> {
        let tails = self.order.lock().all_tails();
        for t in tails {
            self.sched.wait(&t, false);
        }
        self.sched.check()
    }

    fn sticky_error(&self) -> Option<Error> {
        self.sched.sticky()
    }

    fn now_ns(&self) -> u64 {
        self.sched.now_ns()
    }
}
