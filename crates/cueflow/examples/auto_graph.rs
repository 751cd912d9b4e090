//! Launch-bound programs with and without automatic graphs (SPEC AG1–AG6), beside a graph
//! captured by hand: the twin of `benches/cuda/auto_graph.cu` (raw launches and a raw
//! hand-captured graph of the same programs).
//!
//! - **a** `tiny`: 1,000 tiny kernels per iteration on one stream, then a synchronize;
//! - **b** `jacobi`: two kernels, a reduction, a 4-byte device→host copy and a host check per
//!   iteration (the buffers swap every iteration, so two windows alternate);
//! - **c** `forkjoin`: one stream forks three others with an event, each runs kernels, the
//!   first joins them with events and combines, then a synchronize. Its events are timing-free,
//!   as the raw program's; `forkjoin_timed` runs it with timing events (what `Event::new` makes),
//!   which a replay must keep in their streams' order (AG3, EV6); `forkjoin_joins` writes the
//!   joins with `Stream::wait_stream`, which makes a new event at every call (a signature
//!   names events by place, AG2, so it replays too).
//! - **d** `temporaries`: a stream-ordered temporary per iteration — allocate, copy into it,
//!   scale it, fill the output and add the temporary to it, free it — then a synchronize (a
//!   window names its allocations by place, AG2; the hand-captured graph has allocation and
//!   free nodes, GR7).
//!
//! Each program runs `iters` iterations (default 100) in three modes — `plain` (streams as
//! usual), `auto` (the same calls on streams in automatic-graph mode) and `graph` (one
//! iteration captured once by hand, launched per iteration) — alternating round by round,
//! `rounds` rounds (default 5), every program or only the one named `program`; every result is
//! checked. Prints one line per program and mode (median µs per iteration) and the ratios.
//!
//! ```text
//! cargo run --release -p cueflow --example auto_graph -- [iters] [rounds] [program]
//! CUEFLOW_DEVICE=cuda:0 cargo run --release -p cueflow --example auto_graph
//! ```

use std::time::Instant;

use cueflow::{
    kernels, CaptureMode, Device, DeviceBuffer, Event, EventFlags, GraphExec, Kernel, KernelArgs,
    LaunchConfig, PinnedBuffer, Result, Stream,
};

/// Sum of `x` into `out[0]`, one block (the reduction of the jacobi loop).
const SUM: &str = r#"
extern "C" __global__ void ag_sum(const float* x, float* out, unsigned long long n)
{
    __shared__ float part[256];
    float acc = 0.0f;
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) {
        acc += x[i];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            part[threadIdx.x] += part[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = part[0];
    }
}
"#;

fn sum_kernel() -> Kernel {
    Kernel::new("ag_sum")
        .cuda_source(SUM, "ag_sum")
        .host(|_, args| {
            let x = args.input::<f32>(0);
            args.whole_mut::<f32>(1)[0] = x.iter().sum();
        })
        .build()
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Auto,
    Graph,
}

const MODES: [(Mode, &str); 3] = [
    (Mode::Plain, "plain"),
    (Mode::Auto, "auto"),
    (Mode::Graph, "graph"),
];

fn stream(dev: &Device, mode: Mode) -> Result<Stream> {
    let b = Stream::builder(dev).non_blocking();
    if mode == Mode::Auto {
        b.auto_graph().build()
    } else {
        b.build()
    }
}

/// Device time of one launch of `g` on `s`, in µs, between two timing events (median of
/// `n`): what the device spends on the graph, without the host's launch and synchronize
/// (`benches/cuda/auto_graph.cu` prints the same for the raw graphs).
fn graph_gpu_us(s: &Stream, g: &GraphExec, n: usize) -> Result<f64> {
    let (a, b) = (Event::new(s.device())?, Event::new(s.device())?);
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        s.record_event(&a)?;
        g.launch(s)?;
        s.record_event(&b)?;
        b.synchronize()?;
        t.push(Event::elapsed_ms(&a, &b)? as f64 * 1000.0);
    }
    Ok(median(t))
}

/// Capture `body` on `s` into an instantiated graph.
fn capture(s: &Stream, body: impl FnOnce(&Stream) -> Result<()>) -> Result<GraphExec> {
    s.begin_capture(CaptureMode::ThreadLocal)?;
    body(s)?;
    s.end_capture()?.instantiate()
}

const TINY_KERNELS: usize = 1000;

