//! Zero-copy kernel bandwidth and managed-memory prefetch bandwidth through cueflow (issue 19),
//! measured as `benches/cuda/zero_copy.cu` and `benches/cuda/managed_prefetch.cu` measure them
//! with raw CUDA, so the two can be compared in one run (`benches/cuda/run.sh` runs all three).
//!
//! * zero copy: a kernel (`y[i] = x[i] + 1`, one thread per element) reads mapped pinned host
//!   memory in place and writes device memory ("read"), then the reverse ("write").
//! * managed: managed memory written by the host is prefetched to the device, a kernel adds 1
//!   in place, and it is prefetched back to the host; each prefetch is timed.
//!
//! Times are event times on one non-blocking stream, the median of `--reps` after one warm-up.
//!
//! ```sh
//! CUEFLOW_DEVICE=cuda:0 cargo run --release -p cueflow --example host_memory_bandwidth -- --mib 256
//! cargo run --release -p cueflow --example host_memory_bandwidth   # host backend, 16 MiB
//! ```

use std::sync::LazyLock;

use cueflow::{
    Device, DeviceBuffer, Event, Kernel, KernelArgs, LaunchConfig, ManagedBuffer, MemLocation,
    PinnedBuffer, PinnedFlags, Stream,
};

static ADD_ONE: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("add_one")
        .host(|ctx, args| {
            let x = args.input::<f32>(0);
            let lo = ctx.thread_range().start as usize;
            for (k, y) in args.tile_mut::<f32>(1).iter_mut().enumerate() {
                *y = x[lo + k] + 1.0;
            }
        })
        .cuda_source(
            r#"extern "C" __global__ void add_one(const float* x, float* y, unsigned long long n) {
                unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
                if (i < n) y[i] = x[i] + 1.0f;
            }"#,
            "add_one",
        )
        .build()
});

static ADD_ONE_IN_PLACE: LazyLock<Kernel> = LazyLock::new(|| {
    Kernel::new("add_one_in_place")
        .host(|_, args| {
            for y in args.tile_mut::<f32>(0) {
                *y += 1.0;
            }
        })
        .cuda_source(
            r#"extern "C" __global__ void add_one_in_place(float* y, unsigned long long n) {
                unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
                if (i < n) y[i] += 1.0f;
            }"#,
            "add_one_in_place",
        )
        .build()
});

fn arg(name: &str) -> Option<usize> {
    let mut args = std::env::args();
    while let Some(a) = args.next() {
        if a == name {
            return args.next().and_then(|v| v.parse().ok());
        }
    }
    None
}

fn median(mut v: Vec<f32>) -> f32 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2]
}

/// Time `work` on `s` with events: the median of `reps` after one warm-up, in ms.
fn timed(
    s: &Stream,
    reps: usize,
    mut work: impl FnMut() -> cueflow::Result<()>,
) -> cueflow::Result<f32> {
    let (a, b) = (Event::new(s.device())?, Event::new(s.device())?);
    let mut times = Vec::new();
    for r in 0..=reps {
        a.record(s)?;
        work()?;
        b.record(s)?;
        b.synchronize()?;
        if r > 0 {
            times.push(Event::elapsed_ms(&a, &b)?);
        }
    }
    Ok(median(times))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::from_env()?;
    let gpu = dev.properties().backend == "cuda";
    let mib = arg("--mib").unwrap_or(if gpu { 256 } else { 16 });
    let reps = arg("--reps").unwrap_or(9);
    let n = (mib << 20) / 4;
    let gb = (n * 4) as f64 / 1e9;
    let cfg = LaunchConfig::for_elements(n, 256);
    let s = Stream::builder(&dev).non_blocking().build()?;
    println!(
        "device: {} ({mib} MiB, median of {reps})",
        dev.properties().name
    );

    // Zero copy.
    let mut host = PinnedBuffer::<f32>::with_flags(&dev, n, PinnedFlags::default().mapped())?;
    for (i, x) in host.write()?.iter_mut().enumerate() {
        *x = (i % 1024) as f32;
    }
    let d = DeviceBuffer::<f32>::new(&dev, n)?;
    let read_ms = timed(&s, reps, || {
        let args = KernelArgs::new()
            .read_mapped(&host)
            .write(&d)
            .scalar(n as u64);
        s.launch(&ADD_ONE, cfg, args)
    })?;
    let write_ms = timed(&s, reps, || {
        let args = KernelArgs::new()
            .read(&d)
            .write_mapped(&mut host)
            .scalar(n as u64);
        s.launch(&ADD_ONE, cfg, args)
    })?;
    let ok = host
        .read()?
        .iter()
        .enumerate()
        .step_by(4097)
        .all(|(i, &v)| v == (i % 1024) as f32 + 2.0);
    if !ok {
        return Err("zero copy: wrong values".into());
    }
    println!(
        "RESULT cueflow_zero_copy mib={mib} read_ms={read_ms:.3} read_gbs={:.2} \
         write_ms={write_ms:.3} write_gbs={:.2}",
        gb / (read_ms as f64 / 1e3),
        gb / (write_ms as f64 / 1e3)
    );
    drop((host, d));

    // Managed prefetch.
    if !dev.properties().concurrent_managed_access {
        println!("RESULT cueflow_managed_prefetch skipped: concurrentManagedAccess = 0");
        return Ok(());
    }
    let (free, _) = dev.mem_info()?;
    if (n * 4) as u64 > free / 4 {
        return Err(format!("{mib} MiB is more than a quarter of free memory").into());
    }
    let mut m = ManagedBuffer::<f32>::new(&dev, n)?;
    for (i, x) in m.write()?.iter_mut().enumerate() {
        *x = (i % 1024) as f32;
    }
    let (mut to_dev, mut to_host) = (Vec::new(), Vec::new());
    let (a, b) = (Event::new(&dev)?, Event::new(&dev)?);
    for r in 0..=reps {
        a.record(&s)?;
        s.prefetch(&m, .., MemLocation::Device)?;
        b.record(&s)?;
        b.synchronize()?;
        let dev_ms = Event::elapsed_ms(&a, &b)?;
        s.launch(
            &ADD_ONE_IN_PLACE,
            cfg,
            KernelArgs::new().write_mapped(&mut m).scalar(n as u64),
        )?;
        a.record(&s)?;
        s.prefetch(&m, .., MemLocation::Host)?;
        b.record(&s)?;
        b.synchronize()?;
        if r > 0 {
            to_dev.push(dev_ms);
            to_host.push(Event::elapsed_ms(&a, &b)?);
        }
    }
    let ok = m
        .read()?
        .iter()
        .enumerate()
        .step_by(4097)
        .all(|(i, &v)| v == (i % 1024) as f32 + (reps + 1) as f32);
    if !ok {
        return Err("managed: wrong values".into());
    }
    let (dm, hm) = (median(to_dev), median(to_host));
    println!(
        "RESULT cueflow_managed_prefetch mib={mib} to_device_ms={dm:.3} to_device_gbs={:.2} \
         to_host_ms={hm:.3} to_host_gbs={:.2}",
        gb / (dm as f64 / 1e3),
        gb / (hm as f64 / 1e3)
    );
    Ok(())
}
