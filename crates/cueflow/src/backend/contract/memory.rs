//! Raw allocations and the references operations hold on them (SPEC MM2).
//!
//! An [`Allocation`] is one block of device or pinned memory as a backend made it. User handles
//! and every enqueued operation hold it through an `Arc`, so the memory is released only when
//! the last of them is gone: an operation drops its references when it completes, so nothing is
//! freed under running work whatever the host program drops meanwhile (MM2). Releasing is the
//! backend's job, done by the [`Release`] it attached at allocation time.
//!
//! What the layers above keep per allocation (core: its access records and host-view count)
//! lives in the allocation's [`Extension`], which backends neither read nor write.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use crate::types::MemKind;

/// The properties of host memory (HM2, HM3), as its backend made it; its kind is the
/// allocation's [`MemKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostMem {
    /// Usable by every device's streams (HM2).
    pub portable: bool,
    /// Kernels may read and write it in place (HM3).
    pub mapped: bool,
    /// The device's address of the memory when it differs from the host's (mapped memory on
    /// a system without unified addressing); 0 when it is `addr`.
    pub device_view: u64,
}

/// State one layer above the backend attaches to an allocation, created on first use. One type
/// per allocation: the layer that reads it is the layer that made it (core).
#[derive(Default)]
pub(crate) struct Extension(OnceLock<Box<dyn Any + Send + Sync>>);

impl Extension {
    /// The attached `T`, made with `T::default()` on first use.
    ///
    /// # Panics
    /// If a different type was attached first: one layer owns the extension.
    pub fn get<T: Any + Send + Sync + Default>(&self) -> &T {
        self.0
            .get_or_init(|| Box::new(T::default()))
            .downcast_ref::<T>()
            .expect("an allocation's extension has one owner and one type")
    }
}

thread_local! {
    /// Set while the program drops its own handle ([`dropping_own_handle`]).
    static OWN_DROP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, which drops a handle the program held, telling a release it causes that it may
/// run right here even if it waits for the device (the program let go of the memory itself,
/// as `cudaHostUnregister` would be called). A release caused inside any other call (finished
/// work retired by a query or a launch) must not make that call wait, and [`own_drop`] says
/// which case it is.
pub(crate) fn dropping_own_handle(f: impl FnOnce()) {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            OWN_DROP.with(|d| d.set(self.0));
        }
    }
    let _reset = Reset(OWN_DROP.with(|d| d.replace(true)));
    f()
}

/// Whether the release running now comes from [`dropping_own_handle`].
pub(crate) fn own_drop() -> bool {
    OWN_DROP.with(|d| d.get())
}

/// How a backend gives memory back when the last reference drops.
pub(crate) trait Release: Send + Sync {
    /// Release `bytes` at `addr`. Called exactly once, with no operation left that touches it.
    fn release(&self, addr: u64, bytes: usize);
    /// The release as `Any`, for the layer that made it to find its own type again (an
    /// adopted allocation's owner, taken back). `None` for the backends' own.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// One block of memory. `addr` is a device address (CUDA) or a host pointer (host backend,
/// pinned memory on every backend) stored as an integer.
pub(crate) struct Allocation {
    pub addr: u64,
    pub bytes: usize,
    pub kind: MemKind,
    pub device_id: u64,
    /// Registered, portable and mapped host memory (HM1–HM3); all false for other memory.
    pub host: HostMem,
    /// What core keeps of the allocation (opaque here).
    pub ext: Extension,
    /// Set for memory a capture allocated (GR7): it has no address of its own; each graph
    /// instantiated from the capture maps the slot to memory of its own.
    pub graph_slot: Option<GraphSlot>,
    release: Option<Box<dyn Release>>,
}

/// The allocation node of a capture that a placeholder allocation stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GraphSlot {
    /// The capture session.
    pub capture: u64,
    /// Index of the allocation among the capture's allocations.
    pub slot: usize,
}

impl Allocation {
    pub fn new(
        addr: u64,
        bytes: usize,
        kind: MemKind,
        device_id: u64,
        release: Box<dyn Release>,
    ) -> Arc<Self> {
        Arc::new(Allocation {
            addr,
            bytes,
            kind,
            device_id,
            host: HostMem::default(),
            ext: Extension::default(),
            graph_slot: None,
            release: Some(release),
        })
    }

