//! Misuse of graphs (issue 27): instantiations of graphs with memory nodes, graph memory,
//! node ids and conditions of another graph, capture into an existing graph. The exact error,
//! and nothing enqueued (the device's trace shows no operation from the refused call, the
//! stream is idle, the device not poisoned). Listed in `tests/MISUSE.md`. Host backend only:
//! validation happens before any backend sees the call (ER3); the conformance suite runs the
//! same rules on every backend.

#[path = "common/refused.rs"]
mod refused;
use refused::refused;

use cueflow::{
    kernels, CaptureMode, ConditionHandle, Device, DeviceBuffer, Error, Event, Graph, Kernel,
    KernelArgs, LaunchConfig, Stream,
};

const N: usize = 256;

fn dev() -> Device {
    Device::host().unwrap()
}

/// A graph that allocates `N` floats, fills them with `v` and hands them out (GR10).
fn handing_out(dev: &Device, v: f32) -> (Graph, DeviceBuffer<f32>) {
    let mut g = Graph::new(dev);
    let (al, t) = g.add_alloc::<f32>(&[], N).unwrap();
    g.add_kernel(
        &[al],
        &kernels::FILL_F32,
        LaunchConfig::for_elements(N, kernels::BLOCK),
        KernelArgs::new().write(&t).scalar(v).scalar(N as u64),
    )
    .unwrap();
    (g, t)
}

/// A kernel that sets condition argument 0 to 1.
fn setter() -> Kernel {
    Kernel::new("set_one")
        .host(|_, a| a.set_condition(0, 1))
        .build()
}

#[test]
fn second_instantiation_of_a_graph_with_memory_nodes() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let (g, _t) = handing_out(&dev, 1.0);
    let _first = g.instantiate().unwrap();
    for graph in [&g, &g.clone()] {
        assert!(matches!(
            refused(&dev, &s, || graph.instantiate()),
            Error::NotPermitted { rule: "GR7", .. }
        ));
    }
}

#[test]
fn reinstantiation_while_its_graph_memory_is_allocated() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let (g, t) = handing_out(&dev, 1.0);
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    drop(exec);
    assert!(matches!(
        refused(&dev, &s, || g.instantiate()),
        Error::NotPermitted { rule: "GR10", .. }
    ));
    // The memory is still the program's: freed, the graph is instantiated again.
    t.free().unwrap();
    g.instantiate().unwrap();
}

#[test]
fn free_of_graph_memory_that_is_not_allocated() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let (g, t) = handing_out(&dev, 1.0);
    let exec = g.instantiate().unwrap();
    // Never launched, so not allocated.
    assert!(matches!(
        refused(&dev, &s, || t.clone().free()),
        Error::NotPermitted { rule: "GR10", .. }
    ));
    exec.launch(&s).unwrap();
    t.clone().free().unwrap();
    assert!(matches!(
        refused(&dev, &s, || t.clone().free()),
        Error::NotPermitted { rule: "GR10", .. }
    ));
    // Memory the graph frees itself is the graph's (GR7).
    let mut own = Graph::new(&dev);
    let (al, tmp) = own.add_alloc::<f32>(&[], N).unwrap();
    own.add_free(&[al], &tmp).unwrap();
    let _exec = own.instantiate().unwrap();
    assert!(matches!(
        refused(&dev, &s, || tmp.clone().free()),
        Error::InvalidHandle(_)
    ));
    // cudaFree synchronizes the device: refused during a capture (GR2).
    exec.launch(&s).unwrap();
    let cap = Stream::new(&dev).unwrap();
    cap.begin_capture(CaptureMode::Global).unwrap();
    assert!(matches!(t.clone().free(), Err(Error::CaptureIllegal(_))));
    assert!(matches!(
        cap.end_capture(),
        Err(Error::CaptureInvalidated(_))
    ));
    t.free().unwrap();
}

