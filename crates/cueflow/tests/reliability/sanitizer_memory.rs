//! Item 4 (RL2): the sanitizer forgets dropped streams without forgetting a race. The soak of
//! every mode is `tests/soak.rs`.

use super::*;

/// A dropped stream whose work no host call observed still races; one ordered before a live
/// stream by an event stays ordered however many streams come and go meanwhile (clocks are
/// compacted); once the host observed it, it is forgotten.
#[test]
fn dropped_streams_are_forgotten_without_losing_races() {
    let dev = Device::host().unwrap();
    dev.set_sanitize(SanitizeMode::Warn);
    let buf = DeviceBuffer::<f32>::new(&dev, 256).unwrap();
    let nb = || Stream::builder(&dev).non_blocking().build().unwrap();
    let gate_flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    // Unobserved and unordered: a race, after the writer is gone.
    {
        let a = nb();
        kernels::wait_flag(&a, &gate_flag, 1, Duration::from_secs(20)).unwrap();
        kernels::fill(&a, &buf, 1.0).unwrap();
    }
    let b = nb();
    kernels::scale(&b, &buf, 2.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    kernels::set_flag(&nb(), &gate_flag, 1).unwrap();
    dev.synchronize().unwrap();
    // Ordered by an event, then dropped unobserved; then many streams come and go, each known
    // to `b` through an event, so `b`'s clock is compacted many times.
    {
        let a = nb();
        kernels::wait_flag(&a, &gate_flag, 2, Duration::from_secs(20)).unwrap();
        kernels::fill(&a, &buf, 1.0).unwrap();
        b.wait_event(&a.record().unwrap()).unwrap();
    }
    let small = DeviceBuffer::<f32>::new(&dev, 4).unwrap();
    for i in 0..500 {
        let s = nb();
        kernels::fill(&s, &small, i as f32).unwrap();
        b.wait_event(&s.record().unwrap()).unwrap();
        s.synchronize().unwrap();
    }
    kernels::scale(&b, &buf, 2.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:#?}");
    kernels::set_flag(&nb(), &gate_flag, 2).unwrap();
    b.synchronize().unwrap();
    // Observed: a new stream is ordered after all of it.
    kernels::fill(&nb(), &buf, 3.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:#?}");
    dev.synchronize().unwrap();
}

/// Found by the fuzzer: a wait on the legacy stream for an event that is already done (or was
/// never recorded) enqueues nothing, so it does not make the legacy stream wait for blocking
/// streams (ST4); a host synchronization of the legacy stream afterwards observes none of
/// their work, and a race with it is still a race (the sanitizer missed it, and with dropped
/// streams forgotten, reported a race between ordered work instead).
#[test]
fn a_legacy_wait_that_enqueues_nothing_orders_nothing() {
    let dev = Device::host().unwrap();
    dev.set_sanitize(SanitizeMode::Warn);
    let x = DeviceBuffer::<f32>::new(&dev, 256).unwrap();
    let flag = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    let a = Stream::new(&dev).unwrap();
    kernels::wait_flag(&a, &flag, 1, Duration::from_secs(20)).unwrap();
    kernels::fill(&a, &x, 1.0).unwrap();
    let legacy = Stream::legacy(&dev);
    legacy.wait_event(&Event::new(&dev).unwrap()).unwrap();
    legacy.synchronize().unwrap();
    let b = Stream::builder(&dev).non_blocking().build().unwrap();
    kernels::fill(&b, &x, 2.0).unwrap();
    let reports = dev.take_sanitizer_reports();
    let opener = Stream::builder(&dev).non_blocking().build().unwrap();
    kernels::set_flag(&opener, &flag, 1).unwrap();
    dev.synchronize().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(reports[0].earlier.operation.contains("cf_fill_f32"));
}
