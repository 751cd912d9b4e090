//! The device as core sees it: its backend and the per-device state of the layers every call
//! passes through (capture registry, trace recorder, access tracking). Streams, events and
//! captures take this; the device as the API opens it, with its legacy stream, is
//! [`OpenDevice`](crate::core::devices::open_device::OpenDevice) above them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::device::{Backend, BackendStream, Done, GroupPart};
use crate::backend::contract::kernel::KernelInner;
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::{cuda_device_count, BackendKind};
use crate::core::graphs::autograph::AutoGraph;
use crate::core::graphs::capture::CaptureRegistry;
use crate::core::streams::completion::{CompletionDevice, Watcher};
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::join_events::JoinEvents;
use crate::core::streams::recorder::Recorder;
use crate::core::tracking::call::{Seen, Site};
use crate::core::tracking::clock::Actor;
use crate::core::tracking::track::Tracking;
use crate::error::{Error, Result};
use crate::trace::Trace;
use crate::types::Access;
use crate::types::{DeviceProperties, PinnedFlags, PoolStats, StreamDesc, StreamKind, SyncMode};

/// Which backend and device to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    /// Host-backend device `N` (threads and engines on this machine; every open makes an
    /// independent device, `N` is its ordinal in names and properties).
    Host(usize),
    /// CUDA device with this ordinal.
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = Error;

    /// Parse `host` (= `host:0`), `host:N`, `cuda` (= `cuda:0`) or `cuda:N`.
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let ordinal = |rest: &str| rest.parse::<usize>().ok();
        match t.as_str() {
            "host" | "cpu" => Ok(DeviceSpec::Host(0)),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => {
                if let Some(n) = t.strip_prefix("host:").and_then(ordinal) {
                    Ok(DeviceSpec::Host(n))
                } else if let Some(n) = t.strip_prefix("cuda:").and_then(ordinal) {
                    Ok(DeviceSpec::Cuda(n))
                } else {
                    Err(Error::UnknownDevice(s.to_string()))
                }
            }
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Host(n) => write!(f, "host:{n}"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// Parse a list of devices (MD1): `host:2x` (two host devices), `cuda:all` (every GPU:
    /// asks the driver how many), or names separated by commas (`cuda:0,cuda:1`); a single
    /// name is a list of one.
    pub fn parse_list(s: &str) -> Result<Vec<DeviceSpec>> {
        parse_device_list(s)
    }
}

/// A list of devices (MD1): `host:2x` (two host devices), `cuda:all` (every GPU), or names
/// separated by commas (`cuda:0,cuda:1`, `host:0,host:1`); a single name is a list of one.
pub fn parse_device_list(s: &str) -> Result<Vec<DeviceSpec>> {
    let t = s.trim().to_ascii_lowercase();
    if let Some(n) = t
        .strip_prefix("host:")
        .and_then(|r| r.strip_suffix('x'))
        .and_then(|n| n.parse::<usize>().ok())
    {
        if n == 0 {
            return Err(Error::UnknownDevice(format!("{s}: zero devices")));
        }
        return Ok((0..n).map(DeviceSpec::Host).collect());
    }
    if t == "cuda:all" {
        let n = cuda_device_count()?;
        if n == 0 {
            return Err(Error::Unavailable("cuda:all: no CUDA device".into()));
        }
        return Ok((0..n).map(DeviceSpec::Cuda).collect());
    }
    let specs = t
        .split(',')
        .map(|p| p.parse::<DeviceSpec>())
        .collect::<Result<Vec<_>>>()
        .map_err(|_| Error::UnknownDevice(s.to_string()))?;
    for (i, a) in specs.iter().enumerate() {
        if specs[..i].contains(a) {
            return Err(Error::UnknownDevice(format!("{s}: {a} named twice")));
        }
    }
    Ok(specs)
}

/// A backend stream made for a new stream of the device, with what the stream core is made
/// of.
pub(crate) struct NewStream {
    pub id: u64,
    pub backend: Arc<dyn BackendStream>,
    pub kind: StreamKind,
    pub priority: i32,
    pub name: String,
}

/// The legacy default stream's name in traces.
pub(crate) const LEGACY_STREAM_NAME: &str = "legacy default stream";

/// Process-unique device ids (traces, memory ownership checks, lock order).
static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// Every device core of the process, weakly: where [`DeviceCore::retire_finished_elsewhere`]
/// looks.
static OPEN_DEVICES: Mutex<Vec<std::sync::Weak<DeviceCore>>> = Mutex::new(Vec::new());

/// One open device.
pub(crate) struct DeviceCore {
    pub id: u64,
    pub spec: DeviceSpec,
    /// Reached through core only: the API calls the methods below.
    pub(crate) backend: Arc<dyn Backend>,
    /// The legacy default stream's actor (its clock in the sanitizer); the stream itself
    /// belongs to the [`OpenDevice`](crate::core::devices::open_device::OpenDevice).
    pub legacy_actor: Actor,
    next_stream: AtomicU64,
    tracing: AtomicBool,
    recorder: Mutex<Option<Arc<Recorder>>>,
    trace_path: Option<PathBuf>,
    pub captures: CaptureRegistry,
    pub watcher: Watcher,
    /// Access tracking, the race sanitizer and automatic ordering (AC1–AC6).
    pub track: Tracking,
    /// Automatic graphs (AG1–AG6).
    pub autograph: Arc<AutoGraph>,
    /// Private streams that snapshot events for completions (created on demand, RL4).
    notifiers: Mutex<Vec<Arc<dyn BackendStream>>>,
    /// The events stream joins reuse (`EventCore::join`).
    pub join_events: JoinEvents,
    /// Set by the device's first stream, event or allocation: from then on the device flags
    /// are fixed (DV2).
    used: AtomicBool,
}

impl DeviceCore {
    /// Open the backend `spec` names; a host device gets `host_workers` compute workers (0:
    /// the default).
    pub fn open_backend(
        id: u64,
        spec: DeviceSpec,
        host_workers: usize,
    ) -> Result<Arc<dyn Backend>> {
        check_not_in_host_fn("Device::open")?;
        match spec {
            DeviceSpec::Host(n) => crate::backend::open(
                id,
                BackendKind::Host {
                    workers: host_workers,
                },
                n,
            ),
            DeviceSpec::Cuda(n) => crate::backend::open(id, BackendKind::Cuda, n),
        }
    }

    /// A fresh process-unique device id.
    pub fn next_id() -> u64 {
        NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed)
    }

    /// Wrap an opened backend whose legacy stream has the actor `legacy_actor`. The sanitizer
    /// starts in the mode `SanitizeMode::from_env` gives; a trace `CUEFLOW_TRACE` asks for starts with
    /// [`start_env_trace`](Self::start_env_trace), once the legacy stream is registered.
    pub fn new(
        id: u64,
        spec: DeviceSpec,
        backend: Arc<dyn Backend>,
        legacy_actor: Actor,
    ) -> Result<Arc<DeviceCore>> {
        let trace_path = crate::config::trace();
        // AC6: the host backend's engines are threads sharing one address space, so racing
        // accesses must never run at once there.
        let caps = backend.capabilities();
        let serialize_conflicts = caps.shares_host_memory;
        let autograph = AutoGraph::new(backend.clone());
        let core = Arc::new(DeviceCore {
            id,
            spec,
            backend,
            legacy_actor,
            next_stream: AtomicU64::new(1),
            tracing: AtomicBool::new(false),
            recorder: Mutex::new(None),
            trace_path,
            captures: CaptureRegistry::default(),
            watcher: Default::default(),
            track: Tracking::new(serialize_conflicts, caps.checks_reads_after)?,
            autograph,
            notifiers: Mutex::new(Vec::new()),
            join_events: JoinEvents::default(),
            used: AtomicBool::new(false),
        });
        let mut open = OPEN_DEVICES.lock();
        open.retain(|d| d.strong_count() > 0);
        open.push(Arc::downgrade(&core));
        Ok(core)
    }

    /// Start the trace `CUEFLOW_TRACE` asks for, if it does.
    pub fn start_env_trace(&self) -> Result<()> {
        if self.trace_path.is_some() {
            self.start_trace()?;
        }
        Ok(())
    }

    /// A new stream of the backend, numbered within the device; `name` defaults to
    /// `stream N`.
    pub fn new_backend_stream(
        &self,
        kind: StreamKind,
        priority: i32,
        name: Option<String>,
    ) -> Result<NewStream> {
        let make = |backend: &dyn Backend| {
            let stream = backend.create_stream(StreamDesc { kind, priority })?;
            Ok((stream, kind, priority))
        };
        self.new_stream("Stream::build", make, |id| {
            name.unwrap_or_else(|| format!("stream {id}"))
        })
    }

    /// A stream created elsewhere (interop), numbered within the device: its creator destroys
    /// it.
    pub fn adopt_backend_stream(
        &self,
        raw: *mut std::ffi::c_void,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Result<NewStream> {
        let make = |backend: &dyn Backend| backend.adopt_stream(raw, owner);
        self.new_stream("Stream::from_raw_cuda", make, |id| {
            format!("stream {id} (adopted)")
        })
    }

    /// What every new stream passes (`call` names it): HF2, ER2 (a poisoned device refuses
    /// new streams, as cudaStreamCreate returns the error), DV2; then `make` gives the backend
    /// stream, which gets the device's next number and its name (`name_of` the number), told
    /// to a trace in progress.
    fn new_stream(
        &self,
        call: &'static str,
        make: impl FnOnce(&dyn Backend) -> Result<(Arc<dyn BackendStream>, StreamKind, i32)>,
        name_of: impl FnOnce(u64) -> String,
    ) -> Result<NewStream> {
        check_not_in_host_fn(call)?;
        if let Some(e) = self.sticky_error() {
            return Err(e);
        }
        self.mark_used();
        let (backend, kind, priority) = make(self.backend.as_ref())?;
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let name = name_of(id);
        if let Some(r) = self.recorder() {
            r.name_stream(id, name.clone());
        }
        Ok(NewStream {
            id,
            backend,
            kind,
            priority,
            name,
        })
    }

    /// Note the device's first work (a stream, an event, an allocation): device flags are
    /// fixed from now on (DV2).
    #[inline]
    pub fn mark_used(&self) {
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
    }

    /// How host threads wait for the device (DV2): only before its first stream, event or
    /// allocation, as `cudaSetDeviceFlags` must come before the work it governs.
    pub fn set_sync_mode(&self, mode: SyncMode) -> Result<()> {
        check_not_in_host_fn("Device::set_sync_mode")?;
        if self.used.load(Ordering::Relaxed) {
            return Err(Error::NotPermitted {
                rule: "DV2",
                what: format!(
                    "Device::set_sync_mode({mode:?}) on {} after its first stream, event or                      allocation; set device flags right after opening the device",
                    self.describe()
                ),
            });
        }
        self.backend.set_sync_mode(mode)
    }

    /// Stop kernels that run longer than `limit` with the device's sticky fault (HK4); `None`
    /// removes the limit. A limit of zero is refused.
    pub fn set_kernel_timeout(&self, limit: Option<std::time::Duration>) -> Result<()> {
        check_not_in_host_fn("Device::set_kernel_timeout")?;
        if limit == Some(std::time::Duration::ZERO) {
            return Err(Error::NotPermitted {
                rule: "HK4",
                what: format!(
                    "Device::set_kernel_timeout(0 s) on {}: a time limit must be longer than \
                     zero (pass None for no limit)",
                    self.describe()
                ),
            });
        }
        self.backend.set_kernel_timeout(limit)
    }

    /// Free and total device memory in bytes (DV1).
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        check_not_in_host_fn("Device::mem_info")?;
        self.backend.mem_info()
    }

    /// Compile and load `kernel` for this device now (KC2).
    pub fn prepare_kernel(&self, kernel: &Arc<KernelInner>) -> Result<()> {
        check_not_in_host_fn("Kernel::prepare")?;
        if let Some(e) = self.sticky_error() {
            return Err(e);
        }
        self.backend.prepare_kernel(kernel)
    }

    /// How this device runs `kernel`'s threads from its CUDA C on the host (`None`: it does
    /// not).
    pub fn host_path(&self, kernel: &Arc<KernelInner>) -> Result<Option<crate::types::HostPath>> {
        check_not_in_host_fn("Kernel::host_path")?;
        self.backend.host_path(kernel)
    }

    /// The device as errors name it (DV3): `cuda:0 (NVIDIA H100 80GB HBM3)`, `host:1 (host:1
    /// (4 compute workers))` shortened to `host:1 (4 compute workers)`.
    pub fn describe(&self) -> String {
        let name = &self.properties().name;
        let spec = self.spec.to_string();
        // Host devices are named `host (4 compute workers)` or `host:1 (4 compute workers)`.
        let host = name
            .strip_prefix(&format!("{spec} ("))
            .or_else(|| name.strip_prefix("host ("))
            .and_then(|n| n.strip_suffix(')'));
        format!("{spec} ({})", host.unwrap_or(name))
    }

    /// What the device is and can do.
    pub fn properties(&self) -> &DeviceProperties {
        self.backend.properties()
    }

    /// True if a second open of the same spec is the same hardware (CUDA), false if every open
    /// is a device of its own (host:N).
    pub fn opens_are_shared(&self) -> bool {
        !self.backend.capabilities().independent_opens
    }

    /// True if kernels and external operations run their host side here (the host backend),
    /// false if their CUDA side.
    pub fn runs_host_code(&self) -> bool {
        self.backend.capabilities().runs_host_code
    }

    /// True if this device reaches `other`'s memory directly (MD3).
    pub fn can_access_peer(&self, other: &DeviceCore) -> bool {
        self.same_backend(other) && self.backend.can_access_peer(other.backend.as_ref())
    }

    /// Turn on the direct path between this device and `other`, both directions (MD3).
    pub fn enable_peer(&self, other: &DeviceCore) -> Result<bool> {
        check_not_in_host_fn("Device::enable_peer_access")?;
        if !self.same_backend(other) {
            return Ok(false);
        }
        self.backend.enable_peer(other.backend.as_ref())
    }

    fn same_backend(&self, other: &DeviceCore) -> bool {
        self.properties().backend == other.properties().backend
    }

    /// Synchronous device allocation (GR2: refused during a capture that forbids it).
    pub fn alloc_device(&self, bytes: usize) -> Result<Arc<Allocation>> {
        check_not_in_host_fn("DeviceBuffer::new")?;
        self.captures.check_unsafe_call("synchronous allocation")?;
        self.mark_used();
        // AG6: out of memory, automatic graphs let go of what they keep, then once more.
        self.autograph
            .or_let_go(|| self.backend.alloc_device(bytes))
    }

    /// Pinned host allocation (GR2 as for device memory).
    pub fn alloc_pinned(&self, bytes: usize, flags: PinnedFlags) -> Result<Arc<Allocation>> {
        check_not_in_host_fn("PinnedBuffer::new")?;
        self.captures.check_unsafe_call("pinned allocation")?;
        self.mark_used();
        let flags = flags.as_applied_by(self.properties());
        let alloc = self
            .autograph
            .or_let_go(|| self.backend.alloc_pinned(bytes, flags))?;
        crate::core::memory::host_mem::note_locked(&alloc);
        Ok(alloc)
    }

    /// A safe host view of `mem` by `call` (MM3): blocks until the device work that conflicts
    /// with it is done, and observes it.
    pub fn host_view(&self, mem: &MemRef, kind: Access, call: &'static str) -> Result<()> {
        check_not_in_host_fn(call)?;
        self.autograph.observe()?; // AG4
        self.track.host_view(self.backend.as_ref(), mem, kind)?;
        // ER2: after a sticky fault the bytes may be what discarded copies never wrote; a
        // waiting view is refused with the fault, as every other call is (RL5).
        match self.backend.sticky_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// An unchecked host access to `mem` at `site` (the MM3 opt-out): no wait; the sanitizer
    /// checks it for races.
    pub fn host_unchecked(&self, mem: &MemRef, kind: Access, site: Site) {
        self.track.host_unchecked(mem, kind, site);
    }

    /// Bound the work pending on each stream to `ops` operations (RL1).
    pub fn set_queue_depth(&self, ops: usize) {
        self.backend.set_queue_depth(ops)
    }

    /// The bound of [`set_queue_depth`](Self::set_queue_depth).
    pub fn queue_depth(&self) -> usize {
        self.backend.queue_depth()
    }

    /// The device memory graph allocations take (GR12).
    pub fn graph_memory(&self) -> Result<PoolStats> {
        check_not_in_host_fn("Device::graph_memory")?;
        self.backend.graph_memory()
    }

    /// GR12: the high-water marks of [`graph_memory`](Self::graph_memory) start from now.
    pub fn reset_graph_memory_high(&self) -> Result<()> {
        check_not_in_host_fn("Device::reset_graph_memory_high")?;
        self.backend.reset_graph_memory_high()
    }

    /// GR12: give back graph memory no graph allocation uses.
    pub fn trim_graph_memory(&self) -> Result<()> {
        check_not_in_host_fn("Device::trim_graph_memory")?;
        self.backend.trim_graph_memory()
    }

    /// Bytes the stream-ordered pool holds from the system, where the backend counts them.
    pub fn pool_reserved(&self) -> Option<usize> {
        self.backend.pool_reserved()
    }

    /// Freed pinned bytes the backend still holds: kept for reuse or not given back yet (RL3).
    pub fn pinned_cached(&self) -> Option<usize> {
        self.backend.pinned_cached()
    }

    pub fn driver_calls(&self, log: bool) -> Option<(u64, Vec<&'static str>)> {
        self.backend.driver_calls(log)
    }

    /// Members of a new communicator over `devices` (MD4), rank = position.
    pub fn comm_group(
        devices: &[&DeviceCore],
        deadline: std::time::Duration,
    ) -> Result<Vec<Arc<dyn BackendComm>>> {
        check_not_in_host_fn("Communicator::new")?;
        let backends: Vec<&dyn Backend> = devices.iter().map(|d| d.backend.as_ref()).collect();
        match devices.first() {
            Some(first) => first.backend.comm_group(&backends, deadline),
            None => Ok(Vec::new()),
        }
    }

    /// Member `rank` of `ranks` on this device, meeting the others under `id` (MD4).
    pub fn comm_join(
        &self,
        id: &[u8],
        ranks: usize,
        rank: usize,
        deadline: std::time::Duration,
    ) -> Result<Arc<dyn BackendComm>> {
        check_not_in_host_fn("Communicator::join")?;
        self.backend.comm_join(id, ranks, rank, deadline)
    }

    /// A fresh id for [`comm_join`](Self::comm_join).
    pub fn comm_unique_id(&self) -> Result<Vec<u8>> {
        self.backend.comm_unique_id()
    }

    /// Hand the parts of one group call to the backend at once (MD4).
    pub fn submit_group(&self, parts: Vec<GroupPart>) -> Result<Vec<Option<Done>>> {
        self.autograph.before_other()?; // AG4
        self.backend.submit_group(parts)
    }

    /// The driver context (CUDA's `CUcontext`), for interop.
    pub fn raw_context(&self) -> Option<*mut std::ffi::c_void> {
        self.backend.raw_context()
    }

    /// The driver context for a library that makes it current itself (interop).
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    pub fn share_context(&self) -> Option<*mut std::ffi::c_void> {
        self.backend.share_context()
    }

    /// How an interop owner that frees with driver calls is dropped.
    pub fn owner_drop(&self) -> crate::types::OwnerDrop {
        self.backend.owner_drop()
    }

    /// Block until all work on every stream of the device is done (ST9, GR2).
    pub fn synchronize(&self) -> Result<()> {
        check_not_in_host_fn("Device::synchronize")?;
        self.captures.check_unsafe_call("device synchronize")?;
        self.autograph.observe()?; // AG4
        let seen = self.track.before_device_sync();
        self.backend.synchronize()?;
        self.track.observed(seen);
        Ok(())
    }

    /// Wait until the device is idle so that finished work lets go of the memory it held,
    /// without ordering anything: unlike [`synchronize`](Self::synchronize) the sanitizer and
    /// automatic ordering learn nothing from it, so what they see never depends on how soon
    /// the backend retired finished work (HM1's wait orders only the work on the memory).
    pub fn settle(&self, call: &'static str) -> Result<()> {
        check_not_in_host_fn(call)?;
        self.captures.check_unsafe_call(call)?;
        self.autograph.observe()?; // AG4: buffered work is issued before any wait.
        self.backend.synchronize()
    }

    /// Every other open device lets go of what its finished work still holds (a portable
    /// registration of this device that another device's stream copied), without waiting for
    /// any work and without ordering anything (HM1). A device that cannot look (poisoned)
    /// keeps what it holds; the caller sees that in what is still held.
    pub fn retire_finished_elsewhere(&self) {
        let others: Vec<Arc<DeviceCore>> = OPEN_DEVICES
            .lock()
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|d| d.id != self.id && d.used.load(Ordering::Relaxed))
            .collect();
        for d in others {
            let _ = d.backend.retire_finished();
        }
    }

    /// The sticky error that poisoned this device, if any (KN2, ER2).
    pub fn sticky_error(&self) -> Option<Error> {
        self.backend.sticky_error()
    }

    /// [`sticky_error`](Self::sticky_error) for work to ask later, from any thread (HF4).
    pub fn sticky_probe(&self) -> crate::types::StickyProbe {
        self.backend.sticky_probe()
    }

    pub fn now_ns(&self) -> u64 {
        self.backend.now_ns()
    }

    /// Start recording a trace (replaces a trace in progress).
    pub fn start_trace(&self) -> Result<()> {
        check_not_in_host_fn("Device::start_trace")?;
        let rec = Arc::new(Recorder::new(self.backend.properties().name.clone()));
        rec.name_stream(0, LEGACY_STREAM_NAME.to_string());
        if !self.backend.capabilities().host_clock_times {
            let ev = self.backend.create_event(Default::default())?;
            self.backend.legacy_stream().record(&ev)?;
            ev.synchronize()?;
            rec.set_anchor(ev, self.now_ns());
        }
        *self.recorder.lock() = Some(rec);
        self.tracing.store(true, Ordering::Release);
        Ok(())
    }

    /// Stop tracing and return what was recorded (after synchronizing the device).
    pub fn stop_trace(&self) -> Result<Trace> {
        check_not_in_host_fn("Device::stop_trace")?;
        self.captures
            .check_unsafe_call("stop_trace (synchronizes the device)")?;
        self.tracing.store(false, Ordering::Release);
        let rec = self.recorder.lock().take();
        match rec {
            Some(r) => {
                self.backend.synchronize()?;
                Ok(r.collect())
            }
            None => Ok(Trace::default()),
        }
    }

    /// The recorder, while tracing is on. One relaxed load when it is off.
    #[inline]
    pub fn recorder(&self) -> Option<Arc<Recorder>> {
        if self.tracing.load(Ordering::Relaxed) {
            self.recorder.lock().clone()
        } else {
            None
        }
    }

    /// A private stream with nothing pending, for one event completion to snapshot its event
    /// on (RL4): the completion's wait, record and host function then depend on that event
    /// alone. One shared stream made a completion wait behind every older completion's
    /// event, however unrelated (issue 16 item 7). Idle streams are reused; at most
    /// [`NOTIFIERS`] are kept, and a stream made beyond that is dropped after its use (its
    /// work still runs, ST10).
    pub fn notifier(&self) -> Result<Arc<dyn BackendStream>> {
        let mut pool = self.notifiers.lock();
        // Count 1: no other caller is enqueuing on it now (they hold a clone meanwhile).
        if let Some(s) = pool
            .iter()
            .find(|s| Arc::strong_count(s) == 1 && matches!(s.query(), Ok(true)))
        {
            return Ok(s.clone());
        }
        let s = self.backend.create_stream(StreamDesc {
            kind: StreamKind::NonBlocking,
            priority: self.backend.properties().priority_least,
        })?;
        if pool.len() < NOTIFIERS {
            pool.push(s.clone());
        }
        Ok(s)
    }
}

/// Private notifier streams a device keeps for event completions at most.
const NOTIFIERS: usize = 16;

impl CompletionDevice for DeviceCore {
    fn observed(&self, seen: Seen) {
        self.track.observed(seen);
    }

    fn sticky(&self) -> Option<Error> {
        self.backend.sticky_error()
    }
}

impl Drop for DeviceCore {
    fn drop(&mut self) {
        // AG4: held work runs (ST10); a host function holding the last handle cannot wait.
        if check_not_in_host_fn("drop").is_ok() {
            self.autograph.observe_if_free();
        }
        if let (Some(path), Some(rec)) = (&self.trace_path, self.recorder.lock().take()) {
            // Dropped inside a host function (its closure held the last handle): waiting for the
            // device would wait for that very host function; write what has completed.
            if check_not_in_host_fn("drop").is_ok() {
                let _ = self.backend.synchronize();
            }
            let trace = rec.collect();
            let path = &crate::trace::file_for_rank(path, trace.clock_sync.map(|c| c.rank));
            if let Err(e) = crate::trace::chrome::write_chrome_json(&trace, path) {
                eprintln!(
                    "cueflow: could not write CUEFLOW_TRACE={}: {e}",
                    path.display()
                );
            }
        }
    }
}
