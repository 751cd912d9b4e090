//! Collectives as a backend runs them (SPEC MD4): one member of a communicator
//! ([`BackendComm`]); what one call is, `CollectiveDesc`, is a value of `types::collective`.

use super::downcast::AsAny;

/// One member of a communicator as its backend provides it.
pub(crate) trait BackendComm: AsAny + Send + Sync + 'static {
    /// This member's rank.
    fn rank(&self) -> usize;
}
