//! Finding `libcuda` and `libnvrtc` before cudarc touches them.
//!
//! cudarc's `dynamic-loading` opens the first library of its candidate list that loads
//! (`cudarc::get_lib_name_candidates`: `libcuda.so`, ..., `libcuda.so.1` for the driver,
//! `libnvrtc.so`, ..., `libnvrtc.so.13` for NVRTC) and **panics** when none does, or when a
//! function's symbol is missing. So before the first cudarc call this module opens the same
//! candidates in the same order with `dlopen(RTLD_LAZY | RTLD_LOCAL)` (what cudarc's loader
//! uses), checks with `dlsym` that the first one that loads exports every function this backend
//! calls, and closes it again. Only then are the first calls made, inside `catch_unwind` as a
//! second line of defence. Any failure is a reason string that becomes
//! [`crate::Error::Unavailable`]; nothing here panics.

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use cudarc::driver::sys::{self as cu, CUresult};
use cudarc::nvrtc::sys::{self as rtc, nvrtcResult};

/// Every driver function the backend calls (cudarc looks each up by this exact name).
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorName",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetDefaultMemPool",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxCreate_v4",
    "cuCtxDestroy_v2",
    "cuCtxSynchronize",
    "cuCtxGetStreamPriorityRange",
    "cuCtxGetFlags",
    "cuCtxSetFlags",
    "cuDevicePrimaryCtxSetFlags_v2",
    "cuDriverGetVersion",
    "cuMemGetInfo_v2",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemPoolSetAttribute",
    "cuMemPoolSetAccess",
    "cuStreamGetFlags",
    "cuStreamGetPriority",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyAsync",
    "cuMemsetD8Async",
    "cuModuleLoadData",
    "cuLinkCreate_v2",
    "cuLinkAddData_v2",
    "cuLinkComplete",
    "cuLinkDestroy",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuModuleGetFunctionCount",
    "cuModuleEnumerateFunctions",
    "cuFuncLoad",
    "cuFuncGetParamInfo",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuLaunchHostFunc",
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphAddKernelNode_v2",
    "cuGraphAddMemcpyNode",
    "cuGraphAddMemsetNode",
    "cuGraphAddHostNode",
    "cuGraphAddEmptyNode",
    "cuGraphAddChildGraphNode",
    "cuStreamBeginCapture_v2",
    "cuGraphAddMemAllocNode",
    "cuGraphAddMemFreeNode",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphExecMemcpyNodeSetParams",
    "cuGraphExecMemsetNodeSetParams",
    "cuGraphExecHostNodeSetParams",
    "cuGraphAddEventRecordNode",
    "cuGraphAddEventWaitNode",
    "cuGraphExecEventRecordNodeSetEvent",
    "cuGraphExecEventWaitNodeSetEvent",
    "cuDeviceCanAccessPeer",
    "cuCtxEnablePeerAccess",
    "cuMemcpyPeerAsync",
];

/// Every NVRTC function the backend calls.
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcGetNumSupportedArchs",
    "nvrtcGetSupportedArchs",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcAddNameExpression",
    "nvrtcGetLoweredName",
    "nvrtcDestroyProgram",
];

/// The candidate file names cudarc tries for `libs`, in cudarc's order.
fn candidates(libs: &[&str]) -> Vec<String> {
    libs.iter()
        .flat_map(|l| cudarc::get_lib_name_candidates(l))
        .collect()
}

/// Find the library cudarc will open among `names` and check it exports `symbols`.
fn find(what: &str, names: &[String], symbols: &[&str]) -> Result<String, String> {
    for name in names {
        let Ok(c) = CString::new(name.as_str()) else {
            continue;
        };
        // SAFETY: `c` is a NUL-terminated path; dlopen has no other precondition. The flags are
        // the ones libloading (cudarc's loader) uses, so the outcome is the one cudarc will see.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if h.is_null() {
            continue;
        }
        let missing: Vec<&str> = symbols
            .iter()
            .copied()
            .filter(|s| {
                let s = CString::new(*s).expect("symbol names have no NUL");
                // SAFETY: `h` is a live handle from dlopen above; `s` is NUL-terminated.
                unsafe { libc::dlsym(h, s.as_ptr()) }.is_null()
            })
            .collect();
        // SAFETY: `h` came from dlopen above and is closed once; no symbol from it is kept.
        unsafe { libc::dlclose(h) };
        return if missing.is_empty() {
            Ok(name.clone())
        } else {
            Err(format!(
                "{name} lacks {missing:?}; cueflow needs the {what} of CUDA 13 or newer"
            ))
        };
    }
    let mut tried: Vec<&str> = names.iter().map(String::as_str).collect();
    tried.dedup();
    let preferred: Vec<&str> = tried
        .iter()
        .copied()
        .filter(|n| n.ends_with(".so.1"))
        .collect();
    Err(format!(
        "no {what} library could be loaded ({} names tried, e.g. {}); is it installed and on \
         the loader path?",
        tried.len(),
        preferred.first().or(tried.first()).unwrap_or(&"none")
    ))
}

