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
//!    (cudaGraphCondAssignDefault); without, it starts at 0 at the first launch of each
//!    instantiation and keeps its value from the previous launch.
//! 3. An if node runs body 0 when the value is non-zero; if/else runs body 0 when non-zero and
//!    body 1 otherwise; a while node runs body 0 as long as the value is non-zero when
//!    checked (before each iteration); a switch runs body `value` when there is one.
//! 4. A condition belongs to one graph, as a CUDA handle does (`cuGraphConditionalHandleCreate`
//!    names the graph): the one that made it, or the first graph a conditional node on it is
//!    added to ([`CondCell::tie`]). Core checks the rest (`core::graphs::cond`).

use crate::types::ConditionId;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;

/// The value a conditional node tests (rule 2).
pub(crate) struct CondCell {
    pub id: u64,
    pub value: AtomicU32,
    pub default: u32,
    pub reset: bool,
    /// The graph the condition belongs to (its id); 0 until it is tied to one (rule 4).
    owner: AtomicU64,
}

static NEXT: AtomicU64 = AtomicU64::new(1);
static CELLS: LazyLock<Mutex<HashMap<u64, Weak<CondCell>>>> = LazyLock::new(Default::default);

impl CondCell {
    /// A new condition (registered for [`set_condition`]) of graph `owner` (0: of none yet,
    /// rule 4).
    pub fn new(default: u32, reset: bool, owner: u64) -> Arc<CondCell> {
        let cell = Arc::new(CondCell {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            // As CUDA: the default is the value at each launch with `reset`
            // (cudaGraphCondAssignDefault); without it a condition starts at 0 (on an H200 a
            // handle made with default 1 and no flag read 0 at the first launch).
            value: AtomicU32::new(if reset { default } else { 0 }),
            default,
            reset,
            owner: AtomicU64::new(owner),
        });
        let mut cells = CELLS.lock();
        cells.retain(|_, w| w.strong_count() > 0);
        cells.insert(cell.id, Arc::downgrade(&cell));
        cell
    }

    /// The graph the condition belongs to; 0 while it belongs to none (rule 4).
    pub fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }

    /// Rule 4: tie the condition to graph `graph` unless it belongs to one already; returns
    /// the graph it belongs to now.
    pub fn tie(&self, graph: u64) -> u64 {
        match self
            .owner
            .compare_exchange(0, graph, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => graph,
            Err(owner) => owner,
        }
    }

    /// A condition of its own with this one's default and reset flag, for one instantiation
    /// (a CUDA handle's value lives in its executable graph; the host backend gives each
    /// instantiation cells of its own, rule 1).
    pub fn private_copy(&self) -> Arc<CondCell> {
        CondCell::new(self.default, self.reset, self.owner())
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

/// The condition ids a launch is given as arguments (rule 1), in argument order.
pub(crate) fn condition_args(l: &super::kernel::Launch) -> impl Iterator<Item = u64> + '_ {
    l.args.iter().filter_map(|a| match a {
        super::kernel::KernelArg::Scalar { bytes, ty, .. }
            if *ty == std::any::TypeId::of::<ConditionId>() =>
        {
            Some(u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8])))
        }
        _ => None,
    })
}

/// `l` with every condition argument `id` replaced by `map(id)` (rule 1), or `None` when it
/// has no condition argument.
pub(crate) fn map_condition_args(
    l: &super::kernel::Launch,
    map: &dyn Fn(u64) -> u64,
) -> Option<super::kernel::Launch> {
    use super::kernel::KernelArg;
    let is_cond = |a: &KernelArg| matches!(a, KernelArg::Scalar { ty, .. } if *ty == std::any::TypeId::of::<ConditionId>());
    if !l.args.iter().any(is_cond) {
        return None;
    }
    let args: Vec<KernelArg> = l
        .args
        .iter()
        .map(|a| match a {
            KernelArg::Scalar {
                bytes,
                size,
                ty,
                ty_name,
            } if is_cond(a) => {
                let id = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
                KernelArg::Scalar {
                    bytes: smallvec::SmallVec::from_slice(&map(id).to_le_bytes()),
                    size: *size,
                    ty: *ty,
                    ty_name,
                }
            }
            other => other.clone(),
        })
        .collect();
    let mut out = l.clone();
    out.set_args(args.into());
    Some(out)
}
