//! A port of NVIDIA's `asyncAPI` sample: events time a sequence of asynchronous work — a copy
//! to the device, a kernel, a copy back — all on the legacy default stream, while the CPU
//! counts how often it polled the stop event (`cudaEventQuery`) before the GPU was done.
//!
//! What it checks, as the original: every element of the result equals the increment (the
//! array starts at zero on the host; the device copy is first set to all-ones bytes, so a copy
//! that did not happen shows). Beyond the original, on a GPU it checks that the CPU got to poll
//! at least once while the GPU worked — the enqueues returned before the work was done (ST3).
//!
//! Host backend and GPU differ in what the numbers mean: on the host backend the "GPU time" is
//! the copy engines' and compute workers' time on this machine's cores, and the CPU's polling
//! loop competes with them for the same cores, so the iteration count says little and is only
//! printed (on a loaded 2-core machine the work may even finish before the first poll).
//!
//! ```text
//! CUEFLOW_DEVICE=host   cargo run --release -p cueflow-samples --bin async_api
//! CUEFLOW_DEVICE=cuda:0 cargo run --release -p cueflow-samples --bin async_api
//! ```

use std::process::ExitCode;
use std::time::Instant;

use cueflow::{DeviceBuffer, Event, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream};
use cueflow_samples::{device, main_with, on_gpu, Checks};

/// The kernel, CUDA C for the GPU, a Rust closure doing the same for the host backend.
fn increment_kernel() -> Kernel {
    Kernel::new("increment_kernel")
        .cuda_source(
            include_str!("../../kernels/async_api.cu"),
            "increment_kernel",
        )
        .host(|_, args| {
            let inc: i32 = args.scalar(1);
            for v in args.tile_mut::<i32>(0) {
                *v += inc;
            }
        })
        .build()
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let dev = device()?;
    let props = dev.properties();
    println!("[async_api] - Starting...");
    println!("CUDA device [{}]", props.name);

    let n: usize = 16 * 1024 * 1024;
    let value: i32 = 26;
    let stream = Stream::legacy(&dev); // stream 0, as the original uses throughout

    let mut a = PinnedBuffer::<i32>::new(&dev, n)?; // cudaMallocHost
    a.write()?.fill(0);
    let d_a = DeviceBuffer::<i32>::new(&dev, n)?;
    stream.memset(&d_a, 255)?; // cudaMemset(d_a, 255, nbytes)

    let threads = 512u32;
    let config = LaunchConfig::new([(n as u32) / threads, 1, 1], [threads, 1, 1]);
    let kernel = increment_kernel();
    kernel.prepare(&dev)?; // loaded before timing, as an nvcc-built kernel is (KC2)

    let (start, stop) = (Event::new(&dev)?, Event::new(&dev)?);
    dev.synchronize()?;

    // Issue the work asynchronously, all on stream 0.
    let timer = Instant::now();
    stream.record_event(&start)?;
    stream.copy_h2d(&d_a, &a)?;
    stream.launch(&kernel, config, KernelArgs::new().write(&d_a).scalar(value))?;
    stream.copy_d2h(&mut a, &d_a)?;
    stream.record_event(&stop)?;
    let cpu_ms = timer.elapsed().as_secs_f64() * 1e3;

    // The CPU does some work while the device finishes.
    let mut counter: u64 = 0;
    while !stop.query()? {
        counter += 1;
    }
    let gpu_ms = Event::elapsed_ms(&start, &stop)?;

    println!("time spent executing by the GPU: {gpu_ms:.2}");
    println!("time spent by CPU in CUDA calls: {cpu_ms:.2}");
    println!("CPU executed {counter} iterations while waiting for GPU to finish");

    let out = a.read()?;
    match out.iter().position(|&x| x != value) {
        Some(i) => checks.check(false, format_args!("data[{i}] = {}, ref = {value}", out[i])),
        None => checks.check(true, ""),
    }
    if on_gpu(&dev) {
        checks.check(
            counter > 0,
            "the CPU polled at least once while the GPU worked (the enqueues returned first, ST3)",
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with("asyncAPI", run)
}
