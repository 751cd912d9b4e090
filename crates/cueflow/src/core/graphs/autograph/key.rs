//! Signatures (SPEC AG2): what makes two calls the same for a replay. A key names the stream,
//! the kind of call, its shape and the identities of what it uses (allocations, kernel,
//! event), each kernel argument's types and how a host kernel's blocks share a written buffer —
//! the identities as addresses kept unique by weak references (AG6: a key keeps no
//! memory alive, and no new allocation can take the address of one a key names). Kernel
//! scalar values are not part of a key: a replay updates them in place (AG3).

use std::any::TypeId;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};

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

/// The calls of a signature, flat: each call's words one after another (call `i` ends at
/// `ends[i]`) and the identities they name, so that recording a signature costs no allocation
/// per call (a call's words were ~26 for a launch over two buffers: a key of its own spilled
/// to the heap, and a window that never repeats builds a key for every call).
#[derive(Default)]
pub(super) struct Keys {
    words: Vec<u64>,
    ends: Vec<u32>,
    anchors: Vec<Anchor>,
    /// Where each call's anchors end in `anchors`.
    anchor_ends: Vec<u32>,
}

/// One call of a signature, as its words.
#[derive(Clone, Copy)]
pub(super) struct KeyRef<'a>(&'a [u64]);

const LAUNCH: u64 = 1;
const COPY: u64 = 2;
const MEMSET: u64 = 3;
const RECORD: u64 = 4;
const WAIT: u64 = 5;

/// Where a call's words go: appended to a signature, or compared with a remembered key's as
/// they come (the fast path of a window that repeats a signature: no key is built).
trait Sink {
    fn word(&mut self, w: u64);
    /// The identity behind the last word, kept alive (as a weak reference) by a built key.
    fn anchor(&mut self, a: impl FnOnce() -> Anchor);
}

impl Sink for Keys {
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

impl Keys {
    /// Calls in the signature.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Forget every call, keeping the memory for the next signature.
    pub fn clear(&mut self) {
        self.words.clear();
        self.ends.clear();
        self.anchors.clear();
        self.anchor_ends.clear();
    }

    /// Keep `other`'s memory, emptied, instead of this one's if it has more (AG6: the
    /// identities it named are let go).
    pub fn recycle(&mut self, mut other: Keys) {
        other.clear();
        if other.words.capacity() > self.words.capacity() {
            *self = other;
        }
    }

    fn start(ends: &[u32], i: usize) -> usize {
        if i == 0 {
            0
        } else {
            ends[i - 1] as usize
        }
    }

    /// Call `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<KeyRef<'_>> {
        let end = *self.ends.get(i)? as usize;
        Some(KeyRef(&self.words[Self::start(&self.ends, i)..end]))
    }

    pub fn iter(&self) -> impl Iterator<Item = KeyRef<'_>> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// True if both name the same calls.
    pub fn same(&self, other: &Keys) -> bool {
        self.ends == other.ends && self.words == other.words
    }

    /// Append `call`; false (nothing appended) for a call that is never held (AG4). The
    /// dependencies the tracking layer gives a call are not part of it: those on calls of the
    /// window depend on whether those completed yet while the window issues its calls; a
    /// replay compares them with its graph's ([`super::replay`]).
    pub fn push(&mut self, call: &Call<'_>) -> bool {
        let (words, anchors) = (self.words.len(), self.anchors.len());
        let held = match *call {
            Call::Op { actor, op } => op_words(self, actor, op),
            Call::Event { actor, event, wait } => {
                event_words(self, actor, event, wait);
                true
            }
        };
        if held {
            self.ends.push(self.words.len() as u32);
            self.anchor_ends.push(self.anchors.len() as u32);
        } else {
            self.words.truncate(words);
            self.anchors.truncate(anchors);
        }
        held
    }

    /// Append `other`'s calls from this signature's length up to `to` (the calls a window
    /// repeated of a remembered signature).
    pub fn extend_from(&mut self, other: &Keys, to: usize) {
        let from = self.len();
        if from >= to {
            return;
        }
        let (w0, w1) = (Self::start(&other.ends, from), other.ends[to - 1] as usize);
        let (a0, a1) = (
            Self::start(&other.anchor_ends, from),
            other.anchor_ends[to - 1] as usize,
        );
        let (wbase, abase) = (self.words.len() as u32, self.anchors.len() as u32);
        self.words.extend_from_slice(&other.words[w0..w1]);
        self.anchors.extend_from_slice(&other.anchors[a0..a1]);
        self.ends
            .extend(other.ends[from..to].iter().map(|&e| e - w0 as u32 + wbase));
        self.anchor_ends.extend(
            other.anchor_ends[from..to]
                .iter()
                .map(|&e| e - a0 as u32 + abase),
        );
    }
}

impl KeyRef<'_> {
    /// The stream's identity.
    pub fn actor(self) -> u64 {
        self.0[0]
    }

    /// For an event record (`false`) or wait (`true`), which, and the event's identity.
    pub fn event(self) -> Option<(bool, u64)> {
        match *self.0.get(1..3)? {
            [RECORD, id] => Some((false, id)),
            [WAIT, id] => Some((true, id)),
            _ => None,
        }
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
    /// True if `key` names this call: the key [`Keys::push`] would append, without building
    /// it.
    #[inline]
    pub fn is(&self, key: KeyRef<'_>) -> bool {
        let mut c = Compare {
            words: key.0,
            at: 0,
            same: true,
        };
        let held = match *self {
            Call::Op { actor, op } => op_words(&mut c, actor, op),
            Call::Event { actor, event, wait } => {
                event_words(&mut c, actor, event, wait);
                true
            }
        };
        held && c.same && c.at == key.0.len()
    }
}

#[cfg(test)]
impl Keys {
    /// A signature of calls given as (stream, what): `None` a launch of one kernel, `Some((wait,
    /// event))` a record (`wait` false) or wait of an event.
    pub fn of_test_calls(calls: &[(u64, Option<(bool, u64)>)]) -> Keys {
        let mut k = Keys::default();
        for &(actor, what) in calls {
            k.word(actor);
            match what {
                None => k.words.extend([LAUNCH, 7]),
                Some((wait, id)) => k.words.extend([if wait { WAIT } else { RECORD }, id]),
            }
            k.ends.push(k.words.len() as u32);
            k.anchor_ends.push(0);
        }
        k
    }
}
