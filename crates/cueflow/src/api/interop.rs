//! External and its helpers (documented on the type, which the crate root exports).

use std::any::Any;
use std::ffi::c_void;
use std::panic::Location;
use std::sync::Arc;

use bytemuck::Pod;

use crate::api::device::Device;
use crate::api::memory::{DeviceBuffer, PinnedSlice, PinnedSliceMut};
use crate::api::stream::Stream;
use crate::backend::contract::memory::{Allocation, MemRef, Release};
use crate::backend::contract::op::{ExternalWork, Op, Work};
use crate::error::{Error, Result};
use crate::types::Access;
use crate::types::MemKind;
use crate::types::OwnerDrop;

/// The raw CUDA handles an external operation's CUDA side gets.
#[derive(Clone, Copy, Debug)]
pub struct RawCuda<'a> {
    /// The stream (`CUstream` / `cudaStream_t`) to enqueue on.
    pub stream: *mut c_void,
    /// The device's context (`CUcontext`), current on the calling thread.
    pub context: *mut c_void,
    /// The device address of each declared buffer, in declaration order (reads and writes as
    /// declared). For memory a capture allocated this is the address the graph's
    /// instantiation gave it (GR11): use these rather than addresses taken before. For pinned
    /// host memory it is the address kernels use: the device view of mapped memory, which
    /// is the host address itself with unified addressing; managed memory has one address.
    pub buffers: &'a [u64],
}

/// The declared memory of an external operation's host side.
pub struct ExternalIo<'a> {
    mems: &'a [(MemRef, Access)],
}

impl<'a> ExternalIo<'a> {
    /// The declared buffers as elements of `T`: what was declared with
    /// [`reads`](External::reads), in order, and what was declared with
    /// [`writes`](External::writes), in order. Panics (a fault of the device, KN2) if a range
    /// is not a whole number of `T`.
    pub fn buffers<T: Pod>(self) -> (Vec<&'a [T]>, Vec<&'a mut [T]>) {
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for (m, a) in self.mems {
            let size = std::mem::size_of::<T>();
            assert!(
                m.len % size == 0
                    && (m.alloc.addr as usize + m.offset) % std::mem::align_of::<T>() == 0,
                "external operation: a declared range of {} bytes is not a whole number of {}",
                m.len,
                std::any::type_name::<T>()
            );
            // SAFETY: core checked every declared range lies inside its live allocation (the
            // op holds it, MM2); the ranges declared written overlap no other declared range
            // (checked at enqueue), and tracking keeps other work that conflicts with them off
            // the memory while this op runs (AC6 on the host backend). `self` is consumed, so
            // each range is handed out once.
            unsafe {
                let p = m.alloc.host_ptr().add(m.offset) as *mut T;
                match a {
                    Access::Read => reads.push(&*std::ptr::slice_from_raw_parts(p, m.len / size)),
                    _ => writes.push(&mut *std::ptr::slice_from_raw_parts_mut(p, m.len / size)),
                }
            }
        }
        (reads, writes)
    }
}

