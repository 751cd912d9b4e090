//! End-to-end tests of the `cueflow` binary: the demo's outputs (including the Chrome trace's
//! structure and overlap, the trace test), bad arguments, `info` without a GPU,
//! `bench --quick` and `model`. Sizes are small so the whole file runs in seconds.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

/// Tests that time pipelines run one at a time: on a 2-core machine, two of them at once
/// starve each other's engine threads, and overlap in a trace is what one of them checks.
static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run the binary with a clean environment for the variables it reads.
fn cueflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cueflow"))
        .args(args)
        .env_remove("CUEFLOW_DEVICE")
        .env_remove("CUEFLOW_TRACE")
        .output()
        .expect("the cueflow binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("cueflow-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One complete ("X") event of the Chrome trace.
#[derive(Clone, Debug)]
struct Slice {
    pid: u64,
    track: String,
    op: u64,
    kind: String,
    start: f64,
    end: f64,
}

/// The complete events of a Chrome trace, with their track names resolved.
fn slices(trace: &Value) -> Vec<Slice> {
    let events = trace["traceEvents"].as_array().expect("traceEvents array");
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    for e in events {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            names.insert(
                (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()),
                e["args"]["name"].as_str().unwrap().to_string(),
            );
        }
    }
    events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            let pid = e["pid"].as_u64().unwrap();
            let tid = e["tid"].as_u64().unwrap();
            let start = e["ts"].as_f64().unwrap();
            Slice {
                pid,
                track: names[&(pid, tid)].clone(),
                op: e["args"]["op"].as_u64().unwrap(),
                kind: e["args"]["kind"].as_str().unwrap().to_string(),
                start,
                end: start + e["dur"].as_f64().unwrap(),
            }
        })
        .collect()
}

/// Engine track expected for each operation kind.
fn engine_of(kind: &str) -> &'static str {
    match kind {
        "H2D copy" => "H2D engine",
        "kernel" => "compute",
        "D2H copy" => "D2H engine",
        other => panic!("unexpected operation kind {other}"),
    }
}

/// Time both intervals share, in µs.
fn shared(a: &Slice, b: &Slice) -> f64 {
    a.end.min(b.end) - a.start.max(b.start)
}

/// Trace times are µs with ns resolution; allow rounding.
const EPS: f64 = 0.002;

