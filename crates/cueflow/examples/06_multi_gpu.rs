//! Two devices: peer-copy bandwidth and all-reduce bus bandwidth, measured exactly as
//! `benches/cuda/multi.cu` measures raw `cudaMemcpyPeerAsync` and raw NCCL, so their `RESULT`
//! lines compare one to one. Every all-reduce size is also verified.
//!
//! ```text
//! cargo run --release --example 06_multi_gpu -- [DEVICES] [MAX_MIB] [--processes]
//! ```
//! `DEVICES` is a list of two (`cuda:0,cuda:1`, `host:2x`; default `$CUEFLOW_DEVICE`, else
//! `host:2x`); sizes go from 1 MiB up to `MAX_MIB` (default 1024) by factors of 4.
//!
//! - peer copy: `copy_peer` from device 0's memory into device 1's, on a stream of device 0;
//!   GB/s = bytes / time.
//! - all-reduce: `Communicator::all_reduce` (sum, `f32`, in place) over both devices; bus
//!   bandwidth as nccl-tests reports it, bytes / time × 2 (n − 1) / n.
//! - `--processes`: the all-reduce only, one process per device (`Communicator::join`), as
//!   `torch.distributed` runs it (`benches/torch/allreduce.py` is measured the same way).
//!
//! Per size: 5 untimed calls (nccl-tests' defaults), then 7 batches of 20 calls between events
//! recorded on every rank's stream; a batch takes as long as its slowest rank.
//! - `us`: the median batch / 20, enqueued while the device runs, as nccl-tests times it: where
//!   enqueueing a call takes the host longer than the device takes to run it, this is host time.
//! - `host_us`: the median host time per call spent enqueueing.
//! - `dev_us`: the median batch / 20 of batches queued behind a gate (a host function on a
//!   stream of the first device that returns once the whole batch is queued): the device's
//!   time alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cueflow::{Communicator, Device, DeviceBuffer, DeviceSpec, Event, ReduceOp, Stream, UniqueId};

const WARMUP: usize = 5;
const REPS: usize = 7;
const ITERS: usize = 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// What one size measured: microseconds per call in steady state (enqueueing as the device
/// runs, so the host's enqueue cost is the bound where it is the larger), the host time per
/// call spent enqueueing, and the device time per call of a batch queued behind a gate.
struct Measured {
    us: f64,
    host_us: f64,
    dev_us: f64,
}

/// Measure `body` (one call on every rank) on `streams`; `gate` is a stream of the first
/// device whose host function holds a gated batch back until every call of it is queued.
fn measure(
    streams: &[Stream],
    gate: &Stream,
    mut body: impl FnMut() -> cueflow::Result<()>,
) -> cueflow::Result<Measured> {
    for _ in 0..WARMUP {
        body()?;
    }
    for s in streams {
        s.synchronize()?;
    }
    let mut batch = |gated: bool| -> cueflow::Result<(f64, f64)> {
        let open = Arc::new(AtomicBool::new(!gated));
        if gated {
            let o = open.clone();
            gate.host_fn(move || {
                // Bounded, so that a mistake here can never hang the device.
                let t = Instant::now();
                while !o.load(Ordering::Acquire) && t.elapsed() < Duration::from_secs(10) {
                    std::hint::spin_loop();
                }
            })?;
            let ev = gate.record()?;
            for s in streams {
                s.wait_event(&ev)?;
            }
        }
        let starts: Vec<Event> = streams
            .iter()
            .map(Stream::record)
            .collect::<Result<_, _>>()?;
        let t = Instant::now();
        for _ in 0..ITERS {
            body()?;
        }
        let host = t.elapsed().as_secs_f64() * 1e6 / ITERS as f64;
        let stops: Vec<Event> = streams
            .iter()
            .map(Stream::record)
            .collect::<Result<_, _>>()?;
        open.store(true, Ordering::Release);
        let mut worst: f64 = 0.0;
        for (a, b) in starts.iter().zip(&stops) {
            b.synchronize()?;
            worst = worst.max(f64::from(Event::elapsed_ms(a, b)?));
        }
        Ok((worst * 1e3 / ITERS as f64, host))
    };
    let (mut times, mut host, mut dev) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPS {
        let (t, h) = batch(false)?;
        times.push(t);
        host.push(h);
        dev.push(batch(true)?.0);
    }
    Ok(Measured {
        us: median(times),
        host_us: median(host),
        dev_us: median(dev),
    })
}

