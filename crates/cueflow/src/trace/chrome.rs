//! Chrome trace-event JSON, for Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing`.
//!
//! The output has two processes:
//!
//! - **engines**: one track per engine (H2D engine, compute, D2H engine, host fns) showing what
//!   each engine executed, so overlap between engines is visible at a glance;
//! - **streams**: one track per stream showing each stream's operations in FIFO order, event
//!   records and waits as instant events, and flow arrows from each waited-on operation to the
//!   operation that waited for it.
//!
//! Every non-marker operation appears twice, once on its engine track and once on its stream
//! track, as a complete (`"ph": "X"`) event. Times are microseconds (floats) from the earliest
//! time in the trace (start or enqueue).

use super::{Engine, OpKind, Trace, TraceOp};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Process id of the engine tracks.
pub(super) const PID_ENGINES: u64 = 1;
/// Process id of the stream tracks.
pub(super) const PID_STREAMS: u64 = 2;

/// Name of the instant that marks a trace's [`ClockSync`](super::ClockSync).
pub const CLOCK_SYNC_NAME: &str = "clock sync: the communicator's first call ended";

/// Render a trace as Chrome trace-event JSON (an object with a `traceEvents` array). A trace
/// with a [`ClockSync`](super::ClockSync) marks it with an instant on its stream's track and
/// names it in `otherData` (`rank`, `clock_sync_us`), for [`merge`](super::merge).
pub fn to_chrome_json(trace: &Trace) -> String {
    let origin = trace
        .ops
        .iter()
        .flat_map(|o| [o.start_ns, o.enqueue_ns])
        .min()
        .unwrap_or(0);
    let us = |ns: u64| ns.saturating_sub(origin) as f64 / 1e3;

    // Stream tracks: declared streams in creation order, then any stream only seen in ops.
    let mut stream_tids: HashMap<u64, u64> = HashMap::new();
    let mut stream_order: Vec<u64> = Vec::new();
    for id in trace
        .streams
        .iter()
        .map(|(id, _)| *id)
        .chain(trace.ops.iter().map(|o| o.stream))
    {
        stream_tids.entry(id).or_insert_with(|| {
            stream_order.push(id);
            stream_order.len() as u64
        });
    }

    let mut events: Vec<Value> = Vec::new();
    events.push(meta(
        PID_ENGINES,
        None,
        "process_name",
        json!({"name": "engines"}),
    ));
    events.push(meta(
        PID_ENGINES,
        None,
        "process_sort_index",
        json!({"sort_index": 0}),
    ));
    events.push(meta(
        PID_STREAMS,
        None,
        "process_name",
        json!({"name": "streams"}),
    ));
    events.push(meta(
        PID_STREAMS,
        None,
        "process_sort_index",
        json!({"sort_index": 1}),
    ));

    let mut engines: Vec<Engine> = trace
        .ops
        .iter()
        .filter(|o| !o.kind.is_marker())
        .map(|o| o.engine)
        .collect();
    engines.sort();
    engines.dedup();
    for engine in &engines {
        let tid = engine_tid(*engine);
        events.push(meta(
            PID_ENGINES,
            Some(tid),
            "thread_name",
            json!({"name": engine.label()}),
        ));
        events.push(meta(
            PID_ENGINES,
            Some(tid),
            "thread_sort_index",
            json!({"sort_index": tid}),
        ));
    }
    for id in &stream_order {
        let tid = stream_tids[id];
        events.push(meta(
            PID_STREAMS,
            Some(tid),
            "thread_name",
            json!({"name": trace.stream_name(*id)}),
        ));
        events.push(meta(
            PID_STREAMS,
            Some(tid),
            "thread_sort_index",
            json!({"sort_index": tid}),
        ));
    }

    for op in &trace.ops {
        let stream_tid = stream_tids[&op.stream];
        let stream_name = trace.stream_name(op.stream);
        if op.kind.is_marker() {
            events.push(json!({
                "name": op_name(op),
                "cat": op.kind.label(),
                "ph": "i",
                "s": "t",
                "pid": PID_STREAMS,
                "tid": stream_tid,
                "ts": us(op.start_ns),
                "args": args(op, &stream_name, us(op.enqueue_ns)),
            }));
            continue;
        }
        let dur = op.end_ns.saturating_sub(op.start_ns) as f64 / 1e3;
        for (pid, tid) in [
            (PID_ENGINES, engine_tid(op.engine)),
            (PID_STREAMS, stream_tid),
        ] {
            events.push(json!({
                "name": op_name(op),
                "cat": op.kind.label(),
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "ts": us(op.start_ns),
                "dur": dur,
                "args": args(op, &stream_name, us(op.enqueue_ns)),
            }));
        }
    }

    // Flow arrows: from the end of each waited-on op to the start of the op that waited.
    let by_id: HashMap<u64, &TraceOp> = trace.ops.iter().map(|o| (o.id, o)).collect();
    let mut flow_id = 0u64;
    for op in &trace.ops {
        for src in op.waits_on.iter().filter_map(|id| by_id.get(id)) {
            flow_id += 1;
            // Bind points sit just inside the slices (1 ns), so that viewers attach the arrow to
            // them rather than to whatever is open at the boundary.
            let src_end = us(src.end_ns.max(src.start_ns));
            let src_ts = src_end - (src_end - us(src.start_ns)).min(0.001);
            let dst_start = us(op.start_ns);
            let dst_dur = op.end_ns.saturating_sub(op.start_ns) as f64 / 1e3;
            let dst_ts = dst_start + dst_dur.min(0.001);
            events.push(json!({
                "name": "wait",
                "cat": "dependency",
                "ph": "s",
                "id": flow_id,
                "pid": PID_STREAMS,
                "tid": stream_tids[&src.stream],
                "ts": src_ts,
            }));
            events.push(json!({
                "name": "wait",
                "cat": "dependency",
                "ph": "f",
                "bp": "e",
                "id": flow_id,
                "pid": PID_STREAMS,
                "tid": stream_tids[&op.stream],
                "ts": dst_ts,
            }));
        }
    }

    let mut other = json!({
        "device": trace.device,
        "generator": "cueflow",
    });
    // The moment `cueflow trace merge` aligns ranks at (see `super::merge`).
    if let Some(c) = &trace.clock_sync {
        events.push(json!({
            "name": CLOCK_SYNC_NAME,
            "cat": "clock sync",
            "ph": "i",
            "s": "p",
            "pid": PID_STREAMS,
            "tid": stream_tids.get(&c.stream).copied().unwrap_or(0),
            "ts": us(c.at_ns),
            "args": {"rank": c.rank},
        }));
        other["rank"] = json!(c.rank);
        other["clock_sync_us"] = json!(us(c.at_ns));
    }
    let doc = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": other,
    });
    doc.to_string()
}

