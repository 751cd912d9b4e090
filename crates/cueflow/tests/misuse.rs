//! Every misuse the API refuses, one test each: the exact error variant, and that nothing was
//! enqueued (the trace of the device shows no operation from the refused call, the stream is
//! still idle, the destination unchanged). The list, with the error each gives, is in
//! `tests/MISUSE.md`.
//!
//! Validation happens in the API layer, before any backend sees the call (ER3), so these run on
//! the host backend only; the conformance suite covers the per-backend behaviour.

#[path = "common/refused.rs"]
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

// ---------------------------------------------------------------------------------------------
// Copies and memory (CP4, ER3)

#[test]
fn copy_length_mismatch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 5.0);
    let small = PinnedBuffer::from_slice(&dev, &[1.0f32; N / 2]).unwrap();
    let mut small_out = PinnedBuffer::<f32>::new(&dev, N / 2).unwrap();
    let other = filled(&dev, N - 1, 1.0);
    for e in [
        refused(&dev, &s, || s.copy_h2d(&d, &small)),
        refused(&dev, &s, || s.copy_d2h(&mut small_out, &d)),
        refused(&dev, &s, || s.copy_d2d(&d, &other)),
    ] {
        match &e {
            Error::OutOfBounds { rule: "CP4", what } => assert!(what.contains("bytes"), "{what}"),
            other => panic!("expected OutOfBounds, got {other:?}"),
        }
    }
    let mut h1 = PinnedBuffer::<f32>::new(&dev, 4).unwrap();
    let h2 = PinnedBuffer::<f32>::new(&dev, 5).unwrap();
    assert!(matches!(
        refused(&dev, &s, || s.copy_h2h(&mut h1, &h2)),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    assert!(read(&d).iter().all(|&x| x == 5.0));
}

#[test]
fn copy_message_names_sizes() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, 16, 0.0);
    let src = PinnedBuffer::from_slice(&dev, &[1.0f32; 8]).unwrap();
    let msg = refused(&dev, &s, || s.copy_h2d(&d, &src)).to_string();
    assert!(
        msg.contains("64 bytes") && msg.contains("32 bytes"),
        "{msg}"
    );
}

