//! AG1–AG6: automatic graphs. Each test checks its data after every window, with and without a
//! replay, and reads [`Device::auto_graph_stats`] to see that a replay (or none) happened.

use cueflow::trace::OpKind;
use cueflow::{
    kernels, Device, DeviceBuffer, Error, Event, EventFlags, PinnedBuffer, SanitizeMode, Stream,
};

use crate::support::*;

/// A non-blocking stream in automatic-graph mode.
pub fn auto_stream(dev: &Device) -> Stream {
    Stream::builder(dev)
        .non_blocking()
        .auto_graph()
        .build()
        .unwrap()
}

/// AG1: the mode is per stream or per device, never the legacy stream's; turning it off
/// issues what is held.
pub fn ag1_mode_per_stream_and_per_device(dev: &Device) {
    let forced = dev.auto_graph(); // CUEFLOW_AUTO_GRAPH=1
    let plain = side_stream(dev);
    assert_eq!(plain.auto_graph(), forced);
    assert!(!Stream::legacy(dev).auto_graph());
    let s = auto_stream(dev);
    assert!(s.auto_graph());
    let d = zeros(dev, N);
    if !forced {
        let before = dev.auto_graph_stats();
        for _ in 0..4 {
            kernels::fill(&plain, &d, 1.0).unwrap();
            plain.synchronize().unwrap();
        }
        assert_eq!(dev.auto_graph_stats().replays, before.replays);
    }
    let before = dev.auto_graph_stats();
    for _ in 0..4 {
        kernels::fill(&s, &d, 1.0).unwrap();
        kernels::scale(&s, &d, 2.0).unwrap();
        s.synchronize().unwrap();
    }
    assert!(dev.auto_graph_stats().replays >= before.replays + 2);
    if !forced {
        kernels::fill(&s, &d, 5.0).unwrap(); // held: it begins the signature
        s.set_auto_graph(false).unwrap(); // issues it
        assert!(!s.auto_graph());
        if is_host(dev) {
            // No cueflow call in between: the fill runs because turning off issued it.
            wait_until("the held fill to run", || peek(&d)[0] == 5.0);
        }
        s.synchronize().unwrap();
        assert_all(&download(&d), 5.0);
        dev.set_auto_graph(true).unwrap();
        assert!(plain.auto_graph() && dev.auto_graph());
        dev.set_auto_graph(false).unwrap();
        assert!(!plain.auto_graph());
    }
}

/// AG2: work that repeats between host synchronizations runs as one graph: instantiated once,
/// replayed after, with the same results.
pub fn ag2_repeated_window_replays_as_one_graph(dev: &Device) {
    let s = auto_stream(dev);
    let d = zeros(dev, N);
    let before = dev.auto_graph_stats();
    for _ in 0..6 {
        kernels::fill(&s, &d, 1.0).unwrap();
        for _ in 0..5 {
            kernels::scale(&s, &d, 2.0).unwrap();
        }
        s.synchronize().unwrap();
        assert_all(&download(&d), 32.0);
    }
    let after = dev.auto_graph_stats();
    assert_eq!(after.graphs, before.graphs + 1, "{after:?}");
    assert!(after.replays >= before.replays + 4, "{after:?}");
    assert!(after.replayed_ops >= before.replayed_ops + 24, "{after:?}");
}

/// AG3 and EV6: timing events recorded around work in a replayed window measure that work: a
/// record's timestamp is taken before its stream's next operation starts, as without graphs
/// (a replay's record node stays in its stream's order when its event takes timestamps).
pub fn ag3_timing_events_in_a_replay_measure_the_work_between(dev: &Device) {
    let s = auto_stream(dev);
    let (start, stop) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let before = dev.auto_graph_stats();
    for round in 0..8 {
        start.record(&s).unwrap();
        kernels::spin(&s, std::time::Duration::from_millis(3), 1).unwrap();
        stop.record(&s).unwrap();
        s.synchronize().unwrap();
        let ms = Event::elapsed_ms(&start, &stop).unwrap();
        assert!(
            ms >= 2.5,
            "round {round}: {ms} ms between the events around a 3 ms kernel"
        );
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays > before.replays, "{after:?}");
}

