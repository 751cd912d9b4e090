//! Enqueuing one [`Op`] on a driver stream: copies by memory-kind pair, memset, kernel launch
//! (parameters packed in order: a buffer as its 8-byte device address, a scalar as its bytes)
//! and host functions through a trampoline that borrows the function from the keepalive queue.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};

use super::driver::{memory as mem, module as modl, peer};

use super::context::forget_bound;
use super::driver::{stream as drv_stream, CuError, CuResult, St};
use super::module::{enable_shared, LoadedKernel};
use super::queue::HostFnCall;
use super::shared::DeviceShared;
use crate::backend::contract::kernel::{KernelArg, KernelInner, Launch};
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{ExternalWork, HostFn, Op, Work};
use crate::error::{Error, Result};
use crate::types::{MemKind, Side};

/// Arguments packed on the stack; longer lists use the heap.
const INLINE_ARGS: usize = 16;

/// Load `l`'s kernel for the device and check its arguments against the kernel's parameters,
/// so a mismatch is refused (ER3) instead of reading past the argument list. Context current.
#[inline]
pub(super) fn prepare(shared: &DeviceShared, l: &Launch) -> Result<Arc<LoadedKernel>> {
    let k = load(shared, &l.kernel)?;
    check_loaded(&k, l)?;
    Ok(k)
}

/// The kernel a graph's previous kernel node loaded, and its function ([`prepare_node`]).
pub(super) type LastKernel = std::cell::RefCell<Option<(Arc<KernelInner>, Arc<LoadedKernel>)>>;

/// [`prepare`] for a graph's nodes, where the same kernel often comes many times in a row:
/// `last` keeps the kernel the previous node loaded (a pointer comparison instead of the
/// lookup); `then` gets the prepared kernel.
#[inline]
pub(super) fn prepare_node<R>(
    shared: &DeviceShared,
    l: &Launch,
    last: &LastKernel,
    then: impl FnOnce(&LoadedKernel) -> R,
) -> Result<R> {
    let mut last = last.borrow_mut();
    // Borrowed, not cloned: a node costs no reference count of the kernel.
    let (_, k) = match &mut *last {
        Some(same) if Arc::ptr_eq(&same.0, &l.kernel) => same,
        slot => slot.insert((l.kernel.clone(), load(shared, &l.kernel)?)),
    };
    check_loaded(k, l)?;
    Ok(then(k))
}

/// The checks of [`prepare`] once `k` is loaded: arguments against parameters, shared memory.
/// Small enough to inline into every launch; the refusal is worded out of line.
#[inline]
fn check_loaded(k: &Arc<LoadedKernel>, l: &Launch) -> Result<()> {
    if let Some(params) = &k.params {
        let fits = params.len() == l.args.len()
            && l.args.iter().zip(params).all(|(a, &p)| arg_bytes(a) == p);
        if !fits {
            return Err(arguments_refused(params, l));
        }
    }
    if l.shared_bytes > 48 * 1024 {
        return enable_shared(k, l.shared_bytes);
    }
    Ok(())
}

/// The bytes argument `a` passes: a buffer its 8-byte device address, a scalar its size.
#[inline]
fn arg_bytes(a: &KernelArg) -> usize {
    match a {
        KernelArg::Buffer { .. } => 8,
        KernelArg::Scalar { size, .. } => *size,
    }
}

/// Why `l`'s arguments do not fit the kernel's `params` (ER3): the count, or the first
/// argument whose size differs.
#[cold]
#[inline(never)]
fn arguments_refused(params: &[usize], l: &Launch) -> Error {
    let bad = |why: String| Error::InvalidArgument {
        kernel: l.kernel.name.clone(),
        why,
    };
    if params.len() != l.args.len() {
        return bad(format!(
            "the kernel takes {} parameters but {} arguments were given",
            params.len(),
            l.args.len()
        ));
    }
    for (i, (a, &p)) in l.args.iter().zip(params).enumerate() {
        if arg_bytes(a) != p {
            let what = match a {
                KernelArg::Buffer { .. } => "a buffer (an 8-byte device address)".to_string(),
                KernelArg::Scalar { size, ty_name, .. } => {
                    format!("a {size}-byte scalar ({ty_name})")
                }
            };
            return bad(format!(
                "argument {i} is {what} but parameter {i} is {p} bytes"
            ));
        }
    }
    bad("the arguments do not fit the kernel's parameters".into())
}

