//! Kernel and its helpers (documented on the type, which the crate root exports).

use std::any::TypeId;
use std::borrow::Cow;
use std::sync::Arc;

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::memory::DeviceBuffer;
use crate::backend::contract::kernel::KernelInner;
use crate::backend::contract::kernel::{CheckedArgs, KernelArg, Launch};
use crate::backend::contract::memory::MemRef;
use crate::error::{Error, Result};
use crate::types::host_kernel::Split;
use crate::types::Access;
use crate::types::ConditionId;
use crate::types::DeviceProperties;
use crate::types::{BlockArgs, HostKernelFn};
use crate::types::{BlockCtx, CompileOptions, CudaCode, Dim3, HostPath};

/// Kernels: one [`Kernel`] carries an implementation per backend — a Rust function over a grid
/// of blocks for the host backend, CUDA C (compiled by NVRTC), PTX or a cubin for CUDA.
///
/// # The host kernel model
/// A host kernel is called once per block, blocks in parallel on the compute engine's workers;
/// the threads of a block are a loop inside the function. Element-wise kernels map thread `t`
/// of block `b` to element `b * threads_per_block + t`, so a block owns one *tile* of every
/// buffer it writes: [`BlockArgs::tile_mut`] hands out that tile as `&mut [T]`, which makes host
/// kernels safe Rust — blocks cannot write each other's elements, and no bytes are written
/// through two arguments (checked at launch, KC4). Buffers a kernel only reads come whole,
/// through [`BlockArgs::input`] — unless a written argument of the launch overlaps them (an
/// in-place kernel with separate `in` and `out` pointers to one buffer, which CUDA allows):
/// such a buffer is read through the written argument's tile, [`BlockArgs::in_place`], and
/// `input` on it faults the kernel, since other blocks are writing it; flags shared between streams are `u32` buffers
/// passed with [`KernelArgs::atomic`] and used through [`BlockArgs::atomics_u32`].
///
/// Two more ways to write a buffer, for kernels whose blocks do not write one tile each:
/// [`KernelArgs::write_per_block`] gives block `b` elements `b*k..(b+1)*k`
/// ([`BlockArgs::block_mut`], CUDA's `out[blockIdx.x]`), and [`KernelArgs::write_whole`] gives
/// every block the whole buffer ([`BlockArgs::whole_mut`]) and makes the host backend run the
/// launch's blocks one after another. Both are writes of the whole buffer to the sanitizer and
/// automatic ordering.
///
/// # CUDA C on the host backend
/// A kernel with only CUDA C ([`KernelBuilder::cuda_source`]) runs on the host backend too
/// (SPEC HK1): compiled at run time by the machine's C++ compiler against a prelude that gives
/// CUDA's execution model (threads of a block as fibers, barriers, shared memory, warp
/// operations, atomics, `printf`, `assert`, cooperative groups). A kernel with both runs its
/// closure there; `CUEFLOW_HOST_KERNELS=c` runs the CUDA C instead. What is supported, and
/// where results can differ in bits from a GPU: `docs/host-cuda-c.md` in the repository.
///
/// Across launches, core keeps host kernels sound too (SPEC AC6): on the host backend an
/// operation that conflicts with pending work on another stream — it writes bytes that work
/// reads or writes, or reads bytes that work writes — runs after that work, in enqueue order.
/// A program whose streams race (a race on a GPU too) therefore runs without a data race here,
/// and the race sanitizer (`CUEFLOW_SANITIZE`) reports it all the same.
///
/// A kernel with implementations for one or more backends. Cheap to clone.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelInner>,
    /// Why the CUDA C options cannot be used, checked once when the kernel was built (KC1).
    invalid_options: Option<Arc<str>>,
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
            options: None,
        }
    }

    /// The kernel's name (used in errors and traces).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Compile and load the kernel for `device` now (KC2), so that its first launch there
    /// costs what any later launch costs: on CUDA the CUDA C is compiled (or taken from the
    /// disk cache, KC3), its module loaded and the function's code loaded onto the GPU; on the
    /// host backend a kernel that runs from its CUDA C is compiled for the CPU (or taken from
    /// the disk cache) and opened, and a closure needs nothing. Errors are the ones the first launch would
    /// return — [`Error::InvalidOptions`], [`Error::Compile`] with the compiler's log,
    /// [`Error::Unsupported`] when the kernel has no implementation for the device's backend.
    ///
    /// Prepare a kernel before launching work that waits for it to run: on CUDA loading a
    /// module waits for every kernel running on the GPU (`benches/cuda/sync_calls_probe.cu`),
    /// so a first launch after a kernel that spins until this one sets its flag would wait
    /// for the spinning kernel, which waits for it.
    ///
    /// ```
    /// # use cueflow::{Device, Kernel};
    /// let dev = Device::from_env()?;
    /// let k = Kernel::new("noop")
    ///     .host(|_, _| {})
    ///     .cuda_source(r#"extern "C" __global__ void noop() {}"#, "noop")
    ///     .build();
    /// k.prepare(&dev)?; // compiled and loaded here, not at the first launch
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn prepare(&self, device: &Device) -> Result<()> {
        self.check_options()?;
        self.check_backend(device)?;
        device.inner.prepare_kernel(&self.inner)
    }

    /// How `device` runs this kernel's threads from its CUDA C on the host backend:
    /// [`HostPath::Lanes`] (a block's threads as the lanes of vectorized loops) or
    /// [`HostPath::Fibers`] with the reason the work-item-loop compiler left it to fibers.
    /// Compiles the kernel (or takes it from the disk cache) if it was not yet. `None` when
    /// the device does not run this kernel from CUDA C on the host (its closure runs, or the
    /// device is a GPU). `CUEFLOW_HOST_CUDA_C_PATH=fibers` makes every kernel take fibers.
    ///
    /// ```
    /// # use cueflow::{Device, HostPath, Kernel};
    /// let dev = Device::from_env()?;
    /// let k = Kernel::new("fill")
    ///     .cuda_source(
    ///         r#"extern "C" __global__ void fill(float* x, float v, unsigned n) {
    ///                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    ///                if (i < n) x[i] = v;
    ///            }"#,
    ///         "fill",
    ///     )
    ///     .build();
    /// if let Ok(Some(path)) = k.host_path(&dev) {
    ///     println!("fill runs as {path}");
    /// }
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    pub fn host_path(&self, device: &Device) -> Result<Option<HostPath>> {
        self.check_options()?;
        self.check_backend(device)?;
        device.inner.host_path(&self.inner)
    }

    #[inline]
    fn check_options(&self) -> Result<()> {
        match &self.invalid_options {
            Some(why) => Err(Error::InvalidOptions {
                kernel: self.inner.name.clone(),
                why: why.to_string(),
            }),
            None => Ok(()),
        }
    }

    #[inline]
    fn check_backend(&self, device: &Device) -> Result<()> {
        let has_impl = if device.inner.runs_host_code() {
            // A closure, or CUDA C the host backend compiles (HK1).
            self.inner.host.is_some() || matches!(self.inner.cuda, Some(CudaCode::Source { .. }))
        } else {
            self.inner.cuda.is_some()
        };
        if has_impl {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "kernel `{}` has no implementation for the {} backend",
                self.inner.name,
                device.properties().backend
            )))
        }
    }

    /// Validate a launch on `device` and turn it into the op's launch record (KN1, KC1, KC4,
    /// ER3).
    pub(crate) fn launch_record(
        &self,
        device: &Device,
        cfg: LaunchConfig,
        args: KernelArgs,
    ) -> Result<Launch> {
        self.check_options()?;
        let props = device.properties();
        let (grid, block) = (cfg.grid.as_array(), cfg.block.as_array());
        if !config_fits(props, grid, block, cfg.shared_bytes) {
            return Err(self.invalid_config(props, grid, block, cfg.shared_bytes));
        }
        self.check_backend(device)?;
        let args = args.finish(device, props, &self.inner.name)?;
        Ok(Launch::with_checked_args(
            self.inner.clone(),
            grid,
            block,
            cfg.shared_bytes,
            args,
        ))
    }

    /// Why `config_fits` refused a launch configuration (KN1): the first limit it breaks.
    #[cold]
    fn invalid_config(
        &self,
        props: &DeviceProperties,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
    ) -> Error {
        let why = if grid.contains(&0) || block.contains(&0) {
            format!("grid {grid:?} and block {block:?} must have no zero dimension")
        } else if block_threads(block) > props.max_threads_per_block as u64 {
            format!(
                "block {block:?} has {} threads; the device allows at most {}",
                block_threads(block),
                props.max_threads_per_block
            )
        } else if block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
            format!("block {block:?} exceeds the per-dimension limits [1024, 1024, 64]")
        } else if let Some((i, (g, m))) = (0..3)
            .map(|i| (i, (grid[i], props.max_grid[i])))
            .find(|(_, (g, m))| g > m)
        {
            format!("grid dimension {i} is {g}; the device allows at most {m}")
        } else {
            format!(
                "{shared_bytes} bytes of dynamic shared memory; the device allows at most {}",
                props.max_shared_per_block
            )
        };
        Error::InvalidLaunch {
            kernel: self.inner.name.clone(),
            why,
        }
    }
}

