//! The operation of a graph node, shared without an allocation per node.
//!
//! A graph's definition, its copies, each instantiation (core's flattened nodes, the backend's
//! view of them) and every launch in flight hold the same operations (GR3, GR4). Each held an
//! `Arc<Op>`: one allocation per node, ~250 of the ~800 instructions of adding a kernel node
//! to a graph (`examples/instantiate_profile.rs` under `tools/null-driver` and callgrind). A
//! [`NodeOp`] is a slot of an [`OpChunk`] that holds many operations, appended one by one by
//! the [`OpArena`] of the graph being built, so that a 1,000-node graph makes 19 allocations
//! for its operations, not 1,000.
//!
//! Rules (cited as N1–N3 by the `// SAFETY:` comments):
//! * **N1.** A slot is written once, by the one arena whose current chunk it is (`push` takes
//!   `&mut OpArena`, and a copy of an arena starts a chunk of its own), before any `NodeOp`
//!   naming it exists; it is never written again.
//! * **N2.** A `NodeOp` points at a written slot (below `len` when it was made) and holds its
//!   chunk; reading the slot is reading an `Op` that no one writes (N1).
//! * **N3.** A chunk drops its written slots when its last holder drops it: the arena and every
//!   `NodeOp` hold it through the `Arc`, whose drop makes the last holder's view complete.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::op::Op;

/// The most operations a chunk holds: chunks grow from [`FIRST_CHUNK`] to this (a small graph
/// allocates little; a large one ~7 KiB at a time).
const MAX_CHUNK: usize = 64;
const FIRST_CHUNK: usize = 4;

/// Operations in slots written once each (N1).
pub(crate) struct OpChunk {
    slots: Box<[UnsafeCell<MaybeUninit<Op>>]>,
    /// Slots written so far: `slots[..len]`.
    len: AtomicUsize,
}

/// The unsafe `Send` and `Sync` below hold only while `Op` is both: checked when compiling.
const _: () = {
    const fn shared_and_sent<T: Send + Sync>() {}
    shared_and_sent::<Op>();
};

// SAFETY: a slot is written only by the chunk's one arena before any `NodeOp` of it exists
// (N1) and read only through `NodeOp`s afterwards (N2); `Op` is itself Send and Sync (checked
// above), so the chunk moves and is shared as its operations are.
unsafe impl Sync for OpChunk {}
// SAFETY: as above; the operations it owns are Send.
unsafe impl Send for OpChunk {}

impl OpChunk {
    fn with_capacity(n: usize) -> Arc<OpChunk> {
        Arc::new(OpChunk {
            slots: (0..n)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            len: AtomicUsize::new(0),
        })
    }
}

impl Drop for OpChunk {
    fn drop(&mut self) {
        let len = *self.len.get_mut();
        for slot in &mut self.slots[..len] {
            // SAFETY: slots below `len` were written (N1) and are dropped once, here, by the
            // chunk's last holder (N3).
            unsafe { slot.get_mut().assume_init_drop() };
        }
    }
}

/// A graph node's operation: a written slot of a chunk (N2), and its address (read without
/// the chunk's indirections: nodes are read at every instantiation and update).
#[derive(Clone)]
pub(crate) struct NodeOp {
    /// Held, not read: keeps the slot alive (N3).
    _chunk: Arc<OpChunk>,
    op: std::ptr::NonNull<Op>,
}

// SAFETY: `op` points into the chunk the node holds, at an `Op` no one writes (N1, N2): the
// node is shared and sent as an `Arc<Op>` would be.
unsafe impl Send for NodeOp {}
// SAFETY: as above.
unsafe impl Sync for NodeOp {}

impl NodeOp {
    /// `op` in a chunk of its own (a node made outside a graph being built: a capture's, an
    /// update's).
    pub fn new(op: Op) -> NodeOp {
        OpArena::with_first(1).push(op)
    }
}

impl std::ops::Deref for NodeOp {
    type Target = Op;

    #[inline]
    fn deref(&self) -> &Op {
        // SAFETY: `op` is a slot written before this `NodeOp` was made and never written again
        // (N1, N2); the chunk, whose slots never move, lives while `self` holds it (N3).
        unsafe { self.op.as_ref() }
    }
}

/// Appends operations to chunks for one graph being built (N1).
pub(crate) struct OpArena {
    chunk: Option<Arc<OpChunk>>,
    /// The capacity of the next chunk.
    next: usize,
}

impl Default for OpArena {
    fn default() -> Self {
        OpArena::with_first(FIRST_CHUNK)
    }
}

/// A copy of a graph appends to chunks of its own: two arenas never write one chunk (N1).
impl Clone for OpArena {
    fn clone(&self) -> Self {
        OpArena::default()
    }
}

