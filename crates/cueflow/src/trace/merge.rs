//! One timeline from the traces of a job's ranks (`cueflow trace merge`): each rank's Chrome
//! trace ([`chrome`](super::chrome)) becomes one process of the merged trace — `rank N`, its
//! engine tracks then its stream tracks — and every rank's times are shifted so that the
//! ranks' [`ClockSync`](super::ClockSync) marks (the end of their communicator's first call)
//! fall at one instant. Each rank's trace has a clock of its own (the moment its device was
//! opened, on its machine), so unaligned times would say nothing about how the ranks overlap.

use serde_json::{json, Value};

use super::chrome::{CLOCK_SYNC_NAME, PID_ENGINES};

/// Track ids of a rank's streams start here, after its engines' (1–5).
const STREAM_TID_BASE: u64 = 100;

/// Why traces could not be merged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no traces to merge")]
    Empty,
    /// A file that is not a Chrome trace cueflow wrote.
    #[error("{file}: not a cueflow Chrome trace: {why}")]
    NotATrace {
        /// The file (as named to the merge).
        file: String,
        /// What is wrong with it.
        why: String,
    },
    /// A trace without a clock-sync mark: its device ran no collective while traced.
    #[error(
        "{file}: no clock-sync mark (the trace of a rank has one once its communicator's first \
         call ran while the trace was recording, e.g. with CUEFLOW_TRACE set)"
    )]
    NoClockSync {
        /// The file.
        file: String,
    },
    /// Two traces of one rank.
    #[error("{first} and {second} are both traces of rank {rank}")]
    DuplicateRank {
        /// The rank.
        rank: u64,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
}

/// One rank's trace, read.
struct RankTrace<'a> {
    file: &'a str,
    rank: u64,
    sync_us: f64,
    device: String,
    events: Vec<Value>,
}

/// Merge the Chrome traces (JSON text, each with the name used in errors) of a job's ranks
/// into one Chrome trace: ranks as processes, in rank order, clocks aligned at their
/// clock-sync marks (the rank whose mark came latest on its own clock keeps its times; the
/// others are shifted later).
pub fn merge_chrome_json(traces: &[(&str, &str)]) -> Result<String, MergeError> {
    let mut ranks = traces
        .iter()
        .map(|(file, text)| read(file, text))
        .collect::<Result<Vec<_>, _>>()?;
    if ranks.is_empty() {
        return Err(MergeError::Empty);
    }
    ranks.sort_by_key(|r| r.rank);
    for w in ranks.windows(2) {
        if w[0].rank == w[1].rank {
            return Err(MergeError::DuplicateRank {
                rank: w[0].rank,
                first: w[0].file.to_string(),
                second: w[1].file.to_string(),
            });
        }
    }
    let at = ranks.iter().map(|r| r.sync_us).fold(0.0, f64::max);
    let mut events = Vec::new();
    let mut summary = Vec::new();
    for r in ranks {
        let pid = r.rank + 1;
        let shift = at - r.sync_us;
        events.push(
            json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": {"name": format!("rank {}: {}", r.rank, r.device)}}),
        );
        events.push(
            json!({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
            "args": {"sort_index": r.rank}}),
        );
        for mut e in r.events {
            let ph = e["ph"].as_str().unwrap_or("").to_string();
            let name = e["name"].as_str().unwrap_or("").to_string();
            if ph == "M" && name.starts_with("process_") {
                continue;
            }
            let tid = e["tid"].as_u64().unwrap_or(0);
            let tid = if e["pid"].as_u64() == Some(PID_ENGINES) {
                tid
            } else {
                STREAM_TID_BASE + tid
            };
            e["pid"] = json!(pid);
            e["tid"] = json!(tid);
            if ph == "M" && name == "thread_sort_index" {
                e["args"]["sort_index"] = json!(tid);
            }
            if let Some(ts) = e["ts"].as_f64() {
                e["ts"] = json!(ts + shift);
            }
            if ph == "s" || ph == "f" {
                // Flow ids are per trace: make them unique per rank.
                if let Some(id) = e["id"].as_u64() {
                    e["id"] = json!((pid << 32) | (id & 0xffff_ffff));
                }
            }
            events.push(e);
        }
        summary.push(json!({"rank": r.rank, "file": r.file, "device": r.device,
            "shift_us": shift}));
    }
    let doc = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "cueflow trace merge",
            "aligned_at": CLOCK_SYNC_NAME,
            "clock_sync_us": at,
            "ranks": summary,
        },
    });
    Ok(doc.to_string())
}

