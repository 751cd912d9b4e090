//! What a window holds (a held call) and what its operations touch of the device's state
//! ([`Ctx`]).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use smallvec::SmallVec;

use super::deferred::Deferred;
use crate::backend::contract::device::{Backend, BackendStream, Done};
use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::Op;

/// A held call.
pub(super) struct Entry {
    /// Its stream, as an index into the window's [`Lane`]s.
    pub lane: usize,
    /// The stream's id within the device.
    pub stream_id: u64,
    pub work: EntryWork,
}

/// A stream of the window's held calls (lane 0, the first, launches the graph).
pub(super) struct Lane {
    pub actor: u64,
    pub stream: Arc<dyn BackendStream>,
    /// The stream is a blocking one (ST5): it waits for the legacy stream's earlier work.
    pub blocking: bool,
}

pub(super) enum EntryWork {
    /// An operation with the completions it waits for outside the window (`after`) and the
    /// held calls it waits for inside it (`inner`, by position).
    Op {
        op: Op,
        after: Vec<Done>,
        inner: SmallVec<[usize; 2]>,
        done: Option<Arc<Deferred>>,
    },
    /// An event record; `internal`: of a join's own event, which a replay need not record.
    Record {
        event: Arc<dyn BackendEvent>,
        internal: bool,
    },
    /// A wait on the event the held record at `record` records.
    Wait {
        event: Arc<dyn BackendEvent>,
        record: usize,
    },
    /// A stream-ordered allocation, made at its call (later calls use its memory): a place of
    /// the signature, no node of the graph.
    Alloc,
    /// A stream-ordered free of the memory the call at place `place` of the window allocated:
    /// after the launch that runs the calls before it, kept for the next window's allocation
    /// at that place (taken then, `Template::spare`), or issued in its place one by one.
    Free {
        alloc: Option<Arc<Allocation>>,
        place: usize,
    },
}

/// Counts of what the mode did (`AutoGraphStats`).
#[derive(Default)]
pub(super) struct Counters {
    pub graphs: AtomicU64,
    pub replays: AtomicU64,
    pub replayed_calls: AtomicU64,
    pub one_by_one: AtomicU64,
    pub updates: AtomicU64,
    pub memory_updates: AtomicU64,
    pub event_updates: AtomicU64,
    pub stream_calls: AtomicU64,
    pub cold_windows: AtomicU64,
    pub reused: AtomicU64,
    pub let_go: AtomicU64,
}

/// The device's state a window's operations use: the backend (instantiation, events), the
/// window flags the fast paths read (`busy`: a window is open; `recording`: its signature is
/// not sealed; `cold`: windows pass through unrecorded, `cold`) and the counters.
pub(super) struct Ctx<'a> {
    pub backend: &'a Arc<dyn Backend>,
    pub busy: &'a AtomicBool,
    pub recording: &'a AtomicBool,
    pub cold: &'a AtomicBool,
    pub stats: &'a Counters,
}
