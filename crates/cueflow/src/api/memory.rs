//! Memory: [`DeviceBuffer`] (device memory, cheap-clone handles and sub-range views) and
//! [`PinnedBuffer`] (page-locked host memory that the host can only touch when no device work
//! on it may be running, MM3). Plain Rust slices are pageable host memory (CP3).

use std::marker::PhantomData;
use std::ops::{Bound, Deref, DerefMut, Range, RangeBounds};
use std::panic::Location;
use std::sync::Arc;

use bytemuck::Pod;

use crate::api::device::Device;
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::core::memory::alloc::HostView;
use crate::error::{Error, Result};
use crate::types::Access;
use crate::types::PinnedFlags;

fn resolve(range: impl RangeBounds<usize>, len: usize, what: &str) -> Result<Range<usize>> {
    let lo = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if lo > hi || hi > len {
        return Err(Error::bounds(
            "CP4",
            format!("{what}: range {lo}..{hi} is outside a buffer of {len} elements"),
        ));
    }
    Ok(lo..hi)
}

fn byte_len<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(Error::OutOfMemory {
            what: "buffer size overflows",
            bytes: usize::MAX,
        })
}

/// Device memory holding `len` elements of `T`, or a view of part of such memory.
///
/// Cloning and [`slice`](Self::slice) give more handles to the same memory; the memory lives
/// until every handle and every operation using it is gone (MM2). Chunks of one buffer can be
/// used by different streams independently.
pub struct DeviceBuffer<T> {
    device: Device,
    alloc: Arc<Allocation>,
    /// First element of this view within the allocation.
    offset: usize,
    len: usize,
    /// For memory a graph allocates (GR7, GR10): the program's hold on it, shared by its
    /// handles; the memory is freed when the last goes (`core::graphs::mem` rule 4).
    hold: Option<Arc<dyn std::any::Any + Send + Sync>>,
    _t: PhantomData<T>,
}

