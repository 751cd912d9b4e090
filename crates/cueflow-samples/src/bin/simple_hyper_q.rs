//! A port of NVIDIA's `simpleHyperQ` sample: `nstreams` streams each get a pair of kernels,
//! `kernel_A` then `kernel_B`, each spinning for `kernel_time` ms of device clock ticks (from
//! the device's clock rate, `cudaDevAttrClockRate`). With HyperQ (compute capability 3.5 and
//! later) the pairs of all streams run at once — only B after A of its own stream is a real
//! dependency; without it, streams share one hardware queue and false dependencies serialize
//! them. The stop event is recorded on the legacy default stream, which waits for every
//! blocking stream (ST4); a one-warp kernel then sums the tick counts and a synchronous copy
//! brings the sum back.
//!
//! What it checks, as the original: the sum of the ticks seen is at least the ticks asked for
//! (every kernel ran, and the sum ran after all of them). Beyond the original, on a GPU of
//! compute capability 3.5 or later it checks what the sample demonstrates: the run took less
//! than the shortest serial time the original prints, `(nstreams + 1) · kernel_time`.
//!
//! Host backend and GPU differ: on the host backend the kernels are Rust closures spinning on
//! the host's clock for the same ticks at the clock rate the host device reports; streams are
//! truly concurrent but only as many kernels run at once as there are compute workers (two on
//! a 2-core machine), so the run takes about `nstreams · kernel_time` there and the timing is
//! printed, not checked.
//!
//! ```text
//! cargo run --release -p cueflow-samples --bin simple_hyper_q -- [--nstreams=N]
//! ```

use std::process::ExitCode;

use cueflow::{DeviceBuffer, Event, KernelArgs, LaunchConfig, PinnedBuffer, Stream};
use cueflow_samples::{
    clock_kernel, device, int_flag, main_with, on_gpu, sum_clocks_kernel, Checks,
};

const SOURCE: &str = include_str!("../../kernels/simple_hyper_q.cu");

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let nstreams = int_flag("nstreams", 32)?;
    if !(1..=1024).contains(&nstreams) {
        return Err(format!("--nstreams={nstreams}: must be in 1..=1024").into());
    }
    let nstreams = nstreams as usize;
    let kernel_time: f32 = 10.0; // ms per kernel
    println!("starting hyperQ...");

    let dev = device()?;
    let props = dev.properties().clone();
    let clock_rate = props.clock_rate_khz; // cudaDeviceGetAttribute(cudaDevAttrClockRate)
    let (major, minor) = props.compute_capability;
    let hyper_q = major > 3 || (major == 3 && minor >= 5);
    if !hyper_q {
        if !props.concurrent_kernels {
            println!(
                "> GPU does not support concurrent kernel execution (SM 3.5 or higher required)"
            );
            println!("  CUDA kernel runs will be serialized");
        } else {
            println!("> GPU does not support HyperQ");
            println!("  CUDA kernel runs will have limited concurrency");
        }
    }
    println!(
        "> Detected Compute SM {major}.{minor} hardware with {} multi-processors",
        props.compute_units
    );

    let mut a = PinnedBuffer::<i64>::new(&dev, 1)?;
    let d_a = DeviceBuffer::<i64>::new(&dev, 2 * nstreams)?;
    let streams = (0..nstreams)
        .map(|_| Stream::new(&dev))
        .collect::<Result<Vec<_>, _>>()?;
    let (start, stop) = (Event::new(&dev)?, Event::new(&dev)?);
    let (kernel_a, kernel_b) = (
        clock_kernel(SOURCE, "kernel_A", clock_rate),
        clock_kernel(SOURCE, "kernel_B", clock_rate),
    );
    let reduce = sum_clocks_kernel(SOURCE);
    for k in [&kernel_a, &kernel_b, &reduce] {
        k.prepare(&dev)?;
    }

    // Target ticks = target time × clock rate (kHz = ticks per ms).
    let time_clocks = (kernel_time * clock_rate as f32) as i64;
    let mut total_clocks: i64 = 0;
    let legacy = Stream::legacy(&dev);
    legacy.record_event(&start)?;
    for (i, s) in streams.iter().enumerate() {
        for (k, j) in [(&kernel_a, 2 * i), (&kernel_b, 2 * i + 1)] {
            s.launch(
                k,
                LaunchConfig::new(1, 1),
                KernelArgs::new()
                    .write(&d_a.slice(j..j + 1)?)
                    .scalar(time_clocks),
            )?;
            total_clocks += time_clocks;
        }
    }
    // On the legacy stream: after every kernel of every (blocking) stream (ST4).
    legacy.record_event(&stop)?;

    legacy.launch(
        &reduce,
        LaunchConfig::new(1, 32),
        KernelArgs::new().write(&d_a).scalar(2 * nstreams as i32),
    )?;
    legacy.copy_d2h(&mut a, &d_a.slice(0..1)?)?;
    let got = a.read()?[0]; // waits for the copy, as the original's cudaMemcpy does

    stop.synchronize()?;
    let elapsed_ms = Event::elapsed_ms(&start, &stop)?;
    println!(
        "Expected time for serial execution of {nstreams} sets of kernels is between approx. \
         {:.3}s and {:.3}s",
        (nstreams + 1) as f32 * kernel_time / 1000.0,
        2.0 * nstreams as f32 * kernel_time / 1000.0
    );
    println!(
        "Expected time for fully concurrent execution of {nstreams} sets of kernels is approx. \
         {:.3}s",
        2.0 * kernel_time / 1000.0
    );
    println!("Measured time for sample = {:.3}s", elapsed_ms / 1000.0);

    checks.check(
        got >= total_clocks,
        format_args!("sum of clocks {got} >= {total_clocks} asked for"),
    );
    if on_gpu(&dev) && hyper_q && nstreams > 1 {
        let serial_min = (nstreams + 1) as f32 * kernel_time;
        checks.check(
            elapsed_ms < serial_min,
            format_args!("HyperQ run took {elapsed_ms:.1} ms, under the serial {serial_min:.1} ms"),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with("simpleHyperQ", run)
}
