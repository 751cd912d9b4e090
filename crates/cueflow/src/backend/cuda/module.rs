//! Kernel code to launchable functions: CUDA C through NVRTC (a cubin for the device's exact
//! architecture, or PTX for the newest architecture NVRTC knows when it does not know the
//! device's: `driver::nvrtc::target`), PTX and cubin images through `cuModuleLoadData`.
//!
//! CUDA C compiles with the kernel's [`CompileOptions`] and the toolkit's include directories
//! (`headers.rs`, KC1); a templated kernel's entry is a name expression, resolved to its mangled
//! name by NVRTC. Images are cached three ways: on disk across processes (`cache.rs`, KC3),
//! in this process by the same key (a device opened again loads without compiling), and as
//! loaded modules per context by that key ([`of_context`]), so the built-in kernels, which share
//! one source file, cost one load per context, however many devices are opened on it. A
//! module stays loaded until the last device of its context is dropped and its work is done
//! (as the CUDA runtime keeps a context's modules: module-scope `__device__` variables are the
//! context's, seen alike by every device handle on it); kernels hold only the function handle,
//! looked up once per device through [`KernelInner::loaded_for`].
//!
//! On a driver older than CUDA 12.4, which can neither report a kernel's parameter sizes
//! (`cuFuncGetParamInfo`) nor list a module's kernels (`cuModuleEnumerateFunctions`), both
//! come from the PTX (`ptx.rs`): NVRTC's, kept with every compiled image, or the PTX given as
//! such. A cubin given as such has neither there: its launches are not checked (KC4) and its
//! kernels load at their lookup.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use cudarc::driver::sys::{CUfunction, CUmodule, CUresult};
use parking_lot::Mutex;

use super::cache::{DiskCache, Entry, KeyHasher, KeyParts};
use super::driver::nvrtc::{self, Nvrtc, Program, RtcError, Target};
use super::driver::{error_name, library, module as modl, CuError};
use super::ptx;
use crate::backend::contract::kernel::KernelInner;
use crate::error::{Error, Result};
use crate::types::compile::{is_name_expression, CompileOptions, CudaCode};

/// A kernel's function in one device's context.
pub(super) struct LoadedKernel {
    /// The function handle; valid while the device's module cache holds its module.
    pub func: CUfunction,
    /// Sizes of the kernel's parameters in bytes, when the driver reports them.
    pub params: Option<Vec<usize>>,
    /// Largest dynamic shared memory size enabled so far with `cuFuncSetAttribute`: the
    /// function's, shared by every device of the context (`Modules::shared_limit`).
    pub shared_enabled: Arc<AtomicU32>,
}

// SAFETY: a CUfunction is an identifier the driver accepts on any thread with the context current
// (D2); the Rust side never dereferences it.
unsafe impl Send for LoadedKernel {}
// SAFETY: as above; the mutable state is atomic.
unsafe impl Sync for LoadedKernel {}

struct Module {
    raw: CUmodule,
    /// (name expression, lowered name) of the module's name expressions.
    lowered: Vec<(String, String)>,
    /// (kernel, parameter sizes) of its kernels as its PTX declares them (empty for a cubin
    /// given as such): what a driver older than CUDA 12.4 cannot report.
    kernels: Vec<(String, Vec<usize>)>,
}

// SAFETY: as for LoadedKernel; the module is unloaded once, by the cache's owner.
unsafe impl Send for Module {}

/// The loaded modules of one context, by image key: every device opened on the context shares
/// them ([`of_context`]).
pub(super) struct Modules {
    map: Mutex<HashMap<u128, Module>>,
    /// Each loaded function's dynamic shared memory limit, by function: one for every device's
    /// `LoadedKernel` of it, so no device lowers what another raised.
    shared: Mutex<HashMap<usize, Arc<AtomicU32>>>,
    /// Compute capability (major, minor).
    cc: (i32, i32),
}

/// The key of a PTX or cubin image (process caches only: nothing to compile).
fn image_key(tag: &str, bytes: &[u8]) -> u128 {
    let mut h = KeyHasher::default();
    h.str(tag);
    h.bytes(bytes);
    h.finish()
}

