//! Generating programs (proptest strategies). Everything is built, not filtered — regions of
//! one size that do not overlap are made so — so a long run never exhausts proptest's
//! rejects, and shrinking keeps programs valid.

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::strategy::Union;

use crate::known::Known;
use crate::program::*;

/// What the generator may produce.
#[derive(Clone, Copy, Debug)]
pub struct Cfg {
    /// 1, or 2 for collectives and cross-device work.
    pub devices: u8,
    pub known: Known,
    /// Steps of a program at most.
    pub max_steps: usize,
}

/// Where a piece of work runs: each place takes a different subset of [`Work`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    /// On a stream: everything.
    Stream,
    /// In a capture: no synchronous (pageable) copies, temporaries from the default pool.
    Capture,
    /// A node of a built graph (or of a child graph): no temporaries, no pageable copies.
    Graph,
    /// A node of a conditional body: device memory only (kernels, memsets, device copies).
    Body,
}

const DEVICE: &[u8] = &[0, 1, 2];
const HOST: &[u8] = &[PINNED, MAPPED, MANAGED, REGISTERED];
const ANY: &[u8] = &[0, 1, 2, PINNED, MAPPED, MANAGED, REGISTERED];
/// Whole buffers a kernel takes: device memory, and mapped and managed memory in place.
const KERNEL_WHOLE: &[u8] = &[0, 1, 2, MAPPED, MANAGED];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size {
    Quarter,
    Half,
    Whole,
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![3 => Just(Size::Quarter), 2 => Just(Size::Half), 2 => Just(Size::Whole)]
}

fn part(sz: Size, i: Index) -> Part {
    match sz {
        Size::Quarter => Part::Quarter(i.index(4) as u8),
        Size::Half => Part::Half(i.index(2) as u8),
        Size::Whole => Part::Whole,
    }
}

fn pick(class: &[u8], i: Index) -> u8 {
    class[i.index(class.len())]
}

/// A region of a buffer of `class` (kernel classes narrow to device memory below whole).
fn loc_of(class: &'static [u8], kernel: bool) -> impl Strategy<Value = Loc> {
    (size(), any::<Index>(), any::<Index>()).prop_map(move |(sz, b, p)| {
        let class = if kernel && sz == Size::Whole {
            KERNEL_WHOLE
        } else {
            class
        };
        Loc {
            buf: pick(class, b),
            part: part(sz, p),
        }
    })
}

/// A region a kernel writes or reads.
fn kernel_loc() -> impl Strategy<Value = Loc> {
    loc_of(DEVICE, true)
}

/// Two regions of one size, `dst` of `dc` and `src` of `sc`, that do not overlap and are not
/// two regions of one host buffer (a copy between them would need two borrows of it).
fn pair(dc: &'static [u8], sc: &'static [u8], kernel: bool) -> impl Strategy<Value = (Loc, Loc)> {
    (size(), any::<[Index; 4]>()).prop_map(move |(sz, [a, b, pa, pb])| {
        let (dc, sc) = if kernel && sz == Size::Whole {
            (KERNEL_WHOLE, KERNEL_WHOLE)
        } else {
            (dc, sc)
        };
        let dst = Loc {
            buf: pick(dc, a),
            part: part(sz, pa),
        };
        let mut src = Loc {
            buf: pick(sc, b),
            part: part(sz, pb),
        };
        if src.buf == dst.buf && (src.overlaps(dst) || src.is_host()) {
            let at = sc.iter().position(|&x| x == src.buf).unwrap();
            src.buf = sc[(at + 1) % sc.len()];
        }
        (dst, src)
    })
}

fn small() -> impl Strategy<Value = i8> {
    -8i8..8
}

