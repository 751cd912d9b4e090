//! KC1's relocatable device code — a kernel made of several CUDA C translation units, linked by
//! the driver's linker — and KC4's single-block kernels that own a whole buffer
//! (`BlockArgs::whole_mut`, what a reduction's last step `sum<<<1, 32>>>` over more elements
//! than threads needs on the host backend).

use cueflow::{CompileOptions, Device, Error, Kernel, KernelArgs, LaunchConfig, Stream};

use crate::support::*;

/// The kernel's unit: calls a function and reads a variable that other units define.
const MAIN_CU: &str = r#"
#include "poly.h"
extern __device__ float lk_bias;
extern "C" __global__ void lk_poly(float* x, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = poly::eval(x[i]) + lk_bias;
}
"#;

/// A header both units include (given as text).
const POLY_H: &str = r#"
#pragma once
namespace poly { __device__ float eval(float x); }
"#;

/// Defines `poly::eval` (a C++ function: linked by its mangled name).
const POLY_CU: &str = r#"
#include "poly.h"
namespace poly { __device__ float eval(float x) { return x * x + 1.0f; } }
"#;

/// Defines the variable.
const BIAS_CU: &str = "__device__ float lk_bias = 0.25f;\n";

fn poly_kernel(opts: CompileOptions) -> Kernel {
    Kernel::new("lk_poly")
        .host(|_, a| {
            for v in a.tile_mut::<f32>(0) {
                *v = *v * *v + 1.0 + 0.25;
            }
        })
        .cuda_source(MAIN_CU, "lk_poly")
        .cuda_options(opts)
        .build()
}

/// KC1: a kernel of three translation units — its own, one defining a device function, one
/// defining a device variable — compiles (relocatable), links and runs; run twice in one
/// process it is linked once (the image is cached by a key that covers every unit).
pub fn kc1_relocatable_units_link(dev: &Device) {
    let opts = CompileOptions::new()
        .header("poly.h", POLY_H)
        .link_source("poly.cu", POLY_CU)
        .link_source("bias.cu", BIAS_CU);
    assert!(opts.nvrtc_args().contains(&"-rdc=true".to_string()));
    let k = poly_kernel(opts.clone());
    k.prepare(dev).unwrap();
    let s = Stream::new(dev).unwrap();
    let d = filled(dev, N, 2.0);
    s.launch(
        &k,
        LaunchConfig::for_elements(N, 128),
        KernelArgs::new().write(&d).scalar(N as u64),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&d), 5.25);
    // The same units again, as another kernel object: same result.
    let again = poly_kernel(opts);
    s.launch(
        &again,
        LaunchConfig::for_elements(N, 128),
        KernelArgs::new().write(&d).scalar(N as u64),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    assert_all(&download(&d), 5.25 * 5.25 + 1.25);
}

/// KC1: a device function declared but defined in no unit is a compile error carrying the
/// linker's log, with nothing enqueued and nothing sticky; a linked unit with a NUL is refused
/// as invalid options on every backend.
pub fn kc1_unresolved_symbol_is_a_link_error(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let bad = Kernel::new("lk_bad_unit")
        .host(|_, _| {})
        .cuda_source("extern \"C\" __global__ void k(float*) {}", "k")
        .cuda_options(CompileOptions::new().link_source("nul.cu", "int x;\0"))
        .build();
    assert!(matches!(
        bad.prepare(dev),
        Err(Error::InvalidOptions { .. })
    ));
    if is_host(dev) {
        return;
    }
    // Only the bias is linked: `poly::eval` stays undefined.
    let k = poly_kernel(
        CompileOptions::new()
            .header("poly.h", POLY_H)
            .link_source("bias.cu", BIAS_CU),
    );
    dev.start_trace().unwrap();
    match s.launch(
        &k,
        LaunchConfig::for_elements(N, 128),
        KernelArgs::new().write(&d).scalar(N as u64),
    ) {
        Err(Error::Compile { kernel, log }) => {
            assert_eq!(kernel, "lk_poly");
            assert!(log.contains("link"), "{log}");
            assert!(log.contains("eval"), "the log names the symbol: {log}");
        }
        other => panic!("expected a link error, got {other:?}"),
    }
    assert_eq!(enqueued(&dev.stop_trace().unwrap()), 0);
    assert_eq!(dev.sticky_error(), None);
}

/// `sum<<<1, 32>>>` over `n` counts, `n` past the block's 32 threads.
const SUM_CU: &str = r#"
extern "C" __global__ void lk_sum(long long* v, int n) {
    __shared__ long long part[32];
    long long mine = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mine += v[i];
    part[threadIdx.x] = mine;
    __syncthreads();
    for (int h = 16; h > 0; h /= 2) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) v[0] = part[0];
}
"#;

/// KC4: a single-block kernel reads and writes its whole written buffer, more elements than
/// it has threads (`BlockArgs::whole_mut` on the host backend; plain CUDA C on a GPU).
pub fn kc4_single_block_kernel_owns_its_buffer(dev: &Device) {
    let k = Kernel::new("lk_sum")
        .host(|_, a| {
            let n = a.scalar::<i32>(1) as usize;
            let v = a.whole_mut::<i64>(0);
            v[0] = v[..n].iter().sum();
        })
        .cuda_source(SUM_CU, "lk_sum")
        .build();
    let s = Stream::new(dev).unwrap();
    let n = 100usize;
    let values: Vec<i64> = (1..=n as i64).collect();
    let d = upload(dev, &values);
    s.launch(
        &k,
        LaunchConfig::new(1, 32),
        KernelArgs::new().write(&d).scalar(n as i32),
    )
    .unwrap();
    s.synchronize().unwrap(); // `download` orders with nothing
    let out = download(&d);
    assert_eq!(out[0], (n * (n + 1) / 2) as i64);
    assert_eq!(&out[1..], &values[1..], "the other elements are untouched");
}
