//! The host device's serial engines: the two copy engines and the host-function runner, each
//! running one operation at a time, most urgent first (ST7).
//!
//! A copy runs in parts of [`exec::PART_BYTES`] that its engine thread claims one after
//! another, and so does a host thread waiting for that very copy (a pageable copy's caller,
//! which blocks until the copy is done, CP3): the caller starts copying at once, where
//! handing the copy to an engine thread costs a wake-up (a few µs on an idle machine, up to a
//! scheduler slice on a busy one, which took 4 MiB pageable copies to 0.3–0.6 × `memcpy` under
//! load), and the engine thread joins in when it runs. A waiting thread takes a copy only
//! when it is the engine's most urgent one and the engine runs nothing, so the engine still
//! runs one operation at a time, in the order it would have.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};

use super::exec;
use super::sched::Finish;
use super::sched_node::SchedNode;
use crate::backend::contract::op::{Op, Work};
use crate::panics;

/// An operation ready for its engine.
struct Ready {
    done: Finish,
    op: Op,
}

impl PartialEq for Ready {
    fn eq(&self, o: &Self) -> bool {
        self.done.key() == o.done.key()
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ready {
    /// Max-heap order: most urgent priority (lowest number) first, then oldest.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.done.key().cmp(&self.done.key())
    }
}

/// The operation an engine runs now, in parts that its engine thread and a waiting host
/// thread claim.
pub(super) struct Job {
    pub done: Finish,
    /// Taken out (and dropped) by whoever finishes the last part, before the completion is
    /// announced (MM2); read while parts run.
    op: RwLock<Option<Op>>,
    parts: u64,
    next: AtomicU64,
    finished: AtomicU64,
    pub start_ns: AtomicU64,
}

impl Job {
    fn new(done: Finish, op: Op) -> Job {
        let parts = match &op.work {
            Work::Copy { .. } => exec::parts(&op).max(1),
            _ => 1,
        };
        Job {
            done,
            op: RwLock::new(Some(op)),
            parts,
            next: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            start_ns: AtomicU64::new(0),
        }
    }

    /// The next part to run, if any is left.
    pub fn claim(&self) -> Option<u64> {
        let p = self.next.fetch_add(1, Ordering::AcqRel);
        (p < self.parts).then_some(p)
    }

    fn unclaimed(&self) -> bool {
        self.next.load(Ordering::Acquire) < self.parts
    }

    /// Run part `p` (a slice of a copy, or the whole operation).
    pub fn run_part(&self, p: u64) -> Result<(), panics::Caught> {
        let op = self.op.read();
        let op = op
            .as_ref()
            .expect("the op is taken after its last part only");
        panics::catch(|| match &op.work {
            Work::Copy { dst, src } => exec::copy(dst, src, p..p + 1, self.parts),
            Work::HostFn(h) => (h.f)(),
            Work::Memset { .. }
            | Work::Launch(_)
            | Work::Word { .. }
            | Work::Collective(_)
            | Work::External(_) => unreachable!("not work for a serial engine"),
        })
    }

    /// `f` of the operation (while parts may run).
    pub fn with_op<R>(&self, f: impl FnOnce(&Op) -> R) -> R {
        f(self
            .op
            .read()
            .as_ref()
            .expect("the op is taken after its last part only"))
    }

    /// Count one part done; true for the last one.
    pub fn part_done(&self) -> bool {
        self.finished.fetch_add(1, Ordering::AcqRel) + 1 == self.parts
    }
}

struct State {
    queue: BinaryHeap<Ready>,
    /// The operation the engine runs, by its thread or a waiting one.
    running: Option<Arc<Job>>,
}

/// An engine that runs one operation at a time.
pub(super) struct SerialEngine {
    state: Mutex<State>,
    /// Operations queued (what the engine thread polls for).
    has_work: AtomicUsize,
    cv: Condvar,
}

impl SerialEngine {
    pub fn new() -> Self {
        SerialEngine {
            state: Mutex::new(State {
                queue: BinaryHeap::new(),
                running: None,
            }),
            has_work: AtomicUsize::new(0),
            cv: Condvar::new(),
        }
    }

    pub fn push(&self, done: Finish, op: Op) {
        self.state.lock().queue.push(Ready { done, op });
        self.has_work.fetch_add(1, Ordering::Release);
        self.cv.notify_one();
    }

    pub fn has_work(&self) -> bool {
        self.has_work.load(Ordering::Acquire) != 0
    }

    /// Start the most urgent queued operation (the engine runs nothing now).
    fn start(&self, st: &mut State) -> Option<Arc<Job>> {
        let r = st.queue.pop()?;
        self.has_work.fetch_sub(1, Ordering::AcqRel);
        let job = Arc::new(Job::new(r.done, r.op));
        st.running = Some(job.clone());
        Some(job)
    }

    /// For the engine thread: the operation to work on (the one running, if parts of it are
    /// left, else the next one once the engine is free), or `None` when `finished()`.
    pub fn next(&self, finished: impl Fn() -> bool) -> Option<Arc<Job>> {
        let mut st = self.state.lock();
        loop {
            match &st.running {
                Some(j) if j.unclaimed() => return Some(j.clone()),
                // A waiting thread runs its last parts: one operation at a time.
                Some(_) => {}
                None => {
                    if let Some(j) = self.start(&mut st) {
                        return Some(j);
                    }
                    if finished() {
                        return None;
                    }
                }
            }
            self.cv.wait_for(&mut st, Duration::from_millis(100));
        }
    }

    /// For a host thread waiting for `node`: its operation, to run parts of, when the engine
    /// runs it now or would start it next (it is the most urgent queued and nothing runs).
    pub fn job_for(&self, node: &SchedNode) -> Option<Arc<Job>> {
        let mut st = self.state.lock();
        if let Some(j) = &st.running {
            return (j.done.is_node(node) && j.unclaimed()).then(|| j.clone());
        }
        if !st.queue.peek().is_some_and(|r| r.done.is_node(node)) {
            return None;
        }
        self.start(&mut st)
    }

    /// The last part of `job` is done: the engine is free again. Returns the operation, for
    /// the caller to drop before it announces the completion (MM2).
    pub fn retire(&self, job: &Job) -> Op {
        let op = job.op.write().take().expect("retired once");
        let mut st = self.state.lock();
        if st.running.as_ref().is_some_and(|r| std::ptr::eq(&**r, job)) {
            st.running = None;
        }
        drop(st);
        self.cv.notify_all();
        op
    }

    /// Wake the engine thread (shutdown).
    pub fn wake(&self) {
        let _g = self.state.lock();
        self.cv.notify_all();
    }
}
