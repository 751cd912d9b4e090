//! A small, self-contained SVG line plot: series of points, optional log₂ x axis, horizontal
//! reference lines and labelled markers. Used for the bench sweep (time vs chunks, one line per
//! stream count, the lower bound, the `auto` choice). No scripts or external resources.

use std::fmt::Write as _;

/// One line of the plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Points, drawn in the given order.
    pub points: Vec<(f64, f64)>,
}

/// A horizontal reference line across the plot.
#[derive(Clone, Debug)]
pub struct HLine {
    /// Height in y units.
    pub y: f64,
    /// Text written above the line at its right end.
    pub label: String,
}

/// A highlighted point with a label.
#[derive(Clone, Debug)]
pub struct Marker {
    /// Position in data units.
    pub x: f64,
    /// Position in data units.
    pub y: f64,
    /// Text next to the point.
    pub label: String,
    /// Stroke colour of the ring.
    pub colour: &'static str,
}

/// A line plot.
#[derive(Clone, Debug, Default)]
pub struct LinePlot {
    /// Title at the top.
    pub title: String,
    /// Smaller line under the title.
    pub subtitle: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Logarithmic (base 2) x axis with ticks at powers of two; x values must be positive.
    pub log2_x: bool,
    /// The lines.
    pub series: Vec<Series>,
    /// Horizontal reference lines.
    pub hlines: Vec<HLine>,
    /// Highlighted points.
    pub markers: Vec<Marker>,
}

/// Line colours, in series order (colour-blind friendly).
const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#f0e442", "#000000",
];

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 74.0;
const BOTTOM: f64 = 62.0;

