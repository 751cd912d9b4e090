//! EV1–EV8: events.

use std::time::{Duration, Instant};

use cueflow::{kernels, Device, Error, Event, EventFlags, Stream};

use crate::support::*;

fn no_timing() -> EventFlags {
    EventFlags {
        timing: false,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// EV1 Record

/// EV1: an event captures the work enqueued before the record, and not the work after it.
pub fn ev1_record_captures_earlier_work(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let (g1, g2) = (Gate::kernel(dev), Gate::kernel(dev));
    g1.block(&s);
    kernels::fill(&s, &d, 1.0).unwrap();
    let e = s.record().unwrap();
    g2.block(&s); // enqueued after the record: not part of it
    kernels::scale(&s, &d, 2.0).unwrap();
    assert!(!e.query().unwrap(), "the event captured the held work");
    g1.open();
    e.synchronize().unwrap(); // returns although g2 still holds the stream
    assert!(!g2.is_open());
    assert!(!s.query().unwrap());
    assert_all(&peek(&d), 1.0);
    g2.open();
    s.synchronize().unwrap();
    assert_all(&download(&d), 2.0);
}

/// EV1: an event recorded on an idle stream is done, whatever is enqueued after it.
pub fn ev1_record_on_idle_stream(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let e = s.record().unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
    assert!(!gate.is_open());
    gate.open();
    s.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// EV2 Re-record

/// EV2: recording again replaces what the event captures for later queries and waits.
pub fn ev2_rerecord_replaces(dev: &Device) {
    let (held, idle) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let gate = Gate::kernel(dev);
    gate.block(&held);
    let e = held.record().unwrap();
    assert!(!e.query().unwrap());
    idle.record_event(&e).unwrap();
    e.synchronize().unwrap(); // now stands for the idle stream's (empty) work
    assert!(e.query().unwrap());
    // A wait made now uses the new capture.
    let w = Stream::new(dev).unwrap();
    w.wait_event(&e).unwrap();
    kernels::empty(&w).unwrap();
    w.synchronize().unwrap();
    assert!(!gate.is_open());
    // And back: recording on the held stream makes it pending again.
    held.record_event(&e).unwrap();
    assert!(!e.query().unwrap());
    gate.open();
    e.synchronize().unwrap();
}

/// EV2: a wait already made keeps what the event captured at the time of the wait, even after
/// the event is re-recorded on an idle stream.
pub fn ev2_earlier_wait_keeps_old_capture(dev: &Device) {
    let (held, idle, waiter) = (
        Stream::new(dev).unwrap(),
        Stream::new(dev).unwrap(),
        Stream::new(dev).unwrap(),
    );
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&held);
    let e = held.record().unwrap();
    waiter.wait_event(&e).unwrap();
    kernels::fill(&waiter, &d, 7.0).unwrap();
    let waiter_done = waiter.record().unwrap();
    idle.record_event(&e).unwrap();
    e.synchronize().unwrap();
    assert_stays_pending(
        &waiter_done,
        Duration::from_millis(20),
        "work behind the wait",
    );
    assert_all(&peek(&d), 0.0);
    gate.open();
    waiter.synchronize().unwrap();
    assert_all(&download(&d), 7.0);
}

/// EV2: the other way round: a wait made on a done capture is not held up when the event is
/// re-recorded on a held stream.
pub fn ev2_rerecord_does_not_reach_back(dev: &Device) {
    let (held, idle, waiter) = (
        Stream::new(dev).unwrap(),
        Stream::new(dev).unwrap(),
        Stream::new(dev).unwrap(),
    );
    let e = idle.record().unwrap();
    waiter.wait_event(&e).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&held);
    held.record_event(&e).unwrap();
    kernels::empty(&waiter).unwrap();
    waiter.synchronize().unwrap();
    assert!(!gate.is_open());
    assert!(!e.query().unwrap());
    gate.open();
    e.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// EV3 Never recorded

/// EV3: a never-recorded event stands for no work: query done, synchronize returns, a stream
/// wait on it is a no-op.
pub fn ev3_never_recorded(dev: &Device) {
    let e = Event::new(dev).unwrap();
    assert!(e.query().unwrap());
    e.synchronize().unwrap();
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    s.wait_event(&e).unwrap();
    kernels::fill(&s, &d, 1.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 1.0);
    // Same for an event without timing.
    let e = Event::with_flags(dev, no_timing()).unwrap();
    assert!(e.query().unwrap());
    e.synchronize().unwrap();
}

/// EV3: the no-op wait stays a no-op when the event is recorded later on a held stream.
pub fn ev3_wait_on_never_recorded_then_recorded(dev: &Device) {
    let (held, waiter) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let e = Event::new(dev).unwrap();
    waiter.wait_event(&e).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&held);
    held.record_event(&e).unwrap();
    kernels::empty(&waiter).unwrap();
    waiter.synchronize().unwrap();
    assert!(!gate.is_open());
    gate.open();
    held.synchronize().unwrap();
}

// ---------------------------------------------------------------------------------------------
// EV4 Stream wait

/// EV4: work enqueued after `wait_event` waits for the captured work; the host does not block
/// (the wait is made while the captured work is held); work before the wait is not delayed.
pub fn ev4_stream_wait(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let (d, x) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&s1);
    kernels::fill(&s1, &d, 1.0).unwrap();
    let e = s1.record().unwrap();
    kernels::fill(&s2, &x, 2.0).unwrap();
    let before_wait = s2.record().unwrap();
    s2.wait_event(&e).unwrap(); // returns while s1 is held
    kernels::scale(&s2, &d, 3.0).unwrap();
    let after_wait = s2.record().unwrap();
    before_wait.synchronize().unwrap();
    assert_all(&peek(&x), 2.0);
    assert!(!gate.is_open());
    assert_stays_pending(
        &after_wait,
        Duration::from_millis(20),
        "work behind the wait",
    );
    assert_all(&peek(&d), 0.0);
    gate.open();
    s2.synchronize().unwrap();
    assert_all(&download(&d), 3.0);
}

