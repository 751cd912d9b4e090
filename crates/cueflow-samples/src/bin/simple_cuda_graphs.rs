//! Port of NVIDIA's `simpleCudaGraphs`: a two-pass vector sum as a graph, built twice — node by
//! node (copy, memsets, two kernels, a copy back and a host node, with explicit dependencies)
//! and by capturing three streams forked and joined with events — each instantiated, cloned,
//! and launched three times from the original and three from the clone. The host node of every
//! launch reports the sum and resets it, as the original's callback does; the port checks each
//! reported sum against the host's, and the node counts.

use std::sync::Arc;

use cueflow::{
    CaptureMode, Device, DeviceBuffer, Event, Graph, Kernel, KernelArgs, LaunchConfig,
    PageableBuffer, Stream,
};
use cueflow_samples::{main_with, on_gpu, Checks};

const THREADS: u32 = 512;
const LAUNCHES: usize = 3;
const SOURCE: &str = include_str!("../../kernels/simple_cuda_graphs.cu");

/// The partial sums of `sum_partials` as the GPU groups them: element `i` goes to the block
/// whose grid-strided share holds it. One host block writes them all (its tile covers them).
fn partials(input: &[f32], blocks: usize, threads: usize, n_partials: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; blocks];
    let stride = blocks * threads;
    for (i, &x) in input.iter().enumerate() {
        out[(i % stride) / threads] += x as f64;
    }
    out.truncate(n_partials);
    out
}

fn kernels() -> (Kernel, Kernel) {
    let pass1 = Kernel::new("sum_partials")
        .cuda_source(SOURCE, "sum_partials")
        .host(|ctx, a| {
            if ctx.linear_block != 0 {
                return;
            }
            let (n_partials, blocks) = (a.scalar::<u64>(3) as usize, ctx.grid_dim.x as usize);
            let sums = partials(a.input::<f32>(0), blocks, ctx.threads as usize, n_partials);
            let tile = a.tile_mut::<f64>(1);
            tile[..sums.len()].copy_from_slice(&sums);
        })
        .build();
    let pass2 = Kernel::new("sum_final")
        .cuda_source(SOURCE, "sum_final")
        .host(|ctx, a| {
            if ctx.linear_block == 0 {
                let n = a.scalar::<u64>(2) as usize;
                a.tile_mut::<f64>(1)[0] = a.input::<f64>(0)[..n].iter().sum();
            }
        })
        .build();
    (pass1, pass2)
}

/// What the sample's buffers and kernels are.
struct Setup {
    /// The input, in pageable memory as the original's (`malloc`).
    input_h: PageableBuffer<f32>,
    input_d: DeviceBuffer<f32>,
    partials_d: DeviceBuffer<f64>,
    result_d: DeviceBuffer<f64>,
    blocks: u32,
    pass1: Kernel,
    pass2: Kernel,
}

impl Setup {
    fn pass1_args(&self) -> (LaunchConfig, KernelArgs) {
        (
            LaunchConfig::new(self.blocks, THREADS),
            KernelArgs::new()
                .read(&self.input_d)
                .write(&self.partials_d)
                .scalar(self.input_d.len() as u64)
                .scalar(self.blocks as u64),
        )
    }

    fn pass2_args(&self) -> (LaunchConfig, KernelArgs) {
        (
            LaunchConfig::new(1, THREADS),
            KernelArgs::new()
                .read(&self.partials_d)
                .write(&self.result_d)
                .scalar(self.blocks as u64),
        )
    }
}

/// The host node of the manual graph: [`report`] at every launch.
fn add_report(
    g: &mut Graph,
    deps: &[cueflow::GraphNodeId],
    result_h: &PageableBuffer<f64>,
    name: &'static str,
    seen: &Arc<std::sync::Mutex<Vec<f64>>>,
) -> cueflow::Result<cueflow::GraphNodeId> {
    let seen = seen.clone();
    g.add_host_task(deps, name)
        .writes(result_h)
        .run(move |io| report(name, io, &seen))
}

/// The original's host callback: print the sum, and reset it for the next launch.
fn report(name: &str, io: cueflow::HostIo<'_>, seen: &std::sync::Mutex<Vec<f64>>) {
    let r = io.write::<f64>(0);
    println!("[{name}] Host callback final reduced sum = {:.6}", r[0]);
    seen.lock().unwrap().push(r[0]);
    r[0] = 0.0;
}

