//! The device's primary context: retained once per opened device, made current on each thread
//! before driver calls (through a per-thread cache, so the common case is one thread-local read),
//! reset when a kernel fault left it poisoned and a new device is opened (ER2 recovery; if the
//! driver still reports the fault after the reset, the new device gets a context of its own),
//! and released when the last object that needs it is gone. `CUEFLOW_CUDA_DEBUG=1` reports the
//! recovery decisions on stderr.
//!
//! Also the deferral list: driver calls are forbidden inside CUDA host-function callbacks, so a
//! drop that happens there (a host function owning the last handle of something) queues its
//! driver work here instead; it runs at the next driver-facing call on any other thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use cudarc::driver::sys::{CUcontext, CUdevice, CUstream_flags};
use parking_lot::Mutex;

use super::driver::{self, CuResult, St};
use super::quiesce::Quiesce;
use crate::error::{Error, Result};

/// Bumped whenever a context is released or reset, so per-thread caches bind again.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The next [`Ctx::instance`].
static INSTANCES: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (context, generation) current on this thread, as far as this backend made it current.
    static BOUND: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
    /// Set while this thread runs a host function for the driver (a `cuLaunchHostFunc`
    /// callback), where no driver call may be made.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Every live context object, to find poisoned ones when a device is opened again.
static LIVE: Mutex<Vec<Weak<Ctx>>> = Mutex::new(Vec::new());

/// The [`Quiesce`] of each device's primary context, by ordinal: shared by every `Ctx` of it,
/// those of one life and the next (a call that waits for running kernels, made for a `Ctx`
/// going away, must see the streams of one that was just made), and replaced when a reset
/// after a fault makes every older `Ctx` dead (their streams' handles are gone).
static QUIESCES: Mutex<Vec<(usize, Arc<Quiesce>)>> = Mutex::new(Vec::new());

/// The [`Quiesce`] of a new `Ctx`: its own for a context of our own, else the primary
/// context's.
fn quiesce_for(ordinal: usize, owned: bool) -> Arc<Quiesce> {
    if owned {
        Arc::default()
    } else {
        primary_quiesce(ordinal, false)
    }
}

/// The shared [`Quiesce`] of device `ordinal`'s primary context; a new one if `fresh`.
fn primary_quiesce(ordinal: usize, fresh: bool) -> Arc<Quiesce> {
    let mut all = QUIESCES.lock();
    match all.iter_mut().find(|(o, _)| *o == ordinal) {
        Some((_, q)) if !fresh => q.clone(),
        Some((_, q)) => {
            *q = Arc::default();
            q.clone()
        }
        None => {
            let q = Arc::<Quiesce>::default();
            all.push((ordinal, q.clone()));
            q
        }
    }
}

type Deferred = Box<dyn FnOnce() + Send>;

static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
static HAS_DEFERRED: AtomicBool = AtomicBool::new(false);

/// True on a thread that is running a host function (a CUDA callback): no driver calls there.
pub(super) fn in_host_fn() -> bool {
    IN_CALLBACK.with(|c| c.get())
}

/// Run `f` as the driver's host-function callback: [`in_host_fn`] holds until it returns or
/// unwinds.
pub(super) fn as_callback<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_CALLBACK.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(IN_CALLBACK.with(|c| c.replace(true)));
    f()
}

/// Run `f` now, or later on another thread when called inside a host function.
pub(super) fn now_or_deferred(f: impl FnOnce() + Send + 'static) {
    if in_host_fn() {
        DEFERRED.lock().push(Box::new(f));
        HAS_DEFERRED.store(true, Ordering::Release);
    } else {
        f();
    }
}

/// Run the driver work that drops inside host functions queued (cheap when there is none).
#[inline]
pub(super) fn run_deferred() {
    if HAS_DEFERRED.load(Ordering::Acquire) {
        run_deferred_now();
    }
}

/// [`run_deferred`] once some work is queued.
#[inline(never)]
fn run_deferred_now() {
    if !in_host_fn() {
        let work = {
            let mut d = DEFERRED.lock();
            HAS_DEFERRED.store(false, Ordering::Release);
            std::mem::take(&mut *d)
        };
        for f in work {
            f();
        }
    }
}

