//! Collectives on CUDA (MD4) through NCCL, loaded at run time like the driver.
//!
//! `libnccl.so.2` is opened on first use (`CUEFLOW_NCCL_LIB` names another file); without it
//! communicators are [`Error::Unavailable`] and nothing else changes. NCCL runs each member's
//! part as a kernel on the member's stream, so a collective is a stream operation like any other
//! (ST1/ST2): it waits for its stream's earlier work and core's dependencies, is timed by the
//! stream's events, and is held in the keepalive queue until done (MM2).
//!
//! Rules of this module:
//! * **N1.** The parts of one call made for several GPUs of this process are enqueued in one
//!   `ncclGroupStart`/`ncclGroupEnd` (NCCL's rule for one thread driving several GPUs); every
//!   member stream is locked and waiting for its dependencies before the group starts, and
//!   records its end timing and completion events only after the group ended, when NCCL's
//!   kernels are on the streams.
//! * **N2.** NCCL switches the thread's current device; after every NCCL call the context
//!   binding cache is forgotten (D2), so the next driver call binds its own context again.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use super::context::{forget_bound, note_current, restoring};
use super::driver::{library, St};
use super::shared::DeviceShared;
use super::stream::{Begun, CudaStream};
use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::device::GroupPart;
use crate::backend::contract::device::{BackendStream, Done};
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::op::{CollectiveWork, Work};
use crate::error::{Error, Result};
use crate::types::{CollectiveKind, ElemType, ReduceOp};

crate::backend::contract::downcast::as_any!(NcclMember);

type NcclResult = c_int;
type NcclComm = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes.
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueIdRaw([c_char; UNIQUE_ID_BYTES]);

/// The NCCL functions cueflow calls, resolved once.
struct Nccl {
    /// Kept loaded for the process: the functions point into it.
    _lib: libloading::Library,
    get_unique_id: unsafe extern "C" fn(*mut UniqueIdRaw) -> NcclResult,
    comm_init_rank: unsafe extern "C" fn(*mut NcclComm, c_int, UniqueIdRaw, c_int) -> NcclResult,
    comm_init_all: unsafe extern "C" fn(*mut NcclComm, c_int, *const c_int) -> NcclResult,
    comm_destroy: unsafe extern "C" fn(NcclComm) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    group_start: unsafe extern "C" fn() -> NcclResult,
    group_end: unsafe extern "C" fn() -> NcclResult,
    #[allow(clippy::type_complexity)]
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        NcclComm,
        *mut c_void,
    ) -> NcclResult,
    #[allow(clippy::type_complexity)]
    broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        NcclComm,
        *mut c_void,
    ) -> NcclResult,
    #[allow(clippy::type_complexity)]
    reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        NcclComm,
        *mut c_void,
    ) -> NcclResult,
    #[allow(clippy::type_complexity)]
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        NcclComm,
        *mut c_void,
    ) -> NcclResult,
    #[allow(clippy::type_complexity)]
    reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        NcclComm,
        *mut c_void,
    ) -> NcclResult,
}

static NCCL: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();

/// The loaded library, or why it is unavailable.
fn nccl() -> Result<&'static Nccl> {
    // GR11: graphs capture members' calls through this (see graph_capture::NCCL_CAPTURE).
    let _ = super::graph_capture::NCCL_CAPTURE.set(enqueue_one);
    NCCL.get_or_init(load)
        .as_ref()
        .map_err(|why| Error::Unavailable(format!("NCCL: {why}")))
}

/// Where NCCL is looked for: `CUEFLOW_NCCL_LIB` alone when set; else `libnccl.so.2` on the
/// loader path, then where PyTorch's NCCL package keeps it (`nvidia-nccl-cu12`/`-cu13`:
/// `site-packages/nvidia/nccl/lib/libnccl.so.2`).
fn candidates() -> Vec<String> {
    if let Some(n) = crate::config::nccl_lib() {
        return vec![n];
    }
    let mut names = vec!["libnccl.so.2".to_string()];
    names.extend(
        library::site_packages()
            .into_iter()
            .map(|s| s.join("nvidia/nccl/lib/libnccl.so.2"))
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string()),
    );
    names
}

