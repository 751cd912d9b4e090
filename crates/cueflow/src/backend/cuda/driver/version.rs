//! Which driver this is and what it offers: its CUDA version, the driver functions newer than
//! the floor (CUDA 12.0) that it exports, the older entry points it keeps, and what follows
//! from them — which entry point a call takes, which fallback runs, or which feature is
//! [`Error::Unsupported`] and needs which version.
//!
//! Everything here is a pure function of an [`Api`] (a version and "has this symbol"), so the
//! decisions are tested against the per-version function lists (`api-versions.txt`, generated
//! from cudarc's versioned bindings by `scripts/cuda-api-versions.py`) without a GPU.

use std::fmt;

use crate::error::Error;
use crate::types::DriverFeature;

/// A CUDA version as `cuDriverGetVersion` and `nvrtcVersion` give it: 1000 × major + 10 ×
/// minor (12040 is CUDA 12.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Version(pub u32);

impl Version {
    /// The oldest driver the CUDA backend opens on.
    pub const FLOOR: Version = Version(12_000);

    /// `major.minor`.
    pub const fn new(major: u32, minor: u32) -> Version {
        Version(major * 1000 + minor * 10)
    }

    pub const fn major(self) -> u32 {
        self.0 / 1000
    }

    pub const fn minor(self) -> u32 {
        self.0 % 1000 / 10
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

/// The error for something this driver cannot do: names what, the version it needs and the
/// version at hand, in the words every such error uses ("needs a CUDA 12.3 driver or newer"),
/// which the conformance runner reads to skip a feature on an older driver.
pub(crate) fn needs(what: &str, need: Version, have: Version) -> Error {
    Error::driver_too_old(what, need.0, have.0)
}

/// Driver functions newer than CUDA 12.0 that the backend calls when the driver exports them
/// (cudarc's lazy loader panics on a missing symbol, so none is called unless [`Api::has`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // Named after the driver's functions (`cuFuncLoad`).
pub(crate) enum Func {
    CtxSetFlags,
    CtxCreateV4,
    EventElapsedTimeV2,
    MemPrefetchAsyncV2,
    MemAdviseV2,
    FuncGetParamInfo,
    FuncLoad,
    ModuleGetFunctionCount,
    ModuleEnumerateFunctions,
    GraphConditionalHandleCreate,
    GraphAddNodeV2,
    StreamBeginCaptureToGraph,
    StreamGetCaptureInfoV3,
}

impl Func {
    pub const ALL: [Func; 13] = [
        Func::CtxSetFlags,
        Func::CtxCreateV4,
        Func::EventElapsedTimeV2,
        Func::MemPrefetchAsyncV2,
        Func::MemAdviseV2,
        Func::FuncGetParamInfo,
        Func::FuncLoad,
        Func::ModuleGetFunctionCount,
        Func::ModuleEnumerateFunctions,
        Func::GraphConditionalHandleCreate,
        Func::GraphAddNodeV2,
        Func::StreamBeginCaptureToGraph,
        Func::StreamGetCaptureInfoV3,
    ];

    /// The exported symbol.
    pub const fn symbol(self) -> &'static str {
        match self {
            Func::CtxSetFlags => "cuCtxSetFlags",
            Func::CtxCreateV4 => "cuCtxCreate_v4",
            Func::EventElapsedTimeV2 => "cuEventElapsedTime_v2",
            Func::MemPrefetchAsyncV2 => "cuMemPrefetchAsync_v2",
            Func::MemAdviseV2 => "cuMemAdvise_v2",
            Func::FuncGetParamInfo => "cuFuncGetParamInfo",
            Func::FuncLoad => "cuFuncLoad",
            Func::ModuleGetFunctionCount => "cuModuleGetFunctionCount",
            Func::ModuleEnumerateFunctions => "cuModuleEnumerateFunctions",
            Func::GraphConditionalHandleCreate => "cuGraphConditionalHandleCreate",
            Func::GraphAddNodeV2 => "cuGraphAddNode_v2",
            Func::StreamBeginCaptureToGraph => "cuStreamBeginCaptureToGraph",
            Func::StreamGetCaptureInfoV3 => "cuStreamGetCaptureInfo_v3",
        }
    }

    /// The first CUDA version whose driver has it (checked against `api-versions.txt`).
    pub const fn since(self) -> Version {
        match self {
            Func::CtxSetFlags => Version::new(12, 1),
            Func::MemPrefetchAsyncV2 | Func::MemAdviseV2 => Version::new(12, 2),
            Func::GraphConditionalHandleCreate
            | Func::GraphAddNodeV2
            | Func::StreamBeginCaptureToGraph
            | Func::StreamGetCaptureInfoV3 => Version::new(12, 3),
            Func::FuncGetParamInfo
            | Func::FuncLoad
            | Func::ModuleGetFunctionCount
            | Func::ModuleEnumerateFunctions => Version::new(12, 4),
            Func::CtxCreateV4 => Version::new(12, 5),
            Func::EventElapsedTimeV2 => Version::new(12, 8),
        }
    }

    /// The function named `symbol`, if it is one of these.
    pub fn of_symbol(symbol: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.symbol() == symbol)
    }
}

