//! Building and instantiating graphs on CUDA against the raw driver calls in the same process,
//! so that both sides share the process's state: the driver's instantiation time varies by up
//! to 1.5 × from one process to the next on the same machine (`graph_build` against
//! `benches/cuda/graph_build.cu`, run after run), which buries a 10 % difference.
//!
//! Rows, each a chain of `NODES` empty kernels (one block of one thread):
//!
//! * `built` — raw `cuGraphCreate`, `NODES` × `cuGraphAddKernelNode` each after the last, and
//!   `cuGraphInstantiateWithFlags`, against `Graph::new`, `NODES` × `Graph::add_kernel` and
//!   `Graph::instantiate` (cueflow builds the driver's graph there);
//! * `captured` — raw `cuStreamBeginCapture`, `NODES` launches, `cuStreamEndCapture` and the
//!   instantiation, against `Stream::begin_capture`, `NODES` × `kernels::empty`,
//!   `Stream::end_capture` and `Graph::instantiate`.
//!
//! Each round times one of each side, the side that goes first alternating; what each side
//! made is destroyed after its timing (the raw graph and exec, cueflow's `Graph` and
//! `GraphExec`). Prints, per row, the medians of both sides and of the per-round ratios:
//!
//! ```text
//! RESULT instantiate_profile row=built nodes=1000 raw_us=.. cueflow_us=.. cueflow/raw=.. (rounds ..)
//! ```
//!
//! Run: `cargo run --release -p cueflow --example instantiate_profile [-- ROUNDS NODES]`
//! (21, 1000). Needs CUDA device 0 and NVRTC; without them it says so and exits 0.

use std::time::Instant;

use cueflow::cudarc::driver::{sys, CudaContext};
use cueflow::pipeline::median;
use cueflow::{kernels, CaptureMode, Device, Graph, GraphExec, KernelArgs, LaunchConfig, Stream};

#[path = "support/raw_cuda.rs"]
#[allow(dead_code)] // its per-call timer serves the other examples
mod raw_cuda;

use raw_cuda::{cu, launch_empty, non_blocking_stream, Res};

const EMPTY: &str = "extern \"C\" __global__ void cf_empty() {}";

/// A raw graph and its exec, destroyed on drop.
struct RawGraph(sys::CUgraph, sys::CUgraphExec);

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: both came from the driver in this process and are destroyed once, here; no
        // launch of the exec is in flight (it was never launched).
        unsafe {
            sys::cuGraphExecDestroy(self.1);
            sys::cuGraphDestroy(self.0);
        }
    }
}

/// Instantiate `g` (the raw graph just made) into a [`RawGraph`].
fn instantiate(g: sys::CUgraph) -> Res<RawGraph> {
    let mut exec = std::ptr::null_mut();
    // SAFETY: `g` is a complete graph of the current context; the out-pointer is valid.
    let r = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g, 0) };
    cu(r, "cuGraphInstantiateWithFlags")?;
    Ok(RawGraph(g, exec))
}

/// The raw side: the empty kernel and a non-blocking stream.
struct Raw {
    func: sys::CUfunction,
    stream: sys::CUstream,
    _module: std::sync::Arc<cueflow::cudarc::driver::CudaModule>,
}

