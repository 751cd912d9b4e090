//! The host device's scheduler and engines (SPEC CP5).
//!
//! Like a GPU, the host device has separate engines: one host→device copy engine, one
//! device→host copy engine, a compute engine (a pool of workers shared by all streams, as SMs
//! are) that runs kernels, memsets and device-to-device copies, and a host-function runner.
//! A node reaches an engine when all its dependencies completed; each engine picks among its
//! ready work by priority, then submission order (ST7), and never pre-empts what runs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::exec;
use super::graph::GraphRun;
use super::sched_node::{Home, SchedNode, SchedWork};
use super::serial::{Job, SerialEngine};
use crate::backend::contract::op::{Op, Work};
use crate::error::{Error, Result};
use crate::panics;
use crate::trace::Engine;

mod chain;

/// How long an idle engine or a waiting host thread polls before it sleeps, long enough that
/// back-to-back work and launch → synchronize round trips skip the futex wake-up. Polling
/// yields the core between checks; still, on a machine with fewer cores than engine threads
/// each extra poller takes turns on the cores from the threads doing the work, so there only
/// one idle compute worker polls ([`ComputeEngine::max_pollers`]).
const SPIN: Duration = Duration::from_micros(200);

/// Poll `ready` for up to [`SPIN`]: a few pure spins first (sub-microsecond hand-offs), then
/// yielding between checks. True if `ready` became true.
fn poll_until(ready: impl Fn() -> bool) -> bool {
    for _ in 0..64 {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    let t = Instant::now();
    while t.elapsed() < SPIN {
        if ready() {
            return true;
        }
        std::thread::yield_now();
    }
    ready()
}

/// What completing a piece of engine work finishes: a stream node, or node `i` of a graph run
/// (whose stream node gives the priority and the submission order).
#[derive(Clone)]
pub(super) enum Finish {
    SchedNode(Arc<SchedNode>),
    Graph(Arc<GraphRun>, usize),
}

impl Finish {
    /// Whether this finishes stream node `node`.
    pub(super) fn is_node(&self, node: &SchedNode) -> bool {
        matches!(self, Finish::SchedNode(n) if std::ptr::eq(&**n, node))
    }

    fn node(&self) -> &SchedNode {
        match self {
            Finish::SchedNode(n) => n,
            Finish::Graph(run, _) => &run.node,
        }
    }

    /// Priority, then submission order, then position in the graph.
    pub(super) fn key(&self) -> (i32, u64, usize) {
        let i = match self {
            Finish::SchedNode(_) => 0,
            Finish::Graph(_, i) => *i,
        };
        (self.node().priority, self.node().seq, i)
    }
}

thread_local! {
    /// On a compute worker thread, the address of the scheduler it works for (0 elsewhere):
    /// the worker may run that scheduler's ready single-block graph kernels at once — only
    /// that one's, since the thread is bound to its device's kernel worker, which maps that
    /// device's memory alone (a completion on one device may make another device's graph
    /// nodes ready).
    static COMPUTE_WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A kernel (or memset, or device copy) split into parts that compute workers claim.
struct ComputeJob {
    done: Finish,
    op: Op,
    parts: u64,
    batch: u64,
    next: AtomicU64,
    finished: AtomicU64,
    started: AtomicBool,
}

struct ComputeEngine {
    /// Jobs with unclaimed parts, most urgent first. A deque: the front is taken, and jobs
    /// mostly come in order (a graph's nodes as they become ready) and join at the back — a
    /// `Vec` moved every job at each take, quadratic in the jobs a wide graph makes ready.
    jobs: Mutex<VecDeque<Arc<ComputeJob>>>,
    has_work: AtomicUsize,
    cv: Condvar,
    /// Idle workers that may poll for work at once ([`SPIN`]); the others sleep on `cv` at
    /// once. Every idle worker where the machine has a core for each engine thread; one where
    /// it has fewer: there a second poller takes the core from the threads doing the work (a
    /// CUDA C launch in a stream: 9–19 µs with both of two workers polling, 1.7–3.4 µs with
    /// one, `examples/host_launch_cost.rs` on 2 cores).
    max_pollers: usize,
    /// Idle workers polling now.
    pollers: AtomicUsize,
}

/// Shared state of one host device: clock, engines, sticky error, completion waits.
pub(crate) struct Scheduler {
    pub name: String,
    epoch: Instant,
    seq: AtomicU64,
    workers: u32,
    /// 1: device-to-host copies run on the host-to-device engine, `d2h` stays idle (CP5).
    copy_engines: u32,
    h2d: SerialEngine,
    d2h: SerialEngine,
    host: SerialEngine,
    compute: ComputeEngine,
    wait_lock: Mutex<()>,
    wait_cv: Condvar,
    poisoned: AtomicBool,
    poison: Mutex<Option<Error>>,
    /// Host waits sleep at once instead of polling first (DV2, blocking synchronization).
    blocking_sync: AtomicBool,
    outstanding: AtomicUsize,
    shutdown: AtomicBool,
    /// The device's kernel worker process (HK3): engine threads bind it for the CUDA-C
    /// launch path ([`super::kernel::bind_worker`]).
    kernel_worker: Arc<super::isolate::WorkerSlot>,
    /// The engine threads, joined when the device goes with no work left (RL2: a program
    /// that opens and drops devices keeps a bounded number of threads).
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Scheduler {
    /// Create the scheduler and start its engine threads: `copy_engines` (1 or 2) copy
    /// engines and `workers` compute workers.
    pub fn start(
        name: String,
        workers: u32,
        copy_engines: u32,
        kernel_worker: Arc<super::isolate::WorkerSlot>,
    ) -> Result<Arc<Scheduler>> {
        let s = Arc::new(Scheduler {
            name,
            epoch: Instant::now(),
            seq: AtomicU64::new(0),
            workers,
            copy_engines,
            h2d: SerialEngine::new(),
            d2h: SerialEngine::new(),
            host: SerialEngine::new(),
            compute: ComputeEngine {
                jobs: Mutex::new(VecDeque::new()),
                has_work: AtomicUsize::new(0),
                cv: Condvar::new(),
                max_pollers: match super::affinity::fewer_cores_than_engines(workers) {
                    true => 1,
                    false => workers as usize,
                },
                pollers: AtomicUsize::new(0),
            },
            wait_lock: Mutex::new(()),
            wait_cv: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison: Mutex::new(None),
            blocking_sync: AtomicBool::new(false),
            outstanding: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            kernel_worker,
        });
        if let Err(e) = s.spawn_engines() {
            // Out of threads (RLIMIT_NPROC, the kernel's limit): stop the ones that started.
            s.shut_down();
            s.join_engines();
            return Err(e);
        }
        Ok(s)
    }

    /// Start the engine threads: the serial engines (without `d2h` when the device has one
    /// copy engine) and the compute workers; the first failure stops the starting.
    fn spawn_engines(self: &Arc<Self>) -> Result<()> {
        let spawn = |label: String, body: Box<dyn FnOnce() + Send>| -> Result<()> {
            let t = std::thread::Builder::new()
                .name(label.clone())
                .spawn(body)
                .map_err(|e| {
                    Error::OutOfResources(format!(
                        "the host device `{}` could not start its engine thread {label}: {e}",
                        self.name
                    ))
                })?;
            self.threads.lock().push(t);
            Ok(())
        };
        for (label, which) in [("h2d", 0), ("d2h", 1), ("hostfn", 2)] {
            if which == 1 && self.copy_engines == 1 {
                continue;
            }
            let me = self.clone();
            let core = super::affinity::copy_engine_core(which, self.workers);
            spawn(
                format!("cueflow-{label}"),
                Box::new(move || {
                    if let Some(c) = core {
                        super::affinity::pin_current_thread(c);
                    }
                    super::kernel::bind_worker(me.kernel_worker.clone());
                    me.serial_loop(which)
                }),
            )?;
        }
        for i in 0..self.workers {
            let me = self.clone();
            spawn(
                format!("cueflow-sm{i}"),
                Box::new(move || me.compute_loop()),
            )?;
        }
        Ok(())
    }

    /// Join the engine threads once they stopped (after [`shut_down`](Self::shut_down)), when
    /// no work is left for them: they stop at once then. With work pending, or when called on
    /// one of the engine threads themselves (a host function's closure held the last handle
    /// of the device), they are left to stop on their own after the work (ST10).
    pub fn join_engines(&self) {
        if self.outstanding.load(Ordering::Acquire) != 0 {
            return;
        }
        let threads = std::mem::take(&mut *self.threads.lock());
        let me = std::thread::current().id();
        if threads.iter().any(|t| t.thread().id() == me) {
            return;
        }
        for t in threads {
            let _ = t.join();
        }
    }

    /// Nanoseconds since the device was opened, on the monotonic clock.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub fn sticky(&self) -> Option<Error> {
        if self.poisoned.load(Ordering::Acquire) {
            self.poison.lock().clone()
        } else {
            None
        }
    }

    pub fn check(&self) -> Result<()> {
        match self.sticky() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn set_poison(&self, e: Error) {
        let mut p = self.poison.lock();
        if p.is_none() {
            *p = Some(e);
        }
        self.poisoned.store(true, Ordering::Release);
    }

    /// Register a new node whose dependencies are about to be linked.
    pub fn begin(
        self: &Arc<Self>,
        work: SchedWork,
        priority: i32,
        backlog: Option<Arc<super::sched_node::Backlog>>,
    ) -> Arc<SchedNode> {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        let home: std::sync::Weak<dyn Home> = Arc::downgrade(self) as std::sync::Weak<Scheduler>;
        SchedNode::new(home, self.next_seq(), priority, work, backlog)
    }

    /// Drop the submitter's guard (node rule 2); dispatches the node if it is ready.
    pub fn release(self: &Arc<Self>, node: Arc<SchedNode>) {
        if node.release_one() {
            self.ready(node);
        }
    }

    fn ready(self: &Arc<Self>, node: Arc<SchedNode>) {
        match node.take_work() {
            Some(SchedWork::Op(op)) => self.dispatch(Finish::SchedNode(node), op),
            Some(SchedWork::Graph(job)) => self.start_graph(node, job),
            Some(SchedWork::GraphGate(run, nodes)) => {
                self.complete(node);
                self.gate_opened(&run, &nodes);
            }
            _ => self.complete(node),
        }
    }

    pub(super) fn dispatch(self: &Arc<Self>, done: Finish, op: Op) {
        let engine = match op.engine() {
            Engine::CopyH2D => &self.h2d,
            // One copy engine (CP5): both directions take turns on it.
            Engine::CopyD2H if self.copy_engines == 1 => &self.h2d,
            Engine::CopyD2H => &self.d2h,
            Engine::Host => &self.host,
            Engine::None => return self.run_inline(done, op),
            _ => return self.dispatch_compute(done, op),
        };
        engine.push(done, op);
    }

    /// A stream memory operation runs where it became ready, at once.
    fn run_inline(self: &Arc<Self>, done: Finish, op: Op) {
        let start = self.now_ns();
        if !self.poisoned.load(Ordering::Acquire) {
            exec::run_value_op(&op);
        }
        if let Some(slot) = &op.trace {
            slot.set_times(start, self.now_ns());
        }
        drop(op); // MM2: references are released only after the work is done.
        self.finish(done);
    }

    /// Completing engine work: the stream node, or the graph node and what it makes ready.
    fn finish(self: &Arc<Self>, done: Finish) {
        match done {
            Finish::SchedNode(node) => self.complete(node),
            Finish::Graph(run, i) => self.graph_node_done(run, i),
        }
    }

    /// The scheduler's identity for [`COMPUTE_WORKER`]: its address, which cannot be reused
    /// while one of its workers (each holds it) runs.
    fn address(&self) -> usize {
        self as *const Scheduler as usize
    }

    /// True on one of this scheduler's compute workers.
    pub(super) fn on_own_compute_worker(&self) -> bool {
        COMPUTE_WORKER.with(|c| c.get()) == self.address()
    }

    /// Run a whole single-part compute op on this thread; a panic poisons the device.
    pub(super) fn run_compute_part(&self, op: &Op) {
        if self.poisoned.load(Ordering::Acquire) {
            return;
        }
        let run = panics::catch(|| exec::run_parts(op, 0..1));
        if let Err(payload) = run {
            self.set_poison(fault_error(&self.name, op, payload));
        }
    }

    fn dispatch_compute(self: &Arc<Self>, done: Finish, op: Op) {
        let parts = exec::parts(&op).max(1);
        let batch = (parts / (self.workers as u64 * 8)).max(1);
        let job = Arc::new(ComputeJob {
            done,
            op,
            parts,
            batch,
            next: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            started: AtomicBool::new(false),
        });
        let alone = {
            let mut jobs = self.compute.jobs.lock();
            let key = |j: &ComputeJob| j.done.key();
            let at = jobs.partition_point(|j| key(j) <= key(&job));
            jobs.insert(at, job);
            jobs.len() == 1
        };
        self.compute.has_work.fetch_add(1, Ordering::SeqCst);
        if parts > 1 {
            self.compute.cv.notify_all();
        } else if self.compute.pollers.load(Ordering::SeqCst) == 0
            && !(alone && self.on_own_compute_worker())
        {
            // A one-part job is taken by a polling worker, or, when it is the only job, by the
            // worker dispatching it (work that became ready as that worker finished its job:
            // it looks for work next); else a sleeper is woken. (A poller that stops polling
            // after this load still finds the job: it leaves `pollers` before it looks at the
            // jobs, and the job was queued before this load.)
            self.compute.cv.notify_one();
        }
    }

    /// Complete `node` and everything that becomes ready and needs no engine.
    pub fn complete(self: &Arc<Self>, node: Arc<SchedNode>) {
        let mut stack = vec![node];
        let mut wake = false;
        while let Some(n) = stack.pop() {
            let dependents = n.mark_done(self.now_ns());
            wake |= n.wants_wake(); // SchedNode rule 3: after `done` is set.
            for d in dependents {
                if d.release_one() {
                    // MD2: a node of another device goes to its own scheduler.
                    if !std::ptr::addr_eq(d.home.as_ptr(), Arc::as_ptr(self)) {
                        if let Some(home) = d.home.upgrade() {
                            home.ready_node(d);
                        }
                        continue;
                    }
                    match d.take_work() {
                        Some(SchedWork::Op(op)) => self.dispatch(Finish::SchedNode(d), op),
                        Some(SchedWork::Graph(job)) => self.start_graph(d, job),
                        Some(SchedWork::GraphGate(run, nodes)) => {
                            stack.push(d);
                            self.gate_opened(&run, &nodes);
                        }
                        _ => stack.push(d),
                    }
                }
            }
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
        }
        // SchedNode rule 3: only a completion that a host thread sleeps on wakes the sleepers (a
        // thread woken at every completion took the compute worker's core from it for a few
        // µs about every 100 µs in the pipeline).
        if wake {
            let _g = self.wait_lock.lock();
            self.wait_cv.notify_all();
        }
        if self.shutdown.load(Ordering::Acquire) && self.outstanding.load(Ordering::Acquire) == 0 {
            self.wake_all();
        }
    }

    /// Block the calling thread until `node`, of any host device, is done.
    pub fn wait_any(node: &SchedNode) {
        // A device that is gone drained its engines first: its nodes completed (ST10).
        if let Some(home) = node.home.upgrade() {
            home.wait_node(node);
        }
    }

    /// Block the calling thread until `node` is done (spinning briefly first unless `sleep`).
    pub fn wait(&self, node: &SchedNode, sleep: bool) {
        if node.is_done() {
            return;
        }
        let sleep = sleep || self.blocking_sync.load(Ordering::Relaxed);
        if !sleep && poll_until(|| node.is_done()) {
            return;
        }
        node.want_wake(); // SchedNode rule 3.
        let mut g = self.wait_lock.lock();
        while !node.is_done() {
            self.wait_cv.wait_for(&mut g, Duration::from_millis(20));
        }
    }

    /// Make every later host wait sleep at once (DV2's blocking synchronization), or poll
    /// briefly first again.
    pub fn set_blocking_sync(&self, on: bool) {
        self.blocking_sync.store(on, Ordering::Relaxed);
    }

    /// Stop the engines once every outstanding node has completed (device dropped, ST10).
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.wake_all();
    }

    fn wake_all(&self) {
        for e in [&self.h2d, &self.d2h, &self.host] {
            e.wake();
        }
        let _g = self.compute.jobs.lock();
        self.compute.cv.notify_all();
    }

    fn finished(&self) -> bool {
        self.shutdown.load(Ordering::Acquire) && self.outstanding.load(Ordering::Acquire) == 0
    }

    fn serial_loop(self: Arc<Self>, which: usize) {
        let engine = match which {
            0 => &self.h2d,
            1 => &self.d2h,
            _ => &self.host,
        };
        loop {
            poll_until(|| engine.has_work());
            let Some(job) = engine.next(|| self.finished()) else {
                return;
            };
            self.work_on(engine, &job);
        }
    }

    /// Run parts of `job` of `engine` until none is left to claim; whoever runs the last one
    /// completes the operation.
    fn work_on(self: &Arc<Self>, engine: &SerialEngine, job: &Job) {
        while let Some(p) = job.claim() {
            if p == 0 {
                job.start_ns.store(self.now_ns(), Ordering::Relaxed);
            }
            // A panicking host function must not kill the engine thread (every later host
            // function and synchronize would hang); like a faulting kernel it poisons the
            // device (KN2).
            if !self.poisoned.load(Ordering::Acquire) {
                if let Err(payload) = job.run_part(p) {
                    self.set_poison(job.with_op(|op| fault_error(&self.name, op, payload)));
                }
            }
            if job.part_done() {
                let op = engine.retire(job);
                if let Some(slot) = &op.trace {
                    slot.set_times(job.start_ns.load(Ordering::Relaxed), self.now_ns());
                }
                drop(op); // MM2: references are released only after the work is done.
                self.finish(job.done.clone());
            }
        }
    }

    /// A host thread waiting for `node`: when it is a copy its engine runs now or would start
    /// next, run parts of it here (see [`super::serial`]).
    fn help(self: &Arc<Self>, node: &SchedNode) {
        for engine in [&self.h2d, &self.d2h] {
            if let Some(job) = engine.job_for(node) {
                self.work_on(engine, &job);
                return;
            }
        }
    }

    /// Poll for compute work for up to [`SPIN`], if fewer than `max_pollers` idle workers
    /// poll already; return at once otherwise (the caller then sleeps in `claim`).
    fn poll_for_work(&self) {
        let c = &self.compute;
        let mut now = c.pollers.load(Ordering::SeqCst);
        loop {
            if now >= c.max_pollers {
                return;
            }
            match c
                .pollers
                .compare_exchange(now, now + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        poll_until(|| c.has_work.load(Ordering::Acquire) != 0);
        c.pollers.fetch_sub(1, Ordering::SeqCst);
    }

    fn claim(&self) -> Option<(Arc<ComputeJob>, u64, u64)> {
        let mut jobs = self.compute.jobs.lock();
        loop {
            if let Some(job) = jobs.front().cloned() {
                let lo = job.next.load(Ordering::Relaxed);
                let hi = (lo + job.batch).min(job.parts);
                job.next.store(hi, Ordering::Relaxed);
                if hi >= job.parts {
                    jobs.pop_front();
                    self.compute.has_work.fetch_sub(1, Ordering::AcqRel);
                }
                return Some((job, lo, hi));
            }
            if self.finished() {
                return None;
            }
            self.compute
                .cv
                .wait_for(&mut jobs, Duration::from_millis(100));
        }
    }

    fn compute_loop(self: Arc<Self>) {
        COMPUTE_WORKER.with(|c| c.set(self.address()));
        super::kernel::bind_worker(self.kernel_worker.clone());
        loop {
            self.poll_for_work();
            let Some((job, lo, hi)) = self.claim() else {
                return;
            };
            if let Some(chain) = self.c_chain(&job) {
                self.run_c_chain(job, chain);
                continue;
            }
            if !job.started.swap(true, Ordering::AcqRel) {
                if let Some(slot) = &job.op.trace {
                    slot.start_ns.store(self.now_ns(), Ordering::Relaxed);
                }
            }
            if !self.poisoned.load(Ordering::Acquire) {
                let run = panics::catch(|| exec::run_parts(&job.op, lo..hi));
                if let Err(payload) = run {
                    self.set_poison(fault_error(&self.name, &job.op, payload));
                }
            }
            let n = hi - lo;
            if job.finished.fetch_add(n, Ordering::AcqRel) + n == job.parts {
                if let Some(slot) = &job.op.trace {
                    slot.end_ns.store(self.now_ns(), Ordering::Release);
                }
                let done = job.done.clone();
                drop(job); // MM2: the op's references go before completion is announced.
                self.finish(done);
            }
        }
    }
}

fn fault_error(device: &str, op: &Op, caught: panics::Caught) -> Error {
    if let Work::HostFn(h) = &op.work {
        // HF3: a host function's panic is its own fault, not a kernel's.
        return Error::HostFnFault {
            device: device.to_string(),
            name: h.fault_name(),
            detail: caught.detail("host function panicked"),
        };
    }
    if let Some(f) = caught.payload::<super::cuda_c::Blame>() {
        // A CUDA C kernel's fault names the kernel the worker blames (RL5).
        return Error::KernelFault {
            device: device.to_string(),
            kernel: f.kernel.clone(),
            detail: f.detail.clone(),
        };
    }
    Error::KernelFault {
        device: device.to_string(),
        kernel: op.name(),
        detail: caught.detail("kernel panicked"),
    }
}

impl Home for Scheduler {
    fn ready_node(self: Arc<Self>, node: Arc<SchedNode>) {
        self.ready(node);
    }

    fn wait_node(self: Arc<Self>, node: &SchedNode) {
        if !node.is_done() {
            self.help(node);
        }
        self.wait(node, false);
    }
}
