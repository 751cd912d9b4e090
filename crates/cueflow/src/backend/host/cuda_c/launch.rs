//! Running a CUDA C launch's blocks: in the device's kernel worker process (HK3), or, as an
//! explicit fallback, in this process.
//!
//! # Where a launch runs
//! * **In the worker** (the default): the compute worker that claimed blocks `range` sends
//!   them to the device's worker process ([`Worker::call`](crate::backend::host::isolate::Worker::call)), which runs the same entry from the
//!   same shared object over the shared arena. A wild write there faults or lands in the
//!   worker's own memory, never in this process (HK3); a crash is the device's sticky fault.
//! * **In this process**, only when the worker cannot reach the launch's memory or there is
//!   none:
//!   - the arena is off (`CUEFLOW_HOST_ARENA=0`, or no `memfd`): memory is heap memory of this
//!     process, which no other process can map;
//!   - `CUEFLOW_HOST_ISOLATE=0`: asked for (debugging a kernel under a debugger, measuring);
//!   - a buffer argument lies outside the arena: memory the program registered
//!     (`RegisteredBuffer`, `cudaHostRegister`) is the program's own pages, allocated by its
//!     allocator, and cannot be mapped into another process. The launch runs here, so that the
//!     program works as it does on a GPU (HK1: `cudaHostRegister` + a kernel over the mapped
//!     pointer is an ordinary CUDA program, e.g. the simpleZeroCopy and simpleStreams
//!     samples); such a launch is not isolated. Refusing it would make HK1 fail for correct
//!     programs; copying the buffer into the arena around the launch would lose the atomics
//!     and in-place updates that several blocks (on several compute workers) make to the same
//!     bytes. The other launches of the program stay isolated.
//!   - the worker could not be started (`WorkerFault::Unavailable` from the spawn): the
//!     launch runs here and the reason is printed once on standard error.
//!
//! # Faults
//! A fault is raised to the scheduler as a [`Blame`]: the launch's own fault names its kernel;
//! when another launch crashed the shared worker under this one, the fault names that kernel,
//! or every kernel that was running (`one of: a, b`) when the worker cannot tell (RL5).

use std::ffi::c_void;
use std::ops::Range;
use std::sync::Arc;

use super::module::{CueflowLaunch, Module};
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::host::isolate::{
    arena, record_bytes, Call, LaunchDesc, ReadOnly, WorkerFault, WorkerSlot, REQUEST_CAP,
};
use crate::types::Access;

/// A CUDA C kernel's fault, raised with `resume_unwind` and turned by the scheduler into the
/// sticky `KernelFault` naming `kernel` (KN2, HK3, RL5): the kernel itself, or, when another
/// launch crashed the shared worker process under this one, the kernel(s) that did.
pub(in crate::backend::host) struct Blame {
    /// What the fault names: one kernel, or `one of: a, b` (RL5).
    pub kernel: String,
    /// What happened.
    pub detail: String,
}

/// True when `CUEFLOW_HOST_ISOLATE=0`: CUDA C launches run in this process.
fn isolate_off() -> bool {
    !crate::config::host_isolate()
}

/// One parameter's bytes (inline up to 16, as most are: no allocation per launch).
type Param = smallvec::SmallVec<[u8; 16]>;

/// Each parameter's bytes as `cuLaunchKernel` takes them (a buffer is its 8-byte address).
fn param_bytes(l: &Launch) -> smallvec::SmallVec<[Param; 8]> {
    l.args
        .iter()
        .map(|a| match a {
            KernelArg::Buffer { mem, .. } => {
                // SAFETY: core checked the range lies inside the live allocation, which the op
                // holds (MM2); only the address is computed here.
                let p = unsafe { mem.alloc.host_ptr().add(mem.offset) };
                Param::from_slice(&(p as u64).to_ne_bytes())
            }
            KernelArg::Scalar { bytes, size, .. } => Param::from_slice(&bytes[..*size]),
        })
        .collect()
}

/// True when every buffer argument of `l` lies in the arena (the worker can reach it).
fn all_in_arena(l: &Launch, arena: &arena::Arena) -> bool {
    l.args.iter().all(|a| match a {
        KernelArg::Buffer { mem, .. } => arena.contains(mem.alloc.host_ptr() as usize),
        KernelArg::Scalar { .. } => true,
    })
}

