//! The sanitizer's modes and reports (AC4), its lints, and automatic ordering (AC5).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use cueflow::{
    kernels, Access, Device, Error, Event, LintKind, PinnedBuffer, SanitizeMode, Stream,
};

use crate::support::*;

fn values(d: &cueflow::DeviceBuffer<f32>) -> Vec<f32> {
    let s = stream(d.device());
    let mut out = vec![0.0f32; d.len()];
    s.read_pageable(&mut out, d).unwrap();
    out
}

pub fn error_mode_refuses_and_enqueues_nothing(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Error);
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    match kernels::scale(&s2, &d, 2.0) {
        Err(Error::Race(r)) => {
            assert!(r.to_string().starts_with("cueflow sanitizer: data race"));
            assert_eq!(r.later.stream, Some(s2.id()));
        }
        other => panic!("expected Error::Race, got {other:?}"),
    }
    dev.synchronize().unwrap();
    assert!(
        values(&d).iter().all(|&x| x == 1.0),
        "the refused kernel ran"
    );
    // The fixed program goes through.
    s2.wait_stream(&s1).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
    dev.synchronize().unwrap();
    assert!(values(&d).iter().all(|&x| x == 2.0));
}

pub fn panic_mode_panics_before_enqueuing(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Panic);
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    let caught = catch_unwind(AssertUnwindSafe(|| kernels::scale(&s2, &d, 2.0)));
    let payload = caught.expect_err("panic mode must panic on a race");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(msg.starts_with("cueflow sanitizer: data race"), "{msg}");
    dev.set_sanitize(SanitizeMode::Off);
    dev.synchronize().unwrap();
    assert!(
        values(&d).iter().all(|&x| x == 1.0),
        "the racing kernel ran"
    );
}

pub fn off_mode_reports_nothing(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Off);
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
    dev.synchronize().unwrap();
    assert!(dev.sanitizer_reports().is_empty());
}

pub fn report_names_stream_kernel_argument_and_fix(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let s1 = Stream::builder(dev)
        .non_blocking()
        .name("producer")
        .build()
        .unwrap();
    let s2 = stream(dev);
    let d = filled(dev, N, 0.0);
    let y = filled(dev, N, 0.0);
    let part = d.slice(100..200).unwrap();
    let w = line!();
    kernels::fill(&s1, &part, 1.0).unwrap();
    let r = line!();
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
    dev.synchronize().unwrap();
    let reports = dev.sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let rep = &reports[0];
    assert_eq!(rep.earlier.stream, Some(s1.id()));
    assert_eq!(rep.later.stream, Some(s2.id()));
    assert!(
        rep.earlier.actor.contains("\"producer\""),
        "{}",
        rep.earlier.actor
    );
    assert!(rep.earlier.actor.contains("non-blocking"));
    assert_eq!(rep.earlier.operation, "kernel `cf_fill_f32` (argument 0)");
    assert_eq!(rep.later.operation, "kernel `cf_saxpy_f32` (argument 1)");
    assert_eq!(rep.earlier.access, Access::Write);
    assert_eq!(rep.later.access, Access::Read);
    assert_eq!(rep.earlier.bytes, 400..800);
    assert_eq!(rep.later.bytes, 0..N * 4);
    assert_eq!(rep.overlap, 400..800);
    assert_eq!(rep.earlier.site.line(), w + 1);
    assert_eq!(rep.later.site.line(), r + 1);
    assert!(rep.earlier.site.file().ends_with("modes.rs"));
    let fix = &rep.fix;
    assert!(
        fix.contains(&format!("record an event on stream {} after", s1.id()))
            && fix.contains(&format!("make stream {} wait on it", s2.id()))
            && fix.contains(&format!("modes.rs:{}", w + 1))
            && fix.contains(&format!("modes.rs:{}", r + 1)),
        "{fix}"
    );
    assert!(rep.why.contains("nothing orders"), "{}", rep.why);
    let text = rep.to_string();
    assert!(text.starts_with("cueflow sanitizer: data race on bytes 400..800"));
}

