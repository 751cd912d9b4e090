//! Opening the CUDA driver with `libloading` before cudarc touches it, and finding out what it
//! offers.
//!
//! cudarc's `dynamic-loading` opens the first library of its candidate list that loads
//! (`cudarc::get_lib_name_candidates`: `libcuda.so`, …, `libcuda.so.1`) and looks each function
//! up at its first call, **panicking** when the library or the symbol is missing. So before the
//! first cudarc call this module opens the same candidates in the same order (libloading's
//! `RTLD_LAZY | RTLD_LOCAL`, as cudarc), asks the driver its version (`cuDriverGetVersion`), and
//! checks which symbols it exports:
//!
//! * every function of [`BASE`](super::version::BASE) (the CUDA 12.0 driver API the backend always calls): a driver
//!   older than CUDA 12.0, or one lacking any of them, is [`crate::Error::Unavailable`];
//! * the newer functions of [`Func`](super::version::Func), recorded in an
//!   [`Api`](super::version::Api): the backend calls them only where the driver has them;
//! * the older entry points of [`Old`], which CUDA 13's headers no longer declare: loaded here,
//!   through their C signatures declared below.
//!
//! Then `cuInit` runs (inside `catch_unwind`, a second line of defence). The library stays
//! loaded for the process. Nothing here panics; every failure is a reason string.

use std::ffi::c_uint;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUmem_advise, CUresult, CUstream,
};
use libloading::Library;

use super::version::{Api, Old, Version};

type CtxCreateV2 = unsafe extern "C" fn(*mut CUcontext, c_uint, CUdevice) -> CUresult;
type EventElapsedTime = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult;
type MemPrefetchAsync = unsafe extern "C" fn(CUdeviceptr, usize, CUdevice, CUstream) -> CUresult;
type MemAdvise = unsafe extern "C" fn(CUdeviceptr, usize, CUmem_advise, CUdevice) -> CUresult;
type DriverGetVersion = unsafe extern "C" fn(*mut i32) -> CUresult;
type Init = unsafe extern "C" fn(c_uint) -> CUresult;

/// The older entry points the driver exports ([`Old`]), as C functions of the signatures
/// their CUDA 12 headers declare.
#[derive(Default)]
pub(crate) struct OldFns {
    pub ctx_create_v2: Option<CtxCreateV2>,
    pub event_elapsed_time: Option<EventElapsedTime>,
    pub mem_prefetch_async: Option<MemPrefetchAsync>,
    pub mem_advise: Option<MemAdvise>,
}

/// The loaded driver.
pub(crate) struct Driver {
    /// Kept loaded for the process: the function pointers below point into it.
    _lib: Library,
    /// Its version and the optional functions it has.
    pub api: Api,
    pub old: OldFns,
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// The driver once [`load`] succeeded (a device is open), else `None`.
#[inline]
pub(crate) fn loaded() -> Option<&'static Driver> {
    DRIVER.get().and_then(|r| r.as_ref().ok())
}

/// What the loaded driver offers; before a successful [`load`], a driver of the floor with
/// none of the optional functions (so nothing optional is ever called).
#[inline]
pub(crate) fn api() -> Api {
    loaded()
        .map(|d| d.api)
        .unwrap_or_else(|| Api::probe(Version::FLOOR, |_| false))
}

/// The candidate file names cudarc tries for `libs`, in cudarc's order.
pub(crate) fn candidates(libs: &[&str]) -> Vec<String> {
    libs.iter()
        .flat_map(|l| cudarc::get_lib_name_candidates(l))
        .collect()
}

/// The first of `names` that loads, as cudarc's loader would pick it.
pub(crate) fn open_first(names: &[String]) -> Option<(Library, String)> {
    names.iter().find_map(|n| {
        // SAFETY: loading a shared library runs its initializers; the CUDA libraries' are
        // sound to run in any process (every CUDA program loads them the same way).
        unsafe { Library::new(n) }.ok().map(|l| (l, n.clone()))
    })
}

/// Where Python keeps its packages on this machine (pip's `site-packages`): NVIDIA ships
/// NVRTC and NCCL as pip packages, PyTorch depends on them.
pub(crate) fn site_packages() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            roots.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    roots.extend(["/usr/local/lib", "/usr/lib", "/opt/conda/lib"].map(PathBuf::from));
    let mut out: Vec<PathBuf> = std::env::var_os("PYTHONPATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for root in roots {
        let Ok(dir) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
            })
            .collect();
        pythons.sort();
        for p in pythons.into_iter().rev() {
            out.push(p.join("site-packages"));
            out.push(p.join("dist-packages"));
        }
    }
    out.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    out
}

