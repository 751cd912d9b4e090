//! Two devices' memory and graphs through cueflow (issues 19, 20 and 22), measured the way
//! `benches/cuda/multi_memory.cu` measures raw CUDA C++ and NCCL, so the `RESULT` lines compare
//! one to one:
//!
//! - `peer_read`: a kernel on device 0 reads a buffer of device 1 after `enable_peer_access`
//!   (HM6) and writes the sum of each 16-byte vector to device 0's memory; GB/s = bytes read /
//!   time.
//! - `portable_h2d`: one portable pinned buffer (HM2); both devices copy all of it to their own
//!   memory at once, each on its own stream; GB/s = 2 × bytes / time.
//! - `managed_p2p`: managed memory (HM4) prefetched device 0 → device 1 → device 0 … from
//!   device 0's stream; GB/s = bytes / time of one prefetch (skipped, saying why, without
//!   concurrent managed access).
//! - `allreduce` / `allreduce_graph`: `iters` all-reduces (sum, `f32`, in place) from both
//!   devices' streams, then the same calls captured once per device into a graph (GR11) and
//!   launched per batch; us = time / call.
//!
//! Each figure: 3 warm-up runs, then the median of `reps` runs timed with events recorded on
//! both devices' streams (the longer of the two). Every result is checked; a mismatch is an
//! error (non-zero exit).
//!
//! ```text
//! cargo run --release -p cueflow --example 09_multi_memory -- [DEVICES] [--mib M] [--reps R] [--iters I]
//! ```
//! `DEVICES` is a list of two (`cuda:0,cuda:1`, `host:2x`; default `$CUEFLOW_DEVICE`, else
//! `host:2x`).

use std::sync::LazyLock;

use cueflow::{
    CaptureMode, Communicator, Device, DeviceBuffer, Event, Kernel, KernelArgs, LaunchConfig,
    ManagedBuffer, MemLocation, PinnedBuffer, PinnedFlags, ReduceOp, Stream,
};

const WARMUP: usize = 3;

/// `out[i] = x + y + z + w` of the i-th 16-byte vector of `in` (every byte of `in` read once).
static SUM4: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("sum4")
        .host(|ctx, args| {
            let input = args.input::<f32>(0);
            let lo = ctx.thread_range().start as usize;
            for (k, o) in args.tile_mut::<f32>(1).iter_mut().enumerate() {
                let v = &input[4 * (lo + k)..4 * (lo + k) + 4];
                *o = v[0] + v[1] + v[2] + v[3];
            }
        })
        .cuda_source(
            r#"extern "C" __global__ void sum4(const float4* __restrict__ in, float* __restrict__ out,
                                              unsigned long long n) {
                for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
                     i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
                    float4 v = in[i];
                    out[i] = v.x + v.y + v.z + v.w;
                }
            }"#,
            "sum4",
        )
        .build()
});

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median over `reps` (after the warm-ups) of the longer of the two streams' event times
/// around `body`, in ms.
fn time_ms(
    s: &[Stream; 2],
    reps: usize,
    mut body: impl FnMut() -> cueflow::Result<()>,
) -> cueflow::Result<f64> {
    let mut t = Vec::with_capacity(reps);
    for r in 0..reps + WARMUP {
        let a = [s[0].record()?, s[1].record()?];
        body()?;
        let b = [s[0].record()?, s[1].record()?];
        b[0].synchronize()?;
        b[1].synchronize()?;
        let ms = f64::from(Event::elapsed_ms(&a[0], &b[0])?)
            .max(f64::from(Event::elapsed_ms(&a[1], &b[1])?));
        if r >= WARMUP {
            t.push(ms);
        }
    }
    Ok(median(t))
}