/// The trace test on the demo's `trace.json`: every operation once per track (its
/// engine's and its stream's), stream order per stream with start ≤ end, the serial run
/// without overlap, and, with `require_overlap`, the concurrent run with an H2D copy
/// overlapping a kernel or a D2H copy.
///
/// Overlap is asserted for a configuration with four streams and operations of a millisecond or
/// more. With `auto` on a saturated machine the model may rightly choose two chunks, and when the
/// host backend's threads get one core between them, operations shorter than a scheduler time
/// slice run one after another (`crates/cueflow/tests/trace.rs` proves overlap with a program
/// where causality forces it).
fn check_trace(trace: &Value, require_overlap: bool) {
    let all = slices(trace);
    let (engines, streams): (Vec<&Slice>, Vec<&Slice>) = all.iter().partition(|s| s.pid == 1);
    assert!(!streams.is_empty(), "no stream slices");

    // Every operation appears exactly once on its engine track and once on its stream track.
    let mut per_op: BTreeMap<u64, (Vec<&Slice>, Vec<&Slice>)> = BTreeMap::new();
    for s in &engines {
        per_op.entry(s.op).or_default().0.push(s);
    }
    for s in &streams {
        per_op.entry(s.op).or_default().1.push(s);
    }
    for (op, (e, s)) in &per_op {
        assert_eq!(e.len(), 1, "op {op} on engine tracks: {e:?}");
        assert_eq!(s.len(), 1, "op {op} on stream tracks: {s:?}");
        assert_eq!(e[0].track, engine_of(&e[0].kind), "op {op}");
        assert_eq!((e[0].start, e[0].end), (s[0].start, s[0].end), "op {op}");
    }

    // Per run and stream: the pipeline's operations, in stream order.
    let mut by_stream: BTreeMap<&str, Vec<&Slice>> = BTreeMap::new();
    for s in &streams {
        by_stream.entry(s.track.as_str()).or_default().push(s);
    }
    let mut per_run: HashMap<&str, Vec<&Slice>> = HashMap::new();
    for (track, ops) in &mut by_stream {
        let run = track.split(':').next().unwrap();
        assert!(run == "serial" || run == "concurrent", "track {track}");
        assert!(track.contains(": stream "), "unexpected ops on {track}");
        ops.sort_by_key(|s| s.op);
        for (i, s) in ops.iter().enumerate() {
            assert!(
                s.start <= s.end,
                "{track}: op {} ends before it starts",
                s.op
            );
            let want = ["H2D copy", "kernel", "D2H copy"][i % 3];
            assert_eq!(s.kind, want, "{track}: op {} out of stream order", s.op);
        }
        for w in ops.windows(2) {
            assert!(
                w[0].end <= w[1].start + EPS,
                "{track}: op {} starts before op {} ended",
                w[1].op,
                w[0].op
            );
        }
        assert_eq!(ops.len() % 3, 0, "{track}");
        per_run.entry(run).or_default().extend(ops.iter().copied());
    }

    let serial = &per_run["serial"];
    assert_eq!(serial.len(), 3, "serial run: one H2D, one kernel, one D2H");
    for (i, a) in serial.iter().enumerate() {
        for b in &serial[i + 1..] {
            assert!(shared(a, b) <= EPS, "serial ops overlap: {a:?} {b:?}");
        }
    }

    let conc = &per_run["concurrent"];
    let count = |k: &str| conc.iter().filter(|s| s.kind == k).count();
    let chunks = count("H2D copy");
    assert!(chunks >= 2, "concurrent run has {chunks} chunks");
    assert_eq!(count("kernel"), chunks);
    assert_eq!(count("D2H copy"), chunks);
    let conc_streams = by_stream
        .keys()
        .filter(|t| t.starts_with("concurrent"))
        .count();
    assert!(
        conc_streams >= 2,
        "concurrent run on {conc_streams} stream(s)"
    );
    assert!(
        overlaps(conc) || !require_overlap,
        "no H2D copy overlaps a kernel or a D2H copy"
    );
}

/// True if some H2D copy of the run shares time with a kernel or a D2H copy.
fn overlaps(run: &[&Slice]) -> bool {
    run.iter().filter(|a| a.kind == "H2D copy").any(|a| {
        run.iter()
            .filter(|b| b.kind != "H2D copy")
            .any(|b| shared(a, b) > 0.0)
    })
}

#[test]
fn demo_writes_table_timeline_and_trace() {
    let _serial = heavy();
    let dir = TempDir::new("demo");
    let out = cueflow(&["demo", "--size", "8", "--reps", "2", "--out", dir.arg()]);
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{text}\nstderr:\n{}",
        out.status.code(),
        stderr(&out)
    );
    for needle in [
        "H2D copy",
        "lower bound",
        "measured",
        "model",
        "speedup",
        "time/bound",
        "serial",
        "concurrent",
        "verified",
        "auto:",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).expect("timeline.svg");
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("serial") && svg.contains("concurrent"));
    let json = std::fs::read_to_string(dir.path().join("trace.json")).expect("trace.json");
    let trace: Value = serde_json::from_str(&json).expect("trace.json is JSON");
    check_trace(&trace, false);
}

