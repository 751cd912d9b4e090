//! NVRTC, the runtime compiler: finding the one that makes code this driver can load, opening
//! it with libloading, its calls, and what it should compile for.
//!
//! **Which NVRTC.** Code NVRTC makes is for drivers of its own CUDA major version or newer: its
//! PTX carries an ISA version only drivers at least as new as NVRTC read, and a CUDA 13 NVRTC
//! makes nothing a CUDA 12 driver is documented to load. So the NVRTC whose major version is
//! the driver's is looked for first (`libnvrtc.so.12` for a 12.x driver, `.13` for 13.x),
//! then older majors, then the unversioned `libnvrtc.so`; each name first on the loader path,
//! then where NVIDIA's pip packages put it (`site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12`
//! of `nvidia-cuda-nvrtc-cu12`, `site-packages/nvidia/cu13/lib/libnvrtc.so.13` of CUDA 13's),
//! then in `/usr/local/cuda-X.Y`. One of a newer major than the driver is refused, with a
//! message that says which to install. `CUEFLOW_NVRTC_LIB` names the library to use instead.
//!
//! **What to compile for** ([`target`]): a cubin for the device's exact architecture whenever
//! NVRTC knows it — a cubin made by a newer NVRTC of the same major version loads on an older
//! driver (CUDA's minor-version compatibility), PTX does not; PTX only for a device NVRTC does
//! not know (a device newer than NVRTC, so a driver newer than NVRTC too), and never PTX newer
//! than the driver. The driver's linker reads PTX, so relocatable device code needs a driver at
//! least as new as NVRTC ([`check_link`]).
//!
//! The calls return NVRTC's result as a C `int` (an enum of cudarc's would be undefined
//! behaviour for a code newer than the bindings) and keep the call's name ([`RtcError`]).

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use super::library;
use super::version::{needs, Version};
use crate::error::Error;

type Prog = *mut std::ffi::c_void;
type R = c_int;

/// NVRTC's functions that cueflow calls, resolved once.
struct Fns {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> R,
    num_archs: unsafe extern "C" fn(*mut c_int) -> R,
    archs: unsafe extern "C" fn(*mut c_int) -> R,
    #[allow(clippy::type_complexity)]
    create: unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> R,
    destroy: unsafe extern "C" fn(*mut Prog) -> R,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> R,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> R,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> R,
    cubin_size: unsafe extern "C" fn(Prog, *mut usize) -> R,
    cubin: unsafe extern "C" fn(Prog, *mut c_char) -> R,
    ptx_size: unsafe extern "C" fn(Prog, *mut usize) -> R,
    ptx: unsafe extern "C" fn(Prog, *mut c_char) -> R,
    add_name: unsafe extern "C" fn(Prog, *const c_char) -> R,
    lowered: unsafe extern "C" fn(Prog, *const c_char, *mut *const c_char) -> R,
    error_string: unsafe extern "C" fn(R) -> *const c_char,
}

/// The NVRTC in use.
pub(in crate::backend::cuda) struct Nvrtc {
    /// Kept loaded for the process: the functions point into it.
    _lib: Library,
    fns: Fns,
    /// Its version.
    pub version: Version,
    /// The file: a full path, or the name the loader found it by.
    pub name: String,
}

/// A failed NVRTC call: which, and its result code.
#[derive(Clone, Copy, Debug)]
pub(in crate::backend::cuda) struct RtcError {
    pub call: &'static str,
    pub code: c_int,
}

impl RtcError {
    /// `nvrtcCreateProgram failed: NVRTC_ERROR_…`.
    pub fn describe(&self) -> String {
        let name = loaded()
            .map(|n| {
                // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any
                // code (or null).
                let p = unsafe { (n.fns.error_string)(self.code) };
                if p.is_null() {
                    format!("code {}", self.code)
                } else {
                    // SAFETY: non-null and NUL-terminated, static.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            })
            .unwrap_or_else(|| format!("code {}", self.code));
        format!("{} failed: {name}", self.call)
    }
}

/// The result of an NVRTC call.
pub(in crate::backend::cuda) type RtcResult<T> = std::result::Result<T, RtcError>;

#[inline]
fn rtc(call: &'static str, code: R) -> RtcResult<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(RtcError { call, code })
    }
}

static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();

/// NVRTC once [`load`] succeeded.
fn loaded() -> Option<&'static Nvrtc> {
    NVRTC.get().and_then(|r| r.as_ref().ok())
}

/// Find and load NVRTC once (module docs). `Err` says why CUDA C cannot be compiled. The
/// driver decides which NVRTC fits, so it is loaded first where there is one (whoever asks
/// first gets the same NVRTC); without one, NVRTC is chosen for the floor's driver.
pub(in crate::backend::cuda) fn load() -> Result<&'static Nvrtc, String> {
    NVRTC
        .get_or_init(|| {
            let driver = library::load().map_or(Version::FLOOR, |d| d.api.version);
            open(driver)
        })
        .as_ref()
        .map_err(String::clone)
}