/// Run blocks `range` of `l` from its compiled CUDA C: in the device's worker process when
/// `slot` is given and the worker can reach the launch's memory, else in this process (see
/// the module docs). `Err` is the fault, naming the kernel to blame.
pub(in crate::backend::host) fn run_blocks(
    m: &Module,
    l: &Launch,
    range: Range<u64>,
    slot: Option<&WorkerSlot>,
) -> Result<(), Blame> {
    let params = param_bytes(l);
    let own = |detail: String| Blame {
        kernel: l.kernel.name.clone(),
        detail,
    };
    let worker = match (slot, arena::global()) {
        (Some(slot), Some(arena)) if !isolate_off() && all_in_arena(l, arena) => match slot.get() {
            Ok(w) => Some(w),
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "cueflow: CUDA C kernels run in this process, not isolated (HK3): {e}"
                    )
                });
                None
            }
        },
        _ => None,
    };
    let Some(worker) = worker else {
        let out = in_process(m, l, range, &params).map_err(own)?;
        return apply_records(&out).map_err(own);
    };
    let desc = LaunchDesc {
        grid: l.grid,
        block: l.block,
        dyn_shared: l.shared_bytes,
        block_begin: range.start as u32,
        block_end: range.end as u32,
    };
    let refs: smallvec::SmallVec<[&[u8]; 8]> = params.iter().map(|p| p.as_slice()).collect();
    let entry = format!("cueflow_run_{}", m.symbol);
    let read_only = read_only_pages(l);
    let call = Call {
        so_path: &m.path,
        symbol: &entry,
        name: &l.kernel.name,
        launch: desc,
        params: &refs,
        read_only: &read_only,
        limit: slot.and_then(WorkerSlot::limit),
    };
    match worker.call(&call) {
        Ok(out) => apply_records(&out).map_err(own),
        Err(f) => Err(blame(&l.kernel.name, f)),
    }
}

/// Whether the launch may share a request with the launches around it (R5 in
/// `isolate/ring.rs`): a CUDA C launch run in the worker (started, reaching all of its
/// memory), compiled already, without a time limit (W6 times each request). If not, it goes
/// the usual way ([`run_blocks`]).
pub(in crate::backend::host) fn batchable(l: &Launch, slot: &WorkerSlot) -> bool {
    super::uses_c(&l.kernel)
        && !isolate_off()
        && slot.limit().is_none()
        && slot.started().is_some()
        && arena::global().is_some_and(|a| all_in_arena(l, a))
        && super::loaded_now(&l.kernel).is_some()
}

/// Run `launches` (each [`batchable`], whole, in stream order) in one request to the worker
/// (R5). `Err((i, blame))`: launch `i` faulted after those before it ran; those after it did
/// not run.
pub(in crate::backend::host) fn run_batch(
    launches: &[(Arc<Module>, &Launch)],
    slot: &WorkerSlot,
) -> Result<(), (usize, Blame)> {
    let name = |i: usize| &launches[i].1.kernel.name;
    let worker = slot.get().map_err(|f| (0, blame(name(0), f)))?;
    // The pieces the calls borrow.
    let params: Vec<_> = launches.iter().map(|(_, l)| param_bytes(l)).collect();
    let refs: Vec<smallvec::SmallVec<[&[u8]; 8]>> = params
        .iter()
        .map(|p| p.iter().map(|b| b.as_slice()).collect())
        .collect();
    let entries: Vec<String> = launches
        .iter()
        .map(|(m, _)| format!("cueflow_run_{}", m.symbol))
        .collect();
    let read_only: Vec<Vec<ReadOnly>> = launches.iter().map(|(_, l)| read_only_pages(l)).collect();
    let calls: Vec<Call> = launches
        .iter()
        .enumerate()
        .map(|(i, (m, l))| Call {
            so_path: &m.path,
            symbol: &entries[i],
            name: &l.kernel.name,
            launch: whole(l),
            params: &refs[i],
            read_only: &read_only[i],
            limit: None,
        })
        .collect();
    // As many requests as the slot's request area needs, each of whole records.
    let mut from = 0;
    while from < calls.len() {
        let (mut to, mut bytes) = (from, 0);
        while let Some(c) = calls.get(to) {
            let n = record_bytes(c);
            if to > from && bytes + n > REQUEST_CAP {
                break;
            }
            bytes += n;
            to += 1;
        }
        match worker.call_batch(&calls[from..to]) {
            Ok(out) => apply_records(&out).map_err(|detail| {
                let kernel = name(to - 1).clone();
                (to - 1, Blame { kernel, detail })
            })?,
            Err((i, f)) => return Err((from + i, blame(name(from + i), f))),
        }
        from = to;
    }
    Ok(())
}

/// All of `l`'s blocks as one range.
fn whole(l: &Launch) -> LaunchDesc {
    LaunchDesc {
        grid: l.grid,
        block: l.block,
        dyn_shared: l.shared_bytes,
        block_begin: 0,
        block_end: l.blocks() as u32,
    }
}

