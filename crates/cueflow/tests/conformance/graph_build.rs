//! GR8: graphs built node by node — every node kind, explicit dependencies, queries, clones,
//! captured graphs as children and as graphs to add to, DOT output, and the typed errors of
//! instantiation (cycles, unknown nodes, graph memory outside its lifetime).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Error, Event, Graph, KernelArgs, LaunchConfig,
    NodeType, PinnedBuffer, Stream,
};

use crate::support::*;

fn scale_args(d: &DeviceBuffer<f32>, f: f32) -> (LaunchConfig, KernelArgs) {
    (
        LaunchConfig::for_elements(d.len(), kernels::BLOCK),
        KernelArgs::new().write(d).scalar(f).scalar(d.len() as u64),
    )
}

/// GR8: a graph built node by node — copy, memset, kernel, host, memory and empty nodes with
/// explicit dependencies — replays like a captured one, at every launch.
pub fn gr8_built_graph_runs_every_node_kind(dev: &Device) {
    let s = side_stream(dev);
    let input = PinnedBuffer::from_slice(dev, &vec![2.0f32; N]).unwrap();
    let mut out = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let a = zeros(dev, N);
    let bytes = upload(dev, &vec![0u32; N]);
    let runs = Arc::new(AtomicU32::new(0));
    let mut g = Graph::new(dev);
    let up = g.add_copy_h2d(&[], &a, &input).unwrap();
    let set = g.add_memset(&[], &bytes, 0x11).unwrap();
    let (cfg, args) = scale_args(&a, 3.0);
    let k = g.add_kernel(&[up], &kernels::SCALE_F32, cfg, args).unwrap(); // 6
    let (al, tmp) = g.add_alloc::<f32>(&[k], N).unwrap();
    let c1 = g.add_copy_d2d(&[al], &tmp, &a).unwrap();
    let (cfg, args) = scale_args(&tmp, 2.0);
    let k2 = g.add_kernel(&[c1], &kernels::SCALE_F32, cfg, args).unwrap(); // 12
    let down = g.add_copy_d2h(&[k2], &mut out, &tmp).unwrap();
    let fr = g.add_free(&[down], &tmp).unwrap();
    let r = runs.clone();
    let h = g
        .add_host(&[down], move || {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let end = g.add_empty(&[fr, h, set]).unwrap();
    assert_eq!(g.node_count(), 10);
    assert_eq!(g.root_nodes().len(), 2);
    assert_eq!(g.dependencies(end), vec![fr, h, set]);
    assert_eq!(g.dependents(down), vec![fr, h]);
    let types: Vec<NodeType> = g.nodes().iter().map(|n| n.node_type).collect();
    assert_eq!(
        types,
        [
            NodeType::Memcpy,
            NodeType::Memset,
            NodeType::Kernel,
            NodeType::MemAlloc,
            NodeType::Memcpy,
            NodeType::Kernel,
            NodeType::Memcpy,
            NodeType::MemFree,
            NodeType::Host,
            NodeType::Empty
        ]
    );
    let exec = g.instantiate().unwrap();
    for round in 1..=3u32 {
        out.write().unwrap().fill(0.0);
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_all(&out.read().unwrap(), 12.0);
        assert_all(&download(&bytes), 0x1111_1111);
        assert_eq!(runs.load(Ordering::SeqCst), round);
        assert_all(&download(&a), 6.0);
    }
}

/// GR8: the edges a graph reports are the ones it was built with, and a node depends on
/// exactly its dependencies: two branches joined by an edge added afterwards run in order.
pub fn gr8_explicit_dependencies_order_nodes(dev: &Device) {
    let s = side_stream(dev);
    let d = filled(dev, N, 1.0);
    let mut g = Graph::new(dev);
    let (cfg, args) = scale_args(&d, 3.0);
    let times3 = g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
    let fill = g
        .add_kernel(
            &[],
            &kernels::FILL_F32,
            LaunchConfig::for_elements(N, kernels::BLOCK),
            KernelArgs::new().write(&d).scalar(5.0f32).scalar(N as u64),
        )
        .unwrap();
    // Fill first, then scale: 15 (the other order would give 5).
    g.add_dependency(fill, times3).unwrap();
    assert_eq!(g.edges(), vec![(fill, times3)]);
    assert_eq!(g.edge_count(), 1);
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 15.0);
}

/// GR8: a cycle, and a dependency on a node the graph does not have, are typed errors that
/// name the node; nothing is instantiated.
pub fn gr8_cycles_and_unknown_nodes_refused(dev: &Device) {
    let mut g = Graph::new(dev);
    let a = g.add_empty(&[]).unwrap();
    let b = g.add_empty(&[a]).unwrap();
    let c = g.add_empty(&[b]).unwrap();
    g.add_dependency(c, a).unwrap();
    match g.instantiate() {
        Err(Error::Graph(why)) => assert!(why.contains("node 0") && why.contains("cycle"), "{why}"),
        other => panic!("a cycle must be refused, got {other:?}"),
    }
    let mut big = Graph::new(dev);
    for _ in 0..5 {
        big.add_empty(&[]).unwrap();
    }
    let foreign = big.node_ids()[4];
    let mut small = Graph::new(dev);
    match small.add_empty(&[foreign]) {
        Err(Error::Graph(why)) => assert!(why.contains("node 4"), "{why}"),
        other => panic!("an unknown node must be refused, got {other:?}"),
    }
    assert_eq!(small.node_count(), 0);
}

/// GR8 with GR7: a node that uses graph memory without being ordered after its allocation
/// node, or before its free node, is refused at instantiation, naming that node.
pub fn gr8_graph_memory_outside_lifetime_refused(dev: &Device) {
    let mut g = Graph::new(dev);
    let root = g.add_empty(&[]).unwrap();
    let (al, tmp) = g.add_alloc::<f32>(&[root], N).unwrap();
    let early = g.add_memset(&[root], &tmp, 0).unwrap(); // not after the allocation
    let fr = g.add_free(&[al], &tmp).unwrap();
    let _ = (early, fr);
    match g.instantiate() {
        Err(Error::Graph(why)) => assert!(why.contains("node 2"), "{why}"),
        other => panic!("use before the allocation node must be refused, got {other:?}"),
    }
    let mut g = Graph::new(dev);
    let (al, tmp) = g.add_alloc::<f32>(&[], N).unwrap();
    let fr = g.add_free(&[al], &tmp).unwrap();
    let late = g.add_memset(&[al], &tmp, 0).unwrap(); // not before the free
    let _ = (fr, late);
    match g.instantiate() {
        Err(Error::Graph(why)) => assert!(why.contains("node 2") && why.contains("free"), "{why}"),
        other => panic!("use after the free node must be refused, got {other:?}"),
    }
}

/// GR8: a captured graph as a child node of a built graph, and nodes added to a captured
/// graph; a clone is a separate graph.
pub fn gr8_captured_and_built_combine(dev: &Device) {
    let s = side_stream(dev);
    let d = filled(dev, N, 1.0);
    let cap = Stream::new(dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    kernels::scale(&cap, &d, 2.0).unwrap();
    kernels::scale(&cap, &d, 3.0).unwrap();
    let captured = cap.end_capture().unwrap();
    // A built graph: child (×6), then ×10.
    let mut g = Graph::new(dev);
    let child = g.add_child(&[], &captured).unwrap();
    assert_eq!(g.nodes()[0].node_type, NodeType::Graph);
    assert_eq!(g.child_graph(child).unwrap().node_count(), 2);
    let (cfg, args) = scale_args(&d, 10.0);
    g.add_kernel(&[child], &kernels::SCALE_F32, cfg, args)
        .unwrap();
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 60.0);
    // Nodes added to the captured graph (a clone of it: the original keeps its 2 nodes).
    let mut more = captured.clone();
    let last = more.node_ids()[1];
    let (cfg, args) = scale_args(&d, 0.5);
    more.add_kernel(&[last], &kernels::SCALE_F32, cfg, args)
        .unwrap();
    assert_eq!((captured.node_count(), more.node_count()), (2, 3));
    more.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 180.0);
}