/// Interop with code outside cueflow: the raw driver handles, work of other libraries on a
/// cueflow stream ([`Stream::external`]), and memory and streams created elsewhere.
///
/// An external operation is a stream operation like the others: it runs in its stream's order
/// (ST1), declares the byte ranges it reads and writes (AC1), so tracking, automatic ordering,
/// the race sanitizer and lifetime tracking (MM2) treat it like a kernel, and it shows in traces
/// with its stream and the compute engine. On CUDA its closure is called once, when the
/// operation reaches the driver, with the raw `CUstream` and `CUcontext`, and enqueues its
/// work there (a cuBLAS call, a foreign kernel); on the host backend its host closure runs on a
/// compute engine with the declared memory.
///
/// A capture records external operations too (GR1). On CUDA the closure is then called once
/// per instantiation of the graph, on a stream the driver captures into that instantiation's
/// graph (thread-local mode): what it enqueues runs at every launch, as a library's work does
/// under CUDA stream capture, so it must be capturable (no synchronization, no other stream;
/// [`Error::Capture`] otherwise). On the host backend the host closure runs at every launch.
/// Memory the capture itself allocated may be declared (GR11): the host side gets it as any
/// declared memory, the CUDA side gets its address in [`RawCuda::buffers`] when the
/// instantiation exists. An update in place (GR6) keeps the operation only when it is the
/// same one.
///
/// ```
/// use cueflow::{Device, DeviceBuffer, Stream};
/// let dev = Device::from_env()?;
/// let s = Stream::new(&dev)?;
/// let (x, y) = (DeviceBuffer::<f32>::new(&dev, 256)?, DeviceBuffer::<f32>::new(&dev, 256)?);
/// s.write_pageable(&x, &[2.0; 256])?;
/// s.external("double")
///     .reads(&x)
///     .writes(&y)
///     .host(|io| {
///         let (ins, mut outs) = io.buffers::<f32>();
///         for (o, i) in outs[0].iter_mut().zip(ins[0]) {
///             *o = 2.0 * i;
///         }
///     })
///     .cuda(|_raw| {
///         // A library call on `_raw.stream` would go here.
///         Err(cueflow::Error::Unsupported("this example has no CUDA side".into()))
///     })
///     .enqueue()
///     .or_else(|e| if dev.properties().backend == "cuda" { Ok(()) } else { Err(e) })?;
/// # Ok::<(), cueflow::Error>(())
/// ```
///
/// An external operation being described ([`Stream::external`]); nothing is enqueued until
/// [`enqueue`](Self::enqueue).
#[must_use = "nothing is enqueued until `enqueue`"]
pub struct External<'s> {
    stream: &'s Stream,
    name: String,
    accesses: Vec<(MemRef, Access)>,
    cuda: Option<crate::backend::contract::op::ExternalCuda>,
    host: Option<crate::backend::contract::op::ExternalHost>,
}

impl<'s> External<'s> {
    /// The operation reads `buf`.
    pub fn reads<T: Pod>(mut self, buf: &DeviceBuffer<T>) -> Self {
        self.accesses.push((buf.mem(), Access::Read));
        self
    }

    /// The operation writes (and may read) `buf`.
    pub fn writes<T: Pod>(mut self, buf: &DeviceBuffer<T>) -> Self {
        self.accesses.push((buf.mem(), Access::Write));
        self
    }

