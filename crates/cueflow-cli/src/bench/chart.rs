//! `bench_sweep.svg`: pipeline time vs chunks, one line per stream count, the lower bound as a
//! horizontal line, the `auto` choice and the fastest configuration marked.

use super::{sweep, Results};
use crate::plot::{HLine, LinePlot, Marker, Series};
use crate::text;

/// Time vs chunks, one line per stream count, the bound, auto and best marked.
pub(super) fn sweep(r: &Results) -> LinePlot {
    let (dev, plan, iters, sw, v) = (r.dev, &r.plan, r.iters, &r.sweep, &r.verdict);
    let bound_ms = r.stages.bound_ns() / 1e6;
    // auto sits on its line: its sweep time (the head-to-head time if it was not swept).
    let auto_y = sw
        .point(v.auto.streams, v.auto.chunks)
        .map_or(v.auto_timed.median_ms, |p| p.median_ms);
    let series = sweep::STREAMS
        .iter()
        .filter_map(|&st| {
            let points: Vec<(f64, f64)> = sw
                .points
                .iter()
                .filter(|p| p.streams == st)
                .map(|p| (f64::from(p.chunks), p.median_ms))
                .collect();
            (!points.is_empty()).then(|| Series {
                label: format!("{st} stream{}", if st == 1 { "" } else { "s" }),
                points,
            })
        })
        .collect();
    let best = &sw.points[sw.best];
    LinePlot {
        title: "cueflow bench: pipeline time vs chunks".into(),
        subtitle: format!(
            "{} · {} buffer · {} compute step{} · median of {} runs",
            dev.properties().name,
            text::bytes(plan.elements as u64 * 4),
            iters,
            if iters == 1 { "" } else { "s" },
            plan.reps
        ),
        x_label: "chunks (log₂ scale)".into(),
        y_label: "time (ms)".into(),
        log2_x: true,
        series,
        hlines: vec![HLine {
            y: bound_ms,
            label: format!("lower bound {}", text::dur_ms(bound_ms)),
        }],
        markers: if (v.auto.streams, v.auto.chunks) == (best.streams, best.chunks) {
            // One point, one label.
            vec![Marker {
                x: f64::from(best.chunks),
                y: best.median_ms,
                label: format!(
                    "auto = best: {}×{}, {}",
                    best.streams,
                    best.chunks,
                    text::dur_ms(best.median_ms)
                ),
                colour: "#b00020",
            }]
        } else {
            vec![
                Marker {
                    x: f64::from(v.auto.chunks),
                    y: auto_y,
                    label: format!(
                        "auto: {}×{}, {}",
                        v.auto.streams,
                        v.auto.chunks,
                        text::dur_ms(auto_y)
                    ),
                    colour: "#b00020",
                },
                Marker {
                    x: f64::from(best.chunks),
                    y: best.median_ms,
                    label: format!(
                        "best: {}×{}, {}",
                        best.streams,
                        best.chunks,
                        text::dur_ms(best.median_ms)
                    ),
                    colour: "#2e7d32",
                },
            ]
        },
    }
}