/// A retained primary context.
pub(super) struct Ctx {
    raw: CUcontext,
    /// A context of our own (`cuCtxCreate`), not the device's primary context.
    owned: bool,
    /// The device handle.
    pub dev: CUdevice,
    /// The device ordinal.
    pub ordinal: usize,
    /// Which life of the device's context this is: shared by the `Ctx`s that hold it at once,
    /// new when it was made anew (every `Ctx` of it had gone, which resets a primary context,
    /// or a reset after a fault, or a context of our own). Peer access settled for one life is
    /// gone in the next ([`super::shared::enable_peer`]).
    pub instance: u64,
    /// A kernel fault poisoned the context (KN2).
    poisoned: AtomicBool,
    /// The context was reset for a new device after a fault: every handle made through this
    /// object is gone, so its objects make no more driver calls.
    dead: AtomicBool,
    /// Internal non-blocking stream for deferred stream-ordered frees.
    pub free_stream: St,
    /// Stream-ordered frees issued (`cuMemFreeAsync`) since a synchronization last looked: a
    /// free issued when a synchronization retires the work that held the memory reaches the
    /// pool only after the driver's synchronization, so the synchronization repeats the
    /// driver's (on idle streams) to let the pool release above its threshold then (HM5).
    pub pool_frees: std::sync::atomic::AtomicUsize,
    /// Pinned blocks whose last holder is gone, kept for reuse up to a bound (RL3): those past
    /// it go to `evicted`; all of them go to the freeing thread when a pinned allocation runs
    /// out of memory (`cuMemFreeHost` waits for running kernels, holding up other threads'
    /// calls meanwhile, so no drop makes it); the rest are freed when the context goes away.
    pub pinned_cache: super::pinned_cache::PinnedCache,
    /// Pinned blocks the cache let go of, freed at a synchronization or pinned allocation that
    /// finds every stream of the context idle ([`super::quiesce`],
    /// `memory::free_evicted_if_idle`): `cuMemFreeHost` would hold up other threads' calls
    /// behind a running kernel.
    pub evicted: parking_lot::Mutex<Vec<super::pinned_cache::Block>>,
    /// `evicted` is not empty.
    pub evicting: AtomicBool,
    /// What submissions on the context's streams look at before enqueueing; shared by every
    /// `Ctx` of a primary context ([`primary_quiesce`]).
    pub quiesce: Arc<Quiesce>,
    /// The module caches of devices that were dropped, shared with the context's other devices
    /// (`module::of_context`). `cuModuleUnload` waits for the context to go idle while holding
    /// a driver lock, so unloading while another device of the same context runs a kernel
    /// stalled that device's enqueues (seen on an H100: a record call blocked 20 ms behind a
    /// spinning kernel, ST3). Unloaded when a `Ctx` goes that holds the last reference to a
    /// cache (whichever of the context's `Ctx`s is released last among those holding it).
    pub retired_modules: parking_lot::Mutex<Vec<Arc<super::module::Modules>>>,
}

// SAFETY: the context and device handles are identifiers the driver accepts on any thread
// (rule D2: made current first); the Rust side never dereferences them.
unsafe impl Send for Ctx {}
// SAFETY: as above; the only mutable state is atomic.
unsafe impl Sync for Ctx {}

/// Forget which context this thread has current: a library that sets the current device
/// itself (NCCL, a user's own CUDA calls) was just called, so the next [`Ctx::bind`] makes its
/// driver call again (D2).
pub(crate) fn forget_bound() {
    BOUND.with(|b| b.set((0, 0)));
}

/// Run `f`, then make current again the context this thread had bound before, if `f` changed
/// it (D2). For the driver work of drops and releases: a keepalive queue retiring an
/// operation may release another device's memory (a registration, a pool block, a
/// communicator, the last hold on its context) in the middle of this device's calls, which
/// go on expecting their own context current. Only a context that is still alive is bound
/// again (found among the live ones and held while it is bound); otherwise, or when none was
/// bound, the binding is forgotten and the next bind binds.
pub(super) fn restoring(f: impl FnOnce()) {
    let before = BOUND.with(|b| b.get());
    f();
    if before.0 != 0 && BOUND.with(|b| b.get()) != before {
        bind_again(before.0);
    }
}