fn manual(
    s: &Setup,
    dev: &Device,
    seen: &Arc<std::sync::Mutex<Vec<f64>>>,
) -> cueflow::Result<Graph> {
    // The original's `result_h`, a host variable: pageable.
    let mut result_h = PageableBuffer::<f64>::new(dev, 1)?;
    let mut g = Graph::new(dev);
    let copy = g.add_copy_h2d(&[], &s.input_d, &s.input_h)?;
    let clear = g.add_memset(&[], &s.partials_d, 0)?;
    let (cfg, args) = s.pass1_args();
    let k1 = g.add_kernel(&[clear, copy], &s.pass1, cfg, args)?;
    let clear_result = g.add_memset(&[], &s.result_d, 0)?;
    let (cfg, args) = s.pass2_args();
    let k2 = g.add_kernel(&[k1, clear_result], &s.pass2, cfg, args)?;
    let back = g.add_copy_d2h(&[k2], &mut result_h, &s.result_d)?;
    add_report(&mut g, &[back], &result_h, "cudaGraphsManual", seen)?;
    Ok(g)
}

fn captured(
    s: &Setup,
    dev: &Device,
    seen: &Arc<std::sync::Mutex<Vec<f64>>>,
) -> cueflow::Result<Graph> {
    // The original's `result_h`, a host variable: pageable.
    let mut result_h = PageableBuffer::<f64>::new(dev, 1)?;
    let (s1, s2, s3) = (Stream::new(dev)?, Stream::new(dev)?, Stream::new(dev)?);
    let (fork, memset1, memset2) = (Event::new(dev)?, Event::new(dev)?, Event::new(dev)?);
    s1.begin_capture(CaptureMode::Global)?;
    s1.record_event(&fork)?;
    s2.wait_event(&fork)?;
    s3.wait_event(&fork)?;
    s1.copy_h2d(&s.input_d, &s.input_h)?;
    s2.memset(&s.partials_d, 0)?;
    s2.record_event(&memset1)?;
    s3.memset(&s.result_d, 0)?;
    s3.record_event(&memset2)?;
    s1.wait_event(&memset1)?;
    let (cfg, args) = s.pass1_args();
    s1.launch(&s.pass1, cfg, args)?;
    s1.wait_event(&memset2)?;
    let (cfg, args) = s.pass2_args();
    s1.launch(&s.pass2, cfg, args)?;
    s1.copy_d2h(&mut result_h, &s.result_d)?;
    let name = "cudaGraphsUsingStreamCapture";
    let seen = seen.clone();
    s1.host_task(name)
        .writes(&result_h)
        .run_fn(move |io| report(name, io, &seen))?;
    s1.end_capture()
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let dev = cueflow_samples::device()?;
    let n: usize = if on_gpu(&dev) { 1 << 24 } else { 1 << 20 };
    let blocks = 512u32;
    println!("{n} elements");
    println!("threads per block  = {THREADS}");
    println!("Graph Launch iterations = {LAUNCHES}");
    // The original's input: bytes of a pseudo-random sequence scaled into [0, 1).
    let mut state = 1u32;
    let data: Vec<f32> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            ((state >> 16) & 0xff) as f32 / 32767.0
        })
        .collect();
    let want: f64 = data.iter().map(|&x| x as f64).sum();
    let (pass1, pass2) = kernels();
    let setup = Setup {
        input_h: PageableBuffer::from_vec(&dev, data)?,
        input_d: DeviceBuffer::new(&dev, n)?,
        partials_d: DeviceBuffer::new(&dev, blocks as usize)?,
        result_d: DeviceBuffer::new(&dev, 1)?,
        blocks,
        pass1,
        pass2,
    };
    let stream = Stream::new(&dev)?;
    for (path, build) in [
        (
            "manual",
            manual as fn(&Setup, &Device, &Arc<_>) -> cueflow::Result<Graph>,
        ),
        ("stream capture", captured),
    ] {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let graph = build(&setup, &dev, &seen)?;
        println!(
            "\nNum of nodes in the graph created by {path} = {}",
            graph.node_count()
        );
        checks.eq(graph.node_count(), 7, format!("{path}: nodes in the graph"));
        let exec = graph.instantiate()?;
        let clone = graph.clone();
        let clone_exec = clone.instantiate()?;
        for _ in 0..LAUNCHES {
            exec.launch(&stream)?;
        }
        stream.synchronize()?;
        println!("Cloned Graph Output.. ");
        for _ in 0..LAUNCHES {
            clone_exec.launch(&stream)?;
        }
        stream.synchronize()?;
        let seen = seen.lock().unwrap().clone();
        checks.eq(seen.len(), 2 * LAUNCHES, format!("{path}: host callbacks"));
        for (i, got) in seen.iter().enumerate() {
            checks.check(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                format!("{path}: launch {i} reduced sum {got} (host: {want})"),
            );
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    main_with("simpleCudaGraphs", run)
}
