//! ST1–ST10: streams.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cueflow::trace::OpKind;
use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Event, PinnedBuffer, Stream, StreamKind,
};

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// ST1 Order

/// ST1: the values show the order: fill, ×3, copy (sees 3), ×5 (copy unaffected).
pub fn st1_order(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let (d, e) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 1.0).unwrap();
    kernels::scale(&s, &d, 3.0).unwrap();
    s.copy_d2d(&e, &d).unwrap();
    kernels::scale(&s, &d, 5.0).unwrap();
    // Nothing behind the gate has started, though compute units are free.
    assert_all(&peek(&d), 0.0);
    assert_all(&peek(&e), 0.0);
    gate.open();
    s.synchronize().unwrap();
    assert_all(&download(&e), 3.0);
    assert_all(&download(&d), 15.0);
}

/// ST1 across engines: kernel gate → H2D copy → kernel → D2H copy → host function. Each reads
/// what the previous one wrote, so each must start after the previous one completed.
pub fn st1_order_across_engines(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let src = PinnedBuffer::from_slice(dev, &vec![2.0f32; N]).unwrap();
    let mut out = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.copy_h2d(&d, &src).unwrap();
    kernels::scale(&s, &d, 3.0).unwrap();
    s.copy_d2h(&mut out, &d).unwrap();
    let out = Arc::new(out);
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let (out, seen) = (out.clone(), seen.clone());
        s.host_fn(move || {
            // SAFETY: stream order (the rule under test) puts the D2H copy before this host
            // function, and nothing else writes `out`.
            let v = unsafe { out.as_slice_unchecked() };
            seen.lock().unwrap().push((v[0], v[N - 1]));
        })
        .unwrap();
    }
    assert_all(&peek(&d), 0.0);
    gate.open();
    s.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(6.0, 6.0)]);
    assert_all(&out.read().unwrap(), 6.0);
}

/// ST1 in the timeline: on one stream every operation starts at or after the end of the one
/// before it, even with free compute units.
pub fn st1_no_overlap_within_stream(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    dev.start_trace().unwrap();
    kernels::spin(&s, Duration::from_millis(5), 1).unwrap();
    kernels::fill(&s, &d, 1.0).unwrap();
    kernels::spin(&s, Duration::from_millis(5), 2).unwrap();
    kernels::scale(&s, &d, 2.0).unwrap();
    s.memset(&d, 0).unwrap();
    kernels::empty(&s).unwrap();
    let t = dev.stop_trace().unwrap();
    let ops: Vec<_> = t.ops.iter().filter(|o| !o.kind.is_marker()).collect();
    assert_eq!(ops.len(), 6, "{ops:#?}");
    for w in ops.windows(2) {
        assert!(
            w[1].start_ns >= w[0].end_ns,
            "`{}` started at {} before `{}` ended at {}",
            w[1].name,
            w[1].start_ns,
            w[0].name,
            w[0].end_ns
        );
    }
}

// ---------------------------------------------------------------------------------------------
// ST2 Concurrency

/// ST2: a kernel on one stream waits for a flag that a kernel on another stream sets. It
/// completes only if the two run at the same time (else it faults after its timeout).
pub fn st2_concurrency(dev: &Device) {
    for non_blocking in [false, true] {
        let mk = || {
            let b = Stream::builder(dev);
            if non_blocking { b.non_blocking() } else { b }
                .build()
                .unwrap()
        };
        let (a, b) = (mk(), mk());
        let f = flag(dev);
        kernels::wait_flag(&a, &f, 1, GATE_TIMEOUT).unwrap();
        kernels::set_flag(&b, &f, 1).unwrap();
        a.synchronize().unwrap();
        b.synchronize().unwrap();
    }
}

/// ST2: no order between streams: work on one stream completes while another is held.
pub fn st2_no_order_between_streams(dev: &Device) {
    let (a, b) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let (x, y) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&a);
    kernels::fill(&a, &x, 1.0).unwrap();
    kernels::fill(&b, &y, 2.0).unwrap();
    b.synchronize().unwrap(); // returns while `a` is held
    assert!(!gate.is_open());
    assert!(!a.query().unwrap());
    assert_all(&peek(&y), 2.0);
    assert_all(&peek(&x), 0.0);
    gate.open();
    a.synchronize().unwrap();
    assert_all(&download(&x), 1.0);
}

