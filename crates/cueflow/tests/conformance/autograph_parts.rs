//! AG2: a long window runs in parts — each part a graph launch once the calls held so far reach
//! its end (32, 96, 224, 480, then every 256 calls), where no wait of the window spans the cut
//! and the window is joined into one stream.

use cueflow::{kernels, Device, DeviceBuffer, Event, Stream};

use crate::autograph::auto_stream;
use crate::support::*;

/// `fill(d, 0)` and `n - 1` additions of 1 on `s`: `n` calls that leave `n - 1` in `d`.
fn count_up(s: &Stream, d: &DeviceBuffer<f32>, ones: &DeviceBuffer<f32>, n: usize) {
    kernels::fill(s, d, 0.0).unwrap();
    for _ in 1..n {
        kernels::saxpy(s, 1.0, ones, d).unwrap();
    }
}

/// AG2: a window of 100 calls on one stream replays as three launches (calls 0..32, 32..96,
/// 96..100), and the first part runs before the window ends: with no later cueflow call, the
/// device finishes it.
pub fn ag2_a_long_window_runs_in_parts(dev: &Device) {
    let s = auto_stream(dev);
    let (d, ones) = (zeros(dev, N), filled(dev, N, 1.0));
    for _ in 0..2 {
        count_up(&s, &d, &ones, 100);
        s.synchronize().unwrap();
        assert_all(&download(&d), 99.0);
    }
    let before = dev.auto_graph_stats();
    count_up(&s, &d, &ones, 100);
    s.synchronize().unwrap();
    assert_all(&download(&d), 99.0);
    let after = dev.auto_graph_stats();
    assert_eq!(after.replays, before.replays + 3, "{after:?}");
    assert_eq!(after.replayed_ops, before.replayed_ops + 100, "{after:?}");
    // The first 40 calls of the window: the first part (32 calls) runs at once.
    count_up(&s, &d, &ones, 40);
    if is_host(dev) {
        wait_until("the first part to run", || peek(&d)[0] == 31.0);
    }
    s.synchronize().unwrap(); // Ends the window: the 8 held calls go one by one.
    assert_all(&download(&d), 39.0);
    assert_eq!(
        dev.auto_graph_stats().issued_one_by_one,
        after.issued_one_by_one + 8
    );
}

/// A window over four streams: a fork/join (21 calls), 12 additions on the first stream, a
/// second fork/join into `z`; 54 calls, cut at 32 inside the additions (no wait spans it).
fn forked_twice(s: &[Stream], ev: &[Event], bufs: &[DeviceBuffer<f32>], ones: &DeviceBuffer<f32>) {
    let (src, xs, y, z) = (&bufs[0], &bufs[1..4], &bufs[4], &bufs[5]);
    let fork_join = |out: &DeviceBuffer<f32>| {
        s[0].record_event(&ev[0]).unwrap();
        for k in 1..4 {
            s[k].wait_event(&ev[0]).unwrap();
            kernels::fill(&s[k], &xs[k - 1], 0.0).unwrap();
            kernels::saxpy(&s[k], k as f32, src, &xs[k - 1]).unwrap();
            s[k].record_event(&ev[k]).unwrap();
            s[0].wait_event(&ev[k]).unwrap();
        }
        kernels::fill(&s[0], out, 0.0).unwrap();
        for x in xs {
            kernels::saxpy(&s[0], 1.0, x, out).unwrap();
        }
    };
    kernels::fill(&s[0], src, 1.0).unwrap();
    fork_join(y); // src = 1: y = 6
    for _ in 0..12 {
        kernels::saxpy(&s[0], 1.0, ones, src).unwrap(); // src = 13
    }
    fork_join(z); // z = 6 * 13
}

/// A window of 48 calls whose only possible cut (32) falls between a record (call 2) and the
/// wait on it (call 43): it replays in one launch. `y` ends at 41.
fn wait_across_32(
    s: &[Stream],
    ev: &[Event],
    bufs: &[DeviceBuffer<f32>],
    ones: &DeviceBuffer<f32>,
) {
    let (src, x, y) = (&bufs[0], &bufs[1], &bufs[4]);
    kernels::fill(&s[0], src, 1.0).unwrap();
    kernels::fill(&s[0], y, 0.0).unwrap();
    s[0].record_event(&ev[0]).unwrap();
    for _ in 0..40 {
        kernels::saxpy(&s[0], 1.0, ones, y).unwrap();
    }
    s[1].wait_event(&ev[0]).unwrap();
    kernels::fill(&s[1], x, 0.0).unwrap();
    kernels::saxpy(&s[1], 1.0, src, x).unwrap();
    s[1].record_event(&ev[1]).unwrap();
    s[0].wait_event(&ev[1]).unwrap();
    kernels::saxpy(&s[0], 1.0, x, y).unwrap();
}

