//! The language of the fuzzer's programs: what a random program is made of, independent of how
//! it is generated (`gen.rs`), predicted (`model.rs`) or run (`run.rs`, `graphs.rs`).
//!
//! A program runs on one device (or two, `host:2x`, for collectives and cross-device work).
//! Each device has the same buffers of [`N`] `f32`s, named by index: three of device memory,
//! then pinned, mapped, managed and registered host memory. A region ([`Loc`]) is a whole
//! buffer, a half or a quarter. Values stay small integers, halves and their products, so
//! every operation is exact or rounds the same way everywhere, and the sequential model
//! predicts every bit.

use std::fmt;
use std::ops::Range;

/// Elements of each buffer.
pub const N: usize = 64;
/// Streams of a device: the first blocking, the next two non-blocking, the last the legacy
/// default stream (ST4: it waits for the blocking ones, and they for it).
pub const STREAMS: usize = 4;
pub const LEGACY: u8 = STREAMS as u8 - 1;
/// Events of a device.
pub const EVENTS: usize = 3;
/// Buffers of a device, by index.
pub const DEV_BUFS: u8 = 3;
pub const PINNED: u8 = 3;
pub const MAPPED: u8 = 4;
pub const MANAGED: u8 = 5;
pub const REGISTERED: u8 = 6;
pub const BUFFERS: usize = 7;
/// Pools a device creates (besides its default pool).
pub const POOLS: usize = 2;

/// Which part of a buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Whole,
    Half(u8),
    Quarter(u8),
}

/// A region of one buffer of the device the step runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub buf: u8,
    pub part: Part,
}

impl Loc {
    pub fn range(self) -> Range<usize> {
        match self.part {
            Part::Whole => 0..N,
            Part::Half(h) => h as usize * N / 2..(h as usize + 1) * N / 2,
            Part::Quarter(q) => q as usize * N / 4..(q as usize + 1) * N / 4,
        }
    }

    pub fn len(self) -> usize {
        self.range().len()
    }

    pub fn overlaps(self, o: Loc) -> bool {
        let (a, b) = (self.range(), o.range());
        self.buf == o.buf && a.start < b.end && b.start < a.end
    }

    /// Device memory (kernels, memsets, device copies).
    pub fn is_device(self) -> bool {
        self.buf < DEV_BUFS
    }

    /// Host-visible memory (host views, host tasks).
    pub fn is_host(self) -> bool {
        !self.is_device()
    }
}

impl fmt::Debug for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = ["D0", "D1", "D2", "P", "M", "G", "R"][self.buf as usize];
        match self.part {
            Part::Whole => write!(f, "{name}"),
            Part::Half(h) => write!(f, "{name}.h{h}"),
            Part::Quarter(q) => write!(f, "{name}.q{q}"),
        }
    }
}

/// One access of a region (for the graph builder's dependencies and the race check).
#[derive(Clone, Copy, Debug)]
pub struct Acc {
    pub loc: Loc,
    pub write: bool,
}

impl Acc {
    pub fn conflicts(self, o: Acc) -> bool {
        (self.write || o.write) && self.loc.overlaps(o.loc)
    }
}

/// Work a stream runs, or a node of a graph.
#[derive(Clone, Debug)]
pub enum Work {
    /// Built-in kernel: `dst[i] = v`.
    Fill { dst: Loc, v: i8 },
    /// Built-in kernel: `dst[i] *= f`.
    Scale { dst: Loc, f: f32 },
    /// Built-in kernel: `y[i] = fma(a, x[i], y[i])`.
    Saxpy { a: f32, x: Loc, y: Loc },
    /// Every byte of device memory `dst` set to `byte`.
    Memset { dst: Loc, byte: u8 },
    /// A copy of any direction: device, pinned, mapped, managed, registered memory.
    Copy { dst: Loc, src: Loc },
    /// A host function counting its runs.
    HostFn,
    /// A host function over declared buffers (HF3): `dst[i] = src[i] * 0.5 + k`.
    HostTask { src: Loc, dst: Loc, k: i8 },
    /// CUDA C kernel `fz_add`: `dst[i] = src[i] + c` (`src` may be `dst`).
    AddC { dst: Loc, src: Loc, c: i8 },
    /// CUDA C kernel `fz_reverse`: `dst[i] = src[n - 1 - i]` over the grid.
    Reverse { dst: Loc, src: Loc },
    /// CUDA C kernel `fz_block_reverse`: reversed within blocks of 16 through shared memory.
    BlockReverse { dst: Loc, src: Loc },
    /// CUDA C kernel `fz_prefix`: one thread, `dst[i] += dst[i - 1]` in order.
    Prefix { dst: Loc },
    /// A stream-ordered temporary of `dst`'s size from the default pool (`None`) or a created
    /// one: allocate, fill with `v`, copy into `dst`, free.
    Temp { pool: Option<u8>, v: i8, dst: Loc },
    /// `write_pageable` of `v`s into device memory (CP3; streams only).
    PageableWrite { dst: Loc, v: i8 },
    /// `read_pageable` of device memory, checked against the model there (streams only).
    PageableRead { src: Loc },
}

