//! What CUDA C costs on the host backend (HK1): the built-in compute kernel from its CUDA C
//! against its Rust closure, a kernel with `__syncthreads` in a loop, the launch cost of a C
//! kernel against a closure's, and compile time cold and cached.
//!
//! ```text
//! cargo run --release --example cuda_c_host            # sizes: --n 1048576 --iters 64
//! ```
//!
//! Compile times use a fresh cache directory under the system temp dir (cold), then a new
//! kernel object over the same source (cached on disk). Exits non-zero if a result is wrong.

use std::time::{Duration, Instant};

use cueflow::kernels::{self, BUILTINS_CU};
use cueflow::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Stream};

fn arg(name: &str, default: u64) -> u64 {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Median of `reps` timings of `f` (each ends synchronized).
fn time(reps: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm
    let mut v: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[v.len() / 2]
}

const BARRIER_LOOP: &str = r#"
extern "C" __global__ void barrier_loop(float* d, unsigned rounds)
{
    __shared__ float s[1024];
    unsigned t = threadIdx.x, n = blockDim.x;
    float x = d[blockIdx.x * n + t];
    for (unsigned r = 0; r < rounds; ++r) {
        s[t] = x;
        __syncthreads();
        x = __fadd_rn(x, s[(t + 1) % n]) * 0.5f;
        __syncthreads();
    }
    d[blockIdx.x * n + t] = x;
}
"#;

fn main() -> cueflow::Result<()> {
    let n = arg("--n", 1 << 20) as usize;
    let iters = arg("--iters", 64) as u32;
    let dev = Device::host()?;
    let s = Stream::new(&dev)?;
    println!("device: {}", dev.properties().name);

    // Compile: cold (fresh cache directory), then cached (new kernel object, same source).
    let dir = std::env::temp_dir().join(format!("cueflow-cuda-c-bench-{}", std::process::id()));
    std::env::set_var("CUEFLOW_KERNEL_CACHE", &dir);
    let c_compute = || {
        Kernel::new("cf_compute_f32")
            .cuda_source(BUILTINS_CU, "cf_compute_f32")
            .build()
    };
    let t = Instant::now();
    let k = c_compute();
    k.prepare(&dev)?;
    let cold = t.elapsed();
    let t = Instant::now();
    let k2 = c_compute();
    k2.prepare(&dev)?;
    let cached = t.elapsed();
    println!(
        "compile builtins.cu (cf_compute_f32): cold {:.0} ms, cached {:.2} ms",
        cold.as_secs_f64() * 1e3,
        cached.as_secs_f64() * 1e3
    );

    // Compute kernel: C vs closure.
    let data: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let a = DeviceBuffer::<f32>::new(&dev, n)?;
    let b = DeviceBuffer::<f32>::new(&dev, n)?;
    s.write_pageable(&a, &data)?;
    s.write_pageable(&b, &data)?;
    let cfg = LaunchConfig::for_elements(n, kernels::BLOCK);
    let closure = time(5, || {
        kernels::compute(&s, &a, iters).unwrap();
        s.synchronize().unwrap();
    });
    let c = time(5, || {
        s.launch(
            &k,
            cfg,
            KernelArgs::new().write(&b).scalar(iters).scalar(n as u64),
        )
        .unwrap();
        s.synchronize().unwrap();
    });
    let (mut ra, mut rb) = (vec![0f32; n], vec![0f32; n]);
    s.read_pageable(&mut ra, &a)?;
    s.read_pageable(&mut rb, &b)?;
    let same = ra.iter().zip(&rb).all(|(x, y)| x.to_bits() == y.to_bits());
    let elems = n as f64 * iters as f64;
    println!(
        "compute {n} x {iters}: closure {:.2} ms ({:.2} G steps/s), C {:.2} ms ({:.2} G steps/s): \
         C at {:.2}x the closure's speed; results bit-identical: {same}",
        closure.as_secs_f64() * 1e3,
        elems / closure.as_secs_f64() / 1e9,
        c.as_secs_f64() * 1e3,
        elems / c.as_secs_f64() / 1e9,
        closure.as_secs_f64() / c.as_secs_f64()
    );

    // __syncthreads in a loop.
    let bl = Kernel::new("barrier_loop")
        .cuda_source(BARRIER_LOOP, "barrier_loop")
        .build();
    let (blocks, threads, rounds) = (64u32, 256u32, 100u32);
    let d = DeviceBuffer::<f32>::new(&dev, (blocks * threads) as usize)?;
    s.write_pageable(&d, &vec![1.0f32; (blocks * threads) as usize])?;
    let tb = time(5, || {
        s.launch(
            &bl,
            LaunchConfig::new(blocks, threads),
            KernelArgs::new().write(&d).scalar(rounds),
        )
        .unwrap();
        s.synchronize().unwrap();
    });
    let barriers = blocks as f64 * rounds as f64 * 2.0;
    println!(
        "__syncthreads loop: {blocks} blocks x {threads} threads x {} barriers: {:.2} ms, \
         {:.2} us per block barrier, {:.1} ns per thread per barrier",
        rounds * 2,
        tb.as_secs_f64() * 1e3,
        tb.as_secs_f64() * 1e6 / barriers,
        tb.as_secs_f64() * 1e9 / barriers / threads as f64
    );

    // Launch cost: empty kernel, C vs closure (launch + synchronize, and enqueue alone).
    let c_empty = Kernel::new("cf_empty")
        .cuda_source(BUILTINS_CU, "cf_empty")
        .build();
    c_empty.prepare(&dev)?;
    let reps = 2000;
    let per = |k: &Kernel| {
        let t = Instant::now();
        for _ in 0..reps {
            s.launch(k, LaunchConfig::new(1, 1), KernelArgs::new())
                .unwrap();
            s.synchronize().unwrap();
        }
        t.elapsed().as_secs_f64() * 1e6 / reps as f64
    };
    let enq = |k: &Kernel| {
        let t = Instant::now();
        for _ in 0..reps {
            s.launch(k, LaunchConfig::new(1, 1), KernelArgs::new())
                .unwrap();
        }
        let e = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
        s.synchronize().unwrap();
        e
    };
    let _ = (per(&kernels::EMPTY), per(&c_empty));
    println!(
        "launch + synchronize, 1 block of 1 thread: closure {:.2} us, C {:.2} us; enqueue only: \
         closure {:.2} us, C {:.2} us",
        per(&kernels::EMPTY),
        per(&c_empty),
        enq(&kernels::EMPTY),
        enq(&c_empty)
    );
    let c256 = time(50, || {
        s.launch(&c_empty, LaunchConfig::new(1, 256), KernelArgs::new())
            .unwrap();
        s.synchronize().unwrap();
    });
    println!(
        "launch + synchronize, 1 block of 256 threads (C, fibers): {:.2} us",
        c256.as_secs_f64() * 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
    if !same {
        eprintln!("C and closure results differ");
        std::process::exit(1);
    }
    Ok(())
}
