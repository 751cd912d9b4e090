//! Port of NVIDIA's `graphMemoryNodes`: `negateSquares` (square an input, negate the squares,
//! with three stream-ordered or graph-allocated temporaries) run six ways — on two streams
//! with events; as a captured graph; as a graph built node by node; and three times with the
//! result's memory handed out by the graph (GR10): freed by the program after the launch (as
//! `cudaFree` frees it), freed by a stream after a second launch, and freed by another graph's
//! free node. Each part checks the result on the host or, where the memory lives on past the
//! graph, on the device (a kernel comparing it with a reference), as the original does. The
//! host arrays are pageable, as the original's `malloc`ed arrays (graph copies take them).
//!
//! The built graph frees its input before it allocates the result, so the result may take
//! the input's address: the port reports it when it does, as the original does, and checks
//! that the handed-out result keeps its address across launches (the original hands the same
//! pointer to the device check and to the free after every launch).

use cueflow::{
    CaptureMode, Device, DeviceBuffer, Event, Graph, GraphExec, Kernel, KernelArgs, LaunchConfig,
    PageableBuffer, Stream,
};
use cueflow_samples::{main_with, on_gpu, Checks};

const THREADS: u32 = 512;
const SOURCE: &str = include_str!("../../kernels/graph_memory_nodes.cu");
const ALLOWED_VARIANCE: f32 = 1.0e-6;

struct Kernels {
    square: Kernel,
    negate: Kernel,
    validate: Kernel,
}

