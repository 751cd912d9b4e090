//! Port of NVIDIA's cudaOpenMP: one host thread per device (OpenMP there, `std::thread::scope`
//! here), each taking its own slice of one array: allocate on its device, clear it, copy the
//! slice in (synchronously, as `cudaMemcpy`), add a constant with a kernel of 128-thread blocks
//! on the legacy stream, copy the slice back. The check is the original's: every element is its
//! index plus the constant.
//!
//! Devices: every device `CUEFLOW_DEVICE` names (`host:2x`, `cuda:0,cuda:1`). Size: 8192
//! integers per device, as the original.

use std::process::ExitCode;

use cueflow::{DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Stream};
use cueflow_samples::{devices, main_with};

const SOURCE: &str = include_str!("../../kernels/cuda_open_mp.cu");

fn kernel_add_constant() -> Kernel {
    Kernel::new("kernel_add_constant")
        .host(|_, args| {
            let b: i32 = args.scalar(1);
            for a in args.tile_mut::<i32>(0) {
                *a += b;
            }
        })
        .cuda_source(SOURCE, "kernel_add_constant")
        .build()
}

fn main() -> ExitCode {
    main_with("cudaOpenMP", |checks| {
        let devs = devices()?;
        println!(
            "number of host CPUs:\t{}",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        println!("number of CUDA devices:\t{}", devs.len());
        for (i, d) in devs.iter().enumerate() {
            println!("   {i}: {}", d.properties().name);
        }
        println!("---------------------------");
        let n = devs.len() * 8192;
        let b = 3i32;
        let mut a: Vec<i32> = (0..n as i32).collect();
        let kernel = kernel_add_constant();
        let threads = devs.len();
        let per = n / threads;
        let outcomes: Vec<cueflow::Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = a
                .chunks_mut(per)
                .enumerate()
                .map(|(id, sub_a)| {
                    let (dev, kernel) = (&devs[id % devs.len()], &kernel);
                    scope.spawn(move || -> cueflow::Result<()> {
                        println!(
                            "CPU thread {id} (of {threads}) uses CUDA device {}",
                            dev.spec()
                        );
                        let s = Stream::legacy(dev);
                        let d_a = DeviceBuffer::<i32>::new(dev, sub_a.len())?;
                        s.memset(&d_a, 0)?;
                        s.write_pageable(&d_a, sub_a)?;
                        let blocks = (n / (128 * threads)) as u32;
                        s.launch(
                            kernel,
                            LaunchConfig::new(blocks, 128),
                            KernelArgs::new().write(&d_a).scalar(b),
                        )?;
                        s.read_pageable(sub_a, &d_a)?;
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a device thread panicked"))
                .collect()
        });
        println!("---------------------------");
        for r in outcomes {
            r?;
        }
        let bad = a
            .iter()
            .enumerate()
            .find(|&(i, &v)| v != i as i32 + b)
            .map(|(i, &v)| (i, v));
        checks.check(
            bad.is_none(),
            format_args!("every element is its index + {b} (first mismatch: {bad:?})"),
        );
        Ok(())
    })
}
