//! Kernel code to launchable functions: CUDA C through NVRTC (a cubin for the device's exact
//! architecture, or PTX for the newest architecture NVRTC knows when it does not know the
//! device's), PTX and cubin images through `cuModuleLoadData`.
//!
//! CUDA C compiles with the kernel's [`CompileOptions`] and the toolkit's include directories
//! (`headers.rs`, KC1); a templated kernel's entry is a name expression, resolved to its mangled
//! name by NVRTC. Images are cached three ways: on disk across processes (`cache.rs`, KC3),
//! in this process by the same key (a device opened again loads without compiling), and as
//! loaded modules per device by that key, so the built-in kernels, which share one source
//! file, cost one load per device. A module stays loaded until the device is dropped and its
//! work is done; kernels hold only the function handle, looked up once per device through
//! [`KernelInner::loaded_for`].

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction, CUfunction_attribute, CUmodule, CUresult};
use cudarc::nvrtc::sys::{self as rtc, nvrtcProgram, nvrtcResult};
use parking_lot::Mutex;

use super::cache::{DiskCache, Entry, Hasher128, KeyParts};
use super::driver::check;
use crate::backend::contract::compile::{is_name_expression, CompileOptions, CudaCode};
use crate::backend::contract::kernel::KernelInner;
use crate::error::{Error, Result};

/// A kernel's function in one device's context.
pub(super) struct LoadedKernel {
    /// The function handle; valid while the device's module cache holds its module.
    pub func: CUfunction,
    /// Sizes of the kernel's parameters in bytes, when the driver reports them.
    pub params: Option<Vec<usize>>,
    /// Largest dynamic shared memory size enabled so far with `cuFuncSetAttribute`.
    pub shared_enabled: AtomicU32,
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
}

// SAFETY: as for LoadedKernel; the module is unloaded once, by the cache's owner.
unsafe impl Send for Module {}

/// The loaded modules of one device, by image key.
pub(super) struct Modules {
    map: Mutex<HashMap<u128, Module>>,
    /// Compute capability (major, minor).
    cc: (i32, i32),
}

/// The key of a PTX or cubin image (process caches only: nothing to compile).
fn image_key(tag: &str, bytes: &[u8]) -> u128 {
    let mut h = Hasher128::default();
    h.str(tag);
    h.bytes(bytes);
    h.finish()
}

impl Modules {
    pub fn new(cc: (i32, i32)) -> Self {
        Modules {
            map: Mutex::new(HashMap::new()),
            cc,
        }
    }

