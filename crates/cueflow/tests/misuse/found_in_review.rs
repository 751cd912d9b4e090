//! Found in review: each was a panic, a hang or undefined behaviour before.

use super::*;

#[test]
fn alloc_async_of_an_impossible_size_is_out_of_memory() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    // Rounding usize::MAX - 10 up to the pool's 256-byte classes used to wrap to a 1-byte block.
    for n in [usize::MAX - 10, 1usize << 63] {
        let r = s.alloc_async::<u8>(n);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{n}: {r:?}");
    }
    assert!(s.query().unwrap());
}

#[test]
fn graph_launch_refused_while_the_host_views_its_pinned_buffer() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = filled(&dev, N, 7.0);
    let mut pinned = PinnedBuffer::<f32>::new(&dev, N).unwrap();
    s.begin_capture(CaptureMode::Global).unwrap();
    s.copy_d2h(&mut pinned, &d).unwrap();
    let exec = s.end_capture().unwrap().instantiate().unwrap();
    {
        let view = pinned.read().unwrap();
        let r = exec.launch(&s);
        assert!(
            matches!(r, Err(Error::NotPermitted { rule: "MM3", .. })),
            "{r:?}"
        );
        assert!(
            view.iter().all(|&x| x == 0.0),
            "the graph must not have run"
        );
    }
    // Without a view the launch runs, and a later view waits for its copy.
    exec.launch(&s).unwrap();
    assert!(pinned.read().unwrap().iter().all(|&x| x == 7.0));
}

#[test]
fn trace_control_refused_inside_a_host_function() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (d2, seen2) = (dev.clone(), seen.clone());
    s.host_fn(move || {
        let r1 = d2.start_trace().map(|_| ());
        let r2 = d2.stop_trace().map(|_| ());
        seen2.lock().unwrap().extend([r1, r2]);
    })
    .unwrap();
    s.synchronize().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for r in seen.iter() {
        assert!(
            matches!(r, Err(Error::NotPermitted { rule: "HF2", .. })),
            "{r:?}"
        );
    }
}

#[test]
fn host_kernel_atomics_on_a_non_atomic_argument_fault() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    let k = Kernel::new("misuses_atomics")
        .host(|_, a| a.atomics_u32(0)[0].store(1, std::sync::atomic::Ordering::Relaxed))
        .build();
    s.launch(&k, LaunchConfig::new(1, 1), KernelArgs::new().write(&flag))
        .unwrap();
    let r = s.synchronize();
    assert!(
        matches!(&r, Err(Error::KernelFault { kernel, .. }) if kernel == "misuses_atomics"),
        "{r:?}"
    );
}