/// GR8 with GR6: a built graph's kernel node is updated in place by node id, and a graph of
/// the same shape updates the instantiation.
pub fn gr8_update_built_graph(dev: &Device) {
    let s = side_stream(dev);
    let d = filled(dev, N, 1.0);
    let build = |f: f32| {
        let mut g = Graph::new(dev);
        let e = g.add_empty(&[]).unwrap();
        let (cfg, args) = scale_args(&d, f);
        let k = g.add_kernel(&[e], &kernels::SCALE_F32, cfg, args).unwrap();
        (g, k)
    };
    let (g, k) = build(2.0);
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    let (cfg, args) = scale_args(&d, 5.0);
    exec.set_kernel_args(k, &kernels::SCALE_F32, cfg, args)
        .unwrap();
    exec.launch(&s).unwrap();
    exec.update(&build(3.0).0).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 30.0);
}

/// GR8: event record and wait nodes order a built graph against streams: a stream waiting on
/// the recorded event sees the work the record node depends on, and the graph's wait node
/// holds the node after it until the waited event completed.
pub fn gr8_event_nodes(dev: &Device) {
    let (s, other) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 1.0);
    let (go, done) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let mut g = Graph::new(dev);
    let w = g.add_event_wait(&[], &go).unwrap();
    let (cfg, args) = scale_args(&d, 2.0);
    let k = g.add_kernel(&[w], &kernels::SCALE_F32, cfg, args).unwrap();
    g.add_event_record(&[k], &done).unwrap();
    let exec = g.instantiate().unwrap();
    let gate = Gate::host(dev);
    gate.block(&other);
    kernels::fill(&other, &d, 4.0).unwrap();
    go.record(&other).unwrap();
    exec.launch(&s).unwrap();
    let reader = side_stream(dev);
    reader.wait_event(&done).unwrap();
    let probe = reader.record().unwrap();
    assert_stays_pending(
        &probe,
        std::time::Duration::from_millis(50),
        "the graph's waiter",
    );
    gate.open();
    reader.synchronize().unwrap();
    assert_all(&download(&d), 8.0);
    dev.synchronize().unwrap();
}