impl OpArena {
    fn with_first(n: usize) -> OpArena {
        OpArena {
            chunk: None,
            next: n,
        }
    }

    /// Store `op` in the current chunk (a new one when it is full) and name its slot.
    pub fn push(&mut self, op: Op) -> NodeOp {
        let full = match &self.chunk {
            Some(c) => c.len.load(Ordering::Relaxed) >= c.slots.len(),
            None => true,
        };
        if full {
            self.chunk = Some(OpChunk::with_capacity(self.next));
            self.next = (self.next * 2).min(MAX_CHUNK);
        }
        let chunk = self.chunk.as_ref().expect("a chunk with room is current");
        let at = chunk.len.load(Ordering::Relaxed);
        // SAFETY: this arena is the only writer of its current chunk (N1, `&mut self`), slot
        // `at` is past every written one, so no `NodeOp` names it yet; it is written once.
        let op = unsafe { (*chunk.slots[at].get()).write(op) };
        // Published before the `NodeOp` that names the slot exists (N2); the chunk's drop
        // reads it as its last holder (N3).
        chunk.len.store(at + 1, Ordering::Release);
        NodeOp {
            _chunk: chunk.clone(),
            op: std::ptr::NonNull::from(op),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::contract::op::{HostCall, Work};

    /// An operation whose host function holds `marker` (so its drops are counted) and names
    /// `n` (so each slot is told apart).
    fn op(marker: &Arc<()>, n: usize) -> Op {
        let m = marker.clone();
        let mut call = HostCall::new(Arc::new(move || {
            let _ = &m;
        }));
        call.name = Some(n.to_string().into());
        Op::new(Work::HostFn(Box::new(call)))
    }

    fn name(op: &Op) -> String {
        match &op.work {
            Work::HostFn(h) => h.name.as_deref().unwrap_or_default().to_string(),
            _ => String::new(),
        }
    }

    #[test]
    fn each_node_reads_its_own_operation_and_chunks_grow_to_the_cap() {
        let marker = Arc::new(());
        let mut arena = OpArena::default();
        let ops: Vec<NodeOp> = (0..300).map(|n| arena.push(op(&marker, n))).collect();
        for (n, o) in ops.iter().enumerate() {
            assert_eq!(name(o), n.to_string());
        }
        // 4 + 8 + 16 + 32 + 64 + 64 + 64 + 64 = 316 slots: eight chunks for 300 operations.
        let mut chunks: Vec<*const OpChunk> = ops.iter().map(|o| Arc::as_ptr(&o._chunk)).collect();
        chunks.dedup();
        assert_eq!(chunks.len(), 8);
        assert_eq!(ops[0]._chunk.slots.len(), FIRST_CHUNK);
        assert_eq!(ops[299]._chunk.slots.len(), MAX_CHUNK);
    }

    #[test]
    fn operations_are_dropped_once_when_their_last_holder_goes() {
        let marker = Arc::new(());
        let mut arena = OpArena::default();
        let kept = {
            let ops: Vec<NodeOp> = (0..10).map(|n| arena.push(op(&marker, n))).collect();
            assert_eq!(Arc::strong_count(&marker), 11);
            ops[9].clone()
        };
        // The arena and `kept` hold the last chunk (slots 4..10); the first chunk went with
        // its nodes.
        assert_eq!(Arc::strong_count(&marker), 7);
        drop(arena);
        assert_eq!(Arc::strong_count(&marker), 7);
        assert_eq!(name(&kept), "9");
        drop(kept);
        assert_eq!(Arc::strong_count(&marker), 1);
    }

    #[test]
    fn a_copy_of_an_arena_writes_chunks_of_its_own() {
        let marker = Arc::new(());
        let mut arena = OpArena::default();
        let first = arena.push(op(&marker, 0));
        let mut copy = arena.clone();
        let theirs = copy.push(op(&marker, 1));
        let ours = arena.push(op(&marker, 2));
        assert!(!Arc::ptr_eq(&theirs._chunk, &first._chunk));
        assert!(Arc::ptr_eq(&ours._chunk, &first._chunk));
        assert_eq!([name(&first), name(&theirs), name(&ours)], ["0", "1", "2"]);
    }

    #[test]
    fn nodes_read_on_other_threads_while_the_arena_appends() {
        let marker = Arc::new(());
        let mut arena = OpArena::default();
        let mut readers = Vec::new();
        for n in 0..40 {
            let o = arena.push(op(&marker, n));
            readers.push(std::thread::spawn(move || name(&o) == n.to_string()));
        }
        assert!(readers.into_iter().all(|r| r.join().unwrap()));
        drop(arena);
        assert_eq!(Arc::strong_count(&marker), 1);
    }
}