impl<T> Clone for DeviceBuffer<T> {
    fn clone(&self) -> Self {
        DeviceBuffer {
            device: self.device.clone(),
            alloc: self.alloc.clone(),
            offset: self.offset,
            len: self.len,
            hold: self.hold.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocate `len` elements synchronously (cudaMalloc). Contents are unspecified (zero on the
    /// host backend).
    pub fn new(device: &Device, len: usize) -> Result<Self> {
        let alloc = device.inner.alloc_device(byte_len::<T>(len)?)?;
        Ok(Self::from_alloc(device, alloc, len))
    }

    /// Allocate device memory and copy `data` into it, **synchronously** (`cudaMalloc` then
    /// `cudaMemcpy`): a pageable copy (CP3) on the device's legacy default stream, so it starts
    /// after earlier work of every blocking stream (ST4), and the call returns once the data is
    /// on the device: every stream may use the buffer at once. The host waits for all of it;
    /// for copies that overlap other work, upload from a [`PinnedBuffer`] with
    /// [`Stream::copy_h2d`](crate::Stream::copy_h2d). Refused during a stream capture (GR2).
    #[track_caller]
    pub fn from_slice(device: &Device, data: &[T]) -> Result<Self> {
        let buf = Self::new(device, data.len())?;
        let (dev, legacy) = (&device.inner, &device.inner.legacy);
        dev.mark_used(); // DV2: as for any work on the legacy stream.
        legacy.write_pageable(
            dev,
            &buf.mem(),
            bytemuck::cast_slice(data),
            Location::caller(),
        )?;
        // The pageable copy's return orders only the source read (CP3); wait for the device
        // write too, so no stream needs an event before using the buffer.
        legacy.synchronize(dev)?;
        Ok(buf)
    }

    /// Copy this view into a new `Vec`, **synchronously** (`cudaMemcpy` device to host): a
    /// pageable copy (CP3) on the device's legacy default stream, so it starts after earlier
    /// work of every blocking stream (ST4) and returns once the data has arrived. Work of a
    /// non-blocking stream is not waited for: synchronize that stream (or record an event and
    /// wait on it) first, as in CUDA. For copies that overlap other work, download into a
    /// [`PinnedBuffer`] with [`Stream::copy_d2h`](crate::Stream::copy_d2h).
    #[track_caller]
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        let dev = &self.device.inner;
        dev.mark_used(); // DV2: as for any work on the legacy stream.
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        dev.legacy
            .read_pageable(dev, dst, &self.mem(), Location::caller())?;
        Ok(out)
    }

    pub(crate) fn from_alloc(device: &Device, alloc: Arc<Allocation>, len: usize) -> Self {
        let hold = alloc
            .graph_slot
            .is_some()
            .then(|| crate::core::graphs::mem::holder(&alloc));
        DeviceBuffer {
            device: device.clone(),
            alloc,
            offset: 0,
            len,
            hold,
            _t: PhantomData,
        }
    }

    /// Elements in this view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty view.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes in this view.
    pub fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device the memory is on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Device address of the first element (CUDA: a `CUdeviceptr`). For memory a graph
    /// allocates (GR7, GR10), the address its instantiation gave it — the same at every launch
    /// of that instantiation, as CUDA fixes a graph allocation's address — and 0 before the
    /// graph is instantiated.
    pub fn device_addr(&self) -> u64 {
        if self.alloc.graph_slot.is_some() {
            let base = crate::core::graphs::mem::addr(&self.alloc);
            return if base == 0 {
                0
            } else {
                base + (self.offset * std::mem::size_of::<T>()) as u64
            };
        }
        self.mem().addr()
    }

    /// Free the memory now, as `cudaFree` does: the device's work completes first (as
    /// `cudaFree` synchronizes), then the memory is freed. For memory a graph hands out
    /// (GR10), its graph may launch again at once, and the memory's other handles refer to
    /// freed memory (using or freeing them is refused, until the next launch allocates it
    /// again); freeing it when it is not allocated is refused with
    /// [`Error::NotPermitted`] (`GR10`). Other memory goes with its last handle (MM2) — at once
    /// when this was the last. Refused inside a capture (GR2) and inside a host function
    /// (HF2), as a device synchronization is.
    pub fn free(self) -> Result<()> {
        if self.alloc.graph_slot.is_some() {
            return crate::core::graphs::mem::free_now(&self.alloc);
        }
        self.device.synchronize()?;
        drop(self);
        Ok(())
    }

    /// A view of elements `range` of this view (bounds-checked, CP4).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceBuffer<T>> {
        let r = resolve(range, self.len, "DeviceBuffer::slice")?;
        Ok(DeviceBuffer {
            device: self.device.clone(),
            alloc: self.alloc.clone(),
            offset: self.offset + r.start,
            len: r.len(),
            hold: self.hold.clone(),
            _t: PhantomData,
        })
    }

    /// Split into `n` views of nearly equal length (the last ones one element shorter when
    /// `len` is not a multiple of `n`). `n` must be between 1 and `len`.
    pub fn chunks(&self, n: usize) -> Result<Vec<DeviceBuffer<T>>> {
        chunk_ranges(self.len, n)?
            .into_iter()
            .map(|r| self.slice(r))
            .collect()
    }

    pub(crate) fn mem(&self) -> MemRef {
        let size = std::mem::size_of::<T>();
        MemRef {
            alloc: self.alloc.clone(),
            offset: self.offset * size,
            len: self.len * size,
        }
    }

    /// The bytes this view covers within its allocation: what [`mem`](Self::mem) tells,
    /// without taking a reference to the allocation (an atomic increment and decrement a check
    /// on the launch path).
    pub(crate) fn byte_range(&self) -> std::ops::Range<usize> {
        let size = std::mem::size_of::<T>();
        self.offset * size..(self.offset + self.len) * size
    }

    /// True if this view and `other` share bytes of one allocation.
    pub(crate) fn overlaps(&self, other: &DeviceBuffer<T>) -> bool {
        let (a, b) = (self.byte_range(), other.byte_range());
        Arc::ptr_eq(&self.alloc, &other.alloc) && a.start < b.end && b.start < a.end
    }

    pub(crate) fn into_alloc(self) -> Arc<Allocation> {
        self.alloc
    }

    /// The allocation and the program's hold on it (graph memory: to keep until a free of
    /// it was enqueued, `core::graphs::mem` rule 4).
    pub(crate) fn into_parts(
        self,
    ) -> (
        Arc<Allocation>,
        Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) {
        (self.alloc, self.hold)
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}..{}] of {:?}",
            std::any::type_name::<T>(),
            self.offset,
            self.offset + self.len,
            self.alloc
        )
    }
}

