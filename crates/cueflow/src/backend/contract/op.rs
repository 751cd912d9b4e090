//! The primitive operations a backend executes.
//!
//! Each [`Op`] owns the memory references, kernel and host function it uses, so holding the op
//! keeps them alive (MM2, GR4). Ops are `Clone` (cheap: `Arc`s) because a captured graph submits
//! the same op on every launch (GR3).

use std::sync::Arc;

use super::comm::BackendComm;
use super::kernel::{KernelArg, Launch};
use super::memory::MemRef;
use super::trace::TraceSlot;
use crate::error::Result;
use crate::trace::{Engine, OpKind};
use crate::types::CollectiveDesc;
use crate::types::{Access, CollectiveKind, MemKind, Side};

/// A host function enqueued on a stream (HF1). `Fn` because a graph may run it many times
/// (one that runs once wraps its `FnOnce`). Core hands it over already wrapped in the
/// host-function guard (HF2): a backend only calls it.
pub(crate) type HostFn = Arc<dyn Fn() + Send + Sync>;

/// A host function as an operation: the function, its name for faults and traces, and the
/// host-visible memory it declared it reads and writes (HF3, AC1).
#[derive(Clone)]
pub(crate) struct HostCall {
    pub f: HostFn,
    /// Given by the program (`Stream::host_task`); `None` for plain host functions.
    pub name: Option<Arc<str>>,
    pub accesses: Arc<[(MemRef, Access)]>,
    /// Core's record of where in its stream's order the function runs (HF1), for the host
    /// accesses it makes: opaque to backends, which only run `f`.
    pub order: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl HostCall {
    /// A host function without a name or declared memory.
    pub fn new(f: HostFn) -> Self {
        HostCall {
            f,
            name: None,
            accesses: Arc::new([]),
            order: None,
        }
    }

    /// The name a fault of it carries (HF3).
    pub fn fault_name(&self) -> String {
        self.name.as_deref().unwrap_or("host function").to_string()
    }
}

/// Which part of an operation an access belongs to (for reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// A copy's source.
    Source,
    /// A copy's or memset's destination.
    Destination,
    /// A kernel's buffer argument.
    Arg(usize),
    /// The whole allocation (stream-ordered alloc and free).
    Whole,
    /// A host view or host copy of pinned memory.
    Host,
}

/// The work of an operation.
#[derive(Clone)]
pub(crate) enum Work {
    /// Copy `src` into `dst` (equal lengths, checked by core). Direction follows the memory kinds.
    Copy { dst: MemRef, src: MemRef },
    /// Set every byte of `dst` to `value`.
    Memset { dst: MemRef, value: u8 },
    /// Run a kernel.
    Launch(Launch),
    /// Run a host function (boxed: an `Op` stays small, [`Op`]).
    HostFn(Box<HostCall>),
    /// Copy the 4-byte word `src` to `dst` with one atomic load and one atomic store: a flag
    /// written to the device from private staging memory, or read back into it
    /// (`write_value`, `read_value`). The device side is an atomic access (AC3).
    Word { dst: MemRef, src: MemRef },
    /// This member's part of a collective (MD4): reads `send`, writes `recv` (both this
    /// device's memory, sized for `desc` by core; the same range when in place).
    Collective(Arc<CollectiveWork>),
    /// Work cueflow does not run itself: the caller's closure enqueues it on the raw CUDA
    /// stream, or runs it on a host engine, over the memory it declared.
    External(Arc<ExternalWork>),
}

/// The caller's CUDA side of an external operation: given the raw stream and context, it
/// enqueues its work there (called once at submission, in stream order; for a captured
/// operation, once per instantiation of its graph, on a stream the driver captures).
pub(crate) type ExternalCuda =
    Arc<dyn Fn(*mut std::ffi::c_void, *mut std::ffi::c_void, &[u64]) -> Result<()> + Send + Sync>;

/// The caller's host side: run on a host engine with the declared memory.
pub(crate) type ExternalHost = Arc<dyn Fn(&[(MemRef, Access)]) + Send + Sync>;

/// An external operation (interop): its name, the byte ranges it declared, and its sides.
pub(crate) struct ExternalWork {
    pub name: String,
    pub accesses: Vec<(MemRef, Access)>,
    pub cuda: Option<ExternalCuda>,
    pub host: Option<ExternalHost>,
}

/// A member's part of one collective call.
pub(crate) struct CollectiveWork {
    pub comm: Arc<dyn BackendComm>,
    pub desc: CollectiveDesc,
    pub send: MemRef,
    pub recv: MemRef,
}

