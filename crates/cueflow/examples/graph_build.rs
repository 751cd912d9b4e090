//! cueflow's side of `benches/cuda/graph_build.cu` (issue 20), on the device `CUEFLOW_DEVICE`
//! names: a chain of N empty kernels built node by node (GR8) — instantiate time (and building
//! and instantiating together, which is what cueflow's instantiate does for the driver), and
//! replay per node — and a while node of N iterations of one kernel (GR9) against N launches of the
//! same kernel captured as a graph. On the host backend it also prints the same N kernels as
//! plain stream launches, the baseline there. Prints `RESULT graph_build name=.. nodes=N us=..`
//! lines in the raw program's format (each the median of `--reps` after 3 warm-up runs).
//!
//! Run: `cargo run --release -p cueflow --example graph_build [-- --nodes N --reps R]`
//! beside `benches/cuda/run.sh` on the same GPU (`CUEFLOW_DEVICE=cuda:0`).

use std::time::Instant;

use cueflow::{
    kernels, CaptureMode, CompileOptions, Device, DeviceBuffer, Event, Graph, Kernel, KernelArgs,
    LaunchConfig, Result, Stream, CONDITIONAL_CUDA_H,
};

const LOOP_CU: &str = r#"
#include "cueflow_conditional.h"
extern "C" __global__ void gb_loop_step(unsigned int *count, cudaGraphConditionalHandle h,
                                        unsigned int n) {
  if (++count[0] >= n) cudaGraphSetConditional(h, 0);
}
extern "C" __global__ void gb_step(unsigned int *count) { ++count[0]; }
"#;

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    let med = if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    };
    (med, v[0], v[v.len() - 1])
}

fn result(name: &str, nodes: usize, v: Vec<f64>) {
    let (m, lo, hi) = median(v);
    println!("RESULT graph_build name={name} nodes={nodes} us={m:.4} min={lo:.4} max={hi:.4}");
}

/// Device time per unit of `enqueue` on `s`, between two events (microseconds).
fn device_us(
    s: &Stream,
    reps: usize,
    per: usize,
    mut enqueue: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    for r in 0..3 + reps {
        let a = s.record()?;
        enqueue()?;
        let b = s.record()?;
        b.synchronize()?;
        if r >= 3 {
            v.push(Event::elapsed_ms(&a, &b)? as f64 * 1000.0 / per as f64);
        }
    }
    Ok(v)
}

fn main() -> Result<()> {
    let mut nodes = 1000usize;
    let mut reps = 21usize;
    let args: Vec<String> = std::env::args().collect();
    for w in args.windows(2) {
        match w[0].as_str() {
            "--nodes" => nodes = w[1].parse().unwrap_or(nodes),
            "--reps" => reps = w[1].parse().unwrap_or(reps),
            _ => {}
        }
    }
    let dev = Device::from_env()?;
    println!("# cueflow graph_build on {}: {nodes} nodes", dev.spec());
    let s = Stream::builder(&dev).non_blocking().build()?;

    // A chain of N empty kernels, built node by node.
    let build = || -> Result<Graph> {
        let mut chain = Graph::new(&dev);
        let mut prev = Vec::new();
        for _ in 0..nodes {
            let n = chain.add_kernel(
                &prev,
                &kernels::EMPTY,
                LaunchConfig::new(1, 1),
                KernelArgs::new(),
            )?;
            prev = vec![n];
        }
        Ok(chain)
    };
    // Building and instantiating together, as the raw program's `build_instantiate`.
    let mut both = Vec::new();
    for r in 0..3 + reps {
        let t = Instant::now();
        let g = build()?;
        let e = g.instantiate()?;
        if r >= 3 {
            both.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // Both dropped after the clock stops, as the raw program destroys its graph and exec.
        drop((g, e));
    }
    result("build_instantiate", nodes, both);
    let chain = build()?;
    let mut inst = Vec::new();
    let mut exec = None;
    for r in 0..3 + reps {
        drop(exec.take());
        let t = Instant::now();
        exec = Some(chain.instantiate()?);
        if r >= 3 {
            inst.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let exec = exec.expect("instantiated");
    result("instantiate", nodes, inst);
    result(
        "replay",
        nodes,
        device_us(&s, reps, nodes, || exec.launch(&s))?,
    );
    if !dev.spec().to_string().starts_with("cuda") {
        let v = device_us(&s, reps, nodes, || {
            for _ in 0..nodes {
                kernels::empty(&s)?;
            }
            Ok(())
        })?;
        result("stream_launches", nodes, v);
    }

    // A while node of N iterations of one kernel.
    let opts = CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H);
    let step_loop = Kernel::new("gb_loop_step")
        .cuda_source(LOOP_CU, "gb_loop_step")
        .cuda_options(opts.clone())
        .host(|_, a| {
            let n: u32 = a.scalar(2);
            let c = &mut a.tile_mut::<u32>(0)[0];
            *c += 1;
            if *c >= n {
                a.set_condition(1, 0);
            }
        })
        .build();
    let step = Kernel::new("gb_step")
        .cuda_source(LOOP_CU, "gb_step")
        .cuda_options(opts)
        .host(|_, a| a.tile_mut::<u32>(0)[0] += 1)
        .build();
    let count = DeviceBuffer::<u32>::new(&dev, 1)?;
    let mut g = Graph::new(&dev);
    let h = g.condition(1, true);
    let reset = g.add_memset(&[], &count, 0)?;
    let mut body = Graph::new(&dev);
    let args = KernelArgs::new()
        .write(&count)
        .condition(&h)
        .scalar(nodes as u32);
    body.add_kernel(&[], &step_loop, LaunchConfig::new(1, 1), args)?;
    g.add_while(&[reset], &h, &body)?;
    let loop_exec = g.instantiate()?;
    result(
        "while_iter",
        nodes,
        device_us(&s, reps, nodes, || loop_exec.launch(&s))?,
    );
    let mut got = [0u32];
    s.read_pageable(&mut got, &count)?;
    assert_eq!(got[0] as usize, nodes, "the while loop's count");

    // The body captured as its own graph, launched N times.
    let cap = Stream::new(&dev)?;
    cap.begin_capture(CaptureMode::Global)?;
    cap.launch(
        &step,
        LaunchConfig::new(1, 1),
        KernelArgs::new().write(&count),
    )?;
    let body_exec = cap.end_capture()?.instantiate()?;
    let v = device_us(&s, reps, nodes, || {
        for _ in 0..nodes {
            body_exec.launch(&s)?;
        }
        Ok(())
    })?;
    result("body_launches", nodes, v);
    // The same launches timed on the host: what enqueuing one costs the calling thread.
    let mut host = Vec::new();
    for r in 0..3 + reps {
        let t = std::time::Instant::now();
        for _ in 0..nodes {
            body_exec.launch(&s)?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / nodes as f64;
        s.synchronize()?;
        if r >= 3 {
            host.push(us);
        }
    }
    result("body_launches_host", nodes, host);
    Ok(())
}
