//! GR1–GR4: stream capture and graphs.

use std::sync::Arc;
use std::time::Duration;

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Error, Event, GraphExec, PinnedBuffer, Stream,
};

use crate::support::*;

/// Capture on `s1` a fork/join graph: `a = 1` on s1, `b = 2` on s2 (joined through an event),
/// then `a = 3 * b + a` on s1 after joining s2 back. Returns the graph, uninstantiated.
fn fork_join(
    s1: &Stream,
    s2: &Stream,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
) -> cueflow::Graph {
    s1.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(s1, a, 1.0).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    assert!(
        s2.is_capturing(),
        "waiting on a captured event joins the capture"
    );
    kernels::spin(s2, Duration::from_millis(5), 1).unwrap();
    kernels::fill(s2, b, 2.0).unwrap();
    s1.wait_event(&s2.record().unwrap()).unwrap();
    kernels::saxpy(s1, 3.0, b, a).unwrap();
    s1.end_capture().unwrap()
}

// ---------------------------------------------------------------------------------------------
// GR1 Capture

/// GR1: capturing records the operations into a graph instead of running them.
pub fn gr1_capture_records_instead_of_running(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    assert!(!s.is_capturing());
    s.begin_capture(CaptureMode::Global).unwrap();
    assert!(s.is_capturing());
    kernels::fill(&s, &d, 5.0).unwrap();
    kernels::scale(&s, &d, 2.0).unwrap();
    let g = s.end_capture().unwrap();
    assert!(!s.is_capturing());
    assert_eq!((g.node_count(), g.edge_count(), g.lanes()), (2, 1, 1));
    s.synchronize().unwrap();
    assert_all(&download(&d), 0.0); // nothing ran
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 10.0);
}

/// GR1: streams that wait on an event recorded in the capture join it; their work is captured
/// too, with the dependencies the events gave.
pub fn gr1_joined_streams_are_captured(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), side_stream(dev));
    let (a, b) = (zeros(dev, N), zeros(dev, N));
    let g = fork_join(&s1, &s2, &a, &b);
    assert!(!s1.is_capturing() && !s2.is_capturing());
    assert_eq!(g.lanes(), 2);
    assert_eq!(g.node_count(), 4);
    // fill(b) after spin; saxpy after fill(a) and fill(b); spin after fill(a).
    assert_eq!(g.edge_count(), 4);
    dev.synchronize().unwrap();
    assert_all(&download(&a), 0.0);
    assert_all(&download(&b), 0.0);
    g.instantiate().unwrap().launch(&s1).unwrap();
    s1.synchronize().unwrap();
    assert_all(&download(&a), 7.0);
    assert_all(&download(&b), 2.0);
}

/// GR1: a capture cannot begin on the legacy default stream.
pub fn gr1_not_on_legacy_stream(dev: &Device) {
    let legacy = Stream::legacy(dev);
    assert!(matches!(
        legacy.begin_capture(CaptureMode::Global),
        Err(Error::Capture(_))
    ));
    assert!(!legacy.is_capturing());
    legacy.synchronize().unwrap();
}

/// GR1: a capture must end on the stream that began it.
pub fn gr1_end_on_origin_stream(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let d = zeros(dev, N);
    s1.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&s1, &d, 1.0).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
    s1.wait_event(&s2.record().unwrap()).unwrap();
    assert!(matches!(s2.end_capture(), Err(Error::Capture(_))));
    assert!(
        s1.is_capturing() && s2.is_capturing(),
        "a refused end changes nothing"
    );
    let g = s1.end_capture().unwrap();
    assert_eq!(g.node_count(), 2);
    // A stream that is not capturing has no capture to end.
    assert!(matches!(s2.end_capture(), Err(Error::Capture(_))));
}

/// GR1: a joined stream's work must be joined back into the origin stream before the end.
pub fn gr1_unjoined_work_refused(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let d = zeros(dev, N);
    s1.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&s1, &d, 1.0).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
    assert!(matches!(s1.end_capture(), Err(Error::Capture(_))));
    // The capture is over; both streams run work again.
    assert!(!s1.is_capturing() && !s2.is_capturing());
    kernels::fill(&s2, &d, 3.0).unwrap();
    s2.synchronize().unwrap();
    assert_all(&download(&d), 3.0);
}

/// GR1: a stream already in a capture (its own or one it joined) cannot begin another.
pub fn gr1_begin_twice_refused(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    s1.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(
        s1.begin_capture(CaptureMode::Global),
        Err(Error::Capture(_))
    ));
    s2.wait_event(&s1.record().unwrap()).unwrap();
    assert!(matches!(
        s2.begin_capture(CaptureMode::Relaxed),
        Err(Error::Capture(_))
    ));
    s1.wait_event(&s2.record().unwrap()).unwrap();
    s1.end_capture().unwrap();
}

