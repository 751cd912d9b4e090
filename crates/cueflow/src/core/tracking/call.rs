//! The calls the tracking layer sees: where a call was written ([`Site`]), what an operation
//! was and who made it (for reports), the operation record the sanitizer keeps ([`OpInfo`]),
//! clock snapshots a host wait observes ([`Seen`]), and a call's accesses ([`Call`],
//! [`Accesses`]).

use std::ops::Range;
use std::panic::Location;
use std::sync::Arc;

use crate::backend::contract::kernel::KernelInner;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{Op, Part};
use crate::core::streams::ident::StreamIdent;
use crate::core::tracking::actors::ActorCell;
use crate::core::tracking::clock::Actor;
use crate::core::tracking::clock::VClock;
use crate::trace::OpKind;
use crate::types::Access;
use crate::types::StreamKind;

/// Where a call was written (`#[track_caller]`).
pub(crate) type Site = &'static Location<'static>;

/// What an operation was, for reports.
#[derive(Clone)]
pub(crate) enum What {
    /// A copy, memset or host function.
    Op(OpKind),
    /// A kernel launch.
    Kernel(Arc<KernelInner>),
    /// A pageable copy (CP3), host to device or device to host.
    Pageable(OpKind),
    /// Stream-ordered allocation or free (MM1).
    Alloc,
    /// Stream-ordered free (MM1); a write for ordering purposes.
    Free,
    /// Raw host access that does not wait (`as_slice_unchecked`).
    HostUnchecked,
    /// A graph launch of this many nodes.
    Graph(usize),
    /// Some nodes (`which`, a list) of a launch of a graph of `nodes` nodes, which its event
    /// nodes order apart from the rest (GR8).
    GraphNodes { nodes: usize, which: Arc<str> },
    /// A rank's part of a collective (`all_reduce`, ...).
    Collective(&'static str),
    /// An external operation, by its name.
    External(String),
    /// A host function over declared buffers (HF3), by its name.
    HostFn(String),
}

impl What {
    pub fn of(op: &Op) -> What {
        match &op.work {
            crate::backend::contract::op::Work::Launch(l) => What::Kernel(l.kernel.clone()),
            crate::backend::contract::op::Work::Collective(c) => {
                What::Collective(c.desc.kind.name())
            }
            crate::backend::contract::op::Work::External(x) => What::External(x.name.clone()),
            crate::backend::contract::op::Work::HostFn(h) if h.name.is_some() => {
                What::HostFn(h.fault_name())
            }
            _ => What::Op(op.kind()),
        }
    }

    pub(crate) fn describe(&self, part: Part) -> String {
        let part_name = match part {
            Part::Source => " (source)".to_string(),
            Part::Destination => " (destination)".to_string(),
            Part::Arg(i) => format!(" (argument {i})"),
            Part::Whole | Part::Host => String::new(),
        };
        match self {
            What::Op(k) => format!("{}{part_name}", k.label()),
            What::Kernel(k) => format!("kernel `{}`{part_name}", k.name),
            What::Pageable(OpKind::CopyH2D) => format!("pageable write_pageable{part_name}"),
            What::Pageable(_) => format!("pageable read_pageable{part_name}"),
            What::Alloc => "stream-ordered alloc_async".into(),
            What::Free => "stream-ordered free_async".into(),
            What::HostUnchecked => "host access through as_slice_unchecked".into(),
            What::Graph(n) => format!("graph launch ({n} nodes)"),
            What::GraphNodes { nodes, which } => {
                format!("graph launch ({nodes} nodes), node(s) {which}{part_name}")
            }
            What::Collective(name) => format!("collective {name}{part_name}"),
            What::External(name) => format!("external operation `{name}`{part_name}"),
            What::HostFn(name) => format!("host function `{name}`{part_name}"),
        }
    }
}

/// Who made an operation.
#[derive(Clone)]
pub(crate) struct Who {
    /// `None` for the host.
    pub stream: Option<(u64, Arc<str>, StreamKind)>,
    /// The stream's device (`host:1`, `cuda:0`); empty for the host.
    pub device: Arc<str>,
}

impl Who {
    /// Stream `id` named `name`, of kind `kind`, of the device `device` names.
    pub(crate) fn stream(id: u64, name: Arc<str>, kind: StreamKind, device: Arc<str>) -> Who {
        Who {
            stream: Some((id, name, kind)),
            device,
        }
    }

    pub(crate) fn host() -> Who {
        Who {
            stream: None,
            device: "".into(),
        }
    }

    /// ` of cuda:1` where `self` and `other` are streams of two devices (their ids are
    /// per device, MD2), else nothing.
    pub(crate) fn of_device_beside(&self, other: &Who) -> String {
        if self.stream.is_some() && other.stream.is_some() && self.device != other.device {
            format!(" of {}", self.device)
        } else {
            String::new()
        }
    }

