//! One opened CUDA device: its properties, the sticky fault state (KN2, ER2) and which kernel a
//! fault is blamed on, the registry of its streams' keepalive queues (device synchronize), the
//! orphaned work of dropped streams (ST10), and the [`Backend`] implementation.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{self, CUdevice_attribute, CUstream_flags};
use parking_lot::Mutex;

use super::context::Ctx;
use super::driver::{self, version::Feature, CuError, CuResult, St};
use super::event::CudaEvent;
use super::fault::Sticky;
use super::graph::CudaGraph;
use super::memory;
use super::pool::{CudaPool, NoPool};
use super::shared::{can_access, enable_peer, DeviceShared, DEVICES};
use super::stream::CudaStream;
use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::device::done_target;
use crate::backend::contract::device::BackendGraph;
use crate::backend::contract::device::{Backend, BackendStream, Capabilities, Done, GroupPart};
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::graph::GraphNode;
use crate::backend::contract::kernel::KernelInner;
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::ExternalCuda;
use crate::backend::contract::pool::BackendPool;
use crate::error::{Error, Result};
use crate::types::ManagedOp;
use crate::types::{Advice, AttachMode};
use crate::types::{ComputeMode, DeviceProperties, PinnedFlags, StreamDesc, StreamKind, SyncMode};
use crate::types::{EventFlags, PoolStats};

crate::backend::contract::downcast::as_any!(CudaBackend);

/// The CUDA [`Backend`].
pub(crate) struct CudaBackend {
    pub(super) shared: Arc<DeviceShared>,
    legacy: Arc<CudaStream>,
}

