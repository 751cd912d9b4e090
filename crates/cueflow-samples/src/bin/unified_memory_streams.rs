//! Port of NVIDIA's UnifiedMemoryStreams: 40 tasks, each a matrix-vector product (DGEMV)
//! of random size over managed memory (`cudaMallocManaged`), consumed by 4 threads. A small
//! task (n < 100) runs on the host: its memory is attached to the host on a spare stream
//! (`cudaStreamAttachMemAsync(…, cudaMemAttachHost)`) and that stream synchronized first, so
//! the host may touch it while the device runs other tasks. A large one runs on the device,
//! on its thread's stream, after attaching its memory to that stream alone
//! (`cudaMemAttachSingle`): cuBLAS's `cublasDgemv` on the thread's handle, set to that stream
//! (`cublasSetStream`), handed the managed memory — an external operation of the stream that
//! declares the three managed buffers, so cueflow orders and tracks it like a kernel. The
//! handles are made before the threads start, as in the original. On the host backend the
//! operation's host side computes what cuBLAS computes.
//!
//! As the original, the device product is cuBLAS's column-major `y = A x` over the row-major
//! data (the host tasks compute the row-major one); the original checks nothing, this port
//! checks every task against a host DGEMV of its kind (relative error below 1e-12). The
//! original waives a device without managed memory or in prohibited compute mode, and this
//! port also a GPU machine without cuBLAS. Sizes: the original's 64..1000 on a GPU with enough
//! free memory; 64..300 on the host backend.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::sys as cublas;
use cueflow::{AttachMode, ComputeMode, ManagedBuffer, RawCuda, Stream};
use cueflow_samples::{device, main_with, on_gpu};

const TASKS: usize = 40;
const THREADS: usize = 4;

/// `drand48`-like generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(0x5DEECE66D).wrapping_add(0xB) & ((1 << 48) - 1);
        self.0 as f64 / (1u64 << 48) as f64
    }
}

struct Task {
    id: usize,
    size: usize,
    data: ManagedBuffer<f64>,
    vector: ManagedBuffer<f64>,
    result: ManagedBuffer<f64>,
    on_host: bool,
}

/// The original's host gemv: result = A x, A row-major.
fn host_gemv(n: usize, a: &[f64], x: &[f64], result: &mut [f64]) {
    for (i, r) in result.iter_mut().enumerate() {
        *r = (0..n).map(|j| a[i * n + j] * x[j]).sum();
    }
}

/// What `cublasDgemv(h, CUBLAS_OP_N, n, n, 1, A, n, x, 1, 0, y, 1)` computes: A read
/// column-major (element (i, j) at `i + j n`).
fn cublas_gemv(n: usize, a: &[f64], x: &[f64], y: &mut [f64]) {
    for (i, r) in y.iter_mut().enumerate() {
        *r = (0..n).map(|j| a[i + j * n] * x[j]).sum();
    }
}

/// The cuBLAS handles, one per stream as in the original (`handles[tid + 1]`), each used by
/// one operation at a time.
struct Handles(Vec<Mutex<usize>>);

fn blas_error(call: &str, s: cublas::cublasStatus_t) -> cueflow::Error {
    cueflow::Error::Unsupported(format!("{call}: {s:?}"))
}

impl Handles {
    /// `n` handles (`cublasCreate`, with the device's context current on this thread); none on
    /// the host backend, whose operations run their host side.
    fn create(gpu: bool, n: usize) -> cueflow::Result<Handles> {
        let mut handles = Handles(Vec::new());
        for _ in 0..n {
            if !gpu {
                break;
            }
            let mut h: cublas::cublasHandle_t = std::ptr::null_mut();
            // SAFETY: `h` is a valid out-pointer; the device's context is current (the
            // caller just used the device on this thread).
            let s = unsafe { cublas::cublasCreate_v2(&mut h) };
            if s != cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(blas_error("cublasCreate", s));
            }
            handles.0.push(Mutex::new(h as usize));
        }
        Ok(handles)
    }

    /// `cublasSetStream` + `cublasDgemv` with handle `i` on the external operation's stream,
    /// over its declared buffers (A, x, y).
    fn dgemv(&self, i: usize, n: usize, raw: RawCuda<'_>) -> cueflow::Result<()> {
        let h = self.0[i].lock().expect("a thread panicked with a handle");
        let h = *h as cublas::cublasHandle_t;
        let (one, zero) = (1.0f64, 0.0f64);
        let n = n as i32;
        // SAFETY: `h` is a live handle, used by this call alone (its lock is held);
        // `raw.stream` is the operation's live stream; the three addresses are the declared
        // managed buffers (n * n, n and n doubles), which the operation keeps alive until the
        // device is done with them.
        let s = unsafe {
            let s = cublas::cublasSetStream_v2(h, raw.stream as cublas::cudaStream_t);
            if s != cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(blas_error("cublasSetStream", s));
            }
            cublas::cublasDgemv_v2(
                h,
                cublas::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                &one,
                raw.buffers[0] as *const f64,
                n,
                raw.buffers[1] as *const f64,
                1,
                &zero,
                raw.buffers[2] as *mut f64,
                1,
            )
        };
        if s != cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(blas_error("cublasDgemv", s));
        }
        Ok(())
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        for h in &mut self.0 {
            let h = *h.get_mut().expect("a thread panicked with a handle");
            // SAFETY: made by cublasCreate and destroyed once, after the device finished the
            // work enqueued with it (the sample synchronized the device).
            unsafe { cublas::cublasDestroy_v2(h as cublas::cublasHandle_t) };
        }
    }
}