// ---------------------------------------------------------------------------------------------
// GR2 Illegal during capture

/// Begin a capture on `s` with one captured kernel and one captured event, make `call`, and
/// check GR2: the call is refused as illegal, the capture is invalidated (later captured work
/// and the end are refused, no graph), and the stream works normally afterwards.
fn assert_invalidates(
    dev: &Device,
    mode: CaptureMode,
    call: impl FnOnce(&Stream, &Event) -> cueflow::Result<()>,
) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    s.begin_capture(mode).unwrap();
    kernels::fill(&s, &d, 1.0).unwrap();
    let e = s.record().unwrap();
    match call(&s, &e) {
        Err(Error::CaptureIllegal(_)) => {}
        other => panic!("expected the call to be refused as illegal in a capture, got {other:?}"),
    }
    assert!(matches!(
        kernels::scale(&s, &d, 2.0),
        Err(Error::CaptureInvalidated(_))
    ));
    assert!(matches!(s.end_capture(), Err(Error::CaptureInvalidated(_))));
    assert!(!s.is_capturing());
    assert_eq!(dev.sticky_error(), None);
    kernels::fill(&s, &d, 4.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 4.0);
}

/// Begin a capture on `s` with `mode`, make `call` (which must succeed), and check the capture
/// is still valid and yields its graph.
fn assert_allowed(
    dev: &Device,
    mode: CaptureMode,
    call: impl FnOnce(&Stream) -> cueflow::Result<()>,
) {
    let s = Stream::new(dev).unwrap();
    let d = zeros(dev, N);
    s.begin_capture(mode).unwrap();
    kernels::fill(&s, &d, 1.0).unwrap();
    call(&s).unwrap();
    kernels::scale(&s, &d, 3.0).unwrap();
    let g = s.end_capture().unwrap();
    assert_eq!(g.node_count(), 2);
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 3.0);
}

/// GR2: synchronizing the capturing stream, in every mode.
pub fn gr2_stream_synchronize(dev: &Device) {
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        assert_invalidates(dev, mode, |s, _| s.synchronize());
    }
}

/// GR2: querying the capturing stream, in every mode.
pub fn gr2_stream_query(dev: &Device) {
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        assert_invalidates(dev, mode, |s, _| s.query().map(drop));
    }
}

/// GR2: querying an event recorded in the capture, in every mode.
pub fn gr2_event_query(dev: &Device) {
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        assert_invalidates(dev, mode, |_, e| e.query().map(drop));
    }
}

/// GR2: synchronizing an event recorded in the capture, in every mode.
pub fn gr2_event_synchronize(dev: &Device) {
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        assert_invalidates(dev, mode, |_, e| e.synchronize());
    }
}

/// GR2: device-wide synchronization from the capturing thread (global, thread-local).
pub fn gr2_device_synchronize(dev: &Device) {
    for mode in [CaptureMode::Global, CaptureMode::ThreadLocal] {
        assert_invalidates(dev, mode, |_, _| dev.synchronize());
    }
}

/// GR2: synchronous (pageable) copies on the capturing stream, in every mode.
pub fn gr2_sync_copy_on_capturing_stream(dev: &Device) {
    let d = zeros(dev, 8);
    for mode in [
        CaptureMode::Global,
        CaptureMode::ThreadLocal,
        CaptureMode::Relaxed,
    ] {
        assert_invalidates(dev, mode, |s, _| s.write_pageable(&d, &[1.0f32; 8]));
        assert_invalidates(dev, mode, |s, _| s.read_pageable(&mut [0.0f32; 8], &d));
    }
}

/// GR2: synchronous copies and allocations elsewhere on the device, from the capturing thread
/// (global, thread-local).
pub fn gr2_sync_calls_elsewhere(dev: &Device) {
    let other = side_stream(dev);
    let d = zeros(dev, 8);
    for mode in [CaptureMode::Global, CaptureMode::ThreadLocal] {
        assert_invalidates(dev, mode, |_, _| other.write_pageable(&d, &[1.0f32; 8]));
        assert_invalidates(dev, mode, |_, _| other.read_pageable(&mut [0.0f32; 8], &d));
        assert_invalidates(dev, mode, |_, _| DeviceBuffer::<f32>::new(dev, 8).map(drop));
        assert_invalidates(dev, mode, |_, _| PinnedBuffer::<f32>::new(dev, 8).map(drop));
    }
}

/// GR2, global mode: unsafe calls from *another* thread count too.
pub fn gr2_mode_global_other_thread(dev: &Device) {
    assert_invalidates(dev, CaptureMode::Global, |_, _| {
        let d = dev.clone();
        std::thread::spawn(move || DeviceBuffer::<f32>::new(&d, 8).map(drop))
            .join()
            .unwrap()
    });
    assert_invalidates(dev, CaptureMode::Global, |_, _| {
        let d = dev.clone();
        std::thread::spawn(move || d.synchronize()).join().unwrap()
    });
}

