//! One opened CUDA device: its properties, the sticky fault state (KN2, ER2) and which kernel a
//! fault is blamed on, the registry of its streams' keepalive queues (device synchronize), the
//! orphaned work of dropped streams (ST10), and the [`Backend`] implementation.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use cudarc::driver::sys::{self, CUdevice_attribute};
use parking_lot::Mutex;

use super::context::{now_or_deferred, run_deferred, Ctx};
use super::driver::{check, CuError, CuResult};
use super::event::CudaEvent;
use super::graph::CudaGraph;
use super::memory;
use super::module::Modules;
use super::queue::{Batch, Entry};
use super::stream::{CudaStream, StreamQueue};
use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::device::BackendGraph;
use crate::backend::contract::device::{
    Backend, BackendStream, Capabilities, DeviceProperties, Done, GroupPart, PinnedFlags,
    StreamDesc, StreamKind,
};
use crate::backend::contract::event::{BackendEvent, EventFlags};
use crate::backend::contract::graph::GraphNode;
use crate::backend::contract::kernel::KernelInner;
use crate::backend::contract::memory::Allocation;
use crate::error::{Error, Result};

/// The sticky error of a device (ER2), shareable with host-function callbacks (which may set
/// it without a driver call).
pub(crate) struct Sticky {
    /// The device's name, for errors.
    pub device: String,
    poisoned: AtomicBool,
    error: Mutex<Option<Error>>,
}

impl Sticky {
    fn new(device: String) -> Self {
        Sticky {
            device,
            poisoned: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    /// The sticky error, if any.
    #[inline]
    pub fn get(&self) -> Option<Error> {
        if self.poisoned.load(Ordering::Acquire) {
            self.error.lock().clone()
        } else {
            None
        }
    }

    /// Keep the first error; return the one that sticks.
    pub fn set(&self, e: Error) -> Error {
        let mut g = self.error.lock();
        let e = g.get_or_insert(e).clone();
        self.poisoned.store(true, Ordering::Release);
        e
    }
}

/// State shared by a device's backend object, streams and events.
pub(super) struct DeviceShared {
    pub ctx: Arc<Ctx>,
    pub device_id: u64,
    pub props: DeviceProperties,
    pub modules: Modules,
    pub sticky: Arc<Sticky>,
    /// Whether stream-ordered allocation is available.
    pub pools: bool,
    epoch: Instant,
    launches: AtomicU64,
    streams: Mutex<Vec<Weak<StreamQueue>>>,
    /// Kernels that hold a loaded form for this device (removed when the device goes).
    kernels: Mutex<Vec<Weak<KernelInner>>>,
    orphans: Mutex<VecDeque<Entry>>,
    has_orphans: AtomicBool,
    /// Completion events handed to core (contract rule 7), reused once only this list holds
    /// them: re-recording one that core still holds would change what it stands for.
    done_events: Mutex<Vec<Arc<CudaEvent>>>,
    /// Items a stream's keepalive queue may hold before a submission waits (RL1, Q5).
    pub depth: std::sync::atomic::AtomicUsize,
}

/// The `kernel` and `detail` of a fault (RL5): `exact` when known; else the one candidate;
/// else every candidate, oldest launch first, and a note that the GPU cannot say which.
pub(super) fn blame(exact: Option<&str>, names: &[String], what: String) -> (String, String) {
    if let Some(k) = exact {
        return (
            k.to_string(),
            format!("{what} (CUEFLOW_LAUNCH_BLOCKING=1: the launch was synchronized, so this kernel faulted)"),
        );
    }
    match names {
        [] => ("<unknown kernel>".to_string(), what),
        [one] => (
            one.clone(),
            format!("{what} (the only kernel not known to be complete)"),
        ),
        many => {
            const SHOWN: usize = 8;
            let mut list = many[..many.len().min(SHOWN)].join(", ");
            if many.len() > SHOWN {
                list.push_str(&format!(" and {} more", many.len() - SHOWN));
            }
            (
                format!("one of: {list}"),
                format!(
                    "{what}; the GPU reports a fault for the whole context, and {} kernels were \
                     not known to be complete, so any of them may have faulted (set \
                     CUEFLOW_LAUNCH_BLOCKING=1 to synchronize after each launch and name the \
                     one)",
                    many.len()
                ),
            )
        }
    }
}

/// Completion events kept for reuse at most.
const DONE_EVENTS: usize = 512;

/// Every open CUDA device of the process, by cueflow device id: peer copies find the other
/// side's context here (MD3).
static DEVICES: Mutex<Vec<(u64, Weak<DeviceShared>)>> = Mutex::new(Vec::new());

/// GPU pairs (ordinals) whose peer access was settled: enabled, found impossible, or refused
/// by the driver (the error is kept for [`enable_peer`]'s callers).
type PeerPair = (usize, usize, Result<bool, CuError>);
static PEER_PAIRS: Mutex<Vec<PeerPair>> = Mutex::new(Vec::new());

/// The open device with cueflow id `id`.
pub(super) fn shared_of(id: u64) -> Option<Arc<DeviceShared>> {
    DEVICES
        .lock()
        .iter()
        .find(|(d, _)| *d == id)
        .and_then(|(_, w)| w.upgrade())
}

/// True if GPU `a` can access GPU `b`'s memory directly (`cuDeviceCanAccessPeer`).
fn can_access(a: &Ctx, b: &Ctx) -> bool {
    if a.dev == b.dev {
        return true;
    }
    let mut can = 0;
    // SAFETY: both device handles come from cuDeviceGet; `can` is a valid out-pointer.
    let r = check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, a.dev, b.dev)
    });
    r.is_ok() && can == 1
}