/// The module caches of the contexts devices are open on, by the life of the context
/// (`Ctx::instance`: a primary context made anew, or reset, is another life, whose modules
/// these are not).
static OF_CONTEXT: Mutex<Vec<(u64, Weak<Modules>)>> = Mutex::new(Vec::new());

/// The modules of the context in its life `life` (`Ctx::instance`), shared by every device
/// open on it (RL6): a device opened where another device of the context already loaded a
/// module loads nothing. A `cuModuleLoadData` waits for the context's running kernels while it
/// holds a lock that the process's other driver calls wait for, so each device loading the
/// built-ins anew at its opening (as before) stalled every thread behind any kernel that waits
/// for later work — a gate kernel's opening write never came, and the kernel gave up (the
/// reliability suite's CUDA tests, one run in four on an H200). Unloaded once the last device
/// of the context is gone (`Ctx::release`).
pub(super) fn of_context(life: u64, cc: (i32, i32)) -> Arc<Modules> {
    let mut all = OF_CONTEXT.lock();
    all.retain(|(_, m)| m.strong_count() > 0);
    let found = all
        .iter()
        .find_map(|(l, m)| (*l == life).then(|| m.upgrade()).flatten());
    found.unwrap_or_else(|| {
        let m = Arc::new(Modules::new(cc));
        all.push((life, Arc::downgrade(&m)));
        m
    })
}

impl Modules {
    pub fn new(cc: (i32, i32)) -> Self {
        Modules {
            map: Mutex::new(HashMap::new()),
            shared: Mutex::new(HashMap::new()),
            cc,
        }
    }

    /// The dynamic shared memory limit kept for `func` (see [`enable_shared`]).
    fn shared_limit(&self, func: CUfunction) -> Arc<AtomicU32> {
        self.shared.lock().entry(func as usize).or_default().clone()
    }

    /// The module of `code` (compiled, or found in a cache), loaded, and the name of the
    /// entry's function in it with the module's key (`None` when NVRTC resolved no name).
    /// Context current (D2).
    fn module(&self, code: &CudaCode, kernel: &str) -> Result<(CUmodule, Option<(String, u128)>)> {
        let (key, job) = match code {
            CudaCode::Source {
                code,
                entry,
                options,
            } => {
                let job = Job::new(kernel, code, entry, options, self.cc)?;
                (job.mem_key, Some(job))
            }
            CudaCode::Ptx { code, .. } => (image_key("ptx", code.as_bytes()), None),
            CudaCode::Cubin { image, .. } => (image_key("cubin", image), None),
        };
        let entry = code.entry();
        // Compiled (or found in the process's cache) outside the lock: the devices of the
        // context share it, and NVRTC may take seconds over a kernel no one else waits for.
        let fresh = match &job {
            Some(job) if !self.map.lock().contains_key(&key) => Some(compiled(job)?),
            _ => None,
        };
        let mut map = self.map.lock();
        if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(key) {
            let (image, lowered, kernels) = match (&job, code) {
                (Some(job), _) => {
                    let e = match fresh {
                        Some(e) => e,
                        // The key was there at the first look: entries stay while the
                        // modules are shared, so this is only a fallback (the process's
                        // cache has the image).
                        None => compiled(job)?,
                    };
                    (e.image.clone(), e.lowered.clone(), e.kernels.clone())
                }
                (None, CudaCode::Ptx { code, .. }) => {
                    let mut v = code.as_bytes().to_vec();
                    v.push(0);
                    (v, Vec::new(), ptx::entries(code))
                }
                (None, CudaCode::Cubin { image, .. }) => (image.to_vec(), Vec::new(), Vec::new()),
                (None, CudaCode::Source { .. }) => unreachable!("sources have a job"),
            };
            let raw = load_image(&image, kernel, &kernels)?;
            slot.insert(Module {
                raw,
                lowered,
                kernels,
            });
        }
        let m = &map[&key];
        let name = if is_name_expression(entry) && matches!(code, CudaCode::Source { .. }) {
            m.lowered
                .iter()
                .find(|(e, _)| e == entry)
                .map(|(_, l)| l.clone())
        } else {
            Some(entry.to_string())
        };
        Ok((m.raw, name.map(|n| (n, key))))
    }

