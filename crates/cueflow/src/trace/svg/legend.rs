//! The figure's guides: the title line (title, and the device when all panels share one), the
//! legend of operation kinds, and the time axis with its grid lines.

use std::fmt::Write as _;

use super::draw::{colour, diamond, legend_rank, Layers, MARKER};
use super::layout::{Frame, MARGIN, PLOT_TOP};
use super::options::{RowMode, SvgOptions};
use super::text::{esc, fit, text_w};
use crate::trace::{OpKind, Trace};

/// Title, legend (kinds present, then markers in by-stream mode) and the shared device line.
pub(super) fn title_and_legend(
    fg: &mut String,
    frame: &Frame,
    panels: &[(&str, &Trace)],
    opts: &SvgOptions,
    shared_device: bool,
) {
    let plot_x1 = frame.plot_x1;
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
}

/// Time axis at `axis_y` with its ticks, and grid lines from the first panel's rows down to it.
pub(super) fn time_axis(layers: &mut Layers, frame: &Frame, axis_y: f64) {
    let Frame {
        plot_x0,
        plot_x1,
        axis,
        ..
    } = *frame;
    let ticks = axis.ticks();
    for (k, t) in ticks.iter().enumerate() {
        let x = frame.x(*t);
        let _ = writeln!(
            layers.grid,
            r##"<line x1="{x:.2}" y1="{:.1}" x2="{x:.2}" y2="{axis_y:.1}" stroke="#d8d8d8" stroke-width="1"/>"##,
            PLOT_TOP + 22.0
        );
        let label = if k == 0 {
            "0".to_string()
        } else {
            axis.label(*t)
        };
        let _ = writeln!(
            layers.fg,
            r##"<g class="tick"><line x1="{x:.2}" y1="{axis_y:.1}" x2="{x:.2}" y2="{:.1}" stroke="#444"/><text x="{x:.2}" y="{:.1}" font-size="12" fill="#444" text-anchor="middle">{}</text></g>"##,
            axis_y + 5.0,
            axis_y + 19.0,
            esc(&label)
        );
    }
    let _ = writeln!(
        layers.fg,
        r##"<line x1="{plot_x0:.1}" y1="{axis_y:.1}" x2="{plot_x1:.1}" y2="{axis_y:.1}" stroke="#444"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#444" text-anchor="end">time ({})</text>"##,
        plot_x0 - 8.0,
        axis_y + 19.0,
        axis.unit.name()
    );
}
