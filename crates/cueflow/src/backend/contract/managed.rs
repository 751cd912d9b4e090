//! Managed (unified) memory as a backend provides it (HM4): where it is attached, where it is
//! prefetched to, and the advice a program gives about it.

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

/// A stream operation on managed memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ManagedOp {
    /// Migrate the pages to a location (`cudaMemPrefetchAsync`).
    Prefetch(MemLocation),
    /// Attach the allocation (`cudaStreamAttachMemAsync`).
    Attach(AttachMode),
}
