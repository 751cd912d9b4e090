//! The time scale: a nice step (1, 2 or 5 × 10^k), the unit it is labelled in, and durations
//! written with about three significant digits.

/// Time unit of the axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Unit {
    Ns,
    Us,
    Ms,
    S,
}

impl Unit {
    pub(super) fn for_ns(ns: f64) -> Unit {
        if ns >= 1e9 {
            Unit::S
        } else if ns >= 1e6 {
            Unit::Ms
        } else if ns >= 1e3 {
            Unit::Us
        } else {
            Unit::Ns
        }
    }

    pub(super) fn ns(self) -> f64 {
        match self {
            Unit::Ns => 1.0,
            Unit::Us => 1e3,
            Unit::Ms => 1e6,
            Unit::S => 1e9,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Us => "µs",
            Unit::Ms => "ms",
            Unit::S => "s",
        }
    }
}

/// The shared time axis: `0..max_ns` in steps of `step_ns` (1, 2 or 5 × 10^k).
#[derive(Clone, Copy, Debug)]
pub(super) struct Axis {
    pub(super) max_ns: f64,
    pub(super) step_ns: f64,
    pub(super) unit: Unit,
}

impl Axis {
    /// The nice step that wastes the least width past `longest_ns` while keeping ticks at least
    /// ~80 px apart and no more than 14 of them; the smaller step on ties.
    pub(super) fn new(longest_ns: u64, plot_w: f64) -> Axis {
        let longest = (longest_ns as f64).max(1.0);
        let max_ticks = (plot_w / 80.0).clamp(2.0, 14.0);
        let mut step = nice_step(longest / max_ticks);
        let mut best = (f64::INFINITY, step);
        for _ in 0..4 {
            let n = (longest / step - 1e-9).ceil().max(1.0);
            if n * step < best.0 - 1e-9 * longest {
                best = (n * step, step);
            }
            step = nice_step(step * 1.5);
        }
        let (max_ns, step_ns) = best;
        Axis {
            max_ns,
            step_ns,
            unit: Unit::for_ns(max_ns),
        }
    }

    pub(super) fn ticks(&self) -> Vec<f64> {
        let n = (self.max_ns / self.step_ns).round() as usize;
        (0..=n).map(|k| k as f64 * self.step_ns).collect()
    }

    pub(super) fn label(&self, t_ns: f64) -> String {
        let step = self.step_ns / self.unit.ns();
        let decimals = (-step.log10().floor()).max(0.0) as usize;
        format!("{:.*}", decimals, t_ns / self.unit.ns())
    }
}

/// Smallest 1, 2 or 5 × 10^k that is at least `raw`.
pub(super) fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1.0);
    let mut p = 10f64.powf(raw.log10().floor());
    loop {
        for m in [1.0, 2.0, 5.0] {
            if m * p >= raw * (1.0 - 1e-9) {
                return m * p;
            }
        }
        p *= 10.0;
    }
}

/// Duration with automatic units and about three significant digits.
pub(super) fn fmt_dur(ns: f64) -> String {
    let unit = Unit::for_ns(ns);
    let v = ns / unit.ns();
    let decimals = if v >= 100.0 || unit == Unit::Ns {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {}", unit.name())
}