/// Write [`to_chrome_json`] output to `path` (conventionally `*.json`).
pub fn write_chrome_json(trace: &Trace, path: &std::path::Path) -> std::io::Result<()> {
    std::fs::write(path, to_chrome_json(trace))
}

/// Track id of an engine within the "engines" process; also its sort order.
fn engine_tid(engine: Engine) -> u64 {
    match engine {
        Engine::CopyH2D => 1,
        Engine::Compute => 2,
        Engine::CopyD2H => 3,
        Engine::Host => 4,
        Engine::None => 5,
    }
}

fn meta(pid: u64, tid: Option<u64>, name: &str, args: Value) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("ph".into(), json!("M"));
    m.insert("pid".into(), json!(pid));
    m.insert("tid".into(), json!(tid.unwrap_or(0)));
    m.insert("args".into(), args);
    Value::Object(m)
}

fn op_name(op: &TraceOp) -> String {
    if op.name.is_empty() {
        op.kind.label().to_string()
    } else {
        op.name.clone()
    }
}

fn is_copy(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::CopyH2D | OpKind::CopyD2H | OpKind::CopyD2D | OpKind::CopyH2H
    )
}

fn args(op: &TraceOp, stream_name: &str, enqueue_us: f64) -> Value {
    let mut a = Map::new();
    a.insert("op".into(), json!(op.id));
    a.insert("kind".into(), json!(op.kind.label()));
    a.insert("stream".into(), json!(stream_name));
    a.insert("stream_id".into(), json!(op.stream));
    a.insert("engine".into(), json!(op.engine.label()));
    a.insert("bytes".into(), json!(op.bytes));
    a.insert("enqueue_us".into(), json!(enqueue_us));
    let dur_ns = op.end_ns.saturating_sub(op.start_ns);
    if is_copy(op.kind) && dur_ns > 0 {
        // bytes per nanosecond is GB/s.
        let gbps = op.bytes as f64 / dur_ns as f64;
        a.insert("GB/s".into(), json!((gbps * 1000.0).round() / 1000.0));
    }
    if !op.waits_on.is_empty() {
        a.insert("waits_on".into(), json!(op.waits_on));
    }
    Value::Object(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: u64, kind: OpKind, stream: u64, engine: Engine, start: u64, end: u64) -> TraceOp {
        TraceOp {
            id,
            kind,
            stream,
            engine,
            bytes: if kind == OpKind::Kernel { 0 } else { 1 << 20 },
            name: format!("{} {id}", kind.label()),
            enqueue_ns: 1_000 + id,
            start_ns: start,
            end_ns: end,
            waits_on: Vec::new(),
        }
    }

    fn sample() -> Trace {
        let mut ops = vec![
            op(0, OpKind::CopyH2D, 7, Engine::CopyH2D, 2_000, 12_000),
            op(1, OpKind::Kernel, 7, Engine::Compute, 12_000, 22_000),
            op(2, OpKind::EventRecord, 7, Engine::None, 22_000, 22_000),
            op(3, OpKind::EventWait, 8, Engine::None, 22_000, 22_000),
            op(4, OpKind::CopyD2H, 8, Engine::CopyD2H, 22_000, 32_000),
            op(5, OpKind::HostFn, 9, Engine::Host, 32_000, 31_000), // end < start: clamp
        ];
        ops[3].waits_on = vec![1];
        ops[4].waits_on = vec![1, 0];
        Trace {
            device: "test".into(),
            streams: vec![(7, "stream A".into()), (8, "stream B".into())],
            ops,
            clock_sync: None,
        }
    }

    fn events(trace: &Trace) -> Vec<Value> {
        let v: Value = serde_json::from_str(&to_chrome_json(trace)).expect("valid JSON");
        v["traceEvents"].as_array().expect("traceEvents").clone()
    }

    #[test]
    fn parses_and_each_op_appears_twice() {
        let t = sample();
        let ev = events(&t);
        for op in t.ops.iter().filter(|o| !o.kind.is_marker()) {
            let n = ev
                .iter()
                .filter(|e| e["ph"] == "X" && e["args"]["op"] == op.id)
                .count();
            assert_eq!(n, 2, "op {}", op.id);
        }
        let pids: Vec<_> = ev
            .iter()
            .filter(|e| e["ph"] == "X" && e["args"]["op"] == 0)
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids, vec![PID_ENGINES, PID_STREAMS]);
        let instants = ev.iter().filter(|e| e["ph"] == "i").count();
        assert_eq!(instants, 2);
    }

    #[test]
    fn times_are_relative_and_durations_non_negative() {
        let ev = events(&sample());
        let mut min_ts = f64::INFINITY;
        for e in ev.iter().filter(|e| e["ph"] == "X" || e["ph"] == "i") {
            let ts = e["ts"].as_f64().unwrap();
            assert!(ts >= 0.0);
            min_ts = min_ts.min(ts);
            if e["ph"] == "X" {
                assert!(e["dur"].as_f64().unwrap() >= 0.0);
            }
        }
        // Earliest time is the first enqueue (1 µs); the first op starts 1 µs later.
        assert_eq!(min_ts, 1.0);
        let h2d = ev
            .iter()
            .find(|e| e["ph"] == "X" && e["args"]["op"] == 0)
            .unwrap();
        assert_eq!(h2d["dur"].as_f64().unwrap(), 10.0);
        assert_eq!(h2d["args"]["enqueue_us"].as_f64().unwrap(), 0.0);
        // 1 MiB in 10 µs.
        let gbps = h2d["args"]["GB/s"].as_f64().unwrap();
        assert!((gbps - 104.858).abs() < 1e-3, "{gbps}");
    }

    #[test]
    fn tracks_are_named_and_sorted() {
        let ev = events(&sample());
        let names: Vec<(u64, u64, String)> = ev
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert!(names.contains(&(PID_ENGINES, 1, "H2D engine".into())));
        assert!(names.contains(&(PID_ENGINES, 2, "compute".into())));
        assert!(names.contains(&(PID_ENGINES, 3, "D2H engine".into())));
        assert!(names.contains(&(PID_ENGINES, 4, "host fns".into())));
        assert!(names.contains(&(PID_STREAMS, 1, "stream A".into())));
        assert!(names.contains(&(PID_STREAMS, 2, "stream B".into())));
        // Stream 9 is not declared: it still gets a track.
        assert!(names.contains(&(PID_STREAMS, 3, "stream 9".into())));
        // No track for markers on the engine side.
        assert!(!names.iter().any(|(p, t, _)| *p == PID_ENGINES && *t == 5));
        let sorts = ev
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_sort_index")
            .count();
        assert_eq!(sorts, names.len());
    }

    #[test]
    fn flows_pair_up() {
        let ev = events(&sample());
        let starts: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "s").collect();
        let finishes: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "f").collect();
        assert_eq!(starts.len(), 3);
        assert_eq!(finishes.len(), 3);
        let mut ids: Vec<u64> = starts.iter().map(|e| e["id"].as_u64().unwrap()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 3, "flow ids are unique");
        for s in &starts {
            let f = finishes
                .iter()
                .find(|f| f["id"] == s["id"])
                .expect("matching finish");
            assert_eq!(f["bp"], "e");
            assert!(f["ts"].as_f64().unwrap() >= s["ts"].as_f64().unwrap());
            assert_eq!(s["pid"].as_u64(), Some(PID_STREAMS));
            assert_eq!(f["pid"].as_u64(), Some(PID_STREAMS));
        }
    }

    #[test]
    fn empty_trace_is_valid() {
        let ev = events(&Trace::default());
        assert!(ev.iter().all(|e| e["ph"] == "M"));
    }

    #[test]
    fn writes_a_file() {
        let path = std::env::temp_dir().join(format!("cueflow-chrome-{}.json", std::process::id()));
        write_chrome_json(&sample(), &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert!(serde_json::from_str::<Value>(&text).is_ok());
    }
}