/// A host node that holds its launch until the test opens `latch` (or [`DEADLINE`] passed).
fn holding_node(
    g: &mut Graph,
    deps: &[cueflow::GraphNodeId],
    latch: &Arc<Latch>,
) -> cueflow::GraphNodeId {
    let latch = latch.clone();
    g.add_host(deps, move || {
        latch.wait(DEADLINE);
    })
    .unwrap()
}

/// GR8: an event record node captures only the nodes it depends on: a stream waiting on its
/// event goes on while a node it does not depend on still runs (a host node that holds the
/// launch until the test has seen the waiting stream's work complete), and sees the node's
/// dependencies done.
pub fn gr8_event_record_node_captures_only_its_dependencies(dev: &Device) {
    let (s, other) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 1.0);
    let done = Event::new(dev).unwrap();
    let latch = Arc::new(Latch::default());
    let mut g = Graph::new(dev);
    let (cfg, args) = scale_args(&d, 2.0);
    let k = g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
    g.add_event_record(&[k], &done).unwrap();
    let last = holding_node(&mut g, &[], &latch);
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    other.wait_event(&done).unwrap();
    let mut seen = vec![0.0f32; N];
    other.read_pageable(&mut seen, &d).unwrap(); // returns once the read is done
    assert_all(&seen, 2.0);
    assert!(
        !s.query().unwrap(),
        "the graph's node {last:?} still holds the launch"
    );
    assert!(done.query().unwrap());
    latch.open();
    s.synchronize().unwrap();
}

/// GR8: an event wait node holds back only the nodes that depend on it: a branch of the graph
/// that does not runs (and records an event) while the waited work is still held, even where
/// the waiting branch uses that work's buffer.
pub fn gr8_event_wait_node_holds_only_its_dependents(dev: &Device) {
    let (s, other, probe) = (side_stream(dev), side_stream(dev), side_stream(dev));
    let (d, e) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (go, early) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let gate = Gate::host(dev);
    gate.block(&other);
    kernels::fill(&other, &d, 4.0).unwrap();
    go.record(&other).unwrap();
    let mut g = Graph::new(dev);
    let w = g.add_event_wait(&[], &go).unwrap();
    let (cfg, args) = scale_args(&d, 2.0);
    g.add_kernel(&[w], &kernels::SCALE_F32, cfg, args).unwrap();
    let (cfg, args) = scale_args(&e, 3.0);
    let k = g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
    g.add_event_record(&[k], &early).unwrap();
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    probe.wait_event(&early).unwrap();
    let ran = probe.record().unwrap();
    wait_until("the branch without the wait node ran", || {
        ran.query().unwrap()
    });
    assert!(!s.query().unwrap(), "the wait node holds its dependent");
    gate.open();
    s.synchronize().unwrap();
    gate.assert_not_timed_out();
    assert_all(&download(&d), 8.0);
    assert_all(&download(&e), 3.0);
}