/// The older entry points of calls whose newer form came after CUDA 12.0. Every 12.x driver
/// has them; CUDA 13's headers (and so cudarc's `cuda-13000` bindings) no longer declare them,
/// so `library.rs` declares their C signatures and loads them itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Old {
    CtxCreateV2,
    EventElapsedTime,
    MemPrefetchAsync,
    MemAdvise,
}

impl Old {
    pub const ALL: [Old; 4] = [
        Old::CtxCreateV2,
        Old::EventElapsedTime,
        Old::MemPrefetchAsync,
        Old::MemAdvise,
    ];

    pub const fn symbol(self) -> &'static str {
        match self {
            Old::CtxCreateV2 => "cuCtxCreate_v2",
            Old::EventElapsedTime => "cuEventElapsedTime",
            Old::MemPrefetchAsync => "cuMemPrefetchAsync",
            Old::MemAdvise => "cuMemAdvise",
        }
    }
}

/// Every function of the CUDA 12.0 driver API the backend calls unconditionally: the loader
/// refuses a driver that lacks one (the test checks that this is exactly what the driver layer
/// calls besides [`Func`], and that CUDA 12.0 has each).
pub(crate) const BASE: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    // context and device
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuDevicePrimaryCtxSetFlags_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxDestroy_v2",
    "cuCtxSynchronize",
    "cuCtxGetStreamPriorityRange",
    "cuCtxGetFlags",
    "cuMemGetInfo_v2",
    // memory
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemAllocManaged",
    "cuMemsetD8_v2",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemHostGetDevicePointer_v2",
    "cuStreamAttachMemAsync",
    "cuMemcpyAsync",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuMemPoolSetAccess",
    "cuMemAllocFromPoolAsync",
    "cuDeviceGetGraphMemAttribute",
    "cuDeviceSetGraphMemAttribute",
    "cuDeviceGraphMemTrim",
    "cuGraphUpload",
    // streams and events
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamGetFlags",
    "cuStreamGetPriority",
    "cuLaunchHostFunc",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    // modules and launches
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuLinkCreate_v2",
    "cuLinkAddData_v2",
    "cuLinkComplete",
    "cuLinkDestroy",
    // graphs
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphInstantiateWithFlags",
    "cuGraphDebugDotPrint",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphAddKernelNode_v2",
    "cuGraphAddMemcpyNode",
    "cuGraphAddMemsetNode",
    "cuGraphAddHostNode",
    "cuGraphAddEmptyNode",
    "cuGraphAddChildGraphNode",
    "cuGraphAddMemAllocNode",
    "cuGraphAddMemFreeNode",
    "cuGraphAddEventRecordNode",
    "cuGraphAddEventWaitNode",
    "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphExecMemcpyNodeSetParams",
    "cuGraphExecMemsetNodeSetParams",
    "cuGraphExecHostNodeSetParams",
    "cuGraphExecEventRecordNodeSetEvent",
    "cuGraphExecEventWaitNodeSetEvent",
    "cuGraphNodeSetEnabled",
    // peers
    "cuDeviceCanAccessPeer",
    "cuCtxEnablePeerAccess",
    "cuMemcpyPeerAsync",
];

