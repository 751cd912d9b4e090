//! Collectives as a backend runs them (SPEC MD4): what one call is ([`CollectiveDesc`]) and
//! one member of a communicator ([`BackendComm`]).

use crate::types::{CollectiveKind, ElemType};

use super::downcast::AsAny;

/// One collective call as every member sees it: the same on every rank (checked where the
/// ranks meet, MD4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CollectiveDesc {
    pub kind: CollectiveKind,
    pub elem: ElemType,
    /// Elements of each rank's input (all-gather: of each part; reduce-scatter: of the whole).
    pub count: usize,
    /// Number of the call on this communicator (the ranks' calls pair up by it).
    pub seq: u64,
}

/// One member of a communicator as its backend provides it.
pub(crate) trait BackendComm: AsAny + Send + Sync + 'static {
    /// This member's rank.
    fn rank(&self) -> usize;
}