    /// The parameter sizes of kernel `name` of the module of `key`, from its PTX.
    fn ptx_sizes(&self, key: u128, name: &str) -> Option<Vec<usize>> {
        let map = self.map.lock();
        let (_, sizes) = map.get(&key)?.kernels.iter().find(|(k, _)| k == name)?;
        Some(sizes.clone())
    }

    /// The function for `kernel` on this device (context current, D2).
    ///
    /// An entry that is a plain identifier is first looked up as it is (an `extern "C"`
    /// kernel, whose name is not mangled); when the module has no such function, the source
    /// is compiled once more with the name expression `&entry`, which NVRTC resolves to the
    /// mangled name of a C++ kernel (`__global__ void k(..)` without `extern "C"`, entry
    /// `"k"`), as CUDA programs name it and as the host backend runs it (KC1). Sources whose
    /// kernels are `extern "C"` (the built-ins) keep sharing one module.
    pub fn load(&self, kernel: &KernelInner) -> Result<LoadedKernel> {
        let code = kernel.cuda.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "kernel `{}` has no implementation for the cuda backend",
                kernel.name
            ))
        })?;
        let (module, lowered) = self.module(code, &kernel.name)?;
        let entry = code.entry();
        let (name, key) = lowered.ok_or_else(|| Error::Compile {
            kernel: kernel.name.clone(),
            log: format!("NVRTC did not resolve the name expression `{entry}`"),
        })?;
        let mut found = function(module, &name, &kernel.name)?.map(|f| (f, key, name.clone()));
        if found.is_none() {
            if let Some(cpp) = cpp_entry(code) {
                // A compile error here means `&entry` names no kernel either: the error
                // below, about the name as given, says more than NVRTC's would.
                if let Ok((module, Some((mangled, key)))) = self.module(&cpp, &kernel.name) {
                    found = function(module, &mangled, &kernel.name)?.map(|f| (f, key, mangled));
                }
            }
        }
        let Some((func, key, name)) = found else {
            return Err(Error::Compile {
                kernel: kernel.name.clone(),
                log: format!(
                    "the module has no kernel named `{name}` (a C++ kernel is named by its \
                     identifier, or by a name expression such as `scale<float>` when it is \
                     templated or overloaded; PTX and cubins by the name in the image)"
                ),
            });
        };
        // The driver's sizes (CUDA 12.4), else the PTX's.
        let params = modl::param_sizes(func).or_else(|| self.ptx_sizes(key, &name));
        Ok(LoadedKernel {
            func,
            params,
            shared_enabled: self.shared_limit(func),
        })
    }

    /// Load the module of `source` now (the built-in kernels, at device open), so that no
    /// module loading happens later while kernels run. Context current (D2).
    pub fn preload(&self, source: &'static str, name: &str) -> Result<()> {
        let code = CudaCode::Source {
            code: source.into(),
            entry: String::new(),
            options: CompileOptions::default(),
        };
        self.module(&code, name).map(|_| ())
    }

    /// Unload every module. Only once no work of the device can still run.
    pub fn unload_all(&self) {
        for (_, m) in self.map.lock().drain() {
            // SAFETY: D1 (loaded by this cache, unloaded once), D2 (the caller bound the
            // context); no kernel of the module can still run (the caller's precondition).
            let _ = unsafe { modl::unload(m.raw) };
        }
    }
}

/// The function `name` of `module`; `None` when the module has none of that name. Context
/// current (D2).
fn function(module: CUmodule, name: &str, kernel: &str) -> Result<Option<CUfunction>> {
    let c = CString::new(name).map_err(|_| Error::Compile {
        kernel: kernel.to_string(),
        log: format!("entry point {name:?} contains a NUL byte"),
    })?;
    // D1: `module` is loaded and held by the cache.
    match modl::function(module, &c) {
        Ok(func) => Ok(Some(func)),
        Err(e) if e.code == CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
        Err(e) => Err(e.to_error()),
    }
}

/// CUDA C whose entry is a plain identifier, as the name expression `&entry` (a C++ kernel's
/// mangled name, resolved by NVRTC); `None` for other code and entries.
fn cpp_entry(code: &CudaCode) -> Option<CudaCode> {
    match code {
        CudaCode::Source {
            code,
            entry,
            options,
        } if !entry.is_empty() && !is_name_expression(entry) => Some(CudaCode::Source {
            code: code.clone(),
            entry: format!("&{entry}"),
            options: options.clone(),
        }),
        _ => None,
    }
}

