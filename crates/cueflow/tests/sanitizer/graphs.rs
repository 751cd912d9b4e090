//! Graphs of issue 20 in the corpus: explicit graphs (GR8), conditional bodies (GR9) and graph
//! memory freed outside the graph (GR10) — racy programs (each returns the `(earlier, later)`
//! lines that race) and their correctly ordered twins; and graphs whose event record and wait
//! nodes order only some of their nodes (GR8, issue 27), as on CUDA.

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Event, Graph, GraphNodeId, KernelArgs,
    LaunchConfig, PinnedBuffer, Stream,
};

use crate::at;
use crate::support::*;

type Races = Vec<(u32, u32)>;

fn scale(g: &mut Graph, d: &DeviceBuffer<f32>, f: f32) {
    scale_after(g, &[], d, f);
}

pub(crate) fn scale_after(
    g: &mut Graph,
    deps: &[GraphNodeId],
    d: &DeviceBuffer<f32>,
    f: f32,
) -> GraphNodeId {
    let args = KernelArgs::new().write(d).scalar(f).scalar(d.len() as u64);
    let cfg = LaunchConfig::for_elements(d.len(), kernels::BLOCK);
    g.add_kernel(deps, &kernels::SCALE_F32, cfg, args).unwrap()
}

/// A graph that scales `a` and then records `done`, and scales `b` after `b_after` of
/// `[the kernel on a]` (empty: beside it, upstream of no record node).
fn record_after_one(
    dev: &Device,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
    both: bool,
) -> (cueflow::GraphExec, Event) {
    let done = Event::new(dev).unwrap();
    let mut g = Graph::new(dev);
    let ka = scale_after(&mut g, &[], a, 2.0);
    let kb = scale_after(&mut g, &[], b, 3.0);
    let upstream = if both { vec![ka, kb] } else { vec![ka] };
    g.add_event_record(&upstream, &done).unwrap();
    (g.instantiate().unwrap(), done)
}

/// A chain: scale `a`, record `first`, scale `b`, record `second` — the second scale comes
/// after the first record node, so `first` covers only the first scale.
pub(crate) fn records_along_a_chain(
    dev: &Device,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
) -> (cueflow::GraphExec, Event, Event) {
    let (first, second) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let mut g = Graph::new(dev);
    let ka = scale_after(&mut g, &[], a, 2.0);
    let r1 = g.add_event_record(&[ka], &first).unwrap();
    let kb = scale_after(&mut g, &[r1], b, 3.0);
    g.add_event_record(&[kb], &second).unwrap();
    (g.instantiate().unwrap(), first, second)
}

/// A chain: scale `a`, wait on `go`, scale `b` — only the second scale is after the waited
/// work (`events` rule 2).
fn wait_in_a_chain(
    dev: &Device,
    a: &DeviceBuffer<f32>,
    go: &Event,
    b: &DeviceBuffer<f32>,
) -> cueflow::GraphExec {
    let mut g = Graph::new(dev);
    let ka = scale_after(&mut g, &[], a, 2.0);
    let w = g.add_event_wait(&[ka], go).unwrap();
    scale_after(&mut g, &[w], b, 3.0);
    g.instantiate().unwrap()
}

/// A graph that waits on `go` and then scales the first half of `a`, and scales the second
/// half beside the wait node (`after_wait: false`) or after it.
fn wait_before_one(
    dev: &Device,
    a: &DeviceBuffer<f32>,
    go: &Event,
    after_wait: bool,
) -> cueflow::GraphExec {
    let (lo, hi) = (a.slice(0..N / 2).unwrap(), a.slice(N / 2..N).unwrap());
    let mut g = Graph::new(dev);
    let w = g.add_event_wait(&[], go).unwrap();
    scale_after(&mut g, &[w], &lo, 2.0);
    let deps = if after_wait { vec![w] } else { vec![] };
    scale_after(&mut g, &deps, &hi, 3.0);
    g.instantiate().unwrap()
}

/// A built graph whose if node's body (which never runs: the condition stays 0) scales `d`.
fn conditional_writer(dev: &Device, d: &DeviceBuffer<f32>) -> cueflow::GraphExec {
    let mut body = Graph::new(dev);
    scale(&mut body, d, 2.0);
    let mut g = Graph::new(dev);
    let h = g.condition(0, true);
    g.add_if(&[], &h, &body).unwrap();
    g.instantiate().unwrap()
}