impl Raw {
    fn built(&self, nodes: usize) -> Res<RawGraph> {
        let mut g = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        cu(unsafe { sys::cuGraphCreate(&mut g, 0) }, "cuGraphCreate")?;
        let p = sys::CUDA_KERNEL_NODE_PARAMS {
            func: self.func,
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 1,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let mut prev: Option<sys::CUgraphNode> = None;
        for _ in 0..nodes {
            let mut n = std::ptr::null_mut();
            let deps = prev.as_slice();
            // SAFETY: `deps` are nodes of `g`; the kernel takes no parameters; out-pointer valid.
            let r =
                unsafe { sys::cuGraphAddKernelNode_v2(&mut n, g, deps.as_ptr(), deps.len(), &p) };
            cu(r, "cuGraphAddKernelNode")?;
            prev = Some(n);
        }
        instantiate(g)
    }

    fn captured(&self, nodes: usize) -> Res<RawGraph> {
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: the stream is live and not capturing.
        let r = unsafe { sys::cuStreamBeginCapture_v2(self.stream, mode) };
        cu(r, "cuStreamBeginCapture")?;
        for _ in 0..nodes {
            launch_empty(self.func, self.stream)?;
        }
        let mut g = std::ptr::null_mut();
        // SAFETY: the capture began on this stream, on this thread; out-pointer valid.
        let r = unsafe { sys::cuStreamEndCapture(self.stream, &mut g) };
        cu(r, "cuStreamEndCapture")?;
        instantiate(g)
    }
}

fn cueflow_built(dev: &Device, nodes: usize) -> Res<(Graph, GraphExec)> {
    let mut g = Graph::new(dev);
    let mut prev = Vec::new();
    for _ in 0..nodes {
        let one = LaunchConfig::new(1, 1);
        prev = vec![g.add_kernel(&prev, &kernels::EMPTY, one, KernelArgs::new())?];
    }
    let exec = g.instantiate()?;
    Ok((g, exec))
}

fn cueflow_captured(s: &Stream, nodes: usize) -> Res<(Graph, GraphExec)> {
    s.begin_capture(CaptureMode::Relaxed)?;
    for _ in 0..nodes {
        kernels::empty(s)?;
    }
    let g = s.end_capture()?;
    let exec = g.instantiate()?;
    Ok((g, exec))
}

/// Microseconds `make` took; what it made is dropped after the clock stops.
fn timed<T>(make: impl FnOnce() -> Res<T>) -> Res<f64> {
    let t = Instant::now();
    let made = make()?;
    let us = t.elapsed().as_secs_f64() * 1e6;
    drop(made);
    Ok(us)
}

fn main() -> Res<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (rounds, nodes) = (*args.first().unwrap_or(&21), *args.get(1).unwrap_or(&1000));
    if let Some(why) = raw_cuda::skip_reason("instantiate_profile") {
        println!("{why}");
        return Ok(());
    }
    let ctx = CudaContext::new(0)?;
    ctx.bind_to_thread()?;
    let module = ctx.load_module(cueflow::cudarc::nvrtc::compile_ptx(EMPTY)?)?;
    let raw = Raw {
        func: module.load_function("cf_empty")?.cu_function(),
        stream: non_blocking_stream()?,
        _module: module,
    };
    let dev = Device::cuda(0)?;
    let s = Stream::builder(&dev).non_blocking().build()?;
    type Side<'a> = Box<dyn Fn() -> Res<f64> + 'a>;
    let rows: [(&str, Side, Side); 2] = [
        (
            "built",
            Box::new(|| timed(|| raw.built(nodes))),
            Box::new(|| timed(|| cueflow_built(&dev, nodes))),
        ),
        (
            "captured",
            Box::new(|| timed(|| raw.captured(nodes))),
            Box::new(|| timed(|| cueflow_captured(&s, nodes))),
        ),
    ];
    for (name, raw_side, cueflow_side) in &rows {
        // Warm both up (module loads, the driver's first graph).
        for _ in 0..3 {
            raw_side()?;
            cueflow_side()?;
        }
        let (mut r, mut c, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (rt, ct) = if round % 2 == 0 {
                let rt = raw_side()?;
                (rt, cueflow_side()?)
            } else {
                let ct = cueflow_side()?;
                (raw_side()?, ct)
            };
            r.push(rt);
            c.push(ct);
            ratios.push(ct / rt);
        }
        let (lo, hi) = ratios.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
        println!(
            "RESULT instantiate_profile row={name} nodes={nodes} raw_us={:.1} cueflow_us={:.1} \
             cueflow/raw={:.3} (rounds {lo:.3}..{hi:.3})",
            median(r),
            median(c),
            median(ratios)
        );
    }
    Ok(())
}
