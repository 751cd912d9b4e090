//! AC1–AC6: declared accesses, happens-before, races, the sanitizer, automatic ordering, and the
//! host backend's soundness. The sanitizer's full corpus (30+ racy and 30+ correct programs)
//! is `tests/sanitizer/`; these are one test per rule, in the suite every backend runs.

use std::time::Duration;

use cueflow::{kernels, Access, Device, Error, PinnedBuffer, SanitizeMode, Stream};

use crate::support::*;

/// AC1: accesses are byte ranges of allocations — chunks of one buffer are separate, the same
/// bytes through two views are one — and host access to pinned memory is an access.
pub fn ac1_accesses_are_byte_ranges(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let (a, b) = (side_stream(dev), side_stream(dev));
    let d = zeros(dev, N);
    // Disjoint chunks: no race.
    kernels::fill(&a, &d.slice(0..N / 2).unwrap(), 1.0).unwrap();
    kernels::fill(&b, &d.slice(N / 2..N).unwrap(), 2.0).unwrap();
    dev.synchronize().unwrap();
    assert!(dev.take_sanitizer_reports().is_empty());
    // One element shared by two views made differently: a race on exactly its 4 bytes.
    let v1 = d.slice(10..20).unwrap();
    let v2 = d.slice(0..N).unwrap().slice(19..30).unwrap();
    kernels::fill(&a, &v1, 3.0).unwrap();
    kernels::fill(&b, &v2, 4.0).unwrap();
    dev.synchronize().unwrap();
    let r = dev.take_sanitizer_reports();
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0].overlap, 76..80);
    // A raw host read of pinned memory the device writes is an access of the host.
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let gate = Gate::host(dev);
    gate.block(&a);
    a.copy_d2h(&mut host, &d).unwrap();
    // SAFETY: the copy into `host` waits behind the gate until after this read.
    let _ = unsafe { host.as_slice_unchecked()[0] };
    gate.open();
    dev.synchronize().unwrap();
    let r = dev.take_sanitizer_reports();
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0].later.stream, None, "the host made the later access");
    assert_eq!(r[0].earlier.access, Access::Write);
}

/// AC2: every happens-before edge orders: stream order, record → wait, the legacy stream's
/// edges, host synchronizations (stream, event, device, a query that answered done, a pageable
/// read's return), graph launch order.
pub fn ac2_happens_before_edges(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let (a, b) = (side_stream(dev), side_stream(dev));
    let (legacy, blocking) = (Stream::legacy(dev), Stream::new(dev).unwrap());
    let d = zeros(dev, N);
    kernels::fill(&a, &d, 1.0).unwrap();
    kernels::scale(&a, &d, 2.0).unwrap(); // stream order
    let e = a.record().unwrap();
    b.wait_event(&e).unwrap();
    kernels::scale(&b, &d, 2.0).unwrap(); // record → wait
    b.synchronize().unwrap();
    kernels::scale(&legacy, &d, 2.0).unwrap(); // host synchronization
    kernels::scale(&blocking, &d, 2.0).unwrap(); // ST4: after the legacy stream
    kernels::scale(&legacy, &d, 2.0).unwrap(); // ST4: after the blocking stream
    let e = legacy.record().unwrap();
    while !e.query().unwrap() {
        std::thread::yield_now();
    }
    kernels::scale(&a, &d, 0.5).unwrap(); // a query that answered done
    let mut out = vec![0.0f32; N];
    a.read_pageable(&mut out, &d).unwrap();
    kernels::scale(&b, &d, 2.0).unwrap(); // a pageable read's return
    dev.synchronize().unwrap();
    assert!(
        dev.sanitizer_reports().is_empty(),
        "{:#?}",
        dev.sanitizer_reports()
    );
    assert_all(&download(&d), 32.0);
}