/// GR8 with GR6: an update may give event nodes other events; the launch then records and
/// waits on those, with the nodes' own scope.
pub fn gr8_update_gives_event_nodes_other_events(dev: &Device) {
    let (s, other) = (side_stream(dev), side_stream(dev));
    let d = filled(dev, N, 1.0);
    let latch = Arc::new(Latch::default());
    let build = |done: &Event, go: &Event| {
        let mut g = Graph::new(dev);
        let w = g.add_event_wait(&[], go).unwrap();
        let (cfg, args) = scale_args(&d, 2.0);
        let k = g.add_kernel(&[w], &kernels::SCALE_F32, cfg, args).unwrap();
        g.add_event_record(&[k], done).unwrap();
        holding_node(&mut g, &[], &latch);
        g
    };
    let (done1, done2) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let (go1, go2) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let exec = build(&done1, &go1).instantiate().unwrap();
    exec.update(&build(&done2, &go2)).unwrap();
    // `go2` is what the wait node waits on now: held work on `other`, then opened.
    let gate = Gate::host(dev);
    gate.block(&other);
    go2.record(&other).unwrap();
    exec.launch(&s).unwrap();
    let reader = side_stream(dev);
    reader.wait_event(&done2).unwrap();
    let probe = reader.record().unwrap();
    assert_stays_pending(
        &probe,
        Duration::from_millis(50),
        "the record node after the wait",
    );
    gate.open();
    let mut seen = vec![0.0f32; N];
    reader.read_pageable(&mut seen, &d).unwrap();
    assert_all(&seen, 2.0);
    assert!(
        !s.query().unwrap(),
        "the holding node still holds the launch"
    );
    // The instantiation's first event is not recorded any more (EV6: never recorded).
    assert!(matches!(
        Event::elapsed_ms(&done1, &done1),
        Err(Error::InvalidHandle(_))
    ));
    latch.open();
    s.synchronize().unwrap();
}

/// GR8 with AC5: automatic ordering after a graph's accesses waits for exactly what orders
/// them: for the record node the accessing node is upstream of, not for the rest of the
/// launch; and for the launch where no record node covers the access.
pub fn gr8_automatic_ordering_follows_event_nodes(dev: &Device) {
    let (s, t) = (side_stream(dev), side_stream(dev));
    t.set_auto_order(true);
    let (a, b, c) = (filled(dev, N, 1.0), zeros(dev, N), filled(dev, N, 1.0));
    let done = Event::new(dev).unwrap();
    let latch = Arc::new(Latch::default());
    let mut g = Graph::new(dev);
    let (cfg, args) = scale_args(&a, 5.0);
    let k = g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
    g.add_event_record(&[k], &done).unwrap();
    let hold = holding_node(&mut g, &[], &latch);
    let (cfg, args) = scale_args(&c, 7.0);
    g.add_kernel(&[hold], &kernels::SCALE_F32, cfg, args)
        .unwrap();
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    // Reads `a`, which a node upstream of the record node writes: waits for that node only.
    t.copy_d2d(&b, &a).unwrap();
    let copied = t.record().unwrap();
    wait_until("the copy ordered after the record node ran", || {
        copied.query().unwrap()
    });
    // Reads `c`, which a node after the holding node writes: waits for the launch.
    kernels::scale(&t, &c, 0.5).unwrap();
    let scaled = t.record().unwrap();
    assert_stays_pending(&scaled, Duration::from_millis(50), "the read of `c`");
    latch.open();
    t.synchronize().unwrap();
    assert_all(&download(&b), 5.0);
    assert_all(&download(&c), 3.5);
}

/// GR8: the DOT diagram names every node and edge, child graphs as clusters.
pub fn gr8_dot_output(dev: &Device) {
    let d = filled(dev, N, 1.0);
    let mut inner = Graph::new(dev);
    inner.add_empty(&[]).unwrap();
    let mut g = Graph::new(dev);
    let (cfg, args) = scale_args(&d, 2.0);
    let k = g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
    g.add_child(&[k], &inner).unwrap();
    let dot = g.to_dot();
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("cf_scale_f32"), "{dot}");
    assert!(dot.contains("n0 -> n1;"), "{dot}");
    assert!(dot.contains("subgraph cluster_n1"), "{dot}");
    let path = std::env::temp_dir().join(format!("cueflow-gr8-{}.dot", std::process::id()));
    g.write_dot(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), dot);
    let _ = std::fs::remove_file(path);
}
