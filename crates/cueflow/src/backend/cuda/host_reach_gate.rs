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
//!   launch (C5's event) unless its stream already waited for that launch (stream order then
//!   covers it), then records its stream's *reach event* after itself;
//! - such a launch waits for every other stream's reach event that is not known complete.
//!
//! Reach events are kept only once the device has instantiated a graph with conditional nodes
//! ([`watch`]): until then no submission pays for them. At that moment, every stream with work
//! the device has not been seen to finish records its reach event, which covers whatever was
//! enqueued before, and the context's internal stream waits for the work of dropped streams
//! (the device's orphans) and records one for it. Not covered: work other code enqueues (an
//! adopted stream's owner, interop, other processes), and work of a device dropped before
//! (its gate goes with the last device open on the context).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::driver::{self, CuResult, St};
use super::event::CudaEvent;
use super::queue::{Queue, StreamQueue};
use super::shared::{DeviceShared, DEVICES};
use crate::types::EventFlags;

/// C5 and C7 state of one GPU context, shared by the devices open on it.
#[derive(Default)]
pub(super) struct GpuGate {
    pub state: Mutex<CondGate>,
    /// C7: a graph with conditional nodes is being or was instantiated: reach events are kept.
    watch: AtomicBool,
    /// C7: [`watch`]'s walk over the streams succeeded; `walk` is held while one runs.
    walked: AtomicBool,
    walk: Mutex<()>,
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
    /// Counts the records of `last`: which launch it stands for now.
    last_launch: u64,
    /// C7: per stream, recorded after its last submission that reaches host memory.
    reached: Vec<Reach>,
    /// `reached` is pruned of completed events when it grows this long (ids are never reused,
    /// so dropped streams' entries go only this way or at a launch).
    prune_at: usize,
}

/// A stream's reach event, and the launch (`CondGate::last_launch`) it last waited for.
struct Reach {
    /// The stream's [`StreamQueue::id`].
    id: u64,
    event: Arc<CudaEvent>,
    /// The stream's work from here on runs after launch `waited` and those before it.
    waited: u64,
}

/// Events taken out of the gate, dropped only after its lock is released (an event's drop may
/// release a context, which waits for the GPU).
pub(super) type Released = Vec<Arc<CudaEvent>>;

/// A timing-disabled event of `shared`'s context (D2).
pub(super) fn gate_event(shared: &Arc<DeviceShared>) -> CuResult<Arc<CudaEvent>> {
    let flags = EventFlags {
        timing: false,
        ..Default::default()
    };
    CudaEvent::create_raw(shared, &shared.ctx, flags)
}

impl CondGate {
    /// Stream `id`'s reach entry, made if it has none; completed ones go to `released` when
    /// the list has grown (D2).
    fn reach(
        &mut self,
        shared: &Arc<DeviceShared>,
        id: u64,
        released: &mut Released,
    ) -> CuResult<&mut Reach> {
        let at = match self.reached.iter().position(|r| r.id == id) {
            Some(at) => at,
            None => {
                if self.reached.len() >= self.prune_at.max(32) {
                    self.forget_completed(u64::MAX, released);
                    self.prune_at = 2 * self.reached.len();
                }
                let event = gate_event(shared)?;
                // Made now, it has waited for nothing: its stream's next gated submission
                // waits for `last`.
                self.reached.push(Reach {
                    id,
                    event,
                    waited: 0,
                });
                self.reached.len() - 1
            }
        };
        Ok(&mut self.reached[at])
    }

    /// C7, before a submission on `q` that reaches host memory: `q` waits for the last launch
    /// of a graph with conditional nodes, unless it waited for that one already (its stream
    /// order covers it then); `q`'s reach event, for the caller to record after the work (D2).
    fn admit(
        &mut self,
        shared: &Arc<DeviceShared>,
        q: &StreamQueue,
        released: &mut Released,
    ) -> CuResult<Arc<CudaEvent>> {
        let (last, now) = (self.last.as_ref().map(|e| e.raw), self.last_launch);
        let reach = self.reach(shared, q.id, released)?;
        if let Some(last) = last.filter(|_| reach.waited < now) {
            // D1: the gate keeps the event alive; the stream is live.
            driver::stream::wait_event(q.raw, last)?;
            reach.waited = now;
        }
        Ok(reach.event.clone())
    }

    /// C5: `last` was just recorded after a launch on stream `id`, whose later work follows
    /// that launch by stream order.
    pub fn launched(&mut self, id: u64) {
        self.last_launch += 1;
        let now = self.last_launch;
        if let Some(r) = self.reached.iter_mut().find(|r| r.id == id) {
            r.waited = now;
        }
    }

    /// Record stream `id`'s reach event on `s`, its live driver stream (D2).
    fn record_reach(
        &mut self,
        shared: &Arc<DeviceShared>,
        id: u64,
        s: St,
        released: &mut Released,
    ) -> CuResult<()> {
        let reach = self.reach(shared, id, released)?;
        // D1: the event is held by the gate; the caller keeps `s` alive.
        driver::event::record(reach.event.raw, s)
    }

