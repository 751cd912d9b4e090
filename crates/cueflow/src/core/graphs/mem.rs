//! Graph memory (GR7, GR10) as the program sees it: the buffer an allocation node hands it is a
//! placeholder that each instantiation binds to memory of its own. An allocation whose graph has
//! no free node for it is handed to the program at every launch, to be freed by a stream's
//! `free_async` after the launch, by another graph's free node, by the next launch of an
//! instantiation made with auto-free-on-launch, by `DeviceBuffer::free` (cudaFree), or by
//! dropping every handle on it.
//!
//! Rules:
//! 1. Instantiating a graph *binds* each of its slots' placeholders to the memory the
//!    instantiation gave the slot: the buffer's `device_addr` is that address from then on, as
//!    CUDA fixes a graph allocation's address (one instantiation of such a graph lives at a
//!    time, `graph_build` rule 6, so the binding is unambiguous). Memory the graph frees itself
//!    is only named so: no call outside the graph may use it (GR7). A graph whose handed-out
//!    memory from an earlier instantiation is still allocated is not instantiated again
//!    (its handles would lose that memory). Dropping an instantiation unbinds what is not
//!    allocated.
//! 2. Life, in enqueue order: a launch makes the memory *live*; a free makes it *freed*.
//!    Launching while it is live is a typed error unless the instantiation frees on launch;
//!    a stream operation on it while it is not live (never launched, or freed) is a typed
//!    error, as is freeing it twice (MM2).
//! 3. Stream operations on live memory run on the bound memory; for the tracking layer the
//!    launch writes all of it (the allocation), and a free writes all of it, so a use or free
//!    not ordered after the allocating launch is a race (AC3), reported or ordered like any.
//!    The completions of the allocating launch and of every stream operation on it are kept
//!    with the memory while it is live (its *uses*).
//! 4. The program holds the memory through its buffers (and through other graphs' free nodes
//!    for it): a [`Holder`] that they share. When the last goes while the memory is live, the
//!    memory is freed as `cudaFree` frees it, after all work that used it, without blocking:
//!    on a private stream, after the uses' completions; the next launch waits for that free,
//!    and the memory's access history ends there (nothing can reach the old contents). With
//!    no holder left, a launch that allocates the memory frees it right after itself, in its
//!    stream's order. (Inside a host function, which may not enqueue, the free waits for the
//!    next launch or instantiation, or the instantiation's drop.)
//! 5. [`free_now`] is `cudaFree`: the device's work completes first, then the memory is freed.

use std::any::Any;
use std::borrow::Cow;
use std::sync::{Arc, Weak};

use parking_lot::{MappedMutexGuard, MutexGuard};

use crate::backend::contract::device::Done;
use crate::backend::contract::graph::{resolve_with, touches_placeholder, GraphNode, GraphWork};
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{Op, Part};
use crate::core::memory::alloc::state;
use crate::error::{Error, Result};
use crate::types::Access;

/// What core keeps of a placeholder of graph memory (in its [`state`]).
#[derive(Default)]
struct GraphMem {
    binding: Option<Binding>,
    /// Rule 4: the program's holds on the memory.
    holder: Weak<Holder>,
    /// Rule 4: set once the last hold went.
    orphaned: bool,
}

/// The memory an instantiation gave a placeholder (rule 1).
struct Binding {
    real: Arc<Allocation>,
    /// The instantiation that bound it.
    exec: u64,
    /// The graph hands it out (GR10); otherwise it frees it itself (GR7).
    handed_out: bool,
    live: bool,
    /// Rule 3.
    uses: Vec<Done>,
    /// Rule 4: the free a dropped holder made, which the next launch waits for.
    freed: Option<Done>,
    dev: Weak<dyn Freer>,
}

/// The device's side of freeing graph memory (`core::graphs::exec` gives it for a device).
pub(crate) trait Freer: Send + Sync {
    /// Rule 4: free `real` on a private stream after `uses`; the free's completion.
    fn free_after(&self, real: &Arc<Allocation>, uses: &[Done]) -> Result<Option<Done>>;
    /// Rule 5: wait for all the device's work.
    fn synchronize(&self) -> Result<()>;
    /// Wait for `done`.
    fn wait(&self, done: &Done) -> Result<()>;
}

/// `placeholder`'s graph memory state.
fn lock(placeholder: &Allocation) -> MappedMutexGuard<'_, GraphMem> {
    MutexGuard::map(state(placeholder).graph.lock(), |g| {
        g.get_or_insert_with(|| Box::new(GraphMem::default()))
            .downcast_mut::<GraphMem>()
            .expect("graph memory state is graph_mem's")
    })
}

