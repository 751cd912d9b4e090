//! [`CudarcOp`]: work enqueued through cudarc on a cueflow stream, over cueflow memory it
//! declares, seen by ordering, the sanitizer, lifetimes and traces like a kernel.

use std::marker::PhantomData;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytemuck::Pod;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{
    CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs, PushKernelArg, SyncOnDrop,
};
use parking_lot::Mutex;

use crate::api::interop::{External, RawCuda};
use crate::api::memory::DeviceBuffer;
use crate::api::stream::Stream;
use crate::error::{Error, Result};

/// What a cudarc operation's closure returns on failure: any error — cudarc's
/// `DriverError` and `CublasError`, cueflow's [`Error`] — so `?` works on all of them.
pub type CudarcError = Box<dyn std::error::Error + Send + Sync>;

/// Work enqueued through cudarc — a cuBLAS call, a kernel launched with cudarc, a library
/// built on it — on a cueflow stream, over cueflow memory it declares
/// ([`Stream::cudarc`]). It is a stream operation like the others: it runs in the stream's
/// order (ST1), its declared byte ranges (AC1) are seen by automatic ordering, the race
/// sanitizer and lifetime tracking (MM2), and it shows in traces as an external operation.
///
/// Declare each buffer with [`reads`](Self::reads) or [`writes`](Self::writes); the closure
/// given to [`run`](Self::run) gets, from [`CudarcCall::views`], one view per declaration in
/// that order — [`CudarcView`] for a read, [`CudarcViewMut`] for a write — which cudarc takes
/// wherever it takes its own slices (`DevicePtr`, `DevicePtrMut`, kernel arguments), and
/// [`CudarcCall::stream`], the stream as cudarc's `CudaStream`, to enqueue on.
///
/// ```no_run
/// use cueflow::cudarc::cublas::{sys as cublas, CudaBlas, Gemm, GemmConfig};
/// # fn main() -> cueflow::Result<()> {
/// let dev = cueflow::Device::cuda(0)?;
/// let s = cueflow::Stream::new(&dev)?;
/// let blas = CudaBlas::new(s.as_cudarc()?).map_err(|e| cueflow::Error::Unsupported(e.to_string()))?;
/// let n = 512;
/// let (a, b, c) = (
///     cueflow::DeviceBuffer::<f32>::new(&dev, n * n)?,
///     cueflow::DeviceBuffer::<f32>::new(&dev, n * n)?,
///     cueflow::DeviceBuffer::<f32>::new(&dev, n * n)?,
/// );
/// let cfg = GemmConfig { transa: cublas::cublasOperation_t::CUBLAS_OP_N,
///     transb: cublas::cublasOperation_t::CUBLAS_OP_N,
///     m: n as i32, n: n as i32, k: n as i32, alpha: 1.0, lda: n as i32, ldb: n as i32,
///     beta: 0.0, ldc: n as i32 };
/// s.cudarc("sgemm").reads(&a).reads(&b).writes(&c).run(|call| {
///     let (a, b, mut c) = call.views();
///     // SAFETY: the sizes match the views; cuBLAS runs on the operation's stream.
///     unsafe { blas.gemm(cfg, &a, &b, &mut c) }?;
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// The closure is called once, inside [`run`](Self::run), on the calling thread, while the
/// stream's earlier work and the waits automatic ordering adds are already enqueued, so it may
/// borrow what the caller has (a cuBLAS handle, a cudarc function). It must enqueue only on
/// [`CudarcCall::stream`] (work cudarc enqueues elsewhere through a view is reported as an
/// error: cueflow cannot order it), touch only the declared memory, and not synchronize.
///
/// CUDA devices only: on the host backend [`run`](Self::run) is refused with
/// [`Error::Unsupported`] (cudarc has no host side: use [`Stream::external`] with a host
/// closure there). A capture cannot record it either: cudarc's handle is the stream's own,
/// and a capture instantiates its operations on other streams.
#[must_use = "nothing is enqueued until `run`"]
pub struct CudarcOp<'s, V = ()> {
    ext: External<'s>,
    name: String,
    /// Bytes of each declared range, in declaration order.
    lens: Vec<usize>,
    _v: PhantomData<fn() -> V>,
}