/// Bind the live context whose handle is `raw`, or forget the binding. `LIVE` is only tried:
/// a drop may run while this thread opens a device (which holds it).
fn bind_again(raw: usize) {
    let live = LIVE.try_lock().and_then(|l| {
        l.iter()
            .filter_map(Weak::upgrade)
            .find(|c| c.raw as usize == raw && c.usable())
    });
    match live {
        // Held here, so alive while it is made current (D1).
        Some(ctx) if ctx.bind().is_ok() => {}
        _ => forget_bound(),
    }
}

/// Run `f` with `ctx` current (skipped when the context is gone or cannot be bound), then
/// bind back what was current before ([`restoring`]).
pub(super) fn in_context(ctx: &Ctx, f: impl FnOnce()) {
    restoring(|| {
        if ctx.usable() && ctx.bind().is_ok() {
            f();
        }
    });
}

/// Remember the context a library that sets the current device itself (NCCL) left current on
/// this thread, so the next [`Ctx::bind`] of that context makes no driver call (D2). One
/// `cuCtxGetCurrent` (a thread-local read in the driver) instead of a `cuCtxSetCurrent` at the
/// next bind; where the query fails, the binding is forgotten.
pub(crate) fn note_current() {
    let key = match driver::context::current() {
        Ok(cur) if !cur.is_null() => (cur as usize, GENERATION.load(Ordering::Acquire)),
        _ => (0, 0),
    };
    BOUND.with(|b| b.set(key));
}

fn set_current(raw: CUcontext) -> CuResult<()> {
    // SAFETY: `raw` is a retained primary context or one of our own, alive (D1).
    unsafe { driver::context::set_current(raw) }?;
    BOUND.with(|b| b.set((raw as usize, GENERATION.load(Ordering::Acquire))));
    Ok(())
}

/// Make the fresh context `raw` current and create its internal stream; on failure undo the
/// context with `undo` (release or destroy it).
fn finish_open(raw: CUcontext, undo: impl FnOnce()) -> CuResult<(CUcontext, St)> {
    if let Err(e) = set_current(raw) {
        undo();
        return Err(e);
    }
    // The context is current (set above).
    match driver::stream::create(CUstream_flags::CU_STREAM_NON_BLOCKING, 0) {
        Ok(free_stream) => Ok((raw, free_stream)),
        Err(e) => {
            undo();
            Err(e)
        }
    }
}

/// Retain the primary context of `dev`, make it current and create the internal stream.
fn open_primary(dev: CUdevice) -> CuResult<(CUcontext, St)> {
    let raw = driver::context::primary_retain(dev)?;
    finish_open(raw, || {
        // SAFETY: balances the retain above on the failure path; nothing used the context.
        let _ = unsafe { driver::context::primary_release(dev) };
    })
}

/// Create a context of our own on `dev` (when the primary context cannot be recovered), make it
/// current and create the internal stream.
fn open_owned(dev: CUdevice) -> CuResult<(CUcontext, St)> {
    let raw = driver::context::create(dev)?;
    finish_open(raw, || {
        // SAFETY: destroys the context created above, on the failure path; nothing used it.
        let _ = unsafe { driver::context::destroy(raw) };
    })
}

/// The error when CUDA stays poisoned in this process whatever context is tried.
fn unrecoverable(ordinal: usize, e: driver::CuError) -> Error {
    if !e.is_sticky() {
        return e.to_error();
    }
    Error::Unavailable(format!(
        "CUDA device {ordinal}: an earlier kernel fault ({}) left CUDA unusable in this \
         process, and neither a context reset nor a new context cleared it; NVIDIA documents \
         that the process must be restarted after such a fault",
        driver::error_name(e.code)
    ))
}

/// Note context decisions on stderr when `CUEFLOW_CUDA_DEBUG` is set.
fn debug(what: std::fmt::Arguments<'_>) {
    if crate::config::cuda_debug() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "cueflow cuda: {what}");
    }
}

