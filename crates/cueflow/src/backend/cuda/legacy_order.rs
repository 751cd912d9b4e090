//! ST4 where the driver lets a copy pass. On an H200 (driver 580.159), a host-to-device copy
//! of 16 KiB from pinned memory on the legacy stream ran before a blocking stream's earlier
//! kernel, and the same copy on a blocking stream ran before the legacy stream's earlier
//! kernel, when the copy's own stream had nothing pending; 256 KiB and larger copies, and
//! device-to-host and device-to-device copies of every size, were ordered
//! (`benches/cuda/legacy_order_probe.cu` shows it without cueflow). A wait of the stream's own
//! orders such a copy, so before a copy from host memory on the legacy stream or a blocking
//! stream, that stream waits through an event for the other side's work that the device has
//! not been seen to finish: every blocking stream's for the legacy stream, the legacy stream's
//! for a blocking one.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;

use super::driver::{self, CuResult, STREAM_LEGACY};
use super::queue::StreamQueue;
use super::shared::DeviceShared;
use crate::backend::contract::op::{Op, Work};

/// Whether `op` is a copy the driver may start without ST4's implicit wait: from host memory
/// into device memory.
pub(super) fn copy_skips_st4(op: &Op) -> bool {
    match &op.work {
        Work::Copy { dst, src } => src.kind().is_host() && !dst.kind().is_host(),
        _ => false,
    }
}

/// Make `q` (the legacy stream or a blocking stream) wait for its ST4 partners' unfinished
/// work. Context current (D2).
pub(super) fn wait_for_st4_partners(shared: &DeviceShared, q: &Arc<StreamQueue>) -> CuResult<()> {
    let legacy = is_legacy(q);
    if !legacy && !q.blocking {
        return Ok(()); // ST5: a non-blocking stream takes no part.
    }
    let partners: Vec<Arc<StreamQueue>> = shared
        .streams
        .lock()
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .filter(|p| !Arc::ptr_eq(p, q) && if legacy { p.blocking } else { is_legacy(p) })
        .collect();
    for p in partners {
        // An adopted stream's work may not all be in its queue: always waited for.
        if p.owned && p.queue.lock().held() == 0 {
            continue; // The device was seen past everything it ran.
        }
        let e = driver::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)?;
        let waited =
            driver::event::record(e, p.raw).and_then(|()| driver::stream::wait_event(q.raw, e));
        // The wait holds what it needs: destroying the event now is allowed (EV8).
        driver::event::destroy(e);
        waited?;
    }
    Ok(())
}

fn is_legacy(q: &StreamQueue) -> bool {
    std::ptr::eq(q.raw.0, STREAM_LEGACY)
}
