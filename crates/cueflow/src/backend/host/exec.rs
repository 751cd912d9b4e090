//! Executing primitive work on the host device's memory.
//!
//! Host-backend device memory and pinned memory are both host memory, so copies are `memcpy`
//! and memsets are `memset`; what makes them device work is that engines run them, in stream
//! order, while the submitting thread goes on.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use super::kernel::run_host_blocks;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{Op, Work};

/// Bytes per part when memsets and device copies are spread over compute workers.
pub(super) const PART_BYTES: usize = 1 << 20;

/// How many independently runnable parts an op has on the compute engine.
pub(super) fn parts(op: &Op) -> u64 {
    match &op.work {
        // A whole-buffer write (Split::Whole) runs its blocks one after another, as one part.
        Work::Launch(l) if l.serial() => 1,
        Work::Launch(l) => l.blocks(),
        Work::Memset { dst, .. } => dst.len.div_ceil(PART_BYTES) as u64,
        Work::Copy { dst, .. } => dst.len.div_ceil(PART_BYTES) as u64,
        Work::HostFn(_) | Work::Word { .. } | Work::Collective(_) | Work::External(_) => 1,
    }
}

/// Copy a 4-byte flag with one atomic load and one atomic store where the op became ready; it
/// needs no engine.
pub(super) fn run_value_op(op: &Op) {
    let Work::Word { dst, src } = &op.work else {
        unreachable!("not a value op")
    };
    let v = word(src).load(Ordering::SeqCst);
    word(dst).store(v, Ordering::SeqCst);
}

/// The 4 bytes of `m` as an atomic word.
fn word(m: &MemRef) -> &AtomicU32 {
    // SAFETY: core checked `m` is 4 bytes inside its allocation at a 4-aligned offset
    // (allocations are page-aligned); the op holds the allocation (MM2). Every access to these
    // bytes that may run meanwhile is atomic too: core orders plain accesses that conflict
    // with this one (AC6).
    unsafe { &*(m.alloc.host_ptr().add(m.offset) as *const AtomicU32) }
}

/// Run parts `range` of a compute-engine op. May panic (a host kernel that faults); the caller
/// turns that into the device's sticky error.
pub(super) fn run_parts(op: &Op, range: Range<u64>) {
    match &op.work {
        Work::Launch(l) if l.serial() => run_host_blocks(l, 0..l.blocks()),
        Work::Launch(l) => run_host_blocks(l, range),
        Work::Memset { dst, value } => {
            for p in range {
                let (lo, hi) = part_bytes(dst.len, p);
                // SAFETY: core checked dst lies inside its live allocation (CP4) and the op holds
                // the allocation (MM2); parts are disjoint, so workers write disjoint bytes.
                unsafe {
                    dst.alloc
                        .host_ptr()
                        .add(dst.offset + lo)
                        .write_bytes(*value, hi - lo)
                };
            }
        }
        Work::Copy { dst, src } => {
            let n = dst.len.div_ceil(PART_BYTES) as u64;
            copy(dst, src, range, n)
        }
        Work::HostFn(h) => (h.f)(),
        Work::Word { .. } => run_value_op(op),
        Work::Collective(c) => super::collective::run(c),
        Work::External(x) => {
            let host = x
                .host
                .as_ref()
                .expect("core refuses external ops without a host side");
            host(&x.accesses)
        }
    }
}

fn part_bytes(len: usize, part: u64) -> (usize, usize) {
    let lo = part as usize * PART_BYTES;
    (lo, (lo + PART_BYTES).min(len))
}

/// Copy parts `range` of `n_parts` (all of it when `n_parts == 1`) from `src` to `dst`.
pub(super) fn copy(dst: &MemRef, src: &MemRef, range: Range<u64>, n_parts: u64) {
    let (lo, hi) = if n_parts == 1 {
        (0, dst.len)
    } else {
        (
            part_bytes(dst.len, range.start).0,
            part_bytes(dst.len, range.end - 1).1,
        )
    };
    // SAFETY: core checked both ranges lie inside their live allocations, have equal lengths and
    // do not overlap (CP4); the op holds both allocations until it completes (MM2).
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.alloc.host_ptr().add(src.offset + lo),
            dst.alloc.host_ptr().add(dst.offset + lo),
            hi - lo,
        )
    };
}
