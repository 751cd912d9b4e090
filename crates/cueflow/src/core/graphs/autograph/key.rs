//! Signatures (SPEC AG2): what makes two calls the same for a replay. A key names the stream,
//! the kind of call, its shape and the identities of what it uses (allocations, kernel), each
//! kernel argument's types and how a host kernel's blocks share a written buffer — the
//! identities as addresses kept unique by weak references (AG6: a key keeps no memory alive,
//! and no new allocation can take the address of one a key names). Events are named by place,
//! not identity: a record by its event's flags, a wait by the place in the signature of the
//! record it waits for (every wait of a signature waits for one of its records), so a loop that
//! makes new events each time round (`Stream::wait_stream`, `Stream::record`) repeats. Memory a
//! stream-ordered allocation of the window made is named likewise by the place of that call
//! ([`Places`]), so a loop that allocates its temporaries anew each time round repeats. Kernel
//! scalar values, memset bytes and recorded events are not part of a key: a replay updates
//! them in place (AG3).

use std::any::TypeId;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
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
const ALLOC: u64 = 6;
const FREE: u64 = 7;
/// The first word of memory named by the place of the window's allocation that made it: odd,
/// so never the address of an allocation's record (which names all other memory).
const BY_PLACE: u64 = 1;

/// The window's stream-ordered allocations so far, by the address of each allocation's record,
/// with the place in the signature of the call that made it: memory they made is named by that
/// place in a key (AG2), as events are, so a window that allocates its temporaries anew each
/// time repeats. Weak: no other allocation takes the address while the window lasts.
pub(super) type Places = HashMap<usize, (Weak<Allocation>, usize), BuildHasherDefault<ByAddress>>;

/// Hashes an address with one multiplication (the keys are distinct allocations); the
/// product's high bits, which depend on every bit of the address, are rotated down to where
/// the table picks its bucket (aligned addresses share their low bits).
#[derive(Default)]
pub(super) struct ByAddress(u64);