/// Load and initialize the driver once (`cuInit`). `Err` carries why CUDA is unavailable.
pub(super) fn driver() -> Result<(), String> {
    static DRIVER: OnceLock<Result<(), String>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            find(
                "CUDA driver",
                &candidates(&["cuda", "nvcuda"]),
                DRIVER_SYMBOLS,
            )?;
            // SAFETY: the library and its symbols exist (checked above); cuInit(0) has no other
            // precondition. catch_unwind is a second line of defence against a loader panic.
            let r = catch_unwind(AssertUnwindSafe(|| unsafe { cu::cuInit(0) }));
            match r {
                Ok(CUresult::CUDA_SUCCESS) => Ok(()),
                Ok(CUresult::CUDA_ERROR_NO_DEVICE) => {
                    Err("the CUDA driver found no device (CUDA_ERROR_NO_DEVICE)".into())
                }
                Ok(code) => Err(format!(
                    "cuInit failed: {}",
                    super::driver::error_name(code)
                )),
                Err(_) => Err("loading the CUDA driver library panicked".into()),
            }
        })
        .clone()
}

/// Load NVRTC once. `Ok((major, minor))` is its version; `Err` says why it cannot be used.
pub(super) fn nvrtc() -> Result<(i32, i32), String> {
    static NVRTC: OnceLock<Result<(i32, i32), String>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            let name = find("NVRTC", &candidates(&["nvrtc"]), NVRTC_SYMBOLS)?;
            let _ = NVRTC_NAME.set(name);
            let (mut major, mut minor) = (0, 0);
            // SAFETY: the library and its symbols exist (checked above); the out-pointers are
            // valid. catch_unwind is a second line of defence against a loader panic.
            let r = catch_unwind(AssertUnwindSafe(|| unsafe {
                rtc::nvrtcVersion(&mut major, &mut minor)
            }));
            match r {
                Ok(nvrtcResult::NVRTC_SUCCESS) => Ok((major, minor)),
                Ok(code) => Err(format!("nvrtcVersion failed: {code:?}")),
                Err(_) => Err("loading the NVRTC library panicked".into()),
            }
        })
        .clone()
}

/// The file name of the NVRTC library [`nvrtc`] found.
static NVRTC_NAME: OnceLock<String> = OnceLock::new();

/// The full path of the loaded NVRTC library (where its pip package keeps the CUDA headers),
/// or `None` when NVRTC is not loaded or the system does not say.
pub(super) fn nvrtc_path() -> Option<std::path::PathBuf> {
    nvrtc().ok()?;
    let name = CString::new(NVRTC_NAME.get()?.as_str()).ok()?;
    // SAFETY: `name` is NUL-terminated; RTLD_NOLOAD only finds the library cudarc already
    // loaded (it loads nothing) and takes a reference that is dropped below.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: `h` is a live handle; the symbol name is NUL-terminated.
    let sym = unsafe { libc::dlsym(h, c"nvrtcVersion".as_ptr()) };
    // SAFETY: an all-zero Dl_info is valid (null pointers) for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `sym` is an address inside the library (or null, which dladdr refuses); `info`
    // is a valid out-pointer.
    let found = !sym.is_null() && unsafe { libc::dladdr(sym, &mut info) } != 0;
    let path = if found && !info.dli_fname.is_null() {
        // SAFETY: dladdr set `dli_fname` to a NUL-terminated path owned by the loader, valid
        // while the library stays loaded (we still hold `h`); it is copied before dlclose.
        let c = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        Some(std::path::PathBuf::from(c.to_string_lossy().into_owned()))
    } else {
        None
    };
    // SAFETY: balances the dlopen above.
    unsafe { libc::dlclose(h) };
    path
}
