//! GR8, GR9 (issue 27 items 4 and 5): what belongs to one graph stays with it — a node id names
//! its graph, a condition drives nodes of its graph (and of graphs nested in it), and each
//! instantiation has condition values of its own, as each CUDA executable graph has.

use cueflow::{kernels, Device, Error, Graph, KernelArgs, LaunchConfig};

use crate::conditional::{one, putting, set_cond, setting};
use crate::support::*;

/// GR8 (item 5): a node of another graph is refused wherever a node is named — as a
/// dependency, in an edge, to `set_kernel_args` — with a typed error, whatever its index
/// (the graph has a node of that index here); queries about it answer nothing. A copy of a
/// graph keeps its nodes.
pub fn gr8_node_of_another_graph_refused(dev: &Device) {
    let d = filled(dev, N, 1.0);
    let cfg = LaunchConfig::for_elements(N, kernels::BLOCK);
    let args = || KernelArgs::new().write(&d).scalar(2.0f32).scalar(N as u64);
    let mut a = Graph::new(dev);
    let a0 = a.add_empty(&[]).unwrap();
    let mut b = Graph::new(dev);
    let b0 = b.add_empty(&[]).unwrap();
    let b1 = b
        .add_kernel(&[b0], &kernels::SCALE_F32, cfg, args())
        .unwrap();
    assert_eq!(a0.index(), b0.index(), "the same index in both graphs");
    for r in [
        a.add_empty(&[b0]).map(|_| ()),
        a.add_kernel(&[b0], &kernels::SCALE_F32, cfg, args())
            .map(|_| ()),
        a.add_dependency(b0, a0),
        a.add_dependency(a0, b0),
    ] {
        match r {
            Err(Error::Graph(why)) => assert!(why.contains("another graph"), "{why}"),
            other => panic!("a node of another graph was accepted: {other:?}"),
        }
    }
    assert_eq!(
        (a.node_count(), a.edge_count()),
        (1, 0),
        "nothing was added"
    );
    assert!(a.dependents(b0).is_empty() && a.dependencies(b1).is_empty());
    assert!(a.child_graph(b0).is_none());
    let exec = a.instantiate().unwrap();
    assert!(matches!(
        exec.set_kernel_args(b1, &kernels::SCALE_F32, cfg, args()),
        Err(Error::GraphUpdate(_))
    ));
    // A copy keeps the original's nodes.
    let mut copy = b.clone();
    copy.add_empty(&[b1]).unwrap();
    let exec = copy.instantiate().unwrap();
    exec.set_kernel_args(b1, &kernels::SCALE_F32, cfg, args())
        .unwrap();
}

/// GR9 (item 4): graph A's condition driving a conditional node of graph B — two graphs that
/// would share one value — is refused when B is instantiated, naming the node; so is a kernel
/// of B given a condition that drives none of B's nodes. A's condition in a graph nested in A
/// (a body) is A's, and accepted.
pub fn gr9_condition_of_another_graph_refused(dev: &Device) {
    let out = upload(dev, &[0u32]);
    let mut ga = Graph::new(dev);
    let ca = ga.condition(1, true);
    ga.add_if(&[], &ca, &putting(dev, &out, 1)).unwrap();
    let mut gb = Graph::new(dev);
    gb.add_if(&[], &ca, &putting(dev, &out, 2)).unwrap();
    match gb.instantiate() {
        Err(Error::Graph(why)) => {
            assert!(
                why.contains("node 0") && why.contains("another graph"),
                "{why}"
            )
        }
        other => panic!("graph A's condition drove a node of graph B: {other:?}"),
    }
    let mut gc = Graph::new(dev);
    let own = gc.condition(0, true);
    gc.add_if(&[], &own, &putting(dev, &out, 3)).unwrap();
    gc.add_kernel(
        &[],
        &set_cond(),
        one(),
        KernelArgs::new().condition(&ca).scalar(1u32),
    )
    .unwrap();
    match gc.instantiate() {
        Err(Error::Graph(why)) => assert!(why.contains("drives no conditional node"), "{why}"),
        other => panic!("a kernel set a condition of another graph: {other:?}"),
    }
    // A condition of the graph drives a node of a graph nested in it (a body).
    let mut nested = Graph::new(dev);
    let c3 = nested.condition(1, true);
    let mut inner_body = Graph::new(dev);
    inner_body.add_if(&[], &c3, &putting(dev, &out, 5)).unwrap();
    let c4 = nested.condition(1, true);
    nested.add_if(&[], &c4, &inner_body).unwrap();
    let s = side_stream(dev);
    nested.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(download(&out)[0], 5);
}