#[test]
fn pageable_copy_length_mismatch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 5.0);
    assert!(matches!(
        refused(&dev, &s, || s.write_pageable(&d, &[0.0f32; N + 1])),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    let mut out = [0.0f32; N - 1];
    assert!(matches!(
        refused(&dev, &s, || s.read_pageable(&mut out, &d)),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    assert!(out.iter().all(|&x| x == 0.0));
    assert!(read(&d).iter().all(|&x| x == 5.0));
}

#[test]
fn slice_out_of_range() {
    let dev = dev();
    let d = filled(&dev, N, 0.0);
    let mut p = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let oob = |r: cueflow::Result<()>| {
        assert!(
            matches!(r, Err(Error::OutOfBounds { rule: "CP4", .. })),
            "{r:?}"
        );
    };
    oob(d.slice(0..N + 1).map(drop));
    oob(d.slice(N + 1..).map(drop));
    #[allow(clippy::reversed_empty_ranges)]
    oob(d.slice(5..2).map(drop));
    oob(d.slice(..=N).map(drop));
    oob(d.slice(2..4).unwrap().slice(0..3).map(drop));
    oob(p.range(0..N + 1).map(drop));
    oob(p.range_mut(N..N + 1).map(drop));
    oob(p.read_range(..N + 1).map(drop));
    oob(p.write_range(N - 1..N + 1).map(drop));
    let msg = d.slice(10..N + 7).unwrap_err().to_string();
    assert!(msg.contains(&format!("{N} elements")), "{msg}");
}

#[test]
fn bad_chunk_count() {
    let dev = dev();
    let d = filled(&dev, 8, 0.0);
    assert!(matches!(d.chunks(0), Err(Error::OutOfBounds { .. })));
    assert!(matches!(d.chunks(9), Err(Error::OutOfBounds { .. })));
    assert!(matches!(chunk_ranges(8, 0), Err(Error::OutOfBounds { .. })));
}

#[test]
fn overlapping_copy() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 3.0);
    let e = refused(&dev, &s, || {
        s.copy_d2d(
            &d.slice(0..N / 2).unwrap(),
            &d.slice(N / 4..3 * N / 4).unwrap(),
        )
    });
    match e {
        Error::OutOfBounds { rule: "CP4", what } => assert!(what.contains("overlap"), "{what}"),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
    assert!(matches!(
        refused(&dev, &s, || s.copy_d2d(&d, &d)),
        Error::OutOfBounds { rule: "CP4", .. }
    ));
    assert!(read(&d).iter().all(|&x| x == 3.0));
}

#[test]
fn buffer_from_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let mine = filled(&dev, N, 1.0);
    let theirs = filled(&other, N, 2.0);
    // (Another device's pinned memory is portable with unified addressing, HM2: no misuse.)
    let calls: Vec<Error> = vec![
        refused(&dev, &s, || s.copy_d2d(&mine, &theirs)),
        refused(&dev, &s, || s.memset(&theirs, 0)),
        refused(&dev, &s, || kernels::fill(&s, &theirs, 9.0)),
        refused(&dev, &s, || s.write_pageable(&theirs, &[0.0f32; N])),
        refused(&dev, &s, || s.free_async(theirs.clone())),
    ];
    for e in calls {
        assert!(matches!(e, Error::InvalidHandle(_)), "{e:?}");
    }
    assert!(read(&mine).iter().all(|&x| x == 1.0));
    assert!(read(&theirs).iter().all(|&x| x == 2.0));
}

// ---------------------------------------------------------------------------------------------
// Launches (KN1, ER3)

#[test]
fn zero_grid_dimension() {
    assert_launch_refused(LaunchConfig::new(0, 32));
    assert_launch_refused(LaunchConfig::new((4, 0), 32));
    assert_launch_refused(LaunchConfig::new((4, 1, 0), 32));
}

#[test]
fn zero_block_dimension() {
    assert_launch_refused(LaunchConfig::new(1, 0));
    assert_launch_refused(LaunchConfig::new(1, (32, 0)));
    assert_launch_refused(LaunchConfig::new(1, (32, 1, 0)));
}

#[test]
fn too_many_threads_per_block() {
    assert_launch_refused(LaunchConfig::new(1, 1025));
    assert_launch_refused(LaunchConfig::new(1, (32, 33)));
    assert_launch_refused(LaunchConfig::new(1, (16, 16, 8)));
}

#[test]
fn block_dimension_over_limit() {
    assert_launch_refused(LaunchConfig::new(1, (1, 1, 65)));
}

#[test]
fn grid_dimension_over_limit() {
    let max = dev().properties().max_grid;
    assert_launch_refused(LaunchConfig::new((1, max[1] + 1), 32));
    assert_launch_refused(LaunchConfig::new((1, 1, max[2] + 1), 32));
}

#[test]
fn shared_memory_too_large() {
    let max = dev().properties().max_shared_per_block;
    assert_launch_refused(LaunchConfig::new(1, 32).shared(max + 1));
}

#[test]
fn kernel_without_implementation_for_backend() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    // PTX has no meaning on the host backend (CUDA C does: HK1).
    let cuda_only = Kernel::new("cft_cuda_only")
        .cuda(cueflow::CudaCode::Ptx {
            code: ".version 7.0\n.target sm_70\n.address_size 64\n".into(),
            entry: "cft_cuda_only".into(),
        })
        .build();
    let none = Kernel::new("cft_nothing").build();
    for k in [&cuda_only, &none] {
        match refused(&dev, &s, || {
            s.launch(k, LaunchConfig::new(1, 1), KernelArgs::new())
        }) {
            Error::Unsupported(m) => assert!(m.contains(k.name()), "{m}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}

#[test]
fn written_buffer_overlaps_another_argument() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    // Two names writing the same bytes (KC4).
    let e = refused(&dev, &s, || {
        s.launch(
            &kernels::SAXPY_F32,
            LaunchConfig::for_elements(N, 256),
            KernelArgs::new()
                .write(&d)
                .write(&d)
                .scalar(2.0f32)
                .scalar(N as u64),
        )
    });
    assert!(
        matches!(&e, Error::InvalidArgument { kernel, .. } if kernel == "cf_saxpy_f32"),
        "{e:?}"
    );
    // Read and written through two names of the same bytes is what CUDA allows (KC4): y = 2y + y.
    kernels::saxpy(&s, 2.0, &d, &d).unwrap();
    s.synchronize().unwrap();
    assert!(read(&d).iter().all(|&x| x == 3.0));
    s.memset(&d, 0).unwrap();
    kernels::fill(&s, &d, 1.0).unwrap();
    // Partly overlapping x and y: the built-in refuses (threads would read what others write).
    let e = refused(&dev, &s, || {
        kernels::saxpy(
            &s,
            2.0,
            &d.slice(0..N / 2).unwrap(),
            &d.slice(N / 4..3 * N / 4).unwrap(),
        )
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // Disjoint views of one buffer are fine.
    kernels::saxpy(
        &s,
        2.0,
        &d.slice(0..N / 2).unwrap(),
        &d.slice(N / 2..).unwrap(),
    )
    .unwrap();
    s.synchronize().unwrap();
    let v = read(&d);
    assert!(v[..N / 2].iter().all(|&x| x == 1.0) && v[N / 2..].iter().all(|&x| x == 3.0));
}

#[test]
fn scalar_argument_too_large() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let e = refused(&dev, &s, || {
        s.launch(
            &kernels::EMPTY,
            LaunchConfig::new(1, 1),
            KernelArgs::new().scalar([[0u8; 4096]; 10]),
        )
    });
    assert!(
        matches!(&e, Error::InvalidArgument { kernel, .. } if kernel == "cf_empty"),
        "{e:?}"
    );
}

#[test]
fn saxpy_length_mismatch() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let (x, y) = (filled(&dev, N, 1.0), filled(&dev, N - 1, 1.0));
    let e = refused(&dev, &s, || kernels::saxpy(&s, 1.0, &x, &y));
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
}

/// Not refused at the call (the host kernel's reads are not declared), but it cannot go
/// unnoticed either: the wrong read panics in the kernel, which becomes a sticky kernel fault
/// naming the kernel (KN2).
#[test]
fn wrong_argument_type_read_by_host_kernel() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    let k = Kernel::new("cft_wrong_type")
        .host(|_, a| {
            let _: f64 = a.scalar(1);
            let _ = a.input::<f32>(0);
        })
        .build();
    s.launch(
        &k,
        LaunchConfig::new(1, 1),
        KernelArgs::new().read(&d).scalar(2.0f32),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cft_wrong_type");
            assert!(detail.contains("f32") && detail.contains("f64"), "{detail}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    // The buffer type too.
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    let k = Kernel::new("cft_wrong_buffer_type")
        .host(|_, a| {
            let _ = a.input::<u32>(0);
        })
        .build();
    s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new().read(&d))
        .unwrap();
    assert!(matches!(
        s.synchronize().unwrap_err(),
        Error::KernelFault { kernel, .. } if kernel == "cft_wrong_buffer_type"
    ));
}

// ---------------------------------------------------------------------------------------------
// Events (EV6, EV7, ER3)

#[test]
fn event_from_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let theirs = Stream::new(&other).unwrap().record().unwrap();
    let mine = s.record().unwrap();
    assert!(matches!(
        refused(&dev, &s, || s.record_event(&theirs)),
        Error::InvalidHandle(_)
    ));
    // A wait on another device's event is a cross-device wait (MD2), not misuse.
    assert!(matches!(
        Event::elapsed_ms(&mine, &theirs),
        Err(Error::InvalidHandle(_))
    ));
}

#[test]
fn graph_from_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let cap = Stream::new(&other).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::empty(&cap).unwrap();
    let exec = cap.end_capture().unwrap().instantiate().unwrap();
    assert!(matches!(
        refused(&dev, &s, || exec.launch(&s)),
        Error::InvalidHandle(_)
    ));
}

#[test]
fn elapsed_on_never_recorded_event() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let done = s.record().unwrap();
    s.synchronize().unwrap();
    let never = Event::new(&dev).unwrap();
    assert!(matches!(
        Event::elapsed_ms(&done, &never),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&never, &done),
        Err(Error::InvalidHandle(_))
    ));
}

