//! Graphs of issue 20 in the corpus: explicit graphs (GR8), conditional bodies (GR9) and graph
//! memory freed outside the graph (GR10) — racy programs (each returns the `(earlier, later)`
//! lines that race) and their correctly ordered twins.

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Graph, KernelArgs, LaunchConfig, Stream,
};

use crate::at;
use crate::support::*;

type Races = Vec<(u32, u32)>;

fn scale(g: &mut Graph, d: &DeviceBuffer<f32>, f: f32) {
    let args = KernelArgs::new().write(d).scalar(f).scalar(d.len() as u64);
    let cfg = LaunchConfig::for_elements(d.len(), kernels::BLOCK);
    g.add_kernel(&[], &kernels::SCALE_F32, cfg, args).unwrap();
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

/// A captured graph that allocates `N` floats, fills them and hands them out (GR10).
fn handing_out(dev: &Device) -> (cueflow::GraphExec, DeviceBuffer<f32>) {
    let cap = stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    let t = cap.alloc_async::<f32>(N).unwrap();
    kernels::fill(&cap, &t, 1.0).unwrap();
    (cap.end_capture().unwrap().instantiate().unwrap(), t)
}

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

// --- correct -----------------------------------------------------------------------------

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
