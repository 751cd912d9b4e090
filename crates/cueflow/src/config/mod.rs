//! Every `CUEFLOW_*` environment variable, read here and nowhere else (docs/configuration.md
//! has the table; a test keeps the two lists the same).
//!
//! Each variable is a [`Var`] constant and has one accessor that gives its typed value. The
//! parse rules are [`read`]'s and the same for every variable: unset, empty or blank is
//! unset; a switch takes `1`/`on`/`true`/`yes` and `0`/`off`/`false`/`no`; a value that means
//! nothing the variable accepts prints one warning line on standard error (naming the
//! variable, the value, what it accepts and what cueflow does instead) and the default
//! applies — never silently. [`device`] is the exception: a bad device list is a typed error
//! where it is opened ([`Error::UnknownDevice`](crate::Error::UnknownDevice)), as are
//! [`LAUNCH_TIMEOUT`] and [`STORE_PORT`] where a launcher's variables are read
//! (`LaunchError::BadVariable`).
//!
//! **When a variable is read.** A variable that decides something for the whole process once
//! (how completions wake, which path CUDA C kernels take, whether launches block) is read once,
//! on first use ([`LazyLock`]); one that a program or a test may change between calls (the
//! device `Device::from_env` opens, the cache directory, the sanitizer's mode of the next
//! device) is read at each call. The docs table says which is which.
//!
//! **Layers.** This is a bottom module: the api, core, the backends and the cluster code
//! import it, and it imports none of them (a rule of `cueflow-layers`; another says no file
//! outside it names a `CUEFLOW_*` variable). Defaults that belong to a layer (the queue depth,
//! the sanitizer's build-dependent default) are applied there, from an `Option` given here.
//!
//! **Other variables.** Modules that interpret another program's convention read that
//! convention's variables themselves: `cluster/env.rs` (torchrun's `RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, …; Slurm's `SLURM_*`; Open MPI's `OMPI_*`),
//! `backend/cuda/headers.rs` (`CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`),
//! `backend/cuda/driver/library.rs` (`CONDA_PREFIX`, `VIRTUAL_ENV`, `PYTHONPATH`, `HOME`:
//! where pip puts NVIDIA's libraries), `backend/cuda/nccl.rs` (`NCCL_RUNTIME_CONNECT`),
//! the C++ compiler's finder (`CXX`, `PATH`: `backend/host/cxx.rs`) and the cache locations
//! (`XDG_CACHE_HOME`, `HOME`: `backend/kernel_cache.rs`). The docs table lists them too.

mod read;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

pub(crate) use read::{parse_bytes, parse_switch, Var};

const SWITCH: &str = "one of 1, on, true, yes, 0, off, false, no";

// ---- Devices -------------------------------------------------------------------------------

/// The device (or device list) `Device::from_env` opens.
pub(crate) const DEVICE: Var = Var::new(
    "CUEFLOW_DEVICE",
    "a device or a device list (host, host:N, host:Nx, cuda, cuda:N, cuda:all, …)",
);
/// Work that may be pending on one stream before an enqueue waits (RL1).
pub(crate) const QUEUE_DEPTH: Var =
    Var::new("CUEFLOW_QUEUE_DEPTH", "a positive number of operations");

/// `CUEFLOW_DEVICE` as written (unset or blank: `None`; the caller opens `host`). Read at each
/// call; the device list is parsed, and refused with a typed error, where it is opened.
pub(crate) fn device() -> Option<String> {
    DEVICE.text()
}

/// `CUEFLOW_QUEUE_DEPTH`, read for each device opened; `None` (the backend's default) when
/// unset or not a positive number (which warns).
pub(crate) fn queue_depth() -> Option<usize> {
    QUEUE_DEPTH.parsed(
        |v| v.parse::<usize>().ok().filter(|&n| n > 0),
        "using the default depth",
    )
}

// ---- Core: the sanitizer, tracing, automatic modes -------------------------------------------