/// Reset the primary context of `dev` after a fault poisoned it: every live object of the old
/// context is marked dead first, so none of them makes another driver call (its handles are gone).
fn reset(dev: CUdevice, ordinal: usize, live: &[Weak<Ctx>]) -> Result<()> {
    for c in live.iter().filter_map(Weak::upgrade) {
        if c.ordinal == ordinal && !c.owned {
            c.dead.store(true, Ordering::Release);
        }
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
    primary_quiesce(ordinal, true);
    // SAFETY: every object of the old context is dead (above) and makes no further driver
    // call with its handles (it only releases its reference), so nothing uses the state the
    // reset destroys.
    unsafe { driver::context::primary_reset(dev) }.map_err(|e| e.to_error())
}

impl Ctx {
    /// Retain the primary context of device `ordinal` and make it current. If an earlier device
    /// of this ordinal was poisoned by a kernel fault and is still alive, reset the context first
    /// so the new device starts clean (ER2: a new context is the recovery).
    pub fn retain(ordinal: usize) -> Result<Arc<Ctx>> {
        let fail = |e: driver::CuError| e.to_error();
        let count = driver::context::device_count().map_err(fail)?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::Unavailable(format!(
                "CUDA device {ordinal} does not exist: the driver reports {count} device(s)"
            )));
        }
        let dev: CUdevice = driver::context::device(ordinal as i32).map_err(fail)?;

        let mut live = LIVE.lock();
        live.retain(|w| w.strong_count() > 0);
        let poisoned = live.iter().filter_map(Weak::upgrade).any(|c| {
            !c.owned
                && c.ordinal == ordinal
                && c.poisoned.load(Ordering::Acquire)
                && !c.dead.load(Ordering::Acquire)
        });
        if poisoned {
            debug(format_args!(
                "a live device {ordinal} is poisoned: resetting its context"
            ));
            reset(dev, ordinal, &live)?;
        }
        let mut owned = false;
        let (raw, free_stream) = match open_primary(dev) {
            Ok(x) => x,
            // The primary context is still poisoned by a fault that a device we no longer
            // track saw (or that another library caused): reset it and try once more; if the
            // driver keeps reporting the fault, use a context of our own (ER2: a new context is
            // the recovery).
            Err(e) if e.is_sticky() => {
                debug(format_args!(
                    "primary context of device {ordinal} poisoned ({})",
                    e.describe()
                ));
                reset(dev, ordinal, &live)?;
                match open_primary(dev) {
                    Ok(x) => x,
                    Err(e) if e.is_sticky() => {
                        debug(format_args!(
                            "reset did not clear it ({}); creating a private context",
                            e.describe()
                        ));
                        owned = true;
                        open_owned(dev).map_err(|e| unrecoverable(ordinal, e))?
                    }
                    Err(e) => return Err(e.to_error()),
                }
            }
            Err(e) => return Err(e.to_error()),
        };
        // The context is retained now, so a live `Ctx` of it found here kept it alive since
        // it was made: the same life.
        let instance = live
            .iter()
            .filter_map(Weak::upgrade)
            .find(|c| !owned && !c.owned && c.ordinal == ordinal && !c.dead.load(Ordering::Acquire))
            .map_or_else(|| INSTANCES.fetch_add(1, Ordering::Relaxed), |c| c.instance);
        let ctx = Arc::new(Ctx {
            raw,
            owned,
            dev,
            ordinal,
            instance,
            poisoned: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            free_stream,
            pool_frees: std::sync::atomic::AtomicUsize::new(0),
            pinned_cache: super::pinned_cache::PinnedCache::new(
                crate::config::pinned_cache_max_bytes(),
            ),
            evicted: parking_lot::Mutex::new(Vec::new()),
            evicting: AtomicBool::new(false),
            quiesce: quiesce_for(ordinal, owned),
            retired_modules: parking_lot::Mutex::new(Vec::new()),
        });
        live.push(Arc::downgrade(&ctx));
        Ok(ctx)
    }

    /// Make the context current on this thread (rule D2). One thread-local read when it
    /// already is.
    #[inline]
    pub fn bind(&self) -> CuResult<()> {
        let key = (self.raw as usize, GENERATION.load(Ordering::Acquire));
        if BOUND.with(|b| b.get()) == key && super::interop::context_is_current(self.raw) {
            return Ok(());
        }
        set_current(self.raw)
    }

    /// The driver handle (for calls that name the context: graph memcpy nodes, peer copies).
    pub fn raw(&self) -> CUcontext {
        self.raw
    }

    /// False once the context was reset under this object: make no more driver calls.
    #[inline]
    pub fn usable(&self) -> bool {
        !self.dead.load(Ordering::Acquire)
    }

    /// How host threads wait for this context (DV2): the scheduling flags of the primary
    /// context (`cuDevicePrimaryCtxSetFlags_v2`, kept for later retains of it, as
    /// `cudaSetDeviceFlags` does) and of the context itself, which is already active (it was
    /// retained at open): `cuCtxSetFlags` changes an active context's flags, so the waits from
    /// now on follow them. Bound to this thread (D2).
    pub fn set_sync_mode(&self, mode: crate::types::SyncMode) -> CuResult<()> {
        use crate::types::SyncMode;
        use cudarc::driver::sys::CUctx_flags::*;
        let sched = match mode {
            SyncMode::Auto => CU_CTX_SCHED_AUTO,
            SyncMode::Spin => CU_CTX_SCHED_SPIN,
            SyncMode::Yield => CU_CTX_SCHED_YIELD,
            SyncMode::BlockingSync => CU_CTX_SCHED_BLOCKING_SYNC,
        } as u32;
        self.bind()?;
        // D2: bound above.
        let flags = driver::context::flags()?;
        let flags = (flags & !(CU_CTX_SCHED_MASK as u32)) | sched;
        if !self.owned {
            // Only the flags a primary context takes: the scheduling mode and local-memory
            // resizing (cuCtxGetFlags may report others, such as the ignored MAP_HOST).
            let primary = sched | (flags & CU_CTX_LMEM_RESIZE_TO_MAX as u32);
            driver::context::primary_set_flags(self.dev, primary)?;
        }
        // D2: bound above. CUDA 12.1's cuCtxSetFlags (a missing function before, which the
        // caller checked for: Feature::SyncMode).
        driver::context::set_flags(flags)
    }

    /// Note that a kernel fault poisoned the context.
    pub fn mark_poisoned(&self) {
        self.poisoned.store(true, Ordering::Release);
    }
}

