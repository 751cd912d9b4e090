//! AG2, AG3, AG6: stream-ordered allocations and frees of the device's pool are calls of a
//! window's signature, and memory a window allocated is named by the place of the call that
//! allocated it, so a loop that allocates its temporaries anew each time round replays; each
//! replay gives its nodes the window's own memory.

use cueflow::{kernels, Device, DeviceBuffer, SanitizeMode, Stream};

use crate::autograph::auto_stream;
use crate::support::*;

/// `y = x * factor + 1` through a temporary allocated and freed in stream order.
fn step(s: &Stream, x: &DeviceBuffer<f32>, y: &DeviceBuffer<f32>, factor: f32) {
    let tmp = s.alloc_async::<f32>(x.len()).unwrap();
    s.copy_d2d(&tmp, x).unwrap();
    kernels::scale(s, &tmp, factor).unwrap();
    kernels::fill(s, y, 1.0).unwrap();
    kernels::saxpy(s, 1.0, &tmp, y).unwrap();
    s.free_async(tmp).unwrap();
}

/// AG2: a window with a temporary of its own (allocated, used, freed) repeats: from the
/// second window on it replays, nothing is issued one by one, and every result is right.
/// (With allocations ending the signature, nothing would replay.)
pub fn ag2_windows_with_temporaries_replay(dev: &Device) {
    let s = auto_stream(dev);
    let x = filled(dev, N, 2.0);
    let y = zeros(dev, N);
    step(&s, &x, &y, 1.0);
    s.synchronize().unwrap();
    assert_all(&download(&y), 3.0);
    let before = dev.auto_graph_stats();
    for it in 2..=8 {
        step(&s, &x, &y, it as f32);
        s.synchronize().unwrap();
        assert_all(&download(&y), 2.0 * it as f32 + 1.0);
    }
    let after = dev.auto_graph_stats();
    assert_eq!(after.replays, before.replays + 7, "{after:?}");
    assert_eq!(
        after.issued_one_by_one, before.issued_one_by_one,
        "{after:?}"
    );
    // From the third window on, the copy, the scale and the saxpy get the new temporary.
    assert!(
        after.memory_updates >= before.memory_updates + 3 * 6,
        "{after:?}"
    );
}

/// AG3: a replay writes the memory the window allocated, not the memory of the window it was
/// built from: the program reads each window's own allocation after the synchronize (a
/// replay that kept the graph's old memory would leave it unwritten). First each window's
/// memory is let go of before the next (the pool may hand out the same block again: the
/// nodes need no new addresses), then every window's is kept (each window's is new).
pub fn ag3_a_replay_writes_the_windows_own_allocation(dev: &Device) {
    let s = auto_stream(dev);
    let before = dev.auto_graph_stats();
    let mut kept = Vec::new();
    for it in 1..=12 {
        let t = s.alloc_async::<f32>(N).unwrap();
        kernels::fill(&s, &t, it as f32).unwrap();
        kernels::scale(&s, &t, 2.0).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&t), 2.0 * it as f32);
        if it > 6 {
            kept.push(t);
        } // Otherwise freed by its last holder, outside any window.
    }
    for (k, t) in kept.iter().enumerate() {
        assert_all(&download(t), 2.0 * (k + 7) as f32);
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 10, "{after:?}");
}

/// AG2, AG3: a temporary one stream allocates, another uses and frees, joined by events:
/// the window replays and keeps its order (the second stream's work sees the first's copy).
pub fn ag3_a_temporary_shared_by_streams_replays_in_order(dev: &Device) {
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let x = filled(dev, N, 3.0);
    let y = zeros(dev, N);
    let before = dev.auto_graph_stats();
    for it in 1..=6 {
        let tmp = s[0].alloc_async::<f32>(N).unwrap();
        s[0].copy_d2d(&tmp, &x).unwrap();
        s[1].wait_stream(&s[0]).unwrap();
        kernels::scale(&s[1], &tmp, it as f32).unwrap();
        kernels::fill(&s[1], &y, 0.0).unwrap();
        kernels::saxpy(&s[1], 1.0, &tmp, &y).unwrap();
        s[1].free_async(tmp).unwrap();
        s[0].wait_stream(&s[1]).unwrap();
        s[0].synchronize().unwrap();
        assert_all(&download(&y), 3.0 * it as f32);
    }
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 4, "{after:?}");
    assert_eq!(
        after.issued_one_by_one, before.issued_one_by_one,
        "{after:?}"
    );
}

