//! Shared tools of the conformance suite: the per-backend runner with its expected-failure
//! table, buffers in a known state, and *gates* — work that holds a stream until the test
//! opens it, so that every ordering and concurrency claim is checked while the gate is closed,
//! by observation (queries, values, flags), never by sleeping and hoping.
//!
//! A broken rule makes a test fail, never hang: a kernel gate faults after [`GATE_TIMEOUT`]
//! (the fault names `cf_wait_flag` or `cft_arrive_wait`), and every wait on the host side has a
//! deadline.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytemuck::Pod;
use cueflow::trace::{OpKind, Trace, TraceOp};
use cueflow::{kernels, Device, DeviceBuffer, Event, Kernel, KernelArgs, LaunchConfig, Stream};

#[path = "../common/older_driver.rs"]
mod older_driver;

/// How long a gate stays closed at most before its kernel faults (or its host function gives
/// up). Only reached when a rule is broken.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(20);

/// Deadline for host-side polling of something that must happen.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Elements in the buffers most tests use.
pub const N: usize = 4096;

/// What is expected of a test listed in [`EXPECTED_FAILURES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The rule does not hold on the backend: the test must fail (a pass fails the run, so
    /// that the entry is removed).
    Fails,
    /// The rule cannot be *observed* on the backend: the test runs, its outcome is reported
    /// and ignored.
    Unobservable,
}

/// Per-backend exceptions, as in wgpu's test crate: `(backend, test, expectation, why)`. Keep
/// this short: only where a rule legitimately cannot hold, or cannot be observed, on a backend.
pub const EXPECTED_FAILURES: &[(&str, &str, Expect, &str)] = &[
    (
        "cuda",
        "cp5_same_direction_shares_engine",
        Expect::Unobservable,
        "CUDA traces time each operation with events recorded around it; the start event \
     completes when the stream reaches the copy, not when a copy engine takes it up, so two \
     same-direction copies on different streams may show overlapping intervals whether or not \
     they shared an engine (on an H100 with driver 580 it failed in some runs, about 5 us of \
     overlap in 30 us copies, and passed in others).",
    ),
    (
        "cuda",
        "ac6_conflicts_run_in_enqueue_order",
        Expect::Fails,
        "AC6 is the host backend's rule: its engines are threads in one address space, where \
     racing accesses would be undefined behaviour, so it runs them in enqueue order. A GPU runs \
     unordered conflicting work as the program asked (and the sanitizer reports it).",
    ),
    (
        "cuda",
        "md1_fault_stays_on_its_device",
        Expect::Fails,
        "after an illegal-address fault on one GPU the CUDA driver fails calls on the other GPU's \
     context in the same process too (seen on two H200s, driver 580: cuStreamCreateWithPriority \
     on cuda:1 returned CUDA_ERROR_ILLEGAL_ADDRESS after a fault on cuda:0); NVIDIA documents \
     such faults as process-wide. Faults stay on their GPU across processes: \
     tests/multiprocess.rs checks that with one process per GPU.",
    ),
    (
        "cuda",
        "er2_new_device_recovers",
        Expect::Unobservable,
        "after an illegal-address fault NVIDIA documents that the process must be restarted; \
     cueflow resets the primary context and then tries a new context, which recovered in \
     some H100 runs (driver 580) and not in others. When it does not, Device::cuda returns \
     Error::Unavailable naming the fault — typed, no panic — which is all a process can do.",
    ),
];

/// Tests that poison their device on purpose (KN2, ER2). On CUDA every device of one ordinal
/// in a process shares the driver's context, and a sticky fault poisons all of them, so these
/// run in a child process of their own on every backend but the host (whose devices are
/// independent), instead of poisoning the tests running beside them.
pub const POISONING: &[&str] = &[
    "kn2_fault_is_sticky",
    "kn2_fault_names_the_kernel",
    "er2_sticky_error_everywhere",
    "er2_new_device_recovers",
    "md1_fault_stays_on_its_device",
    "hf3_panic_is_a_host_function_fault",
    "hf4_callback_is_told_the_sticky_error",
];

/// Set in the child process that runs one [`POISONING`] test.
const CHILD_ENV: &str = "CUEFLOW_CONFORMANCE_CHILD";

/// A test body: most borrow the device; a test that must drop it (ER2 recovery) owns it.
pub enum Test {
    /// `fn(&Device)`.
    Shared(fn(&Device)),
    /// `fn(Device)`.
    Owned(fn(Device)),
    /// `fn(&Device, &Device)`: two devices of the backend (MD1–MD4).
    Pair(fn(&Device, &Device)),
}

