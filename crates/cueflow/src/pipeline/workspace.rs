//! What a pipeline keeps between runs besides its streams: the device memory its chunks are
//! copied into (when the caller gives none), and each stream's scratch.

use std::sync::Arc;

use bytemuck::Pod;

use crate::backend::contract::memory::Allocation;
use crate::{Device, DeviceBuffer, Error, Result, Stream};

/// Device memory kept between runs, in two slots (a run's input and, when its output has
/// another element type, its output). A slot grows when a run needs more and is otherwise
/// reused, whatever the element type: device memory is bytes, and every allocation is aligned
/// to at least 256 bytes (CUDA's guarantee), so any `Pod` type may view it.
#[derive(Default)]
pub(crate) struct Workspace {
    slots: [Option<Arc<Allocation>>; 2],
}

impl Workspace {
    /// A view of `len` elements of `T` at the start of `slot` (0 or 1), allocating first if the
    /// slot is empty or too small. The old allocation lives on until the work that uses it is
    /// done (MM2).
    pub fn view<T: Pod>(
        &mut self,
        dev: &Device,
        slot: usize,
        len: usize,
    ) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::OutOfMemory {
                what: "pipeline device buffer size overflows",
                bytes: usize::MAX,
            })?;
        let fits = matches!(&self.slots[slot], Some(a) if a.bytes >= bytes);
        if !fits {
            self.slots[slot] = Some(DeviceBuffer::<u8>::new(dev, bytes)?.into_alloc());
        }
        let alloc = self.slots[slot].clone().expect("allocated above");
        Ok(DeviceBuffer::from_alloc(dev, alloc, len))
    }
}

/// The factory of a pipeline's per-stream scratch: given the stream the scratch belongs to and
/// the length of the longest chunk it will serve.
pub(crate) type MakeScratch<S> = Box<dyn FnMut(&Stream, usize) -> Result<S> + Send>;

/// One scratch value per pipeline stream, all made for chunks of up to `len` elements.
pub(crate) struct ScratchPool<S> {
    make: MakeScratch<S>,
    len: usize,
    values: Vec<S>,
}

impl<S> ScratchPool<S> {
    pub fn new(make: MakeScratch<S>) -> Self {
        ScratchPool {
            make,
            len: 0,
            values: Vec::new(),
        }
    }

    /// Make sure `streams` each have scratch for chunks of `max_len` elements: all are made
    /// again when chunks grew, or shrank below half the length the scratch was made for (as
    /// after `auto`'s calibration over the whole buffer: keeping that would hold a whole
    /// buffer per stream), and streams without scratch get theirs.
    pub fn ensure(&mut self, streams: &[Stream], max_len: usize) -> Result<()> {
        if max_len > self.len || max_len < self.len / 2 {
            self.values.clear();
            self.len = max_len;
        }
        while self.values.len() < streams.len() {
            let s = &streams[self.values.len()];
            self.values.push((self.make)(s, self.len)?);
        }
        Ok(())
    }

    /// The scratch of stream `i` (after [`ensure`](Self::ensure) covered it).
    pub fn get(&self, i: usize) -> &S {
        &self.values[i]
    }
}