/// A declared read of elements of `T` (the type parameter of a [`CudarcOp`]).
pub struct Reads<T>(PhantomData<fn() -> T>);

/// A declared write of elements of `T` (the type parameter of a [`CudarcOp`]).
pub struct Writes<T>(PhantomData<fn() -> T>);

impl Stream {
    /// Describe work enqueued through cudarc on this stream, over cueflow memory it declares
    /// (see [`CudarcOp`]). The name shows in traces and sanitizer reports.
    pub fn cudarc(&self, name: impl Into<String>) -> CudarcOp<'_> {
        let name = name.into();
        CudarcOp {
            ext: self.external(name.clone()),
            name,
            lens: Vec::new(),
            _v: PhantomData,
        }
    }
}

impl<'s, V> CudarcOp<'s, V> {
    /// The operation reads `buf`; its view in the call is a [`CudarcView`].
    pub fn reads<T: Pod>(
        self,
        buf: &DeviceBuffer<T>,
    ) -> CudarcOp<'s, <V as CudarcPush<Reads<T>>>::Out>
    where
        V: CudarcPush<Reads<T>>,
    {
        self.declare(buf.byte_len(), |e| e.reads(buf))
    }

    /// The operation writes (and may read) `buf`; its view in the call is a
    /// [`CudarcViewMut`].
    pub fn writes<T: Pod>(
        self,
        buf: &DeviceBuffer<T>,
    ) -> CudarcOp<'s, <V as CudarcPush<Writes<T>>>::Out>
    where
        V: CudarcPush<Writes<T>>,
    {
        self.declare(buf.byte_len(), |e| e.writes(buf))
    }

    fn declare<W>(
        mut self,
        bytes: usize,
        add: impl FnOnce(External<'s>) -> External<'s>,
    ) -> CudarcOp<'s, W> {
        self.lens.push(bytes);
        CudarcOp {
            ext: add(self.ext),
            name: self.name,
            lens: self.lens,
            _v: PhantomData,
        }
    }
}

/// The closure of a call, its lifetime erased ([`CudarcOp::run`] says why that is sound).
type Call = Box<dyn for<'r> FnOnce(RawCuda<'r>) -> Result<()> + Send>;

/// Empties the slot when dropped: the closure is dropped, if it was not called, before the
/// data it borrows can go; a call in progress elsewhere holds the lock, so this waits for it.
struct Clear<'a>(&'a Mutex<Option<Call>>);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        drop(self.0.lock().take());
    }
}

impl<V: CudarcViews> CudarcOp<'_, V> {
    /// Enqueue the operation: `f` is called once, now, with the views of the declared memory
    /// and the stream as cudarc's, and enqueues its work there. What it returns is returned
    /// (cudarc's errors as [`Error::Driver`]; work it enqueued before failing still runs, and
    /// the operation keeps its memory alive until then).
    ///
    /// Refused with nothing enqueued: on the host backend or a capturing stream
    /// ([`Error::Unsupported`]), memory of another device ([`Error::InvalidHandle`]), declared
    /// ranges that are written and overlap another declared range
    /// ([`Error::InvalidArgument`]), a race in the sanitizer's error mode ([`Error::Race`]).
    /// Work enqueued through a view on another stream than [`CudarcCall::stream`] is reported
    /// after the fact as [`Error::InvalidArgument`].
    #[track_caller]
    pub fn run<F>(self, f: F) -> Result<()>
    where
        F: FnOnce(&CudarcCall<'_, V>) -> std::result::Result<(), CudarcError> + Send,
    {
        let site = Location::caller();
        let s = self.ext.stream();
        if s.device.inner.runs_host_code() {
            return Err(Error::Unsupported(format!(
                "cudarc operation `{}`: cudarc needs a CUDA device; on the host backend, \
                 describe the work with Stream::external and a host side",
                self.name
            )));
        }
        if s.is_capturing() {
            return Err(Error::Unsupported(format!(
                "cudarc operation `{}` on a capturing stream: a capture runs its operations \
                 on streams of its own, which cudarc's handle is not; use Stream::external",
                self.name
            )));
        }
        let stream = s.as_cudarc()?;
        let (name, lens) = (self.name, self.lens);
        let call = move |raw: RawCuda<'_>| -> Result<()> {
            if raw.stream != stream.cu_stream() as *mut std::ffi::c_void {
                return Err(Error::Unsupported(format!(
                    "cudarc operation `{name}` reached the driver on another stream than its \
                     own (a capture instantiated it): it cannot run there"
                )));
            }
            let wrong_stream = AtomicBool::new(false);
            let call = CudarcCall {
                parts: CallParts {
                    stream: &stream,
                    addrs: raw.buffers,
                    lens: &lens,
                    wrong_stream: &wrong_stream,
                },
                _v: PhantomData,
            };
            let r = f(&call);
            if wrong_stream.load(Ordering::Relaxed) {
                return Err(Error::InvalidArgument {
                    kernel: name,
                    why: "cudarc enqueued work through a view on another stream than the \
                          operation's (CudarcCall::stream): cueflow neither orders nor tracks \
                          it; make cuBLAS handles with Stream::as_cudarc of this stream and \
                          launch on CudarcCall::stream"
                        .into(),
                });
            }
            r.map_err(|e| match e.downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Error::Driver {
                    call: "cudarc",
                    code: format!("operation `{name}`: {e}"),
                },
            })
        };
        with_once(Box::new(call), |side| self.ext.cuda(side).enqueue_at(site))
    }
}

