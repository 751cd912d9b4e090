//! Self-contained SVG timelines in the seeds' style.
//!
//! [`to_svg`] draws one or more runs ("panels"), e.g. a serial run and a concurrent one, one above
//! the other on the same time scale, so that the overlap that streams buy is visible at a glance:
//! one row per engine (H2D engine, compute, D2H engine, and host functions when used) or one row
//! per stream, one rectangle per operation coloured by kind, with a hover tooltip (`<title>`)
//! giving name, stream, bytes, duration and bandwidth. Each panel's time zero is its own earliest
//! start; the axis spans the longest panel.
//!
//! The file has no scripts, no external fonts or stylesheets: it opens in any browser and
//! converts to PNG with `rsvg-convert`.

use super::{Engine, OpKind, Trace, TraceOp};
use std::fmt::Write as _;

/// What the rows of a panel are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RowMode {
    /// One row per engine: H2D engine, compute, D2H engine (and host fns if used). Shows how
    /// busy each engine is and what overlaps.
    #[default]
    ByEngine,
    /// One row per stream, in creation order. Shows each stream's FIFO order and its markers.
    ByStream,
}

/// Options for [`to_svg`].
#[derive(Clone, Debug, PartialEq)]
pub struct SvgOptions {
    /// Title at the top of the figure.
    pub title: String,
    /// Rows per engine or per stream.
    pub rows: RowMode,
    /// Total width of the image in pixels (at least 480 is used).
    pub width_px: u32,
}

impl Default for SvgOptions {
    fn default() -> Self {
        SvgOptions {
            title: "cueflow timeline".to_string(),
            rows: RowMode::ByEngine,
            width_px: 1200,
        }
    }
}

