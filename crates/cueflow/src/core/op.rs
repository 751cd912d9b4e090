//! The primitive operations core hands to a backend.
//!
//! Each [`Op`] owns the memory references, kernel and host function it uses, so holding the op
//! keeps them alive (MM2, GR4). Ops are `Clone` (cheap: `Arc`s) because a captured graph submits
//! the same op on every launch (GR3).

use std::any::TypeId;
use std::sync::Arc;

use super::alloc::{MemKind, MemRef};
use super::recorder::TraceSlot;
use crate::api::kernel::KernelInner;
use crate::trace::{Engine, OpKind};

/// A host function enqueued on a stream (HF1). `Fn` because a graph may run it many times.
pub(crate) type HostFn = Arc<dyn Fn() + Send + Sync>;

/// How a kernel uses a buffer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only read.
    Read,
    /// Written (and possibly read) at the block's own elements.
    Write,
    /// Read and written with atomic operations only, anywhere (flags between streams).
    Atomic,
}

/// One kernel argument as core validated it.
#[derive(Clone, Debug)]
pub(crate) enum KernelArg {
    Buffer {
        mem: MemRef,
        access: Access,
        elem: TypeId,
        elem_name: &'static str,
    },
    Scalar {
        bytes: [u8; 16],
        size: usize,
        ty: TypeId,
        ty_name: &'static str,
    },
}

/// A kernel launch.
#[derive(Clone)]
pub(crate) struct Launch {
    pub kernel: Arc<KernelInner>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub args: Arc<[KernelArg]>,
}

impl Launch {
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| d as u64).product()
    }
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| d as u64).product()
    }
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
    /// Run a host function.
    HostFn(HostFn),
}

/// One operation, as submitted to a backend stream.
#[derive(Clone)]
pub(crate) struct Op {
    pub work: Work,
    /// Filled with start/end times by the backend while tracing is on.
    pub trace: Option<Arc<TraceSlot>>,
}

impl Op {
    pub fn new(work: Work) -> Self {
        Op { work, trace: None }
    }

    /// The trace kind of this op.
    pub fn kind(&self) -> OpKind {
        match &self.work {
            Work::Copy { dst, src } => match (src.kind(), dst.kind()) {
                (MemKind::Pinned, MemKind::Device) => OpKind::CopyH2D,
                (MemKind::Device, MemKind::Pinned) => OpKind::CopyD2H,
                (MemKind::Device, MemKind::Device) => OpKind::CopyD2D,
                (MemKind::Pinned, MemKind::Pinned) => OpKind::CopyH2H,
            },
            Work::Memset { .. } => OpKind::Memset,
            Work::Launch(_) => OpKind::Kernel,
            Work::HostFn(_) => OpKind::HostFn,
        }
    }

    /// The engine that runs this op (CP5).
    pub fn engine(&self) -> Engine {
        match self.kind() {
            OpKind::CopyH2D => Engine::CopyH2D,
            OpKind::CopyD2H => Engine::CopyD2H,
            OpKind::HostFn | OpKind::CopyH2H => Engine::Host,
            _ => Engine::Compute,
        }
    }

    /// Bytes moved or set.
    pub fn bytes(&self) -> u64 {
        match &self.work {
            Work::Copy { dst, .. } => dst.len as u64,
            Work::Memset { dst, .. } => dst.len as u64,
            _ => 0,
        }
    }

    /// Kernel name or a short label.
    pub fn name(&self) -> String {
        match &self.work {
            Work::Launch(l) => l.kernel.name.clone(),
            _ => self.kind().label().to_string(),
        }
    }

    /// Every memory range the op touches, with whether it writes it.
    pub fn accesses(&self) -> Vec<(MemRef, bool)> {
        match &self.work {
            Work::Copy { dst, src } => vec![(src.clone(), false), (dst.clone(), true)],
            Work::Memset { dst, .. } => vec![(dst.clone(), true)],
            Work::Launch(l) => l
                .args
                .iter()
                .filter_map(|a| match a {
                    KernelArg::Buffer { mem, access, .. } => {
                        Some((mem.clone(), *access != Access::Read))
                    }
                    KernelArg::Scalar { .. } => None,
                })
                .collect(),
            Work::HostFn(_) => Vec::new(),
        }
    }
}
