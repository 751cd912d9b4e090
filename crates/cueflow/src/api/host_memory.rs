//! Registered and mapped host memory (HM1–HM3): [`RegisteredBuffer`] page-locks memory the
//! program owns; [`PinnedBuffer`]s allocated or registered with [`PinnedFlags::mapped`] are
//! kernel arguments read and written in place ([`KernelArgs::read_mapped`],
//! [`KernelArgs::write_mapped`]); portable ones serve every device's streams (HM2), which with
//! unified addressing is all of them.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::kernel::KernelArgs;
use crate::api::memory::{PinnedBuffer, PinnedSlice, PinnedSliceMut};
use crate::core::memory::host_mem::dropping_own_handle;
use crate::error::{Error, Result};
use crate::types::{Access, MemKind, PinnedFlags};

/// Host memory the program owns, page-locked for the life of this registration
/// (`cudaHostRegister`, HM1).
///
/// It is a [`PinnedBuffer`] (it dereferences to one) for as long as it lives: copies between
/// it and the device are asynchronous (CP2), host access through [`PinnedBuffer::read`] and
/// [`PinnedBuffer::write`] waits for the device work on the bytes (MM3), and with
/// [`PinnedFlags::portable`] and [`PinnedFlags::mapped`] it is portable (HM2) and mapped
/// (HM3). On a device with unified addressing it is portable without the flag, as
/// `cudaHostRegister` makes it there. The registration ends (`cudaHostUnregister`) when this handle and every operation
/// that uses it are gone, never under running work (MM2); [`unregister`](Self::unregister)
/// ends the program's part and waits for the device work that uses the memory.
///
/// ```
/// # use cueflow::{Device, PinnedFlags, RegisteredBuffer, Stream};
/// let dev = Device::from_env()?;
/// let s = Stream::new(&dev)?;
/// let mut host = RegisteredBuffer::register(&dev, vec![1.0f32; 1024], PinnedFlags::default())?;
/// let d = cueflow::DeviceBuffer::<f32>::new(&dev, 1024)?;
/// s.copy_h2d(&d, &*host)?; // asynchronous: the memory is page-locked
/// s.copy_d2h(&mut *host, &d)?;
/// host.unregister()?; // waits for both copies
/// # Ok::<(), cueflow::Error>(())
/// ```
pub struct RegisteredBuffer<T> {
    /// Dropped only in [`Drop`], as the program's own drop of the memory (a release it causes
    /// may wait for the device there, as `cudaHostUnregister` does).
    buf: ManuallyDrop<PinnedBuffer<T>>,
}

impl<T> Drop for RegisteredBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: `buf` is dropped once, here, and not used after.
        dropping_own_handle(|| unsafe { ManuallyDrop::drop(&mut self.buf) });
    }
}

impl<T: Pod + Send + Sync> RegisteredBuffer<T> {
    /// Register the memory of `data`, which the registration owns until it ends (then the
    /// `Vec` is dropped). An empty `Vec` is refused (HM1, `cudaHostRegister` refuses 0 bytes).
    pub fn register(device: &Device, mut data: Vec<T>, flags: PinnedFlags) -> Result<Self> {
        let (ptr, len) = (data.as_mut_ptr(), data.len());
        // SAFETY: the Vec's buffer stays where it is and valid until the owner (the Vec
        // itself, moved into the registration) is dropped, after the registration ended; no
        // one else can touch it (the Vec is moved away from the program).
        unsafe { Self::register_inner(device, ptr, len, flags, Box::new(data)) }
    }

