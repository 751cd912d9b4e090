//! HF1–HF2: host functions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cueflow::{kernels, Device, DeviceBuffer, Error, Event, PinnedBuffer, Stream};

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// HF1 Host functions

/// HF1: a host function runs after all earlier work on its stream: it sees the data a held
/// kernel and copy produced.
pub fn hf1_runs_after_earlier_work(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let mut p = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 3.0).unwrap();
    s.copy_d2h(&mut p, &d).unwrap();
    let p = Arc::new(p);
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let (p, seen) = (p.clone(), seen.clone());
        s.host_fn(move || {
            // SAFETY: HF1 (under test) puts this after the copy that writes `p`; nothing else
            // writes it.
            let v = unsafe { p.as_slice_unchecked() };
            seen.lock().unwrap().push(v.iter().all(|&x| x == 3.0));
        })
        .unwrap();
    }
    assert!(seen.lock().unwrap().is_empty());
    gate.open();
    s.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![true]);
}

/// HF1: later work on the stream does not start before the host function has returned.
pub fn hf1_later_work_waits_for_host_fn(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let latch = Arc::new(Latch::default());
    let started = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    {
        let (latch, started, timed_out) = (latch.clone(), started.clone(), timed_out.clone());
        s.host_fn(move || {
            started.store(true, Ordering::SeqCst);
            if !latch.wait(GATE_TIMEOUT) {
                timed_out.store(true, Ordering::SeqCst);
            }
        })
        .unwrap();
    }
    kernels::fill(&s, &d, 9.0).unwrap();
    wait_until("the host function started", || {
        started.load(Ordering::SeqCst)
    });
    // The host function is running and compute units are free: the kernel must still wait.
    assert_all(&peek(&d), 0.0);
    assert!(!s.query().unwrap());
    latch.open();
    s.synchronize().unwrap();
    assert!(!timed_out.load(Ordering::SeqCst));
    assert_all(&download(&d), 9.0);
}

/// HF1: host functions interleaved with device work run in stream order.
pub fn hf1_stream_order(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, 64);
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..200u32 {
        let log = log.clone();
        s.host_fn(move || log.lock().unwrap().push(i)).unwrap();
        if i % 20 == 0 {
            kernels::scale(&s, &d, 1.0).unwrap();
        }
    }
    s.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
}

/// HF1: host functions on different streams have no order: one enqueued later, on another
/// stream, runs first when the earlier one's stream is held.
pub fn hf1_no_order_between_streams(dev: &Device) {
    let (a, b) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let gate = Gate::kernel(dev);
    gate.block(&a);
    for (s, name) in [(&a, "a"), (&b, "b")] {
        let log = log.clone();
        s.host_fn(move || log.lock().unwrap().push(name)).unwrap();
    }
    b.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["b"]);
    gate.open();
    a.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["b", "a"]);
}

// ---------------------------------------------------------------------------------------------
// HF2 No device calls

