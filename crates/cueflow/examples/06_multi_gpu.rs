//! Two devices: peer-copy bandwidth and all-reduce bus bandwidth, measured exactly as
//! `benches/cuda/multi.cu` measures raw `cudaMemcpyPeerAsync` and raw NCCL, so their `RESULT`
//! lines compare one to one. Every all-reduce size is also verified.
//!
//! ```text
//! cargo run --release --example 06_multi_gpu -- [DEVICES] [MAX_MIB]
//! ```
//! `DEVICES` is a list of two (`cuda:0,cuda:1`, `host:2x`; default `$CUEFLOW_DEVICE`, else
//! `host:2x`); sizes go from 1 MiB up to `MAX_MIB` (default 1024) by factors of 4.
//!
//! - peer copy: `copy_peer` from device 0's memory into device 1's, on a stream of device 0;
//!   GB/s = bytes / time.
//! - all-reduce: `Communicator::all_reduce` (sum, `f32`, in place) over both devices; bus
//!   bandwidth as nccl-tests reports it, bytes / time × 2 (n − 1) / n.
//!
//! Per size: 3 untimed calls, then 7 batches of 5 calls between events recorded on every
//! rank's stream; a batch takes as long as its slowest rank; the median batch / 5 is printed.

use cueflow::{Communicator, Device, DeviceBuffer, Event, ReduceOp, Stream};

const WARMUP: usize = 3;
const REPS: usize = 7;
const ITERS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Median microseconds per call of `body` (one call on every rank) on the devices, and the
/// median host time per call spent enqueueing.
fn measure(
    streams: &[Stream],
    mut body: impl FnMut() -> cueflow::Result<()>,
) -> cueflow::Result<(f64, f64)> {
    for _ in 0..WARMUP {
        body()?;
    }
    for s in streams {
        s.synchronize()?;
    }
    let (mut times, mut host) = (Vec::with_capacity(REPS), Vec::with_capacity(REPS));
    for _ in 0..REPS {
        let starts: Vec<Event> = streams
            .iter()
            .map(Stream::record)
            .collect::<Result<_, _>>()?;
        let t = std::time::Instant::now();
        for _ in 0..ITERS {
            body()?;
        }
        host.push(t.elapsed().as_secs_f64() * 1e6 / ITERS as f64);
        let stops: Vec<Event> = streams
            .iter()
            .map(Stream::record)
            .collect::<Result<_, _>>()?;
        let mut worst: f64 = 0.0;
        for (a, b) in starts.iter().zip(&stops) {
            b.synchronize()?;
            worst = worst.max(f64::from(Event::elapsed_ms(a, b)?));
        }
        times.push(worst * 1e3 / ITERS as f64);
    }
    Ok((median(times), median(host)))
}

fn main() -> cueflow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
    run(&list, max_mib)
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
    let sizes: Vec<usize> = std::iter::successors(Some(1usize << 20), |b| Some(b * 4))
        .take_while(|&b| b <= max_bytes)
        .collect();

    for &bytes in &sizes {
        let (dst, src) = (bufs[1].slice(..bytes / 4)?, bufs[0].slice(..bytes / 4)?);
        let (us, host) = measure(&streams, || streams[0].copy_peer(&dst, &src))?;
        let gbps = bytes as f64 / (us * 1e3);
        println!(
            "RESULT multi op=peer bytes={bytes} us={us:.2} gbps={gbps:.2} busbw={gbps:.2} host_us={host:.2}"
        );
    }
    for &bytes in &sizes {
        let n = bytes / 4;
        let views: Vec<DeviceBuffer<f32>> = bufs
            .iter()
            .map(|b| b.slice(..n))
            .collect::<Result<_, _>>()?;
        let parts: Vec<_> = streams.iter().zip(&views).map(|(s, b)| (s, b, b)).collect();
        let (us, host) = measure(&streams, || comm.all_reduce(&parts, ReduceOp::Sum))?;
        let gbps = bytes as f64 / (us * 1e3);
        let busbw = gbps * 2.0 * (devs.len() - 1) as f64 / devs.len() as f64;
        println!(
            "RESULT multi op=allreduce bytes={bytes} us={us:.2} gbps={gbps:.2} busbw={busbw:.2} host_us={host:.2}"
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
