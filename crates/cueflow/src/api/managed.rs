//! Managed (unified) memory (HM4): [`ManagedBuffer`], valid on the host and on every device,
//! with prefetches and attachments as stream operations ([`Stream::prefetch`],
//! [`Stream::attach_managed`]) and advice ([`ManagedBuffer::advise`]).

use std::ops::{Deref, DerefMut, RangeBounds};
use std::panic::Location;

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::memory::{PinnedBuffer, PinnedSlice, PinnedSliceMut};
use crate::api::stream::Stream;
use crate::error::{Error, Result};
use crate::types::{Advice, AttachMode, MemLocation};

/// Managed memory (`cudaMallocManaged`): one allocation valid on the host and on every
/// device (HM4).
///
/// It is a [`PinnedBuffer`] (it dereferences to one) that is also portable and mapped: every
/// device's streams copy to and from it, kernels take it with
/// [`KernelArgs::read_mapped`](crate::KernelArgs::read_mapped) and
/// [`write_mapped`](crate::KernelArgs::write_mapped), and host access through
/// [`PinnedBuffer::read`] and [`PinnedBuffer::write`] waits for the device work that touches
/// the bytes (MM3). On a device without concurrent managed access
/// ([`DeviceProperties::concurrent_managed_access`](crate::DeviceProperties::concurrent_managed_access)),
/// host access first waits as CUDA requires: for the whole device while the memory is
/// attached globally, for one stream after [`Stream::attach_managed`] with
/// [`AttachMode::Single`], for nothing when attached to the host.
///
/// On the host backend all memory is host memory: prefetches and attachments are stream
/// operations that move nothing, and advice is accepted and changes nothing (it changes only
/// speed on a GPU).
///
/// ```
/// # use cueflow::{Device, ManagedBuffer, MemLocation, Stream};
/// let dev = Device::from_env()?;
/// let s = Stream::new(&dev)?;
/// let mut m = ManagedBuffer::<f32>::new(&dev, 1024)?;
/// m.write()?.fill(2.0);
/// s.prefetch(&m, .., MemLocation::Device)?;
/// s.prefetch(&m, .., MemLocation::Host)?;
/// assert_eq!(m.read()?[0], 2.0);
/// # Ok::<(), cueflow::Error>(())
/// ```
pub struct ManagedBuffer<T> {
    buf: PinnedBuffer<T>,
}

impl<T: Pod> ManagedBuffer<T> {
    /// `len` zeroed elements of managed memory attached globally (`cudaMemAttachGlobal`).
    pub fn new(device: &Device, len: usize) -> Result<Self> {
        Self::with_attach(device, len, AttachMode::Global)
    }

    /// `len` zeroed elements attached globally or to the host (`cudaMemAttachHost`); attach
    /// to one stream with [`Stream::attach_managed`].
    pub fn with_attach(device: &Device, len: usize, attach: AttachMode) -> Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "managed memory",
                bytes: usize::MAX,
            })?;
        let alloc = device.inner.alloc_managed(bytes, attach)?;
        Ok(ManagedBuffer {
            buf: PinnedBuffer::from_alloc(device, alloc, len),
        })
    }

    /// Give `advice` about elements `range` for `device` (`cudaMemAdvise`, HM4). On the host
    /// backend it is accepted and changes nothing.
    pub fn advise(
        &self,
        range: impl RangeBounds<usize>,
        advice: Advice,
        device: &Device,
    ) -> Result<()> {
        let mem = self.buf.range(range)?.mem();
        if device.properties().backend != self.buf.device().properties().backend {
            return Err(Error::InvalidHandle(
                "ManagedBuffer::advise for a device of another backend".into(),
            ));
        }
        device.inner.advise(&mem, advice)
    }
}

impl<T> Deref for ManagedBuffer<T> {
    type Target = PinnedBuffer<T>;
    fn deref(&self) -> &PinnedBuffer<T> {
        &self.buf
    }
}

impl<T> DerefMut for ManagedBuffer<T> {
    fn deref_mut(&mut self) -> &mut PinnedBuffer<T> {
        &mut self.buf
    }
}

/// A managed buffer as a declared access of a host task or an external operation
/// ([`HostTask::reads`](crate::HostTask::reads),
/// [`External::reads_pinned`](crate::External::reads_pinned)).
impl<'a, T: Pod> From<&'a ManagedBuffer<T>> for PinnedSlice<'a, T> {
    fn from(m: &'a ManagedBuffer<T>) -> Self {
        PinnedSlice::from(&m.buf)
    }
}

/// A managed buffer written by a host task or an external operation.
impl<'a, T: Pod> From<&'a mut ManagedBuffer<T>> for PinnedSliceMut<'a, T> {
    fn from(m: &'a mut ManagedBuffer<T>) -> Self {
        PinnedSliceMut::from(&mut m.buf)
    }
}

impl Stream {
    /// Migrate elements `range` of `buf` to this stream's device ([`MemLocation::Device`]),
    /// to another device of the same backend ([`Device::mem_location`] of it, as
    /// `cudaMemPrefetchAsync` takes any destination device) or to the host, in stream order
    /// (`cudaMemPrefetchAsync`, HM4). Refused with [`Error::Unsupported`] for a device
    /// without concurrent managed access (as CUDA refuses it), with nothing enqueued.
    #[track_caller]
    pub fn prefetch<T: Pod>(
        &self,
        buf: &ManagedBuffer<T>,
        range: impl RangeBounds<usize>,
        to: MemLocation,
    ) -> Result<()> {
        let mem = buf.range(range)?.mem();
        self.check_mem(&mem, "Stream::prefetch")?;
        self.core.managed_op(
            &self.device.inner.core,
            &mem,
            crate::types::ManagedOp::Prefetch(to),
            Location::caller(),
        )
    }

    /// Attach `buf` in stream order (`cudaStreamAttachMemAsync`, HM4): globally, to the
    /// host, or to this stream alone ([`AttachMode::Single`]); decides which work host
    /// access waits for on a device without concurrent managed access.
    #[track_caller]
    pub fn attach_managed<T: Pod>(&self, buf: &ManagedBuffer<T>, mode: AttachMode) -> Result<()> {
        let mem = buf.range(..)?.mem();
        self.check_mem(&mem, "Stream::attach_managed")?;
        self.core.managed_op(
            &self.device.inner.core,
            &mem,
            crate::types::ManagedOp::Attach(mode),
            Location::caller(),
        )
    }
}

impl<T> std::fmt::Debug for ManagedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ManagedBuffer<{}>[{}] of {:?}",
            std::any::type_name::<T>(),
            self.buf.len_any(),
            self.buf.alloc_any()
        )
    }
}
