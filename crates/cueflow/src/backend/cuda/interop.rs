//! Sharing the device with another library that calls the driver itself (cudarc): its view of
//! a stream, the owners it hands over, and the current context it changes.
//!
//! * **Lent streams.** A stream lends its raw handle once ([`Lent`]) as the other library's
//!   object (a cudarc `CudaStream` that does not own it). That object may outlive the stream,
//!   so a dropped stream whose lent object is still held elsewhere is not destroyed then: it
//!   lingers, and the next driver-facing call after the last outside holder is gone destroys
//!   it ([`poll_lingering`]). A stream adopted with an owner (a cudarc stream handed to
//!   cueflow) lends that owner and is never destroyed by cueflow.
//! * **Owners.** What another library frees with driver calls (its stream, its `CudaSlice`) is
//!   dropped where driver calls are allowed, never inside a host function ([`owner_drop`]).
//! * **The current context.** cudarc makes its context current before each call; this
//!   backend caches the context it made current per thread ([`super::context`]). Once a
//!   context is shared ([`share`]), the cache is checked against the driver's current
//!   context, so a thread that used cudarc on another device gets the right context again.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::CUcontext;
use parking_lot::Mutex;

use super::context::{forget_bound, in_host_fn, now_or_deferred, restoring, Ctx};
use super::driver::{self, St};

/// Something another library holds of a stream.
pub(super) type Handle = Arc<dyn Any + Send + Sync>;

/// Set once a context was shared with another library that binds contexts itself.
static SHARED: AtomicBool = AtomicBool::new(false);

/// From now on, [`context_is_current`] asks the driver.
#[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
pub(super) fn share() {
    SHARED.store(true, Ordering::Release);
}

/// True if `raw` is the calling thread's current context, as far as another library may have
/// changed it since this backend last made it current: always, until a context was shared.
#[inline]
pub(super) fn context_is_current(raw: CUcontext) -> bool {
    // Inside a host function no driver call may be made (and none that binds is made there).
    if !SHARED.load(Ordering::Acquire) || in_host_fn() {
        return true;
    }
    driver::context::current().is_ok_and(|cur| cur == raw)
}

/// Drop `owner` where driver calls are allowed (never inside a host function), then forget
/// the binding its drop may have changed (D2).
pub(super) fn owner_drop(owner: Box<dyn Any + Send>) {
    now_or_deferred(move || {
        restoring(|| {
            drop(owner);
            forget_bound();
        })
    });
}

/// What a stream lends of itself, or keeps of the library it was adopted from.
pub(super) struct Lent {
    handle: Mutex<Option<Handle>>,
    /// False for a raw stream adopted without an owner: its lifetime is its creator's.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))]
    // Used by the cudarc interop.
    lendable: bool,
}

impl Lent {
    /// A stream of this backend's own: lends what it is first asked to make.
    pub fn own() -> Lent {
        Lent {
            handle: Mutex::new(None),
            lendable: true,
        }
    }

    /// An adopted stream: lends its owner, or nothing without one.
    pub fn adopted(owner: Option<Handle>) -> Lent {
        Lent {
            lendable: owner.is_some(),
            handle: Mutex::new(owner),
        }
    }

    /// The lent handle, made from `raw` by `make` on first ask.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    pub fn lend(
        &self,
        raw: St,
        make: &mut dyn FnMut(*mut std::ffi::c_void) -> Handle,
    ) -> Option<Handle> {
        if !self.lendable {
            return None;
        }
        let mut h = self.handle.lock();
        Some(
            h.get_or_insert_with(|| make(raw.0 as *mut std::ffi::c_void))
                .clone(),
        )
    }

    /// Take the handle for the stream's end.
    pub fn take(&self) -> Option<Handle> {
        self.handle.lock().take()
    }
}

/// Dropped streams whose lent handle was still held: (context, stream, handle).
static LINGERING: Mutex<Vec<(Arc<Ctx>, St, Handle)>> = Mutex::new(Vec::new());
static HAS_LINGERING: AtomicBool = AtomicBool::new(false);

/// The end of a stream this backend created (context current, D2, outside host functions):
/// destroyed now, or — while what it lent is held elsewhere — once it no longer is.
pub(super) fn destroy_own(ctx: &Arc<Ctx>, raw: St, lent: Option<Handle>) {
    if let Some(mut h) = lent {
        if Arc::get_mut(&mut h).is_none() {
            let mut l = LINGERING.lock();
            l.push((ctx.clone(), raw, h));
            HAS_LINGERING.store(true, Ordering::Release);
            return;
        }
    }
    driver::stream::destroy(raw);
}

/// Destroy the lingering streams nobody else holds any more (cheap when there is none).
/// Outside host functions.
#[inline]
pub(super) fn poll_lingering() {
    if HAS_LINGERING.load(Ordering::Acquire) {
        poll_slow();
    }
}

fn poll_slow() {
    let mut free = Vec::new();
    {
        let mut l = LINGERING.lock();
        let mut i = 0;
        while i < l.len() {
            // `get_mut` succeeds only without other strong or weak references: nobody can
            // reach the handle any more, so nobody can use the raw stream once destroyed.
            if Arc::get_mut(&mut l[i].2).is_some() {
                free.push(l.swap_remove(i));
            } else {
                i += 1;
            }
        }
        HAS_LINGERING.store(!l.is_empty(), Ordering::Release);
    }
    restoring(|| {
        for (ctx, raw, h) in free {
            if ctx.usable() && ctx.bind().is_ok() {
                driver::stream::destroy(raw);
            }
            drop(h);
            forget_bound();
        }
    });
}