/// The race sanitizer's mode for devices opened from now on.
pub(crate) const SANITIZE: Var = Var::new(
    "CUEFLOW_SANITIZE",
    "one of off, warn, error, panic (or 0, 1)",
);
/// Where each device writes its trace (`{rank}` replaced by the launcher's rank).
pub(crate) const TRACE: Var = Var::new("CUEFLOW_TRACE", "a file path");
/// Automatic ordering for every device the process opens.
pub(crate) const AUTO_ORDER: Var = Var::new("CUEFLOW_AUTO_ORDER", SWITCH);
/// Automatic graphs for every device the process opens (AG1).
pub(crate) const AUTO_GRAPH: Var = Var::new("CUEFLOW_AUTO_GRAPH", SWITCH);
/// How `.await`ed completions are woken.
pub(crate) const WAKE: Var = Var::new("CUEFLOW_WAKE", "one of hostfn, watcher");
/// Print panics that cueflow catches (in host functions, callbacks) through the panic hook.
pub(crate) const PANIC_OUTPUT: Var = Var::new("CUEFLOW_PANIC_OUTPUT", SWITCH);

/// A mode of the race sanitizer, as `CUEFLOW_SANITIZE` and `SanitizeMode::parse` spell it
/// (core's `SanitizeMode` is made from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sanitize {
    /// `off`, `0`, `false`, `no`.
    Off,
    /// `warn`, `1`, `on`, `true`, `yes`.
    Warn,
    /// `error`.
    Error,
    /// `panic`.
    Panic,
}

/// The sanitizer mode `word` names (case and surrounding blanks do not matter; blank is off).
pub(crate) fn sanitize_word(word: &str) -> Option<Sanitize> {
    let w = word.trim();
    if w.is_empty() {
        return Some(Sanitize::Off);
    }
    if let Some(on) = parse_switch(w) {
        return Some(if on { Sanitize::Warn } else { Sanitize::Off });
    }
    [
        ("warn", Sanitize::Warn),
        ("error", Sanitize::Error),
        ("panic", Sanitize::Panic),
    ]
    .into_iter()
    .find(|(n, _)| w.eq_ignore_ascii_case(n))
    .map(|(_, m)| m)
}

/// `CUEFLOW_SANITIZE`, read for each device opened: `None` when unset (the build decides);
/// a value that names no mode warns and is `warn`.
pub(crate) fn sanitize() -> Option<Sanitize> {
    SANITIZE.text().map(|v| sanitize_setting(&v))
}

/// The mode a set `CUEFLOW_SANITIZE` value means.
pub(crate) fn sanitize_setting(v: &str) -> Sanitize {
    sanitize_word(v).unwrap_or_else(|| {
        SANITIZE.warn(v, "using warn");
        Sanitize::Warn
    })
}

/// `CUEFLOW_TRACE`, read for each device opened.
pub(crate) fn trace() -> Option<PathBuf> {
    TRACE.path()
}

/// `CUEFLOW_AUTO_ORDER`, read for each device opened (default off).
pub(crate) fn auto_order() -> bool {
    AUTO_ORDER.switch(false)
}

/// `CUEFLOW_AUTO_GRAPH`, read for each device opened (default off).
pub(crate) fn auto_graph() -> bool {
    AUTO_GRAPH.switch(false)
}

/// `CUEFLOW_WAKE=watcher`: completions are woken by a thread polling events, not by a host
/// function in stream order (the default, `hostfn`). Read once.
pub(crate) fn wake_by_watcher() -> bool {
    static WATCHER: LazyLock<bool> = LazyLock::new(|| {
        WAKE.choice(&[("hostfn", false), ("watcher", true)], "using hostfn")
            .unwrap_or(false)
    });
    *WATCHER
}

/// `CUEFLOW_PANIC_OUTPUT` (default off). Read once.
pub(crate) fn panic_output() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| PANIC_OUTPUT.switch(false));
    *ON
}

// ---- The host backend ----------------------------------------------------------------------

/// The host backend's per-kernel time limit (W6).
pub(crate) const KERNEL_TIMEOUT_MS: Var = Var::new(
    "CUEFLOW_KERNEL_TIMEOUT_MS",
    "a number of milliseconds, or 0, off, none",
);
/// The device-memory arena (kernel isolation needs it).
pub(crate) const HOST_ARENA: Var = Var::new("CUEFLOW_HOST_ARENA", SWITCH);
/// CUDA C launches in worker processes (off: in this process).
pub(crate) const HOST_ISOLATE: Var = Var::new("CUEFLOW_HOST_ISOLATE", SWITCH);
/// Which form of a kernel with both the host backend runs.
pub(crate) const HOST_KERNELS: Var = Var::new("CUEFLOW_HOST_KERNELS", "one of closure, c");
/// How CUDA C kernels run their threads on the host.
pub(crate) const HOST_CUDA_C_PATH: Var =
    Var::new("CUEFLOW_HOST_CUDA_C_PATH", "one of lanes, fibers");
