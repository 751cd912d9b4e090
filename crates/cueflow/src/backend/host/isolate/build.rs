//! Building the worker executable (W1): the machine's C++ compiler (`backend/host/cxx.rs`)
//! compiles `worker.cpp` once per source and compiler (its path, arguments and version) into a
//! cache directory; later processes reuse the binary.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::backend::host::cxx::compiler;
use crate::backend::kernel_cache::{self, KeyHasher};

/// The worker's source, compiled at run time.
const SOURCE: &str = include_str!("worker.cpp");

/// Where compiled artefacts are cached: `CUEFLOW_CACHE_DIR`, else `$XDG_CACHE_HOME/cueflow`,
/// else `~/.cache/cueflow`, else the temporary directory.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(d) = crate::config::cache_dir() {
        return d;
    }
    kernel_cache::user_cache_dir().unwrap_or_else(|| std::env::temp_dir().join("cueflow-cache"))
}

/// The cache key of `parts` (the kernel caches' hash: stable across processes and builds).
pub(crate) fn key(parts: &[&[u8]]) -> u128 {
    let mut h = KeyHasher::default();
    parts.iter().for_each(|p| h.bytes(p));
    h.finish()
}

/// The worker executable, built on first use in this process (or found in the cache).
pub(crate) fn worker_binary() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(build).clone()
}

fn build() -> Result<PathBuf, String> {
    let cc = compiler()?;
    let program = cc.program.to_string_lossy().into_owned();
    let key = key(&[
        SOURCE.as_bytes(),
        program.as_bytes(),
        cc.pre_args.join(" ").as_bytes(),
        cc.version.as_bytes(),
    ]);
    let dir = cache_dir().join("workers");
    let bin = dir.join(format!("cueflow-worker-{key:032x}"));
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    // Unique names so concurrent processes never see a half-written file; rename is atomic.
    let tag = format!("{}-{key:032x}", std::process::id());
    let src = dir.join(format!("worker-{tag}.cpp"));
    let tmp = dir.join(format!("worker-{tag}.tmp"));
    std::fs::write(&src, SOURCE).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let out = Command::new(&cc.program)
        .args(&cc.pre_args)
        .args(["-O2", "-pthread", "-o"])
        .arg(&tmp)
        .arg(&src)
        .arg("-ldl")
        .output()
        .map_err(|e| format!("running the C++ compiler {program}: {e}"));
    let _ = std::fs::remove_file(&src);
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "the C++ compiler {program} failed to build the kernel worker: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::rename(&tmp, &bin).map_err(|e| format!("caching {}: {e}", bin.display()))?;
    Ok(bin)
}