/// The pip package path of NVRTC `major` under a `site-packages` directory.
pub(in crate::backend::cuda) fn pip_path(major: u32) -> String {
    if major >= 13 {
        format!("nvidia/cu{major}/lib/libnvrtc.so.{major}")
    } else {
        format!("nvidia/cuda_nvrtc/lib/libnvrtc.so.{major}")
    }
}

/// The majors of NVRTC that make code a driver of `driver` loads, best first: its own, then
/// older ones (CUDA 11 at the oldest).
pub(in crate::backend::cuda) fn majors(driver: Version) -> Vec<u32> {
    (11..=driver.major()).rev().collect()
}

/// `Ok` when NVRTC `nvrtc` makes code a driver of `driver` loads (same major version or
/// older); else why not, and what to install.
pub(in crate::backend::cuda) fn check_usable(
    nvrtc: Version,
    driver: Version,
) -> Result<(), String> {
    if nvrtc.major() <= driver.major() {
        return Ok(());
    }
    Err(format!(
        "NVRTC {nvrtc} makes code for CUDA {} drivers, and this driver is CUDA {driver}; \
         install NVRTC {} (`pip install nvidia-cuda-nvrtc-cu{}` or a CUDA {} toolkit) or a \
         newer driver",
        nvrtc.major(),
        driver.major(),
        driver.major(),
        driver.major()
    ))
}

/// The toolkits `/usr/local/cuda-M.*` of major `major`, newest first.
fn toolkits(major: u32) -> Vec<PathBuf> {
    local_toolkits()
        .into_iter()
        .filter(|p| toolkit_version(p).0 == major)
        .collect()
}

/// Every versioned toolkit `/usr/local/cuda-M.m`, newest first by version (12.10 before 12.9).
pub(in crate::backend::cuda) fn local_toolkits() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/local")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))
        })
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(toolkit_version(p)));
    found
}

/// `(major, minor)` of a toolkit folder `cuda-M.m` (0 for what does not parse).
pub(in crate::backend::cuda) fn toolkit_version(p: &Path) -> (u32, u32) {
    let n = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let v = n.trim_start_matches("cuda-");
    let mut it = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Every file name and path to try for NVRTC `major`, in order (module docs).
fn names_for(major: u32, sites: &[PathBuf]) -> Vec<String> {
    let so = format!("libnvrtc.so.{major}");
    let mut names = vec![so.clone()];
    let files = sites.iter().map(|s| s.join(pip_path(major))).chain(
        toolkits(major)
            .into_iter()
            .map(|t| t.join("lib64").join(&so)),
    );
    names.extend(
        files
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string()),
    );
    names
}

fn open(driver: Version) -> Result<Nvrtc, String> {
    let names: Vec<String> = match crate::config::nvrtc_lib() {
        Some(n) => vec![n],
        None => {
            let sites = library::site_packages();
            let mut names: Vec<String> = majors(driver)
                .into_iter()
                .flat_map(|m| names_for(m, &sites))
                .collect();
            names.push("libnvrtc.so".into());
            // Newer majors last: found, they are refused with what to install.
            names.extend(names_for(driver.major() + 1, &sites));
            names
        }
    };
    let mut refused = None;
    for name in &names {
        // SAFETY: loading NVRTC runs its initializers, sound in any process.
        let Ok(lib) = (unsafe { Library::new(name) }) else {
            continue;
        };
        let n = match resolve(lib, name) {
            Ok(n) => n,
            Err(why) => {
                refused.get_or_insert(why);
                continue;
            }
        };
        match check_usable(n.version, driver) {
            Ok(()) => return Ok(n),
            Err(why) => {
                refused.get_or_insert(format!("{name}: {why}"));
            }
        }
    }
    Err(refused.unwrap_or_else(|| library::not_found("NVRTC", &names)))
}

