//! Item 3 (GR2): abandoned and invalidated captures end with their stream.

use super::*;

/// The device takes work again, from this thread and another: a synchronous allocation, a
/// device synchronize, a new global capture.
fn device_is_usable(dev: &Device) {
    let d = DeviceBuffer::<f32>::new(dev, 64).expect("a synchronous allocation");
    dev.synchronize().expect("a device synchronize");
    let other = dev.clone();
    std::thread::spawn(move || {
        DeviceBuffer::<f32>::new(&other, 64).expect("an allocation from another thread");
        other
            .synchronize()
            .expect("a synchronize from another thread");
    })
    .join()
    .unwrap();
    let s = Stream::new(dev).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&s, &d, 2.0).unwrap();
    s.end_capture()
        .unwrap()
        .instantiate()
        .unwrap()
        .launch(&s)
        .unwrap();
    s.synchronize().unwrap();
    let mut out = vec![0.0f32; 64];
    s.read_pageable(&mut out, &d).unwrap();
    assert!(out.iter().all(|&x| x == 2.0));
}

/// Dropping a stream while it captures (global mode, with a joined stream still alive).
fn dropped_while_capturing(dev: &Device) {
    let d = DeviceBuffer::<f32>::new(dev, 64).unwrap();
    let joined = Stream::new(dev).unwrap();
    {
        let s = Stream::new(dev).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        kernels::fill(&s, &d, 1.0).unwrap();
        joined.wait_event(&s.record().unwrap()).unwrap();
        kernels::scale(&joined, &d, 3.0).unwrap();
    }
    device_is_usable(dev);
    // The joined stream captures no more: its work runs.
    assert!(!joined.is_capturing());
    kernels::fill(&joined, &d, 5.0).unwrap();
    joined.synchronize().unwrap();
}

/// Returning early by `?` after a call invalidated the capture: the stream goes with the scope.
fn early_return_after_invalidation(dev: &Device) {
    fn captured(dev: &Device, d: &DeviceBuffer<f32>) -> Result<cueflow::Graph> {
        let s = Stream::new(dev)?;
        s.begin_capture(CaptureMode::Global)?;
        kernels::fill(&s, d, 1.0)?;
        dev.synchronize()?; // Illegal in a capture: invalidates it, and `?` returns.
        s.end_capture()
    }
    let d = DeviceBuffer::<f32>::new(dev, 64).unwrap();
    assert!(matches!(captured(dev, &d), Err(Error::CaptureIllegal(_))));
    device_is_usable(dev);
}

/// A thread that abandons its capture leaves the device usable for every other thread.
fn abandoned_in_another_thread(dev: &Device) {
    let d2 = dev.clone();
    std::thread::spawn(move || {
        let s = Stream::new(&d2).unwrap();
        let b = DeviceBuffer::<f32>::new(&d2, 64).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        kernels::fill(&s, &b, 1.0).unwrap();
        // A failed call, then the thread ends with the stream.
        assert!(DeviceBuffer::<f32>::new(&d2, 8).is_err());
    })
    .join()
    .unwrap();
    device_is_usable(dev);
}

#[test]
fn a_stream_dropped_while_capturing_ends_its_capture_host() {
    dropped_while_capturing(&Device::host().unwrap());
}

#[test]
fn an_early_return_after_an_invalidated_capture_ends_it_host() {
    early_return_after_invalidation(&Device::host().unwrap());
}

#[test]
fn a_capture_abandoned_by_another_thread_ends_with_its_stream_host() {
    abandoned_in_another_thread(&Device::host().unwrap());
}

#[test]
fn abandoned_captures_end_with_their_stream_cuda() {
    if let Some(dev) = cuda() {
        dropped_while_capturing(&dev);
        early_return_after_invalidation(&dev);
        abandoned_in_another_thread(&dev);
    }
}
