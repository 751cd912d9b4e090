//! Where things go: the rows of each panel and the lanes of overlapping operations in a row,
//! the figure's fixed measures, and the plot's horizontal geometry (time → x).

use super::axis::Axis;
use super::options::RowMode;
use crate::trace::{Engine, Trace};

pub(super) const MARGIN: f64 = 16.0;
pub(super) const LANE_H: f64 = 24.0;
pub(super) const ROW_PAD: f64 = 3.0;
pub(super) const PANEL_GAP: f64 = 30.0;
pub(super) const MIN_W: f64 = 1.0;
/// Top of the first panel (below the title and legend).
pub(super) const PLOT_TOP: f64 = 78.0;

/// One row of a panel: which ops go in which lane.
pub(super) struct Row {
    pub(super) label: String,
    pub(super) lanes: usize,
    /// (index into `trace.ops`, lane)
    pub(super) items: Vec<(usize, usize)>,
    /// Indices of marker ops drawn on this row.
    pub(super) markers: Vec<usize>,
}

pub(super) struct PanelLayout {
    pub(super) label: String,
    pub(super) rows: Vec<Row>,
    /// Earliest start: this panel's time zero.
    pub(super) origin: u64,
    /// Latest end minus earliest start.
    pub(super) span: u64,
}

impl PanelLayout {
    pub(super) fn new(label: &str, trace: &Trace, mode: RowMode, engine_rows: &[Engine]) -> Self {
        let (origin, end) = trace.span_ns().unwrap_or_else(|| {
            let lo = trace.ops.iter().map(|o| o.start_ns).min().unwrap_or(0);
            (lo, lo)
        });
        let mut rows = Vec::new();
        match mode {
            RowMode::ByEngine => {
                for engine in engine_rows {
                    let ops = (0..trace.ops.len())
                        .filter(|&i| {
                            let o = &trace.ops[i];
                            !o.kind.is_marker() && o.engine == *engine
                        })
                        .collect();
                    rows.push(Row::pack(
                        engine.label().to_string(),
                        trace,
                        ops,
                        Vec::new(),
                    ));
                }
            }
            RowMode::ByStream => {
                let mut ids: Vec<u64> = Vec::new();
                for id in trace
                    .streams
                    .iter()
                    .map(|(id, _)| *id)
                    .chain(trace.ops.iter().map(|o| o.stream))
                {
                    if !ids.contains(&id) && trace.ops.iter().any(|o| o.stream == id) {
                        ids.push(id);
                    }
                }
                for id in ids {
                    let (markers, ops): (Vec<usize>, Vec<usize>) = (0..trace.ops.len())
                        .filter(|&i| trace.ops[i].stream == id)
                        .partition(|&i| trace.ops[i].kind.is_marker());
                    rows.push(Row::pack(trace.stream_name(id), trace, ops, markers));
                }
            }
        }
        PanelLayout {
            label: label.to_string(),
            rows,
            origin,
            span: end.saturating_sub(origin),
        }
    }
}

impl Row {
    /// Put overlapping ops in separate lanes (first lane that is free at the op's start).
    fn pack(label: String, trace: &Trace, mut ops: Vec<usize>, markers: Vec<usize>) -> Row {
        ops.sort_by_key(|&i| (trace.ops[i].start_ns, trace.ops[i].id));
        let mut lane_end: Vec<u64> = Vec::new();
        let mut items = Vec::with_capacity(ops.len());
        for i in ops {
            let o = &trace.ops[i];
            let end = o.end_ns.max(o.start_ns);
            let lane = match lane_end.iter().position(|&e| e <= o.start_ns) {
                Some(l) => l,
                None => {
                    lane_end.push(0);
                    lane_end.len() - 1
                }
            };
            lane_end[lane] = end;
            items.push((i, lane));
        }
        Row {
            label,
            lanes: lane_end.len().max(1),
            items,
            markers,
        }
    }
}

/// Engine rows shown in by-engine mode: the three pipeline engines always, host functions and
/// engine-less operations only when some panel has them.
pub(super) fn engine_rows<'a>(traces: impl Iterator<Item = &'a Trace>) -> Vec<Engine> {
    let mut rows = vec![Engine::CopyH2D, Engine::Compute, Engine::CopyD2H];
    for t in traces {
        for o in t.ops.iter().filter(|o| !o.kind.is_marker()) {
            if !rows.contains(&o.engine) {
                rows.push(o.engine);
            }
        }
    }
    rows.sort();
    rows
}

/// The plot's horizontal geometry, shared by all panels: row labels left of `plot_x0`, time
/// from `plot_x0` to `plot_x1` on one axis that spans the longest panel.
pub(super) struct Frame {
    /// Width of the whole image.
    pub(super) width: f64,
    pub(super) plot_x0: f64,
    pub(super) plot_x1: f64,
    pub(super) plot_w: f64,
    pub(super) axis: Axis,
}

impl Frame {
    /// Room for the widest row label of any panel; an image at least 480 px wide.
    pub(super) fn new(width_px: u32, layouts: &[PanelLayout]) -> Frame {
        let width = f64::from(width_px.max(480));
        let label_chars = layouts
            .iter()
            .flat_map(|p| p.rows.iter().map(|r| r.label.chars().count()))
            .max()
            .unwrap_or(8);
        let label_w = (label_chars as f64 * 7.0 + 18.0).clamp(90.0, 220.0);
        let plot_x0 = MARGIN + label_w;
        let plot_x1 = width - MARGIN - 8.0;
        let plot_w = plot_x1 - plot_x0;
        let longest = layouts.iter().map(|p| p.span).max().unwrap_or(0);
        Frame {
            width,
            plot_x0,
            plot_x1,
            plot_w,
            axis: Axis::new(longest, plot_w),
        }
    }

    /// The x coordinate of `t_ns` after a panel's time zero.
    pub(super) fn x(&self, t_ns: f64) -> f64 {
        self.plot_x0 + t_ns / self.axis.max_ns * self.plot_w
    }
}
