//! Text: how wide it draws, how it is shortened and escaped, and what the labels and tooltips
//! of operations say.

use std::fmt::Write as _;

use super::axis::fmt_dur;
use crate::trace::{OpKind, Trace, TraceOp};

/// Approximate rendered width of `s` in a sans-serif font of `size` px.
pub(super) fn text_w(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// `s`, shortened with an ellipsis to about `max_px` at `size` px, or `None` if too little fits.
pub(super) fn fit(s: &str, max_px: f64, size: f64) -> Option<String> {
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

/// Escape text for XML content and attribute values.
pub(super) fn esc(s: &str) -> String {
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

/// The hover text of an operation: name, kind, stream and engine, bytes, duration, bandwidth.
pub(super) fn tooltip(trace: &Trace, op: &TraceOp) -> String {
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
pub(super) fn stream_number(trace: &Trace, stream: u64) -> String {
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

/// Text written inside a rectangle in by-stream mode.
pub(super) fn short_kind(kind: OpKind) -> &'static str {
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