    /// The operation reads host memory `buf`: a [`PinnedBuffer`](crate::PinnedBuffer) —
    /// plain, registered, mapped — or a [`ManagedBuffer`](crate::ManagedBuffer), whole or a
    /// range of one, as a CUDA program hands such memory to a library (UnifiedMemoryStreams
    /// passes managed memory to cuBLAS). Tracked like any access (AC1): a host view of the
    /// bytes waits for the operation (MM3). Its CUDA side gets the address kernels use
    /// ([`RawCuda::buffers`]); whether the library's work may touch host memory that is not
    /// mapped or managed is the library's business, as in CUDA.
    pub fn reads_pinned<'b, T: Pod>(mut self, buf: impl Into<PinnedSlice<'b, T>>) -> Self {
        self.accesses.push((buf.into().mem(), Access::Read));
        self
    }

    /// The operation writes (and may read) host memory `buf`, as
    /// [`reads_pinned`](Self::reads_pinned) reads it. The exclusive borrow keeps host views of
    /// it from existing while the operation is described; afterwards a view waits for it.
    pub fn writes_pinned<'b, T: Pod>(mut self, buf: impl Into<PinnedSliceMut<'b, T>>) -> Self {
        self.accesses.push((buf.into().mem(), Access::Write));
        self
    }

    /// The CUDA side: called when the operation reaches the driver (captured: once per
    /// instantiation of its graph, see the [type docs](External)), with the
    /// stream's raw handle and its context current; it enqueues its work on `raw.stream` and
    /// returns.
    /// It must touch only the declared memory, must not synchronize the stream or call cueflow,
    /// and must not keep the handles. An error it returns is returned by
    /// [`enqueue`](Self::enqueue) (work it enqueued before failing still runs, and the
    /// operation keeps its memory alive until then).
    pub fn cuda(mut self, f: impl Fn(RawCuda<'_>) -> Result<()> + Send + Sync + 'static) -> Self {
        self.cuda = Some(Arc::new(move |stream, context, buffers| {
            f(RawCuda {
                stream,
                context,
                buffers,
            })
        }));
        self
    }

    /// The host backend's side: runs on a compute engine in stream order with the declared
    /// memory ([`ExternalIo::buffers`]). A panic faults the device like a faulting kernel.
    pub fn host(mut self, f: impl Fn(ExternalIo<'_>) + Send + Sync + 'static) -> Self {
        self.host = Some(Arc::new(move |mems| f(ExternalIo { mems })));
        self
    }

    /// Enqueue the operation (or, on a capturing stream, record it). Refused with nothing
    /// enqueued: memory of another device, or memory another capture allocated
    /// ([`Error::InvalidHandle`]), declared ranges that are written and overlap another declared
    /// range ([`Error::InvalidArgument`]), no side for this stream's backend
    /// ([`Error::Unsupported`]).
    #[track_caller]
    pub fn enqueue(self) -> Result<()> {
        self.enqueue_at(Location::caller())
    }

    /// The stream the operation is for.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    pub(crate) fn stream(&self) -> &'s Stream {
        self.stream
    }

    /// [`enqueue`](Self::enqueue), written at `site`.
    pub(crate) fn enqueue_at(self, site: &'static Location<'static>) -> Result<()> {
        let s = self.stream;
        for (m, _) in &self.accesses {
            s.check_mem(m, "Stream::external")?;
        }
        for (i, (a, ka)) in self.accesses.iter().enumerate() {
            for (b, kb) in &self.accesses[i + 1..] {
                let overlap = Arc::ptr_eq(&a.alloc, &b.alloc)
                    && a.range().start < b.range().end
                    && b.range().start < a.range().end;
                if overlap && (*ka == Access::Write || *kb == Access::Write) {
                    return Err(Error::InvalidArgument {
                        kernel: self.name,
                        why: "a range declared written overlaps another declared range".into(),
                    });
                }
            }
        }
        let backend = s.device.properties().backend;
        let has_side = if s.device.inner.runs_host_code() {
            self.host.is_some()
        } else {
            self.cuda.is_some()
        };
        if !has_side {
            return Err(Error::Unsupported(format!(
                "external operation `{}` has no {backend} side",
                self.name
            )));
        }
        let op = Op::new(Work::External(Arc::new(ExternalWork {
            name: self.name,
            accesses: self.accesses,
            cuda: self.cuda,
            host: self.host,
        })));
        s.submit(op, site)
    }
}

impl Stream {
    /// Describe an operation of another library, or of the caller's own, to run in this
    /// stream's order over memory it declares (see [`External`] and the
    /// [type docs](External)).
    pub fn external(&self, name: impl Into<String>) -> External<'_> {
        External {
            stream: self,
            name: name.into(),
            accesses: Vec::new(),
            cuda: None,
            host: None,
        }
    }

    /// The raw `CUstream` of this stream, for libraries that take one (`None` on the host
    /// backend). Work enqueued on it directly is invisible to cueflow: ordering, tracking and
    /// lifetimes then are the caller's business; prefer [`Stream::external`].
    pub fn raw_cuda_stream(&self) -> Option<*mut c_void> {
        self.core.backend.raw_handle()
    }

    /// Wrap a CUDA stream created elsewhere (by cudarc, a library, C code) as a cueflow stream
    /// of `device`, without copying or taking it over: cueflow never destroys it. Its flags
    /// and priority are read from the driver.
    ///
    /// # Safety
    /// `raw` must be a live `CUstream` of `device`'s context (the primary context of its GPU)
    /// and stay alive until this `Stream` and every operation enqueued through it are gone.
    pub unsafe fn from_raw_cuda(device: &Device, raw: *mut c_void) -> Result<Stream> {
        let core = device.inner.adopt_stream(raw, None)?;
        Ok(Stream {
            device: device.clone(),
            core,
        })
    }
}