/// A built graph with two unordered if nodes whose bodies scale `d`, on one condition
/// (`shared`: refused at instantiation, GR9) or on one each; the lines of the two nodes.
fn two_ifs_scaling(dev: &Device, d: &DeviceBuffer<f32>, shared: bool) -> (Graph, u32, u32) {
    let mut body = Graph::new(dev);
    scale(&mut body, d, 2.0);
    let mut g = Graph::new(dev);
    let (first, second) = (g.condition(1, true), g.condition(1, true));
    let second = if shared { &first } else { &second };
    let a = at!(g.add_if(&[], &first, &body));
    let b = at!(g.add_if(&[], second, &body));
    (g, a, b)
}

/// A graph whose if node (condition 1) runs a body of two kernels scaling `d`, the second
/// after the first (`ordered`) or beside it; the lines that add them.
fn body_of_two_scales(dev: &Device, d: &DeviceBuffer<f32>, ordered: bool) -> (Graph, u32, u32) {
    let args = |f: f32| KernelArgs::new().write(d).scalar(f).scalar(d.len() as u64);
    let cfg = LaunchConfig::for_elements(d.len(), kernels::BLOCK);
    // `at!` keeping the node: (node, line of the call).
    macro_rules! node_at {
        ($call:expr) => {{
            let line = line!();
            ($call.unwrap(), line)
        }};
    }
    let mut body = Graph::new(dev);
    let (k, first) = node_at!(body.add_kernel(&[], &kernels::SCALE_F32, cfg, args(2.0)));
    let deps = if ordered { vec![k] } else { vec![] };
    let (_, second) = node_at!(body.add_kernel(&deps, &kernels::SCALE_F32, cfg, args(3.0)));
    let mut g = Graph::new(dev);
    let h = g.condition(1, true);
    g.add_if(&[], &h, &body).unwrap();
    (g, first, second)
}

/// A host function that reads `p` unchecked, and the line of the read.
fn reading(p: &std::sync::Arc<PinnedBuffer<f32>>) -> (impl Fn() + Send + Sync + 'static, u32) {
    let p = p.clone();
    let line = line!();
    let read = move || {
        // SAFETY: f32 has no invalid bit patterns; in the racy programs a write may be under
        // way (the race under test), and nothing is done with the value.
        let _ = unsafe { p.as_slice_unchecked()[0] };
    };
    (read, line + 4)
}

/// A captured graph that allocates `N` floats, fills them and hands them out (GR10).
fn handing_out(dev: &Device) -> (cueflow::GraphExec, DeviceBuffer<f32>) {
    handing_out_with(dev, cueflow::InstantiateFlags::default())
}

/// [`handing_out`] instantiated with `flags`.
fn handing_out_with(
    dev: &Device,
    flags: cueflow::InstantiateFlags,
) -> (cueflow::GraphExec, DeviceBuffer<f32>) {
    let cap = stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    let t = cap.alloc_async::<f32>(N).unwrap();
    kernels::fill(&cap, &t, 1.0).unwrap();
    (
        cap.end_capture().unwrap().instantiate_with(flags).unwrap(),
        t,
    )
}

/// Auto-free on launch (GR10): a launch frees what the previous one handed out.
const AUTO_FREE: cueflow::InstantiateFlags = cueflow::InstantiateFlags {
    auto_free_on_launch: true,
};

// --- racy --------------------------------------------------------------------------------

pub fn built_graph_launch_races_with_stream_write(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let mut g = Graph::new(dev);
    scale(&mut g, &d, 2.0);
    let exec = g.instantiate().unwrap();
    let l = at!(exec.launch(&s1));
    let w = at!(kernels::fill(&s2, &d, 3.0));
    vec![(l, w)]
}

pub fn conditional_body_that_may_run_races_with_stream_read(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 1.0), filled(dev, N, 0.0));
    let exec = conditional_writer(dev, &d);
    let l = at!(exec.launch(&s1));
    let r = at!(kernels::saxpy(&s2, 1.0, &d, &y));
    vec![(l, r)]
}

