//! What a device is and how its streams, pinned memory and host waits behave: properties,
//! features, stream kinds, pinned-memory flags, synchronization modes.

/// How a stream takes part in the legacy default stream's implicit ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The legacy default stream (ST4).
    Legacy,
    /// A blocking stream: synchronizes with the legacy stream (ST4). Per-thread default streams
    /// are blocking streams too (ST6).
    Blocking,
    /// A non-blocking stream: takes no part in ST4 (ST5).
    NonBlocking,
}

/// Everything a backend needs to create a stream.
#[derive(Clone, Copy, Debug)]
pub struct StreamDesc {
    /// Participation in ST4.
    pub kind: StreamKind,
    /// Priority, already clamped into the device's range (ST7).
    pub priority: i32,
}

/// Pinned-memory allocation and registration flags (`cudaHostAlloc*`, `cudaHostRegister*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinnedFlags {
    /// Write-combined: fast uploads, very slow host reads. Opt-in only
    /// (`cudaHostAllocWriteCombined`; ignored by registration).
    pub write_combined: bool,
    /// Portable (HM2): usable by the streams of every device of the process, not only by the
    /// device it was made on (`cudaHostAllocPortable`, `cudaHostRegisterPortable`). A device
    /// with unified addressing ([`DeviceProperties::unified_addressing`]: every 64-bit
    /// platform CUDA supports, and the host backend) makes all its pinned and registered
    /// memory portable whatever this flag says, as CUDA does; the flag matters on a device
    /// without it.
    pub portable: bool,
    /// Mapped (HM3): kernels read and write it in place through a device view
    /// (`cudaHostAllocMapped`, `cudaHostRegisterMapped`).
    pub mapped: bool,
}

impl PinnedFlags {
    /// The flags with `portable` set.
    pub fn portable(mut self) -> Self {
        self.portable = true;
        self
    }

    /// The flags with `mapped` set.
    pub fn mapped(mut self) -> Self {
        self.mapped = true;
        self
    }

    /// The flags with `write_combined` set.
    pub fn write_combined(mut self) -> Self {
        self.write_combined = true;
        self
    }

    /// The flags a device with `props` applies to an allocation or registration (HM2): with
    /// unified addressing CUDA makes `cudaMallocHost`/`cudaHostAlloc` memory usable from every
    /// device and registers memory portable by default, so portable is set.
    pub(crate) fn as_applied_by(self, props: &DeviceProperties) -> Self {
        if props.unified_addressing {
            self.portable()
        } else {
            self
        }
    }
}