/// Allow `shared` bytes of dynamic shared memory beyond the default 48 KiB for `k`.
#[inline]
pub(super) fn enable_shared(k: &LoadedKernel, shared: u32) -> Result<()> {
    if shared <= 48 * 1024 || shared <= k.shared_enabled.load(Ordering::Acquire) {
        return Ok(());
    }
    // The limit only rises: devices of one context share the function, and one asking for
    // less after another asked for more would otherwise lower it under the other's launches.
    static RAISING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = RAISING.lock();
    if shared <= k.shared_enabled.load(Ordering::Acquire) {
        return Ok(());
    }
    // D1, D2.
    modl::set_max_dynamic_shared(k.func, shared as i32).map_err(|e| e.to_error())?;
    k.shared_enabled.store(shared, Ordering::Release);
    Ok(())
}

/// Load `image` (a cubin, or NUL-terminated PTX) whose kernels the PTX declares as `kernels`,
/// with every kernel loaded now. Context current (D2).
fn load_image(image: &[u8], kernel: &str, kernels: &[(String, Vec<usize>)]) -> Result<CUmodule> {
    // cuModuleLoadData reads an ELF image in place: give it 8-byte alignment.
    let mut aligned = vec![0u64; image.len().div_ceil(8) + 1];
    // SAFETY: `aligned` has at least image.len() bytes; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(image.as_ptr(), aligned.as_mut_ptr() as *mut u8, image.len())
    };
    // SAFETY: D2; `aligned` holds a NUL-terminated PTX text (the zero padding ends it) or a
    // cubin image, 8-byte aligned, and outlives the call.
    match unsafe { modl::load_data(aligned.as_ptr() as *const std::ffi::c_void) } {
        Ok(m) => {
            load_functions(m, kernels);
            Ok(m)
        }
        Err(CuError {
            code:
                code @ (CUresult::CUDA_ERROR_INVALID_PTX
                | CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
                | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
                | CUresult::CUDA_ERROR_INVALID_IMAGE),
            ..
        }) => Err(Error::Compile {
            kernel: kernel.to_string(),
            log: format!("the driver could not load the module: {}", error_name(code)),
        }),
        Err(e) => Err(e.to_error()),
    }
}

/// Load every function of `m` now. Under CUDA's default lazy loading a function is loaded at
/// its first use, which may need a context synchronization: a kernel launched for the first
/// time while another kernel spins waiting for it would wait for that kernel to finish, and two
/// streams that must run concurrently would deadlock. CUDA 12.4 lists a module's functions;
/// before, each kernel its PTX declares is looked up by name, which loads it. Best effort:
/// failures leave lazy loading.
fn load_functions(m: CUmodule, kernels: &[(String, Vec<usize>)]) {
    // D1 (`m` was just loaded), D2.
    if let Err(e) = modl::load_all_functions(m) {
        if e.missing {
            for (name, _) in kernels {
                if let Ok(c) = CString::new(name.as_str()) {
                    let _ = modl::function(m, &c);
                }
            }
        }
    }
}

/// Images compiled or loaded from disk in this process, by key: a device opened again loads
/// the module without compiling or reading the disk again.
static IMAGES: Mutex<Option<HashMap<u128, Arc<Entry>>>> = Mutex::new(None);

/// One CUDA C compilation: what NVRTC gets, and its keys.
struct Job<'a> {
    /// The NVRTC that compiles it.
    nvrtc: &'static Nvrtc,
    kernel: &'a str,
    source: &'a str,
    options: &'a CompileOptions,
    /// Name expressions to resolve (the entry, when it is one).
    names: Vec<String>,
    /// Every NVRTC argument: architecture, the program's options, the toolkit's includes.
    args: Vec<String>,
    /// The architecture option makes a cubin (else PTX).
    cubin: bool,
    /// The disk key (KC3); `None`: not cached on disk.
    disk_key: Option<u128>,
    /// The key within this process.
    mem_key: u128,
}

