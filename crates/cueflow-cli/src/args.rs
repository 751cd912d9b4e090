//! Argument values shared by the subcommands (devices, `N|auto` counts, `K|balanced` compute
//! steps, sizes in MiB) and the checks that involve several arguments at once. Everything here
//! runs before any device work, and every failure is a usage error (exit code 2).

use std::path::Path;
use std::str::FromStr;

use cueflow::{Device, DeviceSpec};

use crate::errors::{CliError, CliResult};

/// A stream or chunk count: a positive number, or `auto` (let the model choose); the
/// library's, so the command line parses and prints it as the API does.
pub use cueflow::pipeline::Count;

/// Compute steps per element: a number, or `balanced` (the kernel takes about as long as the
/// host-to-device copy: equal stages, where streams help most).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Iters {
    /// Found with `PipelineBuffers::balance_iters`.
    #[default]
    Balanced,
    /// Exactly this many steps.
    Fixed(u32),
}

impl FromStr for Iters {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("balanced") {
            return Ok(Iters::Balanced);
        }
        s.parse::<u32>()
            .map(Iters::Fixed)
            .map_err(|_| "expected a non-negative integer or `balanced`".into())
    }
}

/// Parse a device name (`host`, `cuda`, `cuda:N`).
pub fn parse_device(s: &str) -> Result<DeviceSpec, String> {
    s.parse::<DeviceSpec>().map_err(|e| e.to_string())
}

/// Parse a size in MiB: a positive, finite number (fractions allowed).
pub fn parse_mib(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a positive number of MiB".into()),
        Err(_) => Err("expected a number of MiB, such as 64 or 0.5".into()),
    }
}

/// Parse a positive, finite number.
pub fn parse_positive(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err("expected a positive number".into()),
    }
}

/// Parse a non-negative, finite number.
pub fn parse_non_negative(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("expected a number ≥ 0".into()),
    }
}

/// Parse a slowdown factor: a finite number ≥ 1.
pub fn parse_factor(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 1.0 => Ok(v),
        _ => Err("expected a number ≥ 1".into()),
    }
}

/// Number of `f32` elements in `mib` MiB; a usage error when that is none, or more than any
/// machine can address.
pub fn elements_for_mib(mib: f64) -> CliResult<usize> {
    let elements = (mib * 1024.0 * 1024.0 / 4.0).floor();
    if elements < 1.0 {
        return Err(CliError::usage(format!(
            "--size {mib} MiB holds no f32 element (the smallest size is 4 bytes)"
        )));
    }
    if elements > (isize::MAX as usize / 4) as f64 {
        return Err(CliError::usage(format!("--size {mib} MiB is too large")));
    }
    Ok(elements as usize)
}

/// Check `--streams` and `--chunks` against each other and against the buffer.
pub fn check_layout(streams: Count, chunks: Count, elements: usize) -> CliResult<()> {
    if let (Count::Fixed(s), Count::Fixed(c)) = (streams, chunks) {
        if s > c {
            return Err(CliError::usage(format!(
                "--streams {s} is more than --chunks {c}: every stream needs at least one chunk"
            )));
        }
    }
    if let Count::Fixed(c) = chunks {
        if c as usize > elements {
            return Err(CliError::usage(format!(
                "--chunks {c} is more than the {elements} elements of the buffer"
            )));
        }
    }
    if let Count::Fixed(s) = streams {
        if s as usize > elements {
            return Err(CliError::usage(format!(
                "--streams {s} is more than the {elements} elements of the buffer"
            )));
        }
    }
    Ok(())
}

/// Compute workers of the host device for the pipeline commands: every core but two, at least
/// one. The pipeline keeps three engines busy at once (H2D, compute, D2H); on a GPU each has its
/// own hardware, on the host each needs a core, and a compute worker preempted by a copy thread
/// stalls its whole kernel (measured on 2 cores: 1.7× speedup with one worker, 1.1–1.4× with
/// two).
pub fn pipeline_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    cores.saturating_sub(2).max(1)
}

