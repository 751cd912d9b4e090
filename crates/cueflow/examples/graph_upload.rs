//! What `GraphExec::upload` (GR3, `cudaGraphUpload`) takes off a graph's first launch: the
//! host time of a first launch and its synchronize, for a freshly instantiated graph of `nodes`
//! empty kernels on `width` parallel chains, without and with an upload on another stream
//! (synchronized) before it; and the upload's own host time. Alternating, `rounds` rounds;
//! medians in µs.
//!
//! ```text
//! CUEFLOW_DEVICE=cuda:0 cargo run --release -p cueflow --example graph_upload -- [nodes] [width] [rounds]
//! ```

use std::time::Instant;

use cueflow::{kernels, CaptureMode, Device, Event, EventFlags, Graph, Result, Stream};

/// `width` chains of `nodes / width` empty kernels, forked from and joined into one stream.
fn chains(dev: &Device, nodes: usize, width: usize) -> Result<Graph> {
    let s: Vec<Stream> = (0..width)
        .map(|_| Stream::new(dev))
        .collect::<Result<_>>()?;
    let quiet = EventFlags {
        timing: false,
        ..EventFlags::default()
    };
    let fork = Event::with_flags(dev, quiet)?;
    s[0].begin_capture(CaptureMode::Global)?;
    s[0].record_event(&fork)?;
    for (i, si) in s.iter().enumerate() {
        if i > 0 {
            si.wait_event(&fork)?;
        }
        for _ in 0..nodes / width {
            kernels::empty(si)?;
        }
    }
    for si in &s[1..] {
        let join = Event::with_flags(dev, quiet)?;
        si.record_event(&join)?;
        s[0].wait_event(&join)?;
    }
    s[0].end_capture()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let nodes = args.next().flatten().unwrap_or(1000);
    let width = args.next().flatten().unwrap_or(4).max(1);
    let rounds = args.next().flatten().unwrap_or(9);
    let dev = Device::from_env()?;
    let (s, side) = (Stream::new(&dev)?, Stream::new(&dev)?);
    let graph = chains(&dev, nodes, width)?;
    let (mut plain, mut uploaded, mut upload) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let exec = graph.instantiate()?;
        let t = Instant::now();
        exec.launch(&s)?;
        s.synchronize()?;
        plain.push(t.elapsed().as_secs_f64() * 1e6);
        drop(exec);

        let exec = graph.instantiate()?;
        let t = Instant::now();
        exec.upload(&side)?;
        upload.push(t.elapsed().as_secs_f64() * 1e6);
        side.synchronize()?;
        let t = Instant::now();
        exec.launch(&s)?;
        s.synchronize()?;
        uploaded.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (p, u, up) = (median(plain), median(uploaded), median(upload));
    println!(
        "RESULT graph_upload nodes={nodes} width={width} first_launch_us={p:.1} \
         first_launch_after_upload_us={u:.1} upload_call_us={up:.1} ratio={:.3}",
        u / p
    );
    Ok(())
}
