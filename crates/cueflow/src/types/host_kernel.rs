//! What a host kernel is ([`HostKernelFn`]) and what it sees of its launch, one block at a time
//! ([`BlockArgs`]; the host backend runs a launch once per block, see `api::kernel` for the
//! model's rules).
//!
//! A launch and its validated arguments are the backend contract's; a block reads them through
//! [`LaunchView`], which the contract's launch implements, as [`ArgView`]s: an argument's
//! declared access, element type and split, and for a buffer its host address and the bytes of
//! its allocation it names. So the public types live here and name no layer.

use std::any::TypeId;
use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;

use bytemuck::Pod;

use super::kernel::BlockCtx;
use super::memory::Access;

/// A host kernel: called once per block.
pub type HostKernelFn = Arc<dyn Fn(&BlockCtx, &BlockArgs) + Send + Sync>;

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

/// A launch as a block of a host kernel reads it.
pub(crate) trait LaunchView: Sync {
    /// The kernel's name, for the messages of a kernel fault.
    fn kernel_name(&self) -> &str;
    /// How many blocks the launch has.
    fn blocks(&self) -> u64;
    /// How many arguments it has.
    fn arg_count(&self) -> usize;
    /// Argument `i` (`i < arg_count()`).
    fn arg(&self, i: usize) -> ArgView<'_>;
    /// Set condition `id` to `value` (GR9); false if no live condition has that id.
    fn set_condition(&self, id: u64, value: u32) -> bool;
}

/// One argument of a launch, as a block reads it.
pub(crate) enum ArgView<'a> {
    /// A buffer.
    Buffer(BufferView),
    /// A value passed by copy: its bytes and type.
    Scalar {
        bytes: &'a [u8],
        ty: TypeId,
        ty_name: &'static str,
    },
}

/// A buffer argument: where its bytes are and how the kernel declared it.
#[derive(Clone)]
pub(crate) struct BufferView {
    /// Its allocation's identity (two arguments of one allocation have the same).
    pub alloc: usize,
    /// The host address of its allocation's first byte; the launch holds the allocation (MM2).
    pub base: *mut u8,
    /// The bytes of the allocation it names.
    pub range: Range<usize>,
    pub access: Access,
    pub elem: TypeId,
    pub elem_name: &'static str,
    /// How host closures' blocks share it (written arguments).
    pub split: Split,
}

impl BufferView {
    /// True if it names bytes `other` names too.
    fn overlaps(&self, other: &BufferView) -> bool {
        self.alloc == other.alloc
            && self.range.start < other.range.end
            && other.range.start < self.range.end
    }
}

/// A host kernel's view of its arguments, for one block.
pub struct BlockArgs<'a> {
    launch: &'a dyn LaunchView,
    tile: Range<u64>,
    /// Written-buffer tiles already handed out in this block (bit per argument).
    taken: Cell<u64>,
}

impl<'a> BlockArgs<'a> {
    /// The arguments of `launch` for the block whose threads are `tile` (global linear thread
    /// indices): the host backend's way into a block.
    pub(crate) fn new(launch: &'a dyn LaunchView, tile: Range<u64>) -> Self {
        BlockArgs {
            launch,
            tile,
            taken: Cell::new(0),
        }
    }

