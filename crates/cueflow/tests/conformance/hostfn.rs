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
