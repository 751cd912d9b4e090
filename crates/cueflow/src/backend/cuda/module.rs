//! Kernel code to launchable functions: CUDA C through NVRTC (a cubin for the device's exact
//! architecture, or PTX for the newest architecture NVRTC knows when it does not know the
//! device's), PTX and cubin images through `cuModuleLoadData`.
//!
//! Modules are cached per device by a hash of their code, so the built-in kernels, which share
//! one source file, cost one NVRTC compile per device. A module stays loaded until the device is
//! dropped and its work is done; kernels hold only the function handle, looked up once per device
//! through [`KernelInner::loaded_for`].

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction, CUfunction_attribute, CUmodule, CUresult};
use cudarc::nvrtc::sys::{self as rtc, nvrtcProgram, nvrtcResult};
use parking_lot::Mutex;

use super::driver::check;
use crate::backend::contract::kernel::{CudaCode, KernelInner};
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

struct Module(CUmodule);

// SAFETY: as for LoadedKernel; the module is unloaded once, by the cache's owner.
unsafe impl Send for Module {}

/// The loaded modules of one device, by code hash.
pub(super) struct Modules {
    map: Mutex<HashMap<(u64, usize), Module>>,
    /// Compute capability (major, minor).
    cc: (i32, i32),
}

fn code_key(code: &CudaCode) -> (u64, usize) {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let len = match code {
        CudaCode::Source { code, .. } => {
            (0u8, code.as_ref()).hash(&mut h);
            code.len()
        }
        CudaCode::Ptx { code, .. } => {
            (1u8, code.as_ref()).hash(&mut h);
            code.len()
        }
        CudaCode::Cubin { image, .. } => {
            (2u8, image.as_ref()).hash(&mut h);
            image.len()
        }
    };
    (h.finish(), len)
}

fn entry(code: &CudaCode) -> &str {
    match code {
        CudaCode::Source { entry, .. }
        | CudaCode::Ptx { entry, .. }
        | CudaCode::Cubin { entry, .. } => entry,
    }
}

impl Modules {
    pub fn new(cc: (i32, i32)) -> Self {
        Modules {
            map: Mutex::new(HashMap::new()),
            cc,
        }
    }

    /// The function for `kernel` on this device (context current, D2).
    pub fn load(&self, kernel: &KernelInner) -> Result<LoadedKernel> {
        let code = kernel.cuda.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "kernel `{}` has no implementation for the cuda backend",
                kernel.name
            ))
        })?;
        let key = code_key(code);
        let module = {
            let mut map = self.map.lock();
            match map.get(&key) {
                Some(m) => m.0,
                None => {
                    let image = match code {
                        CudaCode::Source { code, .. } => {
                            compiled(key, code, &kernel.name, self.cc)?.to_vec()
                        }
                        CudaCode::Ptx { code, .. } => {
                            let mut v = code.as_bytes().to_vec();
                            v.push(0);
                            v
                        }
                        CudaCode::Cubin { image, .. } => image.to_vec(),
                    };
                    let m = load_image(&image, &kernel.name)?;
                    map.insert(key, Module(m));
                    m
                }
            }
        };
        let name = entry(code);
        let c = CString::new(name).map_err(|_| Error::Compile {
            kernel: kernel.name.clone(),
            log: format!("entry point {name:?} contains a NUL byte"),
        })?;
        let mut func: CUfunction = std::ptr::null_mut();
        // SAFETY: D1 (`module` is loaded and held by the cache), D2; `c` is NUL-terminated.
        let r = unsafe { sys::cuModuleGetFunction(&mut func, module, c.as_ptr()) };
        match r {
            CUresult::CUDA_SUCCESS => {}
            CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(Error::Compile {
                    kernel: kernel.name.clone(),
                    log: format!("the module has no kernel named `{name}` (is it extern \"C\"?)"),
                })
            }
            code => {
                return Err(super::driver::CuError {
                    call: "cuModuleGetFunction",
                    code,
                }
                .to_error())
            }
        }
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
        };
        let key = code_key(&code);
        let mut map = self.map.lock();
        if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(key) {
            let image = compiled(key, source, name, self.cc)?;
            slot.insert(Module(load_image(&image, name)?));
        }
        Ok(())
    }

    /// Unload every module. Only once no work of the device can still run.
    pub fn unload_all(&self) {
        for (_, m) in self.map.lock().drain() {
            // SAFETY: D1 (loaded by this cache, unloaded once), D2 (the caller bound the
            // context); no kernel of the module can still run (the caller's precondition).
            let _ = unsafe { sys::cuModuleUnload(m.0) };
        }
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

/// NVRTC output by (code key, compute capability), process-wide: a device opened again loads
/// the module without compiling again.
type ImageCache = HashMap<((u64, usize), (i32, i32)), Arc<Vec<u8>>>;

static IMAGES: Mutex<Option<ImageCache>> = Mutex::new(None);

fn compiled(key: (u64, usize), source: &str, kernel: &str, cc: (i32, i32)) -> Result<Arc<Vec<u8>>> {
    let mut images = IMAGES.lock();
    let images = images.get_or_insert_with(HashMap::new);
    if let Some(image) = images.get(&(key, cc)) {
        return Ok(image.clone());
    }
    let image = Arc::new(compile(source, kernel, cc)?);
    images.insert((key, cc), image.clone());
    Ok(image)
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

/// Compile CUDA C with NVRTC for the device; returns a cubin, or NUL-terminated PTX.
fn compile(source: &str, kernel: &str, cc: (i32, i32)) -> Result<Vec<u8>> {
    super::loader::nvrtc().map_err(|why| {
        Error::Unavailable(format!(
            "kernel `{kernel}` is CUDA C, which needs NVRTC: {why} (give PTX or a cubin instead)"
        ))
    })?;
    let src = CString::new(source).map_err(|_| Error::Compile {
        kernel: kernel.to_string(),
        log: "the source contains a NUL byte".into(),
    })?;
    let name = CString::new(format!("{kernel}.cu")).unwrap_or_else(|_| c"kernel.cu".to_owned());
    let mut prog: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC is loaded; `src` and `name` are NUL-terminated; no headers (0, null, null).
    let r = unsafe {
        rtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(rtc_err(kernel, "nvrtcCreateProgram", r));
    }
    let prog = Program(prog);
    let (arch, cubin) = arch_option(kernel, cc)?;
    let opts = [CString::new(arch).expect("no NUL in the option")];
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: `prog` is live; `ptrs` holds `ptrs.len()` NUL-terminated options that outlive
    // the call.
    let r = unsafe { rtc::nvrtcCompileProgram(prog.0, ptrs.len() as i32, ptrs.as_ptr()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&prog);
        return Err(Error::Compile {
            kernel: kernel.to_string(),
            log: if log.trim().is_empty() {
                format!("nvrtcCompileProgram failed: {r:?}")
            } else {
                log
            },
        });
    }
    let mut size = 0usize;
    if cubin {
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
        Ok(out)
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
        Ok(out)
    }
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
