//! Plain-text output: durations, rates and sizes with sensible units, and aligned tables.

use std::fmt::Write as _;

/// A duration given in nanoseconds, with automatic units and about three significant digits.
pub fn dur_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "—".into();
    }
    let (v, unit) = if ns.abs() >= 1e9 {
        (ns / 1e9, "s")
    } else if ns.abs() >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns.abs() >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    let decimals = if unit == "ns" || v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {unit}")
}

/// A duration given in milliseconds (see [`dur_ns`]).
pub fn dur_ms(ms: f64) -> String {
    dur_ns(ms * 1e6)
}

/// A transfer rate: `bytes` in `ns` nanoseconds, in GB/s (10⁹ bytes per second).
pub fn gbps(bytes: u64, ns: f64) -> String {
    if ns > 0.0 && ns.is_finite() {
        format!("{:.2} GB/s", bytes as f64 / ns)
    } else {
        "—".into()
    }
}

/// A byte count in binary units (`64 MiB`, `1.50 GiB`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// An integer with thin thousands separators (`16,777,216`).
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Column alignment in a [`Table`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Pad on the right.
    Left,
    /// Pad on the left (numbers).
    Right,
}

/// A text table with a header row; columns are padded to their widest cell.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers and alignments.
    pub fn new(headers: &[(&str, Align)]) -> Self {
        Table {
            headers: headers.iter().map(|(h, a)| (h.to_string(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row; missing cells are empty, extra cells are dropped.
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells = cells;
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Render with two spaces between columns and `indent` spaces before each line.
    pub fn render(&self, indent: usize) -> String {
        let width = |s: &str| s.chars().count();
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| width(&r[c]))
                    .chain([width(&self.headers[c].0)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|(h, _)| h.clone()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = " ".repeat(indent);
            for (c, cell) in cells.iter().enumerate() {
                let pad = widths[c] - width(cell);
                if c > 0 {
                    line.push_str("  ");
                }
                match self.headers[c].1 {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        line.push_str(&" ".repeat(pad));
                        line.push_str(cell);
                    }
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(dur_ns(950.0), "950 ns");
        assert_eq!(dur_ns(1_500.0), "1.50 µs");
        assert_eq!(dur_ns(12_345_678.0), "12.3 ms");
        assert_eq!(dur_ms(123.4), "123 ms");
        assert_eq!(dur_ms(2500.0), "2.50 s");
        assert_eq!(dur_ns(f64::NAN), "—");
    }

    #[test]
    fn sizes_and_rates() {
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(1536 << 20), "1.50 GiB");
        assert_eq!(bytes(12), "12 B");
        assert_eq!(thousands(16_777_216), "16,777,216");
        assert_eq!(thousands(999), "999");
        assert_eq!(gbps(8_000_000, 1e6), "8.00 GB/s");
        assert_eq!(gbps(1, 0.0), "—");
    }

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&[("name", Align::Left), ("time", Align::Right)]);
        t.row(vec!["serial".into(), "30.0 ms".into()]);
        t.row(vec!["concurrent".into(), "9.1 ms".into()]);
        let s = t.render(2);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "  name           time");
        assert_eq!(lines[1], "  serial      30.0 ms");
        assert_eq!(lines[2], "  concurrent   9.1 ms");
    }
}
