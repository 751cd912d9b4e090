//! Correctly synchronized programs: the sanitizer must stay silent (AC4: "a correctly ordered
//! program is never reported"), whichever happens-before edge of AC2 orders them. Cases marked
//! "PyTorch" port the logic cases of PyTorch's CUDA sanitizer tests.

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Event, EventFlags, PinnedBuffer, Stream,
};

use crate::support::*;

fn graph(dev: &Device, body: impl FnOnce(&Stream)) -> cueflow::GraphExec {
    let cap = stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    body(&cap);
    cap.end_capture().unwrap().instantiate().unwrap()
}

fn check(d: &DeviceBuffer<f32>, v: f32) {
    let s = stream(d.device());
    let mut out = vec![0.0f32; d.len()];
    s.read_pageable(&mut out, d).unwrap();
    assert!(out.iter().all(|&x| x == v), "expected {v}, got {}", out[0]);
}

pub fn copy_stream_to_compute_stream_with_wait(dev: &Device) {
    let (copy, compute) = (stream(dev), stream(dev));
    let host = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    let d = filled(dev, N, 0.0);
    copy.copy_h2d(&d, &host).unwrap();
    let e = copy.record().unwrap();
    compute.wait_event(&e).unwrap();
    kernels::scale(&compute, &d, 2.0).unwrap();
    compute.synchronize().unwrap();
    check(&d, 2.0);
}

pub fn two_readers_then_a_writer_with_waits(dev: &Device) {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let (y1, y2) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::saxpy(&s1, 1.0, &d, &y1).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y2).unwrap();
    s3.wait_stream(&s1).unwrap();
    s3.wait_stream(&s2).unwrap();
    kernels::fill(&s3, &d, 5.0).unwrap();
}

pub fn adjacent_subranges_on_two_streams(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d.slice(0..64).unwrap(), 1.0).unwrap();
    kernels::fill(&s2, &d.slice(64..128).unwrap(), 2.0).unwrap();
}

pub fn disjoint_chunks_on_four_streams(dev: &Device) {
    let streams: Vec<Stream> = (0..4).map(|_| stream(dev)).collect();
    let d = filled(dev, N, 1.0);
    let host = PinnedBuffer::from_slice(dev, &vec![3.0f32; N]).unwrap();
    let mut out = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let chunks = d.chunks(8).unwrap();
    for (i, c) in chunks.iter().enumerate() {
        let s = &streams[i % 4];
        let r = cueflow::chunk_ranges(N, 8).unwrap()[i].clone();
        s.copy_h2d(c, host.range(r.clone()).unwrap()).unwrap();
        kernels::scale(s, c, 2.0).unwrap();
        s.copy_d2h(out.range_mut(r).unwrap(), c).unwrap();
    }
    assert!(out.read().unwrap().iter().all(|&x| x == 6.0));
}

pub fn pageable_h2d_on_legacy_then_blocking_kernel(dev: &Device) {
    let (legacy, blocking) = (Stream::legacy(dev), Stream::new(dev).unwrap());
    let d = filled(dev, N, 0.0);
    legacy.write_pageable(&d, &vec![1.0f32; N]).unwrap();
    kernels::scale(&blocking, &d, 32.0).unwrap(); // ST4 orders it after the legacy copy
    blocking.synchronize().unwrap();
    check(&d, 32.0);
}

