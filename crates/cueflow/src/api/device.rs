//! [`Device`]: one device of one backend, opened by name (`host`, `cuda:N`) or from the
//! `CUEFLOW_DEVICE` environment variable.

use std::sync::Arc;

pub use crate::core::devices::device::DeviceSpec;
use crate::core::devices::open_device::OpenDevice;
use crate::core::tracking::sanitizer::{Lint, RaceReport, SanitizeMode};
use crate::error::{Error, Result};
use crate::trace::Trace;
use crate::types::DeviceProperties;

/// A device: the place streams, events and memory belong to. Cheap to clone.
///
/// ```
/// let dev = cueflow::Device::host()?;
/// println!("{} with {} engines", dev.properties().name, dev.properties().async_engines);
/// dev.synchronize()?;
/// # Ok::<(), cueflow::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<OpenDevice>,
}

impl Device {
    /// Open a host-backend device (`host:0`) with one compute worker per core.
    pub fn host() -> Result<Device> {
        Self::host_with_workers(0)
    }

    /// Open a host device with `workers` compute workers (0: one per core, at least 2).
    pub fn host_with_workers(workers: usize) -> Result<Device> {
        Self::host_n(0, workers)
    }

    /// Open host device `ordinal` (`host:N`) with `workers` compute workers (0: the default).
    /// Every open makes an independent device with engines of its own (MD1).
    pub fn host_n(ordinal: usize, workers: usize) -> Result<Device> {
        Ok(Device {
            inner: OpenDevice::open_spec(DeviceSpec::Host(ordinal), workers)?,
        })
    }

