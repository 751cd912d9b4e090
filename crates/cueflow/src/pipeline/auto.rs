//! `auto`: streams × chunks chosen by the performance model ([`crate::model`]).
//!
//! The model needs two kinds of input, and `auto` measures each where it belongs:
//!
//! 1. **The device** ([`DeviceProfile`]): the fixed cost of one operation and how much each
//!    copy direction slows while the other one runs. These do not depend on the work, so they
//!    are measured once per device per process ([`DeviceProfile::of`]) with a built-in kernel
//!    over [`PROFILE_ELEMENTS`] floats, the way `cueflow demo` measures them for its own
//!    kernel: each stage alone and both copies at once ([`measure_stages`]), then the pipeline
//!    over 32 tiny chunks, whose time is almost all overhead ([`probe_overhead`]).
//! 2. **The work**: how long the copies and the user's work take over the whole buffer. The
//!    first run of a pipeline with an `auto` count at a given size is a *calibration*: one
//!    untimed warm-up run and [`CALIBRATION_RUNS`] timed runs on one stream in one chunk, with
//!    events between the stages (the median of each stage is taken). Every calibration run is
//!    a complete run, so its output is as good as any other's.
//!
//! [`tune::choose`](super::tune::choose) then picks the layout, which the pipeline keeps for
//! later runs of the same size.

use std::collections::HashMap;
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::measure::{measure_stages, probe_overhead, OverheadProbe, StageMeasurement};
use crate::model::{ModelParams, StageTimes};
use crate::{kernels, Device, DeviceBuffer, PinnedBuffer, Result};

/// Floats the device profile moves (32 MiB): large enough that copies run at full bandwidth.
pub const PROFILE_ELEMENTS: usize = 8 << 20;
/// Timed runs of each stage in the device profile (median).
const PROFILE_STAGE_REPS: usize = 5;
/// Timed runs of the overhead probe in the device profile (median).
const PROFILE_PROBE_REPS: usize = 9;
/// Timed serial runs of a calibration, after its warm-up run.
pub const CALIBRATION_RUNS: usize = 3;

/// What `auto` knows about a device, independent of the work: measured once per device per
/// process by [`DeviceProfile::of`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceProfile {
    /// The measurement the profile was made from: a built-in kernel over
    /// [`PROFILE_ELEMENTS`] floats.
    pub stages: StageMeasurement,
    /// The overhead probe, whose `overhead_ns` is the model's per-operation overhead.
    pub probe: OverheadProbe,
}

/// Profiles measured in this process, by device (see [`profile_key`]).
static PROFILES: LazyLock<Mutex<HashMap<String, DeviceProfile>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Devices opened with the same spec, name and compute units are the same hardware to the
/// model (a host device with other worker counts is not).
fn profile_key(dev: &Device) -> String {
    let p = dev.properties();
    format!("{} | {} | {}", dev.spec(), p.name, p.compute_units)
}

impl DeviceProfile {
    /// The profile of `dev`: measured the first time it is asked for in this process (which
    /// takes a few dozen milliseconds and 128 MiB of pinned and device memory for the while),
    /// then served from a cache. Another device opened on the same hardware shares the entry.
    pub fn of(dev: &Device) -> Result<DeviceProfile> {
        let key = profile_key(dev);
        // Held while measuring: a second caller waits for this measurement instead of
        // measuring at the same time (which would disturb both).
        let mut cache = PROFILES.lock();
        if let Some(p) = cache.get(&key) {
            return Ok(*p);
        }
        let p = Self::measure(dev)?;
        cache.insert(key, p);
        Ok(p)
    }

    /// Measure `dev` now, bypassing the cache.
    pub fn measure(dev: &Device) -> Result<DeviceProfile> {
        let n = PROFILE_ELEMENTS;
        let input = PinnedBuffer::<f32>::new(dev, n)?;
        let mut output = PinnedBuffer::<f32>::new(dev, n)?;
        let device = DeviceBuffer::<f32>::new(dev, n)?;
        let work = |s: &crate::Stream, d: &DeviceBuffer<f32>| kernels::scale(s, d, 1.0);
        let stages = measure_stages(
            dev,
            (&input).into(),
            &device,
            (&mut output).into(),
            work,
            PROFILE_STAGE_REPS,
        )?;
        let probe = probe_overhead(dev, &stages, n, work, PROFILE_PROBE_REPS)?;
        Ok(DeviceProfile { stages, probe })
    }

    /// The fixed cost of one operation, in nanoseconds.
    pub fn per_op_overhead_ns(&self) -> f64 {
        self.probe.overhead_ns
    }

    /// How much slower each copy direction runs while the other one runs too (≥ 1).
    pub fn duplex_slowdown(&self) -> f64 {
        self.stages.duplex_slowdown()
    }

    /// Model parameters for work whose whole-buffer stage times are `stages` on this device.
    pub fn params(&self, stages: StageTimes) -> ModelParams {
        ModelParams {
            stages,
            per_op_overhead_ns: self.per_op_overhead_ns().max(0.0),
            duplex_slowdown: self.duplex_slowdown(),
            compute_slots: 1,
            shared_cores: self.stages.shared_cores,
        }
    }
}
