//! A device whose windows do not repeat stops recording them (SPEC AG2). Recording a window
//! costs every call its key (a few hundred instructions) and each signature that does recur by
//! chance a graph instantiated for it; on work that never repeats that bought nothing. After
//! [`COLD_AFTER`] windows in a row that each recorded a new signature and replayed nothing,
//! the device is *cold*: its calls go to the backend as they come, as without the mode, and
//! only every [`COLD_EVERY`]th window is recorded again, so work that starts repeating is
//! still recognised (within about two such windows); a recorded window that repeats a
//! signature makes the device warm again.

/// Windows in a row that recorded a new signature and replayed nothing before a device turns
/// cold.
pub(super) const COLD_AFTER: u32 = 16;
/// A cold device records one window of this many.
pub(super) const COLD_EVERY: u32 = 16;

/// The window statistics that decide whether a device is cold.
#[derive(Default)]
pub(super) struct Backoff {
    /// Recorded windows in a row that had a new signature and replayed nothing.
    barren: u32,
    /// Windows passed through since the device turned cold.
    skipped: u32,
}

impl Backoff {
    /// A recorded window with `len` calls ended; `repeated`: it replayed, or its signature was
    /// a remembered one. True if the device is cold from now on.
    pub fn recorded(&mut self, len: usize, repeated: bool) -> bool {
        if len == 0 {
            return false;
        }
        self.barren = if repeated { 0 } else { self.barren + 1 };
        if self.barren >= COLD_AFTER {
            self.skipped = 0;
            return true;
        }
        false
    }

    /// A window passed a cold device. True if the next window is recorded.
    pub fn passed(&mut self) -> bool {
        self.skipped += 1;
        self.skipped >= COLD_EVERY
    }
}