    /// `stream 3`, or `the host`.
    pub(crate) fn short(&self) -> String {
        match &self.stream {
            None => "the host".into(),
            Some((id, ..)) => format!("stream {id}"),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match &self.stream {
            None => "the host".into(),
            Some((id, name, kind)) => {
                let kind = match kind {
                    StreamKind::Legacy => "legacy default",
                    StreamKind::Blocking => "blocking",
                    StreamKind::NonBlocking => "non-blocking",
                };
                if name.as_ref() == format!("stream {id}") {
                    format!("stream {id} ({kind})")
                } else {
                    format!("stream {id} (\"{name}\", {kind})")
                }
            }
        }
    }
}

/// What the sanitizer keeps of one operation (shared by its accesses).
pub(crate) struct OpInfo {
    pub actor: Actor,
    /// The actor's place in the live set: records keep it there (actors rule 4), and once it
    /// is retired (rule 3) the access is covered by every later check.
    pub cell: Arc<ActorCell>,
    pub who: Who,
    /// The actor's clock right after the operation; `time` is its own entry.
    pub vc: Arc<VClock>,
    pub time: u64,
    pub site: Site,
    pub what: What,
}

/// A clock snapshot some host call will observe once it has waited (`None`: sanitizer off).
#[derive(Clone, Default)]
pub(crate) struct Seen(pub(crate) Option<Arc<VClock>>);

impl Seen {
    pub fn none() -> Seen {
        Seen(None)
    }
}

/// Who makes a call, as the layer sees it: the stream, the device's legacy actor (ST4), and
/// where the call was written.
#[derive(Clone, Copy)]
pub(crate) struct Caller<'s> {
    pub stream: &'s StreamIdent,
    pub legacy: Actor,
    pub site: Site,
}

/// A stream call as the layer sees it: the operation for the backend, if any, and the
/// accesses that stand for the call — `stand_in` where set, else the operation's own.
pub(crate) struct Call<'m> {
    pub op: Option<Op>,
    /// [`Accesses::One`] or [`Accesses::Many`] in place of the operation's accesses.
    stand_in: Option<Accesses<'m>>,
    /// True if the call enqueues work on its stream (an operation, a graph launch), which a
    /// backend orders by the legacy stream's rules (ST4–ST6); false for stream-ordered
    /// allocation and free, which only the tracking layer sees.
    pub node: bool,
    /// A graph launch with host nodes: told where the launch runs (HF1), before the backend
    /// may run it.
    pub hosts: Option<PlaceHosts<'m>>,
}

/// What a graph launch's host nodes learn, while the tracking layer stamps the launch, of
/// where the launch runs among the device's work (HF1 in graphs).
pub(crate) struct LaunchPlace<'a> {
    /// The launching stream's clock before the launch.
    pub before: &'a Arc<VClock>,
    /// Each event wait node's snapshot, by wait (a launch with event nodes).
    pub waited: &'a [Option<Arc<VClock>>],
    /// The launch's stamps, by group (`core::tracking::track_scope` rule 3): the stream's for
    /// group 0 (every node of a launch without event nodes), then each group's, on its chain.
    pub stamps: Vec<(Actor, u64)>,
}

/// The call that tells a graph launch's host nodes their [`LaunchPlace`].
pub(crate) type PlaceHosts<'a> = &'a dyn Fn(&LaunchPlace<'_>);

impl<'m> Call<'m> {
    /// A call that is `op` and its accesses.
    pub fn op(op: Op) -> Self {
        Call {
            op: Some(op),
            stand_in: None,
            node: true,
            hosts: None,
        }
    }

    /// A call that is `op` (or none) standing for one access.
    pub fn one(op: Option<Op>, m: &'m MemRef, a: Access, p: Part) -> Self {
        Call {
            node: op.is_some(),
            op,
            stand_in: Some(Accesses::One(m, a, p)),
            hosts: None,
        }
    }

    /// A graph launch, standing for its footprint; `hosts` places its host nodes.
    pub fn graph(footprint: &'m [(MemRef, Access, Part)], hosts: Option<PlaceHosts<'m>>) -> Self {
        Call {
            op: None,
            stand_in: (!footprint.is_empty()).then_some(Accesses::Many(footprint)),
            node: true,
            hosts,
        }
    }

    pub(crate) fn accesses(&self) -> Accesses<'_> {
        match (&self.stand_in, &self.op) {
            (Some(a), _) => a.clone(),
            (None, Some(op)) => Accesses::Op(op),
            (None, None) => Accesses::None,
        }
    }
}

/// The accesses of one call, as the layer sees them.
#[derive(Clone)]
pub(crate) enum Accesses<'o> {
    /// None.
    None,
    /// Those of an operation.
    Op(&'o Op),
    /// One range (pageable copies, stream-ordered alloc and free).
    One(&'o MemRef, Access, Part),
    /// Several ranges (a graph launch's footprint).
    Many(&'o [(MemRef, Access, Part)]),
}

impl Accesses<'_> {
    pub(crate) fn for_each(&self, mut f: impl FnMut(&MemRef, Access, Part)) {
        match self {
            Accesses::None => {}
            Accesses::Op(op) => op.for_each_access(f),
            Accesses::One(m, a, p) => f(m, *a, *p),
            Accesses::Many(v) => v.iter().for_each(|(m, a, p)| f(m, *a, *p)),
        }
    }

    pub(crate) fn any(&self) -> bool {
        match self {
            Accesses::None => false,
            Accesses::Op(op) => op.has_accesses(),
            Accesses::One(..) => true,
            Accesses::Many(v) => !v.is_empty(),
        }
    }

    /// True for a host function that gets views of what it declared (HF3).
    pub(crate) fn host_views(&self) -> bool {
        matches!(self, Accesses::Op(op) if op.host_views())
    }

    pub(crate) fn touches_pinned(&self) -> bool {
        match self {
            Accesses::None => false,
            Accesses::Op(op) => op.touches_pinned(),
            Accesses::One(m, ..) => m.kind().is_host(),
            Accesses::Many(v) => v.iter().any(|(m, ..)| m.kind().is_host()),
        }
    }
}

/// One access of the call: which locked map, and what.
#[derive(Clone)]
pub(crate) struct Acc {
    pub map: usize,
    pub range: Range<usize>,
    pub kind: Access,
    pub part: Part,
}