/// What a device is and can do, as CUDA's `cudaDeviceProp` describes it (DV1).
///
/// Field names follow `cudaDeviceProp` in snake case where the two agree; where an older field
/// of cueflow's already carried a value, its doc names the `cudaDeviceProp` member it is. On
/// CUDA every value is read from the driver (`cuDeviceGetAttribute`). On the host backend the
/// values describe the machine where there is something real to describe (engines, workers,
/// memory, clock, L2) and are **emulated** elsewhere — they describe the GPU the host backend
/// imitates (an H100-like device: compute capability 9.0, warps of 32, its block, grid,
/// shared-memory and register limits) so that programs that check them before choosing a code
/// path run unchanged; each field says which it is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// Human-readable name (`name`). Host: `host (N compute workers)`.
    pub name: String,
    /// Backend name, `host` or `cuda`.
    pub backend: &'static str,
    /// Ordinal within the backend.
    pub ordinal: usize,
    /// Compute capability (`major`, `minor`). Host: emulated, (9, 0).
    pub compute_capability: (u32, u32),
    /// Copy engines that can run at once with kernels (`asyncEngineCount`). Host: real, 2
    /// (one engine per direction, CP5).
    pub async_engines: u32,
    /// Multiprocessors that run kernel blocks (`multiProcessorCount`). Host: real, the
    /// compute workers.
    pub compute_units: u32,
    /// Threads in a warp (`warpSize`). Host: emulated, 32.
    pub warp_size: u32,
    /// Least urgent priority (CUDA: 0).
    pub priority_least: i32,
    /// Most urgent priority (CUDA on H100: -5).
    pub priority_greatest: i32,
    /// Device memory in bytes (`totalGlobalMem`). Host: real, the machine's memory.
    pub total_memory: u64,
    /// Constant memory in bytes (`totalConstMem`). Host: emulated, 64 KiB.
    pub total_constant_memory: u64,
    /// Largest number of threads in one block (`maxThreadsPerBlock`). Host: emulated, 1024.
    pub max_threads_per_block: u32,
    /// Largest block dimensions (`maxThreadsDim`). Host: emulated, [1024, 1024, 64].
    pub max_block: [u32; 3],
    /// Largest grid dimensions (`maxGridSize`). Host: emulated, [2^31 - 1, 65535, 65535].
    pub max_grid: [u32; 3],
    /// Largest number of resident threads per multiprocessor
    /// (`maxThreadsPerMultiProcessor`). Host: emulated, 2048.
    pub max_threads_per_multiprocessor: u32,
    /// Shared memory a block gets without opting in (`sharedMemPerBlock`, 48 KiB on every
    /// CUDA device since Volta). Host: emulated, 48 KiB.
    pub shared_per_block: u32,
    /// Largest dynamic shared memory per block with opt-in (`sharedMemPerBlockOptin`); the
    /// limit launches are checked against (cueflow opts in for the kernel as needed). Host:
    /// emulated, 48 KiB.
    pub max_shared_per_block: u32,
    /// Shared memory per multiprocessor (`sharedMemPerMultiprocessor`). Host: emulated, 228
    /// KiB.
    pub shared_per_multiprocessor: u32,
    /// 32-bit registers per block (`regsPerBlock`). Host: emulated, 65536.
    pub registers_per_block: u32,
    /// Peak multiprocessor clock in kHz (`clockRate`; the attribute CUDA 13 moved out of
    /// `cudaDeviceProp`, still reported by `cuDeviceGetAttribute`). Host: real where the
    /// system says (`/sys/.../cpuinfo_max_freq`, else `/proc/cpuinfo`), else 1 GHz.
    pub clock_rate_khz: u32,
    /// Peak memory clock in kHz (`memoryClockRate`). Host: 0, not measured.
    pub memory_clock_rate_khz: u32,
    /// Memory bus width in bits (`memoryBusWidth`). Host: 0, not measured.
    pub memory_bus_width: u32,
    /// L2 cache in bytes (`l2CacheSize`). Host: real, the first CPU's L2 where sysfs says,
    /// else 0.
    pub l2_cache_size: u32,
    /// Kernels of different streams can run at once (`concurrentKernels`). Host: real, true.
    pub concurrent_kernels: bool,
    /// Pinned host memory can be mapped into the device's address space
    /// (`canMapHostMemory`). Host: real, true (device memory is host memory).
    pub can_map_host_memory: bool,
    /// Managed (unified) memory is supported (`managedMemory`). Host: real, true.
    pub managed_memory: bool,
    /// The host and the device can access managed memory at once
    /// (`concurrentManagedAccess`). Host: real, true.
    pub concurrent_managed_access: bool,
    /// The device shares one address space with the host (`unifiedAddressing`): its pinned
    /// and registered memory is then portable (HM2), as CUDA makes it. Host: real, true (one
    /// process's memory), so pinned memory of a host device serves every device's streams.
    pub unified_addressing: bool,
    /// The device is integrated with the host's memory (`integrated`). Host: real, true.
    pub integrated: bool,
    /// PCI domain, bus and device ids (`pciDomainID`, `pciBusID`, `pciDeviceID`). Host: 0,
    /// 0, 0 (no PCI device).
    pub pci_ids: (u32, u32, u32),
    /// Whether stream-ordered allocation is supported (`memoryPoolsSupported`).
    pub memory_pools: bool,
    /// Largest total size of one launch's kernel parameters in bytes (KC4): 32,764 on CUDA
    /// 12.1+ drivers with compute capability 7.0+, else 4,096. Host: 32,764, as on a GPU.
    pub max_parameter_bytes: u32,
    /// The CUDA version of the driver (`cuDriverGetVersion`, `cudaDriverGetVersion`):
    /// 1000 × major + 10 × minor, so 12040 is CUDA 12.4. Host: emulated, 13000 (CUDA 13.0,
    /// whose semantics the host backend follows), so that a program's version checks pass.
    pub driver_version: u32,
    /// Who may use the device (`computeMode`, `CU_DEVICE_ATTRIBUTE_COMPUTE_MODE`), as the
    /// system administrator set it (`nvidia-smi -c`). Host: real, [`ComputeMode::Default`]
    /// (any process and thread may open host devices).
    pub compute_mode: ComputeMode,
    /// The version of the NVRTC that compiles CUDA C for the device (`nvrtcVersion`), counted
    /// as `driver_version` is (12090 is NVRTC 12.9): the one whose major version is the
    /// driver's, as `docs/gpu.md` says. `None` when none was found (CUDA C kernels then fail
    /// with [`Error::Unavailable`](crate::Error::Unavailable); PTX and cubins still load).
    /// Host: `None` (the host backend compiles CUDA C with the system's C++ compiler).
    pub nvrtc_version: Option<u32>,
    /// What the CUDA backend does differently by driver version (the floor is CUDA 12.0): each
    /// feature, the version it needs, whether this driver has it, and what runs instead when it
    /// does not. `cueflow info` prints them. Host: empty (the host backend has every feature).
    pub driver_features: Vec<DriverFeature>,
}

