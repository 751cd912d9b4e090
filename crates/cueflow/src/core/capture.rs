//! Stream capture (GR1, GR2): while a stream captures, its operations — and those of streams
//! that join it by waiting on an event recorded in the capture — become nodes of a graph instead
//! of running. Captures live in core, so every backend captures identically.
//!
//! Rules implemented here:
//! 1. A capture cannot begin on the legacy stream, nor on a stream already capturing (GR1).
//! 2. Each capturing stream has a *frontier*: the nodes its next operation depends on. An
//!    operation becomes a node depending on the frontier, and the frontier becomes that node.
//! 3. Recording an event in a capture snapshots the frontier; waiting on it joins the waiting
//!    stream to the capture (or, already in it, adds the snapshot to its frontier).
//! 4. Synchronizing or querying a capturing stream or a captured event, and calls the capture
//!    mode forbids (device synchronize, synchronous copies and allocations), are refused and
//!    invalidate the capture; ending it then fails and yields no graph (GR2).
//! 5. The capture must end on the stream that began it, with every joined stream's work joined
//!    back into it (GR1).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use parking_lot::Mutex;

use super::device::DeviceCore;
use super::event::EventCore;
use super::graph::GraphNode;
use super::op::Op;
use super::stream::StreamCore;
use crate::backend::StreamKind;
use crate::error::{Error, Result};

/// Which threads' potentially unsafe calls a capture forbids (GR2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Unsafe calls from any thread are refused and invalidate the capture.
    Global,
    /// Only unsafe calls from the capturing thread count.
    ThreadLocal,
    /// Unsafe calls are allowed; only calls on the capture's own streams and events count.
    Relaxed,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

struct Lane {
    stream: Weak<StreamCore>,
    stream_id: u64,
    frontier: Vec<usize>,
}

struct State {
    nodes: Vec<GraphNode>,
    lanes: Vec<Lane>,
    invalidated: Option<String>,
}

/// One capture in progress.
pub(crate) struct CaptureSession {
    pub id: u64,
    mode: CaptureMode,
    owner: ThreadId,
    origin: u64,
    active: AtomicBool,
    state: Mutex<State>,
}

/// Where an event recorded in a capture points: a snapshot of a frontier (rule 3).
#[derive(Clone)]
pub(crate) struct CapturedRef {
    pub session: Arc<CaptureSession>,
    frontier: Vec<usize>,
}

impl CaptureSession {
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Mark the capture invalid (rule 4) and return the error for the offending call.
    pub fn invalidate(&self, what: &str) -> Error {
        let mut s = self.state.lock();
        s.invalidated.get_or_insert_with(|| what.to_string());
        Error::CaptureIllegal(what.to_string())
    }

    fn lane_of(state: &mut State, stream: &Arc<StreamCore>) -> usize {
        match state.lanes.iter().position(|l| l.stream_id == stream.id) {
            Some(i) => i,
            None => {
                state.lanes.push(Lane {
                    stream: Arc::downgrade(stream),
                    stream_id: stream.id,
                    frontier: Vec::new(),
                });
                state.lanes.len() - 1
            }
        }
    }

    /// Rule 2.
    pub fn add_op(&self, stream: &Arc<StreamCore>, op: Op) -> Result<()> {
        let mut s = self.state.lock();
        if let Some(why) = &s.invalidated {
            return Err(Error::CaptureInvalidated(why.clone()));
        }
        let lane = Self::lane_of(&mut s, stream);
        let deps = std::mem::take(&mut s.lanes[lane].frontier);
        s.nodes.push(GraphNode { op, deps, lane });
        let idx = s.nodes.len() - 1;
        s.lanes[lane].frontier = vec![idx];
        Ok(())
    }
}

/// The captures in progress on one device, for the mode checks of rule 4.
#[derive(Default)]
pub(crate) struct CaptureRegistry {
    active: AtomicUsize,
    sessions: Mutex<Vec<Arc<CaptureSession>>>,
}

impl CaptureRegistry {
    /// Refuse a potentially unsafe call (`what`) if a capture's mode forbids it here (GR2).
    pub fn check_unsafe_call(&self, what: &str) -> Result<()> {
        if self.active.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let me = std::thread::current().id();
        let mut refused = None;
        for s in self.sessions.lock().iter() {
            let forbids = match s.mode {
                CaptureMode::Global => true,
                CaptureMode::ThreadLocal => s.owner == me,
                CaptureMode::Relaxed => false,
            };
            if forbids {
                refused = Some(s.invalidate(what));
            }
        }
        refused.map_or(Ok(()), Err)
    }

