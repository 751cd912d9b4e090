//! What every ported sample shares: the device(s) it runs on (`CUEFLOW_DEVICE`, as every cueflow
//! program), a tally of the checks the original sample makes, and its exit status.
//!
//! Each sample is a binary under `src/bin/` named after the CUDA sample in snake case
//! (`simpleZeroCopy` → `simple_zero_copy`); its CUDA C kernels sit under `kernels/` and are
//! compiled for the GPU by NVRTC (and, on the host backend, run as CUDA C where the host backend
//! can, beside a Rust closure doing the same arithmetic). A sample prints what it measured and
//! `PASSED` / `FAILED` like the originals, and exits non-zero when any check failed or any call
//! returned an error.

use std::fmt::Display;
use std::process::ExitCode;

use cueflow::Device;

/// The checks a sample makes, counted; failures are printed as they happen.
#[derive(Debug, Default)]
pub struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    /// No checks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record one check: `ok` or a failure described by `what`.
    pub fn check(&mut self, ok: bool, what: impl Display) {
        if ok {
            self.passed += 1;
        } else {
            eprintln!("check failed: {what}");
            self.failed.push(what.to_string());
        }
    }

    /// Compare two values; a mismatch is a failure naming both.
    pub fn eq<T: PartialEq + std::fmt::Debug>(&mut self, got: T, want: T, what: impl Display) {
        let ok = got == want;
        self.check(ok, format_args!("{what}: got {got:?}, expected {want:?}"));
    }

    /// Checks that passed so far.
    pub fn passed(&self) -> usize {
        self.passed
    }

    /// Failures so far.
    pub fn failures(&self) -> &[String] {
        &self.failed
    }

    /// Whether every check so far passed.
    pub fn all_passed(&self) -> bool {
        self.failed.is_empty()
    }
}

/// Run a sample's body and turn its outcome into the process's exit status: `PASSED` and 0
/// when every check passed, `FAILED` and 1 when one did not, the error and 2 when a call
/// failed. `name` is the CUDA sample's own name.
pub fn main_with(
    name: &str,
    body: impl FnOnce(&mut Checks) -> Result<(), Box<dyn std::error::Error>>,
) -> ExitCode {
    let mut checks = Checks::new();
    let outcome = body(&mut checks);
    match outcome {
        Err(e) => {
            eprintln!("{name}: error: {e}");
            println!("{name}: FAILED (error)");
            ExitCode::from(2)
        }
        Ok(()) if checks.all_passed() => {
            println!("{name}: PASSED ({} checks)", checks.passed());
            ExitCode::SUCCESS
        }
        Ok(()) => {
            println!(
                "{name}: FAILED ({} of {} checks failed)",
                checks.failures().len(),
                checks.failures().len() + checks.passed()
            );
            ExitCode::from(1)
        }
    }
}

/// The device `CUEFLOW_DEVICE` names (default `host`; a list opens its first device).
pub fn device() -> cueflow::Result<Device> {
    Device::from_env()
}

/// The devices `CUEFLOW_DEVICE` names (`host:2x`, `cuda:0,cuda:1`, `cuda:all`); at least one.
pub fn devices() -> cueflow::Result<Vec<Device>> {
    Device::list_from_env()
}

/// Whether the sample runs on a GPU (timings and sizes are then the original's).
pub fn on_gpu(dev: &Device) -> bool {
    dev.spec().to_string().starts_with("cuda")
}

/// What a kernel that spins on `clock()` does, for the host backend's Rust closure: wait until
/// `clock_count` ticks of a clock running at `clock_rate_khz` (the device's
/// [`DeviceProperties::clock_rate_khz`](cueflow::DeviceProperties::clock_rate_khz)) have
/// passed, and return the ticks seen, as the CUDA kernel stores them. It spins, as the GPU
/// kernel does, so it holds its compute worker the whole time, as the kernel holds its
/// multiprocessor.
pub fn spin_clocks(clock_rate_khz: u32, clock_count: i64) -> i64 {
    let start = std::time::Instant::now();
    let per_ns = clock_rate_khz as f64 / 1e6;
    loop {
        let seen = (start.elapsed().as_nanos() as f64 * per_ns) as i64;
        if seen >= clock_count {
            return seen;
        }
        std::hint::spin_loop();
    }
}

/// The value of a `--name=N` flag among the process's arguments (the originals' command
/// lines, `checkCmdLineFlag` / `getCmdLineArgumentInt`), or `default`.
pub fn int_flag(name: &str, default: i64) -> Result<i64, Box<dyn std::error::Error>> {
    let prefix = format!("--{name}=");
    for a in std::env::args().skip(1) {
        if let Some(v) = a
            .strip_prefix(&prefix)
            .or_else(|| a.strip_prefix(&prefix[1..]))
        {
            return v
                .parse()
                .map_err(|e| format!("--{name}={v}: not an integer ({e})").into());
        }
    }
    Ok(default)
}

/// The clock-spinning kernel of concurrentKernels and simpleHyperQ (`clock_block`,
/// `kernel_A`, `kernel_B`: spin for `clock_count` ticks, store the ticks seen) from `source`;
/// on the host backend a closure spinning on the host clock at `clock_rate_khz`.
pub fn clock_kernel(source: &'static str, name: &str, clock_rate_khz: u32) -> cueflow::Kernel {
    cueflow::Kernel::new(name)
        .cuda_source(source, name)
        .host(move |_, args| {
            let count: i64 = args.scalar(1);
            args.tile_mut::<i64>(0)[0] = spin_clocks(clock_rate_khz, count);
        })
        .build()
}

/// The `sum` kernel of those samples from `source`: one block of 32 threads adds `N` clock
/// counts (`N` may exceed 32) into element 0.
pub fn sum_clocks_kernel(source: &'static str) -> cueflow::Kernel {
    cueflow::Kernel::new("sum")
        .cuda_source(source, "sum")
        .host(|_, args| {
            let n = args.scalar::<i32>(1) as usize;
            let clocks = args.whole_mut::<i64>(0);
            clocks[0] = clocks[..n].iter().sum();
        })
        .build()
}

/// A small deterministic generator standing in for the samples' `rand() / RAND_MAX`: the next
/// value in [0, 1) of its sequence, advancing the generator's state.
pub fn uniform(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*seed >> 40) as f32 / (1u64 << 24) as f32
}

/// `c[i] = a[i] + b[i]` (the `vector_add` of simpleZeroCopy and streamOrderedAllocation) from
/// `source`; a Rust closure doing the same on the host backend.
pub fn vector_add_kernel(source: &'static str) -> cueflow::Kernel {
    cueflow::Kernel::new("vector_add")
        .host(|ctx, args| {
            let (a, b) = (args.input::<f32>(0), args.input::<f32>(1));
            let lo = ctx.thread_range().start as usize;
            for (k, c) in args.tile_mut::<f32>(2).iter_mut().enumerate() {
                *c = a[lo + k] + b[lo + k];
            }
        })
        .cuda_source(source, "vector_add")
        .build()
}
