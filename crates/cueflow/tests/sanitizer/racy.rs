//! Racy programs: each returns the `(earlier, later)` lines of the calls that race, and the
//! sanitizer must report every pair (AC3, AC4). Cases marked "PyTorch" port the logic cases of
//! PyTorch's CUDA sanitizer tests (`test/test_cuda_sanitizer.py`) to cueflow's calls.

use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Event, PinnedBuffer, Stream};

use crate::at;
use crate::support::*;

type Races = Vec<(u32, u32)>;

/// A racy program of the corpus.
pub type Program = fn(&Device) -> Races;

/// A graph whose one node runs `body` on a capturing stream.
fn graph(dev: &Device, body: impl FnOnce(&Stream)) -> cueflow::GraphExec {
    let cap = stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    body(&cap);
    cap.end_capture().unwrap().instantiate().unwrap()
}

pub fn copy_stream_to_compute_stream_without_wait(dev: &Device) -> Races {
    let (copy, compute) = (stream(dev), stream(dev));
    let host = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    let d = filled(dev, N, 0.0);
    let c = at!(copy.copy_h2d(&d, &host));
    let k = at!(kernels::scale(&compute, &d, 2.0));
    vec![(c, k)]
}

pub fn two_readers_then_a_writer(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let (y1, y2) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let r1 = at!(kernels::saxpy(&s1, 1.0, &d, &y1));
    let r2 = at!(kernels::saxpy(&s2, 1.0, &d, &y2));
    let w = at!(kernels::fill(&s3, &d, 5.0));
    vec![(r1, w), (r2, w)]
}

pub fn overlapping_subranges_at_different_offsets(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let (a, b) = (d.slice(0..2048).unwrap(), d.slice(1024..3072).unwrap());
    let w1 = at!(kernels::fill(&s1, &a, 1.0));
    let w2 = at!(kernels::fill(&s2, &b, 2.0));
    vec![(w1, w2)]
}

pub fn subranges_overlapping_by_one_element(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let (a, b) = (d.slice(0..65).unwrap(), d.slice(64..128).unwrap());
    let w1 = at!(kernels::fill(&s1, &a, 1.0));
    let w2 = at!(kernels::fill(&s2, &b, 2.0));
    vec![(w1, w2)]
}

pub fn slice_of_a_slice_overlaps(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let inner = d.slice(1024..3072).unwrap().slice(0..512).unwrap(); // 1024..1536
    let other = d.slice(1500..1600).unwrap();
    let w1 = at!(kernels::fill(&s1, &inner, 1.0));
    let w2 = at!(kernels::fill(&s2, &other, 2.0));
    vec![(w1, w2)]
}