/// AG2: a window that changes partway — another buffer, another kernel, an extra operation, a
/// synchronization that comes early — runs its calls one by one, in order, nothing lost; the
/// repeated window replays again afterwards.
pub fn ag2_a_changed_window_runs_one_by_one(dev: &Device) {
    let s = auto_stream(dev);
    let (a, b, c) = (zeros(dev, N), zeros(dev, N), zeros(dev, N));
    let window = |out: &cueflow::DeviceBuffer<f32>, other_kernel: bool, extra: bool| {
        kernels::fill(&s, &a, 1.0).unwrap();
        kernels::fill(&s, out, 0.0).unwrap();
        if other_kernel {
            kernels::fill(&s, &a, 7.0).unwrap();
        } else {
            kernels::scale(&s, &a, 3.0).unwrap();
        }
        kernels::saxpy(&s, 1.0, &a, out).unwrap();
        if extra {
            kernels::scale(&s, out, 2.0).unwrap();
        }
        s.synchronize().unwrap();
    };
    for _ in 0..3 {
        window(&b, false, false);
        assert_all(&download(&b), 3.0);
    }
    let before = dev.auto_graph_stats();
    assert!(before.replays >= 1);
    window(&c, false, false); // another buffer
    assert_all(&download(&c), 3.0);
    assert_all(&download(&b), 3.0);
    window(&b, true, false); // another kernel
    assert_all(&download(&b), 7.0);
    window(&b, false, true); // an extra operation
    assert_all(&download(&b), 6.0);
    kernels::fill(&s, &a, 1.0).unwrap(); // a synchronization that comes early
    kernels::fill(&s, &b, 0.0).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&a), 1.0);
    assert_all(&download(&b), 0.0);
    let changed = dev.auto_graph_stats();
    assert!(
        changed.issued_one_by_one > before.issued_one_by_one,
        "{changed:?}"
    );
    for _ in 0..3 {
        window(&b, false, false);
        assert_all(&download(&b), 3.0);
    }
    assert!(dev.auto_graph_stats().replays > changed.replays);
}

/// AG3: kernel scalars that change between windows are updated in the instantiated graph.
pub fn ag3_changed_scalars_are_updated_in_place(dev: &Device) {
    let s = auto_stream(dev);
    let d = zeros(dev, N);
    let before = dev.auto_graph_stats();
    for i in 1..=6 {
        kernels::fill(&s, &d, 1.0).unwrap();
        kernels::scale(&s, &d, i as f32).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&d), i as f32);
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 4, "{after:?}");
    assert!(
        after.scalar_updates >= before.scalar_updates + 4,
        "{after:?}"
    );
}

/// AG3: a memset's byte that changes between windows is updated in the instantiated graph, as
/// a kernel scalar is: the windows replay (the byte is not part of the signature, AG2) and each
/// sets its own byte.
pub fn ag3_a_memsets_changed_byte_is_updated_in_place(dev: &Device) {
    let s = auto_stream(dev);
    let d = DeviceBuffer::<u8>::new(dev, 4 * N).unwrap();
    let before = dev.auto_graph_stats();
    for i in 1..=6u8 {
        s.memset(&d, i).unwrap();
        s.memset(&d.slice(0..N).unwrap(), 0x40 | i).unwrap();
        s.synchronize().unwrap();
        let got = d.to_vec().unwrap();
        assert!(got[..N].iter().all(|&b| b == 0x40 | i), "window {i}");
        assert!(got[N..].iter().all(|&b| b == i), "window {i}");
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 4, "{after:?}");
    assert_eq!(
        after.issued_one_by_one, before.issued_one_by_one,
        "{after:?}"
    );
    assert!(
        after.scalar_updates >= before.scalar_updates + 8,
        "{after:?}"
    );
}