/// Rule 4: the program's hold on a placeholder; the memory is freed when the last goes.
pub(crate) struct Holder {
    placeholder: Arc<Allocation>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let mut st = lock(&self.placeholder);
        st.orphaned = true;
        if let Some(b) = st.binding.as_mut() {
            if crate::core::streams::hostfn::check_not_in_host_fn("drop").is_ok() {
                // A device that failed keeps its memory: nothing to order the free after.
                let _ = release(b);
            }
        }
    }
}

/// Rule 4: the hold of `placeholder` for a new handle of the program (shared with the
/// handles it has).
pub(crate) fn holder(placeholder: &Arc<Allocation>) -> Arc<dyn Any + Send + Sync> {
    let mut st = lock(placeholder);
    if let Some(h) = st.holder.upgrade() {
        return h;
    }
    let h = Arc::new(Holder {
        placeholder: placeholder.clone(),
    });
    st.holder = Arc::downgrade(&h);
    h
}

/// Rule 4: the program's hold of `placeholder`, if it has one (for a free node of another
/// graph, which holds it too).
pub(crate) fn holder_of(placeholder: &Allocation) -> Option<Arc<dyn Any + Send + Sync>> {
    let h = lock(placeholder).holder.upgrade()?;
    Some(h)
}

fn refused(what: String) -> Error {
    Error::NotPermitted { rule: "GR10", what }
}

fn slot_name(placeholder: &Allocation) -> String {
    match placeholder.graph_slot {
        Some(g) => format!("graph allocation {} ({} bytes)", g.slot, placeholder.bytes),
        None => format!("an allocation of {} bytes", placeholder.bytes),
    }
}

/// Rule 1: refuse to bind `placeholder` again while memory an earlier instantiation handed
/// out is live (memory no one holds is freed first, rule 4).
pub(crate) fn check_rebind(placeholder: &Allocation) -> Result<()> {
    let mut st = lock(placeholder);
    let orphaned = st.orphaned;
    let Some(b) = st.binding.as_mut().filter(|b| b.live) else {
        return Ok(());
    };
    if orphaned {
        return release(b);
    }
    Err(refused(format!(
        "instantiating a graph whose {} from a launch of its earlier instantiation is still \
         allocated: free it first (free_async, a free node, DeviceBuffer::free, or drop its \
         buffers)",
        slot_name(placeholder)
    )))
}

/// Rule 1.
pub(crate) fn bind(
    placeholder: &Allocation,
    real: Arc<Allocation>,
    exec: u64,
    handed_out: bool,
    dev: Weak<dyn Freer>,
) {
    lock(placeholder).binding = Some(Binding {
        real,
        exec,
        handed_out,
        live: false,
        uses: Vec::new(),
        freed: None,
        dev,
    });
}

/// Rule 1, when instantiation `exec` goes: its memory that is not allocated is unbound;
/// allocated memory no one holds is freed (rule 4).
pub(crate) fn unbind(placeholders: &[Arc<Allocation>], exec: u64) {
    let in_host_fn = crate::core::streams::hostfn::check_not_in_host_fn("drop").is_err();
    for p in placeholders {
        let mut st = lock(p);
        let orphaned = st.orphaned;
        let Some(b) = st.binding.as_mut().filter(|b| b.exec == exec) else {
            continue;
        };
        if b.live && orphaned && !in_host_fn {
            let _ = release(b);
        }
        if !b.live {
            st.binding = None;
        }
    }
}

/// The memory bound to `placeholder` if an instantiation bound it and its graph hands it out
/// (rule 1, GR10).
pub(crate) fn bound(placeholder: &Allocation) -> Option<Arc<Allocation>> {
    let st = lock(placeholder);
    let b = st.binding.as_ref().filter(|b| b.handed_out)?;
    Some(b.real.clone())
}

/// True while a launch allocated `placeholder`'s memory and nothing freed it since (rule 2).
pub(crate) fn is_live(placeholder: &Allocation) -> bool {
    let st = lock(placeholder);
    st.binding.as_ref().is_some_and(|b| b.live)
}

/// The address of the memory bound to `placeholder`; 0 before an instantiation bound it.
pub(crate) fn addr(placeholder: &Allocation) -> u64 {
    let st = lock(placeholder);
    st.binding.as_ref().map_or(0, |b| b.real.addr)
}