// ---------------------------------------------------------------------------------------------
// ST3 Asynchrony

/// ST3: every kind of enqueue returns while the stream is held, and none of them has run.
pub fn st3_asynchrony(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let other = side_stream(dev);
    let d = zeros(dev, N);
    let d2 = zeros(dev, N);
    let d3 = zeros(dev, N);
    let bytes = upload(dev, &vec![0u32; N]);
    let src = PinnedBuffer::from_slice(dev, &vec![4.0f32; N]).unwrap();
    let mut back = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let mut hh = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let recorded = Event::new(dev).unwrap();
    let elsewhere = other.record().unwrap();

    // A graph to launch (captured on another stream, so `s` stays free to be held).
    let cap = side_stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::scale(&cap, &d3, 2.0).unwrap();
    let graph = cap.end_capture().unwrap().instantiate().unwrap();

    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 1.0).unwrap();
    s.copy_h2d(&d2, &src).unwrap();
    s.copy_d2h(&mut back, &d2).unwrap();
    s.copy_d2d(&d3, &d2).unwrap();
    s.copy_h2h(&mut hh, &src).unwrap();
    s.memset(&bytes, 0xab).unwrap();
    {
        let ran = ran.clone();
        s.host_fn(move || ran.store(true, Ordering::SeqCst))
            .unwrap();
    }
    s.record_event(&recorded).unwrap();
    s.wait_event(&elsewhere).unwrap();
    let tmp = s.alloc_async::<f32>(N).unwrap();
    kernels::fill(&s, &tmp, 3.0).unwrap();
    s.free_async(tmp).unwrap();
    graph.launch(&s).unwrap();

    // Every call above returned while the gate is closed; nothing behind it ran.
    assert!(!gate.is_open());
    assert!(!s.query().unwrap());
    assert!(!recorded.query().unwrap());
    assert!(!ran.load(Ordering::SeqCst));
    assert_all(&peek(&d), 0.0);
    assert_all(&peek(&d2), 0.0);
    assert_all(&peek(&bytes), 0);

    gate.open();
    s.synchronize().unwrap();
    assert!(ran.load(Ordering::SeqCst));
    assert_all(&download(&d), 1.0);
    assert_all(&download(&d3), 8.0);
    assert_all(&download(&bytes), 0xabab_abab);
    assert_all(&back.read().unwrap(), 4.0);
    assert_all(&hh.read().unwrap(), 4.0);
}

// ---------------------------------------------------------------------------------------------
// ST4 Legacy default stream

/// ST4: `k1 on s, k2 on legacy, k3 on s` runs k1 → k2 → k3.
pub fn st4_legacy_k1_k2_k3(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let legacy = Stream::legacy(dev);
    let (d, e) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 1.0).unwrap(); // k1
    kernels::scale(&legacy, &d, 3.0).unwrap(); // k2
    let k2_done = legacy.record().unwrap(); // before k3: k3 waits for it (ST4)
    s.copy_d2d(&e, &d).unwrap(); // k3
    assert_stays_pending(&k2_done, Duration::from_millis(20), "the legacy kernel");
    assert_all(&peek(&d), 0.0);
    gate.open();
    s.synchronize().unwrap();
    assert!(k2_done.query().unwrap());
    assert_all(&download(&d), 3.0);
    assert_all(&download(&e), 3.0);
}

/// ST4: a legacy-stream operation waits for earlier work on *every* blocking stream.
pub fn st4_legacy_waits_for_all_blocking_streams(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let legacy = Stream::legacy(dev);
    let (g1, g2) = (Gate::kernel(dev), Gate::kernel(dev));
    g1.block(&s1);
    g2.block(&s2);
    let log = Arc::new(Mutex::new(Vec::new()));
    {
        let log = log.clone();
        legacy
            .host_fn(move || log.lock().unwrap().push("legacy"))
            .unwrap();
    }
    let done = legacy.record().unwrap();
    assert_stays_pending(&done, Duration::from_millis(20), "the legacy host function");
    g1.open();
    s1.synchronize().unwrap();
    // s2 is still held: the legacy work still waits.
    assert_stays_pending(&done, Duration::from_millis(20), "the legacy host function");
    assert!(log.lock().unwrap().is_empty());
    g2.open();
    done.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["legacy"]);
}

