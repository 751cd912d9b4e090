//! `cueflow info`: which backends this machine has, their devices and properties, and why a
//! backend is unavailable when it is.

use cueflow::{Device, DeviceProperties};

use crate::errors::CliResult;
use crate::text;

/// Most CUDA ordinals probed.
const MAX_CUDA_DEVICES: usize = 64;

/// Arguments of `cueflow info` (none).
#[derive(clap::Args, Debug)]
pub struct InfoArgs {}

/// Print backends, devices and properties. Never fails because a backend is missing.
pub fn run(_: &InfoArgs) -> CliResult<()> {
    let mut devices: Vec<(String, DeviceProperties)> = Vec::new();
    println!("cueflow {}", env!("CARGO_PKG_VERSION"));
    println!("backends:");
    match Device::host() {
        Ok(d) => {
            println!("  host   available    threads as engines: H2D copy, D2H copy, compute workers, host functions");
            devices.push(("host".into(), d.properties().clone()));
        }
        Err(e) => println!("  host   unavailable  {e}"),
    }
    let mut cuda_error = None;
    for ordinal in 0..MAX_CUDA_DEVICES {
        match Device::cuda(ordinal) {
            Ok(d) => devices.push((format!("cuda:{ordinal}"), d.properties().clone())),
            Err(e) => {
                cuda_error = Some(e);
                break;
            }
        }
    }
    let cuda_count = devices
        .iter()
        .filter(|(n, _)| n.starts_with("cuda"))
        .count();
    match (cuda_count, cuda_error) {
        (0, Some(e)) => println!("  cuda   unavailable  {e}"),
        (0, None) => println!("  cuda   unavailable  no device"),
        (n, _) => println!(
            "  cuda   available    {n} device{}",
            if n == 1 { "" } else { "s" }
        ),
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    println!(
        "default device: {} (CUEFLOW_DEVICE={})",
        Device::env_setting().unwrap_or_else(|| "host".into()),
        Device::env_setting().unwrap_or_else(|| "unset".into())
    );
    println!(
        "tracing: CUEFLOW_TRACE={}",
        env("CUEFLOW_TRACE").unwrap_or_else(|| "unset".into())
    );
    for (name, p) in &devices {
        println!("\ndevice {name}: {}", p.name);
        for (k, v) in properties(p) {
            println!("  {k:<26} {v}");
        }
        if !p.driver_features.is_empty() {
            println!("  driver features (the floor is CUDA 12.0):");
            for line in features(p) {
                println!("    {line}");
            }
        }
    }
    Ok(())
}

/// `CUDA 12.4` for 12040.
fn version(v: u32) -> String {
    format!("CUDA {}.{}", v / 1000, v % 1000 / 10)
}

/// One line per version-dependent feature: available, or the version it needs and what runs
/// instead.
fn features(p: &DeviceProperties) -> Vec<String> {
    let width = p
        .driver_features
        .iter()
        .map(|f| f.name.len())
        .max()
        .unwrap_or(0);
    p.driver_features
        .iter()
        .map(|f| {
            let state = match (f.available, f.otherwise) {
                (true, _) => "available".to_string(),
                (false, Some(instead)) => {
                    format!("needs {}; meanwhile {instead}", version(f.needs))
                }
                (false, None) => format!("needs {} (Unsupported here)", version(f.needs)),
            };
            format!("{:<width$}  {state}", f.name)
        })
        .collect()
}

/// The properties of a device as (label, value) lines.
fn properties(p: &DeviceProperties) -> Vec<(&'static str, String)> {
    vec![
        ("backend", format!("{} (ordinal {})", p.backend, p.ordinal)),
        (
            "async engines",
            format!("{} copy engine(s) that run beside kernels", p.async_engines),
        ),
        (
            "compute units",
            format!(
                "{} {}",
                p.compute_units,
                if p.backend == "host" {
                    "workers"
                } else {
                    "multiprocessors"
                }
            ),
        ),
        (
            "stream priorities",
            format!(
                "{} (least) .. {} (greatest)",
                p.priority_least, p.priority_greatest
            ),
        ),
        ("memory", text::bytes(p.total_memory)),
        ("max threads per block", p.max_threads_per_block.to_string()),
        (
            "max grid",
            format!("{} × {} × {}", p.max_grid[0], p.max_grid[1], p.max_grid[2]),
        ),
        (
            "max shared memory/block",
            text::bytes(u64::from(p.max_shared_per_block)),
        ),
        (
            "stream-ordered memory",
            if p.memory_pools { "yes" } else { "no" }.into(),
        ),
        (
            "driver version",
            format!(
                "CUDA {}.{}{}",
                p.driver_version / 1000,
                p.driver_version % 1000 / 10,
                if p.backend == "host" {
                    " (emulated: the semantics the host backend follows)"
                } else {
                    ""
                }
            ),
        ),
        ("compute mode", p.compute_mode.to_string()),
        (
            "NVRTC version",
            match (p.nvrtc_version, p.backend) {
                (Some(v), _) => version(v).replace("CUDA", "NVRTC"),
                (None, "host") => "none (CUDA C runs through the system's C++ compiler)".into(),
                (None, _) => "none found (CUDA C cannot be compiled; PTX and cubins load)".into(),
            },
        ),
    ]
}