impl Device {
    /// The device's raw `CUcontext` (its GPU's primary context), for libraries that need it;
    /// `None` on the host backend.
    pub fn raw_cuda_context(&self) -> Option<*mut c_void> {
        self.inner.raw_context()
    }
}

/// Keeps an adopted allocation's owner until cueflow is done with the memory, then drops it
/// where driver calls are allowed (the owner may free the memory with them: a cudarc
/// `CudaSlice`), or hands it back ([`DeviceBuffer::take_owner`]).
struct Owner<O: Send + Sync + 'static> {
    owner: parking_lot::Mutex<Option<O>>,
    drop_owner: OwnerDrop,
}

impl<O: Send + Sync + 'static> Release for Owner<O> {
    fn release(&self, _addr: u64, _bytes: usize) {
        if let Some(o) = self.owner.lock().take() {
            (self.drop_owner)(Box::new(o));
        }
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Use `len` elements of device memory at `addr` that something else allocated (a cudarc
    /// `CudaSlice`, a library's workspace), without copying. `owner` is kept until every
    /// handle and every operation using the memory is gone (MM2), then dropped (outside host
    /// functions, so its drop may call the driver): give it what frees the memory (or `()`
    /// when the caller frees it later itself).
    ///
    /// # Safety
    /// `addr..addr + len * size_of::<T>()` must be device memory of `device` (a device address
    /// on CUDA, a host pointer on the host backend), aligned for `T`, valid until `owner` is
    /// dropped, and used by nothing else while cueflow may use it.
    pub unsafe fn from_raw_parts<O: Send + Sync + 'static>(
        device: &Device,
        addr: u64,
        len: usize,
        owner: O,
    ) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidHandle("from_raw_parts: the length overflows".into()))?;
        if addr == 0 || addr as usize % std::mem::align_of::<T>() != 0 {
            return Err(Error::InvalidHandle(format!(
                "from_raw_parts: {addr:#x} is not a valid address for {}",
                std::any::type_name::<T>()
            )));
        }
        let owner = Owner {
            owner: parking_lot::Mutex::new(Some(owner)),
            drop_owner: device.inner.owner_drop(),
        };
        let alloc = Allocation::new(addr, bytes, MemKind::Device, device.id(), Box::new(owner));
        Ok(DeviceBuffer::from_alloc(device, alloc, len))
    }

    /// The owner [`from_raw_parts`](Self::from_raw_parts) was given, taken back with the
    /// memory: refused, with the buffer handed back, unless this handle is the whole buffer
    /// and the only holder of its memory — no other handle or view, no graph, no operation
    /// the device has not been seen to finish (MM2).
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    pub(crate) fn take_owner<O: Send + Sync + 'static>(
        self,
        call: &str,
        not_adopted: &str,
    ) -> std::result::Result<O, Box<(Error, DeviceBuffer<T>)>> {
        let refuse = |why: String| Error::NotPermitted {
            rule: "MM2",
            what: format!("{call}: {why}"),
        };
        let m = self.mem();
        let (whole, adopted) = (
            m.offset == 0 && m.len == m.alloc.bytes,
            m.alloc.release_as::<Owner<O>>().is_some(),
        );
        drop(m);
        if !adopted {
            return Err(Box::new((refuse(not_adopted.to_string()), self)));
        }
        if !whole {
            let why = "this is a view of part of the buffer; hand over the whole buffer".into();
            return Err(Box::new((refuse(why), self)));
        }
        let (device, len) = (self.device().clone(), self.len());
        let mut alloc = self.into_alloc();
        if Arc::get_mut(&mut alloc).is_none() {
            let why = format!(
                "other handles, a graph or operations not yet seen complete still hold the \
                 memory ({} holders besides this handle, {} weak); drop the other handles and \
                 synchronize the streams that used it first",
                Arc::strong_count(&alloc) - 1,
                Arc::weak_count(&alloc)
            );
            let buf = DeviceBuffer::from_alloc(&device, alloc, len);
            return Err(Box::new((refuse(why), buf)));
        }
        // The only holder, with no weak reference: nobody can reach the memory any more. The
        // allocation's release finds no owner and frees nothing.
        let owner = alloc
            .release_as::<Owner<O>>()
            .and_then(|o| o.owner.lock().take());
        Ok(owner.expect("an adopted allocation keeps its owner until it is released"))
    }
}