/// AC3: a race needs overlapping bytes, a write, and no order; reads never race with reads,
/// atomics never with atomics.
pub fn ac3_what_races(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let (a, b) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 1.0);
    let (y1, y2) = (zeros(dev, N), zeros(dev, N));
    kernels::saxpy(&a, 1.0, &d, &y1).unwrap();
    kernels::saxpy(&b, 1.0, &d, &y2).unwrap(); // read / read
    let flag = flag(dev);
    kernels::set_flag(&a, &flag, 1).unwrap();
    kernels::set_flag(&b, &flag, 2).unwrap(); // atomic / atomic
    dev.synchronize().unwrap();
    assert!(dev.take_sanitizer_reports().is_empty());
    kernels::set_flag(&a, &flag, 3).unwrap();
    b.memset(&flag, 0).unwrap(); // atomic / plain write
    dev.synchronize().unwrap();
    assert_eq!(dev.take_sanitizer_reports().len(), 1);
}

/// AC4: in error mode the call that completes a race returns `Error::Race` naming both
/// accesses and the fix, and enqueues nothing.
pub fn ac4_error_mode_refuses_the_racing_call(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Error);
    let (a, b) = (side_stream(dev), side_stream(dev));
    let d = zeros(dev, N);
    kernels::fill(&a, &d, 1.0).unwrap();
    match kernels::fill(&b, &d, 2.0) {
        Err(Error::Race(r)) => {
            assert_eq!(r.earlier.stream, Some(a.id()));
            assert_eq!(r.later.stream, Some(b.id()));
            assert!(r.fix.contains("record an event"), "{}", r.fix);
        }
        other => panic!("expected Error::Race, got {other:?}"),
    }
    dev.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
}

/// AC5: a stream in automatic-ordering mode waits for the earlier conflicting access on
/// another stream, and for nothing else.
pub fn ac5_automatic_ordering(dev: &Device) {
    let (a, b) = (side_stream(dev), side_stream(dev));
    b.set_auto_order(true);
    let d = zeros(dev, N);
    let gate = Gate::host(dev);
    gate.block(&a);
    kernels::fill(&a, &d.slice(0..N / 2).unwrap(), 1.0).unwrap();
    // Disjoint: runs while `a` is held.
    kernels::fill(&b, &d.slice(N / 2..N).unwrap(), 2.0).unwrap();
    let disjoint = b.record().unwrap();
    wait_until("the disjoint chunk's fill completes", || {
        disjoint.query().unwrap()
    });
    // Conflicting: waits for `a`'s fill.
    kernels::fill(&b, &d.slice(N / 2 - 1..N / 2).unwrap(), 3.0).unwrap();
    let conflicting = b.record().unwrap();
    assert_stays_pending(
        &conflicting,
        Duration::from_millis(100),
        "the conflicting fill",
    );
    gate.open();
    dev.synchronize().unwrap();
    let v = download(&d);
    assert_eq!((v[0], v[N / 2 - 1], v[N - 1]), (1.0, 3.0, 2.0));
}

/// AC6: on the host backend, conflicting accesses on unordered streams never run at once: the
/// later one runs after the earlier one, in enqueue order. (A GPU races on them: the rule is
/// the host backend's, listed as failing on CUDA.)
pub fn ac6_conflicts_run_in_enqueue_order(dev: &Device) {
    let ((d, a, b), races) = races_on_purpose(dev, || {
        let (a, b) = (side_stream(dev), side_stream(dev));
        let d = zeros(dev, N);
        let gate = Gate::host(dev);
        gate.block(&a);
        kernels::fill(&a, &d, 1.0).unwrap();
        kernels::fill(&b, &d, 2.0).unwrap(); // the race (AC3), reported (AC4)
        let later = b.record().unwrap();
        assert_stays_pending(&later, Duration::from_millis(100), "the racing fill");
        gate.open();
        dev.synchronize().unwrap();
        (d, a.id(), b.id())
    });
    assert!(
        races
            .iter()
            .any(|r| r.earlier.stream == Some(a) && r.later.stream == Some(b)),
        "{races:?}"
    );
    assert_all(&download(&d), 2.0);
}
