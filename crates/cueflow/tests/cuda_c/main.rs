//! CUDA C on the host backend (SPEC HK1–HK3, KC1): kernels given only as CUDA C run on the
//! host backend with CUDA's execution model. Each test computes its expected values in Rust,
//! independently of the kernel, and runs on the host backend and, when one is present, on
//! CUDA device 0 (`SKIP cuda: …` otherwise; `CUEFLOW_REQUIRE_CUDA=1` makes that a failure).
#![allow(clippy::needless_range_loop)] // Index loops mirror the kernels' thread indices.

mod builtins;
mod printf_compile;
mod shared;
mod warps;

#[path = "../common/cuda_c_misc.rs"]
mod cuda_c_misc;
use cuda_c_misc::MISC;

use cueflow::kernels::{self, BUILTINS_CU};
use cueflow::{
    CompileOptions, Device, DeviceBuffer, Error, Kernel, KernelArgs, LaunchConfig, Stream,
};

fn cuda() -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("CUEFLOW_REQUIRE_CUDA=1 but CUDA is unavailable: {e}");
            }
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("SKIP cuda: {e}"));
            None
        }
    }
}

/// The host device, then CUDA 0 when present.
fn devices() -> Vec<Device> {
    let mut v = vec![Device::host().unwrap()];
    v.extend(cuda());
    v
}

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

fn inputs(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.37 + (i as f32) * 1e-4)
        .collect()
}
