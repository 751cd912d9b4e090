//! CUDA C on the host backend (SPEC HK1–HK3, KC1): a kernel given as CUDA C source runs on the
//! CPU with CUDA's execution model, compiled at run time by the machine's C++ compiler.
//!
//! # How
//! 1. [`compiler`] finds a C++ compiler (`CXX`, else `c++`, `g++`, `clang++`) and compiles the
//!    kernel's source, with its options mapped (defines, include directories, standard, fast
//!    math), into a shared object, against `prelude.h`: CUDA's qualifiers, built-in variables,
//!    vector types, barriers, warp operations, atomics, intrinsics, `printf`, `assert` and
//!    cooperative groups, written for the CPU. The arguments are `-O3 -fPIC -shared
//!    -fno-fast-math -ffp-contract=off`: no contraction and no fast math, so `+ - * /`, `sqrt`
//!    and `fmaf` round as on the GPU (HK2).
//! 2. cueflow appends, for the kernel's entry `E`, `CUEFLOW_ENTRY(sym, &E)`: the prelude turns
//!    it into `extern "C" int cueflow_run_<sym>(const cueflow_launch*, void** params)`, the
//!    parameter types deduced from the kernel's function pointer (no source parsing), and
//!    `cueflow_params_<sym>` giving their sizes, which are checked against the launch's
//!    arguments before anything is enqueued. For every `extern __shared__ T name[]` in the
//!    source it appends an alias of `name` to the per-thread dynamic shared memory area.
//! 3. [`cache`] keeps the object on disk (KC3); [`module`] opens it with `dlopen`.
//! 4. [`run_blocks`] runs the entry for a range of blocks of a compute worker, in the kernel
//!    worker process (or in this process, the fallback: [`launch`]): blocks of one launch run
//!    on several workers in parallel; the threads of a block run as fibers on the worker (see
//!    the prelude), so barriers and warp operations behave as on a GPU.
//!
//! # The entry ABI (shared with an out-of-process worker)
//! ```text
//! struct cueflow_launch { uint32_t grid[3], block[3]; uint32_t dyn_shared;
//!                         uint32_t block_begin, block_end; char* fault_msg;
//!                         uint32_t fault_msg_len; };
//! extern "C" int cueflow_run_<sym>(const cueflow_launch* l, void** params);
//! extern "C" unsigned cueflow_params_<sym>(unsigned* sizes, unsigned cap);
//! ```
//! `cueflow_run_` runs linear blocks `[block_begin, block_end)` (x fastest); `params[i]`
//! points to parameter `i`'s value, 16-byte aligned (a buffer is its 8-byte address); it
//! returns 0, or nonzero after writing a NUL-terminated message to `fault_msg`. `<sym>` is the
//! entry when that is a plain identifier, else `x` and 16 hex digits of the entry's XXH3-64.
//!
//! # Faults (HK3)
//! A failed `assert`, `__trap()`, divergent barriers, and a signal the kernel raises
//! (`SIGSEGV`/`SIGBUS` on a wild access to unmapped memory, `SIGFPE`, `SIGILL`) end the
//! launch with the kernel's sticky fault (KN2) naming it. Launches run in the device's kernel
//! worker process over the shared arena ([`launch`]; `isolate`), so a wild write cannot reach
//! the program's memory; they run in this process only as the fallback [`launch`] lists (the
//! arena off, `CUEFLOW_HOST_ISOLATE=0`, an argument in registered memory), where a wild write
//! into mapped memory cannot be caught.
//!
//! # Choice
//! A kernel with both a Rust closure and CUDA C runs its closure on the host backend (faster);
//! `CUEFLOW_HOST_KERNELS=c` makes it run the CUDA C (testing). A kernel with only CUDA C needs
//! a compiler: without one, its launch returns [`Error::Unavailable`] saying which compiler
//! was looked for.

