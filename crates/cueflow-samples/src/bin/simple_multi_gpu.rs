//! Port of NVIDIA's simpleMultiGPU: a sum of random floats split over every device. Each
//! device gets its share in pinned host memory, and on its own stream, all asynchronously: a
//! copy to the device, a reduction kernel (32 blocks × 256 threads, each thread summing every
//! 8192nd element of the share), and a copy of the 8192 partial sums back; then each stream
//! is synchronized and its partial sums are added on the host. The check is the original's:
//! the relative difference to the host's double-precision sum is below 1e-5.
//!
//! Devices: every device `CUEFLOW_DEVICE` names (`host:2x`, `cuda:0,cuda:1`, `cuda:all`).
//! Size: the original's 32 Mi floats on GPUs; 2 Mi on the host backend. The host closure sums
//! in the same order as a GPU thread, so both backends give the same partial sums.

use std::process::ExitCode;
use std::time::Instant;

use cueflow::{DeviceBuffer, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream};
use cueflow_samples::{devices, main_with, on_gpu, uniform};

const SOURCE: &str = include_str!("../../kernels/simple_multi_gpu.cu");
const BLOCK_N: usize = 32;
const THREAD_N: usize = 256;
const ACCUM_N: usize = BLOCK_N * THREAD_N;

fn reduce_kernel() -> Kernel {
    Kernel::new("reduce_kernel")
        .host(|ctx, args| {
            let input = args.input::<f32>(1);
            let n = args.scalar::<i32>(2) as usize;
            let lo = ctx.thread_range().start as usize;
            for (k, out) in args.tile_mut::<f32>(0).iter_mut().enumerate() {
                let mut sum = 0.0f32;
                let mut pos = lo + k;
                while pos < n {
                    sum += input[pos];
                    pos += ACCUM_N;
                }
                *out = sum;
            }
        })
        .cuda_source(SOURCE, "reduce_kernel")
        .build()
}

/// One device's share: its stream, input, partial sums.
struct Plan {
    stream: Stream,
    h_data: PinnedBuffer<f32>,
    d_data: DeviceBuffer<f32>,
    d_sum: DeviceBuffer<f32>,
    h_sum_from_device: PinnedBuffer<f32>,
}

fn main() -> ExitCode {
    main_with("simpleMultiGPU", |checks| {
        println!("Starting simpleMultiGPU");
        let devs = devices()?;
        println!("CUDA-capable device count: {}", devs.len());
        let data_n: usize = if on_gpu(&devs[0]) { 1 << 25 } else { 1 << 21 };
        println!("Generating input data...\n");
        let mut seed = 1u64;
        let mut plans = Vec::with_capacity(devs.len());
        for (i, dev) in devs.iter().enumerate() {
            // The first `data_n % count` devices take one element more.
            let n = data_n / devs.len() + usize::from(i < data_n % devs.len());
            let mut h_data = PinnedBuffer::<f32>::new(dev, n)?;
            for x in h_data.write()?.iter_mut() {
                *x = uniform(&mut seed);
            }
            plans.push(Plan {
                stream: Stream::new(dev)?,
                h_data,
                d_data: DeviceBuffer::new(dev, n)?,
                d_sum: DeviceBuffer::new(dev, ACCUM_N)?,
                h_sum_from_device: PinnedBuffer::new(dev, ACCUM_N)?,
            });
        }
        let kernel = reduce_kernel();
        for dev in &devs {
            kernel.prepare(dev)?; // compiled before the timing, as the original's is
        }
        println!("Computing with {} GPUs...", devs.len());
        let t0 = Instant::now();
        for p in plans.iter_mut() {
            let n = p.h_data.len();
            p.stream.copy_h2d(&p.d_data, &p.h_data)?;
            p.stream.launch(
                &kernel,
                LaunchConfig::new(BLOCK_N as u32, THREAD_N as u32),
                KernelArgs::new()
                    .write(&p.d_sum)
                    .read(&p.d_data)
                    .scalar(n as i32),
            )?;
            p.stream.copy_d2h(&mut p.h_sum_from_device, &p.d_sum)?;
        }
        let mut sum_gpu = 0.0f32;
        for p in &plans {
            p.stream.synchronize()?;
            let sum: f32 = p.h_sum_from_device.read()?.iter().sum();
            sum_gpu += sum;
        }
        println!(
            "  GPU Processing time: {:.3} (ms)\n",
            t0.elapsed().as_secs_f64() * 1e3
        );
        println!("Computing with Host CPU...\n");
        let mut sum_cpu = 0.0f64;
        for p in &plans {
            sum_cpu += p.h_data.read()?.iter().map(|&x| f64::from(x)).sum::<f64>();
        }
        println!("Comparing GPU and Host CPU results...");
        let diff = (sum_cpu - f64::from(sum_gpu)).abs() / sum_cpu.abs();
        println!("  GPU sum: {sum_gpu:.6}\n  CPU sum: {sum_cpu:.6}");
        println!("  Relative difference: {diff:E}\n");
        checks.check(
            diff < 1e-5,
            format_args!("relative difference {diff:E} < 1e-5"),
        );
        Ok(())
    })
}
