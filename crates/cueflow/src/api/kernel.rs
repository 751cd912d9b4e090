//! Kernels: one [`Kernel`] carries an implementation per backend — a Rust function over a grid
//! of blocks for the host backend, CUDA C (compiled by NVRTC), PTX or a cubin for CUDA.
//!
//! # The host kernel model
//! A host kernel is called once per block, blocks in parallel on the compute engine's workers;
//! the threads of a block are a loop inside the function. Element-wise kernels map thread `t`
//! of block `b` to element `b * threads_per_block + t`, so a block owns one *tile* of every
//! buffer it writes: [`BlockArgs::tile_mut`] hands out that tile as `&mut [T]`, which makes host
//! kernels safe Rust — blocks cannot write each other's elements, and a written buffer may not
//! overlap any other argument of the launch (checked at launch). Buffers a kernel only reads
//! come whole, through [`BlockArgs::input`]; flags shared between streams are `u32` buffers
//! passed with [`KernelArgs::atomic`] and used through [`BlockArgs::atomics_u32`].
//!
//! Limit: the checks cover one launch. Two kernels on unordered streams that write (or write
//! and read) the same bytes — a race on a GPU too — are a data race between host threads here,
//! which Rust counts as undefined behaviour. Order such kernels with events; a race sanitizer
//! that would refuse them is planned, not built.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;

use bytemuck::Pod;
use parking_lot::Mutex;

use crate::api::device::Device;
use crate::api::memory::DeviceBuffer;
use crate::core::op::{Access, KernelArg, Launch};
use crate::error::{Error, Result};

/// A host kernel: called once per block.
pub type HostKernelFn = Arc<dyn Fn(&BlockCtx, &BlockArgs) + Send + Sync>;

/// CUDA code for a kernel.
#[derive(Clone, Debug)]
pub enum CudaCode {
    /// CUDA C source compiled at run time by NVRTC; `entry` is the `extern "C"` kernel name.
    Source {
        /// The source text.
        code: Cow<'static, str>,
        /// Kernel entry point.
        entry: String,
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

pub(crate) struct KernelInner {
    pub name: String,
    pub host: Option<HostKernelFn>,
    pub cuda: Option<CudaCode>,
    /// Backend-loaded forms (a CUDA function handle), by device id.
    pub loaded: Mutex<Vec<(u64, Arc<dyn Any + Send + Sync>)>>,
}

impl KernelInner {
    /// The loaded form for `device_id`, loading it with `load` the first time.
    #[allow(dead_code)]
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

/// A kernel with implementations for one or more backends. Cheap to clone.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelInner>,
}

impl Kernel {
    /// A kernel named `name`; add implementations with [`KernelBuilder::host`] and
    /// [`KernelBuilder::cuda_source`], then [`KernelBuilder::build`].
    #[allow(clippy::new_ret_no_self)] // A builder, as `Kernel::new(name).host(f).build()` reads.
    pub fn new(name: impl Into<String>) -> KernelBuilder {
        KernelBuilder {
            name: name.into(),
            host: None,
            cuda: None,
        }
    }

    /// The kernel's name (used in errors and traces).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Validate a launch on `device` and turn it into the op's launch record (KN1, ER3).
    pub(crate) fn prepare(
        &self,
        device: &Device,
        cfg: LaunchConfig,
        args: KernelArgs,
    ) -> Result<Launch> {
        let name = &self.inner.name;
        let props = device.properties();
        let bad = |why: String| Error::InvalidLaunch {
            kernel: name.clone(),
            why,
        };
        let (grid, block) = (cfg.grid.as_array(), cfg.block.as_array());
        if grid.contains(&0) || block.contains(&0) {
            return Err(bad(format!(
                "grid {grid:?} and block {block:?} must have no zero dimension"
            )));
        }
        let threads: u64 = block.iter().map(|&d| d as u64).product();
        if threads > props.max_threads_per_block as u64 {
            return Err(bad(format!(
                "block {block:?} has {threads} threads; the device allows at most {}",
                props.max_threads_per_block
            )));
        }
        if block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
            return Err(bad(format!(
                "block {block:?} exceeds the per-dimension limits [1024, 1024, 64]"
            )));
        }
        for (i, (&g, &m)) in grid.iter().zip(props.max_grid.iter()).enumerate() {
            if g > m {
                return Err(bad(format!(
                    "grid dimension {i} is {g}; the device allows at most {m}"
                )));
            }
        }
        if cfg.shared_bytes > props.max_shared_per_block {
            return Err(bad(format!(
                "{} bytes of dynamic shared memory; the device allows at most {}",
                cfg.shared_bytes, props.max_shared_per_block
            )));
        }
        let has_impl = match props.backend {
            "host" => self.inner.host.is_some(),
            _ => self.inner.cuda.is_some(),
        };
        if !has_impl {
            return Err(Error::Unsupported(format!(
                "kernel `{name}` has no implementation for the {} backend",
                props.backend
            )));
        }
        let args = args.finish(device, name)?;
        Ok(Launch {
            kernel: self.inner.clone(),
            grid,
            block,
            shared_bytes: cfg.shared_bytes,
            args: args.into(),
        })
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({})", self.inner.name)
    }
}

/// Builds a [`Kernel`].
pub struct KernelBuilder {
    name: String,
    host: Option<HostKernelFn>,
    cuda: Option<CudaCode>,
}

impl KernelBuilder {
    /// The host-backend implementation, called once per block.
    pub fn host(mut self, f: impl Fn(&BlockCtx, &BlockArgs) + Send + Sync + 'static) -> Self {
        self.host = Some(Arc::new(f));
        self
    }

