//! Traces of known programs, recorded with `Device::start_trace`/`stop_trace`.
//!
//! 1. The demo's pipeline on 4 streams × 8 chunks, one run after a warm-up: every operation
//!    appears once, on the engine its kind belongs to; each stream's operations are in stream
//!    order and never overlap each other; the copies carry the bytes of the whole buffer; the
//!    Chrome JSON shows each operation once per track.
//! 2. A program whose dependencies force a kernel to run across a whole host-to-device copy:
//!    the trace must show the two engines overlapping, however the threads are scheduled.
//! 3. A stream made before tracing started keeps its name in every trace.

use std::time::{Duration, Instant};

use cueflow::pipeline::{ChunkedPipeline, PipelineBuffers};
use cueflow::trace::chrome::to_chrome_json;
use cueflow::trace::{Engine, OpKind, TraceOp};
use cueflow::{
    kernels, Device, DeviceBuffer, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream,
};

const ELEMENTS: usize = 2 << 20; // 8 MiB of f32
const STREAMS: usize = 4;
const CHUNKS: usize = 8;
const ITERS: u32 = 8;

#[test]
fn pipeline_trace_is_complete_and_in_stream_order() {
    let dev = Device::host().unwrap();
    let mut bufs = PipelineBuffers::new(&dev, ELEMENTS).unwrap();
    let mut p = ChunkedPipeline::new(&dev)
        .streams(STREAMS as u32)
        .chunks(CHUNKS as u32)
        .build()
        .unwrap();
    bufs.run(&mut p, ITERS).unwrap(); // warm-up: page faults, thread start
    bufs.poison_output().unwrap();
    dev.start_trace().unwrap();
    bufs.run(&mut p, ITERS).unwrap();
    let trace = dev.stop_trace().unwrap();
    bufs.verify(ITERS).unwrap().unwrap();
    let streams: Vec<u64> = p.streams().iter().map(|s| s.id()).collect();
    let origin = p.origin().id();
    let work: Vec<&TraceOp> = trace.ops.iter().filter(|o| !o.kind.is_marker()).collect();

    // Exactly the pipeline's operations, each on its engine.
    assert_eq!(work.len(), 3 * CHUNKS, "{work:#?}");
    for o in &work {
        let engine = match o.kind {
            OpKind::CopyH2D => Engine::CopyH2D,
            OpKind::Kernel => Engine::Compute,
            OpKind::CopyD2H => Engine::CopyD2H,
            k => panic!("unexpected {k:?}"),
        };
        assert_eq!(o.engine, engine, "{o:?}");
        assert!(o.start_ns <= o.end_ns, "{o:?}");
        assert!(o.enqueue_ns <= o.start_ns, "{o:?}");
        assert!(streams.contains(&o.stream), "{o:?}");
    }
    let bytes = |k: OpKind| -> u64 { work.iter().filter(|o| o.kind == k).map(|o| o.bytes).sum() };
    assert_eq!(bytes(OpKind::CopyH2D), (ELEMENTS * 4) as u64);
    assert_eq!(bytes(OpKind::CopyD2H), (ELEMENTS * 4) as u64);

    // Stream order: chunk c on stream c mod 4, copy in → kernel → copy out, one after another.
    for (k, id) in streams.iter().enumerate() {
        let mut ops: Vec<&&TraceOp> = work.iter().filter(|o| o.stream == *id).collect();
        ops.sort_by_key(|o| o.id);
        assert_eq!(ops.len(), 3 * (CHUNKS - k).div_ceil(STREAMS), "stream {id}");
        for (i, o) in ops.iter().enumerate() {
            let want = [OpKind::CopyH2D, OpKind::Kernel, OpKind::CopyD2H][i % 3];
            assert_eq!(o.kind, want, "stream {id}: {o:?}");
        }
        for w in ops.windows(2) {
            assert!(
                w[0].end_ns <= w[1].start_ns,
                "stream {id}: {:?} {:?}",
                w[0],
                w[1]
            );
        }
    }

    // The origin stream holds only markers: the start record, the waits, the stop record.
    assert!(trace
        .ops
        .iter()
        .filter(|o| o.stream == origin)
        .all(|o| o.kind.is_marker()));
    let waits = trace
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::EventWait)
        .count();
    assert_eq!(
        waits,
        2 * STREAMS,
        "each stream waits on the start, the origin on each"
    );

    // Chrome JSON: every operation once on its engine track and once on its stream track.
    let doc: serde_json::Value = serde_json::from_str(&to_chrome_json(&trace)).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    for o in &work {
        let pids: Vec<u64> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["args"]["op"] == o.id)
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids.len(), 2, "op {}: {pids:?}", o.id);
        assert_ne!(pids[0], pids[1]);
    }
}