    /// Host memory of `kind` with the properties `host` says (HM1–HM4).
    pub fn new_host(
        addr: u64,
        bytes: usize,
        kind: MemKind,
        device_id: u64,
        host: HostMem,
        release: Box<dyn Release>,
    ) -> Arc<Self> {
        debug_assert!(kind.is_host());
        Arc::new(Allocation {
            addr,
            bytes,
            kind,
            device_id,
            host,
            ext: Extension::default(),
            graph_slot: None,
            release: Some(release),
        })
    }

    /// True if streams of device `device_id` may use this memory: it is that device's, or
    /// portable host memory (HM2).
    pub fn usable_on(&self, device_id: u64) -> bool {
        self.device_id == device_id || (self.kind.is_host() && self.host.portable)
    }

    /// The address a kernel on the device uses for the first byte: the device view of mapped
    /// memory, else `addr` (HM3).
    pub fn kernel_addr(&self) -> u64 {
        if self.host.device_view != 0 {
            self.host.device_view
        } else {
            self.addr
        }
    }

    /// Memory allocated inside a capture (GR7): a placeholder with no address.
    pub fn placeholder(bytes: usize, device_id: u64, slot: GraphSlot) -> Arc<Self> {
        Arc::new(Allocation {
            addr: 0,
            bytes,
            kind: MemKind::Device,
            device_id,
            host: HostMem::default(),
            ext: Extension::default(),
            graph_slot: Some(slot),
            release: None,
        })
    }

    /// Memory that something else owns and releases (a graph's own allocations).
    pub fn borrowed(addr: u64, bytes: usize, kind: MemKind, device_id: u64) -> Arc<Self> {
        Arc::new(Allocation {
            addr,
            bytes,
            kind,
            device_id,
            host: HostMem::default(),
            ext: Extension::default(),
            graph_slot: None,
            release: None,
        })
    }

    /// True for memory something else owns ([`borrowed`](Self::borrowed)): a graph's own
    /// allocations, which only their own device's context maps.
    pub fn is_borrowed(&self) -> bool {
        self.release.is_none() && self.graph_slot.is_none()
    }

    /// The release attached at allocation time as `R`, if it is one.
    #[cfg_attr(not(feature = "cudarc-interop"), allow(dead_code))] // Used by the cudarc interop.
    pub fn release_as<R: Any>(&self) -> Option<&R> {
        self.release.as_ref()?.as_any()?.downcast_ref()
    }

    /// Host pointer of a pinned (or host-backend) allocation.
    pub fn host_ptr(&self) -> *mut u8 {
        self.addr as usize as *mut u8
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let Some(r) = self.release.take() {
            r.release(self.addr, self.bytes);
        }
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} allocation of {} bytes at {:#x} on device {}",
            self.kind, self.bytes, self.addr, self.device_id
        )
    }
}

/// A byte range of an allocation, held by operations until they complete.
#[derive(Clone, Debug)]
pub(crate) struct MemRef {
    pub alloc: Arc<Allocation>,
    pub offset: usize,
    pub len: usize,
}

impl MemRef {
    /// Address of the first byte.
    pub fn addr(&self) -> u64 {
        self.alloc.addr + self.offset as u64
    }

    pub fn kind(&self) -> MemKind {
        self.alloc.kind
    }

    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len
    }

    /// True if a copy from `src` into `self` moves data between the memory of two devices
    /// (MD3). Host memory (pinned, registered, portable, managed) belongs to no device here:
    /// every device's copy engines reach it (HM2).
    pub fn is_peer_of(&self, src: &MemRef) -> bool {
        self.kind() == MemKind::Device
            && src.kind() == MemKind::Device
            && self.alloc.device_id != src.alloc.device_id
    }

    /// True if the two references share at least one byte of the same allocation.
    pub fn overlaps(&self, other: &MemRef) -> bool {
        Arc::ptr_eq(&self.alloc, &other.alloc)
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }
}
