//! Events (EV6, EV7, ER3)

use super::*;

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
    // The flag is set after the memset that clears it (`start` follows it), never before.
    let setter = Stream::builder(&dev).non_blocking().build().unwrap();
    setter.wait_event(&start).unwrap();
    kernels::set_flag(&setter, &flag, 1).unwrap();
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