    fn add(&self, s: Arc<CaptureSession>) {
        self.sessions.lock().push(s);
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    fn remove(&self, id: u64) {
        let mut v = self.sessions.lock();
        let before = v.len();
        v.retain(|s| s.id != id);
        if v.len() < before {
            self.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Rule 1.
pub(crate) fn begin(dev: &DeviceCore, stream: &Arc<StreamCore>, mode: CaptureMode) -> Result<()> {
    if stream.kind == StreamKind::Legacy {
        return Err(Error::Capture(
            "the legacy default stream cannot be captured".into(),
        ));
    }
    let mut slot = stream.capture.lock();
    if slot.is_some() {
        return Err(Error::Capture(format!(
            "stream {} is already capturing",
            stream.id
        )));
    }
    let session = Arc::new(CaptureSession {
        id: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
        mode,
        owner: std::thread::current().id(),
        origin: stream.id,
        active: AtomicBool::new(true),
        state: Mutex::new(State {
            nodes: Vec::new(),
            lanes: vec![Lane {
                stream: Arc::downgrade(stream),
                stream_id: stream.id,
                frontier: Vec::new(),
            }],
            invalidated: None,
        }),
    });
    dev.captures.add(session.clone());
    *slot = Some(session);
    Ok(())
}

/// What a finished capture yields: its nodes and the number of captured streams (lanes).
pub(crate) struct Captured {
    pub nodes: Vec<GraphNode>,
    pub lanes: usize,
}

/// Rules 4 and 5.
pub(crate) fn end(dev: &DeviceCore, stream: &StreamCore) -> Result<Captured> {
    let Some(session) = stream.capture() else {
        return Err(Error::Capture(format!(
            "stream {} is not capturing",
            stream.id
        )));
    };
    if session.origin != stream.id {
        return Err(Error::Capture(format!(
            "capture began on stream {} and must end there, not on stream {}",
            session.origin, stream.id
        )));
    }
    // Only one caller ends a session: a second, racing end finds it inactive.
    if !session.active.swap(false, Ordering::AcqRel) {
        return Err(Error::Capture(format!(
            "the capture on stream {} is already being ended",
            stream.id
        )));
    }
    dev.captures.remove(session.id);
    let state = std::mem::replace(
        &mut *session.state.lock(),
        State {
            nodes: Vec::new(),
            lanes: Vec::new(),
            invalidated: None,
        },
    );
    for lane in &state.lanes {
        if let Some(core) = lane.stream.upgrade() {
            let mut c = core.capture.lock();
            if c.as_ref().is_some_and(|s| s.id == session.id) {
                *c = None;
            }
        }
    }
    if let Some(why) = state.invalidated {
        return Err(Error::CaptureInvalidated(why));
    }
    // Rule 5: every lane's frontier must be reachable from the origin's frontier.
    let mut reach: HashSet<usize> = HashSet::new();
    let mut todo: Vec<usize> = state.lanes[0].frontier.clone();
    while let Some(n) = todo.pop() {
        if reach.insert(n) {
            todo.extend(state.nodes[n].deps.iter().copied());
        }
    }
    for lane in &state.lanes[1..] {
        if lane.frontier.iter().any(|n| !reach.contains(n)) {
            return Err(Error::Capture(format!(
                "stream {} joined the capture but its work was not joined back into stream {} \
                 (record an event on it and wait on that event from the origin stream)",
                lane.stream_id, session.origin
            )));
        }
    }
    Ok(Captured {
        lanes: state.lanes.len(),
        nodes: state.nodes,
    })
}

/// Rule 3, record side. Returns true when the record was captured.
pub(crate) fn record_in_capture(stream: &Arc<StreamCore>, event: &EventCore) -> Result<bool> {
    let Some(session) = stream.capture() else {
        return Ok(false);
    };
    let mut s = session.state.lock();
    if let Some(why) = &s.invalidated {
        return Err(Error::CaptureInvalidated(why.clone()));
    }
    let lane = CaptureSession::lane_of(&mut s, stream);
    let frontier = s.lanes[lane].frontier.clone();
    drop(s);
    *event.captured.lock() = Some(CapturedRef {
        session: session.clone(),
        frontier,
    });
    Ok(true)
}

/// Rule 3, wait side. Returns true when the wait was handled by the capture.
pub(crate) fn wait_in_capture(stream: &Arc<StreamCore>, event: &EventCore) -> Result<bool> {
    let captured = event
        .captured
        .lock()
        .clone()
        .filter(|c| c.session.is_active());
    let mine = stream.capture();
    match (captured, mine) {
        (None, None) => Ok(false),
        (None, Some(session)) => Err(session
            .invalidate("a capturing stream waited on an event recorded outside the capture")),
        (Some(c), Some(session)) if c.session.id != session.id => {
            Err(session.invalidate("a stream of one capture waited on an event of another"))
        }
        (Some(c), mine) => {
            let mut s = c.session.state.lock();
            if let Some(why) = &s.invalidated {
                return Err(Error::CaptureInvalidated(why.clone()));
            }
            let lane = CaptureSession::lane_of(&mut s, stream);
            for n in &c.frontier {
                if !s.lanes[lane].frontier.contains(n) {
                    s.lanes[lane].frontier.push(*n);
                }
            }
            drop(s);
            if mine.is_none() {
                *stream.capture.lock() = Some(c.session.clone());
            }
            Ok(true)
        }
    }
}
