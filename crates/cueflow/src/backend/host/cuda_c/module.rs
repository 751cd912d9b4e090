//! A compiled host object, opened with `dlopen` (through libloading), and its entry for one
//! kernel.
//!
//! Objects are never closed: their thread-local storage (shared memory, fiber stacks) lives
//! on in the compute workers, and each chains to the previous fault handler (see the prelude),
//! so unloading one would leave a handler pointing into unmapped code.

use std::ffi::{c_char, c_void};
use std::path::Path;

use crate::types::HostPath;

/// The launch description the entry takes (`struct cueflow_launch` in the prelude; the
/// out-of-process worker passes the same struct).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct CueflowLaunch {
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub dyn_shared: u32,
    /// First linear block to run.
    pub block_begin: u32,
    /// One past the last linear block to run.
    pub block_end: u32,
    /// Where a fault writes its NUL-terminated message.
    pub fault_msg: *mut c_char,
    /// Bytes at `fault_msg`.
    pub fault_msg_len: u32,
}

/// `cueflow_run_<entry>`.
pub(crate) type RunFn = unsafe extern "C" fn(*const CueflowLaunch, *mut *mut c_void) -> i32;
/// `cueflow_params_<entry>`.
type ParamsFn = unsafe extern "C" fn(*mut u32, u32) -> u32;

/// One kernel's entry in an opened object.
pub(crate) struct Module {
    /// The entry.
    pub run: RunFn,
    /// Byte size of each parameter, in order.
    pub params: Vec<u32>,
    /// The object's path: what the kernel worker process opens.
    pub path: std::path::PathBuf,
    /// The entry's symbol suffix (`cueflow_run_<symbol>`), for the same worker.
    pub symbol: String,
    /// How the entry runs a block's threads (`cueflow_path_<symbol>`).
    pub host_path: HostPath,
    /// For an object of the disk cache: its file, locked so that no eviction removes it
    /// while the kernel lives (the worker opens it by path, `kernel_cache.rs`).
    pin: Option<std::fs::File>,
}

impl Module {
    /// Open `path` and find the entry for symbol suffix `symbol`.
    pub(crate) fn open(path: &Path, symbol: &str) -> Result<Module, String> {
        use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
        // SAFETY: the object is ours (compiled from the kernel source against the prelude); its
        // initializers only set up thread-local storage.
        let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
            .map_err(|e| format!("dlopen {}: {e}", path.display()))?;
        let sym = |name: String| -> Result<*mut c_void, String> {
            // SAFETY: only the address is taken; it is given its type below, where the prelude
            // says what the symbol is.
            unsafe { lib.get::<*mut c_void>(name.as_str()) }
                .map(|s| s.into_raw())
                .map_err(|_| format!("{} has no symbol {name}", path.display()))
        };
        let run = sym(format!("cueflow_run_{symbol}"))?;
        let params = sym(format!("cueflow_params_{symbol}"))?;
        // SAFETY: the prelude's CUEFLOW_ENTRY defines these symbols with exactly these
        // signatures.
        let (run, params): (RunFn, ParamsFn) = unsafe {
            (
                std::mem::transmute::<*mut c_void, RunFn>(run),
                std::mem::transmute::<*mut c_void, ParamsFn>(params),
            )
        };
        let mut sizes = vec![0u32; 256];
        // SAFETY: `sizes` has room for 256 entries, the capacity passed.
        let n = unsafe { params(sizes.as_mut_ptr(), sizes.len() as u32) } as usize;
        sizes.truncate(n.min(256));
        let host_path = match sym(format!("cueflow_path_{symbol}")) {
            Ok(p) => {
                // SAFETY: the lane compiler's CUEFLOW_PATH defines this symbol as
                // `const char* cueflow_path_<sym>()` returning a static NUL-terminated string.
                let text = unsafe {
                    let f = std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn() -> *const c_char,
                    >(p);
                    std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
                };
                match text.strip_prefix("fibers: ") {
                    Some(reason) => HostPath::Fibers {
                        reason: reason.to_string(),
                    },
                    None => HostPath::Lanes,
                }
            }
            Err(_) => HostPath::Fibers {
                reason: "compiled before the lane compiler".into(),
            },
        };
        // Never closed (module docs): the addresses above stay valid for the process.
        std::mem::forget(lib);
        Ok(Module {
            run,
            params: sizes,
            host_path,
            path: path.to_path_buf(),
            symbol: symbol.to_string(),
            pin: None,
        })
    }

    /// The same module, keeping `pin` (its cached object's lock) for as long as it lives.
    pub(crate) fn pinned(mut self, pin: std::fs::File) -> Module {
        self.pin = Some(pin);
        self
    }
}
