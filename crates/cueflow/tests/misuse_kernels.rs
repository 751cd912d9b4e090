//! Misuse of kernel launches that a user plausibly tries (issue 27): a graph's condition
//! handle on a plain stream launch, a kernel's time limit of zero, a buffer of another device,
//! a closure taking an argument as another type.
//! The exact error, and nothing enqueued (the device's trace shows no operation from the
//! refused call, the stream is idle, the device not poisoned). Listed in `tests/MISUSE.md`.
//! Host backend only: validation happens before any backend sees the call (ER3).

#[path = "common/refused.rs"]
mod refused;
use refused::refused;

use cueflow::{Device, DeviceBuffer, Error, Graph, Kernel, KernelArgs, LaunchConfig, Stream};

fn dev() -> Device {
    Device::host().unwrap()
}

/// A host kernel that sets the condition of its argument 0 to its argument 1.
fn set_cond() -> Kernel {
    Kernel::new("set_cond")
        .host(|_, a| a.set_condition(0, a.scalar(1)))
        .build()
}

/// A condition handle on a stream launch outside capture, of a live graph or of one already
/// dropped, is refused (GR9, ER3); the graph's condition is untouched. During a capture the
/// launch is a node of the captured graph and is accepted (the graph may become a conditional
/// node's body).
#[test]
fn condition_handle_on_a_stream_launch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut g = Graph::new(&dev);
    let h = g.condition(0, false);
    let args = || KernelArgs::new().condition(&h).scalar(1u32);
    let e = refused(&dev, &s, || {
        s.launch(&set_cond(), LaunchConfig::new(1, 1), args())
    });
    assert!(
        matches!(&e, Error::InvalidArgument { kernel, why } if kernel == "set_cond" && why.contains("condition")),
        "{e:?}"
    );
    drop(g);
    let e = refused(&dev, &s, || {
        s.launch(&set_cond(), LaunchConfig::new(1, 1), args())
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // Captured, it is a kernel node like any other.
    s.begin_capture(cueflow::CaptureMode::Global).unwrap();
    s.launch(&set_cond(), LaunchConfig::new(1, 1), args())
        .unwrap();
    let captured = s.end_capture().unwrap();
    assert_eq!(captured.node_count(), 1);
}

/// A kernel's argument of another device (no peer access) is refused, for a CUDA C kernel
/// as for a closure (HM6, ER3).
#[test]
fn cuda_c_kernel_argument_of_another_device() {
    let (a, b) = (Device::host_n(0, 0).unwrap(), Device::host_n(1, 0).unwrap());
    let s = Stream::new(&a).unwrap();
    let foreign = DeviceBuffer::<f32>::new(&b, 16).unwrap();
    let k = Kernel::new("touch")
        .cuda_source(
            "extern \"C\" __global__ void touch(float* x) { x[threadIdx.x] = 1.0f; }",
            "touch",
        )
        .build();
    let e = refused(&a, &s, || {
        s.launch(
            &k,
            LaunchConfig::new(1, 16),
            KernelArgs::new().write(&foreign),
        )
    });
    assert!(
        matches!(e, Error::InvalidHandle(ref m) if m.contains("another device")
            && m.contains("peer access") && !m.contains("PinnedFlags")),
        "{e:?}"
    );
}

/// A host kernel's closure that takes an argument as another type faults its launch (KN2),
/// and the fault names the closure's line, not cueflow's.
#[test]
fn closure_takes_a_scalar_as_another_type() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let k = Kernel::new("wrong_type")
        .host(|_, a| {
            let _: f64 = a.scalar(0);
        })
        .build();
    let r = (s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().scalar(1.0f32),
    ))
    .and_then(|()| s.synchronize());
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("holds f32, not f64") && e.contains("misuse_kernels.rs"),
        "{e}"
    );
}

/// A kernel time limit of zero is refused (HK4: pass `None` for no limit), as is setting one
/// from inside a host function (HF2); a limit, and `None`, are accepted.
#[test]
fn kernel_time_limit_of_zero_or_from_a_host_function() {
    let dev = dev();
    let e = dev
        .set_kernel_timeout(std::time::Duration::ZERO)
        .unwrap_err();
    assert!(
        matches!(e, Error::NotPermitted { rule: "HK4", .. }),
        "{e:?}"
    );
    dev.set_kernel_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    dev.set_kernel_timeout(None).unwrap();
    let s = Stream::new(&dev).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dev.clone();
    s.host_fn_once(move || {
        let _ = tx.send(d.set_kernel_timeout(std::time::Duration::from_secs(1)));
    })
    .unwrap();
    s.synchronize().unwrap();
    let r = rx.recv().unwrap();
    assert!(
        matches!(r, Err(Error::NotPermitted { rule: "HF2", .. })),
        "{r:?}"
    );
}

/// The largest time limits a user may pass to mean "practically none" (`Duration::MAX`, a
/// century) are accepted and CUDA C kernels run under them as before (HK4).
#[test]
fn kernel_time_limit_of_duration_max() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let k = Kernel::new("put_seven")
        .cuda_source(
            "extern \"C\" __global__ void put_seven(unsigned* x) { x[threadIdx.x] = 7u; }",
            "put_seven",
        )
        .build();
    for limit in [
        std::time::Duration::MAX,
        std::time::Duration::from_secs(100 * 365 * 24 * 3600),
    ] {
        dev.set_kernel_timeout(limit).unwrap();
        let x = DeviceBuffer::<u32>::new(&dev, 8).unwrap();
        s.launch(&k, LaunchConfig::new(1, 8), KernelArgs::new().write(&x))
            .unwrap();
        let mut out = [0u32; 8];
        s.read_pageable(&mut out, &x).unwrap();
        assert_eq!(out, [7u32; 8], "limit {limit:?}");
    }
}