pub fn blocking_write_then_legacy_read(dev: &Device) {
    let (blocking, legacy) = (Stream::new(dev).unwrap(), Stream::legacy(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&blocking, &d, 1.0).unwrap();
    kernels::saxpy(&legacy, 1.0, &d, &y).unwrap();
}

pub fn per_thread_write_then_legacy_read(dev: &Device) {
    let (pt, legacy) = (Stream::per_thread(dev).unwrap(), Stream::legacy(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&pt, &d, 1.0).unwrap();
    kernels::saxpy(&legacy, 1.0, &d, &y).unwrap();
}

pub fn same_stream_write_then_read(dev: &Device) {
    let s = stream(dev);
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s, &d, 1.0).unwrap();
    kernels::saxpy(&s, 1.0, &d, &y).unwrap();
    kernels::fill(&s, &d, 2.0).unwrap();
}

/// EV2: a wait keeps what the event captured at the wait, so re-recording it afterwards does
/// not undo the ordering.
pub fn rerecord_after_wait(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let e = Event::new(dev).unwrap();
    kernels::fill(&s1, &d, 1.0).unwrap();
    s1.record_event(&e).unwrap();
    s2.wait_event(&e).unwrap();
    s1.record_event(&e).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
}

pub fn polling_loop_on_stream_query(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s1, &d, 1.0).unwrap();
    while !s1.query().unwrap() {
        std::thread::yield_now();
    }
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
}

pub fn polling_loop_on_event_query(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s1, &d, 1.0).unwrap();
    let e = s1.record().unwrap();
    while !e.query().unwrap() {
        std::thread::yield_now();
    }
    kernels::fill(&s2, &d, 2.0).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
}

/// HF1: a host function runs after its stream's earlier work, so it may read a copy's
/// destination unchecked.
pub fn host_fn_reads_its_streams_copy_unchecked(dev: &Device) {
    let s = stream(dev);
    let d = filled(dev, N, 5.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    s.copy_d2h(&mut host, &d).unwrap();
    let host = std::sync::Arc::new(host);
    // HF1 puts the function after the copy that writes `host`; nothing else writes it.
    let seen = host_fn_checks_unchecked(&s, &host, 5.0);
    s.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(true));
}

/// HF1: a host function comes before its stream's later work, so it may read unchecked what
/// that work writes — also when that work was enqueued before the function ran (it waits on
/// a latch here), as the sanitizer sees it when the function reads.
pub fn host_fn_reads_before_its_streams_later_write(dev: &Device) {
    let s = stream(dev);
    let host = std::sync::Arc::new(PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap());
    let latch = Latch::block(&s);
    // HF1 puts the function before the task below, the only writer of `host`.
    let seen = host_fn_checks_unchecked(&s, &host, 1.0);
    s.host_task("overwrite")
        .writes(&*host)
        .run(|io| io.write::<f32>(0).fill(2.0))
        .unwrap();
    latch.open();
    s.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(true));
    assert!(host.read().unwrap().iter().all(|&x| x == 2.0));
}

pub fn completion_awaited_then_host_access(dev: &Device) {
    let s = stream(dev);
    let d = filled(dev, N, 5.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    s.copy_d2h(&mut host, &d).unwrap();
    s.completion().unwrap().wait().unwrap();
    // SAFETY: the copy completed (the completion resolved), nothing else writes `host`.
    let v = unsafe { host.as_slice_unchecked() };
    assert!(v.iter().all(|&x| x == 5.0));
}

pub fn event_completion_awaited_then_other_stream(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s1, &d, 1.0).unwrap();
    let e = s1.record().unwrap();
    e.completion().unwrap().wait().unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
}

pub fn atomics_from_two_streams(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let flag = upload(dev, &[0u32]);
    kernels::set_flag(&s1, &flag, 1).unwrap();
    kernels::set_flag(&s2, &flag, 2).unwrap();
}

pub fn write_value_and_atomic_kernel(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let flag = upload(dev, &[0u32]);
    s1.write_value(&flag, 1).unwrap();
    kernels::set_flag(&s2, &flag, 2).unwrap();
    assert!(s1.read_value(&flag).unwrap() >= 1);
}

/// PyTorch: one event waited by two streams that then both read.
pub fn branch_sync(dev: &Device) {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let (y2, y3) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s1, &d, 1.0).unwrap();
    let e = s1.record().unwrap();
    s2.wait_event(&e).unwrap();
    s3.wait_event(&e).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y2).unwrap();
    kernels::saxpy(&s3, 1.0, &d, &y3).unwrap();
}

