//! Timeline traces: what ran where, and when.
//!
//! A [`Trace`] is a list of [`TraceOp`]s, one per stream operation, with the host-clock time the
//! operation was enqueued and the device-clock times it started and ended. The recorder in core
//! fills it while tracing is enabled; the writers turn it into Chrome trace-event JSON (opens in
//! Perfetto) and a self-contained SVG timeline (one row per engine).

use std::path::{Path, PathBuf};

pub mod chrome;
pub mod merge;
pub mod svg;

/// What an operation does; decides its colour and its row in the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Host (pinned or pageable) to device copy.
    CopyH2D,
    /// Device to host copy.
    CopyD2H,
    /// Device to device copy.
    CopyD2D,
    /// Host to host copy.
    CopyH2H,
    /// Memset of device memory.
    Memset,
    /// Kernel launch.
    Kernel,
    /// Host function run on the stream.
    HostFn,
    /// Event record (a marker; takes no engine time).
    EventRecord,
    /// Stream wait on an event (a marker; takes no engine time).
    EventWait,
    /// Stream-ordered allocation.
    Alloc,
    /// Stream-ordered free.
    Free,
    /// An instantiated graph launched as one unit.
    Graph,
    /// A 32-bit flag written to or read from the device atomically, in stream order.
    Value,
    /// A copy between the memory of two devices (MD3).
    CopyPeer,
    /// A collective operation over a group of devices (MD4).
    Collective,
    /// Work of another library or the caller's own, enqueued on the stream through
    /// [`Stream::external`](crate::Stream::external).
    External,
}

impl OpKind {
    /// Short label used in legends and tooltips.
    pub fn label(self) -> &'static str {
        match self {
            OpKind::CopyH2D => "H2D copy",
            OpKind::CopyD2H => "D2H copy",
            OpKind::CopyD2D => "D2D copy",
            OpKind::CopyH2H => "H2H copy",
            OpKind::Memset => "memset",
            OpKind::Kernel => "kernel",
            OpKind::HostFn => "host fn",
            OpKind::EventRecord => "event record",
            OpKind::EventWait => "event wait",
            OpKind::Alloc => "alloc",
            OpKind::Free => "free",
            OpKind::Graph => "graph",
            OpKind::Value => "value op",
            OpKind::CopyPeer => "peer copy",
            OpKind::Collective => "collective",
            OpKind::External => "external",
        }
    }

    /// Markers take no time on an engine; writers may draw them as ticks or leave them out.
    pub fn is_marker(self) -> bool {
        matches!(
            self,
            OpKind::EventRecord | OpKind::EventWait | OpKind::Alloc | OpKind::Free
        )
    }
}

/// The device engine that executed an operation (SPEC CP5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// Host to device copy engine.
    CopyH2D,
    /// Kernels, memsets and device-to-device copies.
    Compute,
    /// Device to host copy engine.
    CopyD2H,
    /// Host functions and host-to-host copies.
    Host,
    /// No engine: markers (event record/wait, alloc/free).
    None,
}

impl Engine {
    /// Row label in the timeline.
    pub fn label(self) -> &'static str {
        match self {
            Engine::CopyH2D => "H2D engine",
            Engine::Compute => "compute",
            Engine::CopyD2H => "D2H engine",
            Engine::Host => "host fns",
            Engine::None => "markers",
        }
    }
}

/// One traced operation. Times are nanoseconds on one clock per trace (host backend: the
/// monotonic clock; CUDA backend: event times mapped onto the host clock).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceOp {
    /// Unique id within the trace, increasing in enqueue order.
    pub id: u64,
    /// What the operation does.
    pub kind: OpKind,
    /// Id of the stream it was enqueued on (see [`Trace::streams`]).
    pub stream: u64,
    /// Engine that executed it.
    pub engine: Engine,
    /// Bytes moved or set (copies, memset); 0 otherwise.
    pub bytes: u64,
    /// Kernel name, or a short label for other operations.
    pub name: String,
    /// Host-clock time of the enqueue call.
    pub enqueue_ns: u64,
    /// Device-clock time the operation started executing.
    pub start_ns: u64,
    /// Device-clock time the operation completed.
    pub end_ns: u64,
    /// Ids of operations this one waited for through event waits (drawn as flow arrows).
    pub waits_on: Vec<u64>,
}