/// Split `len` elements into `n` contiguous ranges of nearly equal size.
pub fn chunk_ranges(len: usize, n: usize) -> Result<Vec<Range<usize>>> {
    if n == 0 || n > len.max(1) {
        return Err(Error::bounds(
            "CP4",
            format!("cannot split {len} elements into {n} chunks"),
        ));
    }
    let (base, extra) = (len / n, len % n);
    let mut out = Vec::with_capacity(n);
    let mut lo = 0;
    for i in 0..n {
        let hi = lo + base + usize::from(i < extra);
        out.push(lo..hi);
        lo = hi;
    }
    Ok(out)
}

/// Page-locked host memory: copies to and from it are truly asynchronous (CP2).
///
/// There is one owner. The host reads it through [`read`](Self::read) and writes it through
/// [`write`](Self::write), which first wait for the device work that may still touch the bytes
/// (MM3); the borrow checker keeps new device work from being enqueued on it meanwhile.
pub struct PinnedBuffer<T> {
    device: Device,
    alloc: Arc<Allocation>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Pod> PinnedBuffer<T> {
    /// Allocate `len` zeroed elements of page-locked memory (cudaHostAlloc, not write-combined).
    /// On a device with unified addressing it serves every device's streams (HM2), as
    /// `cudaMallocHost` memory does.
    pub fn new(device: &Device, len: usize) -> Result<Self> {
        Self::with_flags(device, len, PinnedFlags::default())
    }

    /// Allocate with flags (`cudaHostAlloc`): `write_combined` is an opt-in for upload-only
    /// buffers, `portable` lets every device's streams use it (HM2; implied on a device with
    /// unified addressing), `mapped` lets kernels
    /// read and write it in place ([`KernelArgs::read_mapped`](crate::KernelArgs::read_mapped),
    /// HM3).
    pub fn with_flags(device: &Device, len: usize, flags: PinnedFlags) -> Result<Self> {
        let alloc = device.inner.alloc_pinned(byte_len::<T>(len)?, flags)?;
        // SAFETY: a fresh allocation of len*size_of::<T>() bytes nobody else references; zero
        // bytes are a valid T (Pod).
        unsafe { alloc.host_ptr().write_bytes(0, byte_len::<T>(len)?) };
        Ok(PinnedBuffer {
            device: device.clone(),
            alloc,
            len,
            _t: PhantomData,
        })
    }

    /// A buffer over an allocation made elsewhere (registered memory, HM1).
    pub(crate) fn from_alloc(device: &Device, alloc: Arc<Allocation>, len: usize) -> Self {
        PinnedBuffer {
            device: device.clone(),
            alloc,
            len,
            _t: PhantomData,
        }
    }

    /// The allocation (its kind of host memory, HM1–HM3).
    pub(crate) fn alloc(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    /// The whole buffer as a byte range (a mapped kernel argument, HM3).
    pub(crate) fn whole_mem(&self) -> MemRef {
        self.mem_of(&(0..self.len))
    }

    /// Allocate and fill with a copy of `data`.
    pub fn from_slice(device: &Device, data: &[T]) -> Result<Self> {
        let mut b = Self::new(device, data.len())?;
        b.write()?.copy_from_slice(data);
        Ok(b)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device whose copy engines can reach this memory.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Read access: waits until no pending device work writes the buffer (MM3).
    #[track_caller]
    pub fn read(&self) -> Result<HostRead<'_, T>> {
        self.read_range(..)
    }

    /// Read access to `range`: waits only for device writes to those elements (MM3).
    #[track_caller]
    pub fn read_range(&self, range: impl RangeBounds<usize>) -> Result<HostRead<'_, T>> {
        let (r, view) = self.begin_host_access(range, false, "PinnedBuffer::read_range")?;
        // SAFETY: in bounds; no device work that writes these bytes is pending (waited for);
        // none can be enqueued while this shared borrow lives (device writes need &mut), and a
        // graph launch refuses to run while `view` counts this host view.
        let s = unsafe { std::slice::from_raw_parts(self.ptr().add(r.start), r.len()) };
        Ok(HostRead { s, _view: view })
    }

    /// Write access: waits until no pending device work reads or writes the buffer (MM3).
    #[track_caller]
    pub fn write(&mut self) -> Result<HostWrite<'_, T>> {
        self.write_range(..)
    }