/// AG3: a window over four streams joined by events (fork, work, join) replays with the
/// events' order.
pub fn ag3_streams_joined_by_events_replay_in_order(dev: &Device) {
    let s: Vec<Stream> = (0..4).map(|_| auto_stream(dev)).collect();
    let ev: Vec<Event> = (0..4).map(|_| Event::new(dev).unwrap()).collect();
    let (src, y) = (zeros(dev, N), zeros(dev, N));
    let xs: Vec<_> = (0..4).map(|_| zeros(dev, N)).collect();
    let before = dev.auto_graph_stats();
    for it in 1..=5 {
        kernels::fill(&s[0], &src, it as f32).unwrap();
        s[0].record_event(&ev[0]).unwrap();
        for k in 1..4 {
            s[k].wait_event(&ev[0]).unwrap();
            kernels::fill(&s[k], &xs[k], 0.0).unwrap();
            kernels::saxpy(&s[k], k as f32, &src, &xs[k]).unwrap();
            s[k].record_event(&ev[k]).unwrap();
        }
        for e in &ev[1..] {
            s[0].wait_event(e).unwrap();
        }
        kernels::fill(&s[0], &y, 0.0).unwrap();
        for x in &xs[1..] {
            kernels::saxpy(&s[0], 1.0, x, &y).unwrap();
        }
        s[0].synchronize().unwrap();
        assert_all(&download(&y), 6.0 * it as f32);
    }
    assert!(dev.auto_graph_stats().replays >= before.replays + 3);
}

/// An event without timestamps (its record nodes are leaves of a replay's graph, AG3).
fn quiet_event(dev: &Device) -> Event {
    let flags = EventFlags {
        timing: false,
        ..Default::default()
    };
    Event::with_flags(dev, flags).unwrap()
}

/// One fork/join window: `s[0]` forks `s[1..]` with `ev[0]`, each adds `k * src` into its
/// `xs[k]` and joins back with `ev[k]`; `s[0]` sums them into `y`. Without the first
/// `before_join` streams, `y` ends at `6 * it`.
fn fork_join(
    s: &[Stream],
    ev: &[Event],
    src: &DeviceBuffer<f32>,
    xs: &[DeviceBuffer<f32>],
    y: &DeviceBuffer<f32>,
    it: usize,
) {
    kernels::fill(&s[0], src, it as f32).unwrap();
    s[0].record_event(&ev[0]).unwrap();
    for k in 1..4 {
        s[k].wait_event(&ev[0]).unwrap();
        kernels::fill(&s[k], &xs[k], 0.0).unwrap();
        kernels::saxpy(&s[k], k as f32, src, &xs[k]).unwrap();
        s[k].record_event(&ev[k]).unwrap();
        s[0].wait_event(&ev[k]).unwrap();
    }
    kernels::fill(&s[0], y, 0.0).unwrap();
    for x in &xs[1..] {
        kernels::saxpy(&s[0], 1.0, x, y).unwrap();
    }
}

