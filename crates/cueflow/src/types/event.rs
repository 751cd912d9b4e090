//! Event creation flags (EV7).

/// Event creation flags (EV7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventFlags {
    /// Record timestamps (needed by `elapsed`).
    pub timing: bool,
    /// Host waits sleep instead of spinning.
    pub blocking_sync: bool,
    /// Usable across processes (requires timing off).
    pub interprocess: bool,
}

impl Default for EventFlags {
    fn default() -> Self {
        EventFlags {
            timing: true,
            blocking_sync: false,
            interprocess: false,
        }
    }
}