    /// Move the reach events known complete, other than stream `keep`'s, to `released`.
    fn forget_completed(&mut self, keep: u64, released: &mut Released) {
        let mut kept = Vec::with_capacity(self.reached.len());
        for r in std::mem::take(&mut self.reached) {
            // D1: the event is alive (held here).
            match r.id != keep && matches!(driver::event::query(r.event.raw), Ok(true)) {
                true => released.push(r.event),
                false => kept.push(r),
            }
        }
        self.reached = kept;
    }

    /// C7, for a launch of a graph with conditional nodes on stream `q`: wait for every other
    /// stream's reach event not known complete; those known complete go to `released` (D2).
    pub fn wait_for_reaches(&mut self, q: &StreamQueue, released: &mut Released) -> CuResult<()> {
        self.forget_completed(q.id, released);
        for r in &self.reached {
            if r.id != q.id {
                // D1: the event and the stream are alive. Stream order covers `q`'s own.
                driver::stream::wait_event(q.raw, r.event.raw)?;
            }
        }
        Ok(())
    }
}

/// C7, for a submission on stream `q` under its queue lock: `enqueue` its work, under the gate
/// if the device watches (it has had a graph with conditional nodes) and `reaches_host()` —
/// after the device's last launch of such a graph, and followed by the stream's reach event.
/// `Err`: nothing was enqueued; `Ok((value, Err))`: the work was enqueued but its reach event
/// not recorded (D2).
#[inline]
pub(super) fn enqueue_gated<T>(
    shared: &Arc<DeviceShared>,
    q: &StreamQueue,
    reaches_host: impl FnOnce() -> bool,
    enqueue: impl FnOnce() -> CuResult<T>,
) -> CuResult<(T, CuResult<()>)> {
    if !shared.gate.watch.load(Ordering::Acquire) || !reaches_host() {
        return enqueue().map(|v| (v, Ok(())));
    }
    through_gate(shared, q, enqueue)
}

/// [`enqueue_gated`] once the gate watches and the work reaches host memory.
#[inline(never)]
fn through_gate<T>(
    shared: &Arc<DeviceShared>,
    q: &StreamQueue,
    enqueue: impl FnOnce() -> CuResult<T>,
) -> CuResult<(T, CuResult<()>)> {
    let mut released = Released::new(); // Dropped after the gate's lock (declared before it).
    let mut gate = shared.gate.state.lock();
    // Made before the work: once it is enqueued, only a sticky error can keep it unrecorded.
    let reach = gate.admit(shared, q, &mut released)?;
    let value = enqueue()?;
    // D1: the gate keeps the event alive; the stream is live.
    Ok((value, driver::event::record(reach.raw, q.raw)))
}

/// C7: the device instantiates a graph with conditional nodes; from now on submissions that
/// reach host memory on its GPU keep reach events. The first time, every live stream of the
/// GPU's open devices with work not seen finished records one now, and the context's internal
/// stream waits for the work of dropped streams and records one for it (D2). Another
/// instantiation meanwhile waits for this walk; a failed walk is done again by the next.
pub(super) fn watch(shared: &Arc<DeviceShared>) -> CuResult<()> {
    let gate = &shared.gate;
    if gate.walked.load(Ordering::Acquire) {
        return Ok(());
    }
    let _walk = gate.walk.lock();
    if gate.walked.load(Ordering::Acquire) {
        return Ok(());
    }
    // Set before the walk: a submission that takes its queue lock after the walk took it sees
    // the flag (the lock orders the two), and one before leaves its work in the queue.
    gate.watch.store(true, Ordering::Release);
    let mut released = Released::new();
    let devices: Vec<_> = (DEVICES.lock().iter())
        .filter_map(|(_, d)| d.upgrade())
        .filter(|d| Arc::ptr_eq(&d.gate, gate))
        .collect();
    for d in devices {
        let queues: Vec<_> = (d.streams.lock().iter())
            .filter_map(Weak::upgrade)
            .collect();
        for q in queues {
            let held = q.queue.lock();
            // A dropped stream's work is among the orphans by the time its queue says so
            // (`stream_drop.rs`). An adopted stream's work may not all be in its queue.
            if held.dropped() || (q.owned && held.held() == 0) {
                continue;
            }
            // The stream is live: its queue is held.
            gate.state
                .lock()
                .record_reach(shared, q.id, q.raw, &mut released)?;
        }
        // After the streams: a stream dropped meanwhile has its work here now.
        let free = shared.ctx.free_stream;
        if Queue::wait_for_entries(free, d.orphans.lock().iter())? {
            // The internal stream lives with the context.
            let id = StreamQueue::next_id();
            gate.state
                .lock()
                .record_reach(shared, id, free, &mut released)?;
        }
    }
    gate.walked.store(true, Ordering::Release);
    Ok(())
}
