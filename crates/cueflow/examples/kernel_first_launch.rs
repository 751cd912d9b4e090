//! What the first launch of a CUDA C kernel costs in a fresh process (KC2, KC3): run it twice
//! with the same `CUEFLOW_KERNEL_CACHE` — the first run compiles (cache cold), the second
//! loads what the first stored (cache warm) — and once with `--prepare`, where
//! `Kernel::prepare` loads the kernel before the timed launches.
//!
//! ```text
//! CUEFLOW_DEVICE=cuda CUEFLOW_KERNEL_CACHE=/tmp/kc cargo run --release --example kernel_first_launch
//! CUEFLOW_DEVICE=cuda CUEFLOW_KERNEL_CACHE=/tmp/kc cargo run --release --example kernel_first_launch
//! CUEFLOW_DEVICE=cuda cargo run --release --example kernel_first_launch -- --prepare
//! ```
//!
//! Each line times one launch *call* (enqueue, host clock) after the device is open and its
//! built-in kernels loaded; the stream is synchronized between launches, so a launch never
//! waits for an earlier one. `--salt N` changes the source (a cold key without clearing the
//! cache). `--warm-path` launches a built-in kernel first (the launch path's code warm, this
//! kernel not). Exits non-zero if the kernel computes a wrong result.

use std::time::Instant;

use cueflow::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Stream};

fn main() -> cueflow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let prepare = args.iter().any(|a| a == "--prepare");
    // `--warm-path`: launch another (built-in) kernel on the stream first, so the first timed
    // launch pays only for this kernel, not for the first run of the launch path's code.
    let warm_path = args.iter().any(|a| a == "--warm-path");
    let salt = args
        .iter()
        .position(|a| a == "--salt")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_default();
    let dev = Device::from_env()?;
    let source = format!(
        "// salt {salt}\n#include <cuda_fp16.h>\n\
         extern \"C\" __global__ void kfl_add(float* x, float v, unsigned long long n) {{\n\
           unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n\
           if (i < n) x[i] = __half2float(__float2half(x[i])) + v;\n\
         }}\n"
    );
    let k = Kernel::new("kfl_add")
        .host(|_, a| {
            let v: f32 = a.scalar(1);
            for x in a.tile_mut::<f32>(0) {
                *x += v;
            }
        })
        .cuda_source(source, "kfl_add")
        .build();
    let n = 1 << 16;
    let s = Stream::new(&dev)?;
    let d = DeviceBuffer::<f32>::new(&dev, n)?;
    s.memset(&d, 0)?;
    s.synchronize()?;
    if prepare {
        let t = Instant::now();
        k.prepare(&dev)?;
        println!("prepare: {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    let cfg = LaunchConfig::for_elements(n, 256);
    if warm_path {
        // The same launch code with another kernel of the same signature, then its effect
        // undone: what stays cold for the timed launches is this kernel alone.
        let other = Kernel::new("kfl_warm")
            .host(|_, a| {
                let v: f32 = a.scalar(1);
                for x in a.tile_mut::<f32>(0) {
                    *x -= v;
                }
            })
            .cuda_source(
                "extern \"C\" __global__ void kfl_warm(float* x, float v, unsigned long long n) {\n\
                   unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n\
                   if (i < n) x[i] -= v;\n\
                 }\n",
                "kfl_warm",
            )
            .build();
        other.prepare(&dev)?;
        s.launch(
            &other,
            cfg,
            KernelArgs::new().write(&d).scalar(0.0f32).scalar(n as u64),
        )?;
        s.synchronize()?;
    }
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        s.launch(
            &k,
            cfg,
            KernelArgs::new().write(&d).scalar(1.0f32).scalar(n as u64),
        )?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        s.synchronize()?;
    }
    println!(
        "{}: first launch {:.3} ms, second {:.3} ms, third {:.3} ms{}",
        dev.properties().name,
        times[0],
        times[1],
        times[2],
        if prepare { " (prepared)" } else { "" }
    );
    let mut out = vec![0.0f32; n];
    s.read_pageable(&mut out, &d)?;
    if out.iter().any(|&x| x != 3.0) {
        eprintln!("kernel_first_launch: wrong result");
        std::process::exit(1);
    }
    Ok(())
}