/// (a): µs per iteration of 1,000 tiny kernels and a synchronize.
fn tiny(dev: &Device, mode: Mode, iters: usize) -> Result<Timed> {
    let s = stream(dev, mode)?;
    let d = DeviceBuffer::from_slice(dev, &[1.0f32; 256])?;
    let body = |s: &Stream| -> Result<()> {
        for _ in 0..TINY_KERNELS {
            kernels::scale(s, &d, 1.0)?;
        }
        Ok(())
    };
    let graph = if mode == Mode::Graph {
        Some(capture(&stream(dev, Mode::Plain)?, body)?)
    } else {
        None
    };
    // The host's share: time until the last call of an iteration returned, before its
    // synchronize (with automatic graphs, the holding of the calls and the parts' launches).
    let enqueue = std::cell::Cell::new(0.0f64);
    let mut iteration = |_| -> Result<()> {
        let e = Instant::now();
        match &graph {
            Some(g) => g.launch(&s)?,
            None => body(&s)?,
        }
        enqueue.set(enqueue.get() + e.elapsed().as_secs_f64());
        s.synchronize()
    };
    per_iteration_us(3, &mut iteration)?; // warm: kernels loaded, the window learned
    enqueue.set(0.0);
    let mut us = counted(dev, iters, || per_iteration_us(iters, &mut iteration))?;
    us.enqueue_us = Some(enqueue.get() * 1e6 / iters as f64);
    if let Some(g) = &graph {
        us.gpu_us = Some(graph_gpu_us(&s, g, 21)?);
    }
    assert_eq!(d.to_vec()?, vec![1.0f32; 256]);
    Ok(us)
}

/// (b): µs per jacobi-style iteration, checking the sum on the host every iteration.
fn jacobi(dev: &Device, mode: Mode, iters: usize, sum: &Kernel) -> Result<Timed> {
    const N: usize = 4096;
    let s = stream(dev, mode)?;
    let bufs = [
        DeviceBuffer::from_slice(dev, &[1.0f32; N])?,
        DeviceBuffer::from_slice(dev, &[1.0f32; N])?,
    ];
    let r = DeviceBuffer::<f32>::new(dev, 1)?;
    let mut host = PinnedBuffer::<f32>::new(dev, 1)?;
    // x_next = 0.5 * x + 0.5 * x_next, then x_next *= 1: stays 1 everywhere; sum = N.
    let step = |s: &Stream, host: &mut PinnedBuffer<f32>, k: usize| -> Result<()> {
        let (x, y) = (&bufs[k % 2], &bufs[(k + 1) % 2]);
        kernels::scale(s, y, 0.5)?;
        kernels::saxpy(s, 0.5, x, y)?;
        s.launch(
            sum,
            LaunchConfig::new(1, 256),
            KernelArgs::new().read(y).write(&r).scalar(N as u64),
        )?;
        s.copy_d2h(host, &r)
    };
    let graphs = if mode == Mode::Graph {
        let c = stream(dev, Mode::Plain)?;
        Some([
            capture(&c, |c| step(c, &mut host, 0))?,
            capture(&c, |c| step(c, &mut host, 1))?,
        ])
    } else {
        None
    };
    let mut iteration = |k: usize| -> Result<()> {
        match &graphs {
            Some(g) => g[k % 2].launch(&s)?,
            None => step(&s, &mut host, k)?,
        }
        let v = host.read()?[0]; // the host check: waits for the copy (MM3)
        assert_eq!(v, N as f32, "jacobi iteration {k}");
        Ok(())
    };
    per_iteration_us(4, &mut iteration)?;
    let mut us = counted(dev, iters, || per_iteration_us(iters, &mut iteration))?;
    if let Some(g) = &graphs {
        us.gpu_us = Some(graph_gpu_us(&s, &g[0], 21)?);
    }
    Ok(us)
}

/// How a fork/join program joins its streams: events made once (timing or timing-free), or
/// `Stream::wait_stream` (a new timing-free event each call).
#[derive(Clone, Copy, PartialEq)]
enum Joins {
    Kept { timing: bool },
    WaitStream,
}

