//! Port of NVIDIA's `cudaGraphsPerfScaling` (`graphs_perf_scaling`): what a graph of `length × width` empty kernels
//! (`width` chains of `length`, forked from and joined into one stream by an event, captured)
//! costs to capture, instantiate, launch the first time and again, in an idle stream and in a
//! busy one, and to upload off the critical path (GR1, GR3).
//!
//! A busy stream is one held by a kernel that spins on a latch the host sets once it has
//! enqueued the launch: a [`HostFlag`] (HM7), the original's `volatile int` in mapped pinned
//! memory. The device-side times are then of the launch alone, between two timing events
//! around it. `blockingKernelTimeoutDetected` says the latch came too late (the kernel gave up
//! after its timeout, as the original's does) and the busy-stream figure is of a stream that
//! had drained; the original prints it and goes on, and so does the port.
//!
//! ```text
//! graphs_perf_scaling [outputFmt] [numTrials] [length] [width] [pattern] [stride] [maxLength]
//! ```
//! Arguments as the original's (`0` prints the usage). The checks the port adds: the latch
//! releases a kernel the host holds with it, and each captured graph has `length × width`
//! kernels (one more with `pattern` 1). `GPS_DEBUG=1` also prints, per trial, how long the
//! upload step's calls took between holding stream 0 and the upload, and whether stream 0's
//! hold timed out (the original reports stream 1's only). That line found a later trial's
//! calls paying for the previous trial's graph destroy (GR4), since fixed.

use std::time::Instant;

use cueflow::{
    CaptureMode, Device, Event, EventFlags, Graph, GraphExec, HostFlag, Kernel, KernelArgs,
    LaunchConfig, PinnedBuffer, PinnedFlags, Stream,
};
use cueflow_samples::{main_with, Checks};

const SOURCE: &str = include_str!("../../kernels/graphs_perf_scaling.cu");

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The original's command line.
#[derive(Clone, Copy)]
struct Args {
    output_fmt: i64,
    trials: i64,
    length: i64,
    width: i64,
    pattern: i64,
    stride: i64,
    max_length: i64,
}

impl Args {
    fn parse() -> Res<Args> {
        let a: Vec<String> = std::env::args().skip(1).collect();
        let at = |i: usize, d: i64| -> Res<i64> {
            Ok(match a.get(i) {
                Some(s) => s
                    .parse()
                    .map_err(|_| format!("argument {}: {s:?}", i + 1))?,
                None => d,
            })
        };
        let length = at(2, 20)?;
        Ok(Args {
            output_fmt: at(0, 3)?,
            trials: at(1, 1)?,
            length,
            width: at(3, 1)?,
            pattern: at(4, 0)?,
            stride: at(5, 1)?,
            max_length: at(6, length)?.max(length),
        })
    }

    fn valid(&self) -> bool {
        self.length > 0
            && self.width > 0
            && (1..=5).contains(&self.output_fmt)
            && (0..=1).contains(&self.pattern)
            && self.trials > 0
            && self.stride > 0
    }
}

fn usage() {
    println!("programName [outputFmt] [numTrials] [length] [width] [pattern] [stride] [maxLength]");
    println!("\toutputFmt - program output, default=3 (see below)");
    println!("\tnumTrials (per length)");
    println!("\tstarting length of the topology");
    println!("\twidth - width of the graph topology");
    println!("\tpattern - Structure of graph, default=0 (see below)");
    println!("\tstride - how to grow the length between each set of trials");
    println!("\tmaxLength - maximum length to try");
    println!("\noutputFmt can be:");
    println!("\t0: this help message\n\t1: csv data headers\n\t2: per trial csv data");
    println!(
        "\t3: csv data & headers\n\t4: csv data is printed and trials are averaged for each length"
    );
    println!(
        "\t5: csv data is printed and trials are averaged for each length and headers are printed"
    );
    println!("\nPattern can be:\n\t0: No interconnect between branches");
    println!("\t1: Adds an extra root node before the initial fork");
}

