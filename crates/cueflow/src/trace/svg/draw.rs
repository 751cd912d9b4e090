//! Drawing primitives: the three layers a document is drawn in, the palette, the marker shape.

use crate::trace::OpKind;

/// Fill of markers (event record / wait) and of kinds without a colour of their own.
pub(super) const MARKER: &str = "#333333";

/// The document's layers, written in this order: row shading, grid lines, everything else.
#[derive(Default)]
pub(super) struct Layers {
    pub(super) bg: String,
    pub(super) grid: String,
    pub(super) fg: String,
}

/// Colour-blind-friendly fills (Tableau 10).
pub(super) fn colour(kind: OpKind) -> &'static str {
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

/// Colour of text drawn on a fill of `colour(kind)`.
pub(super) fn text_colour(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Kernel | OpKind::CopyD2D | OpKind::CopyH2H | OpKind::Graph => "#1a1a1a",
        _ => "#ffffff",
    }
}

/// Order of kinds in the legend.
pub(super) fn legend_rank(kind: OpKind) -> u8 {
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

/// Path of a diamond of half-diagonal `r` centred on (`cx`, `cy`).
pub(super) fn diamond(cx: f64, cy: f64, r: f64) -> String {
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
