//! Compiling CUDA C for the CPU against the prelude, with the machine's C++ compiler
//! (`backend/host/cxx.rs`), whose identity (`--version`'s first line and the path) is part of
//! the cache key.

use std::path::Path;
use std::process::Command;

use crate::backend::host::cxx::Compiler;
use crate::types::CompileOptions;

/// The prelude and the headers it answers for (`#include <cooperative_groups.h>` …).
pub(super) const PRELUDE: &str = include_str!("prelude.h");
/// Barriers, warp operations, atomics, arithmetic intrinsics (the prelude's second part).
pub(super) const INTRINSICS: &str = include_str!("cueflow_intrinsics.h");
/// Cooperative groups over the prelude.
pub(super) const CG: &str = include_str!("cueflow_cg.h");
/// The runtime of kernels compiled to work-item loops.
pub(super) const LANES: &str = include_str!("cueflow_lanes.h");
/// Half and bfloat16 types.
pub(super) const FP16: &str = include_str!("cueflow_fp16.h");

/// `cuda/std/X`: the C++ library's `<X>`, seen from `namespace cuda::std`.
macro_rules! cuda_std {
    ($h:literal) => {
        concat!(
            "#include <",
            $h,
            ">\nnamespace cuda { namespace std { using namespace ::std; } }\n"
        )
    };
}

/// Headers written beside the prelude: (name, text).
pub(super) const HEADERS: &[(&str, &str)] = &[
    ("cueflow_prelude.h", PRELUDE),
    ("cueflow_cg.h", CG),
    ("cueflow_intrinsics.h", INTRINSICS),
    ("cueflow_lanes.h", LANES),
    ("cooperative_groups.h", "#include \"cueflow_cg.h\"\n"),
    (
        "cooperative_groups/reduce.h",
        "#include \"../cueflow_cg.h\"\n",
    ),
    (
        "cuda_runtime.h",
        "// cueflow host prelude: nothing to add\n",
    ),
    (
        "cuda_runtime_api.h",
        "// cueflow host prelude: nothing to add\n",
    ),
    (
        "device_launch_parameters.h",
        "// cueflow host prelude: nothing to add\n",
    ),
    ("cuda.h", "// cueflow host prelude: nothing to add\n"),
    ("cueflow_fp16.h", FP16),
    ("cuda_fp16.h", "#include \"cueflow_fp16.h\"\n"),
    ("cuda_bf16.h", "#include \"cueflow_fp16.h\"\n"),
    ("cuda/std/cstdint", cuda_std!("cstdint")),
    ("cuda/std/cstddef", cuda_std!("cstddef")),
    ("cuda/std/climits", cuda_std!("climits")),
    ("cuda/std/type_traits", cuda_std!("type_traits")),
    ("cuda/std/limits", cuda_std!("limits")),
    ("cuda/std/utility", cuda_std!("utility")),
    ("cuda/std/cmath", cuda_std!("cmath")),
];

/// Instruction-set flags for this CPU (part of the key: an object built with them runs only
/// where they are available). They change no result bits: FMA is used only where the source
/// asks for a fused multiply-add (`-ffp-contract=off`).
pub(super) fn cpu_flags() -> Vec<String> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            v.push("-mavx2".to_string());
            v.push("-mfma".to_string());
        }
    }
    v
}

/// The compiler arguments for `options` (KC1 mapped to the C++ compiler): defines, include
/// directories, standard (C++14 at least: the prelude needs it), fast math.
pub(super) fn option_args(options: &CompileOptions) -> Vec<String> {
    let mut v = Vec::new();
    let std = match options.std.as_deref() {
        Some("c++17") => "c++17",
        Some("c++20") => "c++20",
        // The prelude needs C++14; older standards compile as C++14.
        Some(_) => "c++14",
        None => "c++17",
    };
    v.push(format!("-std={std}"));
    if options.fast_math {
        v.push("-ffast-math".into());
    } else {
        v.push("-fno-fast-math".into());
    }
    for (name, value) in &options.defines {
        v.push(match value {
            Some(value) => format!("-D{name}={value}"),
            None => format!("-D{name}"),
        });
    }
    for dir in &options.include_dirs {
        v.push(format!("-I{}", dir.display()));
    }
    v
}

/// The fixed arguments: optimized, position-independent shared object, IEEE arithmetic with
/// no contraction, no exceptions, no fortified longjmp (faults jump out of fiber stacks), and
/// references to the object's own symbols bound inside it (its `__assert_fail` wins).
pub(super) const BASE_ARGS: &[&str] = &[
    "-x",
    "c++",
    "-O3",
    "-fPIC",
    "-shared",
    "-ffp-contract=off",
    "-fno-exceptions",
    "-fno-strict-overflow",
    "-U_FORTIFY_SOURCE",
    "-Wl,-Bsymbolic",
    "-Wno-unused-function",
    "-Wno-attributes",
];

/// Compile `source_path` to `out` with the prelude in `prelude_dir`, the text headers in
/// `text_dir`. `Err` carries the command and the compiler's log.
pub(super) fn compile(
    c: &Compiler,
    options: &CompileOptions,
    source_path: &Path,
    prelude_dir: &Path,
    text_dir: &Path,
    out: &Path,
) -> Result<(), String> {
    let mut cmd = Command::new(&c.program);
    cmd.args(&c.pre_args).args(BASE_ARGS).args(cpu_flags());
    cmd.arg(format!("-I{}", text_dir.display()));
    cmd.args(option_args(options));
    cmd.arg(format!("-I{}", prelude_dir.display()));
    cmd.arg("-include")
        .arg(prelude_dir.join("cueflow_prelude.h"));
    cmd.arg(source_path).arg("-o").arg(out);
    let shown = format!("{cmd:?}");
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{}\n{}{}(command: {shown})",
            o.status,
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        )),
        Err(e) => Err(format!("could not run {}: {e}", c.program.display())),
    }
}

/// The preprocessor's output for `source_path` (with line markers), as the compile of it would
/// see the user's code: its options, the text headers and the prelude's headers, and the macros
/// the prelude defines for `#if` (the prelude itself is not included, so `__global__`,
/// `__shared__`, `threadIdx`… stay as written for the lane compiler).
pub(super) fn preprocess(
    c: &Compiler,
    options: &CompileOptions,
    source_path: &Path,
    prelude_dir: &Path,
    text_dir: &Path,
) -> Result<String, String> {
    let mut cmd = Command::new(&c.program);
    cmd.args(&c.pre_args).args(["-x", "c++", "-E"]);
    cmd.arg(format!("-I{}", text_dir.display()));
    cmd.args(option_args(options));
    cmd.arg(format!("-I{}", prelude_dir.display()));
    cmd.args([
        "-D__CUEFLOW_HOST__=1",
        "-D__CUDACC__=1",
        "-D__CUDA_ARCH_HOST__=1",
    ]);
    cmd.arg(source_path);
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!(
            "the preprocessor failed: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
        )),
        Err(e) => Err(format!("could not run the preprocessor: {e}")),
    }
}