    /// Write access to `range`: waits only for device work on those elements (MM3).
    #[track_caller]
    pub fn write_range(&mut self, range: impl RangeBounds<usize>) -> Result<HostWrite<'_, T>> {
        let (r, view) = self.begin_host_access(range, true, "PinnedBuffer::write_range")?;
        // SAFETY: in bounds; no device work on these bytes is pending (waited for); none can
        // be enqueued while this exclusive borrow lives, and a graph launch refuses to run
        // while `view` counts this host view.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr().add(r.start), r.len()) };
        Ok(HostWrite { s, _view: view })
    }

    /// The checks and the wait before a host view of `range` (MM3): counts the view first, so
    /// no graph launch can start enqueuing on the buffer while the host waits or looks.
    #[track_caller]
    fn begin_host_access(
        &self,
        range: impl RangeBounds<usize>,
        host_writes: bool,
        call: &'static str,
    ) -> Result<(Range<usize>, HostView<'_>)> {
        let r = resolve(range, self.len, call)?;
        // Managed memory on a device without concurrent managed access (HM4).
        self.device.inner.managed_host_wait(&self.alloc)?;
        let view = HostView::new(&self.alloc);
        let kind = if host_writes {
            Access::Write
        } else {
            Access::Read
        };
        self.device.inner.host_view(&self.mem_of(&r), kind, call)?;
        Ok((r, view))
    }

    /// Raw access without waiting (the MM3 opt-out). With the sanitizer on, a read of bytes
    /// that device work may still be writing is reported as a race (AC4).
    ///
    /// # Safety
    /// No device operation may write these bytes while the slice is alive.
    #[track_caller]
    pub unsafe fn as_slice_unchecked(&self) -> &[T] {
        // A race is reported, not refused: this call has no error to return.
        let site = std::panic::Location::caller();
        (self.device.inner).host_unchecked(&self.mem_of(&(0..self.len)), Access::Read, site);
        // SAFETY: in bounds; the caller guarantees there is no concurrent device write.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    /// A copy source covering `range` (bounds-checked, CP4).
    pub fn range(&self, range: impl RangeBounds<usize>) -> Result<PinnedSlice<'_, T>> {
        let r = resolve(range, self.len, "PinnedBuffer::range")?;
        Ok(PinnedSlice { buf: self, r })
    }

    /// A copy destination covering `range` (bounds-checked, CP4).
    pub fn range_mut(&mut self, range: impl RangeBounds<usize>) -> Result<PinnedSliceMut<'_, T>> {
        let r = resolve(range, self.len, "PinnedBuffer::range_mut")?;
        Ok(PinnedSliceMut { buf: self, r })
    }

    fn ptr(&self) -> *mut T {
        self.alloc.host_ptr() as *mut T
    }

    fn mem_of(&self, r: &Range<usize>) -> MemRef {
        let size = std::mem::size_of::<T>();
        MemRef {
            alloc: self.alloc.clone(),
            offset: r.start * size,
            len: r.len() * size,
        }
    }
}