/// `name` of `lib` as a function of type `F`, if exported.
///
/// # Safety
/// `F` must be the function-pointer type of the symbol's C declaration, and the pointer must
/// not be used after `lib` is unloaded.
pub(crate) unsafe fn symbol<F: Copy>(lib: &Library, name: &str) -> Option<F> {
    // SAFETY: forwarded: `F` is the symbol's type (the caller's promise).
    unsafe { lib.get::<F>(name) }.ok().map(|s| *s)
}

/// Load and initialize the driver once. `Err` says why CUDA is unavailable.
pub(crate) fn load() -> Result<&'static Driver, String> {
    DRIVER
        .get_or_init(open_driver)
        .as_ref()
        .map_err(String::clone)
}

fn open_driver() -> Result<Driver, String> {
    let names = candidates(&["cuda", "nvcuda"]);
    let Some((lib, name)) = open_first(&names) else {
        return Err(not_found("CUDA driver", &names));
    };
    let has = |s: &str| {
        // SAFETY: only the presence is asked; the pointer is dropped at once.
        unsafe { lib.get::<*const ()>(s) }.is_ok()
    };
    // SAFETY: `cuDriverGetVersion` and `cuInit` have these C signatures in every CUDA
    // version; the pointers are used while `lib` is loaded (it is kept below).
    let (get_version, init) = unsafe {
        (
            symbol::<DriverGetVersion>(&lib, "cuDriverGetVersion"),
            symbol::<Init>(&lib, "cuInit"),
        )
    };
    let (Some(get_version), Some(init)) = (get_version, init) else {
        return Err(format!(
            "{name} is not a CUDA driver (no cuDriverGetVersion or cuInit)"
        ));
    };
    let mut v = 0;
    // SAFETY: needs no initialization; `v` is a valid out-pointer.
    let r = unsafe { get_version(&mut v) };
    if r != CUresult::CUDA_SUCCESS {
        return Err(format!("cuDriverGetVersion failed: {r:?}"));
    }
    let api = verdict(&name, Version(v.max(0) as u32), has)?;
    // SAFETY: each type is the C signature of the symbol in the CUDA 12 headers (above); the
    // pointers live in the `Driver` that keeps `lib` loaded.
    let old = unsafe {
        OldFns {
            ctx_create_v2: symbol(&lib, Old::CtxCreateV2.symbol()),
            event_elapsed_time: symbol(&lib, Old::EventElapsedTime.symbol()),
            mem_prefetch_async: symbol(&lib, Old::MemPrefetchAsync.symbol()),
            mem_advise: symbol(&lib, Old::MemAdvise.symbol()),
        }
    };
    // SAFETY: cuInit(0) has no precondition. catch_unwind: nothing below may unwind into
    // the caller.
    let r = catch_unwind(AssertUnwindSafe(|| unsafe { init(0) }));
    match r {
        Ok(CUresult::CUDA_SUCCESS) => {}
        Ok(CUresult::CUDA_ERROR_NO_DEVICE) => {
            return Err("the CUDA driver found no device (CUDA_ERROR_NO_DEVICE)".into())
        }
        Ok(code) => return Err(format!("cuInit failed: {code:?}")),
        Err(_) => return Err("initializing the CUDA driver panicked".into()),
    }
    Ok(Driver {
        _lib: lib,
        api,
        old,
    })
}

/// Why no library of `names` loaded.
pub(crate) fn not_found(what: &str, names: &[String]) -> String {
    let mut tried: Vec<&str> = names.iter().map(String::as_str).collect();
    tried.dedup();
    let preferred = tried
        .iter()
        .find(|n| n.ends_with(".so.1"))
        .or(tried.first())
        .copied()
        .unwrap_or("none");
    format!(
        "no {what} library could be loaded ({} names tried, e.g. {preferred}); is it installed \
         and on the loader path?",
        tried.len()
    )
}

/// The floor's verdict on driver `name`, which reports `version` and exports what `has` says:
/// what it offers, or why the backend cannot use it.
pub(crate) fn verdict(
    name: &str,
    version: Version,
    has: impl Fn(&str) -> bool,
) -> Result<Api, String> {
    if version < Version::FLOOR {
        return Err(format!(
            "{name} is the driver of CUDA {version}; cueflow needs CUDA {} or newer (driver R525 \
             or newer)",
            Version::FLOOR
        ));
    }
    let missing = Api::missing_base(&has);
    if !missing.is_empty() {
        return Err(format!(
            "{name} (CUDA {version}) lacks {missing:?}, which every CUDA {} driver has",
            Version::FLOOR
        ));
    }
    Ok(Api::probe(version, has))
}
