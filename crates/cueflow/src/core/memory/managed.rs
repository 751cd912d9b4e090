//! Managed memory as core sees it (HM4): allocation, prefetch and attach as stream operations
//! (external operations whose device side the backend provides), advice, and which device
//! work host access must wait for on a device without concurrent managed access.
//!
//! With concurrent managed access (every host device; H100-class GPUs on Linux) host access
//! waits for exactly the device work that touches the bytes (MM3), as for pinned memory.
//! Without it CUDA forbids host access while a kernel that may use the memory runs, so host
//! access first waits as the attachment says: for the whole device the memory was allocated
//! on (global), for the attached stream (single), or for nothing (host).

use std::sync::Arc;

use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{ExternalHost, ExternalWork, Op, Work};
use crate::core::devices::device::DeviceCore;
use crate::core::memory::alloc::state;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::stream::StreamCore;
use crate::error::{Error, Result};
use crate::types::ManagedOp;
use crate::types::{Advice, AttachMode, MemKind, MemLocation};

/// Where a managed allocation is attached (HM4), kept in its [`AllocState::extra`].
///
/// [`AllocState::extra`]: crate::core::memory::alloc::AllocState::extra
enum Attached {
    Host,
    Single(Arc<StreamCore>, Arc<DeviceCore>),
}

fn not_managed(call: &str) -> Error {
    Error::NotPermitted {
        rule: "HM4",
        what: format!("{call}: the memory is not managed memory"),
    }
}

impl DeviceCore {
    /// `bytes` of zeroed managed memory (HM4), attached globally or to the host.
    pub fn alloc_managed(&self, bytes: usize, attach: AttachMode) -> Result<Arc<Allocation>> {
        check_not_in_host_fn("ManagedBuffer::new")?;
        if let Some(e) = self.backend.sticky_error() {
            return Err(e);
        }
        if !self.properties().managed_memory {
            return Err(Error::Unsupported(format!(
                "device {} has no managed memory (managedMemory = 0)",
                self.describe()
            )));
        }
        if attach == AttachMode::Single {
            return Err(Error::NotPermitted {
                rule: "HM4",
                what: "an allocation is attached globally or to the host; attach it to one \
                       stream with Stream::attach_managed"
                    .into(),
            });
        }
        let alloc = self
            .autograph
            .or_let_go(|| self.backend.alloc_managed(bytes, attach))?;
        crate::core::memory::host_mem::note_locked(&alloc);
        if attach == AttachMode::Host {
            *state(&alloc).extra.lock() = Some(Box::new(Attached::Host));
        }
        Ok(alloc)
    }

    /// Apply `advice` to managed memory `mem` for this device (HM4).
    pub fn advise(&self, mem: &MemRef, advice: Advice) -> Result<()> {
        check_not_in_host_fn("ManagedBuffer::advise")?;
        if mem.kind() != MemKind::Managed {
            return Err(not_managed("advise"));
        }
        self.backend.advise(mem, advice)
    }

    /// Before host access to managed memory: on a device without concurrent managed access,
    /// wait for the work its attachment says (see the module docs).
    pub fn managed_host_wait(&self, alloc: &Allocation) -> Result<()> {
        if alloc.kind != MemKind::Managed || self.properties().concurrent_managed_access {
            return Ok(());
        }
        let single = {
            let extra = state(alloc).extra.lock();
            match extra.as_ref().and_then(|b| b.downcast_ref::<Attached>()) {
                Some(Attached::Host) => return Ok(()),
                Some(Attached::Single(s, d)) => Some((s.clone(), d.clone())),
                None => None,
            }
        };
        match single {
            Some((s, d)) => s.synchronize(&d),
            None => self.synchronize(),
        }
    }
}

impl StreamCore {
    /// Enqueue `op` on managed memory `mem` in this stream's order (HM4): a prefetch, or an
    /// attachment (to this stream for [`AttachMode::Single`]).
    pub fn managed_op(
        self: &Arc<Self>,
        dev: &Arc<DeviceCore>,
        mem: &MemRef,
        op: ManagedOp,
        site: crate::core::tracking::call::Site,
    ) -> Result<()> {
        let call = match op {
            ManagedOp::Prefetch(_) => "Stream::prefetch",
            ManagedOp::Attach(_) => "Stream::attach_managed",
        };
        check_not_in_host_fn(call)?;
        if mem.kind() != MemKind::Managed {
            return Err(not_managed(call));
        }
        let props = dev.properties();
        let to_device = matches!(
            op,
            ManagedOp::Prefetch(MemLocation::Device | MemLocation::Ordinal(_))
        );
        if to_device && !props.concurrent_managed_access {
            // CUDA refuses it too (cudaErrorInvalidDevice).
            return Err(Error::Unsupported(format!(
                "{call}: device {} cannot take prefetches of managed memory \
                 (concurrentManagedAccess = 0)",
                dev.describe()
            )));
        }
        let name: String = match op {
            ManagedOp::Prefetch(MemLocation::Device) => "prefetch to device".into(),
            ManagedOp::Prefetch(MemLocation::Ordinal(n)) => format!("prefetch to device {n}"),
            ManagedOp::Prefetch(MemLocation::Host) => "prefetch to host".into(),
            ManagedOp::Attach(AttachMode::Global) => "attach global".into(),
            ManagedOp::Attach(AttachMode::Host) => "attach host".into(),
            ManagedOp::Attach(AttachMode::Single) => "attach single stream".into(),
        };
        let cuda = dev.backend.managed_side(mem, op)?;
        // The host backend's memory is host memory: nothing moves (documented no-op).
        let host: ExternalHost = Arc::new(|_| {});
        let work = Work::External(Arc::new(ExternalWork {
            name,
            accesses: Vec::new(),
            cuda,
            host: Some(host),
        }));
        self.submit(dev, Op::new(work), site)?;
        if let ManagedOp::Attach(mode) = op {
            let attached = match mode {
                AttachMode::Global => None,
                AttachMode::Host => Some(Attached::Host),
                AttachMode::Single => Some(Attached::Single(self.clone(), dev.clone())),
            };
            *state(&mem.alloc).extra.lock() =
                attached.map(|a| Box::new(a) as Box<dyn std::any::Any + Send + Sync>);
        }
        Ok(())
    }
}
