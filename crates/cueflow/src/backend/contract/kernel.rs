//! Kernels as a backend receives them: what a kernel is made of ([`KernelInner`]: a host
//! implementation and CUDA code), a launch and its validated arguments ([`Launch`]), grid
//! shapes ([`Dim3`]), and what a host kernel sees of one block ([`BlockCtx`], [`BlockArgs`];
//! the host backend runs a launch once per block, see `api::kernel` for the model's rules).

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;

use bytemuck::Pod;
use parking_lot::Mutex;

use super::memory::{Access, MemRef};
use crate::error::Result;

/// A host kernel: called once per block.
pub type HostKernelFn = Arc<dyn Fn(&BlockCtx, &BlockArgs) + Send + Sync>;

/// CUDA code for a kernel.
#[derive(Clone, Debug)]
pub enum CudaCode {
    /// CUDA C source compiled at run time by NVRTC with `options` (KC1). `entry` is the
    /// kernel's name: an `extern "C"` function's plain name, or a C++ *name expression* —
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

pub(crate) struct KernelInner {
    pub name: String,
    pub host: Option<HostKernelFn>,
    pub cuda: Option<CudaCode>,
    /// Backend-loaded forms (a CUDA function handle), by device id.
    pub loaded: Mutex<Vec<(u64, Arc<dyn Any + Send + Sync>)>>,
}

impl KernelInner {
    /// The loaded form for `device_id`, loading it with `load` the first time.
    pub(crate) fn loaded_for<T: Any + Send + Sync>(
        &self,
        device_id: u64,
        load: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut l = self.loaded.lock();
        if let Some((_, v)) = l.iter().find(|(d, _)| *d == device_id) {
            if let Ok(v) = v.clone().downcast::<T>() {
                return Ok(v);
            }
        }
        let v = Arc::new(load()?);
        l.push((device_id, v.clone()));
        Ok(v)
    }
}

/// How the blocks of a host closure share a written buffer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Block `b` owns elements `b * threads .. (b + 1) * threads` ([`BlockArgs::tile_mut`]).
    Tile,
    /// Block `b` owns elements `b * k .. (b + 1) * k` ([`BlockArgs::block_mut`]).
    PerBlock(u64),
    /// Every block may write any element; the host backend runs the launch's blocks one after
    /// another ([`BlockArgs::whole_mut`]).
    Whole,
}

/// One kernel argument as core validated it.
#[derive(Clone, Debug)]
pub(crate) enum KernelArg {
    Buffer {
        mem: MemRef,
        access: Access,
        elem: TypeId,
        elem_name: &'static str,
        /// How host closures' blocks share it (written arguments).
        split: Split,
    },
    /// A value passed by copy (KC4): its bytes, any size up to the parameter limit.
    Scalar {
        bytes: smallvec::SmallVec<[u8; 16]>,
        size: usize,
        ty: TypeId,
        ty_name: &'static str,
    },
}

/// A kernel launch.
#[derive(Clone)]
pub(crate) struct Launch {
    pub kernel: Arc<KernelInner>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub args: Arc<[KernelArg]>,
}

impl Launch {
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| d as u64).product()
    }
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| d as u64).product()
    }
    /// True when an argument is a whole-buffer write: the host backend runs the blocks one
    /// after another.
    pub fn serial(&self) -> bool {
        self.args.iter().any(|a| {
            matches!(
                a,
                KernelArg::Buffer {
                    split: Split::Whole,
                    ..
                }
            )
        })
    }
}

/// Grid or block dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

impl Dim3 {
    pub(crate) fn as_array(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Self {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Self {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Dim3 { x, y, z }
    }
}

/// Where a host kernel's block sits in the grid.
#[derive(Clone, Debug)]
pub struct BlockCtx {
    /// Block index.
    pub block_idx: Dim3,
    /// Grid dimensions.
    pub grid_dim: Dim3,
    /// Block dimensions.
    pub block_dim: Dim3,
    /// Linear block index (x fastest).
    pub linear_block: u64,
    /// Threads in a block.
    pub threads: u64,
    /// Dynamic shared memory bytes requested at launch.
    pub shared_bytes: u32,
}

impl BlockCtx {
    /// Global linear thread indices of this block's threads (the block's tile).
    pub fn thread_range(&self) -> Range<u64> {
        let lo = self.linear_block * self.threads;
        lo..lo + self.threads
    }
}

/// A host kernel's view of its arguments, for one block.
pub struct BlockArgs<'a> {
    launch: &'a Launch,
    tile: Range<u64>,
    /// Written-buffer tiles already handed out in this block (bit per argument).
    taken: Cell<u64>,
}

impl<'a> BlockArgs<'a> {
    /// The arguments of `launch` for the block whose threads are `tile` (global linear thread
    /// indices): the host backend's way into a block.
    pub(crate) fn new(launch: &'a Launch, tile: Range<u64>) -> Self {
        BlockArgs {
            launch,
            tile,
            taken: Cell::new(0),
        }
    }