/// `kernel`'s function on the device: compiled (or found in the caches) and loaded the first
/// time, a lookup afterwards (KC2). Context current.
#[inline]
pub(super) fn load(shared: &DeviceShared, kernel: &Arc<KernelInner>) -> Result<Arc<LoadedKernel>> {
    kernel.loaded_for(shared.device_id, || {
        let k = shared.modules.load(kernel)?;
        shared.loaded_by(kernel);
        Ok(k)
    })
}

/// The error for a failed launch that does not poison the device (KN1).
pub(super) fn launch_error(e: &CuError, l: &Launch) -> Option<Error> {
    match e.code {
        CUresult::CUDA_ERROR_INVALID_VALUE | CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => {
            Some(Error::InvalidLaunch {
                kernel: l.kernel.name.clone(),
                why: format!(
                    "the driver refused grid {:?}, block {:?}, {} shared bytes: {}",
                    l.grid,
                    l.block,
                    l.shared_bytes,
                    super::driver::error_name(e.code)
                ),
            })
        }
        _ => None,
    }
}

/// Enqueue `op` on `s` (context current, D2). A host function (and a host-to-host copy, which
/// runs as one) returns the callback data the keepalive queue must hold until it ran (Q1).
#[inline]
pub(super) fn enqueue(
    s: St,
    op: &Op,
    kernel: Option<&LoadedKernel>,
    shared: &DeviceShared,
) -> CuResult<Option<Box<HostFnCall>>> {
    match &op.work {
        Work::Copy { dst, src } => copy(s, dst, src, shared),
        Work::Memset { dst, value } => {
            if dst.len > 0 {
                // SAFETY: core checked the range lies inside the allocation; the op keeps it
                // alive until the memset completed (Q1–Q3, MM2); D1, D2.
                unsafe { mem::memset_d8_async(dst.addr(), *value, dst.len, s) }?;
            }
            Ok(None)
        }
        Work::Launch(l) => {
            let k = kernel.expect("launches are prepared before enqueue");
            if let Some(report) = op.read_check() {
                // The sanitizer asks: check the read arguments around the kernel (AC7).
                return super::verify::launch_checked(s, l, k, shared, report);
            }
            launch(s, l, k)?;
            Ok(None)
        }
        Work::HostFn(h) => host_call(s, h.f.clone(), h.fault_name(), shared).map(Some),
        Work::Collective(_) => {
            unreachable!("collectives reach CUDA streams only through their NCCL communicator")
        }
        Work::External(_) => unreachable!("external operations are enqueued by CudaStream::submit"),
        Work::Word { dst, src } => word(s, dst, src, shared).map(|()| None),
    }
}

