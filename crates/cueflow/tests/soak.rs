//! Soak of stream create / use / drop cycles in every mode (SPEC RL2; issue 16, item 4): the
//! sanitizer, automatic ordering, and both together. Memory and per-cycle cost must stay flat
//! however many streams the process ever made.
//!
//! Each mode runs in a child process of this test binary, alone, so that other tests' memory
//! and threads do not count. A cycle creates a stream and an event, waits for the long-lived
//! stream's last read, writes a shared buffer with a kernel, copies it to a second buffer,
//! records the event, makes a long-lived stream wait on it and read the copy (so the
//! long-lived stream's clock learns of every temporary stream), synchronizes the temporary
//! stream and drops both; every 64 cycles the long-lived stream is synchronized too. The
//! program is correctly ordered: the sanitizer must report nothing.
//!
//! `CUEFLOW_SOAK_CYCLES` sets the cycles per mode (default 20,000: under a second each in
//! release); `scripts/soak.sh` runs 100,000. The first window (a quarter of the batches of 128
//! cycles) is measured after a warm-up window, the last at the end; each window's cost is its
//! fastest batch in the calling thread's CPU time (load from elsewhere on a shared machine
//! only adds time, and wall-clock waits for worker threads swing with it; a leak's cost is in
//! every batch, on the calling thread, where the tracking layer runs). The test fails when memory grows by more than
//! `CUEFLOW_SOAK_MAX_MB` (default 10) or the last/first cost exceeds `CUEFLOW_SOAK_MAX_RATIO`
//! (default 1.5 here, where the machine is shared; the bound, 1.2, is what
//! `scripts/soak.sh` asks for).

use std::io::Write;
use std::time::Duration;

use cueflow::{kernels, Device, DeviceBuffer, Event, SanitizeMode, Stream};

const CHILD_ENV: &str = "CUEFLOW_SOAK_CHILD";

/// One measurement at a time: the harness runs tests in parallel, and a soak measured beside
/// another would time both.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
const BATCH: usize = 128;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[path = "common/child.rs"]
mod child;
#[path = "common/rss.rs"]
mod rss;
use rss::rss;

/// CPU time of the calling thread: what the calls themselves cost (the tracking layer's work
/// among it), without the time spent waiting for the machine's other load to let a worker
/// thread run, which on a shared machine swings the wall-clock cost of a cycle threefold.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The fastest of `v`: load from elsewhere on the machine only ever adds time, while a leak's
/// cost is there in every batch.
fn fastest(v: &[Duration]) -> Duration {
    v.iter().copied().min().unwrap_or_default()
}

/// What one mode's soak measured.
struct Figures {
    cycles: usize,
    growth: isize,
    first: Duration,
    last: Duration,
}

/// Run `cycles` create / use / drop cycles on `dev` (`auto`: the temporary streams order
/// automatically) and measure.
fn soak(dev: &Device, auto: bool, cycles: usize) -> Figures {
    const N: usize = 1024;
    let a = DeviceBuffer::<f32>::new(dev, N).unwrap();
    let b = DeviceBuffer::<f32>::new(dev, N).unwrap();
    let c = DeviceBuffer::<f32>::new(dev, N).unwrap();
    let keeper = Stream::builder(dev).non_blocking().build().unwrap();
    let kept = Event::new(dev).unwrap();
    let batches = (cycles / BATCH).max(4);
    let window = (batches / 4).max(1);
    let mut times = Vec::with_capacity(batches);
    let mut rss_after_warmup = 0;
    for batch in 0..batches {
        let t = thread_cpu();
        for i in 0..BATCH {
            let mut builder = Stream::builder(dev).non_blocking();
            if auto {
                builder = builder.auto_order();
            }
            let s = builder.build().unwrap();
            let e = Event::new(dev).unwrap();
            s.wait_event(&kept).unwrap();
            kernels::fill(&s, &a, i as f32).unwrap();
            s.copy_d2d(&b, &a).unwrap();
            s.record_event(&e).unwrap();
            keeper.wait_event(&e).unwrap();
            kernels::saxpy(&keeper, 1.0, &b, &c).unwrap();
            keeper.record_event(&kept).unwrap();
            s.synchronize().unwrap();
            if i % 64 == 63 {
                keeper.synchronize().unwrap();
            }
        }
        times.push(thread_cpu() - t);
        if batch + 1 == window {
            keeper.synchronize().unwrap();
            rss_after_warmup = rss();
        }
    }
    keeper.synchronize().unwrap();
    let growth = rss() as isize - rss_after_warmup as isize;
    let first = fastest(&times[window..2 * window]);
    let last = fastest(&times[batches - window..]);
    Figures {
        cycles: batches * BATCH,
        growth,
        first: first / BATCH as u32,
        last: last / BATCH as u32,
    }
}

/// What a soak's child runs.
#[derive(Clone, Copy)]
enum Body {
    /// [`soak`], with or without automatic ordering.
    Cycles { auto: bool },
    /// [`threads`].
    Threads,
}

