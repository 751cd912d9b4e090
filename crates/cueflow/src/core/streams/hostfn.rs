//! Host functions must not call the runtime (SPEC HF2).
//!
//! Core hands every host function to a backend wrapped by [`guarded`], which marks the thread
//! that runs it; every entry point of core calls [`check_not_in_host_fn`] first and refuses
//! with a not-permitted error instead of deadlocking on work that waits behind the host
//! function.

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::panic::Location;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::{HostCall, HostFn, Op, Work};
use crate::core::tracking::clock::{Actor, VClock};
use crate::error::{Error, Result};
use crate::types::Access;

thread_local! {
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
    /// While a stream's host function runs: its place in the device's order (HF1), which its
    /// host accesses are checked with.
    static HOST_FN_ORDER: RefCell<Option<HostFnOrder>> = const { RefCell::new(None) };
}

/// Where a host function runs among the device's work, as the sanitizer sees it (HF1): after
/// the work `after` covers, and before the work whose clock covers `stamp` — its own
/// operation's stamp, which the later work of its stream and the work ordered after that
/// carry. Its host accesses race with neither. A graph's host node is also beside the nodes
/// of its graph that no path of dependencies orders with it (`graph`).
#[derive(Clone)]
pub(crate) struct HostFnOrder {
    pub after: Arc<VClock>,
    pub stamp: (Actor, u64),
    pub graph: Option<Arc<GraphHostNode>>,
}

/// A host node of a graph among the graph's nodes (HF1, GR8): the writes of the nodes no path
/// of dependencies orders with it — its unchecked host reads race with them, whatever the
/// clocks say (a launch stamps all its nodes alike).
#[derive(Default)]
pub(crate) struct GraphHostNode {
    pub node: usize,
    pub beside: Vec<NodeWrite>,
}

/// A write (or atomic access) of a graph node, as a race report names it.
pub(crate) struct NodeWrite {
    pub alloc: Arc<Allocation>,
    pub bytes: Range<usize>,
    pub kind: Access,
    pub node: usize,
    /// The stream the node was captured from (0 for a built graph).
    pub stream: u64,
    /// What the node runs: `kernel \`k\` (argument 0)`.
    pub operation: String,
    pub site: &'static Location<'static>,
}

impl HostFnOrder {
    /// True when work with clock `vc` comes after the function.
    pub fn precedes(&self, vc: &VClock) -> bool {
        vc.covers(self.stamp.0, self.stamp.1)
    }
}

/// Where a stream's host function runs in its stream's order, as the tracking layer saw it
/// when it was enqueued (filled by [`place`], read while the function runs).
pub(crate) type OrderSlot = Mutex<Option<HostFnOrder>>;

/// HF1 for the sanitizer: when `op` is a stream's host function, tell it its place — after
/// `vc`, the clock of its stream `actor` before the call, stamped with the tick the call
/// will get. Called with the tracking state locked from before that clock was read until the
/// call is stamped, so the stamp is the call's own, and before the backend may run `op`.
pub(crate) fn place(op: &Op, vc: &Arc<VClock>, actor: Actor) {
    if let Work::HostFn(h) = &op.work {
        if let Some(slot) = h.order.as_ref().and_then(|o| o.downcast_ref::<OrderSlot>()) {
            *slot.lock() = Some(HostFnOrder {
                after: vc.clone(),
                stamp: (actor, vc.get(actor) + 1),
                graph: None,
            });
        }
    }
}

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
            let place = order.lock().clone();
            match place {
                Some(place) => in_place(Some(place), || run_host_fn(&f)),
                // Captured into a graph, the slot stays empty: the graph's launch placed it.
                None => run_host_fn(&f),
            }
        }),
        name,
        accesses,
        order: Some(slot),
    }
}

/// `f` with its host accesses checked at `place` (a graph host node's, HF1): what it was
/// there before is back once `f` returns.
pub(crate) fn in_place(place: Option<HostFnOrder>, f: impl FnOnce()) {
    struct Restore(Option<HostFnOrder>);
    impl Drop for Restore {
        fn drop(&mut self) {
            HOST_FN_ORDER.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(HOST_FN_ORDER.with(|c| c.replace(place)));
    f();
}

/// The place of the stream's host function that runs on this thread, if one does.
pub(crate) fn host_fn_order() -> Option<HostFnOrder> {
    HOST_FN_ORDER.with(|c| c.borrow().clone())
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