/// AG3: a replay of a fork/join window over non-blocking streams that have nothing new since
/// the last replay costs the graph launch only — no fork events, and the join is the graph's
/// own record, which the other streams wait for only once they are used; a stream given other
/// work in between waits for the join then, and is forked again. On CUDA a replayed iteration
/// makes at most the driver calls of launching the same window captured by hand.
pub fn ag3_replays_fork_only_streams_with_new_work(dev: &Device) {
    let s: Vec<Stream> = (0..4).map(|_| auto_stream(dev)).collect();
    let ev: Vec<Event> = (0..4).map(|_| quiet_event(dev)).collect();
    let (src, y) = (zeros(dev, N), zeros(dev, N));
    let xs: Vec<_> = (0..4).map(|_| zeros(dev, N)).collect();
    let iteration = |it: usize| {
        fork_join(&s, &ev, &src, &xs, &y, it);
        s[0].synchronize().unwrap();
        assert_all(&download(&y), 6.0 * it as f32);
    };
    for it in 1..=3 {
        iteration(it); // learn, first replay (forks), second replay
    }
    let fork = 2;
    let per_replay = |it: usize| {
        let before = dev.auto_graph_stats();
        iteration(it);
        let after = dev.auto_graph_stats();
        assert_eq!(after.replays, before.replays + 1, "iteration {it} replays");
        after.replay_stream_calls - before.replay_stream_calls
    };
    assert_eq!(per_replay(4), 1, "the launch only: no fork, no join call");
    // A wait on an event recorded outside the mode (the legacy stream's), after work still
    // running, is issued at once: s[2] has new work.
    let legacy = Stream::legacy(dev);
    let other = Event::new(dev).unwrap();
    legacy
        .host_fn_once(|| std::thread::sleep(std::time::Duration::from_millis(20)))
        .unwrap();
    legacy.record_event(&other).unwrap();
    s[2].wait_event(&other).unwrap();
    assert_eq!(per_replay(5), 1 + fork, "s[2] is forked again");
    assert_eq!(per_replay(6), 1, "and not after");
    // The events recorded in the window are recorded as without the mode (EV1, EV2).
    for e in &ev {
        assert!(e.query().unwrap());
    }
    let Some((start, _)) = dev.driver_calls(false) else {
        println!(
            "SKIP cuda: driver calls per replay (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    };
    let _ = start;
    // The same window captured by hand, launched on a plain stream.
    let c: Vec<Stream> = (0..4)
        .map(|_| Stream::builder(dev).non_blocking().build().unwrap())
        .collect();
    c[0].begin_capture(cueflow::CaptureMode::ThreadLocal)
        .unwrap();
    fork_join(&c, &ev, &src, &xs, &y, 7);
    let g = c[0].end_capture().unwrap().instantiate().unwrap();
    let calls = |f: &dyn Fn()| {
        dev.driver_calls(true);
        f();
        let (_, names) = dev.driver_calls(false).unwrap();
        names
    };
    let hand = calls(&|| {
        g.launch(&c[0]).unwrap();
        c[0].synchronize().unwrap();
    });
    // The iteration without its check: the check's own download is not the replay's cost.
    // Its scalars are the last replay's (6), so no node is updated.
    let auto = calls(&|| {
        fork_join(&s, &ev, &src, &xs, &y, 6);
        s[0].synchronize().unwrap();
    });
    assert_all(&download(&y), 6.0 * 6.0);
    println!(
        "driver calls per iteration: hand-captured graph {} {hand:?}",
        hand.len()
    );
    println!("driver calls per iteration: replay {} {auto:?}", auto.len());
    // The stream's keepalive queue records, queries and waits for batch markers on its own
    // schedule (an older batch may be sealed at this launch); the rest is the replay's.
    let work = |names: &[&str]| names.iter().filter(|n| !n.starts_with("cuEvent")).count();
    assert!(
        work(&auto) <= work(&hand),
        "a replay costs the hand graph's driver calls: {auto:?} against {hand:?}"
    );
}

/// AG3: after a replay, another stream of the window waits for the launch once it is used:
/// its synchronize, its query and its later work see its replayed part done (the part is slow
/// here, so an early answer would show the old data).
pub fn ag3_a_joined_stream_waits_for_the_launch_when_used(dev: &Device) {
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let ev: Vec<Event> = (0..2).map(|_| Event::new(dev).unwrap()).collect();
    let (d, out) = (zeros(dev, N), zeros(dev, N));
    let window = |v: f32| {
        kernels::fill(&s[0], &out, 0.0).unwrap();
        s[0].record_event(&ev[0]).unwrap();
        s[1].wait_event(&ev[0]).unwrap();
        kernels::spin(&s[1], std::time::Duration::from_millis(30), 1).unwrap();
        kernels::fill(&s[1], &d, v).unwrap();
        s[1].record_event(&ev[1]).unwrap();
        s[0].wait_event(&ev[1]).unwrap();
    };
    for v in 1..=3 {
        window(v as f32);
        s[0].synchronize().unwrap();
        assert_all(&download(&d), v as f32);
    }
    let before = dev.auto_graph_stats();
    window(4.0);
    s[1].synchronize().unwrap();
    assert_all(&peek(&d), 4.0);
    window(5.0);
    wait_until("the other stream to answer done", || s[1].query().unwrap());
    assert_all(&peek(&d), 5.0);
    window(6.0);
    s[1].copy_d2d(&out, &d).unwrap(); // not held: it begins no signature
    s[1].synchronize().unwrap();
    assert_all(&peek(&out), 6.0);
    let after = dev.auto_graph_stats();
    assert_eq!(after.replays, before.replays + 3, "{after:?}");
    s[0].synchronize().unwrap();
}

/// AG3: a replayed window's timing-free event is recorded after the work its record marks:
/// answered done only once that work ran. The work is slow here, so an event left at its
/// previous record (a replay that dropped the record) would answer done at once, before the
/// new data.
pub fn ag3_a_replayed_event_completes_after_the_work_it_marks(dev: &Device) {
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let ev: Vec<Event> = (0..2).map(|_| quiet_event(dev)).collect();
    let d = zeros(dev, N);
    let scratch = zeros(dev, N);
    let window = |v: f32| {
        s[0].record_event(&ev[0]).unwrap();
        s[1].wait_event(&ev[0]).unwrap();
        kernels::spin(&s[1], std::time::Duration::from_millis(30), 1).unwrap();
        kernels::fill(&s[1], &d, v).unwrap();
        s[1].record_event(&ev[1]).unwrap();
        kernels::scale(&s[0], &scratch, 1.0).unwrap(); // the window's last call: it launches
    };
    for v in 1..=3 {
        window(v as f32);
        s[0].synchronize().unwrap();
        s[1].synchronize().unwrap();
        assert_all(&download(&d), v as f32);
    }
    let before = dev.auto_graph_stats();
    window(4.0);
    if ev[1].query().unwrap() {
        assert_all(&peek(&d), 4.0); // Only if the machine stalled past the slow kernel.
    }
    wait_until("the replayed record to complete", || ev[1].query().unwrap());
    assert_all(&peek(&d), 4.0);
    assert!(ev[0].query().unwrap());
    assert_eq!(dev.auto_graph_stats().replays, before.replays + 1);
    s[0].synchronize().unwrap();
}

/// Run `[fill(d, 1), scale(d, 2), record(e), scale(d, 3)]` twice with a synchronization, so
/// that the next window holds its calls.
fn learn(s: &Stream, d: &cueflow::DeviceBuffer<f32>, e: &Event) {
    for _ in 0..2 {
        kernels::fill(s, d, 1.0).unwrap();
        kernels::scale(s, d, 2.0).unwrap();
        s.record_event(e).unwrap();
        kernels::scale(s, d, 3.0).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(d), 6.0);
    }
}

/// AG4: held work is issued before anything could observe it: an event synchronize, a stream
/// query, a host read of pinned memory, a wait on a held event from a stream outside the mode.
pub fn ag4_observations_issue_held_work(dev: &Device) {
    let s = auto_stream(dev);
    let d = zeros(dev, N);
    let e = Event::new(dev).unwrap();
    learn(&s, &d, &e);
    // Event synchronize on a held record.
    kernels::fill(&s, &d, 4.0).unwrap();
    kernels::scale(&s, &d, 2.0).unwrap();
    s.record_event(&e).unwrap();
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
    assert_all(&peek(&d), 8.0);
    s.synchronize().unwrap();
    // Stream query.
    learn(&s, &d, &e);
    kernels::fill(&s, &d, 5.0).unwrap();
    wait_until("the stream to answer done", || s.query().unwrap());
    assert_all(&peek(&d), 5.0);
    // A stream outside the mode waits on a held record (MD2's cross-device case goes the same
    // way through the event's device).
    learn(&s, &d, &e);
    let plain = Stream::builder(dev).non_blocking().build().unwrap();
    plain.set_auto_graph(false).unwrap();
    let out = zeros(dev, N);
    kernels::fill(&s, &d, 4.0).unwrap();
    kernels::scale(&s, &d, 2.0).unwrap();
    s.record_event(&e).unwrap();
    if !plain.auto_graph() {
        plain.wait_event(&e).unwrap();
        plain.copy_d2d(&out, &d).unwrap();
        plain.synchronize().unwrap();
        assert_all(&peek(&out), 8.0);
    }
    s.synchronize().unwrap();
    // Host read of pinned memory while the copy into it is held.
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    for v in [1.0f32, 2.0, 3.0] {
        kernels::fill(&s, &d, v).unwrap();
        s.copy_d2h(&mut host, &d).unwrap();
        kernels::scale(&s, &d, 2.0).unwrap();
        s.synchronize().unwrap();
        assert_all(&host.read().unwrap(), v);
    }
    kernels::fill(&s, &d, 9.0).unwrap();
    s.copy_d2h(&mut host, &d).unwrap();
    assert_all(&host.read().unwrap(), 9.0);
    s.synchronize().unwrap();
}

/// AG5: the sanitizer sees a held call at its call (error mode refuses it), and a trace shows
/// every operation.
pub fn ag5_sanitizer_and_traces_see_each_call(dev: &Device) {
    let s = auto_stream(dev);
    let d = zeros(dev, N);
    // Traces: every kernel, none folded into a graph launch.
    let before = dev.auto_graph_stats();
    dev.start_trace().unwrap();
    for _ in 0..3 {
        kernels::fill(&s, &d, 1.0).unwrap();
        kernels::scale(&s, &d, 2.0).unwrap();
        kernels::scale(&s, &d, 2.0).unwrap();
        s.synchronize().unwrap();
    }
    let trace = dev.stop_trace().unwrap();
    assert_eq!(ops_of(&trace, OpKind::Kernel).len(), 9);
    assert!(ops_of(&trace, OpKind::Graph).is_empty());
    assert_eq!(dev.auto_graph_stats().replays, before.replays);
    assert_all(&download(&d), 4.0);
    // The sanitizer, in error mode, refuses the racing call while the first is held.
    let mode = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Error);
    let other = auto_stream(dev);
    for _ in 0..3 {
        kernels::fill(&s, &d, 1.0).unwrap();
        kernels::scale(&s, &d, 1.0).unwrap();
        s.synchronize().unwrap();
    }
    kernels::fill(&s, &d, 2.0).unwrap(); // held: it begins the signature
    let race = kernels::fill(&other, &d, 3.0);
    assert!(matches!(race, Err(Error::Race(_))), "{race:?}");
    s.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_all(&download(&d), 2.0);
    dev.take_sanitizer_reports();
    dev.set_sanitize(mode);
}

