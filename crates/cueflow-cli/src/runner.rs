//! Running the chunked pipeline of `demo` and `bench`: verified runs, and traced runs whose streams are named after
//! the run they belong to, merged into one trace for the Chrome/Perfetto file.

use std::collections::HashMap;

use cueflow::pipeline::{ChunkedPipeline, PipelineBuffers};
use cueflow::trace::Trace;

use crate::errors::{CliError, CliResult};

/// One run: poison the output, run, verify every element. Returns the run's time in ms
/// (event-timed; host-timed for a pipeline without events); poisoning and verification are
/// not part of it. `what` names the run in errors.
pub fn run_verified(
    p: &mut ChunkedPipeline,
    bufs: &mut PipelineBuffers,
    iters: u32,
    what: &str,
) -> CliResult<f64> {
    bufs.poison_output()?;
    let ms = bufs.run(p, iters)?.ms();
    bufs.verify(iters)?
        .map_err(|e| CliError::Verify(format!("{what}: {e}")))?;
    Ok(ms)
}

/// One verified run recorded by the pipeline's own tracing. The trace's streams are named
/// `{label}: origin` and `{label}: stream k`, and only streams with operations are listed.
pub fn run_traced(
    p: &mut ChunkedPipeline,
    bufs: &mut PipelineBuffers,
    iters: u32,
    label: &str,
) -> CliResult<(f64, Trace)> {
    bufs.poison_output()?;
    p.set_trace(Some(label.to_string()));
    let ran = bufs.run(p, iters);
    p.set_trace(None);
    let report = ran?;
    bufs.verify(iters)?
        .map_err(|e| CliError::Verify(format!("{label} (traced run): {e}")))?;
    Ok((report.ms(), report.trace.unwrap_or_default()))
}

/// Concatenate traces of one device into one: operations keep their times (one clock) and get
/// new ids so that ids stay unique; waits on operations outside their own trace are dropped.
/// Stream ids must differ between the traces (distinct streams do).
pub fn merge(traces: &[&Trace]) -> Trace {
    let mut out = Trace {
        device: traces.first().map(|t| t.device.clone()).unwrap_or_default(),
        ..Trace::default()
    };
    let mut next = 1u64;
    for t in traces {
        let ids: HashMap<u64, u64> = t
            .ops
            .iter()
            .enumerate()
            .map(|(i, o)| (o.id, next + i as u64))
            .collect();
        for o in &t.ops {
            let mut o = o.clone();
            o.id = ids[&o.id];
            o.waits_on = o
                .waits_on
                .iter()
                .filter_map(|w| ids.get(w).copied())
                .collect();
            out.ops.push(o);
        }
        next += t.ops.len() as u64;
        for s in &t.streams {
            if !out.streams.iter().any(|(id, _)| *id == s.0) {
                out.streams.push(s.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cueflow::trace::{Engine, OpKind, TraceOp};

    fn op(id: u64, stream: u64, waits_on: Vec<u64>) -> TraceOp {
        TraceOp {
            id,
            kind: OpKind::Kernel,
            stream,
            engine: Engine::Compute,
            bytes: 0,
            name: "k".into(),
            enqueue_ns: id,
            start_ns: id * 10,
            end_ns: id * 10 + 5,
            waits_on,
        }
    }

    #[test]
    fn merge_renumbers_and_keeps_times() {
        let a = Trace {
            device: "d".into(),
            streams: vec![(1, "a: stream 1".into())],
            ops: vec![op(1, 1, vec![]), op(2, 1, vec![1, 0])],
            clock_sync: None,
        };
        let b = Trace {
            device: "d".into(),
            streams: vec![(2, "b: stream 1".into())],
            ops: vec![op(1, 2, vec![]), op(2, 2, vec![1])],
            clock_sync: None,
        };
        let m = merge(&[&a, &b]);
        let ids: Vec<u64> = m.ops.iter().map(|o| o.id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(m.ops[1].waits_on, vec![1]);
        assert_eq!(m.ops[3].waits_on, vec![3]);
        assert_eq!(m.ops[2].start_ns, 10);
        assert_eq!(m.streams.len(), 2);
        assert_eq!(m.device, "d");
    }
}
