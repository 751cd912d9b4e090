//! Port of NVIDIA's `jacobiCudaGraphs`: the Jacobi method for A x = b (A has N+1 on the
//! diagonal and 1 elsewhere, b is 2N, so x is all ones), one step per graph launch, run three
//! ways as the original's `-gpumethod` selects: 0, a graph built node by node (memset, kernel,
//! copy back) whose kernel node gets the swapped x / x_new buffers before each launch
//! (`set_kernel_args`, cudaGraphExecKernelNodeSetParams); 1, a capture of the same step each
//! iteration that updates the instantiation (cudaGraphExecUpdate); 2, plain stream launches.
//! Each must reach the CPU's error within the convergence threshold, as the original checks.
//! Without `-gpumethod` all three run.

use cueflow::{
    CaptureMode, CompileOptions, Device, DeviceBuffer, Graph, GraphExec, Kernel, KernelArgs,
    LaunchConfig, PageableBuffer, PinnedBuffer, Stream,
};
use cueflow_samples::{main_with, on_gpu, Checks};

const SOURCE: &str = include_str!("../../kernels/jacobi_cuda_graphs.cu");
const ROWS_PER_BLOCK: u32 = 8;
const THREADS: u32 = 256;
const THRESHOLD: f32 = 1.0e-2;

/// One Jacobi step's `dx` for `row`.
fn dx(a: &[f32], b: &[f64], x: &[f64], n: usize, row: usize) -> f64 {
    let dot: f64 = (0..n).map(|j| a[row * n + j] as f64 * x[j]).sum();
    (b[row] - dot) / a[row * n + row] as f64
}

fn kernels(n: usize) -> (Kernel, Kernel) {
    let opts = || CompileOptions::new().define("N_ROWS", n.to_string());
    let step = Kernel::new("jacobi_step")
        .cuda_source(SOURCE, "jacobi_step")
        .cuda_options(opts())
        .host(|ctx, args| {
            // Each block writes the rows of its tile of x_new; block 0 also adds |dx| of every
            // row to the sum (its tile holds the sum's one element).
            let (a, b, x) = (
                args.input::<f32>(0),
                args.input::<f64>(1),
                args.input::<f64>(3),
            );
            let n = b.len();
            let rows = ctx.thread_range();
            let tile = args.tile_mut::<f64>(4);
            for (k, out) in tile.iter_mut().enumerate() {
                let row = rows.start as usize + k;
                *out = x[row] + dx(a, b, x, n, row);
            }
            if ctx.linear_block == 0 {
                let total: f64 = (0..n).map(|row| dx(a, b, x, n, row).abs()).sum();
                args.tile_mut::<f64>(5)[0] += total;
            }
        })
        .build();
    let error = Kernel::new("final_error")
        .cuda_source(SOURCE, "final_error")
        .cuda_options(opts())
        .host(|ctx, args| {
            if ctx.linear_block == 0 {
                let total: f64 = args.input::<f64>(0).iter().map(|v| (v - 1.0).abs()).sum();
                args.tile_mut::<f64>(1)[0] += total;
            }
        })
        .build();
    (step, error)
}

/// The original's CPU reference: iterations and final error.
fn jacobi_cpu(a: &[f32], b: &[f64], n: usize, max_iter: usize) -> (usize, f64) {
    let (mut x, mut x_new) = (vec![0.0f64; n], vec![0.0f64; n]);
    let mut k = 0;
    while k < max_iter {
        let mut sum = 0.0;
        for (row, out) in x_new.iter_mut().enumerate() {
            let d = dx(a, b, &x, n, row);
            *out += d;
            sum += d.abs();
        }
        x.copy_from_slice(&x_new);
        if sum <= THRESHOLD as f64 {
            break;
        }
        k += 1;
    }
    (k + 1, x.iter().map(|v| (v - 1.0).abs()).sum())
}