pub fn host_unchecked_read_during_d2h_copy(dev: &Device) -> Races {
    let s = stream(dev);
    let d = filled(dev, N, 3.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let gate = Latch::block(&s);
    let c = at!(s.copy_d2h(&mut host, &d));
    let line = line!();
    // SAFETY: the copy into `host` is held behind the gate until after this read, so nothing
    // writes the bytes while they are read; the sanitizer still sees no ordering (the point).
    let first = unsafe { host.as_slice_unchecked()[0] };
    gate.open();
    assert!(first == 0.0 || first == 3.0);
    vec![(c, line + 3)]
}

/// HF1 orders a host function after its own stream's work only: one on another stream that
/// reads a copy's destination unchecked races with the copy.
pub fn host_fn_reads_another_streams_copy_unchecked(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 3.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let c = at!(s1.copy_d2h(&mut host, &d));
    let host = std::sync::Arc::new(host);
    let h = host.clone();
    let line = line!();
    s2.host_fn(move || {
        // SAFETY: f32 has no invalid bit patterns; the read may see the copy half done (the
        // race under test), and nothing is done with the value.
        let _ = unsafe { h.as_slice_unchecked()[0] };
    })
    .unwrap();
    s2.synchronize().unwrap();
    s1.synchronize().unwrap();
    vec![(c, line + 4)]
}

/// The correct twin's write made by another stream: not ordered after the host function
/// (nor before it), however long before the function runs it was enqueued.
pub fn host_fn_reads_what_another_stream_writes(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let host = std::sync::Arc::new(PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap());
    // A kernel holds `s1` (host functions of one device run one at a time: a latch would
    // hold `s2`'s task too) until `s3` sets the flag, once `s2`'s write ended — which the
    // program learns through an atomic the sanitizer does not see (a host synchronization
    // would order the write before the function, AC2), so that nothing runs at once.
    let flag = upload(dev, &[0u32]);
    kernels::wait_flag(&s1, &flag, 1, std::time::Duration::from_secs(20)).unwrap();
    let h = host.clone();
    let line = line!();
    s1.host_fn(move || {
        // SAFETY: f32 has no invalid bit patterns; the other stream's write ended before
        // this runs (below), only no ordering the sanitizer knows says so.
        let _ = unsafe { h.as_slice_unchecked()[0] };
    })
    .unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = written.clone();
    let task = s2.host_task("w").writes(&*host);
    let w = at!(task.run(move |io| {
        io.write::<f32>(0)[0] = 2.0;
        done.store(true, std::sync::atomic::Ordering::Release);
    }));
    while !written.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::yield_now();
    }
    kernels::set_flag(&s3, &flag, 1).unwrap();
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    vec![(w, line + 4)]
}

pub fn pageable_h2d_on_legacy_then_non_blocking_kernel(dev: &Device) -> Races {
    let (legacy, nb) = (Stream::legacy(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let w = at!(legacy.write_pageable(&d, &vec![1.0f32; N]));
    let k = at!(kernels::scale(&nb, &d, 32.0));
    vec![(w, k)]
}

/// The case a new user hit: a pageable write on the legacy stream, a graph replay of a kernel
/// on a non-blocking stream, a pageable read on the legacy stream.
pub fn graph_replay_races_with_stream_work(dev: &Device) -> Races {
    let (legacy, nb) = (Stream::legacy(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let exec = graph(dev, |cap| kernels::scale(cap, &d, 32.0).unwrap());
    let mut out = vec![0.0f32; N];
    let w = at!(legacy.write_pageable(&d, &vec![1.0f32; N]));
    let l = at!(exec.launch(&nb));
    let r = at!(legacy.read_pageable(&mut out, &d));
    vec![(w, l), (l, r)]
}

pub fn stream_work_races_with_graph_replay(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let y = filled(dev, N, 0.0);
    let exec = graph(dev, |cap| kernels::saxpy(cap, 1.0, &d, &y).unwrap());
    let w = at!(kernels::fill(&s1, &d, 2.0));
    let l = at!(exec.launch(&s2));
    vec![(w, l)]
}

pub fn two_graphs_on_two_streams(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let g1 = graph(dev, |cap| kernels::fill(cap, &d, 2.0).unwrap());
    let g2 = graph(dev, |cap| kernels::scale(cap, &d, 3.0).unwrap());
    let l1 = at!(g1.launch(&s1));
    let l2 = at!(g2.launch(&s2));
    vec![(l1, l2)]
}

pub fn kernel_write_then_d2h_on_another_stream(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 0.0);
    let mut host = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let w = at!(kernels::fill(&s1, &d, 4.0));
    let c = at!(s2.copy_d2h(&mut host, &d));
    vec![(w, c)]
}

pub fn read_then_memset_on_another_stream(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 1.0), filled(dev, N, 0.0));
    let r = at!(kernels::saxpy(&s1, 1.0, &d, &y));
    let m = at!(s2.memset(&d, 0));
    vec![(r, m)]
}

pub fn two_memsets_on_two_streams(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let m1 = at!(s1.memset(&d, 0));
    let m2 = at!(s2.memset(&d, 0xff));
    vec![(m1, m2)]
}

pub fn d2d_source_written_by_another_stream(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (src, dst) = (filled(dev, N, 1.0), filled(dev, N, 0.0));
    let w = at!(kernels::fill(&s2, &src, 2.0));
    let c = at!(s1.copy_d2d(&dst, &src));
    vec![(w, c)]
}

pub fn event_recorded_before_the_write(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let e = Event::new(dev).unwrap();
    s1.record_event(&e).unwrap();
    let w = at!(kernels::fill(&s1, &d, 1.0));
    s2.wait_event(&e).unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(w, r)]
}

