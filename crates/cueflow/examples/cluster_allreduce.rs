//! All-reduce across the ranks of a launched job (MD5): every rank is a process that torchrun,
//! `srun` or `mpirun` started; they meet with `Communicator::from_env`, each on the device of
//! its local rank (`Device::from_local_rank`: set `CUEFLOW_DEVICE=cuda`, or leave it unset
//! for the host backend). Measured exactly as `benches/cuda/cluster_allreduce.cu` measures raw
//! NCCL, so their `RESULT` lines compare one to one; every size is verified.
//!
//! ```text
//! CUEFLOW_DEVICE=cuda torchrun --nproc-per-node 2 --no-python \
//!     target/release/examples/cluster_allreduce [--min-mib 1] [--max-mib 256] [--reps 7] [--iters 20]
//! ```
//!
//! Per size (from `--min-mib` to `--max-mib` by factors of 4), on every rank: 5 untimed
//! all-reduces (sum, `f32`, in place), then `--reps` batches of `--iters` between events on the
//! rank's stream; a rank's time is its median batch / iters, the size's time the slowest
//! rank's (all-reduced with `Max`). Rank 0 prints
//! `RESULT cluster op=allreduce ranks=N bytes=B us=<time> busbw=<GB/s>`, with bus bandwidth
//! as nccl-tests reports it: bytes / time × 2 (n − 1) / n.

use cueflow::{Communicator, Device, DeviceBuffer, Event, LaunchEnv, ReduceOp, Stream};

const WARMUP: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn main() -> cueflow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut min_mib, mut max_mib, mut reps, mut iters) = (1usize, 256usize, 7usize, 20usize);
    while let Some(flag) = args.next() {
        let value: usize = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} takes a number"));
        match flag.as_str() {
            "--min-mib" => min_mib = value,
            "--max-mib" => max_mib = value,
            "--reps" => reps = value,
            "--iters" => iters = value,
            _ => panic!(
                "usage: cluster_allreduce [--min-mib M] [--max-mib M] [--reps R] [--iters I]"
            ),
        }
    }
    let launch = LaunchEnv::from_env()?;
    let device = Device::from_local_rank()?;
    let t = std::time::Instant::now();
    let comm = Communicator::from_launch(&device, &launch)?;
    let (rank, ranks) = (launch.rank(), launch.ranks());
    if rank == 0 {
        println!(
            "{} ranks ({}), rank 0 on {}; met through {}:{} in {:.1} ms",
            ranks,
            launch.launcher(),
            device.properties().name,
            launch.store_host(),
            launch.store_port(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let stream = Stream::builder(&device).non_blocking().build()?;
    let buf = DeviceBuffer::<f32>::new(&device, (max_mib << 20) / 4)?;
    let slowest = DeviceBuffer::<f64>::new(&device, 1)?;
    let mut bytes = min_mib << 20;
    while bytes <= max_mib << 20 {
        let n = bytes / 4;
        let view = buf.slice(..n)?;
        let part = [(&stream, &view, &view)];
        // Verify: rank r holds r + 1; the sum is 1 + 2 + … + ranks on every rank.
        stream.write_pageable(&view, &vec![rank as f32 + 1.0; n])?;
        comm.all_reduce(&part, ReduceOp::Sum)?;
        let mut out = vec![0.0f32; n];
        stream.read_pageable(&mut out, &view)?;
        let want = (ranks * (ranks + 1) / 2) as f32;
        if let Some(i) = out.iter().position(|&x| x != want) {
            panic!(
                "rank {rank}: all-reduce of {bytes} bytes: element {i} is {}, not {want}",
                out[i]
            );
        }
        for _ in 0..WARMUP {
            comm.all_reduce(&part, ReduceOp::Sum)?;
        }
        stream.synchronize()?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let start: Event = stream.record()?;
            for _ in 0..iters {
                comm.all_reduce(&part, ReduceOp::Sum)?;
            }
            let stop = stream.record()?;
            stop.synchronize()?;
            times.push(f64::from(Event::elapsed_ms(&start, &stop)?) * 1e3 / iters as f64);
        }
        stream.write_pageable(&slowest, &[median(times)])?;
        comm.all_reduce(&[(&stream, &slowest, &slowest)], ReduceOp::Max)?;
        let mut us = [0.0f64];
        stream.read_pageable(&mut us, &slowest)?;
        let busbw = bytes as f64 / (us[0] * 1e3) * 2.0 * (ranks - 1) as f64 / ranks as f64;
        if rank == 0 {
            println!(
                "RESULT cluster op=allreduce ranks={ranks} bytes={bytes} us={:.2} busbw={busbw:.2}",
                us[0]
            );
        }
        bytes *= 4;
    }
    if rank == 0 {
        println!("all-reduce verified at every size on every rank");
    }
    Ok(())
}
