//! The kernel disk cache on the host backend (KC3, issue 27 item 7): a location that cannot be
//! used is no cache (one warning, every kernel compiles and runs), and
//! `CUEFLOW_KERNEL_CACHE_MAX_BYTES` bounds the host objects as it bounds CUDA images, least
//! recently used first, never removing an object a live kernel uses. Each case runs in child
//! processes of this test binary (the cache's variables are read per process).

use std::path::{Path, PathBuf};
use std::process::Command;

use cueflow::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Stream};

/// Set in a child: which kernels to prepare first, then launch (comma-separated tags).
const CHILD: &str = "CUEFLOW_KERNEL_CACHE_TEST_CHILD";

/// A distinct CUDA C kernel per tag (so each is its own cache entry): `x[i] = tag`.
fn kernel(tag: u32) -> Kernel {
    let name = format!("cf_cache_put_{tag}");
    let src =
        format!("extern \"C\" __global__ void {name}(unsigned* x) {{ x[threadIdx.x] = {tag}u; }}");
    Kernel::new(name.clone()).cuda_source(src, &name).build()
}

/// The child's work: prepare every kernel of `tags` (compiled and stored one after another),
/// then launch each and check what it wrote; on the GPU when `CUEFLOW_KC_TEST_CUDA` is set.
fn child(tags: &str) {
    let dev = if std::env::var_os("CUEFLOW_KC_TEST_CUDA").is_some() {
        Device::cuda(0).unwrap()
    } else {
        Device::host().unwrap()
    };
    let s = Stream::new(&dev).unwrap();
    let tags: Vec<u32> = tags.split(',').map(|t| t.parse().unwrap()).collect();
    let ks: Vec<Kernel> = tags.iter().map(|&t| kernel(t)).collect();
    for k in &ks {
        k.prepare(&dev).unwrap();
    }
    for (k, &t) in ks.iter().zip(&tags) {
        let x = DeviceBuffer::<u32>::new(&dev, 32).unwrap();
        s.launch(k, LaunchConfig::new(1, 32), KernelArgs::new().write(&x))
            .unwrap();
        let mut out = [0u32; 32];
        s.read_pageable(&mut out, &x).unwrap();
        assert_eq!(out, [t; 32], "kernel {t}");
    }
}

/// Run this test's child with `tags` and the environment `env`; its standard error. The
/// child's cache variables, and whether it runs on the GPU, are exactly what `env` and `max`
/// say, never inherited: a `CUEFLOW_KC_TEST_CUDA` set for the whole binary (as a GPU run may
/// set it) would put the host cases' children on the GPU, where no host object is made.
fn run_child(test: &str, tags: &str, env: &[(&str, &Path)], max: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, tags)
        .env_remove("CUEFLOW_HOST_KERNELS")
        .env_remove("CUEFLOW_KC_TEST_CUDA")
        .env_remove("CUEFLOW_KERNEL_CACHE_MAX_BYTES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(m) = max {
        cmd.env("CUEFLOW_KERNEL_CACHE_MAX_BYTES", m);
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{stderr}"
    );
    stderr
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cueflow-kc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Objects in the host cache under `root`.
fn objects(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("host"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".so"))
        .collect();
    v.sort();
    v
}

/// KC3: `CUEFLOW_KERNEL_CACHE` naming a file, or a directory under one, turns the cache off
/// with one warning line; every CUDA C kernel still compiles and runs (before, each failed to
/// compile: the prelude's headers were written into the cache).
#[test]
fn kc3_an_unusable_cache_location_is_no_cache() {
    const TEST: &str = "kc3_an_unusable_cache_location_is_no_cache";
    if let Ok(tags) = std::env::var(CHILD) {
        return child(&tags);
    }
    let root = scratch("file");
    let file = root.join("not-a-directory");
    std::fs::write(&file, b"a file").unwrap();
    // Two kernels in the first process (one warning for both), one in the second.
    for (place, tags) in [(file.clone(), "1,2"), (file.join("under"), "1")] {
        let stderr = run_child(TEST, tags, &[("CUEFLOW_KERNEL_CACHE", &place)], None);
        let warnings = stderr
            .lines()
            .filter(|l| l.contains("kernel cache at"))
            .count();
        assert_eq!(warnings, 1, "one warning, not {warnings}:\n{stderr}");
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"a file",
        "the file is untouched"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// KC3: the host objects are bounded by `CUEFLOW_KERNEL_CACHE_MAX_BYTES`, least recently used
/// first, as CUDA images are; an object that a live kernel uses is not removed (its kernel
/// worker opens it by path at the first launch), so a process that prepares more kernels than
/// the bound holds still launches them all.
#[test]
fn kc3_host_objects_are_bounded_and_live_ones_kept() {
    const TEST: &str = "kc3_host_objects_are_bounded_and_live_ones_kept";
    if let Ok(tags) = std::env::var(CHILD) {
        return child(&tags);
    }
    let root = scratch("bound");
    let env = [("CUEFLOW_KERNEL_CACHE", root.as_path())];
    // A bound of one byte keeps the newest entry and the ones in use.
    run_child(TEST, "11,12", &env, Some("1"));
    assert_eq!(
        objects(&root).len(),
        2,
        "both were in use: {:?}",
        objects(&root)
    );
    run_child(TEST, "13", &env, Some("1"));
    assert_eq!(objects(&root).len(), 1, "evicted: {:?}", objects(&root));
    let _ = std::fs::remove_dir_all(&root);
}

/// KC3 on CUDA: the same unusable locations turn the CUDA image cache off with one warning,
/// and kernels compile and run (before, stores failed silently on every compilation). Prints
/// `SKIP` and passes without a GPU.
#[test]
fn kc3_an_unusable_cache_location_is_no_cache_on_cuda() {
    const TEST: &str = "kc3_an_unusable_cache_location_is_no_cache_on_cuda";
    if let Ok(tags) = std::env::var(CHILD) {
        return child(&tags);
    }
    if let Err(e) = Device::cuda(0) {
        eprintln!("SKIP cuda: {e}");
        return;
    }
    let root = scratch("cuda-file");
    let file = root.join("not-a-directory");
    std::fs::write(&file, b"a file").unwrap();
    let gpu = Path::new("1");
    for place in [file.clone(), file.join("under")] {
        let env = [
            ("CUEFLOW_KERNEL_CACHE", place.as_path()),
            ("CUEFLOW_KC_TEST_CUDA", gpu),
        ];
        let stderr = run_child(TEST, "21,22", &env, None);
        let warnings = stderr
            .lines()
            .filter(|l| l.contains("kernel cache at"))
            .count();
        assert_eq!(warnings, 1, "one warning, not {warnings}:\n{stderr}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