/// ST4: later work on blocking streams — including one created after the legacy operation —
/// waits for the legacy stream.
pub fn st4_blocking_streams_wait_for_legacy(dev: &Device) {
    let legacy = Stream::legacy(dev);
    let s = Stream::new(dev).unwrap();
    // Two buffers: `s` and `late` are not ordered with each other (ST2), only after legacy.
    let (d, d2) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&legacy);
    kernels::fill(&legacy, &d, 1.0).unwrap();
    kernels::fill(&legacy, &d2, 1.0).unwrap();
    kernels::scale(&s, &d, 5.0).unwrap();
    let late = Stream::new(dev).unwrap();
    kernels::scale(&late, &d2, 2.0).unwrap();
    let (s_done, late_done) = (s.record().unwrap(), late.record().unwrap());
    assert_stays_pending(&s_done, Duration::from_millis(20), "blocking-stream work");
    assert!(!late_done.query().unwrap());
    assert_all(&peek(&d), 0.0);
    gate.open();
    s_done.synchronize().unwrap();
    late_done.synchronize().unwrap();
    // 1.0 from the legacy fill, then scaled: the scales ran after the fills.
    assert_all(&download(&d), 5.0);
    assert_all(&download(&d2), 2.0);
}

// ---------------------------------------------------------------------------------------------
// ST5 Non-blocking streams

/// ST5: a non-blocking stream neither waits for the legacy stream nor holds it up.
pub fn st5_non_blocking_ignores_legacy(dev: &Device) {
    let legacy = Stream::legacy(dev);
    let n = Stream::builder(dev).non_blocking().build().unwrap();
    assert_eq!(n.kind(), StreamKind::NonBlocking);
    let (x, y) = (zeros(dev, N), zeros(dev, N));

    // Legacy held: the non-blocking stream's work completes.
    let g = Gate::kernel(dev);
    g.block(&legacy);
    kernels::fill(&n, &x, 2.0).unwrap();
    n.synchronize().unwrap();
    assert!(!g.is_open());
    assert!(!legacy.query().unwrap());
    assert_all(&peek(&x), 2.0);
    g.open();
    legacy.synchronize().unwrap();

    // Non-blocking stream held: legacy work completes.
    let g = Gate::kernel(dev);
    g.block(&n);
    kernels::fill(&legacy, &y, 3.0).unwrap();
    legacy.synchronize().unwrap();
    assert!(!g.is_open());
    assert!(!n.query().unwrap());
    assert_all(&peek(&y), 3.0);
    g.open();
    n.synchronize().unwrap();
}