/// PyTorch: ordering passed along a chain of streams.
pub fn chain_sync(dev: &Device) {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s1, &d, 1.0).unwrap();
    let e1 = s1.record().unwrap();
    s2.wait_event(&e1).unwrap();
    let e2 = s2.record().unwrap();
    s3.wait_event(&e2).unwrap();
    kernels::saxpy(&s3, 1.0, &d, &y).unwrap();
}

/// PyTorch: a writer that waited for every reader.
pub fn all_reads_checked(dev: &Device) {
    let streams: Vec<Stream> = (0..4).map(|_| stream(dev)).collect();
    let d = filled(dev, N, 1.0);
    let ys: Vec<DeviceBuffer<f32>> = (0..3).map(|_| filled(dev, N, 0.0)).collect();
    for (s, y) in streams.iter().zip(&ys) {
        kernels::saxpy(s, 1.0, &d, y).unwrap();
    }
    for s in &streams[..3] {
        streams[3].wait_stream(s).unwrap();
    }
    kernels::fill(&streams[3], &d, 0.0).unwrap();
}

pub fn stream_synchronize_orders(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    s1.synchronize().unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
}

pub fn device_synchronize_orders(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    dev.synchronize().unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
}

pub fn event_synchronize_orders(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    s1.record().unwrap().synchronize().unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
}

pub fn elapsed_answer_orders(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let start = s1.record().unwrap();
    kernels::fill(&s1, &d, 1.0).unwrap();
    let stop = s1.record().unwrap();
    while Event::elapsed_ms(&start, &stop).is_err() {
        std::thread::yield_now();
    }
    kernels::scale(&s2, &d, 2.0).unwrap();
}

pub fn wait_stream_orders(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    kernels::fill(&s1, &d, 1.0).unwrap();
    s2.wait_stream(&s1).unwrap();
    kernels::scale(&s2, &d, 2.0).unwrap();
}

pub fn graph_replay_then_same_stream(dev: &Device) {
    let s = stream(dev);
    let d = filled(dev, N, 1.0);
    let exec = graph(dev, |cap| kernels::scale(cap, &d, 2.0).unwrap());
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    kernels::scale(&s, &d, 2.0).unwrap();
    s.synchronize().unwrap();
    check(&d, 16.0);
}

pub fn graph_replay_then_event_to_other_stream(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 1.0), filled(dev, N, 0.0));
    let exec = graph(dev, |cap| kernels::fill(cap, &d, 3.0).unwrap());
    exec.launch(&s1).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
    s2.synchronize().unwrap();
    check(&y, 3.0);
}

pub fn alloc_async_then_event_to_other_stream(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let buf = s1.alloc_async::<f32>(N).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::fill(&s2, &buf, 1.0).unwrap();
    s2.free_async(buf).unwrap();
}

pub fn free_async_after_waiting_for_users(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let buf = s1.alloc_async::<f32>(N).unwrap();
    let y = filled(dev, N, 0.0);
    s2.wait_stream(&s1).unwrap();
    kernels::saxpy(&s2, 1.0, &buf, &y).unwrap();
    s1.wait_stream(&s2).unwrap();
    s1.free_async(buf).unwrap();
}

pub fn pinned_read_view_after_d2h(dev: &Device) {
    let s = stream(dev);
    let d = filled(dev, N, 7.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    s.copy_d2h(&mut host, &d).unwrap();
    assert!(host.read().unwrap().iter().all(|&x| x == 7.0)); // MM3 waits
    host.write().unwrap().fill(1.0);
    s.copy_h2d(&d, &host).unwrap();
}

pub fn read_pageable_then_write_elsewhere(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 2.0);
    let mut out = vec![0.0f32; N];
    s1.read_pageable(&mut out, &d).unwrap(); // returns once the data arrived (CP3)
    kernels::fill(&s2, &d, 0.0).unwrap();
}

pub fn write_pageable_then_kernel_same_stream(dev: &Device) {
    let s = stream(dev);
    let d = filled(dev, N, 0.0);
    s.write_pageable(&d, &vec![4.0f32; N]).unwrap();
    kernels::scale(&s, &d, 0.5).unwrap();
    s.synchronize().unwrap();
    check(&d, 2.0);
}