/// Render labelled runs, one panel each, as an SVG document.
pub fn to_svg(panels: &[(&str, &Trace)], opts: &SvgOptions) -> String {
    let width = f64::from(opts.width_px.max(480));

    // Rows of every panel, and the widest row label.
    let engine_rows = engine_rows(panels.iter().map(|(_, t)| *t));
    let layouts: Vec<PanelLayout> = panels
        .iter()
        .map(|(label, trace)| PanelLayout::new(label, trace, opts.rows, &engine_rows))
        .collect();
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
    let axis = Axis::new(longest, plot_w);
    let x_of = |t_ns: f64| plot_x0 + t_ns / axis.max_ns * plot_w;

    let mut bg = String::new();
    let mut grid = String::new();
    let mut fg = String::new();

    // Title and legend.
    let _ = writeln!(
        fg,
        r##"<text x="{MARGIN}" y="30" font-size="19" font-weight="bold" fill="#222">{}</text>"##,
        esc(&opts.title)
    );
    let mut kinds: Vec<OpKind> = panels
        .iter()
        .flat_map(|(_, t)| t.ops.iter())
        .filter(|o| !o.kind.is_marker())
        .map(|o| o.kind)
        .collect();
    kinds.sort_by_key(|k| legend_rank(*k));
    kinds.dedup();
    let has_markers = opts.rows == RowMode::ByStream
        && panels
            .iter()
            .any(|(_, t)| t.ops.iter().any(|o| o.kind.is_marker()));
    let mut lx = MARGIN;
    let ly = 54.0;
    for kind in &kinds {
        let _ = writeln!(
            fg,
            r##"<rect x="{lx:.1}" y="{:.1}" width="14" height="14" rx="2" fill="{}"/><text x="{:.1}" y="{ly:.1}" font-size="13" fill="#333">{}</text>"##,
            ly - 11.5,
            colour(*kind),
            lx + 19.0,
            esc(kind.label())
        );
        lx += 19.0 + text_w(kind.label(), 13.0) + 22.0;
    }
    if has_markers {
        let _ = writeln!(
            fg,
            r##"<path d="{}" fill="{MARKER}"/><text x="{:.1}" y="{ly:.1}" font-size="13" fill="#333">event record / wait</text>"##,
            diamond(lx + 7.0, ly - 4.5, 6.0),
            lx + 19.0
        );
    }
    if opts.rows == RowMode::ByEngine && !kinds.is_empty() {
        let _ = writeln!(
            fg,
            r##"<text x="{plot_x1:.1}" y="{ly:.1}" font-size="12" fill="#666" text-anchor="end">numbers: stream of each operation</text>"##
        );
    }

    // A device shared by all panels is shown once, on the title line.
    let shared_device = panels.iter().all(|(_, t)| t.device == panels[0].1.device);
    let device_line = match panels.first() {
        Some((_, t)) if shared_device => t.device.as_str(),
        _ => "",
    };
    if !device_line.is_empty() {
        let room = plot_x1 - (MARGIN + text_w(&opts.title, 19.0) * 1.1 + 24.0);
        if let Some(dev) = fit(device_line, room, 12.0) {
            let _ = writeln!(
                fg,
                r##"<text x="{plot_x1:.1}" y="30" font-size="12" fill="#777" text-anchor="end">{}</text>"##,
                esc(&dev)
            );
        }
    }

    // Panels.
    let first_span = layouts.first().map(|p| p.span).unwrap_or(0);
    let first_label = panels.first().map(|(l, _)| *l).unwrap_or("");
    let mut y = 78.0;
    let plot_top = y;
    for (i, (layout, (_, trace))) in layouts.iter().zip(panels).enumerate() {
        // Header: label, total, comparison with the first panel, device.
        let header_y = y + 16.0;
        let total = format!("total {}", fmt_dur(layout.span as f64));
        let mut header = format!(
            r##"<text x="{MARGIN}" y="{header_y:.1}" font-size="15" fill="#222"><tspan font-weight="bold">{}</tspan><tspan dx="12" fill="#444">{}</tspan>"##,
            esc(&layout.label),
            esc(&total)
        );
        let mut header_w = text_w(&layout.label, 15.0) * 1.1 + 12.0 + text_w(&total, 15.0);
        if i > 0 && first_span > 0 && layout.span > 0 {
            let ratio = first_span as f64 / layout.span as f64;
            let cmp = if ratio >= 1.0 {
                format!("· {ratio:.2}× faster than {first_label}")
            } else {
                format!("· {:.2}× slower than {first_label}", 1.0 / ratio)
            };
            let _ = write!(
                header,
                r##"<tspan dx="10" fill="#777">{}</tspan>"##,
                esc(&cmp)
            );
            header_w += 10.0 + text_w(&cmp, 15.0);
        }
        header.push_str("</text>\n");
        fg.push_str(&header);

        // Where the panel's total goes: right of its end line if there is room in the plot,
        // else in the header line, right-aligned on the end line.
        let span_label = fmt_dur(layout.span as f64);
        let span_label_w = text_w(&span_label, 12.0) * 1.1;
        let xe = x_of(layout.span as f64);
        let label_in_header = xe + 6.0 + span_label_w > plot_x1;
        let mut header_right = plot_x1;
        if label_in_header && layout.span > 0 && !layout.rows.is_empty() {
            header_right = xe - span_label_w - 16.0;
        }
        if !shared_device && !trace.device.is_empty() {
            let room = header_right - (MARGIN + header_w + 20.0);
            if let Some(dev) = fit(&trace.device, room, 11.0) {
                let _ = writeln!(
                    fg,
                    r##"<text x="{header_right:.1}" y="{header_y:.1}" font-size="11" fill="#888" text-anchor="end">{}</text>"##,
                    esc(&dev)
                );
            }
        }
        y += 26.0;
        let rows_top = y;

        if layout.rows.is_empty() {
            let _ = writeln!(
                fg,
                r##"<text x="{plot_x0:.1}" y="{:.1}" font-size="12" fill="#888">(no operations)</text>"##,
                y + 18.0
            );
            y += ROW_PAD * 2.0 + LANE_H;
        }
        for (r, row) in layout.rows.iter().enumerate() {
            let row_h = row.lanes as f64 * LANE_H + 2.0 * ROW_PAD;
            let shade = if r % 2 == 0 { "#f3f4f6" } else { "#fafafa" };
            let _ = writeln!(
                bg,
                r##"<rect class="row" x="{plot_x0:.1}" y="{y:.1}" width="{plot_w:.1}" height="{row_h:.1}" fill="{shade}"/>"##
            );
            let _ = writeln!(
                fg,
                r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#333" text-anchor="end">{}</text>"##,
                plot_x0 - 8.0,
                y + row_h / 2.0 + 4.5,
                esc(&row.label)
            );
            for &(idx, lane) in &row.items {
                let op = &trace.ops[idx];
                let t0 = op.start_ns.saturating_sub(layout.origin) as f64;
                let t1 = op.end_ns.max(op.start_ns).saturating_sub(layout.origin) as f64;
                let x = x_of(t0);
                let w = (x_of(t1) - x).max(MIN_W);
                let h = LANE_H - 3.0;
                let ry = y + ROW_PAD + lane as f64 * LANE_H + 1.5;
                // A thin white outline separates back-to-back ops, but would hide slivers.
                let (rx, outline) = if w >= 4.0 {
                    (2.0, r##" stroke="#fff" stroke-width="0.8""##)
                } else {
                    (0.0, "")
                };
                let _ = writeln!(
                    fg,
                    r##"<rect class="op" x="{x:.2}" y="{ry:.2}" width="{w:.2}" height="{h:.1}" rx="{rx}" fill="{}"{outline}><title>{}</title></rect>"##,
                    colour(op.kind),
                    esc(&tooltip(trace, op))
                );
                let text = match opts.rows {
                    RowMode::ByEngine => stream_number(trace, op.stream),
                    RowMode::ByStream => short_kind(op.kind).to_string(),
                };
                if w >= text_w(&text, 11.0) + 6.0 && h >= 11.0 {
                    let _ = writeln!(
                        fg,
                        r##"<text x="{:.2}" y="{:.2}" font-size="11" fill="{}" text-anchor="middle" pointer-events="none">{}</text>"##,
                        x + w / 2.0,
                        ry + h / 2.0 + 4.0,
                        text_colour(op.kind),
                        esc(&text)
                    );
                }
            }
            for &idx in &row.markers {
                let op = &trace.ops[idx];
                let x = x_of(op.start_ns.saturating_sub(layout.origin) as f64);
                let _ = writeln!(
                    fg,
                    r##"<path class="marker" d="{}" fill="{MARKER}" stroke="#fff" stroke-width="0.8"><title>{}</title></path>"##,
                    diamond(x, y + row_h / 2.0, 5.0),
                    esc(&tooltip(trace, op))
                );
            }
            y += row_h;
        }

        // The panel's total span: a dashed line at its end, labelled.
        if layout.span > 0 && !layout.rows.is_empty() {
            let _ = writeln!(
                fg,
                r##"<line x1="{xe:.2}" y1="{:.1}" x2="{xe:.2}" y2="{:.1}" stroke="#222" stroke-width="1.2" stroke-dasharray="4 3"/>"##,
                rows_top - 4.0,
                y + 4.0
            );
            let (anchor, tx, ty) = if label_in_header {
                ("end", xe - 4.0, header_y)
            } else {
                ("start", xe + 6.0, (rows_top + y) / 2.0 + 4.5)
            };
            let _ = writeln!(
                fg,
                r##"<text x="{tx:.2}" y="{ty:.1}" font-size="12" font-weight="bold" fill="#222" text-anchor="{anchor}">{}</text>"##,
                esc(&span_label)
            );
        }
        y += PANEL_GAP;
    }

    // Time axis and grid lines over all panels.
    let axis_y = y - PANEL_GAP + 10.0;
    let ticks = axis.ticks();
    for (k, t) in ticks.iter().enumerate() {
        let x = x_of(*t);
        let _ = writeln!(
            grid,
            r##"<line x1="{x:.2}" y1="{:.1}" x2="{x:.2}" y2="{axis_y:.1}" stroke="#d8d8d8" stroke-width="1"/>"##,
            plot_top + 22.0
        );
        let label = if k == 0 {
            "0".to_string()
        } else {
            axis.label(*t)
        };
        let _ = writeln!(
            fg,
            r##"<g class="tick"><line x1="{x:.2}" y1="{axis_y:.1}" x2="{x:.2}" y2="{:.1}" stroke="#444"/><text x="{x:.2}" y="{:.1}" font-size="12" fill="#444" text-anchor="middle">{}</text></g>"##,
            axis_y + 5.0,
            axis_y + 19.0,
            esc(&label)
        );
    }
    let _ = writeln!(
        fg,
        r##"<line x1="{plot_x0:.1}" y1="{axis_y:.1}" x2="{plot_x1:.1}" y2="{axis_y:.1}" stroke="#444"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#444" text-anchor="end">time ({})</text>"##,
        plot_x0 - 8.0,
        axis_y + 19.0,
        axis.unit.name()
    );
    let height = axis_y + 34.0;

    let mut out = String::with_capacity(bg.len() + grid.len() + fg.len() + 512);
    let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"##
    );
    let _ = writeln!(out, "<title>{}</title>", esc(&opts.title));
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    out.push_str(&bg);
    out.push_str(&grid);
    out.push_str(&fg);
    out.push_str("</svg>\n");
    out
}

