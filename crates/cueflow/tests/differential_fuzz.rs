//! The differential mode of the program fuzzer (`tests/fuzz/`): the same random programs run on
//! the host backend and on a GPU (`cuda:0`; two-device programs on `cuda:0` and `cuda:1` when
//! both exist), each checked against the sequential model as it runs, and the bytes of every
//! buffer of the two backends compared at the end (NaNs compare equal whatever their bits: a
//! GPU's NaNs carry other bits than the CPU's).
//!
//! ```text
//! FUZZ_PROGRAMS=10000 FUZZ_SEED=7 ./differential_fuzz-… --nocapture --test-threads=1
//! ```
//! - `FUZZ_PROGRAMS` (default 16), `FUZZ_SEED` (default 1), `FUZZ_FROM` (default 0): programs
//!   `FROM..FROM+PROGRAMS`. Program `i` depends on the seed and `i` alone, so
//!   `FUZZ_FROM=i FUZZ_PROGRAMS=1` replays it.
//! - `FUZZ_MODES` (default `ordered,auto,random`): the orderings each program runs in.
//! - `FUZZ_SECONDS`: stop after this long (a device call has a time limit) and say where to go
//!   on from.
//! - `FUZZ_KNOWN`: patterns of known defects to generate too (`tests/fuzz/known.rs`).
//! - `FUZZ_SHRINK_SECS` (default 120): how long to shrink a difference to a minimal program.
//! - `FUZZ_GPU=host`: two more host devices stand in for the GPU (to test the harness);
//!   `FUZZ_GPU=host1`: one (the programs a machine with one GPU runs).
//! - `FUZZ_PRINT`: print each program before it runs.
//! - `FUZZ_REPEAT=n` runs each program `n` times (a fault that shows only now and then), and
//!   `FUZZ_STEPS=0-5,8` keeps only those steps of it; either one turns shrinking off, so a
//!   script can narrow down a program whose fault ends the process.
//!
//! It prints the number of programs run and, for each difference, the program's number and a
//! minimal program that still differs; it fails if there was any. Without a GPU it says
//! `SKIP cuda (differential_fuzz): …` and runs the host half only (host backend against the
//! model), so the harness itself stays tested in CI.
#![allow(dead_code)] // The fuzzer's modules, some of whose items only the fuzzer uses.

#[path = "fuzz/exec.rs"]
mod exec;
#[path = "fuzz/gen.rs"]
mod gen;
#[path = "fuzz/graphs.rs"]
mod graphs;
#[path = "fuzz/kernels.rs"]
mod kernels;
#[path = "fuzz/known.rs"]
mod known;
#[path = "fuzz/model.rs"]
mod model;
#[path = "fuzz/program.rs"]
mod program;
#[path = "fuzz/run.rs"]
mod run;
#[path = "fuzz/stats.rs"]
mod stats;

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cueflow::Device;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

use crate::exec::{execute, Shared};
use crate::gen::Cfg;
use crate::known::Known;
use crate::model::Model;
use crate::program::Program;
use crate::run::{same, Mode, ANY_NAN};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}=`{v}` is not a valid value")),
        Err(_) => default,
    }
}

/// The program being run, for the messages of a backend poisoned by it.
static PROGRAM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// When the process started fuzzing, for the messages of a backend poisoned by a program (a
/// fault that comes only after a process has run a while says when).
static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// One backend's devices and what its programs share; reopened after a sticky error.
struct Backend {
    name: &'static str,
    open: fn() -> cueflow::Result<Vec<Device>>,
    fresh_pools: bool,
    devices: Vec<Device>,
    shared: Shared,
}

impl Backend {
    fn new(
        name: &'static str,
        open: fn() -> cueflow::Result<Vec<Device>>,
        fresh_pools: bool,
    ) -> cueflow::Result<Backend> {
        let devices = open()?;
        let shared = Shared::on(&devices, fresh_pools)?;
        Ok(Backend {
            name,
            open,
            fresh_pools,
            devices,
            shared,
        })
    }

    /// Drop the devices and open them again (after a sticky error); left empty on failure.
    fn reopen(&mut self) -> cueflow::Result<()> {
        self.shared = Shared::default();
        self.devices.clear();
        let devices = (self.open)().inspect_err(|e| {
            eprintln!("differential_fuzz: reopening {} failed: {e}", self.name);
        })?;
        self.shared = Shared::on(&devices, self.fresh_pools)?;
        self.devices = devices;
        Ok(())
    }

    /// Run `p` in `mode`; a sticky error reopens the devices for the next program.
    fn run(&mut self, p: &Program, mode: Mode, known: Known) -> Result<Model, TestCaseError> {
        ANY_NAN.store(self.name != "host", Ordering::Relaxed);
        if self.devices.is_empty() {
            self.reopen()?; // An earlier reopening failed: try again, or fail this program.
        }
        let r = execute(&self.devices, &self.shared, p, mode, known);
        if let Some(e) = self.devices.iter().find_map(|d| d.sticky_error()) {
            eprintln!(
                "differential_fuzz: {} poisoned by program {} ({mode:?} ordering, run {}, {:.1} s \
                 into the run): {e}; reopening",
                self.name,
                PROGRAM.load(Ordering::Relaxed),
                if r.is_ok() { "passed" } else { "failed" },
                STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64())
            );
            self.reopen()?;
        }
        r.map_err(|e| TestCaseError::fail(format!("{} ({mode:?} ordering): {e}", self.name)))
    }
}

