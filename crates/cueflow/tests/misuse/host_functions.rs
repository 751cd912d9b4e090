//! Host functions (HF2)

use super::*;

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