    #[track_caller]
    fn arg(&self, i: usize) -> ArgView<'a> {
        let n = self.launch.arg_count();
        if i >= n {
            panic!(
                "kernel `{}` asked for argument {i} of {n}",
                self.launch.kernel_name()
            );
        }
        self.launch.arg(i)
    }

    #[track_caller]
    fn buffer<T: Pod>(&self, i: usize) -> BufferView {
        match self.arg(i) {
            ArgView::Buffer(b) => {
                assert!(
                    b.elem == TypeId::of::<T>(),
                    "argument {i} holds {}, not {}",
                    b.elem_name,
                    std::any::type_name::<T>()
                );
                b
            }
            ArgView::Scalar { .. } => panic!("argument {i} is a scalar, not a buffer"),
        }
    }

    /// The first written (or atomic) argument whose bytes overlap `buf` (argument `i`).
    fn written_alias(&self, i: usize, buf: &BufferView) -> Option<usize> {
        (0..self.launch.arg_count()).find(|&j| match self.launch.arg(j) {
            ArgView::Buffer(other) => {
                j != i && other.access != Access::Read && buf.overlaps(&other)
            }
            ArgView::Scalar { .. } => false,
        })
    }

    /// A buffer argument the kernel reads, whole. Panics (a fault of the kernel, KN2) when a
    /// written argument of the launch overlaps it: other blocks are writing those bytes; read
    /// them through [`in_place`](Self::in_place).
    #[track_caller]
    pub fn input<T: Pod>(&self, i: usize) -> &'a [T] {
        let b = self.buffer::<T>(i);
        assert!(
            b.access == Access::Read,
            "argument {i} is not read-only ({:?}); use tile_mut or atomics_u32",
            b.access
        );
        if let Some(j) = self.written_alias(i, &b) {
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
                b.base.add(b.range.start) as *const T,
                b.range.len() / std::mem::size_of::<T>(),
            )
        }
    }

    /// The written argument whose bytes overlap argument `i`'s, if any (KC4): a host kernel
    /// that allows in-place use reads such an argument through [`in_place`](Self::in_place).
    pub fn aliased_by(&self, i: usize) -> Option<usize> {
        match self.arg(i) {
            ArgView::Buffer(b) => self.written_alias(i, &b),
            ArgView::Scalar { .. } => None,
        }
    }

    /// An in-place kernel's view (KC4): argument `read` and the written argument `write` name
    /// the same bytes (CUDA's `in` and `out` pointers to one buffer); this block's tile of
    /// `write`, which holds what `read` had before the block wrote it. Panics (a kernel fault)
    /// unless both name exactly the same bytes.
    #[track_caller]
    pub fn in_place<T: Pod>(&self, read: usize, write: usize) -> &'a mut [T] {
        let r = self.buffer::<T>(read);
        let w = self.buffer::<T>(write);
        assert!(
            r.access == Access::Read && r.alloc == w.alloc && r.range == w.range,
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
    #[track_caller]
    pub fn set_condition(&self, i: usize, value: u32) {
        let id = self.scalar::<super::conditional::ConditionId>(i).0;
        assert!(
            self.launch.set_condition(id, value),
            "argument {i} names no live condition (KernelArgs::condition)"
        );
    }

    /// This block's tile of a written buffer argument: elements
    /// `thread_range()` clipped to the buffer. Each tile can be taken once per block.
    #[track_caller]
    pub fn tile_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        self.written::<T>(i, Split::Tile, self.tile.clone(), "tile_mut")
    }

    /// This block's slice of an argument passed with
    /// [`KernelArgs::write_per_block`](crate::KernelArgs::write_per_block)`(buf, k)`:
    /// elements `b * k .. (b + 1) * k` of block `b` (clipped to the buffer), as CUDA's
    /// `out[blockIdx.x]` outputs. Once per block.
    #[track_caller]
    pub fn block_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        let k = match self.arg(i) {
            ArgView::Buffer(BufferView {
                split: Split::PerBlock(k),
                ..
            }) => k,
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
    #[track_caller]
    pub fn whole_mut<T: Pod>(&self, i: usize) -> &'a mut [T] {
        let b = self.buffer::<T>(i);
        let one_block = self.launch.blocks() == 1;
        let want = if one_block && b.access == Access::Write && b.split == Split::Tile {
            Split::Tile
        } else {
            Split::Whole
        };
        self.written::<T>(i, want, 0..u64::MAX, "whole_mut")
    }

    /// Elements `range` (clipped) of written argument `i`, which must have been passed split
    /// as `want`.
    #[track_caller]
    fn written<T: Pod>(&self, i: usize, want: Split, range: Range<u64>, what: &str) -> &'a mut [T] {
        let b = self.buffer::<T>(i);
        let (access, split) = (b.access, b.split);
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
        let n = (b.range.len() / std::mem::size_of::<T>()) as u64;
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
            std::slice::from_raw_parts_mut((b.base.add(b.range.start) as *mut T).add(lo), hi - lo)
        }
    }

    /// A `u32` buffer argument as atomics (flags shared between streams).
    #[track_caller]
    pub fn atomics_u32(&self, i: usize) -> &'a [std::sync::atomic::AtomicU32] {
        let b = self.buffer::<u32>(i);
        assert!(
            b.access == Access::Atomic,
            "argument {i} was not passed with KernelArgs::atomic ({:?})",
            b.access
        );
        // SAFETY: AtomicU32 has the layout of u32; the memory is 4-aligned, live (MM2) and in
        // bounds; within this launch only atomics touch it (the argument is Atomic, no other
        // written argument overlaps it (checked at launch), and an overlapping read argument
        // is never handed out: `input` refuses it and `in_place` needs a `Write`).
        unsafe {
            std::slice::from_raw_parts(
                b.base.add(b.range.start) as *const std::sync::atomic::AtomicU32,
                b.range.len() / 4,
            )
        }
    }

    /// A scalar argument.
    #[track_caller]
    pub fn scalar<T: Pod>(&self, i: usize) -> T {
        match self.arg(i) {
            ArgView::Scalar { bytes, ty, ty_name } => {
                assert!(
                    ty == TypeId::of::<T>(),
                    "argument {i} holds {ty_name}, not {}",
                    std::any::type_name::<T>()
                );
                bytemuck::pod_read_unaligned(bytes)
            }
            ArgView::Buffer(_) => panic!("argument {i} is a buffer, not a scalar"),
        }
    }
}
