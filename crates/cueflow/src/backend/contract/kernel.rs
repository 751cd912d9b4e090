//! Kernels as a backend receives them: what a kernel is made of ([`KernelInner`]: a host
//! implementation and CUDA code), a launch and its validated arguments ([`Launch`]), and what a
//! host kernel's block reads of a launch (its [`LaunchView`]; the block's own view,
//! `BlockArgs`, is a public type of `types::host_kernel`).

use std::any::{Any, TypeId};
use std::sync::{Arc, OnceLock};

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
    pub loaded: LoadedForms,
}

/// A loaded form.
type Form = Arc<dyn Any + Send + Sync>;

/// A kernel's backend-loaded forms, by device id. The first one loaded is read without a lock
/// (every launch asks: the lock cost two locked instructions a launch); the others are behind
/// one. Device ids are unique in the process, so the first form of a device that is gone
/// stays (a few bytes) but is never matched again.
#[derive(Default)]
pub(crate) struct LoadedForms {
    first: OnceLock<(u64, Form)>,
    rest: Mutex<Vec<(u64, Form)>>,
}

impl LoadedForms {
    /// Forget the forms of `device_id` (its device is gone) that can be forgotten.
    pub fn forget(&self, device_id: u64) {
        self.rest.lock().retain(|(d, _)| *d != device_id);
    }

    /// The first form, when it is `device_id`'s.
    #[inline]
    fn first_for(&self, device_id: u64) -> Option<&Form> {
        self.first
            .get()
            .filter(|(d, _)| *d == device_id)
            .map(|(_, f)| f)
    }
}

impl KernelInner {
    /// The loaded form for `device_id`, loading it with `load` the first time.
    #[inline]
    pub(crate) fn loaded_for<T: Any + Send + Sync>(
        &self,
        device_id: u64,
        load: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        match self.loaded.first_for(device_id).and_then(form_of) {
            Some(v) => Ok(v), // The common case: loaded for the first device that used it.
            None => self.load_for(device_id, load),
        }
    }

    /// [`loaded_for`](Self::loaded_for) past the lock-free place.
    #[inline(never)]
    fn load_for<T: Any + Send + Sync>(
        &self,
        device_id: u64,
        load: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut l = self.loaded.rest.lock();
        if let Some(v) = self.loaded.first_for(device_id).and_then(form_of) {
            return Ok(v); // Loaded by another thread meanwhile.
        }
        if let Some(v) = l
            .iter()
            .filter(|(d, _)| *d == device_id)
            .find_map(|(_, f)| form_of(f))
        {
            return Ok(v);
        }
        let v = Arc::new(load()?);
        let form: Form = v.clone();
        // Loads happen under the lock, so the first one of all takes the lock-free place.
        if let Err((d, form)) = self.loaded.first.set((device_id, form)) {
            l.push((d, form));
        }
        Ok(v)
    }

    /// What [`loaded_for`](Self::loaded_for) keeps for `device_id`, if it is there now: no
    /// loading, and no waiting for a load another thread is doing.
    pub(crate) fn loaded_now<T: Any + Send + Sync>(&self, device_id: u64) -> Option<Arc<T>> {
        if let Some(v) = self.loaded.first_for(device_id).and_then(form_of) {
            return Some(v);
        }
        let l = self.loaded.rest.try_lock()?;
        l.iter()
            .filter(|(d, _)| *d == device_id)
            .find_map(|(_, f)| form_of(f))
    }
}

/// `f` as a `T`, if it is one.
#[inline]
fn form_of<T: Any + Send + Sync>(f: &Form) -> Option<Arc<T>> {
    // One type check (inside `downcast`); a form of another type is rare (the host and CUDA
    // forms of one kernel), and its clone is only a reference count.
    f.clone().downcast::<T>().ok()
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
    /// Replacing them keeps each buffer's memory kind ([`set_args`](Self::set_args) for any
    /// other change): `host_memory` is computed from them once.
    pub args: Arc<[KernelArg]>,
    /// Some buffer argument is memory the host reaches (mapped pinned, registered or managed):
    /// the tracking layer orders the launch with the host's access to it (MM3). Known when the arguments are, so a launch
    /// over device memory alone does not scan its arguments again at every layer.
    host_memory: bool,
}

