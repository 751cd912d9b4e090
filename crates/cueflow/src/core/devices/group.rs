//! Group calls (MD4): one op on each of several streams, of different devices, enqueued as one
//! call — each op passes its own device's layers like any other operation, and the backend
//! takes all of them at once.

use std::sync::Arc;

use crate::backend::contract::device::{Done, GroupPart};
use crate::backend::contract::op::Op;
use crate::core::devices::device::DeviceCore;
use crate::core::streams::hostfn::check_not_in_host_fn;
use crate::core::streams::stream::StreamCore;
use crate::core::tracking::call::{Accesses, Call, Caller, Site, What};
use crate::core::tracking::locks::Held;
use crate::core::tracking::track::Tracking;
use crate::error::{Error, Result};

/// One member of a group call: its device, stream and op.
pub(crate) struct GroupMember<'a> {
    pub dev: &'a DeviceCore,
    pub stream: &'a Arc<StreamCore>,
    pub op: Op,
}

/// Enqueue one op on each of several streams (of different devices) as one call (MD4): each op
/// passes its own device's layers like any other operation (ST1/ST2, tracking, trace), and
/// `submit` hands all of them to the backend at once, in the members' order. Refused as a whole,
/// enqueueing nothing, when any member refuses.
pub(crate) fn submit_group(
    members: Vec<GroupMember<'_>>,
    site: Site,
    submit: impl FnOnce(Vec<GroupPart>) -> Result<Vec<Option<Done>>>,
) -> Result<()> {
    check_not_in_host_fn("a collective")?;
    let Some(members) = capture_group(members, site)? else {
        return Ok(()); // Captured (GR11).
    };
    for m in &members {
        m.stream.check_legacy(m.dev, "an operation")?;
        m.dev.autograph.before_other()?; // AG4
    }
    // Nothing to track (CUDA without sanitizer or automatic ordering): straight to the
    // backend, as single operations go (`StreamCore::submit`).
    if members
        .iter()
        .all(|m| !m.dev.track.wants(m.stream, &Accesses::Op(&m.op)))
    {
        let parts = members
            .into_iter()
            .map(|mut m| {
                let _ = m.stream.trace_op(m.dev, &mut m.op);
                GroupPart {
                    stream: m.stream.backend.clone(),
                    op: m.op,
                    after: Vec::new(),
                    want_done: false,
                }
            })
            .collect();
        submit(parts)?;
        return Ok(());
    }
    // Locks in one global order: devices by id, then memory by address (see lock_group).
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| members[i].dev.id);
    let mut held: Vec<Option<Held<'_>>> = {
        let locking: Vec<(&Tracking, &Op)> = order
            .iter()
            .map(|&i| (&members[i].dev.track, &members[i].op))
            .collect();
        Tracking::lock_group(&locking)
            .into_iter()
            .map(Some)
            .collect()
    };
    let mut slots: Vec<Option<(Op, Vec<Done>, bool)>> = members.iter().map(|_| None).collect();
    let (members, ops): (Vec<_>, Vec<_>) = members
        .into_iter()
        .map(|m| ((m.dev, m.stream), Some(m.op)))
        .unzip();
    let mut ops = ops;
    let mut group = Group {
        members: &members,
        order: &order,
        held: &mut held,
        ops: &mut ops,
        slots: &mut slots,
        done: None,
        submit: Some(submit),
        site,
    };
    group.level(0)
}

/// GR11: a capture records a collective as a node of each member's graph, and every member's
/// stream must be capturing (each into its own device's graph). `None` once captured; the
/// members back when no stream captures.
fn capture_group<'a>(
    members: Vec<GroupMember<'a>>,
    site: Site,
) -> Result<Option<Vec<GroupMember<'a>>>> {
    let capturing = members
        .iter()
        .filter(|m| m.stream.capture().is_some())
        .count();
    if capturing == 0 {
        return Ok(Some(members));
    }
    if capturing < members.len() {
        return Err(Error::Capture(format!(
            "{}: {capturing} of {} members' streams are capturing; a collective is captured \
             only when every member's stream captures (GR11)",
            members[0].op.name(),
            members.len()
        )));
    }
    for m in members {
        let session = m.stream.capture().expect("checked above");
        session.add_op(m.stream.lane(), m.op, site)?;
    }
    Ok(None)
}

/// The state of [`submit_group`] while it nests one member's tracked call inside the previous
/// member's, so that every member's locks are held until the backend took all parts.
struct Group<'g, 'a, F> {
    members: &'g [(&'a DeviceCore, &'a Arc<StreamCore>)],
    order: &'g [usize],
    held: &'g mut Vec<Option<Held<'a>>>,
    ops: &'g mut Vec<Option<Op>>,
    slots: &'g mut Vec<Option<(Op, Vec<Done>, bool)>>,
    done: Option<Vec<Option<Done>>>,
    submit: Option<F>,
    site: Site,
}

impl<F: FnOnce(Vec<GroupPart>) -> Result<Vec<Option<Done>>>> Group<'_, '_, F> {
    /// Run member `order[k]`'s call; its submit step runs the next member's, and the last one
    /// hands every part to the backend.
    fn level(&mut self, k: usize) -> Result<()> {
        let i = self.order[k];
        let (dev, stream) = self.members[i];
        let op = self.ops[i].take().expect("each member runs once");
        let held = self.held[k].take();
        let what = |op: Option<&Op>| What::of(op.expect("a call with an operation"));
        let by = Caller {
            stream,
            legacy: dev.legacy_actor,
            site: self.site,
        };
        dev.track
            .run_held(by, Call::op(op), what, held, |op, deps, want| {
                let mut op = op.expect("a member's call has its op");
                let _ = stream.trace_op(dev, &mut op);
                self.slots[i] = Some((op, deps.to_vec(), want));
                if k + 1 < self.order.len() {
                    self.level(k + 1)?;
                } else {
                    let parts = self
                        .members
                        .iter()
                        .zip(self.slots.iter_mut())
                        .map(|((_, stream), slot)| {
                            let (op, after, want_done) = slot.take().expect("every member ran");
                            GroupPart {
                                stream: stream.backend.clone(),
                                op,
                                after,
                                want_done,
                            }
                        })
                        .collect();
                    let submit = self.submit.take().expect("submitted once");
                    self.done = Some(submit(parts)?);
                }
                Ok(self.done.as_ref().and_then(|d| d[i].clone()))
            })?;
        Ok(())
    }
}
