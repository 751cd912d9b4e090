//! The CUDA backend: the contract of [`crate::backend`] on a real NVIDIA GPU through the driver
//! API (`cudarc`'s `sys` bindings, loaded at run time: the build needs no CUDA toolkit, and a
//! machine without a driver gets [`Error::Unavailable`], never a panic).
//!
//! | file | does |
//! |---|---|
//! | `driver/` | the driver API wrapped once, by area; loading `libcuda` and NVRTC, versions and features (D1, D2) |
//! | `context.rs` | primary context: retain, per-thread binding, reset after faults, deferral |
//! | `device.rs` | properties, sticky faults and blame, device synchronize, [`Backend`] |
//! | `stream.rs` | streams (legacy = `CU_STREAM_LEGACY`), submit, graph launches, query, sync |
//! | `graph.rs` | native graphs: core's DAG as a `CUgraph`, instantiated, launched, updated (G1–G4) |
//! | `queue.rs` | per-stream keepalive queue: MM2 and fault naming (rules Q1–Q4) |
//! | `event.rs` | events with their flags and recorded state |
//! | `memory.rs` | device, pinned and stream-ordered memory and their release |
//! | `module.rs` | NVRTC compilation (options, name expressions) and module loading, cached per device |
//! | `ptx.rs` | kernels and their parameter sizes read from PTX (drivers older than CUDA 12.4) |
//! | `cache.rs` | the disk cache of compiled images and its key (KC3); its location and bound are `backend/kernel_cache.rs`'s |
//! | `cache_entry.rs` | one entry of that cache: the image, lowered names, kernels' parameter sizes, and its file format |
//! | `link.rs` | relocatable device code: several CUDA C sources linked by the driver (KC1) |
//! | `headers.rs` | where the CUDA headers are found for NVRTC (KC1) |
//! | `launch.rs` | one op on a driver stream: copies, memset, kernels, host functions |
//! | `interop.rs` | another library on the same device: lent streams, owners, the current context |
//! | `verify.rs` | with the sanitizer on: read arguments checksummed around a kernel (AC7) |
//!
//! Semantics live in core; this backend maps primitive work onto the driver's own streams and
//! events, which already implement ST1–ST9 and EV1–EV8. What it adds is lifetime (every op is
//! kept until the device is seen past it, MM2) and the sticky, kernel-naming fault (KN2, ER2).

mod batch_lists;
mod cache;
mod cache_entry;
mod capture_gate;
mod context;
mod device;
mod driver;
mod event;
mod fault;
mod graph;
mod graph_capture;
mod graph_cond;
mod graph_dot;
mod graph_host_reach;
mod graph_renew;
mod headers;
mod host_mem;
mod host_reach_gate;
mod interop;
mod launch;
mod legacy_order;
mod link;
mod managed;
mod memory;
mod module;
pub(crate) mod nccl;
mod pinned_cache;
mod pool;
mod ptx;
mod queue;
mod quiesce;
mod shared;
mod stream;
mod stream_drop;
mod verify;

use std::sync::Arc;

use crate::backend::contract::device::Backend;
use crate::error::{Error, Result};

/// Open CUDA device `ordinal` as the backend of cueflow device `device_id`.
pub(crate) fn open(device_id: u64, ordinal: usize) -> Result<Arc<dyn Backend>> {
    driver::library::load().map_err(|why| Error::Unavailable(format!("CUDA: {why}")))?;
    Ok(Arc::new(device::CudaBackend::open(device_id, ordinal)?))
}

/// Wait for the freeing thread's queue (frees, registration ends); returns at once when
/// nothing was ever queued.
pub(crate) fn flush_releases() {
    memory::flush_frees();
}

/// Number of CUDA devices present (`cuda:all`).
pub(crate) fn device_count() -> Result<usize> {
    raw_count().map_err(|why| Error::Unavailable(format!("CUDA: {why}")))
}

fn raw_count() -> std::result::Result<usize, String> {
    driver::library::load()?;
    let count = driver::context::device_count().map_err(|e| e.describe())?;
    Ok(count.max(0) as usize)
}

/// The names of the CUDA devices present, or why CUDA is unavailable (for `cueflow info`).
#[allow(dead_code)]
pub(crate) fn probe() -> std::result::Result<Vec<String>, String> {
    let count = raw_count()? as i32;
    if count <= 0 {
        return Err("the CUDA driver reports no device".into());
    }
    (0..count)
        .map(|i| {
            driver::context::device(i)
                .and_then(driver::context::name)
                .map_err(|e| e.describe())
        })
        .collect()
}

#[cfg(test)]
mod tests;
