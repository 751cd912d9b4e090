use cueflow::*;
#[test]
fn dbg() {
    let dev = Device::host_with_workers(3).unwrap();
    dev.set_sanitize(SanitizeMode::Error);
    let s1 = Stream::builder(&dev).non_blocking().build().unwrap();
    let b = DeviceBuffer::<f32>::new(&dev, 64).unwrap();
    kernels::fill(&s1, &b, 1.0).unwrap();
    dev.synchronize().unwrap();
    let reader = Stream::new(&dev).unwrap();
    let mut out = vec![0.0f32; 64];
    reader.read_pageable(&mut out, &b).unwrap();
}