fn properties(ctx: &Ctx, ordinal: usize) -> CuResult<(DeviceProperties, (i32, i32))> {
    use CUdevice_attribute::*;
    let dev = ctx.dev;
    let a = |x| driver::context::attribute(dev, x);
    let total = driver::context::total_mem(dev)?;
    // D2: Ctx::retain made the context current.
    let (least, greatest) = driver::context::stream_priority_range()?;
    let cc = (
        a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let shared_optin = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let shared = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?;
    let u = |x| a(x).map(|v: i32| v.max(0) as u32);
    let flag = |x| a(x).map(|v: i32| v != 0);
    let driver = driver::context::driver_version()?;
    let props = DeviceProperties {
        name: driver::context::name(dev)?,
        backend: "cuda",
        ordinal,
        compute_capability: (cc.0.max(0) as u32, cc.1.max(0) as u32),
        async_engines: u(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?,
        compute_units: u(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        warp_size: u(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        priority_least: least,
        priority_greatest: greatest,
        total_memory: total as u64,
        total_constant_memory: u(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY)? as u64,
        max_threads_per_block: u(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block: [
            u(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            u(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            u(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_grid: [
            u(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            u(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            u(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        max_threads_per_multiprocessor: u(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        shared_per_block: shared.max(0) as u32,
        max_shared_per_block: shared_optin.max(shared).max(0) as u32,
        shared_per_multiprocessor: u(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        registers_per_block: u(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        clock_rate_khz: u(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        memory_clock_rate_khz: u(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        memory_bus_width: u(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
        l2_cache_size: u(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        concurrent_kernels: flag(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS)?,
        can_map_host_memory: flag(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?,
        managed_memory: flag(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)?,
        concurrent_managed_access: flag(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?,
        unified_addressing: flag(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?,
        integrated: flag(CU_DEVICE_ATTRIBUTE_INTEGRATED)?,
        pci_ids: (
            u(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            u(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            u(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        ),
        memory_pools: flag(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?,
        // CUDA 12.1 raised the limit from 4,096 bytes to 32,764 on Volta and newer.
        max_parameter_bytes: if driver >= 12010 && cc.0 >= 7 {
            32_764
        } else {
            4_096
        },
        driver_version: driver.max(0) as u32,
        compute_mode: ComputeMode::from_raw(a(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)?),
        nvrtc_version: driver::nvrtc::version().map(|v| v.0),
        driver_features: driver::library::api().features(driver::nvrtc::version()),
    };
    Ok((props, cc))
}

impl CudaBackend {
    /// Open device `ordinal` (the driver is loaded and initialized).
    pub fn open(device_id: u64, ordinal: usize) -> Result<CudaBackend> {
        let ctx = Ctx::retain(ordinal)?;
        let (props, cc) = properties(&ctx, ordinal).map_err(CuError::to_error)?;
        let pools = props.memory_pools && memory::configure_pool(ctx.dev).is_ok();
        let sticky = Arc::new(Sticky::new(format!("cuda:{ordinal} ({})", props.name)));
        let gate = super::host_reach_gate::gate_of(ordinal, ctx.instance);
        let modules = super::module::of_context(ctx.instance, cc);
        let shared = Arc::new(DeviceShared {
            ctx,
            device_id,
            props,
            modules,
            sticky,
            pools,
            epoch: Instant::now(),
            launches: AtomicU64::new(0),
            streams: Mutex::new(Vec::new()),
            kernels: Mutex::new(Vec::new()),
            orphans: Mutex::new(VecDeque::new()),
            has_orphans: AtomicBool::new(false),
            depth: std::sync::atomic::AtomicUsize::new(
                crate::backend::contract::device::initial_queue_depth(),
            ),
            done_events: Mutex::new(Vec::new()),
            gate,
        });
        // The built-in kernels share one module: load it before any work can run (see
        // `module::load_functions`), once per context (`module::of_context`). Without NVRTC
        // this fails quietly; launching a built-in then reports why.
        let _ = shared
            .modules
            .preload(crate::builtins::BUILTINS_CU, "cueflow built-ins");
        let legacy = CudaStream::legacy(&shared);
        let mut devices = DEVICES.lock();
        devices.retain(|(_, w)| w.strong_count() > 0);
        devices.push((device_id, Arc::downgrade(&shared)));
        drop(devices);
        Ok(CudaBackend { shared, legacy })
    }
}

impl Backend for CudaBackend {
    fn properties(&self) -> &DeviceProperties {
        &self.shared.props
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        self.shared.enter()?;
        // D2: the device's context is current (`enter`).
        let (free, total) = driver::context::mem_info().map_err(|e| self.shared.fail(e, None))?;
        Ok((free as u64, total as u64))
    }

    fn set_sync_mode(&self, mode: SyncMode) -> Result<()> {
        driver::library::api().require(Feature::SyncMode)?;
        self.shared.enter()?;
        self.shared
            .ctx
            .set_sync_mode(mode)
            .map_err(|e| self.shared.fail(e, None))
    }

    fn prepare_kernel(&self, kernel: &Arc<KernelInner>) -> Result<()> {
        self.shared.enter()?;
        super::launch::load(&self.shared, kernel).map(|_| ())
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
        self.shared.enter()?;
        Ok(CudaStream::create(&self.shared, desc)?)
    }

    fn create_event(&self, flags: EventFlags) -> Result<Arc<dyn BackendEvent>> {
        self.shared.enter()?;
        Ok(CudaEvent::create(&self.shared, &self.shared.ctx, flags)?)
    }

    fn alloc_device(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.shared.enter()?;
        let ctx = &self.shared.ctx;
        memory::alloc_device(ctx, self.shared.device_id, bytes)
            .map_err(|e| self.shared.alloc_error(e, "device memory", bytes))
    }

    fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<Arc<Allocation>> {
        self.shared.enter()?;
        let ctx = &self.shared.ctx;
        memory::alloc_pinned(ctx, self.shared.device_id, bytes, flags)
            .map_err(|e| self.shared.alloc_error(e, "pinned host memory", bytes))
    }

    fn alloc_staging(&self, bytes: usize) -> Result<Arc<Allocation>> {
        self.alloc_pinned(bytes, PinnedFlags::default())
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: PinnedFlags,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Arc<Allocation>> {
        self.shared.enter()?;
        // SAFETY: forwarded from the caller (the range stays valid until the release).
        unsafe {
            super::host_mem::register(
                &self.shared.ctx,
                self.shared.device_id,
                ptr,
                bytes,
                flags,
                owner,
            )
        }
        .map_err(CuError::to_error)
    }

    fn alloc_managed(&self, bytes: usize, attach: AttachMode) -> Result<Arc<Allocation>> {
        self.shared.enter()?;
        super::managed::alloc(&self.shared, bytes, attach)
            .map_err(|e| self.shared.alloc_error(e, "managed memory", bytes))
    }

    fn managed_side(&self, mem: &MemRef, op: ManagedOp) -> Result<Option<ExternalCuda>> {
        Ok(Some(super::managed::side(&self.shared, mem, op)))
    }

    fn advise(&self, mem: &MemRef, advice: Advice) -> Result<()> {
        self.shared.enter()?;
        super::managed::advise(&self.shared, mem, advice)
    }

    fn default_pool(&self) -> Arc<dyn BackendPool> {
        match CudaPool::default_of(&self.shared) {
            Ok(p) => Arc::new(p),
            // Without pools (memoryPoolsSupported = 0) every call on it fails typed.
            Err(_) => Arc::new(NoPool),
        }
    }

    fn create_pool(&self) -> Result<Arc<dyn BackendPool>> {
        self.shared.enter()?;
        if !self.shared.pools {
            return Err(Error::Unsupported(
                "this device has no stream-ordered memory pools (memoryPoolsSupported = 0)".into(),
            ));
        }
        Ok(Arc::new(
            CudaPool::create(&self.shared).map_err(CuError::to_error)?,
        ))
    }

    fn can_access_peer(&self, other: &dyn Backend) -> bool {
        match downcast::<CudaBackend, _>(other, "device") {
            Ok(o) => can_access(&self.shared.ctx, &o.shared.ctx),
            // A device of another backend is never a peer (core asks only within a backend).
            Err(_) => false,
        }
    }

    fn enable_peer(&self, other: &dyn Backend) -> Result<bool> {
        let Ok(o) = downcast::<CudaBackend, _>(other, "device") else {
            // A device of another backend: no direct path (core asks only within a backend).
            return Ok(false);
        };
        self.shared.enter()?;
        enable_peer(&self.shared, &o.shared, &self.shared.ctx).map_err(CuError::to_error)
    }

    fn graph_memory(&self) -> Result<PoolStats> {
        use sys::CUgraphMem_attribute::*;
        self.shared.enter()?;
        let dev = self.shared.ctx.dev;
        let get = |a| driver::memory::graph_mem_get(dev, a).map_err(|e| self.shared.fail(e, None));
        Ok(PoolStats {
            reserved: get(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high: get(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)?,
            used: get(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)?,
            used_high: get(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)?,
        })
    }

    fn reset_graph_memory_high(&self) -> Result<()> {
        use sys::CUgraphMem_attribute::*;
        self.shared.enter()?;
        let dev = self.shared.ctx.dev;
        for a in [
            CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
        ] {
            driver::memory::graph_mem_reset(dev, a).map_err(|e| self.shared.fail(e, None))?;
        }
        Ok(())
    }

    fn trim_graph_memory(&self) -> Result<()> {
        self.shared.enter()?;
        driver::memory::graph_mem_trim(self.shared.ctx.dev).map_err(|e| self.shared.fail(e, None))
    }

    fn pinned_cached(&self) -> Option<usize> {
        let ctx = &self.shared.ctx;
        let evicted: usize = ctx.evicted.lock().iter().map(|b| b.cap).sum();
        Some(ctx.pinned_cache.bytes() as usize + evicted)
    }

    fn driver_calls(&self, log: bool) -> Option<(u64, Vec<&'static str>)> {
        let names = super::driver::log_calls(log);
        Some((super::driver::calls(), names))
    }

    fn submit_group(&self, parts: Vec<GroupPart>) -> Result<Vec<Option<Done>>> {
        super::nccl::submit_group(parts)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            shares_host_memory: false,
            host_clock_times: false,
            independent_opens: false,
            runs_host_code: false,
            checks_reads_after: true,
        }
    }

    fn comm_group(
        &self,
        devices: &[&dyn Backend],
        _deadline: std::time::Duration,
    ) -> Result<Vec<Arc<dyn BackendComm>>> {
        let shared = devices
            .iter()
            .map(|d| downcast::<CudaBackend, _>(*d, "device").map(|c| c.shared.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(super::nccl::NcclMember::group(&shared)?
            .into_iter()
            .map(|m| Arc::new(m) as Arc<dyn BackendComm>)
            .collect())
    }

    fn comm_join(
        &self,
        id: &[u8],
        ranks: usize,
        rank: usize,
        _deadline: std::time::Duration,
    ) -> Result<Arc<dyn BackendComm>> {
        Ok(Arc::new(super::nccl::NcclMember::join(
            &self.shared,
            id,
            ranks,
            rank,
        )?))
    }

    fn comm_unique_id(&self) -> Result<Vec<u8>> {
        super::nccl::unique_id()
    }

    fn raw_context(&self) -> Option<*mut std::ffi::c_void> {
        Some(self.shared.ctx.raw() as *mut std::ffi::c_void)
    }

    fn share_context(&self) -> Option<*mut std::ffi::c_void> {
        super::interop::share();
        self.raw_context()
    }

    fn owner_drop(&self) -> crate::types::OwnerDrop {
        super::interop::owner_drop
    }

    fn adopt_stream(
        &self,
        raw: *mut std::ffi::c_void,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Result<(Arc<dyn BackendStream>, StreamKind, i32)> {
        self.shared.enter()?;
        let raw = St(raw as cudarc::driver::sys::CUstream);
        // SAFETY: the caller promised `raw` is a live stream of this device's context (D1),
        // current since `enter` (D2).
        let (flags, priority) = unsafe { driver::stream::flags_and_priority(raw) }
            .map_err(|e| self.shared.fail(e, None))?;
        let kind = if flags & CUstream_flags::CU_STREAM_NON_BLOCKING as u32 != 0 {
            StreamKind::NonBlocking
        } else {
            StreamKind::Blocking
        };
        Ok((
            CudaStream::adopt(&self.shared, raw.0, owner),
            kind,
            priority,
        ))
    }

    fn instantiate_graph(
        &self,
        nodes: &[GraphNode],
        flags: crate::backend::contract::device::GraphFlags,
    ) -> Result<Arc<dyn BackendGraph>> {
        self.shared.enter()?;
        Ok(Arc::new(CudaGraph::instantiate(
            &self.shared,
            nodes,
            flags,
        )?))
    }

    fn wait_done(&self, done: &Done) -> Result<()> {
        match done_target(done).downcast_ref::<CudaEvent>() {
            Some(e) => e.synchronize()?,
            // Another backend's completion (portable pinned memory, HM2).
            None => done.wait_here(),
        }
        self.shared.check()
    }

    fn synchronize(&self) -> Result<()> {
        self.shared.synchronize()
    }

    fn retire_finished(&self) -> Result<()> {
        self.shared.retire_finished()
    }

    fn sticky_error(&self) -> Option<Error> {
        self.shared.sticky.get()
    }

    fn sticky_probe(&self) -> crate::types::StickyProbe {
        // The sticky state alone (no context, no driver call when dropped).
        let sticky = self.shared.sticky.clone();
        Arc::new(move || sticky.get())
    }

    fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    fn set_queue_depth(&self, ops: usize) {
        self.shared.depth.store(ops.max(1), Ordering::Relaxed);
    }

    fn queue_depth(&self) -> usize {
        self.shared.depth.load(Ordering::Relaxed)
    }
}