/// The environment a rank process of `--processes` gets from its parent.
const ENV_ID: &str = "CUEFLOW_EXAMPLE_UNIQUE_ID";
const ENV_RANK: &str = "CUEFLOW_EXAMPLE_RANK";

fn main() -> cueflow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let processes = args.iter().any(|a| a == "--processes");
    args.retain(|a| a != "--processes");
    let list = args
        .first()
        .cloned()
        .or_else(|| {
            std::env::var("CUEFLOW_DEVICE")
                .ok()
                .filter(|v| v.contains(',') || v.ends_with('x'))
        })
        .unwrap_or_else(|| "host:2x".into());
    let max_mib: usize = args
        .get(1)
        .map_or(1024, |a| a.parse().expect("MAX_MIB is a number"));
    if let (Ok(id), Ok(rank)) = (std::env::var(ENV_ID), std::env::var(ENV_RANK)) {
        let rank: usize = rank.parse().expect("rank is a number");
        let devs = DeviceSpec::parse_list(&list)?;
        let device = Device::open(devs[rank])?;
        return run_rank(&device, &id.parse()?, devs.len(), rank, max_mib);
    }
    if processes {
        return spawn_ranks(&list, max_mib);
    }
    run(&list, max_mib)
}

/// `--processes`: one process per device (this program again, told its rank and the
/// communicator's id through the environment), as `torch.distributed` runs; rank 0 prints.
fn spawn_ranks(list: &str, max_mib: usize) -> cueflow::Result<()> {
    let specs = DeviceSpec::parse_list(list)?;
    let id = Communicator::unique_id(&Device::open(specs[0])?)?;
    let exe = std::env::current_exe().expect("the example's own path");
    let children: Vec<_> = (0..specs.len())
        .map(|r| {
            std::process::Command::new(&exe)
                .args([list, &max_mib.to_string()])
                .env(ENV_ID, id.to_string())
                .env(ENV_RANK, r.to_string())
                .spawn()
                .expect("start a rank process")
        })
        .collect();
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().expect("wait for a rank process");
        assert!(status.success(), "rank {r} failed: {status}");
    }
    Ok(())
}

/// Rank `rank` of `ranks`, one per process: all-reduce timed and verified as [`run`] does it,
/// with this process's stream alone; a batch takes as long as the slowest rank's (the ranks'
/// times are all-reduced with `Max`).
pub fn run_rank(
    device: &Device,
    id: &UniqueId,
    ranks: usize,
    rank: usize,
    max_mib: usize,
) -> cueflow::Result<()> {
    let max_bytes = max_mib << 20;
    let comm = Communicator::join(device, id, ranks, rank)?;
    let stream = Stream::builder(device).non_blocking().build()?;
    let gate = Stream::builder(device).non_blocking().build()?;
    let buf = DeviceBuffer::<f32>::new(device, max_bytes / 4)?;
    let slowest = DeviceBuffer::<f64>::new(device, 3)?;
    let streams = [stream];
    let mut bytes = 1usize << 20;
    while bytes <= max_bytes {
        let n = bytes / 4;
        let view = buf.slice(..n)?;
        let part = [(&streams[0], &view, &view)];
        let m = measure(&streams, &gate, || comm.all_reduce(&part, ReduceOp::Sum))?;
        streams[0].write_pageable(&slowest, &[m.us, m.host_us, m.dev_us])?;
        comm.all_reduce(&[(&streams[0], &slowest, &slowest)], ReduceOp::Max)?;
        let mut worst = [0.0f64; 3];
        streams[0].read_pageable(&mut worst, &slowest)?;
        let [us, host_us, dev_us] = worst;
        let bus = |us: f64| bytes as f64 / (us * 1e3) * 2.0 * (ranks - 1) as f64 / ranks as f64;
        if rank == 0 {
            println!(
                "RESULT multi op=allreduce_processes bytes={bytes} us={us:.2} gbps={:.2} busbw={:.2} host_us={host_us:.2} dev_us={dev_us:.2} dev_busbw={:.2}",
                bytes as f64 / (us * 1e3),
                bus(us),
                bus(dev_us)
            );
        }
        // Verify: rank r holds r + 1; one sum gives 1 + 2 + … + ranks on every rank.
        streams[0].write_pageable(&view, &vec![rank as f32 + 1.0; n])?;
        comm.all_reduce(&part, ReduceOp::Sum)?;
        let mut out = vec![0.0f32; n];
        streams[0].read_pageable(&mut out, &view)?;
        let want = (ranks * (ranks + 1) / 2) as f32;
        if let Some(i) = out.iter().position(|&x| x != want) {
            panic!(
                "rank {rank}: all-reduce of {bytes} bytes: element {i} is {}, not {want}",
                out[i]
            );
        }
        bytes *= 4;
    }
    if rank == 0 {
        println!("all-reduce verified at every size, one process per device");
    }
    Ok(())
}