/// AG5: with the sanitizer on, held calls are checked at their call and windows replay as
/// without it; only a launch whose read arguments the backend checks after the kernel (AC7:
/// CUDA's launches with a read-only argument) is issued by itself. A correct program is not
/// reported.
pub fn ag5_sanitized_windows_replay(dev: &Device) {
    let mode = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Warn);
    let s = auto_stream(dev);
    let (x, y) = (zeros(dev, N), zeros(dev, N));
    let before = dev.auto_graph_stats();
    for _ in 0..4 {
        kernels::fill(&s, &x, 1.0).unwrap();
        kernels::scale(&s, &x, 2.0).unwrap();
        s.synchronize().unwrap();
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 2, "{after:?}");
    assert_all(&download(&x), 2.0);
    // saxpy reads `x`: a launch CUDA checks (issued by itself there), held on the host.
    let before = dev.auto_graph_stats();
    for _ in 0..4 {
        kernels::fill(&s, &y, 1.0).unwrap();
        kernels::saxpy(&s, 1.0, &x, &y).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&y), 3.0);
    }
    let after = dev.auto_graph_stats();
    if is_host(dev) {
        assert!(after.replays >= before.replays + 2, "{after:?}");
    }
    let reports = dev.take_sanitizer_reports();
    assert!(reports.is_empty(), "{reports:?}");
    dev.set_sanitize(mode);
}