fn read<'a>(file: &'a str, text: &str) -> Result<RankTrace<'a>, MergeError> {
    let bad = |why: String| MergeError::NotATrace {
        file: file.to_string(),
        why,
    };
    let mut v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let events = match v["traceEvents"].take() {
        Value::Array(a) => a,
        _ => return Err(bad("no `traceEvents` array".into())),
    };
    let other = &v["otherData"];
    let (Some(rank), Some(sync_us)) = (other["rank"].as_u64(), other["clock_sync_us"].as_f64())
    else {
        return Err(MergeError::NoClockSync {
            file: file.to_string(),
        });
    };
    Ok(RankTrace {
        file,
        rank,
        sync_us,
        device: other["device"].as_str().unwrap_or("").to_string(),
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::chrome::to_chrome_json;
    use crate::trace::{ClockSync, Engine, OpKind, Trace, TraceOp};

    /// A rank's trace: a copy, then an all-reduce that ends at `sync` (its clock), waiting
    /// on the copy.
    fn rank_trace(rank: usize, sync: u64) -> Trace {
        let op = |id, kind, engine, start, end| TraceOp {
            id,
            kind,
            stream: 1,
            engine,
            bytes: 64,
            name: String::new(),
            enqueue_ns: start,
            start_ns: start,
            end_ns: end,
            waits_on: Vec::new(),
        };
        let mut ops = vec![
            op(1, OpKind::CopyH2D, Engine::CopyH2D, 1_000, 2_000),
            op(2, OpKind::Collective, Engine::Compute, 2_000, sync),
        ];
        ops[1].waits_on = vec![1];
        Trace {
            device: format!("dev{rank}"),
            streams: vec![(1, "stream 1".into())],
            ops,
            clock_sync: Some(ClockSync {
                rank,
                at_ns: sync,
                stream: 1,
            }),
        }
    }

    fn merged(traces: &[(&str, &str)]) -> Vec<Value> {
        let v: Value = serde_json::from_str(&merge_chrome_json(traces).unwrap()).unwrap();
        v["traceEvents"].as_array().unwrap().clone()
    }

    #[test]
    fn ranks_become_processes_aligned_at_their_first_call() {
        // Rank 1's clock runs 5 µs behind rank 0's.
        let (a, b) = (
            to_chrome_json(&rank_trace(0, 9_000)),
            to_chrome_json(&rank_trace(1, 4_000)),
        );
        let ev = merged(&[("b.json", &b), ("a.json", &a)]);
        let procs: Vec<(u64, &str)> = ev
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(procs, vec![(1, "rank 0: dev0"), (2, "rank 1: dev1")]);
        let sync_ts: Vec<f64> = ev
            .iter()
            .filter(|e| e["name"] == CLOCK_SYNC_NAME)
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert_eq!(sync_ts.len(), 2);
        assert_eq!(sync_ts[0], sync_ts[1]);
        // Each trace's times count from its own first event; rank 1's are shifted by the
        // 5 µs between the marks.
        let copy_ts = |pid: u64| {
            ev.iter()
                .find(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == "H2D copy")
                .unwrap()["ts"]
                .as_f64()
                .unwrap()
        };
        assert_eq!(copy_ts(2) - copy_ts(1), 5.0);
        // Engine tracks keep their ids, stream tracks move past them; flows stay paired and
        // unique across ranks.
        let tids: Vec<u64> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] == 2)
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert_eq!(tids, vec![1, 2, STREAM_TID_BASE + 1]);
        let mut flow_ids: Vec<u64> = ev
            .iter()
            .filter(|e| e["ph"] == "s")
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        flow_ids.sort();
        flow_ids.dedup();
        assert_eq!(flow_ids.len(), 2);
        assert!(ev.iter().all(|e| e["ts"].as_f64().is_none_or(|t| t >= 0.0)));
    }

    #[test]
    fn traces_that_cannot_merge_say_why() {
        let a = to_chrome_json(&rank_trace(0, 9_000));
        let unsynced = to_chrome_json(&Trace {
            clock_sync: None,
            ..rank_trace(1, 3_000)
        });
        assert_eq!(merge_chrome_json(&[]), Err(MergeError::Empty));
        assert!(matches!(
            merge_chrome_json(&[("a", &a), ("x", "{")]),
            Err(MergeError::NotATrace { file, .. }) if file == "x"
        ));
        assert_eq!(
            merge_chrome_json(&[("a", &a), ("u", &unsynced)]),
            Err(MergeError::NoClockSync { file: "u".into() })
        );
        assert_eq!(
            merge_chrome_json(&[("a", &a), ("a2", &a)]),
            Err(MergeError::DuplicateRank {
                rank: 0,
                first: "a".into(),
                second: "a2".into()
            })
        );
    }
}