/// The functions of the NVRTC `lib` (opened by `name`) and its version.
fn resolve(lib: Library, name: &str) -> Result<Nvrtc, String> {
    macro_rules! f {
        ($sym:literal) => {
            // SAFETY: each field's type is the C signature of the NVRTC function of that name
            // (nvrtc.h, with nvrtcResult as int); the pointers live while `lib` does, which
            // the `Nvrtc` keeps.
            unsafe { library::symbol(&lib, $sym) }
                .ok_or_else(|| format!("{name} lacks {}", $sym))?
        };
    }
    let fns = Fns {
        version: f!("nvrtcVersion"),
        num_archs: f!("nvrtcGetNumSupportedArchs"),
        archs: f!("nvrtcGetSupportedArchs"),
        create: f!("nvrtcCreateProgram"),
        destroy: f!("nvrtcDestroyProgram"),
        compile: f!("nvrtcCompileProgram"),
        log_size: f!("nvrtcGetProgramLogSize"),
        log: f!("nvrtcGetProgramLog"),
        cubin_size: f!("nvrtcGetCUBINSize"),
        cubin: f!("nvrtcGetCUBIN"),
        ptx_size: f!("nvrtcGetPTXSize"),
        ptx: f!("nvrtcGetPTX"),
        add_name: f!("nvrtcAddNameExpression"),
        lowered: f!("nvrtcGetLoweredName"),
        error_string: f!("nvrtcGetErrorString"),
    };
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers; no other precondition.
    let r = unsafe { (fns.version)(&mut major, &mut minor) };
    if r != 0 {
        return Err(format!("nvrtcVersion of {name} failed (code {r})"));
    }
    let version = Version::new(major.max(0) as u32, minor.max(0) as u32);
    Ok(Nvrtc {
        _lib: lib,
        fns,
        version,
        name: full_path(name),
    })
}

/// `name` as a full path: as given when it is one, else where the loader found it.
fn full_path(name: &str) -> String {
    if name.contains('/') {
        return name.to_string();
    }
    // The library is loaded: the loader's map of this process names its file.
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|p| Path::new(p).file_name().is_some_and(|f| f == name))
                .map(str::to_string)
        })
        .unwrap_or_else(|| name.to_string())
}

/// The path of the loaded NVRTC (where its package keeps the CUDA headers), if known.
pub(in crate::backend::cuda) fn path() -> Option<PathBuf> {
    let n = load().ok()?;
    n.name.contains('/').then(|| PathBuf::from(&n.name))
}

/// NVRTC's version, `None` when none could be loaded.
pub(in crate::backend::cuda) fn version() -> Option<Version> {
    load().ok().map(|n| n.version)
}

/// The architectures NVRTC compiles for (`90` for `sm_90`).
pub(in crate::backend::cuda) fn supported_archs(n: &Nvrtc) -> RtcResult<Vec<i32>> {
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    rtc("nvrtcGetNumSupportedArchs", unsafe {
        (n.fns.num_archs)(&mut count)
    })?;
    let mut archs = vec![0i32; count.max(0) as usize];
    // SAFETY: `archs` has room for the `count` entries NVRTC reported.
    rtc("nvrtcGetSupportedArchs", unsafe {
        (n.fns.archs)(archs.as_mut_ptr())
    })?;
    Ok(archs)
}

/// What NVRTC compiles a kernel to for a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cuda) enum Target {
    /// A cubin for `sm_XY` (the device's own architecture).
    Cubin(u32),
    /// PTX for `compute_XY`, which the driver compiles for the device.
    Ptx(u32),
}

impl Target {
    /// NVRTC's option for it.
    pub fn option(self) -> String {
        match self {
            Target::Cubin(a) => format!("--gpu-architecture=sm_{a}"),
            Target::Ptx(a) => format!("--gpu-architecture=compute_{a}"),
        }
    }
}