/// AG2, AG3: a window over several streams runs in parts where no wait spans a cut; the later
/// part forks the streams that ran in the earlier one again, so each stream's calls keep their
/// order across the parts. A window whose waits span every part end runs whole.
pub fn ag3_parts_of_a_window_over_several_streams_keep_its_order(dev: &Device) {
    let s: Vec<Stream> = (0..4).map(|_| auto_stream(dev)).collect();
    let ev: Vec<Event> = (0..4).map(|_| Event::new(dev).unwrap()).collect();
    let bufs: Vec<DeviceBuffer<f32>> = (0..6).map(|_| zeros(dev, N)).collect();
    let ones = filled(dev, N, 1.0);
    let mut before = dev.auto_graph_stats();
    for i in 0..4 {
        if i == 2 {
            before = dev.auto_graph_stats();
        }
        forked_twice(&s, &ev, &bufs, &ones);
        s[0].synchronize().unwrap();
        assert_all(&download(&bufs[4]), 6.0);
        assert_all(&download(&bufs[5]), 6.0 * 13.0);
    }
    let after = dev.auto_graph_stats();
    assert_eq!(
        after.replays,
        before.replays + 4,
        "two parts a window: {after:?}"
    );
    for i in 0..4 {
        if i == 2 {
            before = dev.auto_graph_stats();
        }
        wait_across_32(&s, &ev, &bufs, &ones);
        s[0].synchronize().unwrap();
        assert_all(&download(&bufs[4]), 41.0);
    }
    let after = dev.auto_graph_stats();
    assert_eq!(
        after.replays,
        before.replays + 2,
        "one launch a window: {after:?}"
    );
}

