//! Host-backend collectives (MD4): members meet at a rendezvous — in memory for the devices of
//! one process, in a shared-memory segment per call for members in different processes — and
//! each computes its own output from every member's input, in rank order.
//!
//! Protocol of one call (cited as C1–C4):
//! * **C1.** A member arrives with its call's description and input; the call goes on once
//!   every rank has arrived. Ranks whose descriptions differ fault with a mismatch error
//!   instead of waiting for a partner that will never come.
//! * **C2.** Every member computes its output into private scratch memory, reading copies of
//!   the others' inputs (C5, below), then waits until every member has done so: only then may any member write its
//!   output, which may be its own input (in place).
//! * **C3.** A member leaves after writing; the rendezvous is free for the next call once every
//!   member has left. Calls of one communicator meet in the order they were made (`seq`).
//! * **C4.** Waiting has a deadline: a rank that never comes faults the waiting ones with an
//!   error naming the call and the missing ranks (a device fault, not a hang).
//! * **C5.** A member never touches another member's memory: inputs meet as copies (in the
//!   rendezvous, or in the shared segment), so a member that gave up may free its buffers at
//!   once; a member that gives up says so to the others, who fault with its reason.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::downcast::downcast;
use crate::backend::contract::memory::MemRef;
use crate::types::CollectiveDesc;
use crate::types::{CollectiveKind, ElemType, ReduceOp};

use crate::backend::contract::op::CollectiveWork;

crate::backend::contract::downcast::as_any!(HostComm);

/// A member of a host communicator.
pub(crate) struct HostComm {
    rank: usize,
    ranks: usize,
    deadline: Duration,
    transport: Transport,
    /// Calls this member ran so far: the number its next call meets under (C3). Every member
    /// runs the communicator's calls in the same order, so the counts agree — also for calls
    /// a graph replays (GR11), which the program enqueued once.
    calls: std::sync::atomic::AtomicU64,
}

enum Transport {
    /// Every member in this process.
    InProcess(Arc<Rendezvous>),
    /// One member per process; calls meet in shared memory named after the unique id.
    Shared { id: String },
}

impl BackendComm for HostComm {
    fn rank(&self) -> usize {
        self.rank
    }
}

impl HostComm {
    /// The members of a communicator over `ranks` devices of this process.
    pub fn group(ranks: usize, deadline: Duration) -> Vec<HostComm> {
        let rv = Arc::new(Rendezvous::new(ranks, deadline));
        (0..ranks)
            .map(|rank| HostComm {
                rank,
                ranks,
                deadline,
                transport: Transport::InProcess(rv.clone()),
                calls: Default::default(),
            })
            .collect()
    }

    /// Member `rank` of `ranks` whose calls meet, across processes, under `id`.
    pub fn shared(id: &str, ranks: usize, rank: usize, deadline: Duration) -> HostComm {
        HostComm {
            rank,
            ranks,
            deadline,
            transport: Transport::Shared { id: id.to_string() },
            calls: Default::default(),
        }
    }

    /// Run this member's part of `desc` (on an engine thread). Panics on a mismatch or a
    /// timeout; the engine turns the panic into the device's sticky fault (C1, C4).
    fn run(&self, desc: &CollectiveDesc, send: &MemRef, recv: &MemRef) {
        // C3: the call's number is this member's count of calls run (GR11: a replayed call
        // is a new call each time).
        let desc = &CollectiveDesc {
            seq: self.calls.fetch_add(1, Ordering::AcqRel),
            ..*desc
        };
        // SAFETY: core checked both ranges lie inside their live allocations (the op holds
        // them, MM2) and have the sizes `desc` says; nothing else touches them while the op
        // runs (stream order; AC6 orders conflicting work).
        let input =
            unsafe { std::slice::from_raw_parts(send.alloc.host_ptr().add(send.offset), send.len) };
        let out = match &self.transport {
            Transport::InProcess(rv) => match rv.run(self.rank, desc, input) {
                Ok(out) => out,
                Err(msg) => panic!("{msg}"),
            },
            Transport::Shared { id } => {
                shared_run(id, self.ranks, self.rank, self.deadline, desc, input)
            }
        };
        // SAFETY: as above, for the output range; `out` has its length (computed for it).
        unsafe {
            std::ptr::copy_nonoverlapping(
                out.as_ptr(),
                recv.alloc.host_ptr().add(recv.offset),
                recv.len.min(out.len()),
            )
        };
    }
}

