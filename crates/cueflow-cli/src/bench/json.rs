//! `bench.json`: every number the benchmark measured, with what it was measured against.

use cueflow::Device;
use serde_json::{json, Value};

use super::overhead::ApiCost;
use super::{sweep, Results, AUTO_TOLERANCE};

/// The whole document.
pub(super) fn document(r: &Results) -> Value {
    json!({
        "generator": format!("cueflow {}", env!("CARGO_PKG_VERSION")),
        "device": device(r.dev),
        "machine": { "cores": std::thread::available_parallelism().map_or(0, |n| n.get()) },
        "quick": r.quick,
        "api": r.api.iter().map(api).collect::<Vec<_>>(),
        "bandwidth": {
            "bytes": r.bw.bytes,
            "h2d_ns": r.bw.h2d_ns,
            "reference": "copy_from_slice",
            "reference_ns": r.bw.reference_ns,
            "h2d_gbps": r.bw.h2d_gbps(),
            "reference_gbps": r.bw.reference_gbps(),
            "fraction": r.bw.h2d_gbps() / r.bw.reference_gbps(),
        },
        "graph": {
            "nodes": r.graph.nodes,
            "timing": "events on the launching stream, per kernel",
            "individual_us": r.graph.individual_us,
            "graph_us": r.graph.graph_us,
            "individual_median_us": r.graph.individual(),
            "graph_median_us": r.graph.graph(),
            "speedup": r.graph.speedup(),
        },
        "pipeline": {
            "size_mib": r.plan.size_mib,
            "elements": r.plan.elements,
            "iters": r.iters,
            "reps": r.plan.reps,
            "stages_ns": {
                "h2d": r.stages.stages.h2d_ns,
                "kernel": r.stages.stages.kernel_ns,
                "d2h": r.stages.stages.d2h_ns,
                "duplex": r.stages.duplex_ns,
                "bound": r.stages.bound_ns(),
            },
            "model": {
                "per_op_overhead_ns": r.params.per_op_overhead_ns,
                "duplex_slowdown": r.params.duplex_slowdown,
                "compute_slots": r.params.compute_slots,
                "shared_cores": r.params.shared_cores,
                "probe": {
                    "streams": r.probe.streams,
                    "chunks": r.probe.chunks,
                    "elements": r.probe.elements,
                    "measured_ns": r.probe.measured_ns,
                },
                "chunk_probes": r.model.probes.iter().map(|p| json!({
                    "chunks": p.chunks,
                    "streams": p.streams,
                    "measured_ns": p.measured_ns,
                    "stages_ns": {
                        "h2d": p.stages.h2d_ns,
                        "kernel": p.stages.kernel_ns,
                        "d2h": p.stages.d2h_ns,
                    },
                    "per_op_overhead_ns": p.overhead_ns,
                })).collect::<Vec<_>>(),
            },
            "sweep": r.sweep.points.iter().map(point).collect::<Vec<_>>(),
            "noise_relative_mad": r.sweep.noise(),
            "auto": {
                "streams": r.verdict.auto.streams,
                "chunks": r.verdict.auto.chunks,
                "predicted_ms": r.verdict.auto.predicted_ns / 1e6,
                "sweep_rank": r.sweep.rank(r.verdict.auto.streams, r.verdict.auto.chunks),
            },
            "head_to_head": {
                "best": point(&r.verdict.best),
                "auto": point(&r.verdict.auto_timed),
                "auto_over_best": r.verdict.ratio(),
                "tolerance": AUTO_TOLERANCE,
                "auto_within_tolerance": r.verdict.ratio() <= AUTO_TOLERANCE,
            },
            "ordering": {
                "timing": "host wall clock, enqueue to host-observed completion",
                "events": point(&r.ordering.events),
                "automatic": point(&r.ordering.automatic),
                "automatic_speed_over_events": r.ordering.speed(),
            },
            "graph_pipeline": {
                "timing": "events: the stream run between its start and stop events, the graph between events around its launch",
                "streams": r.graph_pipe.streams,
                "chunks": r.graph_pipe.chunks,
                "stream_ms": r.graph_pipe.stream_ms,
                "graph_ms": r.graph_pipe.graph_ms,
                "graph_over_streams": r.graph_pipe.ratio(),
            },
        },
    })
}

fn device(dev: &Device) -> Value {
    let p = dev.properties();
    json!({
        "spec": dev.spec().to_string(),
        "name": p.name,
        "backend": p.backend,
        "async_engines": p.async_engines,
        "compute_units": p.compute_units,
        "priority_least": p.priority_least,
        "priority_greatest": p.priority_greatest,
        "total_memory": p.total_memory,
    })
}

fn api(c: &ApiCost) -> Value {
    json!({
        "name": c.name,
        "median_ns": c.median_ns,
        "min_ns": c.min_ns,
        "ops_per_batch": c.ops_per_batch,
        "reference": c.reference,
        "reference_ns": c.reference_ns,
        "target_ns": c.target_ns,
        "cuda_h100_ns": c.cuda_h100_ns,
    })
}

fn point(p: &sweep::Point) -> Value {
    json!({
        "streams": p.streams,
        "chunks": p.chunks,
        "median_ms": p.median_ms,
        "samples_ms": p.samples_ms,
        "relative_mad": p.relative_mad(),
        "predicted_ms": p.predicted_ms,
    })
}