/// Two devices of `backend`, or `None` (printing `SKIP`) where it has fewer than two.
fn open_pair(backend: &str) -> Option<(Device, Device)> {
    match backend {
        "host" => Some((
            Device::host_n(0, 0).expect("host devices are always available"),
            Device::host_n(1, 0).expect("host devices are always available"),
        )),
        _ => {
            let a = cuda_device()?;
            match Device::cuda(1) {
                Ok(b) => Some((a, b)),
                Err(e) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        say(format_args!(
                            "SKIP cuda: the two-device tests (MD1-MD4) need a second GPU: {e}"
                        ))
                    });
                    None
                }
            }
        }
    }
}

fn open(backend: &str) -> Option<Device> {
    match backend {
        "host" => Some(Device::host().expect("the host backend is always available")),
        "cuda" => cuda_device(),
        other => panic!("unknown backend {other}"),
    }
}

/// Held by a test on a GPU backend while it runs: GPU tests run one at a time.
///
/// Host devices are independent (each has its own engines and workers), so host tests run in
/// parallel. The devices of one GPU are not: they share its multiprocessors and, on CUDA, the
/// driver's context. Tests here hold every multiprocessor on purpose (ST7) or keep kernels
/// spinning on a gate until the test opens it, and driver calls that synchronize the context
/// (freeing memory, say) in one test would wait for another test's closed gate; run side by
/// side they would stall each other until a gate kernel times out and faults.
static GPU: Mutex<()> = Mutex::new(());

/// Run one conformance test on one backend.
pub fn run(backend: &str, name: &str, test: Test) {
    let _serial = (backend != "host").then(|| GPU.lock().unwrap_or_else(|e| e.into_inner()));
    if backend != "host" && POISONING.contains(&name) && std::env::var_os(CHILD_ENV).is_none() {
        if open(backend).is_some() {
            run_in_child(backend, name);
        }
        return;
    }
    let (body, driver): (Box<dyn FnOnce()>, u32) = match test {
        Test::Pair(f) => {
            let Some((a, b)) = open_pair(backend) else {
                return;
            };
            let driver = a.properties().driver_version;
            (Box::new(move || f(&a, &b)), driver)
        }
        test => {
            let Some(dev) = open(backend) else {
                return;
            };
            let driver = dev.properties().driver_version;
            let body = Box::new(move || match test {
                Test::Shared(f) => f(&dev),
                Test::Owned(f) => f(dev),
                Test::Pair(_) => unreachable!("handled above"),
            });
            (body, driver)
        }
    };
    let body = move || older_driver::run_or_skip(&format!("{backend}::{name}"), driver, body);
    let expected = EXPECTED_FAILURES
        .iter()
        .find(|(b, t, _, _)| *b == backend && *t == name);
    match expected {
        None => body(),
        Some((_, _, expect, why)) => {
            let passed = catch_unwind(AssertUnwindSafe(body)).is_ok();
            match (expect, passed) {
                (Expect::Fails, true) => panic!(
                    "{backend}::{name} is listed as failing ({why}) but passed: remove the entry"
                ),
                (Expect::Fails, false) => say(format_args!("XFAIL {backend}::{name}: {why}")),
                (Expect::Unobservable, _) => say(format_args!(
                    "UNOBSERVABLE {backend}::{name} ({}): {why}",
                    if passed { "passed" } else { "failed" }
                )),
            }
        }
    }
}

/// A line on stderr that the test harness does not capture (it captures `eprintln!`), so
/// CI logs show expected failures and unobservable outcomes.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Run `backend::name` alone in a child process of this test binary.
fn run_in_child(backend: &str, name: &str) {
    let test = format!("{backend}::{name}");
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("starting a child process for a poisoning test");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let ran = stdout.contains("1 passed");
    if !out.status.success() || !ran {
        panic!(
            "{test} failed in its own process ({}):\n{stdout}\n{stderr}",
            out.status
        );
    }
}

/// The CUDA device the suite runs on, or `None` (printing `SKIP cuda: <reason>`) when the
/// backend is unavailable. With `CUEFLOW_REQUIRE_CUDA=1` an unavailable backend fails instead,
/// for CI machines that have a GPU.
pub fn cuda_device() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("CUEFLOW_REQUIRE_CUDA=1 but the CUDA backend is unavailable: {e}");
            }
            // Once per process, straight to stderr: the harness captures eprintln! of passing
            // tests, and CI must show why the CUDA half did not run.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP cuda: the conformance suite's cuda:: tests pass without running: {e}"
                );
            });
            None
        }
    }
}