/// A piece of work for `ctx`.
pub fn work(ctx: Ctx) -> BoxedStrategy<Work> {
    let body = ctx == Ctx::Body;
    let (copy_dst, copy_src) = if body { (DEVICE, DEVICE) } else { (ANY, ANY) };
    let mut arms: Vec<(u32, BoxedStrategy<Work>)> = vec![
        (
            3,
            (kernel_loc(), small())
                .prop_map(|(dst, v)| Work::Fill { dst, v })
                .boxed(),
        ),
        (
            2,
            (kernel_loc(), select(vec![2.0f32, 0.5, -1.0]))
                .prop_map(|(dst, f)| Work::Scale { dst, f })
                .boxed(),
        ),
        (
            2,
            (
                pair(DEVICE, DEVICE, true),
                select(vec![1.0f32, 2.0, -1.0]),
                any::<bool>(),
            )
                .prop_map(|((y, x), a, in_place)| Work::Saxpy {
                    a,
                    x: if in_place { y } else { x },
                    y,
                })
                .boxed(),
        ),
        (
            1,
            (
                loc_of(DEVICE, false),
                select(vec![0u8, 0x3f, 0x40, 0xbf, 0x80]),
            )
                .prop_map(|(dst, byte)| Work::Memset { dst, byte })
                .boxed(),
        ),
        (
            3,
            pair(copy_dst, copy_src, false)
                .prop_map(|(dst, src)| Work::Copy { dst, src })
                .boxed(),
        ),
        (
            1,
            (pair(DEVICE, DEVICE, true), -4i8..4, any::<bool>())
                .prop_map(|((dst, src), c, in_place)| Work::AddC {
                    dst,
                    src: if in_place { dst } else { src },
                    c,
                })
                .boxed(),
        ),
        (
            1,
            pair(DEVICE, DEVICE, true)
                .prop_map(|(dst, src)| Work::Reverse { dst, src })
                .boxed(),
        ),
        (
            1,
            pair(DEVICE, DEVICE, true)
                .prop_map(|(dst, src)| Work::BlockReverse { dst, src })
                .boxed(),
        ),
        (1, kernel_loc().prop_map(|dst| Work::Prefix { dst }).boxed()),
    ];
    if !body {
        arms.push((1, Just(Work::HostFn).boxed()));
        arms.push((
            1,
            (pair(HOST, HOST, false), -4i8..4)
                .prop_map(|((dst, src), k)| Work::HostTask { src, dst, k })
                .boxed(),
        ));
    }
    if matches!(ctx, Ctx::Stream | Ctx::Capture) {
        let pools = if ctx == Ctx::Stream {
            POOLS as u8 + 1
        } else {
            1
        };
        arms.push((
            1,
            (0..pools, small(), loc_of(ANY, false))
                .prop_map(|(p, v, dst)| Work::Temp {
                    pool: p.checked_sub(1),
                    v,
                    dst,
                })
                .boxed(),
        ));
    }
    if ctx == Ctx::Stream {
        arms.push((
            1,
            (loc_of(DEVICE, false), small())
                .prop_map(|(dst, v)| Work::PageableWrite { dst, v })
                .boxed(),
        ));
        arms.push((
            1,
            loc_of(DEVICE, false)
                .prop_map(|src| Work::PageableRead { src })
                .boxed(),
        ));
    }
    Union::new_weighted(arms).boxed()
}

/// A conditional node; `depth` 0 may nest one more.
pub fn cond(depth: u32) -> BoxedStrategy<CondSpec> {
    let kind = prop_oneof![
        Just(CondKind::If),
        Just(CondKind::IfElse),
        Just(CondKind::While),
        Just(CondKind::Switch)
    ];
    (kind, 1usize..4).prop_flat_map(move |(kind, switch_bodies)| {
        let n = match kind {
            CondKind::IfElse => 2,
            CondKind::Switch => switch_bodies,
            _ => 1,
        };
        let item = if depth == 0 {
            prop_oneof![5 => work(Ctx::Body).prop_map(BodyItem::W), 1 => cond(1).prop_map(BodyItem::Cond)].boxed()
        } else {
            work(Ctx::Body).prop_map(BodyItem::W).boxed()
        };
        let set = prop_oneof![
            Just(CondSet::Default),
            (0u8..4).prop_map(CondSet::Const),
            loc_of(DEVICE, false).prop_map(CondSet::From)
        ];
        (any::<bool>(), 0u8..3, set, 0u8..4, prop::collection::vec(prop::collection::vec(item, 0..3), n))
            .prop_map(move |(reset, default, set, limit, bodies)| CondSpec {
                kind,
                reset,
                default,
                // Without the reset a kernel always sets the condition: CUDA leaves it
                // undefined at the first launch.
                set: match (reset, set) {
                    (false, CondSet::Default) => CondSet::Const(default),
                    (_, s) => s,
                },
                limit,
                bodies,
            })
    })
    .boxed()
}