/// What to compile for a device of architecture `arch` (`90`) with an NVRTC of `nvrtc` that
/// supports `archs`, for a driver of `driver` (module docs). `Err` says why nothing fits.
pub(in crate::backend::cuda) fn target(
    arch: u32,
    archs: &[i32],
    nvrtc: Version,
    driver: Version,
) -> Result<Target, String> {
    if archs.contains(&(arch as i32)) {
        return Ok(Target::Cubin(arch));
    }
    let Some(best) = archs
        .iter()
        .copied()
        .filter(|&a| a > 0 && a as u32 <= arch)
        .max()
    else {
        return Err(format!(
            "NVRTC {nvrtc} supports architectures {archs:?}, none of which runs on this sm_{arch} \
             device"
        ));
    };
    if nvrtc > driver {
        return Err(format!(
            "NVRTC {nvrtc} has no sm_{arch} target, and the PTX it makes is newer than this CUDA \
             {driver} driver reads: use an NVRTC no newer than the driver, or one that knows \
             sm_{arch}"
        ));
    }
    Ok(Target::Ptx(best as u32))
}

/// `Ok` when the driver's linker reads what NVRTC `nvrtc` makes (PTX of NVRTC's version):
/// relocatable device code needs a driver at least as new as NVRTC.
pub(in crate::backend::cuda) fn check_link(nvrtc: Version, driver: Version) -> Result<(), Error> {
    if nvrtc <= driver {
        Ok(())
    } else {
        Err(needs(
            &format!("linking relocatable device code compiled by NVRTC {nvrtc}"),
            nvrtc,
            driver,
        ))
    }
}

/// An NVRTC program, destroyed on drop.
pub(in crate::backend::cuda) struct Program {
    raw: Prog,
    n: &'static Nvrtc,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program came from nvrtcCreateProgram and is destroyed once, here.
        let _ = unsafe { (self.n.fns.destroy)(&mut self.raw) };
    }
}

impl Program {
    /// A program of `source` (named `name` in logs) with in-memory `headers` (contents,
    /// include names).
    pub fn new(
        n: &'static Nvrtc,
        source: &CStr,
        name: &CStr,
        headers: &[(CString, CString)],
    ) -> RtcResult<Program> {
        let contents: Vec<*const c_char> = headers.iter().map(|(c, _)| c.as_ptr()).collect();
        let names: Vec<*const c_char> = headers.iter().map(|(_, n)| n.as_ptr()).collect();
        let (c, i) = if headers.is_empty() {
            (std::ptr::null(), std::ptr::null())
        } else {
            (contents.as_ptr(), names.as_ptr())
        };
        let mut raw: Prog = std::ptr::null_mut();
        // SAFETY: `source` and `name` are NUL-terminated; the header arrays hold
        // `headers.len()` NUL-terminated strings each, which outlive the call (NVRTC copies
        // them).
        rtc("nvrtcCreateProgram", unsafe {
            (n.fns.create)(
                &mut raw,
                source.as_ptr(),
                name.as_ptr(),
                headers.len() as c_int,
                c,
                i,
            )
        })?;
        Ok(Program { raw, n })
    }

    /// Ask for the lowered name of `expr` (before [`compile`](Self::compile)).
    pub fn add_name_expression(&self, expr: &CStr) -> RtcResult<()> {
        // SAFETY: the program is live and not compiled yet (the caller's order); `expr` is
        // NUL-terminated.
        rtc("nvrtcAddNameExpression", unsafe {
            (self.n.fns.add_name)(self.raw, expr.as_ptr())
        })
    }

    /// Compile with `options`.
    pub fn compile(&self, options: &[CString]) -> RtcResult<()> {
        let ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: the program is live; `ptrs` holds `ptrs.len()` NUL-terminated options that
        // outlive the call.
        rtc("nvrtcCompileProgram", unsafe {
            (self.n.fns.compile)(self.raw, ptrs.len() as c_int, ptrs.as_ptr())
        })
    }

