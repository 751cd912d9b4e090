//! The driver objects of one instantiation and what the driver borrows for its launches (G1 of
//! [`super`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{CUgraph, CUgraphExec};
use parking_lot::Mutex;

use super::super::context::{in_context, now_or_deferred, Ctx};
use super::super::driver::graph as dg;
use super::super::event::CudaEvent;
use super::super::queue::HostFnCall;
use super::super::shared::DeviceShared;
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::node_op::NodeOp;

/// The driver objects of one instantiation (G1).
pub(in crate::backend::cuda) struct ExecHandle {
    pub(in crate::backend::cuda) ctx: Arc<Ctx>,
    /// Keeps the module cache (the kernels' functions) and the context alive.
    pub(super) _shared: Arc<DeviceShared>,
    pub(super) graph: CUgraph,
    pub(in crate::backend::cuda) exec: CUgraphExec,
    /// The graph and the exec were destroyed ([`ExecHandle::release_driver_objects`]).
    pub(super) released: AtomicBool,
    /// What the driver's exec refers to; shared with its destroy, so it goes only once the
    /// exec is destroyed (wherever that ran: now, or deferred out of a host function) and
    /// every launch that holds this handle is retired.
    pub(in crate::backend::cuda) borrowed: Arc<Borrowed>,
}

/// What an exec refers to while it exists (G1, G6, MD3).
#[derive(Default)]
pub(in crate::backend::cuda) struct Borrowed {
    /// Callback data of host nodes, borrowed by the driver until the exec is destroyed. Boxed:
    /// the driver holds their addresses, which must not move when the list grows.
    #[allow(clippy::vec_box)]
    pub(super) calls: Mutex<Vec<Box<HostFnCall>>>,
    /// Conditional nodes' bodies (GR9), whose operations hold the memory the driver's body
    /// graphs use: kept with the exec, so for every launch that holds it (G1, G2).
    pub(in crate::backend::cuda) bodies: Mutex<Vec<crate::backend::contract::graph::CondNode>>,
    /// The events of the event nodes (G6).
    pub(super) events: Mutex<EventNodes>,
    /// Other GPUs' contexts that memcpy nodes run in (MD3), alive until the exec is destroyed.
    pub(super) peers: Mutex<Vec<Arc<Ctx>>>,
}

/// The events of an exec's event nodes (G6).
#[derive(Default)]
pub(super) struct EventNodes {
    /// Every event a node named at instantiation: the driver may still use them (those an
    /// update gave are kept by `Current`, launch by launch).
    pub(super) held: Vec<Arc<dyn BackendEvent>>,
    /// Per record node, in node order: its index, the program's event, and the exec's own
    /// event recorded beside it (none where the caller does not use record completions).
    pub(super) records: Vec<RecordNode>,
}

/// A record node: its index, the program's event, the exec's own event beside it.
pub(super) type RecordNode = (usize, Arc<dyn BackendEvent>, Option<Arc<CudaEvent>>);

// SAFETY: the handles are identifiers the driver accepts on any thread with the context
// current (D2); the Rust side never dereferences them. The host-node data is only read by the
// driver's callback thread through `host_fn_trampoline`, which only borrows it.
unsafe impl Send for ExecHandle {}
// SAFETY: as above; the only mutable part is behind a mutex.
unsafe impl Sync for ExecHandle {}

impl ExecHandle {
    /// Destroy the exec and its graph now (once; later calls do nothing). The program's last
    /// handle is gone, so nothing launches or updates it again; launches still in flight
    /// complete, and the driver frees the exec after them (`cuGraphExecDestroy`). What they
    /// still use ([`Borrowed`]) outlives both the destroy and the last of them.
    pub(in crate::backend::cuda) fn release_driver_objects(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let (ctx, graph, exec) = (self.ctx.clone(), self.graph as usize, self.exec as usize);
        let borrowed = self.borrowed.clone();
        now_or_deferred(move || {
            in_context(&ctx, || {
                // SAFETY: D1: each handle is destroyed once (the flag above), only if it was
                // made, and never used again: the program's handle is gone (launches, updates
                // and uploads go through it) and pending launches hold what they use (G1).
                unsafe {
                    if exec != 0 {
                        dg::exec_destroy(exec as CUgraphExec);
                    }
                    if graph != 0 {
                        dg::destroy(graph as CUgraph);
                    }
                }
            });
            // After the exec: the last holder of what it referred to may be this one.
            drop(borrowed);
        });
    }
}

impl Drop for ExecHandle {
    fn drop(&mut self) {
        // A handle dropped without its CudaGraph (an instantiation that failed) is released
        // here; otherwise the destroy ran or waits, deferred, holding `borrowed` itself.
        self.release_driver_objects();
        // Every launch that used it completed (the handle was the last holder, G1). Events
        // and contexts in it make driver calls when dropped: not inside a host function.
        let borrowed = std::mem::take(&mut self.borrowed);
        now_or_deferred(move || drop(borrowed));
    }
}

/// What a launch keeps until it completed (G1, G2).
pub(in crate::backend::cuda) struct LaunchKeep {
    pub handle: Arc<ExecHandle>,
    pub _ops: Arc<Current>,
}

/// What a launch of the exec uses as it is now (G2, G6): each node's operation as resolved,
/// and the events that updates gave event nodes (those named at instantiation are the exec
/// handle's). An update makes a new one; launches already enqueued keep theirs, so an event
/// replaced by another lives until the launches that name it are done, not as long as the
/// exec (automatic graphs give record nodes new events at every replay of some windows).
#[derive(Clone)]
pub(in crate::backend::cuda) struct Current {
    pub ops: Vec<Option<NodeOp>>,
    /// Per event node given an event by an update: its index and that event.
    pub events: Vec<(usize, Arc<dyn BackendEvent>)>,
}

impl Current {
    pub(super) fn of(ops: Vec<Option<NodeOp>>) -> Current {
        let events = Vec::new();
        Current { ops, events }
    }
}

impl LaunchKeep {
    /// True when this launch holds the only reference to the exec (the GraphExec is gone)
    /// or to the operations as launched (an update replaced them).
    pub fn last_reference(&self) -> bool {
        Arc::strong_count(&self.handle) == 1 || Arc::strong_count(&self._ops) == 1
    }
}
