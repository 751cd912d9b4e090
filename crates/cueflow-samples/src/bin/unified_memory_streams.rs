//! Port of NVIDIA's UnifiedMemoryStreams: 40 tasks, each a matrix-vector product (DGEMV)
//! of random size over managed memory (`cudaMallocManaged`), consumed by 4 threads. A small
//! task (n < 100) runs on the host: its memory is attached to the host on a spare stream
//! (`cudaStreamAttachMemAsync(…, cudaMemAttachHost)`) and that stream synchronized first, so
//! the host may touch it while the device runs other tasks. A large one runs on the device,
//! on its thread's stream, after attaching its memory to that stream alone
//! (`cudaMemAttachSingle`).
//!
//! The original prints "All Done!" and checks nothing; this port also checks every task's
//! result against a host DGEMV (relative error below 1e-12). The device operation is a CUDA C
//! kernel in place of cuBLAS (a Rust closure on the host backend). Sizes: the original's
//! 64..1000 on a GPU with enough free memory; 64..300 on the host backend.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cueflow::{AttachMode, Kernel, KernelArgs, LaunchConfig, ManagedBuffer, Stream};
use cueflow_samples::{device, main_with, on_gpu};

const SOURCE: &str = include_str!("../../kernels/unified_memory_streams.cu");
const TASKS: usize = 40;
const THREADS: usize = 4;

fn gemv_kernel() -> Kernel {
    Kernel::new("gemv")
        .host(|ctx, args| {
            let (a, x) = (args.input::<f64>(0), args.input::<f64>(1));
            let n: i32 = args.scalar(3);
            let n = n as usize;
            let lo = ctx.thread_range().start as usize;
            for (k, r) in args.tile_mut::<f64>(2).iter_mut().enumerate() {
                let row = lo + k;
                *r = (0..n).map(|j| a[row * n + j] * x[j]).sum();
            }
        })
        .cuda_source(SOURCE, "gemv")
        .build()
}

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

/// result = A x on the host.
fn host_gemv(n: usize, a: &[f64], x: &[f64], result: &mut [f64]) {
    for (i, r) in result.iter_mut().enumerate() {
        *r = (0..n).map(|j| a[i * n + j] * x[j]).sum();
    }
}

fn execute(
    t: &mut Task,
    tid: usize,
    streams: &[Stream],
    kernel: &Kernel,
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
        s.launch(
            kernel,
            LaunchConfig::for_elements(t.size, 128),
            KernelArgs::new()
                .read_mapped(&t.data)
                .read_mapped(&t.vector)
                .write_mapped(&mut t.result)
                .scalar(t.size as i32),
        )?;
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
        let mut max = if on_gpu(&dev) { 1000 } else { 300 };
        // Never ask for more managed memory than the device has free (a quarter at most).
        let (free, _) = dev.mem_info()?;
        while max > 64 && (TASKS * (max * max + 2 * max) * 8) as u64 > free / 4 {
            max /= 2;
        }
        let streams = (0..=THREADS)
            .map(|_| Stream::new(&dev))
            .collect::<cueflow::Result<Vec<_>>>()?;
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
        let kernel = gemv_kernel();
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| -> Result<(), cueflow::Error> {
            let workers: Vec<_> = (0..THREADS)
                .map(|tid| {
                    let (tasks, next, streams, kernel) = (&tasks, &next, &streams, &kernel);
                    scope.spawn(move || -> Result<(), cueflow::Error> {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(t) = tasks.get(i) else { return Ok(()) };
                            execute(
                                &mut t.lock().expect("one thread per task"),
                                tid,
                                streams,
                                kernel,
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
            if t.on_host {
                host += 1;
            } else {
                device += 1;
            }
            let mut want = vec![0.0; t.size];
            host_gemv(t.size, &t.data.read()?, &t.vector.read()?, &mut want);
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
        println!("All Done!");
        Ok(())
    })
}