#[test]
fn node_of_another_graph() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    let (cfg, args) = (LaunchConfig::for_elements(N, kernels::BLOCK), || {
        KernelArgs::new().write(&d).scalar(2.0f32).scalar(N as u64)
    });
    let mut a = Graph::new(&dev);
    let a0 = a.add_empty(&[]).unwrap();
    let mut b = Graph::new(&dev);
    let b0 = b.add_kernel(&[], &kernels::SCALE_F32, cfg, args()).unwrap();
    assert!(matches!(a.add_empty(&[b0]), Err(Error::Graph(_))));
    assert!(matches!(a.add_dependency(a0, b0), Err(Error::Graph(_))));
    assert!(matches!(a.conditional_body(b0, 0), Err(Error::Graph(_))));
    let exec = a.instantiate().unwrap();
    assert!(matches!(
        refused(&dev, &s, || exec.set_kernel_args(
            b0,
            &kernels::SCALE_F32,
            cfg,
            args()
        )),
        Error::GraphUpdate(_)
    ));
}

/// `set_kernel_args` with another `Kernel` object of the same name as the node's is refused
/// (GR6: a node keeps its kernel), and the message says that the objects differ, not that
/// one name replaced the same name.
#[test]
fn kernel_update_with_a_twin_kernel_object() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, 4).unwrap();
    let twin = || {
        cueflow::Kernel::new("twin")
            .host(|_, a| a.whole_mut::<f32>(0)[0] = 1.0)
            .build()
    };
    let (k, cfg) = (twin(), LaunchConfig::new(1, 1));
    let mut g = Graph::new(&dev);
    let node = g
        .add_kernel(&[], &k, cfg, KernelArgs::new().write(&d))
        .unwrap();
    let exec = g.instantiate().unwrap();
    let e = refused(&dev, &s, || {
        exec.set_kernel_args(node, &twin(), cfg, KernelArgs::new().write(&d))
    });
    assert!(
        matches!(&e, Error::GraphUpdate(m) if m.contains("another `Kernel` named `twin`")),
        "{e:?}"
    );
    exec.set_kernel_args(node, &k, cfg, KernelArgs::new().write(&d))
        .unwrap();
}

#[test]
fn condition_of_another_graph() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let mut ga = Graph::new(&dev);
    let ca = ga.condition(1, true);
    ga.add_if(&[], &ca, &Graph::new(&dev)).unwrap();
    let mut gb = Graph::new(&dev);
    gb.add_while(&[], &ca, &Graph::new(&dev)).unwrap();
    assert!(matches!(
        refused(&dev, &s, || gb.instantiate()),
        Error::Graph(_)
    ));
    // A kernel given a condition that drives no conditional node of its graph (on CUDA the
    // handle would name nothing in the executable graph).
    let mut gc = Graph::new(&dev);
    gc.add_kernel(
        &[],
        &setter(),
        LaunchConfig::new(1, 1),
        KernelArgs::new().condition(&ConditionHandle::new(0, true)),
    )
    .unwrap();
    assert!(matches!(
        refused(&dev, &s, || gc.instantiate()),
        Error::Graph(_)
    ));
}

#[test]
fn conditional_body_of_a_node_that_has_none() {
    let dev = dev();
    let mut g = Graph::new(&dev);
    let e = g.add_empty(&[]).unwrap();
    let cond = g.condition(0, true);
    let w = g.add_while(&[], &cond, &Graph::new(&dev)).unwrap();
    assert!(matches!(g.conditional_body(e, 0), Err(Error::Graph(_))));
    assert!(matches!(g.conditional_body(w, 1), Err(Error::Graph(_))));
    assert!(g.conditional_body(w, 0).is_ok());
}