    /// The compiler's log (empty when there is none or it cannot be read).
    pub fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: the program is live; `size` is a valid out-pointer.
        if unsafe { (self.n.fns.log_size)(self.raw, &mut size) } != 0 {
            return String::new();
        }
        let mut log = vec![0u8; size.max(1)];
        // SAFETY: `log` has the `size` bytes NVRTC asked for.
        if unsafe { (self.n.fns.log)(self.raw, log.as_mut_ptr() as *mut c_char) } != 0 {
            return String::new();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).into_owned()
    }

    /// The lowered (mangled) name of `expr`, added before compiling.
    pub fn lowered_name(&self, expr: &CStr) -> RtcResult<String> {
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: the program compiled and `expr` was added before; NVRTC points `out` at a
        // string it owns until the program is destroyed.
        rtc("nvrtcGetLoweredName", unsafe {
            (self.n.fns.lowered)(self.raw, expr.as_ptr(), &mut out)
        })?;
        if out.is_null() {
            return Err(RtcError {
                call: "nvrtcGetLoweredName",
                code: -1,
            });
        }
        // SAFETY: non-null, NUL-terminated and valid while the program lives (it does here).
        Ok(unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned())
    }

    /// The cubin of a compilation for `sm_XY`.
    pub fn cubin(&self) -> RtcResult<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: the program compiled; `size` is a valid out-pointer.
        rtc("nvrtcGetCUBINSize", unsafe {
            (self.n.fns.cubin_size)(self.raw, &mut size)
        })?;
        let mut out = vec![0u8; size];
        // SAFETY: `out` has the `size` bytes NVRTC asked for.
        rtc("nvrtcGetCUBIN", unsafe {
            (self.n.fns.cubin)(self.raw, out.as_mut_ptr() as *mut c_char)
        })?;
        Ok(out)
    }

    /// The PTX of the compilation, NUL-terminated.
    pub fn ptx(&self) -> RtcResult<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: the program compiled; `size` is a valid out-pointer (it counts the NUL).
        rtc("nvrtcGetPTXSize", unsafe {
            (self.n.fns.ptx_size)(self.raw, &mut size)
        })?;
        let mut out = vec![0u8; size.max(1)];
        // SAFETY: `out` has the `size` bytes NVRTC asked for.
        rtc("nvrtcGetPTX", unsafe {
            (self.n.fns.ptx)(self.raw, out.as_mut_ptr() as *mut c_char)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V12_2: Version = Version::new(12, 2);
    const V12_9: Version = Version::new(12, 9);
    const V13_0: Version = Version::new(13, 0);

    #[test]
    fn the_drivers_major_first_then_older_ones() {
        assert_eq!(majors(V12_2), vec![12, 11]);
        assert_eq!(majors(V13_0), vec![13, 12, 11]);
        assert_eq!(pip_path(12), "nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
        assert_eq!(pip_path(13), "nvidia/cu13/lib/libnvrtc.so.13");
        assert!(
            check_usable(V12_9, V12_2).is_ok(),
            "same major, newer minor"
        );
        assert!(check_usable(V12_9, V13_0).is_ok(), "older major");
        let why = check_usable(V13_0, V12_2).unwrap_err();
        assert!(why.contains("nvidia-cuda-nvrtc-cu12"), "{why}");
    }

    #[test]
    fn a_cubin_for_the_device_else_ptx_no_newer_than_the_driver() {
        let archs = [75, 80, 86, 89, 90];
        assert_eq!(target(90, &archs, V12_9, V12_2), Ok(Target::Cubin(90)));
        assert_eq!(Target::Cubin(90).option(), "--gpu-architecture=sm_90");
        // A device newer than NVRTC: PTX of the newest architecture below it, which a driver
        // at least as new as NVRTC compiles.
        assert_eq!(target(120, &archs, V12_2, V12_9), Ok(Target::Ptx(90)));
        assert_eq!(Target::Ptx(90).option(), "--gpu-architecture=compute_90");
        // PTX newer than the driver reads: refused, saying why.
        let why = target(120, &archs, V12_9, V12_2).unwrap_err();
        assert!(why.contains("newer than this CUDA 12.2 driver"), "{why}");
        assert!(
            target(70, &archs, V12_9, V12_9).is_err(),
            "no architecture at or below"
        );
    }

    #[test]
    fn relocatable_code_needs_a_driver_as_new_as_nvrtc() {
        assert!(check_link(V12_2, V12_9).is_ok());
        assert!(check_link(V12_9, V12_9).is_ok());
        match check_link(V12_9, V12_2) {
            Err(Error::Unsupported(m)) => {
                assert!(m.contains("needs a CUDA 12.9 driver or newer"), "{m}")
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}