pub fn two_events_joined_before_reading_both(dev: &Device) {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (a, b, y) = (
        filled(dev, N, 0.0),
        filled(dev, N, 0.0),
        filled(dev, N, 0.0),
    );
    let sync_only = EventFlags {
        timing: false,
        ..Default::default()
    };
    let (ea, eb) = (
        Event::with_flags(dev, sync_only).unwrap(),
        Event::with_flags(dev, sync_only).unwrap(),
    );
    kernels::fill(&s1, &a, 1.0).unwrap();
    s1.record_event(&ea).unwrap();
    kernels::fill(&s2, &b, 2.0).unwrap();
    s2.record_event(&eb).unwrap();
    s3.wait_event(&ea).unwrap();
    s3.wait_event(&eb).unwrap();
    kernels::saxpy(&s3, 1.0, &a, &y).unwrap();
    kernels::saxpy(&s3, 1.0, &b, &y).unwrap();
    s3.synchronize().unwrap();
    check(&y, 3.0);
}

pub fn host_function_between_write_and_read(dev: &Device) {
    let s = stream(dev);
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    kernels::fill(&s, &d, 1.0).unwrap();
    s.host_fn(|| {}).unwrap();
    kernels::saxpy(&s, 1.0, &d, &y).unwrap();
}

fn fill_mapped(s: &Stream, buf: &mut PinnedBuffer<f32>, v: f32) {
    let n = buf.len();
    s.launch(
        &kernels::FILL_F32,
        cueflow::LaunchConfig::for_elements(n, 256),
        cueflow::KernelArgs::new()
            .write_mapped(buf)
            .scalar(v)
            .scalar(n as u64),
    )
    .unwrap();
}

/// HM3: kernels on two streams write disjoint halves of one mapped buffer.
pub fn mapped_halves_on_two_streams(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let mut m =
        PinnedBuffer::<f32>::with_flags(dev, 2 * N, cueflow::PinnedFlags::default().mapped())
            .unwrap();
    // Two registered halves of one Vec would be two allocations; here one mapped buffer is
    // written whole on s1, then (after an event) by s2.
    fill_mapped(&s1, &mut m, 1.0);
    let e = s1.record().unwrap();
    s2.wait_event(&e).unwrap();
    fill_mapped(&s2, &mut m, 2.0);
    assert!(m.read().unwrap().iter().all(|&x| x == 2.0));
}

/// HM4: a kernel writes managed memory, an event orders another stream's copy after it.
pub fn managed_kernel_then_event_to_other_stream(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let mut m = cueflow::ManagedBuffer::<f32>::new(dev, N).unwrap();
    let d = filled(dev, N, 0.0);
    fill_mapped(&s1, &mut m, 4.0);
    let e = s1.record().unwrap();
    s2.wait_event(&e).unwrap();
    s2.copy_h2d(&d, &*m).unwrap();
    s2.synchronize().unwrap();
    check(&d, 4.0);
}

/// A host function on `s` that reads `host` unchecked and says whether every element was
/// `want` (`None` until it ran). The caller orders it so that nothing writes `host` meanwhile.
fn host_fn_checks_unchecked(
    s: &Stream,
    host: &std::sync::Arc<PinnedBuffer<f32>>,
    want: f32,
) -> std::sync::Arc<std::sync::Mutex<Option<bool>>> {
    let (h, seen) = (
        host.clone(),
        std::sync::Arc::new(std::sync::Mutex::new(None)),
    );
    let saw = seen.clone();
    s.host_fn(move || {
        // SAFETY: the caller orders this function so that nothing writes `h` while it reads
        // (HF1: after its stream's earlier work, before its later work).
        let v = unsafe { h.as_slice_unchecked() };
        *saw.lock().unwrap() = Some(v.iter().all(|&x| x == want));
    })
    .unwrap();
    seen
}