impl Hasher for ByAddress {
    fn finish(&self) -> u64 {
        self.0.rotate_left(32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The address [`Places`] knows `alloc` by.
pub(super) fn alloc_addr(alloc: &Arc<Allocation>) -> usize {
    Arc::as_ptr(alloc) as usize
}

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
    pub fn push(&mut self, call: &Call<'_>, places: &Places) -> bool {
        let (words, anchors) = (self.words.len(), self.anchors.len());
        let held = call.words(self, places);
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

/// What a call of a signature does with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EventCall {
    Record,
    /// A wait for the record at this place in the signature.
    Wait(usize),
}

impl KeyRef<'_> {
    /// The stream's identity.
    pub fn actor(self) -> u64 {
        self.0[0]
    }

    /// For an event record or wait, which.
    pub fn event(self) -> Option<EventCall> {
        match *self.0.get(1..3)? {
            [RECORD, _] => Some(EventCall::Record),
            [WAIT, at] => Some(EventCall::Wait(at as usize)),
            _ => None,
        }
    }
}

/// The words of an event record: its event's flags and whether it is a join's own, not its
/// identity (see the module doc).
#[inline]
fn record_words(k: &mut impl Sink, actor: u64, event: &Arc<dyn BackendEvent>, internal: bool) {
    let f = event.flags();
    k.word(actor);
    k.word(RECORD);
    k.word(
        f.timing as u64
            | (f.blocking_sync as u64) << 1
            | (f.interprocess as u64) << 2
            | (internal as u64) << 3,
    );
}

/// The words of a wait for the record at place `record` of the signature.
#[inline]
fn wait_words(k: &mut impl Sink, actor: u64, record: usize) {
    k.word(actor);
    k.word(WAIT);
    k.word(record as u64);
}

/// The words of `op`; false for an operation that is never held (AG4).
#[inline]
fn op_words(k: &mut impl Sink, actor: u64, op: &Op, places: &Places) -> bool {
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
                        mem_words(k, mem, places);
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
            mem_words(k, src, places);
            mem_words(k, dst, places);
        }
        Work::Memset { dst, .. } => {
            // The byte is not part of it: a replay updates it in place, as a kernel's scalar.
            k.word(MEMSET);
            mem_words(k, dst, places);
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

/// The words of memory `m`: its allocation by identity, or by the place of the window's call
/// that allocated it (`places`).
#[inline]
fn mem_words(k: &mut impl Sink, m: &MemRef, places: &Places) {
    let place = match places.is_empty() {
        true => None,
        false => places.get(&alloc_addr(&m.alloc)).map(|p| p.1),
    };
    match place {
        Some(p) => {
            k.word(BY_PLACE);
            k.word(p as u64);
        }
        None => {
            k.word(Arc::as_ptr(&m.alloc) as usize as u64);
            k.anchor(|| Anchor::Alloc(Arc::downgrade(&m.alloc)));
        }
    }
    k.word(m.offset as u64);
    k.word(m.len as u64);
}

/// A holdable call as [`Ctx::admit`](super::entry::Ctx) sees it: compared with remembered keys
/// in place, its own key built only when the window records a new signature.
pub(super) enum Call<'a> {
    Op {
        actor: u64,
        op: &'a Op,
    },
    Record {
        actor: u64,
        event: &'a Arc<dyn BackendEvent>,
        internal: bool,
    },
    /// A wait for the event the call at place `record` of the signature recorded.
    Wait {
        actor: u64,
        record: usize,
    },
    /// A stream-ordered allocation of `bytes` from the device's pool (MM1).
    Alloc {
        actor: u64,
        bytes: usize,
    },
    /// The stream-ordered free of the memory the call at place `alloc` allocated.
    Free {
        actor: u64,
        alloc: usize,
    },
}

impl Call<'_> {
    /// Put the call's words into `k`; false for a call that is never held (AG4).
    #[inline]
    fn words(&self, k: &mut impl Sink, places: &Places) -> bool {
        match *self {
            Call::Op { actor, op } => op_words(k, actor, op, places),
            Call::Record {
                actor,
                event,
                internal,
            } => {
                record_words(k, actor, event, internal);
                true
            }
            Call::Wait { actor, record } => {
                wait_words(k, actor, record);
                true
            }
            Call::Alloc { actor, bytes } => {
                k.word(actor);
                k.word(ALLOC);
                k.word(bytes as u64);
                true
            }
            Call::Free { actor, alloc } => {
                k.word(actor);
                k.word(FREE);
                k.word(alloc as u64);
                true
            }
        }
    }

    /// True if `key` names this call: the key [`Keys::push`] would append, without building
    /// it.
    #[inline]
    pub fn is(&self, key: KeyRef<'_>, places: &Places) -> bool {
        let mut c = Compare {
            words: key.0,
            at: 0,
            same: true,
        };
        self.words(&mut c, places) && c.same && c.at == key.0.len()
    }
}

#[cfg(test)]
impl Keys {
    /// A signature of calls given as (stream, what): `None` a launch of one kernel, `Some((wait,
    /// event))` a record (`wait` false) or wait of an event (for the event's latest record
    /// before it, which the test must have given).
    pub fn of_test_calls(calls: &[(u64, Option<(bool, u64)>)]) -> Keys {
        let mut k = Keys::default();
        let mut latest: Vec<(u64, usize)> = Vec::new();
        for (p, &(actor, what)) in calls.iter().enumerate() {
            k.word(actor);
            match what {
                None => k.words.extend([LAUNCH, 7]),
                Some((false, id)) => {
                    latest.retain(|l| l.0 != id);
                    latest.push((id, p));
                    k.words.extend([RECORD, 0]);
                }
                Some((true, id)) => {
                    let at = latest
                        .iter()
                        .find(|l| l.0 == id)
                        .expect("a recorded event")
                        .1;
                    k.words.extend([WAIT, at as u64]);
                }
            }
            k.ends.push(k.words.len() as u32);
            k.anchor_ends.push(0);
        }
        k
    }
}
