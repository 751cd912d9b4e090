//! A cudarc program, and the same program on cueflow streams with the race sanitizer and a
//! trace, over the same kind of cudarc allocations (adopted, never copied).
//!
//! The program: a weight matrix W (n×n) and a bias vector are uploaded once; then batches
//! Xᵢ (n×n, in pinned host memory) go through two streams in turn: upload Xᵢ, C = Xᵢ·W (cuBLAS
//! SGEMM through `cudarc::cublas`), Y = relu(C + bias) (a kernel compiled with cudarc's NVRTC
//! and launched with cudarc), download Y into pinned memory.
//!
//! * **cudarc** — the reference, cudarc only: `CudaStream`s, `CudaSlice`s, cudarc's per-slice
//!   events order W's upload before the other stream's SGEMMs.
//! * **cueflow** — the same cudarc context, cuBLAS handles, kernel and allocations: the device
//!   is `Device::from_cudarc`, the slices are adopted (`DeviceBuffer::from_cudarc`, zero copy),
//!   the streams are cueflow's (lent to cuBLAS with `Stream::as_cudarc`), the SGEMM and the
//!   kernel are `Stream::cudarc` operations over the buffers they declare, the copies are
//!   cueflow's pinned copies, and the sanitizer checks every access (error mode: a race would
//!   refuse the call). One explicit event orders W's upload before the other stream: the
//!   example first leaves it out and shows the sanitizer's report. At the end the output
//!   buffers go back to cudarc (`DeviceBuffer::into_cudarc`) and are read there.
//!
//! The two run alternately, `ROUNDS` times each (plus a warm-up), and the medians are printed
//! with their ratio (target: cueflow with the sanitizer and a trace within 1.05× of cudarc),
//! beside cueflow without them. Every batch's output is compared between the two programs and
//! sampled against a host reference. The last traced run is written as a Chrome trace and an
//! SVG timeline.
//!
//! ```text
//! cargo run --release --example cudarc_interop [-- N BATCHES ROUNDS [OUT_DIR]]   (2048 8 7 .)
//! ```
//! Needs CUDA device 0, NVRTC and cuBLAS (found as cudarc finds them); without them it says
//! what is missing and exits 0.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cueflow::cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use cueflow::cudarc::driver::{
    sys::CU_MEMHOSTALLOC_PORTABLE, CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig,
    PinnedHostSlice, PushKernelArg,
};
use cueflow::trace::chrome::to_chrome_json;
use cueflow::trace::svg::{to_svg, RowMode, SvgOptions};
use cueflow::trace::Trace;
use cueflow::{Device, DeviceBuffer, Error, PinnedBuffer, Result, SanitizeMode, Stream};

const KERNEL: &str = r#"
extern "C" __global__ void bias_relu(const float* c, const float* bias, float* y,
                                     unsigned int len, unsigned int cols) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) y[i] = fmaxf(c[i] + bias[i % cols], 0.0f);
}
"#;

/// The inputs, on the host.
struct Problem {
    n: usize,
    w: Vec<f32>,
    bias: Vec<f32>,
    xs: Vec<Vec<f32>>,
}

impl Problem {
    fn new(n: usize, batches: usize) -> Problem {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let w = (0..n * n).map(|_| next() / (n as f32).sqrt()).collect();
        let bias = (0..n).map(|_| next() * 0.1).collect();
        let xs = (0..batches)
            .map(|_| (0..n * n).map(|_| next()).collect())
            .collect();
        Problem { n, w, bias, xs }
    }

    /// Row-major Y = X·W: column-major Yᵀ = Wᵀ·Xᵀ, so cuBLAS gets W first.
    fn gemm(&self) -> GemmConfig<f32> {
        let n = self.n as i32;
        GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n,
            n,
            k: n,
            alpha: 1.0,
            lda: n,
            ldb: n,
            beta: 0.0,
            ldc: n,
        }
    }

    /// Y[r][c] of batch `i`, in f64.
    fn reference(&self, i: usize, r: usize, c: usize) -> f64 {
        let (n, x) = (self.n, &self.xs[i]);
        let dot: f64 = (0..n)
            .map(|k| x[r * n + k] as f64 * self.w[k * n + c] as f64)
            .sum();
        (dot + self.bias[c] as f64).max(0.0)
    }
}