    /// CUDA C source (NVRTC) with the `extern "C"` entry point `entry`.
    pub fn cuda_source(mut self, code: impl Into<Cow<'static, str>>, entry: &str) -> Self {
        self.cuda = Some(CudaCode::Source {
            code: code.into(),
            entry: entry.into(),
        });
        self
    }

    /// Any CUDA code form.
    pub fn cuda(mut self, code: CudaCode) -> Self {
        self.cuda = Some(code);
        self
    }

    /// Finish.
    pub fn build(self) -> Kernel {
        Kernel {
            inner: Arc::new(KernelInner {
                name: self.name,
                host: self.host,
                cuda: self.cuda,
                loaded: Mutex::new(Vec::new()),
            }),
        }
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
    fn as_array(self) -> [u32; 3] {
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

/// Grid, block and dynamic shared memory of a launch (`<<<grid, block, shared, stream>>>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads, no shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> Self {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_bytes: 0,
        }
    }

    /// One thread per element, `block` threads per block (grid = ceil(n / block)).
    pub fn for_elements(n: usize, block: u32) -> Self {
        let blocks = n
            .div_ceil(block.max(1) as usize)
            .clamp(1, i32::MAX as usize) as u32;
        Self::new(blocks, block)
    }

    /// Set the dynamic shared memory size.
    pub fn shared(mut self, bytes: u32) -> Self {
        self.shared_bytes = bytes;
        self
    }
}

/// Arguments of a launch, in the kernel's parameter order. Buffers declare whether the kernel
/// reads or writes them.
#[derive(Default)]
pub struct KernelArgs {
    args: Vec<KernelArg>,
    error: Option<String>,
}

impl KernelArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer the kernel only reads.
    pub fn read<T: Pod>(self, buf: &DeviceBuffer<T>) -> Self {
        self.buffer(buf, Access::Read)
    }

    /// A buffer the kernel writes (each block its own tile on the host backend).
    pub fn write<T: Pod>(self, buf: &DeviceBuffer<T>) -> Self {
        self.buffer(buf, Access::Write)
    }

    fn buffer<T: Pod>(mut self, buf: &DeviceBuffer<T>, access: Access) -> Self {
        self.args.push(KernelArg::Buffer {
            mem: buf.mem(),
            access,
            elem: TypeId::of::<T>(),
            elem_name: std::any::type_name::<T>(),
        });
        self
    }

    /// A `u32` buffer the kernel accesses only with atomic operations, from any block
    /// (host kernels: [`BlockArgs::atomics_u32`]). Treated as written for overlap checks.
    pub fn atomic(self, buf: &DeviceBuffer<u32>) -> Self {
        self.buffer(buf, Access::Atomic)
    }

    /// A value passed by copy (at most 16 bytes).
    pub fn scalar<T: Pod>(mut self, v: T) -> Self {
        let b = bytemuck::bytes_of(&v);
        if b.len() > 16 {
            self.error.get_or_insert(format!(
                "scalar argument {} is {} bytes; at most 16 are supported",
                self.args.len(),
                b.len()
            ));
            return self;
        }
        let mut bytes = [0u8; 16];
        bytes[..b.len()].copy_from_slice(b);
        self.args.push(KernelArg::Scalar {
            bytes,
            size: b.len(),
            ty: TypeId::of::<T>(),
            ty_name: std::any::type_name::<T>(),
        });
        self
    }