/// Make peer copies between `a` and `b` take the direct path when the GPUs allow it, once per
/// pair (both directions), then make `current` the context again. Returns whether the path is
/// direct (`Ok(false)`: the GPUs cannot reach each other, copies are staged), or the driver's
/// refusal (copies are staged then too).
pub(super) fn enable_peer(a: &DeviceShared, b: &DeviceShared, current: &Ctx) -> CuResult<bool> {
    let (x, y) = (
        a.ctx.ordinal.min(b.ctx.ordinal),
        a.ctx.ordinal.max(b.ctx.ordinal),
    );
    if x == y {
        return Ok(true);
    }
    let mut pairs = PEER_PAIRS.lock();
    if let Some((_, _, r)) = pairs.iter().find(|p| (p.0, p.1) == (x, y)) {
        return *r;
    }
    let mut r = Ok(can_access(&a.ctx, &b.ctx) && can_access(&b.ctx, &a.ctx));
    if matches!(r, Ok(true)) {
        for (from, to) in [(a, b), (b, a)] {
            let enabled = from.ctx.bind().and_then(|()| {
                // SAFETY: D2 (`from` is current); `to.ctx` is a live context of another GPU.
                match unsafe { sys::cuCtxEnablePeerAccess(to.ctx.raw(), 0) } {
                    sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
                    code => check("cuCtxEnablePeerAccess", code),
                }
            });
            // Device memory comes from the default pool: grant `from` access to `to`'s pool.
            let enabled =
                enabled.and_then(|()| memory::grant_pool_access(to.ctx.dev, from.ctx.ordinal));
            if let Err(e) = enabled {
                r = Err(e);
                break;
            }
        }
        let _ = current.bind();
    }
    pairs.push((x, y, r));
    r
}

impl DeviceShared {
    /// A timing-free event for a completion signal: a free one from the list, or a new one.
    /// Context current (D2).
    pub fn done_event(self: &Arc<Self>) -> CuResult<Arc<CudaEvent>> {
        let mut list = self.done_events.lock();
        if let Some(e) = list.iter().find(|e| Arc::strong_count(e) == 1) {
            return Ok(e.clone());
        }
        let e = CudaEvent::create_raw(
            self,
            EventFlags {
                timing: false,
                ..Default::default()
            },
        )?;
        if list.len() < DONE_EVENTS {
            list.push(e.clone());
        }
        Ok(e)
    }

