//! `CUEFLOW_GRAPH_DOT`: the driver's view of each instantiated graph, as a Graphviz file.

use cudarc::driver::sys::CUgraph;

use super::driver::graph as dg;

/// `CUEFLOW_GRAPH_DOT`: write the instantiated graph as the driver holds it, to compare it with
/// another program's (a failure is said on standard error; the graph is used either way).
pub(super) fn write_dot(graph: CUgraph, dir: &std::path::Path) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("cueflow-{}-{n}.dot", std::process::id()));
    let r = std::ffi::CString::new(path.to_string_lossy().into_owned())
        .map_err(|e| e.to_string())
        .and_then(|c| dg::debug_dot_print(graph, &c).map_err(|e| format!("{e:?}")));
    if let Err(e) = r {
        eprintln!(
            "cueflow: CUEFLOW_GRAPH_DOT: {} not written: {e}",
            path.display()
        );
    }
}