    fn finish(self, device: &Device, kernel: &str) -> Result<Vec<KernelArg>> {
        let bad = |why: String| Error::InvalidArgument {
            kernel: kernel.to_string(),
            why,
        };
        if let Some(e) = self.error {
            return Err(bad(e));
        }
        if self.args.len() > 64 {
            return Err(bad(format!(
                "{} arguments; at most 64 are supported",
                self.args.len()
            )));
        }
        for (i, a) in self.args.iter().enumerate() {
            let KernelArg::Buffer { mem, access, .. } = a else {
                continue;
            };
            if mem.alloc.device_id != device.id() {
                return Err(Error::InvalidHandle(format!(
                    "kernel `{kernel}` argument {i}: buffer belongs to another device"
                )));
            }
            if mem.kind() != crate::core::alloc::MemKind::Device {
                return Err(bad(format!("argument {i} is not device memory")));
            }
            if *access != Access::Read {
                for (j, b) in self.args.iter().enumerate() {
                    if let KernelArg::Buffer { mem: other, .. } = b {
                        if i != j && mem.overlaps(other) {
                            return Err(bad(format!(
                                "written argument {i} (bytes {:?}) overlaps argument {j} (bytes {:?})",
                                mem.range(),
                                other.range()
                            )));
                        }
                    }
                }
            }
        }
        Ok(self.args)
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
    fn arg(&self, i: usize) -> &'a KernelArg {
        self.launch.args.get(i).unwrap_or_else(|| {
            panic!(
                "kernel `{}` asked for argument {i} of {}",
                self.launch.kernel.name,
                self.launch.args.len()
            )
        })
    }

    fn buffer<T: Pod>(&self, i: usize) -> (&'a crate::core::alloc::MemRef, Access) {
        match self.arg(i) {
            KernelArg::Buffer {
                mem,
                access,
                elem,
                elem_name,
                ..
            } => {
                assert!(
                    *elem == TypeId::of::<T>(),
                    "argument {i} holds {elem_name}, not {}",
                    std::any::type_name::<T>()
                );
                (mem, *access)
            }
            KernelArg::Scalar { .. } => panic!("argument {i} is a scalar, not a buffer"),
        }
    }

    /// A buffer argument the kernel reads, whole.
    pub fn input<T: Pod>(&self, i: usize) -> &'a [T] {
        let (mem, access) = self.buffer::<T>(i);
        assert!(
            access == Access::Read,
            "argument {i} is not read-only ({access:?}); use tile_mut or atomics_u32"
        );
        if std::mem::size_of::<T>() == 0 {
            return &[];
        }
        // SAFETY: the op holds the allocation (MM2); core checked the range is inside it and
        // that no written argument of this launch overlaps it, so nothing in this launch writes
        // these bytes. Pod: any bytes are a valid T; allocations are page-aligned and offsets
        // are whole elements.
        unsafe {
            std::slice::from_raw_parts(
                mem.alloc.host_ptr().add(mem.offset) as *const T,
                mem.len / std::mem::size_of::<T>(),
            )
        }
    }

    /// This block's tile of a written buffer argument: elements
    /// `thread_range()` clipped to the buffer. Each tile can be taken once per block.
    pub fn tile_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        let (mem, access) = self.buffer::<T>(i);
        assert!(
            access == Access::Write,
            "argument {i} is not a tiled write ({access:?}); use input or atomics_u32"
        );
        if std::mem::size_of::<T>() == 0 {
            return &mut [];
        }
        let bit = 1u64 << i; // At most 64 arguments (checked at launch).
        assert!(
            self.taken.get() & bit == 0,
            "tile of argument {i} taken twice in one block"
        );
        self.taken.set(self.taken.get() | bit);
        let n = (mem.len / std::mem::size_of::<T>()) as u64;
        let lo = self.tile.start.min(n) as usize;
        let hi = self.tile.end.min(n) as usize;
        // SAFETY: tiles of different blocks are disjoint, a tile is handed out once per block
        // (checked above), written arguments overlap no other argument (checked at launch), and
        // the op holds the allocation (MM2). Bounds clipped to the buffer.
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
        // bounds; within this launch only atomics touch it (the argument is Atomic and no other
        // argument overlaps it, checked at launch).
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

/// Run blocks `range` of a host launch (called by the host backend's compute workers).
pub(crate) fn run_host_blocks(launch: &Launch, range: Range<u64>) {
    let f = launch
        .kernel
        .host
        .as_ref()
        .expect("core checked the kernel has a host implementation");
    let [gx, gy, _] = launch.grid;
    let threads = launch.threads_per_block();
    for b in range {
        let (x, rest) = (b % gx as u64, b / gx as u64);
        let (y, z) = (rest % gy as u64, rest / gy as u64);
        let ctx = BlockCtx {
            block_idx: Dim3 {
                x: x as u32,
                y: y as u32,
                z: z as u32,
            },
            grid_dim: launch.grid.into(),
            block_dim: launch.block.into(),
            linear_block: b,
            threads,
            shared_bytes: launch.shared_bytes,
        };
        let args = BlockArgs {
            launch,
            tile: ctx.thread_range(),
            taken: Cell::new(0),
        };
        f(&ctx, &args);
    }
}

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Self {
        Dim3 { x, y, z }
    }
}