fn node_kind() -> BoxedStrategy<NodeKind> {
    prop_oneof![
        8 => work(Ctx::Graph).prop_map(NodeKind::Op),
        1 => Just(NodeKind::Empty),
        1 => (0..EVENTS as u8).prop_map(NodeKind::Record),
        1 => (0..EVENTS as u8).prop_map(NodeKind::WaitEvent),
        1 => (prop::collection::vec(work(Ctx::Graph), 1..3), any::<bool>())
            .prop_map(|(works, captured)| NodeKind::Child { works, captured }),
        1 => (small(), select(vec![1.0f32, 2.0, -0.5]), loc_of(ANY, false))
            .prop_map(|(v, f, dst)| NodeKind::Mem { v, f, dst }),
        2 => cond(0).prop_map(NodeKind::Cond),
    ]
    .boxed()
}

pub fn graph_spec() -> BoxedStrategy<GraphSpec> {
    let node = (node_kind(), prop::collection::vec(any::<u8>(), 0..3))
        .prop_map(|(kind, deps)| NodeSpec { kind, deps });
    (
        prop::collection::vec(work(Ctx::Graph), 0..3),
        prop::collection::vec(node, 1..7),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(prefix, nodes, racy)| GraphSpec {
            prefix,
            nodes,
            racy,
        })
        .boxed()
}

fn hand_out(known: Known) -> impl Strategy<Value = HandOut> {
    let mut frees = vec![FreeBy::Stream, FreeBy::Graph, FreeBy::AutoFree];
    if known.has("13") {
        frees.push(FreeBy::Drop);
    }
    (
        any::<bool>(),
        small(),
        loc_of(ANY, false),
        select(frees),
        1u8..4,
    )
        .prop_map(|(built, v, dst, free, launches)| HandOut {
            built,
            v,
            dst,
            free,
            launches,
        })
}

fn collective() -> impl Strategy<Value = (Coll, Loc, Loc)> {
    let red = select(vec![Reduce::Sum, Reduce::Prod]);
    let kind = prop_oneof![
        red.clone().prop_map(Coll::AllReduce),
        (0u8..2).prop_map(Coll::Broadcast),
        (red.clone(), 0u8..2).prop_map(|(r, root)| Coll::Reduce(r, root)),
        Just(Coll::AllGather),
        red.prop_map(Coll::ReduceScatter),
    ];
    (
        kind,
        pair(DEVICE, DEVICE, false),
        any::<bool>(),
        any::<[Index; 3]>(),
    )
        .prop_map(|(c, (recv, send), in_place, [b1, b2, h])| {
            match c {
                Coll::AllGather | Coll::ReduceScatter(_) => {
                    // One side a half (or a quarter), the other the whole (or a half) of
                    // another buffer.
                    let half = h.index(2) == 0;
                    let big = Loc {
                        buf: pick(DEVICE, b1),
                        part: if half {
                            Part::Whole
                        } else {
                            Part::Half(h.index(2) as u8)
                        },
                    };
                    let small_buf = (big.buf + 1 + b2.index(2) as u8) % 3;
                    let small = Loc {
                        buf: small_buf,
                        part: if half {
                            Part::Half(b2.index(2) as u8)
                        } else {
                            Part::Quarter(b1.index(4) as u8)
                        },
                    };
                    if matches!(c, Coll::AllGather) {
                        (c, small, big)
                    } else {
                        (c, big, small)
                    }
                }
                _ => (c, if in_place { recv } else { send }, recv),
            }
        })
}

/// A cross-device copy: (dst device, region), (src device, region), on device `d`'s stream.
fn cross(d: u8) -> impl Strategy<Value = ((u8, Loc), (u8, Loc))> {
    (0u8..4, pair(ANY, ANY, false), 0u8..2, 0u8..2).prop_map(move |(kind, (a, b), da, db)| {
        let dev = |l: Loc| Loc {
            buf: l.buf % DEV_BUFS,
            ..l
        };
        let host = |l: Loc| Loc {
            buf: PINNED + l.buf % 4,
            ..l
        };
        match kind {
            // Peer copy between device memory of any two devices.
            0 => {
                let (a, b) = (dev(a), dev(b));
                let b = if da == db && a.overlaps(b) {
                    Loc {
                        buf: (a.buf + 1) % DEV_BUFS,
                        ..b
                    }
                } else {
                    b
                };
                ((da, a), (db, b))
            }
            // Host memory of either device to device memory of this one, and back.
            1 => ((d, dev(a)), (db, host(b))),
            2 => ((da, host(a)), (d, dev(b))),
            _ => {
                let (a, b) = (host(a), host(b));
                let b = if da == db && a.buf == b.buf {
                    Loc {
                        buf: PINNED + (b.buf - PINNED + 1) % 4,
                        ..b
                    }
                } else {
                    b
                };
                ((da, a), (db, b))
            }
        }
    })
}