/// Say which path each CUDA C kernel takes.
pub(crate) const HOST_CUDA_C_LOG: Var = Var::new("CUEFLOW_HOST_CUDA_C_LOG", SWITCH);
/// Keep each compiled CUDA C unit in this directory.
pub(crate) const HOST_CUDA_C_DUMP: Var = Var::new("CUEFLOW_HOST_CUDA_C_DUMP", "a directory");
/// The lane compiler's rules to turn off (measuring each one's effect).
pub(crate) const HOST_CUDA_C_RULES: Var = Var::new(
    "CUEFLOW_HOST_CUDA_C_RULES",
    "a comma-separated list of -R1 … -R5",
);
/// Copy engines of a host device: 1 (both directions take turns) or 2 (one each way).
pub(crate) const HOST_COPY_ENGINES: Var = Var::new("CUEFLOW_HOST_COPY_ENGINES", "1 or 2");
/// Where the kernel worker executable is cached.
pub(crate) const CACHE_DIR: Var = Var::new("CUEFLOW_CACHE_DIR", "a directory");

/// `CUEFLOW_KERNEL_TIMEOUT_MS`, read for each device opened: `None` for no limit (unset,
/// `0`, `off`, `none`; anything else that is not a number warns and means none).
pub(crate) fn kernel_timeout() -> Option<Duration> {
    KERNEL_TIMEOUT_MS
        .parsed(
            |v| match read::is_off_word(v) {
                true => Some(None),
                false => v.parse::<u64>().ok().map(Some),
            },
            "kernels run without a time limit",
        )
        .flatten()
        .map(Duration::from_millis)
}

/// `CUEFLOW_HOST_COPY_ENGINES`, read for each host device opened: `None` (the backend decides
/// from the cores it has) when unset or not 1 or 2 (which warns).
pub(crate) fn host_copy_engines() -> Option<u32> {
    HOST_COPY_ENGINES.parsed(
        |v| v.parse::<u32>().ok().filter(|n| (1..=2).contains(n)),
        "the host backend picks the count from the cores it has",
    )
}

/// `CUEFLOW_HOST_ARENA` (default on). Read once.
pub(crate) fn host_arena() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| HOST_ARENA.switch(true));
    *ON
}

/// `CUEFLOW_HOST_ISOLATE` (default on). Read once.
pub(crate) fn host_isolate() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| HOST_ISOLATE.switch(true));
    *ON
}

/// `CUEFLOW_HOST_KERNELS=c`: kernels with CUDA C run it even when they have a closure (the
/// default, `closure`, runs the closure). Read once.
pub(crate) fn host_kernels_c() -> bool {
    static C: LazyLock<bool> = LazyLock::new(|| {
        HOST_KERNELS
            .choice(&[("closure", false), ("c", true)], "running closures")
            .unwrap_or(false)
    });
    *C
}

/// `CUEFLOW_HOST_CUDA_C_PATH=fibers`: every CUDA C kernel runs its threads as fibers (the
/// default, `lanes`, runs work-item loops where it can). Read once.
pub(crate) fn host_cuda_c_fibers() -> bool {
    static FIBERS: LazyLock<bool> = LazyLock::new(|| {
        HOST_CUDA_C_PATH
            .choice(&[("lanes", false), ("fibers", true)], "using lanes")
            .unwrap_or(false)
    });
    *FIBERS
}

/// `CUEFLOW_HOST_CUDA_C_LOG` (default off). Read once.
pub(crate) fn host_cuda_c_log() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| HOST_CUDA_C_LOG.switch(false));
    *ON
}

/// `CUEFLOW_HOST_CUDA_C_DUMP`, read for each kernel compiled.
pub(crate) fn host_cuda_c_dump() -> Option<PathBuf> {
    HOST_CUDA_C_DUMP.path()
}

/// Whether the lane compiler's rule `n` (1 to 5) is on: `CUEFLOW_HOST_CUDA_C_RULES=-R1,-R5`
/// turns rules off. Read once; a word that is not `-R1` … `-R5` warns and is left out.
pub(crate) fn lane_rule_on(n: u8) -> bool {
    static OFF: LazyLock<Vec<u8>> = LazyLock::new(|| {
        let Some(v) = HOST_CUDA_C_RULES.text() else {
            return Vec::new();
        };
        let mut off = Vec::new();
        for w in v.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let rule = w
                .strip_prefix('-')
                .and_then(|r| r.strip_prefix(['R', 'r']))
                .and_then(|d| d.parse::<u8>().ok())
                .filter(|d| (1..=5).contains(d));
            match rule {
                Some(d) => off.push(d),
                None => HOST_CUDA_C_RULES.warn(&v, &format!("leaving out {w:?}")),
            }
        }
        off
    });
    !OFF.contains(&n)
}