impl<T> PinnedBuffer<T> {
    /// Elements, for any `T` (Debug output).
    pub(crate) fn len_any(&self) -> usize {
        self.len
    }

    /// The allocation, for any `T` (Debug output).
    pub(crate) fn alloc_any(&self) -> &Allocation {
        &self.alloc
    }
}

/// Part of a [`PinnedBuffer`] used as a copy source.
pub struct PinnedSlice<'a, T> {
    buf: &'a PinnedBuffer<T>,
    r: Range<usize>,
}

impl<'a, T: Pod> PinnedSlice<'a, T> {
    pub(crate) fn mem(&self) -> MemRef {
        self.buf.mem_of(&self.r)
    }
    /// Elements covered.
    pub fn len(&self) -> usize {
        self.r.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }
    /// The device whose copy engines can reach this memory.
    pub fn device(&self) -> &'a Device {
        &self.buf.device
    }
    /// Elements `range` of this slice, counted from its start (bounds-checked, CP4).
    pub fn range(&self, range: impl RangeBounds<usize>) -> Result<PinnedSlice<'a, T>> {
        let r = resolve(range, self.r.len(), "PinnedSlice::range")?;
        Ok(PinnedSlice {
            buf: self.buf,
            r: self.r.start + r.start..self.r.start + r.end,
        })
    }
}

impl<T> Clone for PinnedSlice<'_, T> {
    fn clone(&self) -> Self {
        PinnedSlice {
            buf: self.buf,
            r: self.r.clone(),
        }
    }
}

impl<'a, T: Pod> From<&'a PinnedBuffer<T>> for PinnedSlice<'a, T> {
    fn from(buf: &'a PinnedBuffer<T>) -> Self {
        PinnedSlice { buf, r: 0..buf.len }
    }
}

impl<'a, T: Pod> From<&'a mut PinnedBuffer<T>> for PinnedSlice<'a, T> {
    fn from(buf: &'a mut PinnedBuffer<T>) -> Self {
        let len = buf.len;
        PinnedSlice { buf, r: 0..len }
    }
}

/// Part of a [`PinnedBuffer`] used as a copy destination.
pub struct PinnedSliceMut<'a, T> {
    buf: &'a mut PinnedBuffer<T>,
    r: Range<usize>,
}

impl<T: Pod> PinnedSliceMut<'_, T> {
    pub(crate) fn mem(&self) -> MemRef {
        self.buf.mem_of(&self.r)
    }
    /// Elements covered.
    pub fn len(&self) -> usize {
        self.r.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }
    /// The device whose copy engines can reach this memory.
    pub fn device(&self) -> &Device {
        &self.buf.device
    }
    /// Elements `range` of this slice, counted from its start, as a destination borrowed from
    /// it (bounds-checked, CP4).
    pub fn range_mut(&mut self, range: impl RangeBounds<usize>) -> Result<PinnedSliceMut<'_, T>> {
        let r = resolve(range, self.r.len(), "PinnedSliceMut::range_mut")?;
        Ok(PinnedSliceMut {
            buf: self.buf,
            r: self.r.start + r.start..self.r.start + r.end,
        })
    }
}

impl<'a, T: Pod> From<&'a mut PinnedBuffer<T>> for PinnedSliceMut<'a, T> {
    fn from(buf: &'a mut PinnedBuffer<T>) -> Self {
        let len = buf.len;
        PinnedSliceMut { buf, r: 0..len }
    }
}

/// Host read access to pinned memory (see [`PinnedBuffer::read`]).
pub struct HostRead<'a, T> {
    s: &'a [T],
    _view: HostView<'a>,
}

impl<T> Deref for HostRead<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.s
    }
}

/// Host write access to pinned memory (see [`PinnedBuffer::write`]).
pub struct HostWrite<'a, T> {
    s: &'a mut [T],
    _view: HostView<'a>,
}

impl<T> Deref for HostWrite<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.s
    }
}

impl<T> DerefMut for HostWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.s
    }
}
