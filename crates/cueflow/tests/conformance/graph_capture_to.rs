//! GR1, GR9 (issue 27 item 15): capture into an existing graph (cudaStreamBeginCaptureToGraph):
//! a stream's work becomes nodes of a graph the program has — after nodes of it — such as the
//! body of a conditional node added before its body was filled, as graphConditionalNodes
//! does. Core captures for every backend, so the driver's own capture-to-graph is not needed.

use cueflow::{
    kernels, CaptureMode, ConditionHandle, Device, Error, Event, Graph, KernelArgs, LaunchConfig,
};

use crate::conditional::{count_step, one, put};
use crate::support::*;

fn scale_args(d: &cueflow::DeviceBuffer<f32>, f: f32) -> (LaunchConfig, KernelArgs) {
    (
        LaunchConfig::for_elements(d.len(), kernels::BLOCK),
        KernelArgs::new().write(d).scalar(f).scalar(d.len() as u64),
    )
}

/// GR1: a capture into a built graph adds its work after the given node — forked streams,
/// graph memory and all — and the graph runs it in that order; a plain `end_capture` is
/// refused (the capture goes on), a node of another graph is refused as a dependency, and an
/// abandoned capture adds nothing.
pub fn gr1_capture_into_an_existing_graph(dev: &Device) {
    let (s, o) = (side_stream(dev), side_stream(dev));
    let (d, e) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let mut g = Graph::new(dev);
    let (cfg, args) = scale_args(&d, 2.0);
    let first = g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
    let other = Graph::new(dev).add_empty(&[]).unwrap();
    assert!(matches!(
        s.begin_capture_to_graph(&mut g, &[other], CaptureMode::Global),
        Err(Error::Graph(_))
    ));
    let cap = s
        .begin_capture_to_graph(&mut g, &[first], CaptureMode::Global)
        .unwrap();
    kernels::scale(&s, &d, 3.0).unwrap();
    let fork = Event::new(dev).unwrap();
    s.record_event(&fork).unwrap();
    o.wait_event(&fork).unwrap();
    let tmp = o.alloc_async::<f32>(N).unwrap();
    o.copy_d2d(&tmp, &d).unwrap();
    o.copy_d2d(&e, &tmp).unwrap();
    o.free_async(tmp).unwrap();
    let join = o.record().unwrap();
    s.wait_event(&join).unwrap();
    assert!(matches!(s.end_capture(), Err(Error::Capture(_))));
    let added = cap.end().unwrap();
    assert_eq!(added.len(), 5, "scale, allocation, two copies, free");
    assert_eq!(g.dependencies(added[0]), vec![first]);
    assert!(!s.is_capturing() && !o.is_capturing());
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 6.0);
    assert_all(&download(&e), 6.0);
    // Abandoned: nothing is added, the stream captures no more.
    let before = g.node_count();
    let cap = s
        .begin_capture_to_graph(&mut g, &[], CaptureMode::Global)
        .unwrap();
    kernels::scale(&s, &d, 10.0).unwrap();
    drop(cap);
    assert!(!s.is_capturing());
    assert_eq!(g.node_count(), before);
}

/// GR9: conditional nodes whose bodies are filled after the node was added, by capture into
/// the body — a while node added to a built graph (do-while) and one added to a capture in
/// progress (while) — as graphConditionalNodes does.
pub fn gr9_capture_into_a_conditional_body(dev: &Device) {
    let s = side_stream(dev);
    let step = |count: &cueflow::DeviceBuffer<u32>, cond: &ConditionHandle, limit: u32| {
        KernelArgs::new().write(count).condition(cond).scalar(limit)
    };
    // Do-while: the body runs at least once (default 1), until the count reaches 10.
    let count = upload(dev, &[0u32]);
    let mut g = Graph::new(dev);
    let cond = g.condition(1, true);
    let node = g.add_while(&[], &cond, &Graph::new(dev)).unwrap();
    {
        let mut body = g.conditional_body(node, 0).unwrap();
        let cap = s
            .begin_capture_to_graph(&mut body, &[], CaptureMode::Global)
            .unwrap();
        s.launch(&count_step(), one(), step(&count, &cond, 10))
            .unwrap();
        cap.end().unwrap();
    }
    assert!(matches!(g.conditional_body(node, 1), Err(Error::Graph(_))));
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(download(&count)[0], 10);
    // While, added to a capture: a kernel sets the condition before the node, the body is
    // captured into after the capture ended, and a kernel runs after the node.
    let (count, after) = (upload(dev, &[0u32]), upload(dev, &[0u32]));
    let cond = ConditionHandle::new(0, false);
    let cap = side_stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    cap.launch(&count_step(), one(), step(&count, &cond, 5))
        .unwrap();
    let node = cap.capture_while(&cond, &Graph::new(dev)).unwrap();
    cap.launch(&put(), one(), KernelArgs::new().write(&after).scalar(9u32))
        .unwrap();
    let mut g = cap.end_capture().unwrap();
    {
        let mut body = g.conditional_body(node, 0).unwrap();
        let into = s
            .begin_capture_to_graph(&mut body, &[], CaptureMode::Global)
            .unwrap();
        s.launch(&count_step(), one(), step(&count, &cond, 5))
            .unwrap();
        into.end().unwrap();
    }
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!((download(&count)[0], download(&after)[0]), (5, 9));
}