/// Run `body` with a CUDA side for an external operation that calls `f` — which may borrow
/// the caller's data — at most once, and only while `body` runs: after, it finds nothing to
/// call.
fn with_once<'f, R>(
    f: Box<dyn for<'r> FnOnce(RawCuda<'r>) -> Result<()> + Send + 'f>,
    body: impl FnOnce(Box<dyn Fn(RawCuda<'_>) -> Result<()> + Send + Sync>) -> R,
) -> R {
    // SAFETY: only the lifetime bound changes (the same trait object, the same layout). The
    // closure may borrow data that lives until this function returns; it is reachable only
    // through `slot`, which `_clear` empties — dropping the closure if it was not called —
    // before this function returns or unwinds, and a call in progress (on any thread) holds
    // the slot's lock, so emptying waits for it to end. So the closure is never called or
    // dropped after what it borrows is gone; a later call of the side (a graph instantiating
    // the operation, a handle kept past `body`) finds the slot empty.
    let f: Call = unsafe { std::mem::transmute::<_, Call>(f) };
    let slot = Arc::new(Mutex::new(Some(f)));
    let _clear = Clear(&slot);
    let taken = slot.clone();
    body(Box::new(move |raw| {
        let mut held = taken.lock();
        match held.take() {
            Some(call) => call(raw),
            None => Err(Error::Unsupported(
                "a cudarc operation runs once, when it is enqueued".into(),
            )),
        }
    }))
}

/// One call of a cudarc operation's closure: the stream to enqueue on and the views of the
/// declared memory (valid during the call only).
pub struct CudarcCall<'a, V> {
    parts: CallParts<'a>,
    _v: PhantomData<fn() -> V>,
}

/// The declared memory of one call, as the views are made of it.
pub struct CallParts<'a> {
    stream: &'a Arc<CudaStream>,
    addrs: &'a [u64],
    lens: &'a [usize],
    wrong_stream: &'a AtomicBool,
}

impl<'a, V: CudarcViews> CudarcCall<'a, V> {
    /// The operation's stream as cudarc's (the handle [`Stream::as_cudarc`] gives): enqueue
    /// here, and make library handles (cuBLAS) with it.
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        self.parts.stream
    }

    /// One view per declaration, in declaration order: a [`CudarcView`] for each
    /// [`reads`](CudarcOp::reads), a [`CudarcViewMut`] for each [`writes`](CudarcOp::writes).
    pub fn views(&self) -> V::Views<'a> {
        V::views(&self.parts)
    }
}