/// `CUEFLOW_CACHE_DIR`, read at each call.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    CACHE_DIR.path()
}

// ---- The kernel caches ---------------------------------------------------------------------

/// The kernel cache's directory, or off.
pub(crate) const KERNEL_CACHE: Var = Var::new(
    "CUEFLOW_KERNEL_CACHE",
    "a directory, or off, 0, none, false",
);
/// The bound on each kernel cache directory's bytes.
pub(crate) const KERNEL_CACHE_MAX_BYTES: Var = Var::new(
    "CUEFLOW_KERNEL_CACHE_MAX_BYTES",
    "a size in bytes (512K, 256M, 2G, …) or unlimited",
);

/// The bound when `CUEFLOW_KERNEL_CACHE_MAX_BYTES` is unset or bad: 256 MiB.
pub(crate) const DEFAULT_KERNEL_CACHE_MAX_BYTES: u64 = 256 << 20;

/// What `CUEFLOW_KERNEL_CACHE` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KernelCache {
    /// Unset: the default location (`backend/kernel_cache.rs`).
    Default,
    /// `off`, `0`, `none`, `false` or empty.
    Off,
    /// This directory.
    At(PathBuf),
}

/// `CUEFLOW_KERNEL_CACHE`, read at each call (set but empty is off).
pub(crate) fn kernel_cache() -> KernelCache {
    match std::env::var_os(KERNEL_CACHE.name) {
        None => KernelCache::Default,
        Some(v) if v.is_empty() || read::is_off_word(&v.to_string_lossy()) => KernelCache::Off,
        Some(v) => KernelCache::At(PathBuf::from(v)),
    }
}

/// `CUEFLOW_KERNEL_CACHE_MAX_BYTES`, read at each store: `None` for `unlimited` (also `none`,
/// `off`); unset, [`DEFAULT_KERNEL_CACHE_MAX_BYTES`]; anything else warns and is the default.
pub(crate) fn kernel_cache_max_bytes() -> Option<u64> {
    max_bytes_setting(
        &KERNEL_CACHE_MAX_BYTES,
        KERNEL_CACHE_MAX_BYTES.text().as_deref(),
        DEFAULT_KERNEL_CACHE_MAX_BYTES,
    )
}

/// The bound a size variable's value (`None`: unset) asks for: `None` for `unlimited`;
/// `default` when unset or bad (a bad value warns).
pub(crate) fn max_bytes_setting(var: &Var, value: Option<&str>, default: u64) -> Option<u64> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Some(default);
    };
    if ["unlimited", "none", "off"]
        .iter()
        .any(|w| v.eq_ignore_ascii_case(w))
    {
        return None;
    }
    Some(parse_bytes(v).unwrap_or_else(|| {
        let shown = if default % (1 << 20) == 0 {
            format!("{}M", default >> 20)
        } else {
            format!("{default} bytes")
        };
        var.warn(v, &format!("using {shown}"));
        default
    }))
}

// ---- The CUDA backend ----------------------------------------------------------------------

/// Notes on context decisions, linker logs and cache writes on standard error.
pub(crate) const CUDA_DEBUG: Var = Var::new("CUEFLOW_CUDA_DEBUG", SWITCH);
/// Every submission waits for its stream, so a fault names its kernel (RL5).
pub(crate) const LAUNCH_BLOCKING: Var = Var::new("CUEFLOW_LAUNCH_BLOCKING", SWITCH);
/// Write each graph the CUDA backend instantiates, as the driver holds it, in this directory.
pub(crate) const GRAPH_DOT: Var = Var::new("CUEFLOW_GRAPH_DOT", "a directory");
/// The NVRTC library to load instead of searching.
pub(crate) const NVRTC_LIB: Var = Var::new("CUEFLOW_NVRTC_LIB", "a library file name or path");
/// The NCCL library to load instead of searching.
pub(crate) const NCCL_LIB: Var = Var::new("CUEFLOW_NCCL_LIB", "a library file name or path");
/// The CUDA headers' directories, instead of searching.
pub(crate) const CUDA_INCLUDE: Var = Var::new("CUEFLOW_CUDA_INCLUDE", "directories separated by :");