/// The device named on the command line, else by `CUEFLOW_DEVICE`, else `host`; a host device
/// gets `host_workers` compute workers when given (else [`pipeline_workers`]). A bad `CUEFLOW_DEVICE`,
/// or workers for a CUDA device, is a usage error; a device that cannot be opened is a device
/// error.
pub fn open_device(spec: Option<DeviceSpec>, host_workers: Option<usize>) -> CliResult<Device> {
    let spec = match spec {
        Some(s) => s,
        None => match Device::env_setting() {
            Some(v) => {
                parse_device(&v).map_err(|e| CliError::usage(format!("CUEFLOW_DEVICE: {e}")))?
            }
            None => DeviceSpec::Host(0),
        },
    };
    match (spec, host_workers) {
        (DeviceSpec::Host(n), Some(w)) => Ok(Device::host_n(n, w)?),
        (DeviceSpec::Host(n), None) => Ok(Device::host_n(n, pipeline_workers())?),
        (DeviceSpec::Cuda(_), Some(_)) => Err(CliError::usage(format!(
            "--host-workers applies to the host device, not {spec}"
        ))),
        (DeviceSpec::Cuda(_), None) => Ok(Device::open(spec)?),
    }
}

/// The devices named on the command line (a list: `host:2x`, `cuda:all`, `cuda:0,cuda:1`), else
/// by `CUEFLOW_DEVICE`, else `host`. A list that names no device is a usage error.
pub fn device_list(arg: Option<&str>) -> CliResult<Vec<DeviceSpec>> {
    let (text, origin) = match arg {
        Some(s) => (s.to_string(), "--device"),
        None => match Device::env_setting() {
            Some(v) => (v, "CUEFLOW_DEVICE"),
            None => return Ok(vec![DeviceSpec::Host(0)]),
        },
    };
    DeviceSpec::parse_list(&text).map_err(|e| match e {
        cueflow::Error::UnknownDevice(_) => CliError::usage(format!("{origin}: {e}")),
        e => e.into(),
    })
}

/// Refuse, before allocating, a run that needs `buffers` buffers of `bytes` bytes when the
/// device reports less memory than that (the host backend's device memory is this machine's
/// memory, and its pinned memory too).
pub fn check_memory(dev: &Device, bytes: u64, buffers: u64, what: &str) -> CliResult<()> {
    let total = dev.properties().total_memory;
    let need = bytes.saturating_mul(buffers);
    if total > 0 && need > total / 10 * 9 {
        return Err(CliError::Memory(format!(
            "{what} needs about {} ({buffers} × {}), and {} has {}",
            crate::text::bytes(need),
            crate::text::bytes(bytes),
            dev.properties().name,
            crate::text::bytes(total)
        )));
    }
    Ok(())
}

/// Create the output directory (and its parents) if needed.
pub fn prepare_out_dir(dir: &Path) -> CliResult<()> {
    std::fs::create_dir_all(dir).map_err(CliError::io(format!(
        "cannot create output directory {}",
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!("auto".parse::<Count>(), Ok(Count::Auto));
        assert_eq!("AUTO".parse::<Count>(), Ok(Count::Auto));
        assert_eq!("4".parse::<Count>(), Ok(Count::Fixed(4)));
        assert!("0".parse::<Count>().is_err());
        assert!("-1".parse::<Count>().is_err());
        assert!("four".parse::<Count>().is_err());
        assert_eq!(Count::Fixed(3).to_string(), "3");
    }

    #[test]
    fn iters_and_sizes() {
        assert_eq!("balanced".parse::<Iters>(), Ok(Iters::Balanced));
        assert_eq!("0".parse::<Iters>(), Ok(Iters::Fixed(0)));
        assert!("x".parse::<Iters>().is_err());
        assert_eq!(parse_mib("0.5"), Ok(0.5));
        assert!(parse_mib("0").is_err());
        assert!(parse_mib("inf").is_err());
        assert!(parse_mib("nan").is_err());
        assert_eq!(elements_for_mib(1.0).unwrap(), 1 << 18);
        assert!(elements_for_mib(1e-9).is_err());
        assert!(elements_for_mib(1e30).is_err());
    }

    #[test]
    fn layouts() {
        use Count::*;
        assert!(check_layout(Fixed(4), Fixed(16), 100).is_ok());
        assert!(check_layout(Fixed(8), Fixed(4), 100).is_err());
        assert!(check_layout(Auto, Fixed(101), 100).is_err());
        assert!(check_layout(Fixed(101), Auto, 100).is_err());
        assert!(check_layout(Auto, Auto, 1).is_ok());
        let e = check_layout(Fixed(8), Fixed(4), 100).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
