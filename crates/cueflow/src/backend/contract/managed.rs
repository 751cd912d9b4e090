//! Managed (unified) memory as a backend provides it (HM4): where it is attached, where it is
//! prefetched to, and the advice a program gives about it.

use crate::types::{AttachMode, MemLocation};

/// A stream operation on managed memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ManagedOp {
    /// Migrate the pages to a location (`cudaMemPrefetchAsync`).
    Prefetch(MemLocation),
    /// Attach the allocation (`cudaStreamAttachMemAsync`).
    Attach(AttachMode),
}
