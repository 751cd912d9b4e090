//! AG2, AG3: a signature names a window's events by place — a record by its event's flags, a
//! wait by the record it waits for — so a loop that makes new events each time round
//! (`Stream::wait_stream`, `Stream::record`) repeats, and each replay records the window's own
//! events.

use std::time::Duration;

use cueflow::{kernels, Device, DeviceBuffer, Event, Stream};

use crate::autograph::auto_stream;
use crate::support::*;

/// One window: `s[1]` joins `s[0]`, runs a slow kernel and fills `d` with `v`; `s[0]` joins
/// it back and doubles `d`, then records a new timing event, returned. Every event is new.
fn window(s: &[Stream], d: &DeviceBuffer<f32>, v: f32) -> Event {
    s[1].wait_stream(&s[0]).unwrap();
    kernels::spin(&s[1], Duration::from_millis(30), 1).unwrap();
    kernels::fill(&s[1], d, v).unwrap();
    s[0].wait_stream(&s[1]).unwrap();
    kernels::scale(&s[0], d, 2.0).unwrap();
    s[0].record().unwrap()
}

/// AG2, AG3: windows joined through `wait_stream` with a new event every call replay, and each
/// replay records its own events: the event a window returns completes after its work, while
/// the previous window's event, which the graph recorded last time, stays complete (a replay
/// that recorded the graph's old events again would make it pending behind the slow kernel).
pub fn ag2_windows_with_new_events_replay(dev: &Device) {
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let d = zeros(dev, N);
    let mut kept: Vec<Event> = Vec::new();
    for it in 1..=3 {
        kept.push(window(&s, &d, it as f32));
        s[0].synchronize().unwrap();
        assert_all(&download(&d), 2.0 * it as f32);
    }
    let before = dev.auto_graph_stats();
    for it in 4..=7 {
        let e = window(&s, &d, it as f32);
        // The window's last call completed its signature: the replay is launched.
        let previous = kept.last().expect("a window ran");
        assert!(
            previous.query().unwrap(),
            "window {it}: the previous window's event was recorded again"
        );
        if e.query().unwrap() {
            assert_all(&peek(&d), 2.0 * it as f32); // Only if the machine stalled past the spin.
        }
        s[0].synchronize().unwrap();
        assert!(e.query().unwrap());
        assert_all(&download(&d), 2.0 * it as f32);
        kept.push(e);
    }
    let after = dev.auto_graph_stats();
    assert_eq!(after.replays, before.replays + 4, "{after:?}");
    assert_eq!(
        after.issued_one_by_one, before.issued_one_by_one,
        "{after:?}"
    );
    // The returned event is new each window; the joins' own events are no nodes (AG3).
    assert!(after.event_updates >= before.event_updates + 4, "{after:?}");
    // Timestamps of the returned events follow the windows' order (EV6).
    for w in kept.windows(2) {
        assert!(Event::elapsed_ms(&w[0], &w[1]).unwrap() > 0.0);
    }
}

/// AG2: which record a wait waits for is part of the signature: a window whose other stream
/// waits for the later of two records is not the window that waits for the earlier one, and
/// replays its own graph — `out` is filled only after the slow kernel between the records
/// (the earlier window's graph would fill it during the kernel).
pub fn ag2_a_wait_for_another_record_is_another_window(dev: &Device) {
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let (a, out) = (zeros(dev, N), zeros(dev, N));
    let window = |later: bool, v: f32| -> Event {
        kernels::fill(&s[0], &a, v).unwrap();
        let first = s[0].record().unwrap();
        kernels::spin(&s[0], Duration::from_millis(300), 1).unwrap();
        let second = s[0].record().unwrap();
        s[1].wait_event(if later { &second } else { &first })
            .unwrap();
        kernels::fill(&s[1], &out, v).unwrap();
        second
    };
    let before = dev.auto_graph_stats();
    for round in 1..=3 {
        for later in [false, true] {
            let v = (round * 2 + later as usize) as f32;
            let second = window(later, v);
            if round == 3 {
                // Whether `out` was filled while the slow kernel still ran: once it is filled,
                // how long the later record takes to complete — most of the kernel's 300 ms
                // when the fill waited for the earlier record, next to nothing when it waited
                // for the later one (a timing-free record is a leaf of its graph, AG3, so it
                // may complete a moment after the work that waits for it).
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                while peek(&out)[0] != v {
                    assert!(std::time::Instant::now() < deadline, "out never filled");
                    std::thread::sleep(Duration::from_millis(1));
                }
                let filled = std::time::Instant::now();
                second.synchronize().unwrap();
                let filled_during = filled.elapsed() > Duration::from_millis(100);
                assert_eq!(
                    filled_during, !later,
                    "waited for the later record: {later} (the record completed {:?} after the fill was seen)",
                    filled.elapsed()
                );
            }
            s[1].synchronize().unwrap();
            assert_all(&download(&out), v);
            s[0].synchronize().unwrap();
        }
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 2, "{after:?}");
}

/// AG6, GR4: the events a replay replaced in its graph go once the launches that recorded them
/// are done, not when the graph goes: 40 replays of a window joined through events made by
/// `Stream::record` (two new events each) leave no more than a few of their events alive.
/// Counted through the driver's event destructions on CUDA.
pub fn ag6_replaced_events_are_let_go(dev: &Device) {
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let d = zeros(dev, N);
    let window = || {
        s[1].wait_event(&s[0].record().unwrap()).unwrap();
        kernels::scale(&s[1], &d, 1.0).unwrap();
        s[0].wait_event(&s[1].record().unwrap()).unwrap();
        kernels::scale(&s[0], &d, 1.0).unwrap();
        s[0].synchronize().unwrap();
    };
    for _ in 0..3 {
        window();
    }
    let before = dev.auto_graph_stats();
    let logged = dev.driver_calls(true).is_some();
    for _ in 0..40 {
        window();
    }
    let names = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    let after = dev.auto_graph_stats();
    assert_eq!(after.replays, before.replays + 40, "{after:?}");
    assert!(
        after.event_updates >= before.event_updates + 80,
        "{after:?}"
    );
    if !logged {
        println!(
            "SKIP cuda: events destroyed while replaying (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    }
    let count = |name: &str| names.iter().filter(|n| **n == name).count();
    let (created, destroyed) = (count("cuEventCreate"), count("cuEventDestroy"));
    println!("40 replays: {created} events created, {destroyed} destroyed");
    assert!(created >= 80, "{names:?}");
    assert!(
        destroyed + 8 >= created,
        "{created} created, {destroyed} destroyed"
    );
}

/// AG3: a join whose wait comes after the replayed calls still orders. The waiting stream is
/// not in the mode, so the signature ends at the join's record and the replay launches there;
/// the replay records the join's event (a node, since its wait is not among the calls), and the
/// wait issued later waits for the slow work before it: the copy behind it reads the new data.
pub fn ag3_a_join_waited_outside_the_window_orders(dev: &Device) {
    let w = auto_stream(dev);
    let x = Stream::builder(dev).non_blocking().build().unwrap();
    let (d, out) = (zeros(dev, N), zeros(dev, N));
    let before = dev.auto_graph_stats();
    for v in 1..=5 {
        kernels::spin(&w, Duration::from_millis(20), 1).unwrap();
        kernels::fill(&w, &d, v as f32).unwrap();
        x.wait_stream(&w).unwrap();
        x.copy_d2d(&out, &d).unwrap();
        x.synchronize().unwrap();
        assert_all(&download(&out), v as f32);
        w.synchronize().unwrap();
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 3, "{after:?}");
}