pub fn graph_memory_used_by_a_stream_not_ordered_after_the_launch(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out(dev);
    let l = at!(exec.launch(&s1));
    let w = at!(kernels::fill(&s2, &t, 2.0));
    s2.wait_event(&s1.record().unwrap()).unwrap();
    s2.free_async(t).unwrap();
    vec![(l, w)]
}

pub fn graph_memory_freed_by_a_stream_not_ordered_after_the_launch(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out(dev);
    let l = at!(exec.launch(&s1));
    let f = at!(s2.free_async(t.clone()));
    vec![(l, f)]
}

pub fn stream_after_a_record_node_races_with_a_node_it_does_not_depend_on(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, done) = record_after_one(dev, &a, &b, false);
    let l = at!(exec.launch(&s1));
    s2.wait_event(&done).unwrap();
    kernels::scale(&s2, &a, 0.5).unwrap(); // upstream of the record node: ordered
    let w = at!(kernels::fill(&s2, &b, 4.0));
    vec![(l, w)]
}

/// Both scales are on one chain of the graph; the first record node covers only the one
/// before it, the second both (`events` rule 3).
pub fn stream_after_a_record_node_races_with_the_node_after_it(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, first, _) = records_along_a_chain(dev, &a, &b);
    exec.launch(&s1).unwrap();
    let l = at!(exec.launch(&s1)); // Each launch stamps the chain anew.
    s2.wait_event(&first).unwrap();
    kernels::scale(&s2, &a, 0.5).unwrap(); // upstream of the record node: ordered
    let w = at!(kernels::fill(&s2, &b, 4.0));
    vec![(l, w)]
}

pub fn node_beside_a_wait_node_races_with_the_waited_work(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let a = filled(dev, N, 1.0);
    let go = Event::new(dev).unwrap();
    let f = at!(kernels::fill(&s2, &a, 4.0));
    go.record(&s2).unwrap();
    let exec = wait_before_one(dev, &a, &go, false);
    let l = at!(exec.launch(&s1));
    vec![(f, l)]
}

/// `wait_in_a_chain`: the scale before the wait node is not after the waited work.
pub fn node_before_a_wait_node_on_its_chain_races_with_the_waited_work(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let go = Event::new(dev).unwrap();
    let f = at!(kernels::fill(&s2, &a, 4.0));
    kernels::fill(&s2, &b, 4.0).unwrap(); // written before the record: the wait orders it
    go.record(&s2).unwrap();
    let exec = wait_in_a_chain(dev, &a, &go, &b);
    let l = at!(exec.launch(&s1));
    vec![(f, l)]
}

/// Two if nodes of one graph, unordered, whose bodies write the same bytes: a launch may run
/// both bodies at once, so instantiation reports them (graph order rule 4).
pub fn two_unordered_if_nodes_write_one_buffer(dev: &Device) -> Races {
    let d = filled(dev, N, 1.0);
    let (g, a, b) = two_ifs_scaling(dev, &d, false);
    g.instantiate().unwrap();
    vec![(a, b)]
}

/// GR9: a body runs as a graph of its own, so two of its nodes with no path between them may
/// run at once (CUDA) and are reported at instantiation, named by their body.
pub fn two_unordered_nodes_of_a_conditional_body(dev: &Device) -> Races {
    let d = filled(dev, N, 1.0);
    let (g, first, second) = body_of_two_scales(dev, &d, false);
    g.instantiate().unwrap().launch(&stream(dev)).unwrap();
    vec![(first, second)]
}

/// Two unordered copy nodes of a built graph writing one buffer, reported at the calls that
/// added them (not inside cueflow).
pub fn two_unordered_copy_nodes_write_one_buffer(dev: &Device) -> Races {
    let (d, a, b) = (
        filled(dev, N, 0.0),
        filled(dev, N, 1.0),
        filled(dev, N, 2.0),
    );
    let mut g = Graph::new(dev);
    let first = at!(g.add_copy_d2d(&[], &d, &a));
    let second = at!(g.add_copy_d2d(&[], &d, &b));
    g.instantiate().unwrap();
    vec![(first, second)]
}

