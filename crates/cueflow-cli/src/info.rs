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
        env("CUEFLOW_DEVICE").unwrap_or_else(|| "host".into()),
        env("CUEFLOW_DEVICE").unwrap_or_else(|| "unset".into())
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
    }
    Ok(())
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
    ]
}