pub fn report_for_host_access_names_the_fix(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let s = stream(dev);
    let d = filled(dev, N, 1.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let gate = Latch::block(&s);
    s.copy_d2h(&mut host, &d).unwrap();
    // SAFETY: the copy is held behind the gate until after this read.
    let _ = unsafe { host.as_slice_unchecked()[0] };
    gate.open();
    dev.synchronize().unwrap();
    let reports = dev.sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let rep = &reports[0];
    assert_eq!(rep.later.stream, None);
    assert_eq!(rep.later.actor, "the host");
    assert!(rep.fix.contains(&format!("synchronize stream {}", s.id())));
    assert!(rep.why.contains("as_slice_unchecked"));
}

pub fn reports_once_per_pair_of_sites(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    for _ in 0..5 {
        kernels::fill(&s1, &d, 1.0).unwrap();
        kernels::fill(&s2, &d, 2.0).unwrap();
    }
    dev.synchronize().unwrap();
    // Within the loop the pairs are (s1 fill, s2 fill) and (s2 fill, s1 fill).
    assert_eq!(dev.take_sanitizer_reports().len(), 2);
    kernels::fill(&s1, &d, 1.0).unwrap();
    kernels::fill(&s2, &d, 2.0).unwrap();
    dev.synchronize().unwrap();
    assert_eq!(
        dev.sanitizer_reports().len(),
        1,
        "reported again after take"
    );
}

pub fn lint_pageable_copy_beside_pinned_copies(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let s = stream(dev);
    let d = filled(dev, N, 0.0);
    let host = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    s.copy_h2d(&d, &host).unwrap();
    let line = line!();
    s.write_pageable(&d, &vec![2.0f32; N]).unwrap();
    dev.synchronize().unwrap();
    let lints = dev.sanitizer_lints();
    let lint = lints
        .iter()
        .find(|l| l.kind == LintKind::PageableCopy)
        .unwrap_or_else(|| panic!("no pageable lint: {lints:#?}"));
    assert_eq!(lint.site.line(), line + 1);
    assert!(lint.to_string().starts_with("cueflow sanitizer: lint"));
    assert!(dev.sanitizer_reports().is_empty(), "a lint is not a race");
}

pub fn lint_legacy_work_serializes_blocking_streams(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let (b1, b2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let (g1, g2) = (Latch::block(&b1), Latch::block(&b2));
    let line = line!();
    kernels::empty(&Stream::legacy(dev)).unwrap();
    g1.open();
    g2.open();
    dev.synchronize().unwrap();
    let lints = dev.sanitizer_lints();
    let lint = lints
        .iter()
        .find(|l| l.kind == LintKind::LegacySerializes)
        .unwrap_or_else(|| panic!("no legacy lint: {lints:#?}"));
    assert_eq!(lint.site.line(), line + 1);
    assert!(lint.message.contains(&b1.id().to_string()));
}

pub fn lint_wait_on_never_recorded_event(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let s = stream(dev);
    let e = Event::new(dev).unwrap();
    s.wait_event(&e).unwrap();
    let lints = dev.take_sanitizer_lints();
    assert!(
        lints.iter().any(|l| l.kind == LintKind::WaitNeverRecorded),
        "{lints:#?}"
    );
    s.record_event(&e).unwrap();
    s.wait_event(&e).unwrap();
    assert!(dev.sanitizer_lints().is_empty(), "a recorded event is fine");
}

pub fn auto_order_stream_orders_and_stays_silent(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    let copy = stream(dev);
    let compute = Stream::builder(dev)
        .non_blocking()
        .auto_order()
        .build()
        .unwrap();
    assert!(compute.auto_order());
    let host = PinnedBuffer::from_slice(dev, &vec![1.0f32; 1 << 20]).unwrap();
    let d = filled(dev, 1 << 20, 0.0);
    for _ in 0..4 {
        copy.copy_h2d(&d, &host).unwrap();
        kernels::scale(&compute, &d, 2.0).unwrap();
        copy.wait_stream(&compute).unwrap(); // the next copy overwrites what the kernel reads
    }
    dev.synchronize().unwrap();
    assert!(dev.sanitizer_reports().is_empty());
    assert!(values(&d).iter().all(|&x| x == 2.0));
}

pub fn auto_order_device_orders_the_racy_corpus(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Warn);
    dev.set_auto_order(true);
    // Every racy program of the corpus whose races are between streams (a raw host read, on
    // the host or in a host function, is the program's own business: automatic ordering
    // orders device work).
    let programs = crate::RACY_PROGRAMS.iter().filter(|(name, _)| {
        !matches!(
            *name,
            "host_unchecked_read_during_d2h_copy"
                | "host_fn_reads_another_streams_copy_unchecked"
                | "host_fn_reads_what_another_stream_writes"
        )
    });
    for (_, p) in programs {
        p(dev);
    }
    dev.synchronize().unwrap();
    let reports = dev.sanitizer_reports();
    assert!(
        reports.is_empty(),
        "automatic ordering left races:\n{}",
        reports
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Poll `done` for up to `window`; true if it became true.
fn within(window: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < window {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done()
}

pub fn auto_order_keeps_disjoint_chunks_concurrent(dev: &Device) {
    dev.set_auto_order(true);
    let (a, b) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let gate = Latch::block(&a);
    kernels::fill(&a, &d.slice(0..N / 2).unwrap(), 1.0).unwrap();
    kernels::fill(&b, &d.slice(N / 2..N).unwrap(), 2.0).unwrap();
    let e = b.record().unwrap();
    assert!(
        within(Duration::from_secs(10), || e.query().unwrap()),
        "work on a disjoint chunk waited for the gated stream"
    );
    assert!(!a.query().unwrap(), "the gate is still closed");
    gate.open();
    dev.synchronize().unwrap();
}

pub fn auto_order_waits_for_exactly_the_conflicts(dev: &Device) {
    let (a, b) = (stream(dev), stream(dev));
    b.set_auto_order(true);
    let d = filled(dev, N, 0.0);
    let gate = Latch::block(&a);
    kernels::fill(&a, &d.slice(0..N / 2).unwrap(), 1.0).unwrap();
    kernels::fill(&b, &d.slice(N / 2 - 1..N / 2).unwrap(), 2.0).unwrap();
    let e = b.record().unwrap();
    assert!(
        !within(Duration::from_millis(100), || e.query().unwrap()),
        "a conflicting write did not wait for the earlier one"
    );
    gate.open();
    dev.synchronize().unwrap();
    let v = values(&d);
    assert_eq!(v[N / 2 - 1], 2.0, "the automatic wait kept enqueue order");
    assert_eq!(v[0], 1.0);
}

/// ER3 for the sanitizer's clocks: a call refused in error mode enqueues nothing, so it orders
/// nothing. A blocking stream's call would have come after the legacy stream's work (ST4);
/// refused, a host synchronization of that stream observes none of it, and a later write on
/// another stream still races with the legacy stream's (found by the differential fuzzer:
/// the GPU ran the legacy write last).
pub fn a_refused_call_orders_nothing(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Error);
    let (legacy, blocking) = (Stream::legacy(dev), Stream::new(dev).unwrap());
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, other) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&legacy, &d, 1.0).unwrap();
    kernels::fill(&s1, &other, 1.0).unwrap();
    assert!(
        matches!(kernels::fill(&blocking, &other, 2.0), Err(Error::Race(_))),
        "the blocking stream's write races with s1's"
    );
    blocking.synchronize().unwrap();
    assert!(
        matches!(kernels::fill(&s2, &d, 3.0), Err(Error::Race(_))),
        "the legacy stream's write is not ordered before s2's"
    );
    dev.synchronize().unwrap();
}

/// The same for a refused graph launch: it is not after the graph's previous launch (GR3),
/// so a host synchronization of its stream observes nothing of that launch.
pub fn a_refused_graph_launch_orders_nothing(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Error);
    let (s1, s2, s3, s4) = (stream(dev), stream(dev), stream(dev), stream(dev));
    let (x, d) = (filled(dev, N, 1.0), filled(dev, N, 0.0));
    let cap = stream(dev);
    cap.begin_capture(cueflow::CaptureMode::Global).unwrap();
    kernels::saxpy(&cap, 1.0, &x, &d).unwrap();
    let exec = cap.end_capture().unwrap().instantiate().unwrap();
    exec.launch(&s1).unwrap(); // reads x, writes d
    let e = Event::new(dev).unwrap();
    e.record(&s1).unwrap();
    s3.wait_event(&e).unwrap();
    kernels::fill(&s3, &x, 2.0).unwrap(); // after the first launch
    assert!(
        matches!(exec.launch(&s2), Err(Error::Race(_))),
        "the second launch's read of x races with s3's write"
    );
    s2.synchronize().unwrap();
    assert!(
        matches!(kernels::fill(&s4, &d, 3.0), Err(Error::Race(_))),
        "the first launch's write of d is not ordered before s4's"
    );
    dev.synchronize().unwrap();
}
