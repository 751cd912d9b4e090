//! A port of NVIDIA's `streamOrderedAllocationP2P` sample: stream-ordered memory of one GPU read
//! by a kernel on another. Device 0 allocates a vector from its default pool on its stream
//! (`cudaMallocAsync`, MM1), uploads it and records an event; device 1 allocates its output on
//! its own stream, is given access to device 0's pool (`cudaMemPoolSetAccess`; in cueflow peer
//! access covers the pools, HM6), waits for the event (MD2) and runs a kernel that reads device
//! 0's vector and writes twice each element; it downloads the result and frees both vectors on
//! its own stream — device 0's too, as `cudaFreeAsync` takes any stream (MD2).
//!
//! What it checks, as the original: every output element is twice its input. The original's
//! inputs are `rand() / RAND_MAX` in integer arithmetic, which is 0 almost everywhere; here they
//! are pseudo-random integers, so the check sees the kernel's work. Beyond the original: device
//! 0's pool has all its memory back once both devices are synchronized.
//!
//! Devices: `CUEFLOW_DEVICE=host:2x` (two host devices) or `cuda:0,cuda:1`; one device waives,
//! as the original does without two peer-capable GPUs of one architecture.
//!
//! ```text
//! CUEFLOW_DEVICE=cuda:0,cuda:1 cargo run --release -p cueflow-samples --bin stream_ordered_allocation_p2p
//! ```

use std::process::ExitCode;

use cueflow::{Device, Event, Kernel, KernelArgs, LaunchConfig, Stream};
use cueflow_samples::{devices, main_with, Checks};

const SOURCE: &str = include_str!("../../kernels/stream_ordered_allocation_p2p.cu");

fn copy_p2p_and_scale() -> Kernel {
    Kernel::new("copy_p2p_and_scale")
        .cuda_source(SOURCE, "copy_p2p_and_scale")
        .host(|ctx, args| {
            let src = args.input::<i32>(0);
            let lo = ctx.thread_range().start as usize;
            for (k, d) in args.tile_mut::<i32>(1).iter_mut().enumerate() {
                *d = 2 * src[lo + k];
            }
        })
        .build()
}

/// The first pair of devices of one compute capability where the second may reach the first's
/// memory, as the original picks them (printing what it finds).
fn p2p_pair(devs: &[Device]) -> Option<(&Device, &Device)> {
    for (i, a) in devs.iter().enumerate() {
        for b in devs[i + 1..].iter() {
            let same_arch = a.properties().compute_capability == b.properties().compute_capability;
            let access = b.can_access_peer(a);
            println!(
                "Device={} {} Access Peer Device={}",
                b.spec(),
                if access { "CAN" } else { "CANNOT" },
                a.spec()
            );
            if same_arch && access {
                println!("Selected p2p capable devices - {}  {}", a.spec(), b.spec());
                return Some((a, b));
            }
        }
    }
    None
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let devs = devices()?;
    if devs.len() < 2 {
        println!("No Two or more GPUs with same architecture capable of cuda Memory Pools found.");
        println!("Waiving the sample");
        return Ok(());
    }
    let Some((dev0, dev1)) = p2p_pair(&devs) else {
        println!("No Two or more Devices p2p capable found.. exiting..");
        return Ok(());
    };
    let nelem: usize = 1 << 20;
    let mut seed = 0x5eed_u64;
    let a: Vec<i32> = (0..nelem)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 44) as i32 % 1000
        })
        .collect();
    let mut output = vec![0i32; nelem];

    let pool = dev0.default_pool();
    dev0.synchronize()?;
    let used_before = pool.stats()?.used;
    let wait_on_stream1 = Event::new(dev0)?;
    let stream1 = Stream::builder(dev0).non_blocking().build()?;
    let dev0_src = stream1.alloc_async::<i32>(nelem)?; // from device 0's default pool
    stream1.write_pageable(&dev0_src, &a)?;
    stream1.record_event(&wait_on_stream1)?;

    let stream2 = Stream::builder(dev1).non_blocking().build()?;
    let dev1_dst = stream2.alloc_async::<i32>(nelem)?;
    // cudaMemPoolSetAccess(device 0's pool, device 1, read-write): peer access from device 1
    // to device 0 reaches its pools too (HM6).
    dev1.enable_peer_access(dev0)?;

    println!("> copyP2PAndScale kernel running ...");
    let block = 256u32;
    let grid = (nelem as u32).div_ceil(block);
    let kernel = copy_p2p_and_scale();
    stream2.wait_event(&wait_on_stream1)?;
    stream2.launch(
        &kernel,
        LaunchConfig::new(grid, block),
        KernelArgs::new()
            .read(&dev0_src)
            .write(&dev1_dst)
            .scalar(nelem as i32),
    )?;
    stream2.read_pageable(&mut output, &dev1_dst)?;
    stream2.free_async(dev0_src)?; // device 0's memory, freed on device 1's stream
    stream2.free_async(dev1_dst)?;
    stream2.synchronize()?;

    println!("> Checking the results from copyP2PAndScale() ...");
    let wrong = (0..nelem).find(|&n| output[n] != 2 * a[n]);
    if let Some(n) = wrong {
        println!(
            "mismatch i = {n} expected = {} val = {}",
            2 * a[n],
            output[n]
        );
    }
    checks.check(wrong.is_none(), "every output element is twice its input");
    dev1.synchronize()?;
    dev0.synchronize()?;
    checks.eq(
        pool.stats()?.used,
        used_before,
        "bytes of device 0's pool in use after both devices synchronized",
    );
    dev1.disable_peer_access(dev0)?;
    Ok(())
}

fn main() -> ExitCode {
    main_with("streamOrderedAllocationP2P", run)
}