/// Write [`to_svg`] output to `path` (conventionally `*.svg`).
pub fn write_svg(
    panels: &[(&str, &Trace)],
    opts: &SvgOptions,
    path: &std::path::Path,
) -> std::io::Result<()> {
    std::fs::write(path, to_svg(panels, opts))
}

const MARGIN: f64 = 16.0;
const LANE_H: f64 = 24.0;
const ROW_PAD: f64 = 3.0;
const PANEL_GAP: f64 = 30.0;
const MIN_W: f64 = 1.0;
const MARKER: &str = "#333333";

/// One row of a panel: which ops go in which lane.
struct Row {
    label: String,
    lanes: usize,
    /// (index into `trace.ops`, lane)
    items: Vec<(usize, usize)>,
    /// Indices of marker ops drawn on this row.
    markers: Vec<usize>,
}

struct PanelLayout {
    label: String,
    rows: Vec<Row>,
    /// Earliest start: this panel's time zero.
    origin: u64,
    /// Latest end minus earliest start.
    span: u64,
}

impl PanelLayout {
    fn new(label: &str, trace: &Trace, mode: RowMode, engine_rows: &[Engine]) -> Self {
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
fn engine_rows<'a>(traces: impl Iterator<Item = &'a Trace>) -> Vec<Engine> {
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

/// Time unit of the axis.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    Ns,
    Us,
    Ms,
    S,
}

impl Unit {
    fn for_ns(ns: f64) -> Unit {
        if ns >= 1e9 {
            Unit::S
        } else if ns >= 1e6 {
            Unit::Ms
        } else if ns >= 1e3 {
            Unit::Us
        } else {
            Unit::Ns
        }
    }