/// HF1 in graphs: a host node comes after the nodes it depends on only — one beside a copy
/// node races with its write.
pub fn graph_host_node_beside_a_copy_node(dev: &Device) -> Races {
    let d = filled(dev, N, 5.0);
    let mut p = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let mut g = Graph::new(dev);
    let c = at!(g.add_copy_d2h(&[], &mut p, &d));
    let p = std::sync::Arc::new(p);
    let (read, r) = reading(&p);
    g.add_host(&[], read).unwrap();
    let s = stream(dev);
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    vec![(c, r)]
}

/// GR8 with HF1: a host node beside an event wait node is not ordered after the waited work.
pub fn graph_host_node_beside_a_wait_node(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 5.0);
    let mut p = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let c = at!(s2.copy_d2h(&mut p, &d));
    let go = s2.record().unwrap();
    let p = std::sync::Arc::new(p);
    let mut g = Graph::new(dev);
    g.add_event_wait(&[], &go).unwrap();
    let (read, r) = reading(&p);
    g.add_host(&[], read).unwrap();
    g.instantiate().unwrap().launch(&s1).unwrap();
    s1.synchronize().unwrap();
    vec![(c, r)]
}

/// GR10: a launch allocates again what the stream freed after using it; not ordered after
/// that free, it races with it.
pub fn relaunch_not_ordered_after_a_streams_free_of_its_memory(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out(dev);
    exec.launch(&s1).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::fill(&s2, &t, 2.0).unwrap();
    let f = at!(s2.free_async(t));
    let l = at!(exec.launch(&s1));
    vec![(f, l)]
}

/// GR10: a launch with auto-free frees (and allocates again) what another stream still uses.
pub fn auto_free_relaunch_while_another_stream_uses_the_memory(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out_with(dev, AUTO_FREE);
    exec.launch(&s1).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    let w = at!(kernels::fill(&s2, &t, 2.0));
    let l = at!(exec.launch(&s1));
    vec![(w, l)]
}

/// GR10: another graph's free node, launched on a stream not ordered after the allocating
/// launch.
pub fn free_node_of_another_graph_not_ordered_after_the_launch(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out(dev);
    let mut freer = Graph::new(dev);
    freer.add_free(&[], &t).unwrap();
    let free_exec = freer.instantiate().unwrap();
    let l = at!(exec.launch(&s1));
    let f = at!(free_exec.launch(&s2));
    vec![(l, f)]
}

// --- correct -----------------------------------------------------------------------------

/// The racy twin's graph with both if nodes on one condition: instantiation refuses it (a
/// condition drives one node, GR9), so it never runs and nothing in it races — no report, and
/// in error mode the error says what is wrong (`Error::Graph`), not `Error::Race`.
pub fn graph_refused_at_instantiation_reports_no_race(dev: &Device) {
    let d = filled(dev, N, 1.0);
    let (g, _, _) = two_ifs_scaling(dev, &d, true);
    assert!(matches!(g.instantiate(), Err(cueflow::Error::Graph(_))));
    dev.set_sanitize(cueflow::SanitizeMode::Error);
    let refused = g.instantiate();
    dev.set_sanitize(cueflow::SanitizeMode::Warn);
    match refused {
        Err(cueflow::Error::Graph(why)) => assert!(why.contains("node 1"), "{why}"),
        Err(e) => panic!("expected Error::Graph naming node 1, got {e}"),
        Ok(_) => panic!("two conditional nodes on one condition were instantiated"),
    }
}

/// The racy twin with the body's second kernel after its first: ordered, and it runs.
pub fn ordered_nodes_of_a_conditional_body(dev: &Device) {
    let (s, d) = (stream(dev), filled(dev, N, 1.0));
    let (g, _, _) = body_of_two_scales(dev, &d, true);
    g.instantiate().unwrap().launch(&s).unwrap();
    let mut out = vec![0.0f32; N];
    s.read_pageable(&mut out, &d).unwrap();
    assert!(out.iter().all(|&x| x == 6.0));
}