/// AG2: memory a window allocated and kept is, in the next window, memory like any other
/// (named by what it is): a loop that carries each window's temporary into the next computes
/// what it computes without the mode.
pub fn ag2_a_temporary_kept_into_the_next_window_is_ordinary_memory(dev: &Device) {
    let s = auto_stream(dev);
    let y = zeros(dev, N);
    let mut prev = filled(dev, N, 1.0);
    for it in 1..=6 {
        let t = s.alloc_async::<f32>(N).unwrap();
        s.copy_d2d(&t, &prev).unwrap();
        kernels::scale(&s, &t, 2.0).unwrap();
        kernels::fill(&s, &y, 0.0).unwrap();
        kernels::saxpy(&s, 1.0, &t, &y).unwrap();
        let old = std::mem::replace(&mut prev, t);
        s.free_async(old).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&y), (1u32 << it) as f32);
    }
}

/// AG6: the memory a replay's free gives back serves the next window's allocation at its
/// place once nothing holds it (the launch done, no handle left): every window after the
/// first replays takes it back (on both backends: a graph's nodes keep only the addresses
/// between launches), and on CUDA those windows allocate, free and update no node through the
/// driver — each window gets the same memory, and its nodes already have its addresses (the
/// scalars stay the same here) — while every result stays right.
pub fn ag6_a_replays_freed_memory_serves_the_next_window(dev: &Device) {
    let s = auto_stream(dev);
    let x = filled(dev, N, 2.0);
    let y = zeros(dev, N);
    for _ in 1..=4 {
        step(&s, &x, &y, 3.0);
        s.synchronize().unwrap();
    }
    let before = dev.auto_graph_stats();
    let logged = dev.driver_calls(true).is_some();
    for _ in 5..=12 {
        step(&s, &x, &y, 3.0);
        s.synchronize().unwrap();
        assert_all(&download(&y), 7.0);
    }
    let names = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    let after = dev.auto_graph_stats();
    assert_eq!(after.memory_reused, before.memory_reused + 8, "{after:?}");
    if !logged {
        println!(
            "SKIP cuda: driver calls of windows with temporaries (no driver on the {} backend)",
            dev.properties().backend
        );
        return;
    }
    let count = |part: &str| names.iter().filter(|n| n.contains(part)).count();
    let (allocs, frees) = (count("cuMemAllocAsync"), count("cuMemFreeAsync"));
    let (kernels, copies) = (
        count("cuGraphExecKernelNodeSetParams"),
        count("cuGraphExecMemcpyNodeSetParams"),
    );
    println!("8 windows: {allocs} allocations, {frees} frees, {kernels}+{copies} node updates");
    assert_eq!((allocs, frees, kernels, copies), (0, 0, 0, 0), "{names:?}");
}

/// AG6: two signatures that begin alike (the same allocation, then a memset in one and a
/// kernel in the other): the windows of the second take back the memory their own replays
/// freed, though the window's first call also repeats the first signature (the memory is
/// looked for among every signature the window still repeats).
pub fn ag6_freed_memory_serves_a_signature_that_begins_as_another(dev: &Device) {
    let s = auto_stream(dev);
    let y = zeros(dev, N);
    for _ in 0..4 {
        let t = s.alloc_async::<f32>(N).unwrap();
        s.memset(&t, 0).unwrap();
        s.copy_d2d(&y, &t).unwrap();
        s.free_async(t).unwrap();
        s.synchronize().unwrap();
    }
    let before = dev.auto_graph_stats();
    for _ in 1..=6 {
        let t = s.alloc_async::<f32>(N).unwrap();
        kernels::fill(&s, &t, 5.0).unwrap();
        s.copy_d2d(&y, &t).unwrap();
        s.free_async(t).unwrap();
        s.synchronize().unwrap();
        assert_all(&download(&y), 5.0);
    }
    let after = dev.auto_graph_stats();
    // The second window instantiates; the third to the sixth take their memory back.
    assert!(after.memory_reused >= before.memory_reused + 4, "{after:?}");
}