impl Work {
    /// What the work reads and writes (the temporary of `Temp` is its own).
    pub fn accesses(&self) -> Vec<Acc> {
        let w = |loc| Acc { loc, write: true };
        let r = |loc| Acc { loc, write: false };
        match *self {
            Work::Fill { dst, .. }
            | Work::Scale { dst, .. }
            | Work::Memset { dst, .. }
            | Work::Prefix { dst }
            | Work::Temp { dst, .. }
            | Work::PageableWrite { dst, .. } => vec![w(dst)],
            Work::Saxpy { x, y, .. } => vec![r(x), w(y)],
            Work::Copy { dst, src }
            | Work::HostTask { src, dst, .. }
            | Work::AddC { dst, src, .. }
            | Work::Reverse { dst, src }
            | Work::BlockReverse { dst, src } => vec![r(src), w(dst)],
            Work::PageableRead { src } => vec![r(src)],
            Work::HostFn => vec![],
        }
    }
}

/// How a conditional node's condition gets its value at a launch.
#[derive(Clone, Copy, Debug)]
pub enum CondSet {
    /// No kernel sets it: the default, reset at every launch.
    Default,
    /// A kernel before the node sets this value.
    Const(u8),
    /// A kernel before the node derives it from element 0 of `Loc` (device memory).
    From(Loc),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondKind {
    If,
    IfElse,
    While,
    Switch,
}

/// A conditional node (GR9) with the kernels that set its condition.
#[derive(Clone, Debug)]
pub struct CondSpec {
    pub kind: CondKind,
    /// Reset to `default` at every launch (otherwise `set` is never `Default`).
    pub reset: bool,
    pub default: u8,
    pub set: CondSet,
    /// While: a kernel of the body counts iterations and keeps looping below this many.
    pub limit: u8,
    /// If: 1; if/else: 2; while: 1; switch: 1 to 3. Each a chain of items.
    pub bodies: Vec<Vec<BodyItem>>,
}

/// A node of a conditional body: device work, or a nested conditional node.
#[derive(Clone, Debug)]
pub enum BodyItem {
    W(Work),
    Cond(CondSpec),
}

impl CondSpec {
    pub fn accesses(&self) -> Vec<Acc> {
        let mut v = Vec::new();
        if let CondSet::From(loc) = self.set {
            v.push(Acc { loc, write: false });
        }
        for item in self.bodies.iter().flatten() {
            match item {
                BodyItem::W(w) => v.extend(w.accesses()),
                BodyItem::Cond(c) => v.extend(c.accesses()),
            }
        }
        v
    }
}

/// A node of a built graph.
#[derive(Clone, Debug)]
pub enum NodeKind {
    Op(Work),
    Empty,
    /// Event record node of event `e` of the device.
    Record(u8),
    /// Event wait node on event `e` of the device.
    WaitEvent(u8),
    /// A child graph: a chain of work, built node by node or captured (`captured`).
    Child {
        works: Vec<Work>,
        captured: bool,
    },
    /// Graph memory (GR7): allocation node, fill with `v`, scale by `f`, copy into `dst`,
    /// free node.
    Mem {
        v: i8,
        f: f32,
        dst: Loc,
    },
    Cond(CondSpec),
}

impl NodeKind {
    pub fn accesses(&self) -> Vec<Acc> {
        match self {
            NodeKind::Op(w) => w.accesses(),
            NodeKind::Child { works, .. } => works.iter().flat_map(Work::accesses).collect(),
            NodeKind::Mem { dst, .. } => vec![Acc {
                loc: *dst,
                write: true,
            }],
            NodeKind::Cond(c) => c.accesses(),
            NodeKind::Empty | NodeKind::Record(_) | NodeKind::WaitEvent(_) => vec![],
        }
    }
}

/// A built node and the earlier nodes it depends on besides those it must (conflicting
/// accesses always get an edge, so the graph is race-free unless `racy`).
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub kind: NodeKind,
    /// Extra dependencies, each taken modulo the number of earlier nodes.
    pub deps: Vec<u8>,
}

