//! CUDA C on the host backend, in child processes: what needs a process of its own (the
//! compiler is looked up once per process; `printf` writes to the process's stdout).

#[path = "common/cuda_c_misc.rs"]
mod cuda_c_misc;
use cuda_c_misc::MISC;

use cueflow::kernels;
use cueflow::{Device, DeviceBuffer, Error, Kernel, KernelArgs, LaunchConfig, Stream};

fn c_kernel(name: &str, src: &'static str) -> Kernel {
    Kernel::new(name).cuda_source(src, name).build()
}

fn upload<T: bytemuck::Pod>(s: &Stream, data: &[T]) -> DeviceBuffer<T> {
    let d = DeviceBuffer::<T>::new(s.device(), data.len()).unwrap();
    s.write_pageable(&d, data).unwrap();
    d
}

fn download<T: bytemuck::Pod + Default>(s: &Stream, d: &DeviceBuffer<T>) -> Vec<T> {
    let mut out = vec![T::default(); d.len()];
    s.read_pageable(&mut out, d).unwrap();
    out
}

/// HK1: without a C++ compiler (`CXX` pointing nowhere), a kernel with only CUDA C fails its
/// launch with a typed error naming what was looked for, and closures run as before. Runs in a
/// child process (the compiler is looked up once per process).
#[test]
fn hk1_without_a_compiler_cuda_c_only_kernels_fail_typed() {
    if std::env::var("CUEFLOW_CUDA_C_NO_CXX_CHILD").is_ok() {
        let dev = Device::host().unwrap();
        let s = Stream::new(&dev).unwrap();
        let k = c_kernel("noop_c", "extern \"C\" __global__ void noop_c() {}");
        match s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new()) {
            Err(Error::Unavailable(why)) => {
                assert!(why.contains("CXX=/nonexistent/cxx"), "{why}");
                assert!(why.contains("noop_c"), "{why}");
            }
            other => panic!("expected Error::Unavailable, got {other:?}"),
        }
        assert!(matches!(k.prepare(&dev), Err(Error::Unavailable(_))));
        let b = upload(&s, &[1.0f32; 8]);
        kernels::scale(&s, &b, 2.0).unwrap();
        assert_eq!(download(&s, &b), vec![2.0; 8]);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "hk1_without_a_compiler_cuda_c_only_kernels_fail_typed",
            "--exact",
            "--nocapture",
        ])
        .env("CUEFLOW_CUDA_C_NO_CXX_CHILD", "1")
        .env("CXX", "/nonexistent/cxx")
        .env_remove("CUEFLOW_HOST_KERNELS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// HK1: `printf` output reaches the process's standard output, one whole line per call (the
/// kernel runs in a child process whose output is captured).
#[test]
fn hk1_printf_writes_to_stdout() {
    if std::env::var("CUEFLOW_CUDA_C_PRINTF_CHILD").is_ok() {
        let dev = Device::host().unwrap();
        let s = Stream::new(&dev).unwrap();
        let input = upload(&s, &[5i32, 6, 7, 8]);
        let out = upload(&s, &[0i32; 4]);
        s.launch(
            &c_kernel("checked", MISC),
            LaunchConfig::new(1, 4),
            KernelArgs::new().read(&input).write(&out),
        )
        .unwrap();
        s.synchronize().unwrap();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["hk1_printf_writes_to_stdout", "--exact", "--nocapture"])
        .env("CUEFLOW_CUDA_C_PRINTF_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    for (t, v) in [5, 6, 7, 8].iter().enumerate() {
        let line = format!("thread {t} has {v}");
        assert!(
            stdout.lines().any(|l| l == line),
            "missing `{line}` in:\n{stdout}"
        );
    }
}
