//! Relocatable device code (KC1's `-rdc=true`): a kernel whose CUDA C is several translation
//! units — the kernel's source and the sources given with `CompileOptions::link_source` —
//! each compiled by NVRTC to relocatable PTX, then linked by the driver's linker
//! (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`) into one cubin for the device, which is
//! what the disk cache stores (KC3) and `cuModuleLoadData` loads.
//!
//! PTX is what goes into the linker, not NVRTC's cubins: the driver documents PTX input to
//! `cuLinkAddData` as compiled relocatable (as `nvcc -rdc=true` would), and it is the form
//! every driver since CUDA 5.5 links. An unresolved symbol — a device function declared in one
//! unit and defined in none — is a link error whose log (the linker's own) is carried in
//! [`Error::Compile`].

use std::ffi::{c_void, CString};

use cudarc::driver::sys::{CUjitInputType, CUjit_option, CUlinkState};

use super::driver::module as modl;
use super::driver::CuError;

use crate::error::{Error, Result};

/// Size of the linker's error and information logs.
const LOG_BYTES: usize = 16 << 10;

/// Destroys a link state on every path (which frees the cubin `cuLinkComplete` returned:
/// copy it out first).
struct LinkState(CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: the state came from cuLinkCreate and is destroyed once, here.
        unsafe { modl::link_destroy(self.0) };
    }
}

/// The text of a log buffer the linker wrote (NUL-terminated, or full).
fn log_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim_end().to_string()
}

/// Link the relocatable PTX `units` (file name, NUL-terminated PTX) into one cubin for the
/// current context's device (context current, D2). Errors carry the linker's log.
pub(super) fn link(kernel: &str, units: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut error_log = vec![0u8; LOG_BYTES];
    let mut info_log = vec![0u8; LOG_BYTES];
    let mut options = [
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // The driver takes sizes as pointer-sized integers in the value array.
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr() as *mut c_void,
        LOG_BYTES as *mut c_void,
        info_log.as_mut_ptr() as *mut c_void,
        LOG_BYTES as *mut c_void,
    ];
    let failed = |what: &str, e: CuError, log: &[u8]| Error::Compile {
        kernel: kernel.to_string(),
        log: format!(
            "linking relocatable device code ({}{what}: {}): {}",
            e.call,
            super::driver::error_name(e.code),
            match log_text(log) {
                l if l.is_empty() => "the linker wrote no log".to_string(),
                l => l,
            }
        ),
    };
    // SAFETY: D2 (context current); `options` and `values` hold 4 entries each; the log buffers
    // hold LOG_BYTES bytes each and outlive the link state (dropped before them, below).
    let raw = unsafe { modl::link_create(&mut options, &mut values) }
        .map_err(|e| failed("", e, &error_log))?;
    let state = LinkState(raw);
    for (name, ptx) in units {
        let cname = CString::new(name.as_str()).unwrap_or_else(|_| c"unit.cu".to_owned());
        // cuLinkAddData reads PTX as a C string: make sure of the NUL.
        let mut data = ptx.clone();
        if data.last() != Some(&0) {
            data.push(0);
        }
        // SAFETY: `state` is live; `data` holds NUL-terminated PTX of `data.len()` bytes and
        // outlives the call (the linker copies what it keeps); `cname` is NUL-terminated; no
        // per-input options.
        unsafe {
            modl::link_add_data(state.0, CUjitInputType::CU_JIT_INPUT_PTX, &mut data, &cname)
        }
        .map_err(|e| failed(&format!(" `{name}`"), e, &error_log))?;
    }
    // SAFETY: `state` is live with every unit added; the cubin is copied out before `state`
    // is dropped.
    let image = unsafe { modl::link_complete(state.0) }.map_err(|e| failed("", e, &error_log))?;
    drop(state);
    if crate::config::cuda_debug() {
        let info = log_text(&info_log);
        if !info.is_empty() {
            eprintln!("cueflow cuda: linker log for `{kernel}`: {info}");
        }
    }
    Ok(image)
}

/// The architecture arguments for a unit that goes into the linker: PTX (`compute_XY`) of the
/// architecture the device's cubin would have had (`sm_XY`).
pub(super) fn ptx_args(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| match a.strip_prefix("--gpu-architecture=sm_") {
            Some(v) => format!("--gpu-architecture=compute_{v}"),
            None => a.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_units_are_ptx_of_the_same_architecture() {
        let args = vec![
            "--gpu-architecture=sm_90".to_string(),
            "-rdc=true".to_string(),
        ];
        assert_eq!(
            ptx_args(&args),
            vec!["--gpu-architecture=compute_90", "-rdc=true"]
        );
        let ptx = vec!["--gpu-architecture=compute_80".to_string()];
        assert_eq!(ptx_args(&ptx), ptx);
        assert_eq!(
            log_text(b"undefined reference\0junk"),
            "undefined reference"
        );
        assert_eq!(log_text(b"no nul  "), "no nul");
    }
}