#[test]
fn host_event_or_memory_node_in_a_conditional_body() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let event = Event::new(&dev).unwrap();
    type Fill<'a> = Box<dyn Fn(&mut Graph) + 'a>;
    let bodies: [(&str, Fill); 3] = [
        (
            "host node",
            Box::new(|b| {
                b.add_host(&[], || {}).unwrap();
            }),
        ),
        (
            "event nodes",
            Box::new(|b| {
                b.add_event_record(&[], &event).unwrap();
            }),
        ),
        (
            "graph memory",
            Box::new(|b| {
                b.add_alloc::<f32>(&[], N).unwrap();
            }),
        ),
    ];
    for (what, fill) in &bodies {
        // Refused when the node is added…
        let mut body = Graph::new(&dev);
        fill(&mut body);
        let mut g = Graph::new(&dev);
        let cond = g.condition(1, true);
        match refused(&dev, &s, || g.add_if(&[], &cond, &body)) {
            Error::Graph(why) => assert!(why.contains(what), "{why}"),
            e => panic!("{what}: expected Error::Graph, got {e}"),
        }
        // …and at instantiation when the body got it afterwards.
        let mut g = Graph::new(&dev);
        let cond = g.condition(1, true);
        let node = g.add_if(&[], &cond, &Graph::new(&dev)).unwrap();
        fill(&mut g.conditional_body(node, 0).unwrap());
        match refused(&dev, &s, || g.instantiate()) {
            Error::Graph(why) => assert!(why.contains(what), "{why}"),
            e => panic!("{what}: expected Error::Graph, got {e}"),
        }
    }
}

#[test]
fn ending_a_capture_into_a_graph_with_end_capture() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let mut g = Graph::new(&dev);
    let cap = s
        .begin_capture_to_graph(&mut g, &[], CaptureMode::Global)
        .unwrap();
    kernels::empty(&s).unwrap();
    assert!(matches!(s.end_capture(), Err(Error::Capture(_))));
    assert!(s.is_capturing(), "the capture goes on");
    assert_eq!(cap.end().unwrap().len(), 1);
    let mut theirs = Graph::new(&other);
    assert!(matches!(
        s.begin_capture_to_graph(&mut theirs, &[], CaptureMode::Global),
        Err(Error::InvalidHandle(_))
    ));
    assert!(!s.is_capturing());
}

#[test]
fn graph_update_with_a_graph_of_another_device() {
    let (dev, other) = (dev(), Device::host().unwrap());
    let s = Stream::new(&dev).unwrap();
    let mut g = Graph::new(&dev);
    g.add_empty(&[]).unwrap();
    let exec = g.instantiate().unwrap();
    let mut theirs = Graph::new(&other);
    theirs.add_empty(&[]).unwrap();
    assert!(matches!(
        refused(&dev, &s, || exec.update(&theirs)),
        Error::InvalidHandle(_)
    ));
}

/// Not misuse: a graph is a value — capturing into it while an instantiation of it runs
/// changes only later instantiations; the running one runs what it was made from.
#[test]
fn capture_into_a_graph_while_its_instantiation_runs() {
    let dev = dev();
    let s = Stream::new(&dev).unwrap();
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    let mut g = Graph::new(&dev);
    let (cfg, args) = (
        LaunchConfig::for_elements(N, kernels::BLOCK),
        KernelArgs::new().write(&d).scalar(1.0f32).scalar(N as u64),
    );
    let fill = g.add_kernel(&[], &kernels::FILL_F32, cfg, args).unwrap();
    let exec = g.instantiate().unwrap();
    let cap = Stream::new(&dev).unwrap();
    for _ in 0..4 {
        exec.launch(&s).unwrap();
    }
    let into = cap
        .begin_capture_to_graph(&mut g, &[fill], CaptureMode::Relaxed)
        .unwrap();
    kernels::scale(&cap, &d, 3.0).unwrap();
    into.end().unwrap();
    s.synchronize().unwrap();
    let mut out = vec![0.0f32; N];
    s.read_pageable(&mut out, &d).unwrap();
    assert!(
        out.iter().all(|&x| x == 1.0),
        "the instantiation ran as made"
    );
    g.instantiate().unwrap().launch(&s).unwrap();
    s.read_pageable(&mut out, &d).unwrap();
    assert!(out.iter().all(|&x| x == 3.0));
}
