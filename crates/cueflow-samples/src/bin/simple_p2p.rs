//! Port of NVIDIA's simpleP2P: find two devices that can reach each other's memory, enable
//! peer access both ways, time ping-pong copies between their buffers, then run a kernel on
//! the second device that reads the first device's buffer directly (and writes its own), and
//! one on the first that reads the second's; the check is the original's: every element is
//! `(i % 4096) * 2 * 2` after both kernels. Peer access is disabled again at the end.
//!
//! Devices: `CUEFLOW_DEVICE=host:2x` (two host devices, whose memory is one process's) or
//! `cuda:0,cuda:1`. Sizes: the original's 16 Mi floats and 100 copies on GPUs; 1 Mi floats
//! and 10 copies on the host backend.

use std::process::ExitCode;

use cueflow::{
    DeviceBuffer, Event, EventFlags, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream,
};
use cueflow_samples::{devices, main_with, on_gpu};

const SOURCE: &str = include_str!("../../kernels/simple_p2p.cu");

fn simple_kernel() -> Kernel {
    Kernel::new("simple_kernel")
        .host(|ctx, args| {
            let src = args.input::<f32>(0);
            let lo = ctx.thread_range().start as usize;
            for (k, d) in args.tile_mut::<f32>(1).iter_mut().enumerate() {
                *d = src[lo + k] * 2.0;
            }
        })
        .cuda_source(SOURCE, "simple_kernel")
        .build()
}

fn main() -> ExitCode {
    main_with("simpleP2P", |checks| {
        let devs = devices()?;
        println!(
            "Checking for multiple GPUs...\nCUDA-capable device count: {}",
            devs.len()
        );
        if devs.len() < 2 {
            println!("Two or more devices are required for simpleP2P; waiving.");
            return Ok(());
        }
        println!("Checking GPU(s) for support of peer to peer memory access...");
        let mut pair = None;
        for (i, a) in devs.iter().enumerate() {
            for (j, b) in devs.iter().enumerate() {
                if i != j {
                    let ok = a.can_access_peer(b);
                    println!(
                        "> Peer access from {} -> {} : {}",
                        a.spec(),
                        b.spec(),
                        if ok { "Yes" } else { "No" }
                    );
                    if ok && pair.is_none() {
                        pair = Some((i, j));
                    }
                }
            }
        }
        let Some((i, j)) = pair else {
            println!("Peer to Peer access is not available amongst the devices; waiving.");
            return Ok(());
        };
        let (g0_dev, g1_dev) = (&devs[i], &devs[j]);
        println!(
            "Enabling peer access between {} and {}...",
            g0_dev.spec(),
            g1_dev.spec()
        );
        checks.check(
            g0_dev.enable_peer_access(g1_dev)?,
            "peer access 0 -> 1 goes direct",
        );
        checks.check(
            g1_dev.enable_peer_access(g0_dev)?,
            "peer access 1 -> 0 goes direct",
        );

        let (n, copies) = if on_gpu(g0_dev) {
            (16usize << 20, 100)
        } else {
            (1usize << 20, 10)
        };
        let bytes = n * 4;
        println!(
            "Allocating buffers ({}MB on each device and on the host)...",
            bytes >> 20
        );
        let g0 = DeviceBuffer::<f32>::new(g0_dev, n)?;
        let g1 = DeviceBuffer::<f32>::new(g1_dev, n)?;
        // As the original: allocated while the second device is current, used by the first
        // one's copies ("Automatically portable with UVA").
        let mut h0 = PinnedBuffer::<f32>::new(g1_dev, n)?;

        println!("Creating event handles...");
        let flags = EventFlags {
            blocking_sync: true,
            ..EventFlags::default()
        };
        let (start, stop) = (
            Event::with_flags(g0_dev, flags)?,
            Event::with_flags(g0_dev, flags)?,
        );
        let l0 = Stream::legacy(g0_dev);
        start.record(&l0)?;
        for k in 0..copies {
            // Ping-pong; cudaMemcpy is synchronous.
            if k % 2 == 0 {
                l0.copy_peer(&g1, &g0)?;
            } else {
                l0.copy_peer(&g0, &g1)?;
            }
            l0.synchronize()?;
        }
        stop.record(&l0)?;
        stop.synchronize()?;
        let ms = Event::elapsed_ms(&start, &stop)?;
        println!(
            "Peer copies between {} and {}: {:.2}GB/s",
            g0_dev.spec(),
            g1_dev.spec(),
            (copies * bytes) as f64 / (ms as f64 / 1e3) / (1u64 << 30) as f64
        );

        println!("Preparing host buffer and memcpy to {}...", g0_dev.spec());
        for (i, x) in h0.write()?.iter_mut().enumerate() {
            *x = (i % 4096) as f32;
        }
        l0.copy_h2d(&g0, &h0)?;
        l0.synchronize()?;

        let k = simple_kernel();
        let cfg = LaunchConfig::new((n / 512) as u32, 512);
        println!(
            "Run kernel on {}, taking source data from {} and writing to {}...",
            g1_dev.spec(),
            g0_dev.spec(),
            g1_dev.spec()
        );
        Stream::legacy(g1_dev).launch(&k, cfg, KernelArgs::new().read(&g0).write(&g1))?;
        g1_dev.synchronize()?;
        println!(
            "Run kernel on {}, taking source data from {} and writing to {}...",
            g0_dev.spec(),
            g1_dev.spec(),
            g0_dev.spec()
        );
        l0.launch(&k, cfg, KernelArgs::new().read(&g1).write(&g0))?;
        g0_dev.synchronize()?;

        println!(
            "Copy data back to host from {} and verify results...",
            g0_dev.spec()
        );
        l0.copy_d2h(&mut h0, &g0)?;
        l0.synchronize()?;
        let h = h0.read()?;
        let mut errors = 0;
        for (i, &v) in h.iter().enumerate() {
            let want = (i % 4096) as f32 * 2.0 * 2.0;
            if v != want {
                if errors < 10 {
                    println!("Verification error @ element {i}: val = {v}, ref = {want}");
                }
                errors += 1;
            }
        }
        checks.eq(errors, 0, "elements that differ from (i % 4096) * 4");
        drop(h);

        println!("Disabling peer access...");
        g0_dev.disable_peer_access(g1_dev)?;
        g1_dev.disable_peer_access(g0_dev)?;
        println!("Shutting down...");
        Ok(())
    })
}