/// A launch's argument list as the API's validation leaves it: whether some buffer argument
/// is memory the host reaches was found on the way ([`Launch::host_memory`]).
pub(crate) struct CheckedArgs {
    pub list: Arc<[KernelArg]>,
    pub host_memory: bool,
}

/// True if some buffer of `args` is host memory.
fn any_host_memory(args: &[KernelArg]) -> bool {
    args.iter()
        .any(|a| matches!(a, KernelArg::Buffer { mem, .. } if mem.kind().is_host()))
}

impl Launch {
    /// A launch built outside the API's validation (tests).
    #[cfg(test)]
    pub fn new(
        kernel: Arc<KernelInner>,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: Arc<[KernelArg]>,
    ) -> Launch {
        let host_memory = any_host_memory(&args);
        let args = CheckedArgs {
            list: args,
            host_memory,
        };
        Launch::with_checked_args(kernel, grid, block, shared_bytes, args)
    }

    /// A launch over arguments the API's validation checked, host memory included (it visits
    /// every buffer argument anyway).
    pub fn with_checked_args(
        kernel: Arc<KernelInner>,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        args: CheckedArgs,
    ) -> Launch {
        debug_assert_eq!(args.host_memory, any_host_memory(&args.list));
        Launch {
            kernel,
            grid,
            block,
            shared_bytes,
            args: args.list,
            host_memory: args.host_memory,
        }
    }

    /// Some buffer argument is host memory.
    #[inline]
    pub fn host_memory(&self) -> bool {
        debug_assert_eq!(
            self.host_memory,
            any_host_memory(&self.args),
            "args replaced"
        );
        self.host_memory
    }

    /// Replace the arguments, whatever memory they name.
    pub fn set_args(&mut self, args: Arc<[KernelArg]>) {
        self.host_memory = any_host_memory(&args);
        self.args = args;
    }

    /// The arguments with each buffer's memory replaced by `f`'s (scalars as they are).
    pub fn args_with_memory(&self, f: impl Fn(&MemRef) -> MemRef) -> Arc<[KernelArg]> {
        let args: Vec<KernelArg> = self
            .args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer {
                    mem,
                    access,
                    elem,
                    elem_name,
                    split,
                } => KernelArg::Buffer {
                    mem: f(mem),
                    access: *access,
                    elem: *elem,
                    elem_name,
                    split: *split,
                },
                other => other.clone(),
            })
            .collect();
        args.into()
    }

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::KernelInner;

    fn kernel() -> KernelInner {
        KernelInner {
            name: "k".into(),
            host: None,
            cuda: None,
            loaded: Default::default(),
        }
    }

    #[test]
    fn each_device_loads_once_and_a_forgotten_device_loads_again() {
        let k = kernel();
        let a1 = k.loaded_for(1, || Ok(10u32)).unwrap();
        let a2 = k
            .loaded_for(1, || -> crate::Result<u32> { panic!("loaded twice") })
            .unwrap();
        assert!(Arc::ptr_eq(&a1, &a2), "the first device's form, lock-free");
        let b1 = k.loaded_for(2, || Ok(20u32)).unwrap();
        assert_eq!((*b1, *k.loaded_now::<u32>(2).unwrap()), (20, 20));
        assert_eq!(*k.loaded_now::<u32>(1).unwrap(), 10);
        assert!(
            k.loaded_now::<u64>(1).is_none(),
            "another type is not this form"
        );
        k.loaded.forget(2);
        k.loaded.forget(1);
        assert!(k.loaded_now::<u32>(2).is_none());
        assert_eq!(*k.loaded_for(2, || Ok(21u32)).unwrap(), 21, "loaded again");
        assert!(
            k.loaded_now::<u32>(3).is_none(),
            "a new device matches no other's form"
        );
        assert_eq!(*k.loaded_for(3, || Ok(30u32)).unwrap(), 30);
    }
}