/// HF1 in graphs: a host node comes after the nodes it depends on — in a built graph, in a
/// captured one (a stream's host function) — and after the work its launch is ordered after;
/// before the next launch, enqueued before it ran (a latch holds the stream).
pub fn graph_host_nodes_read_what_comes_before_them(dev: &Device) {
    let s = stream(dev);
    let (d, e) = (filled(dev, N, 5.0), filled(dev, N, 6.0));
    let (mut p, mut q) = (
        PinnedBuffer::<f32>::new(dev, N).unwrap(),
        PinnedBuffer::<f32>::new(dev, N).unwrap(),
    );
    s.copy_d2h(&mut q, &e).unwrap(); // before the launches
    let mut built = Graph::new(dev);
    let c = built.add_copy_d2h(&[], &mut p, &d).unwrap();
    let (p, q) = (std::sync::Arc::new(p), std::sync::Arc::new(q));
    built.add_host(&[c], reading(&p).0).unwrap();
    built.add_host(&[], reading(&q).0).unwrap();
    let built = built.instantiate().unwrap();
    let mut r = PinnedBuffer::<f32>::new(dev, N).unwrap();
    let cap = stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    cap.copy_d2h(&mut r, &d).unwrap();
    let r = std::sync::Arc::new(r);
    cap.host_fn(reading(&r).0).unwrap();
    let captured = cap.end_capture().unwrap().instantiate().unwrap();
    let latch = Latch::block(&s);
    for _ in 0..2 {
        built.launch(&s).unwrap();
        captured.launch(&s).unwrap();
    }
    latch.open();
    s.synchronize().unwrap();
}

/// GR8 with HF1: a host node after an event wait node comes after the waited work.
pub fn graph_host_node_after_a_wait_node(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 5.0);
    let mut p = PinnedBuffer::<f32>::new(dev, N).unwrap();
    s2.copy_d2h(&mut p, &d).unwrap();
    let go = s2.record().unwrap();
    let p = std::sync::Arc::new(p);
    let mut g = Graph::new(dev);
    let w = g.add_event_wait(&[], &go).unwrap();
    g.add_host(&[w], reading(&p).0).unwrap();
    g.instantiate().unwrap().launch(&s1).unwrap();
    s1.synchronize().unwrap();
}

/// GR10: the auto-free launch after the other stream's use, which it waits for.
pub fn auto_free_relaunch_after_the_other_streams_use(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out_with(dev, AUTO_FREE);
    for _ in 0..2 {
        exec.launch(&s1).unwrap();
        s2.wait_event(&s1.record().unwrap()).unwrap();
        kernels::fill(&s2, &t, 2.0).unwrap();
        s1.wait_event(&s2.record().unwrap()).unwrap();
    }
    s1.synchronize().unwrap();
}

/// GR10: dropping the last handle of the memory a launch handed out frees it after the work
/// that used it, and the next launch comes after that free.
pub fn relaunch_after_dropping_the_handed_out_memory(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out(dev);
    exec.launch(&s1).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::fill(&s2, &t, 2.0).unwrap();
    drop(t);
    exec.launch(&s1).unwrap();
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
}

pub fn stream_after_a_record_node_that_depends_on_both_nodes(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, done) = record_after_one(dev, &a, &b, true);
    exec.launch(&s1).unwrap();
    s2.wait_event(&done).unwrap();
    kernels::scale(&s2, &a, 0.5).unwrap();
    kernels::fill(&s2, &b, 4.0).unwrap();
    s2.synchronize().unwrap();
    s1.synchronize().unwrap();
}

pub fn stream_after_the_last_record_node_of_a_chain(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, first, second) = records_along_a_chain(dev, &a, &b);
    for _ in 0..2 {
        exec.launch(&s1).unwrap();
        s2.wait_event(&first).unwrap();
        kernels::scale(&s2, &a, 0.5).unwrap();
        s2.wait_event(&second).unwrap();
        kernels::fill(&s2, &b, 4.0).unwrap();
        // The next launch rewrites both: after s2's work.
        let back = Event::new(dev).unwrap();
        back.record(&s2).unwrap();
        s1.wait_event(&back).unwrap();
    }
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
}

/// `wait_in_a_chain` where `go` follows another stream's write of `b`: the wait orders the
/// scale after it.
pub fn node_after_a_wait_node_on_its_chain_uses_the_waited_work(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let go = Event::new(dev).unwrap();
    kernels::fill(&s2, &b, 4.0).unwrap();
    go.record(&s2).unwrap();
    let exec = wait_in_a_chain(dev, &a, &go, &b);
    exec.launch(&s1).unwrap();
    s1.synchronize().unwrap();
}

