//! Fuzz-found programs replayed through the fuzzer's own harness, where no smaller program
//! written with the public API showed the defect (see `main.rs`).

use cueflow::Device;

use crate::{exec, known, program, run};

/// Found by `fuzz_two_devices_random_ordering_under_the_sanitizer` (sanitizer, several
/// devices, graphs, host memory of the other device), not minimized below these 14 steps:
/// leaving out any one of them, or any node, makes the failure go away. The last step copies
/// device 0's managed memory into device 1's managed memory `G` on a stream of device 0; the
/// capture just before it (on device 1) writes all of `G`, and nothing orders the two — yet
/// neither is refused as a race (no step of the program is), and the copy's bytes are lost
/// (`G[16..32]` is 0.0, not 7.0) in every run. Expected: the sanitizer refuses the copy (or
/// orders the two), so the bytes are the sequential model's. Seen before the fix (F5): a
/// wrong value every time (two devices' records with one id; see `main.rs`).
#[test]
fn fuzz_program_f5_cross_device_race_on_managed_memory() {
    use exec::{execute, Shared};
    use program::*;
    let (w, h, q) = (crate::whole, crate::half, crate::quarter);
    let steps = vec![
        Step::Do {
            d: 1,
            s: 1,
            w: Work::Copy {
                dst: w(5),
                src: w(2),
            },
        },
        Step::Do {
            d: 0,
            s: 2,
            w: Work::Copy {
                dst: h(4, 1),
                src: h(1, 1),
            },
        },
        Step::Capture {
            d: 1,
            s: 0,
            body: vec![
                CapWork::W(Work::Prefix { dst: q(2, 3) }),
                CapWork::W(Work::Reverse {
                    dst: h(1, 0),
                    src: h(0, 1),
                }),
            ],
            launches: 2,
        },
        Step::Do {
            d: 0,
            s: 3,
            w: Work::Copy {
                dst: w(3),
                src: w(1),
            },
        },
        Step::Cross {
            d: 1,
            s: 1,
            dst: (1, h(2, 0)),
            src: (0, h(6, 0)),
        },
        Step::Build {
            d: 0,
            s: 0,
            graph: GraphSpec {
                prefix: vec![],
                nodes: vec![
                    NodeSpec {
                        kind: NodeKind::Op(Work::Saxpy {
                            a: -1.0,
                            x: h(0, 0),
                            y: h(1, 1),
                        }),
                        deps: vec![200, 33],
                    },
                    NodeSpec {
                        kind: NodeKind::Op(Work::Saxpy {
                            a: 2.0,
                            x: q(1, 3),
                            y: q(0, 3),
                        }),
                        deps: vec![220],
                    },
                ],
                racy: false,
            },
            launches: 1,
        },
        Step::HandOut {
            d: 0,
            s: 3,
            h: HandOut {
                built: false,
                v: 7,
                dst: w(5),
                free: FreeBy::Graph,
                launches: 3,
            },
        },
        Step::Do {
            d: 1,
            s: 1,
            w: Work::Saxpy {
                a: -1.0,
                x: h(1, 0),
                y: h(1, 0),
            },
        },
        Step::Collective {
            s: [2, 1],
            c: Coll::ReduceScatter(Reduce::Prod),
            send: h(2, 1),
            recv: q(1, 3),
        },
        Step::Do {
            d: 1,
            s: 1,
            w: Work::Prefix { dst: h(1, 1) },
        },
        Step::Do {
            d: 1,
            s: 1,
            w: Work::PageableWrite { dst: h(0, 1), v: 2 },
        },
        Step::Do {
            d: 1,
            s: 0,
            w: Work::Scale {
                dst: q(2, 1),
                f: -1.0,
            },
        },
        Step::Capture {
            d: 1,
            s: 0,
            body: vec![
                CapWork::Cond(CondSpec {
                    kind: CondKind::Switch,
                    reset: true,
                    default: 2,
                    set: CondSet::Const(1),
                    limit: 2,
                    bodies: vec![
                        vec![BodyItem::W(Work::AddC {
                            dst: q(1, 2),
                            src: q(1, 2),
                            c: -4,
                        })],
                        vec![],
                        vec![
                            BodyItem::Cond(CondSpec {
                                kind: CondKind::If,
                                reset: true,
                                default: 1,
                                set: CondSet::Default,
                                limit: 1,
                                bodies: vec![vec![]],
                            }),
                            BodyItem::W(Work::Fill { dst: w(1), v: -3 }),
                        ],
                    ],
                }),
                CapWork::W(Work::Reverse {
                    dst: w(5),
                    src: w(2),
                }),
            ],
            launches: 1,
        },
        Step::Cross {
            d: 0,
            s: 0,
            dst: (1, q(5, 1)),
            src: (0, q(5, 0)),
        },
    ];
    let p = Program {
        devices: 2,
        thresholds: [256, u64::MAX],
        steps,
    };
    for i in 0..4 {
        let devs = vec![Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
        let r = execute(
            &devs,
            &Shared::default(),
            &p,
            run::Mode::Random,
            known::Known::default(),
        );
        assert!(r.is_ok(), "run {i}: {:?}", r.err());
    }
}

/// Found by `fuzz_two_devices_full_ordering_by_events` (several devices, host views of host
/// memory, MM3), not minimized below these 11 steps (leaving out any one makes it go away;
/// synchronizing both devices just before the copy does not). The 10th step copies device 0's
/// mapped memory into device 1's mapped memory `M[16..32]` on a stream of device 0; the 11th
/// writes `M[0..32]` from the host, which must first wait for that copy (MM3: host access
/// waits for the device work that touches the bytes). Expected: `M[16..32] == -5.0` (the host
/// write last). Seen before the fix (F6): the copy's bytes (5.0… or 0.0) — the host write
/// did not wait for it — in every run (two devices' records with one id; see `main.rs`).
#[test]
fn fuzz_program_f6_host_write_waits_for_another_devices_copy() {
    use exec::{execute, Shared};
    use program::*;
    let (w, h, q) = (crate::whole, crate::half, crate::quarter);
    let steps = vec![
        Step::Do {
            d: 1,
            s: 0,
            w: Work::HostTask {
                src: h(6, 1),
                dst: h(3, 0),
                k: 2,
            },
        },
        Step::Do {
            d: 1,
            s: 2,
            w: Work::Prefix { dst: q(0, 0) },
        },
        Step::HandOut {
            d: 1,
            s: 0,
            h: HandOut {
                built: false,
                v: 5,
                dst: w(4),
                free: FreeBy::Stream,
                launches: 3,
            },
        },
        Step::Do {
            d: 0,
            s: 3,
            w: Work::Saxpy {
                a: -1.0,
                x: q(1, 0),
                y: q(1, 0),
            },
        },
        Step::Build {
            d: 0,
            s: 0,
            graph: GraphSpec {
                prefix: vec![
                    Work::Fill { dst: h(0, 0), v: 2 },
                    Work::Copy {
                        dst: h(6, 0),
                        src: h(2, 0),
                    },
                ],
                nodes: vec![
                    NodeSpec {
                        kind: NodeKind::Op(Work::Fill {
                            dst: h(0, 0),
                            v: -4,
                        }),
                        deps: vec![92, 179],
                    },
                    NodeSpec {
                        kind: NodeKind::Op(Work::HostFn),
                        deps: vec![],
                    },
                    NodeSpec {
                        kind: NodeKind::Op(Work::HostFn),
                        deps: vec![161, 137],
                    },
                ],
                racy: false,
            },
            launches: 1,
        },
        Step::Do {
            d: 0,
            s: 3,
            w: Work::BlockReverse {
                dst: w(0),
                src: w(5),
            },
        },
        Step::Collective {
            s: [0, 0],
            c: Coll::Reduce(Reduce::Prod, 1),
            send: q(2, 2),
            recv: q(1, 2),
        },
        Step::Collective {
            s: [2, 3],
            c: Coll::AllReduce(Reduce::Sum),
            send: h(1, 0),
            recv: h(0, 0),
        },
        Step::Collective {
            s: [3, 3],
            c: Coll::Broadcast(0),
            send: w(2),
            recv: w(2),
        },
        Step::Cross {
            d: 0,
            s: 2,
            dst: (1, q(4, 1)),
            src: (0, q(4, 0)),
        },
        Step::HostWrite {
            d: 1,
            dst: h(4, 0),
            v: -5,
        },
    ];
    let p = Program {
        devices: 2,
        thresholds: [u64::MAX, 0],
        steps,
    };
    for i in 0..3 {
        let devs = vec![Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
        let r = execute(
            &devs,
            &Shared::default(),
            &p,
            run::Mode::Ordered,
            known::Known::default(),
        );
        assert!(r.is_ok(), "run {i}: {:?}", r.err());
    }
}

/// Found by `fuzz_two_devices_auto_ordering` (automatic ordering, several devices,
/// collectives), not minimized below these 16 steps (leaving out any one makes it go away;
/// letting both devices finish after the collective does too). The last two steps run on
/// device 0 after the all-reduce: stream 1 reverses `M` into `D2`, then stream 0 reverses
/// `D2[32..48]` into `D0[48..64]` — a read after write that automatic ordering must order.
/// Expected: `D0[48..64] == 0.0`. Seen before the fix (F7): -1.498… (the bytes of `D2`
/// before stream 1's write: stream 0 did not wait) in most runs (two devices' records with one
/// id; see `main.rs`).
#[test]
fn fuzz_program_f7_automatic_ordering_after_a_collective() {
    use exec::{execute, Shared};
    use program::*;
    let (w, h, q) = (crate::whole, crate::half, crate::quarter);
    let steps = vec![
        Step::Cross {
            d: 1,
            s: 0,
            dst: (0, q(0, 0)),
            src: (0, q(1, 0)),
        },
        Step::Do {
            d: 0,
            s: 0,
            w: Work::Fill { dst: q(1, 0), v: 0 },
        },
        Step::Capture {
            d: 0,
            s: 0,
            body: vec![
                CapWork::W(Work::Scale {
                    dst: q(2, 2),
                    f: 2.0,
                }),
                CapWork::W(Work::Scale {
                    dst: q(0, 1),
                    f: -1.0,
                }),
                CapWork::W(Work::Copy {
                    dst: h(3, 0),
                    src: h(1, 0),
                }),
            ],
            launches: 2,
        },
        Step::Do {
            d: 1,
            s: 1,
            w: Work::PageableWrite { dst: w(2), v: -5 },
        },
        Step::Build {
            d: 1,
            s: 0,
            graph: GraphSpec {
                prefix: vec![Work::HostFn, Work::HostFn],
                nodes: vec![NodeSpec {
                    kind: NodeKind::Op(Work::AddC {
                        dst: q(0, 1),
                        src: q(0, 0),
                        c: -3,
                    }),
                    deps: vec![214],
                }],
                racy: true,
            },
            launches: 1,
        },
        Step::Cross {
            d: 0,
            s: 3,
            dst: (0, h(2, 0)),
            src: (0, h(3, 0)),
        },
        Step::Capture {
            d: 1,
            s: 1,
            body: vec![
                CapWork::W(Work::Fill {
                    dst: q(1, 0),
                    v: -3,
                }),
                CapWork::W(Work::Fill { dst: q(0, 0), v: 5 }),
                CapWork::W(Work::Fill {
                    dst: q(1, 1),
                    v: -5,
                }),
                CapWork::W(Work::Fill { dst: q(0, 0), v: 7 }),
            ],
            launches: 1,
        },
        Step::Build {
            d: 1,
            s: 3,
            graph: GraphSpec {
                prefix: vec![Work::Copy {
                    dst: w(4),
                    src: w(5),
                }],
                nodes: vec![
                    NodeSpec {
                        kind: NodeKind::Mem {
                            v: -8,
                            f: -0.5,
                            dst: h(6, 1),
                        },
                        deps: vec![],
                    },
                    NodeSpec {
                        kind: NodeKind::Cond(CondSpec {
                            kind: CondKind::While,
                            reset: false,
                            default: 2,
                            set: CondSet::Const(2),
                            limit: 2,
                            bodies: vec![vec![]],
                        }),
                        deps: vec![],
                    },
                    NodeSpec {
                        kind: NodeKind::Mem {
                            v: 7,
                            f: 1.0,
                            dst: q(5, 0),
                        },
                        deps: vec![56, 29],
                    },
                ],
                racy: false,
            },
            launches: 1,
        },
        Step::Do {
            d: 0,
            s: 3,
            w: Work::Memset {
                dst: w(2),
                byte: 191,
            },
        },
        Step::Do {
            d: 1,
            s: 1,
            w: Work::Saxpy {
                a: 2.0,
                x: w(1),
                y: w(1),
            },
        },
        Step::Do {
            d: 1,
            s: 1,
            w: Work::Scale {
                dst: q(1, 3),
                f: 2.0,
            },
        },
        Step::Do {
            d: 0,
            s: 1,
            w: Work::Copy {
                dst: q(3, 2),
                src: q(6, 0),
            },
        },
        Step::Cross {
            d: 1,
            s: 2,
            dst: (0, w(0)),
            src: (1, w(2)),
        },
        Step::Collective {
            s: [1, 2],
            c: Coll::AllReduce(Reduce::Sum),
            send: q(1, 3),
            recv: q(1, 3),
        },
        Step::Do {
            d: 0,
            s: 1,
            w: Work::Reverse {
                dst: w(2),
                src: w(4),
            },
        },
        Step::Do {
            d: 0,
            s: 0,
            w: Work::Reverse {
                dst: q(0, 3),
                src: q(2, 2),
            },
        },
    ];
    let p = Program {
        devices: 2,
        thresholds: [0, 0],
        steps,
    };
    for i in 0..5 {
        let devs = vec![Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
        let r = execute(
            &devs,
            &Shared::default(),
            &p,
            run::Mode::Auto,
            known::Known::default(),
        );
        assert!(r.is_ok(), "run {i}: {:?}", r.err());
    }
}

/// Found by `fuzz_two_devices_auto_ordering` (automatic ordering, several devices), not
/// minimized below these 6 steps. Device 0's legacy stream copies into device 1's pinned
/// memory `P` (every device finishes before and after it); then, on device 1 alone, a stream
/// copies 6.0 into `G[48..64]` and the
/// legacy stream runs a host task that writes all of `G` from `P` — a write after write that
/// automatic ordering must order. Expected: `G == 2.0` everywhere (the host task last).
/// Seen before the fix (F8): `G[48..64] == 6.0` (the copy landed after the task) in about
/// two runs of three. Cause: device 0's record of its write of `P` and device 1's record of
/// the copy into `G` had one id, and the task's call kept one conflict per id: it depended on
/// the finished copy into `P` and not on the pending one into `G`.
#[test]
fn fuzz_program_f8_automatic_ordering_after_another_device_touched_the_memory() {
    use exec::{execute, Shared};
    use program::*;
    let (w, h, q) = (crate::whole, crate::half, crate::quarter);
    let steps = vec![
        Step::Cross {
            d: 0,
            s: 3,
            dst: (0, q(1, 0)),
            src: (0, q(0, 1)),
        },
        Step::Do {
            d: 0,
            s: 2,
            w: Work::PageableWrite {
                dst: h(2, 1),
                v: -1,
            },
        },
        Step::Cross {
            d: 0,
            s: 3,
            dst: (1, q(3, 3)),
            src: (0, q(1, 2)),
        },
        Step::Do {
            d: 1,
            s: 2,
            w: Work::Scale {
                dst: h(0, 0),
                f: 0.5,
            },
        },
        Step::Do {
            d: 1,
            s: 2,
            w: Work::Temp {
                pool: None,
                v: 6,
                dst: q(5, 3),
            },
        },
        Step::Do {
            d: 1,
            s: 3,
            w: Work::HostTask {
                src: w(3),
                dst: w(5),
                k: 2,
            },
        },
    ];
    let p = Program {
        devices: 2,
        thresholds: [0, 0],
        steps,
    };
    for i in 0..8 {
        let devs = vec![Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
        let r = execute(
            &devs,
            &Shared::default(),
            &p,
            run::Mode::Auto,
            known::Known::default(),
        );
        assert!(r.is_ok(), "run {i}: {:?}", r.err());
    }
}
