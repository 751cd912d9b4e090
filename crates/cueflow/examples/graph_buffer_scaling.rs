//! What building, instantiating, launching and capturing a graph costs a node as the graph
//! grows over as many distinct buffers as it has nodes: a chain of `N` memsets, each of its own
//! 64-byte buffer, built with `Graph::add_memset` and captured from `Stream::memset`. Every cost
//! a node should stay flat as `N` grows; a cost that grows with `N` is quadratic in the buffers
//! (as instantiation's footprint once was: 10,000 instructions a node at 4,000 buffers).
//!
//! ```text
//! cargo run --release -p cueflow --example graph_buffer_scaling [-- N...]   (1000 2000 4000 8000)
//! RESULT graph_buffer_scaling nodes=N build_us=.. instantiate_us=.. launch_us=.. relaunch_us=..
//!   capture_us=.. instantiate_captured_us=..
//! ```
//! (microseconds a node; `launch_us` is the first launch and the synchronize after it,
//! `relaunch_us` the second, after which every buffer's last access is the graph's). With
//! `CUEFLOW_SANITIZE=error` the race sanitizer's part is in it too.

use std::time::Instant;

use cueflow::{CaptureMode, Device, DeviceBuffer, Graph, Result, Stream};

/// Microseconds a node that `f` takes for `n` nodes, and what it returns.
fn per_node<T>(n: usize, f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let t = Instant::now();
    let v = f()?;
    Ok((t.elapsed().as_secs_f64() * 1e6 / n as f64, v))
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
    for n in sizes {
        let bufs: Vec<DeviceBuffer<u8>> = (0..n)
            .map(|_| DeviceBuffer::new(&dev, 64))
            .collect::<Result<_>>()?;
        let (build, g) = per_node(n, || {
            let mut g = Graph::new(&dev);
            let mut prev = Vec::new();
            for b in &bufs {
                prev = vec![g.add_memset(&prev, b, 0)?];
            }
            Ok(g)
        })?;
        let (instantiate, exec) = per_node(n, || g.instantiate())?;
        let launch_and_sync = || {
            exec.launch(&s)?;
            s.synchronize()
        };
        let (launch, ()) = per_node(n, launch_and_sync)?;
        // Again, now that every buffer's last access is the first launch's.
        let (relaunch, ()) = per_node(n, launch_and_sync)?;
        let (capture, captured) = per_node(n, || {
            s.begin_capture(CaptureMode::ThreadLocal)?;
            for b in &bufs {
                s.memset(b, 0)?;
            }
            s.end_capture()
        })?;
        let (instantiate_captured, _exec) = per_node(n, || captured.instantiate())?;
        println!(
            "RESULT graph_buffer_scaling nodes={n} build_us={build:.2} \
             instantiate_us={instantiate:.2} launch_us={launch:.2} relaunch_us={relaunch:.2} capture_us={capture:.2} \
             instantiate_captured_us={instantiate_captured:.2}"
        );
    }
    Ok(())
}
