//! Events as a backend provides them (EV1–EV7).

use crate::types::EventFlags;

use super::downcast::AsAny;

use crate::error::Result;

/// An event as a backend provides it.
pub(crate) trait BackendEvent: AsAny + Send + Sync + 'static {
    #[allow(dead_code)] // Part of the contract; core keeps its own copy of the flags today.
    fn flags(&self) -> EventFlags;
    /// True when the captured work is done, or nothing was ever captured (EV3, EV5).
    fn query(&self) -> Result<bool>;
    /// Block until the captured work is done (EV5).
    fn synchronize(&self) -> Result<()>;
    /// True once recorded at least once.
    fn recorded(&self) -> bool;
    /// Milliseconds from `self`'s completion to `end`'s (EV6). Core checks the flags and the
    /// recorded state first.
    fn elapsed_ms(&self, end: &dyn BackendEvent) -> Result<f32>;
}