    /// `Err` with the sticky error once the device is poisoned (ER2).
    #[inline]
    pub fn check(&self) -> Result<()> {
        match self.sticky.get() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Make the context current (D2), after the sticky check.
    #[inline]
    pub fn enter(&self) -> Result<()> {
        self.check()?;
        self.ctx.bind().map_err(|e| self.fail(e, None))
    }

    /// Number the next launch, device-wide (fault blame picks the oldest).
    pub fn next_launch(&self) -> u64 {
        self.launches.fetch_add(1, Ordering::Relaxed)
    }

    /// Map a failed driver call onto an error. A sticky code poisons the device and names the
    /// kernels not known to be complete on any stream as the candidates (RL5). The caller
    /// must not hold any stream's queue lock. (`_hint`, the stream the call failed on, no
    /// longer narrows the blame: a fault surfaces on whichever stream looks first, which named
    /// a kernel of that stream even when another stream's kernel faulted.)
    pub fn fail(&self, e: CuError, _hint: Option<&StreamQueue>) -> Error {
        self.fail_blaming(e, Vec::new())
    }

    /// As [`fail`](Self::fail), with candidates the caller already collected (under a queue
    /// lock it has released since); every stream's pending launches are added.
    pub fn fail_blaming(&self, e: CuError, mut candidates: Vec<(u64, String)>) -> Error {
        if !e.is_sticky() {
            return e.to_error();
        }
        self.pending_launches(&mut candidates);
        self.poison(e, candidates, None)
    }

    /// Poison the device with `e`, blaming `candidates` (launch number, kernel name): the one
    /// kernel when there is one, every distinct name and a note that the device cannot say
    /// which one otherwise (RL5), or `exact` when the caller knows (a synchronized launch).
    pub fn poison(
        &self,
        e: CuError,
        mut candidates: Vec<(u64, String)>,
        exact: Option<&str>,
    ) -> Error {
        if let Some(err) = self.sticky.get() {
            return err;
        }
        self.ctx.mark_poisoned();
        candidates.sort();
        let mut names: Vec<String> = Vec::new();
        for (_, k) in candidates {
            if !names.contains(&k) {
                names.push(k);
            }
        }
        let (kernel, detail) = blame(exact, &names, e.describe());
        self.sticky.set(Error::KernelFault {
            device: self.props.name.clone(),
            kernel,
            detail,
        })
    }

    /// Every launch not known to be complete, on any stream or orphaned batch.
    fn pending_launches(&self, out: &mut Vec<(u64, String)>) {
        let queues: Vec<Arc<StreamQueue>> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        out.extend(self.orphans.lock().iter().filter_map(Entry::first_launch));
        for q in queues {
            q.queue.lock().pending_launches(out);
        }
    }

    /// Register a stream's queue for device synchronize and fault blame.
    pub fn register(&self, q: &Arc<StreamQueue>) {
        let mut s = self.streams.lock();
        s.retain(|w| w.strong_count() > 0);
        s.push(Arc::downgrade(q));
    }

    /// Note that `k` keeps a loaded form for this device.
    pub fn loaded_by(&self, k: &Arc<KernelInner>) {
        self.kernels.lock().push(Arc::downgrade(k));
    }

    /// Take a dropped stream's sealed batches (ST10).
    pub fn adopt(&self, entries: VecDeque<Entry>) {
        if entries.is_empty() {
            return;
        }
        self.orphans.lock().extend(entries);
        self.has_orphans.store(true, Ordering::Release);
    }

    /// Cheap housekeeping at each submit: deferred drops, finished orphaned work. Context
    /// current (D2).
    #[inline]
    pub fn maintain(&self) {
        run_deferred();
        if self.has_orphans.load(Ordering::Acquire) {
            self.poll_orphans();
        }
    }

    fn poll_orphans(&self) {
        let mut done: Vec<Entry> = Vec::new();
        if let Some(mut o) = self.orphans.try_lock() {
            while o.front().is_some_and(|e| matches!(e.query(), Ok(true))) {
                done.extend(o.pop_front());
            }
            if o.is_empty() {
                self.has_orphans.store(false, Ordering::Release);
            }
        }
        let batches: Vec<Batch> = done.into_iter().map(|e| e.finish(false)).collect();
        drop(batches);
    }

    /// Host nanoseconds since the device was opened.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn synchronize(&self) -> Result<()> {
        self.enter()?;
        self.maintain();
        let queues: Vec<(Arc<StreamQueue>, u64)> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|q| {
                let w = q.queue.lock().watermark();
                (q, w)
            })
            .collect();
        let orphans = std::mem::take(&mut *self.orphans.lock());
        // SAFETY: D2 (entered above).
        let r = check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() });
        if let Err(e) = r {
            self.orphans.lock().extend(orphans);
            return Err(self.fail(e, None));
        }
        let mut done: Vec<Batch> = orphans.into_iter().map(|e| e.finish(false)).collect();
        for (q, w) in queues {
            q.queue.lock().retire_upto(w, &mut done);
        }
        drop(done);
        Ok(())
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        // Every stream, event and backend handle of the device is gone. Orphaned work may still
        // run: wait for it (on a helper thread, so the drop itself never blocks), then unload the
        // modules it may use (Q4).
        // Kernels that outlive the device (the built-ins are statics) forget its functions.
        for k in std::mem::take(&mut *self.kernels.lock()) {
            if let Some(k) = k.upgrade() {
                k.loaded.lock().retain(|(d, _)| *d != self.device_id);
            }
        }
        let ctx = self.ctx.clone();
        let orphans = std::mem::take(&mut *self.orphans.lock());
        let modules = std::mem::replace(&mut self.modules, Modules::new((0, 0)));
        let poisoned = self.sticky.get().is_some();
        let background = !poisoned && !orphans.is_empty();
        let cleanup = move || {
            if !ctx.usable() || ctx.bind().is_err() {
                return;
            }
            let batches: Vec<Batch> = orphans.into_iter().map(|e| e.finish(!poisoned)).collect();
            drop(batches);
            // Unloaded with the context, not now: another device may be running kernels on it.
            ctx.retired_modules.lock().push(modules);
            drop(ctx);
        };
        now_or_deferred(move || {
            if !background {
                return cleanup();
            }
            let job = Arc::new(Mutex::new(Some(cleanup)));
            let theirs = job.clone();
            let spawned = std::thread::Builder::new()
                .name("cueflow-cuda-reaper".into())
                .spawn(move || theirs.lock().take().map_or((), |f| f()));
            if spawned.is_err() {
                // No helper thread: wait here rather than free under running work (MM2).
                if let Some(f) = job.lock().take() {
                    f();
                }
            }
        });
    }
}