/// A recorded timeline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// Device description, e.g. `host (2 compute workers)` or `NVIDIA H100 80GB HBM3`.
    pub device: String,
    /// Stream ids with their display names, in creation order.
    pub streams: Vec<(u64, String)>,
    /// Operations in enqueue order.
    pub ops: Vec<TraceOp>,
    /// When the device was a rank of a communicator: the moment its first call ended, the
    /// instant `cueflow trace merge` aligns the ranks' clocks at.
    pub clock_sync: Option<ClockSync>,
}

/// The end of a communicator's first call (MD4) on one of its ranks. Every rank leaves a
/// collective when the last one has arrived, so these moments coincide across the ranks of a
/// job (within the collective's own skew) though each trace has a clock of its own: merged
/// traces line up there ([`merge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSync {
    /// The device's rank in the communicator.
    pub rank: usize,
    /// When the call ended, on this trace's clock.
    pub at_ns: u64,
    /// The stream the call ran on.
    pub stream: u64,
}

impl Trace {
    /// Earliest start and latest end over all non-marker operations, or `None` if there are none.
    pub fn span_ns(&self) -> Option<(u64, u64)> {
        let mut it = self.ops.iter().filter(|o| !o.kind.is_marker());
        let first = it.next()?;
        let (mut lo, mut hi) = (first.start_ns, first.end_ns);
        for o in it {
            lo = lo.min(o.start_ns);
            hi = hi.max(o.end_ns);
        }
        Some((lo, hi))
    }

    /// Display name of a stream id.
    pub fn stream_name(&self, id: u64) -> String {
        self.streams
            .iter()
            .find(|(s, _)| *s == id)
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| format!("stream {id}"))
    }
}

/// Where the trace of a device goes, given `CUEFLOW_TRACE`'s `template`: `{rank}` in it
/// becomes the rank — the process's rank in a launched job (SPEC MD5), else the device's rank
/// in its communicator (`comm_rank`), else 0. In a launched job of several ranks a template
/// without `{rank}` gets the rank before its extension (`trace.json` → `trace-3.json`), so
/// that ranks never write one file.
pub(crate) fn file_for_rank(template: &Path, comm_rank: Option<usize>) -> PathBuf {
    let launched = crate::cluster::LaunchEnv::from_env()
        .ok()
        .filter(|e| e.ranks() > 1)
        .map(|e| e.rank());
    rank_file(template, launched, comm_rank)
}

/// [`file_for_rank`] given the launched rank.
fn rank_file(template: &Path, launched: Option<usize>, comm_rank: Option<usize>) -> PathBuf {
    let text = template.to_string_lossy();
    if text.contains("{rank}") {
        let rank = launched.or(comm_rank).unwrap_or(0);
        return PathBuf::from(text.replace("{rank}", &rank.to_string()));
    }
    match (launched, template.file_stem()) {
        (Some(rank), Some(stem)) => {
            let mut name = stem.to_os_string();
            name.push(format!("-{rank}"));
            if let Some(ext) = template.extension() {
                name.push(".");
                name.push(ext);
            }
            template.with_file_name(name)
        }
        _ => template.to_path_buf(),
    }
}

#[cfg(test)]
#[test]
fn trace_files_take_the_rank() {
    let f = |t: &str, launched, comm| rank_file(Path::new(t), launched, comm);
    assert_eq!(
        f("t/trace-{rank}.json", Some(3), Some(1)),
        Path::new("t/trace-3.json")
    );
    assert_eq!(
        f("trace-{rank}.json", None, Some(1)),
        Path::new("trace-1.json")
    );
    assert_eq!(
        f("trace-{rank}.json", None, None),
        Path::new("trace-0.json")
    );
    assert_eq!(
        f("t/trace.json", Some(2), Some(0)),
        Path::new("t/trace-2.json")
    );
    assert_eq!(f("t/trace", Some(2), None), Path::new("t/trace-2"));
    assert_eq!(f("t/trace.json", None, Some(1)), Path::new("t/trace.json"));
}
