//! A fuzzer of whole programs (issues 16 and 27): proptest generates random programs and runs
//! them on the host backend with the sanitizer in error mode, checking every buffer against a
//! sequential reference model — the program's operations applied one after another in the
//! order they were enqueued — and that a correctly ordered program gets no report.
//!
//! A program (`program.rs`) uses streams (the legacy default stream among them), events
//! (record, wait, across devices), copies of every direction between device, pinned, mapped,
//! managed and registered memory, pageable copies, the built-in kernels and a few CUDA C
//! kernels given only as source (`kernels.rs`), host functions and host tasks over declared
//! buffers, host reads and writes, stream-ordered temporaries from the default pool and from
//! created pools with release thresholds, trims, prefetches and attachments of managed memory,
//! registrations ended and made again, captures (with graph memory, host tasks and conditional
//! nodes), graphs built node by node with every node kind — kernel, copy, memset, host
//! function, host task, event record and wait, child graph (built or captured), memory
//! allocation and free, empty, if / if-else / while / switch nodes, nested — on top of a
//! captured graph or not, graphs that hand out memory (GR10: freed by a stream, by another
//! graph, by auto-free-on-launch), dropped streams, and with two devices (`host:2x`)
//! collectives, peer copies and host memory of the other device.
//!
//! Three orderings of one program (`run::Mode`):
//! - **auto**: device-wide automatic ordering (AC5). Every call must be accepted, nothing
//!   reported, and the result must be the sequential one.
//! - **ordered**: explicit events only, which the harness inserts so that every operation is
//!   ordered after the one enqueued before it (a full ordering). Likewise.
//! - **random**: only the program's own events and synchronizations. The sanitizer refuses
//!   each operation that would race (AC4, error mode: nothing enqueued); the model skips
//!   exactly those, and the result must be the sequential one of the accepted operations —
//!   so a race the sanitizer missed, a wrong ordering, or two conflicting operations run at
//!   once (AC6) shows up as a wrong value. A built graph with one conflicting pair left
//!   unordered must be refused at instantiation.
//!
//! `PROPTEST_CASES` sets the cases per ordering (default 32 with one device, half that with
//! two: a few seconds in CI); `scripts/fuzz.sh` runs long. `FUZZ_KNOWN` puts back the patterns
//! of known defects the generator leaves out (`known.rs`). Failures are kept in
//! `tests/fuzz.proptest-regressions` and replayed first on every run. The same programs run on
//! the host backend and on a GPU in `tests/differential_fuzz.rs`.
//!
//! And with automatic graphs (AG1–AG6) on the devices: a window of steps repeated between
//! device synchronizations and changed partway (one step replaced from some repetition on),
//! under automatic ordering and under explicit events; the result must be the sequential one,
//! as without the mode.
//!
//! To narrow a failure down: `FUZZ_TRACE=1` prints each step (and each refusal), `FUZZ_SKIP=3,7`
//! leaves steps out of the replayed program, `FUZZ_TRIES=4` counts a program as failing if any
//! of four runs fails (so that shrinking keeps a failure that depends on timing), and
//! `FUZZ_STATS=1` counts what the programs did (`FUZZ_AG_STATS=1`: what automatic graphs did). A program that runs longer than
//! `FUZZ_HANG_SECS` (default 120) ends the process with the program printed.

mod exec;
mod gen;
mod graphs;
mod kernels;
mod known;
mod model;
mod program;
mod run;
mod stats;

use cueflow::Device;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

use crate::exec::{execute, Shared};
use crate::gen::Cfg;
use crate::known::Known;
use crate::program::{Program, Work};
use crate::run::Mode;

/// Run `p` ordered by `mode` on fresh host devices and check the result.
fn run(p: &Program, mode: Mode) -> Result<(), TestCaseError> {
    run_with(p, mode, false)
}

