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