/// ST5: the legacy stream and a non-blocking stream run at the same time (flag handshake).
pub fn st5_legacy_and_non_blocking_run_concurrently(dev: &Device) {
    let legacy = Stream::legacy(dev);
    let n = side_stream(dev);
    let f = flag(dev);
    kernels::wait_flag(&legacy, &f, 1, GATE_TIMEOUT).unwrap();
    kernels::set_flag(&n, &f, 1).unwrap();
    legacy.synchronize().unwrap();
    n.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// ST6 Per-thread default stream

/// ST6: one per-thread default stream per host thread, the same one on every call.
pub fn st6_one_stream_per_thread(dev: &Device) {
    let a = Stream::per_thread(dev).unwrap();
    let again = Stream::per_thread(dev).unwrap();
    assert_eq!(a.id(), again.id());
    assert_eq!(a.kind(), StreamKind::Blocking);
    let d = dev.clone();
    let other = std::thread::spawn(move || Stream::per_thread(&d).unwrap().id())
        .join()
        .unwrap();
    assert_ne!(a.id(), other);
    assert_ne!(a.id(), Stream::legacy(dev).id());
}

/// ST6: a per-thread stream does not synchronize with other streams: its work runs beside a
/// held blocking stream and beside another thread's per-thread stream.
pub fn st6_per_thread_does_not_sync_with_other_streams(dev: &Device) {
    let mine = Stream::per_thread(dev).unwrap();
    // Flag handshake with another thread's per-thread stream: both run at once.
    let f = flag(dev);
    kernels::wait_flag(&mine, &f, 1, GATE_TIMEOUT).unwrap();
    let (d, f2) = (dev.clone(), f.clone());
    std::thread::spawn(move || {
        let theirs = Stream::per_thread(&d).unwrap();
        kernels::set_flag(&theirs, &f2, 1).unwrap();
        theirs.synchronize().unwrap();
    })
    .join()
    .unwrap();
    mine.synchronize().unwrap();

    // A held blocking stream does not hold the per-thread stream.
    let s = Stream::new(dev).unwrap();
    let x = zeros(dev, N);
    let g = Gate::kernel(dev);
    g.block(&s);
    kernels::fill(&mine, &x, 6.0).unwrap();
    mine.synchronize().unwrap();
    assert!(!g.is_open());
    assert_all(&peek(&x), 6.0);
    g.open();
    s.synchronize().unwrap();
}

/// ST6: the per-thread stream takes part in ST4 as a blocking stream, both ways.
pub fn st6_per_thread_takes_part_in_st4(dev: &Device) {
    let mine = Stream::per_thread(dev).unwrap();
    let legacy = Stream::legacy(dev);
    let d = zeros(dev, N);

    // Held per-thread stream: legacy work waits for it.
    let g = Gate::kernel(dev);
    g.block(&mine);
    kernels::fill(&mine, &d, 1.0).unwrap();
    kernels::scale(&legacy, &d, 4.0).unwrap();
    let legacy_done = legacy.record().unwrap();
    assert_stays_pending(&legacy_done, Duration::from_millis(20), "legacy work");
    g.open();
    legacy_done.synchronize().unwrap();
    assert_all(&download(&d), 4.0);

    // Held legacy stream: per-thread work waits for it.
    let g = Gate::kernel(dev);
    g.block(&legacy);
    kernels::fill(&legacy, &d, 2.0).unwrap();
    kernels::scale(&mine, &d, 5.0).unwrap();
    let mine_done = mine.record().unwrap();
    assert_stays_pending(&mine_done, Duration::from_millis(20), "per-thread work");
    g.open();
    mine_done.synchronize().unwrap();
    assert_all(&download(&d), 10.0);
}

// ---------------------------------------------------------------------------------------------
// ST7 Priorities

/// ST7: the device's range, and out-of-range priorities clamped rather than refused.
pub fn st7_priority_range_clamped(dev: &Device) {
    let p = dev.properties();
    let (least, greatest) = (p.priority_least, p.priority_greatest);
    assert!(
        greatest <= least,
        "lower is more urgent: {greatest} vs {least}"
    );
    let s = Stream::builder(dev)
        .priority(greatest - 100)
        .build()
        .unwrap();
    assert_eq!(s.priority(), greatest);
    let s = Stream::builder(dev).priority(least + 100).build().unwrap();
    assert_eq!(s.priority(), least);
    let s = Stream::builder(dev)
        .priority(i32::MIN)
        .non_blocking()
        .build()
        .unwrap();
    assert_eq!(s.priority(), greatest);
    for q in greatest..=least {
        assert_eq!(
            Stream::builder(dev).priority(q).build().unwrap().priority(),
            q
        );
    }
    assert_eq!(
        Stream::new(dev).unwrap().priority(),
        0.clamp(greatest, least)
    );
}

/// ST7: with every compute unit busy, a low-priority kernel and then a high-priority one are
/// queued; when units free up, the high-priority one is chosen first. Each needs every unit,
/// and the low one is ten times longer, so choosing it first would finish it first.
pub fn st7_priority_picks_ready_work(dev: &Device) {
    let p = dev.properties().clone();
    let units = busy_units(dev);
    let hold = Stream::builder(dev).non_blocking().build().unwrap();
    let low = Stream::builder(dev)
        .non_blocking()
        .priority(p.priority_least)
        .build()
        .unwrap();
    let high = Stream::builder(dev)
        .non_blocking()
        .priority(p.priority_greatest)
        .build()
        .unwrap();
    let gate = Gate::kernel(dev);
    gate.block_running(&hold, units);
    dev.start_trace().unwrap();
    kernels::spin(&low, Duration::from_millis(100), units).unwrap();
    let low_done = low.record().unwrap();
    kernels::spin(&high, Duration::from_millis(2), units).unwrap();
    let high_done = high.record().unwrap();
    assert!(!low_done.query().unwrap() && !high_done.query().unwrap());
    gate.open();
    let t = dev.stop_trace().unwrap();
    let after = Event::elapsed_ms(&high_done, &low_done).unwrap();
    assert!(
        after > 0.0,
        "the low-priority kernel finished {:.3} ms before the high-priority one",
        -after
    );
    if is_host(dev) {
        // On the host the start of a kernel is when a worker took its first block: exact.
        let k = ops_of(&t, OpKind::Kernel);
        let (lo, hi) = (k[0], k[1]);
        assert_eq!((lo.stream, hi.stream), (low.id(), high.id()));
        assert!(
            hi.start_ns < lo.start_ns,
            "high-priority kernel started at {} after the low-priority one at {}",
            hi.start_ns,
            lo.start_ns
        );
    }
}

/// ST7: priority never pre-empts running work: with every unit running low-priority blocks, a
/// high-priority kernel waits until they finish.
pub fn st7_priority_does_not_preempt(dev: &Device) {
    let p = dev.properties().clone();
    let low = Stream::builder(dev)
        .non_blocking()
        .priority(p.priority_least)
        .build()
        .unwrap();
    let high = Stream::builder(dev)
        .non_blocking()
        .priority(p.priority_greatest)
        .build()
        .unwrap();
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block_running(&low, busy_units(dev));
    kernels::fill(&high, &d, 1.0).unwrap();
    let high_done = high.record().unwrap();
    assert_stays_pending(
        &high_done,
        Duration::from_millis(50),
        "the high-priority kernel",
    );
    assert_all(&peek(&d), 0.0);
    gate.open();
    high_done.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
    low.synchronize().unwrap();
}

/// ST7: priority never breaks ST1 on a high-priority stream.
pub fn st7_priority_keeps_stream_order(dev: &Device) {
    let high = Stream::builder(dev).priority(-1000).build().unwrap();
    let low = Stream::builder(dev).priority(1000).build().unwrap();
    let (d, e) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&high);
    kernels::fill(&high, &d, 1.0).unwrap();
    kernels::scale(&high, &d, 7.0).unwrap();
    high.copy_d2d(&e, &d).unwrap();
    kernels::fill(&high, &d, 2.0).unwrap();
    kernels::fill(&low, &zeros(dev, N), 9.0).unwrap();
    low.synchronize().unwrap();
    gate.open();
    high.synchronize().unwrap();
    assert_all(&download(&e), 7.0);
    assert_all(&download(&d), 2.0);
}

