//! A port of NVIDIA's `simpleMultiCopy` sample: a frame loop that overlaps uploading the next
//! frame, processing the current one and downloading it, over four (blocking) streams. Each
//! stream owns a pinned input and output frame and a device pair; per iteration the host waits
//! for the next stream's previous cycle (`cycleDone`, an event, EV5), then launches the kernel
//! on the current stream, uploads the next frame on the next stream and downloads the current
//! one (CP2: pinned memory, asynchronous copies), and records the current stream's cycle event.
//! Timing events sit on the legacy default stream, which waits for every blocking stream
//! (ST4). The loop runs once over one stream (fully serialized) and once over four.
//!
//! What it checks, as the original: every element of every output frame is 1 (each input is
//! zeros, the kernel adds one). Beyond the original, on a GPU with two copy engines it checks
//! what the sample demonstrates: the four-stream loop took less time than the serialized one.
//!
//! Host backend and GPU differ: frames are 2^20 ints on the host backend (2^22 on a GPU, as the
//! original), and the timings are printed, not checked.
//!
//! ```text
//! cargo run --release -p cueflow-samples --bin simple_multi_copy
//! ```

use std::process::ExitCode;

use cueflow::{
    Device, DeviceBuffer, Event, Kernel, KernelArgs, LaunchConfig, PinnedBuffer, Stream,
};
use cueflow_samples::{device, main_with, on_gpu, Checks};

const SOURCE: &str = include_str!("../../kernels/simple_multi_copy.cu");
const STREAM_COUNT: usize = 4;
const NREPS: usize = 10;
const INNER_REPS: i32 = 5;
const BLOCK: u32 = 512;

/// `inc_kernel(out, in, N, inner_reps)`; on the host backend a closure over each block's tile.
fn inc_kernel() -> Kernel {
    Kernel::new("inc_kernel")
        .cuda_source(SOURCE, "inc_kernel")
        .host(|ctx, args| {
            let input = args.input::<i32>(1);
            let reps: i32 = args.scalar(3);
            let lo = ctx.thread_range().start as usize;
            for (k, out) in args.tile_mut::<i32>(0).iter_mut().enumerate() {
                for _ in 0..reps {
                    *out = input[lo + k] + 1;
                }
            }
        })
        .build()
}

/// CUDA cores per multiprocessor by compute capability (as the samples' helper prints them).
fn cores_per_mp((major, minor): (u32, u32)) -> u32 {
    match (major, minor) {
        (6, 0) | (7, _) | (8, 0) => 64,
        (6, _) => 128,
        _ => 128,
    }
}

/// The frames, streams and events of the loop.
struct Frames {
    n: i32,
    grid: (u32, u32),
    h_in: Vec<PinnedBuffer<i32>>,
    d_in: Vec<DeviceBuffer<i32>>,
    h_out: Vec<PinnedBuffer<i32>>,
    d_out: Vec<DeviceBuffer<i32>>,
    streams: Vec<Stream>,
    cycle_done: Vec<Event>,
    legacy: Stream,
    start: Event,
    stop: Event,
}

impl Frames {
    fn new(dev: &Device, n: usize) -> cueflow::Result<Frames> {
        let thread_blocks = (n as u32) / BLOCK;
        let mut f = Frames {
            n: n as i32,
            grid: (thread_blocks % 65535, thread_blocks / 65535 + 1),
            h_in: Vec::new(),
            d_in: Vec::new(),
            h_out: Vec::new(),
            d_out: Vec::new(),
            streams: Vec::new(),
            cycle_done: Vec::new(),
            legacy: Stream::legacy(dev),
            start: Event::new(dev)?,
            stop: Event::new(dev)?,
        };
        for _ in 0..STREAM_COUNT {
            f.h_in.push(PinnedBuffer::new(dev, n)?);
            let d_in = DeviceBuffer::new(dev, n)?;
            f.legacy.memset(&d_in, 0)?;
            f.d_in.push(d_in);
            f.h_out.push(PinnedBuffer::new(dev, n)?);
            f.d_out.push(DeviceBuffer::new(dev, n)?);
            let s = Stream::new(dev)?;
            let done = Event::new(dev)?;
            s.record_event(&done)?;
            f.streams.push(s);
            f.cycle_done.push(done);
        }
        Ok(f)
    }

    fn launch(&self, s: &Stream, k: &Kernel, i: usize) -> cueflow::Result<()> {
        s.launch(
            k,
            LaunchConfig::new(self.grid, BLOCK),
            KernelArgs::new()
                .write(&self.d_out[i])
                .read(&self.d_in[i])
                .scalar(self.n)
                .scalar(INNER_REPS),
        )
    }

    /// Milliseconds between `start` and `stop` recorded on the legacy stream around `work`.
    fn timed(
        &mut self,
        work: impl FnOnce(&mut Self) -> cueflow::Result<()>,
    ) -> cueflow::Result<f32> {
        self.legacy.record_event(&self.start)?;
        work(self)?;
        self.legacy.record_event(&self.stop)?;
        self.stop.synchronize()?;
        Event::elapsed_ms(&self.start, &self.stop)
    }

