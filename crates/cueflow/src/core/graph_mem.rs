//! Graph memory beyond the graph (GR10): an allocation node whose graph has no free node for
//! it hands its memory to the program at every launch, to be freed by a stream's
//! `free_async` after the launch, by another graph's free node, or by the next launch of an
//! instantiation made with auto-free-on-launch.
//!
//! Rules:
//! 1. Instantiating such a graph *binds* each of those placeholders to the memory the
//!    instantiation gave the slot (the latest instantiation wins); the placeholder is what the
//!    program holds — the same buffer handle at every launch, as CUDA keeps one address.
//! 2. Life, in enqueue order: a launch makes the memory *live*; a stream free or a free node's
//!    launch makes it *freed*. Launching while it is live is a typed error unless the
//!    instantiation frees on launch; a stream operation on it while it is not live (never
//!    launched, or freed) is a typed error, as is freeing it twice (MM2).
//! 3. Stream operations on live memory run on the bound memory; for the tracking layer the
//!    launch writes all of it (the allocation), and a free writes all of it, so a use or free
//!    not ordered after the allocating launch is a race (AC3), reported or ordered like any.

use std::sync::Arc;

use super::alloc::{state, GraphBinding};
use crate::backend::contract::graph::{resolve_with, touches_placeholder};
use crate::backend::contract::memory::Allocation;
use crate::backend::contract::op::Op;
use crate::error::{Error, Result};

fn refused(what: String) -> Error {
    Error::NotPermitted { rule: "GR10", what }
}

fn slot_name(placeholder: &Allocation) -> String {
    match placeholder.graph_slot {
        Some(g) => format!("graph allocation {} ({} bytes)", g.slot, placeholder.bytes),
        None => format!("an allocation of {} bytes", placeholder.bytes),
    }
}

/// Rule 1.
pub(crate) fn bind(placeholder: &Allocation, real: Arc<Allocation>) {
    *state(placeholder).graph.lock() = Some(GraphBinding { real, live: false });
}

/// The memory bound to `placeholder`, if an instantiation bound it (rule 1).
pub(crate) fn bound(placeholder: &Allocation) -> Option<Arc<Allocation>> {
    state(placeholder)
        .graph
        .lock()
        .as_ref()
        .map(|b| b.real.clone())
}

/// Rule 3: `op` with live graph memory in place of its placeholders; memory that is not live
/// (or that no graph hands out) is refused (rule 2).
pub(crate) fn resolve_stream_op(op: &Op) -> Result<Op> {
    let mut bad: Option<String> = None;
    op.for_each_access(|m, _, _| {
        if bad.is_some() || m.alloc.graph_slot.is_none() {
            return;
        }
        match state(&m.alloc).graph.lock().as_ref() {
            Some(b) if b.live => {}
            Some(_) => {
                bad = Some(format!(
                    "{} is used by a stream operation while it is not allocated: its graph was \
                     not launched since it was freed",
                    slot_name(&m.alloc)
                ))
            }
            None => {
                bad = Some(format!(
                    "{} is used by a stream operation, but it is either freed inside its graph \
                     (usable only by the graph's own nodes) or its graph was never \
                     instantiated and launched (GR7)",
                    slot_name(&m.alloc)
                ))
            }
        }
    });
    if let Some(what) = bad {
        return Err(if what.contains("GR7") {
            Error::InvalidHandle(what)
        } else {
            refused(what)
        });
    }
    let out = resolve_with(op, &|a| {
        state(a)
            .graph
            .lock()
            .as_ref()
            .filter(|b| b.live)
            .map(|b| b.real.clone())
    });
    debug_assert!(!touches_placeholder(&out));
    Ok(out)
}

/// Rule 2 for a stream free of `placeholder`: the live memory to free.
pub(crate) fn stream_free(placeholder: &Allocation) -> Result<Arc<Allocation>> {
    let st = state(placeholder).graph.lock();
    match st.as_ref() {
        Some(b) if b.live => Ok(b.real.clone()),
        Some(_) => Err(refused(format!(
            "free_async of {}, which is not allocated (freed already, or its graph not \
             launched since)",
            slot_name(placeholder)
        ))),
        None => Err(Error::InvalidHandle(format!(
            "free_async of {}: memory a graph allocates and frees itself is the graph's (GR7), \
             and memory it hands out exists only after it was instantiated and launched",
            slot_name(placeholder)
        ))),
    }
}

/// Mark `placeholder`'s memory freed (after a stream free was enqueued, rule 2).
pub(crate) fn mark_freed(placeholder: &Allocation) {
    if let Some(b) = state(placeholder).graph.lock().as_mut() {
        b.live = false;
    }
}

/// Rule 2 at a launch: `allocates` become live (refused if live, unless `auto_free`),
/// `frees` (another graph's memory) become freed (refused unless live). Checks everything
/// before changing anything; returns what [`commit_launch`] then applies.
pub(crate) fn check_launch(
    allocates: &[Arc<Allocation>],
    frees: &[Arc<Allocation>],
    auto_free: bool,
) -> Result<()> {
    for p in allocates {
        let live = state(p).graph.lock().as_ref().is_some_and(|b| b.live);
        if live && !auto_free {
            return Err(refused(format!(
                "launching a graph whose {} from its previous launch is still allocated: free \
                 it first (a stream free_async or another graph's free node), or instantiate \
                 with auto-free-on-launch",
                slot_name(p)
            )));
        }
    }
    for p in frees {
        let live = state(p).graph.lock().as_ref().is_some_and(|b| b.live);
        if !live {
            return Err(refused(format!(
                "launching a graph whose free node frees {} of another graph, which is not \
                 allocated (freed already, or its graph not launched since)",
                slot_name(p)
            )));
        }
    }
    Ok(())
}

/// Apply a launch checked by [`check_launch`].
pub(crate) fn commit_launch(allocates: &[Arc<Allocation>], frees: &[Arc<Allocation>]) {
    for p in frees {
        mark_freed(p);
    }
    for p in allocates {
        if let Some(b) = state(p).graph.lock().as_mut() {
            b.live = true;
        }
    }
}
