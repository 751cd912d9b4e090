//! Port of NVIDIA's simpleZeroCopy: a kernel adds two vectors that live in mapped host memory
//! (zero copy) and writes the sum into a third, with no copies at all. By default the memory
//! is pinned memory allocated as mapped (`cudaHostAlloc(cudaHostAllocMapped)`);
//! `--use_generic_memory` registers ordinary page-aligned memory of the program as mapped
//! instead (`cudaHostRegister(cudaHostRegisterMapped)`). The check is the original's:
//! the relative L2 error of `c` against `a + b` on the host is below 1e-6.
//!
//! Host backend: the kernel is the Rust closure beside the CUDA C; mapped memory is host
//! memory the kernel's blocks read and write in place.

use std::process::ExitCode;

use cueflow::{KernelArgs, LaunchConfig, PinnedBuffer, PinnedFlags, RegisteredBuffer, Stream};
use cueflow_samples::{device, main_with, uniform, vector_add_kernel};

const SOURCE: &str = include_str!("../../kernels/simple_zero_copy.cu");

/// Three mapped vectors: allocated as mapped, or the program's own memory registered as mapped.
enum Vectors {
    Allocated([PinnedBuffer<f32>; 3]),
    Registered([RegisteredBuffer<f32>; 3]),
}

impl Vectors {
    fn bufs(&mut self) -> [&mut PinnedBuffer<f32>; 3] {
        match self {
            Vectors::Allocated([a, b, c]) => [a, b, c],
            Vectors::Registered([a, b, c]) => [&mut **a, &mut **b, &mut **c],
        }
    }
}

fn main() -> ExitCode {
    let generic = std::env::args().any(|a| a == "--use_generic_memory");
    main_with("simpleZeroCopy", |checks| {
        let dev = device()?;
        if generic {
            println!("> Using Generic System Paged Memory (registered)");
        } else {
            println!("> Using CUDA Host Allocated (cudaHostAlloc)");
        }
        if !dev.properties().can_map_host_memory {
            println!(
                "Device {} does not support mapping CPU host memory!",
                dev.spec()
            );
            return Ok(());
        }
        let n: usize = 1 << 20;
        let mapped = PinnedFlags::default().mapped();
        let mut v = if generic {
            let reg = |_| RegisteredBuffer::register(&dev, vec![0.0f32; n], mapped);
            Vectors::Registered([reg(0)?, reg(1)?, reg(2)?])
        } else {
            let alloc = |_| PinnedBuffer::<f32>::with_flags(&dev, n, mapped);
            Vectors::Allocated([alloc(0)?, alloc(1)?, alloc(2)?])
        };
        let [a, b, c] = v.bufs();
        let mut seed = 1u64;
        {
            let (mut wa, mut wb) = (a.write()?, b.write()?);
            for i in 0..n {
                wa[i] = uniform(&mut seed);
                wb[i] = uniform(&mut seed);
            }
        }
        // The device view of each buffer (cudaHostGetDevicePointer).
        checks.check(
            a.device_addr().is_some() && b.device_addr().is_some() && c.device_addr().is_some(),
            "every mapped buffer has a device view",
        );
        println!("> vectorAddGPU kernel will add vectors using mapped CPU memory...");
        let s = Stream::new(&dev)?;
        s.launch(
            &vector_add_kernel(SOURCE),
            LaunchConfig::new(n.div_ceil(256) as u32, 256),
            KernelArgs::new()
                .read_mapped(a)
                .read_mapped(b)
                .write_mapped(c)
                .scalar(n as i32),
        )?;
        dev.synchronize()?;
        println!("> Checking the results from vectorAddGPU() ...");
        let (ra, rb, rc) = (a.read()?, b.read()?, c.read()?);
        let (mut err, mut norm) = (0.0f64, 0.0f64);
        for i in 0..n {
            let r = (ra[i] + rb[i]) as f64;
            let d = rc[i] as f64 - r;
            err += d * d;
            norm += r * r;
        }
        let rel = err.sqrt() / norm.sqrt();
        checks.check(rel < 1e-6, format_args!("relative L2 error {rel:e} < 1e-6"));
        drop((ra, rb, rc));
        println!("> Releasing CPU memory...");
        if let Vectors::Registered(regs) = v {
            for r in regs {
                r.unregister()?; // cudaHostUnregister
            }
        }
        Ok(())
    })
}