/// A kernel of the `.cu` file that does nothing (on the host backend, a closure).
fn nothing(name: &str) -> Kernel {
    Kernel::new(name)
        .cuda_source(SOURCE, name)
        .host(|_, _| {})
        .build()
}

/// `wait_with_timeout(timeout_ns, timed_out, elapsed, latch)`; on the host backend a closure
/// that spins the same way on the flag's atomic word.
fn wait_with_timeout() -> Kernel {
    Kernel::new("wait_with_timeout")
        .cuda_source(SOURCE, "wait_with_timeout")
        .host(|_, a| {
            let timeout_ns: i64 = a.scalar(0);
            let latch = &a.atomics_u32(3)[0];
            let start = Instant::now();
            let released = || latch.load(std::sync::atomic::Ordering::Acquire) != 0;
            while (start.elapsed().as_nanos() as i64) < timeout_ns && !released() {
                std::hint::spin_loop();
            }
            a.tile_mut::<i64>(2)[0] = start.elapsed().as_nanos() as i64;
            a.tile_mut::<u32>(1)[0] = u32::from(!released());
        })
        .build()
}

/// What a held kernel reports back: whether it timed out, and how long it waited (ns), in
/// mapped memory it writes.
struct WaitReport {
    timed_out: PinnedBuffer<u32>,
    elapsed: PinnedBuffer<i64>,
}

impl WaitReport {
    fn new(dev: &Device) -> Res<WaitReport> {
        let mapped = PinnedFlags::default().mapped();
        Ok(WaitReport {
            timed_out: PinnedBuffer::with_flags(dev, 1, mapped)?,
            elapsed: PinnedBuffer::with_flags(dev, 1, mapped)?,
        })
    }

    fn timed_out(&self) -> Res<bool> {
        Ok(self.timed_out.read()?[0] != 0)
    }
}

/// The objects of a run: streams, events, the latches and the kernels.
struct Demo {
    streams: Vec<Stream>,
    event: Event,
    timing: [Event; 2],
    latch: HostFlag,
    latch2: HostFlag,
    report: WaitReport,
    report2: WaitReport,
    empty: Kernel,
    wait: Kernel,
    pre_upload: Kernel,
    post_upload: Kernel,
}