/// Rule 3: `op` with live graph memory in place of its placeholders, and those placeholders;
/// memory that is not live (or that no graph hands out) is refused (rule 2).
pub(crate) fn resolve_stream_op(op: &Op) -> Result<(Op, Vec<Arc<Allocation>>)> {
    let mut bad: Option<Error> = None;
    let mut used: Vec<Arc<Allocation>> = Vec::new();
    op.for_each_access(|m, _, _| {
        if bad.is_some() || m.alloc.graph_slot.is_none() {
            return;
        }
        if !used.iter().any(|p| Arc::ptr_eq(p, &m.alloc)) {
            used.push(m.alloc.clone());
        }
        match lock(&m.alloc).binding.as_ref() {
            Some(b) if b.live => {}
            Some(b) if b.handed_out => {
                bad = Some(refused(format!(
                    "{} is used by a stream operation while it is not allocated: its graph was \
                     not launched since it was freed",
                    slot_name(&m.alloc)
                )))
            }
            _ => {
                bad = Some(Error::InvalidHandle(format!(
                    "{} is used by a stream operation, but it is either freed inside its graph \
                     (usable only by the graph's own nodes) or its graph was never \
                     instantiated and launched (GR7)",
                    slot_name(&m.alloc)
                )))
            }
        }
    });
    if let Some(e) = bad {
        return Err(e);
    }
    let out = resolve_with(op, &|a| {
        let st = lock(a);
        st.binding
            .as_ref()
            .filter(|b| b.live)
            .map(|b| b.real.clone())
    });
    debug_assert!(!touches_placeholder(&out));
    Ok((out, used))
}

/// Rule 3: `done`, the completion of an operation on `placeholders`, is a use of their memory.
pub(crate) fn used(placeholders: &[Arc<Allocation>], done: Option<Done>) {
    let Some(done) = done else { return };
    for p in placeholders {
        if let Some(b) = lock(p).binding.as_mut().filter(|b| b.live) {
            b.uses.retain(|d| !d.is_done());
            b.uses.push(done.clone());
        }
    }
}

/// Rule 2 for a stream free of `placeholder`: the live memory to free.
pub(crate) fn stream_free(placeholder: &Allocation) -> Result<Arc<Allocation>> {
    let st = lock(placeholder);
    match st.binding.as_ref() {
        Some(b) if b.live => Ok(b.real.clone()),
        Some(b) if b.handed_out => Err(refused(format!(
            "free_async of {}, which is not allocated (freed already, or its graph not \
             launched since)",
            slot_name(placeholder)
        ))),
        _ => Err(Error::InvalidHandle(format!(
            "free_async of {}: memory a graph allocates and frees itself is the graph's (GR7), \
             and memory it hands out exists only after it was instantiated and launched",
            slot_name(placeholder)
        ))),
    }
}

/// Mark `placeholder`'s memory freed (after a free was enqueued, rule 2).
pub(crate) fn mark_freed(placeholder: &Allocation) {
    if let Some(b) = lock(placeholder).binding.as_mut() {
        b.live = false;
        b.uses.clear();
        b.freed = None;
    }
}

/// Rule 4: free `b`'s live memory after its uses, on a private stream of its device.
fn release(b: &mut Binding) -> Result<()> {
    if !b.live || !b.handed_out {
        return Ok(());
    }
    let Some(dev) = b.dev.upgrade() else {
        return Ok(());
    };
    let freed = dev.free_after(&b.real, &b.uses)?;
    // The next launch waits for the free, which waited for every use: the old accesses are
    // ordered before whatever comes next.
    *state(&b.real).access.lock() = Default::default();
    b.live = false;
    b.uses.clear();
    b.freed = freed;
    Ok(())
}

/// Rule 5 (`cudaFree`): wait for the device's work, then free `placeholder`'s memory.
pub(crate) fn free_now(placeholder: &Allocation) -> Result<()> {
    stream_free(placeholder)?;
    let dev = lock(placeholder)
        .binding
        .as_ref()
        .and_then(|b| b.dev.upgrade());
    let Some(dev) = dev else {
        return Ok(()); // The device is gone, and its memory with it.
    };
    dev.synchronize()?;
    let done = {
        let mut st = lock(placeholder);
        let Some(b) = st.binding.as_mut().filter(|b| b.live) else {
            // Freed by another thread meanwhile: as a second free.
            drop(st);
            return stream_free(placeholder).map(|_| ());
        };
        release(b)?;
        b.freed.clone()
    };
    match done {
        Some(d) => dev.wait(&d),
        None => Ok(()),
    }
}

/// `deps` and the frees a launch waits for (rule 4); a new list only when there are frees (a
/// launch without graph memory allocates nothing here).
pub(crate) fn and_frees<'a>(deps: &'a [Done], frees: &[Done]) -> Cow<'a, [Done]> {
    if frees.is_empty() {
        return Cow::Borrowed(deps);
    }
    Cow::Owned(deps.iter().chain(frees).cloned().collect())
}

/// The memory beyond one graph (`core::graphs::exec` rule 6, GR10): the placeholders of the
/// slots it allocates and never frees, which each launch hands to the program, and of other
/// graphs' memory that its free nodes free. A launch writes all of both.
#[derive(Default)]
pub(crate) struct Beyond {
    pub hands_out: Vec<Arc<Allocation>>,
    pub frees_other: Vec<Arc<Allocation>>,
}