fn cudarc_err<E: std::fmt::Display>(e: E) -> Error {
    Error::Unsupported(format!("cudarc: {e}"))
}

/// The kernel, compiled with cudarc's NVRTC and loaded with cudarc.
fn load_kernel(ctx: &Arc<CudaContext>) -> Result<CudaFunction> {
    let ptx = cueflow::cudarc::nvrtc::compile_ptx(KERNEL).map_err(cudarc_err)?;
    Ok(ctx.load_module(ptx)?.load_function("bias_relu")?)
}

/// One n×n matrix per stream.
type PerStream<T> = [T; 2];

/// The reference: the program with cudarc alone.
struct CudarcProgram {
    p: Arc<Problem>,
    streams: PerStream<Arc<CudaStream>>,
    blas: PerStream<CudaBlas>,
    kernel: CudaFunction,
    w: CudaSlice<f32>,
    bias: CudaSlice<f32>,
    x: PerStream<CudaSlice<f32>>,
    c: PerStream<CudaSlice<f32>>,
    y: PerStream<CudaSlice<f32>>,
    hx: Vec<PinnedHostSlice<f32>>,
    hy: Vec<PinnedHostSlice<f32>>,
}

/// Pinned host memory as cudarc allocates it (portable, as cueflow's is by default).
fn cudarc_pinned(ctx: &Arc<CudaContext>, data: &[f32]) -> Result<PinnedHostSlice<f32>> {
    // SAFETY: every element is written below before any use.
    let mut h =
        unsafe { ctx.alloc_pinned_with_flags::<f32>(data.len(), CU_MEMHOSTALLOC_PORTABLE) }?;
    h.as_mut_slice()?.copy_from_slice(data);
    Ok(h)
}

impl CudarcProgram {
    fn new(ctx: &Arc<CudaContext>, p: &Arc<Problem>) -> Result<CudarcProgram> {
        let nn = p.n * p.n;
        let streams = [ctx.new_stream()?, ctx.new_stream()?];
        let blas = [
            CudaBlas::new(streams[0].clone()).map_err(cudarc_err)?,
            CudaBlas::new(streams[1].clone()).map_err(cudarc_err)?,
        ];
        let s0 = &streams[0];
        let (w, bias) = (s0.clone_htod(&p.w)?, s0.clone_htod(&p.bias)?);
        let per = |s: &Arc<CudaStream>| s.alloc_zeros::<f32>(nn);
        let (x, c, y) = (
            [per(&streams[0])?, per(&streams[1])?],
            [per(&streams[0])?, per(&streams[1])?],
            [per(&streams[0])?, per(&streams[1])?],
        );
        let hx =
            p.xs.iter()
                .map(|x| cudarc_pinned(ctx, x))
                .collect::<Result<_>>()?;
        let hy =
            p.xs.iter()
                .map(|_| cudarc_pinned(ctx, &vec![0.0; nn]))
                .collect::<Result<_>>()?;
        Ok(CudarcProgram {
            p: p.clone(),
            kernel: load_kernel(ctx)?,
            streams,
            blas,
            w,
            bias,
            x,
            c,
            y,
            hx,
            hy,
        })
    }