/// AG2 on CUDA: two windows that alternate on a stream keep its launches in shared keepalive
/// batches, as one graph's launches are: no marker event is recorded before each launch of
/// the other graph (the batch is still sealed when it grows old). Over 20 replays, at most
/// one event record for two launches (one before each launch without it).
pub fn ag2_alternating_windows_share_launch_batches(dev: &Device) {
    let s = auto_stream(dev);
    let (a, b) = (zeros(dev, N), zeros(dev, N));
    let quiet = cueflow::EventFlags {
        timing: false,
        ..Default::default()
    };
    let e = Event::with_flags(dev, quiet).unwrap();
    // Ended by an event synchronize, which leaves the stream's open batch as it is.
    let window = |d: &DeviceBuffer<f32>, v: f32| {
        kernels::fill(&s, d, 1.0).unwrap();
        kernels::scale(&s, d, v).unwrap();
        s.record_event(&e).unwrap();
        e.synchronize().unwrap();
    };
    for _ in 0..3 {
        window(&a, 2.0);
        window(&b, 3.0);
    }
    let before = dev.auto_graph_stats();
    let logged = dev.driver_calls(true).is_some();
    for _ in 0..10 {
        window(&a, 2.0);
        window(&b, 3.0);
    }
    let names = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    assert_eq!(dev.auto_graph_stats().replays, before.replays + 20);
    assert_all(&download(&a), 2.0);
    assert_all(&download(&b), 3.0);
    if !logged {
        println!(
            "SKIP cuda: driver calls of alternating replays (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    }
    let count = |name: &str| names.iter().filter(|n| **n == name).count();
    let (launches, records) = (count("cuGraphLaunch"), count("cuEventRecord"));
    println!("alternating replays: {launches} launches, {records} event records: {names:?}");
    assert_eq!(launches, 20, "{names:?}");
    assert!(
        records <= launches / 2,
        "a marker before each launch: {names:?}"
    );
}

/// AG2: how a host kernel's blocks share a written buffer is part of a call's signature: the
/// same closure over the same buffer with another per-block split is another call, so the
/// window it begins is not a replay of the first split's graph (which would write the first
/// split's elements). Host closures only: CUDA kernels index memory themselves.
pub fn ag2_a_changed_split_is_another_call(dev: &Device) {
    if !is_host(dev) {
        return;
    }
    let s = auto_stream(dev);
    let blocks = 4u32;
    let k = cueflow::Kernel::new("block_ids")
        .host(|ctx, a| {
            for v in a.block_mut::<f32>(0) {
                *v = ctx.linear_block as f32;
            }
        })
        .build();
    let d = zeros(dev, N);
    let cfg = cueflow::LaunchConfig::new(blocks, 1);
    for per_block in [1u64, 2, 1, 2] {
        for _ in 0..3 {
            kernels::fill(&s, &d, -1.0).unwrap();
            let args = cueflow::KernelArgs::new().write_per_block(&d, per_block);
            s.launch(&k, cfg, args).unwrap();
            s.synchronize().unwrap();
            let got = download(&d);
            let want: Vec<f32> = (0..N)
                .map(|i| match i as u64 / per_block {
                    b if b < blocks as u64 => b as f32,
                    _ => -1.0,
                })
                .collect();
            assert_eq!(&got[..16], &want[..16], "per_block {per_block}");
            assert_eq!(got, want, "per_block {per_block}");
        }
    }
    assert!(dev.auto_graph_stats().replays > 0, "the windows replay");
}

/// AG2, AG3: a pipeline over four streams (each stream's 12 calls interleaved with the others',
/// no events) is not cut at 32: a part's launch waits for all its streams' earlier work, so
/// the parts would run one after another where the streams overlapped. It replays whole, one
/// launch a window, with each stream's result as without the mode.
pub fn ag2_a_window_over_unjoined_streams_replays_whole(dev: &Device) {
    let s: Vec<Stream> = (0..4).map(|_| auto_stream(dev)).collect();
    let bufs: Vec<DeviceBuffer<f32>> = (0..4).map(|_| zeros(dev, N)).collect();
    let ones = filled(dev, N, 1.0);
    let window = || {
        for b in &bufs {
            // Ordered after the previous window's download by the host's synchronize.
            kernels::fill(&s[0], b, 0.0).unwrap();
        }
        s[0].synchronize().unwrap();
        for step in 0..12 {
            for (k, b) in bufs.iter().enumerate() {
                kernels::saxpy(&s[k], (step + 1) as f32, &ones, b).unwrap();
            }
        }
        for st in &s {
            st.synchronize().unwrap();
        }
        for b in &bufs {
            assert_all(&download(b), 78.0); // 1 + 2 + ... + 12
        }
    };
    for _ in 0..2 {
        window();
    }
    let before = dev.auto_graph_stats();
    window();
    let after = dev.auto_graph_stats();
    assert_eq!(
        after.replays,
        before.replays + 2,
        "fills and the pipeline, one launch each: {after:?}"
    );
    assert_eq!(after.replayed_ops, before.replayed_ops + 52, "{after:?}");
}

/// AG2: a device whose windows stop repeating turns cold — 16 windows in a row, each over
/// another buffer, then the calls of later windows are neither held nor recorded — and warms
/// again when work repeats: a window repeated on the cold device replays from its 34th
/// repetition at the latest, then every time, with its results as without the mode.
pub fn ag2_a_device_whose_windows_do_not_repeat_turns_cold(dev: &Device) {
    let s = auto_stream(dev);
    let bufs: Vec<DeviceBuffer<f32>> = (0..17).map(|_| zeros(dev, N)).collect();
    let ones = filled(dev, N, 1.0);
    let window = |d: &DeviceBuffer<f32>| {
        count_up(&s, d, &ones, 3);
        s.synchronize().unwrap();
        assert_all(&download(d), 2.0);
    };
    for b in &bufs[..16] {
        window(b);
    }
    let cold = dev.auto_graph_stats();
    assert_eq!(cold.replays, 0, "{cold:?}");
    let mut replayed_at = Vec::new();
    for i in 1..=40 {
        let before = dev.auto_graph_stats().replays;
        window(&bufs[16]);
        if dev.auto_graph_stats().replays > before {
            replayed_at.push(i);
        }
    }
    let after = dev.auto_graph_stats();
    assert!(
        after.cold_windows >= 16,
        "the device turned cold: {after:?}"
    );
    let first = *replayed_at.first().expect("the repeated window replays");
    assert!(
        first > 2 && first <= 34,
        "replays from window {first}: {after:?}"
    );
    assert_eq!(
        replayed_at,
        (first..=40).collect::<Vec<_>>(),
        "then every window"
    );
}

/// AG2 with threads: a device turned cold (16 windows over 16 buffers), then four threads,
/// each on its own stream in the mode, run windows of their own that interleave on the device
/// (their calls pass the cold device, its every 16th window is recorded, and windows that
/// repeat warm it and replay) and check every result: each stream keeps its order throughout.
pub fn ag2_threads_on_a_cold_device_keep_their_results(dev: &Device) {
    let ones = filled(dev, N, 1.0);
    let s = auto_stream(dev);
    for _ in 0..16 {
        let d = zeros(dev, N); // A new allocation: a new signature.
        count_up(&s, &d, &ones, 3);
        s.synchronize().unwrap();
    }
    let cold = dev.auto_graph_stats();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let ones = &ones;
            scope.spawn(move || {
                let s = auto_stream(dev);
                let d = zeros(dev, N);
                for i in 0..80 {
                    // Distinct lengths first, then the same window again and again.
                    let n = if i < 40 { 2 + (i + t) % 9 } else { 5 };
                    count_up(&s, &d, ones, n);
                    s.synchronize().unwrap();
                    assert_all(&download(&d), (n - 1) as f32);
                }
            });
        }
    });
    let st = dev.auto_graph_stats();
    assert!(
        st.cold_windows > cold.cold_windows,
        "calls passed the cold device: {st:?}"
    );
}