/// Rank `rank`'s output of `desc`, given every rank's input in rank order.
fn compute(desc: &CollectiveDesc, ranks: usize, rank: usize, inputs: &[&[u8]]) -> Vec<u8> {
    let reduce = |op: ReduceOp, range: std::ops::Range<usize>| {
        let mut acc = inputs[0][range.clone()].to_vec();
        for inp in &inputs[1..] {
            reduce_into(desc.elem, op, &mut acc, &inp[range.clone()]);
        }
        acc
    };
    let whole = 0..inputs[0].len();
    match desc.kind {
        CollectiveKind::AllReduce(op) => reduce(op, whole),
        CollectiveKind::Broadcast { root } => inputs[root].to_vec(),
        CollectiveKind::Reduce { root, op } if root == rank => reduce(op, whole),
        // Non-root ranks of a reduce keep their output as it is: copy it through unchanged
        // is not possible without reading it, so they get nothing to write.
        CollectiveKind::Reduce { .. } => Vec::new(),
        CollectiveKind::AllGather => inputs.concat(),
        CollectiveKind::ReduceScatter(op) => {
            let part = inputs[0].len() / ranks;
            reduce(op, rank * part..(rank + 1) * part)
        }
    }
}

/// A fresh id for members in different processes: 16 random bytes (they name the calls'
/// shared-memory segments).
pub(crate) fn unique_id() -> crate::error::Result<Vec<u8>> {
    use std::io::Read;
    let mut id = vec![0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut id))
        .map_err(|e| crate::error::Error::Unavailable(format!("no randomness for an id: {e}")))?;
    Ok(id)
}

/// Run one member's part of a collective on a host engine thread.
pub(super) fn run(c: &CollectiveWork) {
    // The stream checked the communicator at submission (HostStream::submit): a host one.
    if let Ok(comm) = downcast::<HostComm, _>(c.comm.as_ref(), "communicator") {
        comm.run(&c.desc, &c.send, &c.recv);
    }
}

/// In-process meeting point.
///
/// Rule C5 (item 2 of issue 16): no member ever reads another member's memory. A member copies
/// its input into the rendezvous when it arrives, and everyone computes from those copies, so a
/// member whose call returned (it timed out, or its device faulted) can free its buffers at
/// once. A member that gives up marks the call failed with the reason; members still waiting
/// and members arriving late fault at once with that reason instead of waiting for a partner
/// that left, and the communicator refuses every later call (as NCCL's does after an abort).
struct Rendezvous {
    ranks: usize,
    deadline: Duration,
    state: Mutex<RState>,
    cv: Condvar,
}

struct RState {
    /// The call meeting now (C3).
    seq: u64,
    /// Each rank's description and a copy of its input, once arrived (C5).
    arrived: Vec<Option<(CollectiveDesc, Arc<[u8]>)>>,
    computed: Vec<bool>,
    left: usize,
    /// The first call that failed, and why (C5): later and late calls fault with it.
    failed: Option<(u64, String)>,
}

impl Rendezvous {
    fn new(ranks: usize, deadline: Duration) -> Self {
        Rendezvous {
            ranks,
            deadline,
            state: Mutex::new(RState {
                seq: 0,
                arrived: vec![None; ranks],
                computed: vec![false; ranks],
                left: 0,
                failed: None,
            }),
            cv: Condvar::new(),
        }
    }

    /// Wait on the state until `ready`, with the deadline of C4. Gives up (C5) when another
    /// member marked the call failed or the deadline passes: the call is then marked failed
    /// and the reason returned.
    fn wait_until(
        &self,
        st: &mut parking_lot::MutexGuard<'_, RState>,
        rank: usize,
        desc: &CollectiveDesc,
        what: &str,
        ready: impl Fn(&RState) -> bool,
        missing: impl Fn(&RState) -> Vec<usize>,
    ) -> Result<(), String> {
        let t = Instant::now();
        loop {
            if let Some((seq, why)) = &st.failed {
                if desc.seq >= *seq {
                    return Err(if desc.seq == *seq {
                        format!(
                            "collective {} (call {}) on rank {rank} failed: {why}",
                            desc.kind.name(),
                            desc.seq
                        )
                    } else {
                        format!(
                            "collective {} (call {}) on rank {rank} refused: the communicator \
                             is broken since call {seq} failed: {why}",
                            desc.kind.name(),
                            desc.seq
                        )
                    });
                }
            }
            if ready(st) {
                return Ok(());
            }
            let left = self.deadline.saturating_sub(t.elapsed());
            if left.is_zero() {
                let why = format!(
                    "rank {rank} timed out after {:?} {what} and gave up; ranks not there: \
                     {:?}",
                    self.deadline,
                    missing(st)
                );
                let msg = format!("collective {} (call {}) {why}", desc.kind.name(), desc.seq);
                if st.failed.is_none() {
                    st.failed = Some((desc.seq, why));
                }
                // C5: this rank's input copy stays for nobody; the others fault at once.
                st.arrived[rank] = None;
                self.cv.notify_all();
                return Err(msg);
            }
            self.cv.wait_for(st, left.min(Duration::from_millis(100)));
        }
    }