/// GR9: each instantiation has condition values of its own, as each CUDA executable graph
/// has: a condition without reset keeps what the last launch of *its* instantiation left.
/// Here a kernel after an if node sets the condition for the next launch: the first launch of
/// each instantiation skips the body, the second runs it.
pub fn gr9_each_instantiation_has_its_own_conditions(dev: &Device) {
    let s = side_stream(dev);
    let out = upload(dev, &[0u32]);
    let mut g = Graph::new(dev);
    let cond = g.condition(0, false);
    let body = putting(dev, &out, 7);
    let test = g.add_if(&[], &cond, &body).unwrap();
    g.add_kernel(
        &[test],
        &set_cond(),
        one(),
        KernelArgs::new().condition(&cond).scalar(1u32),
    )
    .unwrap();
    let (first, second) = (g.instantiate().unwrap(), g.instantiate().unwrap());
    first.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(download(&out)[0], 0, "a first launch starts at 0");
    second.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(
        download(&out)[0],
        0,
        "the second instantiation's condition is its own, still 0"
    );
    first.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(download(&out)[0], 7, "the first kept what its launch left");
}

/// Graphs left behind by [`dirty_conditions`]: enough that a driver handing out the storage of
/// destroyed graphs' conditions again hands out theirs.
const DIRTY_GRAPHS: usize = 24;

/// Run and drop graphs whose every condition (with and without reset, default 1) is 1 when
/// their launches end: on CUDA the driver may give their storage to the conditions of graphs
/// instantiated later. The if nodes of one graph are unordered, so each body writes a word of
/// its own (one word for all would be a race, AC3).
fn dirty_conditions(dev: &Device) {
    let s = side_stream(dev);
    let scratch = upload(dev, &[0u32; 8]);
    for _ in 0..DIRTY_GRAPHS {
        let mut g = Graph::new(dev);
        for i in 0..8 {
            let c = g.condition(1, i % 2 == 0);
            let set = setting(&mut g, &c, 1);
            let word = scratch.slice(i..i + 1).unwrap();
            g.add_if(&[set], &c, &putting(dev, &word, 1)).unwrap();
        }
        let exec = g.instantiate().unwrap();
        exec.launch(&s).unwrap();
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
}

/// GR9: a condition without reset starts at 0 at the first launch of every instantiation —
/// whatever graphs ran and were dropped before (on CUDA, a driver handle made without
/// `CU_GRAPH_COND_ASSIGN_DEFAULT` has no defined first value, and storage that destroyed
/// graphs' conditions left at 1 may be handed out again) — and keeps what that
/// instantiation's last launch left. Each graph here has such a condition driving an if node
/// at the top and one driving an if node nested in a body (no node of the top-level graph
/// names it); a kernel after each if node sets its condition to 1. So every instantiation
/// skips both bodies at its first launch and runs both at its second.
pub fn gr9_conditions_without_reset_start_at_0(dev: &Device) {
    let s = side_stream(dev);
    let (top_hit, nested_hit) = (upload(dev, &[0u32]), upload(dev, &[0u32]));
    let mut g = Graph::new(dev);
    let top = g.condition(1, false); // default 1: not applied without reset
    let nested = g.condition(1, false);
    let always = g.condition(1, true);
    let clear_top = g.add_memset(&[], &top_hit, 0).unwrap();
    let clear_nested = g.add_memset(&[], &nested_hit, 0).unwrap();
    let test = g
        .add_if(&[clear_top], &top, &putting(dev, &top_hit, 1))
        .unwrap();
    g.add_kernel(
        &[test],
        &set_cond(),
        one(),
        KernelArgs::new().condition(&top).scalar(1u32),
    )
    .unwrap();
    let mut body = Graph::new(dev);
    let inner = body
        .add_if(&[], &nested, &putting(dev, &nested_hit, 1))
        .unwrap();
    body.add_kernel(
        &[inner],
        &set_cond(),
        one(),
        KernelArgs::new().condition(&nested).scalar(1u32),
    )
    .unwrap();
    g.add_if(&[clear_nested], &always, &body).unwrap();
    let hits = || (download(&top_hit)[0], download(&nested_hit)[0]);
    let mut execs = Vec::new();
    for i in 0..3 {
        dirty_conditions(dev);
        let exec = g.instantiate().unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(
            hits(),
            (0, 0),
            "instantiation {i}: a first launch starts its conditions at 0 (top, nested)"
        );
        execs.push(exec);
    }
    for (i, exec) in execs.iter().enumerate() {
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(
            hits(),
            (1, 1),
            "instantiation {i}: a second launch sees what the first left (top, nested)"
        );
    }
}