struct Solver {
    n: usize,
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f64>,
    x: DeviceBuffer<f64>,
    x_new: DeviceBuffer<f64>,
    d_sum: DeviceBuffer<f64>,
    /// The original's `sum`: a host variable (pageable), which the graph's copy node and the
    /// captured copy write.
    sum_h: PageableBuffer<f64>,
    step: Kernel,
    error: Kernel,
    stream: Stream,
}

impl Solver {
    /// The step kernel's launch for iteration `k` (x and x_new swap each iteration).
    fn step_args(&self, k: usize) -> (LaunchConfig, KernelArgs) {
        let (from, to) = if k % 2 == 0 {
            (&self.x, &self.x_new)
        } else {
            (&self.x_new, &self.x)
        };
        let blocks = self.n as u32 / ROWS_PER_BLOCK + 2;
        (
            LaunchConfig::new(blocks, THREADS),
            KernelArgs::new()
                .read(&self.a)
                .read(&self.b)
                .scalar(THRESHOLD)
                .read(from)
                .write(to)
                .write(&self.d_sum),
        )
    }

    /// The original's ending: the error of the iterate last written, on the stream.
    fn finish(&mut self, k: usize) -> cueflow::Result<f64> {
        let s = &self.stream;
        s.memset(&self.d_sum, 0)?;
        let last = if k % 2 == 0 { &self.x_new } else { &self.x };
        let cfg =
            LaunchConfig::new(self.n as u32 / THREADS + 1, THREADS).shared((THREADS / 32 + 1) * 8);
        let args = KernelArgs::new().read(last).write(&self.d_sum);
        s.launch(&self.error, cfg, args)?;
        s.copy_d2h(&mut self.sum_h, &self.d_sum)?;
        s.synchronize()?;
        let err = self.sum_h.read()?[0];
        println!("GPU iterations : {}", k + 1);
        println!("GPU error : {err:.3e}");
        Ok(err)
    }

    /// Reset x and x_new to zero.
    fn reset(&self) -> cueflow::Result<()> {
        self.stream.memset(&self.x, 0)?;
        self.stream.memset(&self.x_new, 0)?;
        self.stream.synchronize()
    }

    /// Method 0: a graph built node by node; the kernel node's arguments set before each launch.
    fn with_set_params(&mut self, max_iter: usize) -> cueflow::Result<f64> {
        let mut g = Graph::new(self.stream.device());
        let clear = g.add_memset(&[], &self.d_sum, 0)?;
        let (cfg, args) = self.step_args(0);
        let kernel = g.add_kernel(&[clear], &self.step, cfg, args)?;
        g.add_copy_d2h(&[kernel], &mut self.sum_h, &self.d_sum)?;
        let exec = g.instantiate()?;
        for k in 0..max_iter {
            let (cfg, args) = self.step_args(k);
            exec.set_kernel_args(kernel, &self.step, cfg, args)?;
            exec.launch(&self.stream)?;
            self.stream.synchronize()?;
            if self.sum_h.read()?[0] <= THRESHOLD as f64 {
                return self.finish(k);
            }
        }
        self.finish(max_iter - 1)
    }

    /// Method 1: the step captured each iteration, updating one instantiation.
    fn with_exec_update(&mut self, max_iter: usize) -> cueflow::Result<f64> {
        let mut exec: Option<GraphExec> = None;
        for k in 0..max_iter {
            let s = &self.stream;
            s.begin_capture(CaptureMode::Global)?;
            s.memset(&self.d_sum, 0)?;
            let (cfg, args) = self.step_args(k);
            s.launch(&self.step, cfg, args)?;
            s.copy_d2h(&mut self.sum_h, &self.d_sum)?;
            let graph = self.stream.end_capture()?;
            match &exec {
                None => exec = Some(graph.instantiate()?),
                Some(e) => {
                    if let Err(why) = e.update(&graph) {
                        println!("k = {k} graph update failed with error - {why}");
                        exec = Some(graph.instantiate()?);
                    }
                }
            }
            exec.as_ref().expect("instantiated").launch(&self.stream)?;
            self.stream.synchronize()?;
            if self.sum_h.read()?[0] <= THRESHOLD as f64 {
                return self.finish(k);
            }
        }
        self.finish(max_iter - 1)
    }

