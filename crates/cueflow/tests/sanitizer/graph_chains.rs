//! Graph programs over chains of nodes and event record nodes: which record node's event
//! orders which nodes, launch after launch (`core::graphs::event_sets`, `chains`). A launch's
//! chains go on from the previous launch's positions, so an off-by-one there would let an
//! event of one launch order the next one's nodes.

use cueflow::{kernels, Device, DeviceBuffer, Event, Graph, GraphNodeId};

use crate::at;
use crate::graphs::{records_along_a_chain, scale_after};
use crate::support::*;

type Races = Vec<(u32, u32)>;

/// ka and kb on two chains; r0 after both, r1 after ka, r2 after kb: ka's and kb's record
/// sets ({r0, r1}, {r0, r2}) have the same count and first record, only the hash differs.
fn same_count_and_first(
    dev: &Device,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
) -> (cueflow::GraphExec, Event, Event, Event) {
    let (e0, e1, e2) = (
        Event::new(dev).unwrap(),
        Event::new(dev).unwrap(),
        Event::new(dev).unwrap(),
    );
    let mut g = Graph::new(dev);
    let ka = scale_after(&mut g, &[], a, 2.0);
    let kb = scale_after(&mut g, &[], b, 3.0);
    g.add_event_record(&[ka, kb], &e0).unwrap();
    g.add_event_record(&[ka], &e1).unwrap();
    g.add_event_record(&[kb], &e2).unwrap();
    (g.instantiate().unwrap(), e0, e1, e2)
}

pub fn record_sets_of_one_size_and_first_record_are_told_apart(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, _e0, e1, _e2) = same_count_and_first(dev, &a, &b);
    let l = at!(exec.launch(&s1));
    s2.wait_event(&e1).unwrap();
    kernels::scale(&s2, &a, 0.5).unwrap();
    let w = at!(kernels::fill(&s2, &b, 4.0));
    vec![(l, w)]
}

pub fn record_sets_of_one_size_and_first_record_each_ordered(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, _e0, e1, e2) = same_count_and_first(dev, &a, &b);
    exec.launch(&s1).unwrap();
    s2.wait_event(&e1).unwrap();
    kernels::scale(&s2, &a, 0.5).unwrap();
    s2.wait_event(&e2).unwrap();
    kernels::fill(&s2, &b, 4.0).unwrap();
    s2.synchronize().unwrap();
}

/// A record event of launch 1 (covering its whole chain) must not cover launch 2's nodes.
pub fn event_after_a_launch_does_not_order_the_next_launch(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, _first, _second) = records_along_a_chain(dev, &a, &b);
    exec.launch(&s1).unwrap();
    let after1 = Event::new(dev).unwrap();
    after1.record(&s1).unwrap();
    s2.wait_event(&after1).unwrap(); // s2 after all of launch 1
    let l = at!(exec.launch(&s1));
    let w = at!(kernels::fill(&s2, &a, 4.0)); // races with launch 2's first scale
    vec![(l, w)]
}

/// As above, through launch 1's last record node (position len - 1 of the chain).
pub fn record_node_of_a_launch_does_not_order_the_next_launch(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b) = (filled(dev, N, 1.0), filled(dev, N, 1.0));
    let (exec, _first, second) = records_along_a_chain(dev, &a, &b);
    exec.launch(&s1).unwrap();
    s2.wait_event(&second).unwrap();
    let l = at!(exec.launch(&s1));
    let w = at!(kernels::fill(&s2, &a, 4.0));
    vec![(l, w)]
}

/// A fan of three branches joined before one record node, and a fourth branch beside it.
fn fan_before_a_record(
    dev: &Device,
    bufs: &[DeviceBuffer<f32>],
    beside: &DeviceBuffer<f32>,
) -> (cueflow::GraphExec, Event) {
    let done = Event::new(dev).unwrap();
    let mut g = Graph::new(dev);
    let ks: Vec<GraphNodeId> = bufs
        .iter()
        .map(|b| scale_after(&mut g, &[], b, 2.0))
        .collect();
    let ks2: Vec<GraphNodeId> = ks
        .iter()
        .zip(bufs)
        .map(|(&k, b)| scale_after(&mut g, &[k], b, 2.0))
        .collect();
    g.add_event_record(&ks2, &done).unwrap();
    scale_after(&mut g, &[], beside, 2.0);
    (g.instantiate().unwrap(), done)
}

pub fn fan_joined_before_a_record_node_ordered(dev: &Device) {
    let (s1, s2) = (stream(dev), stream(dev));
    let bufs: Vec<_> = (0..3).map(|_| filled(dev, N, 1.0)).collect();
    let beside = filled(dev, N, 1.0);
    let (exec, done) = fan_before_a_record(dev, &bufs, &beside);
    for _ in 0..2 {
        exec.launch(&s1).unwrap();
        s2.wait_event(&done).unwrap();
        for b in &bufs {
            kernels::fill(&s2, b, 4.0).unwrap();
        }
        let back = Event::new(dev).unwrap();
        back.record(&s2).unwrap();
        s1.wait_event(&back).unwrap();
    }
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
}

pub fn node_beside_a_fan_joined_before_a_record_node_races(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let bufs: Vec<_> = (0..3).map(|_| filled(dev, N, 1.0)).collect();
    let beside = filled(dev, N, 1.0);
    let (exec, done) = fan_before_a_record(dev, &bufs, &beside);
    let l = at!(exec.launch(&s1));
    s2.wait_event(&done).unwrap();
    let w = at!(kernels::fill(&s2, &beside, 4.0));
    vec![(l, w)]
}

/// Chain 0 = [ka, kb] (length 2); r1 after ka on a chain of its own; y on a third chain and
/// r after [y, kb] on y's chain: r's last position upstream on chain 0 is the chain's length.
fn record_below_the_end_of_a_chain(
    dev: &Device,
    a: &DeviceBuffer<f32>,
    b: &DeviceBuffer<f32>,
    c: &DeviceBuffer<f32>,
) -> (cueflow::GraphExec, Event) {
    let (e1, e) = (Event::new(dev).unwrap(), Event::new(dev).unwrap());
    let mut g = Graph::new(dev);
    let ka = scale_after(&mut g, &[], a, 2.0);
    let kb = scale_after(&mut g, &[ka], b, 3.0);
    g.add_event_record(&[ka], &e1).unwrap();
    let y = scale_after(&mut g, &[], c, 2.0);
    g.add_event_record(&[y, kb], &e).unwrap();
    (g.instantiate().unwrap(), e)
}

pub fn record_node_below_a_chains_end_does_not_order_the_next_launch(dev: &Device) -> Races {
    let (s1, s2) = (stream(dev), stream(dev));
    let (a, b, c) = (
        filled(dev, N, 1.0),
        filled(dev, N, 1.0),
        filled(dev, N, 1.0),
    );
    let (exec, e) = record_below_the_end_of_a_chain(dev, &a, &b, &c);
    exec.launch(&s1).unwrap();
    s2.wait_event(&e).unwrap(); // after all of launch 1
    let l = at!(exec.launch(&s1));
    let w = at!(kernels::fill(&s2, &a, 4.0)); // races with launch 2's ka
    vec![(l, w)]
}
