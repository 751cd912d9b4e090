//! KN1–KN2: kernel launches and faults.

use std::time::Duration;

use cueflow::{kernels, Device, Dim3, Error, KernelArgs, LaunchConfig, PinnedBuffer, Stream};

use crate::support::*;

fn fill_args(d: &cueflow::DeviceBuffer<f32>, v: f32) -> KernelArgs {
    KernelArgs::new().write(d).scalar(v).scalar(d.len() as u64)
}

// ---------------------------------------------------------------------------------------------
// KN1 Launch

/// KN1: a launch takes a grid, a block shape, a dynamic shared-memory size and a stream; the
/// largest legal shapes run.
pub fn kn1_launch(dev: &Device) {
    let p = dev.properties().clone();
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    s.launch(
        &kernels::FILL_F32,
        LaunchConfig::new((N / 128) as u32, 128).shared(1024),
        fill_args(&d, 2.0),
    )
    .unwrap();
    let big = zeros(dev, 2 * p.max_threads_per_block as usize);
    s.launch(
        &kernels::FILL_F32,
        LaunchConfig::new(2, p.max_threads_per_block).shared(p.max_shared_per_block),
        fill_args(&big, 3.0),
    )
    .unwrap();
    // A grid with more threads than elements: the extra threads do nothing.
    let odd = zeros(dev, 1000);
    kernels::fill(&s, &odd, 4.0).unwrap();
    assert_eq!(LaunchConfig::for_elements(1000, 256).grid, Dim3::from(4));
    // Three-dimensional shapes.
    s.launch(
        &kernels::EMPTY,
        LaunchConfig::new((2, 3, 4), (8, 8, 16)),
        KernelArgs::new(),
    )
    .unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 2.0);
    assert_all(&download(&big), 3.0);
    assert_all(&download(&odd), 4.0);
}

/// KN1: bad shapes are refused at the launch with an error naming the kernel, nothing is
/// enqueued, and later work is not poisoned.
pub fn kn1_bad_shape_refused(dev: &Device) {
    let p = dev.properties().clone();
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    // Each with the limit its message names.
    let bad = [
        (LaunchConfig::new(0, 32), "no zero dimension"),
        (LaunchConfig::new((1, 0, 1), 32), "no zero dimension"),
        (LaunchConfig::new(1, 0), "no zero dimension"),
        (LaunchConfig::new(1, (1, 1, 0)), "no zero dimension"),
        (
            LaunchConfig::new(1, p.max_threads_per_block + 1),
            "threads; the device allows",
        ),
        (
            LaunchConfig::new(1, (32, 32, 2)),
            "threads; the device allows",
        ),
        (LaunchConfig::new(1, (1, 1, 65)), "per-dimension limits"),
        (
            LaunchConfig::new((1, p.max_grid[1] + 1), 32),
            "grid dimension 1",
        ),
        (
            LaunchConfig::new(1, 32).shared(p.max_shared_per_block + 1),
            "dynamic shared memory",
        ),
    ];
    dev.start_trace().unwrap();
    for (cfg, names) in bad {
        match s.launch(&kernels::FILL_F32, cfg, fill_args(&d, 1.0)) {
            Err(Error::InvalidLaunch { kernel, why }) => {
                assert_eq!(kernel, "cf_fill_f32");
                assert!(why.contains(names), "{cfg:?}: {why}");
            }
            other => panic!("{cfg:?} gave {other:?}"),
        }
    }
    let t = dev.stop_trace().unwrap();
    assert_eq!(enqueued(&t), 0, "{:#?}", t.ops);
    assert!(s.query().unwrap());
    assert_eq!(dev.sticky_error(), None);
    kernels::fill(&s, &d, 5.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 5.0);
}

/// KN1: the built-in `saxpy` takes `x` and `y` as the same elements (`y = a * y + y`) or as
/// disjoint ones, and refuses views that overlap otherwise (threads would read what others
/// write) before anything is enqueued; views of two allocations never overlap.
pub fn kn1_saxpy_refuses_partly_overlapping_views(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = upload(dev, &[1.0f32; 12]);
    let (lo, hi) = (d.slice(0..8).unwrap(), d.slice(4..12).unwrap());
    dev.start_trace().unwrap();
    match kernels::saxpy(&s, 2.0, &lo, &hi) {
        Err(Error::InvalidArgument { kernel, why }) => {
            assert_eq!(kernel, "cf_saxpy_f32");
            assert!(
                why.contains("bytes 0..32") && why.contains("bytes 16..48"),
                "{why}"
            );
        }
        other => panic!("partly overlapping views accepted: {other:?}"),
    }
    let t = dev.stop_trace().unwrap();
    assert_eq!(enqueued(&t), 0, "{:#?}", t.ops);
    kernels::saxpy(&s, 2.0, &lo, &lo).unwrap(); // The same elements: 3 each.
    kernels::saxpy(&s, 1.0, &d.slice(0..4).unwrap(), &d.slice(8..12).unwrap()).unwrap();
    let other = upload(dev, &[1.0f32; 8]);
    kernels::saxpy(&s, 1.0, &other, &lo).unwrap(); // Another allocation: 4 each.
    s.synchronize().unwrap();
    let want = [4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0];
    assert_eq!(download(&d), want);
}

// ---------------------------------------------------------------------------------------------
// KN2 Faults

/// KN2: a fault is sticky: the device is poisoned, every later operation and synchronization
/// returns the same error, and it names the kernel.
pub fn kn2_fault_is_sticky(dev: &Device) {
    let (s, other) = (Stream::new(dev).unwrap(), side_stream(dev));
    let d = zeros(dev, N);
    let mut p = PinnedBuffer::<f32>::new(dev, N).unwrap();
    kernels::fault(&s).unwrap();
    let err = s.synchronize().unwrap_err();
    match &err {
        Error::KernelFault { kernel, .. } => assert_eq!(kernel, "cf_fault"),
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    assert!(err.is_sticky());
    assert!(err.to_string().contains("cf_fault"));
    assert_eq!(dev.sticky_error(), Some(err.clone()));
    // Every later call on the device returns it: other streams included.
    assert_eq!(other.synchronize().unwrap_err(), err);
    assert_eq!(other.query().unwrap_err(), err);
    assert_eq!(kernels::fill(&other, &d, 1.0).unwrap_err(), err);
    assert_eq!(other.copy_d2h(&mut p, &d).unwrap_err(), err);
    assert_eq!(dev.synchronize().unwrap_err(), err);
    assert_eq!(s.synchronize().unwrap_err(), err);
}

/// KN2: the error names the kernel that faulted, also when it is a different kernel: a flag
/// wait that times out faults as `cf_wait_flag` (what a gate of this suite does when a rule is
/// broken).
pub fn kn2_fault_names_the_kernel(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let f = flag(dev);
    kernels::wait_flag(&s, &f, 1, Duration::from_millis(1)).unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, .. } => assert_eq!(kernel, "cf_wait_flag"),
        other => panic!("expected a kernel fault, got {other:?}"),
    }
}
