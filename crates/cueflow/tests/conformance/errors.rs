//! ER1–ER3: not-ready, sticky errors, validation.

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Error, Event, KernelArgs, LaunchConfig,
    PinnedBuffer, Stream,
};

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// ER1 Not-ready is not an error

/// ER1: not-ready answers (stream query, event query, elapsed) poison nothing.
pub fn er1_not_ready_is_not_an_error(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let start = s.record().unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 1.0).unwrap();
    let end = s.record().unwrap();
    for _ in 0..50 {
        assert_eq!(s.query(), Ok(false));
        assert_eq!(end.query(), Ok(false));
        assert!(matches!(
            Event::elapsed_ms(&start, &end),
            Err(Error::NotReady(_))
        ));
    }
    assert_eq!(dev.sticky_error(), None);
    gate.open();
    s.synchronize().unwrap();
    assert_eq!(s.query(), Ok(true));
    assert!(Event::elapsed_ms(&start, &end).unwrap() >= 0.0);
    kernels::scale(&s, &d, 2.0).unwrap();
    dev.synchronize().unwrap();
    assert_all(&download(&d), 2.0);
}

// ---------------------------------------------------------------------------------------------
// ER2 Sticky

/// ER2: after a kernel fault every later call on the device returns that error: enqueues,
/// synchronizations, queries, creations and allocations.
pub fn er2_sticky_error_everywhere(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let legacy = Stream::legacy(dev);
    let d = zeros(dev, N);
    let d2 = zeros(dev, N);
    let src = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    let mut dst = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let (e1, e2) = (s.record().unwrap(), s.record().unwrap());
    let never = Event::new(dev).unwrap();
    let pooled = s.alloc_async::<f32>(N).unwrap();
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::scale(&cap, &d, 2.0).unwrap();
    let graph = cap.end_capture().unwrap();
    let exec = graph.instantiate().unwrap();
    s.synchronize().unwrap();

    kernels::fault(&s).unwrap();
    let err = s.synchronize().unwrap_err();
    assert!(err.is_sticky(), "{err:?}");

    let calls: Vec<(&str, cueflow::Result<()>)> = vec![
        ("Stream::synchronize", s.synchronize()),
        ("Stream::query", s.query().map(drop)),
        ("legacy synchronize", legacy.synchronize()),
        ("Device::synchronize", dev.synchronize()),
        ("Event::synchronize", e2.synchronize()),
        ("Event::query", e2.query().map(drop)),
        ("Event::synchronize (never recorded)", never.synchronize()),
        ("Event::query (never recorded)", never.query().map(drop)),
        ("Event::elapsed_ms", Event::elapsed_ms(&e1, &e2).map(drop)),
        ("launch", kernels::fill(&s, &d, 1.0)),
        ("launch on legacy", kernels::fill(&legacy, &d, 1.0)),
        ("memset", s.memset(&d, 0)),
        ("copy_h2d", s.copy_h2d(&d, &src)),
        ("copy_d2h", s.copy_d2h(&mut dst, &d)),
        ("copy_d2d", s.copy_d2d(&d2, &d)),
        ("copy_h2h", s.copy_h2h(&mut dst, &src)),
        ("write_pageable", s.write_pageable(&d, &vec![0.0f32; N])),
        ("read_pageable", s.read_pageable(&mut vec![0.0f32; N], &d)),
        ("host_fn", s.host_fn(|| {})),
        ("record_event", s.record_event(&never)),
        ("wait_event", s.wait_event(&e1)),
        ("GraphExec::launch", exec.launch(&s)),
        ("Graph::instantiate", graph.instantiate().map(drop)),
        ("alloc_async", s.alloc_async::<f32>(N).map(drop)),
        ("free_async", s.free_async(pooled)),
        (
            "DeviceBuffer::new",
            DeviceBuffer::<f32>::new(dev, N).map(drop),
        ),
        (
            "PinnedBuffer::new",
            PinnedBuffer::<f32>::new(dev, N).map(drop),
        ),
        ("Stream::new", Stream::new(dev).map(drop)),
        ("Event::new", Event::new(dev).map(drop)),
        ("begin_capture", s.begin_capture(CaptureMode::Global)),
    ];
    let wrong: Vec<String> = calls
        .into_iter()
        .filter(|(_, r)| r.as_ref().err() != Some(&err))
        .map(|(name, r)| format!("{name}: {r:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "calls that did not return the sticky error {err:?}:\n{}",
        wrong.join("\n")
    );
    assert_eq!(dev.sticky_error(), Some(err));
}

/// ER2: a new device context is the recovery: once every handle of the poisoned device is
/// gone, a device opened anew works. (The test owns its device so that it can drop it.)
pub fn er2_new_device_recovers(dev: Device) {
    let spec = dev.spec();
    let s = Stream::new(&dev).unwrap();
    let d = zeros(&dev, N);
    kernels::fault(&s).unwrap();
    let err = s.synchronize().unwrap_err();
    assert!(err.is_sticky());
    assert_eq!(dev.sticky_error(), Some(err.clone()));
    assert_eq!(kernels::fill(&s, &d, 1.0).unwrap_err(), err);
    drop((s, d, dev));
    let fresh = Device::open(spec).unwrap();
    assert_eq!(fresh.sticky_error(), None);
    let s = Stream::new(&fresh).unwrap();
    let d = zeros(&fresh, N);
    kernels::fill(&s, &d, 3.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 3.0);
}

// ---------------------------------------------------------------------------------------------
// ER3 Validation

/// ER3: handles from another device are refused at the call with a typed error, never a
/// panic, and nothing is enqueued. (Pinned memory of another device is not among them: with
/// unified addressing, which every device here has, it is portable, HM2.)
pub fn er3_foreign_handles_refused(dev: &Device) {
    let other = Device::open(dev.spec()).unwrap();
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let foreign = zeros(&other, N);
    let foreign_event = Stream::new(&other).unwrap().record().unwrap();
    let local_event = s.record().unwrap();
    let foreign_exec = {
        let cap = Stream::new(&other).unwrap();
        cap.begin_capture(CaptureMode::Global).unwrap();
        kernels::empty(&cap).unwrap();
        cap.end_capture().unwrap().instantiate().unwrap()
    };
    s.synchronize().unwrap();
    dev.start_trace().unwrap();
    // A copy's message says which side is foreign.
    for (e, side) in [
        (s.copy_d2d(&d, &foreign).unwrap_err(), "source"),
        (s.copy_d2d(&foreign, &d).unwrap_err(), "destination"),
    ] {
        assert!(
            matches!(&e, Error::InvalidHandle(m) if m.contains(side)),
            "{e:?}"
        );
    }
    let errs: Vec<(&str, Error)> = vec![
        ("copy_d2d", s.copy_d2d(&d, &foreign).unwrap_err()),
        ("memset", s.memset(&foreign, 0).unwrap_err()),
        ("launch", kernels::fill(&s, &foreign, 1.0).unwrap_err()),
        ("record_event", s.record_event(&foreign_event).unwrap_err()),
        // wait_event on another device's event is allowed (MD2): see multi.rs.
        (
            "elapsed_ms",
            Event::elapsed_ms(&local_event, &foreign_event).unwrap_err(),
        ),
        (
            "write_pageable",
            s.write_pageable(&foreign, &vec![0.0; N]).unwrap_err(),
        ),
        ("GraphExec::launch", foreign_exec.launch(&s).unwrap_err()),
    ];
    let t = dev.stop_trace().unwrap();
    for (call, e) in &errs {
        assert!(matches!(e, Error::InvalidHandle(_)), "{call}: {e:?}");
    }
    assert_eq!(enqueued(&t), 0, "{:#?}", t.ops);
    assert!(s.query().unwrap());
    assert_all(&download(&foreign), 0.0);
    assert_eq!(dev.sticky_error(), None);
    assert_eq!(other.sticky_error(), None);
}

/// ER3: bad sizes and shapes are typed errors that enqueue nothing; an out-of-range priority is
/// not misuse (ST7).
pub fn er3_bad_sizes_refused(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    dev.start_trace().unwrap();
    assert!(matches!(
        s.copy_d2d(&d, &zeros(dev, N - 1)),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(d.slice(0..N + 1), Err(Error::OutOfBounds { .. })));
    assert!(matches!(
        s.launch(
            &kernels::FILL_F32,
            LaunchConfig::new(1, 2048),
            KernelArgs::new().write(&d)
        ),
        Err(Error::InvalidLaunch { .. })
    ));
    assert!(matches!(
        kernels::saxpy(&s, 1.0, &zeros(dev, 3), &d),
        Err(Error::InvalidArgument { .. })
    ));
    let t = dev.stop_trace().unwrap();
    assert_eq!(
        t.ops.iter().filter(|o| o.stream == s.id()).count(),
        0,
        "{:#?}",
        t.ops
    );
    assert!(s.query().unwrap());
    let p = Stream::builder(dev).priority(i32::MAX).build().unwrap();
    assert_eq!(p.priority(), dev.properties().priority_least);
    kernels::fill(&s, &d, 1.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
}