/// AG6, MM2: memory freed in a window while the program keeps another handle of it is not
/// handed to the next window's allocation: each window's temporary keeps the value it was
/// given while its handle lives, though later windows allocate at the same place (the next
/// window taking it would overwrite it).
pub fn ag6_freed_memory_with_a_handle_left_is_not_handed_out(dev: &Device) {
    let s = auto_stream(dev);
    let mut kept = Vec::new();
    for it in 1..=8 {
        let tmp = s.alloc_async::<f32>(N).unwrap();
        kernels::fill(&s, &tmp, it as f32).unwrap();
        kept.push(tmp.clone());
        s.free_async(tmp).unwrap();
        s.synchronize().unwrap();
    }
    for (k, t) in kept.iter().enumerate() {
        assert_all(&download(t), (k + 1) as f32);
    }
}

/// AG5, AG6: memory a window takes back from the last replay's free is new to the sanitizer:
/// one stream allocates and fills a temporary, another waits for it, scales it, copies it out
/// and frees it, and only the first stream is synchronized. The next window's allocation on
/// the first stream races with nothing (the accesses of the memory's last life, the other
/// stream's free among them, are done and forgotten), so no race is reported while the
/// windows replay and (on CUDA) take the freed memory back.
pub fn ag5_memory_taken_back_is_new_to_the_sanitizer(dev: &Device) {
    let mode = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Warn);
    dev.take_sanitizer_reports();
    let s: Vec<Stream> = (0..2).map(|_| auto_stream(dev)).collect();
    let y = zeros(dev, N);
    let window = |it: usize| {
        let tmp = s[0].alloc_async::<f32>(N).unwrap();
        kernels::fill(&s[0], &tmp, it as f32).unwrap();
        s[1].wait_stream(&s[0]).unwrap();
        kernels::scale(&s[1], &tmp, 2.0).unwrap();
        s[1].copy_d2d(&y, &tmp).unwrap();
        s[1].free_async(tmp).unwrap();
        s[0].synchronize().unwrap();
    };
    let before = dev.auto_graph_stats();
    (1..=3).for_each(window);
    let logged = dev.driver_calls(true).is_some();
    (4..=8).for_each(window);
    let names = dev.driver_calls(false).map(|c| c.1).unwrap_or_default();
    s[0].wait_stream(&s[1]).unwrap();
    s[0].synchronize().unwrap();
    assert_all(&download(&y), 16.0);
    let after = dev.auto_graph_stats();
    assert!(after.replays >= before.replays + 6, "{after:?}");
    let reports = dev.take_sanitizer_reports();
    dev.set_sanitize(mode);
    assert!(reports.is_empty(), "{reports:?}");
    if logged {
        // The memory was taken back: no window allocated through the driver.
        let allocs = names
            .iter()
            .filter(|n| n.contains("cuMemAllocAsync"))
            .count();
        assert_eq!(allocs, 0, "{names:?}");
    }
}

/// AG2, AG6: long windows with a temporary run in parts (the allocation in the first part, the
/// free in a later one) and keep their results: a window of 40 calls (two parts) and one of
/// 100 (three parts, whose replayed calls stay until the next window's take their places, so
/// the freed memory is still held at the next allocation and new memory comes).
pub fn ag2_long_windows_with_a_temporary_run_in_parts(dev: &Device) {
    let s = auto_stream(dev);
    let y = zeros(dev, N);
    for calls in [40usize, 100] {
        let mut before = dev.auto_graph_stats();
        for it in 1..=5 {
            if it == 2 {
                // The first window records; one of 100 calls also repeats the first 38 of the
                // 40-call signature, running its first part and then the rest one by one.
                before = dev.auto_graph_stats();
            }
            let tmp = s.alloc_async::<f32>(N).unwrap();
            kernels::fill(&s, &tmp, it as f32).unwrap();
            for _ in 0..calls - 4 {
                kernels::scale(&s, &tmp, 1.0).unwrap();
            }
            s.copy_d2d(&y, &tmp).unwrap();
            s.free_async(tmp).unwrap();
            s.synchronize().unwrap();
            assert_all(&download(&y), it as f32);
        }
        let after = dev.auto_graph_stats();
        // From the second window on, every part is a replay and nothing goes one by one.
        let parts = if calls == 40 { 2 } else { 3 };
        assert!(
            after.replays >= before.replays + 4 * parts,
            "{calls} calls: {after:?}"
        );
        assert_eq!(
            after.issued_one_by_one, before.issued_one_by_one,
            "{calls} calls: {after:?}"
        );
    }
}