    fn arg(&self, i: usize) -> &'a KernelArg {
        self.launch.args.get(i).unwrap_or_else(|| {
            panic!(
                "kernel `{}` asked for argument {i} of {}",
                self.launch.kernel.name,
                self.launch.args.len()
            )
        })
    }

    fn buffer<T: Pod>(&self, i: usize) -> (&'a MemRef, Access) {
        let (mem, access, _) = self.split_buffer::<T>(i);
        (mem, access)
    }

    fn split_buffer<T: Pod>(&self, i: usize) -> (&'a MemRef, Access, Split) {
        match self.arg(i) {
            KernelArg::Buffer {
                mem,
                access,
                elem,
                elem_name,
                split,
            } => {
                assert!(
                    *elem == TypeId::of::<T>(),
                    "argument {i} holds {elem_name}, not {}",
                    std::any::type_name::<T>()
                );
                (mem, *access, *split)
            }
            KernelArg::Scalar { .. } => panic!("argument {i} is a scalar, not a buffer"),
        }
    }

    /// The first written (or atomic) argument whose bytes overlap argument `i`'s.
    fn written_alias(&self, i: usize, mem: &MemRef) -> Option<usize> {
        self.launch
            .args
            .iter()
            .enumerate()
            .find_map(|(j, a)| match a {
                KernelArg::Buffer {
                    mem: other, access, ..
                } if j != i && *access != Access::Read && mem.overlaps(other) => Some(j),
                _ => None,
            })
    }