impl LinePlot {
    /// Render as an SVG document. The y axis starts at 0 so that heights compare honestly.
    pub fn to_svg(&self) -> String {
        let (x0, x1) = (LEFT, WIDTH - RIGHT);
        let (y0, y1) = (HEIGHT - BOTTOM, TOP);
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.markers.iter().map(|m| m.x))
            .filter(|x| x.is_finite() && (!self.log2_x || *x > 0.0))
            .collect();
        let ys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.hlines.iter().map(|h| h.y))
            .chain(self.markers.iter().map(|m| m.y))
            .filter(|y| y.is_finite())
            .collect();
        let tx = |x: f64| {
            if self.log2_x {
                x.max(f64::MIN_POSITIVE).log2()
            } else {
                x
            }
        };
        let (mut xmin, mut xmax) = xs
            .iter()
            .map(|&x| tx(x))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(x), b.max(x))
            });
        if !xmin.is_finite() {
            (xmin, xmax) = (0.0, 1.0);
        }
        if xmax - xmin < 1e-12 {
            xmin -= 0.5;
            xmax += 0.5;
        }
        let pad = (xmax - xmin) * 0.04;
        let (xmin, xmax) = (xmin - pad, xmax + pad);
        let ymax_data = ys.iter().copied().fold(0.0f64, f64::max);
        let ystep = nice_step(ymax_data.max(1e-12) * 1.08 / 6.0);
        let ymax = (ymax_data * 1.08 / ystep).ceil().max(1.0) * ystep;
        let px = |x: f64| x0 + (tx(x) - xmin) / (xmax - xmin) * (x1 - x0);
        let py = |y: f64| y0 - y / ymax * (y0 - y1);

        let mut s = String::new();
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"##
        );
        let _ = writeln!(s, "<title>{}</title>", esc(&self.title));
        let _ = writeln!(
            s,
            r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
        );
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="28" font-size="18" font-weight="bold" fill="#222">{}</text>"##,
            esc(&self.title)
        );
        if !self.subtitle.is_empty() {
            let _ = writeln!(
                s,
                r##"<text x="{LEFT}" y="50" font-size="13" fill="#555">{}</text>"##,
                esc(&self.subtitle)
            );
        }

        // Grid, ticks and axes.
        let mut k = 0.0;
        while k <= ymax * (1.0 + 1e-9) {
            let y = py(k);
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#444" text-anchor="end">{}</text>"##,
                x0 - 8.0,
                y + 4.0,
                tick_label(k, ystep)
            );
            k += ystep;
        }
        for x in self.x_ticks(xmin, xmax) {
            let xp = px(x);
            let _ = writeln!(
                s,
                r##"<line x1="{xp:.1}" y1="{y0:.1}" x2="{xp:.1}" y2="{y1:.1}" stroke="#eeeeee"/><line x1="{xp:.1}" y1="{y0:.1}" x2="{xp:.1}" y2="{:.1}" stroke="#444"/><text x="{xp:.1}" y="{:.1}" font-size="12" fill="#444" text-anchor="middle">{}</text>"##,
                y0 + 5.0,
                y0 + 20.0,
                tick_label(x, if self.log2_x { 1.0 } else { 0.0 })
            );
        }
        let _ = writeln!(
            s,
            r##"<path d="M{x0:.1},{y1:.1} V{y0:.1} H{x1:.1}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#333" text-anchor="middle">{}</text>"##,
            (x0 + x1) / 2.0,
            HEIGHT - 18.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            s,
            r##"<text x="18" y="{:.1}" font-size="13" fill="#333" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"##,
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            esc(&self.y_label)
        );

        // Reference lines.
        for h in &self.hlines {
            let y = py(h.y);
            let _ = writeln!(
                s,
                r##"<g class="hline"><line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#b00020" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#b00020" text-anchor="start">{}</text></g>"##,
                // Left end: the interesting minima sit at many chunks, on the right.
                x0 + 4.0,
                y - 5.0,
                esc(&h.label)
            );
        }

        // Series and legend.
        for (i, ser) in self.series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = ser
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!self.log2_x || *x > 0.0))
                .map(|&(x, y)| (px(x), py(y)))
                .collect();
            if pts.len() > 1 {
                let d: Vec<String> = pts
                    .iter()
                    .enumerate()
                    .map(|(j, (x, y))| format!("{}{x:.1},{y:.1}", if j == 0 { "M" } else { "L" }))
                    .collect();
                let _ = writeln!(
                    s,
                    r##"<path class="series" d="{}" fill="none" stroke="{colour}" stroke-width="2.2"/>"##,
                    d.join(" ")
                );
            }
            for ((x, y), (dx, dy)) in pts.iter().zip(&ser.points) {
                let _ = writeln!(
                    s,
                    r##"<circle class="point" cx="{x:.1}" cy="{y:.1}" r="3.6" fill="{colour}"><title>{}: x = {}, y = {}</title></circle>"##,
                    esc(&ser.label),
                    tick_label(*dx, 0.0),
                    tick_label(*dy, 0.0)
                );
            }
            let ly = TOP + 12.0 + i as f64 * 22.0;
            let lx = x1 + 22.0;
            let _ = writeln!(
                s,
                r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2.2"/><circle cx="{:.1}" cy="{ly:.1}" r="3.6" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="13" fill="#333">{}</text>"##,
                lx + 26.0,
                lx + 13.0,
                lx + 34.0,
                ly + 4.5,
                esc(&ser.label)
            );
        }

        // Markers: a ring around the point and a label beside it; the legend lists them too.
        let legend_y = TOP + 12.0 + self.series.len() as f64 * 22.0 + 10.0;
        for (i, m) in self.markers.iter().enumerate() {
            if !(m.x.is_finite() && m.y.is_finite()) || (self.log2_x && m.x <= 0.0) {
                continue;
            }
            let (x, y) = (px(m.x), py(m.y));
            let above = i % 2 == 0;
            let ty = if above { y - 14.0 } else { y + 24.0 };
            let _ = writeln!(
                s,
                r##"<g class="marker"><circle cx="{x:.1}" cy="{y:.1}" r="9" fill="none" stroke="{}" stroke-width="2.5"/><text x="{x:.1}" y="{ty:.1}" font-size="12" font-weight="bold" fill="{}" stroke="#ffffff" stroke-width="4" stroke-linejoin="round" paint-order="stroke" text-anchor="middle">{}</text></g>"##,
                m.colour,
                m.colour,
                esc(&m.label)
            );
            let ly = legend_y + i as f64 * 22.0;
            let lx = x1 + 35.0;
            let _ = writeln!(
                s,
                r##"<circle cx="{lx:.1}" cy="{ly:.1}" r="7" fill="none" stroke="{}" stroke-width="2.5"/><text x="{:.1}" y="{:.1}" font-size="13" fill="#333">{}</text>"##,
                m.colour,
                lx + 13.0,
                ly + 4.5,
                esc(m.label.split(':').next().unwrap_or(&m.label))
            );
        }
        s.push_str("</svg>\n");
        s
    }

    /// Tick positions in data units: powers of two on a log₂ axis, else nice steps.
    fn x_ticks(&self, tmin: f64, tmax: f64) -> Vec<f64> {
        if self.log2_x {
            let lo = tmin.ceil() as i32;
            let hi = tmax.floor() as i32;
            (lo..=hi).map(|k| 2f64.powi(k)).collect()
        } else {
            let step = nice_step((tmax - tmin) / 8.0);
            let mut v = Vec::new();
            let mut t = (tmin / step).ceil() * step;
            while t <= tmax {
                v.push(t);
                t += step;
            }
            v
        }
    }
}