mod cache;
mod compiler;
mod lanes;
mod launch;
pub(crate) mod module;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub(in crate::backend::host) use self::launch::{batchable, run_batch, run_blocks, Blame};
use self::module::Module;
use crate::backend::contract::kernel::{KernelArg, KernelInner, Launch};
use crate::backend::kernel_cache;
use crate::error::{Error, Result};
use crate::types::{CudaCode, HostPath};

/// The key under which a kernel keeps its host object among its loaded forms.
const HOST_C_SLOT: u64 = u64::MAX;

/// True when `CUEFLOW_HOST_KERNELS=c`: kernels with CUDA C run it even when they have a
/// closure.
fn force_c() -> bool {
    crate::config::host_kernels_c()
}

/// True when `CUEFLOW_HOST_CUDA_C_PATH=fibers`: every CUDA C kernel runs its threads as
/// fibers (for comparison and testing), not as the lanes of work-item loops.
fn force_fibers() -> bool {
    crate::config::host_cuda_c_fibers()
}

/// True when `CUEFLOW_HOST_CUDA_C_LOG` is set (not `0`): say which path each kernel takes.
fn log_paths() -> bool {
    crate::config::host_cuda_c_log()
}

/// Whether the host backend runs `k` from its CUDA C (else from its closure).
pub(crate) fn uses_c(k: &KernelInner) -> bool {
    let has_source = matches!(k.cuda, Some(CudaCode::Source { .. }));
    has_source && (k.host.is_none() || force_c())
}

/// The symbol suffix of `entry`.
fn symbol(entry: &str) -> String {
    if !entry.is_empty() && entry.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        entry.to_string()
    } else {
        format!("x{:016x}", kernel_cache::checksum(entry.as_bytes()))
    }
}

/// Names declared `extern __shared__ … name[]` in `text`.
fn dynamic_shared_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("extern") {
        let after = &rest[i + 6..];
        rest = after;
        let t = after.trim_start();
        let Some(decl) = t.strip_prefix("__shared__") else {
            continue;
        };
        let Some(end) = decl.find(['[', ';']) else {
            continue;
        };
        if decl.as_bytes()[end] != b'[' {
            continue;
        }
        let name: String = decl[..end]
            .trim_end()
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The address expression of `entry`.
fn entry_expr(entry: &str) -> String {
    if entry.starts_with('&') {
        entry.to_string()
    } else {
        format!("&{entry}")
    }
}

/// The text compiled for `entry`: the source, then the entry (`entry_code`, from
/// [`lanes::plan`]) and the dynamic shared aliases.
fn translation_unit(source: &str, entry_code: &str, headers: &[(String, String)]) -> String {
    let mut s = String::with_capacity(source.len() + entry_code.len() + 512);
    s.push_str(source);
    s.push_str("\n#line 1 \"<cueflow entry>\"\n");
    s.push_str(entry_code);
    let mut names = dynamic_shared_names(source);
    for (_, text) in headers {
        for n in dynamic_shared_names(text) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    for n in names {
        s.push_str(&format!(
            "asm(\".globl {n}\\n.type {n}, @tls_object\\n.set {n}, cueflow_dyn_shared_\\n\");\n"
        ));
    }
    s
}

/// A scratch directory of this process.
fn scratch() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "cueflow-hostc-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The directory holding the prelude's headers, written once per process.
fn prelude_dir(cache: Option<&Path>) -> std::result::Result<PathBuf, String> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut hasher = kernel_cache::KeyHasher::default();
        for (n, t) in compiler::HEADERS {
            hasher.str(n);
            hasher.str(t);
        }
        let h = hasher.finish();
        let base = cache.map_or_else(scratch, Path::to_path_buf);
        let dir = base.join(format!("include-{h:032x}"));
        for (name, text) in compiler::HEADERS {
            let p = dir.join(name);
            if std::fs::read_to_string(&p).is_ok_and(|t| t == *text) {
                continue;
            }
            let parent = p.parent().unwrap_or(&dir);
            std::fs::create_dir_all(parent)
                .and_then(|_| {
                    let tmp = parent.join(format!(".{}.tmp", std::process::id()));
                    std::fs::write(&tmp, text)?;
                    std::fs::rename(&tmp, &p)
                })
                .map_err(|e| format!("writing the prelude to {}: {e}", p.display()))?;
        }
        Ok(dir)
    })
    .clone()
}

