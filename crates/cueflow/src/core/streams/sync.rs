//! The synchronous calls of a stream: pageable copies (CP3) and 4-byte value reads and
//! writes, each waiting for what it must before it returns.

use std::sync::Arc;

use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::{Op, Part, Work};
use crate::core::devices::device::DeviceCore;
use crate::core::streams::entry::AtCapture;
use crate::core::streams::stream::{whole, StreamCore};
use crate::core::tracking::call::{Call, Site, What};
use crate::error::Result;
use crate::trace::OpKind;
use crate::types::{Access, MemKind};

impl StreamCore {
    /// CP3: copy from pageable host memory. The source is read into a staging buffer before
    /// this returns, and the staged copy runs in stream order like any other (so its device
    /// write is ordered by the stream, not by the return, AC3).
    pub fn write_pageable(
        &self,
        dev: &DeviceCore,
        dst: &MemRef,
        src: &[u8],
        site: Site,
    ) -> Result<()> {
        let sync = AtCapture::refuse_sync("pageable copy (synchronous, CP3)");
        self.enter(dev, "Stream::write_pageable", sync, Some("a pageable copy"))?;
        let (dst, held) = stream_mem(dst)?;
        let dst = &dst;
        if dev.backend.capabilities().shares_host_memory {
            // The engines reach pageable memory themselves: one copy straight from `src`,
            // which this call waits for, so the borrow outlives every use of it (CP3 at
            // memory speed, no staging). Only the source read is ordered before the return
            // for the sanitizer (AC3), as with staging.
            let view = pageable_view(dev, src.as_ptr() as *mut u8, src.len());
            let op = Op::labelled(
                Work::Copy {
                    dst: dst.clone(),
                    src: view,
                },
                "pageable H2D (direct)",
            );
            let call = Call::one(Some(op), dst, Access::Write, Part::Destination);
            let what = |_: Option<&Op>| What::Pageable(OpKind::CopyH2D);
            let (done, _) = self.run_tracked(dev, call, what, site, true)?;
            if let Some(d) = &done {
                dev.backend.wait_done(d)?;
            }
            return Ok(());
        }
        let stage = dev.backend.alloc_staging(src.len())?;
        // SAFETY: `stage` is a fresh allocation of at least src.len() bytes that nothing else
        // references yet, so the bytes are ours to write; `src` is a live borrow.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), stage.host_ptr(), src.len()) };
        let op = Op::labelled(
            Work::Copy {
                dst: dst.clone(),
                src: whole(stage, src.len()),
            },
            "pageable H2D (staged)",
        );
        let call = Call::one(Some(op), dst, Access::Write, Part::Destination);
        let what = |_: Option<&Op>| What::Pageable(OpKind::CopyH2D);
        // The device write is not waited for (CP3): it is a use of graph memory (GR10).
        let (done, _) = self.run_tracked(dev, call, what, site, !held.is_empty())?;
        crate::core::graphs::mem::used(&held, done);
        Ok(())
    }