fn load() -> std::result::Result<Nccl, String> {
    let names = candidates();
    let Some((lib, name)) = library::open_first(&names) else {
        return Err(format!(
            "cannot open {} (tried {names:?}); put NCCL's lib folder on LD_LIBRARY_PATH or set \
             CUEFLOW_NCCL_LIB",
            names[0]
        ));
    };
    macro_rules! f {
        ($sym:literal) => {
            // SAFETY: each symbol is the NCCL 2.x function of that name, whose C signature
            // (nccl.h) is the field's function-pointer type; the pointers live while `lib`
            // does, which the `Nccl` keeps.
            unsafe { library::symbol(&lib, $sym) }
                .ok_or_else(|| format!("{name} lacks {}", $sym))?
        };
    }
    Ok(Nccl {
        get_unique_id: f!("ncclGetUniqueId"),
        comm_init_rank: f!("ncclCommInitRank"),
        comm_init_all: f!("ncclCommInitAll"),
        comm_destroy: f!("ncclCommDestroy"),
        get_error_string: f!("ncclGetErrorString"),
        group_start: f!("ncclGroupStart"),
        group_end: f!("ncclGroupEnd"),
        all_reduce: f!("ncclAllReduce"),
        broadcast: f!("ncclBroadcast"),
        reduce: f!("ncclReduce"),
        all_gather: f!("ncclAllGather"),
        reduce_scatter: f!("ncclReduceScatter"),
        _lib: lib,
    })
}