/// Compile (or find in the cache) and open `k`'s host object.
fn build(k: &KernelInner) -> Result<Module> {
    let Some(CudaCode::Source {
        code,
        entry,
        options,
    }) = &k.cuda
    else {
        return Err(Error::Unsupported(format!(
            "kernel `{}` has no CUDA C source for the host backend",
            k.name
        )));
    };
    let c = crate::backend::host::cxx::compiler()
        .map_err(|why| Error::Unavailable(format!("kernel `{}` has only CUDA C: {why}", k.name)))?;
    let sym = symbol(entry);
    let fail = |log: String| Error::Compile {
        kernel: k.name.clone(),
        log,
    };
    let cache_dir = options.disk_cache.then(cache::dir).flatten();
    // The path (lanes or fibers) is part of the key: the generator's version and the switch.
    let tag = if force_fibers() {
        "fibers".to_string()
    } else {
        lanes::tag()
    };
    let key = cache::key(
        c,
        &format!("{code}\n// cueflow host path: {tag}"),
        entry,
        options,
    );
    let cached = |dir: &Path, key| {
        let c = cache::lookup(dir, key)?;
        Module::open(&c.path, &sym).ok().map(|m| m.pinned(c.pin))
    };
    if let (Some(dir), Some(key)) = (&cache_dir, key) {
        if let Some(m) = cached(dir, key) {
            return Ok(m);
        }
    }
    let include = prelude_dir(cache_dir.as_deref()).map_err(fail)?;
    let work = scratch();
    let text_dir = work.join("headers");
    let r = (|| {
        std::fs::create_dir_all(&text_dir).map_err(|e| format!("{}: {e}", work.display()))?;
        for (name, text) in &options.headers {
            let p = text_dir.join(name);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            std::fs::write(&p, text).map_err(|e| e.to_string())?;
        }
        let src = work.join("kernel.cu");
        let mut text = String::new();
        // Units linked with the kernel (KC1 `link_source`, `nvcc -rdc=true`): appended to the
        // kernel's translation unit, each under its own name, so their device functions and
        // variables are defined in the one object (the prelude's own definitions exist once).
        // Unlike separate compilation, file-scope `static` names of two units must differ.
        for (name, unit) in &options.link {
            text.push_str(&format!("\n#line 1 \"{name}\"\n{unit}\n"));
        }
        let body = if text.is_empty() {
            std::borrow::Cow::Borrowed(code.as_ref())
        } else {
            std::borrow::Cow::Owned(format!("{code}\n{text}"))
        };
        let expr = entry_expr(entry);
        let plan = if force_fibers() {
            lanes::fibers(&sym, &expr, "forced by CUEFLOW_HOST_CUDA_C_PATH=fibers")
        } else {
            let pre_src = work.join("kernel_pre.cu");
            std::fs::write(&pre_src, body.as_bytes()).map_err(|e| e.to_string())?;
            match compiler::preprocess(c, options, &pre_src, &include, &text_dir) {
                Ok(pre) => lanes::plan(&pre, entry, &sym, &expr),
                Err(why) => lanes::fibers(&sym, &expr, &why),
            }
        };
        let unit = translation_unit(&body, &plan.code, &options.headers);
        // `CUEFLOW_HOST_CUDA_C_DUMP=<dir>`: keep each compiled unit (what the lane compiler
        // wrote) as `<dir>/<symbol>.cu`, for reading and profiling.
        if let Some(d) = crate::config::host_cuda_c_dump() {
            let _ = std::fs::create_dir_all(&d);
            let _ = std::fs::write(Path::new(&d).join(format!("{sym}.cu")), &unit);
        }
        std::fs::write(&src, unit).map_err(|e| e.to_string())?;
        let out = work.join("kernel.so");
        compiler::compile(c, options, &src, &include, &text_dir, &out)?;
        // The stored object, pinned (eviction may take it before it is pinned: then the
        // object as built serves).
        if let (Some(dir), Some(key)) = (&cache_dir, key) {
            if cache::store(dir, key, &out).is_ok() {
                if let Some(m) = cached(dir, key) {
                    return Ok(m);
                }
            }
        }
        Module::open(&out, &sym)
    })();
    match &r {
        // An object that is not in the cache stays where it was built, for the life of the
        // process: the kernel worker process opens it by path at each launch. The rest goes.
        Ok(m) if m.path.starts_with(&work) => {
            let _ = std::fs::remove_dir_all(&text_dir);
            let _ = std::fs::remove_file(work.join("kernel.cu"));
            let _ = std::fs::remove_file(work.join("kernel_pre.cu"));
        }
        _ => {
            let _ = std::fs::remove_dir_all(&work);
        }
    }
    r.map_err(fail)
}