#[test]
fn elapsed_on_timing_disabled_event() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let flags = EventFlags {
        timing: false,
        ..Default::default()
    };
    let untimed = Event::with_flags(&dev, flags).unwrap();
    let timed = s.record().unwrap();
    s.record_event(&untimed).unwrap();
    s.synchronize().unwrap();
    assert!(matches!(
        Event::elapsed_ms(&timed, &untimed),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&untimed, &timed),
        Err(Error::InvalidHandle(_))
    ));
}

#[test]
fn elapsed_on_pending_event() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    s.memset(&flag, 0).unwrap();
    let start = s.record().unwrap();
    kernels::wait_flag(&s, &flag, 1, Duration::from_secs(20)).unwrap();
    let end = s.record().unwrap();
    assert!(matches!(
        Event::elapsed_ms(&start, &end),
        Err(Error::NotReady(_))
    ));
    assert_eq!(dev.sticky_error(), None, "not-ready is not sticky");
    kernels::set_flag(
        &Stream::builder(&dev).non_blocking().build().unwrap(),
        &flag,
        1,
    )
    .unwrap();
    end.synchronize().unwrap();
    assert!(Event::elapsed_ms(&start, &end).unwrap() >= 0.0);
}

#[test]
fn interprocess_event_with_timing() {
    let dev = dev();
    let flags = EventFlags {
        interprocess: true,
        timing: true,
        blocking_sync: false,
    };
    assert!(matches!(
        Event::with_flags(&dev, flags),
        Err(Error::InvalidHandle(_))
    ));
    let flags = EventFlags {
        interprocess: true,
        timing: true,
        blocking_sync: true,
    };
    assert!(matches!(
        Event::with_flags(&dev, flags),
        Err(Error::InvalidHandle(_))
    ));
}

// ---------------------------------------------------------------------------------------------
// Host functions (HF2)

/// Run `call` inside a host function on a fresh stream and return what it gave.
fn inside_host_fn<T: Send + 'static>(
    call: impl Fn(&Device, &Stream) -> cueflow::Result<T> + Send + Sync + 'static,
) -> (Device, Stream, cueflow::Result<T>) {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let out = Arc::new(Mutex::new(None));
    {
        let (d, s2, out) = (dev.clone(), s.clone(), out.clone());
        s.host_fn(move || *out.lock().unwrap() = Some(call(&d, &s2)))
            .unwrap();
    }
    // Without HF2 a call like `s.synchronize()` would deadlock on its own host function: fail
    // after a deadline instead of hanging.
    let t = Instant::now();
    while !s.query().unwrap() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the host function deadlocked"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    s.synchronize().unwrap();
    let r = out.lock().unwrap().take().unwrap();
    (dev, s, r)
}

