//! F11, replayed through the fuzzer's harness on a GPU: a driver fault that a graph with a
//! while node meets beside kernels that fault managed pages in (see `main.rs`).

use crate::{program, run};

/// Found by the differential fuzzer on two H200s (`FUZZ_SEED=47`, program 2006, automatic
/// ordering), narrowed by `FUZZ_STEPS` to these 2 of its 36 steps: the host writes a quarter
/// of managed memory `G`, then a built graph runs once — a captured prefix, a copy from
/// registered memory, a while node, an event record node, a captured child graph that
/// scales `G`, and a kernel. Seen: `CUDA_ERROR_LAUNCH_FAILED` in the graph's launch, in about
/// one run of five (the process's CUDA is lost). Expected: every run matches the model.
/// `F11_NODES=0,2` keeps only those nodes of the graph; `F11_PREFIX=0` drops its prefix;
/// `F11_RUNS` (default 100) sets how many runs.
#[test]
fn fuzz_program_f11_managed_memory_written_by_the_host_then_a_graph_with_a_while_node() {
    use program::*;
    let Some(dev) = crate::gpu_or_skip("fuzz_program_f11") else {
        return;
    };
    let (w, h, q) = (crate::whole, crate::half, crate::quarter);
    let list = |name: &str| {
        std::env::var(name).ok().map(|v| {
            v.split(',')
                .map(|x| x.trim().parse::<usize>().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let node = |kind, deps: &[u8]| NodeSpec {
        kind,
        deps: deps.to_vec(),
    };
    let mut nodes = vec![
        node(
            NodeKind::Op(Work::Copy {
                dst: q(1, 3),
                src: q(6, 0),
            }),
            &[30, 199],
        ),
        node(
            NodeKind::Op(Work::Saxpy {
                a: -1.0,
                x: q(0, 3),
                y: q(0, 3),
            }),
            &[210],
        ),
        node(
            NodeKind::Cond(CondSpec {
                kind: CondKind::While,
                reset: true,
                default: 1,
                set: CondSet::Const(3),
                limit: 3,
                bodies: vec![vec![]],
            }),
            &[],
        ),
        node(NodeKind::Record(1), &[171]),
        node(
            NodeKind::Child {
                works: vec![
                    Work::Scale { dst: w(5), f: 2.0 },
                    Work::Scale {
                        dst: q(0, 1),
                        f: 0.5,
                    },
                ],
                captured: true,
            },
            &[],
        ),
        node(
            NodeKind::Op(Work::Scale {
                dst: h(1, 1),
                f: 2.0,
            }),
            &[],
        ),
    ];
    if let Some(keep) = list("F11_NODES") {
        nodes = (nodes.into_iter().enumerate())
            .filter_map(|(i, n)| keep.contains(&i).then_some(n))
            .collect();
    }
    let mut prefix = vec![
        Work::Saxpy {
            a: -1.0,
            x: h(1, 1),
            y: h(1, 0),
        },
        Work::Scale {
            dst: h(0, 1),
            f: 2.0,
        },
    ];
    if std::env::var("F11_PREFIX").as_deref() == Ok("0") {
        prefix.clear();
    }
    let steps = vec![
        Step::HostWrite {
            d: 0,
            dst: q(5, 2),
            v: 5,
        },
        Step::Build {
            d: 0,
            s: 0,
            graph: GraphSpec {
                prefix,
                nodes,
                racy: false,
            },
            launches: 1,
        },
    ];
    let p = Program {
        devices: 1,
        thresholds: [0, 0],
        steps,
    };
    crate::replay_on_gpu(dev, &p, run::Mode::Auto, "F11_RUNS", 100);
}