pub fn nodes_after_a_wait_node_use_the_waited_work(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let a = filled(dev, N, 1.0);
    let go = Event::new(dev).unwrap();
    kernels::fill(&s2, &a, 4.0).unwrap();
    go.record(&s2).unwrap();
    let exec = wait_before_one(dev, &a, &go, true);
    for _ in 0..2 {
        exec.launch(&s1).unwrap();
    }
    s1.synchronize().unwrap();
}

/// GR3: launches of one instantiated graph run one after another, whatever streams they are
/// on, so the second launch's writes follow the first's with no event; a stream that then
/// waits for the second launch is ordered after both.
pub fn one_graph_launched_on_two_streams(dev: &Device) {
    let (s1, s2, s3) = (stream(dev), stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let mut g = Graph::new(dev);
    scale(&mut g, &d, 2.0);
    let exec = g.instantiate().unwrap();
    exec.launch(&s1).unwrap();
    exec.launch(&s2).unwrap();
    s3.wait_event(&s2.record().unwrap()).unwrap();
    kernels::fill(&s3, &d, 3.0).unwrap();
    s3.synchronize().unwrap();
}

pub fn built_graph_launch_then_event_to_other_stream(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let d = filled(dev, N, 1.0);
    let mut g = Graph::new(dev);
    scale(&mut g, &d, 2.0);
    g.instantiate().unwrap().launch(&s1).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::fill(&s2, &d, 3.0).unwrap();
    s2.synchronize().unwrap();
}

pub fn conditional_body_then_event_to_other_stream(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (d, y) = (filled(dev, N, 1.0), filled(dev, N, 0.0));
    conditional_writer(dev, &d).launch(&s1).unwrap();
    s2.wait_event(&s1.record().unwrap()).unwrap();
    kernels::saxpy(&s2, 1.0, &d, &y).unwrap();
    s2.synchronize().unwrap();
}

pub fn graph_memory_used_and_freed_after_waiting_for_the_launch(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (exec, t) = handing_out(dev);
    for _ in 0..2 {
        exec.launch(&s1).unwrap();
        s2.wait_event(&s1.record().unwrap()).unwrap();
        kernels::fill(&s2, &t, 2.0).unwrap();
        s2.free_async(t.clone()).unwrap();
        // The next launch reallocates: it must follow the free.
        s1.wait_event(&s2.record().unwrap()).unwrap();
    }
    s1.synchronize().unwrap();
}

pub fn graph_memory_freed_by_another_graph_in_order(dev: &Device) {
    let s: Stream = stream(dev);
    let (exec, t) = handing_out(dev);
    let mut freer = Graph::new(dev);
    freer.add_free(&[], &t).unwrap();
    let free_exec = freer.instantiate().unwrap();
    for _ in 0..2 {
        exec.launch(&s).unwrap();
        kernels::scale(&s, &t, 2.0).unwrap();
        free_exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
}

/// A race between two nodes of one built graph is reported by what each node runs — for an
/// if node, the body's operation that makes the access — and with the fix a built graph takes
/// (a dependency), not only a capture's.
#[test]
fn unordered_nodes_of_a_built_graph_are_named_by_what_they_run() {
    let dev = Device::host_n(0, 2).unwrap();
    dev.set_sanitize(cueflow::SanitizeMode::Warn);
    let d = DeviceBuffer::<f32>::new(&dev, N).unwrap();
    let mut body = Graph::new(&dev);
    scale(&mut body, &d, 2.0);
    let mut g = Graph::new(&dev);
    scale(&mut g, &d, 3.0); // node 0
    let h = g.condition(1, true);
    g.add_if(&[], &h, &body).unwrap(); // node 1: nothing orders it after node 0
    let _exec = g.instantiate().unwrap();
    let reports = dev.take_sanitizer_reports();
    let r = reports.first().expect("the two nodes race");
    let ops = [&r.earlier.operation, &r.later.operation];
    assert!(
        ops.iter()
            .any(|o| o.starts_with("if node's body: kernel `cf_scale_f32`")),
        "{ops:?}"
    );
    assert!(ops.iter().all(|o| !o.contains("alloc_async")), "{ops:?}");
    assert!(r.fix.contains("Graph::add_dependency"), "{}", r.fix);
}