    /// The module of `code` (compiled, or found in a cache) and its key, loaded. Context
    /// current (D2).
    fn module(&self, code: &CudaCode, kernel: &str) -> Result<(CUmodule, Option<String>)> {
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
        let mut map = self.map.lock();
        if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(key) {
            let (image, lowered) = match (&job, code) {
                (Some(job), _) => {
                    let e = compiled(job)?;
                    (e.image.clone(), e.lowered.clone())
                }
                (None, CudaCode::Ptx { code, .. }) => {
                    let mut v = code.as_bytes().to_vec();
                    v.push(0);
                    (v, Vec::new())
                }
                (None, CudaCode::Cubin { image, .. }) => (image.to_vec(), Vec::new()),
                (None, CudaCode::Source { .. }) => unreachable!("sources have a job"),
            };
            let raw = load_image(&image, kernel)?;
            slot.insert(Module { raw, lowered });
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
        Ok((m.raw, name))
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
        let name = lowered.ok_or_else(|| Error::Compile {
            kernel: kernel.name.clone(),
            log: format!("NVRTC did not resolve the name expression `{entry}`"),
        })?;
        let mut found = function(module, &name, &kernel.name)?;
        if found.is_none() {
            if let Some(cpp) = cpp_entry(code) {
                // A compile error here means `&entry` names no kernel either: the error
                // below, about the name as given, says more than NVRTC's would.
                if let Ok((module, Some(mangled))) = self.module(&cpp, &kernel.name) {
                    found = function(module, &mangled, &kernel.name)?;
                }
            }
        }
        let Some(func) = found else {
            return Err(Error::Compile {
                kernel: kernel.name.clone(),
                log: format!(
                    "the module has no kernel named `{name}` (a C++ kernel is named by its \
                     identifier, or by a name expression such as `scale<float>` when it is \
                     templated or overloaded; PTX and cubins by the name in the image)"
                ),
            });
        };
        Ok(LoadedKernel {
            func,
            params: param_sizes(func),
            shared_enabled: AtomicU32::new(0),
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
            let _ = unsafe { sys::cuModuleUnload(m.raw) };
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
    let mut func: CUfunction = std::ptr::null_mut();
    // SAFETY: D1 (`module` is loaded and held by the cache), D2; `c` is NUL-terminated.
    let r = unsafe { sys::cuModuleGetFunction(&mut func, module, c.as_ptr()) };
    match r {
        CUresult::CUDA_SUCCESS => Ok(Some(func)),
        CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
        code => Err(super::driver::CuError::new("cuModuleGetFunction", code).to_error()),
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

/// Parameter sizes of `func`, so launches with the wrong arguments are refused, not undefined.
fn param_sizes(func: CUfunction) -> Option<Vec<usize>> {
    let mut sizes = Vec::new();
    for i in 0..1024usize {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: D1, D2; the out-pointers are valid.
        let r = unsafe { sys::cuFuncGetParamInfo(func, i, &mut off, &mut size) };
        match r {
            CUresult::CUDA_SUCCESS => sizes.push(size),
            CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
            _ => return None,
        }
    }
    None
}

/// Allow `shared` bytes of dynamic shared memory beyond the default 48 KiB for `k`.
pub(super) fn enable_shared(k: &LoadedKernel, shared: u32) -> Result<()> {
    if shared <= 48 * 1024 || shared <= k.shared_enabled.load(Ordering::Relaxed) {
        return Ok(());
    }
    // SAFETY: D1, D2.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(
            k.func,
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared as i32,
        )
    })
    .map_err(|e| e.to_error())?;
    k.shared_enabled.fetch_max(shared, Ordering::Relaxed);
    Ok(())
}

fn load_image(image: &[u8], kernel: &str) -> Result<CUmodule> {
    // cuModuleLoadData reads an ELF image in place: give it 8-byte alignment.
    let mut aligned = vec![0u64; image.len().div_ceil(8) + 1];
    // SAFETY: `aligned` has at least image.len() bytes; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(image.as_ptr(), aligned.as_mut_ptr() as *mut u8, image.len())
    };
    let mut m: CUmodule = std::ptr::null_mut();
    // SAFETY: D2; `aligned` holds a NUL-terminated PTX text or a cubin image and outlives the call.
    let r = unsafe { sys::cuModuleLoadData(&mut m, aligned.as_ptr() as *const std::ffi::c_void) };
    match r {
        CUresult::CUDA_SUCCESS => {
            load_functions(m);
            Ok(m)
        }
        CUresult::CUDA_ERROR_INVALID_PTX
        | CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUresult::CUDA_ERROR_INVALID_IMAGE => Err(Error::Compile {
            kernel: kernel.to_string(),
            log: format!(
                "the driver could not load the module: {}",
                super::driver::error_name(r)
            ),
        }),
        code => Err(super::driver::CuError {
            call: "cuModuleLoadData",
            code,
            missing: false,
        }
        .to_error()),
    }
}

/// Load every function of `m` now. Under CUDA's default lazy loading a function is loaded at
/// its first use, which may need a context synchronization: a kernel launched for the first
/// time while another kernel spins waiting for it would wait for that kernel to finish, and two
/// streams that must run concurrently would deadlock. Best effort: failures leave lazy loading.
fn load_functions(m: CUmodule) {
    let mut count: std::ffi::c_uint = 0;
    // SAFETY: D1 (`m` was just loaded), D2; `count` is a valid out-pointer.
    if unsafe { sys::cuModuleGetFunctionCount(&mut count, m) } != CUresult::CUDA_SUCCESS {
        return;
    }
    let mut funcs: Vec<CUfunction> = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `funcs` has room for the `count` handles asked for.
    let r = unsafe { sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, m) };
    if r != CUresult::CUDA_SUCCESS {
        return;
    }
    for f in funcs {
        // SAFETY: D1 (`f` is a function of the loaded module `m`), D2.
        let _ = unsafe { sys::cuFuncLoad(f) };
    }
}

/// Images compiled or loaded from disk in this process, by key: a device opened again loads
/// the module without compiling or reading the disk again.
static IMAGES: Mutex<Option<HashMap<u128, Arc<Entry>>>> = Mutex::new(None);

/// The driver's version (`cuDriverGetVersion`), once.
fn driver_version() -> i32 {
    static V: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let mut v = 0;
        // SAFETY: the driver is loaded and initialized (a device is open); `v` is a valid
        // out-pointer.
        let _ = unsafe { sys::cuDriverGetVersion(&mut v) };
        v
    })
}