#[track_caller]
fn assert_hf2<T: std::fmt::Debug>(r: cueflow::Result<T>) {
    match r {
        Err(Error::NotPermitted { rule: "HF2", what }) => {
            assert!(what.contains("host function"), "{what}")
        }
        other => panic!("expected NotPermitted (HF2), got {other:?}"),
    }
}

#[test]
fn synchronize_inside_host_fn() {
    let (dev, s, r) = inside_host_fn(|_, s| s.synchronize());
    assert_hf2(r);
    assert_hf2(inside_host_fn(|d, _| d.synchronize()).2);
    assert_hf2(inside_host_fn(|d, _| Stream::legacy(d).synchronize()).2);
    assert!(s.query().unwrap());
    assert_eq!(dev.sticky_error(), None);
}

#[test]
fn query_inside_host_fn() {
    assert_hf2(inside_host_fn(|_, s| s.query()).2);
    assert_hf2(inside_host_fn(|d, _| Event::new(d)).2);
}

#[test]
fn enqueue_inside_host_fn() {
    let (dev, s, r) = inside_host_fn(|_, s| kernels::empty(s));
    assert_hf2(r);
    assert_hf2(inside_host_fn(|_, s| s.host_fn(|| {})).2);
    assert_hf2(inside_host_fn(|_, s| s.record().map(drop)).2);
    assert_hf2(inside_host_fn(|_, s| s.add_callback(|_| panic!("never called"))).2);
    // Nothing was enqueued by the refused calls: the stream is idle.
    assert!(s.query().unwrap());
    assert_eq!(dev.sticky_error(), None);
}

#[test]
fn create_objects_inside_host_fn() {
    assert_hf2(inside_host_fn(|d, _| Stream::new(d).map(drop)).2);
    assert_hf2(inside_host_fn(|d, _| DeviceBuffer::<f32>::new(d, 4).map(drop)).2);
    assert_hf2(inside_host_fn(|d, _| PinnedBuffer::<f32>::new(d, 4).map(drop)).2);
    assert_hf2(inside_host_fn(|_, s| s.alloc_async::<f32>(4).map(drop)).2);
}

/// Not refused either (a host function is opaque), but a panic inside one must not hang the
/// device: like a faulting kernel it poisons it (KN2), and the error says a host function
/// faulted.
#[test]
fn host_function_that_panics() {
    let dev = dev();
    let (s, other) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    s.host_fn(|| panic!("boom in a host function")).unwrap();
    let t = Instant::now();
    while s.query() == Ok(false) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the device hung after a host function panicked"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let err = s.synchronize().unwrap_err();
    match &err {
        Error::HostFnFault { name, detail, .. } => {
            assert_eq!(name, "host function");
            assert!(detail.contains("boom"), "{detail}");
        }
        other => panic!("expected a fault, got {other:?}"),
    }
    assert_eq!(other.host_fn(|| {}).unwrap_err(), err);
    assert_eq!(dev.synchronize().unwrap_err(), err);
}

// ---------------------------------------------------------------------------------------------
// Capture (GR1, GR2)

#[test]
fn capture_on_legacy_stream() {
    let dev = dev();
    let legacy = Stream::legacy(&dev);
    assert!(matches!(
        legacy.begin_capture(CaptureMode::Global),
        Err(Error::Capture(_))
    ));
    assert!(!legacy.is_capturing());
}

#[test]
fn end_capture_on_another_stream() {
    let dev = dev();
    let (s1, s2) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    s1.begin_capture(CaptureMode::Global).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::empty(&s2).unwrap();
    s1.wait_event(&s2.record().unwrap()).unwrap();
    assert!(matches!(s2.end_capture(), Err(Error::Capture(_))));
    assert!(s1.is_capturing());
    s1.end_capture().unwrap();
}

#[test]
fn end_capture_without_capture() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    assert!(matches!(s.end_capture(), Err(Error::Capture(_))));
}

#[test]
fn begin_capture_twice() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(
        s.begin_capture(CaptureMode::Relaxed),
        Err(Error::Capture(_))
    ));
    s.end_capture().unwrap();
}

#[test]
fn unjoined_capture() {
    let dev = dev();
    let (s1, s2) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    let d = filled(&dev, N, 1.0);
    s1.begin_capture(CaptureMode::Global).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
    assert!(matches!(s1.end_capture(), Err(Error::Capture(_))));
    assert!(!s1.is_capturing() && !s2.is_capturing());
    dev.synchronize().unwrap();
    assert!(read(&d).iter().all(|&x| x == 1.0), "captured work ran");
}

