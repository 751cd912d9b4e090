//! A device whose windows do not repeat stops recording them (SPEC AG2). Recording a window
//! costs every call its key (a few hundred instructions) and each signature that does recur by
//! chance a graph instantiated for it; on work that never repeats that bought nothing. After
//! [`COLD_AFTER`] windows in a row that each recorded a new signature and replayed nothing,
//! the device is *cold*: its calls go to the backend as they come, as without the mode, and
//! only every [`COLD_EVERY`]th window is recorded again, so work that starts repeating is
//! still recognised (within about two such windows); a recorded window that repeats a
//! signature makes the device warm again.

use std::sync::atomic::Ordering;

use super::entry::Ctx;
use super::window::{Template, Window};

/// Windows in a row that recorded a new signature and replayed nothing before a device turns
/// cold.
pub(super) const COLD_AFTER: u32 = 16;
/// A cold device records one window of this many.
pub(super) const COLD_EVERY: u32 = 16;

/// The window statistics that decide whether a device is cold.
#[derive(Default)]
pub(super) struct Backoff {
    /// Recorded windows in a row that had a new signature and replayed nothing.
    pub barren: u32,
    /// Windows passed through since the device turned cold.
    pub skipped: u32,
}

impl Ctx<'_> {
    /// A recorded window with `len` calls ended; `repeated`: it replayed, or its signature was
    /// a remembered one.
    pub(super) fn window_recorded(&self, w: &mut Window, len: usize, repeated: bool) {
        if len == 0 {
            return;
        }
        w.backoff.barren = if repeated { 0 } else { w.backoff.barren + 1 };
        if w.backoff.barren >= COLD_AFTER {
            w.backoff.skipped = 0;
            self.cold.store(true, Ordering::Release);
        }
    }

    /// A window of a cold device ended: its templates age as if it had been recorded (AG6),
    /// and every [`COLD_EVERY`]th such window the next one is recorded.
    pub(super) fn window_passed(&self, w: &mut Window) {
        age(&mut w.templates, None);
        w.backoff.skipped += 1;
        self.stats.cold_windows.fetch_add(1, Ordering::Relaxed);
        if w.backoff.skipped >= COLD_EVERY {
            self.cold.store(false, Ordering::Release);
        }
    }
}

/// A window ended: templates other than `kept` (the one it repeated or replayed) count one more
/// miss, and one missed twice lets its graphs go (AG6).
pub(super) fn age(templates: &mut [Template], kept: Option<&[usize]>) {
    for (i, t) in templates.iter_mut().enumerate() {
        if kept.is_some_and(|k| k.contains(&i)) {
            t.misses = 0;
        } else {
            t.misses += 1;
            if t.misses >= 2 {
                t.parts.clear(); // AG6: its buffers go once it is not replayed.
            }
        }
    }
}