/// [`run`], with automatic graphs on the devices when `auto_graph`.
fn run_with(p: &Program, mode: Mode, auto_graph: bool) -> Result<(), TestCaseError> {
    let shown = p.clone();
    stats::watch(format!("{mode:?}"), move || format!("{shown:#?}"));
    // FUZZ_TRIES: a program counts as failing if any of this many runs fails (shrinks a
    // failure that depends on timing).
    let tries: usize = std::env::var("FUZZ_TRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut r = Ok(());
    for _ in 0..tries {
        r = run_watched(p, mode, auto_graph);
        if r.is_err() {
            break;
        }
    }
    stats::unwatch();
    r
}

fn run_watched(p: &Program, mode: Mode, auto_graph: bool) -> Result<(), TestCaseError> {
    let devs: Vec<Device> = match p.devices {
        1 => vec![Device::host_with_workers(3)?],
        n => (0..n as usize)
            .map(|i| Device::host_n(i, 2))
            .collect::<cueflow::Result<_>>()?,
    };
    for dev in &devs {
        dev.set_auto_graph(auto_graph)?;
    }
    let r = execute(&devs, &Shared::default(), p, mode, Known::from_env()).map(|_| ());
    if std::env::var("FUZZ_AG_STATS").is_ok() {
        eprintln!("automatic graphs: {:?}", devs[0].auto_graph_stats());
    }
    r
}

fn cases(devices: u32) -> u32 {
    // PROPTEST_CASES overrides.
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    (n / devices).max(1)
}

fn config(devices: u32) -> Config {
    Config {
        cases: cases(devices),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/fuzz.proptest-regressions",
        ))),
        // Unset, proptest allows 4 shrink steps per case; a failure deserves a minimal
        // program, within `PROPTEST_MAX_SHRINK_TIME` (ms, default here 5 minutes).
        max_shrink_iters: 1_000_000,
        max_shrink_time: std::env::var("PROPTEST_MAX_SHRINK_TIME")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300_000),
        ..Config::default()
    }
}

fn programs(devices: u8) -> impl Strategy<Value = Program> {
    gen::program(Cfg {
        devices,
        known: Known::from_env(),
        max_steps: 40,
    })
}

/// A window of steps repeated `3..6` times, each repetition followed by a synchronization of
/// every device (a host observation: the window ends, AG4), with one step of the window
/// replaced by another from some repetition on: the window repeats (its calls held, then
/// replayed as a graph), then changes partway (the held calls issued one by one, AG2), then
/// repeats in its new form.
fn repeated(devices: u8, max_steps: usize) -> impl Strategy<Value = Program> {
    let cfg = Cfg {
        devices,
        known: Known::from_env(),
        max_steps,
    };
    (
        gen::program(cfg),
        3..6usize,
        1..6usize,
        any::<prop::sample::Index>(),
        gen::step(cfg),
    )
        .prop_map(move |(window, reps, change_from, at, other)| {
            let i = at.index(window.steps.len());
            let mut steps = Vec::new();
            for r in 0..reps {
                let mut body = window.steps.clone();
                if r >= change_from {
                    body[i] = other.clone();
                }
                steps.extend(body);
                steps.extend((0..devices).map(|d| program::Step::SyncDevice { d }));
            }
            Program { steps, ..window }
        })
}

/// [`repeated`] with only the steps an automatic graph holds (AG4): kernels, copies and memsets
/// within device memory, stream-ordered temporaries of the default pool (AG2: allocated,
/// filled, copied out and freed in the window, the freed memory taken back by the next one,
/// AG6), event records and waits on the program's own streams — so the
/// windows replay (and change partway), where a general program's host work and host memory
/// end most windows before they repeat.
fn repeated_holdable(max_steps: usize) -> impl Strategy<Value = Program> {
    repeated(1, max_steps).prop_map(|mut p| {
        p.steps.retain(holdable);
        p
    })
}

/// True for a step an automatic graph holds, or a device synchronization ([`repeated_holdable`]).
fn holdable(s: &program::Step) -> bool {
    match s {
        program::Step::Do { s, w, .. } => {
            *s != program::LEGACY
                && !matches!(
                    w,
                    Work::HostFn
                        | Work::HostTask { .. }
                        | Work::Temp { pool: Some(_), .. }
                        | Work::PageableWrite { .. }
                        | Work::PageableRead { .. }
                )
                && w.accesses().iter().all(|a| a.loc.is_device())
        }
        program::Step::Record { s, .. } | program::Step::Wait { s, .. } => *s != program::LEGACY,
        program::Step::Join { s, from, .. } => *s != program::LEGACY && *from != program::LEGACY,
        program::Step::SyncDevice { .. } => true,
        _ => false,
    }
}