/// The 1, 2 or 5 × 10^k step at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let e = 10f64.powf(raw.log10().floor());
    let m = raw / e;
    let n = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * e
}

/// A tick label with as many decimals as the step needs (all significant ones for step 0).
fn tick_label(v: f64, step: f64) -> String {
    if step == 0.0 {
        let s = format!("{v:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return if s == "-0" { "0".into() } else { s.into() };
    }
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}")
}

/// Escape text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LinePlot {
        LinePlot {
            title: "time vs chunks <test> & more".into(),
            subtitle: "sub".into(),
            x_label: "chunks".into(),
            y_label: "ms".into(),
            log2_x: true,
            series: vec![
                Series {
                    label: "1 stream".into(),
                    points: vec![(1.0, 30.0), (2.0, 30.0), (4.0, 31.0)],
                },
                Series {
                    label: "4 streams".into(),
                    points: vec![(4.0, 16.0), (8.0, 13.0), (16.0, 12.0), (64.0, 14.0)],
                },
            ],
            hlines: vec![HLine {
                y: 10.0,
                label: "lower bound 10 ms".into(),
            }],
            markers: vec![Marker {
                x: 16.0,
                y: 12.0,
                label: "auto: 4 × 16".into(),
                colour: "#b00020",
            }],
        }
    }

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
            if tag.starts_with('?') || tag.ends_with('/') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name.trim()) {
                    return false;
                }
            } else {
                stack.push(tag.split_whitespace().next().unwrap_or("").to_string());
            }
        }
        stack.is_empty()
    }

    #[test]
    fn well_formed_with_every_point() {
        let svg = sample().to_svg();
        assert!(tags_balance(&svg));
        assert_eq!(svg.matches(r#"<circle class="point""#).count(), 7);
        assert_eq!(svg.matches(r#"<path class="series""#).count(), 2);
        assert_eq!(svg.matches(r#"<g class="hline">"#).count(), 1);
        assert_eq!(svg.matches(r#"<g class="marker">"#).count(), 1);
        assert!(svg.contains("&lt;test&gt; &amp; more"));
        // Ticks at every power of two from 1 to 64.
        for t in ["1", "2", "4", "8", "16", "32", "64"] {
            assert!(
                svg.contains(&format!(r##"text-anchor="middle">{t}</text>"##)),
                "{t}"
            );
        }
    }

    #[test]
    fn log_axis_spaces_powers_of_two_evenly() {
        let svg = sample().to_svg();
        let xs: Vec<f64> = svg
            .split(r#"<circle class="point" cx=""#)
            .skip(1)
            .map(|s| s.split('"').next().unwrap().parse().unwrap())
            .collect();
        // Series 2: x = 4, 8, 16 are one step apart each.
        let (a, b, c) = (xs[3], xs[4], xs[5]);
        assert!(((b - a) - (c - b)).abs() < 0.2, "{xs:?}");
        assert!(xs.iter().all(|&x| (LEFT..=WIDTH - RIGHT).contains(&x)));
    }

    #[test]
    fn degenerate_inputs() {
        let empty = LinePlot::default().to_svg();
        assert!(tags_balance(&empty));
        let one = LinePlot {
            series: vec![Series {
                label: "x".into(),
                points: vec![(1.0, f64::NAN), (2.0, 0.0)],
            }],
            ..LinePlot::default()
        };
        assert!(tags_balance(&one.to_svg()));
        assert_eq!(nice_step(3.3), 5.0);
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(tick_label(2.5, 0.5), "2.5");
        assert_eq!(tick_label(30.0, 5.0), "30");
        assert_eq!(tick_label(0.125, 0.0), "0.125");
    }
}