/// A runtime call made inside a host function, and what it returned.
type Outcome = (&'static str, Result<(), Error>);

/// HF2: runtime calls from inside a host function are refused with a not-permitted error, not
/// deadlocked, and the stream goes on afterwards.
pub fn hf2_runtime_calls_refused(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let (d, d2) = (zeros(dev, N), zeros(dev, N));
    let e = s.record().unwrap();
    let results: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    {
        let (dev, s2, e, results) = (dev.clone(), s.clone(), e.clone(), results.clone());
        let (d, d2) = (d.clone(), d2.clone());
        s.host_fn(move || {
            let s = &s2;
            let calls: Vec<Outcome> = vec![
                ("Stream::synchronize", s.synchronize()),
                ("Stream::query", s.query().map(drop)),
                ("Device::synchronize", dev.synchronize()),
                ("Stream::new", Stream::new(&dev).map(drop)),
                ("Event::new", Event::new(&dev).map(drop)),
                ("Event::query", e.query().map(drop)),
                ("Event::synchronize", e.synchronize()),
                ("Event::elapsed_ms", Event::elapsed_ms(&e, &e).map(drop)),
                ("Stream::record_event", s.record_event(&e)),
                ("Stream::wait_event", s.wait_event(&e)),
                ("launch", kernels::fill(s, &d, 1.0)),
                ("memset", s.memset(&d, 0)),
                ("copy_d2d", s.copy_d2d(&d2, &d)),
                ("host_fn", s.host_fn(|| {})),
                ("write_pageable", s.write_pageable(&d, &vec![0.0; N])),
                (
                    "DeviceBuffer::new",
                    DeviceBuffer::<f32>::new(&dev, 1).map(drop),
                ),
                ("alloc_async", s.alloc_async::<f32>(1).map(drop)),
                ("Stream::per_thread", Stream::per_thread(&dev).map(drop)),
            ];
            results.lock().unwrap().extend(calls);
        })
        .unwrap();
    }
    kernels::fill(&s, &d, 2.0).unwrap();
    synchronize_or_fail(&s); // a broken HF2 deadlocks the host function on its own stream
    let results = results.lock().unwrap();
    assert_eq!(results.len(), 18);
    for (call, r) in results.iter() {
        match r {
            Err(Error::NotPermitted { rule: "HF2", .. }) => {}
            other => panic!("{call} inside a host function gave {other:?}"),
        }
    }
    assert_eq!(dev.sticky_error(), None);
    assert_all(&download(&d), 2.0);
}

// ---------------------------------------------------------------------------------------------
// HF3 Host functions over buffers

/// HF3: a host function may be `FnOnce`: it runs exactly once, in stream order, consuming what
/// it captured.
pub fn hf3_runs_once_and_consumes(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let gate = Gate::host(dev);
    gate.block(&s);
    let (tx, rx) = std::sync::mpsc::channel();
    let owned: Vec<u32> = (1..=100).collect();
    s.host_fn_once(move || tx.send(owned.into_iter().sum::<u32>()).unwrap())
        .unwrap();
    assert!(rx.try_recv().is_err(), "ran before the gate opened (HF1)");
    gate.open();
    s.synchronize().unwrap();
    gate.assert_not_timed_out();
    assert_eq!(rx.recv().unwrap(), 5050);
    assert!(rx.try_recv().is_err(), "ran twice");
    // A capture refuses it (a graph would run it at every launch), recording nothing.
    let c = Stream::new(dev).unwrap();
    c.begin_capture(cueflow::CaptureMode::Global).unwrap();
    assert!(matches!(c.host_fn_once(|| {}), Err(Error::Capture(_))));
    let g = c.end_capture().unwrap();
    assert_eq!(g.node_count(), 0);
}

/// HF3: a host function over declared pinned buffers reads what its stream just copied and
/// writes what later work uploads, through safe views of exactly those bytes; the sanitizer
/// (error mode) finds this correctly ordered program race-free.
pub fn hf3_views_of_declared_buffers(dev: &Device) {
    dev.set_sanitize(cueflow::SanitizeMode::Error);
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    let mut src = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let out = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    kernels::fill(&s, &d, 3.0).unwrap();
    s.copy_d2h(&mut src, &d).unwrap();
    let consumed = vec![1.0f32; 1]; // moved in and consumed
    s.host_task("double")
        .reads(&src)
        .writes(&out)
        .run(move |io| {
            let add = consumed.into_iter().sum::<f32>();
            let (x, y) = (io.read::<f32>(0), io.write::<f32>(1));
            for (o, i) in y.iter_mut().zip(x) {
                *o = 2.0 * i + add;
            }
        })
        .unwrap();
    let back = zeros(dev, N);
    s.copy_h2d(&back, &out).unwrap();
    gate.open();
    // A host view waits for the task (MM3).
    assert_all(&out.read().unwrap(), 7.0);
    s.synchronize().unwrap();
    assert_all(&download(&back), 7.0);
    assert!(
        dev.sanitizer_reports().is_empty(),
        "{:#?}",
        dev.sanitizer_reports()
    );
    dev.set_sanitize(cueflow::SanitizeMode::Off);
}

/// HF3: the task's accesses are accesses like any other: an unordered read of what it writes
/// on another stream is a race (error mode refuses it); declarations that write overlapping
/// bytes, or device memory, are refused with nothing enqueued.
pub fn hf3_accesses_are_tracked(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let other = side_stream(dev);
    let out = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let d = zeros(dev, N);
    dev.set_sanitize(cueflow::SanitizeMode::Error);
    let gate = Gate::host(dev);
    gate.block(&s);
    s.host_task("fill")
        .writes(&out)
        .run(|io| io.write::<f32>(0).fill(5.0))
        .unwrap();
    match other.copy_h2d(&d, &out) {
        Err(Error::Race(r)) => assert!(r.to_string().contains("fill"), "{r}"),
        r => panic!("an unordered read of the task's output: {r:?}"),
    }
    let e = s.record().unwrap();
    other.wait_event(&e).unwrap();
    other.copy_h2d(&d, &out).unwrap();
    gate.open();
    other.synchronize().unwrap();
    gate.assert_not_timed_out();
    dev.set_sanitize(cueflow::SanitizeMode::Off);
    assert_all(&download(&d), 5.0);
    // Refusals, nothing enqueued.
    dev.start_trace().unwrap();
    let r = s
        .host_task("overlap")
        .reads(out.range(0..N / 2).unwrap())
        .writes(out.range(N / 4..N).unwrap())
        .run(|_| {});
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    assert_eq!(enqueued(&dev.stop_trace().unwrap()), 0);
    // Another device's pinned memory is portable with unified addressing (HM2): taken.
    let other_dev = Device::open(dev.spec()).unwrap();
    let foreign = PinnedBuffer::<f32>::new(&other_dev, 4).unwrap();
    let r = s.host_task("foreign").reads(&foreign).run(|_| {});
    assert_eq!(
        r.is_ok(),
        other_dev.properties().unified_addressing,
        "{r:?}"
    );
    s.synchronize().unwrap();
}

/// HF3: a host function that panics is a sticky fault reported as a host-function fault with
/// its name, not as a kernel's.
pub fn hf3_panic_is_a_host_function_fault(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let p = PinnedBuffer::<f32>::new(dev, 16).unwrap();
    s.host_task("checker")
        .reads(&p)
        .run(|_| panic!("checker found a mismatch"))
        .unwrap();
    let err = s.synchronize().unwrap_err();
    match &err {
        Error::HostFnFault {
            name,
            detail,
            device,
        } => {
            assert_eq!(name, "checker");
            assert!(detail.contains("mismatch"), "{detail}");
            assert!(device.contains(&dev.spec().to_string()), "{device}");
        }
        other => panic!("expected a host-function fault, got {other:?}"),
    }
    assert!(err.is_sticky());
    assert_eq!(dev.synchronize().unwrap_err(), err);
}

// ---------------------------------------------------------------------------------------------
// HF4 Callbacks with a status

/// HF4: a stream callback runs once, after the earlier work, in the stream's order, with
/// `Ok(())`; later work waits for it. A capturing stream refuses it and never calls it.
pub fn hf4_callback_runs_once_with_success(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let gate = Gate::host(dev);
    gate.block(&s);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (g, log) = (gate.clone(), seen.clone());
    s.add_callback(move |status| {
        let open = g.is_open();
        log.lock()
            .unwrap()
            .push(format!("callback open={open} {status:?}"))
    })
    .unwrap();
    let log = seen.clone();
    s.host_fn(move || log.lock().unwrap().push("later".into()))
        .unwrap();
    assert!(seen.lock().unwrap().is_empty(), "ran before the gate");
    gate.open();
    s.synchronize().unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        ["callback open=true Ok(())", "later"],
        "after the earlier work, once, before the later work"
    );
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(cueflow::CaptureMode::Global).unwrap();
    let called = Arc::new(AtomicBool::new(false));
    let c = called.clone();
    assert!(matches!(
        cap.add_callback(move |_| c.store(true, Ordering::SeqCst)),
        Err(Error::Capture(_))
    ));
    cap.end_capture().unwrap();
    assert!(
        !called.load(Ordering::SeqCst),
        "a refused callback is never called"
    );
}

/// HF4: a callback enqueued behind a kernel that faults is called with the device's sticky
/// error, once (on CUDA at the latest when its stream is dropped: a faulted context runs no
/// host functions), where host functions without a status just never run.
pub fn hf4_callback_is_told_the_sticky_error(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let gate = Gate::host(dev);
    gate.block(&s);
    kernels::fault(&s).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    s.add_callback(move |status| tx.send(status).unwrap())
        .unwrap();
    let plain = Arc::new(AtomicBool::new(false));
    let p = plain.clone();
    s.host_fn(move || p.store(true, Ordering::SeqCst)).unwrap();
    gate.open();
    let err = s.synchronize().unwrap_err();
    assert!(err.is_sticky(), "{err:?}");
    drop(s);
    let status = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the callback was never called");
    assert_eq!(status, Err(err.clone()));
    assert!(rx.try_recv().is_err(), "called once");
    assert!(
        !plain.load(Ordering::SeqCst),
        "a poisoned device runs no host functions"
    );
    assert_eq!(dev.sticky_error(), Some(err));
}
