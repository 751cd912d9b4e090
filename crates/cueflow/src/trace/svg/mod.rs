//! Self-contained SVG timelines: one row per engine, operations as bars over time.
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
//!
//! The files of this module, each with one job; siblings import each other by path, in one
//! direction only (top to bottom):
//!
//! | file         | job                                                                     |
//! |--------------|-------------------------------------------------------------------------|
//! | `writer.rs`  | [`to_svg`] and [`write_svg`]: the document, its layers in order          |
//! | `panel.rs`   | one panel: header, rows, operation rectangles, markers, its span line    |
//! | `legend.rs`  | the figure's guides: title, legend, device line, time axis and grid      |
//! | `layout.rs`  | rows and lanes of each panel, the plot's horizontal geometry             |
//! | `draw.rs`    | drawing primitives: layers, palette, marker shape                       |
//! | `text.rs`    | text: width estimates, fitting, escaping, tooltips and labels            |
//! | `axis.rs`    | the time scale: nice steps, units, durations                            |
//! | `options.rs` | [`SvgOptions`] and [`RowMode`]                                          |

mod axis;
mod draw;
mod layout;
mod legend;
mod options;
mod panel;
mod text;
mod writer;

#[cfg(test)]
mod tests;

pub use options::{RowMode, SvgOptions};
pub use writer::{to_svg, write_svg};