/// Begin a capture, make `call` (given the device, the capturing stream, an event recorded in
/// the capture and a buffer made before it), expect `CaptureIllegal`; the end then fails with
/// `CaptureInvalidated` and yields no graph.
#[track_caller]
fn assert_illegal_in_capture(
    call: impl FnOnce(&Device, &Stream, &Event, &DeviceBuffer<f32>) -> cueflow::Result<()>,
) {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, 4, 1.0);
    s.begin_capture(CaptureMode::Global).unwrap();
    kernels::empty(&s).unwrap();
    let e = s.record().unwrap();
    assert!(matches!(
        call(&dev, &s, &e, &d),
        Err(Error::CaptureIllegal(_))
    ));
    assert!(matches!(s.end_capture(), Err(Error::CaptureInvalidated(_))));
    assert!(read(&d).iter().all(|&x| x == 1.0));
}

#[test]
fn synchronize_capturing_stream() {
    assert_illegal_in_capture(|_, s, _, _| s.synchronize());
}

#[test]
fn query_capturing_stream() {
    assert_illegal_in_capture(|_, s, _, _| s.query().map(drop));
}

#[test]
fn synchronize_or_query_captured_event() {
    assert_illegal_in_capture(|_, _, e, _| e.synchronize());
    assert_illegal_in_capture(|_, _, e, _| e.query().map(drop));
}

#[test]
fn device_synchronize_during_capture() {
    assert_illegal_in_capture(|d, _, _, _| d.synchronize());
}

#[test]
fn synchronous_copy_during_capture() {
    assert_illegal_in_capture(|_, s, _, b| s.write_pageable(b, &[0.0f32; 4]));
    assert_illegal_in_capture(|_, s, _, b| s.read_pageable(&mut [0.0f32; 4], b));
    // On another stream too, in a global capture.
    assert_illegal_in_capture(|d, _, _, b| {
        Stream::builder(d)
            .non_blocking()
            .build()?
            .write_pageable(b, &[0.0f32; 4])
    });
}

#[test]
fn synchronous_allocation_during_capture() {
    assert_illegal_in_capture(|d, _, _, _| DeviceBuffer::<f32>::new(d, 4).map(drop));
    assert_illegal_in_capture(|d, _, _, _| PinnedBuffer::<f32>::new(d, 4).map(drop));
}

#[test]
fn capturing_stream_waits_on_event_from_outside() {
    let dev = dev();
    let (s, other) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    let outside = other.record().unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(
        s.wait_event(&outside),
        Err(Error::CaptureIllegal(_))
    ));
    assert!(matches!(s.end_capture(), Err(Error::CaptureInvalidated(_))));
}

#[test]
fn free_async_of_outside_memory_during_capture() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let pooled = s.alloc_async::<f32>(4).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(s.free_async(pooled), Err(Error::Unsupported(_))));
    s.end_capture().unwrap();
}

/// GR10: an allocation a capture does not free outlives the graph's launch; before the
/// graph is instantiated and launched, it cannot be used or freed outside.
#[test]
fn graph_allocation_not_freed_in_the_capture() {
    let dev = dev();
    let (s, other) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    s.begin_capture(CaptureMode::Global).unwrap();
    let t = s.alloc_async::<f32>(256).unwrap();
    kernels::fill(&s, &t, 1.0).unwrap();
    let graph = s.end_capture().unwrap();
    assert!(matches!(
        kernels::fill(&other, &t, 2.0),
        Err(Error::InvalidHandle(_))
    ));
    let exec = graph.instantiate().unwrap();
    assert!(matches!(
        other.free_async(t.clone()),
        Err(Error::NotPermitted { rule: "GR10", .. })
    ));
    exec.launch(&s).unwrap();
    s.free_async(t).unwrap();
    s.synchronize().unwrap();
}

#[test]
fn graph_memory_used_outside_the_graph() {
    let dev = dev();
    let (s, other) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    s.begin_capture(CaptureMode::Global).unwrap();
    let t = s.alloc_async::<f32>(256).unwrap();
    kernels::fill(&s, &t, 1.0).unwrap();
    s.free_async(t.clone()).unwrap();
    let graph = s.end_capture().unwrap();
    assert!(matches!(
        kernels::fill(&other, &t, 2.0),
        Err(Error::InvalidHandle(_))
    ));
    let mut out = vec![0.0f32; 256];
    assert!(matches!(
        other.read_pageable(&mut out, &t),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(other.free_async(t), Err(Error::InvalidHandle(_))));
    graph.instantiate().unwrap().launch(&other).unwrap();
    other.synchronize().unwrap();
}

#[test]
fn graph_memory_used_before_its_allocation_node() {
    let dev = dev();
    let (s, side) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    s.begin_capture(CaptureMode::Global).unwrap();
    let early = s.record().unwrap(); // before the allocation node
    let t = s.alloc_async::<f32>(256).unwrap();
    side.wait_event(&early).unwrap();
    kernels::fill(&side, &t, 1.0).unwrap(); // not ordered after the allocation
    s.wait_event(&side.record().unwrap()).unwrap();
    s.free_async(t).unwrap();
    assert!(matches!(s.end_capture(), Err(Error::Capture(_))));
}

#[test]
fn graph_launch_during_capture() {
    let dev = dev();
    let (s, cap) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::empty(&cap).unwrap();
    let exec = cap.end_capture().unwrap().instantiate().unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(exec.launch(&s), Err(Error::Unsupported(_))));
    s.end_capture().unwrap();
}

