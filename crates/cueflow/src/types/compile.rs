//! How a kernel's CUDA code is given and compiled: CUDA C source or PTX ([`CudaCode`]) and the
//! options, defines, include paths and headers of a run-time compilation ([`CompileOptions`],
//! KC1). Both backends read them: NVRTC on CUDA, the machine's C++ compiler for CUDA C on the
//! host backend (HK1).

use std::borrow::Cow;

/// CUDA code for a kernel.
#[derive(Clone, Debug)]
pub enum CudaCode {
    /// CUDA C source compiled at run time by NVRTC with `options` (KC1). `entry` is the
    /// kernel's name: a function's plain name — `extern "C"` or a C++ kernel's, as CUDA
    /// programs name it (`__global__ void k(..)`, entry `"k"`) — or a C++ *name expression* —
    /// `scale<float>`, `ns::kernel`, `&f` — which NVRTC instantiates and resolves to its
    /// mangled name (`nvrtcAddNameExpression`), so templated kernels launch by expression.
    Source {
        /// The source text.
        code: Cow<'static, str>,
        /// Kernel entry point or name expression.
        entry: String,
        /// Compiler options.
        options: CompileOptions,
    },
    /// PTX text.
    Ptx {
        /// The PTX module.
        code: Cow<'static, str>,
        /// Kernel entry point.
        entry: String,
    },
    /// A compiled cubin image.
    Cubin {
        /// The image bytes.
        image: Cow<'static, [u8]>,
        /// Kernel entry point.
        entry: String,
    },
}

impl CudaCode {
    /// The entry point (or name expression).
    pub(crate) fn entry(&self) -> &str {
        match self {
            CudaCode::Source { entry, .. }
            | CudaCode::Ptx { entry, .. }
            | CudaCode::Cubin { entry, .. } => entry,
        }
    }
}

/// True when `entry` is a C++ name expression rather than a plain (`extern "C"`) name.
pub(crate) fn is_name_expression(entry: &str) -> bool {
    !entry.is_empty() && !entry.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The options NVRTC compiles CUDA C with (KC1), as `nvcc` takes them. Each setter returns
/// the options, so they chain:
///
/// ```
/// use cueflow::CompileOptions;
/// let opts = CompileOptions::new()
///     .define("BLOCK", "256")
///     .define_flag("USE_FAST_PATH")
///     .include_dir("kernels/include")
///     .std("c++17")
///     .fast_math()
///     .line_info()
///     .max_registers(64);
/// assert!(opts.nvrtc_args().contains(&"-DBLOCK=256".to_string()));
/// ```
///
/// The CUDA toolkit's own headers (`cuda_fp16.h`, `cuda_bf16.h`, `cooperative_groups.h`,
/// `cuda/std/*`) are found without being named: cueflow adds the include directory of the
/// installed toolkit (`CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda*`) or of NVRTC's own pip
/// package, next to the `libnvrtc` it loaded; `CUEFLOW_CUDA_INCLUDE` (directories separated by
/// `:`) comes first when set. A compile error says where it looked.
///
/// Options are checked before anything is compiled or enqueued: a malformed define, an
/// unknown language standard, a register count outside 1..=255 or an include directory that
/// does not exist is refused with [`Error::InvalidOptions`](crate::Error::InvalidOptions), on
/// every backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub(crate) defines: Vec<(String, Option<String>)>,
    pub(crate) include_dirs: Vec<std::path::PathBuf>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) std: Option<String>,
    pub(crate) fast_math: bool,
    pub(crate) line_info: bool,
    pub(crate) max_registers: Option<u32>,
    pub(crate) relocatable: bool,
    /// Other translation units linked with the source (relocatable device code): (name, code).
    pub(crate) link: Vec<(String, String)>,
    pub(crate) extra: Vec<String>,
    pub(crate) disk_cache: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            defines: Vec::new(),
            include_dirs: Vec::new(),
            headers: Vec::new(),
            std: None,
            fast_math: false,
            line_info: false,
            max_registers: None,
            relocatable: false,
            link: Vec::new(),
            extra: Vec::new(),
            disk_cache: true,
        }
    }
}

/// Language standards NVRTC accepts for `-std=`.
const STANDARDS: &[&str] = &["c++03", "c++11", "c++14", "c++17", "c++20"];

impl CompileOptions {
    /// No options: NVRTC's defaults (its newest C++ standard, no fast math).
    pub fn new() -> Self {
        Self::default()
    }

    /// `-DNAME=VALUE`.
    pub fn define(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.defines.push((name.into(), Some(value.into())));
        self
    }

    /// `-DNAME` (defined as 1).
    pub fn define_flag(mut self, name: impl Into<String>) -> Self {
        self.defines.push((name.into(), None));
        self
    }

