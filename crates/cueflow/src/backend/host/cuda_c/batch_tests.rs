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
extern "C" __global__ void r5_set(unsigned* x, unsigned v) { if (threadIdx.x == 0) x[0] = v; }
extern "C" __global__ void r5_inc_from(unsigned* dst, const unsigned* src)
{
    if (threadIdx.x == 0) dst[0] = src[0] + 1u;
}
"#;

/// Whether CUDA C runs in the kernel worker here; else the R5 tests have nothing to check.
fn isolated() -> bool {
    let off = |k: &str| std::env::var(k).is_ok_and(|v| v == "0");
    if off("CUEFLOW_HOST_ARENA") || off("CUEFLOW_HOST_ISOLATE") {
        eprintln!("SKIP r5: CUDA C runs in this process (CUEFLOW_HOST_ARENA/ISOLATE=0)");
        return false;
    }
    true
}

fn kernel(name: &str) -> Kernel {
    Kernel::new(name).cuda_source(SOURCE, name).build()
}

/// Launches queued behind a long one share requests (fewer requests than launches) and keep
/// their stream order: two non-commuting steps interleaved give the value computed here.
#[test]
fn r5_queued_launches_share_requests_and_keep_their_order() {
    if !isolated() {
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

/// A queued launch that also waits for another stream's work (automatic ordering, AC5: a
/// dependency of the node itself, not a marker between) stays out of the chain of the
/// launches before it: it runs after that work, and reads what it wrote.
#[test]
fn r5_a_launch_with_another_dependency_waits_for_it() {
    if !isolated() {
        return;
    }
    let dev = Device::host_with_workers(2).unwrap();
    dev.set_auto_order(true);
    let (a, b) = (Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap());
    let (spin, set, inc) = (kernel("r5_spin"), kernel("r5_set"), kernel("r5_inc_from"));
    if let Err(e) = [&spin, &set, &inc].iter().try_for_each(|k| k.prepare(&dev)) {
        eprintln!("SKIP r5: no C++ compiler for CUDA C on the host backend: {e}");
        return;
    }
    let one = LaunchConfig::new(1, 32);
    let (shared, out, scratch, busy) = (
        DeviceBuffer::<u32>::new(&dev, 2).unwrap(),
        DeviceBuffer::<u32>::new(&dev, 1).unwrap(),
        DeviceBuffer::<u32>::new(&dev, 1).unwrap(),
        DeviceBuffer::<u32>::new(&dev, 2).unwrap(),
    );
    dev.synchronize().unwrap();
    for round in 0..20u32 {
        // Stream a: a long launch, then the write that b's last launch must see.
        a.launch(
            &spin,
            one,
            KernelArgs::new().write(&busy).scalar(2_000_000u32),
        )
        .unwrap();
        a.launch(
            &set,
            one,
            KernelArgs::new().write(&shared).scalar(round * 10),
        )
        .unwrap();
        // Stream b: a chain of its own, then a read of a's write.
        b.launch(
            &spin,
            one,
            KernelArgs::new().write(&scratch).scalar(100_000u32),
        )
        .unwrap();
        for v in 0..6 {
            b.launch(&set, one, KernelArgs::new().write(&scratch).scalar(v))
                .unwrap();
        }
        b.launch(&inc, one, KernelArgs::new().write(&out).read(&shared))
            .unwrap();
        let mut got = [0u32; 1];
        b.read_pageable(&mut got, &out).unwrap();
        assert_eq!(
            got[0],
            round * 10 + 1,
            "round {round}: b's read ran before a's write"
        );
    }
}