    fn ns(self) -> f64 {
        match self {
            Unit::Ns => 1.0,
            Unit::Us => 1e3,
            Unit::Ms => 1e6,
            Unit::S => 1e9,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Us => "µs",
            Unit::Ms => "ms",
            Unit::S => "s",
        }
    }
}

/// The shared time axis: `0..max_ns` in steps of `step_ns` (1, 2 or 5 × 10^k).
#[derive(Clone, Copy, Debug)]
struct Axis {
    max_ns: f64,
    step_ns: f64,
    unit: Unit,
}

impl Axis {
    /// The nice step that wastes the least width past `longest_ns` while keeping ticks at least
    /// ~80 px apart and no more than 14 of them; the smaller step on ties.
    fn new(longest_ns: u64, plot_w: f64) -> Axis {
        let longest = (longest_ns as f64).max(1.0);
        let max_ticks = (plot_w / 80.0).clamp(2.0, 14.0);
        let mut step = nice_step(longest / max_ticks);
        let mut best = (f64::INFINITY, step);
        for _ in 0..4 {
            let n = (longest / step - 1e-9).ceil().max(1.0);
            if n * step < best.0 - 1e-9 * longest {
                best = (n * step, step);
            }
            step = nice_step(step * 1.5);
        }
        let (max_ns, step_ns) = best;
        Axis {
            max_ns,
            step_ns,
            unit: Unit::for_ns(max_ns),
        }
    }

