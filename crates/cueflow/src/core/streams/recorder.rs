//! The trace recorder: every operation passes through core's submit path, which, while a
//! recorder is installed, notes what the op is and gives the backend a [`TraceSlot`] to fill
//! with device-clock start and end times. With no recorder installed the cost is one relaxed
//! atomic load per operation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::op::Work;
use crate::backend::contract::trace::TraceSlot;
use crate::trace::{ClockSync, Engine, OpKind, Trace, TraceOp};

struct Entry {
    op: TraceOp,
    slot: Option<Arc<TraceSlot>>,
}

/// Collects the operations of one device while tracing is on.
pub(crate) struct Recorder {
    /// Process-unique, so a stream can tell whether this recorder has its name yet.
    pub id: u64,
    device: String,
    next_id: AtomicU64,
    entries: Mutex<Vec<Entry>>,
    streams: Mutex<Vec<(u64, String)>>,
    /// Event recorded on the legacy stream at start, with the host time it was recorded at;
    /// anchors event-timed slots onto the host clock.
    anchor: Mutex<Option<(Arc<dyn BackendEvent>, u64)>>,
    /// The first traced first call of a communicator: its op id and the device's rank
    /// (the trace's [`ClockSync`]).
    clock_sync: Mutex<Option<(u64, usize)>>,
}

impl Recorder {
    pub fn new(device: String) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Recorder {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            device,
            next_id: AtomicU64::new(1),
            entries: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
            anchor: Mutex::new(None),
            clock_sync: Mutex::new(None),
        }
    }

    pub fn set_anchor(&self, event: Arc<dyn BackendEvent>, host_ns: u64) {
        *self.anchor.lock() = Some((event, host_ns));
    }

    pub fn name_stream(&self, id: u64, name: String) {
        let mut s = self.streams.lock();
        if !s.iter().any(|(i, _)| *i == id) {
            s.push((id, name));
        }
    }

    /// Note an operation enqueued on `stream` at `enqueue_ns`; returns its trace id and the
    /// slot the backend fills.
    pub fn op(&self, stream: u64, enqueue_ns: u64, noted: Noted) -> (u64, Option<Arc<TraceSlot>>) {
        let Noted {
            kind,
            engine,
            bytes,
            name,
            waits_on,
        } = noted;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = (!kind.is_marker()).then(|| Arc::new(TraceSlot::default()));
        let op = TraceOp {
            id,
            kind,
            stream,
            engine,
            bytes,
            name,
            enqueue_ns,
            start_ns: enqueue_ns,
            end_ns: enqueue_ns,
            waits_on,
        };
        self.entries.lock().push(Entry {
            op,
            slot: slot.clone(),
        });
        (id, slot)
    }

    /// When operation `id` is a communicator's first call, and no earlier one was traced,
    /// its end is where merged traces align (the trace's [`ClockSync`]).
    pub fn note_first_call(&self, id: u64, work: &Work) {
        if let Work::Collective(c) = work {
            if c.desc.seq == 0 {
                self.clock_sync.lock().get_or_insert((id, c.comm.rank()));
            }
        }
    }

    /// Forget operation `id` (its backend refused it: nothing was enqueued).
    pub fn withdraw(&self, id: u64) {
        let mut entries = self.entries.lock();
        if let Some(i) = entries.iter().rposition(|e| e.op.id == id) {
            entries.remove(i);
        }
    }

    /// The trace so far. Operations still running appear with start = end = enqueue time;
    /// synchronize first for a complete picture.
    pub fn collect(&self) -> Trace {
        let anchor = self.anchor.lock().clone();
        let entries = self.entries.lock();
        let mut ops = Vec::with_capacity(entries.len());
        let mut event_timed = Vec::new();
        for e in entries.iter() {
            let mut op = e.op.clone();
            if let Some(slot) = &e.slot {
                let end = slot.end_ns.load(Ordering::Acquire);
                if end != 0 {
                    op.start_ns = slot.start_ns.load(Ordering::Relaxed);
                    op.end_ns = end;
                } else if let (Some((s, t)), Some((a, base))) = (&*slot.events.lock(), &anchor) {
                    let ms = |ev: &Arc<dyn BackendEvent>| a.elapsed_ms(ev.as_ref()).ok();
                    if let (Some(s_ms), Some(e_ms)) = (ms(s), ms(t)) {
                        op.start_ns = base + (s_ms.max(0.0) as f64 * 1e6) as u64;
                        op.end_ns = base + (e_ms.max(0.0) as f64 * 1e6) as u64;
                        event_timed.push(ops.len());
                    }
                }
            }
            ops.push(op);
        }
        clamp_event_timed_starts(&mut ops, &event_timed);
        // A first call the backend refused was withdrawn: then there is no mark.
        let clock_sync = self.clock_sync.lock().and_then(|(id, rank)| {
            let op = ops.iter().find(|o| o.id == id)?;
            Some(ClockSync {
                rank,
                at_ns: op.end_ns,
                stream: op.stream,
            })
        });
        Trace {
            device: self.device.clone(),
            streams: self.streams.lock().clone(),
            ops,
            clock_sync,
        }
    }
}

/// An event recorded before an operation completes when the *stream* reaches the operation,
/// not when its engine starts it: a copy queued behind another stream's copy on the same
/// engine would appear to run while it waits. Copy engines run one copy at a time (CP5), so
/// an event-timed copy cannot start before the previous copy on its engine ended.
fn clamp_event_timed_starts(ops: &mut [TraceOp], event_timed: &[usize]) {
    for engine in [Engine::CopyH2D, Engine::CopyD2H] {
        let mut idx: Vec<usize> = event_timed
            .iter()
            .copied()
            .filter(|&i| ops[i].engine == engine)
            .collect();
        idx.sort_by_key(|&i| (ops[i].end_ns, ops[i].start_ns));
        let mut prev_end = 0;
        for i in idx {
            let op = &mut ops[i];
            op.start_ns = op.start_ns.max(prev_end).min(op.end_ns);
            prev_end = op.end_ns;
        }
    }
}

/// What the trace notes of an operation when it is enqueued.
pub(crate) struct Noted {
    pub kind: OpKind,
    pub engine: Engine,
    /// Bytes moved or set; 0 for other operations.
    pub bytes: u64,
    /// The kernel's name, or a short label.
    pub name: String,
    /// Trace ids of the operations it waits for (flow arrows).
    pub waits_on: Vec<u64>,
}