/// Enqueue a copy of `src` to `dst` on `s` by its memory kinds (context current, D2); a
/// host-to-host copy runs as a host function, whose callback data it returns (Q1).
fn copy(
    s: St,
    dst: &MemRef,
    src: &MemRef,
    shared: &DeviceShared,
) -> CuResult<Option<Box<HostFnCall>>> {
    let n = dst.len;
    if n == 0 {
        return Ok(None);
    }
    let (d, sa) = (dst.addr(), src.addr());
    // SAFETY (all four arms): core checked both ranges lie inside their allocations,
    // have equal lengths and do not overlap (CP4); the op, kept in the stream's queue
    // until the copy completed (Q1–Q3), keeps both allocations alive (MM2). Pinned
    // addresses are host pointers from cuMemHostAlloc; device addresses are CUdeviceptrs
    // of this context (D2); `s` is a live stream of the context (D1).
    if names_contexts(dst, src, shared) {
        return peer_copy(s, dst, src, shared).map(|()| None);
    }
    if dst.kind() == MemKind::Managed || src.kind() == MemKind::Managed {
        // Managed memory (HM4): one address for host and devices; the driver finds
        // where the pages are (unified addressing).
        // SAFETY: the four arms' invariant above; both are unified addresses.
        unsafe { mem::copy_async(d, sa, n, s) }?;
        return Ok(None);
    }
    match (src.kind().side(), dst.kind().side()) {
        (Side::Host, Side::Device) => {
            // SAFETY: the four arms' invariant above; `sa` is a pinned host pointer.
            unsafe { mem::copy_htod_async(d, sa as usize as *const c_void, n, s) }?
        }
        (Side::Device, Side::Host) => {
            // SAFETY: the four arms' invariant above; `d` is a pinned host pointer.
            unsafe { mem::copy_dtoh_async(d as usize as *mut c_void, sa, n, s) }?
        }
        (Side::Device, Side::Device) => {
            // SAFETY: the four arms' invariant above; both are device pointers.
            unsafe { mem::copy_dtod_async(d, sa, n, s) }?
        }
        // cuMemcpyAsync between two host buffers is synchronous with the host (it would
        // wait until the stream reaches it, ST3), so the copy is a host function in
        // stream order instead.
        (Side::Host, Side::Host) => {
            let (d, sa) = (d as usize, sa as usize);
            let copy: HostFn = Arc::new(move || {
                // SAFETY: as above: both ranges are in bounds and disjoint, and the op
                // in the keepalive queue holds both allocations until this host
                // function completed (Q2, Q3); MM3 keeps the host off them meanwhile.
                unsafe { std::ptr::copy_nonoverlapping(sa as *const u8, d as *mut u8, n) }
            });
            return host_call(s, copy, "host-to-host copy".into(), shared).map(Some);
        }
    }
    Ok(None)
}

/// Enqueue a 4-byte word copy of `src` to `dst` on `s` (context current, D2).
fn word(s: St, dst: &MemRef, src: &MemRef, shared: &DeviceShared) -> CuResult<()> {
    // A 4-byte copy engine transfer between pinned staging memory and device memory:
    // the engine moves an aligned word in one transaction, so kernels that read or
    // write it atomically meanwhile see the old or the new value, never a mix. The copy
    // engine, not a kernel, so it runs while every multiprocessor is busy.
    // Core made `dst` and `src` 4 bytes each, one device and one pinned, held by the op
    // until the copy completed (Q1–Q3, MM2); D1, D2.
    if dst.is_peer_of(src) {
        return peer_copy(s, dst, src, shared);
    }
    let (d, sa) = (dst.addr(), src.addr());
    match (src.kind().side(), dst.kind().side()) {
        (Side::Host, Side::Device) => {
            // SAFETY: the 4-byte ranges above: pinned source, device destination.
            unsafe { mem::copy_htod_async(d, sa as usize as *const c_void, 4, s) }?
        }
        // SAFETY: the 4-byte ranges above: device source, pinned destination.
        _ => unsafe { mem::copy_dtoh_async(d as usize as *mut c_void, sa, 4, s) }?,
    }
    Ok(())
}

/// True for a copy between device memory that is not all the stream's own device's (MD3):
/// between two devices, or within another device's memory on this device's stream.
/// `cuMemcpyDtoDAsync` takes both addresses in the stream's context, which another device's
/// memory is not without peer access (`CUDA_ERROR_INVALID_VALUE`), so such a copy names each
/// side's context.
pub(super) fn names_contexts(dst: &MemRef, src: &MemRef, shared: &DeviceShared) -> bool {
    let device = |m: &MemRef| m.kind() == MemKind::Device;
    let foreign = |m: &MemRef| m.alloc.device_id != shared.device_id;
    device(dst) && device(src) && (foreign(dst) || foreign(src))
}

