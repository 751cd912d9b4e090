//! GR8, GR9 (issue 27 items 4 and 5): what belongs to one graph stays with it — a node id names
//! its graph, a condition drives nodes of its graph (and of graphs nested in it), and each
//! instantiation has condition values of its own, as each CUDA executable graph has.

use cueflow::{kernels, Device, Error, Graph, KernelArgs, LaunchConfig};

use crate::conditional::{one, putting, set_cond};
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