pub fn step(cfg: Cfg) -> BoxedStrategy<Step> {
    let dv = cfg.devices;
    let s = || 0..STREAMS as u8;
    let e = || 0..EVENTS as u8;
    let d = move || 0..dv;
    let mut arms: Vec<(u32, BoxedStrategy<Step>)> = vec![
        (14, (d(), s(), work(Ctx::Stream)).prop_map(|(d, s, w)| Step::Do { d, s, w }).boxed()),
        (3, (d(), s(), e()).prop_map(|(d, s, e)| Step::Record { d, s, e }).boxed()),
        (3, (d(), s(), d(), e()).prop_map(|(d, s, ed, e)| Step::Wait { d, s, ed, e }).boxed()),
        (1, (d(), s()).prop_map(|(d, s)| Step::SyncStream { d, s }).boxed()),
        (2, (d(), s(), s()).prop_map(|(d, s, from)| Step::Join { d, s, from }).boxed()),
        (1, (d(), e()).prop_map(|(d, e)| Step::SyncEvent { d, e }).boxed()),
        (1, d().prop_map(|d| Step::SyncDevice { d }).boxed()),
        (1, (d(), loc_of(HOST, false), small()).prop_map(|(d, dst, v)| Step::HostWrite { d, dst, v }).boxed()),
        (1, (d(), loc_of(HOST, false)).prop_map(|(d, src)| Step::HostRead { d, src }).boxed()),
        (
            2,
            (d(), s(), prop::collection::vec(prop_oneof![6 => work(Ctx::Capture).prop_map(CapWork::W), 1 => cond(0).prop_map(CapWork::Cond)], 1..5), 1u8..3)
                .prop_map(|(d, s, body, launches)| Step::Capture { d, s, body, launches })
                .boxed(),
        ),
        (3, (d(), s(), graph_spec(), 1u8..3).prop_map(|(d, s, graph, launches)| Step::Build { d, s, graph, launches }).boxed()),
        (1, (d(), s(), hand_out(cfg.known)).prop_map(|(d, s, h)| Step::HandOut { d, s, h }).boxed()),
        (1, (d(), s()).prop_map(|(d, s)| Step::Replace { d, s }).boxed()),
        (
            1,
            (d(), 0..POOLS as u8, prop_oneof![select(vec![0u64, 4096, u64::MAX]).prop_map(PoolOp::Threshold), select(vec![0u64, 4096]).prop_map(PoolOp::Trim)])
                .prop_map(|(d, p, op)| Step::Pool { d, p, op })
                .boxed(),
        ),
        (
            1,
            (d(), s(), select(vec![ManagedOp::PrefetchHost, ManagedOp::PrefetchDevice, ManagedOp::AttachGlobal, ManagedOp::AttachHost, ManagedOp::AttachSingle]))
                .prop_map(|(d, s, op)| Step::Managed { d, s, op })
                .boxed(),
        ),
        (1, d().prop_map(|d| Step::Reregister { d }).boxed()),
    ];
    if dv > 1 {
        arms.push((
            3,
            (s(), s(), collective())
                .prop_map(|(s0, s1, (c, send, recv))| Step::Collective {
                    s: [s0, s1],
                    c,
                    send,
                    recv,
                })
                .boxed(),
        ));
        arms.push((
            3,
            (d(), s())
                .prop_flat_map(|(d, s)| {
                    cross(d).prop_map(move |(dst, src)| Step::Cross { d, s, dst, src })
                })
                .boxed(),
        ));
    }
    Union::new_weighted(arms).boxed()
}

pub fn program(cfg: Cfg) -> impl Strategy<Value = Program> {
    let t = select(vec![0u64, 256, 4096, u64::MAX]);
    (
        [t.clone(), t],
        prop::collection::vec(step(cfg), 1..cfg.max_steps),
    )
        .prop_map(move |(thresholds, steps)| Program {
            devices: cfg.devices,
            thresholds,
            steps,
        })
}