// ---------------------------------------------------------------------------------------------
// ST8 Query

/// ST8: query answers done for an idle stream, not-ready while work is queued, and done once
/// everything enqueued before it completed. It never blocks (it is asked while a gate holds
/// the stream).
pub fn st8_query(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    assert!(s.query().unwrap(), "a new stream has no work");
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::empty(&s).unwrap();
    for _ in 0..100 {
        assert!(!s.query().unwrap());
    }
    gate.open();
    wait_until("the stream reports done", || s.query().unwrap());
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
}

/// ST8 after a synchronous read: once `read_pageable` returned, the stream has nothing left
/// to run, so a query says done at once — cueflow's own bookkeeping on the stream (CUDA's
/// keepalive marker, recorded after the 32nd item of a batch, which here is the read) is not
/// still pending behind the data the read waited for. On every kind of stream, repeated.
pub fn st8_query_after_a_synchronous_read_says_done(dev: &Device) {
    let streams = [
        Stream::new(dev).unwrap(),
        side_stream(dev),
        Stream::legacy(dev),
        Stream::per_thread(dev).unwrap(),
    ];
    let d = zeros(dev, N);
    let mut out = vec![1.0f32; N];
    for s in &streams {
        for round in 0..50 {
            for _ in 0..31 {
                kernels::fill(s, &d, round as f32).unwrap();
            }
            s.read_pageable(&mut out, &d).unwrap();
            assert!(
                s.query().unwrap(),
                "{s:?}, round {round}: work pending after the read"
            );
            assert_eq!(out[N - 1], round as f32);
        }
    }
}