    fn ticks(&self) -> Vec<f64> {
        let n = (self.max_ns / self.step_ns).round() as usize;
        (0..=n).map(|k| k as f64 * self.step_ns).collect()
    }

    fn label(&self, t_ns: f64) -> String {
        let step = self.step_ns / self.unit.ns();
        let decimals = (-step.log10().floor()).max(0.0) as usize;
        format!("{:.*}", decimals, t_ns / self.unit.ns())
    }
}

/// Smallest 1, 2 or 5 × 10^k that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1.0);
    let mut p = 10f64.powf(raw.log10().floor());
    loop {
        for m in [1.0, 2.0, 5.0] {
            if m * p >= raw * (1.0 - 1e-9) {
                return m * p;
            }
        }
        p *= 10.0;
    }
}

/// Duration with automatic units and about three significant digits.
fn fmt_dur(ns: f64) -> String {
    let unit = Unit::for_ns(ns);
    let v = ns / unit.ns();
    let decimals = if v >= 100.0 || unit == Unit::Ns {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {}", unit.name())
}

fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

fn is_copy(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::CopyH2D | OpKind::CopyD2H | OpKind::CopyD2D | OpKind::CopyH2H
    )
}

fn tooltip(trace: &Trace, op: &TraceOp) -> String {
    let name = if op.name.is_empty() {
        op.kind.label()
    } else {
        &op.name
    };
    let mut s = format!(
        "{name}\n{} on {} ({})",
        op.kind.label(),
        trace.stream_name(op.stream),
        op.engine.label()
    );
    if op.bytes > 0 {
        let _ = write!(s, "\n{}", fmt_bytes(op.bytes));
    }
    if op.kind.is_marker() {
        return s;
    }
    let dur = op.end_ns.saturating_sub(op.start_ns);
    let _ = write!(s, "\nduration {}", fmt_dur(dur as f64));
    if is_copy(op.kind) && dur > 0 && op.bytes > 0 {
        let _ = write!(s, "\n{:.2} GB/s", op.bytes as f64 / dur as f64);
    }
    s
}

/// Number written inside a rectangle in by-engine mode: the trailing number of the stream's
/// name if it has one ("stream 3" → "3"), else its 1-based position, else its id.
fn stream_number(trace: &Trace, stream: u64) -> String {
    let name = trace.stream_name(stream);
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if !digits.is_empty() && digits.len() <= 4 {
        return digits;
    }
    match trace.streams.iter().position(|(id, _)| *id == stream) {
        Some(p) => (p + 1).to_string(),
        None => stream.to_string(),
    }
}

fn short_kind(kind: OpKind) -> &'static str {
    match kind {
        OpKind::CopyH2D => "H2D",
        OpKind::CopyD2H => "D2H",
        OpKind::CopyD2D => "D2D",
        OpKind::CopyH2H => "H2H",
        OpKind::Memset => "set",
        OpKind::Kernel => "K",
        OpKind::HostFn => "fn",
        OpKind::Graph => "graph",
        OpKind::CopyPeer => "P2P",
        OpKind::Collective => "coll",
        OpKind::External => "ext",
        _ => "",
    }
}

