//! Kernels as a backend receives them: what a kernel is made of ([`KernelInner`]: a host
//! implementation and CUDA code), a launch and its validated arguments ([`Launch`]), and what a
//! host kernel's block reads of a launch (its [`LaunchView`]; the block's own view,
//! `BlockArgs`, is a public type of `types::host_kernel`).

use std::any::{Any, TypeId};
use std::sync::Arc;

use parking_lot::Mutex;

use super::memory::MemRef;
use crate::error::Result;
use crate::types::host_kernel::{ArgView, BufferView, LaunchView, Split};
use crate::types::Access;
use crate::types::{CudaCode, HostKernelFn};

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

    /// What [`loaded_for`](Self::loaded_for) keeps for `device_id`, if it is there now: no
    /// loading, and no waiting for a load another thread is doing.
    pub(crate) fn loaded_now<T: Any + Send + Sync>(&self, device_id: u64) -> Option<Arc<T>> {
        let l = self.loaded.try_lock()?;
        let (_, v) = l.iter().find(|(d, _)| *d == device_id)?;
        v.clone().downcast::<T>().ok()
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
    /// The read-declared buffer arguments, with their indices, whose bytes no written or
    /// atomic argument of the launch overlaps: a kernel that keeps its declarations leaves
    /// their bytes as they were (AC7).
    pub fn unaliased_reads(&self) -> impl Iterator<Item = (usize, &MemRef)> {
        let written = |m: &MemRef| {
            self.args.iter().any(|b| {
                matches!(b, KernelArg::Buffer { mem, access, .. }
                    if *access != Access::Read && mem.overlaps(m))
            })
        };
        self.args
            .iter()
            .enumerate()
            .filter_map(move |(i, a)| match a {
                KernelArg::Buffer {
                    mem,
                    access: Access::Read,
                    ..
                } if mem.len > 0 && !written(mem) => Some((i, mem)),
                _ => None,
            })
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

/// What a host kernel's block reads of a launch (`types::host_kernel`).
impl LaunchView for Launch {
    fn kernel_name(&self) -> &str {
        &self.kernel.name
    }

    fn blocks(&self) -> u64 {
        Launch::blocks(self)
    }

    fn arg_count(&self) -> usize {
        self.args.len()
    }

    fn arg(&self, i: usize) -> ArgView<'_> {
        match &self.args[i] {
            KernelArg::Buffer {
                mem,
                access,
                elem,
                elem_name,
                split,
            } => ArgView::Buffer(BufferView {
                alloc: Arc::as_ptr(&mem.alloc) as usize,
                base: mem.alloc.host_ptr(),
                range: mem.range(),
                access: *access,
                elem: *elem,
                elem_name,
                split: *split,
            }),
            KernelArg::Scalar {
                bytes,
                size,
                ty,
                ty_name,
            } => ArgView::Scalar {
                bytes: &bytes[..*size],
                ty: *ty,
                ty_name,
            },
        }
    }

    fn set_condition(&self, id: u64, value: u32) -> bool {
        super::conditional::set_condition(id, value)
    }
}