#[test]
fn trace_shows_a_kernel_running_across_a_copy() {
    // Kernel `hold` on stream B raises flag `started`, then spins until flag `release` is set.
    // Stream A waits for `started` (a kernel), copies host → device, then sets `release`. So
    // hold starts before the copy starts and ends after it ended: overlap by causality.
    let hold = Kernel::new("hold")
        .host(|_, a| {
            let (started, release) = (&a.atomics_u32(0)[0], &a.atomics_u32(1)[0]);
            started.store(1, std::sync::atomic::Ordering::Release);
            let t = Instant::now();
            while release.load(std::sync::atomic::Ordering::Acquire) != 1 {
                assert!(t.elapsed() < Duration::from_secs(60), "never released");
                std::thread::yield_now();
            }
        })
        .build();
    let dev = Device::host_with_workers(2).unwrap();
    let a = Stream::builder(&dev).non_blocking().build().unwrap();
    let b = Stream::builder(&dev).non_blocking().build().unwrap();
    let started = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    let release = DeviceBuffer::<u32>::new(&dev, 1).unwrap();
    let host = PinnedBuffer::from_slice(&dev, &vec![1.0f32; 1 << 20]).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap();

    dev.start_trace().unwrap();
    b.launch(
        &hold,
        LaunchConfig::new(1, 1),
        KernelArgs::new().atomic(&started).atomic(&release),
    )
    .unwrap();
    kernels::wait_flag(&a, &started, 1, Duration::from_secs(60)).unwrap();
    a.copy_h2d(&d, &host).unwrap();
    kernels::set_flag(&a, &release, 1).unwrap();
    let trace = dev.stop_trace().unwrap();

    let find = |kind: OpKind, stream: u64| {
        trace
            .ops
            .iter()
            .find(|o| o.kind == kind && o.stream == stream)
            .unwrap_or_else(|| panic!("no {kind:?} on stream {stream}: {trace:#?}"))
    };
    let kernel = find(OpKind::Kernel, b.id());
    let copy = find(OpKind::CopyH2D, a.id());
    assert_eq!(kernel.engine, Engine::Compute);
    assert_eq!(copy.engine, Engine::CopyH2D);
    assert!(
        kernel.start_ns <= copy.start_ns && copy.end_ns <= kernel.end_ns,
        "kernel {kernel:?} does not span copy {copy:?}"
    );
    assert!(copy.end_ns > copy.start_ns, "{copy:?}");
}

/// A stream made before tracing started is named in the trace (and in a second trace too).
#[test]
fn streams_made_before_tracing_keep_their_names() {
    let dev = Device::host().unwrap();
    let s = Stream::builder(&dev).name("made early").build().unwrap();
    let b = DeviceBuffer::<f32>::new(&dev, 256).unwrap();
    for _ in 0..2 {
        dev.start_trace().unwrap();
        kernels::fill(&s, &b, 1.0).unwrap();
        s.synchronize().unwrap();
        let t = dev.stop_trace().unwrap();
        assert_eq!(t.stream_name(s.id()), "made early");
    }
}