/// A copy between the memory of two GPUs (MD3): direct when peer access is possible (enabled
/// once per pair), staged through the host by the driver otherwise. Context current (D2).
fn peer_copy(s: St, dst: &MemRef, src: &MemRef, shared: &DeviceShared) -> CuResult<()> {
    let [d, sc] = sides_of(dst, src)?;
    // A pair whose peer access is impossible or was refused copies through the host.
    let _ = super::shared::enable_peer(&d, &sc, &shared.ctx);
    // SAFETY: D1 (`s` is live; both contexts belong to open devices held above), D2. Core
    // checked both ranges lie inside their allocations and have equal lengths (CP4); the op,
    // kept in the stream's queue until the copy completed (Q1–Q3), keeps both alive (MM2).
    unsafe {
        peer::copy_async(
            dst.addr(),
            d.ctx.raw(),
            src.addr(),
            sc.ctx.raw(),
            dst.len,
            s,
        )
    }
}

/// The devices of a copy's two sides (open devices: their memory's contexts are theirs).
fn sides_of(dst: &MemRef, src: &MemRef) -> CuResult<[Arc<DeviceShared>; 2]> {
    let side = |id: u64| {
        super::shared::shared_of(id).ok_or(CuError::new(
            "cuMemcpyPeerAsync",
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
        ))
    };
    Ok([side(dst.alloc.device_id)?, side(src.alloc.device_id)?])
}

/// The context a graph's memcpy node for copy `dst` ← `src` runs in (MD3). A memcpy node
/// resolves both addresses in its one context. Another GPU's pool memory is reachable there
/// once peer access is enabled and its pool grants access; graph memory (a graph's own
/// allocations, [`Allocation::is_borrowed`](crate::backend::contract::memory::Allocation::is_borrowed))
/// only in its own GPU's context. The driver captures no `cuMemcpyPeerAsync`, so a copy that
/// no context reaches both sides of cannot be in a graph (outside one, the driver stages it
/// through the host). The first of these that reaches both sides: the graph's own context,
/// then (not in a conditional node's body, `in_body`, whose nodes share its context) the
/// destination's, then the source's. Context current (D2); it stays current.
pub(super) fn copy_node_ctx(
    dst: &MemRef,
    src: &MemRef,
    shared: &DeviceShared,
    in_body: bool,
) -> Result<Arc<super::context::Ctx>> {
    if !names_contexts(dst, src, shared) {
        return Ok(shared.ctx.clone());
    }
    let [d, sc] = sides_of(dst, src).map_err(CuError::to_error)?;
    // Whether context `c` reaches memory `m` of device `of`. A pair the driver refused counts
    // as unreachable: the copy is refused as Unsupported below (MD3).
    let reaches = |c: &DeviceShared, m: &MemRef, of: &DeviceShared| {
        c.device_id == of.device_id
            || (!m.alloc.is_borrowed()
                && matches!(super::shared::enable_peer(c, of, &shared.ctx), Ok(true)))
    };
    let candidates: &[&DeviceShared] = match in_body {
        true => &[shared],
        false => &[shared, &d, &sc],
    };
    match (candidates.iter()).find(|c| reaches(c, dst, &d) && reaches(c, src, &sc)) {
        Some(c) => Ok(c.ctx.clone()),
        None => Err(Error::Unsupported(format!(
            "a copy from GPU {} to GPU {} inside a CUDA graph of GPU {}: no context reaches \
             both sides (peer access between the GPUs, and graph memory only from its own \
             GPU; outside a graph the copy runs through the host)",
            sc.ctx.ordinal, d.ctx.ordinal, shared.ctx.ordinal
        ))),
    }
}

