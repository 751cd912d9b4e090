//! Capture → instantiate → launch → update → launch: a graph of a copy, two kernels and a
//! stream-ordered temporary, replayed many times, then updated in place to work on another
//! buffer with another factor — no re-instantiation.
//!
//! Run: `cargo run --release -p cueflow --example 05_graph` (`CUEFLOW_DEVICE=cuda:0` for a GPU,
//! where the graph is a native `CUgraphExec` launched with one `cuGraphLaunch`).

use cueflow::{kernels, CaptureMode, Device, DeviceBuffer, Graph, Result, Stream};

const N: usize = 1 << 20;

/// One step of the workload: `y = x * factor + 1` through a temporary, as a graph.
fn capture(s: &Stream, x: &DeviceBuffer<f32>, y: &DeviceBuffer<f32>, factor: f32) -> Result<Graph> {
    s.begin_capture(CaptureMode::Global)?;
    let tmp = s.alloc_async::<f32>(x.len())?; // an allocation node (GR7)
    s.copy_d2d(&tmp, x)?;
    kernels::scale(s, &tmp, factor)?;
    kernels::fill(s, y, 1.0)?;
    kernels::saxpy(s, 1.0, &tmp, y)?;
    s.free_async(tmp)?; // a free node
    s.end_capture()
}

fn check(s: &Stream, y: &DeviceBuffer<f32>, want: f32) -> Result<()> {
    let mut out = vec![0.0f32; y.len()];
    s.read_pageable(&mut out, y)?;
    assert!(
        out.iter().all(|&v| v == want),
        "got {}, want {want}",
        out[0]
    );
    Ok(())
}

fn main() -> Result<()> {
    let dev = Device::from_env()?;
    let s = Stream::builder(&dev).non_blocking().build()?;
    let (x1, y1) = (
        DeviceBuffer::<f32>::new(&dev, N)?,
        DeviceBuffer::<f32>::new(&dev, N)?,
    );
    let (x2, y2) = (
        DeviceBuffer::<f32>::new(&dev, N)?,
        DeviceBuffer::<f32>::new(&dev, N)?,
    );
    s.write_pageable(&x1, &vec![2.0f32; N])?;
    s.write_pageable(&x2, &vec![5.0f32; N])?;

    let graph = capture(&s, &x1, &y1, 3.0)?;
    println!("captured {} nodes:", graph.node_count());
    for n in graph.nodes() {
        println!("  {:2}  {:<24} after {:?}", n.index, n.what, n.deps);
    }
    let exec = graph.instantiate()?;
    for _ in 0..100 {
        exec.launch(&s)?;
    }
    check(&s, &y1, 7.0)?; // 2 * 3 + 1
    println!("100 launches: y1 = 7 everywhere");

    // Same shape, other buffers of the same size and another factor: updated in place (GR6).
    exec.update(&capture(&s, &x2, &y2, 4.0)?)?;
    exec.launch(&s)?;
    check(&s, &y2, 21.0)?; // 5 * 4 + 1
    println!("updated in place, launched: y2 = 21 everywhere");

    // A different shape is refused, and the instantiation is unchanged.
    let other = {
        s.begin_capture(CaptureMode::Global)?;
        kernels::fill(&s, &y1, 0.0)?;
        s.end_capture()?
    };
    match exec.update(&other) {
        Err(e) => println!("refused: {e}"),
        Ok(()) => panic!("a shape change was accepted"),
    }
    exec.launch(&s)?;
    check(&s, &y2, 21.0)?;
    println!("still the updated graph: y2 = 21");
    Ok(())
}
