//! The benchmark's text report: the API overhead table and the sweep's grid and verdict.

use super::overhead::{self, ApiCost, Bandwidth, Settings};
use super::{sweep, Results, AUTO_TOLERANCE};
use crate::text::{self, Align, Table};
use cueflow::pipeline::median;

/// The API overhead and bandwidth section.
pub(super) fn api(api: &[ApiCost], bw: &Bandwidth, st: Settings) -> String {
    let mut s = format!(
        "\nAPI overhead: host-side time per call, median of {} batches (fastest batch in brackets)\n",
        st.batches
    );
    let mut t = Table::new(&[
        ("operation", Align::Left),
        ("calls/batch", Align::Right),
        ("cueflow", Align::Right),
        ("", Align::Left),
        ("reference", Align::Right),
        ("target", Align::Right),
        ("", Align::Left),
        ("CUDA H100", Align::Right),
    ]);
    for c in api {
        let verdict = match c.target_ns {
            Some(t) if c.median_ns <= t => "ok",
            Some(_) => "MISSED",
            None => "",
        };
        t.row(vec![
            c.name.into(),
            c.ops_per_batch.to_string(),
            text::dur_ns(c.median_ns),
            format!("({})", text::dur_ns(c.min_ns)),
            text::dur_ns(c.reference_ns),
            c.target_ns
                .map(|t| format!("≤ {}", text::dur_ns(t)))
                .unwrap_or_else(|| "—".into()),
            verdict.into(),
            c.cuda_h100_ns
                .map(text::dur_ns)
                .unwrap_or_else(|| "—".into()),
        ]);
    }
    s += &t.render(2);
    s += &format!(
        "  references, measured in this run:\n    enqueues:   {}\n    round trip: {}\n",
        overhead::ENQUEUE_REFERENCE,
        overhead::ROUND_TRIP_REFERENCE
    );
    s += &format!(
        "\nH2D copy bandwidth, {} pinned, median of {}: {:.2} GB/s = {:.0}% of copy_from_slice ({:.2} GB/s, same size, same run)\n",
        text::bytes(bw.bytes as u64),
        bw.h2d_ns.len(),
        bw.h2d_gbps(),
        100.0 * bw.h2d_gbps() / bw.reference_gbps(),
        bw.reference_gbps()
    );
    s
}

