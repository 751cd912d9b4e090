//! Conditional graph nodes (GR9) as backends see them: a condition cell that kernels of the
//! graph set at run time, and the node that runs one of its bodies — or its body while the
//! condition holds — depending on the cell's value when the node runs.
//!
//! Rules:
//! 1. A condition is identified by a process-unique id; a kernel receives the id as a scalar
//!    of type [`ConditionId`]. On CUDA the backend puts the driver's conditional handle in
//!    its place when it builds the graph; on the host backend a kernel's host side sets the
//!    cell through the registry ([`set_condition`]).
//! 2. With `reset` the cell takes its default value at the start of every launch
//!    (cudaGraphCondAssignDefault); without, it keeps its value from the previous launch
//!    (starting at the default).
//! 3. An if node runs body 0 when the value is non-zero; if/else runs body 0 when non-zero and
//!    body 1 otherwise; a while node runs body 0 as long as the value is non-zero when
//!    checked (before each iteration); a switch runs body `value` when there is one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;

/// A condition handle's id as a kernel argument (rule 1).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ConditionId(pub u64);

/// The value a conditional node tests (rule 2).
pub(crate) struct CondCell {
    pub id: u64,
    pub value: AtomicU32,
    pub default: u32,
    pub reset: bool,
}

static NEXT: AtomicU64 = AtomicU64::new(1);
static CELLS: LazyLock<Mutex<HashMap<u64, Weak<CondCell>>>> = LazyLock::new(Default::default);

impl CondCell {
    /// A new condition (registered for [`set_condition`]).
    pub fn new(default: u32, reset: bool) -> Arc<CondCell> {
        let cell = Arc::new(CondCell {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            // As CUDA: the default is the value at each launch with `reset`
            // (cudaGraphCondAssignDefault); without it a condition starts at 0 (on an H200 a
            // handle made with default 1 and no flag read 0 at the first launch).
            value: AtomicU32::new(if reset { default } else { 0 }),
            default,
            reset,
        });
        let mut cells = CELLS.lock();
        cells.retain(|_, w| w.strong_count() > 0);
        cells.insert(cell.id, Arc::downgrade(&cell));
        cell
    }

    pub fn get(&self) -> u32 {
        self.value.load(Ordering::Acquire)
    }

    /// Rule 2, at the start of a launch.
    pub fn start_launch(&self) {
        if self.reset {
            self.value.store(self.default, Ordering::Release);
        }
    }
}

impl Drop for CondCell {
    fn drop(&mut self) {
        CELLS.lock().remove(&self.id);
    }
}

/// Rule 1, host side: set condition `id` to `value`; false when no such condition lives.
pub(crate) fn set_condition(id: u64, value: u32) -> bool {
    let cell = CELLS.lock().get(&id).and_then(Weak::upgrade);
    match cell {
        Some(c) => {
            c.value.store(value, Ordering::Release);
            true
        }
        None => false,
    }
}

/// Which conditional node (rule 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondKind {
    /// Run the body when the condition is non-zero.
    If,
    /// Run the first body when non-zero, the second otherwise.
    IfElse,
    /// Run the body while the condition is non-zero.
    While,
    /// Run the body the condition's value selects, if any.
    Switch,
}