impl Beyond {
    /// The memory beyond `nodes`, whose placeholders are `slots` (by slot).
    pub fn of(nodes: &[GraphNode], slots: &[Arc<Allocation>]) -> Beyond {
        let mut allocated = vec![false; slots.len()];
        let mut freed = vec![false; slots.len()];
        let mut frees_other = Vec::new();
        for n in nodes {
            match &n.work {
                GraphWork::Alloc { slot, .. } if *slot < slots.len() => allocated[*slot] = true,
                GraphWork::Free { slot } if *slot < slots.len() => freed[*slot] = true,
                GraphWork::FreeOther { mem } => frees_other.push(mem.clone()),
                _ => {}
            }
        }
        let hands_out = (0..slots.len())
            .filter(|&s| allocated[s] && !freed[s])
            .map(|s| slots[s].clone())
            .collect();
        Beyond {
            hands_out,
            frees_other,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hands_out.is_empty() && self.frees_other.is_empty()
    }

    /// True if the graph hands `placeholder` to the program.
    pub fn hands_out(&self, placeholder: &Arc<Allocation>) -> bool {
        self.hands_out.iter().any(|h| Arc::ptr_eq(h, placeholder))
    }

    /// The part of it node `n` writes: what it allocates for the program or frees for
    /// another graph.
    pub fn written_by(&self, n: &GraphNode) -> Vec<Arc<Allocation>> {
        match &n.work {
            GraphWork::Alloc { slot, .. } => self
                .hands_out
                .iter()
                .filter(|p| p.graph_slot.is_some_and(|g| g.slot == *slot))
                .cloned()
                .collect(),
            GraphWork::FreeOther { mem } => self
                .frees_other
                .iter()
                .filter(|p| Arc::ptr_eq(p, mem))
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The footprint of all of it for the tracking layer.
    pub fn footprint(&self) -> Vec<(MemRef, Access, Part)> {
        written_footprint(self.hands_out.iter().chain(&self.frees_other).cloned())
    }

    /// Rule 2 at a launch: what the graph hands out becomes live (refused if live, unless
    /// `auto_free`), other graphs' memory it frees becomes freed (refused unless live).
    /// Checks everything before changing anything; returns the frees the launch must wait for
    /// (rule 4), for [`commit_launch`](Self::commit_launch).
    pub fn check_launch(&self, auto_free: bool) -> Result<Vec<Done>> {
        let mut after = Vec::new();
        for p in &self.hands_out {
            let mut st = lock(p);
            let orphaned = st.orphaned;
            let Some(b) = st.binding.as_mut() else {
                continue;
            };
            if b.live && orphaned {
                release(b)?; // Rule 4: dropped inside a host function.
            }
            if b.live && !auto_free {
                return Err(refused(format!(
                    "launching a graph whose {} from its previous launch is still allocated: free \
                     it first (a stream free_async, another graph's free node, \
                     DeviceBuffer::free, or drop its buffers), or instantiate with \
                     auto-free-on-launch",
                    slot_name(p)
                )));
            }
            after.extend(b.freed.iter().filter(|d| !d.is_done()).cloned());
        }
        for p in &self.frees_other {
            if !is_live(p) {
                return Err(refused(format!(
                    "launching a graph whose free node frees {} of another graph, which is not \
                     allocated (freed already, or its graph not launched since)",
                    slot_name(p)
                )));
            }
        }
        Ok(after)
    }

    /// Apply a launch checked by [`check_launch`](Self::check_launch), whose completion is
    /// `done`; returns the allocations no one holds, which the launch's stream frees next
    /// (rule 4).
    pub fn commit_launch(&self, done: Option<Done>) -> Vec<Arc<Allocation>> {
        for p in &self.frees_other {
            mark_freed(p);
        }
        let mut orphans = Vec::new();
        for p in &self.hands_out {
            let mut st = lock(p);
            let orphaned = st.orphaned;
            if let Some(b) = st.binding.as_mut() {
                b.live = true;
                b.freed = None;
                b.uses = done.iter().cloned().collect();
                if orphaned {
                    orphans.push(p.clone());
                }
            }
        }
        orphans
    }
}

/// The footprint of graph memory a launch allocates for the program or frees for another
/// graph (`placeholders`): all of each bound allocation, written.
pub(crate) fn written_footprint(
    placeholders: impl Iterator<Item = Arc<Allocation>>,
) -> Vec<(MemRef, Access, Part)> {
    placeholders
        .filter_map(|p| bound(&p))
        .map(|real| {
            let len = real.bytes;
            let mem = MemRef {
                alloc: real,
                offset: 0,
                len,
            };
            (mem, Access::Write, Part::Whole)
        })
        .collect()
}