    /// Register `len` elements at `ptr` that the program owns otherwise (an `mmap`, a
    /// buffer of another library). Registering bytes that are registered already is refused
    /// with [`Error::NotPermitted`] (HM1, ER3), as CUDA refuses it.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid, aligned memory of `T`s that nothing but this
    /// registration touches until the registration ended. [`unregister`](Self::unregister)
    /// returns once it has (a graph keeps the registration while it exists). Dropping the
    /// handle ends it in the drop only when no operation or graph holds the memory any more;
    /// otherwise it ends some time after the last of them is retired, which no call reports,
    /// so call `unregister` before freeing memory registered this way.
    pub unsafe fn register_raw(
        device: &Device,
        ptr: *mut T,
        len: usize,
        flags: PinnedFlags,
    ) -> Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { Self::register_inner(device, ptr, len, flags, Box::new(())) }
    }

    /// # Safety
    /// As [`register_raw`](Self::register_raw), with `owner` keeping the memory valid.
    unsafe fn register_inner(
        device: &Device,
        ptr: *mut T,
        len: usize,
        flags: PinnedFlags,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "registered host memory",
                bytes: usize::MAX,
            })?;
        // SAFETY: forwarded from the caller.
        let alloc = unsafe {
            device
                .inner
                .register_host(ptr as *mut u8, bytes, flags, owner)?
        };
        Ok(RegisteredBuffer {
            buf: ManuallyDrop::new(PinnedBuffer::from_alloc(device, alloc, len)),
        })
    }

    /// End the registration (`cudaHostUnregister`), waiting first for every device operation
    /// that may still touch the memory (HM1, MM2): when this returns `Ok`, no enqueued work
    /// uses it, the memory is unlocked, and a `Vec` it owned is dropped; the same bytes may be
    /// registered again at once. Operations that completed but were not retired yet are
    /// retired: with a synchronization of the registration's device, then, if that was not
    /// enough, by asking every other device to let go of what it finished (its streams may
    /// use portable memory, HM2; that waits for no other work, so a finished operation
    /// another device keeps in the same batch as unfinished work can still make this
    /// refuse).
    ///
    /// A graph that captured the memory keeps the registration while it exists (GR4): then
    /// this returns [`Error::NotPermitted`] (`HM1`), and the registration ends when the last
    /// such graph is dropped. A sticky device error is returned after the wait.
    #[track_caller]
    pub fn unregister(mut self) -> Result<()> {
        // A write view of all of it waits for every device access (MM3).
        drop(self.buf.write()?);
        if std::sync::Arc::strong_count(self.buf.alloc()) > 1 {
            // Finished work the backend has not retired yet still holds the memory. Waiting
            // for it must not order other streams' work after this call: whether anything
            // is left to retire depends on timing, and what the sanitizer accepts must not.
            let dev = &self.buf.device().inner;
            dev.settle("RegisteredBuffer::unregister")?;
            if std::sync::Arc::strong_count(self.buf.alloc()) > 1 {
                // Another device's streams used the memory (a portable registration): the
                // write view waited for that work; its device may not have retired it yet.
                dev.retire_finished_elsewhere();
            }
        }
        let others = std::sync::Arc::strong_count(self.buf.alloc()) - 1;
        if others > 0 {
            return Err(Error::NotPermitted {
                rule: "HM1",
                what: format!(
                    "RegisteredBuffer::unregister: {others} graph(s) or operations still hold \
                     the memory; the registration ends when they are dropped"
                ),
            });
        }
        drop(self); // The last holder: the registration ends here.
        Ok(())
    }
}

impl<T> Deref for RegisteredBuffer<T> {
    type Target = PinnedBuffer<T>;
    fn deref(&self) -> &PinnedBuffer<T> {
        &self.buf
    }
}

impl<T> DerefMut for RegisteredBuffer<T> {
    fn deref_mut(&mut self) -> &mut PinnedBuffer<T> {
        &mut self.buf
    }
}

/// A registration as a declared access of a host task or an external operation.
impl<'a, T: Pod> From<&'a RegisteredBuffer<T>> for PinnedSlice<'a, T> {
    fn from(r: &'a RegisteredBuffer<T>) -> Self {
        PinnedSlice::from(&*r.buf)
    }
}

/// A registration written by a host task or an external operation.
impl<'a, T: Pod> From<&'a mut RegisteredBuffer<T>> for PinnedSliceMut<'a, T> {
    fn from(r: &'a mut RegisteredBuffer<T>) -> Self {
        PinnedSliceMut::from(&mut *r.buf)
    }
}