    fn run(&self, rank: usize, desc: &CollectiveDesc, input: &[u8]) -> Result<Vec<u8>, String> {
        let mut st = self.state.lock();
        let none = |_: &RState| Vec::new();
        self.wait_until(
            &mut st,
            rank,
            desc,
            "waiting for the previous call",
            |s| s.seq == desc.seq,
            none,
        )?;
        // C5: a copy, so that nobody reads this rank's memory after its call returned.
        st.arrived[rank] = Some((*desc, Arc::from(input)));
        self.cv.notify_all();
        self.wait_until(
            &mut st,
            rank,
            desc,
            "waiting for every rank to arrive",
            |s| s.arrived.iter().all(Option::is_some),
            |s| {
                (0..s.arrived.len())
                    .filter(|&r| s.arrived[r].is_none())
                    .collect()
            },
        )?;
        let all: Vec<(CollectiveDesc, Arc<[u8]>)> = st.arrived.iter().flatten().cloned().collect();
        drop(st);
        if let Err(msg) = check_same(desc, all.iter().map(|a| a.0).collect()) {
            let mut st = self.state.lock();
            if st.failed.is_none() {
                st.failed = Some((desc.seq, msg.clone()));
            }
            st.arrived[rank] = None;
            self.cv.notify_all();
            return Err(msg);
        }
        let inputs: Vec<&[u8]> = all.iter().map(|(_, data)| &data[..]).collect();
        let out = compute(desc, self.ranks, rank, &inputs);
        drop(inputs);
        drop(all);
        let mut st = self.state.lock();
        st.computed[rank] = true;
        self.cv.notify_all();
        self.wait_until(
            &mut st,
            rank,
            desc,
            "waiting for every rank to compute",
            |s| s.computed.iter().all(|&c| c),
            |s| (0..s.computed.len()).filter(|&r| !s.computed[r]).collect(),
        )?;
        st.left += 1;
        if st.left == self.ranks {
            // C3: the last to leave opens the rendezvous for the next call.
            st.seq += 1;
            st.arrived.iter_mut().for_each(|a| *a = None);
            st.computed.iter_mut().for_each(|c| *c = false);
            st.left = 0;
            self.cv.notify_all();
        }
        Ok(out)
    }
}

/// C1: every rank made the same call.
fn check_same(mine: &CollectiveDesc, all: Vec<CollectiveDesc>) -> Result<(), String> {
    if let Some((r, other)) = all.iter().enumerate().find(|(_, d)| *d != mine) {
        return Err(format!(
            "collective mismatch at call {}: this rank called {} of {} {:?}, rank {r} called \
             {} of {} {:?}",
            mine.seq,
            mine.kind.name(),
            mine.count,
            mine.elem,
            other.kind.name(),
            other.count,
            other.elem
        ));
    }
    Ok(())
}

/// The shared-memory header of one call: per-rank descriptions and the barrier counters.
#[repr(C)]
struct ShmHeader {
    /// Ranks that wrote their description.
    arrived: AtomicU32,
    /// Ranks that wrote their input into the data segment.
    written: AtomicU32,
    /// Ranks that computed their output.
    computed: AtomicU32,
    /// Ranks done with both segments.
    left: AtomicU32,
    /// Per rank: kind tag, root, op tag, elem tag, count.
    descs: [[u64; 5]; MAX_SHARED_RANKS],
}

/// Ranks a shared-memory communicator supports.
pub(crate) const MAX_SHARED_RANKS: usize = 64;