/// (c): µs per fork/join iteration over four streams.
fn forkjoin(dev: &Device, mode: Mode, iters: usize, joins: Joins) -> Result<Timed> {
    const N: usize = 4096;
    let s: Vec<Stream> = (0..4).map(|_| stream(dev, mode)).collect::<Result<_>>()?;
    let flags = EventFlags {
        timing: joins == Joins::Kept { timing: true },
        ..EventFlags::default()
    };
    let ev: Vec<Event> = (0..4)
        .map(|_| Event::with_flags(dev, flags))
        .collect::<Result<_>>()?;
    let src = DeviceBuffer::from_slice(dev, &[1.0f32; N])?;
    let y = DeviceBuffer::<f32>::new(dev, N)?;
    let xs: Vec<DeviceBuffer<f32>> = (0..4)
        .map(|_| DeviceBuffer::<f32>::new(dev, N))
        .collect::<Result<_>>()?;
    let body = |s: &[Stream]| -> Result<()> {
        kernels::scale(&s[0], &src, 1.0)?;
        match joins {
            // Every branch forks off the first stream here, before any joins back.
            Joins::WaitStream => (1..4).try_for_each(|k| s[k].wait_stream(&s[0]))?,
            Joins::Kept { .. } => s[0].record_event(&ev[0])?,
        }
        for k in 1..4 {
            if joins != Joins::WaitStream {
                s[k].wait_event(&ev[0])?;
            }
            kernels::fill(&s[k], &xs[k], 0.0)?;
            kernels::saxpy(&s[k], k as f32, &src, &xs[k])?;
            kernels::scale(&s[k], &xs[k], 1.0)?;
            match joins {
                Joins::WaitStream => s[0].wait_stream(&s[k])?,
                Joins::Kept { .. } => {
                    s[k].record_event(&ev[k])?;
                    s[0].wait_event(&ev[k])?;
                }
            }
        }
        kernels::fill(&s[0], &y, 0.0)?;
        for x in &xs[1..] {
            kernels::saxpy(&s[0], 1.0, x, &y)?;
        }
        Ok(())
    };
    let graph = if mode == Mode::Graph {
        let c: Vec<Stream> = (0..4)
            .map(|_| stream(dev, Mode::Plain))
            .collect::<Result<_>>()?;
        c[0].begin_capture(CaptureMode::ThreadLocal)?;
        body(&c)?;
        Some(c[0].end_capture()?.instantiate()?)
    } else {
        None
    };
    let mut iteration = |_| -> Result<()> {
        match &graph {
            Some(g) => g.launch(&s[0])?,
            None => body(&s)?,
        }
        s[0].synchronize()
    };
    per_iteration_us(3, &mut iteration)?;
    let mut us = counted(dev, iters, || per_iteration_us(iters, &mut iteration))?;
    if let Some(g) = &graph {
        us.gpu_us = Some(graph_gpu_us(&s[0], g, 21)?);
    }
    assert_eq!(y.to_vec()?, vec![6.0f32; N]);
    Ok(us)
}

/// (d): µs per iteration of a step through a stream-ordered temporary.
fn temporaries(dev: &Device, mode: Mode, iters: usize) -> Result<Timed> {
    const N: usize = 4096;
    let s = stream(dev, mode)?;
    let x = DeviceBuffer::from_slice(dev, &[2.0f32; N])?;
    let y = DeviceBuffer::<f32>::new(dev, N)?;
    let body = |s: &Stream| -> Result<()> {
        let tmp = s.alloc_async::<f32>(N)?;
        s.copy_d2d(&tmp, &x)?;
        kernels::scale(s, &tmp, 2.0)?;
        kernels::fill(s, &y, 1.0)?;
        kernels::saxpy(s, 1.0, &tmp, &y)?;
        s.free_async(tmp)
    };
    let graph = if mode == Mode::Graph {
        Some(capture(&stream(dev, Mode::Plain)?, body)?)
    } else {
        None
    };
    let mut iteration = |_| -> Result<()> {
        match &graph {
            Some(g) => g.launch(&s)?,
            None => body(&s)?,
        }
        s.synchronize()
    };
    per_iteration_us(3, &mut iteration)?;
    let mut us = counted(dev, iters, || per_iteration_us(iters, &mut iteration))?;
    if let Some(g) = &graph {
        us.gpu_us = Some(graph_gpu_us(&s, g, 21)?);
    }
    assert_eq!(y.to_vec()?, vec![5.0f32; N]);
    Ok(us)
}