/// In the parent: run mode `name` in a child with `env` and check what it printed. In the
/// child: run the soak and print its figures.
fn mode(name: &str, env: &[(&str, &str)], sanitize: SanitizeMode, body: Body) {
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == name) {
        // `CUEFLOW_SOAK_DEVICE=cuda:0` soaks a GPU (scripts/soak.sh passes it on); the host
        // backend otherwise.
        let dev = match std::env::var("CUEFLOW_SOAK_DEVICE") {
            Ok(spec) if !spec.is_empty() => Device::open_str(&spec).unwrap(),
            _ => Device::host().unwrap(),
        };
        dev.set_sanitize(sanitize);
        let f = match body {
            Body::Cycles { auto } => soak(&dev, auto, env_or("CUEFLOW_SOAK_CYCLES", 20_000usize)),
            Body::Threads => threads(&dev, env_or("CUEFLOW_SOAK_THREAD_CYCLES", 4_000usize)),
        };
        assert!(dev.sanitizer_reports().is_empty(), "a correct program");
        println!(
            "SOAK {name}: {} cycles, memory growth {:.2} MB, per-cycle cost first {:.2} us, \
             last {:.2} us, last/first {:.3}",
            f.cycles,
            f.growth as f64 / 1e6,
            f.first.as_secs_f64() * 1e6,
            f.last.as_secs_f64() * 1e6,
            f.last.as_secs_f64() / f.first.as_secs_f64()
        );
        return;
    }
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let max_mb = env_or("CUEFLOW_SOAK_MAX_MB", 10.0f64);
    let max_ratio = env_or("CUEFLOW_SOAK_MAX_RATIO", 1.5f64);
    // A cost that grows with the cycles grows in every run; a machine busy with other test
    // processes (CI runs several binaries at once on two cores) slows one run's last cycles
    // now and then (1.66x once in CI, 0.95-1.15x alone; the eight-thread soak 2.06x and then
    // 1.75x once in a fresh-clone CI run, 0.93-1.06x in five runs around it). So a run over the
    // bound is repeated, and all three must be over it to fail.
    let mut over = Vec::new();
    for _ in 0..3 {
        let (line, growth, ratio) = soak_child(name, env);
        assert!(
            growth <= max_mb,
            "{name}: memory grew by {growth} MB (at most {max_mb})\n{line}"
        );
        if ratio <= max_ratio {
            return;
        }
        over.push(line);
    }
    panic!("{name}: per-cycle cost grew more than {max_ratio}x in three runs:\n{over:#?}");
}

/// Run soak `name` in a child with `env`: its line, memory growth (MB) and cost ratio.
fn soak_child(name: &str, env: &[(&str, &str)]) -> (String, f64, f64) {
    let out = child::rerun(name, CHILD_ENV, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout
        .lines()
        .find_map(|l| l.find("SOAK ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("child failed ({:?})\n{stdout}\n{stderr}", out.status));
    let _ = writeln!(std::io::stderr(), "{line}");
    let field = |key: &str| -> f64 {
        line.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.trim_end_matches(',').parse().ok())
            .expect("the child's figures")
    };
    let (growth, ratio) = (field("memory growth "), field("last/first "));
    (line.to_string(), growth, ratio)
}

#[test]
fn soak_sanitizer() {
    mode(
        "soak_sanitizer",
        &[],
        SanitizeMode::Warn,
        Body::Cycles { auto: false },
    );
}

#[test]
fn soak_automatic_ordering() {
    mode(
        "soak_automatic_ordering",
        &[],
        SanitizeMode::Off,
        Body::Cycles { auto: true },
    );
}

#[test]
fn soak_sanitizer_and_automatic_ordering() {
    mode(
        "soak_sanitizer_and_automatic_ordering",
        &[],
        SanitizeMode::Warn,
        Body::Cycles { auto: true },
    );
}

/// Eight threads churning temporary streams under the sanitizer (they never finished before
/// RL2): `CUEFLOW_SOAK_THREAD_CYCLES` cycles each (default 4,000), in sixteen phases that all
/// threads run together; a phase's cost is the threads' CPU time in it, the first window the
/// fastest of phases 2–5, the last the fastest of the last four.
fn threads(dev: &Device, per_thread: usize) -> Figures {
    use std::sync::{Arc, Barrier};
    const PHASES: usize = 16;
    let per_phase = (per_thread / PHASES).max(1);
    let barrier = Arc::new(Barrier::new(9));
    // Each worker's CPU time per phase (see `thread_cpu`).
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (dev, barrier) = (dev.clone(), barrier.clone());
            std::thread::spawn(move || {
                let a = DeviceBuffer::<f32>::new(&dev, 256).unwrap();
                let mut times = Vec::with_capacity(PHASES);
                for _ in 0..PHASES {
                    barrier.wait();
                    let t = thread_cpu();
                    for i in 0..per_phase {
                        let s = Stream::new(&dev).unwrap();
                        kernels::fill(&s, &a, i as f32).unwrap();
                        s.synchronize().unwrap();
                    }
                    times.push(thread_cpu() - t);
                    barrier.wait();
                }
                times
            })
        })
        .collect();
    let mut after_warmup = 0;
    for phase in 0..PHASES {
        barrier.wait();
        barrier.wait();
        if phase == 1 {
            after_warmup = rss();
        }
    }
    let mut times = vec![Duration::ZERO; PHASES];
    for w in workers {
        for (total, t) in times.iter_mut().zip(w.join().unwrap()) {
            *total += t;
        }
    }
    let cycles = 8 * per_phase;
    Figures {
        cycles: PHASES * cycles,
        growth: rss() as isize - after_warmup as isize,
        first: fastest(&times[2..6]) / cycles as u32,
        last: fastest(&times[PHASES - 4..]) / cycles as u32,
    }
}

#[test]
fn soak_eight_threads_with_temporary_streams() {
    mode(
        "soak_eight_threads_with_temporary_streams",
        &[],
        SanitizeMode::Warn,
        Body::Threads,
    );
}
