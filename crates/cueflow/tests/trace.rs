//! The trace of a known program: the seeds' pipeline on 4 streams × 8 chunks, recorded with
//! `Device::start_trace`/`stop_trace` around one run after a warm-up. Every operation appears
//! once, on the engine its kind belongs to; each stream's operations are in stream order and
//! never overlap each other; copies carry the bytes of the whole buffer; the Chrome JSON shows
//! each operation once per track; and operations on different engines overlap in time.

use cueflow::pipeline::{Pipeline, PipelineBuffers};
use cueflow::trace::chrome::to_chrome_json;
use cueflow::trace::{Engine, OpKind, Trace, TraceOp};
use cueflow::Device;

const ELEMENTS: usize = 2 << 20; // 8 MiB of f32
const STREAMS: usize = 4;
const CHUNKS: usize = 8;
const ITERS: u32 = 8;

fn traced_pipeline() -> (Trace, Vec<u64>, u64) {
    let dev = Device::host().unwrap();
    let mut bufs = PipelineBuffers::new(&dev, ELEMENTS).unwrap();
    let p = Pipeline::new(&dev, STREAMS).unwrap();
    p.run(&mut bufs, CHUNKS, ITERS).unwrap(); // warm-up: page faults, thread start
    bufs.poison_output().unwrap();
    dev.start_trace().unwrap();
    p.run(&mut bufs, CHUNKS, ITERS).unwrap();
    let trace = dev.stop_trace().unwrap();
    bufs.verify(ITERS).unwrap().unwrap();
    let ids = p.stream_handles().iter().map(|s| s.id()).collect();
    (trace, ids, p.origin().id())
}

fn overlap(a: &TraceOp, b: &TraceOp) -> i64 {
    a.end_ns.min(b.end_ns) as i64 - a.start_ns.max(b.start_ns) as i64
}

#[test]
fn pipeline_trace_is_complete_ordered_and_overlapping() {
    let (trace, streams, origin) = traced_pipeline();
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

    // Different engines overlap: some H2D copy runs while a kernel or a D2H copy runs.
    let h2d = work.iter().filter(|o| o.kind == OpKind::CopyH2D);
    let overlapped = h2d.clone().any(|a| {
        work.iter()
            .filter(|b| b.kind != OpKind::CopyH2D)
            .any(|b| overlap(a, b) > 0)
    });
    assert!(overlapped, "no overlap between engines: {work:#?}");

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
