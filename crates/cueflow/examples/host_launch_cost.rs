//! What a kernel launch costs on the host backend: a Rust closure against the same empty kernel
//! given as CUDA C, which runs in the device's kernel worker process (HK3), per launch of a
//! stream of launches (`stream`: `calls` launches, then one synchronize) and per launch that is
//! waited for (`sync`: launch, synchronize). Rounds of the two alternate in one process, and
//! each figure is the median over rounds of the wall time per launch, so a shared machine's
//! noise falls on both alike. `c+read` is the C kernel with an argument declared read-only (the
//! worker maps its pages read-only while it runs, AC7).
//!
//! Run: `cargo run --release -p cueflow --example host_launch_cost [rounds] [calls] [kind]`.
//! Prints one `kind mode median_ns` line per row and the ratios of C to closure; with `kind`
//! (`closure`, `c` or `c+read`) only that kind runs, for counting its system calls
//! (`strace -f -c`) or context switches (`perf stat`) per launch.

use std::time::Instant;

use cueflow::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Result, Stream};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

const SOURCE: &str = r#"
extern "C" __global__ void cf_noop(float* out) {}
extern "C" __global__ void cf_noop_read(const float* in, float* out) {}
"#;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let rounds = args.next().flatten().unwrap_or(21);
    let calls = args.next().flatten().unwrap_or(500);
    let only = std::env::args().nth(3);
    let dev = Device::host()?;
    let s = Stream::new(&dev)?;
    let (input, out) = (
        DeviceBuffer::<f32>::new(&dev, 1024)?,
        DeviceBuffer::<f32>::new(&dev, 1024)?,
    );
    let closure = Kernel::new("noop").host(|_, _| {}).build();
    let c = Kernel::new("cf_noop")
        .cuda_source(SOURCE, "cf_noop")
        .build();
    let c_read = Kernel::new("cf_noop_read")
        .cuda_source(SOURCE, "cf_noop_read")
        .build();
    let cfg = LaunchConfig::new(1, 32);
    type Launch<'a> = Box<dyn Fn() -> Result<()> + 'a>;
    let kinds: Vec<(&str, Launch)> = vec![
        (
            "closure",
            Box::new(|| s.launch(&closure, cfg, KernelArgs::new().write(&out))),
        ),
        (
            "c",
            Box::new(|| s.launch(&c, cfg, KernelArgs::new().write(&out))),
        ),
        (
            "c+read",
            Box::new(|| s.launch(&c_read, cfg, KernelArgs::new().read(&input).write(&out))),
        ),
    ];
    let kinds: Vec<(&str, Launch)> = kinds
        .into_iter()
        .filter(|(name, _)| only.as_deref().is_none_or(|o| o == *name))
        .collect();
    for (_, launch) in &kinds {
        launch()?; // compiled (or found in the cache) and the worker started, untimed
    }
    s.synchronize()?;
    let mut stream = vec![Vec::new(); kinds.len()];
    let mut sync = vec![Vec::new(); kinds.len()];
    for _ in 0..rounds {
        for (k, (_, launch)) in kinds.iter().enumerate() {
            let t = Instant::now();
            for _ in 0..calls {
                launch()?;
            }
            s.synchronize()?;
            stream[k].push(t.elapsed().as_nanos() as f64 / calls as f64);
            let t = Instant::now();
            for _ in 0..calls / 5 {
                launch()?;
                s.synchronize()?;
            }
            sync[k].push(t.elapsed().as_nanos() as f64 / (calls / 5) as f64);
        }
    }
    let stream: Vec<f64> = stream.into_iter().map(median).collect();
    let sync: Vec<f64> = sync.into_iter().map(median).collect();
    for (k, (name, _)) in kinds.iter().enumerate() {
        println!("{name:8} stream {:9.0}", stream[k]);
        println!("{name:8} sync   {:9.0}", sync[k]);
    }
    if only.is_some() {
        return Ok(());
    }
    for (k, (name, _)) in kinds.iter().enumerate().skip(1) {
        println!(
            "{name} / closure: stream {:.2}, sync {:.2}",
            stream[k] / stream[0],
            sync[k] / sync[0]
        );
    }
    Ok(())
}