/// AG5: with the sanitizer on, windows still replay — it sees each held call at its call: a
/// repeated window of launches over written buffers replays, and a race of a held call with
/// another stream's call is reported when the second is enqueued.
pub fn ag5_windows_replay_with_the_sanitizer_on(dev: &Device) {
    let mode = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Warn);
    dev.take_sanitizer_reports();
    let s = auto_stream(dev);
    let d = zeros(dev, N);
    let before = dev.auto_graph_stats();
    for i in 1..=5 {
        kernels::fill(&s, &d, 1.0).unwrap();
        kernels::scale(&s, &d, i as f32).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&d), i as f32);
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 3, "{after:?}");
    assert!(dev.take_sanitizer_reports().is_empty());
    let other = auto_stream(dev);
    kernels::fill(&s, &d, 1.0).unwrap(); // held: it begins the signature
    kernels::fill(&other, &d, 3.0).unwrap(); // unordered with the held fill
    s.synchronize().unwrap();
    other.synchronize().unwrap();
    let reports = dev.take_sanitizer_reports();
    assert_eq!(reports.len(), 1, "{reports:?}");
    dev.set_sanitize(mode);
}

/// AG6: a signature names its allocations without keeping them: a window over a fresh buffer
/// is not the window over the dropped one, whatever address the new one got.
pub fn ag6_signatures_hold_no_memory(dev: &Device) {
    let s = auto_stream(dev);
    let before = dev.auto_graph_stats();
    for i in 1..=4 {
        let d = zeros(dev, N);
        kernels::fill(&s, &d, i as f32).unwrap();
        kernels::scale(&s, &d, 2.0).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&d), 2.0 * i as f32);
    }
    let after = dev.auto_graph_stats();
    assert_eq!(after.replays, before.replays, "{after:?}");
    assert_eq!(after.graphs, before.graphs, "{after:?}");
}
