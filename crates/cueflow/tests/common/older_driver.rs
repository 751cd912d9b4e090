//! A CUDA feature newer than the driver is `Error::Unsupported` naming the version it needs, in
//! words every such error uses ("… needs a CUDA 12.3 driver or newer (this driver is CUDA
//! 12.2)"). A test of such a feature on such a driver is skipped, said on stderr, and passes —
//! only when the version named is really newer than the device's driver, so an `Unsupported`
//! on a driver that has the feature still fails the test (`scripts/gpu-driver-floor.sh` runs
//! the suites through drivers of CUDA 12.0 to 12.8 this way).

/// The driver version (1000 × major + 10 × minor) an `Unsupported` message says it needs.
pub fn needed(msg: &str) -> Option<u32> {
    let v = msg.split("needs a CUDA ").nth(1)?.split(' ').next()?;
    let (major, minor) = v.split_once('.')?;
    Some(major.parse::<u32>().ok()? * 1000 + minor.parse::<u32>().ok()? * 10)
}

/// Run `body` for test `name` on a device whose driver is `driver`; a panic whose message names
/// a version newer than `driver` (see the module docs) is a skip, any other is the test's.
pub fn run_or_skip(name: &str, driver: u32, body: impl FnOnce()) {
    let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) else {
        return;
    };
    let msg = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("");
    match needed(msg) {
        Some(v) if v > driver && msg.contains("unsupported") => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP {name} (driver CUDA {}.{}): {msg}",
                driver / 1000,
                driver % 1000 / 10
            );
        }
        _ => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_an_unsupported_error_names() {
        let m = "called `Result::unwrap()` on an `Err` value: unsupported: conditional graph \
                 nodes (if, while) needs a CUDA 12.3 driver or newer (this driver is CUDA 12.2)";
        assert_eq!(super::needed(m), Some(12030));
        assert_eq!(super::needed("unsupported: something else"), None);
    }
}
