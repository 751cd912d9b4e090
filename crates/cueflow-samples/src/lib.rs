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
