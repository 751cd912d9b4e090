//! A port of NVIDIA's `concurrentKernels` sample: `nkernels` kernels that each spin for
//! `kernel_time` ms (measured in the device's clock ticks, from its clock rate) run on as many
//! streams; one more stream waits on an event recorded after each (`cudaStreamWaitEvent`),
//! then sums the tick counts with a one-warp kernel and copies the sum back.
//!
//! What it checks, as the original: the sum of the ticks the kernels saw exceeds the ticks they
//! were asked to spin in total (every kernel ran, and the sum ran after all of them — it would
//! see zeros otherwise). Beyond the original, on a GPU that reports `concurrentKernels`, it
//! checks what the sample demonstrates: the whole run took less than half the serial time.
//!
//! Host backend and GPU differ: on the host backend a kernel is a Rust closure spinning on the
//! host's clock for the same number of ticks at the rate the host device reports
//! ([`cueflow::DeviceProperties::clock_rate_khz`]); kernels of different streams run at once on
//! the compute workers, so concurrency is real but bounded by the worker count (two on a
//! 2-core machine: about `nkernels / 2` kernel times in all), and on a machine shared with
//! other work no speed-up can be promised, so the timing is printed, not checked.
//!
//! ```text
//! cargo run --release -p cueflow-samples --bin concurrent_kernels -- [--nkernels=N]
//! ```

use std::process::ExitCode;

use cueflow::{DeviceBuffer, Event, EventFlags, KernelArgs, LaunchConfig, PinnedBuffer, Stream};
use cueflow_samples::{
    clock_kernel, device, int_flag, main_with, on_gpu, sum_clocks_kernel, Checks,
};

const SOURCE: &str = include_str!("../../kernels/concurrent_kernels.cu");

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let nkernels = int_flag("nkernels", 8)?;
    if !(1..=1024).contains(&nkernels) {
        return Err(format!("--nkernels={nkernels}: must be in 1..=1024").into());
    }
    let nkernels = nkernels as usize;
    let nstreams = nkernels + 1;
    let kernel_time: f32 = 10.0; // ms
    println!("[concurrent_kernels] - Starting...");

    let dev = device()?;
    let props = dev.properties().clone();
    if !props.concurrent_kernels {
        println!("> GPU does not support concurrent kernel execution");
        println!("  CUDA kernel runs will be serialized");
    }
    let (major, minor) = props.compute_capability;
    println!(
        "> Detected Compute SM {major}.{minor} hardware with {} multi-processors",
        props.compute_units
    );

    let mut a = PinnedBuffer::<i64>::new(&dev, 1)?;
    let d_a = DeviceBuffer::<i64>::new(&dev, nkernels)?;
    let streams = (0..nstreams)
        .map(|_| Stream::new(&dev))
        .collect::<Result<Vec<_>, _>>()?;
    let (start, stop) = (Event::new(&dev)?, Event::new(&dev)?);
    // Synchronization-only events: no timestamps.
    let no_timing = EventFlags {
        timing: false,
        ..EventFlags::default()
    };
    let kernel_events = (0..nkernels)
        .map(|_| Event::with_flags(&dev, no_timing))
        .collect::<Result<Vec<_>, _>>()?;

    let (spin, reduce) = (
        clock_kernel(SOURCE, "clock_block", props.clock_rate_khz),
        sum_clocks_kernel(SOURCE),
    );
    spin.prepare(&dev)?;
    reduce.prepare(&dev)?;

    // clockRate is in kHz: ticks in kernel_time ms.
    let time_clocks = (kernel_time * props.clock_rate_khz as f32) as i64;
    let mut total_clocks: i64 = 0;
    let legacy = Stream::legacy(&dev);
    legacy.record_event(&start)?;

    let last = &streams[nstreams - 1];
    for (i, (s, e)) in streams.iter().zip(&kernel_events).enumerate() {
        s.launch(
            &spin,
            LaunchConfig::new(1, 1),
            KernelArgs::new()
                .write(&d_a.slice(i..i + 1)?)
                .scalar(time_clocks),
        )?;
        total_clocks += time_clocks;
        s.record_event(e)?;
        last.wait_event(e)?; // the last stream waits for every kernel
    }
    last.launch(
        &reduce,
        LaunchConfig::new(1, 32),
        KernelArgs::new().write(&d_a).scalar(nkernels as i32),
    )?;
    last.copy_d2h(&mut a, &d_a.slice(0..1)?)?;

    legacy.record_event(&stop)?;
    stop.synchronize()?;
    let elapsed_ms = Event::elapsed_ms(&start, &stop)?;

    let serial_s = nkernels as f32 * kernel_time / 1000.0;
    println!("Expected time for serial execution of {nkernels} kernels = {serial_s:.3}s");
    println!(
        "Expected time for concurrent execution of {nkernels} kernels = {:.3}s",
        kernel_time / 1000.0
    );
    println!("Measured time for sample = {:.3}s", elapsed_ms / 1000.0);

    let got = a.read()?[0];
    checks.check(
        got > total_clocks,
        format_args!("sum of clocks {got} > {total_clocks} asked for"),
    );
    if on_gpu(&dev) && props.concurrent_kernels && nkernels > 2 {
        checks.check(
            elapsed_ms / 1000.0 < serial_s / 2.0,
            format_args!(
                "concurrent kernels took {:.3}s, under half the serial {serial_s:.3}s",
                elapsed_ms / 1000.0
            ),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with("concurrentKernels", run)
}
