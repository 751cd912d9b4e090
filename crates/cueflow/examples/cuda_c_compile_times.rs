//! The compile budget of CUDA C on the host backend (issue 30: cold ≤ 1.5 s for a sample's
//! kernel, cached ≤ 1 ms): every kernel of the sample ports (`crates/cueflow-samples/kernels`)
//! prepared with a fresh cache directory (cold: preprocess, lane compiler, C++ compiler), then
//! as a new kernel object over the same source (cached on disk), with the path it took.
//!
//! ```text
//! cargo run --release -p cueflow --example cuda_c_compile_times
//! ```

use std::time::Instant;

use cueflow::{CompileOptions, Device, Kernel};

#[path = "../tests/common/kernel_entries.rs"]
mod kernel_entries;
use kernel_entries::kernel_entries;

fn main() -> cueflow::Result<()> {
    let dir = std::env::temp_dir().join(format!("cueflow-compile-times-{}", std::process::id()));
    std::env::set_var("CUEFLOW_KERNEL_CACHE", &dir);
    let dev = Device::host()?;
    let samples = concat!(env!("CARGO_MANIFEST_DIR"), "/../cueflow-samples/kernels");
    let mut files: Vec<_> = std::fs::read_dir(samples)
        .expect("the sample ports' kernels")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let (mut cold_all, mut cached_all) = (Vec::new(), Vec::new());
    println!("| file | kernel | path | cold ms | cached ms |");
    println!("|---|---|---|---|---|");
    for p in files {
        let text: &'static str = Box::leak(std::fs::read_to_string(&p).unwrap().into_boxed_str());
        for e in kernel_entries(text) {
            let build = || {
                let opts = CompileOptions::new()
                    .header("cueflow_conditional.h", cueflow::CONDITIONAL_CUDA_H);
                Kernel::new(e.as_str())
                    .cuda_source(text, &e)
                    .cuda_options(opts)
                    .build()
            };
            let t = Instant::now();
            let k = build();
            k.prepare(&dev)?;
            let cold = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let k2 = build();
            k2.prepare(&dev)?;
            let cached = t.elapsed().as_secs_f64() * 1e3;
            let path = k
                .host_path(&dev)?
                .map_or("-".to_string(), |p| p.to_string());
            let file = p.file_name().unwrap().to_string_lossy();
            println!("| {file} | `{e}` | {path} | {cold:.0} | {cached:.2} |");
            cold_all.push(cold);
            cached_all.push(cached);
        }
    }
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!(
        "{} kernels: cold median {:.0} ms, max {:.0} ms (budget 1500); cached median {:.2} ms, max {:.2} ms (budget 1)",
        cold_all.len(),
        median(&mut cold_all.clone()),
        max(&cold_all),
        median(&mut cached_all.clone()),
        max(&cached_all)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
