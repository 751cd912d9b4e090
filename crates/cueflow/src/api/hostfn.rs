//! Host functions that run once and host functions over buffers (HF3), documented on
//! [`HostTask`] and [`Stream::host_fn_once`].

use std::cell::Cell;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytemuck::Pod;
use parking_lot::Mutex;

use crate::api::memory::PinnedSlice;
use crate::api::stream::Stream;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{HostCall, Op, Work};
use crate::error::{Error, Result};
use crate::types::Access;

impl Stream {
    /// Run `f` once on the host after all earlier work on this stream and before any later
    /// work starts (HF1, HF3): it may consume what it captured, so a workload moves in
    /// without `Mutex<Option<_>>`. Runtime calls inside it are refused (HF2); a panic poisons
    /// the device with [`Error::HostFnFault`]. A capturing stream refuses it with
    /// [`Error::Capture`] (a graph runs its host functions at every launch: use
    /// [`host_fn`](Self::host_fn) there), and nothing is recorded.
    ///
    /// ```
    /// # let dev = cueflow::Device::from_env()?;
    /// let s = cueflow::Stream::new(&dev)?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let report = vec![1u32, 2, 3]; // moved in, consumed once
    /// s.host_fn_once(move || tx.send(report.into_iter().sum::<u32>()).unwrap())?;
    /// s.synchronize()?;
    /// assert_eq!(rx.recv().unwrap(), 6);
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    #[track_caller]
    pub fn host_fn_once(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        self.host_once(None, Vec::new(), Box::new(move |_| f()), Location::caller())
    }

    /// Run `f` once on the host after all earlier work on this stream, with the stream's
    /// status, as `cudaStreamAddCallback` does (HF4): `Ok(())`, or the device's sticky error
    /// ([`Device::sticky_error`](crate::Device::sticky_error)) when a fault poisoned it before
    /// the stream got here — a callback learns that the work before it failed. On a poisoned
    /// device no host function runs, so `f` is then called with the error when the stream
    /// drops its place, on whatever thread does that (a device engine, or a thread that
    /// synchronizes). Later work on the stream waits for it (HF1); runtime calls inside it are
    /// refused (HF2); a panic inside it poisons the device with [`Error::HostFnFault`] (one in
    /// a call with an error is dropped: the device is poisoned already). A capturing stream
    /// refuses it with [`Error::Capture`] (CUDA does too). [`host_fn`](Self::host_fn) and
    /// [`host_fn_once`](Self::host_fn_once) stay as they were: functions that need no status.
    ///
    /// ```
    /// # let dev = cueflow::Device::from_env()?;
    /// let s = cueflow::Stream::new(&dev)?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// s.add_callback(move |status| tx.send(status.is_ok()).unwrap())?;
    /// s.synchronize()?;
    /// assert!(rx.recv().unwrap());
    /// # Ok::<(), cueflow::Error>(())
    /// ```
    #[track_caller]
    pub fn add_callback(&self, f: impl FnOnce(Result<()>) + Send + 'static) -> Result<()> {
        let site = Location::caller();
        if self.is_capturing() {
            return Err(Error::Capture(
                "a stream callback (cudaStreamAddCallback) cannot be captured: use \
                 Stream::host_fn inside a capture"
                    .into(),
            ));
        }
        let cb = Arc::new(Callback {
            f: Mutex::new(Some(Box::new(f))),
            status: self.device.inner.sticky_probe(),
            enqueued: AtomicBool::new(false),
        });
        let reached = cb.clone();
        let name: Arc<str> = "callback".into();
        let r = self.host_once(
            Some(name),
            Vec::new(),
            Box::new(move |_| reached.call()),
            site,
        );
        match &r {
            Ok(()) => cb.enqueued.store(true, Ordering::Release),
            // Refused: nothing was enqueued, and `f` is never called.
            Err(_) => drop(cb.f.lock().take()),
        }
        r
    }

