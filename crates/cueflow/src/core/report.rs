//! The sanitizer's race reports (AC4): both accesses, why nothing orders them, and the
//! smallest fix.

use std::ops::Range;

use super::access::Rec;
use super::call::{Acc, OpInfo, Site, What, Who};
use super::clock::VClock;
use super::sanitizer::{RaceAccess, RaceReport};
use crate::backend::contract::device::StreamKind;
use crate::backend::contract::memory::{Allocation, MemKind};
use crate::backend::contract::op::Part;
use crate::trace::OpKind;

/// One conflict found for a new access.
pub(super) struct Conflict {
    pub rec: Rec,
    pub overlap: Range<usize>,
    pub acc: Acc,
}

/// Build the report for a conflict `c` with earlier operation `info`, completed by `what` of
/// `later` (whose clock is `vc`) at `site`.
pub(super) fn race_report(
    c: &Conflict,
    alloc: &Allocation,
    info: &OpInfo,
    later: &Who,
    what: &What,
    site: Site,
    vc: &VClock,
) -> RaceReport {
    let earlier_acc = RaceAccess {
        stream: info.who.stream.as_ref().map(|s| s.0),
        actor: info.who.describe(),
        operation: info.what.describe(c.rec.part),
        access: c.rec.kind,
        bytes: c.rec.range.clone(),
        site: info.site,
    };
    let later_acc = RaceAccess {
        stream: later.stream.as_ref().map(|s| s.0),
        actor: later.describe(),
        operation: what.describe(c.acc.part),
        access: c.acc.kind,
        bytes: c.acc.range.clone(),
        site,
    };
    let why = explain(info, later, vc);
    let names = (info.what.describe(Part::Whole), what.describe(Part::Whole));
    let fix = fix_hint(&earlier_acc, &later_acc, later, names);
    RaceReport {
        allocation: describe_alloc(alloc),
        overlap: c.overlap.clone(),
        earlier: earlier_acc,
        later: later_acc,
        why,
        fix,
    }
}

/// `device allocation of 4096 bytes at 0x7f…`.
fn describe_alloc(a: &Allocation) -> String {
    let kind = match a.kind {
        MemKind::Device => "device",
        MemKind::Pinned => "pinned host",
    };
    format!("{kind} allocation of {} bytes at {:#x}", a.bytes, a.addr)
}

/// Why the earlier access `info` does not happen before the later one (clock `vc`).
fn explain(info: &OpInfo, later: &Who, vc: &VClock) -> String {
    let a = info.who.short();
    let b = later.short();
    let known = vc.get(info.actor);
    let mut why = if known == 0 {
        format!(
            "nothing orders {b} after {a}: no event recorded on {a} after the earlier access \
             was waited on by {b}, and no host synchronization observed it"
        )
    } else {
        format!(
            "{b} is ordered only after the first {known} operation(s) of {a} (through an event \
             wait or a host synchronization), and the earlier access is its operation {}",
            info.time
        )
    };
    let kinds = (
        info.who.stream.as_ref().map(|s| s.2),
        later.stream.as_ref().map(|s| s.2),
    );
    if matches!(
        kinds,
        (Some(StreamKind::Legacy), Some(StreamKind::NonBlocking))
            | (Some(StreamKind::NonBlocking), Some(StreamKind::Legacy))
    ) {
        why.push_str(
            "; a non-blocking stream takes no part in the legacy default stream's implicit \
             ordering (ST5)",
        );
    }
    if matches!(info.what, What::Pageable(OpKind::CopyH2D)) {
        why.push_str(
            "; a pageable host-to-device copy returns once its source was read, not once the \
             device write landed (CP3)",
        );
    }
    if later.stream.is_none() {
        why.push_str("; as_slice_unchecked does not wait for device work (MM3's opt-out)");
    }
    why
}

/// The smallest change that orders `earlier` before `later`; `names` are the two operations'
/// names without the part.
fn fix_hint(
    earlier: &RaceAccess,
    later: &RaceAccess,
    later_who: &Who,
    names: (String, String),
) -> String {
    let (first, second) = names;
    match (earlier.stream, later_who.stream.as_ref()) {
        (Some(a), Some((b, ..))) => format!(
            "record an event on stream {a} after the {first} at {} and make stream {b} wait on \
             it (Stream::wait_event) before the {second} at {}; or turn on automatic ordering \
             for stream {b}",
            earlier.site, later.site
        ),
        (Some(a), None) => format!(
            "synchronize stream {a} (or an event recorded after the {first} at {}) before the \
             host access at {}, or use PinnedBuffer::read/write, which wait for exactly that \
             work",
            earlier.site, later.site
        ),
        _ => format!(
            "order the {second} at {} after the {first} at {} with an event or a \
             synchronization",
            later.site, earlier.site
        ),
    }
}