    /// `-I DIR`: searched in the order given, before the toolkit's headers. The content of the
    /// headers found here is part of the kernel cache's key (KC3).
    pub fn include_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }

    /// A header given as text (`#include "name"` finds it), as `nvrtcCreateProgram` takes
    /// headers; found before the include directories.
    pub fn header(mut self, name: impl Into<String>, content: impl Into<String>) -> Self {
        self.headers.push((name.into(), content.into()));
        self
    }

    /// `-std=c++17` and the like (`c++03`, `c++11`, `c++14`, `c++17`, `c++20`).
    pub fn std(mut self, standard: impl Into<String>) -> Self {
        self.std = Some(standard.into());
        self
    }

    /// `--use_fast_math`.
    pub fn fast_math(mut self) -> Self {
        self.fast_math = true;
        self
    }

    /// `-lineinfo`: line information for profilers and `compute-sanitizer`.
    pub fn line_info(mut self) -> Self {
        self.line_info = true;
        self
    }

    /// `--maxrregcount=N` (1..=255).
    pub fn max_registers(mut self, n: u32) -> Self {
        self.max_registers = Some(n);
        self
    }

    /// `-rdc=true`: relocatable device code. On CUDA the source (and every unit given with
    /// [`link_source`](Self::link_source)) is compiled to relocatable PTX and linked by the
    /// driver's linker (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`) into one cubin, as
    /// `nvcc -rdc=true` links separately compiled files. A device function declared but
    /// defined in no unit is an [`Error::Compile`](crate::Error::Compile) carrying the
    /// linker's log, at [`Kernel::prepare`](crate::Kernel::prepare) or the first launch.
    pub fn relocatable(mut self) -> Self {
        self.relocatable = true;
        self
    }

    /// Another CUDA C translation unit, named `name` in logs, compiled with the same options
    /// and linked with the kernel's source (relocatable device code; implies
    /// [`relocatable`](Self::relocatable)): the source may call `extern __device__` functions
    /// and use `extern __device__` variables that such a unit defines. Its text and the
    /// headers it includes are part of the disk cache's key (KC3). CUDA backend only: the host
    /// backend runs a kernel's Rust implementation.
    ///
    /// ```
    /// # use cueflow::CompileOptions;
    /// let opts = CompileOptions::new().link_source(
    ///     "helpers.cu",
    ///     "__device__ float twice(float x) { return 2.0f * x; }",
    /// );
    /// assert!(opts.nvrtc_args().contains(&"-rdc=true".to_string()));
    /// ```
    pub fn link_source(mut self, name: impl Into<String>, code: impl Into<String>) -> Self {
        self.link.push((name.into(), code.into()));
        self
    }

    /// Whether the code is relocatable and goes through the driver's linker.
    pub(crate) fn links(&self) -> bool {
        self.relocatable || !self.link.is_empty()
    }

    /// Any other NVRTC option, verbatim (must start with `-`).
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.extra.push(option.into());
        self
    }

    /// Keep this kernel out of the disk cache (KC3): compiled in every process. The cache as a
    /// whole is turned off with `CUEFLOW_KERNEL_CACHE=off`.
    pub fn no_disk_cache(mut self) -> Self {
        self.disk_cache = false;
        self
    }

    /// The options as NVRTC arguments (without the architecture and toolkit include
    /// directories, which the CUDA backend adds).
    pub fn nvrtc_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (name, value) in &self.defines {
            v.push(match value {
                Some(value) => format!("-D{name}={value}"),
                None => format!("-D{name}"),
            });
        }
        for dir in &self.include_dirs {
            v.push(format!("-I{}", dir.display()));
        }
        if let Some(s) = &self.std {
            v.push(format!("-std={s}"));
        }
        if self.fast_math {
            v.push("--use_fast_math".into());
        }
        if self.line_info {
            v.push("-lineinfo".into());
        }
        if let Some(n) = self.max_registers {
            v.push(format!("--maxrregcount={n}"));
        }
        if self.links() {
            v.push("-rdc=true".into());
        }
        v.extend(self.extra.iter().cloned());
        v
    }

    /// Why NVRTC could not take these options, if it could not (KC1).
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        let ident = |s: &str| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        for (name, value) in &self.defines {
            if !ident(name) {
                return Err(format!("define `{name}` is not a macro name"));
            }
            if value.as_deref().is_some_and(|v| v.contains(['\0', '\n'])) {
                return Err(format!("define `{name}` has a NUL or newline in its value"));
            }
        }
        for dir in &self.include_dirs {
            if !dir.is_dir() {
                return Err(format!(
                    "include directory {} does not exist (or is not a directory)",
                    dir.display()
                ));
            }
        }
        for (name, _) in &self.headers {
            if name.is_empty() || name.contains('\0') {
                return Err(format!("header name {name:?} is empty or has a NUL"));
            }
        }
        for (name, code) in &self.link {
            if name.is_empty() || name.contains('\0') || code.contains('\0') {
                return Err(format!(
                    "linked unit {name:?}: the name is empty or the name or code has a NUL"
                ));
            }
        }
        if let Some(s) = &self.std {
            if !STANDARDS.contains(&s.as_str()) {
                return Err(format!(
                    "-std={s} is not a standard NVRTC knows (one of {STANDARDS:?})"
                ));
            }
        }
        if let Some(n) = self.max_registers {
            if !(1..=255).contains(&n) {
                return Err(format!("--maxrregcount={n} is outside 1..=255"));
            }
        }
        for o in &self.extra {
            if !o.starts_with('-') || o.contains('\0') {
                return Err(format!("option {o:?} does not start with `-` or has a NUL"));
            }
        }
        Ok(())
    }
}
