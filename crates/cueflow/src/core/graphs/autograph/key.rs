//! Signatures (SPEC AG2): what makes two calls the same for a replay. A key names the stream,
//! the kind of call, its shape and the identities of what it uses (allocations, kernel,
//! event), each kernel argument's types and how a host kernel's blocks share a written buffer —
//! the identities as addresses kept unique by weak references (AG6: a key keeps no
//! memory alive, and no new allocation can take the address of one a key names). Kernel
//! scalar values are not part of a key: a replay updates them in place (AG3).

use std::any::TypeId;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use crate::backend::contract::event::BackendEvent;
use crate::backend::contract::kernel::{KernelArg, KernelInner};
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{Op, Work};
use crate::types::host_kernel::Split;

/// What keeps an identity's address from being reused while a key names it.
#[derive(Clone)]
enum Anchor {
    Alloc(#[allow(dead_code)] Weak<Allocation>),
    Kernel(#[allow(dead_code)] Weak<KernelInner>),
    Event(#[allow(dead_code)] Weak<dyn BackendEvent>),
}

/// One call of a signature.
#[derive(Clone)]
pub(super) struct Key {
    words: SmallVec<[u64; 20]>,
    anchors: SmallVec<[Anchor; 4]>,
}

const LAUNCH: u64 = 1;
const COPY: u64 = 2;
const MEMSET: u64 = 3;
const RECORD: u64 = 4;
const WAIT: u64 = 5;

/// Where a call's words go: into a new key, or compared with a remembered key's as they come
/// (the fast path of a window that repeats a signature: no key is built).
trait Sink {
    fn word(&mut self, w: u64);
    /// The identity behind the last word, kept alive (as a weak reference) by a built key.
    fn anchor(&mut self, a: impl FnOnce() -> Anchor);
}

impl Sink for Key {
    #[inline]
    fn word(&mut self, w: u64) {
        self.words.push(w);
    }
    #[inline]
    fn anchor(&mut self, a: impl FnOnce() -> Anchor) {
        self.anchors.push(a());
    }
}

/// Compares the words of a call with a key's, as they come.
struct Compare<'a> {
    words: &'a [u64],
    at: usize,
    same: bool,
}

impl Sink for Compare<'_> {
    #[inline]
    fn word(&mut self, w: u64) {
        self.same &= self.words.get(self.at) == Some(&w);
        self.at += 1;
    }
    #[inline]
    fn anchor(&mut self, _: impl FnOnce() -> Anchor) {}
}

impl Key {
    fn new() -> Key {
        Key {
            words: SmallVec::new(),
            anchors: SmallVec::new(),
        }
    }

    /// True if both keys name the same call.
    pub fn same(&self, other: &Key) -> bool {
        self.words == other.words
    }

    /// For an event record (`false`) or wait (`true`), which, and the event's identity.
    pub fn event(&self) -> Option<(bool, u64)> {
        match *self.words.get(1..3)? {
            [RECORD, id] => Some((false, id)),
            [WAIT, id] => Some((true, id)),
            _ => None,
        }
    }

    /// The key of `op` on the stream with actor `actor`; `None` for an operation that is never
    /// held (AG4). The dependencies the tracking layer gives a call are not part of it: those
    /// on calls of the window depend on whether those completed yet while the window issues
    /// its calls; a replay compares them with its graph's ([`super::replay`]).
    pub fn of_op(actor: u64, op: &Op) -> Option<Key> {
        let mut k = Key::new();
        op_words(&mut k, actor, op).then_some(k)
    }

    /// True if `op` on `actor` is the call this key names: [`of_op`]'s key would be
    /// [`same`](Self::same), without building it.
    ///
    /// [`of_op`]: Self::of_op
    #[inline]
    pub fn is_op(&self, actor: u64, op: &Op) -> bool {
        let mut c = Compare {
            words: &self.words,
            at: 0,
            same: true,
        };
        op_words(&mut c, actor, op) && c.same && c.at == self.words.len()
    }

    /// The key of an event record (`wait` false) or wait on `event` by `actor`.
    pub fn of_event(actor: u64, event: &Arc<dyn BackendEvent>, wait: bool) -> Key {
        let mut k = Key::new();
        event_words(&mut k, actor, event, wait);
        k
    }