/// What the CUDA backend does differently by driver version: shown by `cueflow info`
/// ([`Api::features`]), and named by the [`Error::Unsupported`] of what a driver cannot do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Feature {
    /// Changing how the host waits (`Device::set_sync_mode`) on an open device.
    SyncMode,
    /// Conditional graph nodes, `if` and `while`.
    ConditionalIfWhile,
    /// Conditional graph nodes, `if`/`else` and `switch`.
    ConditionalElseSwitch,
    /// An external operation's CUDA side captured straight into a graph (graph memory in it).
    CaptureToGraph,
    /// Kernel parameter sizes from the driver (the launch check, KC4).
    ParamInfo,
    /// Every kernel of a module loaded with the module.
    EagerLoading,
    /// Managed-memory prefetches and advice by memory location.
    MemLocation,
    /// A context of cueflow's own after a fault (ER2 recovery).
    ContextParams,
    /// Event timing through the entry point of CUDA 12.8.
    ElapsedV2,
}

impl Feature {
    pub const ALL: [Feature; 9] = [
        Feature::SyncMode,
        Feature::ConditionalIfWhile,
        Feature::ConditionalElseSwitch,
        Feature::CaptureToGraph,
        Feature::ParamInfo,
        Feature::EagerLoading,
        Feature::MemLocation,
        Feature::ContextParams,
        Feature::ElapsedV2,
    ];

    /// What it is, for users.
    pub const fn what(self) -> &'static str {
        match self {
            Feature::SyncMode => "Device::set_sync_mode on an open device",
            Feature::ConditionalIfWhile => "conditional graph nodes (if, while)",
            Feature::ConditionalElseSwitch => "conditional graph nodes (if/else, switch)",
            Feature::CaptureToGraph => "graph memory inside an external operation in a graph",
            Feature::ParamInfo => "kernel parameter sizes from the driver",
            Feature::EagerLoading => "every kernel of a module loaded at once",
            Feature::MemLocation => "managed memory prefetch and advice by location",
            Feature::ContextParams => "a fresh context after a fault (cuCtxCreate_v4)",
            Feature::ElapsedV2 => "event timing (cuEventElapsedTime_v2)",
        }
    }

    /// The driver functions it needs.
    pub const fn funcs(self) -> &'static [Func] {
        match self {
            Feature::SyncMode => &[Func::CtxSetFlags],
            Feature::ConditionalIfWhile | Feature::ConditionalElseSwitch => {
                &[Func::GraphConditionalHandleCreate, Func::GraphAddNodeV2]
            }
            Feature::CaptureToGraph => &[
                Func::StreamBeginCaptureToGraph,
                Func::StreamGetCaptureInfoV3,
            ],
            Feature::ParamInfo => &[Func::FuncGetParamInfo],
            Feature::EagerLoading => &[
                Func::ModuleGetFunctionCount,
                Func::ModuleEnumerateFunctions,
                Func::FuncLoad,
            ],
            Feature::MemLocation => &[Func::MemPrefetchAsyncV2, Func::MemAdviseV2],
            Feature::ContextParams => &[Func::CtxCreateV4],
            Feature::ElapsedV2 => &[Func::EventElapsedTimeV2],
        }
    }

    /// The CUDA version it needs: its functions', or later where the driver's behaviour
    /// came later than its functions (if/else and switch nodes: CUDA 12.8).
    pub fn needs(self) -> Version {
        let funcs = self.funcs().iter().map(|f| f.since()).max();
        match self {
            Feature::ConditionalElseSwitch => Version::new(12, 8),
            _ => funcs.unwrap_or(Version::FLOOR),
        }
    }

    /// What runs instead on an older driver, or `None` when the feature is unsupported there.
    pub const fn otherwise(self) -> Option<&'static str> {
        match self {
            Feature::SyncMode | Feature::ConditionalIfWhile | Feature::ConditionalElseSwitch => {
                None
            }
            Feature::CaptureToGraph => Some(
                "captured into a child graph node (refused only when that work allocates graph \
                 memory)",
            ),
            Feature::ParamInfo => Some(
                "sizes from NVRTC's PTX for CUDA C and PTX kernels; cubins given as such are \
                 launched unchecked",
            ),
            Feature::EagerLoading => Some("each kernel of a module looked up by its PTX name"),
            Feature::MemLocation => Some("cuMemPrefetchAsync and cuMemAdvise by device"),
            Feature::ContextParams => Some("cuCtxCreate_v2"),
            Feature::ElapsedV2 => Some("cuEventElapsedTime"),
        }
    }
}