#[cfg(test)]
mod tests {
    //! Taking an adopted buffer's owner back ([`DeviceBuffer::take_owner`], what
    //! `into_cudarc` does), on the host backend.
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    use super::*;

    /// Host memory standing for another library's allocation; counts its frees.
    #[derive(Debug)]
    struct Foreign {
        mem: Vec<f32>,
        freed: Arc<AtomicUsize>,
    }

    impl Drop for Foreign {
        fn drop(&mut self) {
            self.freed.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn adopt(dev: &Device, n: usize) -> (DeviceBuffer<f32>, Arc<AtomicUsize>) {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut owner = Foreign {
            mem: vec![1.0; n],
            freed: freed.clone(),
        };
        let addr = owner.mem.as_mut_ptr() as u64;
        // SAFETY: on the host backend device memory is host memory; the vector's heap block
        // stays put inside `owner` until it is dropped, and nothing else touches it.
        let buf = unsafe { DeviceBuffer::from_raw_parts(dev, addr, n, owner) }.unwrap();
        (buf, freed)
    }

    const CALL: &str = "take back";

    #[test]
    fn the_owner_comes_back_only_from_the_only_holder() {
        let dev = Device::host().unwrap();
        let s = Stream::new(&dev).unwrap();
        let (buf, freed) = adopt(&dev, 1024);
        let gate = Arc::new(Barrier::new(2));
        let g = gate.clone();
        s.host_fn(move || {
            g.wait();
        })
        .unwrap();
        crate::kernels::scale(&s, &buf, 3.0).unwrap(); // pending behind the gate
        let (e, buf) = *buf.take_owner::<Foreign>(CALL, "").unwrap_err();
        assert!(matches!(e, Error::NotPermitted { rule: "MM2", .. }), "{e}");
        gate.wait();
        s.synchronize().unwrap();
        // A view of part of it, or another handle, keeps it too.
        let (e, part) = *buf
            .slice(1..)
            .unwrap()
            .take_owner::<Foreign>(CALL, "")
            .unwrap_err();
        assert!(e.to_string().contains("part"), "{e}");
        drop(part);
        let other = buf.clone();
        let (_, buf) = *buf.take_owner::<Foreign>(CALL, "").unwrap_err();
        drop(other);
        // Another kind of owner is refused with the caller's words.
        let (e, buf) = *buf.take_owner::<String>(CALL, "not a string").unwrap_err();
        assert!(e.to_string().contains("not a string"), "{e}");
        // The only holder: the owner comes back with the memory, which was not freed.
        let owner = buf.take_owner::<Foreign>(CALL, "").unwrap();
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        assert!(
            owner.mem.iter().all(|&x| x == 3.0),
            "the same memory, scaled"
        );
        drop(owner);
        assert_eq!(freed.load(Ordering::SeqCst), 1);
        // Memory cueflow allocated has no owner to give back.
        let own = DeviceBuffer::<f32>::new(&dev, 4).unwrap();
        assert!(own.take_owner::<Foreign>(CALL, "").is_err());
    }
}