/// True on the host backend.
pub fn is_host(dev: &Device) -> bool {
    dev.properties().backend == "host"
}

// ---------------------------------------------------------------------------------------------
// Streams and buffers.

/// A fresh non-blocking stream (takes no part in ST4, so it never waits for a gated legacy or
/// blocking stream).
pub fn side_stream(dev: &Device) -> Stream {
    Stream::builder(dev).non_blocking().build().unwrap()
}

/// Device memory holding `data`, fully arrived (device memory starts unspecified on CUDA).
pub fn upload<T: Pod>(dev: &Device, data: &[T]) -> DeviceBuffer<T> {
    let buf = DeviceBuffer::<T>::new(dev, data.len()).unwrap();
    let s = side_stream(dev);
    s.write_pageable(&buf, data).unwrap();
    s.synchronize().unwrap();
    buf
}

/// `n` zeros of `f32` on the device.
pub fn zeros(dev: &Device, n: usize) -> DeviceBuffer<f32> {
    upload(dev, &vec![0.0f32; n])
}

/// `n` copies of `v` on the device.
pub fn filled(dev: &Device, n: usize, v: f32) -> DeviceBuffer<f32> {
    upload(dev, &vec![v; n])
}

/// A one-element `u32` flag, zero, for `kernels::wait_flag` / `kernels::set_flag`.
pub fn flag(dev: &Device) -> DeviceBuffer<u32> {
    upload(dev, &[0u32])
}

/// Read a device buffer through a fresh non-blocking stream. This orders with nothing: use it
/// after the work that wrote the buffer is known to be done (its stream synchronized), or to
/// peek at a buffer that gated work will write later (it then shows the old contents). A
/// download racing its writer passes on an idle GPU and reads old data on a busy one;
/// `downloads_follow_their_writers` (main.rs) finds every such read.
pub fn download<T: Pod + Default>(buf: &DeviceBuffer<T>) -> Vec<T> {
    let s = side_stream(buf.device());
    let mut out = vec![T::default(); buf.len()];
    s.read_pageable(&mut out, buf).unwrap();
    out
}

/// Look at a buffer that gated work will write later, without ordering after that work: the
/// way tests see that nothing behind a closed gate has run.
///
/// On CUDA this is [`download`] through a fresh stream, which orders with nothing. On the host
/// backend a download would wait for the gated writers (AC6: conflicting accesses never run at
/// once there), so the bytes are read in place: host-backend device memory is host memory at
/// `device_addr()`.
pub fn peek<T: Pod + Default>(buf: &DeviceBuffer<T>) -> Vec<T> {
    if !is_host(buf.device()) {
        return download(buf);
    }
    let base = buf.device_addr() as usize as *const T;
    (0..buf.len())
        // SAFETY: on the host backend `device_addr` is the address of `len` live, aligned
        // elements (the buffer handle keeps the allocation). Tests peek only while every writer
        // of the buffer is held behind a closed gate, so no write runs concurrently unless the
        // rule under test is broken — and then the values read are what fails the test.
        .map(|i| unsafe { std::ptr::read_volatile(base.add(i)) })
        .collect()
}