impl<'a> Job<'a> {
    fn new(
        kernel: &'a str,
        source: &'a str,
        entry: &str,
        options: &'a CompileOptions,
        cc: (i32, i32),
    ) -> Result<Self> {
        let n = nvrtc::load().map_err(|why| {
            Error::Unavailable(format!(
                "kernel `{kernel}` is CUDA C, which needs NVRTC: {why} (give PTX or a cubin instead)"
            ))
        })?;
        let driver = library::api().version;
        if options.links() {
            // The driver's linker reads the PTX NVRTC makes only if it is as new.
            nvrtc::check_link(n.version, driver)?;
        }
        let target = arch_target(n, kernel, cc)?;
        let mut args = vec![target.option()];
        args.extend(options.nvrtc_args());
        let toolkit = super::headers::toolkit();
        args.extend(toolkit.dirs.iter().map(|d| format!("-I{}", d.display())));
        let names: Vec<String> = if is_name_expression(entry) {
            vec![entry.to_string()]
        } else {
            Vec::new()
        };
        // The key covers every unit linked with the source (their includes too).
        let mut key_source = std::borrow::Cow::Borrowed(source);
        for (name, code) in &options.link {
            let s = key_source.to_mut();
            s.push_str("\n// cueflow: linked unit ");
            s.push_str(name);
            s.push('\n');
            s.push_str(code);
        }
        let parts = KeyParts {
            source: &key_source,
            names: &names,
            args: &args,
            headers: &options.headers,
            user_dirs: &options.include_dirs,
            toolkit_dirs: &toolkit.dirs,
            nvrtc: (n.version.major() as i32, n.version.minor() as i32),
            driver: driver.0 as i32,
        };
        let disk_key = super::cache::key(&parts);
        // Without a disk key (a computed include over large directories) the process still
        // caches by what it can see.
        let mem_key = disk_key.unwrap_or_else(|| {
            let mut h = KeyHasher::default();
            h.str("uncached");
            h.str(&key_source);
            args.iter().chain(&names).for_each(|a| h.str(a));
            options.headers.iter().for_each(|(n, c)| {
                h.str(n);
                h.str(c)
            });
            h.finish()
        });
        Ok(Job {
            nvrtc: n,
            kernel,
            source,
            options,
            names,
            args,
            // Linked code is always a cubin (the linker's output).
            cubin: matches!(target, Target::Cubin(_)) || options.links(),
            disk_key: disk_key.filter(|_| options.disk_cache),
            mem_key,
        })
    }
}

/// The image of `job`: from this process's images, else the disk cache (KC3), else NVRTC
/// (and then stored in both).
fn compiled(job: &Job<'_>) -> Result<Arc<Entry>> {
    if let Some(e) = IMAGES
        .lock()
        .get_or_insert_with(HashMap::new)
        .get(&job.mem_key)
    {
        return Ok(e.clone());
    }
    let disk = job.disk_key.and_then(|k| Some((k, DiskCache::from_env()?)));
    let from_disk = disk.as_ref().and_then(|(k, c)| c.load(*k)).filter(|e| {
        e.cubin == job.cubin
            && job
                .names
                .iter()
                .all(|n| e.lowered.iter().any(|(x, _)| x == n))
    });
    let entry = match from_disk {
        Some(e) => e,
        None => {
            let e = compile(job)?;
            if let Some((k, c)) = &disk {
                if let Err(err) = c.store(*k, &e) {
                    if crate::config::cuda_debug() {
                        eprintln!("cueflow cuda: kernel cache not written: {err}");
                    }
                }
            }
            e
        }
    };
    let entry = Arc::new(entry);
    IMAGES
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(job.mem_key, entry.clone());
    Ok(entry)
}

fn rtc_err(kernel: &str, e: RtcError) -> Error {
    Error::Compile {
        kernel: kernel.to_string(),
        log: e.describe(),
    }
}

