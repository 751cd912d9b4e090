//! Reliability under long runs and exhausted resources (SPEC RL1–RL5, ER2, MD4; issue 16, items
//! 2 and 5–9): each test is the regression test of one item, written as the program that
//! showed it.
//!
//! Tests that measure the process (memory, threads, stderr) or lower its limits (`ulimit -v`
//! through `setrlimit(RLIMIT_AS)`) run their body in a child process of this test binary, alone
//! (the parent checks what the child printed and how it exited), so that other tests' threads
//! and memory do not count and a lowered limit reaches nobody else. CUDA variants print
//! `SKIP cuda: <reason>` and pass where no GPU is present.

mod captures;
mod collective_timeout;
mod completions;
mod faults;
mod graph_conflicts;
mod pool;
mod queues;
mod sanitizer_memory;
mod threads_and_panics;
mod waiting_calls;

use std::io::Write;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cueflow::{
    kernels, CaptureMode, Communicator, Device, DeviceBuffer, Error, Event, Kernel, KernelArgs,
    LaunchConfig, PinnedBuffer, Result, SanitizeMode, Stream,
};

/// Set in a child process to the name of the test it runs.
const CHILD_ENV: &str = "CUEFLOW_RELIABILITY_CHILD";

/// In the parent: run test `name` alone in a child process with `env` and return its output.
/// In that child: `None` (run the body).
///
/// The harness names a test by its section (`pool::out_of_memory_is_recoverable`), and the
/// section is the file that calls this (`pool.rs`), so a test passes only its own name.
#[track_caller]
fn child(name: &str, env: &[(&str, &str)]) -> Option<Output> {
    let name = harness_name(name);
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == name) {
        return None;
    }
    let out = child::rerun(&name, CHILD_ENV, env);
    // A name the harness does not know runs nothing, and a child that ran nothing proves nothing.
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("running 0 tests"),
        "the child process found no test named {name}"
    );
    Some(out)
}

/// A CUDA test whose body runs alone in a child process with `env`. In the parent: run the
/// child, check that it passed and printed `marker`, and show its marker lines; where no GPU is
/// present, say so. True there (the test is done); false in the child (run the body).
#[track_caller]
fn cuda_in_child(name: &str, env: &[(&str, &str)], marker: &str) -> bool {
    hold_gpu(false);
    cuda_child(name, env, marker)
}

/// The GPU among this binary's CUDA tests, which run in threads at once: shared by most,
/// taken whole (`hold_gpu(true)`) by a test that runs it out of memory or makes a kernel
/// fault (on an H200 a child's fault seemed to end a concurrent test's work in this process:
/// `CUDA_ERROR_LAUNCH_FAILED` there; those failures came with and without the fault tests,
/// from a module load stalling behind a gate kernel, `waiting_calls.rs`).
static GPU: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// This thread's hold of [`GPU`]: taken by a test's first CUDA call, kept until the test's
/// thread ends (libtest runs each test on a thread of its own).
enum GpuHold {
    #[allow(dead_code)] // Held, not read.
    Shared(std::sync::RwLockReadGuard<'static, ()>),
    #[allow(dead_code)]
    Alone(std::sync::RwLockWriteGuard<'static, ()>),
}

thread_local! {
    static HELD: std::cell::RefCell<Option<GpuHold>> = const { std::cell::RefCell::new(None) };
}

/// Hold the GPU for the rest of this test: whole (`alone`), or shared with the other tests.
/// A thread that holds it already keeps what it holds; asking for it whole after a shared
/// hold is a mistake of the test (it would run beside the others), refused.
#[track_caller]
fn hold_gpu(alone: bool) {
    HELD.with(|h| {
        match &*h.borrow() {
            Some(GpuHold::Shared(_)) if alone => {
                panic!("hold_gpu(true) must come before the test's first CUDA call")
            }
            Some(_) => return,
            None => {}
        }
        let hold = match alone {
            true => GpuHold::Alone(GPU.write().unwrap_or_else(|e| e.into_inner())),
            false => GpuHold::Shared(GPU.read().unwrap_or_else(|e| e.into_inner())),
        };
        *h.borrow_mut() = Some(hold);
    });
}

#[track_caller]
fn cuda_child(name: &str, env: &[(&str, &str)], marker: &str) -> bool {
    if std::env::var(CHILD_ENV).is_err() && cuda().is_none() {
        return true;
    }
    let Some(out) = child(name, env) else {
        return false;
    };
    let (stdout, _) = child_passed(&out, marker);
    for l in stdout.lines().filter(|l| l.contains(marker)) {
        say(format_args!("{l}"));
    }
    true
}

/// The child's output as text, for assertion messages.
fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether this process is the child that [`child`] started for test `name` of the calling
/// section.
#[track_caller]
fn in_child(name: &str) -> bool {
    let name = harness_name(name);
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}

/// Test `name` as the harness names it: prefixed by the calling file's section
/// (`pool::out_of_memory_is_recoverable`), bare for a test of `main.rs`.
#[track_caller]
fn harness_name(name: &str) -> String {
    let caller = std::path::Path::new(std::panic::Location::caller().file());
    match caller.file_stem().and_then(|s| s.to_str()) {
        None | Some("main") => name.to_string(),
        Some(section) => format!("{section}::{name}"),
    }
}

/// Assert the child passed and printed `marker` on stdout; returns (stdout, stderr).
fn child_passed(out: &Output, marker: &str) -> (String, String) {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success() && stdout.contains(marker),
        "child failed ({:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// A line the harness does not capture (CI logs show it).
fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The CUDA device, or `None` after printing why the CUDA variant is skipped. The calling
/// test shares the GPU with the others from here on ([`hold_gpu`]).
fn cuda() -> Option<Device> {
    hold_gpu(false);
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            say(format_args!("SKIP cuda: {e}"));
            None
        }
    }
}

#[path = "../common/child.rs"]
mod child;
#[path = "../common/rss.rs"]
mod rss;
use rss::rss;

/// Peak resident set size of this process image so far, in bytes (`VmHWM`; not `getrusage`,
/// whose high-water mark a child inherits from the parent it was forked from).
fn peak_rss() -> usize {
    status("VmHWM") * 1024
}

/// A field (in kB, or a count) of `/proc/self/status`.
fn status(field: &str) -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Lower this process's address-space limit to what it maps now plus `headroom` bytes
/// (`ulimit -v`; works for root too, unlike `RLIMIT_NPROC`).
fn limit_address_space(headroom: usize) {
    let now = status("VmSize") * 1024;
    let lim = libc::rlimit {
        rlim_cur: (now + headroom) as libc::rlim_t,
        rlim_max: (now + headroom) as libc::rlim_t,
    };
    // SAFETY: a valid rlimit; lowering a limit needs no privilege.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
    assert_eq!(r, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// A host function that holds its stream until `open` is set (at most 20 s).
fn gate(s: &Stream) -> Arc<AtomicBool> {
    let open = Arc::new(AtomicBool::new(false));
    let o = open.clone();
    s.host_fn(move || {
        let t = Instant::now();
        while !o.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_micros(200));
        }
    })
    .unwrap();
    open
}
