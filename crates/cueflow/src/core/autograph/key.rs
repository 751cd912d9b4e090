//! Signatures (SPEC AG2): what makes two calls the same for a replay. A key names the stream,
//! the kind of call, its shape and the identities of what it uses (allocations, kernel,
//! event) — the identities as addresses kept unique by weak references (AG6: a key keeps no
//! memory alive, and no new allocation can take the address of one a key names). Kernel
//! scalar values are not part of a key: a replay updates them in place (AG3).

use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::kernel::{KernelArg, KernelInner};
use crate::backend::contract::memory::{Allocation, MemKind, MemRef};
use crate::backend::contract::op::{Op, Work};

/// What keeps an identity's address from being reused while a key names it.
enum Anchor {
    Alloc(#[allow(dead_code)] Weak<Allocation>),
    Kernel(#[allow(dead_code)] Weak<KernelInner>),
    Event(#[allow(dead_code)] Weak<dyn BackendEvent>),
}

/// One call of a signature.
pub(super) struct Key {
    words: SmallVec<[u64; 12]>,
    anchors: SmallVec<[Anchor; 4]>,
}

const LAUNCH: u64 = 1;
const COPY: u64 = 2;
const MEMSET: u64 = 3;
const RECORD: u64 = 4;
const WAIT: u64 = 5;

impl Key {
    fn new(actor: u64, kind: u64) -> Key {
        let mut words = SmallVec::new();
        words.extend([actor, kind]);
        Key {
            words,
            anchors: SmallVec::new(),
        }
    }

    /// True if both keys name the same call.
    pub fn same(&self, other: &Key) -> bool {
        self.words == other.words
    }

    /// The key of `op` on the stream with actor `actor`, whose dependencies inside the window
    /// are the calls `inner`; `None` for an operation that is never held (AG4).
    pub fn of_op(actor: u64, op: &Op, inner: &[usize]) -> Option<Key> {
        let mut k;
        match &op.work {
            Work::Launch(l) => {
                k = Key::new(actor, LAUNCH);
                k.words.push(Arc::as_ptr(&l.kernel) as usize as u64);
                k.anchors.push(Anchor::Kernel(Arc::downgrade(&l.kernel)));
                k.words
                    .extend(l.grid.iter().chain(&l.block).map(|&d| d as u64));
                k.words.push(l.shared_bytes as u64);
                for a in l.args.iter() {
                    match a {
                        KernelArg::Buffer { mem, access, .. } => {
                            // Mapped memory: the host may watch it without calling cueflow.
                            if mem.kind() == MemKind::Pinned {
                                return None;
                            }
                            k.mem(mem);
                            k.words.push(*access as u64);
                        }
                        KernelArg::Scalar { size, .. } => k.words.push(u64::MAX - *size as u64),
                    }
                }
            }
            Work::Copy { dst, src } => {
                k = Key::new(actor, COPY);
                k.mem(src);
                k.mem(dst);
            }
            Work::Memset { dst, value } => {
                k = Key::new(actor, MEMSET);
                k.mem(dst);
                k.words.push(*value as u64);
            }
            _ => return None,
        }
        k.words.push(inner.len() as u64);
        k.words.extend(inner.iter().map(|&i| i as u64));
        Some(k)
    }

    /// The key of an event record (`wait` false) or wait on `event` by `actor`.
    pub fn of_event(actor: u64, event: &Arc<dyn BackendEvent>, wait: bool) -> Key {
        let mut k = Key::new(actor, if wait { WAIT } else { RECORD });
        k.words
            .push(Arc::as_ptr(event) as *const () as usize as u64);
        k.anchors.push(Anchor::Event(Arc::downgrade(event)));
        k
    }

    fn mem(&mut self, m: &MemRef) {
        self.words.push(Arc::as_ptr(&m.alloc) as usize as u64);
        self.words.extend([m.offset as u64, m.len as u64]);
        self.anchors.push(Anchor::Alloc(Arc::downgrade(&m.alloc)));
    }
}
