//! Host functions must not call the runtime (SPEC HF2).
//!
//! Core hands every host function to a backend wrapped by [`guarded`], which marks the thread
//! that runs it; every entry point of core calls [`check_not_in_host_fn`] first and refuses
//! with a not-permitted error instead of deadlocking on work that waits behind the host
//! function.

use std::cell::Cell;
use std::sync::Arc;

use crate::backend::contract::op::HostFn;
use crate::error::{Error, Result};

thread_local! {
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// `f` as the host function a backend runs: runtime calls inside it are refused (HF2).
pub(crate) fn guarded(f: impl Fn() + Send + Sync + 'static) -> HostFn {
    Arc::new(move || run_host_fn(&f))
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
