use cueflow::*;

#[test]
fn smoke_pipeline() {
    let dev = Device::host().unwrap();
    let s = Stream::builder(&dev).non_blocking().build().unwrap();
    let n = 1 << 16;
    let mut host = PinnedBuffer::from_slice(&dev, &vec![1.0f32; n]).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, n).unwrap();
    let (start, stop) = (Event::new(&dev).unwrap(), Event::new(&dev).unwrap());
    s.record_event(&start).unwrap();
    s.copy_h2d(&d, &host).unwrap();
    kernels::scale(&s, &d, 2.0).unwrap();
    s.copy_d2h(&mut host, &d).unwrap();
    s.record_event(&stop).unwrap();
    assert!(host.read().unwrap().iter().all(|&x| x == 2.0));
    let ms = Event::elapsed_ms(&start, &stop).unwrap();
    assert!(ms > 0.0);
}

#[test]
fn completion_future_resolves_after_work() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    kernels::spin(&s, std::time::Duration::from_millis(30), 1).unwrap();
    let done = s.completion().unwrap();
    let ev = s.record().unwrap();
    let ev_done = ev.completion().unwrap();
    assert!(!s.query().unwrap());
    done.wait().unwrap();
    ev_done.wait().unwrap();
    assert!(s.query().unwrap());
}

#[test]
fn completion_reports_sticky_fault() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    kernels::fault(&s).unwrap();
    let err = s.completion().and_then(|c| c.wait());
    assert!(matches!(err, Err(Error::KernelFault { .. })), "{err:?}");
}
