//! Pageable host memory as a copy's source or destination (issue 27 item 14): memory the
//! program allocated normally — not page-locked — that graph copy nodes and captured copies
//! reach, as CUDA's memcpy nodes and captured `cudaMemcpyAsync` take `malloc`ed memory.
//!
//! Rules:
//! 1. The memory is owned by its allocation (the program's `Vec` moves into it) and freed with
//!    it, after every operation and graph that uses it is gone (MM2, GR4): no borrow of the
//!    program's can dangle.
//! 2. It is host memory of kind pinned for every layer above the backends (host views wait for
//!    device accesses, MM3; a graph launch refuses to run while the host views it), portable
//!    (usable by every device, as CUDA copies pageable memory for any device), not mapped
//!    (no kernel argument).
//! 3. On CUDA a copy to or from it is the driver's pageable copy: a memcpy node reads or writes
//!    it when the node runs; a stream copy to it returns once done, as `cudaMemcpyAsync` to
//!    pageable memory does.

use std::any::Any;
use std::sync::Arc;

use crate::backend::contract::memory::{Allocation, HostMem, Release};
use crate::types::MemKind;

/// Rule 1: the owner goes with the allocation's release.
struct Owned(#[allow(dead_code)] Box<dyn Any + Send + Sync>);

impl Release for Owned {
    fn release(&self, _addr: u64, _bytes: usize) {}
}

/// Rule 2: an allocation of the `bytes` at `ptr` that `owner` keeps valid, for device
/// `device_id`.
///
/// # Safety
/// `ptr..ptr + bytes` stays valid while `owner` lives, and nothing but the allocation's
/// holders touches it.
pub(crate) unsafe fn pageable(
    ptr: *mut u8,
    bytes: usize,
    device_id: u64,
    owner: Box<dyn Any + Send + Sync>,
) -> Arc<Allocation> {
    let host = HostMem {
        portable: true,
        ..HostMem::default()
    };
    Allocation::new_host(
        ptr as usize as u64,
        bytes,
        MemKind::Pageable,
        device_id,
        host,
        Box::new(Owned(owner)),
    )
}