/// GR2, thread-local mode: unsafe calls from another thread do not count.
pub fn gr2_mode_thread_local_other_thread(dev: &Device) {
    assert_allowed(dev, CaptureMode::ThreadLocal, |_| {
        let d = dev.clone();
        std::thread::spawn(move || {
            DeviceBuffer::<f32>::new(&d, 8)?;
            let x = zeros(&d, 8);
            side_stream(&d).write_pageable(&x, &[2.0f32; 8])?;
            d.synchronize()
        })
        .join()
        .unwrap()
    });
}

/// GR2, relaxed mode: unsafe calls are allowed even from the capturing thread; calls on the
/// capture's own stream and events still are not (see the tests above).
pub fn gr2_mode_relaxed(dev: &Device) {
    let other = side_stream(dev);
    let x = zeros(dev, 8);
    assert_allowed(dev, CaptureMode::Relaxed, |_| {
        DeviceBuffer::<f32>::new(dev, 8)?;
        PinnedBuffer::<f32>::new(dev, 8)?;
        other.write_pageable(&x, &[2.0f32; 8])?;
        other.read_pageable(&mut [0.0f32; 8], &x)
    });
}

// ---------------------------------------------------------------------------------------------
// GR3 Replay

/// GR3: a graph launched on a stream runs as one unit in the stream's order, as many times as
/// it is launched.
pub fn gr3_replay_in_stream_order(dev: &Device) {
    let (cap, s) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let d = filled(dev, N, 1.0);
    let out = zeros(dev, N);
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::scale(&cap, &d, 2.0).unwrap();
    let exec = cap.end_capture().unwrap().instantiate().unwrap();
    let gate = Gate::kernel(dev);
    gate.block(&s);
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    s.copy_d2d(&out, &d).unwrap();
    let done = s.record().unwrap();
    assert_stays_pending(
        &done,
        Duration::from_millis(20),
        "graph launches behind the gate",
    );
    assert_all(&peek(&d), 1.0);
    gate.open();
    s.synchronize().unwrap();
    assert_all(&download(&out), 8.0);
    // And again, on another stream.
    exec.launch(&cap).unwrap();
    cap.synchronize().unwrap();
    assert_all(&download(&d), 16.0);
}

/// GR3: a multi-stream graph keeps its dependencies on every launch, and work after the launch
/// waits for every branch.
pub fn gr3_replay_keeps_dependencies(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), side_stream(dev));
    let (a, b) = (zeros(dev, N), zeros(dev, N));
    let exec = fork_join(&s1, &s2, &a, &b).instantiate().unwrap();
    let s = side_stream(dev);
    let (out_a, out_b) = (zeros(dev, N), zeros(dev, N));
    for _ in 0..3 {
        exec.launch(&s).unwrap();
        s.copy_d2d(&out_a, &a).unwrap();
        s.copy_d2d(&out_b, &b).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&out_a), 7.0);
        assert_all(&download(&out_b), 2.0);
        // Reset so a launch that skipped a node would show.
        s.memset(&a, 0).unwrap();
        s.memset(&b, 0).unwrap();
    }
}

/// GR3: branches of a graph with no dependency between them run at the same time (flag
/// handshake inside the graph), launch after launch.
pub fn gr3_graph_branches_run_concurrently(dev: &Device) {
    let (s1, s2) = (Stream::new(dev).unwrap(), Stream::new(dev).unwrap());
    let f = flag(dev);
    s1.begin_capture(CaptureMode::Global).unwrap();
    s1.memset(&f, 0).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::wait_flag(&s1, &f, 1, GATE_TIMEOUT).unwrap();
    kernels::set_flag(&s2, &f, 1).unwrap();
    s1.wait_event(&s2.record().unwrap()).unwrap();
    let exec = s1.end_capture().unwrap().instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&s1).unwrap();
        s1.synchronize().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// GR4 Lifetime

/// GR4: an instantiated graph keeps every buffer (and host function) it touches alive for as
/// long as it exists, although every other handle is gone.
pub fn gr4_graph_keeps_buffers_alive(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let out = zeros(dev, N);
    let token = Arc::new(());
    let exec: GraphExec = {
        let src = filled(dev, N, 6.0);
        let tmp = DeviceBuffer::<f32>::new(dev, N).unwrap();
        let cap = Stream::new(dev).unwrap();
        cap.begin_capture(CaptureMode::Global).unwrap();
        cap.copy_d2d(&tmp, &src).unwrap();
        kernels::scale(&cap, &tmp, 2.0).unwrap();
        cap.copy_d2d(&out, &tmp).unwrap();
        let t = token.clone();
        cap.host_fn(move || {
            let _ = &t;
        })
        .unwrap();
        let graph = cap.end_capture().unwrap();
        graph.instantiate().unwrap()
        // `src`, `tmp`, `cap` and the graph are dropped here.
    };
    assert!(
        Arc::strong_count(&token) > 1,
        "the graph released its host function"
    );
    // Churn the allocator so freed memory would be reused and overwritten.
    for _ in 0..8 {
        drop(filled(dev, N, -1.0));
    }
    for _ in 0..2 {
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&out), 12.0);
    }
    drop(exec);
    // Released once the work is done; a backend may reclaim lazily, at its next call.
    wait_until("the dropped graph releases what it held", || {
        dev.synchronize().unwrap();
        Arc::strong_count(&token) == 1
    });
}