#[test]
fn elapsed_on_event_recorded_in_capture() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let before = s.record().unwrap();
    s.synchronize().unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    let inside = s.record().unwrap();
    assert!(matches!(
        Event::elapsed_ms(&before, &inside),
        Err(Error::InvalidHandle(_))
    ));
    s.end_capture().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Not misuse, and devices

/// ST7: an out-of-range priority is clamped, not refused.
#[test]
fn priority_out_of_range_is_not_an_error() {
    let dev = dev();
    let p = dev.properties().clone();
    for (asked, got) in [
        (p.priority_greatest - 1, p.priority_greatest),
        (i32::MIN, p.priority_greatest),
        (p.priority_least + 1, p.priority_least),
        (i32::MAX, p.priority_least),
    ] {
        let s = Stream::builder(&dev).priority(asked).build().unwrap();
        assert_eq!(s.priority(), got);
        kernels::empty(&s).unwrap();
        s.synchronize().unwrap();
    }
}

#[test]
fn unknown_device_string() {
    for name in ["gpu", "cuda:x", "cuda:-1", "cuda:", "host:", "host:x", ""] {
        match Device::open_str(name) {
            Err(Error::UnknownDevice(n)) => assert_eq!(n, name),
            other => panic!("{name:?} gave {other:?}"),
        }
    }
    assert!("cuda:1".parse::<cueflow::DeviceSpec>().is_ok());
    assert!(Device::open_str(" Host ").is_ok());
    assert!(Device::open_str("host:3").is_ok());
    for list in ["host:0x", "host:0,host:0", "host:1,gpu", "cuda:0,,cuda:1"] {
        assert!(
            matches!(Device::open_list(list), Err(Error::UnknownDevice(_))),
            "{list:?}"
        );
    }
    assert_eq!(Device::open_list("host:3x").unwrap().len(), 3);
}

// ---------------------------------------------------------------------------------------------
// Found in review: each was a panic, a hang or undefined behaviour before.

#[test]
fn alloc_async_of_an_impossible_size_is_out_of_memory() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    // Rounding usize::MAX - 10 up to the pool's 256-byte classes used to wrap to a 1-byte block.
    for n in [usize::MAX - 10, 1usize << 63] {
        let r = s.alloc_async::<u8>(n);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{n}: {r:?}");
    }
    assert!(s.query().unwrap());
}

#[test]
fn graph_launch_refused_while_the_host_views_its_pinned_buffer() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 7.0);
    let mut pinned = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    s.copy_d2h(&mut pinned, &d).unwrap();
    let exec = s.end_capture().unwrap().instantiate().unwrap();
    {
        let view = pinned.read().unwrap();
        let r = exec.launch(&s);
        assert!(
            matches!(r, Err(Error::NotPermitted { rule: "MM3", .. })),
            "{r:?}"
        );
        assert!(
            view.iter().all(|&x| x == 0.0),
            "the graph must not have run"
        );
    }
    // Without a view the launch runs, and a later view waits for its copy.
    exec.launch(&s).unwrap();
    assert!(pinned.read().unwrap().iter().all(|&x| x == 7.0));
}

#[test]
fn trace_control_refused_inside_a_host_function() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (d2, seen2) = (dev.clone(), seen.clone());
    s.host_fn(move || {
        let r1 = d2.start_trace().map(|_| ());
        let r2 = d2.stop_trace().map(|_| ());
        seen2.lock().unwrap().extend([r1, r2]);
    })
    .unwrap();
    s.synchronize().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for r in seen.iter() {
        assert!(
            matches!(r, Err(Error::NotPermitted { rule: "HF2", .. })),
            "{r:?}"
        );
    }
}

