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
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
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

/// One kernel argument as core validated it.
#[derive(Clone, Debug)]
pub(crate) enum KernelArg {
    Buffer {
        mem: MemRef,
        access: Access,
        elem: TypeId,
        elem_name: &'static str,
    },
    Scalar {
        bytes: [u8; 16],
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

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Self {
        Dim3 { x, y, z }
    }
}