    /// A buffer argument the kernel reads, whole. Panics (a fault of the kernel, KN2) when a
    /// written argument of the launch overlaps it: other blocks are writing those bytes; read
    /// them through [`in_place`](Self::in_place).
    pub fn input<T: Pod>(&self, i: usize) -> &'a [T] {
        let (mem, access) = self.buffer::<T>(i);
        assert!(
            access == Access::Read,
            "argument {i} is not read-only ({access:?}); use tile_mut or atomics_u32"
        );
        if let Some(j) = self.written_alias(i, mem) {
            panic!(
                "argument {i} overlaps argument {j}, which the kernel writes: read it through \
                 BlockArgs::in_place({i}, {j})"
            );
        }
        if std::mem::size_of::<T>() == 0 {
            return &[];
        }
        // SAFETY: the op holds the allocation (MM2); core checked the range is inside it, and
        // no written argument of this launch overlaps it (checked just above), so nothing in
        // this launch writes these bytes. Pod: any bytes are a valid T; allocations are
        // aligned to at least 256 bytes (CUDA's guarantee) and offsets are whole elements.
        unsafe {
            std::slice::from_raw_parts(
                mem.alloc.host_ptr().add(mem.offset) as *const T,
                mem.len / std::mem::size_of::<T>(),
            )
        }
    }

    /// The written argument whose bytes overlap argument `i`'s, if any (KC4): a host kernel
    /// that allows in-place use reads such an argument through [`in_place`](Self::in_place).
    pub fn aliased_by(&self, i: usize) -> Option<usize> {
        match self.arg(i) {
            KernelArg::Buffer { mem, .. } => self.written_alias(i, mem),
            KernelArg::Scalar { .. } => None,
        }
    }

    /// An in-place kernel's view (KC4): argument `read` and the written argument `write` name
    /// the same bytes (CUDA's `in` and `out` pointers to one buffer); this block's tile of
    /// `write`, which holds what `read` had before the block wrote it. Panics (a kernel fault)
    /// unless both name exactly the same bytes.
    pub fn in_place<T: Pod>(&self, read: usize, write: usize) -> &'a mut [T] {
        let (r, ra) = self.buffer::<T>(read);
        let (w, _) = self.buffer::<T>(write);
        assert!(
            ra == Access::Read && Arc::ptr_eq(&r.alloc, &w.alloc) && r.range() == w.range(),
            "in_place({read}, {write}): argument {read} must be read and name exactly the bytes \
             of argument {write}"
        );
        self.tile_mut(write)
    }

    /// Set the condition that argument `i` names ([`KernelArgs::condition`]) to `value`, as
    /// `cudaGraphSetConditional` does from CUDA C (GR9). Panics (a kernel fault) when
    /// argument `i` names no live condition.
    ///
    /// [`KernelArgs::condition`]: crate::KernelArgs::condition
    pub fn set_condition(&self, i: usize, value: u32) {
        let id = self.scalar::<super::conditional::ConditionId>(i).0;
        assert!(
            super::conditional::set_condition(id, value),
            "argument {i} names no live condition (KernelArgs::condition)"
        );
    }

    /// This block's tile of a written buffer argument: elements
    /// `thread_range()` clipped to the buffer. Each tile can be taken once per block.
    pub fn tile_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        self.written::<T>(i, Split::Tile, self.tile.clone(), "tile_mut")
    }

    /// This block's slice of an argument passed with
    /// [`KernelArgs::write_per_block`](crate::KernelArgs::write_per_block)`(buf, k)`:
    /// elements `b * k .. (b + 1) * k` of block `b` (clipped to the buffer), as CUDA's
    /// `out[blockIdx.x]` outputs. Once per block.
    pub fn block_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        let k = match self.arg(i) {
            KernelArg::Buffer {
                split: Split::PerBlock(k),
                ..
            } => *k,
            _ => panic!("argument {i} was not passed with KernelArgs::write_per_block"),
        };
        let b = self.tile.start / self.tile.end.saturating_sub(self.tile.start).max(1);
        let lo = b.saturating_mul(k);
        self.written::<T>(i, Split::PerBlock(k), lo..lo.saturating_add(k), "block_mut")
    }

    /// The whole of an argument passed with
    /// [`KernelArgs::write_whole`](crate::KernelArgs::write_whole): any block may read and
    /// write any element; the host backend runs the launch's blocks one after another. Once
    /// per block.
    ///
    /// A launch of **one block** owns every byte it writes, so there any written argument
    /// (also one passed with [`KernelArgs::write`](crate::KernelArgs::write)) can be taken
    /// whole: a single-block kernel (a reduction's last step, `sum<<<1, 32>>>` over more
    /// elements than threads) may read and write all of it, whatever its thread count.
    /// Otherwise a panic (a kernel fault, KN2).
    pub fn whole_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        let (_, access, split) = self.split_buffer::<T>(i);
        let one_block = self.launch.blocks() == 1;
        let want = if one_block && access == Access::Write && split == Split::Tile {
            Split::Tile
        } else {
            Split::Whole
        };
        self.written::<T>(i, want, 0..u64::MAX, "whole_mut")
    }

    /// Elements `range` (clipped) of written argument `i`, which must have been passed split
    /// as `want`.
    fn written<T: Pod>(&self, i: usize, want: Split, range: Range<u64>, what: &str) -> &'a mut [T] {
        let (mem, access, split) = self.split_buffer::<T>(i);
        assert!(
            access == Access::Write && split == want,
            "argument {i} ({access:?}, {split:?}) cannot be used with {what}: tile_mut takes \
             KernelArgs::write, block_mut write_per_block, whole_mut write_whole"
        );
        if std::mem::size_of::<T>() == 0 {
            return &mut [];
        }
        let bit = 1u64 << i; // At most 64 arguments (checked at launch).
        assert!(
            self.taken.get() & bit == 0,
            "argument {i} taken twice in one block"
        );
        self.taken.set(self.taken.get() | bit);
        let n = (mem.len / std::mem::size_of::<T>()) as u64;
        let lo = range.start.min(n) as usize;
        let hi = range.end.min(n) as usize;
        // SAFETY: an argument is split one way for the whole launch (`want` checked above):
        // tiles and per-block slices of different blocks are disjoint, and a whole-buffer
        // argument makes the host backend run the blocks one after another (`Launch::serial`),
        // so no two blocks hold it at once. Each is handed out once per block (checked
        // above), no bytes are written through two arguments (checked at launch), a read
        // argument that overlaps this one is never handed out whole (`input` refuses it,
        // `in_place` hands out this very tile), and the op holds the allocation (MM2). Bounds
        // clipped to the buffer.
        unsafe {
            std::slice::from_raw_parts_mut(
                (mem.alloc.host_ptr().add(mem.offset) as *mut T).add(lo),
                hi - lo,
            )
        }
    }

    /// A `u32` buffer argument as atomics (flags shared between streams).
    pub fn atomics_u32(&self, i: usize) -> &'a [std::sync::atomic::AtomicU32] {
        let (mem, access) = self.buffer::<u32>(i);
        assert!(
            access == Access::Atomic,
            "argument {i} was not passed with KernelArgs::atomic ({access:?})"
        );
        // SAFETY: AtomicU32 has the layout of u32; the memory is 4-aligned, live (MM2) and in
        // bounds; within this launch only atomics touch it (the argument is Atomic, no other
        // written argument overlaps it (checked at launch), and an overlapping read argument
        // is never handed out: `input` refuses it and `in_place` needs a `Write`).
        unsafe {
            std::slice::from_raw_parts(
                mem.alloc.host_ptr().add(mem.offset) as *const std::sync::atomic::AtomicU32,
                mem.len / 4,
            )
        }
    }

    /// A scalar argument.
    pub fn scalar<T: Pod>(&self, i: usize) -> T {
        match self.arg(i) {
            KernelArg::Scalar {
                bytes,
                size,
                ty,
                ty_name,
            } => {
                assert!(
                    *ty == TypeId::of::<T>(),
                    "argument {i} holds {ty_name}, not {}",
                    std::any::type_name::<T>()
                );
                bytemuck::pod_read_unaligned(&bytes[..*size])
            }
            KernelArg::Buffer { .. } => panic!("argument {i} is a buffer, not a scalar"),
        }
    }
}

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Self {
        Dim3 { x, y, z }
    }
}