/// `k`'s host object, built the first time.
pub(crate) fn load(k: &KernelInner) -> Result<Arc<Module>> {
    k.loaded_for(HOST_C_SLOT, || {
        let m = build(k)?;
        if log_paths() {
            eprintln!(
                "cueflow: CUDA C kernel `{}` on the host backend: {}",
                k.name, m.host_path
            );
        }
        Ok(m)
    })
}

/// `k`'s module if [`load`] made it already (no compiling, no waiting).
pub(crate) fn loaded_now(k: &KernelInner) -> Option<Arc<Module>> {
    k.loaded_now(HOST_C_SLOT)
}

/// How the host backend runs `k`'s threads: as lanes of work-item loops, or as fibers (with
/// the reason); compiles the kernel if it was not yet.
pub(crate) fn host_path(k: &KernelInner) -> Result<HostPath> {
    Ok(load(k)?.host_path.clone())
}

/// Check a launch that runs CUDA C on the host: the object exists, the arguments match the
/// kernel's parameters (ER3), the grid fits the entry ABI.
pub(crate) fn prepare(l: &Launch) -> Result<()> {
    let m = load(&l.kernel)?;
    let bad = |why: String| Error::InvalidArgument {
        kernel: l.kernel.name.clone(),
        why,
    };
    if m.params.len() != l.args.len() {
        return Err(bad(format!(
            "the kernel takes {} parameters but {} arguments were given",
            m.params.len(),
            l.args.len()
        )));
    }
    for (i, (a, &p)) in l.args.iter().zip(&m.params).enumerate() {
        let (size, what) = match a {
            KernelArg::Buffer { .. } => (8, "a buffer (an 8-byte device address)".to_string()),
            KernelArg::Scalar { size, ty_name, .. } => {
                (*size, format!("a {size}-byte scalar ({ty_name})"))
            }
        };
        if size != p as usize {
            return Err(bad(format!(
                "argument {i} is {what} but parameter {i} is {p} bytes"
            )));
        }
    }
    if l.blocks() > u32::MAX as u64 {
        return Err(Error::InvalidLaunch {
            kernel: l.kernel.name.clone(),
            why: format!(
                "{} blocks; CUDA C on the host backend runs at most {} per launch",
                l.blocks(),
                u32::MAX
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_shared_names_are_found() {
        let src = "extern __shared__ float s[];\n void f() { extern  __shared__ __align__(16) \
                   unsigned char smem []; extern \"C\" int g; extern __shared__ int x; }";
        assert_eq!(dynamic_shared_names(src), vec!["s", "smem"]);
    }

    #[test]
    fn symbols_of_name_expressions_are_identifiers() {
        assert_eq!(symbol("cf_fill_f32"), "cf_fill_f32");
        let s = symbol("scale<float>");
        assert!(s.starts_with('x') && s.len() == 17);
    }
}