/// Map an NCCL result; `call` names the function.
fn check(n: &Nccl, call: &str, r: NcclResult) -> Result<()> {
    if r == 0 {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
    let what = unsafe { CStr::from_ptr((n.get_error_string)(r)) }.to_string_lossy();
    Err(Error::Collective(format!(
        "{call} failed: {what} (ncclResult {r})"
    )))
}

/// A fresh unique id for [`NcclMember::join`] (made by one rank, passed to the others).
pub(crate) fn unique_id() -> Result<Vec<u8>> {
    let n = nccl()?;
    let mut id = UniqueIdRaw([0; UNIQUE_ID_BYTES]);
    // SAFETY: a valid out-pointer to 128 bytes.
    let r = unsafe { (n.get_unique_id)(&mut id) };
    forget_bound();
    check(n, "ncclGetUniqueId", r)?;
    Ok(id.0.iter().map(|&b| b as u8).collect())
}

/// One member of an NCCL communicator.
pub(crate) struct NcclMember {
    comm: usize,
    rank: usize,
    ranks: usize,
    /// The member's device, kept open while the communicator lives.
    _device: Arc<DeviceShared>,
}

impl NcclMember {
    /// Members over `devices` (one per GPU, rank = position) with `ncclCommInitAll`.
    ///
    /// One thread drives every member of such a communicator, and a graph replays one
    /// member's collective alone (GR11: each member's graph is built when that member's capture
    /// is instantiated, its call captured by the driver on its own). NCCL's lazy connection
    /// set-up (`NCCL_RUNTIME_CONNECT=1`, its default since 2.22) makes a member's first call
    /// of a kind wait for its peers' first call — a lone call from the one thread that must
    /// make the others waits forever (seen on two H200s). So unless the program set
    /// `NCCL_RUNTIME_CONNECT` itself, cueflow sets it to 0 before the first communicator of the
    /// process is made: every connection is made at `ncclCommInitAll`, where all members take
    /// part (a longer initialization, and the connections' memory from the start).
    pub(super) fn group(devices: &[Arc<DeviceShared>]) -> Result<Vec<NcclMember>> {
        if std::env::var_os("NCCL_RUNTIME_CONNECT").is_none() {
            // NCCL reads the variable when it first needs it (at a communicator's
            // initialization), after this.
            std::env::set_var("NCCL_RUNTIME_CONNECT", "0");
        }
        let n = nccl()?;
        let ordinals: Vec<c_int> = devices.iter().map(|d| d.ctx.ordinal as c_int).collect();
        let mut comms: Vec<NcclComm> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one handle per ordinal; the ordinals are live devices.
        let r = unsafe {
            (n.comm_init_all)(
                comms.as_mut_ptr(),
                ordinals.len() as c_int,
                ordinals.as_ptr(),
            )
        };
        forget_bound();
        check(n, "ncclCommInitAll", r)?;
        Ok(comms
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (comm, d))| NcclMember {
                comm: comm as usize,
                rank,
                ranks: devices.len(),
                _device: d.clone(),
            })
            .collect())
    }

    /// Member `rank` of `ranks` on `device`, meeting the others under `id`
    /// (`ncclCommInitRank`; blocks until every rank joined).
    pub(super) fn join(
        device: &Arc<DeviceShared>,
        id: &[u8],
        ranks: usize,
        rank: usize,
    ) -> Result<NcclMember> {
        let n = nccl()?;
        if id.len() != UNIQUE_ID_BYTES {
            return Err(Error::InvalidHandle(format!(
                "an NCCL unique id is {UNIQUE_ID_BYTES} bytes, not {}",
                id.len()
            )));
        }
        let mut raw = UniqueIdRaw([0; UNIQUE_ID_BYTES]);
        for (d, &s) in raw.0.iter_mut().zip(id) {
            *d = s as c_char;
        }
        device.enter()?;
        let mut comm: NcclComm = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the device's context is current (NCCL takes the current
        // device).
        let r = unsafe { (n.comm_init_rank)(&mut comm, ranks as c_int, raw, rank as c_int) };
        forget_bound();
        check(n, "ncclCommInitRank", r)?;
        Ok(NcclMember {
            comm: comm as usize,
            rank,
            ranks,
            _device: device.clone(),
        })
    }
}

impl Drop for NcclMember {
    fn drop(&mut self) {
        if let Ok(n) = nccl() {
            // NCCL sets its device's context: the caller's is bound back after.
            restoring(|| {
                // SAFETY: the communicator is live and no operation holds it any more (each
                // op holds its member, and ops are dropped only once complete, MM2).
                unsafe { (n.comm_destroy)(self.comm as NcclComm) };
                forget_bound();
            });
        }
    }
}

fn data_type(e: ElemType) -> c_int {
    match e {
        ElemType::I8 => 0,
        ElemType::U8 => 1,
        ElemType::I32 => 2,
        ElemType::U32 => 3,
        ElemType::I64 => 4,
        ElemType::U64 => 5,
        ElemType::F32 => 7,
        ElemType::F64 => 8,
    }
}