pub fn event_waited_by_the_wrong_stream(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let e = Event::new(dev).unwrap();
    let w = at!(kernels::fill(&s1, &d, 1.0));
    s1.record_event(&e).unwrap();
    s3.wait_event(&e).unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(w, r)]
}

pub fn event_recorded_on_the_wrong_stream(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let e = Event::new(dev).unwrap();
    let w = at!(kernels::fill(&s1, &d, 1.0));
    s3.record_event(&e).unwrap();
    s2.wait_event(&e).unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(w, r)]
}

pub fn legacy_write_then_non_blocking_read(dev: &Device) -> Races {
    let (legacy, nb) = (Stream::legacy(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let w = at!(kernels::fill(&legacy, &d, 1.0));
    let r = at!(kernels::saxpy(&nb, 1.0, &d, &y));
    vec![(w, r)]
}

pub fn per_thread_stream_does_not_order_with_others(dev: &Device) -> Races {
    let blocking = Stream::new(dev).unwrap();
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let w = at!(kernels::fill(&blocking, &d, 1.0));
    let pt = Stream::per_thread(dev).unwrap();
    let r = at!(kernels::saxpy(&pt, 1.0, &d, &y));
    vec![(w, r)]
}

/// PyTorch: a record that a later write on the same stream makes stale.
pub fn expired_record(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let e = Event::new(dev).unwrap();
    kernels::fill(&s1, &d, 1.0).unwrap();
    s1.record_event(&e).unwrap();
    let w2 = at!(kernels::fill(&s1, &d, 2.0));
    s2.wait_event(&e).unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(w2, r)]
}

/// PyTorch: an event re-recorded on another stream before the wait.
pub fn overridden_record(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let e = Event::new(dev).unwrap();
    let w = at!(kernels::fill(&s1, &d, 1.0));
    s1.record_event(&e).unwrap();
    s3.record_event(&e).unwrap();
    s2.wait_event(&e).unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(w, r)]
}

/// PyTorch: a writer that waited for two of three readers.
pub fn all_reads_checked_failing(dev: &Device) -> Races {
    let (s1, s2, s3, s4) = (stream(dev), stream(dev), stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let ys: Vec<DeviceBuffer<f32>> = (0..3).map(|_| filled(dev, N, 0.0)).collect();
    let (e1, e2) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    kernels::saxpy(&s1, 1.0, &d, &ys[0]).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &ys[1]).unwrap();
    let r3 = at!(kernels::saxpy(&s3, 1.0, &d, &ys[2]));
    s1.record_event(&e1).unwrap();
    s2.record_event(&e2).unwrap();
    s4.wait_event(&e1).unwrap();
    s4.wait_event(&e2).unwrap();
    let w = at!(kernels::fill(&s4, &d, 0.0));
    vec![(r3, w)]
}

pub fn alloc_async_used_on_another_stream_without_wait(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let line = line!();
    let buf = s1.alloc_async::<f32>(N).unwrap();
    let k = at!(kernels::fill(&s2, &buf, 1.0));
    vec![(line + 1, k)]
}

pub fn free_async_while_another_stream_uses_a_clone(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let buf = s1.alloc_async::<f32>(N).unwrap();
    s1.synchronize().unwrap();
    let clone = buf.clone();
    let f = at!(s1.free_async(buf));
    let k = at!(kernels::fill(&s2, &clone, 1.0));
    vec![(f, k)]
}

pub fn atomic_kernel_and_plain_memset(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let flag = upload(dev, &[0u32]);
    let a = at!(kernels::set_flag(&s1, &flag, 1));
    let m = at!(s2.memset(&flag, 0));
    vec![(a, m)]
}