/// One CUDA C compilation: what NVRTC gets, and its keys.
struct Job<'a> {
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
        let nvrtc = super::loader::nvrtc().map_err(|why| {
            Error::Unavailable(format!(
                "kernel `{kernel}` is CUDA C, which needs NVRTC: {why} (give PTX or a cubin instead)"
            ))
        })?;
        let (arch, cubin) = arch_option(kernel, cc)?;
        let mut args = vec![arch];
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
            nvrtc,
            driver: driver_version(),
        };
        let disk_key = super::cache::key(&parts);
        // Without a disk key (a computed include over large directories) the process still
        // caches by what it can see.
        let mem_key = disk_key.unwrap_or_else(|| {
            let mut h = Hasher128::default();
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
            kernel,
            source,
            options,
            names,
            args,
            // Linked code is always a cubin (the linker's output).
            cubin: cubin || options.links(),
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
                    if std::env::var_os("CUEFLOW_CUDA_DEBUG").is_some() {
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

/// Destroys an NVRTC program on every path.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { rtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn rtc_err(kernel: &str, call: &str, r: nvrtcResult) -> Error {
    Error::Compile {
        kernel: kernel.to_string(),
        log: format!("{call} failed: {r:?}"),
    }
}

/// The architecture option for the device: its own `sm_XY` when NVRTC supports it (a cubin),
/// else `compute_XY` of the newest supported architecture not above the device's (PTX that the
/// driver compiles for the device).
fn arch_option(kernel: &str, cc: (i32, i32)) -> Result<(String, bool)> {
    let want = cc.0 * 10 + cc.1;
    let mut n = 0;
    // SAFETY: NVRTC is loaded (checked by the caller); `n` is a valid out-pointer.
    let r = unsafe { rtc::nvrtcGetNumSupportedArchs(&mut n) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(rtc_err(kernel, "nvrtcGetNumSupportedArchs", r));
    }
    let mut archs = vec![0i32; n.max(0) as usize];
    // SAFETY: `archs` has room for the `n` entries NVRTC reported.
    let r = unsafe { rtc::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(rtc_err(kernel, "nvrtcGetSupportedArchs", r));
    }
    if archs.contains(&want) {
        return Ok((format!("--gpu-architecture=sm_{want}"), true));
    }
    match archs.iter().copied().filter(|&a| a <= want).max() {
        Some(a) => Ok((format!("--gpu-architecture=compute_{a}"), false)),
        None => Err(Error::Compile {
            kernel: kernel.to_string(),
            log: format!(
                "NVRTC supports architectures {archs:?}, none of which runs on this sm_{want} device"
            ),
        }),
    }
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
    let mut units = vec![(main, first.image)];
    for (name, code) in &job.options.link {
        units.push((
            name.clone(),
            compile_unit(job, code, name, &[], &args, false)?.image,
        ));
    }
    Ok(Entry {
        image: super::link::link(job.kernel, &units)?,
        cubin: true,
        lowered: first.lowered,
    })
}

/// Compile one translation unit `source` (named `file` in logs) of `job` with `args`: a
/// cubin when `cubin`, else NUL-terminated PTX, and the lowered names of `names`.
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
    let src = CString::new(source).map_err(|_| nul("the source"))?;
    let name = CString::new(file).unwrap_or_else(|_| c"kernel.cu".to_owned());
    let headers = &job.options.headers;
    let contents: Vec<CString> = headers
        .iter()
        .map(|(_, c)| CString::new(c.as_str()).map_err(|_| nul("a header")))
        .collect::<Result<_>>()?;
    let header_names: Vec<CString> = headers
        .iter()
        .map(|(n, _)| CString::new(n.as_str()).map_err(|_| nul("a header name")))
        .collect::<Result<_>>()?;
    let content_ptrs: Vec<*const c_char> = contents.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let mut prog: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC is loaded (Job::new); `src` and `name` are NUL-terminated; the header
    // arrays hold `headers.len()` NUL-terminated strings each and outlive the call (NVRTC
    // copies them).
    let r = unsafe {
        rtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            headers.len() as i32,
            if headers.is_empty() {
                std::ptr::null()
            } else {
                content_ptrs.as_ptr()
            },
            if headers.is_empty() {
                std::ptr::null()
            } else {
                name_ptrs.as_ptr()
            },
        )
    };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(rtc_err(kernel, "nvrtcCreateProgram", r));
    }
    let prog = Program(prog);
    let exprs: Vec<CString> = names
        .iter()
        .map(|n| CString::new(n.as_str()).map_err(|_| nul("the name expression")))
        .collect::<Result<_>>()?;
    for e in &exprs {
        // SAFETY: `prog` is live and not yet compiled; `e` is NUL-terminated.
        let r = unsafe { rtc::nvrtcAddNameExpression(prog.0, e.as_ptr()) };
        if r != nvrtcResult::NVRTC_SUCCESS {
            return Err(rtc_err(kernel, "nvrtcAddNameExpression", r));
        }
    }
    let opts: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| nul("an option")))
        .collect::<Result<_>>()?;
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: `prog` is live; `ptrs` holds `ptrs.len()` NUL-terminated options that outlive
    // the call.
    let r = unsafe { rtc::nvrtcCompileProgram(prog.0, ptrs.len() as i32, ptrs.as_ptr()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&prog);
        let log = if log.trim().is_empty() {
            format!("nvrtcCompileProgram failed: {r:?}")
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
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: `prog` compiled successfully and `e` was added before compiling; NVRTC
        // points `out` at a string it owns until the program is destroyed.
        let r = unsafe { rtc::nvrtcGetLoweredName(prog.0, e.as_ptr(), &mut out) };
        if r != nvrtcResult::NVRTC_SUCCESS || out.is_null() {
            return Err(rtc_err(kernel, "nvrtcGetLoweredName", r));
        }
        // SAFETY: `out` is NUL-terminated and valid while `prog` lives (it does here).
        let l = unsafe { std::ffi::CStr::from_ptr(out) };
        lowered.push((n.clone(), l.to_string_lossy().into_owned()));
    }
    let mut size = 0usize;
    let image = if cubin {
        // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
        let r = unsafe { rtc::nvrtcGetCUBINSize(prog.0, &mut size) };
        if r != nvrtcResult::NVRTC_SUCCESS {
            return Err(rtc_err(kernel, "nvrtcGetCUBINSize", r));
        }
        let mut out = vec![0u8; size];
        // SAFETY: `out` has the `size` bytes NVRTC asked for.
        let r = unsafe { rtc::nvrtcGetCUBIN(prog.0, out.as_mut_ptr() as *mut c_char) };
        if r != nvrtcResult::NVRTC_SUCCESS {
            return Err(rtc_err(kernel, "nvrtcGetCUBIN", r));
        }
        out
    } else {
        // SAFETY: as above, for PTX (the size includes the terminating NUL).
        let r = unsafe { rtc::nvrtcGetPTXSize(prog.0, &mut size) };
        if r != nvrtcResult::NVRTC_SUCCESS {
            return Err(rtc_err(kernel, "nvrtcGetPTXSize", r));
        }
        let mut out = vec![0u8; size.max(1)];
        // SAFETY: `out` has the `size` bytes NVRTC asked for.
        let r = unsafe { rtc::nvrtcGetPTX(prog.0, out.as_mut_ptr() as *mut c_char) };
        if r != nvrtcResult::NVRTC_SUCCESS {
            return Err(rtc_err(kernel, "nvrtcGetPTX", r));
        }
        out
    };
    Ok(Entry {
        image,
        cubin,
        lowered,
    })
}

fn program_log(prog: &Program) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is live; `size` is a valid out-pointer.
    if unsafe { rtc::nvrtcGetProgramLogSize(prog.0, &mut size) } != nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: `log` has the `size` bytes NVRTC asked for.
    if unsafe { rtc::nvrtcGetProgramLog(prog.0, log.as_mut_ptr() as *mut c_char) }
        != nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).into_owned()
}
