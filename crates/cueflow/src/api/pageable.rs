//! Pageable host memory for graph copies ([`PageableBuffer`]): what CUDA programs hand memcpy
//! nodes and captured `cudaMemcpyAsync` calls when they copy to or from `malloc`ed memory.

use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::memory::{PinnedBuffer, PinnedSlice, PinnedSliceMut};
use crate::error::{Error, Result};

/// Host memory the program allocated normally (not page-locked), that copy nodes of graphs
/// ([`Graph::add_copy_h2d`](crate::Graph::add_copy_h2d) and the others) and copies captured
/// from a stream take as CUDA's memcpy nodes take pageable memory (simpleCudaGraphs,
/// jacobiCudaGraphs).
///
/// The buffer owns its memory (a `Vec` moves into it) and shares it with the graphs and
/// operations that copy it: the memory lives until the last of them is gone (MM2, GR4), so no
/// graph can outlive what it copies. Otherwise it is used as a [`PinnedBuffer`] (it
/// dereferences to one): the host reads and writes it through
/// [`PinnedBuffer::read`] and [`PinnedBuffer::write`], which wait for the device work on its
/// bytes (MM3), and a graph launch is refused while such a view lives. It serves every device
/// (portable); it is no kernel argument (not mapped).
///
/// Copies are asynchronous on the host backend. On CUDA they are the driver's pageable
/// copies: a graph's copy node reads or writes the memory when it runs, and a stream copy
/// into it returns once it is done (as `cudaMemcpyAsync` into pageable memory does) — for
/// overlap, use pinned memory.
///
/// ```
/// use cueflow::{Device, DeviceBuffer, Graph, PageableBuffer, Stream};
/// let dev = Device::host()?;
/// let input = PageableBuffer::from_vec(&dev, vec![2.0f32; 256])?;
/// let mut output = PageableBuffer::<f32>::new(&dev, 256)?;
/// let d = DeviceBuffer::<f32>::new(&dev, 256)?;
/// let mut g = Graph::new(&dev);
/// let up = g.add_copy_h2d(&[], &d, &input)?;
/// g.add_copy_d2h(&[up], &mut output, &d)?;
/// let s = Stream::new(&dev)?;
/// g.instantiate()?.launch(&s)?;
/// assert_eq!(output.read()?[255], 2.0); // waits for the graph's copy
/// # Ok::<(), cueflow::Error>(())
/// ```
pub struct PageableBuffer<T> {
    buf: PinnedBuffer<T>,
}

impl<T: Pod + Send + Sync> PageableBuffer<T> {
    /// The memory of `data`, which the buffer owns from now on.
    pub fn from_vec(device: &Device, mut data: Vec<T>) -> Result<Self> {
        let (ptr, len) = (data.as_mut_ptr(), data.len());
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "pageable host memory",
                bytes: usize::MAX,
            })?;
        // SAFETY: the Vec's buffer stays where it is and valid while the Vec lives; the Vec
        // moves into the allocation, which drops it only when its last holder is gone, and
        // the program reaches the memory only through this buffer's guarded views.
        let alloc = unsafe {
            crate::core::memory::pageable::pageable(
                ptr as *mut u8,
                bytes,
                device.id(),
                Box::new(data),
            )
        };
        Ok(PageableBuffer {
            buf: PinnedBuffer::from_alloc(device, alloc, len),
        })
    }

    /// `len` zeroed elements.
    pub fn new(device: &Device, len: usize) -> Result<Self> {
        Self::from_vec(device, vec![T::zeroed(); len])
    }
}

impl<T> Deref for PageableBuffer<T> {
    type Target = PinnedBuffer<T>;
    fn deref(&self) -> &PinnedBuffer<T> {
        &self.buf
    }
}

impl<T> DerefMut for PageableBuffer<T> {
    fn deref_mut(&mut self) -> &mut PinnedBuffer<T> {
        &mut self.buf
    }
}

impl<'a, T: Pod> From<&'a PageableBuffer<T>> for PinnedSlice<'a, T> {
    fn from(buf: &'a PageableBuffer<T>) -> Self {
        (&buf.buf).into()
    }
}

impl<'a, T: Pod> From<&'a mut PageableBuffer<T>> for PinnedSlice<'a, T> {
    fn from(buf: &'a mut PageableBuffer<T>) -> Self {
        (&buf.buf).into()
    }
}

impl<'a, T: Pod> From<&'a mut PageableBuffer<T>> for PinnedSliceMut<'a, T> {
    fn from(buf: &'a mut PageableBuffer<T>) -> Self {
        (&mut buf.buf).into()
    }
}

impl<T> std::fmt::Debug for PageableBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PageableBuffer<{}>[{}] of {:?}",
            std::any::type_name::<T>(),
            self.buf.len_any(),
            self.buf.alloc_any()
        )
    }
}
