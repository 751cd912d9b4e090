//! Registered host memory (HM1, `cuMemHostRegister`) and the device view of mapped memory
//! (HM3, `cuMemHostGetDevicePointer`).
//!
//! A registration's release runs when its last holder drops — the program's handle and every
//! operation that used it, which the streams' keepalive queues drop only once the device
//! finished them (MM2) — so `cuMemHostUnregister` never runs under device work. It then drops
//! the owner of the memory (a `Vec` handed to the registration), after unregistering. When the
//! program's handle goes last, that happens in its drop; when an operation goes last, inside
//! whatever call retired it, it happens on the freeing thread instead (the driver call waits
//! for all of the GPU's work), and a registration of the same pages meanwhile waits for it.

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::sys;
use parking_lot::Mutex;

use super::context::{in_context, in_host_fn, Ctx};
use super::driver::{self, CuResult};
use crate::backend::contract::memory::{own_drop, Allocation, HostMem, Release};
use crate::types::{MemKind, PinnedFlags};

/// The device address of mapped host memory at `p`, or 0 when it is `p` itself (unified
/// addressing, every 64-bit system CUDA 12 supports).
pub(super) fn device_view(p: *mut u8) -> CuResult<u64> {
    // SAFETY: D2 (the caller made the context current); `p` is mapped pinned memory of the
    // context (the callers' only use).
    let d = unsafe { driver::memory::host_device_pointer(p as *mut std::ffi::c_void) }?;
    Ok(if d == p as usize as u64 { 0 } else { d })
}

struct Unregister {
    ctx: Arc<Ctx>,
    owner: Mutex<Option<Box<dyn Any + Send + Sync>>>,
}

impl Release for Unregister {
    fn release(&self, addr: u64, _bytes: usize) {
        let ctx = self.ctx.clone();
        let owner = self.owner.lock().take();
        let end = move || {
            in_context(&ctx, || {
                // The wait for running kernels happens before, not inside cuMemHostUnregister,
                // whose wait holds up other threads' launches and copies (a `write_value` that
                // would have ended the kernel it waited for, on an H200).
                ctx.quiesce.once_idle(|| {
                    // SAFETY: `addr` was registered by `register` in this context and nothing
                    // uses it any more (Release runs after every holder is gone, MM2).
                    let _ = unsafe {
                        driver::memory::host_unregister(addr as usize as *mut std::ffi::c_void)
                    };
                });
            });
            drop(owner); // After the unregistration: the owner may own the memory.
        };
        // cuMemHostUnregister waits for all of the GPU's running work (in raw CUDA too:
        // benches/cuda/sync_calls_probe.cu). The program's own drop of its handle, or
        // `RegisteredBuffer::unregister`, may wait, as `cudaHostUnregister` would, and the
        // registration is over when it returns. A release inside another call (a query or a
        // launch retiring the last operation that held the memory) must not make that call
        // wait, for unrelated work or for a kernel that waits for this thread: the freeing
        // thread does it then, and a new registration that meets it waits for it
        // (`flush_releases`). Inside a host function, where no driver call may run, the
        // freeing thread does it too (deferred to after the callback, it would run inside
        // some later call).
        if own_drop() && !in_host_fn() {
            end();
        } else {
            super::memory::later(end);
        }
    }
}

/// Page-lock `bytes` at `ptr` (`cuMemHostRegister`, portable and mapped as `flags` say). The
/// caller made the context current.
///
/// # Safety
/// `ptr..ptr + bytes` stays valid until the allocation's release ran.
pub(super) unsafe fn register(
    ctx: &Arc<Ctx>,
    device_id: u64,
    ptr: *mut u8,
    bytes: usize,
    flags: PinnedFlags,
    owner: Box<dyn Any + Send + Sync>,
) -> CuResult<Arc<Allocation>> {
    let mut f = 0;
    if flags.portable {
        f |= sys::CU_MEMHOSTREGISTER_PORTABLE;
    }
    if flags.mapped {
        f |= sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    }
    let register = || {
        // Out of memory, idle cached pinned blocks go back first (RL3).
        super::memory::retry_oom_pinned(ctx, || {
            // SAFETY: D2; the range is valid memory of this process until the release, which
            // unregisters it (the caller's guarantee).
            unsafe { driver::memory::host_register(ptr as *mut std::ffi::c_void, bytes.max(1), f) }
        })
    };
    match register() {
        // The driver registers whole pages: an ended registration of a page this range shares
        // may still be on the freeing thread. Wait for it once (never inside a host function,
        // where the driver call would be refused anyway).
        Err(e)
            if e.code == sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                && !in_host_fn() =>
        {
            super::memory::flush_frees();
            register()?
        }
        r => r?,
    };
    let view = if flags.mapped {
        device_view(ptr)
    } else {
        Ok(0)
    };
    let device_view = match view {
        Ok(v) => v,
        Err(e) => {
            // SAFETY: registered just above; nothing has used it yet.
            let _ = unsafe { driver::memory::host_unregister(ptr as *mut std::ffi::c_void) };
            return Err(e);
        }
    };
    Ok(Allocation::new_host(
        ptr as usize as u64,
        bytes,
        MemKind::Registered,
        device_id,
        HostMem {
            portable: flags.portable,
            mapped: flags.mapped,
            device_view,
        },
        Box::new(Unregister {
            ctx: ctx.clone(),
            owner: Mutex::new(Some(owner)),
        }),
    ))
}
