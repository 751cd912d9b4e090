//! Whole documents drawn from hand-made traces, and the helpers they rely on.

use super::axis::{fmt_dur, nice_step, Axis, Unit};
use super::layout::{engine_rows, PanelLayout};
use super::options::{RowMode, SvgOptions};
use super::text::stream_number;
use super::writer::{to_svg, write_svg};
use crate::trace::{Engine, OpKind, Trace, TraceOp};

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
        clock_sync: None,
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
        clock_sync: None,
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
        clock_sync: None,
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