fn encode(d: &CollectiveDesc) -> [u64; 5] {
    let op = |o: ReduceOp| o as u64 + 1;
    let (kind, root, rop) = match d.kind {
        CollectiveKind::AllReduce(o) => (1, 0, op(o)),
        CollectiveKind::Broadcast { root } => (2, root as u64, 0),
        CollectiveKind::Reduce { root, op: o } => (3, root as u64, op(o)),
        CollectiveKind::AllGather => (4, 0, 0),
        CollectiveKind::ReduceScatter(o) => (5, 0, op(o)),
    };
    let elem = d.elem as u64 + 1;
    [kind, root, rop, elem, d.count as u64]
}

/// A mapped shared-memory segment, unmapped on drop.
struct Segment {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is a mapping this segment made and nothing uses after drop.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn open_segment(name: &CString, len: usize) -> Segment {
    // SAFETY: `name` is a NUL-terminated string; the flags and mode are constants.
    let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600) };
    assert!(
        fd >= 0,
        "collective: shm_open {name:?} failed: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fd` is an open shared-memory object; every rank sets the same length.
    let r = unsafe { libc::ftruncate(fd, len as libc::off_t) };
    assert!(
        r == 0,
        "collective: ftruncate failed: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a shared read-write mapping of the whole object; `fd` stays valid for the call.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    // SAFETY: closing the descriptor keeps the mapping.
    unsafe { libc::close(fd) };
    assert!(ptr != libc::MAP_FAILED, "collective: mmap failed");
    Segment {
        ptr: ptr as *mut u8,
        len,
    }
}

/// Spin (yielding) until `counter` reaches `target`, with the deadline of C4.
fn barrier(
    counter: &AtomicU32,
    target: u32,
    deadline: Duration,
    desc: &CollectiveDesc,
    what: &str,
) -> Result<(), String> {
    let t = Instant::now();
    let mut spins = 0u32;
    while counter.load(Ordering::Acquire) < target {
        if t.elapsed() > deadline {
            return Err(format!(
                "collective {} (call {}) timed out after {deadline:?} {what} ({} of {target} \
                 ranks there)",
                desc.kind.name(),
                desc.seq,
                counter.load(Ordering::Acquire)
            ));
        }
        // Spin briefly (ranks usually arrive close together), then sleep between looks
        // instead of holding a core for as long as a late rank takes.
        spins += 1;
        if spins < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(())
}

/// C1–C4 across processes. Each call meets in two segments of its own: a header of fixed size,
/// where the ranks compare their calls, and — only once they agree, so every rank asks for the
/// same size — a data segment holding every rank's input.
fn shared_run(
    id: &str,
    ranks: usize,
    rank: usize,
    deadline: Duration,
    desc: &CollectiveDesc,
    input: &[u8],
) -> Vec<u8> {
    assert!(
        ranks <= MAX_SHARED_RANKS,
        "at most {MAX_SHARED_RANKS} ranks"
    );
    let head_name = CString::new(format!("/cueflow-{id}-{}-h", desc.seq)).expect("no NUL");
    let data_name = CString::new(format!("/cueflow-{id}-{}-d", desc.seq)).expect("no NUL");
    let unlink = || {
        // SAFETY: NUL-terminated names; removing a name another rank removed first fails
        // harmlessly, and mappings stay valid until unmapped.
        unsafe {
            libc::shm_unlink(head_name.as_ptr());
            libc::shm_unlink(data_name.as_ptr());
        }
    };
    let head = open_segment(&head_name, std::mem::size_of::<ShmHeader>());
    // SAFETY: the segment is a header's size, zero-filled when new (shm_open + ftruncate) and
    // written only through its atomics and each rank's own description slot.
    let h = unsafe { &*(head.ptr as *const ShmHeader) };
    let mine = encode(desc);
    // SAFETY: slot `rank` lies inside the header and only this rank writes it, before it
    // arrives (Release below).
    unsafe {
        (std::ptr::addr_of!(h.descs) as *mut [u64; 5])
            .add(rank)
            .write_volatile(mine)
    };
    let n = ranks as u32;
    let wait = |counter: &AtomicU32, what: &str| {
        if let Err(msg) = barrier(counter, n, deadline, desc, what) {
            unlink();
            panic!("{msg}");
        }
    };
    h.arrived.fetch_add(1, Ordering::AcqRel);
    wait(&h.arrived, "waiting for every rank");
    for r in 0..ranks {
        // SAFETY: every rank wrote its description before arriving (Acquire above).
        let theirs = unsafe {
            (std::ptr::addr_of!(h.descs) as *const [u64; 5])
                .add(r)
                .read_volatile()
        };
        if theirs != mine {
            // Every rank sees the same descriptions, so every rank stops here.
            unlink();
            panic!(
                "collective mismatch at call {} across processes: rank {rank} called {} of {} \
                 {:?}, rank {r} made a different call",
                desc.seq,
                desc.kind.name(),
                desc.count,
                desc.elem
            );
        }
    }
    let slot = input.len().next_multiple_of(64);
    let data = open_segment(&data_name, (ranks * slot).max(1));
    // SAFETY: rank `rank`'s slot lies inside the data segment (every rank sized it alike, their
    // calls being equal) and only this rank writes it, before the second barrier.
    unsafe {
        std::ptr::copy_nonoverlapping(input.as_ptr(), data.ptr.add(rank * slot), input.len())
    };
    h.written.fetch_add(1, Ordering::AcqRel);
    wait(&h.written, "waiting for every rank's input");
    // SAFETY: every slot was written before the second barrier and is only read from now on.
    let inputs: Vec<&[u8]> = (0..ranks)
        .map(|r| unsafe { std::slice::from_raw_parts(data.ptr.add(r * slot), input.len()) })
        .collect();
    let out = compute(desc, ranks, rank, &inputs);
    h.computed.fetch_add(1, Ordering::AcqRel);
    wait(&h.computed, "waiting for every rank to compute");
    if h.left.fetch_add(1, Ordering::AcqRel) + 1 == n {
        // C3: the last to leave removes the names.
        unlink();
    }
    out
}
/// Reduce `b` into `acc`, element by element, as type `T`.
fn fold<T: Copy>(acc: &mut [T], b: &[T], f: impl Fn(T, T) -> T) {
    for (a, &x) in acc.iter_mut().zip(b) {
        *a = f(*a, x);
    }
}

macro_rules! reduce_as {
    ($t:ty, $acc:expr, $b:expr, $op:expr, $wrap:ident) => {{
        let acc: &mut [$t] = bytemuck::cast_slice_mut($acc);
        let b: &[$t] = bytemuck::cast_slice($b);
        match $op {
            ReduceOp::Sum => fold(acc, b, |x, y| reduce_as!(@$wrap add x y)),
            ReduceOp::Prod => fold(acc, b, |x, y| reduce_as!(@$wrap mul x y)),
            ReduceOp::Max => fold(acc, b, |x, y| if y > x { y } else { x }),
            ReduceOp::Min => fold(acc, b, |x, y| if y < x { y } else { x }),
        }
    }};
    (@int add $x:ident $y:ident) => { $x.wrapping_add($y) };
    (@int mul $x:ident $y:ident) => { $x.wrapping_mul($y) };
    (@float add $x:ident $y:ident) => { $x + $y };
    (@float mul $x:ident $y:ident) => { $x * $y };
}

/// `acc = acc ⊕ b` for elements of type `elem` (the host backend's reduction step; integers
/// wrap, as NCCL's do).
pub(crate) fn reduce_into(elem: ElemType, op: ReduceOp, acc: &mut [u8], b: &[u8]) {
    match elem {
        ElemType::I8 => reduce_as!(i8, acc, b, op, int),
        ElemType::U8 => reduce_as!(u8, acc, b, op, int),
        ElemType::I32 => reduce_as!(i32, acc, b, op, int),
        ElemType::U32 => reduce_as!(u32, acc, b, op, int),
        ElemType::I64 => reduce_as!(i64, acc, b, op, int),
        ElemType::U64 => reduce_as!(u64, acc, b, op, int),
        ElemType::F32 => reduce_as!(f32, acc, b, op, float),
        ElemType::F64 => reduce_as!(f64, acc, b, op, float),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_in_rank_order() {
        let mut acc = vec![1i32, -5, 7];
        let b = [3i32, -6, 7];
        reduce_into(
            ElemType::I32,
            ReduceOp::Max,
            bytemuck::cast_slice_mut(&mut acc),
            bytemuck::cast_slice(&b),
        );
        assert_eq!(acc, vec![3, -5, 7]);
        let mut acc = vec![250u8, 2];
        reduce_into(ElemType::U8, ReduceOp::Sum, &mut acc, &[10, 3]);
        assert_eq!(acc, vec![4, 5], "integers wrap");
        let mut acc = vec![1.5f64, 2.0];
        let b = [2.0f64, -1.0];
        reduce_into(
            ElemType::F64,
            ReduceOp::Prod,
            bytemuck::cast_slice_mut(&mut acc),
            bytemuck::cast_slice(&b),
        );
        assert_eq!(acc, vec![3.0, -2.0]);
    }
}