#[test]
fn host_kernel_atomics_on_a_non_atomic_argument_fault() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    let k = Kernel::new("misuses_atomics")
        .host(|_, a| a.atomics_u32(0)[0].store(1, std::sync::atomic::Ordering::Relaxed))
        .build();
    s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new().write(&flag))
        .unwrap();
    let r = s.synchronize();
    assert!(
        matches!(&r, Err(Error::KernelFault { kernel, .. }) if kernel == "misuses_atomics"),
        "{r:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Chunked pipelines (ER3, CP4)

/// A pipeline of `streams` × `chunks` (or `auto` for 0) on `dev`.
fn pipeline(dev: &Device, streams: u32, chunks: u32) -> ChunkedPipeline {
    let count = |n| if n == 0 { Count::Auto } else { Count::Fixed(n) };
    ChunkedPipeline::new(dev)
        .streams(count(streams))
        .chunks(count(chunks))
        .build()
        .unwrap()
}

#[test]
fn pipeline_with_zero_streams_or_chunks() {
    let dev = dev();
    for (s, c) in [(0, 4), (4, 0)] {
        let r = ChunkedPipeline::new(&dev).streams(s).chunks(c).build();
        assert!(matches!(r, Err(Error::InvalidLayout(_))), "{s}×{c}");
    }
    let mut p = pipeline(&dev, 2, 2);
    assert!(matches!(p.set_streams(0), Err(Error::InvalidLayout(_))));
    assert!(matches!(p.set_chunks(0), Err(Error::InvalidLayout(_))));
    assert_eq!(p.layout(), (Count::Fixed(2), Count::Fixed(2)));
}

#[test]
fn pipeline_input_and_output_of_different_lengths() {
    let dev = dev();
    let inp = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, N + 1).unwrap();
    // `auto`: refused before the calibration could enqueue anything.
    let mut p = pipeline(&dev, 0, 0);
    let origin = p.origin().clone();
    let e = refused(&dev, &origin, || {
        p.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
    });
    assert!(
        matches!(&e, Error::OutOfBounds { rule: "CP4", what } if what.contains(&N.to_string()) && what.contains(&(N + 1).to_string())),
        "{e:?}"
    );
    let mut wide = PinnedBuffer::<f64>::new(&dev, N - 1).unwrap();
    let e = refused(&dev, &origin, || p.run_map(&inp, &mut wide, |_, _| Ok(())));
    assert!(matches!(e, Error::OutOfBounds { rule: "CP4", .. }), "{e:?}");
    assert!(p.auto_choice().is_none());
}

#[test]
fn pipeline_device_buffer_of_another_length() {
    let dev = dev();
    let inp = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N / 2).unwrap();
    let mut p = pipeline(&dev, 2, 4);
    let origin = p.origin().clone();
    let e = refused(&dev, &origin, || {
        p.run_on(&inp, &d, &mut out, |s, c| {
            kernels::scale(s, c.device(), 2.0)
        })
    });
    assert!(matches!(e, Error::OutOfBounds { rule: "CP4", .. }), "{e:?}");
}

#[test]
fn pipeline_with_more_chunks_than_elements_or_no_elements() {
    let dev = dev();
    let inp = PinnedBuffer::<f32>::new(&dev, 8).unwrap();
    let mut out = PinnedBuffer::<f32>::new(&dev, 8).unwrap();
    let mut p = pipeline(&dev, 2, 9);
    let origin = p.origin().clone();
    let e = refused(&dev, &origin, || {
        p.run(&inp, &mut out, |s, c| kernels::scale(s, c.device(), 2.0))
    });
    assert!(
        matches!(&e, Error::InvalidLayout(w) if w.contains("9 chunks of 8")),
        "{e:?}"
    );
    // Empty input and output (ranges of nothing), with `auto` and with fixed counts.
    for mut p in [pipeline(&dev, 0, 0), pipeline(&dev, 1, 1)] {
        let origin = p.origin().clone();
        let e = refused(&dev, &origin, || {
            p.run(
                inp.range(3..3).unwrap(),
                out.range_mut(3..3).unwrap(),
                |s, c| kernels::scale(s, c.device(), 2.0),
            )
        });
        assert!(matches!(e, Error::InvalidLayout(_)), "{e:?}");
    }
}

#[test]
fn pipeline_buffers_of_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let mine = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let mut mine_out = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let theirs = PinnedBuffer::<f32>::new(&other, N).unwrap();
    let mut theirs_out = PinnedBuffer::<f32>::new(&other, N).unwrap();
    let their_device = DeviceBuffer::<f32>::new(&other, N).unwrap();
    let mut p = pipeline(&dev, 2, 4);
    let origin = p.origin().clone();
    let work =
        |s: &Stream, c: cueflow::pipeline::Chunk<'_, f32>| kernels::scale(s, c.device(), 2.0);
    let e = refused(&dev, &origin, || p.run(&theirs, &mut mine_out, work));
    assert!(
        matches!(&e, Error::InvalidHandle(w) if w.contains("input")),
        "{e:?}"
    );
    let e = refused(&dev, &origin, || p.run(&mine, &mut theirs_out, work));
    assert!(
        matches!(&e, Error::InvalidHandle(w) if w.contains("output")),
        "{e:?}"
    );
    let e = refused(&dev, &origin, || {
        p.run_on(&mine, &their_device, &mut mine_out, work)
    });
    assert!(
        matches!(&e, Error::InvalidHandle(w) if w.contains("device buffer")),
        "{e:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Devices, compilation and host functions (issue 18: DV2, KC1, KC4, HF3)

#[test]
fn device_flags_after_first_work() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    match dev.set_sync_mode(cueflow::SyncMode::BlockingSync) {
        Err(Error::NotPermitted { rule: "DV2", .. }) => {}
        other => panic!("expected a DV2 refusal, got {other:?}"),
    }
    assert!(s.query().unwrap());
}

