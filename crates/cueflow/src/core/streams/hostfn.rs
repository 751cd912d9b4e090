//! Host functions must not call the runtime (SPEC HF2).
//!
//! Core hands every host function to a backend wrapped by [`guarded`], which marks the thread
//! that runs it; every entry point of core calls [`check_not_in_host_fn`] first and refuses
//! with a not-permitted error instead of deadlocking on work that waits behind the host
//! function.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::op::{HostCall, HostFn};
use crate::core::tracking::clock::VClock;
use crate::error::{Error, Result};

thread_local! {
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
    /// While a stream's host function runs: the sanitizer's clock of its stream where it was
    /// enqueued (HF1), which its host accesses are ordered after.
    static HOST_FN_CLOCK: RefCell<Option<Arc<VClock>>> = const { RefCell::new(None) };
}

/// Where a stream's host function runs in its stream's order, as the tracking layer saw it
/// when it was enqueued (filled by `StreamCore::submit`, read while the function runs).
pub(crate) type OrderSlot = Mutex<Option<Arc<VClock>>>;

/// `f` as the host function a backend runs: runtime calls inside it are refused (HF2).
pub(crate) fn guarded(f: impl Fn() + Send + Sync + 'static) -> HostFn {
    Arc::new(move || run_host_fn(&f))
}

/// `f` as a stream's host function (HF1, HF2): as [`guarded`], and while it runs the host
/// accesses it makes are ordered after the work its stream had before it (the sanitizer's
/// view of HF1).
pub(crate) fn stream_call(
    f: impl Fn() + Send + Sync + 'static,
    name: Option<Arc<str>>,
    accesses: Arc<
        [(
            crate::backend::contract::memory::MemRef,
            crate::types::Access,
        )],
    >,
) -> HostCall {
    let slot: Arc<OrderSlot> = Arc::new(Mutex::new(None));
    let order = slot.clone();
    HostCall {
        f: Arc::new(move || {
            struct Restore(Option<Arc<VClock>>);
            impl Drop for Restore {
                fn drop(&mut self) {
                    HOST_FN_CLOCK.with(|c| *c.borrow_mut() = self.0.take());
                }
            }
            let clock = order.lock().clone();
            let _restore = Restore(HOST_FN_CLOCK.with(|c| c.replace(clock)));
            run_host_fn(&f);
        }),
        name,
        accesses,
        order: Some(slot),
    }
}

/// The clock of the stream whose host function runs on this thread, if one does.
pub(crate) fn host_fn_clock() -> Option<Arc<VClock>> {
    HOST_FN_CLOCK.with(|c| c.borrow().clone())
}

/// Run `f` as a host function: runtime calls inside it are refused (HF2).
fn run_host_fn(f: &(dyn Fn() + Send + Sync)) {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_HOST_FN.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(IN_HOST_FN.with(|c| c.replace(true)));
    f();
}

/// Run `f` once as a host function would run (runtime calls refused, HF2) on whatever thread
/// drops the last hold of a stream callback the stream never reached (HF4); a panic in it is
/// contained (the device is poisoned already).
pub(crate) fn run_once_as_host_fn(f: impl FnOnce()) {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_HOST_FN.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(IN_HOST_FN.with(|c| c.replace(true)));
    let _ = crate::panics::catch(f);
}

/// Refuse a runtime call made from inside a host function.
#[inline]
pub(crate) fn check_not_in_host_fn(call: &'static str) -> Result<()> {
    if IN_HOST_FN.with(|c| c.get()) {
        return Err(Error::NotPermitted {
            rule: "HF2",
            what: format!("{call} called from inside a host function"),
        });
    }
    Ok(())
}