/// What NVRTC compiles for the device (`driver::nvrtc::target`): its own `sm_XY` when NVRTC
/// supports it (a cubin, which loads on any driver of NVRTC's major version), else PTX of the
/// newest supported architecture not above the device's, never newer than the driver reads.
fn arch_target(n: &Nvrtc, kernel: &str, cc: (i32, i32)) -> Result<Target> {
    let archs = nvrtc::supported_archs(n).map_err(|e| rtc_err(kernel, e))?;
    let arch = (cc.0 * 10 + cc.1).max(0) as u32;
    nvrtc::target(arch, &archs, n.version, library::api().version).map_err(|log| Error::Compile {
        kernel: kernel.to_string(),
        log,
    })
}

/// Compile `job` with NVRTC for the device: a cubin, or NUL-terminated PTX, and the lowered
/// names of its name expressions. A failure carries the compiler's log and where headers were
/// looked for (KC1).
fn compile(job: &Job<'_>) -> Result<Entry> {
    let main = format!("{}.cu", job.kernel);
    if !job.options.links() {
        return compile_unit(job, job.source, &main, &job.names, &job.args, job.cubin);
    }
    // Relocatable device code: every unit to relocatable PTX, then the driver's linker.
    let args = super::link::ptx_args(&job.args);
    let first = compile_unit(job, job.source, &main, &job.names, &args, false)?;
    let mut kernels = first.kernels;
    let mut units = vec![(main, first.image)];
    for (name, code) in &job.options.link {
        let unit = compile_unit(job, code, name, &[], &args, false)?;
        kernels.extend(unit.kernels);
        units.push((name.clone(), unit.image));
    }
    Ok(Entry {
        image: super::link::link(job.kernel, &units)?,
        cubin: true,
        lowered: first.lowered,
        kernels,
    })
}

/// Compile one translation unit `source` (named `file` in logs) of `job` with `args`: a
/// cubin when `cubin`, else NUL-terminated PTX, the lowered names of `names`, and the
/// kernels' parameter sizes from NVRTC's PTX (which it makes for a cubin too).
fn compile_unit(
    job: &Job<'_>,
    source: &str,
    file: &str,
    names: &[String],
    args: &[String],
    cubin: bool,
) -> Result<Entry> {
    let kernel = job.kernel;
    let nul = |what: &str| Error::Compile {
        kernel: kernel.to_string(),
        log: format!("{what} contains a NUL byte"),
    };
    let c = |s: &str, what: &str| CString::new(s).map_err(|_| nul(what));
    let src = c(source, "the source")?;
    let name = CString::new(file).unwrap_or_else(|_| c"kernel.cu".to_owned());
    let headers: Vec<(CString, CString)> = job
        .options
        .headers
        .iter()
        .map(|(n, text)| Ok((c(text, "a header")?, c(n, "a header name")?)))
        .collect::<Result<_>>()?;
    let prog = Program::new(job.nvrtc, &src, &name, &headers).map_err(|e| rtc_err(kernel, e))?;
    let exprs: Vec<CString> = names
        .iter()
        .map(|n| c(n, "the name expression"))
        .collect::<Result<_>>()?;
    for e in &exprs {
        prog.add_name_expression(e)
            .map_err(|e| rtc_err(kernel, e))?;
    }
    let opts: Vec<CString> = args
        .iter()
        .map(|a| c(a, "an option"))
        .collect::<Result<_>>()?;
    if let Err(e) = prog.compile(&opts) {
        let log = prog.log();
        let log = if log.trim().is_empty() {
            e.describe()
        } else {
            log
        };
        return Err(Error::Compile {
            kernel: kernel.to_string(),
            log: format!(
                "{}\noptions: {}\n{}",
                log.trim_end(),
                args.join(" "),
                super::headers::toolkit().describe()
            ),
        });
    }
    let mut lowered = Vec::new();
    for (e, n) in exprs.iter().zip(names) {
        let l = prog.lowered_name(e).map_err(|e| rtc_err(kernel, e))?;
        lowered.push((n.clone(), l));
    }
    let ptx = prog.ptx().map_err(|e| rtc_err(kernel, e))?;
    let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
    let kernels = ptx::entries(&String::from_utf8_lossy(&ptx[..end]));
    let image = if cubin {
        prog.cubin().map_err(|e| rtc_err(kernel, e))?
    } else {
        ptx
    };
    Ok(Entry {
        image,
        cubin,
        lowered,
        kernels,
    })
}

#[cfg(test)]
#[path = "module_tests.rs"]
mod tests;