/// Threads in a block of dimensions `block`.
fn block_threads(block: [u32; 3]) -> u64 {
    block.iter().map(|&d| d as u64).product()
}

/// Whether a launch of `grid` blocks of `block` threads with `shared_bytes` of dynamic shared
/// memory fits the device (KN1): one branch on the common path, the message only on failure
/// ([`Kernel::invalid_config`]).
#[inline]
fn config_fits(
    props: &DeviceProperties,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
) -> bool {
    let nonzero = grid.iter().chain(&block).all(|&d| d != 0);
    let grid_fits = (0..3).all(|i| grid[i] <= props.max_grid[i]);
    let block_fits = block[0] <= 1024 && block[1] <= 1024 && block[2] <= 64;
    nonzero
        & grid_fits
        & block_fits
        & (block_threads(block) <= props.max_threads_per_block as u64)
        & (shared_bytes <= props.max_shared_per_block)
}

/// Refuse a stream launch outside capture that passes a graph's condition handle
/// ([`KernelArgs::condition`](crate::KernelArgs::condition)), before anything is enqueued
/// (ER3): only a kernel node of the condition's graph may set it (GR9). On CUDA the handle
/// means nothing outside its graph (a kernel calling `cudaGraphSetConditional` with it faults
/// the context); on the host backend it would set the graph's condition from outside.
pub(crate) fn refuse_condition_outside_graph(launch: &Launch) -> Result<()> {
    let condition = TypeId::of::<ConditionId>();
    let found = launch
        .args
        .iter()
        .position(|a| matches!(a, KernelArg::Scalar { ty, .. } if *ty == condition));
    match found {
        None => Ok(()),
        Some(i) => Err(Error::InvalidArgument {
            kernel: launch.kernel.name.clone(),
            why: format!(
                "argument {i} is a graph's condition handle (KernelArgs::condition), which only \
                 a kernel node of that graph may set (GR9); a stream launch outside capture has \
                 no graph to set it in (CUDA leaves it undefined and faults). Add the kernel to \
                 the graph with Graph::add_kernel instead"
            ),
        }),
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
    options: Option<CompileOptions>,
}

impl KernelBuilder {
    /// The host-backend implementation, called once per block.
    pub fn host(mut self, f: impl Fn(&BlockCtx, &BlockArgs) + Send + Sync + 'static) -> Self {
        self.host = Some(Arc::new(f));
        self
    }

    /// CUDA C source (NVRTC) with the entry point `entry`: a kernel's name (`extern "C"` or
    /// not, as CUDA programs name it), or a C++ name expression such as `scale<float>` for a
    /// templated kernel (see [`CudaCode::Source`]).
    pub fn cuda_source(mut self, code: impl Into<Cow<'static, str>>, entry: &str) -> Self {
        self.cuda = Some(CudaCode::Source {
            code: code.into(),
            entry: entry.into(),
            options: CompileOptions::default(),
        });
        self
    }

    /// The options the CUDA C source is compiled with (KC1): defines, include directories,
    /// language standard, fast math, line info, register limit, relocatable code.
    pub fn cuda_options(mut self, options: CompileOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// Any CUDA code form.
    pub fn cuda(mut self, code: CudaCode) -> Self {
        self.cuda = Some(code);
        self
    }

    /// Finish. Options the compiler could not take ([`cuda_options`](Self::cuda_options))
    /// are reported by [`Kernel::prepare`] and by every launch, as
    /// [`Error::InvalidOptions`], with nothing enqueued.
    pub fn build(mut self) -> Kernel {
        if let (Some(opts), Some(CudaCode::Source { options, .. })) =
            (self.options.take(), self.cuda.as_mut())
        {
            *options = opts;
        }
        let invalid_options = match &self.cuda {
            Some(CudaCode::Source { options, .. }) => options.validate().err().map(Arc::from),
            _ => None,
        };
        Kernel {
            inner: Arc::new(KernelInner {
                name: self.name,
                host: self.host,
                cuda: self.cuda,
                loaded: Default::default(),
            }),
            invalid_options,
        }
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
    /// Taken from the thread's spare list ([`SPARE_ARGS`]) when the first argument comes.
    args: Vec<KernelArg>,
    /// Bytes the parameters take so far as the kernel's parameter block lays them out: each
    /// at a multiple of its alignment (a buffer is an 8-byte pointer), KC4.
    param_bytes: usize,
}

impl KernelArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One more argument, into the thread's spare vector if this is the first.
    #[inline]
    fn push(&mut self, arg: KernelArg) {
        if self.args.capacity() == 0 {
            self.args = take_spare();
        }
        self.args.push(arg);
    }

    /// Lay out one more parameter of `size` bytes at `align` (KC4).
    fn lay_out(&mut self, size: usize, align: usize) {
        self.param_bytes = self.param_bytes.next_multiple_of(align.max(1)) + size;
    }

    /// A buffer the kernel only reads.
    pub fn read<T: Pod>(self, buf: &DeviceBuffer<T>) -> Self {
        self.buffer(buf, Access::Read)
    }

    /// A buffer the kernel writes (each block its own tile on the host backend).
    pub fn write<T: Pod>(self, buf: &DeviceBuffer<T>) -> Self {
        self.buffer(buf, Access::Write)
    }

    /// A buffer the kernel writes per block, as CUDA's `out[blockIdx.x]`: on the host
    /// backend, block `b`'s closure gets elements `b * k .. (b + 1) * k` through
    /// [`BlockArgs::block_mut`]. For the sanitizer and automatic ordering it is a write of the
    /// whole buffer (AC1). `k` must be at least 1.
    pub fn write_per_block<T: Pod>(self, buf: &DeviceBuffer<T>, k: u64) -> Self {
        self.buffer_split(buf, Access::Write, Split::PerBlock(k))
    }

    /// A buffer any block of the kernel may read and write anywhere (an in-place sum over a
    /// buffer the kernel also writes): the host backend runs the launch's blocks one after
    /// another, each closure getting the whole buffer through [`BlockArgs::whole_mut`]. For
    /// the sanitizer and automatic ordering it is a write of the whole buffer (AC1).
    pub fn write_whole<T: Pod>(self, buf: &DeviceBuffer<T>) -> Self {
        self.buffer_split(buf, Access::Write, Split::Whole)
    }

    fn buffer<T: Pod>(self, buf: &DeviceBuffer<T>, access: Access) -> Self {
        self.buffer_split(buf, access, Split::Tile)
    }

    fn buffer_split<T: Pod>(self, buf: &DeviceBuffer<T>, access: Access, split: Split) -> Self {
        self.mem_arg_split::<T>(buf.mem(), access, split)
    }

    /// A buffer argument over any memory a kernel may use (device, mapped host memory).
    pub(crate) fn mem_arg<T: Pod>(
        self,
        mem: crate::backend::contract::memory::MemRef,
        access: Access,
    ) -> Self {
        self.mem_arg_split::<T>(mem, access, Split::Tile)
    }

    fn mem_arg_split<T: Pod>(
        mut self,
        mem: crate::backend::contract::memory::MemRef,
        access: Access,
        split: Split,
    ) -> Self {
        self.lay_out(8, 8);
        self.push(KernelArg::Buffer {
            mem,
            access,
            elem: TypeId::of::<T>(),
            elem_name: std::any::type_name::<T>(),
            split,
        });
        self
    }

    /// A `u32` buffer the kernel accesses only with atomic operations, from any block
    /// (host kernels: [`BlockArgs::atomics_u32`]). Treated as written for overlap checks.
    pub fn atomic(self, buf: &DeviceBuffer<u32>) -> Self {
        self.buffer(buf, Access::Atomic)
    }

    /// A value passed by copy, as CUDA passes kernel parameters (KC4): a scalar, or a struct
    /// (`#[repr(C)]`, [`Pod`], laid out as the kernel's C struct is) of any size up to the
    /// device's parameter limit ([`DeviceProperties::max_parameter_bytes`]: 4 KiB everywhere,
    /// 32,764 bytes on CUDA 12.1+ with compute capability 7.0+), counted over all the
    /// launch's parameters; a launch over the limit is refused with
    /// [`Error::InvalidArgument`] and nothing is enqueued.
    ///
    /// [`DeviceProperties::max_parameter_bytes`]: crate::DeviceProperties::max_parameter_bytes
    pub fn scalar<T: Pod>(mut self, v: T) -> Self {
        let b = bytemuck::bytes_of(&v);
        self.push(KernelArg::Scalar {
            bytes: smallvec::SmallVec::from_slice(b),
            size: b.len(),
            ty: TypeId::of::<T>(),
            ty_name: std::any::type_name::<T>(),
        });
        self.lay_out(b.len(), std::mem::align_of::<T>());
        self
    }

    fn finish(
        self,
        device: &Device,
        props: &DeviceProperties,
        kernel: &str,
    ) -> Result<CheckedArgs> {
        let bad = |why: String| Error::InvalidArgument {
            kernel: kernel.to_string(),
            why,
        };
        if self.args.len() > 64 {
            return Err(bad(format!(
                "{} arguments; at most 64 are supported",
                self.args.len()
            )));
        }
        let limit = props.max_parameter_bytes as usize;
        let bytes = self.param_bytes;
        let mut host_memory = false;
        if bytes > limit {
            return Err(bad(format!(
                "the parameters take {bytes} bytes; the device allows at most {limit} (KC4)"
            )));
        }
        for (i, a) in self.args.iter().enumerate() {
            let KernelArg::Buffer {
                mem, access, split, ..
            } = a
            else {
                continue;
            };
            if *split == Split::PerBlock(0) {
                return Err(bad(format!(
                    "argument {i}: write_per_block needs at least 1 element per block"
                )));
            }
            if !mem.alloc.usable_on(device.id()) && !device.inner.peer_enabled(&mem.alloc) {
                return Err(another_devices_argument(kernel, i, mem));
            }
            host_memory |= mem.kind().is_host();
            if mem.kind() != crate::types::MemKind::Device && !mem.alloc.host.mapped {
                return Err(bad(format!(
                    "argument {i} is not device memory (pinned host memory needs \
                     PinnedFlags::mapped to be a kernel argument, HM3)"
                )));
            }
            // KC4: several arguments may name the same bytes, but none may be written through
            // two names at once (an atomic argument is written).
            if *access == Access::Read {
                continue;
            }
            for (j, b) in self.args.iter().enumerate().skip(i + 1) {
                if let KernelArg::Buffer {
                    mem: other,
                    access: other_access,
                    ..
                } = b
                {
                    if *other_access != Access::Read && mem.overlaps(other) {
                        return Err(bad(format!(
                            "arguments {i} (bytes {:?}, {access:?}) and {j} (bytes {:?}, \
                             {other_access:?}) write overlapping bytes through two names (KC4)",
                            mem.range(),
                            other.range()
                        )));
                    }
                }
            }
        }
        Ok(CheckedArgs {
            list: shared_list(self.args),
            host_memory,
        })
    }
}

/// A kernel argument of memory another device owns (HM2, HM6): the fix depends on the kind.
#[cold]
fn another_devices_argument(kernel: &str, i: usize, mem: &MemRef) -> Error {
    let fix = if mem.kind().is_host() {
        "allocate or register pinned memory with PinnedFlags::default().portable() to use it \
         on every device, HM2"
    } else {
        "enable peer access (Device::enable_peer_access) to use another device's memory, HM6"
    };
    Error::InvalidHandle(format!(
        "kernel `{kernel}` argument {i}: the buffer belongs to another device ({fix})"
    ))
}

thread_local! {
    /// An emptied argument vector of this thread's last launch, whose memory the next launch's
    /// arguments reuse: a launch's list then costs one allocation (its shared copy), not that
    /// and the vector's growth.
    static SPARE_ARGS: std::cell::Cell<Vec<KernelArg>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The thread's spare argument vector (empty, maybe with memory).
#[inline(never)]
fn take_spare() -> Vec<KernelArg> {
    // A launch from a thread-local destructor finds the spare gone: a fresh vector then.
    SPARE_ARGS
        .try_with(|spare| spare.take())
        .unwrap_or_default()
}

/// The launch's argument list, shared by its op, a graph's node and the keepalive queue: the
/// arguments moved into one allocation (none for a kernel without arguments), the vector kept
/// for the thread's next launch.
fn shared_list(mut args: Vec<KernelArg>) -> Arc<[KernelArg]> {
    static EMPTY: std::sync::OnceLock<Arc<[KernelArg]>> = std::sync::OnceLock::new();
    if args.is_empty() {
        return EMPTY.get_or_init(|| Arc::from([])).clone();
    }
    let n = args.len();
    let mut list = Arc::<[KernelArg]>::new_uninit_slice(n);
    let slots = Arc::get_mut(&mut list).expect("a new Arc is unique");
    // SAFETY: `slots` has room for exactly the `n` arguments, which are moved bitwise (as
    // `Arc::from(Vec)` moves them); `set_len(0)` then forgets them in `args`, so each is
    // dropped once, from the list, and every slot of the list is initialized.
    let list = unsafe {
        std::ptr::copy_nonoverlapping(args.as_ptr(), slots.as_mut_ptr().cast::<KernelArg>(), n);
        args.set_len(0);
        list.assume_init()
    };
    if args.capacity() <= 16 {
        let _ = SPARE_ARGS.try_with(|spare| spare.set(args)); // Gone: the vector just drops.
    }
    list
}

#[cfg(test)]
mod tests {
    //! The launch's shared argument list: each argument moved in once, the thread's spare
    //! vector reused without carrying arguments from one launch into the next.
    use super::*;
    use crate::backend::contract::memory::{Allocation, MemRef};
    use crate::types::MemKind;

    fn buffer(alloc: &Arc<Allocation>) -> KernelArg {
        KernelArg::Buffer {
            mem: MemRef {
                alloc: alloc.clone(),
                offset: 0,
                len: alloc.bytes,
            },
            access: Access::Write,
            elem: TypeId::of::<u8>(),
            elem_name: "u8",
            split: Split::Tile,
        }
    }

    fn args(list: impl IntoIterator<Item = KernelArg>) -> KernelArgs {
        let mut a = KernelArgs::new();
        list.into_iter().for_each(|arg| a.push(arg));
        a
    }

    #[test]
    fn shared_lists_hold_each_launchs_own_arguments_once() {
        let a = Allocation::borrowed(0x1000, 64, MemKind::Device, 0);
        let b = Allocation::borrowed(0x2000, 64, MemKind::Device, 0);
        let first = shared_list(args([buffer(&a), buffer(&b)]).args);
        assert_eq!(first.len(), 2);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (2, 2));
        // The next launch reuses the spare vector: it holds only its own argument.
        let second = shared_list(args([buffer(&b)]).args);
        assert_eq!(second.len(), 1);
        assert!(matches!(&second[0], KernelArg::Buffer { mem, .. } if mem.alloc.addr == 0x2000));
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (2, 3));
        drop(first);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 2));
        drop(second);
        assert_eq!(Arc::strong_count(&b), 1, "each argument dropped once");
        // No arguments: the shared empty list, whatever the spare holds.
        assert!(shared_list(args([]).args).is_empty());
        // Arguments built but never launched go with their builder.
        drop(args([buffer(&a)]));
        assert_eq!(Arc::strong_count(&a), 1);
    }
}