impl<T: Pod> PinnedBuffer<T> {
    /// True for memory allocated or registered as mapped (HM3): kernels may use it in place.
    pub fn is_mapped(&self) -> bool {
        self.alloc().host.mapped
    }

    /// True for portable memory (HM2): every device's streams may use it. All pinned and
    /// registered memory of a device with unified addressing is.
    pub fn is_portable(&self) -> bool {
        self.alloc().host.portable
    }

    /// True for registered memory (HM1).
    pub fn is_registered(&self) -> bool {
        self.alloc().kind == MemKind::Registered
    }

    /// The address kernels use for the first element (`cudaHostGetDevicePointer`): the
    /// device view of mapped memory (on unified-addressing systems the host address itself),
    /// `None` for memory that is not mapped (HM3).
    pub fn device_addr(&self) -> Option<u64> {
        self.is_mapped().then(|| self.alloc().kernel_addr())
    }
}

impl KernelArgs {
    /// Mapped host memory the kernel only reads in place, over the bus on a GPU (HM3). A
    /// buffer that is not mapped is refused at launch (ER3). Host kernels read it with
    /// [`BlockArgs::input`](crate::BlockArgs::input), as any buffer.
    pub fn read_mapped<T: Pod>(self, buf: &PinnedBuffer<T>) -> Self {
        self.mem_arg::<T>(buf.whole_mem(), Access::Read)
    }

    /// Mapped host memory the kernel writes in place (HM3; host kernels: each block its own
    /// tile, [`BlockArgs::tile_mut`](crate::BlockArgs::tile_mut)). The exclusive borrow keeps
    /// host views of the buffer from existing while the launch is made; afterwards
    /// [`PinnedBuffer::read`] waits for the kernel (MM3).
    pub fn write_mapped<T: Pod>(self, buf: &mut PinnedBuffer<T>) -> Self {
        self.mem_arg::<T>(buf.whole_mem(), Access::Write)
    }
}

impl<T> std::fmt::Debug for RegisteredBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RegisteredBuffer<{}>[{}] of {:?}",
            std::any::type_name::<T>(),
            self.buf.len_any(),
            self.buf.alloc_any()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::memory::DeviceBuffer;
    use crate::api::stream::Stream;
    use crate::backend::contract::memory::Allocation;
    use crate::types::MemKind;
    use crate::LaunchConfig;

    /// HM2 on a device without unified addressing (no host device is one, so the allocation
    /// is made as such a device makes it: not portable): another device's streams refuse it,
    /// for a copy and as a kernel argument, and the refusal names the fix.
    #[test]
    fn non_portable_memory_is_refused_naming_the_fix() {
        let (a, b) = (Device::host().unwrap(), Device::host().unwrap());
        let mut mem = vec![0.0f32; 64];
        let addr = mem.as_mut_ptr() as usize as u64;
        let alloc = Allocation::borrowed(addr, 256, MemKind::Pinned, a.id());
        let mut p = PinnedBuffer::<f32>::from_alloc(&a, alloc, 64);
        assert!(!p.is_portable());
        let sb = Stream::new(&b).unwrap();
        let db = DeviceBuffer::<f32>::new(&b, 64).unwrap();
        let names_fix = |e: &Error| matches!(e, Error::InvalidHandle(m) if m.contains("PinnedFlags::default().portable()"));
        let e = sb.copy_d2h(&mut p, &db).unwrap_err();
        assert!(names_fix(&e), "{e}");
        let e = sb
            .launch(
                &crate::kernels::FILL_F32,
                LaunchConfig::for_elements(64, 64),
                KernelArgs::new()
                    .write_mapped(&mut p)
                    .scalar(1.0f32)
                    .scalar(64u64),
            )
            .unwrap_err();
        assert!(names_fix(&e), "{e}");
        assert!(sb.query().unwrap(), "nothing was enqueued");
        drop(p);
        drop(mem);
    }
}
