//! C7 of `graph_cond.rs`: across the streams of a device, work that reaches host memory never
//! runs beside a launch of a graph with conditional nodes.
//!
//! Why: a kernel on mapped memory on one stream while a graph with a while node runs on
//! another fails the launch now and then, as inside one graph (C6, `graph_host_reach.rs`):
//! `benches/cuda/switch_while_probe.cu` mode 11 failed at runs 9 and 3 in raw CUDA, and two
//! threads replaying the fuzzer's F11 and F12 programs at once through cueflow failed within
//! 15 runs while each alone ran 4,000 clean.
//!
//! The gate ([`GpuGate`]) belongs to the GPU's context, shared by every device opened on it
//! (each `Device::cuda(n)` opens one of its own over the same context, and the driver fails
//! their work beside each other's loops the same way; C5's order is kept there too). It is
//! locked after the submitting stream's queue lock and never the other way round, so
//! submissions that reach host memory and launches of graphs with conditional nodes are
//! enqueued one at a time:
//! - a submission that reaches host memory ([`enqueue_gated`]) waits for the device's last such
//!   launch (C5's event), then records its stream's *reach event* after itself;
//! - such a launch waits for every other stream's reach event that is not known complete.
//!
//! Reach events are kept only once the device has instantiated a graph with conditional nodes
//! ([`watch`]): until then no submission pays for them. At that moment, every stream with work
//! the device has not been seen to finish records its reach event, which covers whatever was
//! enqueued before. Work enqueued on a stream by other code than cueflow (an adopted stream's
//! owner, interop) is not seen until then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::driver::{self, CuResult, St};
use super::event::CudaEvent;
use super::shared::{DeviceShared, DEVICES};
use crate::types::EventFlags;

/// C5 and C7 state of one GPU context, shared by the devices open on it.
#[derive(Default)]
pub(super) struct GpuGate {
    pub state: Mutex<CondGate>,
    /// C7: a graph with conditional nodes was instantiated; reach events are kept.
    watch: AtomicBool,
}

/// A GPU context: its ordinal and its life (`Ctx::instance`).
type GpuContext = (usize, u64);

/// The gates of the GPU contexts with open devices.
static GATES: Mutex<Vec<(GpuContext, Weak<GpuGate>)>> = Mutex::new(Vec::new());

/// The gate of GPU `ordinal`'s context life `instance` (`Ctx::instance`): the one its open
/// devices share, or a new one. A context made anew gets a new gate: events of the old one
/// are gone with it.
pub(super) fn gate_of(ordinal: usize, instance: u64) -> Arc<GpuGate> {
    let mut gates = GATES.lock();
    gates.retain(|(_, g)| g.strong_count() > 0);
    let key = (ordinal, instance);
    if let Some(g) = gates
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, g)| g.upgrade())
    {
        return g;
    }
    let g = Arc::new(GpuGate::default());
    gates.push((key, Arc::downgrade(&g)));
    g
}

/// C5 and C7 state of a GPU context, behind its gate's lock.
#[derive(Default)]
pub(super) struct CondGate {
    /// C5: recorded after the device's last launch of a graph with conditional nodes.
    pub last: Option<Arc<CudaEvent>>,
    /// C7: per stream (by driver handle), recorded after its last submission that reaches
    /// host memory.
    reached: Vec<(usize, Arc<CudaEvent>)>,
}

impl CondGate {
    /// Record `s`'s reach event on it (D2).
    fn note(&mut self, shared: &Arc<DeviceShared>, s: St) -> CuResult<()> {
        let key = s.0 as usize;
        let event = match self.reached.iter().find(|(k, _)| *k == key) {
            Some((_, e)) => e.clone(),
            None => {
                let flags = EventFlags {
                    timing: false,
                    ..Default::default()
                };
                let e = CudaEvent::create_raw(shared, &shared.ctx, flags)?;
                self.reached.push((key, e.clone()));
                e
            }
        };
        // D1: the event is alive (held here) and `s` is live (its submission is under way).
        driver::event::record(event.raw, s)
    }

    /// C7, for a launch of a graph with conditional nodes on `s`: wait for every other
    /// stream's reach event not known complete; forget those known complete (D2).
    pub fn wait_for_reaches(&mut self, s: St) -> CuResult<()> {
        let mut r = Ok(());
        self.reached.retain(|(key, e)| {
            if r.is_err() || *key == s.0 as usize {
                return true; // Stream order covers `s`'s own.
            }
            // D1: the event is alive (held here).
            match driver::event::query(e.raw) {
                Ok(true) => false,
                _ => {
                    r = driver::stream::wait_event(s, e.raw);
                    true
                }
            }
        });
        r
    }
}

/// C7, for a submission on `s` under its queue lock: `enqueue` its work, under the gate if
/// the device watches (it has had a graph with conditional nodes) and `reaches_host()` — after
/// the device's last launch of such a graph, and followed by the stream's reach event. `Err`:
/// nothing was enqueued; `Ok((value, Err))`: the work was enqueued but its reach event not
/// recorded (D2).
pub(super) fn enqueue_gated<T>(
    shared: &Arc<DeviceShared>,
    s: St,
    reaches_host: impl FnOnce() -> bool,
    enqueue: impl FnOnce() -> CuResult<T>,
) -> CuResult<(T, CuResult<()>)> {
    if !shared.gate.watch.load(Ordering::Acquire) || !reaches_host() {
        return enqueue().map(|v| (v, Ok(())));
    }
    let mut gate = shared.gate.state.lock();
    if let Some(last) = &gate.last {
        // D1: the gate keeps the event alive; `s` is live.
        driver::stream::wait_event(s, last.raw)?;
    }
    let value = enqueue()?;
    Ok((value, gate.note(shared, s)))
}

/// C7: the device instantiates a graph with conditional nodes; from now on submissions that
/// reach host memory on its GPU keep reach events. The first time, every stream of the GPU's
/// open devices with work not seen finished records one now (D2).
pub(super) fn watch(shared: &Arc<DeviceShared>) -> CuResult<()> {
    if shared.gate.watch.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    // Set before the walk: a submission that takes its queue lock after the walk took it sees
    // the flag (the lock orders the two), and one before leaves its work in the queue.
    let devices: Vec<_> = (DEVICES.lock().iter())
        .filter_map(|(_, d)| d.upgrade())
        .filter(|d| Arc::ptr_eq(&d.gate, &shared.gate))
        .collect();
    for d in devices {
        let queues: Vec<_> = (d.streams.lock().iter())
            .filter_map(Weak::upgrade)
            .collect();
        for q in queues {
            let held = q.queue.lock();
            // An adopted stream's work may not all be in its queue: always covered.
            if q.owned && held.held() == 0 {
                continue;
            }
            shared.gate.state.lock().note(shared, q.raw)?;
        }
    }
    Ok(())
}