fn open_host() -> cueflow::Result<Vec<Device>> {
    (0..2).map(|i| Device::host_n(i, 2)).collect()
}

/// `FUZZ_STEPS` (the step indexes to keep: `0-5,8`) and `FUZZ_REPEAT` (default 1), when
/// either is set.
fn by_hand() -> Option<(Option<Vec<usize>>, u32)> {
    let steps = std::env::var("FUZZ_STEPS").ok().map(|v| {
        let number = |x: &str| x.trim().parse::<usize>().expect("FUZZ_STEPS: 0-5,8");
        (v.split(',').filter(|r| !r.trim().is_empty()))
            .flat_map(|r| match r.split_once('-') {
                Some((a, b)) => number(a)..number(b) + 1,
                None => number(r)..number(r) + 1,
            })
            .collect()
    });
    let repeat = std::env::var("FUZZ_REPEAT").ok();
    (steps.is_some() || repeat.is_some()).then(|| {
        let n = repeat.map_or(1, |r| r.trim().parse().expect("FUZZ_REPEAT: a count"));
        (steps, n)
    })
}

/// `FUZZ_GPU=host`: a second set of host devices stands in for the GPU (to test the harness,
/// or the host backend against itself).
fn open_host_as_gpu() -> cueflow::Result<Vec<Device>> {
    (2..4).map(|i| Device::host_n(i, 2)).collect()
}

/// `FUZZ_GPU=host1`: one host device stands in for the GPU, so the programs are the ones a
/// machine with one GPU runs (a program's devices depend on how many the GPU side has).
fn open_one_host_as_gpu() -> cueflow::Result<Vec<Device>> {
    Ok(vec![Device::host_n(2, 2)?])
}

fn open_cuda() -> cueflow::Result<Vec<Device>> {
    let mut v = vec![Device::cuda(0)?];
    // A second GPU, for two-device programs, when there is one.
    v.extend(Device::cuda(1));
    Ok(v)
}

fn modes() -> Vec<Mode> {
    env_or("FUZZ_MODES", "ordered,auto,random".to_string())
        .split(',')
        .map(|m| match m.trim() {
            "ordered" => Mode::Ordered,
            "auto" => Mode::Auto,
            "random" => Mode::Random,
            other => panic!("FUZZ_MODES: `{other}` is not ordered, auto or random"),
        })
        .collect()
}

/// Program `i`'s random source: the seed and `i` alone.
fn rng(seed: u64, i: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&i.to_le_bytes());
    bytes[16..24].copy_from_slice(b"cueflow!");
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Every buffer of `a` and `b` the same (NaN equal to NaN), and the same host functions.
fn agree(a: &Model, b: &Model, names: (&str, &str)) -> Result<(), TestCaseError> {
    for (d, (x, y)) in a.devs.iter().zip(&b.devs).enumerate() {
        for (i, (u, v)) in x.bufs.iter().zip(&y.bufs).enumerate() {
            // `got` is the second backend's, `want` the first's.
            same(
                &format!("device {d} buffer {i}, {} against {}", names.1, names.0),
                v,
                u,
            )?;
        }
        prop_assert_eq!(x.host_fns, y.host_fns, "device {} host functions", d);
    }
    Ok(())
}