/// Which of two entry points a call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The newer one (a [`Func`]).
    New,
    /// The older one (an [`Old`]).
    Old,
}

/// What a loaded driver offers: its version and which of [`Func`] and [`Old`] it exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Api {
    pub version: Version,
    funcs: u32,
    old: u8,
}

impl Api {
    /// The driver of `version` that exports the symbols for which `has` is true.
    pub fn probe(version: Version, has: impl Fn(&str) -> bool) -> Api {
        let mut funcs = 0;
        for (i, f) in Func::ALL.iter().enumerate() {
            if has(f.symbol()) {
                funcs |= 1 << i;
            }
        }
        let mut old = 0;
        for (i, o) in Old::ALL.iter().enumerate() {
            if has(o.symbol()) {
                old |= 1 << i;
            }
        }
        Api {
            version,
            funcs,
            old,
        }
    }

    /// The functions of [`BASE`] that a driver exporting what `has` says lacks.
    pub fn missing_base(has: impl Fn(&str) -> bool) -> Vec<&'static str> {
        BASE.iter().copied().filter(|s| !has(s)).collect()
    }

    /// Whether the driver exports `f`.
    #[inline]
    pub fn has(&self, f: Func) -> bool {
        let i = Func::ALL.iter().position(|&x| x == f).unwrap_or(31);
        self.funcs & (1 << i) != 0
    }

    /// Whether the driver exports the older entry point `o`.
    pub fn has_old(&self, o: Old) -> bool {
        let i = Old::ALL.iter().position(|&x| x == o).unwrap_or(7);
        self.old & (1 << i) != 0
    }

    /// Whether `f` is there: its functions, and the version where behaviour came later.
    pub fn supports(&self, f: Feature) -> bool {
        f.funcs().iter().all(|&x| self.has(x)) && self.version >= f.needs()
    }

    /// `Ok` when the driver supports `f`, else the error naming the version it needs.
    pub fn require(&self, f: Feature) -> Result<(), Error> {
        if self.supports(f) {
            Ok(())
        } else {
            Err(needs(f.what(), f.needs(), self.version))
        }
    }

    /// The newer entry point when the driver has it, else the older one, else the error
    /// that names what is missing.
    pub fn pick(&self, new: Func, old: Old) -> Result<Entry, Error> {
        if self.has(new) {
            Ok(Entry::New)
        } else if self.has_old(old) {
            Ok(Entry::Old)
        } else {
            Err(Error::Unsupported(format!(
                "this CUDA {} driver exports neither {} nor {}",
                self.version,
                new.symbol(),
                old.symbol()
            )))
        }
    }

    /// The error for calling `f` on a driver that lacks it.
    pub fn missing(&self, f: Func) -> Error {
        needs(f.symbol(), f.since(), self.version)
    }

    /// Every [`Feature`] on this driver, and with NVRTC `nvrtc`, relocatable device code
    /// (which needs a driver at least as new as NVRTC, `nvrtc.rs`).
    pub fn features(&self, nvrtc: Option<Version>) -> Vec<DriverFeature> {
        let mut out: Vec<DriverFeature> = Feature::ALL
            .iter()
            .map(|&f| DriverFeature {
                name: f.what(),
                needs: f.needs().0,
                available: self.supports(f),
                otherwise: f.otherwise(),
            })
            .collect();
        if let Some(n) = nvrtc {
            out.push(DriverFeature {
                name: "relocatable device code (CompileOptions::link_source)",
                needs: n.0.max(Version::FLOOR.0),
                available: n <= self.version,
                otherwise: None,
            });
        }
        out
    }
}

#[cfg(test)]
#[path = "version_tests.rs"]
mod tests;