#[test]
fn bad_compile_options() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 0.0);
    for opts in [
        cueflow::CompileOptions::new().define("A B", "1"),
        cueflow::CompileOptions::new().define("A", "1\n#define B"),
        cueflow::CompileOptions::new().std("gnu++17"),
        cueflow::CompileOptions::new().max_registers(256),
        cueflow::CompileOptions::new().include_dir("/no/such/dir/for/cueflow"),
        cueflow::CompileOptions::new().option("O3"),
        cueflow::CompileOptions::new().header("", "x"),
    ] {
        let k = Kernel::new("cft_options")
            .host(|_, _| {})
            .cuda_source("extern \"C\" __global__ void k(float*) {}", "k")
            .cuda_options(opts.clone())
            .build();
        let e = refused(&dev, &s, || {
            s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new().write(&d))
        });
        assert!(
            matches!(&e, Error::InvalidOptions { kernel, .. } if kernel == "cft_options"),
            "{opts:?}: {e:?}"
        );
        assert!(matches!(k.prepare(&dev), Err(Error::InvalidOptions { .. })));
    }
}

/// A missing header is a compile error that names it and where headers were looked for; the
/// host backend compiles no CUDA C, so this runs on a GPU only (`SKIP cuda:` otherwise).
#[test]
fn missing_header() {
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP cuda: missing_header needs a GPU: {e}");
            return;
        }
    };
    let s = Stream::new(&dev).unwrap();
    let k = Kernel::new("cft_missing_header")
        .cuda_source(
            "#include <cueflow_no_such_header.h>\nextern \"C\" __global__ void k() {}",
            "k",
        )
        .build();
    let e = refused(&dev, &s, || {
        s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new())
    });
    match e {
        Error::Compile { kernel, log } => {
            assert_eq!(kernel, "cft_missing_header");
            assert!(log.contains("cueflow_no_such_header.h"), "{log}");
            assert!(log.contains("looked in"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn host_kernel_reads_an_aliased_argument_whole() {
    // Read and written through two names is allowed (KC4), but a host kernel that reads the
    // written buffer whole (`input`) would alias other blocks' writes: a fault naming it.
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 1.0);
    let k = Kernel::new("cft_reads_alias_whole")
        .host(|_, a| {
            let _ = a.input::<f32>(0);
        })
        .build();
    s.launch(
        &k,
        LaunchConfig::new(1, 32),
        KernelArgs::new().read(&d).write(&d),
    )
    .unwrap();
    match s.synchronize().unwrap_err() {
        Error::KernelFault { kernel, detail, .. } => {
            assert_eq!(kernel, "cft_reads_alias_whole");
            assert!(detail.contains("in_place"), "{detail}");
        }
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn host_task_over_device_memory_or_overlapping_writes() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let p = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let e = refused(&dev, &s, || {
        s.host_task("overlap")
            .writes(&p)
            .reads(p.range(1..4).unwrap())
            .run(|_| {})
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let e = refused(&dev, &s, || {
        s.host_task("twice").writes(&p).writes(&p).run(|_| {})
    });
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // (Another device's pinned memory is no misuse: portable with unified addressing, HM2.)
}

#[test]
fn host_function_touching_an_undeclared_buffer() {
    // A host task touches what it declared only: a safe host view of any pinned buffer inside
    // it is refused (HF2) — the task gets its views through `HostIo` — and a view it did not
    // declare (an index past its declarations, or read/write swapped) faults it with its name.
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let declared = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    let undeclared = Arc::new(PinnedBuffer::<f32>::new(&dev, N).unwrap());
    let seen = Arc::new(Mutex::new(None));
    {
        let (u, seen) = (undeclared.clone(), seen.clone());
        s.host_task("peeks")
            .reads(&declared)
            .run(move |_io| *seen.lock().unwrap() = Some(u.read().map(|_| ())))
            .unwrap();
    }
    s.synchronize().unwrap();
    assert!(matches!(
        seen.lock().unwrap().take(),
        Some(Err(Error::NotPermitted { rule: "HF2", .. }))
    ));
    s.host_task("out_of_range")
        .reads(&declared)
        .run(|io| {
            let _ = io.read::<f32>(1);
        })
        .unwrap();
    match s.synchronize().unwrap_err() {
        Error::HostFnFault { name, detail, .. } => {
            assert_eq!(name, "out_of_range");
            assert!(detail.contains("declared 1"), "{detail}");
        }
        other => panic!("expected a host-function fault, got {other:?}"),
    }
}

#[test]
fn host_fn_once_during_capture() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(s.host_fn_once(|| {}), Err(Error::Capture(_))));
    assert!(matches!(
        s.add_callback(|_| panic!("never called")),
        Err(Error::Capture(_))
    ));
    assert!(matches!(
        s.host_task("captured").run(|_| {}),
        Err(Error::Capture(_))
    ));
    assert_eq!(s.end_capture().unwrap().node_count(), 0);
}
