//! `cueflow trace merge`: rank traces in, one aligned timeline out; traces that cannot be
//! merged are named with exit code 1, missing arguments exit 2.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{json, Value};

fn cueflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cueflow"))
        .args(args)
        .output()
        .expect("the cueflow binary runs")
}

/// A rank's trace as CUEFLOW_TRACE writes it: one collective on stream track 1 ending at
/// `sync_us` on its own clock, and the clock-sync mark (`None`: no mark).
fn rank_trace(rank: u64, sync_us: Option<f64>) -> String {
    let end = sync_us.unwrap_or(10.0);
    let mut other = json!({"device": format!("host {rank}"), "generator": "cueflow"});
    if let Some(s) = sync_us {
        other["rank"] = json!(rank);
        other["clock_sync_us"] = json!(s);
    }
    json!({
        "traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 2, "tid": 0, "args": {"name": "streams"}},
            {"name": "thread_name", "ph": "M", "pid": 2, "tid": 1, "args": {"name": "stream 1"}},
            {"name": "all_reduce", "cat": "collective", "ph": "X", "pid": 2, "tid": 1,
             "ts": end - 4.0, "dur": 4.0},
        ],
        "otherData": other,
    })
    .to_string()
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> Dir {
    let p = std::env::temp_dir().join(format!("cueflow-trace-merge-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    Dir(p)
}

#[test]
fn merges_ranks_aligned_at_their_first_call() {
    let d = dir("ok");
    let (a, b, out) = (
        d.0.join("trace-0.json"),
        d.0.join("trace-1.json"),
        d.0.join("m.json"),
    );
    std::fs::write(&a, rank_trace(0, Some(50.0))).unwrap();
    std::fs::write(&b, rank_trace(1, Some(20.0))).unwrap();
    let o = cueflow(&[
        "trace",
        "merge",
        b.to_str().unwrap(),
        a.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("merged 2 rank trace(s)"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = ev
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rank 0: host 0", "rank 1: host 1"]);
    let ends: Vec<f64> = ev
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
        .collect();
    assert_eq!(ends, [50.0, 50.0]);
}

#[test]
fn traces_that_cannot_merge_are_named() {
    let d = dir("bad");
    let (a, b) = (d.0.join("a.json"), d.0.join("b.json"));
    std::fs::write(&a, rank_trace(0, Some(5.0))).unwrap();
    std::fs::write(&b, rank_trace(1, None)).unwrap();
    let out = d.0.join("m.json");
    let o = cueflow(&[
        "trace",
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("b.json") && err.contains("no clock-sync mark"),
        "{err}"
    );
    assert!(!out.exists());
    let o = cueflow(&[
        "trace",
        "merge",
        a.to_str().unwrap(),
        d.0.join("none.json").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(cueflow(&["trace", "merge"]).status.code(), Some(2));
}
