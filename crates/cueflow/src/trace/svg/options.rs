//! What the caller chooses: title, rows, width.

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

/// Options for [`to_svg`](super::writer::to_svg).
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