#[test]
fn differential_fuzz_host_vs_gpu() {
    let (programs, seed, from) = (
        env_or("FUZZ_PROGRAMS", 16u64),
        env_or("FUZZ_SEED", 1u64),
        env_or("FUZZ_FROM", 0u64),
    );
    let limit = std::env::var("FUZZ_SECONDS")
        .ok()
        .map(|v| Duration::from_secs(v.trim().parse().expect("FUZZ_SECONDS: seconds")));
    let known = Known::from_env();
    let modes = modes();
    let host = RefCell::new(Backend::new("host", open_host, known.has("2")).unwrap());
    let second = match std::env::var("FUZZ_GPU").as_deref() {
        Ok("host") => Backend::new("host as gpu", open_host_as_gpu, known.has("2")),
        Ok("host1") => Backend::new("one host as gpu", open_one_host_as_gpu, known.has("2")),
        _ => Backend::new("cuda", open_cuda, known.has("2")),
    };
    let gpu = match second {
        Ok(b) => Some(RefCell::new(b)),
        Err(e) => {
            // To stderr directly, past the test harness's capture: CI logs show it.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP cuda (differential_fuzz): {e}; running the host backend against the model only"
            );
            None
        }
    };
    let two = gpu.as_ref().is_none_or(|g| g.borrow().devices.len() > 1);
    let config = Config {
        cases: 1,
        failure_persistence: None,
        max_shrink_time: env_or("FUZZ_SHRINK_SECS", 120u32) * 1000,
        // Unset, proptest allows 4 shrink steps per case: here, as many as the time allows.
        max_shrink_iters: 1_000_000,
        ..Config::default()
    };
    let start = *STARTED.get_or_init(Instant::now);
    let (mut ran, mut differ) = (0u64, Vec::new());
    for i in from..from + programs {
        if limit.is_some_and(|l| start.elapsed() > l) {
            eprintln!(
                "differential_fuzz: FUZZ_SECONDS reached; go on with FUZZ_SEED={seed} FUZZ_FROM={i}"
            );
            break;
        }
        if let Some(g) = gpu.as_ref().filter(|g| g.borrow().devices.is_empty()) {
            // A fault no new context clears (CUDA_ERROR_LAUNCH_FAILED): nothing more can run
            // on this backend in this process.
            eprintln!(
                "differential_fuzz: {} unusable in this process; go on with FUZZ_SEED={seed} \
                 FUZZ_FROM={i} in a new one",
                g.borrow().name
            );
            differ.push(i);
            break;
        }
        PROGRAM.store(i, Ordering::Relaxed);
        let devices = if two && i % 4 == 3 { 2 } else { 1 };
        let strategy = gen::program(Cfg {
            devices,
            known,
            max_steps: 40,
        });
        let mut runner = TestRunner::new_with_rng(config.clone(), rng(seed, i));
        let tree = strategy.new_tree(&mut runner).expect("a program");
        if std::env::var_os("FUZZ_PRINT").is_some() {
            eprintln!(
                "differential_fuzz: program {i}:\n{:#?}",
                proptest::strategy::ValueTree::current(&tree)
            );
        }
        // The first failure's reason: shrinking can end on another one (after a fault that
        // leaves CUDA unusable, every later try fails the same way, hiding the fault itself).
        let first = std::cell::RefCell::new(None);
        let check = |p: Program| {
            let r = (|| -> Result<(), TestCaseError> {
                for &mode in &modes {
                    let want = host.borrow_mut().run(&p, mode, known)?;
                    if let Some(gpu) = &gpu {
                        let got = gpu.borrow_mut().run(&p, mode, known)?;
                        agree(&want, &got, ("host", gpu.borrow().name))
                            .map_err(|e| TestCaseError::fail(format!("{mode:?} ordering: {e}")))?;
                    }
                }
                Ok(())
            })();
            if let Err(e) = &r {
                first.borrow_mut().get_or_insert_with(|| e.to_string());
            }
            r
        };
        let outcome = match by_hand() {
            // A fault that shows only now and then, narrowed down by hand (no shrinking).
            Some((keep, repeat)) => {
                let mut p = proptest::strategy::ValueTree::current(&tree);
                if let Some(keep) = keep {
                    p.steps = (p.steps.into_iter().enumerate())
                        .filter_map(|(k, step)| keep.contains(&k).then_some(step))
                        .collect();
                    if std::env::var_os("FUZZ_PRINT").is_some() {
                        eprintln!("differential_fuzz: program {i}, steps {keep:?}:\n{p:#?}");
                    }
                }
                (0..repeat)
                    .try_for_each(|_| check(p.clone()))
                    .map_err(|e| TestError::Fail(e.to_string().into(), p))
            }
            None => runner.run_one(tree, check).map(|_| ()),
        };
        ran += 1;
        if let Err(e) = outcome {
            let (why, minimal) = match e {
                TestError::Fail(why, p) => (why.to_string(), format!("{p:#?}")),
                TestError::Abort(why) => (why.to_string(), "(none: the run was aborted)".into()),
            };
            let first = first.borrow().clone().unwrap_or_default();
            eprintln!(
                "differential_fuzz: program {i} differs (replay: FUZZ_SEED={seed} FUZZ_FROM={i} \
                 FUZZ_PROGRAMS=1): {why}\nfirst failure (before shrinking): {first}\n\
                 minimal program:\n{minimal}"
            );
            differ.push(i);
        }
        if ran % 500 == 0 {
            eprintln!(
                "differential_fuzz: {ran} programs in {:.0?}, {} differing",
                start.elapsed(),
                differ.len()
            );
        }
    }
    let on = match &gpu {
        Some(g) => {
            let g = g.borrow();
            format!("host and {} GPU(s)", g.devices.len())
        }
        None => "the host backend only (no GPU)".to_string(),
    };
    eprintln!(
        "differential_fuzz: {ran} programs (seed {seed}, programs {from}..{}) in {modes:?} \
         on {on} in {:.1?}: {} differing{}",
        from + ran,
        start.elapsed(),
        differ.len(),
        if differ.is_empty() {
            String::new()
        } else {
            format!(" ({differ:?})")
        }
    );
    assert!(differ.is_empty(), "programs {differ:?} differ (see above)");
}