/// ST8: work that is executing (its blocks are running) counts as not done.
pub fn st8_executing_work_is_not_done(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let gate = Gate::kernel(dev);
    gate.block_running(&s, 1);
    assert!(!s.query().unwrap());
    gate.open();
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
}

// ---------------------------------------------------------------------------------------------
// ST9 Synchronize

/// ST9: stream synchronize returns only after the work enqueued before it completed.
pub fn st9_stream_synchronize(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 5.0).unwrap();
    let opener = gate.open_after(Duration::from_millis(50));
    s.synchronize().unwrap();
    assert!(
        gate.is_open(),
        "synchronize returned while the gate was closed"
    );
    assert!(s.query().unwrap());
    assert_all(&download(&d), 5.0);
    opener.join().unwrap();
}

/// ST9: stream synchronize waits for that stream only.
pub fn st9_stream_synchronize_is_per_stream(dev: &Device) {
    let (held, free) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&held);
    kernels::fill(&free, &d, 1.0).unwrap();
    free.synchronize().unwrap();
    assert!(!gate.is_open());
    assert!(!held.query().unwrap());
    gate.open();
    held.synchronize().unwrap();
}

/// ST9: device synchronize waits for every stream: blocking, non-blocking and legacy.
pub fn st9_device_synchronize(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let n = side_stream(dev);
    let legacy = Stream::legacy(dev);
    let (a, b, c) = (zeros(dev, N), zeros(dev, N), zeros(dev, N));
    let (g1, g2) = (Gate::kernel(dev), Gate::host(dev));
    g1.block(&s);
    g2.block(&n);
    kernels::fill(&s, &a, 1.0).unwrap();
    kernels::fill(&n, &b, 2.0).unwrap();
    kernels::fill(&legacy, &c, 3.0).unwrap(); // behind `s` by ST4
    let t1 = g1.open_after(Duration::from_millis(30));
    let t2 = g2.open_after(Duration::from_millis(60));
    dev.synchronize().unwrap();
    assert!(g1.is_open() && g2.is_open());
    g2.assert_not_timed_out();
    assert!(s.query().unwrap() && n.query().unwrap() && legacy.query().unwrap());
    assert_all(&download(&a), 1.0);
    assert_all(&download(&b), 2.0);
    assert_all(&download(&c), 3.0);
    t1.join().unwrap();
    t2.join().unwrap();
}

// ---------------------------------------------------------------------------------------------
// ST10 Destroy

/// ST10: dropping a stream with pending work returns at once; the work still runs, and what
/// it held is released afterwards.
pub fn st10_drop_stream_with_pending_work(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let token = Arc::new(());
    let ran = Arc::new(AtomicBool::new(false));
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 4.0).unwrap();
    {
        let (token, ran) = (token.clone(), ran.clone());
        s.host_fn(move || {
            let _held = &token;
            ran.store(true, Ordering::SeqCst);
        })
        .unwrap();
    }
    drop(s); // returns although the gate is closed
    assert!(!gate.is_open());
    assert!(
        Arc::strong_count(&token) > 1,
        "pending work still holds its closure"
    );
    gate.open();
    dev.synchronize().unwrap();
    assert!(ran.load(Ordering::SeqCst));
    assert_all(&download(&d), 4.0);
    // Released once the work is done; a backend may reclaim lazily, at its next call.
    wait_until("the dropped stream's host function is released", || {
        dev.synchronize().unwrap();
        Arc::strong_count(&token) == 1
    });
}

/// ST10 with a kernel buffer: the buffer handle and the stream are both dropped while the
/// kernel that writes the buffer is pending; a copy enqueued before the drops still sees it.
pub fn st10_drop_stream_and_buffer(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let out = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    {
        let tmp = DeviceBuffer::<f32>::new(dev, N).unwrap();
        kernels::fill(&s, &tmp, 8.0).unwrap();
        s.copy_d2d(&out, &tmp).unwrap();
    }
    drop(s);
    gate.open();
    dev.synchronize().unwrap();
    assert_all(&download(&out), 8.0);
}