/// A graph that fills `out` with `value`, then counts its runs in a host function.
fn fill_and_count(
    dev: &Device,
    out: &DeviceBuffer<f32>,
    value: f32,
) -> (GraphExec, Arc<std::sync::atomic::AtomicU32>) {
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let cap = side_stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::fill(&cap, out, value).unwrap();
    let r = ran.clone();
    cap.host_fn(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })
    .unwrap();
    (cap.end_capture().unwrap().instantiate().unwrap(), ran)
}

/// GR4: a graph dropped while its launch waits behind other work still runs whole — its kernel
/// writes, its host function runs — and what it held is released once it has.
pub fn gr4_a_graph_dropped_while_its_launch_is_pending_runs_whole(dev: &Device) {
    let s = side_stream(dev);
    let out = zeros(dev, N);
    let (exec, ran) = fill_and_count(dev, &out, 5.0);
    let gate = Gate::host(dev);
    gate.block(&s);
    exec.launch(&s).unwrap();
    drop(exec);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "ran past the gate"
    );
    gate.open();
    s.synchronize().unwrap();
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_all(&download(&out), 5.0);
    wait_until("the dropped graph releases its host function", || {
        dev.synchronize().unwrap();
        Arc::strong_count(&ran) == 1
    });
}

/// GR4: dropping a large instantiation costs the drop, as `cudaGraphExecDestroy` does, not the
/// next call on the stream its last launch ran on — here a stream the program never
/// synchronized (it waited on an event), so the launch is still in the stream's keepalive
/// queue when the graph is dropped, and the next call, a query, retires it. (CUDA: ~1.4 µs a node to destroy; the host backend's
/// instantiations are cheap to drop, so there the test only runs the steps.)
pub fn gr4_dropping_a_graph_costs_the_drop_not_a_later_call(dev: &Device) {
    const NODES: usize = 6000;
    let s = side_stream(dev);
    let exec = {
        let cap = side_stream(dev);
        cap.begin_capture(CaptureMode::Global).unwrap();
        for _ in 0..NODES {
            kernels::empty(&cap).unwrap();
        }
        cap.end_capture().unwrap().instantiate().unwrap()
    };
    exec.launch(&s).unwrap();
    let done = Event::new(dev).unwrap();
    s.record_event(&done).unwrap();
    done.synchronize().unwrap();
    let t = std::time::Instant::now();
    drop(exec);
    let dropping = t.elapsed();
    // A query of the idle stream retires what its queue kept (the launch, and with it the
    // graph if the drop had left it there).
    let t = std::time::Instant::now();
    assert!(s.query().unwrap());
    let next = t.elapsed();
    println!(
        "dropping a {NODES}-node graph took {dropping:?}, the next query of its stream {next:?}"
    );
    if !is_host(dev) {
        assert!(
            next < dropping / 4 + Duration::from_millis(1),
            "the next query paid for the dropped graph: {next:?} (the drop took {dropping:?})"
        );
    }
}

/// GR4: the program's last handle of a graph dropped inside a host function on the stream its
/// launch ran on (cueflow makes no driver call there, so the destroy waits for a later call):
/// the launch's work is done and right, later work on the stream runs, and the graph's host
/// function is released.
pub fn gr4_a_graph_dropped_inside_a_host_function(dev: &Device) {
    let s = side_stream(dev);
    let out = zeros(dev, N);
    let (exec, ran) = fill_and_count(dev, &out, 7.0);
    let slot = Arc::new(std::sync::Mutex::new(Some(exec)));
    slot.lock().unwrap().as_ref().unwrap().launch(&s).unwrap();
    let in_fn = slot.clone();
    s.host_fn(move || drop(in_fn.lock().unwrap().take()))
        .unwrap();
    s.synchronize().unwrap();
    assert!(slot.lock().unwrap().is_none(), "the host function ran");
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_all(&download(&out), 7.0);
    kernels::fill(&s, &out, 8.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&out), 8.0);
    wait_until("the dropped graph releases its host function", || {
        dev.synchronize().unwrap();
        Arc::strong_count(&ran) == 1
    });
}