/// Colour-blind-friendly fills (Tableau 10).
fn colour(kind: OpKind) -> &'static str {
    match kind {
        OpKind::CopyH2D => "#4C78A8",
        OpKind::Kernel => "#F58518",
        OpKind::CopyD2H => "#54A24B",
        OpKind::Memset => "#B279A2",
        OpKind::CopyD2D => "#72B7B2",
        OpKind::HostFn => "#9D755D",
        OpKind::CopyH2H => "#BAB0AC",
        OpKind::Graph => "#EECA3B",
        OpKind::CopyPeer => "#E45756",
        OpKind::Collective => "#FF9DA6",
        OpKind::External => "#79706E",
        _ => MARKER,
    }
}

fn text_colour(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Kernel | OpKind::CopyD2D | OpKind::CopyH2H | OpKind::Graph => "#1a1a1a",
        _ => "#ffffff",
    }
}

fn legend_rank(kind: OpKind) -> u8 {
    match kind {
        OpKind::CopyH2D => 0,
        OpKind::Kernel => 1,
        OpKind::CopyD2H => 2,
        OpKind::Memset => 3,
        OpKind::CopyD2D => 4,
        OpKind::CopyH2H => 5,
        OpKind::HostFn => 6,
        OpKind::Graph => 7,
        OpKind::CopyPeer => 8,
        OpKind::Collective => 9,
        OpKind::External => 10,
        _ => 11,
    }
}