    /// The frame loop over `streams_used` streams, `NREPS` times; its milliseconds.
    fn process_with_streams(&mut self, k: &Kernel, streams_used: usize) -> cueflow::Result<f32> {
        self.legacy.record_event(&self.start)?;
        let mut current = 0;
        for _ in 0..NREPS {
            let next = (current + 1) % streams_used;
            // The next stream's previous cycle (its upload's target, its download's source).
            self.cycle_done[next].synchronize()?;
            self.launch(&self.streams[current], k, current)?;
            self.streams[next].copy_h2d(&self.d_in[next], &self.h_in[next])?;
            self.streams[current].copy_d2h(&mut self.h_out[current], &self.d_out[current])?;
            self.streams[current].record_event(&self.cycle_done[current])?;
            current = next;
        }
        self.legacy.record_event(&self.stop)?;
        self.legacy.device().synchronize()?;
        Event::elapsed_ms(&self.start, &self.stop)
    }
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    println!("[simpleMultiCopy] - Starting...");
    let dev = device()?;
    let props = dev.properties().clone();
    let cores = cores_per_mp(props.compute_capability);
    let all_cores = cores * props.compute_units;
    println!(
        "[{}] has {} MP(s) x {cores} (Cores/MP) = {all_cores} (Cores)",
        props.name, props.compute_units
    );
    let scale_factor = (32.0 / all_cores as f32).max(1.0);
    let base: usize = if on_gpu(&dev) { 1 << 22 } else { 1 << 20 };
    let n = (base as f32 / scale_factor) as usize;
    let (major, minor) = props.compute_capability;
    println!("> Device name: {}", props.name);
    println!(
        "> CUDA Capability {major}.{minor} hardware with {} multi-processors",
        props.compute_units
    );
    println!("> scale_factor = {:.2}", 1.0 / scale_factor);
    println!("> array_size   = {n}\n");
    let memsize = (n * 4) as f32;

    let mut f = Frames::new(&dev, n)?;
    for h in &mut f.h_in {
        h.write()?.fill(0); // init(): every input frame is the (zero) source
    }
    let k = inc_kernel();
    k.prepare(&dev)?;
    f.launch(&f.legacy, &k, 0)?; // warm-up

    let h2d = f.timed(|f| f.legacy.copy_h2d(&f.d_in[0], &f.h_in[0]))?;
    let d2h = f.timed(|f| f.legacy.copy_d2h(&mut f.h_out[0], &f.d_out[0]))?;
    let kernel = f.timed(|f| f.launch(&f.legacy, &k, 0))?;

    println!("\nRelevant properties of this CUDA device");
    let mark = |b: bool| if b { "X" } else { " " };
    println!(
        "({}) Can overlap one CPU<>GPU data transfer with GPU kernel execution (device property \
         \"cudaDevAttrGpuOverlap\")",
        mark(props.async_engines > 0)
    );
    let two_copies = major >= 2 && props.async_engines > 1;
    println!(
        "({}) Can overlap two CPU<>GPU data transfers with GPU kernel execution\n    (Compute \
         Capability >= 2.0 AND (Tesla product OR Quadro 4000/5000/6000/K5000)",
        mark(two_copies)
    );
    println!("\nMeasured timings (throughput):");
    println!(
        " Memcpy host to device\t: {h2d} ms ({} GB/s)",
        memsize * 1e-6 / h2d
    );
    println!(
        " Memcpy device to host\t: {d2h} ms ({} GB/s)",
        memsize * 1e-6 / d2h
    );
    println!(
        " Kernel\t\t\t: {kernel} ms ({} GB/s)",
        INNER_REPS as f32 * memsize * 2e-6 / kernel
    );
    println!("\nTheoretical limits for speedup gained from overlapped data transfers:");
    println!(
        "No overlap at all (transfer-kernel-transfer): {} ms ",
        h2d + d2h + kernel
    );
    println!(
        "Compute can overlap with one transfer: {} ms",
        (h2d + d2h).max(kernel)
    );
    println!(
        "Compute can overlap with both data transfers: {} ms",
        h2d.max(d2h).max(kernel)
    );

    let serial = f.process_with_streams(&k, 1)?;
    let overlap = f.process_with_streams(&k, STREAM_COUNT)?;
    let reps = NREPS as f32;
    println!("\nAverage measured timings over {NREPS} repetitions:");
    println!(
        " Avg. time when execution fully serialized\t: {} ms",
        serial / reps
    );
    println!(
        " Avg. time when overlapped using {STREAM_COUNT} streams\t: {} ms",
        overlap / reps
    );
    println!(
        " Avg. speedup gained (serialized - overlapped)\t: {} ms",
        (serial - overlap) / reps
    );
    println!("\nMeasured throughput:");
    println!(
        " Fully serialized execution\t\t: {} GB/s",
        reps * memsize * 2e-6 / serial
    );
    println!(
        " Overlapped using {STREAM_COUNT} streams\t\t: {} GB/s",
        reps * memsize * 2e-6 / overlap
    );

    let mut wrong = 0usize;
    for (j, h) in f.h_out.iter().enumerate() {
        let bad = h.read()?.iter().filter(|&&v| v != 1).count();
        checks.eq(
            bad,
            0,
            format_args!("elements of output frame {j} that are not 1"),
        );
        wrong += bad;
    }
    if wrong == 0 && on_gpu(&dev) && two_copies {
        checks.check(
            overlap < serial,
            format_args!(
                "{STREAM_COUNT} streams took {overlap:.3} ms, under serialized {serial:.3} ms"
            ),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with("simpleMultiCopy", run)
}