/// One trial's metrics, named as the original names them.
type Metrics = Vec<(&'static str, f64)>;

fn us(since: Instant) -> f64 {
    since.elapsed().as_nanos() as f64 / 1000.0
}

impl Demo {
    fn new(dev: &Device, width: usize) -> Res<Demo> {
        // The demo needs two streams even if the capture needs one.
        let streams = (0..width.max(2))
            .map(|_| Stream::new(dev))
            .collect::<cueflow::Result<_>>()?;
        let untimed = EventFlags {
            timing: false,
            ..EventFlags::default()
        };
        Ok(Demo {
            streams,
            event: Event::with_flags(dev, untimed)?,
            timing: [Event::new(dev)?, Event::new(dev)?],
            latch: HostFlag::new(dev)?,
            latch2: HostFlag::new(dev)?,
            report: WaitReport::new(dev)?,
            report2: WaitReport::new(dev)?,
            empty: nothing("empty"),
            wait: wait_with_timeout(),
            pre_upload: nothing("pre_upload_annotation"),
            post_upload: nothing("post_upload_annotation"),
        })
    }

    fn one(&self, s: &Stream, k: &Kernel) -> cueflow::Result<()> {
        s.launch(k, LaunchConfig::new(1, 1), KernelArgs::new())
    }

    /// Hold stream `s` until latch 1 (or 2) is set or `timeout_ns` passed, reporting into
    /// report 1 (or 2).
    fn hold(&mut self, s: usize, timeout_ns: i64, second: bool) -> Res<()> {
        let (latch, report) = if second {
            (&self.latch2, &mut self.report2)
        } else {
            (&self.latch, &mut self.report)
        };
        let args = KernelArgs::new()
            .scalar(timeout_ns)
            .write_mapped(&mut report.timed_out)
            .write_mapped(&mut report.elapsed)
            .flag(latch);
        self.streams[s].launch(&self.wait, LaunchConfig::new(1, 1), args)?;
        Ok(())
    }

    /// createParallelChain: `width` chains of `length` empty kernels, forked from stream 0 by
    /// an event and joined back into it, captured.
    fn parallel_chain(&self, length: usize, width: usize, single_entry: bool) -> Res<Graph> {
        let s = &self.streams;
        s[0].begin_capture(CaptureMode::Global)?;
        if single_entry {
            self.one(&s[0], &self.empty)?;
        }
        s[0].record_event(&self.event)?;
        for si in &s[1..width] {
            si.wait_event(&self.event)?;
        }
        for si in &s[..width] {
            for _ in 0..length {
                self.one(si, &self.empty)?;
            }
        }
        for si in &s[1..width] {
            si.record_event(&self.event)?;
            s[0].wait_event(&self.event)?;
        }
        Ok(s[0].end_capture()?)
    }
}

/// The latch works: a kernel held with a long timeout is still waiting after a pause, and the
/// host's store lets it go well before the timeout (the port's check of what every busy-stream
/// figure rests on).
fn check_latch(d: &mut Demo, c: &mut Checks) -> Res<()> {
    const PATIENCE_NS: i64 = 10_000_000_000;
    d.hold(0, PATIENCE_NS, false)?;
    std::thread::sleep(std::time::Duration::from_millis(20));
    let held = !d.streams[0].query()?;
    d.latch.store(1);
    d.streams[0].synchronize()?;
    d.latch.store(0);
    let waited = d.report.elapsed.read()?[0];
    c.check(held, "a kernel waiting on the latch holds its stream");
    c.check(
        !d.report.timed_out()? && waited < PATIENCE_NS,
        format!("the host's store released the held kernel (it waited {waited} ns)"),
    );
    Ok(())
}

/// runDemo: one trial's metrics for `graph`.
fn run_demo(d: &mut Demo, graph: &Graph, length: i64, width: i64) -> Res<Metrics> {
    let mut m: Metrics = Vec::new();
    let s0 = 0;
    let t = Instant::now();
    let mut exec: GraphExec = graph.instantiate()?;
    m.push(("instantiation", us(t)));
    for (api, total) in [
        ("first_launch_api", "first_launch_total"),
        ("repeat_launch_api", "repeat_launch_total"),
    ] {
        let t = Instant::now();
        exec.launch(&d.streams[s0])?;
        m.push((api, us(t)));
        d.streams[s0].synchronize()?;
        m.push((total, us(t)));
    }
    // A fresh instantiation: the first launch into a busy stream, then a repeat one.
    exec = graph.instantiate()?;
    let nodes = length * width;
    for device in ["first_launch_device", "repeat_launch_device"] {
        d.hold(s0, 4000 + 500 * nodes, false)?;
        let s = &d.streams[s0];
        d.timing[0].record(s)?;
        exec.launch(s)?;
        d.timing[1].record(s)?;
        d.latch.store(1);
        s.synchronize()?;
        m.push((
            device,
            Event::elapsed_ms(&d.timing[0], &d.timing[1])? as f64 * 1000.0,
        ));
        m.push((
            "blockingKernelTimeoutDetected",
            d.report.timed_out()? as u8 as f64,
        ));
        d.latch.store(0);
    }
    // A fresh instantiation again, uploaded on stream 1 while stream 0 is held, then
    // launched on stream 0 once the upload is done.
    exec = graph.instantiate()?;
    let held_at = Instant::now();
    d.hold(s0, 4000 + 1000 * nodes, true)?;
    d.hold(1, 2000 + 500 * nodes, false)?;
    let (a, b) = (&d.streams[0], &d.streams[1]);
    d.one(b, &d.pre_upload)?;
    d.timing[0].record(a)?;
    let before_upload = us(held_at);
    let t = Instant::now();
    exec.upload(b)?;
    let upload_api = us(t);
    d.event.record(b)?;
    d.timing[1].record(a)?;
    d.one(b, &d.post_upload)?;
    d.latch.store(1);
    a.wait_event(&d.event)?;
    exec.launch(a)?;
    d.event.synchronize()?;
    d.latch2.store(1);
    a.synchronize()?;
    m.push(("upload_api_time", upload_api));
    m.push((
        "upload_device_time",
        Event::elapsed_ms(&d.timing[0], &d.timing[1])? as f64 * 1000.0,
    ));
    m.push((
        "blockingKernelTimeoutDetected",
        d.report.timed_out()? as u8 as f64,
    ));
    if std::env::var_os("GPS_DEBUG").is_some() {
        eprintln!(
            "debug: upload step: {before_upload:.1} us from holding stream 0 to the upload; \
             stream 0's hold waited {} ns, timed out: {}",
            d.report2.elapsed.read()?[0],
            d.report2.timed_out()?
        );
    }
    d.latch.store(0);
    d.latch2.store(0);
    Ok(m)
}

/// Capture, check the graph's kernels, and run a trial; the metrics with the capture first.
fn trial(d: &mut Demo, a: &Args, length: i64, c: &mut Checks) -> Res<Metrics> {
    let single_entry = a.pattern == 1;
    let t = Instant::now();
    let graph = d.parallel_chain(length as usize, a.width as usize, single_entry)?;
    let mut m = vec![("capture", us(t))];
    let kernels = graph.nodes().iter().filter(|n| n.what == "empty").count() as i64;
    c.eq(
        kernels,
        length * a.width + single_entry as i64,
        format!("kernels of the {length} x {} graph", a.width),
    );
    m.extend(run_demo(d, &graph, length, a.width)?);
    Ok(m)
}

fn run(c: &mut Checks) -> Res<()> {
    let a = Args::parse()?;
    if !a.valid() {
        usage();
        return Ok(());
    }
    if a.output_fmt & 4 != 0 && a.output_fmt & 2 != 0 {
        println!("printing average and all samples doesn't make sense");
    }
    let dev = cueflow_samples::device()?;
    let mut d = Demo::new(&dev, a.width as usize)?;
    // Warm up: an empty kernel on each stream, the latch's check, and one trial.
    for si in &d.streams[..a.width as usize] {
        d.one(si, &d.empty)?;
    }
    d.streams[0].synchronize()?;
    check_latch(&mut d, c)?;
    let names: Vec<&str> = trial(&mut d, &a, a.length, c)?
        .iter()
        .map(|(n, _)| *n)
        .collect();
    if a.output_fmt & 1 != 0 {
        println!("length, width, pattern, {}, ", names.join(", "));
    }
    if a.output_fmt & 6 == 0 {
        println!("skipping trials since no output is expected");
        return Ok(());
    }
    let mut length = a.length;
    while length <= a.max_length {
        let mut total = vec![0.0; names.len()];
        for _ in 0..a.trials {
            let m = trial(&mut d, &a, length, c)?;
            if a.output_fmt & 2 != 0 {
                println!("{length}, {}, {}, {}, ", a.width, a.pattern, values(&m));
            }
            for (t, (_, v)) in total.iter_mut().zip(&m) {
                *t += v;
            }
        }
        if a.output_fmt & 4 != 0 {
            let avg: Vec<String> = total
                .iter()
                .map(|t| format!("{:.3}", t / a.trials as f64))
                .collect();
            println!("{length}, {}, {}, {}, ", a.width, a.pattern, avg.join(", "));
        }
        length += a.stride;
    }
    Ok(())
}

fn values(m: &Metrics) -> String {
    let v: Vec<String> = m.iter().map(|(_, v)| format!("{v:.3}")).collect();
    v.join(", ")
}

fn main() -> std::process::ExitCode {
    main_with("cudaGraphsPerfScaling", run)
}