/// The CUDA [`Backend`].
pub(crate) struct CudaBackend {
    pub(super) shared: Arc<DeviceShared>,
    legacy: Arc<CudaStream>,
}

fn attr(dev: sys::CUdevice, a: CUdevice_attribute) -> CuResult<i32> {
    let mut v = 0;
    // SAFETY: `dev` is a valid device handle; `v` is a valid out-pointer.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, a, dev)
    })?;
    Ok(v)
}

/// The name of device `dev`.
pub(super) fn device_name(dev: sys::CUdevice) -> CuResult<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: `buf` has room for the 256 bytes passed as its length; `dev` is valid.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev)
    })?;
    // SAFETY: the driver wrote a NUL-terminated string into `buf` (length-limited above).
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(s.to_string_lossy().into_owned())
}

fn properties(ctx: &Ctx, ordinal: usize) -> CuResult<(DeviceProperties, (i32, i32))> {
    use CUdevice_attribute::*;
    let dev = ctx.dev;
    let a = |x| attr(dev, x);
    let mut total = 0usize;
    // SAFETY: `dev` is valid; `total` is a valid out-pointer.
    check("cuDeviceTotalMem_v2", unsafe {
        sys::cuDeviceTotalMem_v2(&mut total, dev)
    })?;
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: D2 (Ctx::retain made the context current); valid out-pointers.
    check("cuCtxGetStreamPriorityRange", unsafe {
        sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
    })?;
    let cc = (
        a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let shared_optin = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let shared = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?;
    let props = DeviceProperties {
        name: device_name(dev)?,
        backend: "cuda",
        ordinal,
        async_engines: a(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?.max(0) as u32,
        compute_units: a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(0) as u32,
        priority_least: least,
        priority_greatest: greatest,
        total_memory: total as u64,
        max_threads_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?.max(0) as u32,
        max_grid: [
            a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?.max(0) as u32,
            a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?.max(0) as u32,
            a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?.max(0) as u32,
        ],
        max_shared_per_block: shared_optin.max(shared).max(0) as u32,
        memory_pools: a(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0,
    };
    Ok((props, cc))
}

impl CudaBackend {
    /// Open device `ordinal` (the driver is loaded and initialized).
    pub fn open(device_id: u64, ordinal: usize) -> Result<CudaBackend> {
        let ctx = Ctx::retain(ordinal)?;
        let (props, cc) = properties(&ctx, ordinal).map_err(CuError::to_error)?;
        let pools = props.memory_pools && memory::configure_pool(ctx.dev).is_ok();
        let sticky = Arc::new(Sticky::new(props.name.clone()));
        let shared = Arc::new(DeviceShared {
            ctx,
            device_id,
            props,
            modules: Modules::new(cc),
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
        });
        // The built-in kernels share one module: load it before any work can run (see
        // `module::load_functions`). Without NVRTC this fails quietly; launching a built-in then
        // reports why.
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
        Ok(CudaEvent::create(&self.shared, flags)?)
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

    fn can_access_peer(&self, other: &dyn Backend) -> bool {
        match other.as_any().downcast_ref::<CudaBackend>() {
            Some(o) => can_access(&self.shared.ctx, &o.shared.ctx),
            None => false,
        }
    }

    fn enable_peer(&self, other: &dyn Backend) -> Result<bool> {
        let Some(o) = other.as_any().downcast_ref::<CudaBackend>() else {
            return Ok(false);
        };
        self.shared.enter()?;
        enable_peer(&self.shared, &o.shared, &self.shared.ctx).map_err(CuError::to_error)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn submit_group(&self, parts: Vec<GroupPart>) -> Result<Vec<Option<Done>>> {
        super::nccl::submit_group(parts)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            shares_host_memory: false,
            host_clock_times: false,
            independent_opens: false,
        }
    }

    fn comm_group(
        &self,
        devices: &[&dyn Backend],
        _deadline: std::time::Duration,
    ) -> Result<Vec<Arc<dyn BackendComm>>> {
        let shared = devices
            .iter()
            .map(|d| {
                d.as_any()
                    .downcast_ref::<CudaBackend>()
                    .map(|c| c.shared.clone())
                    .ok_or_else(|| {
                        Error::InvalidHandle("a CUDA communicator over a non-CUDA device".into())
                    })
            })
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

    fn adopt_stream(
        &self,
        raw: *mut std::ffi::c_void,
    ) -> Result<(Arc<dyn BackendStream>, StreamKind, i32)> {
        self.shared.enter()?;
        let raw = raw as sys::CUstream;
        let (mut flags, mut priority) = (0u32, 0i32);
        // SAFETY: the caller promised `raw` is a live stream of this device's context (D1);
        // both out-pointers are valid.
        check("cuStreamGetFlags", unsafe {
            sys::cuStreamGetFlags(raw, &mut flags)
        })
        .and_then(|()| {
            // SAFETY: as above.
            check("cuStreamGetPriority", unsafe {
                sys::cuStreamGetPriority(raw, &mut priority)
            })
        })
        .map_err(|e| self.shared.fail(e, None))?;
        let kind = if flags & sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32 != 0 {
            StreamKind::NonBlocking
        } else {
            StreamKind::Blocking
        };
        Ok((CudaStream::adopt(&self.shared, raw), kind, priority))
    }

    fn instantiate_graph(&self, nodes: &[GraphNode]) -> Result<Arc<dyn BackendGraph>> {
        self.shared.enter()?;
        Ok(Arc::new(CudaGraph::instantiate(&self.shared, nodes)?))
    }

    fn wait_done(&self, done: &Done) -> Result<()> {
        if let Some(e) = done.as_any().downcast_ref::<CudaEvent>() {
            e.synchronize()?;
        }
        self.shared.check()
    }

    fn synchronize(&self) -> Result<()> {
        self.shared.synchronize()
    }

    fn sticky_error(&self) -> Option<Error> {
        self.shared.sticky.get()
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

impl DeviceShared {
    /// Map a failed allocation: out of memory names what and how much.
    pub fn alloc_error(&self, e: CuError, what: &'static str, bytes: usize) -> Error {
        if e.code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory { what, bytes }
        } else {
            self.fail(e, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::blame;

    #[test]
    fn rl5_one_candidate_is_named_several_are_all_named_and_said_so() {
        let what = || "CUDA_ERROR_ILLEGAL_ADDRESS".to_string();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(blame(None, &[], what()).0, "<unknown kernel>");
        let (k, d) = blame(None, &names(&["cf_fault"]), what());
        assert_eq!(k, "cf_fault");
        assert!(d.contains("only kernel"), "{d}");
        let (k, d) = blame(None, &names(&["cf_fill_f32", "cf_fault"]), what());
        assert_eq!(k, "one of: cf_fill_f32, cf_fault");
        assert!(
            d.contains("any of them") && d.contains("CUEFLOW_LAUNCH_BLOCKING=1"),
            "{d}"
        );
        let many: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        assert!(blame(None, &many, what()).0.ends_with("and 2 more"));
        let (k, d) = blame(Some("cf_fault"), &names(&["cf_fill_f32"]), what());
        assert_eq!(k, "cf_fault");
        assert!(d.contains("synchronized"), "{d}");
    }
}