impl Drop for Ctx {
    /// The last hold on a context may go in the middle of another device's calls (its last
    /// buffer retired there): that device's context is bound again after.
    fn drop(&mut self) {
        restoring(|| self.release());
    }
}

impl Ctx {
    fn release(&mut self) {
        GENERATION.fetch_add(1, Ordering::AcqRel);
        // No driver calls inside a host function (leaking the reference is the only safe
        // choice there).
        if in_host_fn() {
            return;
        }
        if !self.usable() {
            // The context was reset under us: its handles are gone, but the reset did not
            // release our reference (the driver documents that a reset keeps them), and the
            // driver resets a primary context by itself once the last one is released.
            if !self.owned {
                // SAFETY: balances the retain in `Ctx::retain`; called once.
                let _ = unsafe { driver::context::primary_release(self.dev) };
            }
            return;
        }
        if set_current(self.raw).is_ok() {
            // Modules another device of the context still uses stay loaded.
            let modules: Vec<_> = std::mem::take(self.retired_modules.get_mut())
                .into_iter()
                .filter_map(Arc::into_inner)
                .collect();
            let evicted = std::mem::take(self.evicted.get_mut());
            let blocks: Vec<_> = self
                .pinned_cache
                .drain()
                .into_iter()
                .chain(evicted)
                .collect();
            if !modules.is_empty() || !blocks.is_empty() {
                // Unloads and frees wait for running kernels: those of another device of this
                // primary context (a `Ctx` of its own, maybe opened while this one went away
                // on the freeing thread) hold up other threads' calls meanwhile.
                self.quiesce.once_idle(|| {
                    for m in modules {
                        m.unload_all();
                    }
                    for b in blocks {
                        // SAFETY: a cuMemHostAlloc block of this context, idle (its last
                        // holder is gone) and freed once: it left the cache above.
                        let _ = unsafe {
                            driver::memory::host_free(b.addr as usize as *mut std::ffi::c_void)
                        };
                    }
                });
            }
            driver::stream::destroy(self.free_stream);
        }
        if self.owned {
            // SAFETY: the context was created by `open_owned` and is destroyed once; every
            // object that used it held this Ctx and is gone.
            let _ = unsafe { driver::context::destroy(self.raw) };
        } else {
            // SAFETY: balances the retain in `Ctx::retain`; called once.
            let _ = unsafe { driver::context::primary_release(self.dev) };
        }
        GENERATION.fetch_add(1, Ordering::AcqRel);
    }
}