/// The pages of `l`'s read-declared arguments that the worker maps read-only while it runs
/// (AC7, W7 in `isolate`): whole pages inside each argument's bytes, extended over its
/// allocation's padding where it starts or ends the allocation (every allocation is a block of
/// its own, A2), less the pages a written or atomic argument of the launch touches.
fn read_only_pages(l: &Launch) -> Vec<ReadOnly> {
    let page = arena::PAGE;
    let (floor, ceil) = (
        |x: usize| x & !(page - 1),
        |x: usize| x.next_multiple_of(page),
    );
    let written: Vec<std::ops::Range<usize>> = l
        .args
        .iter()
        .filter_map(|a| match a {
            KernelArg::Buffer { mem, access, .. } if *access != Access::Read && mem.len > 0 => {
                let lo = mem.alloc.addr as usize + mem.offset;
                Some(floor(lo)..ceil(lo + mem.len))
            }
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (arg, a) in l.args.iter().enumerate() {
        let KernelArg::Buffer {
            mem,
            access: Access::Read,
            ..
        } = a
        else {
            continue;
        };
        let base = mem.alloc.addr as usize;
        if mem.len == 0 {
            continue;
        }
        let lo = match mem.offset {
            0 => floor(base),
            o => base + o,
        };
        let hi = match mem.offset + mem.len {
            end if end == mem.alloc.bytes => ceil(base + end),
            end => base + end,
        };
        let mut parts: Vec<std::ops::Range<usize>> = std::iter::once(ceil(lo)..floor(hi)).collect();
        for w in &written {
            parts = parts
                .into_iter()
                .flat_map(|p| [p.start..p.end.min(w.start), p.start.max(w.end)..p.end])
                .filter(|p| p.start < p.end)
                .collect();
        }
        out.extend(parts.into_iter().map(|range| ReadOnly { range, arg }));
    }
    out
}

/// Apply what a launch's blocks recorded for the host on success: `cudaGraphSetConditional`
/// calls, `C<16 hex id><8 hex value>` per line (the prelude's format), in order (GR9).
fn apply_records(out: &[u8]) -> Result<(), String> {
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let text = std::str::from_utf8(line).unwrap_or("");
        let rec = text
            .strip_prefix('C')
            .filter(|r| r.len() == 24)
            .and_then(|r| {
                Some((
                    u64::from_str_radix(&r[..16], 16).ok()?,
                    u32::from_str_radix(&r[16..], 16).ok()?,
                ))
            });
        let Some((id, value)) = rec else {
            return Err(format!("the kernel left an unreadable record `{text}`"));
        };
        if !crate::backend::contract::conditional::set_condition(id, value) {
            return Err(format!(
                "cudaGraphSetConditional: handle {id} names no live condition \
                 (KernelArgs::condition)"
            ));
        }
    }
    Ok(())
}

/// The kernel a worker fault names (RL5) and its detail.
fn blame(me: &str, f: WorkerFault) -> Blame {
    let detail = f.to_string();
    let kernel = match &f {
        WorkerFault::Crashed { culprits, .. } => match culprits.as_slice() {
            [] if f.is_own() => me.to_string(),
            [] => "<unknown kernel>".to_string(),
            [one] => one.clone(),
            many => format!("one of: {}", many.join(", ")),
        },
        WorkerFault::Kernel { .. } | WorkerFault::Unavailable(_) => me.to_string(),
    };
    let detail = if f.is_own() || kernel == me {
        detail
    } else {
        format!("{detail}; this launch of `{me}` was cut short by it")
    };
    Blame { kernel, detail }
}

/// Run blocks `range` of `l` on this thread (the fallback); `Ok` holds what the blocks
/// recorded for the host ([`apply_records`]), `Err` the fault's message.
fn in_process(
    m: &Module,
    l: &Launch,
    range: Range<u64>,
    params: &[Param],
) -> Result<Vec<u8>, String> {
    // Each parameter's value in 16-byte aligned storage.
    let mut storage: Vec<Vec<u128>> = params
        .iter()
        .map(|bytes| {
            let mut v = vec![0u128; bytes.len().div_ceil(16).max(1)];
            bytemuck::cast_slice_mut::<u128, u8>(&mut v)[..bytes.len()].copy_from_slice(bytes);
            v
        })
        .collect();
    let mut ptrs: Vec<*mut c_void> = storage
        .iter_mut()
        .map(|v| v.as_mut_ptr() as *mut c_void)
        .collect();
    let mut msg = vec![0u8; 1024];
    let launch = CueflowLaunch {
        grid: l.grid,
        block: l.block,
        dyn_shared: l.shared_bytes,
        block_begin: range.start as u32,
        block_end: range.end as u32,
        fault_msg: msg.as_mut_ptr() as *mut std::ffi::c_char,
        fault_msg_len: msg.len() as u32,
    };
    // SAFETY: `m.run` is the kernel's entry; `launch` and `ptrs` (one pointer per parameter,
    // sizes checked by `prepare`) outlive the call; the buffers the pointers address are held
    // by the op (MM2). What the kernel itself does with them is the kernel's (in this process
    // only wild accesses to unmapped memory come back as a fault: the module docs).
    let rc = unsafe { (m.run)(&launch, ptrs.as_mut_ptr()) };
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    if rc == 0 {
        msg.truncate(end);
        return Ok(msg);
    }
    let text = String::from_utf8_lossy(&msg[..end]).into_owned();
    Err(if text.is_empty() {
        "the kernel faulted".to_string()
    } else {
        text
    })
}
