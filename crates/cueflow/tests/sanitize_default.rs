//! The race sanitizer is on by default where bugs are looked for: a debug build (cueflow built
//! with debug assertions, as `cargo build` and `cargo test` do without `--release`) warns about
//! every race unless `CUEFLOW_SANITIZE` says otherwise; a release build leaves it off, as Rust
//! checks integer overflow in debug builds only.
//!
//! `.ci/run` runs this file in a debug build as well as in the release test run; the rule
//! itself (value × build → mode) is a unit test of `core::tracking::sanitizer`.

use cueflow::{kernels, Device, DeviceBuffer, PinnedBuffer, SanitizeMode, Stream};

/// The classic bug, on the host backend: an upload on one stream, a kernel on another, no event
/// between them. AC6 runs the two in enqueue order there, so the results come out right and
/// only the sanitizer can tell that a GPU would race. Returns the device's reports.
fn upload_then_kernel_without_an_event() -> (SanitizeMode, usize) {
    let dev = Device::host().unwrap();
    let copy = Stream::builder(&dev).non_blocking().build().unwrap();
    let compute = Stream::builder(&dev).non_blocking().build().unwrap();
    let host = PinnedBuffer::from_slice(&dev, &[1.0f32; 4096]).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, 4096).unwrap();
    copy.copy_h2d(&d, &host).unwrap();
    kernels::scale(&compute, &d, 2.0).unwrap(); // missing: compute.wait_event(after the copy)
    dev.synchronize().unwrap();
    assert!(d.to_vec().unwrap().iter().all(|&x| x == 2.0));
    (dev.sanitize_mode(), dev.sanitizer_reports().len())
}

fn env_unset() -> bool {
    let unset = std::env::var_os("CUEFLOW_SANITIZE").is_none();
    if !unset {
        eprintln!("SKIP: CUEFLOW_SANITIZE is set, so the build's default is not in force");
    }
    unset
}

#[test]
#[cfg(debug_assertions)]
fn a_debug_build_reports_a_cross_stream_race_by_default() {
    if env_unset() {
        assert_eq!(
            upload_then_kernel_without_an_event(),
            (SanitizeMode::Warn, 1)
        );
    }
}

#[test]
#[cfg(not(debug_assertions))]
fn a_release_build_leaves_the_sanitizer_off_by_default() {
    if env_unset() {
        assert_eq!(
            upload_then_kernel_without_an_event(),
            (SanitizeMode::Off, 0)
        );
    }
}
