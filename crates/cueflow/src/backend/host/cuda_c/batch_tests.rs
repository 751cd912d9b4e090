//! R5 (`isolate/ring.rs`): a stream's queued CUDA C launches go to the kernel worker several to
//! a request, and run exactly as one launch per request would — in order, every one.

use crate::backend::host::isolate::worker::sent;
use crate::{Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, Stream};

const SOURCE: &str = r#"
extern "C" __global__ void r5_spin(unsigned* x, unsigned rounds)
{
    volatile unsigned v = 0;
    for (unsigned i = 0; i < rounds; ++i) v = v + i;
    if (threadIdx.x == 0 && v == 1) x[1] = v;
}
extern "C" __global__ void r5_mul3(unsigned* x) { if (threadIdx.x == 0) x[0] = x[0] * 3u + 1u; }
extern "C" __global__ void r5_add5(unsigned* x) { if (threadIdx.x == 0) x[0] = x[0] + 5u; }
"#;

fn kernel(name: &str) -> Kernel {
    Kernel::new(name).cuda_source(SOURCE, name).build()
}

/// Launches queued behind a long one share requests (fewer requests than launches) and keep
/// their stream order: two non-commuting steps interleaved give the value computed here.
#[test]
fn r5_queued_launches_share_requests_and_keep_their_order() {
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v == "0");
    if off("CUEFLOW_HOST_ARENA") || off("CUEFLOW_HOST_ISOLATE") {
        eprintln!("SKIP r5: CUDA C runs in this process (CUEFLOW_HOST_ARENA/ISOLATE=0)");
        return;
    }
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let (spin, mul3, add5) = (kernel("r5_spin"), kernel("r5_mul3"), kernel("r5_add5"));
    if let Err(e) = [&spin, &mul3, &add5]
        .iter()
        .try_for_each(|k| k.prepare(&dev))
    {
        eprintln!("SKIP r5: no C++ compiler for CUDA C on the host backend: {e}");
        return;
    }
    let x = DeviceBuffer::<u32>::new(&dev, 2).unwrap();
    s.write_pageable(&x, &[7, 0]).unwrap();
    let one = LaunchConfig::new(1, 32);
    let mut expected = 7u32;
    let (requests, launches) = sent();
    // The spin keeps the worker busy while the rest is queued behind it.
    s.launch(
        &spin,
        one,
        KernelArgs::new().write(&x).scalar(20_000_000u32),
    )
    .unwrap();
    for i in 0..300 {
        if i % 3 == 0 {
            s.launch(&mul3, one, KernelArgs::new().write(&x)).unwrap();
            expected = expected.wrapping_mul(3).wrapping_add(1);
        } else {
            s.launch(&add5, one, KernelArgs::new().write(&x)).unwrap();
            expected = expected.wrapping_add(5);
        }
    }
    let mut out = [0u32; 2];
    s.read_pageable(&mut out, &x).unwrap();
    assert_eq!(out[0], expected, "every launch ran, in stream order");
    let (requests, launches) = (sent().0 - requests, sent().1 - launches);
    // Other tests' requests carry at least one launch each: the difference is this test's.
    assert!(
        launches - requests >= 100,
        "{launches} launches in {requests} requests: the queued launches did not share requests"
    );
}
