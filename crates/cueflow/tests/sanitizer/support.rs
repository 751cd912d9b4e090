//! The corpus runner and small helpers.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytemuck::Pod;
use cueflow::{Device, DeviceBuffer, RaceReport, SanitizeMode, Stream};

#[path = "../common/older_driver.rs"]
mod older_driver;

/// The line of a call, taken on the call's own line: `let w = at!(s.memset(&d, 0));`.
#[macro_export]
macro_rules! at {
    ($call:expr) => {{
        let line = line!();
        $call.unwrap();
        line
    }};
}

/// GPU programs run one at a time (they share the device and its driver context).
static GPU: Mutex<()> = Mutex::new(());

fn open(backend: &str) -> Option<Device> {
    match backend {
        "host" => Some(Device::host().expect("the host backend is always available")),
        _ => match Device::cuda(0) {
            Ok(d) => Some(d),
            Err(e) => {
                if std::env::var("CUEFLOW_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                    panic!("CUEFLOW_REQUIRE_CUDA=1 but the CUDA backend is unavailable: {e}");
                }
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    use std::io::Write;
                    let _ = writeln!(
                        std::io::stderr(),
                        "SKIP cuda: the sanitizer corpus's cuda tests pass without running: {e}"
                    );
                });
                None
            }
        },
    }
}

fn with_device(backend: &str, f: impl FnOnce(Device)) {
    let _serial = (backend != "host").then(|| GPU.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(dev) = open(backend) {
        let driver = dev.properties().driver_version;
        older_driver::run_or_skip(&format!("{backend} corpus"), driver, || f(dev))
    }
}

fn describe(reports: &[RaceReport]) -> String {
    reports
        .iter()
        .map(|r| format!("{r}\n"))
        .collect::<Vec<_>>()
        .join("")
}

/// Run a racy program with the sanitizer warning; every race it names must be reported with
/// exactly its two call sites in this file.
pub fn racy(backend: &str, program: fn(&Device) -> Vec<(u32, u32)>) {
    racy_in(backend, "racy.rs", program)
}

/// [`racy`] for a program written in `file` of the corpus.
pub fn racy_in(backend: &str, file: &str, program: fn(&Device) -> Vec<(u32, u32)>) {
    with_device(backend, |dev| {
        dev.set_sanitize(SanitizeMode::Warn);
        let expected = program(&dev);
        dev.synchronize().unwrap();
        let reports = dev.sanitizer_reports();
        assert!(!expected.is_empty(), "a racy program must name its races");
        for (earlier, later) in expected {
            let found = reports.iter().any(|r| {
                r.earlier.site.file().ends_with(file)
                    && r.later.site.file().ends_with(file)
                    && r.earlier.site.line() == earlier
                    && r.later.site.line() == later
            });
            assert!(
                found,
                "no report for the race between lines {earlier} and {later} of {file}; \
                 reports:\n{}",
                describe(&reports)
            );
        }
    });
}

/// Run a correctly synchronized program with the sanitizer warning: it must report nothing.
pub fn correct(backend: &str, program: fn(&Device)) {
    with_device(backend, |dev| {
        dev.set_sanitize(SanitizeMode::Warn);
        program(&dev);
        dev.synchronize().unwrap();
        let reports = dev.sanitizer_reports();
        assert!(
            reports.is_empty(),
            "a correct program was reported:\n{}",
            describe(&reports)
        );
    });
}

/// Run a test that sets the modes itself.
pub fn plain(backend: &str, test: fn(&Device)) {
    with_device(backend, |dev| test(&dev));
}

/// A non-blocking stream (no part in ST4: orders with nothing by itself).
pub fn stream(dev: &Device) -> Stream {
    Stream::builder(dev).non_blocking().build().unwrap()
}

/// Device memory holding `data`, fully arrived and observed by the host (so every later call
/// is ordered after the upload).
pub fn upload<T: Pod>(dev: &Device, data: &[T]) -> DeviceBuffer<T> {
    let buf = DeviceBuffer::<T>::new(dev, data.len()).unwrap();
    let s = stream(dev);
    s.write_pageable(&buf, data).unwrap();
    s.synchronize().unwrap();
    buf
}

/// `n` copies of `v` on the device.
pub fn filled(dev: &Device, n: usize, v: f32) -> DeviceBuffer<f32> {
    upload(dev, &vec![v; n])
}

/// Elements in most buffers of the corpus.
pub const N: usize = 4096;

/// A host-function gate: work enqueued on the stream after it waits until [`Latch::open`] (or
/// the drop, or 20 s).
pub struct Latch(Arc<(Mutex<bool>, Condvar)>);

impl Latch {
    /// Enqueue the gate on `s`.
    pub fn block(s: &Stream) -> Latch {
        let l = Arc::new((Mutex::new(false), Condvar::new()));
        let inner = l.clone();
        s.host_fn(move || {
            let (m, cv) = &*inner;
            let g = m.lock().unwrap();
            let _ = cv.wait_timeout_while(g, Duration::from_secs(20), |open| !*open);
        })
        .unwrap();
        Latch(l)
    }

    /// Let the stream go on.
    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }
}

impl Drop for Latch {
    fn drop(&mut self) {
        self.open();
    }
}
