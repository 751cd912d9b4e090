//! What the CUDA backend's C7 gate costs a program (`backend/cuda/host_reach_gate.rs`): once a
//! device has instantiated a graph with conditional nodes, every submission that reaches host
//! memory (a kernel on mapped memory here) waits for the last such graph launch and records its
//! stream's reach event. The program measures, in one process, the host's per-call CPU time of
//!
//! - a launch on device memory (never gated: the control row),
//! - a launch on mapped memory, on one stream and spread over four streams,
//!
//! first before the gate exists (`off`), then after a graph with a while loop was instantiated
//! and launched (`on`), and prints each row's two medians and their ratio. It also checks that
//! the mapped-memory kernels wrote what they were given. On the host backend the gate does not
//! exist, so both columns measure the same path (a check of the method's noise).
//!
//! Run: `cargo run --release -p cueflow --example host_reach_gate_cost [batches] [calls]`, with
//! `CUEFLOW_DEVICE=cuda:0` for a GPU.

use cueflow::{
    CompileOptions, Device, DeviceBuffer, Graph, Kernel, KernelArgs, LaunchConfig, PinnedBuffer,
    PinnedFlags, Result, Stream, CONDITIONAL_CUDA_H,
};

const SOURCE: &str = r#"
#include "cueflow_conditional.h"
extern "C" __global__ void gate_put(unsigned int *out, unsigned int v) { out[0] = v; }
extern "C" __global__ void gate_count(unsigned int *count, cudaGraphConditionalHandle h,
                                      unsigned int limit) {
  unsigned int c = ++count[0];
  cudaGraphSetConditional(h, c < limit ? 1u : 0u);
}
"#;

#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::{batches_and_calls, measure};

fn options() -> CompileOptions {
    CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H)
}

fn put() -> Kernel {
    Kernel::new("gate_put")
        .cuda_source(SOURCE, "gate_put")
        .cuda_options(options())
        .host(|_, a| a.tile_mut::<u32>(0)[0] = a.scalar(1))
        .build()
}

fn count() -> Kernel {
    Kernel::new("gate_count")
        .cuda_source(SOURCE, "gate_count")
        .cuda_options(options())
        .host(|_, a| {
            let limit: u32 = a.scalar(2);
            let c = &mut a.tile_mut::<u32>(0)[0];
            *c += 1;
            a.set_condition(1, (*c < limit) as u32);
        })
        .build()
}

/// A result check failed: say so and exit non-zero.
fn wrong(what: String) -> ! {
    eprintln!("host_reach_gate_cost: wrong result: {what}");
    std::process::exit(1)
}

/// The rows, measured once: (name, ns per call).
fn rows(
    dev: &Device,
    streams: &[Stream],
    device: &DeviceBuffer<u32>,
    mapped: &mut [PinnedBuffer<u32>],
    (batches, calls): (usize, usize),
) -> Result<Vec<(&'static str, f64)>> {
    let (k, one) = (put(), LaunchConfig::new(1, 1));
    let s = &streams[0];
    let on_device = measure(dev, batches, calls, |i| {
        s.launch(&k, one, KernelArgs::new().write(device).scalar(i as u32))
    })?;
    let on_mapped = measure(dev, batches, calls, |i| {
        s.launch(
            &k,
            one,
            KernelArgs::new()
                .write_mapped(&mut mapped[0])
                .scalar(i as u32),
        )
    })?;
    let spread = measure(dev, batches, calls, |i| {
        let n = i % streams.len();
        let args = KernelArgs::new()
            .write_mapped(&mut mapped[n])
            .scalar(i as u32);
        streams[n].launch(&k, one, args)
    })?;
    // What the last batch wrote: every stream's last value.
    for (n, m) in mapped.iter().enumerate() {
        let last = (calls - 1 - (calls - 1 - n) % streams.len()) as u32;
        let got = m.read()?[0];
        if got != last {
            wrong(format!("mapped buffer {n}: got {got}, want {last}"));
        }
    }
    Ok(vec![
        ("launch_device_memory", on_device),
        ("launch_mapped_memory", on_mapped),
        ("launch_mapped_4_streams", spread),
    ])
}

fn main() -> Result<()> {
    let (batches, calls) = batches_and_calls();
    let calls = calls.max(4); // Every one of the four streams launches in each batch.
    let dev = Device::from_env()?;
    eprintln!("device: {}", dev.properties().name);
    let streams: Vec<Stream> = (0..4)
        .map(|_| Stream::builder(&dev).non_blocking().build())
        .collect::<Result<_>>()?;
    let device = DeviceBuffer::<u32>::new(&dev, 1)?;
    let mut mapped: Vec<PinnedBuffer<u32>> = (0..streams.len())
        .map(|_| PinnedBuffer::with_flags(&dev, 1, PinnedFlags::default().mapped()))
        .collect::<Result<_>>()?;
    let size = (batches, calls);

    let off = rows(&dev, &streams, &device, &mut mapped, size)?;

    // A graph with a while loop counting to 3: its instantiation turns the gate on.
    let counter = DeviceBuffer::<u32>::new(&dev, 1)?;
    let mut g = Graph::new(&dev);
    let h = g.condition(1, true);
    let zero = g.add_memset(&[], &counter, 0)?;
    let mut body = Graph::new(&dev);
    let step = KernelArgs::new().write(&counter).condition(&h).scalar(3u32);
    body.add_kernel(&[], &count(), LaunchConfig::new(1, 1), step)?;
    g.add_while(&[zero], &h, &body)?;
    let exec = g.instantiate()?;
    exec.launch(&streams[1])?;
    dev.synchronize()?;
    let counted = counter.to_vec()?[0];
    if counted != 3 {
        wrong(format!("the loop counted to {counted}, want 3"));
    }

    let on = rows(&dev, &streams, &device, &mut mapped, size)?;
    println!("row off_ns on_ns on/off");
    for ((name, a), (_, b)) in off.iter().zip(&on) {
        println!("{name} {a:.1} {b:.1} {:.3}", b / a);
    }
    Ok(())
}