impl CollectiveWork {
    /// True when this rank's `recv` is written: every rank's but a reduce's non-root ranks'
    /// (NCCL leaves their receive buffer alone).
    pub fn writes_recv(&self) -> bool {
        match self.desc.kind {
            CollectiveKind::Reduce { root, .. } => root == self.comm.rank(),
            _ => true,
        }
    }
}

/// A launch's read-declared arguments checked after the fact (SPEC AC7), where the backend
/// cannot stop a write through one as it happens (CUDA, with the sanitizer on): the backend
/// calls it with the index of each argument whose bytes changed across the kernel. Called on
/// a driver thread: it must not call the runtime.
pub(crate) type ReadCheck = Arc<dyn Fn(usize) + Send + Sync>;

/// One operation, as submitted to a backend stream. 72 bytes: every submission moves it
/// through several layers by value, so what most operations lack (a host function's
/// description, a read check, a label) is boxed (`op_is_72_bytes`).
#[derive(Clone)]
pub(crate) struct Op {
    pub work: Work,
    /// Filled with start/end times by the backend while tracing is on.
    pub trace: Option<Arc<TraceSlot>>,
    /// What few operations carry: a read check, a label.
    extra: Option<Box<OpExtra>>,
}

/// The rare parts of an [`Op`].
#[derive(Clone, Default)]
struct OpExtra {
    /// For a launch with the sanitizer on: report writes through read arguments (AC7).
    read_check: Option<ReadCheck>,
    /// Name in traces instead of the kind's label.
    label: Option<&'static str>,
}

impl Op {
    pub fn new(work: Work) -> Self {
        Op {
            work,
            trace: None,
            extra: None,
        }
    }

    /// An op named `label` in traces.
    pub fn labelled(work: Work, label: &'static str) -> Self {
        Op {
            work,
            trace: None,
            extra: Some(Box::new(OpExtra {
                read_check: None,
                label: Some(label),
            })),
        }
    }

    /// For a launch with the sanitizer on: the report of writes through read arguments (AC7).
    #[inline]
    pub fn read_check(&self) -> Option<&ReadCheck> {
        self.extra.as_ref()?.read_check.as_ref()
    }

    /// Give the op a read check (`Some`) or take it away.
    pub fn set_read_check(&mut self, check: Option<ReadCheck>) {
        match (&mut self.extra, check) {
            (Some(x), c) => x.read_check = c,
            (None, None) => {}
            (None, Some(c)) => {
                self.extra = Some(Box::new(OpExtra {
                    read_check: Some(c),
                    label: None,
                }))
            }
        }
    }

