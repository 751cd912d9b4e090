//! What building, instantiating, launching and capturing a graph costs a node as the graph
//! grows, each node over a buffer of its own (64 bytes), in two shapes:
//!
//! - `chain`: `N` memsets one after the other;
//! - `fan`: one memset, `N - 2` memsets after it side by side, one memset after all of them
//!   (a join of thousands of branches);
//! - `records`: the chain, each memset followed by an event record node of an event of its
//!   own (`N` memsets and `N` record nodes, every record downstream of the memsets before it);
//! - `waits`: the chain, each memset after an event wait node of an event of its own (every
//!   wait upstream of the memsets after it);
//! - `stages`: fork/join stages (a memset, four side by side after it, the next stage's first
//!   after all four), one event record node at the end;
//! - `wide_chain`: a tenth of the memsets side by side, one after all of them, the rest a
//!   chain after it, one event record node at the end.
//!
//! Built with `Graph::add_memset` and captured from `Stream::memset` (the capture is the
//! chain; a fan captured is the same graph). Every cost a node should stay flat as `N` grows;
//! one that grows with `N` is quadratic somewhere — as instantiation's footprint once was in
//! the buffers (10,000 instructions a node at 4,000), a launch's lookup of their access maps
//! (26,000 at 8,000), the ordering check's join of a fan's branches, and the host backend's
//! queue of compute jobs, which moved every queued job at each take.
//!
//! ```text
//! cargo run --release -p cueflow --example graph_buffer_scaling [-- N...]   (1000 2000 4000 8000)
//! RESULT graph_buffer_scaling shape=S nodes=N build_us=.. instantiate_us=.. launch_us=..
//!   relaunch_us=.. [capture_us=.. instantiate_captured_us=..]
//! ```
//! `SHAPES=stages,waits` runs only those shapes.
//! (microseconds a node; `launch_us` is the first launch and the synchronize after it,
//! `relaunch_us` the second, after which every buffer's last access is the graph's). With
//! `CUEFLOW_SANITIZE=error` the race sanitizer's part is in it too.

use std::time::Instant;

use cueflow::{CaptureMode, Device, DeviceBuffer, Event, Graph, GraphNodeId, Result, Stream};

/// Microseconds a node that `f` takes for `n` nodes, and what it returns.
fn per_node<T>(n: usize, f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let t = Instant::now();
    let v = f()?;
    Ok((t.elapsed().as_secs_f64() * 1e6 / n as f64, v))
}

/// The shapes of the graph.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Chain,
    Fan,
    Records,
    Waits,
    Stages,
    WideChain,
}

/// A memset of each buffer: a chain, a fan (the first, then the middle ones after it, then
/// the last after all of them), or a chain with a record of one of `events` after each memset
/// or a wait on one before it.
fn build(dev: &Device, bufs: &[DeviceBuffer<u8>], shape: Shape, events: &[Event]) -> Result<Graph> {
    let mut g = Graph::new(dev);
    if let Shape::Stages | Shape::WideChain = shape {
        let last = stages_or_wide_chain(&mut g, bufs, shape == Shape::Stages)?;
        g.add_event_record(&[last], &events[0])?;
    } else if shape == Shape::Fan {
        let (first, rest) = bufs.split_first().expect("at least three buffers");
        let (last, middle) = rest.split_last().expect("at least three buffers");
        let root = g.add_memset(&[], first, 1)?;
        let branches: Vec<GraphNodeId> = middle
            .iter()
            .map(|b| g.add_memset(&[root], b, 0))
            .collect::<Result<_>>()?;
        g.add_memset(&branches, last, 2)?;
    } else {
        let mut prev = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            if shape == Shape::Waits {
                prev = vec![g.add_event_wait(&prev, &events[i])?];
            }
            prev = vec![g.add_memset(&prev, b, 0)?];
            if shape == Shape::Records {
                prev = vec![g.add_event_record(&prev, &events[i])?];
            }
        }
    }
    Ok(g)
}

/// `stages` or `wide_chain` (see the module doc) without the record node; returns the last
/// node.
fn stages_or_wide_chain(
    g: &mut Graph,
    bufs: &[DeviceBuffer<u8>],
    stages: bool,
) -> Result<GraphNodeId> {
    let width = if stages { 4 } else { bufs.len() / 10 };
    let mut prev: Vec<GraphNodeId> = Vec::new();
    let mut i = 0;
    while i < bufs.len() {
        let side_by_side = (stages || i == 0) && i + width < bufs.len();
        if side_by_side {
            let root = prev.clone();
            prev = (0..width)
                .map(|k| g.add_memset(&root, &bufs[i + k], 0))
                .collect::<Result<_>>()?;
            i += width;
        } else {
            prev = vec![g.add_memset(&prev, &bufs[i], 0)?];
            i += 1;
        }
    }
    Ok(prev[0])
}

fn main() -> Result<()> {
    let dev = Device::from_env()?;
    let s = Stream::new(&dev)?;
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![1000, 2000, 4000, 8000];
    }
    for n in sizes.into_iter().map(|n| n.max(3)) {
        let bufs: Vec<DeviceBuffer<u8>> = (0..n)
            .map(|_| DeviceBuffer::new(&dev, 64))
            .collect::<Result<_>>()?;
        let events: Vec<Event> = (0..n).map(|_| Event::new(&dev)).collect::<Result<_>>()?;
        for e in &events {
            e.record(&s)?; // What the waits wait for (a wait on a never-recorded event is linted).
        }
        let shapes = [
            ("chain", Shape::Chain),
            ("fan", Shape::Fan),
            ("records", Shape::Records),
            ("waits", Shape::Waits),
            ("stages", Shape::Stages),
            ("wide_chain", Shape::WideChain),
        ];
        let only = std::env::var("SHAPES").ok();
        let wanted = |name: &str| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == name))
        };
        for (name, shape) in shapes.into_iter().filter(|(name, _)| wanted(name)) {
            let (build, g) = per_node(n, || build(&dev, &bufs, shape, &events))?;
            let (instantiate, exec) = per_node(n, || g.instantiate())?;
            let launch_and_sync = || {
                exec.launch(&s)?;
                s.synchronize()
            };
            let (launch, ()) = per_node(n, launch_and_sync)?;
            // Again, now that every buffer's last access is the first launch's.
            let (relaunch, ()) = per_node(n, launch_and_sync)?;
            let mut line = format!(
                "RESULT graph_buffer_scaling shape={name} nodes={n} build_us={build:.2} \
                 instantiate_us={instantiate:.2} launch_us={launch:.2} relaunch_us={relaunch:.2}"
            );
            if shape == Shape::Chain {
                let (capture, captured) = per_node(n, || {
                    s.begin_capture(CaptureMode::ThreadLocal)?;
                    for b in &bufs {
                        s.memset(b, 0)?;
                    }
                    s.end_capture()
                })?;
                let (instantiate_captured, _exec) = per_node(n, || captured.instantiate())?;
                line += &format!(
                    " capture_us={capture:.2} instantiate_captured_us={instantiate_captured:.2}"
                );
            }
            println!("{line}");
        }
    }
    Ok(())
}