/// EV2, EV4 through `wait_stream`: a join's event serves the next join once it is done with,
/// and a wait made before keeps what it captured — `s[1]` joins `s[0]` while `s[0]` is held,
/// the next joins (`s[3]` waiting for an idle `s[2]`) record an event again at once, and
/// `s[1]`'s later work still waits for `s[0]` while `s[3]`'s runs. On CUDA, joins once the
/// device has enough events create none (a few while automatic graphs hold them).
pub fn ev4_joins_reuse_events_and_keep_their_waits(dev: &Device) {
    let s: Vec<Stream> = (0..4).map(|_| Stream::new(dev).unwrap()).collect();
    let (d, x) = (zeros(dev, N), zeros(dev, N));
    let gate = Gate::kernel(dev);
    gate.block(&s[0]);
    s[1].wait_stream(&s[0]).unwrap();
    kernels::fill(&s[1], &d, 1.0).unwrap();
    let after_wait = s[1].record().unwrap();
    for _ in 0..4 {
        s[3].wait_stream(&s[2]).unwrap();
    }
    kernels::fill(&s[3], &x, 2.0).unwrap();
    s[3].synchronize().unwrap(); // Its joins did not wait for the held stream.
    assert_all(&peek(&x), 2.0);
    assert_stays_pending(
        &after_wait,
        Duration::from_millis(20),
        "work behind the first join",
    );
    assert_all(&peek(&d), 0.0);
    gate.open();
    s[1].synchronize().unwrap();
    assert_all(&download(&d), 1.0);
    let logged = dev.driver_calls(true).is_some();
    for _ in 0..20 {
        s[1].wait_stream(&s[0]).unwrap();
    }
    let names = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    if !logged {
        println!(
            "SKIP cuda: events created by joins (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    }
    // Held by automatic graphs (CUEFLOW_AUTO_GRAPH=1), a join keeps its event until the held
    // calls are issued: a few may be created then; without the pool every join creates one.
    let created = names.iter().filter(|n| **n == "cuEventCreate").count();
    assert!(created <= 4, "joins created {created} events: {names:?}");
}

/// EV4 between kinds of streams: legacy waiting on a non-blocking stream and a non-blocking
/// stream waiting on the legacy stream.
pub fn ev4_stream_wait_across_stream_kinds(dev: &Device) {
    let legacy = Stream::legacy(dev);
    let n = side_stream(dev);
    let d = zeros(dev, N);
    // non-blocking → legacy
    let gate = Gate::kernel(dev);
    gate.block(&n);
    kernels::fill(&n, &d, 1.0).unwrap();
    legacy.wait_event(&n.record().unwrap()).unwrap();
    kernels::scale(&legacy, &d, 4.0).unwrap();
    let done = legacy.record().unwrap();
    assert_stays_pending(
        &done,
        Duration::from_millis(20),
        "legacy work behind the wait",
    );
    gate.open();
    done.synchronize().unwrap();
    assert_all(&download(&d), 4.0);
    // legacy → non-blocking
    let gate = Gate::kernel(dev);
    gate.block(&legacy);
    kernels::fill(&legacy, &d, 2.0).unwrap();
    n.wait_event(&legacy.record().unwrap()).unwrap();
    kernels::scale(&n, &d, 3.0).unwrap();
    let done = n.record().unwrap();
    assert_stays_pending(
        &done,
        Duration::from_millis(20),
        "non-blocking work behind the wait",
    );
    gate.open();
    done.synchronize().unwrap();
    assert_all(&download(&d), 6.0);
}

// ---------------------------------------------------------------------------------------------
// EV5 Query / synchronize

/// EV5: query never blocks; synchronize blocks until the captured work is done.
pub fn ev5_query_and_synchronize(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    let e = s.record().unwrap();
    for _ in 0..100 {
        assert!(!e.query().unwrap());
    }
    let t = gate.open_after(Duration::from_millis(50));
    e.synchronize().unwrap();
    assert!(
        gate.is_open(),
        "event synchronize returned before the work was done"
    );
    assert!(e.query().unwrap());
    t.join().unwrap();
}

/// EV5 with the driver's calls counted: an event seen complete is not asked about again (the
/// driver's first query of a completed event costs about 1.5 µs), until it is recorded again,
/// when the next query asks the driver (EV2: the new record is what it stands for).
pub fn ev5_a_completed_event_is_asked_about_once(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let e = Event::new(dev).unwrap();
    kernels::empty(&s).unwrap();
    s.record_event(&e).unwrap();
    e.synchronize().unwrap();
    let logged = dev.driver_calls(true).is_some();
    for _ in 0..10 {
        assert!(e.query().unwrap());
    }
    e.synchronize().unwrap();
    let after_seen = dev.driver_calls(true).map(|c| c.1).unwrap_or_default();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.record_event(&e).unwrap();
    assert!(
        !e.query().unwrap(),
        "a re-recorded event stands for its new work"
    );
    gate.open();
    e.synchronize().unwrap();
    let after_record = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    if !logged {
        println!(
            "SKIP: driver calls of event queries (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    }
    let asked = |names: &[&str]| {
        names
            .iter()
            .filter(|n| **n == "cuEventQuery" || **n == "cuEventSynchronize")
            .count()
    };
    assert_eq!(asked(&after_seen), 0, "asked again: {after_seen:?}");
    assert!(asked(&after_record) >= 2, "{after_record:?}");
}

// ---------------------------------------------------------------------------------------------
// EV6 Timing

/// EV6: elapsed is the time between the two completions: at least the spin between them, and
/// the negative of the reverse.
pub fn ev6_elapsed(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let (start, end) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    s.record_event(&start).unwrap();
    kernels::spin(&s, Duration::from_millis(30), 1).unwrap();
    s.record_event(&end).unwrap();
    end.synchronize().unwrap();
    let ms = Event::elapsed_ms(&start, &end).unwrap();
    assert!(
        (29.9..10_000.0).contains(&ms),
        "elapsed {ms} ms around a 30 ms spin"
    );
    let back = Event::elapsed_ms(&end, &start).unwrap();
    assert!((back + ms).abs() < 1e-3, "reverse elapsed {back} vs {ms}");
    assert_eq!(Event::elapsed_ms(&start, &start).unwrap(), 0.0);
}

/// EV6: sub-microsecond resolution: over several short intervals, at least one is not a whole
/// number of microseconds (a microsecond clock would make every one whole).
pub fn ev6_sub_microsecond_resolution(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let mut seen = Vec::new();
    for _ in 0..8 {
        let (a, b) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
        s.record_event(&a).unwrap();
        kernels::spin(&s, Duration::from_micros(20), 1).unwrap();
        s.record_event(&b).unwrap();
        b.synchronize().unwrap();
        let ms = Event::elapsed_ms(&a, &b).unwrap();
        assert!(ms >= 0.0199, "elapsed {ms} ms around a 20 µs spin");
        seen.push(ms);
    }
    assert!(
        seen.iter().any(|ms| {
            let us = ms * 1000.0;
            (us - us.round()).abs() > 1e-3
        }),
        "every interval was a whole number of microseconds: {seen:?}"
    );
}

/// EV6: not-ready while either event is incomplete (either side); fine once both are done.
pub fn ev6_elapsed_not_ready(dev: &Device) {
    let (held, idle) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let gate = Gate::kernel(dev);
    let before = held.record().unwrap();
    gate.block(&held);
    let after = held.record().unwrap();
    let done = idle.record().unwrap();
    done.synchronize().unwrap();
    assert!(matches!(
        Event::elapsed_ms(&before, &after),
        Err(Error::NotReady(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&after, &done),
        Err(Error::NotReady(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&done, &after),
        Err(Error::NotReady(_))
    ));
    assert_eq!(dev.sticky_error(), None, "not-ready is not sticky (ER1)");
    gate.open();
    after.synchronize().unwrap();
    assert!(Event::elapsed_ms(&before, &after).unwrap() >= 0.0);
    Event::elapsed_ms(&after, &done).unwrap();
}

/// EV6: invalid-handle when either event was never recorded.
pub fn ev6_elapsed_never_recorded(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let recorded = s.record().unwrap();
    recorded.synchronize().unwrap();
    let never = Event::new(dev).unwrap();
    assert!(matches!(
        Event::elapsed_ms(&recorded, &never),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&never, &recorded),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&never, &never),
        Err(Error::InvalidHandle(_))
    ));
}

/// EV6: invalid-handle when either event has timing disabled, even when both are done.
pub fn ev6_elapsed_timing_disabled(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let timed = s.record().unwrap();
    let untimed = Event::with_flags(dev, no_timing()).unwrap();
    s.record_event(&untimed).unwrap();
    s.synchronize().unwrap();
    assert!(untimed.query().unwrap());
    assert!(matches!(
        Event::elapsed_ms(&timed, &untimed),
        Err(Error::InvalidHandle(_))
    ));
    assert!(matches!(
        Event::elapsed_ms(&untimed, &timed),
        Err(Error::InvalidHandle(_))
    ));
}

// ---------------------------------------------------------------------------------------------
// EV7 Flags

/// EV7: an event without timing still synchronizes: record, wait, query, synchronize.
pub fn ev7_timing_off_still_synchronizes(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let e = Event::with_flags(dev, no_timing()).unwrap();
    assert_eq!(e.flags(), no_timing());
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s1);
    kernels::fill(&s1, &d, 1.0).unwrap();
    s1.record_event(&e).unwrap();
    s2.wait_event(&e).unwrap();
    kernels::scale(&s2, &d, 9.0).unwrap();
    assert!(!e.query().unwrap());
    gate.open();
    e.synchronize().unwrap();
    s2.synchronize().unwrap();
    assert_all(&download(&d), 9.0);
}

/// EV7: a blocking-sync event's host wait sleeps instead of spinning: the waiting thread uses
/// little CPU time (checked where the OS reports per-thread CPU time).
pub fn ev7_blocking_sync_sleeps(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let flags = EventFlags {
        blocking_sync: true,
        ..Default::default()
    };
    let e = Event::with_flags(dev, flags).unwrap();
    assert!(e.flags().blocking_sync);
    let gate = Gate::kernel(dev);
    gate.block(&s);
    s.record_event(&e).unwrap();
    let cpu0 = thread_cpu_time();
    let t0 = Instant::now();
    let t = gate.open_after(Duration::from_millis(200));
    e.synchronize().unwrap();
    let wall = t0.elapsed();
    assert!(gate.is_open());
    if let (Some(c0), Some(c1)) = (cpu0, thread_cpu_time()) {
        let cpu = c1 - c0;
        assert!(
            cpu < wall / 2,
            "a blocking-sync wait of {wall:?} used {cpu:?} of CPU time"
        );
    }
    t.join().unwrap();
}

/// EV7: an inter-process event needs timing off (refused with it, usable without).
pub fn ev7_interprocess_needs_timing_off(dev: &Device) {
    let bad = EventFlags {
        interprocess: true,
        ..Default::default()
    };
    assert!(matches!(
        Event::with_flags(dev, bad),
        Err(Error::InvalidHandle(_))
    ));
    let ok = EventFlags {
        interprocess: true,
        timing: false,
        blocking_sync: false,
    };
    let e = Event::with_flags(dev, ok).unwrap();
    let s = Stream::new(dev).unwrap();
    kernels::empty(&s).unwrap();
    s.record_event(&e).unwrap();
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
}

// ---------------------------------------------------------------------------------------------
// EV8 Destroy

/// EV8: dropping an event whose work is pending returns at once; waits made on it still hold.
pub fn ev8_drop_pending_event(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let d = zeros(dev, N);
    let gate = Gate::kernel(dev);
    gate.block(&s1);
    kernels::fill(&s1, &d, 1.0).unwrap();
    let e = s1.record().unwrap();
    s2.wait_event(&e).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
    drop(e); // returns although its work is held
    assert!(!gate.is_open());
    let done = s2.record().unwrap();
    assert_stays_pending(
        &done,
        Duration::from_millis(20),
        "work behind the dropped event",
    );
    gate.open();
    s2.synchronize().unwrap();
    assert_all(&download(&d), 2.0);
}