fn red_op(o: ReduceOp) -> c_int {
    match o {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

/// Enqueue one member's part alone on `s`: a stream the driver captures into a graph (GR11).
pub(super) fn enqueue_one(c: &CollectiveWork, s: St) -> Result<()> {
    let r = enqueue(nccl()?, c, s);
    forget_bound();
    r
}

/// Enqueue one member's part on `s` (inside a group or alone).
fn enqueue(n: &Nccl, c: &CollectiveWork, s: St) -> Result<()> {
    let member: &NcclMember = downcast(c.comm.as_ref(), "communicator")?;
    let comm = member.comm as NcclComm;
    let d = &c.desc;
    let (send, recv) = (c.send.addr() as *const c_void, c.recv.addr() as *mut c_void);
    let (dt, stream) = (data_type(d.elem), s.0 as *mut c_void);
    // SAFETY: (every arm) core checked `send` and `recv` are live device memory of this
    // member's device sized for the call (MD4 checks in the API), held by the op until NCCL's
    // kernel completed (keepalive queue, MM2); `comm` is live (the op holds its member) and
    // `stream` is a live stream of the member's device.
    let (call, r) = unsafe {
        match d.kind {
            CollectiveKind::AllReduce(o) => (
                "ncclAllReduce",
                (n.all_reduce)(send, recv, d.count, dt, red_op(o), comm, stream),
            ),
            CollectiveKind::Broadcast { root } => (
                "ncclBroadcast",
                (n.broadcast)(send, recv, d.count, dt, root as c_int, comm, stream),
            ),
            CollectiveKind::Reduce { root, op } => (
                "ncclReduce",
                (n.reduce)(
                    send,
                    recv,
                    d.count,
                    dt,
                    red_op(op),
                    root as c_int,
                    comm,
                    stream,
                ),
            ),
            CollectiveKind::AllGather => (
                "ncclAllGather",
                (n.all_gather)(send, recv, d.count, dt, comm, stream),
            ),
            CollectiveKind::ReduceScatter(o) => (
                "ncclReduceScatter",
                (n.reduce_scatter)(
                    send,
                    recv,
                    d.count / member.ranks,
                    dt,
                    red_op(o),
                    comm,
                    stream,
                ),
            ),
        }
    };
    check(n, call, r)
}

impl BackendComm for NcclMember {
    fn rank(&self) -> usize {
        self.rank
    }
}

/// N1: every member stream begun, one NCCL group, every member finished.
///
/// NCCL sets each member's device while it launches the group; afterwards the binding NCCL
/// left is noted rather than forgotten, and the members finish last to first: the last
/// member's context is then current for its own finish, and the first's for the next group's
/// first member (two context switches a group where forgetting made four).
pub(super) fn submit_group(parts: Vec<GroupPart>) -> Result<Vec<Option<Done>>> {
    let n = nccl()?;
    let owners: SmallVec<[Arc<dyn BackendStream>; 4]> =
        parts.iter().map(|p| p.stream.clone()).collect();
    let streams: SmallVec<[&CudaStream; 4]> = owners
        .iter()
        .map(|s| downcast(s.as_ref(), "stream"))
        .collect::<Result<_>>()?;
    let mut begun: SmallVec<[(Begun<'_>, bool); 4]> = SmallVec::new();
    for (p, s) in parts.into_iter().zip(&streams) {
        begun.push((s.begin(p.op, &p.after)?, p.want_done));
    }
    // SAFETY: no arguments; pairs with the group end below on every path.
    check(n, "ncclGroupStart", unsafe { (n.group_start)() })?;
    let mut r = Ok(());
    for (b, _) in &begun {
        let Some(Work::Collective(c)) = b.op().map(|op| &op.work) else {
            unreachable!("group parts are collectives")
        };
        r = r.and(enqueue(n, c, b.s));
    }
    // SAFETY: closes the group opened above.
    let end = unsafe { (n.group_end)() };
    note_current();
    let r = r.and(check(n, "ncclGroupEnd", end));
    if let Err(e) = r {
        // Nothing of the group was launched: the ops are dropped, the streams unlocked.
        drop(begun);
        return Err(e);
    }
    // Every part is on its stream now: each must be kept (Q1) whatever fails, so every
    // member finishes and the first error is returned after.
    let mut dones = vec![None; begun.len()];
    let mut first_err = None;
    for (i, ((b, want), s)) in begun.into_iter().zip(&streams).enumerate().rev() {
        // A failed bind leaves the context unbound; finish's calls then fail and poison
        // this device, but the op is still kept.
        let bound = s.shared().enter();
        match bound.and(s.finish(b, None, want)) {
            Ok(d) => dones[i] = d,
            Err(e) => first_err = Some(e), // Last to first: the first member's stays.
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(dones),
    }
}