fn execute(
    t: &mut Task,
    tid: usize,
    streams: &[Stream],
    handles: &Arc<Handles>,
) -> Result<(), cueflow::Error> {
    if t.size < 100 {
        println!(
            "Task [{}], thread [{tid}] executing on host ({})",
            t.id, t.size
        );
        // Attach to the host on the spare stream, and wait for the attachments.
        for m in [&t.data, &t.vector, &t.result] {
            streams[0].attach_managed(m, AttachMode::Host)?;
        }
        streams[0].synchronize()?;
        let (a, x) = (t.data.read()?, t.vector.read()?);
        host_gemv(t.size, &a, &x, &mut t.result.write()?);
        t.on_host = true;
    } else {
        println!(
            "Task [{}], thread [{tid}] executing on device ({})",
            t.id, t.size
        );
        let s = &streams[tid + 1];
        for m in [&t.data, &t.vector, &t.result] {
            s.attach_managed(m, AttachMode::Single)?;
        }
        let (n, handles) = (t.size, handles.clone());
        s.external("cublasDgemv")
            .reads_pinned(&t.data)
            .reads_pinned(&t.vector)
            .writes_pinned(&mut t.result)
            .host(move |io| {
                let (ins, mut outs) = io.buffers::<f64>();
                cublas_gemv(n, ins[0], ins[1], outs[0]);
            })
            .cuda(move |raw| handles.dgemv(tid + 1, n, raw))
            .enqueue()?;
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with("UnifiedMemoryStreams", |checks| {
        let dev = device()?;
        if !dev.properties().managed_memory {
            println!("Unified Memory not supported on this device; waiving.");
            return Ok(());
        }
        if dev.properties().compute_mode == ComputeMode::Prohibited {
            println!(
                "This sample requires a device in either default or process exclusive mode; \
                 waiving."
            );
            return Ok(());
        }
        // SAFETY: only probes whether the library loads.
        if on_gpu(&dev) && !unsafe { cublas::is_culib_present() } {
            println!("cuBLAS (libcublas) is not installed; waiving.");
            return Ok(());
        }
        let mut max = if on_gpu(&dev) { 1000 } else { 300 };
        // Never ask for more managed memory than the device has free (a quarter at most).
        let (free, _) = dev.mem_info()?;
        while max > 64 && (TASKS * (max * max + 2 * max) * 8) as u64 > free / 4 {
            max /= 2;
        }
        let streams = (0..=THREADS)
            .map(|_| Stream::new(&dev))
            .collect::<cueflow::Result<Vec<_>>>()?;
        let handles = Arc::new(Handles::create(on_gpu(&dev), THREADS + 1)?);
        let mut rng = Rng(0x1234ABCD330E);
        let mut tasks = Vec::new();
        for id in 0..TASKS {
            let size = ((rng.next() * max as f64) as usize).max(64);
            let mut t = Task {
                id,
                size,
                data: ManagedBuffer::new(&dev, size * size)?,
                vector: ManagedBuffer::new(&dev, size)?,
                result: ManagedBuffer::new(&dev, size)?,
                on_host: false,
            };
            dev.synchronize()?;
            t.data.write()?.iter_mut().for_each(|v| *v = rng.next());
            t.vector.write()?.iter_mut().for_each(|v| *v = rng.next());
            t.result.write()?.fill(0.0);
            tasks.push(Mutex::new(t));
        }
        println!("Executing tasks on host / device");
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| -> Result<(), cueflow::Error> {
            let workers: Vec<_> = (0..THREADS)
                .map(|tid| {
                    let (tasks, next, streams, handles) = (&tasks, &next, &streams, &handles);
                    scope.spawn(move || -> Result<(), cueflow::Error> {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(t) = tasks.get(i) else { return Ok(()) };
                            execute(
                                &mut t.lock().expect("one thread per task"),
                                tid,
                                streams,
                                handles,
                            )?;
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("a worker panicked")?;
            }
            Ok(())
        })?;
        dev.synchronize()?;
        let (mut host, mut device) = (0, 0);
        for t in &tasks {
            let t = t.lock().expect("workers are done");
            let mut want = vec![0.0; t.size];
            let (a, x) = (t.data.read()?, t.vector.read()?);
            if t.on_host {
                host += 1;
                host_gemv(t.size, &a, &x, &mut want);
            } else {
                device += 1;
                cublas_gemv(t.size, &a, &x, &mut want);
            }
            let got = t.result.read()?;
            let (mut err, mut norm) = (0.0f64, 0.0f64);
            for (g, w) in got.iter().zip(&want) {
                err += (g - w) * (g - w);
                norm += w * w;
            }
            let rel = (err / norm).sqrt();
            checks.check(
                rel < 1e-12,
                format_args!("task {} (n = {}): relative error {rel:e}", t.id, t.size),
            );
        }
        println!("{host} tasks ran on the host, {device} on the device");
        drop(handles); // cublasDestroy, after the device finished (synchronized above)
        println!("All Done!");
        Ok(())
    })
}