    /// Open CUDA device `ordinal`. Fails with [`Error::Unavailable`] when the driver library or
    /// the device is missing, or the crate was built without the `cuda` feature.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        Ok(Device {
            inner: OpenDevice::open_spec(DeviceSpec::Cuda(ordinal), 0)?,
        })
    }

    /// Open the device a [`DeviceSpec`] names.
    pub fn open(spec: DeviceSpec) -> Result<Device> {
        match spec {
            DeviceSpec::Host(n) => Self::host_n(n, 0),
            DeviceSpec::Cuda(n) => Self::cuda(n),
        }
    }

    /// Open the device named by a string: `host`, `host:N`, `cuda` or `cuda:N`.
    pub fn open_str(name: &str) -> Result<Device> {
        Self::open(name.parse()?)
    }

    /// Open a list of devices (MD1): `host:2x`, `cuda:all`, or names separated by commas
    /// (`cuda:0,cuda:1`). A single name opens a list of one.
    pub fn open_list(names: &str) -> Result<Vec<Device>> {
        crate::core::devices::device::parse_device_list(names)?
            .into_iter()
            .map(Self::open)
            .collect()
    }

    /// `CUEFLOW_DEVICE` as written (`None` when unset or blank, or not valid Unicode, which
    /// warns): what [`from_env`](Self::from_env) and [`list_from_env`](Self::list_from_env)
    /// open, read the way they read it, for a program that parses it itself — a command line
    /// whose device option falls back to the variable, as the `cueflow` command's does.
    pub fn env_setting() -> Option<String> {
        crate::config::device()
    }

    /// The devices `CUEFLOW_DEVICE` names, as a list (default: `host`).
    pub fn list_from_env() -> Result<Vec<Device>> {
        match crate::config::device() {
            Some(v) => Self::open_list(&v),
            None => Ok(vec![Self::host()?]),
        }
    }

    /// Open the device named by `CUEFLOW_DEVICE` (default: `host`). Every documented value is
    /// accepted: a single device (`host`, `host:N`, `cuda`, `cuda:N`) opens that device; a
    /// list (`host:2x`, `cuda:all`, `cuda:0,cuda:1`) opens its **first** device, as a
    /// single-device CUDA program runs on device 0 of those `CUDA_VISIBLE_DEVICES` lists — so
    /// one setting serves a whole test suite of single- and multi-device programs. Use
    /// [`list_from_env`](Self::list_from_env) to open them all.
    pub fn from_env() -> Result<Device> {
        match crate::config::device() {
            Some(v) => Self::open_first(&v),
            None => Self::host(),
        }
    }

    /// Open the first device of a device list (`host:2x` → `host:0`), or the one device a
    /// name names.
    fn open_first(names: &str) -> Result<Device> {
        let specs = crate::core::devices::device::parse_device_list(names)?;
        match specs.first() {
            Some(&spec) => Self::open(spec),
            None => Err(Error::UnknownDevice(names.to_string())),
        }
    }

    /// Free and total device memory in bytes, now (DV1; `cudaMemGetInfo`). On the host
    /// backend: the memory the system could give without swapping (`MemAvailable` of
    /// `/proc/meminfo`, else `sysinfo(2)`'s free RAM) and the machine's memory.
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        self.inner.mem_info()
    }

    /// How host threads wait for this device — synchronizations of it, its streams and its
    /// events (DV2; `cudaSetDeviceFlags` with `cudaDeviceScheduleSpin`, `…Yield`,
    /// `…BlockingSync`, `…Auto`). Allowed only before the device's first stream, event or
    /// allocation (that includes [`Stream::legacy`](crate::Stream::legacy)); afterwards it is
    /// refused with [`Error::NotPermitted`] (rule `DV2`) and nothing changes.
    ///
    /// On CUDA it sets the scheduling flags of the GPU's primary context, which cueflow holds
    /// active from the moment the device is opened: `cuDevicePrimaryCtxSetFlags_v2` (kept for
    /// every later user of the primary context, as `cudaSetDeviceFlags` does) and
    /// `cuCtxSetFlags` on the active context, so the waits from now on follow them. The flags
    /// belong to the GPU's primary context, which every [`Device`] of that GPU in the process
    /// (and the CUDA runtime, if the program also uses it) shares. On the host backend,
    /// [`SyncMode::BlockingSync`](crate::SyncMode::BlockingSync) makes host waits sleep on a
    /// condition variable at once; the other modes poll for up to 200 us (spinning, then
    /// yielding) before they sleep.
    ///
    /// ```
    /// let dev = cueflow::Device::from_env()?;
    /// dev.set_sync_mode(cueflow::SyncMode::BlockingSync)?;
    /// let s = cueflow::Stream::new(&dev)?;
    /// s.synchronize()?; // sleeps instead of spinning
    /// assert!(dev.set_sync_mode(cueflow::SyncMode::Spin).is_err()); // too late (DV2)
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn set_sync_mode(&self, mode: crate::types::SyncMode) -> Result<()> {
        self.inner.set_sync_mode(mode)
    }

    /// Stop a kernel that runs longer than `limit` (SPEC HK4): on the host backend a CUDA C
    /// kernel past the limit has its worker process stopped and becomes the device's sticky
    /// [`Error::KernelFault`](crate::Error::KernelFault) ("ran longer than …"), so a kernel that
    /// never ends cannot hang the program; the program and its other devices go on. `None`
    /// removes the limit; `CUEFLOW_KERNEL_TIMEOUT_MS` sets one for every host device the
    /// process opens. The limit covers each range of blocks a compute worker runs (blocks of
    /// one launch run as several ranges, in parallel); Rust closures, and the CUDA C launches
    /// that run in the program's own process (`docs/host-cuda-c.md`), cannot be stopped and
    /// are not limited. A limit of zero is refused ([`Error::NotPermitted`](crate::Error)); on
    /// CUDA, whose kernels cannot be stopped, the call returns
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let dev = cueflow::Device::host()?;
    /// dev.set_kernel_timeout(Duration::from_secs(10))?;
    /// dev.set_kernel_timeout(None)?; // no limit again
    /// assert!(dev.set_kernel_timeout(Duration::ZERO).is_err());
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn set_kernel_timeout(&self, limit: impl Into<Option<std::time::Duration>>) -> Result<()> {
        self.inner.set_kernel_timeout(limit.into())
    }

    /// True if this device can read and write `other`'s memory directly, so peer copies
    /// between them take the direct path (MD3; CUDA: `cuDeviceCanAccessPeer`; host devices:
    /// always).
    pub fn can_access_peer(&self, other: &Device) -> bool {
        self.inner.can_access_peer(&other.inner)
    }

    /// Turn on direct peer copies between this device and `other`, both directions
    /// (`cuCtxEnablePeerAccess`; [`Stream::copy_peer`](crate::Stream::copy_peer) does it on
    /// its first copy between two GPUs). `Ok(true)`: peer copies between them go direct;
    /// `Ok(false)`: they cannot reach each other and copies are staged through the host; an
    /// error: the driver refused (copies are staged then too).
    ///
    /// With `Ok(true)`, kernels on either device may also take the other's device buffers as
    /// arguments, read and written in place and tracked like any argument (HM6), until
    /// [`disable_peer_access`](Self::disable_peer_access).
    pub fn enable_peer_access(&self, other: &Device) -> Result<bool> {
        let direct = self.inner.enable_peer(&other.inner)?;
        if direct {
            self.inner.grant_peer_kernels(&other.inner);
        }
        Ok(direct)
    }

    /// Revoke what [`enable_peer_access`](Self::enable_peer_access) gave kernels, both
    /// directions (HM6, `cudaDeviceDisablePeerAccess`): another device's buffer as a kernel
    /// argument is refused again (ER3). Peer copies keep working (staged or direct, MD3); on
    /// CUDA the driver's peer mapping itself stays, as peer copies use it.
    pub fn disable_peer_access(&self, other: &Device) -> Result<()> {
        self.inner.revoke_peer_kernels(&other.inner);
        Ok(())
    }

    /// This device's memory as a place to prefetch managed memory to or to prefer for it
    /// (HM4): [`MemLocation::Ordinal`](crate::MemLocation::Ordinal) with its ordinal, so that
    /// a stream of *another* device of the same backend can migrate pages here
    /// (`cudaMemPrefetchAsync(p, n, thisDevice, otherStream)`). Use it with streams and
    /// buffers of this device's backend only; on the host backend nothing moves.
    pub fn mem_location(&self) -> crate::types::MemLocation {
        let ordinal = match self.inner.spec {
            DeviceSpec::Host(n) | DeviceSpec::Cuda(n) => n,
        };
        crate::types::MemLocation::Ordinal(ordinal)
    }

    /// What the device is and can do.
    pub fn properties(&self) -> &DeviceProperties {
        self.inner.properties()
    }

    /// Bound the work pending on each stream of this device to `ops` operations (RL1; at
    /// least 1): an enqueue on a stream that has `ops` pending waits until the stream's
    /// oldest work completed, as a CUDA launch waits when the launch queue is full. The
    /// default is `CUEFLOW_QUEUE_DEPTH`, else [`DEFAULT_QUEUE_DEPTH`](crate::DEFAULT_QUEUE_DEPTH).
    /// A host function or kernel that waits for something the program does later on the same
    /// thread can deadlock behind a full queue, as on CUDA: keep such gates shallower than
    /// the bound.
    pub fn set_queue_depth(&self, ops: usize) {
        self.inner.set_queue_depth(ops)
    }

    /// The bound of [`set_queue_depth`](Self::set_queue_depth).
    pub fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }

    /// The device memory that graph allocations take (GR12; `cudaDeviceGetGraphMemAttribute`):
    /// `used`, the bytes backing graph allocations now, `reserved`, the bytes kept for them,
    /// and the high-water mark of each since the device opened or
    /// [`reset_graph_memory_high`](Self::reset_graph_memory_high). On CUDA the figures are the
    /// driver's, for the whole GPU: a graph's memory is reserved at its first launch, and later
    /// launches — of it or of other graphs — whose allocations do not overlap in time reuse it.
    /// On the host backend each instantiation takes its graph memory when it is made and keeps
    /// it while it lives: `used` and `reserved` are the bytes the live instantiations hold.
    pub fn graph_memory(&self) -> Result<crate::PoolStats> {
        self.inner.graph_memory()
    }

    /// Start the high-water marks of [`graph_memory`](Self::graph_memory) again from now
    /// (GR12; `cudaDeviceSetGraphMemAttribute` of the two `…High` attributes).
    pub fn reset_graph_memory_high(&self) -> Result<()> {
        self.inner.reset_graph_memory_high()
    }

    /// Give back the graph memory that no graph allocation uses (GR12;
    /// `cudaDeviceGraphMemTrim`): memory of a launch still to run or still running, and memory
    /// a graph handed out that is not freed (GR10), stays. On the host backend graph memory
    /// goes with its instantiation, so there is nothing to give back.
    pub fn trim_graph_memory(&self) -> Result<()> {
        self.inner.trim_graph_memory()
    }

    /// Bytes the device's stream-ordered pool holds from the system now, where the backend
    /// counts them (the host backend; `None` on CUDA, whose pool the driver keeps). For
    /// tests and soak runs of RL3; programs read [`MemPool::stats`](crate::MemPool::stats) of
    /// [`default_pool`](Self::default_pool), on every backend.
    #[doc(hidden)]
    pub fn pool_reserved_bytes(&self) -> Option<usize> {
        self.inner.pool_reserved()
    }

    /// Bytes of freed pinned memory the device's backend still holds (CUDA; `None` on the host
    /// backend, which keeps none): kept for reuse, bounded by `CUEFLOW_PINNED_CACHE_MAX_BYTES`,
    /// and let go of but not freed yet (that waits until every stream is idle, RL3). For tests
    /// and soak runs.
    #[doc(hidden)]
    pub fn pinned_cached_bytes(&self) -> Option<usize> {
        self.inner.pinned_cached()
    }

    /// Driver calls the calling thread made so far (all CUDA devices), with the names of
    /// those made since the previous call that passed `log` (logging stays on while `log` is
    /// true); `None` on the host backend. For tests and benchmarks of what a call costs in
    /// driver calls (a replay of an automatic graph, AG2).
    #[doc(hidden)]
    pub fn driver_calls(&self, log: bool) -> Option<(u64, Vec<&'static str>)> {
        self.inner.driver_calls(log)
    }

    /// The spec this device was opened with.
    pub fn spec(&self) -> DeviceSpec {
        self.inner.spec
    }

    /// Block until all work on every stream of the device is done (ST9). Refused inside host
    /// functions (HF2) and during stream captures that forbid it (GR2).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }

    /// The sticky error that poisoned this device, if any (KN2, ER2).
    pub fn sticky_error(&self) -> Option<Error> {
        self.inner.sticky_error()
    }

    /// Nanoseconds on the device's host clock (the clock traces use).
    pub fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }

    /// Start recording a trace of every operation (replaces a trace in progress).
    pub fn start_trace(&self) -> Result<()> {
        self.inner.start_trace()
    }

    /// Stop tracing and return what was recorded. Synchronizes the device first so every
    /// operation has its times. Returns an empty trace when tracing was off.
    pub fn stop_trace(&self) -> Result<Trace> {
        self.inner.stop_trace()
    }

    /// Turn the race sanitizer on or off for this device (AC4). A device starts in the mode
    /// `CUEFLOW_SANITIZE` names (`off`, `warn`, `error`, `panic`), else `warn` in debug builds
    /// and `off` in release builds ([`SanitizeMode::from_env`]). Accesses made while it was
    /// off are not checked against later ones.
    pub fn set_sanitize(&self, mode: SanitizeMode) {
        self.inner.track.set_mode(mode);
    }

    /// The sanitizer's mode.
    pub fn sanitize_mode(&self) -> SanitizeMode {
        self.inner.track.mode()
    }

    /// Races the sanitizer reported on this device, once per pair of call sites.
    pub fn sanitizer_reports(&self) -> Vec<RaceReport> {
        self.inner.track.reports()
    }

    /// Take the races reported so far (the next race at the same call sites is reported again).
    pub fn take_sanitizer_reports(&self) -> Vec<RaceReport> {
        self.inner.track.take_reports()
    }

    /// Lints the sanitizer printed on this device: legal patterns that are rarely meant.
    pub fn sanitizer_lints(&self) -> Vec<Lint> {
        self.inner.track.lints()
    }

    /// Take the lints so far.
    pub fn take_sanitizer_lints(&self) -> Vec<Lint> {
        self.inner.track.take_lints()
    }

    /// Automatic ordering for every stream of the device (AC5): each new operation waits for
    /// exactly the earlier conflicting accesses on other streams, byte range by byte range.
    /// Work enqueued before this call is not tracked for it.
    pub fn set_auto_order(&self, on: bool) {
        self.inner.track.set_auto_device(on);
    }

    /// Automatic graphs for every stream of the device but the legacy default stream (AG1;
    /// `CUEFLOW_AUTO_GRAPH=1` turns them on for every device the process opens): work the
    /// program repeats between host observations is replayed as a graph. Off issues what is
    /// held and lets the device's graphs go (AG6). See [`Stream::set_auto_graph`].
    ///
    /// [`Stream::set_auto_graph`]: crate::Stream::set_auto_graph
    pub fn set_auto_graph(&self, on: bool) -> Result<()> {
        self.inner.autograph.set_device(on)
    }

    /// True while the whole device is in automatic-graph mode.
    pub fn auto_graph(&self) -> bool {
        self.inner.autograph.device_on()
    }

    /// What automatic graphs did on this device so far: graphs instantiated, replays, and
    /// operations issued one by one after all.
    pub fn auto_graph_stats(&self) -> crate::AutoGraphStats {
        self.inner.autograph.stats()
    }

    /// True while the whole device orders automatically.
    pub fn auto_order(&self) -> bool {
        self.inner.track.auto_device()
    }

    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    pub(crate) fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({}, {})", self.inner.spec, self.properties().name)
    }
}