pub fn atomic_kernel_and_plain_read(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let flag = upload(dev, &[0u32]);
    let mut host = PinnedBuffer::<u32>::new(dev, 1).unwrap();
    let a = at!(kernels::set_flag(&s1, &flag, 1));
    let r = at!(s2.copy_d2h(&mut host, &flag));
    vec![(a, r)]
}

pub fn pinned_source_overwritten_by_another_stream(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let mut host = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    let (d1, d2) = (filled(dev, N, 0.0), filled(dev, N, 2.0));
    let r = at!(s1.copy_h2d(&d1, &host));
    let w = at!(s2.copy_d2h(&mut host, &d2));
    vec![(r, w)]
}

pub fn h2h_destination_read_by_another_stream(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let a = PinnedBuffer::from_slice(dev, &vec![1.0f32; N]).unwrap();
    let mut b = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let d = filled(dev, N, 0.0);
    let w = at!(s1.copy_h2h(&mut b, &a));
    let r = at!(s2.copy_h2d(&d, &b));
    vec![(w, r)]
}

pub fn write_value_and_pageable_read(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let flag = upload(dev, &[0u32]);
    let mut out = [0u32];
    let v = at!(s1.write_value(&flag, 7));
    let r = at!(s2.read_pageable(&mut out, &flag));
    vec![(v, r)]
}

pub fn ring_of_three_streams_missing_one_wait(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (a, b, c) = (
        filled(dev, N, 1.0),
        filled(dev, N, 0.0),
        filled(dev, N, 0.0),
    );
    kernels::fill(&s1, &a, 2.0).unwrap();
    s2.wait_stream(&s1).unwrap();
    let w = at!(kernels::saxpy(&s2, 1.0, &a, &b));
    // s3 should wait for s2 before reading b; it waits for s1 only.
    s3.wait_stream(&s1).unwrap();
    let r = at!(kernels::saxpy(&s3, 1.0, &b, &c));
    vec![(w, r)]
}

pub fn completion_not_awaited_is_no_sync(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let w = at!(kernels::fill(&s1, &d, 1.0));
    let done = s1.completion().unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    done.wait().unwrap();
    vec![(w, r)]
}

pub fn wait_stream_on_the_wrong_stream(dev: &Device) -> Races {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 0.0), filled(dev, N, 0.0));
    let w = at!(kernels::fill(&s1, &d, 1.0));
    s2.wait_stream(&s3).unwrap();
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(w, r)]
}

/// Fill mapped or managed memory in place with a kernel (HM3, HM4); reports name the caller.
#[track_caller]
fn fill_mapped(s: &Stream, buf: &mut PinnedBuffer<f32>, v: f32) -> cueflow::Result<()> {
    let n = buf.len();
    s.launch(
        &kernels::FILL_F32,
        cueflow::LaunchConfig::for_elements(n, 256),
        cueflow::KernelArgs::new()
            .write_mapped(buf)
            .scalar(v)
            .scalar(n as u64),
    )
}

/// HM3: two kernels write one mapped buffer from two streams, unordered.
pub fn mapped_kernels_on_two_streams_without_wait(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let mut m =
        PinnedBuffer::<f32>::with_flags(dev, N, cueflow::PinnedFlags::default().mapped()).unwrap();
    let w1 = at!(fill_mapped(&s1, &mut m, 1.0));
    let w2 = at!(fill_mapped(&s2, &mut m, 2.0));
    vec![(w1, w2)]
}

/// HM4: a kernel writes managed memory on one stream; another stream copies from it without
/// waiting.
pub fn managed_kernel_then_copy_on_another_stream(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let mut m = cueflow::ManagedBuffer::<f32>::new(dev, N).unwrap();
    let d = filled(dev, N, 0.0);
    let w = at!(fill_mapped(&s1, &mut m, 4.0));
    let r = at!(s2.copy_h2d(&d, &*m));
    vec![(w, r)]
}