/// Windows that do not repeat, enough of them to turn the device cold (AG2: 16 in a row),
/// then one window repeated until it replays again (a cold device records every 16th window,
/// so from its 34th repetition at the latest) and changed after that (or not): its calls pass
/// the cold device as they come, then are held and replayed, then issued one by one where it
/// changed. `FUZZ_AG_STATS=1` prints what the mode did in each program.
fn cold_then_repeated(max_steps: usize) -> impl Strategy<Value = Program> {
    let cfg = Cfg {
        devices: 1,
        known: Known::from_env(),
        max_steps,
    };
    (
        prop::collection::vec(gen::program(cfg), 17..20),
        gen::program(cfg),
        38..42usize,
        36..42usize,
        any::<prop::sample::Index>(),
        gen::step(cfg),
    )
        .prop_map(|(prefix, window, reps, change_from, at, other)| {
            let sync = program::Step::SyncDevice { d: 0 };
            let mut steps = Vec::new();
            for p in prefix {
                steps.extend(p.steps.into_iter().filter(holdable));
                steps.push(sync.clone());
            }
            let body: Vec<program::Step> = window
                .steps
                .iter()
                .filter(|s| holdable(s))
                .cloned()
                .collect();
            for r in 0..reps {
                let mut b = body.clone();
                if r >= change_from && !b.is_empty() {
                    let i = at.index(b.len());
                    b[i] = other.clone();
                }
                steps.extend(b);
                steps.push(sync.clone());
            }
            Program { steps, ..window }
        })
}

proptest! {
    #![proptest_config(config(1))]

    /// Windows of work an automatic graph holds, repeated and changed partway: most replay.
    #[test]
    fn fuzz_auto_graph_holdable_windows_ordered_by_events(p in repeated_holdable(16)) {
        run_with(&p, Mode::Ordered, true)?;
    }

    #[test]
    fn fuzz_auto_graph_holdable_windows_auto_ordering(p in repeated_holdable(16)) {
        run_with(&p, Mode::Auto, true)?;
    }

    #[test]
    fn fuzz_auto_graph_repeated_windows_auto_ordering(p in repeated(1, 12)) {
        run_with(&p, Mode::Auto, true)?;
    }

    #[test]
    fn fuzz_auto_graph_repeated_windows_ordered_by_events(p in repeated(1, 12)) {
        run_with(&p, Mode::Ordered, true)?;
    }

    /// A device turned cold by windows that do not repeat, then work that repeats (AG2).
    #[test]
    fn fuzz_auto_graph_cold_then_repeated_auto_ordering(p in cold_then_repeated(12)) {
        run_with(&p, Mode::Auto, true)?;
    }

    /// Windows long enough to run in parts (AG2: every 32 to 256 calls).
    #[test]
    fn fuzz_auto_graph_long_repeated_windows_ordered_by_events(p in repeated(1, 40)) {
        run_with(&p, Mode::Ordered, true)?;
    }

    #[test]
    fn fuzz_auto_ordering(p in programs(1)) {
        run(&p, Mode::Auto)?;
    }

    #[test]
    fn fuzz_full_ordering_by_events(p in programs(1)) {
        run(&p, Mode::Ordered)?;
    }

    #[test]
    fn fuzz_random_ordering_under_the_sanitizer(p in programs(1)) {
        run(&p, Mode::Random)?;
    }
}

proptest! {
    #![proptest_config(config(2))]

    #[test]
    fn fuzz_two_devices_auto_ordering(p in programs(2)) {
        run(&p, Mode::Auto)?;
    }

    #[test]
    fn fuzz_two_devices_full_ordering_by_events(p in programs(2)) {
        run(&p, Mode::Ordered)?;
    }

    #[test]
    fn fuzz_two_devices_random_ordering_under_the_sanitizer(p in programs(2)) {
        run(&p, Mode::Random)?;
    }
}
