//! C6 of `graph_cond.rs`: before each launch of a graph with conditional nodes, the managed
//! memory its operations use is prefetched to the device, on the launch's stream.
//!
//! Why: on two H200s (CUDA 13 driver), a graph with a while node whose other kernels fault
//! pages of managed memory in (pages the host had just read or written) fails now and then
//! with `CUDA_ERROR_LAUNCH_FAILED`, sticky for the process. Raw CUDA does the same:
//! `benches/cuda/while_managed_probe.cu` fails within 30 to 75 launches of such a graph, and
//! ran 1,000 launches clean with the prefetch before each (its mode 4); 400 launches each ran
//! clean without the while node (mode 1), without the host's touch (mode 2), or with device
//! memory (mode 3). The differential fuzzer found it (`tests/fuzz_found`, F11). An `if` node did not fail in 1,000
//! launches; the prefetch goes before every graph with conditional nodes all the same, since
//! they run through the same device-side scheduling. Devices without concurrent managed access
//! migrate managed memory at every launch anyway (no page faults), so they get no prefetch.

use std::collections::HashSet;

use super::driver::{self, St};
use super::shared::DeviceShared;
use crate::backend::contract::graph::CondNode;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::Op;
use crate::types::MemKind;

/// The range `m` covers, if it is managed memory (only the bytes the graph uses: a prefetch's
/// cost grows with its size even where the pages are on the device already).
fn managed(m: &MemRef) -> Option<(u64, usize)> {
    (m.kind() == MemKind::Managed && m.len > 0).then(|| (m.addr(), m.len))
}

/// True if `op` touches managed memory: an update that replaces such an op, or puts one in,
/// changes what [`managed_ranges`] gives.
pub(super) fn uses_managed(op: &Op) -> bool {
    let mut any = false;
    op.for_each_access(|m, _, _| any |= managed(m).is_some());
    any
}

/// The managed memory (address, bytes) of `ops` (the top-level operations as resolved now) and
/// of `bodies` (the conditional nodes' bodies): what [`prefetch`] moves before each launch of a
/// graph with conditional nodes (C6). Empty where the device has no concurrent managed access.
pub(super) fn managed_ranges(
    shared: &DeviceShared,
    ops: &[Option<Op>],
    bodies: &[CondNode],
) -> Vec<(u64, usize)> {
    if !shared.props.concurrent_managed_access {
        return Vec::new();
    }
    let mut ranges = HashSet::new();
    let mut note = |m: &MemRef, _, _| ranges.extend(managed(m));
    ops.iter()
        .flatten()
        .for_each(|op| op.for_each_access(&mut note));
    for n in bodies.iter().flat_map(|c| &c.bodies).flat_map(|b| b.iter()) {
        n.for_each_access(&mut note);
    }
    ranges.into_iter().collect()
}

/// Prefetch `ranges` ([`managed_ranges`]) to the device on `s`, before a launch there (C6).
/// Best effort: it is a workaround, and a failed prefetch leaves the launch as it was without
/// it (a sticky error shows at the launch). D2: the device's context is current.
pub(super) fn prefetch(shared: &DeviceShared, ranges: &[(u64, usize)], s: St) {
    let here = driver::memory::location(false, shared.ctx.ordinal as i32);
    for &(addr, bytes) in ranges {
        // SAFETY: `addr..addr + bytes` is managed memory an operation of the graph holds, and
        // the launch enqueued after this keeps the operations until it completed (G1, G2); `s`
        // is a live stream of the current context (D1, D2).
        let _ = unsafe { driver::memory::prefetch_async(addr, bytes, here, s) };
    }
}
