//! Capture (GR1, GR2)

use super::*;

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