fn result(tag: &str, op: &str, bytes: usize, ms: f64, gb_bytes: f64) {
    println!(
        "RESULT {tag} op={op} bytes={bytes} us={:.2} gbps={:.1}",
        ms * 1e3,
        gb_bytes / (ms * 1e-3) / 1e9
    );
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn mismatch(what: String) -> Box<dyn std::error::Error> {
    format!("check failed: {what}").into()
}

/// Measure and check everything on `devs[0]` and `devs[1]`; `mib` per buffer.
pub fn run(devs: &[Device], mib: usize, reps: usize, iters: usize) -> Res<()> {
    let [d0, d1] = [&devs[0], &devs[1]];
    let tag = "cueflow_multi_memory";
    let bytes = mib << 20;
    let (n4, nf) = (bytes / 16, bytes / 4);
    let s = [
        Stream::builder(d0).non_blocking().build()?,
        Stream::builder(d1).non_blocking().build()?,
    ];
    let dev = [
        DeviceBuffer::<f32>::new(d0, nf)?,
        DeviceBuffer::<f32>::new(d1, nf)?,
    ];
    let pattern =
        |base: f32, n: usize| -> Vec<f32> { (0..n).map(|i| base + (i % 1024) as f32).collect() };

    // peer_read (HM6).
    if d0.can_access_peer(d1) && d0.enable_peer_access(d1)? {
        s[1].write_pageable(&dev[1], &pattern(1.0, nf))?;
        s[1].synchronize()?;
        SUM4.prepare(d0)?;
        let ms = time_ms(&s, reps, || {
            s[0].launch(
                &SUM4,
                LaunchConfig::for_elements(n4, 256),
                KernelArgs::new()
                    .read(&dev[1])
                    .write(&dev[0].slice(..n4)?)
                    .scalar(n4 as u64),
            )
        })?;
        let mut got = vec![0f32; 4];
        s[0].read_pageable(&mut got, &dev[0].slice(..4)?)?;
        for (i, g) in got.iter().enumerate() {
            let want: f32 = (0..4).map(|k| 1.0 + ((4 * i + k) % 1024) as f32).sum();
            if *g != want {
                return Err(mismatch(format!(
                    "peer_read out[{i}] = {g}, expected {want}"
                )));
            }
        }
        result(tag, "peer_read", bytes, ms, bytes as f64);
    } else {
        println!("SKIP peer_read: device 0 cannot reach device 1's memory");
    }

    // portable_h2d (HM2): one portable pinned buffer, both devices copy all of it at once.
    {
        let mut host = PinnedBuffer::<f32>::with_flags(d0, nf, PinnedFlags::default().portable())?;
        for (i, v) in host.write()?.iter_mut().enumerate() {
            *v = (i % 4096) as f32;
        }
        let ms = time_ms(&s, reps, || {
            s[0].copy_h2d(&dev[0], &host)?;
            s[1].copy_h2d(&dev[1], &host)
        })?;
        for d in 0..2 {
            let mut last = [0f32];
            s[d].read_pageable(&mut last, &dev[d].slice(nf - 1..)?)?;
            if last[0] != ((nf - 1) % 4096) as f32 {
                return Err(mismatch(format!(
                    "portable_h2d: device {d} got {}",
                    last[0]
                )));
            }
        }
        result(tag, "portable_h2d", bytes, ms, 2.0 * bytes as f64);
    }

    // managed_p2p (HM4): prefetched between the devices from device 0's stream.
    if d0.properties().concurrent_managed_access && d1.properties().concurrent_managed_access {
        let mut m = ManagedBuffer::<f32>::new(d0, nf)?;
        for (i, v) in m.write()?.iter_mut().enumerate() {
            *v = (i % 777) as f32;
        }
        s[0].prefetch(&m, .., MemLocation::Device)?;
        s[0].synchronize()?;
        // Every prefetch on device 0's stream, to the other device each time (a destination
        // device of the same backend, `Device::mem_location`), as the raw program issues them.
        let mut at = 0usize;
        let mut t = Vec::with_capacity(reps);
        for r in 0..reps + WARMUP {
            let to = 1 - at;
            let a = s[0].record()?;
            s[0].prefetch(&m, .., devs[to].mem_location())?;
            let b = s[0].record()?;
            b.synchronize()?;
            if r >= WARMUP {
                t.push(f64::from(Event::elapsed_ms(&a, &b)?));
            }
            at = to;
        }
        let _ = at;
        s[0].prefetch(&m, .., MemLocation::Host)?;
        s[0].synchronize()?;
        let last = m.read()?[nf - 1];
        if last != ((nf - 1) % 777) as f32 {
            return Err(mismatch(format!("managed_p2p: last element {last}")));
        }
        result(tag, "managed_p2p", bytes, median(t), bytes as f64);
    } else {
        println!("SKIP managed_p2p: concurrent managed access is 0");
    }

    // allreduce from streams, then the same calls captured into one graph per device (GR11).
    let comm = Communicator::new(&[d0.clone(), d1.clone()])?;
    let ar_bytes = bytes.min(64 << 20);
    let ar_n = ar_bytes / 4;
    let x = [dev[0].slice(..ar_n)?, dev[1].slice(..ar_n)?];
    for d in 0..2 {
        s[d].write_pageable(&x[d], &pattern(0.0, ar_n))?;
        s[d].synchronize()?;
    }
    let enqueue = |on: &[Stream; 2]| -> cueflow::Result<()> {
        for _ in 0..iters {
            comm.all_reduce(
                &[(&on[0], &x[0], &x[0]), (&on[1], &x[1], &x[1])],
                ReduceOp::Sum,
            )?;
        }
        Ok(())
    };
    // The graphs: the same `iters` calls captured once per device (GR11).
    let cap = [
        Stream::builder(d0).non_blocking().build()?,
        Stream::builder(d1).non_blocking().build()?,
    ];
    for c in &cap {
        c.begin_capture(CaptureMode::Relaxed)?;
    }
    enqueue(&cap)?;
    let execs = [
        cap[0].end_capture()?.instantiate()?,
        cap[1].end_capture()?.instantiate()?,
    ];
    let stream_ms = time_ms(&s, reps, || enqueue(&s))?;
    result(
        tag,
        "allreduce",
        ar_bytes,
        stream_ms / iters as f64,
        (ar_bytes * iters) as f64,
    );
    let graph_ms = time_ms(&s, reps, || {
        execs[0].launch(&s[0])?;
        execs[1].launch(&s[1])
    })?;
    result(
        tag,
        "allreduce_graph",
        ar_bytes,
        graph_ms / iters as f64,
        (ar_bytes * iters) as f64,
    );
    // Both devices start from i % 1024 and every call doubles: element i is i · 2^calls
    // (infinite once it overflows, as in the raw program).
    let calls = 2 * (reps + WARMUP) * iters;
    let mut got = vec![0f32; 8];
    s[0].read_pageable(&mut got, &x[0].slice(..8)?)?;
    for (i, g) in got.iter().enumerate().skip(1) {
        let want = (i as f64 * 2f64.powi(calls as i32)) as f32;
        if *g != want {
            return Err(mismatch(format!(
                "allreduce: out[{i}] = {g}, expected {want}"
            )));
        }
    }
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let list = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .or_else(|| std::env::var("CUEFLOW_DEVICE").ok())
        .unwrap_or_else(|| "host:2x".to_string());
    let devs = Device::open_list(&list)?;
    if devs.len() < 2 {
        return Err(format!(
            "09_multi_memory needs two devices, `{list}` names {}",
            devs.len()
        )
        .into());
    }
    let on_gpu = list.starts_with("cuda");
    run(
        &devs,
        flag("--mib", if on_gpu { 256 } else { 16 }),
        flag("--reps", 11),
        flag("--iters", 20),
    )
}
