//! Backends: the [`contract`] every device implements, the host backend and the CUDA backend,
//! and the one way core opens a device ([`open`]).

pub(crate) mod contract;
pub(crate) mod host;
pub(crate) mod kernel_cache;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use std::sync::Arc;

use crate::error::Result;
use contract::device::Backend;

/// Which backend to open a device of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackendKind {
    /// Threads and engines on this machine, with `workers` compute workers (0: the default).
    Host { workers: usize },
    /// An NVIDIA GPU through the driver API.
    Cuda,
}

/// Open device `ordinal` of `kind` under the process-unique device id `id`.
pub(crate) fn open(id: u64, kind: BackendKind, ordinal: usize) -> Result<Arc<dyn Backend>> {
    match kind {
        BackendKind::Host { workers } => {
            Ok(Arc::new(host::HostBackend::open(id, ordinal, workers)?))
        }
        BackendKind::Cuda => open_cuda(id, ordinal),
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(id: u64, ordinal: usize) -> Result<Arc<dyn Backend>> {
    cuda::open(id, ordinal)
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_id: u64, _ordinal: usize) -> Result<Arc<dyn Backend>> {
    use crate::error::Error;
    Err(Error::Unavailable(
        "cueflow was built without the `cuda` feature".into(),
    ))
}

/// Wait until every release a backend handed to a thread of its own has happened (the CUDA
/// backend ends registrations on its freeing thread): a registration ended that way is over
/// then, whichever backend registers the same bytes next (HM1).
pub(crate) fn flush_releases() {
    #[cfg(feature = "cuda")]
    cuda::flush_releases();
}

/// Number of CUDA devices (asks the driver; 0 without the `cuda` feature).
pub(crate) fn cuda_device_count() -> Result<usize> {
    #[cfg(feature = "cuda")]
    {
        cuda::device_count()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(0)
    }
}