/// µs per iteration of `n` runs of `iteration` (given the iteration's number).
fn per_iteration_us(n: usize, iteration: &mut impl FnMut(usize) -> Result<()>) -> Result<f64> {
    let t = Instant::now();
    for k in 0..n {
        iteration(k)?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// µs per iteration and driver calls per iteration (CUDA; the calling thread's) of `f`, which
/// runs `iters` iterations.
fn counted(dev: &Device, iters: usize, f: impl FnOnce() -> Result<f64>) -> Result<Timed> {
    let before = dev.driver_calls(false).map(|c| c.0);
    let us = f()?;
    let after = dev.driver_calls(false).map(|c| c.0);
    let calls = before
        .zip(after)
        .map(|(b, a)| (a - b) as f64 / iters as f64);
    Ok(Timed {
        us,
        calls,
        gpu_us: None,
        enqueue_us: None,
    })
}

/// One program's run in one mode.
#[derive(Clone, Copy)]
struct Timed {
    us: f64,
    /// Driver calls per iteration (CUDA).
    calls: Option<f64>,
    /// The device's time for one launch of the hand-captured graph (graph mode).
    gpu_us: Option<f64>,
    /// The host's time per iteration until its last call returned (tiny).
    enqueue_us: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| {
        args.get(i)
            .and_then(|a| a.parse::<usize>().ok())
            .unwrap_or(default)
            .max(1)
    };
    let (iters, rounds) = (number(0, 100), number(1, 5));
    // One program only, by name (for profiling one of them).
    let only = args.get(2).cloned();
    let dev = Device::from_env()?;
    let sum = sum_kernel();
    println!(
        "# automatic graphs: {} ({}), {iters} iterations, median of {rounds} rounds, modes alternating",
        dev.properties().name,
        dev.properties().backend
    );
    type Program<'a> = (&'a str, Box<dyn Fn(Mode) -> Result<Timed> + 'a>);
    let kept = |timing| Joins::Kept { timing };
    let programs: [Program; 6] = [
        ("tiny", Box::new(|m| tiny(&dev, m, iters))),
        ("jacobi", Box::new(|m| jacobi(&dev, m, iters, &sum))),
        (
            "forkjoin",
            Box::new(|m| forkjoin(&dev, m, iters, kept(false))),
        ),
        (
            "forkjoin_timed",
            Box::new(|m| forkjoin(&dev, m, iters, kept(true))),
        ),
        (
            "forkjoin_joins",
            Box::new(|m| forkjoin(&dev, m, iters, Joins::WaitStream)),
        ),
        ("temporaries", Box::new(|m| temporaries(&dev, m, iters))),
    ];
    for (name, program) in &programs {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        // AUTO_GRAPH_PROBE_FIRST=graph,plain,graph,...: these modes once each, in this order,
        // before the rounds, with the hand-captured graph's device time after each `graph`
        // (which mode moves the device into its slower state for tiny kernels).
        if let Ok(first) = std::env::var("AUTO_GRAPH_PROBE_FIRST") {
            for label in first.split(',') {
                let Some((mode, _)) = MODES.iter().find(|m| m.1 == label) else {
                    continue;
                };
                let t = program(*mode)?;
                let gpu = t
                    .gpu_us
                    .map_or(String::new(), |g| format!(" graph_gpu_us={g:.2}"));
                println!("PROBE auto_graph program={name} first mode={label}{gpu}");
            }
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
        let mut calls: Vec<Option<f64>> = vec![None; MODES.len()];
        let mut enqueue: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
        let mut gpu = Vec::new();
        for _ in 0..rounds {
            for (i, (mode, _)) in MODES.iter().enumerate() {
                let t = program(*mode)?;
                times[i].push(t.us);
                calls[i] = t.calls;
                enqueue[i].extend(t.enqueue_us);
                gpu.extend(t.gpu_us);
            }
        }
        let med: Vec<f64> = times.into_iter().map(median).collect();
        for (((_, label), us), (calls, enqueue)) in
            MODES.iter().zip(&med).zip(calls.iter().zip(enqueue))
        {
            let calls = calls.map_or(String::new(), |c| format!(" driver_calls_per_iter={c:.1}"));
            let enqueue = if enqueue.is_empty() {
                String::new()
            } else {
                format!(" enqueue_us_per_iter={:.2}", median(enqueue))
            };
            println!(
                "RESULT auto_graph program={name} mode={label} us_per_iter={us:.2}{calls}{enqueue}"
            );
        }
        println!(
            "RATIO auto_graph program={name} plain/auto={:.2} auto/graph={:.3}",
            med[0] / med[1],
            med[1] / med[2]
        );
        println!(
            "PROBE auto_graph program={name} graph_gpu_us={:.2}",
            median(gpu)
        );
    }
    let st = dev.auto_graph_stats();
    println!("# {st:?}");
    Ok(())
}