/// Approximate rendered width of `s` in a sans-serif font of `size` px.
fn text_w(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// `s`, shortened with an ellipsis to about `max_px` at `size` px, or `None` if too little fits.
fn fit(s: &str, max_px: f64, size: f64) -> Option<String> {
    let n = s.chars().count();
    let max_chars = (max_px / (size * 0.6)).floor();
    if max_chars < 8.0 {
        return None;
    }
    let max_chars = max_chars as usize;
    if n <= max_chars {
        Some(s.to_string())
    } else {
        let mut t: String = s.chars().take(max_chars - 1).collect();
        t.push('…');
        Some(t)
    }
}

fn diamond(cx: f64, cy: f64, r: f64) -> String {
    format!(
        "M{:.2} {:.2}L{:.2} {:.2}L{:.2} {:.2}L{:.2} {:.2}Z",
        cx,
        cy - r,
        cx + r,
        cy,
        cx,
        cy + r,
        cx - r,
        cy
    )
}

/// Escape text for XML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn op(id: u64, kind: OpKind, stream: u64, start: u64, end: u64) -> TraceOp {
        let engine = match kind {
            OpKind::CopyH2D => Engine::CopyH2D,
            OpKind::CopyD2H => Engine::CopyD2H,
            OpKind::HostFn | OpKind::CopyH2H => Engine::Host,
            k if k.is_marker() => Engine::None,
            _ => Engine::Compute,
        };
        TraceOp {
            id,
            kind,
            stream,
            engine,
            bytes: if kind == OpKind::Kernel { 0 } else { 64 << 20 },
            name: format!("{} <{id}> & co", kind.label()),
            enqueue_ns: 0,
            start_ns: start,
            end_ns: end,
            waits_on: Vec::new(),
        }
    }

    /// Serial H2D → K → D2H of 30 ms each, starting at an arbitrary clock value.
    fn serial() -> Trace {
        let t0 = 5_000 * MS;
        Trace {
            device: "hand-made".into(),
            streams: vec![(1, "stream 1".into())],
            ops: vec![
                op(0, OpKind::CopyH2D, 1, t0, t0 + 30 * MS),
                op(1, OpKind::Kernel, 1, t0 + 30 * MS, t0 + 60 * MS),
                op(2, OpKind::CopyD2H, 1, t0 + 60 * MS, t0 + 90 * MS),
            ],
        }
    }

    /// 4 streams × 4 chunks (one chunk per stream), 7.5 ms per op, plus markers.
    fn concurrent() -> Trace {
        let t0 = 77 * MS;
        let d = 7_500_000;
        let mut ops = Vec::new();
        for c in 0..4u64 {
            let s = c + 1;
            let b = t0 + c * d;
            ops.push(op(ops.len() as u64, OpKind::CopyH2D, s, b, b + d));
            ops.push(op(ops.len() as u64, OpKind::Kernel, s, b + d, b + 2 * d));
            ops.push(op(
                ops.len() as u64,
                OpKind::CopyD2H,
                s,
                b + 2 * d,
                b + 3 * d,
            ));
        }
        ops.push(op(12, OpKind::EventRecord, 1, t0 + 3 * d, t0 + 3 * d));
        ops.push(op(13, OpKind::HostFn, 4, t0 + 6 * d, t0 + 6 * d + MS));
        Trace {
            device: "hand-made".into(),
            streams: (1..=4).map(|s| (s, format!("stream {s}"))).collect(),
            ops,
        }
    }

    /// Tags open and close in order (a minimal well-formedness check).
    fn tags_balance(svg: &str) -> bool {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let Some(j) = rest.find('>') else {
                return false;
            };
            let tag = &rest[..j];
            rest = &rest[j + 1..];
            if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name.trim()) {
                    return false;
                }
            } else {
                let name = tag.split_whitespace().next().unwrap_or("");
                stack.push(name.to_string());
            }
        }
        stack.is_empty() && !rest.contains('>')
    }

    fn count(svg: &str, needle: &str) -> usize {
        svg.matches(needle).count()
    }

    /// Numeric value of attribute `attr` in the tag starting at `tag`.
    fn attr(tag: &str, attr: &str) -> f64 {
        let key = format!(" {attr}=\"");
        let i = tag.find(&key).unwrap() + key.len();
        let j = tag[i..].find('"').unwrap();
        tag[i..i + j].parse().unwrap()
    }

    fn both() -> (Trace, Trace) {
        (serial(), concurrent())
    }

    #[test]
    fn well_formed_and_one_rect_per_op() {
        let (s, c) = both();
        for rows in [RowMode::ByEngine, RowMode::ByStream] {
            let opts = SvgOptions {
                rows,
                ..SvgOptions::default()
            };
            let svg = to_svg(&[("serial", &s), ("concurrent", &c)], &opts);
            assert!(tags_balance(&svg), "{svg}");
            let ops = s.ops.iter().chain(&c.ops).filter(|o| !o.kind.is_marker());
            assert_eq!(count(&svg, r#"<rect class="op""#), ops.count());
            assert_eq!(count(&svg, "<title>"), count(&svg, "</title>"));
            let markers = if rows == RowMode::ByStream { 1 } else { 0 };
            assert_eq!(count(&svg, r#"<path class="marker""#), markers);
            // Names with markup characters are escaped.
            assert!(svg.contains("&lt;0&gt; &amp; co"));
            assert!(!svg.contains("<0>"));
        }
    }

    #[test]
    fn axis_covers_the_longest_panel() {
        let (s, c) = both();
        let svg = to_svg(
            &[("serial", &s), ("concurrent", &c)],
            &SvgOptions::default(),
        );
        // Ticks: the last one is at or beyond 90 ms.
        let labels: Vec<f64> = svg
            .split(r#"<g class="tick">"#)
            .skip(1)
            .map(|g| {
                let t = g.split("<text").nth(1).unwrap();
                let v = t.split('>').nth(1).unwrap().split('<').next().unwrap();
                v.parse().unwrap()
            })
            .collect();
        assert_eq!(labels[0], 0.0);
        assert!(*labels.last().unwrap() >= 90.0, "{labels:?}");
        assert!(svg.contains("time (ms)"));
        // Every op rect lies inside the axis.
        let axis_line = svg
            .lines()
            .find(|l| l.contains("time (ms)"))
            .unwrap()
            .to_string();
        let x0 = attr(&axis_line, "x1");
        let x1 = attr(&axis_line, "x2");
        for tag in svg.split(r#"<rect class="op""#).skip(1) {
            let x = attr(tag, "x");
            let w = attr(tag, "width");
            assert!(x >= x0 - 1e-6 && x + w <= x1 + 1e-6, "{x} {w} {x0} {x1}");
        }
        // Both panels start at their own time zero, and show their totals.
        assert!(svg.contains("total 90.0 ms"));
        assert!(svg.contains("total 46.0 ms"));
        assert!(svg.contains("faster than serial"));
    }

    #[test]
    fn nice_steps_and_units() {
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(10.0), 10.0);
        assert_eq!(nice_step(11.0), 20.0);
        assert_eq!(nice_step(3.3e6), 5e6);
        let a = Axis::new(90 * MS, 1000.0);
        assert_eq!(a.unit, Unit::Ms);
        assert!(a.max_ns >= 90e6 && a.max_ns < 120e6);
        let m = a.step_ns / 10f64.powf(a.step_ns.log10().floor());
        assert!([1.0, 2.0, 5.0].iter().any(|x| (x - m).abs() < 1e-9));
        assert_eq!(Axis::new(750_000, 1000.0).unit, Unit::Us);
        assert_eq!(Axis::new(0, 1000.0).ticks().len(), 2);
        assert_eq!(fmt_dur(30e6), "30.0 ms");
        assert_eq!(fmt_dur(1.5e3), "1.50 µs");
        assert_eq!(fmt_dur(250e3), "250 µs");
    }

    #[test]
    fn host_row_only_when_used() {
        let s = serial();
        let svg = to_svg(&[("serial", &s)], &SvgOptions::default());
        assert!(!svg.contains(">host fns<"));
        let c = concurrent();
        let svg = to_svg(&[("serial", &s), ("c", &c)], &SvgOptions::default());
        assert!(svg.contains(">host fns<"));
    }

    #[test]
    fn overlapping_ops_get_lanes() {
        let mut t = serial();
        let start = t.ops[1].start_ns;
        t.ops.push(op(3, OpKind::Kernel, 1, start, start + 10 * MS));
        let l = PanelLayout::new("x", &t, RowMode::ByEngine, &engine_rows([&t].into_iter()));
        assert_eq!(l.rows[1].lanes, 2);
        assert_eq!(l.rows[0].lanes, 1);
        assert!(tags_balance(&to_svg(&[("x", &t)], &SvgOptions::default())));
    }

    #[test]
    fn degenerate_inputs() {
        let empty = Trace::default();
        let svg = to_svg(&[("empty", &empty)], &SvgOptions::default());
        assert!(tags_balance(&svg));
        let svg = to_svg(&[], &SvgOptions::default());
        assert!(tags_balance(&svg));
        let mut zero = serial();
        for o in &mut zero.ops {
            o.end_ns = o.start_ns;
        }
        let svg = to_svg(&[("zero", &zero)], &SvgOptions::default());
        assert!(tags_balance(&svg));
        assert_eq!(count(&svg, r#"<rect class="op""#), 3);
    }

    #[test]
    fn stream_numbers() {
        let t = Trace {
            device: String::new(),
            streams: vec![(10, "default".into()), (11, "copy stream 2".into())],
            ops: Vec::new(),
        };
        assert_eq!(stream_number(&t, 10), "1");
        assert_eq!(stream_number(&t, 11), "2");
        assert_eq!(stream_number(&t, 99), "99");
    }

    #[test]
    fn writes_a_file() {
        let path = std::env::temp_dir().join(format!("cueflow-svg-{}.svg", std::process::id()));
        write_svg(&[("serial", &serial())], &SvgOptions::default(), &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert!(text.starts_with("<?xml"));
    }
}
