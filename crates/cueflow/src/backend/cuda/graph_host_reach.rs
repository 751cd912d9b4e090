//! C6 of `graph_cond.rs`: which graph nodes make the device reach host memory, the nodes that
//! must never run beside a conditional node.
//!
//! Why: a while node running while a kernel reads or writes host memory fails the launch now
//! and then with `CUDA_ERROR_LAUNCH_FAILED`, sticky for the process (two H200s, CUDA 13
//! driver). Raw CUDA does the same, with no cueflow in the process:
//! - `benches/cuda/while_managed_probe.cu` (fuzzer finding F11: a kernel faulting managed
//!   pages in beside a while node) fails within 27 to 75 launches (its mode 0, six tries);
//!   with an edge from the while node to that kernel (its mode 7), 4,000 runs were clean.
//! - `benches/cuda/switch_while_probe.cu` (F12: a kernel writing mapped pinned memory beside a
//!   switch node then a while node) fails within 6 to 238 runs as cueflow built it (its mode
//!   0, four tries), and with device memory in place of the managed memory too (mode 2). With
//!   device memory in place of the mapped memory (mode 3), or an edge between the while node
//!   and that kernel either way (modes 8 and 9), 9,000 runs each were clean; so were 6,000
//!   with the kernel on mapped memory inside the switch node's body (mode 10), where no other
//!   conditional node can run beside it (C4).
//!
//! The edges are made at instantiation, and an update never needs more: GR6 keeps every
//! node's side of the bus (a kernel's buffers keep theirs, a copy its kinds of memory, and a
//! memset sets device memory), so no update makes a node reach host memory that did not.
//!
//! Copies are done by the copy engines: one through registered memory beside the while node
//! made no failure (mode 3 has one), so only copies of managed memory, which fault pages in,
//! count. The same probe fails as fast with the kernel on another stream (mode 11), which no
//! edge inside a graph can order: that case is a known gap (`docs/known-gaps.md`).

use crate::backend::contract::graph::GraphWork;
use crate::backend::contract::op::{Op, Work};
use crate::types::MemKind;

/// True if the node makes the device reach host memory ([`op_reaches_host`]).
pub(super) fn reaches_host(work: &GraphWork) -> bool {
    matches!(work, GraphWork::Op(op) if op_reaches_host(op))
}

/// True if `op` makes the device reach host memory (pinned, mapped, registered, managed or
/// pageable): a kernel, memset, collective or external operation with such an argument, or a
/// copy of managed memory. Host functions run on the host; a stream memory operation names
/// only its device side here (its host side is cueflow's staging).
pub(super) fn op_reaches_host(op: &Op) -> bool {
    let mut reaches = false;
    match &op.work {
        Work::HostFn(_) => {}
        Work::Copy { .. } => {
            op.for_each_access(|m, _, _| reaches |= m.kind() == MemKind::Managed);
        }
        _ => op.for_each_access(|m, _, _| reaches |= m.kind().is_host()),
    }
    reaches
}