    /// All batches, until the last output is on the host; milliseconds.
    fn run(&mut self) -> Result<f64> {
        let (cfg, n) = (self.p.gemm(), self.p.n as u32);
        let start = Instant::now();
        for i in 0..self.hx.len() {
            let k = i % 2;
            let s = &self.streams[k];
            s.memcpy_htod(&self.hx[i], &mut self.x[k])?;
            // SAFETY: n×n f32 matrices, as `cfg` says.
            unsafe { self.blas[k].gemm(cfg, &self.w, &self.x[k], &mut self.c[k]) }
                .map_err(cudarc_err)?;
            let (len, lc) = (n * n, LaunchConfig::for_num_elems(n * n));
            let mut launch = s.launch_builder(&self.kernel);
            launch
                .arg(&self.c[k])
                .arg(&self.bias)
                .arg(&mut self.y[k])
                .arg(&len)
                .arg(&n);
            // SAFETY: bias_relu(const float*, const float*, float*, unsigned, unsigned) over
            // n×n matrices and n biases.
            unsafe { launch.launch(lc) }?;
            s.memcpy_dtoh(&self.y[k], &mut self.hy[i])?;
        }
        for s in &self.streams {
            s.synchronize()?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}

/// The same program on cueflow streams, over cudarc allocations it adopted.
struct CueflowProgram {
    p: Arc<Problem>,
    dev: Device,
    streams: PerStream<Stream>,
    blas: PerStream<CudaBlas>,
    kernel: CudaFunction,
    w: DeviceBuffer<f32>,
    bias: DeviceBuffer<f32>,
    x: PerStream<DeviceBuffer<f32>>,
    c: PerStream<DeviceBuffer<f32>>,
    y: PerStream<DeviceBuffer<f32>>,
    hx: Vec<PinnedBuffer<f32>>,
    hy: Vec<PinnedBuffer<f32>>,
}

impl CueflowProgram {
    fn new(ctx: &Arc<CudaContext>, p: &Arc<Problem>) -> Result<CueflowProgram> {
        let nn = p.n * p.n;
        let dev = Device::from_cudarc(ctx)?;
        dev.set_sanitize(SanitizeMode::Error);
        let stream = |name: &str| Stream::builder(&dev).non_blocking().name(name).build();
        let streams = [stream("batches 0, 2, …")?, stream("batches 1, 3, …")?];
        let blas = [
            CudaBlas::new(streams[0].as_cudarc()?).map_err(cudarc_err)?,
            CudaBlas::new(streams[1].as_cudarc()?).map_err(cudarc_err)?,
        ];
        // The program's own cudarc allocations, adopted: W and the bias are uploaded by
        // cudarc on stream 0 (cueflow's, lent) and adopted in its order, without a host wait.
        let s0 = streams[0].as_cudarc()?;
        let w = DeviceBuffer::from_cudarc_on(&streams[0], s0.clone_htod(&p.w)?)?;
        let bias = DeviceBuffer::from_cudarc_on(&streams[0], s0.clone_htod(&p.bias)?)?;
        let adopt = || DeviceBuffer::from_cudarc(&dev, s0.alloc_zeros::<f32>(nn)?);
        let (x, c, y) = (
            [adopt()?, adopt()?],
            [adopt()?, adopt()?],
            [adopt()?, adopt()?],
        );
        let hx =
            p.xs.iter()
                .map(|x| PinnedBuffer::from_slice(&dev, x))
                .collect::<Result<_>>()?;
        let hy =
            p.xs.iter()
                .map(|_| PinnedBuffer::new(&dev, nn))
                .collect::<Result<_>>()?;
        let prog = CueflowProgram {
            p: p.clone(),
            kernel: load_kernel(ctx)?,
            dev,
            streams,
            blas,
            w,
            bias,
            x,
            c,
            y,
            hx,
            hy,
        };
        // What the sanitizer is for: stream 1's first SGEMM reads W, which stream 0 may still
        // be uploading. Refused (error mode), nothing enqueued; the fix is one event.
        match prog.sgemm(1) {
            Err(Error::Race(r)) => {
                let first = r.to_string();
                let first = first.lines().next().unwrap_or_default().to_string();
                println!("without the event, the sanitizer refuses stream 1's SGEMM:\n  {first}");
            }
            other => {
                return Err(Error::Unsupported(format!(
                    "the sanitizer missed the race on W: {other:?}"
                )))
            }
        }
        prog.dev.take_sanitizer_reports();
        prog.streams[1].wait_event(&prog.streams[0].record()?)?;
        Ok(prog)
    }

    /// C = X·W on stream `k` (cuBLAS through cudarc, over cueflow's buffers).
    fn sgemm(&self, k: usize) -> Result<()> {
        let (blas, cfg) = (&self.blas[k], self.p.gemm());
        self.streams[k]
            .cudarc("sgemm")
            .reads(&self.w)
            .reads(&self.x[k])
            .writes(&self.c[k])
            .run(|call| {
                let (w, x, mut c) = call.views();
                // SAFETY: n×n f32 matrices, as `cfg` says; the handle's stream is this one.
                unsafe { blas.gemm(cfg, &w, &x, &mut c) }?;
                Ok(())
            })
    }

    /// Y = relu(C + bias) on stream `k` (the kernel launched with cudarc).
    fn bias_relu(&self, k: usize) -> Result<()> {
        let (f, n) = (&self.kernel, self.p.n as u32);
        self.streams[k]
            .cudarc("bias_relu")
            .reads(&self.c[k])
            .reads(&self.bias)
            .writes(&self.y[k])
            .run(|call| {
                let (c, bias, mut y) = call.views();
                let len = n * n;
                let mut launch = call.stream().launch_builder(f);
                launch.arg(&c).arg(&bias).arg(&mut y).arg(&len).arg(&n);
                // SAFETY: as in the cudarc program.
                unsafe { launch.launch(LaunchConfig::for_num_elems(len)) }?;
                Ok(())
            })
    }

    /// All batches, until the last output is on the host; milliseconds. With `checked`, the
    /// sanitizer checks every access and the run is traced.
    fn run(&mut self, checked: bool) -> Result<(f64, Option<Trace>)> {
        self.dev.set_sanitize(if checked {
            SanitizeMode::Error
        } else {
            SanitizeMode::Off
        });
        if checked {
            self.dev.start_trace()?;
        }
        let start = Instant::now();
        for i in 0..self.hx.len() {
            let k = i % 2;
            self.streams[k].copy_h2d(&self.x[k], &self.hx[i])?;
            self.sgemm(k)?;
            self.bias_relu(k)?;
            self.streams[k].copy_d2h(&mut self.hy[i], &self.y[k])?;
        }
        for s in &self.streams {
            s.synchronize()?;
        }
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let trace = if checked {
            Some(self.dev.stop_trace()?)
        } else {
            None
        };
        Ok((ms, trace))
    }
}

/// What a run of the example measured.
pub struct Outcome {
    /// Medians in milliseconds: cudarc, cueflow with the sanitizer and a trace, cueflow plain.
    pub cudarc_ms: f64,
    /// See `cudarc_ms`.
    pub checked_ms: f64,
    /// See `cudarc_ms`.
    pub plain_ms: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| args.get(i).map_or(d, |a| a.parse().expect("a number"));
    let out = args.get(3).map_or(".", String::as_str);
    run(arg(0, 2048), arg(1, 8), arg(2, 7), Path::new(out)).map(|_| ())
}

/// The example: n×n matrices, `batches` per run, `rounds` timed runs of each program; the
/// trace goes into `out_dir`. `Ok(None)` when CUDA, NVRTC or cuBLAS is missing.
pub fn run(n: usize, batches: usize, rounds: usize, out_dir: &Path) -> Result<Option<Outcome>> {
    if let Err(e) = Device::cuda(0) {
        println!("cudarc_interop: no CUDA device ({e}); nothing to run");
        return Ok(None);
    }
    // SAFETY: these only try to open the libraries (cudarc panics on first use without them).
    let (nvrtc, cublas) = unsafe {
        (
            cueflow::cudarc::nvrtc::sys::is_culib_present(),
            cueflow::cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !nvrtc || !cublas {
        println!("cudarc_interop: NVRTC or cuBLAS is missing (nvrtc {nvrtc}, cublas {cublas}); nothing to run");
        return Ok(None);
    }
    let ctx = CudaContext::new(0)?;
    let p = Arc::new(Problem::new(n, batches.max(2)));
    let mut reference = CudarcProgram::new(&ctx, &p)?;
    let mut cueflow = CueflowProgram::new(&ctx, &p)?;
    reference.run()?; // warm-up: cuBLAS's first calls, the kernel's first launch
    cueflow.run(true)?;
    cueflow.run(false)?;
    let (mut a, mut b, mut c, mut trace) = (Vec::new(), Vec::new(), Vec::new(), None);
    for _ in 0..rounds.max(1) {
        a.push(reference.run()?);
        let (ms, t) = cueflow.run(true)?;
        b.push(ms);
        trace = t;
        c.push(cueflow.run(false)?.0);
    }
    let o = Outcome {
        cudarc_ms: median(a),
        checked_ms: median(b),
        plain_ms: median(c),
    };
    let races = cueflow.dev.take_sanitizer_reports().len();

    // Every output equal between the two, and sampled against the host.
    let (mut diff, mut worst) = (0.0f64, 0.0f64);
    for i in 0..p.xs.len() {
        let want = reference.hy[i].as_slice()?;
        let got = cueflow.hy[i].read()?;
        for (g, w) in got.iter().zip(want) {
            diff = diff.max((*g as f64 - *w as f64).abs());
        }
        for s in 0..64 {
            let (r, col) = ((s * 7919 + i) % n, (s * 104_729 + 3 * i) % n);
            let e = (want[r * n + col] as f64 - p.reference(i, r, col)).abs();
            worst = worst.max(e / p.reference(i, r, col).abs().max(1.0));
        }
    }
    // Both ways: the adopted outputs go back to cudarc (idle after the synchronizations) and
    // are read there; they hold the last batch of each stream.
    let CueflowProgram { y, hy, .. } = cueflow;
    let mut back_ok = true;
    for (k, buf) in y.into_iter().enumerate() {
        let slice = buf.into_cudarc()?;
        let last = (0..p.xs.len())
            .rev()
            .find(|i| i % 2 == k)
            .expect("two batches or more");
        back_ok &= slice.stream().clone_dtoh(&slice)? == *hy[last].read()?;
    }

    let nn = (n * n) as f64;
    let gflop = 2.0 * nn * n as f64 * p.xs.len() as f64 / 1e9;
    println!(
        "cudarc_interop on {}: {} batches of X·W ({n}×{n}, {gflop:.1} GFLOP) + bias + relu, \
         pinned copies, two streams; medians of {} alternating runs",
        ctx.name()?,
        p.xs.len(),
        rounds.max(1)
    );
    println!("  cudarc only                      {:8.3} ms", o.cudarc_ms);
    println!(
        "  cueflow, sanitizer + trace       {:8.3} ms  ({:.3}× cudarc; target ≤ 1.05)",
        o.checked_ms,
        o.checked_ms / o.cudarc_ms
    );
    println!(
        "  cueflow, plain                   {:8.3} ms  ({:.3}× cudarc)",
        o.plain_ms,
        o.plain_ms / o.cudarc_ms
    );
    // The same cuBLAS calls on the same data: equal, unless cuBLAS picked another algorithm.
    let verified = diff <= 1e-4 && worst < 1e-3 && back_ok && races == 0;
    println!(
        "  outputs: cueflow vs cudarc max |Δ| {diff:.1e}{}, host reference worst relative \
         error {worst:.1e}, back in cudarc {}, sanitizer reports in timed runs: {races} → {}",
        if diff == 0.0 { " (bit for bit)" } else { "" },
        if back_ok { "equal" } else { "DIFFERENT" },
        if verified { "verified" } else { "WRONG" }
    );
    if let Some(t) = trace {
        std::fs::create_dir_all(out_dir).map_err(cudarc_err)?;
        let (json, svg) = (
            out_dir.join("cudarc_trace.json"),
            out_dir.join("cudarc_timeline.svg"),
        );
        std::fs::write(&json, to_chrome_json(&t)).map_err(cudarc_err)?;
        let opts = SvgOptions {
            title: format!("a cudarc program on cueflow streams ({n}×{n} SGEMM batches)"),
            rows: RowMode::ByStream,
            width_px: 1200,
        };
        std::fs::write(&svg, to_svg(&[("cueflow", &t)], &opts)).map_err(cudarc_err)?;
        println!("  wrote {} and {}", json.display(), svg.display());
    }
    if !verified {
        return Err(Error::Unsupported("cudarc_interop: results differ".into()));
    }
    Ok(Some(o))
}