/// Assert every element equals `v`.
#[track_caller]
pub fn assert_all<T: PartialEq + std::fmt::Debug + Copy>(xs: &[T], v: T) {
    if let Some((i, x)) = xs.iter().enumerate().find(|(_, x)| **x != v) {
        panic!("element {i} is {x:?}, expected every element to be {v:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting and observing.

/// Poll `cond` until it holds; panic with `what` after [`DEADLINE`].
#[track_caller]
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < DEADLINE, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Synchronize `s`, but fail instead of hanging when its work is not done by [`DEADLINE`] (for
/// tests whose broken rule would be a deadlock, HF2).
#[track_caller]
pub fn synchronize_or_fail(s: &Stream) {
    wait_until("the stream's work is done", || s.query().unwrap_or(true));
    s.synchronize().unwrap();
}

/// Assert that `event` stays not-done for `window` (polling). Used where a broken rule would
/// let the work finish early: the assertion can only fail on a broken backend.
#[track_caller]
pub fn assert_stays_pending(event: &Event, window: Duration, what: &str) {
    let t = Instant::now();
    while t.elapsed() < window {
        assert!(!event.query().unwrap(), "{what} completed too early");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// CPU time the calling thread has used, where the OS tells (Linux).
pub fn thread_cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Run `test`, whose program races on purpose — the rule under test is what happens then
/// (AC6, MM2, MM3's raw access), or it looks behind a closed gate, a handshake through memory
/// that no ordering of AC2 covers — with the sanitizer warning whatever `CUEFLOW_SANITIZE`
/// says (error mode would refuse the racing call), and return the races it reported, for the
/// test to check they are the ones it makes (AC4). The device's mode is restored after.
pub fn races_on_purpose<R>(
    dev: &Device,
    test: impl FnOnce() -> R,
) -> (R, Vec<cueflow::RaceReport>) {
    let mode = dev.sanitize_mode();
    dev.set_sanitize(cueflow::SanitizeMode::Warn);
    let out = test();
    let reports = dev.take_sanitizer_reports();
    dev.set_sanitize(mode);
    (out, reports)
}

// ---------------------------------------------------------------------------------------------
// Gates.

/// A kernel of the suite: every block increments `state[1]` once it runs, then waits until
/// `state[0] == value`, and faults after `timeout_ns`. Lets a test see that blocks are
/// *running* (not just enqueued) before it goes on.
pub static ARRIVE_WAIT: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("cft_arrive_wait")
        .host(|_, a| {
            let st = a.atomics_u32(0);
            let value: u32 = a.scalar(1);
            let timeout = Duration::from_nanos(a.scalar::<u64>(2));
            st[1].fetch_add(1, Ordering::AcqRel);
            let t = Instant::now();
            while st[0].load(Ordering::Acquire) != value {
                assert!(
                    t.elapsed() < timeout,
                    "cft_arrive_wait: the gate stayed closed for {timeout:?}"
                );
                std::thread::yield_now();
            }
        })
        .cuda_source(ARRIVE_WAIT_CU, "cft_arrive_wait")
        .build()
});

const ARRIVE_WAIT_CU: &str = r#"
// The GPU's nanosecond timer; the host backend's prelude (CUDA C on the CPU) has no PTX.
#ifdef __CUEFLOW_HOST__
#define cft_globaltimer(t) ((t) = __cueflow_globaltimer())
#else
#define cft_globaltimer(t) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t))
#endif
extern "C" __global__ void cft_arrive_wait(unsigned int* state, unsigned int value,
                                           unsigned long long timeout_ns)
{
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        atomicAdd(&state[1], 1u);
        __threadfence_system();
        unsigned long long start, now;
        cft_globaltimer(start);
        while (((volatile unsigned int*)state)[0] != value) {
            __nanosleep(100);
            cft_globaltimer(now);
            if (now - start > timeout_ns) {
                __trap();
            }
        }
        __threadfence_system();
    }
    __syncthreads();
}
"#;

/// A latch a host function can wait on.
#[derive(Default)]
pub struct Latch {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Latch {
    /// Open the latch (idempotent).
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Wait until open; false on timeout.
    pub fn wait(&self, timeout: Duration) -> bool {
        let g = self.open.lock().unwrap();
        let (g, _) = self.cv.wait_timeout_while(g, timeout, |o| !*o).unwrap();
        *g
    }
}

enum GateKind {
    /// A device flag: `flag[0]` is what the gate kernels wait for, `flag[1]` counts
    /// `cft_arrive_wait` blocks that are running. Opened by an atomic `write_value` on a
    /// non-blocking stream, which needs no engine and does not race with the kernels' atomic
    /// reads (AC3: on the host backend a plain write would wait for them, AC6).
    Kernel {
        flag: DeviceBuffer<u32>,
        opener: Stream,
    },
    /// A host function waiting on a latch: holds no compute unit at all.
    Host {
        latch: Arc<Latch>,
        timed_out: Arc<AtomicBool>,
    },
}

struct GateInner {
    kind: GateKind,
    opened: AtomicBool,
}

impl GateInner {
    fn open(&self) {
        if self.opened.swap(true, Ordering::SeqCst) {
            return;
        }
        match &self.kind {
            GateKind::Kernel { flag, opener } => {
                // Ignore errors: a poisoned device cannot be opened, and then there is nothing
                // left to release either.
                let _ = opener.write_value(&flag.slice(0..1).unwrap(), 1);
            }
            GateKind::Host { latch, .. } => latch.open(),
        }
    }
}

impl Drop for GateInner {
    /// A test that fails with a gate closed still lets its device drain.
    fn drop(&mut self) {
        self.open();
    }
}

/// Holds streams until the test opens it. Clones are the same gate.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

impl Gate {
    /// A gate made of device kernels (`kernels::wait_flag`): while closed, each stream it
    /// blocks has a kernel *executing* (on the host backend it holds one compute worker).
    pub fn kernel(dev: &Device) -> Gate {
        let flag = upload(dev, &[0u32, 0u32]);
        Gate {
            inner: Arc::new(GateInner {
                kind: GateKind::Kernel {
                    flag,
                    opener: side_stream(dev),
                },
                opened: AtomicBool::new(false),
            }),
        }
    }

    /// A gate made of host functions waiting on a latch: holds no compute unit.
    pub fn host(dev: &Device) -> Gate {
        let _ = dev;
        Gate {
            inner: Arc::new(GateInner {
                kind: GateKind::Host {
                    latch: Arc::new(Latch::default()),
                    timed_out: Arc::new(AtomicBool::new(false)),
                },
                opened: AtomicBool::new(false),
            }),
        }
    }

    /// Enqueue the gate on `s`: later work on `s` waits until the gate is opened.
    pub fn block(&self, s: &Stream) {
        match &self.inner.kind {
            GateKind::Kernel { flag, .. } => {
                kernels::wait_flag(s, flag, 1, GATE_TIMEOUT).unwrap();
            }
            GateKind::Host { latch, timed_out } => {
                let (latch, timed_out) = (latch.clone(), timed_out.clone());
                s.host_fn(move || {
                    if !latch.wait(GATE_TIMEOUT) {
                        timed_out.store(true, Ordering::SeqCst);
                    }
                })
                .unwrap();
            }
        }
    }

    /// Enqueue on `s` a kernel gate of `blocks` blocks and wait until every block is running.
    /// With `blocks = busy_units(dev)` every compute unit of the device is then busy.
    pub fn block_running(&self, s: &Stream, blocks: u32) {
        let GateKind::Kernel { flag, opener } = &self.inner.kind else {
            panic!("block_running needs a kernel gate");
        };
        s.launch(
            &ARRIVE_WAIT,
            LaunchConfig::new(blocks, 32),
            KernelArgs::new()
                .atomic(flag)
                .scalar(1u32)
                .scalar(GATE_TIMEOUT.as_nanos() as u64),
        )
        .unwrap();
        let counter = flag.slice(1..2).unwrap();
        wait_until(&format!("{blocks} gate blocks are running"), || {
            opener.read_value(&counter).unwrap() >= blocks
        });
    }

    /// Open the gate (idempotent). `is_open` is true from before the release on.
    pub fn open(&self) {
        self.inner.open();
    }

    /// True once `open` was called.
    pub fn is_open(&self) -> bool {
        self.inner.opened.load(Ordering::SeqCst)
    }

    /// Open the gate from another thread after `delay`. Whatever a test concludes from
    /// `is_open()` after a blocking call, it concludes from the flag, not from the delay.
    pub fn open_after(&self, delay: Duration) -> JoinHandle<()> {
        let g = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            g.open();
        })
    }

    /// Panic if a host gate gave up waiting (the test ran into [`GATE_TIMEOUT`]).
    #[track_caller]
    pub fn assert_not_timed_out(&self) {
        if let GateKind::Host { timed_out, .. } = &self.inner.kind {
            assert!(
                !timed_out.load(Ordering::SeqCst),
                "a host gate timed out after {GATE_TIMEOUT:?}"
            );
        }
    }
}

/// Blocks that keep every compute unit of `dev` busy when each waits: one per compute worker on
/// the host backend; on CUDA 32 one-warp blocks per multiprocessor (the H100's resident-block
/// limit), so all of them can be resident at once and nothing else fits beside them.
pub fn busy_units(dev: &Device) -> u32 {
    let units = dev.properties().compute_units.max(1);
    if is_host(dev) {
        units
    } else {
        units * 32
    }
}

// ---------------------------------------------------------------------------------------------
// Traces.

/// Non-marker operations of `kind` in a trace, in enqueue order.
pub fn ops_of(trace: &Trace, kind: OpKind) -> Vec<&TraceOp> {
    trace.ops.iter().filter(|o| o.kind == kind).collect()
}

/// Operations that passed through the submit path (markers included).
pub fn enqueued(trace: &Trace) -> usize {
    trace.ops.len()
}

/// True if two traced operations overlap in time.
pub fn overlap(a: &TraceOp, b: &TraceOp) -> bool {
    a.start_ns < b.end_ns && b.start_ns < a.end_ns
}

/// `[first start, last end]` of a group of operations.
pub fn span(ops: &[&TraceOp]) -> (u64, u64) {
    let lo = ops.iter().map(|o| o.start_ns).min().unwrap();
    let hi = ops.iter().map(|o| o.end_ns).max().unwrap();
    (lo, hi)
}