    /// True if this key names the event record or wait [`of_event`](Self::of_event) would.
    #[inline]
    pub fn is_event(&self, actor: u64, event: &Arc<dyn BackendEvent>, wait: bool) -> bool {
        let mut c = Compare {
            words: &self.words,
            at: 0,
            same: true,
        };
        event_words(&mut c, actor, event, wait);
        c.same && c.at == self.words.len()
    }
}

/// The words of an event record or wait.
#[inline]
fn event_words(k: &mut impl Sink, actor: u64, event: &Arc<dyn BackendEvent>, wait: bool) {
    k.word(actor);
    k.word(if wait { WAIT } else { RECORD });
    k.word(Arc::as_ptr(event) as *const () as usize as u64);
    k.anchor(|| Anchor::Event(Arc::downgrade(event)));
}

/// The words of `op`; false for an operation that is never held (AG4).
#[inline]
fn op_words(k: &mut impl Sink, actor: u64, op: &Op) -> bool {
    k.word(actor);
    match &op.work {
        Work::Launch(l) => {
            k.word(LAUNCH);
            k.word(Arc::as_ptr(&l.kernel) as usize as u64);
            k.anchor(|| Anchor::Kernel(Arc::downgrade(&l.kernel)));
            for &d in l.grid.iter().chain(&l.block) {
                k.word(d as u64);
            }
            k.word(l.shared_bytes as u64);
            for a in l.args.iter() {
                match a {
                    KernelArg::Buffer {
                        mem,
                        access,
                        elem,
                        split,
                        ..
                    } => {
                        // Mapped memory: the host may watch it without calling cueflow.
                        if mem.kind().is_host() {
                            return false;
                        }
                        mem_words(k, mem);
                        k.word(*access as u64);
                        // How a host kernel's blocks share it and what it holds: a replay
                        // runs the recorded launch's, so they are part of the call.
                        k.word(type_word(*elem));
                        k.word(split_word(*split));
                    }
                    KernelArg::Scalar { size, ty, .. } => {
                        k.word(u64::MAX - *size as u64);
                        k.word(type_word(*ty));
                    }
                }
            }
        }
        Work::Copy { dst, src } => {
            k.word(COPY);
            mem_words(k, src);
            mem_words(k, dst);
        }
        Work::Memset { dst, value } => {
            k.word(MEMSET);
            mem_words(k, dst);
            k.word(*value as u64);
        }
        _ => return false,
    }
    true
}

/// A word for type `t`: the 64 bits its `Hash` writes (distinct for the types of one program).
#[inline]
fn type_word(t: TypeId) -> u64 {
    struct Bits(u64);
    impl Hasher for Bits {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = self.0.rotate_left(8) ^ b as u64;
            }
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = self.0.rotate_left(17) ^ n;
        }
    }
    let mut h = Bits(0);
    t.hash(&mut h);
    h.finish()
}

/// A word for a written argument's split among a host kernel's blocks.
#[inline]
fn split_word(s: Split) -> u64 {
    match s {
        Split::Tile => 0,
        Split::Whole => 1,
        // k >= 1 (0 is refused at the launch): no clash with the two above.
        Split::PerBlock(k) => k.saturating_add(2),
    }
}

#[inline]
fn mem_words(k: &mut impl Sink, m: &MemRef) {
    k.word(Arc::as_ptr(&m.alloc) as usize as u64);
    k.word(m.offset as u64);
    k.word(m.len as u64);
    k.anchor(|| Anchor::Alloc(Arc::downgrade(&m.alloc)));
}

/// A holdable call as [`Ctx::admit`](super::entry::Ctx) sees it: compared with remembered keys
/// in place, its own key built only when the window records a new signature.
pub(super) enum Call<'a> {
    Op {
        actor: u64,
        op: &'a Op,
    },
    Event {
        actor: u64,
        event: &'a Arc<dyn BackendEvent>,
        wait: bool,
    },
}

impl Call<'_> {
    /// True if `key` names this call.
    #[inline]
    pub fn is(&self, key: &Key) -> bool {
        match *self {
            Call::Op { actor, op } => key.is_op(actor, op),
            Call::Event { actor, event, wait } => key.is_event(actor, event, wait),
        }
    }

    /// The call's key; `None` for an operation that is never held (AG4).
    pub fn key(&self) -> Option<Key> {
        match *self {
            Call::Op { actor, op } => Key::of_op(actor, op),
            Call::Event { actor, event, wait } => Some(Key::of_event(actor, event, wait)),
        }
    }
}