    /// Method 2: stream launches, no graph.
    fn with_streams(&mut self, max_iter: usize) -> cueflow::Result<f64> {
        for k in 0..max_iter {
            let s = &self.stream;
            s.memset(&self.d_sum, 0)?;
            let (cfg, args) = self.step_args(k);
            s.launch(&self.step, cfg, args)?;
            s.copy_d2h(&mut self.sum_h, &self.d_sum)?;
            s.synchronize()?;
            if self.sum_h.read()?[0] <= THRESHOLD as f64 {
                return self.finish(k);
            }
        }
        self.finish(max_iter - 1)
    }
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let method: Option<u32> = std::env::args()
        .find_map(|a| a.strip_prefix("-gpumethod=").map(|v| v.parse()))
        .transpose()?;
    if method.is_some_and(|m| m > 2) {
        return Err(format!("gpumethod must be 0, 1 or 2, not {method:?}").into());
    }
    let dev: Device = cueflow_samples::device()?;
    // The original's 512 rows on a GPU; a quarter on the host backend (about 650 iterations
    // instead of 3000).
    let n: usize = if on_gpu(&dev) { 512 } else { 128 };
    let mut a = vec![1.0f32; n * n];
    for i in 0..n {
        a[i * n + i] = n as f32 + 1.0;
    }
    let b = vec![2.0 * n as f64; n];
    let max_iter = 4 * n * n;
    let t = std::time::Instant::now();
    let (cpu_iters, cpu_err) = jacobi_cpu(&a, &b, n, max_iter);
    println!("CPU iterations : {cpu_iters}");
    println!("CPU error : {cpu_err:.3e}");
    println!(
        "CPU Processing time: {:.3} (ms)",
        t.elapsed().as_secs_f64() * 1e3
    );
    let stream = Stream::builder(&dev).non_blocking().build()?;
    let upload_a = PinnedBuffer::from_slice(&dev, &a)?;
    let upload_b = PinnedBuffer::from_slice(&dev, &b)?;
    let (step, error) = kernels(n);
    let mut solver = Solver {
        n,
        a: DeviceBuffer::new(&dev, n * n)?,
        b: DeviceBuffer::new(&dev, n)?,
        x: DeviceBuffer::new(&dev, n)?,
        x_new: DeviceBuffer::new(&dev, n)?,
        d_sum: DeviceBuffer::new(&dev, 1)?,
        sum_h: PageableBuffer::new(&dev, 1)?,
        step,
        error,
        stream,
    };
    solver.stream.copy_h2d(&solver.a, &upload_a)?;
    solver.stream.copy_h2d(&solver.b, &upload_b)?;
    let names = [
        "JacobiMethodGpuCudaGraphExecKernelSetParams",
        "JacobiMethodGpuCudaGraphExecUpdate",
        "JacobiMethodGpu",
    ];
    for m in 0..3u32 {
        if method.is_some_and(|want| want != m) {
            continue;
        }
        solver.reset()?;
        println!("gpumethod {m}: {}", names[m as usize]);
        let t = std::time::Instant::now();
        let gpu_err = match m {
            0 => solver.with_set_params(max_iter)?,
            1 => solver.with_exec_update(max_iter)?,
            _ => solver.with_streams(max_iter)?,
        };
        println!(
            "GPU Processing time: {:.3} (ms)",
            t.elapsed().as_secs_f64() * 1e3
        );
        checks.check(
            (cpu_err - gpu_err).abs() < THRESHOLD as f64,
            format!(
                "{}: GPU error {gpu_err:.3e} vs CPU error {cpu_err:.3e}",
                names[m as usize]
            ),
        );
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    main_with("jacobiCudaGraphs", run)
}