/// Measure and verify on the two devices `list` names, sizes 1 MiB..=`max_mib` MiB.
pub fn run(list: &str, max_mib: usize) -> cueflow::Result<()> {
    let devs = Device::open_list(list)?;
    assert_eq!(devs.len(), 2, "06_multi_gpu takes two devices, got {list}");
    let max_bytes = max_mib << 20;
    let streams: Vec<Stream> = devs
        .iter()
        .map(|d| Stream::builder(d).non_blocking().build())
        .collect::<Result<_, _>>()?;
    let bufs: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, max_bytes / 4))
        .collect::<Result<_, _>>()?;
    println!(
        "{} and {}; peer copies: {}",
        devs[0].properties().name,
        devs[1].properties().name,
        match devs[0].enable_peer_access(&devs[1]) {
            Ok(true) => "direct".to_string(),
            Ok(false) => "staged (the devices cannot reach each other)".to_string(),
            Err(e) => format!("staged (enabling peer access failed: {e})"),
        }
    );
    let comm = Communicator::new(&devs)?;
    let gate = Stream::builder(&devs[0]).non_blocking().build()?;
    let sizes: Vec<usize> = std::iter::successors(Some(1usize << 20), |b| Some(b * 4))
        .take_while(|&b| b <= max_bytes)
        .collect();

    for &bytes in &sizes {
        let (dst, src) = (bufs[1].slice(..bytes / 4)?, bufs[0].slice(..bytes / 4)?);
        let m = measure(&streams, &gate, || streams[0].copy_peer(&dst, &src))?;
        let gbps = bytes as f64 / (m.us * 1e3);
        println!(
            "RESULT multi op=peer bytes={bytes} us={:.2} gbps={gbps:.2} busbw={gbps:.2} host_us={:.2} dev_us={:.2} dev_busbw={:.2}",
            m.us,
            m.host_us,
            m.dev_us,
            bytes as f64 / (m.dev_us * 1e3)
        );
    }
    for &bytes in &sizes {
        let n = bytes / 4;
        let views: Vec<DeviceBuffer<f32>> = bufs
            .iter()
            .map(|b| b.slice(..n))
            .collect::<Result<_, _>>()?;
        let parts: Vec<_> = streams.iter().zip(&views).map(|(s, b)| (s, b, b)).collect();
        let m = measure(&streams, &gate, || comm.all_reduce(&parts, ReduceOp::Sum))?;
        // nccl-tests' bus bandwidth: bytes / time × 2 (n − 1) / n.
        let bus =
            |us: f64| bytes as f64 / (us * 1e3) * 2.0 * (devs.len() - 1) as f64 / devs.len() as f64;
        println!(
            "RESULT multi op=allreduce bytes={bytes} us={:.2} gbps={:.2} busbw={:.2} host_us={:.2} dev_us={:.2} dev_busbw={:.2}",
            m.us,
            bytes as f64 / (m.us * 1e3),
            bus(m.us),
            m.host_us,
            m.dev_us,
            bus(m.dev_us)
        );
        // Verify: ranks hold 1 and 2 (small integers, exact in f32); one sum gives 3 on both.
        for (r, (s, b)) in streams.iter().zip(&views).enumerate() {
            s.write_pageable(b, &vec![r as f32 + 1.0; n])?;
        }
        comm.all_reduce(&parts, ReduceOp::Sum)?;
        for (s, b) in streams.iter().zip(&views) {
            let mut out = vec![0.0f32; n];
            s.read_pageable(&mut out, b)?;
            if let Some(i) = out.iter().position(|&x| x != 3.0) {
                panic!(
                    "all-reduce of {bytes} bytes: element {i} is {}, not 3",
                    out[i]
                );
            }
        }
    }
    println!("all-reduce verified at every size");
    Ok(())
}
