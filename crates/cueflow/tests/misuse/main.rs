//! Every misuse the API refuses, one test each: the exact error variant, and that nothing was
//! enqueued (the trace of the device shows no operation from the refused call, the stream is
//! still idle, the destination unchanged). The list, with the error each gives, is in
//! `tests/MISUSE.md`.
//!
//! Validation happens in the API layer, before any backend sees the call (ER3), so these run on
//! the host backend only; the conformance suite covers the per-backend behaviour.

mod capture;
mod copies;
mod devices;
mod events;
mod flags_compile_host;
mod found_in_review;
mod host_functions;
mod launches;
mod pipelines;

#[path = "../common/refused.rs"]
mod refused;
use refused::refused;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cueflow::pipeline::{ChunkedPipeline, Count};

use cueflow::{
    chunk_ranges, kernels, CaptureMode, Device, DeviceBuffer, Error, Event, EventFlags, Kernel,
    KernelArgs, LaunchConfig, PinnedBuffer, Stream,
};

const N: usize = 64;

fn dev() -> Device {
    Device::host().unwrap()
}

/// Device memory holding `v` everywhere, fully arrived.
fn filled(dev: &Device, n: usize, v: f32) -> DeviceBuffer<f32> {
    let b = DeviceBuffer::<f32>::new(dev, n).unwrap();
    let s = Stream::builder(dev).non_blocking().build().unwrap();
    s.write_pageable(&b, &vec![v; n]).unwrap();
    s.synchronize().unwrap();
    b
}

fn read(b: &DeviceBuffer<f32>) -> Vec<f32> {
    let s = Stream::builder(b.device()).non_blocking().build().unwrap();
    let mut out = vec![0.0; b.len()];
    s.read_pageable(&mut out, b).unwrap();
    out
}

fn fill_args(d: &DeviceBuffer<f32>) -> KernelArgs {
    KernelArgs::new()
        .write(d)
        .scalar(1.0f32)
        .scalar(d.len() as u64)
}

#[track_caller]
fn assert_launch_refused(cfg: LaunchConfig) {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 0.0);
    let e = refused(&dev, &s, || {
        s.launch(&kernels::FILL_F32, cfg, fill_args(&d))
    });
    match e {
        Error::InvalidLaunch { kernel, why } => {
            assert_eq!(kernel, "cf_fill_f32");
            assert!(!why.is_empty());
        }
        other => panic!("{cfg:?}: expected InvalidLaunch, got {other:?}"),
    }
    s.synchronize().unwrap();
    assert!(read(&d).iter().all(|&x| x == 0.0));
}
