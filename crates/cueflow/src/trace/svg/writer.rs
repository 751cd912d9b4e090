//! The public writer: lays out the panels, draws the guides and the panels into their layers,
//! and writes the document.

use std::fmt::Write as _;

use super::draw::Layers;
use super::layout::{engine_rows, Frame, PanelLayout, PANEL_GAP};
use super::legend::{time_axis, title_and_legend};
use super::options::SvgOptions;
use super::panel::draw_panels;
use super::text::esc;
use crate::trace::Trace;

/// Render labelled runs, one panel each, as an SVG document.
pub fn to_svg(panels: &[(&str, &Trace)], opts: &SvgOptions) -> String {
    // Rows of every panel; the widest row label decides where the plot starts.
    let engine_rows = engine_rows(panels.iter().map(|(_, t)| *t));
    let layouts: Vec<PanelLayout> = panels
        .iter()
        .map(|(label, trace)| PanelLayout::new(label, trace, opts.rows, &engine_rows))
        .collect();
    let frame = Frame::new(opts.width_px, &layouts);
    // A device shared by all panels is shown once, on the title line.
    let shared_device = panels.iter().all(|(_, t)| t.device == panels[0].1.device);

    let mut layers = Layers::default();
    title_and_legend(&mut layers.fg, &frame, panels, opts, shared_device);
    let y = draw_panels(
        &mut layers,
        &frame,
        panels,
        &layouts,
        opts.rows,
        shared_device,
    );
    // Time axis and grid lines over all panels.
    let axis_y = y - PANEL_GAP + 10.0;
    time_axis(&mut layers, &frame, axis_y);
    let height = axis_y + 34.0;
    let width = frame.width;

    let Layers { bg, grid, fg } = layers;
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
