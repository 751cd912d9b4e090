//! Device work from async tasks: a tokio program keeps four streams busy — each task uploads
//! its batches, runs the demo's compute kernel on them and downloads them, awaiting each
//! batch's completion instead of blocking a thread — then checks every result.
//!
//! ```text
//! cargo run --release --example 07_async [-- BATCHES [MiB_PER_BATCH]]
//! cargo run --release --example 07_async -- --latency [N]
//! ```
//! `--latency` measures how long a task takes to wake after its work finished: a host
//! function notes the time at the end of the work, the completion right after it wakes the
//! task, which notes the time it resumed; median and p99 over `N` (default 2000) rounds. Run it
//! with `CUEFLOW_WAKE=watcher` for the earlier polling watcher. Device: `CUEFLOW_DEVICE`.

use std::sync::Arc;
use std::time::Instant;

use cueflow::{kernels, Device, DeviceBuffer, PinnedBuffer, Stream};
use parking_lot::Mutex;

const STEPS: u32 = 20;

fn main() -> cueflow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dev = Device::from_env()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .expect("a tokio runtime");
    if args.first().map(String::as_str) == Some("--latency") {
        let n = args
            .get(1)
            .map_or(2000, |a| a.parse().expect("N is a number"));
        return rt.block_on(latency(dev, n));
    }
    let batches: usize = args
        .first()
        .map_or(16, |a| a.parse().expect("BATCHES is a number"));
    let mib: usize = args
        .get(1)
        .map_or(16, |a| a.parse().expect("MiB is a number"));
    let t = Instant::now();
    let done = rt.block_on(four_streams(dev.clone(), batches, mib << 18))?;
    println!(
        "{} on {}: 4 tasks × {batches} batches of {mib} MiB, {done} elements verified in {:.1} ms",
        std::env::var("CUEFLOW_WAKE").unwrap_or_else(|_| "host-function wake".into()),
        dev.properties().name,
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// Four tasks, one stream each: upload → compute → download per batch, awaiting each batch.
pub async fn four_streams(dev: Device, batches: usize, n: usize) -> cueflow::Result<usize> {
    let mut tasks = Vec::new();
    for task in 0..4 {
        let dev = dev.clone();
        tasks.push(tokio::spawn(async move {
            let s = Stream::builder(&dev).non_blocking().build()?;
            let d = DeviceBuffer::<f32>::new(&dev, n)?;
            let mut host = PinnedBuffer::<f32>::new(&dev, n)?;
            let mut checked = 0;
            for b in 0..batches {
                let x = (task * 1000 + b) as f32 * 1e-3;
                host.write()?.fill(x);
                s.copy_h2d(&d, &host)?;
                kernels::compute(&s, &d, STEPS)?;
                s.copy_d2h(&mut host, &d)?;
                s.completion()?.await?; // the task sleeps; no thread blocks
                let want = kernels::compute_reference(x, STEPS);
                let got = host.read()?;
                if let Some(i) = got.iter().position(|v| v.to_bits() != want.to_bits()) {
                    panic!(
                        "task {task}, batch {b}: element {i} is {}, want {want}",
                        got[i]
                    );
                }
                checked += got.len();
            }
            Ok::<usize, cueflow::Error>(checked)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("a task panicked")?;
    }
    Ok(total)
}

/// Wake latency: median and p99 of (task resumed − work ended) over `n` rounds.
pub async fn latency(dev: Device, n: usize) -> cueflow::Result<()> {
    let s = Stream::builder(&dev).non_blocking().build()?;
    let ended: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let mut us = Vec::with_capacity(n);
    for round in 0..n + 50 {
        let mark = ended.clone();
        // Some work, then the host function that notes when the stream got past it.
        kernels::empty(&s)?;
        s.host_fn(move || *mark.lock() = Some(Instant::now()))?;
        s.completion()?.await?;
        let resumed = Instant::now();
        let end = ended
            .lock()
            .take()
            .expect("the host function ran before the wake");
        if round >= 50 {
            us.push(resumed.duration_since(end).as_secs_f64() * 1e6);
        }
    }
    us.sort_by(f64::total_cmp);
    let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    println!(
        "RESULT wake mode={} device=\"{}\" rounds={n} median_us={:.1} p99_us={:.1} max_us={:.1}",
        std::env::var("CUEFLOW_WAKE").unwrap_or_else(|_| "hostfn".into()),
        dev.properties().name,
        q(0.5),
        q(0.99),
        us[us.len() - 1]
    );
    Ok(())
}