/// Read-only cueflow memory as cudarc takes it (`DevicePtr`, a kernel argument), during one
/// call of a [`CudarcOp`]. cueflow orders and tracks the access, so the view has none of
/// cudarc's per-slice events: it never waits or records.
pub struct CudarcView<'a, T> {
    ptr: CUdeviceptr,
    len: usize,
    stream: &'a Arc<CudaStream>,
    wrong_stream: &'a AtomicBool,
    _t: PhantomData<&'a [T]>,
}

/// Writable cueflow memory as cudarc takes it (`DevicePtrMut`, a kernel argument), during one
/// call of a [`CudarcOp`]; as [`CudarcView`] otherwise.
pub struct CudarcViewMut<'a, T> {
    ptr: CUdeviceptr,
    len: usize,
    stream: &'a Arc<CudaStream>,
    wrong_stream: &'a AtomicBool,
    _t: PhantomData<&'a mut [T]>,
}

macro_rules! view_common {
    ($view:ident) => {
        impl<T> $view<'_, T> {
            /// The device address of the first element.
            pub fn device_addr(&self) -> u64 {
                self.ptr
            }

            /// Elements in the view.
            pub fn len(&self) -> usize {
                self.len
            }

            /// True for an empty view.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }

            /// cudarc is about to enqueue work using the view on `stream`.
            fn used_on(&self, stream: &CudaStream) {
                if stream.cu_stream() != self.stream.cu_stream() {
                    self.wrong_stream.store(true, Ordering::Relaxed);
                }
            }
        }

        impl<T> DeviceSlice<T> for $view<'_, T> {
            fn len(&self) -> usize {
                self.len
            }

            fn stream(&self) -> &Arc<CudaStream> {
                self.stream
            }
        }

        impl<T> DevicePtr<T> for $view<'_, T> {
            fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
                self.used_on(stream);
                (self.ptr, SyncOnDrop::Record(None))
            }
        }

        // SAFETY: pushes a pointer to the view's device address, a `CUdeviceptr` that lives
        // as long as the borrow of the view (`'b`, which outlives the launch arguments), as
        // cudarc does for its own slices; the kernel parameter is that address.
        unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b $view<'c, T>> for LaunchArgs<'a> {
            fn arg(&mut self, arg: &'b $view<'c, T>) -> &mut Self {
                <Self as PushKernelArg<&'b CUdeviceptr>>::arg(self, &arg.ptr)
            }
        }
    };
}

view_common!(CudarcView);
view_common!(CudarcViewMut);

impl<T> DevicePtrMut<T> for CudarcViewMut<'_, T> {
    fn device_ptr_mut<'b>(&'b mut self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        self.used_on(stream);
        (self.ptr, SyncOnDrop::Record(None))
    }
}

// SAFETY: as for the shared borrow above: a pointer to the view's device address, alive for
// `'b`.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b mut CudarcViewMut<'c, T>> for LaunchArgs<'a> {
    fn arg(&mut self, arg: &'b mut CudarcViewMut<'c, T>) -> &mut Self {
        <Self as PushKernelArg<&'b CUdeviceptr>>::arg(self, &arg.ptr)
    }
}

/// A declaration's view ([`Reads`] and [`Writes`]).
pub trait CudarcSlot {
    /// The view the call gets.
    type View<'a>;
    /// The view of declaration `i` of the call.
    fn view<'a>(parts: &CallParts<'a>, i: usize) -> Self::View<'a>;
}

fn place<T>(parts: &CallParts<'_>, i: usize) -> (CUdeviceptr, usize) {
    (
        parts.addrs[i],
        parts.lens[i] / std::mem::size_of::<T>().max(1),
    )
}

impl<T: Pod> CudarcSlot for Reads<T> {
    type View<'a> = CudarcView<'a, T>;
    fn view<'a>(parts: &CallParts<'a>, i: usize) -> CudarcView<'a, T> {
        let (ptr, len) = place::<T>(parts, i);
        CudarcView {
            ptr,
            len,
            stream: parts.stream,
            wrong_stream: parts.wrong_stream,
            _t: PhantomData,
        }
    }
}