fn kernels() -> Kernels {
    let elementwise = |name: &str, f: fn(f32) -> f32| {
        Kernel::new(name)
            .cuda_source(SOURCE, name)
            .host(move |ctx, a| {
                let input = a.input::<f32>(0);
                let lo = ctx.thread_range().start as usize;
                for (k, out) in a.tile_mut::<f32>(1).iter_mut().enumerate() {
                    *out = f(input[lo + k]);
                }
            })
            .build()
    };
    Kernels {
        square: elementwise("square_array", |x| x * x),
        negate: elementwise("negate_array", |x| -x),
        validate: Kernel::new("validate_on_device")
            .cuda_source(SOURCE, "validate_on_device")
            .host(|ctx, a| {
                let (got, want) = (a.input::<f32>(0), a.input::<f32>(1));
                let n = (a.scalar::<i32>(3) as usize).min(got.len());
                let r = ctx.thread_range();
                let (lo, hi) = ((r.start as usize).min(n), (r.end as usize).min(n));
                if (lo..hi).any(|i| !close(got[i], want[i])) {
                    a.atomics_u32(2)[0].store(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
            .build(),
    }
}

fn close(got: f32, want: f32) -> bool {
    let diff = got - want;
    (diff * diff) / (want * want) <= ALLOWED_VARIANCE
}

/// The sample's host arrays (pageable, as the original's).
struct Host {
    n: usize,
    input: PageableBuffer<f32>,
    square: PageableBuffer<f32>,
    neg_square: PageableBuffer<f32>,
    rng: u64,
}

impl Host {
    fn random(&mut self) -> f32 {
        self.rng = self
            .rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        ((self.rng >> 40) as f32 / (1u64 << 24) as f32).max(1e-3)
    }

    /// The original's reset: fill the outputs with noise.
    fn reset_outputs(&mut self) -> cueflow::Result<()> {
        let noise: Vec<f32> = (0..2 * self.n).map(|_| self.random()).collect();
        self.square.write()?.copy_from_slice(&noise[..self.n]);
        self.neg_square.write()?.copy_from_slice(&noise[self.n..]);
        Ok(())
    }

    fn validate(&self, checks: &mut Checks, part: &str) -> cueflow::Result<()> {
        let (input, neg) = (self.input.read()?, self.neg_square.read()?);
        let bad = (0..self.n)
            .filter(|&i| !close(neg[i], -(input[i] * input[i])))
            .count();
        report(
            checks,
            part,
            bad == 0,
            format!("{bad} of {} elements wrong", self.n),
        );
        Ok(())
    }

    fn blocks(&self) -> u32 {
        self.n.div_ceil(THREADS as usize) as u32
    }
}

fn report(checks: &mut Checks, part: &str, ok: bool, why: String) {
    println!("Validation {}!\n", if ok { "PASSED" } else { "FAILURE" });
    checks.check(ok, format!("{part}: {why}"));
}

fn elementwise(
    h: &Host,
    input: &DeviceBuffer<f32>,
    out: &DeviceBuffer<f32>,
) -> (LaunchConfig, KernelArgs) {
    (
        LaunchConfig::new(h.blocks(), THREADS),
        KernelArgs::new().read(input).write(out).scalar(h.n as i32),
    )
}

/// negateSquares on `s1` and a second stream, with stream-ordered allocations; the result's
/// memory is freed unless `keep` (then it is returned). Captured when `s1` captures.
fn negate_squares_in_stream(
    s1: &Stream,
    h: &mut Host,
    k: &Kernels,
    keep: bool,
) -> cueflow::Result<Option<DeviceBuffer<f32>>> {
    let dev = s1.device();
    let s2 = Stream::builder(dev).non_blocking().build()?;
    let (square_done, negate_done, square_freed) =
        (Event::new(dev)?, Event::new(dev)?, Event::new(dev)?);
    let input = s1.alloc_async::<f32>(h.n)?;
    let square = s1.alloc_async::<f32>(h.n)?;
    s1.copy_h2d(&input, &h.input)?;
    let (cfg, args) = elementwise(h, &input, &square);
    s1.launch(&k.square, cfg, args)?;
    s1.record_event(&square_done)?;
    s2.wait_event(&square_done)?;
    s2.copy_d2h(&mut h.square, &square)?;
    s1.free_async(input)?;
    let neg_square = s1.alloc_async::<f32>(h.n)?;
    let (cfg, args) = elementwise(h, &square, &neg_square);
    s1.launch(&k.negate, cfg, args)?;
    s1.record_event(&negate_done)?;
    s1.copy_d2h(&mut h.neg_square, &neg_square)?;
    let kept = if keep {
        Some(neg_square)
    } else {
        s1.free_async(neg_square)?;
        None
    };
    s2.wait_event(&negate_done)?;
    s2.free_async(square)?;
    s2.record_event(&square_freed)?;
    s1.wait_event(&square_freed)?;
    Ok(kept)
}

/// The same as a graph built node by node; the result's memory is handed out when `keep`.
/// Reports, as the original does, when the result took the freed input's address.
fn negate_squares_graph(
    dev: &Device,
    h: &mut Host,
    k: &Kernels,
    keep: bool,
) -> cueflow::Result<(GraphExec, Option<DeviceBuffer<f32>>)> {
    let mut g = Graph::new(dev);
    let (alloc_input, input) = g.add_alloc::<f32>(&[], h.n)?;
    let (alloc_square, square) = g.add_alloc::<f32>(&[alloc_input], h.n)?;
    let copy_in = g.add_copy_h2d(&[alloc_square], &input, &h.input)?;
    let (cfg, args) = elementwise(h, &input, &square);
    let square_kernel = g.add_kernel(&[copy_in], &k.square, cfg, args)?;
    let copy_square = g.add_copy_d2h(&[square_kernel], &mut h.square, &square)?;
    let free_input = g.add_free(&[square_kernel], &input)?;
    let (alloc_neg, neg_square) = g.add_alloc::<f32>(&[free_input], h.n)?;
    let (cfg, args) = elementwise(h, &square, &neg_square);
    let negate_kernel = g.add_kernel(&[alloc_neg], &k.negate, cfg, args)?;
    g.add_free(&[copy_square, negate_kernel], &square)?;
    let copy_neg = g.add_copy_d2h(&[negate_kernel], &mut h.neg_square, &neg_square)?;
    if !keep {
        g.add_free(&[copy_neg], &neg_square)?;
    }
    // The graph's addresses are fixed once it is instantiated (the original reads them as it
    // adds the allocation nodes).
    let exec = g.instantiate()?;
    if neg_square.device_addr() == input.device_addr() {
        println!("Check verified that d_negSquare and d_input share a virtual address.");
    }
    Ok((exec, keep.then_some(neg_square)))
}

/// The original's validateGPU: compare `got` with the device reference; returns whether it
/// failed (read once the stream is synchronized).
fn validate_on_device(
    s: &Stream,
    k: &Kernels,
    h: &Host,
    got: &DeviceBuffer<f32>,
    want: &DeviceBuffer<f32>,
    failed: &DeviceBuffer<u32>,
) -> cueflow::Result<()> {
    s.launch(
        &k.validate,
        LaunchConfig::new(h.blocks(), THREADS),
        KernelArgs::new()
            .read(got)
            .read(want)
            .atomic(failed)
            .scalar(h.n as i32),
    )
}

fn check_flag(
    s: &Stream,
    failed: &DeviceBuffer<u32>,
    checks: &mut Checks,
    part: &str,
) -> cueflow::Result<()> {
    let flag = s.read_value(failed)?;
    report(
        checks,
        part,
        flag == 0,
        "the device found wrong elements".into(),
    );
    s.write_value(failed, 0)?;
    Ok(())
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let dev = cueflow_samples::device()?;
    let n: usize = if on_gpu(&dev) { 8_000_000 } else { 1 << 20 };
    println!("Setting up sample.");
    let mut h = Host {
        n,
        input: PageableBuffer::new(&dev, n)?,
        square: PageableBuffer::new(&dev, n)?,
        neg_square: PageableBuffer::new(&dev, n)?,
        rng: 0x2545_f491_4f6c_dd1d,
    };
    let data: Vec<f32> = (0..n).map(|_| h.random()).collect();
    h.input.write()?.copy_from_slice(&data);
    h.reset_outputs()?;
    let want: Vec<f32> = data.iter().map(|x| -(x * x)).collect();
    let k = kernels();
    let stream = Stream::builder(&dev).non_blocking().build()?;
    let reference = DeviceBuffer::<f32>::new(&dev, n)?;
    stream.write_pageable(&reference, &want)?;
    let failed = DeviceBuffer::<u32>::new(&dev, 1)?;
    stream.write_value(&failed, 0)?;
    println!("Setup complete.\n");

    println!("Running negateSquares in a stream.");
    negate_squares_in_stream(&stream, &mut h, &k, false)?;
    stream.synchronize()?;
    println!("Validating negateSquares in a stream...");
    h.validate(checks, "in a stream")?;
    h.reset_outputs()?;

    println!("Running negateSquares in a stream-captured graph.");
    let cap = Stream::builder(&dev).non_blocking().build()?;
    cap.begin_capture(CaptureMode::Global)?;
    negate_squares_in_stream(&cap, &mut h, &k, false)?;
    let exec = cap.end_capture()?.instantiate()?;
    exec.launch(&stream)?;
    stream.synchronize()?;
    println!("Validating negateSquares in a stream-captured graph...");
    h.validate(checks, "stream-captured graph")?;
    h.reset_outputs()?;

    println!("Running negateSquares in an explicitly constructed graph.");
    let (exec, _) = negate_squares_graph(&dev, &mut h, &k, false)?;
    exec.launch(&stream)?;
    stream.synchronize()?;
    println!("Validating negateSquares in an explicitly constructed graph...");
    h.validate(checks, "explicit graph")?;
    h.reset_outputs()?;

    // The result's memory outlives each launch from here on (GR10).
    println!("Running negateSquares with d_negSquare freed outside the stream.");
    let (exec, kept) = negate_squares_graph(&dev, &mut h, &k, true)?;
    let neg_square = kept.expect("the graph hands out its result");
    let addr = neg_square.device_addr();
    checks.check(addr != 0, "the handed-out result has an address");
    exec.launch(&stream)?;
    validate_on_device(&stream, &k, &h, &neg_square, &reference, &failed)?;
    // cudaFree is synchronous: the stream is synchronized first, as the original does.
    stream.synchronize()?;
    neg_square.clone().free()?;
    println!("Validating negateSquares with d_negSquare freed outside the stream...");
    h.validate(checks, "freed outside the stream")?;
    check_flag(
        &stream,
        &failed,
        checks,
        "freed outside the stream (device check)",
    )?;
    h.reset_outputs()?;

    println!("Running negateSquares with d_negSquare freed outside the graph.");
    exec.launch(&stream)?;
    checks.eq(
        neg_square.device_addr(),
        addr,
        "d_negSquare's address at a relaunch",
    );
    validate_on_device(&stream, &k, &h, &neg_square, &reference, &failed)?;
    stream.free_async(neg_square.clone())?;
    stream.synchronize()?;
    println!("Validating negateSquares with d_negSquare freed outside the graph...");
    check_flag(&stream, &failed, checks, "freed outside the graph")?;
    h.reset_outputs()?;

    println!("Running negateSquares with d_negSquare freed in a different graph.");
    let mut free_graph = Graph::new(&dev);
    free_graph.add_free(&[], &neg_square)?;
    let free_exec = free_graph.instantiate()?;
    exec.launch(&stream)?;
    checks.eq(
        neg_square.device_addr(),
        addr,
        "d_negSquare's address at a relaunch",
    );
    validate_on_device(&stream, &k, &h, &neg_square, &reference, &failed)?;
    free_exec.launch(&stream)?;
    stream.synchronize()?;
    println!("Validating negateSquares with d_negSquare freed in a different graph...");
    check_flag(&stream, &failed, checks, "freed in a different graph")?;
    println!("Cleaning up sample.");
    Ok(())
}

fn main() -> std::process::ExitCode {
    main_with("graphMemoryNodes", run)
}