/// Call external operation `x`'s CUDA side with stream `s` and the device's context (a panic
/// becomes an error), then bind the device's context again, which the closure may have
/// changed (D2). Returns what the closure returned, then how the binding went.
pub(super) fn call_external(
    shared: &DeviceShared,
    x: &ExternalWork,
    s: St,
) -> (Result<()>, Result<()>) {
    let called = match &x.cuda {
        None => Err(Error::Unsupported(format!(
            "external operation `{}` has no CUDA side",
            x.name
        ))),
        Some(f) => crate::panics::catch(|| {
            // The declared buffers' addresses (graph memory: this instantiation's, GR11).
            // Host memory: the address kernels use (the device view of mapped memory, HM3).
            let addrs: Vec<u64> = x
                .accesses
                .iter()
                .map(|(m, _)| m.alloc.kernel_addr() + m.offset as u64)
                .collect();
            f(s.0 as *mut c_void, shared.ctx.raw() as *mut c_void, &addrs)
        })
        .unwrap_or_else(|caught| {
            Err(Error::Unsupported(format!(
                "external operation `{}` panicked while enqueueing: {}",
                x.name,
                caught.detail("panicked")
            )))
        }),
    };
    forget_bound();
    (called, shared.enter())
}

/// Enqueue `f` as a host function; returns the callback data the queue must keep (Q1).
pub(super) fn host_call(
    s: St,
    f: HostFn,
    name: String,
    shared: &DeviceShared,
) -> CuResult<Box<HostFnCall>> {
    let call = Box::new(HostFnCall {
        f,
        name,
        sticky: shared.sticky.clone(),
    });
    let user = &*call as *const HostFnCall as *mut c_void;
    // SAFETY: D1, D2. `user` points into `call`, which the caller moves into the stream's
    // keepalive queue (the Box's heap address does not change) and which is retired only after
    // the marker recorded after this callback completed (Q2, Q3), so it outlives the callback.
    // If this call fails the callback never runs and `call` is dropped.
    unsafe { drv_stream::launch_host_func(s, Some(host_fn_trampoline), user) }?;
    Ok(call)
}

/// 16-byte slots `l`'s arguments take packed: a buffer one (its 8-byte device address), a
/// scalar as many as its bytes need (KC4: structs up to the parameter limit).
fn slots(l: &Launch) -> usize {
    l.args
        .iter()
        .map(|a| match a {
            KernelArg::Buffer { .. } => 1,
            KernelArg::Scalar { size, .. } => size.div_ceil(16).max(1),
        })
        .sum()
}

/// Pack `l`'s arguments into `vals` (a buffer as its 8-byte device address, a scalar as its
/// bytes, each starting at a 16-byte slot), with `ptrs[i]` pointing at argument `i`'s first
/// slot, as `cuLaunchKernel` and kernel nodes take them (the driver copies each parameter's
/// size from its pointer). `vals` has [`slots`] entries.
fn pack_args(l: &Launch, vals: &mut [[u64; 2]], ptrs: &mut [*mut c_void]) {
    let mut at = 0;
    for (i, a) in l.args.iter().enumerate() {
        let used = match a {
            KernelArg::Buffer { mem, .. } => {
                // Mapped host memory through its device view (HM3).
                vals[at][0] = mem.alloc.kernel_addr() + mem.offset as u64;
                1
            }
            KernelArg::Scalar { bytes, size, .. } => {
                let n = size.div_ceil(16).max(1);
                bytemuck::cast_slice_mut::<[u64; 2], u8>(&mut vals[at..at + n])[..*size]
                    .copy_from_slice(&bytes[..*size]);
                n
            }
        };
        ptrs[i] = vals[at].as_mut_ptr() as *mut c_void;
        at += used;
    }
}

/// Kernel node parameters of `l` (function `k`), handed to `add`, which adds or updates the
/// node with them: the arguments are packed as [`with_packed`] packs them, valid only during
/// `add` — the driver copies them there (G4 of `graph.rs`).
pub(super) fn with_node_params<R>(
    l: &Launch,
    k: &LoadedKernel,
    add: impl FnOnce(&sys::CUDA_KERNEL_NODE_PARAMS) -> R,
) -> R {
    with_packed(l, |ptrs| {
        let [gx, gy, gz] = l.grid;
        let [bx, by, bz] = l.block;
        add(&sys::CUDA_KERNEL_NODE_PARAMS {
            func: k.func,
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: l.shared_bytes,
            kernelParams: ptrs.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        })
    })
}