/// A graph built node by node (GR8), optionally on top of a captured graph (`prefix`: work
/// captured on a side stream, one node each, before the built nodes are added).
#[derive(Clone, Debug)]
pub struct GraphSpec {
    pub prefix: Vec<Work>,
    pub nodes: Vec<NodeSpec>,
    /// Random ordering only: leave out the edge of one conflicting pair of nodes; if nothing
    /// else orders them, instantiation must be refused as a race (AC4).
    pub racy: bool,
}

/// Work of a capture.
#[derive(Clone, Debug)]
pub enum CapWork {
    W(Work),
    /// A conditional node added to the capture (`Stream::capture_conditional`).
    Cond(CondSpec),
}

/// Who frees the memory a graph hands out (GR10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeBy {
    /// `free_async` on the launching stream after each launch.
    Stream,
    /// Another graph's free node, launched after each launch.
    Graph,
    /// The next launch (auto-free-on-launch); a stream frees the last one.
    AutoFree,
    /// Known issue 13: the program drops its handle instead and launches again.
    Drop,
}

/// A graph that allocates and does not free (GR10): each launch hands out memory filled with
/// `v`, which the launching stream copies into `dst`.
#[derive(Clone, Debug)]
pub struct HandOut {
    /// Built node by node (else captured).
    pub built: bool,
    pub v: i8,
    pub dst: Loc,
    pub free: FreeBy,
    pub launches: u8,
}

#[derive(Clone, Copy, Debug)]
pub enum PoolOp {
    Threshold(u64),
    Trim(u64),
}

#[derive(Clone, Copy, Debug)]
pub enum ManagedOp {
    PrefetchHost,
    PrefetchDevice,
    AttachGlobal,
    AttachHost,
    AttachSingle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Prod,
}

/// A collective over the two devices: each rank's part on its own stream, over the same
/// buffer regions of its device.
#[derive(Clone, Copy, Debug)]
pub enum Coll {
    AllReduce(Reduce),
    Broadcast(u8),
    Reduce(Reduce, u8),
    AllGather,
    ReduceScatter(Reduce),
}

/// One step of a program. `d` is the device (0 unless the program has two).
#[derive(Clone, Debug)]
pub enum Step {
    Do {
        d: u8,
        s: u8,
        w: Work,
    },
    Record {
        d: u8,
        s: u8,
        e: u8,
    },
    /// Stream `s` of device `d` waits on event `e` of device `ed` (MD2 when they differ).
    Wait {
        d: u8,
        s: u8,
        ed: u8,
        e: u8,
    },
    SyncStream {
        d: u8,
        s: u8,
    },
    /// Stream `s` of device `d` waits for everything stream `from` of it has so far
    /// (`wait_stream`: a join through an event of the device's own, reused, EV4; AG2 replays
    /// windows of them).
    Join {
        d: u8,
        s: u8,
        from: u8,
    },
    SyncEvent {
        d: u8,
        e: u8,
    },
    SyncDevice {
        d: u8,
    },
    /// The host writes `v`s into host memory (MM3: waits).
    HostWrite {
        d: u8,
        dst: Loc,
        v: i8,
    },
    /// The host reads host memory and checks it against the model (MM3: waits).
    HostRead {
        d: u8,
        src: Loc,
    },
    /// Capture `body` on stream `s`, instantiate, launch `launches` times there.
    Capture {
        d: u8,
        s: u8,
        body: Vec<CapWork>,
        launches: u8,
    },
    /// Build `graph`, instantiate, launch it `launches` times on stream `s`.
    Build {
        d: u8,
        s: u8,
        graph: GraphSpec,
        launches: u8,
    },
    HandOut {
        d: u8,
        s: u8,
        h: HandOut,
    },
    /// Drop stream `s` (its work still runs, ST10) and make a new one in its place.
    Replace {
        d: u8,
        s: u8,
    },
    Pool {
        d: u8,
        p: u8,
        op: PoolOp,
    },
    Managed {
        d: u8,
        s: u8,
        op: ManagedOp,
    },
    /// End the registration of the registered buffer and register its contents again.
    Reregister {
        d: u8,
    },
    /// A collective over both devices on streams `s[0]` (device 0) and `s[1]` (device 1).
    Collective {
        s: [u8; 2],
        c: Coll,
        send: Loc,
        recv: Loc,
    },
    /// A copy on stream `s` of device `d` between regions of any two devices: peer copies
    /// of device memory (MD3), host memory of the other device (portable, HM2).
    Cross {
        d: u8,
        s: u8,
        dst: (u8, Loc),
        src: (u8, Loc),
    },
}

/// A whole program: the creation-time attributes of its pools, then its steps.
#[derive(Clone, Debug)]
pub struct Program {
    pub devices: u8,
    /// Release thresholds of the created pools.
    pub thresholds: [u64; POOLS],
    pub steps: Vec<Step>,
}