    /// CP3: copy into pageable host memory; returns once the data has arrived.
    pub fn read_pageable(
        &self,
        dev: &DeviceCore,
        dst: &mut [u8],
        src: &MemRef,
        site: Site,
    ) -> Result<()> {
        let sync = AtCapture::refuse_sync("pageable copy (synchronous, CP3)");
        self.enter(dev, "Stream::read_pageable", sync, Some("a pageable copy"))?;
        let src = &stream_mem(src)?.0;
        if dev.backend.capabilities().shares_host_memory {
            // One copy straight into `dst`, waited for below (no staging, see write_pageable).
            let view = pageable_view(dev, dst.as_mut_ptr(), dst.len());
            let op = Op::labelled(
                Work::Copy {
                    dst: view,
                    src: src.clone(),
                },
                "pageable D2H (direct)",
            );
            let call = Call::one(Some(op), src, Access::Read, Part::Source);
            return self.read_back(dev, call, What::Pageable(OpKind::CopyD2H), site);
        }
        let stage = dev.backend.alloc_staging(dst.len())?;
        let op = Op::labelled(
            Work::Copy {
                dst: whole(stage.clone(), dst.len()),
                src: src.clone(),
            },
            "pageable D2H (staged)",
        );
        let call = Call::one(Some(op), src, Access::Read, Part::Source);
        self.read_back(dev, call, What::Pageable(OpKind::CopyD2H), site)?;
        // SAFETY: the copy into `stage` completed (read_back waited for it) and nothing else
        // writes `stage`, which holds at least dst.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(stage.host_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Write `value` into the 4-byte word `dst` atomically, in stream order: staged in private
    /// memory first, so the op needs no engine on the host backend and only a copy engine on a
    /// GPU.
    pub fn write_value(
        self: &Arc<Self>,
        dev: &DeviceCore,
        dst: &MemRef,
        value: u32,
        site: Site,
    ) -> Result<()> {
        let stage = dev.backend.alloc_staging(4)?;
        // SAFETY: `stage` is a fresh, page-aligned allocation of at least 4 bytes that nothing
        // else references yet.
        unsafe { (stage.host_ptr() as *mut u32).write(value) };
        let op = Op::new(Work::Word {
            dst: dst.clone(),
            src: whole(stage, 4),
        });
        self.submit(dev, op, site)
    }

    /// Read the 4-byte word `src` atomically in stream order and return it; blocks.
    pub fn read_value(&self, dev: &DeviceCore, src: &MemRef, site: Site) -> Result<u32> {
        let sync = AtCapture::refuse_sync("read_value (synchronous)");
        self.enter(dev, "Stream::read_value", sync, Some("read_value"))?;
        let src = &stream_mem(src)?.0;
        let stage = dev.backend.alloc_staging(4)?;
        let op = Op::new(Work::Word {
            dst: whole(stage.clone(), 4),
            src: src.clone(),
        });
        let call = Call::one(Some(op), src, Access::Atomic, Part::Source);
        self.read_back(dev, call, What::Op(OpKind::Value), site)?;
        // SAFETY: the read into `stage` completed (read_back waited for it); `stage` holds 4
        // bytes, page-aligned, that nothing else writes.
        Ok(unsafe { (stage.host_ptr() as *const u32).read() })
    }

    /// Enqueue `op`, which moves device data into private staging memory, and wait for it;
    /// the return observes its completion, and with it the stream up to it (AC2).
    fn read_back(&self, dev: &DeviceCore, call: Call<'_>, what: What, site: Site) -> Result<()> {
        let (done, seen) = self.run_tracked(dev, call, |_| what, site, true)?;
        debug_assert!(done.is_some(), "backends hand back a completion when asked");
        if let Some(d) = &done {
            dev.backend.wait_done(d)?;
        }
        dev.backend.sticky_error().map_or(Ok(()), Err)?;
        dev.track.observed(seen);
        Ok(())
    }
}

/// What a synchronous call (pageable copy, `read_value`) works on: graph memory as `submit`
/// resolves it for any stream operation (live: the graph's; else refused, GR7, GR10).
/// Also the graph memory it names (graph_mem rule 3: a use not waited for is recorded).
fn stream_mem(m: &MemRef) -> Result<(MemRef, Vec<Arc<Allocation>>)> {
    if m.alloc.graph_slot.is_none() {
        return Ok((m.clone(), Vec::new()));
    }
    let (dst, mut live) = (m.clone(), None); // an operation naming `m`, never enqueued
    let probe = Op::new(Work::Memset { dst, value: 0 });
    let (op, held) = crate::core::graphs::mem::resolve_stream_op(&probe)?;
    op.for_each_access(|r, _, _| live = Some(r.clone()));
    Ok((live.expect("a memset names its destination"), held))
}

/// Pageable memory of the program as a copy's side, for a device whose engines share the
/// host's memory; the caller waits for the copy before the borrow behind `ptr` ends.
fn pageable_view(dev: &DeviceCore, ptr: *mut u8, len: usize) -> MemRef {
    let alloc = Allocation::borrowed(ptr as usize as u64, len, MemKind::Pageable, dev.id);
    whole(alloc, len)
}