#[test]
fn demo_trace_shows_engines_overlapping() {
    let _serial = heavy();
    // The engines are threads: on a loaded two-core machine the OS may run one run's threads
    // one after another, so the overlap is asked of any of a few runs (a broken pipeline,
    // which never overlaps, fails all of them). Every run must be a correct trace.
    let mut overlapped = false;
    for attempt in 0..5 {
        let dir = TempDir::new(&format!("fixed{attempt}"));
        let out = cueflow(&[
            "demo",
            "--size",
            "32",
            "--reps",
            "1",
            "--streams",
            "4",
            "--chunks",
            "8",
            "--iters",
            "2",
            "--out",
            dir.arg(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json = std::fs::read_to_string(dir.path().join("trace.json")).unwrap();
        let trace: Value = serde_json::from_str(&json).unwrap();
        check_trace(&trace, false);
        let all = slices(&trace);
        let conc: Vec<&Slice> = all
            .iter()
            .filter(|s| s.pid == 2 && s.track.starts_with("concurrent"))
            .collect();
        assert_eq!(conc.len(), 3 * 8);
        // Chunk c runs on stream c mod 4: two chunks, six operations, per stream.
        for k in 1..=4 {
            let on = conc
                .iter()
                .filter(|s| s.track == format!("concurrent: stream {k}"))
                .count();
            assert_eq!(on, 6, "stream {k}");
        }
        assert!(stdout(&out).contains("2 compute steps per element"));
        if overlaps(&conc) {
            overlapped = true;
            break;
        }
    }
    assert!(
        overlapped,
        "in 5 runs no H2D copy overlapped a kernel or a D2H copy"
    );
}

#[test]
fn demo_splits_the_buffer_over_several_devices() {
    let _serial = heavy();
    let dir = TempDir::new("multi");
    let out = cueflow(&[
        "demo",
        "--device",
        "host:2x",
        "--size",
        "4",
        "--reps",
        "1",
        "--out",
        dir.arg(),
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    for needle in [
        "one device",
        "split: part",
        "host:0",
        "host:1",
        "split over 2 devices",
        "verified",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).unwrap();
    assert!(
        svg.contains("host:0 (") && svg.contains("host:1 ("),
        "one group of rows per device"
    );
    let json = std::fs::read_to_string(dir.path().join("trace.json")).unwrap();
    let trace: Value = serde_json::from_str(&json).unwrap();
    assert!(!slices(&trace).is_empty());
}

#[test]
fn bad_arguments_exit_2_with_one_line() {
    let cases: &[&[&str]] = &[
        &["demo", "--size", "0"],
        &["demo", "--size", "-3"],
        &["demo", "--size", "abc"],
        &["demo", "--streams", "8", "--chunks", "4"],
        &["demo", "--streams", "0"],
        &["demo", "--chunks", "many"],
        &["demo", "--device", "gpu7"],
        &["demo", "--device", "cuda:x"],
        &["demo", "--device", "host:0x"],
        &["demo", "--device", "host:0,host:0"],
        &["demo", "--device", "host:2x", "--sanitize"],
        &["demo", "--size", "0.001", "--chunks", "1000"],
        &["demo", "--size", "0.0000001"],
        &["demo", "--reps", "0"],
        &["demo", "--host-workers", "0"],
        &["demo", "--device", "cuda:0", "--host-workers", "2"],
        &["demo", "--bogus"],
        &["bench", "--device", "nope"],
        &["bench", "--size", "0"],
        &["model", "--h2d-gbps", "10"],
        &[
            "model",
            "--h2d-gbps",
            "0",
            "--d2h-gbps",
            "1",
            "--kernel-ms",
            "1",
            "--size-mib",
            "1",
        ],
        &[
            "model",
            "--h2d-gbps",
            "1",
            "--d2h-gbps",
            "1",
            "--kernel-ms",
            "1",
            "--size-mib",
            "1",
            "--streams",
            "4",
            "--chunks",
            "2",
        ],
        &[
            "model",
            "--h2d-gbps",
            "1",
            "--d2h-gbps",
            "1",
            "--kernel-ms",
            "1",
            "--size-mib",
            "1",
            "--duplex",
            "0.5",
        ],
        &["frobnicate"],
    ];
    for args in cases {
        let out = cueflow(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("cueflow: error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }
}

#[test]
fn bad_environment_device_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_cueflow"))
        .args(["demo", "--size", "1"])
        .env("CUEFLOW_DEVICE", "tpu")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("CUEFLOW_DEVICE"));
}

#[test]
fn info_works_without_a_gpu_and_explains_cuda() {
    let out = cueflow(&["info"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("host   available"), "{text}");
    for needle in [
        "device host",
        "async engines",
        "compute units",
        "stream priorities",
        "memory",
        "max threads per block",
        "driver version             CUDA 13.0",
        "compute mode               default",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }
    let cuda = text
        .lines()
        .find(|l| l.trim_start().starts_with("cuda "))
        .expect("a cuda line");
    if cuda.contains("unavailable") {
        // The reason is given: the line has text after `unavailable`.
        let reason = cuda.split_once("unavailable").unwrap().1.trim();
        assert!(reason.len() > 10, "no reason given: {cuda}");
        // And the device error reaches a command as exit 1 with the same reason.
        let out = cueflow(&["demo", "--device", "cuda:0", "--size", "1"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("unavailable"), "{err}");
    } else {
        assert!(cuda.contains("available"), "{cuda}");
    }
}

#[test]
fn bench_quick_runs_and_writes_its_files() {
    let _serial = heavy();
    let dir = TempDir::new("bench");
    let out = cueflow(&["bench", "--quick", "--out", dir.arg()]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    for needle in [
        "empty kernel launch",
        "event record",
        "stream wait event",
        "launch + stream synchronize",
        "copy_from_slice",
        "best swept",
        "auto / best",
        "head to head",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }
    let svg = std::fs::read_to_string(dir.path().join("bench_sweep.svg")).unwrap();
    assert!(svg.contains("lower bound") && svg.contains("auto"));
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("bench.json")).unwrap())
            .unwrap();
    let api = doc["api"].as_array().unwrap();
    assert_eq!(api.len(), 4);
    assert!(api.iter().all(|a| a["median_ns"].as_f64().unwrap() > 0.0));
    let sweep = doc["pipeline"]["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 8 + 7 + 6 + 5 + 4);
    for p in sweep {
        let (s, c) = (
            p["streams"].as_u64().unwrap(),
            p["chunks"].as_u64().unwrap(),
        );
        assert!(c >= s);
        assert!(p["median_ms"].as_f64().unwrap() > 0.0);
    }
    let h2h = &doc["pipeline"]["head_to_head"];
    assert!(h2h["auto"]["median_ms"].as_f64().unwrap() > 0.0);
    assert!(h2h["best"]["median_ms"].as_f64().unwrap() > 0.0);
    assert!(h2h["auto_over_best"].as_f64().unwrap() > 0.0);
    let auto = &doc["pipeline"]["auto"];
    assert!(auto["chunks"].as_u64().unwrap() >= auto["streams"].as_u64().unwrap());
    assert!(doc["bandwidth"]["fraction"].as_f64().unwrap() > 0.0);
}

#[test]
fn model_predicts_the_seeds_halving() {
    let dir = TempDir::new("model");
    // 64 MiB at 6.7108864 GB/s is 10 ms: three equal 10 ms stages, four chunks on four streams.
    let out = cueflow(&[
        "model",
        "--h2d-gbps",
        "6.7108864",
        "--d2h-gbps",
        "6.7108864",
        "--kernel-ms",
        "10",
        "--size-mib",
        "64",
        "--streams",
        "4",
        "--chunks",
        "4",
        "--out",
        dir.arg(),
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("30.0 ms"), "{text}");
    assert!(text.contains("15.0 ms"), "{text}");
    assert!(text.contains("2.00×"), "{text}");
    let svg = std::fs::read_to_string(dir.path().join("model.svg")).unwrap();
    assert!(svg.contains("serial") && svg.contains("concurrent"));
    // `auto` picks something at least as good as four chunks.
    let out = cueflow(&[
        "model",
        "--h2d-gbps",
        "6.7108864",
        "--d2h-gbps",
        "6.7108864",
        "--kernel-ms",
        "10",
        "--size-mib",
        "64",
        "--overhead-us",
        "5",
        "--out",
        dir.arg(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("auto:"));
}

#[test]
fn too_large_a_buffer_is_refused_before_allocating() {
    let out = cueflow(&["demo", "--size", "100000000"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("not enough memory"), "{err}");
}
