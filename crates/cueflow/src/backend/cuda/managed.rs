//! Managed memory on CUDA (HM4): `cuMemAllocManaged`, prefetches (`cuMemPrefetchAsync`) and
//! attachments (`cuStreamAttachMemAsync`) as the CUDA side of an external stream operation,
//! and advice (`cuMemAdvise`).

use std::sync::Arc;

use cudarc::driver::sys;

use super::driver::{self, CuError, CuResult, St};
use super::memory;
use super::shared::DeviceShared;
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::ExternalCuda;
use crate::error::Result;
use crate::types::ManagedOp;
use crate::types::{Advice, AttachMode, MemLocation};

fn attach_flags(mode: AttachMode) -> u32 {
    let f = match mode {
        AttachMode::Global => sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL,
        AttachMode::Host => sys::CUmemAttach_flags::CU_MEM_ATTACH_HOST,
        AttachMode::Single => sys::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE,
    };
    f as u32
}

fn location(shared: &DeviceShared, at: MemLocation) -> sys::CUmemLocation {
    match at {
        MemLocation::Host => driver::memory::location(true, 0),
        MemLocation::Device => driver::memory::location(false, shared.ctx.ordinal as i32),
        MemLocation::Ordinal(ordinal) => driver::memory::location(false, ordinal as i32),
    }
}

/// `bytes` of zeroed managed memory (the caller made the context current).
pub(super) fn alloc(
    shared: &Arc<DeviceShared>,
    bytes: usize,
    attach: AttachMode,
) -> CuResult<Arc<Allocation>> {
    // D2: the caller made the context current.
    let p = driver::memory::alloc_managed(bytes.max(1), attach_flags(attach))?;
    let alloc = memory::managed_block(&shared.ctx, shared.device_id, p, bytes);
    // Zeroed, as every cueflow allocation the host sees: through the host mapping, before any
    // device work can reach it.
    // SAFETY: D2; `p` is `bytes` of fresh managed memory nobody else references.
    unsafe { driver::memory::memset_d8(p, 0, bytes) }?;
    Ok(alloc)
}

/// The CUDA side of `op` on `mem`: enqueued on the raw stream it is given (in stream order,
/// or captured into a graph). The closure holds `mem`, so the memory outlives the operation
/// (MM2).
pub(super) fn side(shared: &Arc<DeviceShared>, mem: &MemRef, op: ManagedOp) -> ExternalCuda {
    let mem = mem.clone();
    let loc = match op {
        ManagedOp::Prefetch(at) => Some(location(shared, at)),
        ManagedOp::Attach(_) => None,
    };
    Arc::new(move |stream, _ctx, _buffers| {
        let s = St(stream as sys::CUstream);
        let r = match (op, loc) {
            // SAFETY: `s` is the live stream the operation is enqueued on; the range is
            // managed memory held by this closure until the operation completed (MM2).
            (ManagedOp::Prefetch(_), Some(l)) => unsafe {
                driver::memory::prefetch_async(mem.addr(), mem.len, l, s)
            },
            // SAFETY: as above; the attachment covers the whole allocation, which `mem`
            // starts at (core attaches whole allocations only).
            (ManagedOp::Attach(mode), _) => unsafe {
                driver::memory::attach_async(s, mem.alloc.addr, attach_flags(mode))
            },
            (ManagedOp::Prefetch(_), None) => Ok(()),
        };
        r.map_err(CuError::to_error)
    })
}

/// Apply `advice` to `mem` for this device (the caller made the context current).
pub(super) fn advise(shared: &Arc<DeviceShared>, mem: &MemRef, advice: Advice) -> Result<()> {
    use sys::CUmem_advise::*;
    let here = location(shared, MemLocation::Device);
    let (a, loc) = match advice {
        Advice::SetReadMostly => (CU_MEM_ADVISE_SET_READ_MOSTLY, here),
        Advice::UnsetReadMostly => (CU_MEM_ADVISE_UNSET_READ_MOSTLY, here),
        Advice::SetPreferredLocation(at) => {
            (CU_MEM_ADVISE_SET_PREFERRED_LOCATION, location(shared, at))
        }
        Advice::UnsetPreferredLocation => (CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, here),
        Advice::SetAccessedBy => (CU_MEM_ADVISE_SET_ACCESSED_BY, here),
        Advice::UnsetAccessedBy => (CU_MEM_ADVISE_UNSET_ACCESSED_BY, here),
    };
    // SAFETY: D2; the range is managed memory of the process, held by `mem`.
    unsafe { driver::memory::advise(mem.addr(), mem.len, a, loc) }.map_err(CuError::to_error)
}
