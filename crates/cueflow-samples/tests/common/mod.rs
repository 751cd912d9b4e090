//! Running a ported sample's binary as a user would: on the host backend always, on CUDA when a
//! GPU is present (otherwise `SKIP` is printed and the test passes; `CUEFLOW_REQUIRE_CUDA=1`
//! fails it instead).

#![allow(dead_code)] // each test file uses the part it needs

use std::process::Command;

#[path = "../../../cueflow/tests/common/older_driver.rs"]
mod older_driver;

/// Run `exe` with `CUEFLOW_DEVICE=device` (and extra environment), assert it exits 0 and
/// printed `PASSED`; return its stdout.
///
/// `CUEFLOW_SAMPLES_BIN_DIR`, when set, is where the sample binaries are (the test executable
/// and the binaries copied to another machine, as the GPU check does); otherwise the path Cargo
/// built them at.
pub fn run_sample(exe: &str, device: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let exe = match std::env::var_os("CUEFLOW_SAMPLES_BIN_DIR") {
        Some(dir) => std::path::Path::new(&dir)
            .join(
                std::path::Path::new(exe)
                    .file_name()
                    .expect("a binary's file name"),
            )
            .to_string_lossy()
            .into_owned(),
        None => exe.to_string(),
    };
    let exe = exe.as_str();
    let mut cmd = Command::new(exe);
    cmd.args(args).env("CUEFLOW_DEVICE", device);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the sample binary starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && newer_than_the_driver(device, &stderr) {
        eprintln!("SKIP {exe} on {device}: {}", stderr.trim());
        return stdout;
    }
    assert!(
        out.status.success() && stdout.contains("PASSED"),
        "{exe} on {device} {args:?}: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

/// Whether a sample on `device` failed with an `Unsupported` error naming a CUDA version newer
/// than the GPU's driver (`tests/common/older_driver.rs`): a feature that driver lacks, which
/// the sample's test skips (the old-driver check, `scripts/gpu-driver-floor.sh`).
fn newer_than_the_driver(device: &str, stderr: &str) -> bool {
    if !device.starts_with("cuda") || !stderr.contains("unsupported") {
        return false;
    }
    let Some(need) = older_driver::needed(stderr) else {
        return false;
    };
    cueflow::Device::cuda(0).is_ok_and(|d| need > d.properties().driver_version)
}

/// Whether a CUDA device is present; prints why not.
pub fn cuda_present() -> bool {
    match cueflow::Device::cuda(0) {
        Ok(_) => true,
        Err(e) if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
            panic!("CUEFLOW_REQUIRE_CUDA=1 but the CUDA backend is unavailable: {e}")
        }
        Err(e) => {
            eprintln!("SKIP cuda: {e}");
            false
        }
    }
}

/// How many CUDA devices are present (0 without the backend).
pub fn cuda_count() -> usize {
    (0..8)
        .take_while(|&i| cueflow::Device::cuda(i).is_ok())
        .count()
}

/// The C++ compiler the host backend would use for CUDA C (HK1: `CXX`, else `c++`, `g++`,
/// `clang++` on the `PATH`); `None`, with `SKIP` printed, when there is none.
pub fn cxx_present() -> bool {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    let found = match std::env::var("CXX") {
        Ok(cxx) if !cxx.trim().is_empty() => {
            let first = cxx.split_whitespace().next().unwrap_or("");
            std::path::Path::new(first).is_file() || on_path(first)
        }
        _ => ["c++", "g++", "clang++"].iter().any(|c| on_path(c)),
    };
    if !found {
        eprintln!("SKIP host CUDA C: no C++ compiler (CXX, c++, g++, clang++)");
    }
    found
}

/// Run `exe` on host device(s) `device` with its kernels' CUDA C only (`CUEFLOW_HOST_KERNELS=c`:
/// the Rust closures beside them are not used, HK1); skipped, visibly, without a C++ compiler.
pub fn run_sample_c(exe: &str, device: &str, args: &[&str]) {
    if cxx_present() {
        run_sample(exe, device, args, &[("CUEFLOW_HOST_KERNELS", "c")]);
    }
}