/// One feature of the CUDA backend that depends on the driver's version, as
/// [`DeviceProperties::driver_features`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverFeature {
    /// What it is.
    pub name: &'static str,
    /// The driver version it needs (1000 × major + 10 × minor).
    pub needs: u32,
    /// Whether this device's driver has it.
    pub available: bool,
    /// What the backend does instead on an older driver; `None` when the feature is
    /// [`Error::Unsupported`](crate::Error::Unsupported) there, with a message naming `needs`.
    pub otherwise: Option<&'static str>,
}

/// Who may use a device (`cudaComputeMode`), as [`DeviceProperties::compute_mode`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ComputeMode {
    /// Any number of processes and threads (`cudaComputeModeDefault`).
    Default,
    /// No process may use it (`cudaComputeModeProhibited`): opening it fails.
    Prohibited,
    /// One process at a time, with any number of its threads
    /// (`cudaComputeModeExclusiveProcess`).
    ExclusiveProcess,
    /// A value this version of cueflow does not know (a later driver's), as reported.
    Other(i32),
}

impl ComputeMode {
    /// The mode for the driver's `CU_COMPUTEMODE_*` value.
    pub(crate) fn from_raw(v: i32) -> Self {
        match v {
            0 => ComputeMode::Default,
            2 => ComputeMode::Prohibited,
            3 => ComputeMode::ExclusiveProcess,
            v => ComputeMode::Other(v),
        }
    }
}

impl std::fmt::Display for ComputeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComputeMode::Default => f.write_str("default"),
            ComputeMode::Prohibited => f.write_str("prohibited"),
            ComputeMode::ExclusiveProcess => f.write_str("exclusive process"),
            ComputeMode::Other(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// How a host thread waits for a device (DV2; CUDA's `cudaDeviceScheduleSpin`,
/// `…ScheduleYield`, `…ScheduleBlockingSync`, `…ScheduleAuto`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// The driver chooses: spin when the device has fewer active contexts than the host has
    /// cores, yield otherwise (CUDA's default). Host backend: poll briefly (200 us, spinning,
    /// then yielding), then sleep.
    #[default]
    Auto,
    /// Spin actively: lowest latency, one busy core per waiting thread. Host backend: as
    /// `Auto`.
    Spin,
    /// Yield the core between checks. Host backend: as `Auto`.
    Yield,
    /// Block on a synchronization primitive: waiting threads sleep and use no CPU, at some
    /// wake-up latency. Host backend: host waits sleep at once, without polling.
    BlockingSync,
}

/// Work that may be pending on one stream before an enqueue waits (RL1), unless
/// `CUEFLOW_QUEUE_DEPTH` or `Device::set_queue_depth` says otherwise. Deep enough that the
/// device never idles for want of queued work (4,096 launches of 1–4 us each keep a GPU busy
/// for 4–16 ms), small enough that a queue costs a few megabytes at most.
pub const DEFAULT_QUEUE_DEPTH: usize = 4096;

/// A device's sticky error, asked from anywhere (the backend's `sticky_probe`): what a stream
/// callback's status is (HF4).
pub(crate) type StickyProbe = std::sync::Arc<dyn Fn() -> Option<crate::error::Error> + Send + Sync>;

/// Drops an owner that frees what it owns with driver calls where driver calls are allowed
/// (the backend's `owner_drop`).
pub(crate) type OwnerDrop = fn(Box<dyn std::any::Any + Send>);
