//! The raw driver calls the per-call examples set cueflow beside (`percall_profile`,
//! `launch_cache_probe`): checked calls, a non-blocking stream and a launch of a parameterless
//! kernel, as a program that uses the driver directly makes them.

use std::time::Instant;

use cueflow::cudarc::driver::sys;
use cueflow::pipeline::median;

pub type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `r` or a labelled error.
pub fn cu(r: sys::CUresult, what: &str) -> Res<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(format!("{what}: {e:?}").into()),
    }
}

/// Why `program` cannot run here (no CUDA device 0, or no NVRTC), printed as a SKIP line.
pub fn skip_reason(program: &str) -> Option<String> {
    if let Err(e) = cueflow::Device::cuda(0) {
        return Some(format!("SKIP {program}: no CUDA device 0 ({e})"));
    }
    // SAFETY: this only tries to open the library (cudarc panics on first use without it).
    if !unsafe { cueflow::cudarc::nvrtc::sys::is_culib_present() } {
        return Some(format!("SKIP {program}: NVRTC is missing"));
    }
    None
}

/// A new non-blocking stream of the current context.
pub fn non_blocking_stream() -> Res<sys::CUstream> {
    let mut stream = std::ptr::null_mut();
    cu(
        // SAFETY: a valid out-pointer; the caller made a context current.
        unsafe {
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            )
        },
        "cuStreamCreate",
    )?;
    Ok(stream)
}

/// Launch the parameterless `func` on `stream`, one block of one thread.
pub fn launch_empty(func: sys::CUfunction, stream: sys::CUstream) -> Res<()> {
    cu(
        // SAFETY: `func` takes no parameters and is loaded; the stream is live and its context
        // current (the caller's guarantee).
        unsafe {
            sys::cuLaunchKernel(
                func,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        },
        "cuLaunchKernel",
    )
}

/// Median per-call microseconds of `batches` batches of `calls` calls of `body`, `drain`
/// (untimed) before each.
pub fn per_call(
    batches: usize,
    calls: usize,
    mut drain: impl FnMut() -> Res<()>,
    mut body: impl FnMut() -> Res<()>,
) -> Res<f64> {
    let mut t = Vec::with_capacity(batches);
    for _ in 0..batches {
        drain()?;
        let start = Instant::now();
        for _ in 0..calls {
            body()?;
        }
        t.push(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    drain()?;
    Ok(median(t))
}