/// Enqueue launch `l` of `k` on `s` (context current, D2).
pub(super) fn launch(s: St, l: &Launch, k: &LoadedKernel) -> CuResult<()> {
    with_packed(l, |ptrs| enqueue_packed(s, l, k, ptrs))
}

/// Call `f` with `l`'s arguments packed ([`pack_args`]): on the stack up to [`INLINE_ARGS`]
/// slots, on the heap beyond; the pointers are valid only during `f`.
#[inline]
fn with_packed<R>(l: &Launch, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
    let (n, m) = (l.args.len(), slots(l));
    // Most kernels: arrays small enough to clear with a few stores (clearing the full size
    // called `memset`, ~16 instructions a launch).
    if m <= FEW_ARGS {
        with_packed_in::<FEW_ARGS, R>(l, n, m, f)
    } else if m <= INLINE_ARGS {
        with_packed_in::<INLINE_ARGS, R>(l, n, m, f)
    } else {
        with_packed_spilled(l, f)
    }
}

/// Arguments that take at most this many slots are packed in the smallest arrays.
const FEW_ARGS: usize = 6;

/// [`with_packed`] in arrays of `N` slots (`m` ≤ `N` used, for `n` arguments).
#[inline]
fn with_packed_in<const N: usize, R>(
    l: &Launch,
    n: usize,
    m: usize,
    f: impl FnOnce(&mut [*mut c_void]) -> R,
) -> R {
    let mut vals = [[0u64; 2]; N];
    let mut ptrs = [std::ptr::null_mut::<c_void>(); N];
    pack_args(l, &mut vals[..m], &mut ptrs[..n]);
    f(&mut ptrs[..n])
}

/// [`with_packed`] for arguments that take more than [`INLINE_ARGS`] slots.
#[cold]
fn with_packed_spilled<R>(l: &Launch, f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
    let mut vals = vec![[0u64; 2]; slots(l)];
    let mut ptrs = vec![std::ptr::null_mut::<c_void>(); l.args.len()];
    pack_args(l, &mut vals, &mut ptrs);
    f(&mut ptrs)
}

/// `cuLaunchKernel` of `l` with `ptrs`, the arguments [`pack_args`] packed (context current,
/// D2).
#[inline]
fn enqueue_packed(s: St, l: &Launch, k: &LoadedKernel, ptrs: &mut [*mut c_void]) -> CuResult<()> {
    // SAFETY: D1 (`k.func` is loaded in the device's module cache; `s` is live), D2. `ptrs`
    // holds one pointer per kernel parameter (count and sizes checked by `prepare` where the
    // driver reports them), each to the argument's bytes packed by `pack_args` (slots of 16
    // bytes, 8-byte aligned: the driver copies them bytewise; at least as many bytes as the
    // parameter's size), which the caller keeps until this returns (the driver copies the
    // arguments before returning). Buffer addresses stay valid while the kernel runs: the op
    // holds them until it completed (Q1–Q3, MM2).
    unsafe {
        modl::launch(
            k.func,
            l.grid,
            l.block,
            l.shared_bytes,
            s,
            ptrs.as_mut_ptr(),
        )
    }
}

/// The `cuLaunchHostFunc` callback. Runs the function with runtime calls refused (HF2) and any
/// panic contained (a panic must not unwind into the driver). It only borrows: nothing that may
/// free memory or call the driver is dropped here.
pub(super) unsafe extern "C" fn host_fn_trampoline(user: *mut c_void) {
    // SAFETY: `user` is the `HostFnCall` that `enqueue` passed, kept alive by the stream's
    // keepalive queue until after this callback returned (Q2, Q3).
    let call = unsafe { &*(user as *const HostFnCall) };
    // Caught quietly: the panic becomes the device's sticky error, which every later call
    // returns (no panic output for an error that is returned, issue 16 item 9).
    let r = crate::panics::catch(|| super::context::as_callback(|| (call.f)()));
    if let Err(caught) = r {
        let detail = caught.detail("panicked");
        call.sticky.set(Error::HostFnFault {
            device: call.sticky.device.clone(),
            name: call.name.clone(),
            detail,
        });
    }
}
