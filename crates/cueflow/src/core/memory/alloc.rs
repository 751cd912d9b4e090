//! What core keeps of each allocation, attached to the backend's raw allocation (its
//! extension): the accesses by byte range and the count of live host views.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::contract::memory::Allocation;
use crate::core::tracking::access::AccessMap;

/// Core's state of one allocation.
#[derive(Default)]
pub(crate) struct AllocState {
    /// Accesses by byte range (AC1): for host views (MM3), conflict ordering (AC5, AC6) and
    /// the sanitizer (AC4). Shared so a call can hold it locked past the backend's acceptance
    /// (an owned guard).
    pub access: Arc<Mutex<AccessMap>>,
    /// Live host views (`HostRead`/`HostWrite`) of a pinned allocation. A graph launch, which
    /// needs no borrow of the buffer, holds this lock while it enqueues and refuses to run
    /// while the count is non-zero (MM3).
    pub host_views: Mutex<usize>,
    /// GR7, GR10, for a placeholder of graph memory: the memory the latest instantiation gave
    /// it, whether a launch allocated it and nothing freed it since, and the program's hold on
    /// it ([`crate::core::graphs::mem`]).
    /// (Its type is graph_mem's: this file does not name it.)
    pub graph: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
    /// What other core files keep of the allocation without this file naming their types
    /// (managed memory's attachment, [`crate::core::memory::managed`]).
    pub extra: Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>,
}

/// Core's state of `alloc`, made on first use.
#[inline]
pub(crate) fn state(alloc: &Allocation) -> &AllocState {
    alloc.ext.get::<AllocState>()
}

/// Forget every access recorded of `alloc`, as if it were new: memory that serves a new
/// allocation as it is (automatic graphs' freed memory, AG6), whose earlier life — every
/// operation of it done, no handle left — no later call may be ordered after or race with.
pub(crate) fn forget_accesses(alloc: &Allocation) {
    *state(alloc).access.lock() = AccessMap::default();
}

/// Counts one live host view of a pinned allocation while it exists (see
/// [`AllocState::host_views`]).
pub(crate) struct HostView<'a> {
    alloc: &'a Allocation,
}

impl<'a> HostView<'a> {
    pub fn new(alloc: &'a Allocation) -> Self {
        *state(alloc).host_views.lock() += 1;
        HostView { alloc }
    }
}

impl Drop for HostView<'_> {
    fn drop(&mut self) {
        *state(self.alloc).host_views.lock() -= 1;
    }
}
