//! Kernels as a backend receives them: what a kernel is made of ([`KernelInner`]: a host
//! implementation and CUDA code), a launch and its validated arguments ([`Launch`]), grid
//! shapes ([`Dim3`]), and what a host kernel sees of one block ([`BlockCtx`], [`BlockArgs`];
//! the host backend runs a launch once per block, see `api::kernel` for the model's rules).

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;

use bytemuck::Pod;
use parking_lot::Mutex;

use super::memory::MemRef;
use crate::error::Result;
use crate::types::Access;
use crate::types::{BlockCtx, CudaCode};

/// A host kernel: called once per block.
pub type HostKernelFn = Arc<dyn Fn(&BlockCtx, &BlockArgs) + Send + Sync>;

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

impl KernelArg {
    /// True for a buffer the kernel declares it only reads (AC1).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            KernelArg::Buffer {
                access: Access::Read,
                ..
            }
        )
    }
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
        let id = self.scalar::<crate::types::ConditionId>(i).0;
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
