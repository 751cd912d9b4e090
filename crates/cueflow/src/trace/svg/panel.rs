//! The panels, one per run, top to bottom: each a header (label, total, comparison with the
//! first run, device), its rows with one rectangle per operation and a diamond per marker, and
//! a dashed line where it ends.

use std::fmt::Write as _;

use super::axis::fmt_dur;
use super::draw::{colour, diamond, text_colour, Layers, MARKER};
use super::layout::{Frame, PanelLayout, Row, LANE_H, MARGIN, MIN_W, PANEL_GAP, PLOT_TOP, ROW_PAD};
use super::options::RowMode;
use super::text::{esc, fit, short_kind, stream_number, text_w, tooltip};
use crate::trace::Trace;

/// What every panel needs to know besides its own layout and trace.
struct Ctx<'a> {
    frame: &'a Frame,
    mode: RowMode,
    /// All panels ran on one device (named on the title line, not in each header).
    shared_device: bool,
    /// Span and label of the first panel, which the others are compared with.
    first_span: u64,
    first_label: &'a str,
}

/// Draw all panels from [`PLOT_TOP`] down; returns the y below the last one (and its gap).
pub(super) fn draw_panels(
    layers: &mut Layers,
    frame: &Frame,
    panels: &[(&str, &Trace)],
    layouts: &[PanelLayout],
    mode: RowMode,
    shared_device: bool,
) -> f64 {
    let ctx = Ctx {
        frame,
        mode,
        shared_device,
        first_span: layouts.first().map(|p| p.span).unwrap_or(0),
        first_label: panels.first().map(|(l, _)| *l).unwrap_or(""),
    };
    let mut y = PLOT_TOP;
    for (i, (layout, (_, trace))) in layouts.iter().zip(panels).enumerate() {
        y = draw_panel(layers, &ctx, i, layout, trace, y);
        y += PANEL_GAP;
    }
    y
}

/// One panel whose top is at `y`; returns the y below its last row.
fn draw_panel(
    layers: &mut Layers,
    ctx: &Ctx<'_>,
    i: usize,
    layout: &PanelLayout,
    trace: &Trace,
    mut y: f64,
) -> f64 {
    let Frame {
        plot_x0, plot_x1, ..
    } = *ctx.frame;
    let fg = &mut layers.fg;

    // Header: label, total, comparison with the first panel, device.
    let header_y = y + 16.0;
    let header_w = header(fg, ctx, i, layout, header_y);

    // Where the panel's total goes: right of its end line if there is room in the plot,
    // else in the header line, right-aligned on the end line.
    let span_label = fmt_dur(layout.span as f64);
    let span_label_w = text_w(&span_label, 12.0) * 1.1;
    let xe = ctx.frame.x(layout.span as f64);
    let label_in_header = xe + 6.0 + span_label_w > plot_x1;
    let mut header_right = plot_x1;
    if label_in_header && layout.span > 0 && !layout.rows.is_empty() {
        header_right = xe - span_label_w - 16.0;
    }
    if !ctx.shared_device && !trace.device.is_empty() {
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
        y += draw_row(layers, ctx, layout, trace, r, row, y);
    }

    // The panel's total span: a dashed line at its end, labelled.
    if layout.span > 0 && !layout.rows.is_empty() {
        let fg = &mut layers.fg;
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
    y
}

/// The header line of panel `i` at `header_y`; returns its approximate width.
fn header(fg: &mut String, ctx: &Ctx<'_>, i: usize, layout: &PanelLayout, header_y: f64) -> f64 {
    let total = format!("total {}", fmt_dur(layout.span as f64));
    let mut header = format!(
        r##"<text x="{MARGIN}" y="{header_y:.1}" font-size="15" fill="#222"><tspan font-weight="bold">{}</tspan><tspan dx="12" fill="#444">{}</tspan>"##,
        esc(&layout.label),
        esc(&total)
    );
    let mut header_w = text_w(&layout.label, 15.0) * 1.1 + 12.0 + text_w(&total, 15.0);
    let first_label = ctx.first_label;
    if i > 0 && ctx.first_span > 0 && layout.span > 0 {
        let ratio = ctx.first_span as f64 / layout.span as f64;
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
    header_w
}

/// Row `r` of a panel with its top at `y`: shading, label, operations, markers; returns its
/// height.
fn draw_row(
    layers: &mut Layers,
    ctx: &Ctx<'_>,
    layout: &PanelLayout,
    trace: &Trace,
    r: usize,
    row: &Row,
    y: f64,
) -> f64 {
    let frame = ctx.frame;
    let Frame {
        plot_x0, plot_w, ..
    } = *frame;
    let row_h = row.lanes as f64 * LANE_H + 2.0 * ROW_PAD;
    let shade = if r % 2 == 0 { "#f3f4f6" } else { "#fafafa" };
    let _ = writeln!(
        layers.bg,
        r##"<rect class="row" x="{plot_x0:.1}" y="{y:.1}" width="{plot_w:.1}" height="{row_h:.1}" fill="{shade}"/>"##
    );
    let fg = &mut layers.fg;
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
        let x = frame.x(t0);
        let w = (frame.x(t1) - x).max(MIN_W);
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
        let text = match ctx.mode {
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
        let x = frame.x(op.start_ns.saturating_sub(layout.origin) as f64);
        let _ = writeln!(
            fg,
            r##"<path class="marker" d="{}" fill="{MARKER}" stroke="#fff" stroke-width="0.8"><title>{}</title></path>"##,
            diamond(x, y + row_h / 2.0, 5.0),
            esc(&tooltip(trace, op))
        );
    }
    row_h
}