    /// Describe a host function over pinned buffers (HF3); nothing is enqueued until
    /// [`HostTask::run`]. See [`HostTask`].
    pub fn host_task(&self, name: impl Into<String>) -> HostTask<'_> {
        HostTask {
            stream: self,
            name: name.into(),
            accesses: Vec::new(),
        }
    }

    fn host_once(
        &self,
        name: Option<Arc<str>>,
        accesses: Vec<(MemRef, Access)>,
        f: Box<dyn FnOnce(HostIo<'_>) + Send>,
        site: &'static Location<'static>,
    ) -> Result<()> {
        if self.is_capturing() {
            return Err(Error::Capture(format!(
                "a host function that runs once ({}) cannot be captured: a graph runs its host \
                 functions at every launch; use Stream::host_fn there",
                name.as_deref().unwrap_or("host_fn_once")
            )));
        }
        let accesses: Arc<[(MemRef, Access)]> = accesses.into();
        let mems = accesses.clone();
        let cell = Mutex::new(Some(f));
        let run = move || {
            // Taken before the call: the lock is not held while `f` runs, and a second run
            // (there is none outside graphs, which refuse it) finds nothing.
            let f = cell.lock().take();
            if let Some(f) = f {
                f(HostIo {
                    mems: &mems,
                    taken: Cell::new(0),
                })
            }
        };
        let op = Op::new(Work::HostFn(Box::new(
            crate::core::streams::hostfn::stream_call(run, name, accesses),
        )));
        self.submit(op, site)
    }
}

/// The body of a stream callback: called with the stream's status.
type CallbackFn = Box<dyn FnOnce(Result<()>) + Send>;

/// A stream callback (HF4): called once, by the stream when it gets there, or by the drop of
/// its place when a poisoned device skipped it.
struct Callback {
    f: Mutex<Option<CallbackFn>>,
    status: crate::types::StickyProbe,
    /// `add_callback` enqueued it (before, its drop means a refusal: no call).
    enqueued: AtomicBool,
}

impl Callback {
    /// The stream reached it.
    fn call(&self) {
        let f = self.f.lock().take();
        if let Some(f) = f {
            f((self.status)().map_or(Ok(()), Err));
        }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        if !*self.enqueued.get_mut() {
            return;
        }
        if let Some(f) = self.f.get_mut().take() {
            // Never reached: the device was poisoned first, and skipped it (HF4).
            let e = (self.status)().unwrap_or_else(|| {
                Error::Unavailable("the stream dropped the callback without reaching it".into())
            });
            crate::core::streams::hostfn::run_once_as_host_fn(move || f(Err(e)));
        }
    }
}

/// A host function over pinned buffers (HF3), being described ([`Stream::host_task`]).
///
/// It declares the buffers it reads and writes; when it runs — in its stream's order, after
/// the work enqueued before it (HF1), and after any earlier conflicting access on another
/// stream too, so that no copy is still writing what it reads — it gets safe views of exactly
/// those bytes through [`HostIo`]. Its accesses are accesses like any other (AC1): the race
/// sanitizer checks them, automatic ordering waits for them, a host view of the buffer
/// ([`PinnedBuffer::read`](crate::PinnedBuffer::read)) waits for them (MM3), and a trace
/// shows them. It runs once, so it may consume what it captured. A panic inside it (including
/// a view asked for wrongly) poisons the device with [`Error::HostFnFault`] naming it.
///
/// ```
/// use cueflow::{Device, DeviceBuffer, PinnedBuffer, Stream};
/// let dev = Device::from_env()?;
/// let s = Stream::new(&dev)?;
/// let d = DeviceBuffer::<f32>::new(&dev, 1024)?;
/// let mut p = PinnedBuffer::<f32>::new(&dev, 1024)?;
/// let mut sum = PinnedBuffer::<f32>::new(&dev, 1)?;
/// s.memset(&d, 0)?;
/// s.copy_d2h(&mut p, &d)?;
/// s.host_task("check")
///     .reads(&p)     // argument 0
///     .writes(&sum)  // argument 1
///     .run(|io| io.write::<f32>(1)[0] = io.read::<f32>(0).iter().sum())?;
/// assert_eq!(sum.read()?[0], 0.0); // waits for the host task (MM3)
/// # Ok::<(), cueflow::Error>(())
/// ```
#[must_use = "nothing is enqueued until `run`"]
pub struct HostTask<'s> {
    stream: &'s Stream,
    name: String,
    accesses: Vec<(MemRef, Access)>,
}