impl<T: Pod> CudarcSlot for Writes<T> {
    type View<'a> = CudarcViewMut<'a, T>;
    fn view<'a>(parts: &CallParts<'a>, i: usize) -> CudarcViewMut<'a, T> {
        let (ptr, len) = place::<T>(parts, i);
        CudarcViewMut {
            ptr,
            len,
            stream: parts.stream,
            wrong_stream: parts.wrong_stream,
            _t: PhantomData,
        }
    }
}

/// The declarations of a [`CudarcOp`] so far, as a tuple of [`Reads`] and [`Writes`] (at most
/// twelve), and the views a call gets of them.
pub trait CudarcViews {
    /// The views: a tuple with one view per declaration.
    type Views<'a>;
    /// The views of one call.
    fn views<'a>(parts: &CallParts<'a>) -> Self::Views<'a>;
}

/// One more declaration: the tuple `Self` with `N` appended.
pub trait CudarcPush<N> {
    /// The longer tuple.
    type Out;
}

macro_rules! tuples {
    ($($t:ident $i:tt),*) => {
        impl<$($t: CudarcSlot),*> CudarcViews for ($($t,)*) {
            type Views<'a> = ($($t::View<'a>,)*);
            #[allow(unused_variables, clippy::unused_unit)]
            fn views<'a>(parts: &CallParts<'a>) -> Self::Views<'a> {
                ($($t::view(parts, $i),)*)
            }
        }
    };
}

macro_rules! push {
    ($($t:ident),*) => {
        impl<$($t,)* N> CudarcPush<N> for ($($t,)*) {
            type Out = ($($t,)* N,);
        }
    };
}

tuples!();
tuples!(A 0);
tuples!(A 0, B 1);
tuples!(A 0, B 1, C 2);
tuples!(A 0, B 1, C 2, D 3);
tuples!(A 0, B 1, C 2, D 3, E 4);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuples!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
push!();
push!(A);
push!(A, B);
push!(A, B, C);
push!(A, B, C, D);
push!(A, B, C, D, E);
push!(A, B, C, D, E, F);
push!(A, B, C, D, E, F, G);
push!(A, B, C, D, E, F, G, H);
push!(A, B, C, D, E, F, G, H, I);
push!(A, B, C, D, E, F, G, H, I, J);
push!(A, B, C, D, E, F, G, H, I, J, K);

#[cfg(test)]
mod tests {
    //! The lifetime-erased closure of a cudarc operation ([`with_once`]): called at most once,
    //! only while the enqueue runs, and dropped before it returns — without a GPU.
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn raw(buffers: &[u64]) -> RawCuda<'_> {
        RawCuda {
            stream: std::ptr::null_mut(),
            context: std::ptr::null_mut(),
            buffers,
        }
    }

    /// Counts its drops.
    struct Dropped<'a>(&'a AtomicUsize);

    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_closure_runs_once_while_the_body_runs() {
        let (calls, drops) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let guard = Dropped(&drops); // borrowed data the closure takes along
        let kept = with_once(
            Box::new(|r: RawCuda<'_>| {
                let _g = guard;
                calls.fetch_add(r.buffers.len(), Ordering::SeqCst);
                Ok(())
            }),
            |side| {
                side(raw(&[1, 2])).unwrap();
                assert!(matches!(side(raw(&[3])), Err(Error::Unsupported(_))));
                side
            },
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // A side kept past the enqueue finds nothing to call.
        assert!(matches!(kept(raw(&[])), Err(Error::Unsupported(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_closure_never_called_is_dropped_before_the_enqueue_returns() {
        let drops = AtomicUsize::new(0);
        let guard = Dropped(&drops);
        let kept = with_once(
            Box::new(move |_: RawCuda<'_>| {
                let _g = guard;
                Ok(())
            }),
            |side| side,
        );
        assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped with the enqueue");
        assert!(kept(raw(&[])).is_err());
        // The same when the body unwinds.
        let drops = AtomicUsize::new(0);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let guard = Dropped(&drops);
            with_once(
                Box::new(move |_: RawCuda<'_>| {
                    let _g = guard;
                    Ok(())
                }),
                |_| panic!("the enqueue failed"),
            )
        }));
        assert!(unwound.is_err());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}