/// The sweep section.
pub(super) fn sweep(r: &Results) -> String {
    let (plan, iters, stages, params, sw, v) =
        (&r.plan, r.iters, &r.stages, &r.params, &r.sweep, &r.verdict);
    let mut s = format!(
        "\npipeline sweep: {} buffer, {} compute step{}, median of {} runs per configuration\n",
        text::bytes(plan.elements as u64 * 4),
        iters,
        if iters == 1 { "" } else { "s" },
        plan.reps
    );
    s += &format!(
        "  stages: H2D {}, kernel {}, D2H {}, both copies at once {}; lower bound {}\n",
        text::dur_ns(stages.stages.h2d_ns),
        text::dur_ns(stages.stages.kernel_ns),
        text::dur_ns(stages.stages.d2h_ns),
        text::dur_ns(stages.duplex_ns),
        text::dur_ns(stages.bound_ns())
    );
    s += &format!(
        "  model: {} per operation (tiny chunks), duplex ×{:.2}, 1 compute slot{}\n",
        text::dur_ns(params.per_op_overhead_ns),
        params.duplex_slowdown,
        if params.shared_cores > 0 {
            format!(
                ", at most {} operations at once (cores)",
                params.shared_cores
            )
        } else {
            String::new()
        },
    );
    s += &probes(&r.model.probes, plan.probe_reps);
    s += &format!(
        "  → auto: {} streams × {} chunks\n\n",
        v.auto.streams, v.auto.chunks
    );
    let mut headers: Vec<(String, Align)> = vec![("streams \\ chunks".into(), Align::Left)];
    headers.extend(sweep::CHUNKS.iter().map(|c| (c.to_string(), Align::Right)));
    let hdr: Vec<(&str, Align)> = headers.iter().map(|(h, a)| (h.as_str(), *a)).collect();
    let mut t = Table::new(&hdr);
    let best = &sw.points[sw.best];
    for st in sweep::STREAMS {
        let mut row = vec![st.to_string()];
        for c in sweep::CHUNKS {
            let cell = match sw.point(st, c) {
                Some(p) => {
                    let star = if (p.streams, p.chunks) == (best.streams, best.chunks) {
                        '*'
                    } else {
                        ' '
                    };
                    let a = if (p.streams, p.chunks) == (v.auto.streams, v.auto.chunks) {
                        'a'
                    } else {
                        ' '
                    };
                    format!("{:.2}{star}{a}", p.median_ms)
                }
                None => "·  ".into(),
            };
            row.push(cell);
        }
        t.row(row);
    }
    s += "  time in ms (* fastest, a = auto's choice)\n";
    s += &t.render(2);
    s += &format!(
        "  run-to-run noise: a typical configuration's runs deviate {:.1}% from their median (median absolute deviation)\n",
        100.0 * sw.noise()
    );
    s += &format!(
        "  auto's configuration ranks {} of {} in the sweep ({} faster)\n",
        sw.rank(v.auto.streams, v.auto.chunks) + 1,
        sw.points.len(),
        sw.rank(v.auto.streams, v.auto.chunks)
    );

    let ratio = v.ratio();
    s += &format!(
        "\nauto vs the sweep's fastest, re-timed head to head ({} alternating runs each, median):\n",
        v.best.samples_ms.len()
    );
    let mut t = Table::new(&[
        ("", Align::Left),
        ("streams", Align::Right),
        ("chunks", Align::Right),
        ("measured", Align::Right),
        ("model", Align::Right),
        ("model/measured", Align::Right),
    ]);
    for (name, p) in [("best swept", &v.best), ("auto", &v.auto_timed)] {
        t.row(vec![
            name.into(),
            p.streams.to_string(),
            p.chunks.to_string(),
            text::dur_ms(p.median_ms),
            text::dur_ms(p.predicted_ms),
            format!("{:.2}", p.predicted_ms / p.median_ms),
        ]);
    }
    s += &t.render(2);
    s += &format!(
        "  auto / best = {ratio:.3}: {} {:.0}% of the best\n",
        if ratio <= AUTO_TOLERANCE {
            "within"
        } else {
            "NOT within"
        },
        100.0 * (AUTO_TOLERANCE - 1.0)
    );
    let o = &r.ordering;
    s += &format!(
        "\nordering, {} streams × {} chunks, host-timed (median of {} alternating runs):\n  \
         events between streams {}, automatic ordering without events {}: automatic runs at \
         {:.3} of the events' speed\n",
        o.events.streams,
        o.events.chunks,
        o.events.samples_ms.len(),
        text::dur_ms(o.events.median_ms),
        text::dur_ms(o.automatic.median_ms),
        o.speed()
    );
    s += "\n";
    s += &graph_pipeline(&r.graph_pipe, r.plan.elements as u64 * 4);
    s
}

/// The pipeline run stream by stream against the same run replayed as one graph.
pub(super) fn graph_pipeline(g: &super::sweep::GraphPipeline, bytes: u64) -> String {
    format!(
        "pipeline as a graph, {} streams × {} chunks over {}, event-timed, median of {} \
         alternating runs, every run verified:\n  stream by stream {}, one graph launch {}: \
         the graph takes {:.3} of the stream time\n",
        g.streams,
        g.chunks,
        text::bytes(bytes),
        g.graph_ms.len(),
        text::dur_ms(median(g.stream_ms.clone())),
        text::dur_ms(median(g.graph_ms.clone())),
        g.ratio()
    )
}

/// The graph section: per-kernel time launched one by one and replayed as a graph.
pub(super) fn graph(g: &super::graph::GraphBench) -> String {
    format!(
        "graph replay, {} empty kernels, event-timed, median of {} runs:\n  \
         launched one by one {:.3} µs per kernel, one graph launch {:.3} µs per kernel: \
         the graph is {:.2}× faster per kernel\n",
        g.nodes,
        g.graph_us.len(),
        g.individual(),
        g.graph(),
        g.speedup()
    )
}

/// The chunk-size probe: what the pipeline cost at each chunk count, measured under
/// concurrency, as the model takes it.
pub(super) fn probes(probes: &[cueflow::pipeline::measure::ChunkProbe], reps: usize) -> String {
    if probes.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "  per chunk size, measured under concurrency (median of {reps}; stage times from the run's trace):\n"
    );
    let mut t = Table::new(&[
        ("chunks", Align::Right),
        ("streams", Align::Right),
        ("run", Align::Right),
        ("H2D", Align::Right),
        ("kernel", Align::Right),
        ("D2H", Align::Right),
        ("per op", Align::Right),
    ]);
    for p in probes {
        t.row(vec![
            p.chunks.to_string(),
            p.streams.to_string(),
            text::dur_ns(p.measured_ns),
            text::dur_ns(p.stages.h2d_ns),
            text::dur_ns(p.stages.kernel_ns),
            text::dur_ns(p.stages.d2h_ns),
            text::dur_ns(p.overhead_ns),
        ]);
    }
    s += &t.render(4);
    s
}