impl HostTask<'_> {
    /// The task reads `buf` (a [`PinnedBuffer`](crate::PinnedBuffer) or a range of one):
    /// [`HostIo::read`] with this declaration's index.
    pub fn reads<'b, T: Pod>(mut self, buf: impl Into<PinnedSlice<'b, T>>) -> Self {
        self.accesses.push((buf.into().mem(), Access::Read));
        self
    }

    /// The task writes (and may read) `buf`: [`HostIo::write`] with this declaration's index.
    pub fn writes<'b, T: Pod>(mut self, buf: impl Into<PinnedSlice<'b, T>>) -> Self {
        self.accesses.push((buf.into().mem(), Access::Write));
        self
    }

    /// Enqueue the task with its body. Refused with nothing enqueued: a buffer of another
    /// device ([`Error::InvalidHandle`]), memory the host cannot reach (device memory), or a
    /// range declared written that overlaps another declared range
    /// ([`Error::InvalidArgument`]); a capturing stream ([`Error::Capture`]).
    #[track_caller]
    pub fn run(self, f: impl FnOnce(HostIo<'_>) + Send + 'static) -> Result<()> {
        let site = Location::caller();
        self.validate()?;
        let name: Arc<str> = self.name.into();
        self.stream
            .host_once(Some(name), self.accesses, Box::new(f), site)
    }

    /// Enqueue the task with a body that may run many times: as [`run`](Self::run), but a
    /// capturing stream takes it in, and the graph runs it at every launch (GR3, HF3).
    #[track_caller]
    pub fn run_fn(self, f: impl Fn(HostIo<'_>) + Send + Sync + 'static) -> Result<()> {
        let site = Location::caller();
        self.validate()?;
        let stream = self.stream;
        let op = Op::new(Work::HostFn(Box::new(repeatable_host_call(
            self.name,
            self.accesses,
            f,
        ))));
        stream.submit(op, site)
    }

    /// The checks of [`run`](Self::run).
    fn validate(&self) -> Result<()> {
        let s = self.stream;
        check_host_accesses(&self.name, &self.accesses, |m| {
            s.check_mem(m, "Stream::host_task")
        })
    }
}

/// The checks of a host task's declared buffers ([`HostTask::run`], and the graph builder's
/// host nodes): at most 64, each usable by the device (`check_mem`) and host-visible
/// (pinned), and no written range overlapping another declared range.
pub(crate) fn check_host_accesses(
    name: &str,
    accesses: &[(MemRef, Access)],
    check_mem: impl Fn(&MemRef) -> Result<()>,
) -> Result<()> {
    let bad = |why: String| Error::InvalidArgument {
        kernel: format!("host function `{name}`"),
        why,
    };
    if accesses.len() > 64 {
        return Err(bad(format!(
            "{} buffers declared; at most 64",
            accesses.len()
        )));
    }
    for (i, (m, a)) in accesses.iter().enumerate() {
        check_mem(m)?;
        if !m.kind().is_host() {
            return Err(bad(format!(
                "buffer {i} is not host-visible memory (pinned); a host function cannot \
                 reach device memory"
            )));
        }
        for (j, (b, kb)) in accesses.iter().enumerate().skip(i + 1) {
            if m.overlaps(b) && (*a == Access::Write || *kb == Access::Write) {
                return Err(bad(format!(
                    "buffer {i} (bytes {:?}) and buffer {j} (bytes {:?}) overlap and one \
                     of them is written",
                    m.range(),
                    b.range()
                )));
            }
        }
    }
    Ok(())
}

/// A host call whose body may run many times (a captured or built graph runs it at every
/// launch), handed views of exactly the declared buffers (HF3).
pub(crate) fn repeatable_host_call(
    name: String,
    accesses: Vec<(MemRef, Access)>,
    f: impl Fn(HostIo<'_>) + Send + Sync + 'static,
) -> HostCall {
    let accesses: Arc<[(MemRef, Access)]> = accesses.into();
    let mems = accesses.clone();
    let run = move || f(HostIo::over(&mems));
    HostCall {
        f: crate::core::streams::hostfn::guarded(run),
        name: Some(name.into()),
        accesses,
        order: None,
    }
}

/// What a [`HostTask`] sees of the buffers it declared: views of exactly those bytes, by
/// declaration index. A view asked for wrongly — an index out of range, `write` on a buffer
/// declared read (or the reverse), the same written buffer twice, a range that is not a whole
/// number of `T` — panics, which faults the device with the task's name (HF3).
pub struct HostIo<'a> {
    mems: &'a [(MemRef, Access)],
    /// Written views already handed out (bit per declaration).
    taken: Cell<u64>,
}

impl<'a> HostIo<'a> {
    /// Views of `mems`, by declaration index (graph host tasks, GR8).
    pub(crate) fn over(mems: &'a [(MemRef, Access)]) -> Self {
        HostIo {
            mems,
            taken: Cell::new(0),
        }
    }

    fn mem<T: Pod>(&self, i: usize, want: Access) -> &'a MemRef {
        let (m, a) = self.mems.get(i).unwrap_or_else(|| {
            panic!(
                "buffer {i} asked for, but the host task declared {}",
                self.mems.len()
            )
        });
        assert!(
            *a == want,
            "buffer {i} was declared {a:?}, not {want:?}: use {}",
            if *a == Access::Read { "read" } else { "write" }
        );
        let size = std::mem::size_of::<T>().max(1);
        assert!(
            m.len % size == 0
                && (m.alloc.addr as usize + m.offset) % std::mem::align_of::<T>() == 0,
            "buffer {i} ({} bytes) is not a whole number of aligned {}",
            m.len,
            std::any::type_name::<T>()
        );
        m
    }

    /// The number of buffers declared.
    pub fn len(&self) -> usize {
        self.mems.len()
    }

    /// True when no buffer was declared.
    pub fn is_empty(&self) -> bool {
        self.mems.is_empty()
    }

    /// Buffer `i`, declared with [`HostTask::reads`], as elements of `T`.
    pub fn read<T: Pod>(&self, i: usize) -> &'a [T] {
        let m = self.mem::<T>(i, Access::Read);
        if std::mem::size_of::<T>() == 0 {
            return &[];
        }
        // SAFETY: the op holds the allocation (MM2) and core checked the range lies inside it;
        // pinned memory is host memory. No declared written range overlaps it (checked at
        // `run`), the task runs after every earlier conflicting access of any stream (core
        // orders host views, HF3), and a host view of these bytes waits for the task (MM3).
        // Alignment and size checked in `mem`; Pod: any bytes are a valid T.
        unsafe {
            std::slice::from_raw_parts(
                m.alloc.host_ptr().add(m.offset) as *const T,
                m.len / std::mem::size_of::<T>(),
            )
        }
    }

    /// Buffer `i`, declared with [`HostTask::writes`], as elements of `T`; once per buffer.
    #[allow(clippy::mut_from_ref)] // Handed out once per buffer (the `taken` bits).
    pub fn write<T: Pod>(&self, i: usize) -> &'a mut [T] {
        let m = self.mem::<T>(i, Access::Write);
        let bit = 1u64 << i; // At most 64 declarations (checked at `run`).
        assert!(
            self.taken.get() & bit == 0,
            "buffer {i} handed out twice for writing"
        );
        self.taken.set(self.taken.get() | bit);
        if std::mem::size_of::<T>() == 0 {
            return &mut [];
        }
        // SAFETY: as in `read`; and this range overlaps no other declared range (checked at
        // `run`) and is handed out once (the bit above), so this is the only reference to it.
        unsafe {
            std::slice::from_raw_parts_mut(
                m.alloc.host_ptr().add(m.offset) as *mut T,
                m.len / std::mem::size_of::<T>(),
            )
        }
    }
}
