//! Port of NVIDIA's simpleCallback: 8 workloads of the form "CPU preprocess → device process →
//! CPU postprocess" spread over every device. For each workload a launcher thread fills a
//! portable pinned buffer (`cudaHostAllocPortable`), enqueues upload, increment kernel and
//! download on a stream of its device, then a host function (`cudaStreamAddCallback`) that
//! hands the results to a new postprocessing thread, which checks them and frees the
//! workload's resources; the main thread waits for all 8. The check is the original's
//! (element `i` is `id + i + 1`), over every element rather than the original's first 8.
//!
//! Portable memory (HM2): the host buffers are allocated up front by the main thread on the
//! first device and used by the streams of every device (the original allocates each on its
//! workload's device, portable, in the launcher thread).
//!
//! Devices: every device `CUEFLOW_DEVICE` names (`host:2x`, `cuda:0,cuda:1`, one device).

use std::process::ExitCode;
use std::sync::mpsc;

use cueflow::{DeviceBuffer, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, PinnedFlags, Stream};
use cueflow_samples::{devices, main_with};

const SOURCE: &str = include_str!("../../kernels/simple_callback.cu");
const WORKLOADS: usize = 8;
const ELEMENTS: usize = 100_000;

fn inc_kernel() -> Kernel {
    Kernel::new("inc_kernel")
        .host(|_, args| {
            for x in args.tile_mut::<i32>(0) {
                *x += 1;
            }
        })
        .cuda_source(SOURCE, "inc_kernel")
        .build()
}

/// One workload, moved from its launcher thread through the host function to its
/// postprocessing thread.
struct Workload {
    id: usize,
    host: PinnedBuffer<i32>,
    data: DeviceBuffer<i32>,
    stream: Stream,
}

/// Check the results on the host, free the resources, report.
fn postprocess(w: Workload, done: mpsc::Sender<(usize, Result<bool, String>)>) {
    let id = w.id;
    let outcome = w
        .host
        .read()
        .map(|h| h.iter().enumerate().all(|(i, &v)| v == (id + i + 1) as i32))
        .map_err(|e| e.to_string());
    drop(w); // stream, device memory and pinned memory go here (cudaFree, cudaFreeHost, ...)
    let _ = done.send((id, outcome));
}

/// Fill, then enqueue upload → kernel → download → host function on the workload's stream.
fn launch(
    mut w: Workload,
    kernel: Kernel,
    done: mpsc::Sender<(usize, Result<bool, String>)>,
) -> cueflow::Result<()> {
    for (i, x) in w.host.write()?.iter_mut().enumerate() {
        *x = (w.id + i) as i32;
    }
    let s = w.stream.clone();
    s.copy_h2d(&w.data, &w.host)?;
    s.launch(
        &kernel,
        LaunchConfig::new(ELEMENTS.div_ceil(512) as u32, 512),
        KernelArgs::new().write(&w.data).scalar(ELEMENTS as i32),
    )?;
    s.copy_d2h(&mut w.host, &w.data)?;
    // The callback: once the stream's work is done, a new CPU thread takes over.
    s.host_fn_once(move || {
        std::thread::spawn(move || postprocess(w, done));
    })
}

fn main() -> ExitCode {
    main_with("simpleCallback", |checks| {
        println!("Starting simpleCallback");
        let devs = devices()?;
        println!("Found {} devices", devs.len());
        for d in &devs {
            let (major, minor) = d.properties().compute_capability;
            println!(
                "{} {} supports SM {major}.{minor}, capable GPU Callback Functions",
                d.spec(),
                d.properties().name
            );
        }
        let kernel = inc_kernel();
        let (tx, rx) = mpsc::channel();
        println!("Starting {WORKLOADS} heterogeneous computing workloads");
        let mut launchers = Vec::new();
        for id in 0..WORKLOADS {
            let device = devs[id % devs.len()].clone();
            let host = PinnedBuffer::<i32>::with_flags(
                &devs[0],
                ELEMENTS,
                PinnedFlags::default().portable(),
            )?;
            let w = Workload {
                id,
                data: DeviceBuffer::new(&device, ELEMENTS)?,
                stream: Stream::new(&device)?,
                host,
            };
            let (k, tx) = (kernel.clone(), tx.clone());
            launchers.push(std::thread::spawn(move || launch(w, k, tx)));
        }
        drop(tx);
        for l in launchers {
            l.join().map_err(|_| "a launcher thread panicked")??;
        }
        let mut finished = 0;
        for (id, outcome) in rx {
            finished += 1;
            match outcome {
                Ok(ok) => checks.check(
                    ok,
                    format_args!("workload {id}: every element is id + i + 1"),
                ),
                Err(e) => checks.check(false, format_args!("workload {id}: {e}")),
            }
        }
        println!("Total of {finished} workloads finished:");
        checks.eq(finished, WORKLOADS, "workloads finished");
        println!(
            "{}",
            if checks.all_passed() {
                "Success"
            } else {
                "Failure"
            }
        );
        Ok(())
    })
}
