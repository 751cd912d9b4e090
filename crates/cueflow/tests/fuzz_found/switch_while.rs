//! F12, replayed through the fuzzer's harness on a GPU: a driver fault that a graph with a
//! switch node and a while node meets beside a kernel on mapped memory (see `main.rs`).

use crate::{program, run};

/// Found by the differential fuzzer on two H200s (`FUZZ_SEED=56`, program 2505, ordered by
/// the harness, `CUEFLOW_AUTO_GRAPH=1`), narrowed by `FUZZ_STEPS` to step 9 of its 33: a built
/// graph launched twice — a prefix that fills managed memory `G` and copies into registered
/// memory; a switch node (its body 1 runs: a device copy and a kernel), a copy from
/// registered memory, a kernel, a while node looping 3 times, and a kernel writing mapped
/// memory `M` that may run beside the while node. Seen: `CUDA_ERROR_LAUNCH_FAILED` in the
/// graph's launch within 400 runs, with or without automatic graphs (the process's CUDA is
/// lost). Expected: every run matches the model. `F12_RUNS` (default 300) sets how many runs.
#[test]
fn fuzz_program_f12_a_graph_with_a_switch_and_a_while_node_beside_a_kernel_on_mapped_memory() {
    use program::*;
    let Some(dev) = crate::gpu_or_skip("fuzz_program_f12") else {
        return;
    };
    let (w, h, q) = (crate::whole, crate::half, crate::quarter);
    let node = |kind, deps: &[u8]| NodeSpec {
        kind,
        deps: deps.to_vec(),
    };
    let (d0, d1, d2, m, g, r) = (0, 1, 2, 4, 5, 6);
    let switch = CondSpec {
        kind: CondKind::Switch,
        reset: true,
        default: 1,
        set: CondSet::Default,
        limit: 3,
        bodies: vec![
            vec![
                BodyItem::W(Work::Fill { dst: w(m), v: 4 }),
                BodyItem::W(Work::Scale {
                    dst: q(d1, 2),
                    f: 2.0,
                }),
            ],
            vec![
                BodyItem::W(Work::Copy {
                    dst: w(d0),
                    src: w(d2),
                }),
                BodyItem::W(Work::Scale {
                    dst: q(d2, 0),
                    f: 2.0,
                }),
            ],
        ],
    };
    let while_loop = CondSpec {
        kind: CondKind::While,
        reset: false,
        default: 0,
        set: CondSet::Const(1),
        limit: 3,
        bodies: vec![vec![]],
    };
    let nodes = vec![
        node(NodeKind::Cond(switch), &[190, 24]),
        node(
            NodeKind::Op(Work::Copy {
                dst: w(d1),
                src: w(r),
            }),
            &[35, 177],
        ),
        node(
            NodeKind::Op(Work::Fill {
                dst: h(d2, 1),
                v: -5,
            }),
            &[213],
        ),
        node(NodeKind::Cond(while_loop), &[]),
        node(
            NodeKind::Op(Work::Saxpy {
                a: 1.0,
                x: w(d2),
                y: w(m),
            }),
            &[139],
        ),
    ];
    let prefix = vec![
        Work::Fill { dst: w(g), v: 6 },
        Work::Copy {
            dst: h(r, 0),
            src: h(d2, 0),
        },
    ];
    let steps = vec![Step::Build {
        d: 0,
        s: 1,
        graph: GraphSpec {
            prefix,
            nodes,
            racy: false,
        },
        launches: 2,
    }];
    let p = Program {
        devices: 1,
        thresholds: [0, u64::MAX],
        steps,
    };
    crate::replay_on_gpu(dev, &p, run::Mode::Ordered, "F12_RUNS", 300);
}