/// Idle pinned memory a CUDA context keeps for reuse (RL3).
pub(crate) const PINNED_CACHE_MAX_BYTES: Var = Var::new(
    "CUEFLOW_PINNED_CACHE_MAX_BYTES",
    "a size in bytes (512K, 256M, 2G, …) or unlimited",
);

/// The bound when `CUEFLOW_PINNED_CACHE_MAX_BYTES` is unset or bad: 256 MiB.
pub(crate) const DEFAULT_PINNED_CACHE_MAX_BYTES: u64 = 256 << 20;

/// `CUEFLOW_PINNED_CACHE_MAX_BYTES`, read per CUDA context created: `u64::MAX` for
/// `unlimited`; unset or bad, [`DEFAULT_PINNED_CACHE_MAX_BYTES`].
pub(crate) fn pinned_cache_max_bytes() -> u64 {
    max_bytes_setting(
        &PINNED_CACHE_MAX_BYTES,
        PINNED_CACHE_MAX_BYTES.text().as_deref(),
        DEFAULT_PINNED_CACHE_MAX_BYTES,
    )
    .unwrap_or(u64::MAX)
}

/// `CUEFLOW_CUDA_DEBUG` (default off), read at each note.
pub(crate) fn cuda_debug() -> bool {
    CUDA_DEBUG.switch(false)
}

/// `CUEFLOW_LAUNCH_BLOCKING` (default off; as `CUDA_LAUNCH_BLOCKING=1`): every submission
/// waits for its stream, so a fault is caught at the launch that caused it and names exactly
/// that kernel (RL5). A debugging mode: it serializes the program with the host. Read once.
pub(crate) fn launch_blocking() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| LAUNCH_BLOCKING.switch(false));
    *ON
}

/// `CUEFLOW_GRAPH_DOT`, read at each CUDA graph instantiation.
pub(crate) fn graph_dot() -> Option<PathBuf> {
    GRAPH_DOT.path()
}

/// `CUEFLOW_NVRTC_LIB`, read when NVRTC is opened.
pub(crate) fn nvrtc_lib() -> Option<String> {
    NVRTC_LIB.text()
}

/// `CUEFLOW_NCCL_LIB`, read when NCCL is opened.
pub(crate) fn nccl_lib() -> Option<String> {
    NCCL_LIB.text()
}

/// `CUEFLOW_CUDA_INCLUDE` as given, read when headers are looked for.
pub(crate) fn cuda_include() -> Option<OsString> {
    CUDA_INCLUDE.os()
}

// ---- Launchers (read through `LaunchEnv::from_vars`, which tests feed) ---------------------

/// How long ranks wait for each other, in seconds.
pub(crate) const LAUNCH_TIMEOUT: Var =
    Var::new("CUEFLOW_LAUNCH_TIMEOUT", "a positive number of seconds");
/// The port of rank 0's store under every launcher.
pub(crate) const STORE_PORT: Var = Var::new("CUEFLOW_STORE_PORT", "a port number (1-65535)");

/// The timeout a `CUEFLOW_LAUNCH_TIMEOUT` value asks for; `None` when it is not a positive
/// number of seconds (the launcher code refuses it with a typed error).
pub(crate) fn launch_timeout_setting(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
}

/// Every variable of this module (the docs table lists the same, a test checks).
#[cfg(test)]
pub(crate) const ALL: &[&Var] = &[
    &DEVICE,
    &QUEUE_DEPTH,
    &SANITIZE,
    &TRACE,
    &AUTO_ORDER,
    &AUTO_GRAPH,
    &WAKE,
    &PANIC_OUTPUT,
    &KERNEL_TIMEOUT_MS,
    &HOST_ARENA,
    &HOST_ISOLATE,
    &HOST_COPY_ENGINES,
    &HOST_KERNELS,
    &HOST_CUDA_C_PATH,
    &HOST_CUDA_C_LOG,
    &HOST_CUDA_C_DUMP,
    &HOST_CUDA_C_RULES,
    &CACHE_DIR,
    &KERNEL_CACHE,
    &KERNEL_CACHE_MAX_BYTES,
    &PINNED_CACHE_MAX_BYTES,
    &CUDA_DEBUG,
    &LAUNCH_BLOCKING,
    &GRAPH_DOT,
    &NVRTC_LIB,
    &NCCL_LIB,
    &CUDA_INCLUDE,
    &LAUNCH_TIMEOUT,
    &STORE_PORT,
];

#[cfg(test)]
mod tests;
