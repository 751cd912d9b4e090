//! Memory as every layer names it: where an allocation lives, how an operation uses a byte
//! range (AC1), managed memory's locations, attachment and advice (HM4), pool statistics (HM5).

/// Where an allocation lives: the kinds of memory CUDA has. Whether host memory is portable
/// (HM2) or mapped (HM3) is a property of the allocation (`HostMem`), not a kind.
///
/// A new kind is a variant here; [`MemKind::side`] says which side of the bus it is on, which
/// is all that copies, tracking and host views ask of it. What else differs is where the
/// backends make it and, on CUDA, how a copy or memcpy node addresses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Device memory (host backend: a heap block owned by the device).
    Device,
    /// Page-locked host memory the runtime allocated, reachable by the copy engines
    /// (`cudaHostAlloc`, CP2), and the backends' own staging memory.
    Pinned,
    /// Memory the program owns, page-locked by a registration (`cudaHostRegister`, HM1).
    Registered,
    /// Managed memory (`cudaMallocManaged`, HM4): one address, valid on the host and on every
    /// device.
    Managed,
    /// Pageable memory the program allocated normally, reached by copies (CP3) and by graph
    /// copy nodes and captured copies.
    Pageable,
}

/// Which side of the bus memory is on, as copies and host views see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The host reaches it by its address: every kind but device memory.
    Host,
    /// Device memory.
    Device,
}

impl MemKind {
    /// Which side of the bus memory of this kind is on.
    #[inline]
    pub fn side(self) -> Side {
        match self {
            MemKind::Device => Side::Device,
            MemKind::Pinned | MemKind::Registered | MemKind::Managed | MemKind::Pageable => {
                Side::Host
            }
        }
    }

    /// True for memory the host reaches by its address (every kind but device memory).
    #[inline]
    pub fn is_host(self) -> bool {
        self.side() == Side::Host
    }
}

/// How an operation uses a byte range (AC1): a kernel's buffer argument, a copy's source or
/// destination, a host view of pinned memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only read.
    Read,
    /// Written (and possibly read); kernels write at the block's own elements.
    Write,
    /// Read and written with atomic operations only, anywhere (flags between streams).
    Atomic,
}

impl Access {
    /// True if an access of kind `self` and one of kind `other`, by different actors on
    /// overlapping bytes, conflict (AC3): at least one writes, and not both are atomic.
    pub fn conflicts_with(self, other: Access) -> bool {
        !matches!(
            (self, other),
            (Access::Read, Access::Read) | (Access::Atomic, Access::Atomic)
        )
    }

    /// Lower-case name for messages.
    pub fn label(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Atomic => "atomic",
        }
    }
}

/// Where managed memory is prefetched to or preferred (`cudaMemLocation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemLocation {
    /// Host memory (`cudaCpuDeviceId`).
    Host,
    /// The memory of the device the call is made for.
    Device,
    /// The memory of the device with this ordinal on the same backend (CUDA:
    /// `cudaMemLocationTypeDevice` with that id): a prefetch issued on one device's stream
    /// that migrates the pages to another device, as `cudaMemPrefetchAsync(p, n, dstDevice,
    /// stream)` allows. Made by `Device::mem_location`; the host backend moves nothing.
    Ordinal(usize),
}

/// Which streams' work host access to managed memory must wait for on a device without
/// concurrent managed access (`cudaMemAttachGlobal`, `…Host`, `…Single`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttachMode {
    /// Every stream of every device may use it (the default of an allocation).
    #[default]
    Global,
    /// Only the host uses it: device work need not be waited for (and, without concurrent
    /// managed access, a kernel must not touch it).
    Host,
    /// One stream uses it: host access waits for that stream only.
    Single,
}

/// Advice about how managed memory is used (`cudaMemAdvise`). It changes only speed; the
/// host backend accepts it and does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Mostly read: devices may keep read-only copies (`cudaMemAdviseSetReadMostly`).
    SetReadMostly,
    /// Undo [`Advice::SetReadMostly`].
    UnsetReadMostly,
    /// Prefer to keep the pages at a location (`cudaMemAdviseSetPreferredLocation`).
    SetPreferredLocation(MemLocation),
    /// Undo [`Advice::SetPreferredLocation`].
    UnsetPreferredLocation,
    /// The device will access the memory: keep it mapped there
    /// (`cudaMemAdviseSetAccessedBy`).
    SetAccessedBy,
    /// Undo [`Advice::SetAccessedBy`].
    UnsetAccessedBy,
}

/// A pool's statistics in bytes, as CUDA's `cudaMemPoolAttrReservedMemCurrent`,
/// `…ReservedMemHigh`, `…UsedMemCurrent` and `…UsedMemHigh` report them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Memory the pool holds from the system now: handed out and idle.
    pub reserved: u64,
    /// Highest `reserved` since the pool was made or its marks were reset.
    pub reserved_high: u64,
    /// Memory handed out to allocations and not freed yet.
    pub used: u64,
    /// Highest `used` since the pool was made or its marks were reset.
    pub used_high: u64,
}

/// A stream operation on managed memory (HM4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ManagedOp {
    /// Migrate the pages to a location (`cudaMemPrefetchAsync`).
    Prefetch(MemLocation),
    /// Attach the allocation (`cudaStreamAttachMemAsync`).
    Attach(AttachMode),
}