    fn label(&self) -> Option<&'static str> {
        self.extra.as_ref()?.label
    }

    /// The trace kind of this op.
    pub fn kind(&self) -> OpKind {
        match &self.work {
            Work::Copy { dst, src } if dst.is_peer_of(src) => OpKind::CopyPeer,
            Work::Copy { dst, src } => match (src.kind().side(), dst.kind().side()) {
                (Side::Host, Side::Device) => OpKind::CopyH2D,
                (Side::Device, Side::Host) => OpKind::CopyD2H,
                (Side::Device, Side::Device) => OpKind::CopyD2D,
                (Side::Host, Side::Host) => OpKind::CopyH2H,
            },
            Work::Memset { .. } => OpKind::Memset,
            Work::Launch(_) => OpKind::Kernel,
            Work::HostFn(_) => OpKind::HostFn,
            Work::Word { .. } => OpKind::Value,
            Work::Collective(_) => OpKind::Collective,
            Work::External(_) => OpKind::External,
        }
    }

    /// The engine that runs this op (CP5).
    pub fn engine(&self) -> Engine {
        match self.kind() {
            OpKind::CopyH2D => Engine::CopyH2D,
            // A peer copy leaves through a copy engine, as on a GPU.
            OpKind::CopyD2H | OpKind::CopyPeer => Engine::CopyD2H,
            OpKind::HostFn | OpKind::CopyH2H => Engine::Host,
            // Stream memory operations are done by the stream's front end, not an engine.
            OpKind::Value => Engine::None,
            _ => Engine::Compute,
        }
    }

    /// Bytes moved or set.
    pub fn bytes(&self) -> u64 {
        match &self.work {
            Work::Copy { dst, .. } => dst.len as u64,
            Work::Memset { dst, .. } => dst.len as u64,
            Work::Word { dst, .. } => dst.len as u64,
            Work::Collective(c) => c.send.len as u64,
            _ => 0,
        }
    }

    /// Kernel name or a short label.
    pub fn name(&self) -> String {
        match (&self.work, self.label()) {
            (Work::Launch(l), _) => l.kernel.name.clone(),
            (Work::Collective(c), _) => c.desc.kind.name().to_string(),
            (Work::External(x), _) => x.name.clone(),
            (Work::HostFn(h), _) if h.name.is_some() => h.fault_name(),
            (_, Some(label)) => label.to_string(),
            _ => self.kind().label().to_string(),
        }
    }
    /// The operation holding none of its memory: the same addresses, kinds and devices
    /// through allocations that own nothing. What a graph node keeps between launches once
    /// its memory was let go ([`BackendGraph::release`](super::device::BackendGraph)):
    /// launches, copies and memsets; other operations are kept as they are.
    pub fn hollow(&self) -> Op {
        fn hollow_mem(m: &MemRef) -> MemRef {
            let a = &m.alloc;
            MemRef {
                alloc: super::memory::Allocation::borrowed(a.addr, a.bytes, a.kind, a.device_id),
                offset: m.offset,
                len: m.len,
            }
        }
        let mut op = self.clone();
        match &mut op.work {
            Work::Launch(l) => l.set_args(l.args_with_memory(hollow_mem)),
            Work::Copy { dst, src } | Work::Word { dst, src } => {
                (*dst, *src) = (hollow_mem(dst), hollow_mem(src));
            }
            Work::Memset { dst, .. } => *dst = hollow_mem(dst),
            _ => {}
        }
        op
    }

    /// Visit every memory range the op touches (AC1), without allocating.
    #[inline]
    pub fn for_each_access(&self, mut f: impl FnMut(&MemRef, Access, Part)) {
        match &self.work {
            Work::Copy { dst, src } => {
                f(src, Access::Read, Part::Source);
                f(dst, Access::Write, Part::Destination);
            }
            Work::Memset { dst, .. } => f(dst, Access::Write, Part::Destination),
            // The staging side is private to the call.
            Work::Word { dst, src } if dst.kind() == MemKind::Device => {
                f(dst, Access::Atomic, Part::Destination)
            }
            Work::Word { src, .. } => f(src, Access::Atomic, Part::Source),
            Work::Launch(l) => {
                for (i, a) in l.args.iter().enumerate() {
                    if let KernelArg::Buffer { mem, access, .. } = a {
                        f(mem, *access, Part::Arg(i));
                    }
                }
            }
            Work::HostFn(h) => {
                for (i, (m, a)) in h.accesses.iter().enumerate() {
                    f(m, *a, Part::Arg(i));
                }
            }
            Work::Collective(c) => {
                f(&c.send, Access::Read, Part::Source);
                if c.writes_recv() {
                    f(&c.recv, Access::Write, Part::Destination);
                }
            }
            Work::External(x) => {
                for (i, (m, a)) in x.accesses.iter().enumerate() {
                    f(m, *a, Part::Arg(i));
                }
            }
        }
    }

    /// True if the op touches memory at all.
    pub fn has_accesses(&self) -> bool {
        match &self.work {
            Work::Copy { .. } | Work::Memset { .. } | Work::Word { .. } => true,
            Work::Collective(_) => true,
            Work::External(x) => !x.accesses.is_empty(),
            Work::Launch(l) => l.args.iter().any(|a| matches!(a, KernelArg::Buffer { .. })),
            Work::HostFn(h) => !h.accesses.is_empty(),
        }
    }

    /// True if the op touches pinned memory (copies, and host functions over buffers).
    pub fn touches_pinned(&self) -> bool {
        match &self.work {
            Work::Copy { dst, src } => dst.kind().is_host() || src.kind().is_host(),
            Work::HostFn(h) => h.accesses.iter().any(|(m, _)| m.kind().is_host()),
            // Mapped and managed memory as kernel or external arguments (HM3, HM4): host
            // access waits for these too (MM3), so they are tracked like copies.
            Work::Launch(l) => l.host_memory(),
            Work::External(_) => {
                let mut pinned = false;
                self.for_each_access(|m, _, _| pinned |= m.kind().is_host());
                pinned
            }
            _ => false,
        }
    }

    /// True if the op hands the host views of the memory it declared (HF3): it must run after
    /// earlier conflicting accesses on every backend, as the host backend runs all work
    /// (AC6), so that the views it hands out are never written meanwhile.
    pub fn host_views(&self) -> bool {
        matches!(&self.work, Work::HostFn(h) if !h.accesses.is_empty())
    }
}

#[cfg(test)]
mod tests {
    /// An `Op` moves by value through every layer of a submission (api, core, the backend's
    /// begin, queue and keepalive): at 112 bytes (a host function's description and the rare
    /// read check and label inline) the moves were ~14 % of an empty launch's instructions.
    /// (A launch's host-memory flag gave `Work` its tag's room: 56 bytes, the `Op` 72.)
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn op_is_72_bytes() {
        assert_eq!(std::mem::size_of::<super::Work>(), 56);
        assert_eq!(std::mem::size_of::<super::Op>(), 72);
    }
}
