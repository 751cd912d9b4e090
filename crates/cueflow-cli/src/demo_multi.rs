//! `cueflow demo --device LIST` with several devices: the chunked pipeline over one buffer split
//! across the devices, each part on its own device with its own streams, all parts at once
//! (one host thread per device), against the whole buffer on the first device alone. Every
//! part of every run is verified element by element; the timeline has one group of rows per
//! device.

use std::sync::Barrier;
use std::time::Instant;

use cueflow::pipeline::{median, ChunkedPipeline, PipelineBuffers};
use cueflow::trace::chrome::to_chrome_json;
use cueflow::trace::svg::{to_svg, RowMode, SvgOptions};
use cueflow::trace::Trace;
use cueflow::{chunk_ranges, Device, DeviceSpec};

use crate::args::{self, Count, Iters};
use crate::demo::DemoArgs;
use crate::errors::{CliError, CliResult};
use crate::progress::Progress;
use crate::runner::{merge, run_traced};
use crate::text::{self, Align, Table};

/// Runs of the copies-only comparison.
const COPY_REPS: usize = 3;

/// One device's share: its pipeline and buffers.
struct Share {
    dev: Device,
    pipe: ChunkedPipeline,
    bufs: PipelineBuffers,
}

/// Run the demo over `specs` (two or more devices).
pub fn run(a: &DemoArgs, specs: &[DeviceSpec]) -> CliResult<()> {
    let elements = args::elements_for_mib(a.size)?;
    let parts = chunk_ranges(elements, specs.len())
        .map_err(|_| CliError::usage(format!("--size is too small for {} devices", specs.len())))?;
    let smallest = parts.iter().map(|r| r.len()).min().unwrap_or(0);
    args::check_layout(a.streams, a.chunks, smallest)?;
    args::prepare_out_dir(&a.out)?;
    let devices = specs
        .iter()
        .map(|&s| args::open_device(Some(s), a.host_workers.map(|w| w as usize)))
        .collect::<CliResult<Vec<Device>>>()?;
    if a.sanitize {
        return Err(CliError::usage(
            "--sanitize runs on one device; leave it out with several devices",
        ));
    }
    let reps = a.reps as usize;
    args::check_memory(&devices[0], elements as u64 * 4, 4, "the one-device run")?;
    let progress = Progress::new(6 + 2 * reps as u64);

    progress.phase(format!(
        "allocating {} on {} devices",
        text::bytes(elements as u64 * 4 * 3),
        devices.len()
    ));
    let mut whole = Share::new(&devices[0], elements, a)?;
    let mut shares = devices
        .iter()
        .zip(&parts)
        .map(|(d, r)| Share::new(d, r.len(), a))
        .collect::<CliResult<Vec<_>>>()?;
    progress.step();

    progress.phase("choosing compute steps");
    let iters = match a.iters {
        Iters::Fixed(k) => k,
        Iters::Balanced => shares[0].bufs.balance_iters(&devices[0])?,
    };
    progress.step();

    progress.phase("warming up (auto layouts are chosen here)");
    timed_run(&mut whole, iters, None)?;
    all_at_once(&mut shares, iters)?;
    progress.step();

    let (mut one, mut split) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    let mut per_device: Vec<Vec<f64>> = vec![Vec::new(); shares.len()];
    for r in 0..reps {
        progress.phase(format!("timed runs {}/{reps}", r + 1));
        let (t0, t1) = timed_run(&mut whole, iters, None)?;
        one.push(ms(t0, t1));
        progress.step();
        let (wall, each) = all_at_once(&mut shares, iters)?;
        split.push(wall);
        for (v, ms) in per_device.iter_mut().zip(each) {
            v.push(ms);
        }
        progress.step();
    }

    // The same runs with kernels of 0 steps: what the copies alone allow, one device and all
    // at once (devices that share the host's links or memory cannot beat it).
    progress.phase("copies alone");
    let (mut one_copy, mut split_copy) = (Vec::new(), Vec::new());
    for _ in 0..COPY_REPS {
        let (t0, t1) = timed_run(&mut whole, 0, None)?;
        one_copy.push(ms(t0, t1));
        split_copy.push(all_at_once(&mut shares, 0)?.0);
    }
    progress.step();

    progress.phase("traced run");
    let traces = traced_at_once(&mut shares, iters)?;
    progress.step();

    progress.phase("writing files");
    let labels: Vec<String> = shares
        .iter()
        .zip(&parts)
        .map(|(s, r)| {
            format!(
                "{} ({}): elements {}..{}",
                s.dev.spec(),
                s.dev.properties().name,
                r.start,
                r.end
            )
        })
        .collect();
    let panels: Vec<(&str, &Trace)> = labels.iter().map(|l| l.as_str()).zip(&traces).collect();
    let svg = to_svg(
        &panels,
        &SvgOptions {
            title: format!(
                "cueflow demo: {} split over {} devices, one group of rows per device",
                text::bytes(elements as u64 * 4),
                shares.len()
            ),
            rows: RowMode::ByEngine,
            width_px: 1200,
        },
    );
    let svg_path = a.out.join("timeline.svg");
    std::fs::write(&svg_path, svg)
        .map_err(CliError::io(format!("cannot write {}", svg_path.display())))?;
    let json_path = a.out.join("trace.json");
    let refs: Vec<&Trace> = traces.iter().collect();
    std::fs::write(&json_path, to_chrome_json(&merge(&refs))).map_err(CliError::io(format!(
        "cannot write {}",
        json_path.display()
    )))?;
    progress.step();
    progress.finish();

    let (one_ms, split_ms) = (median(one), median(split));
    let mut out = String::new();
    out += "cueflow demo: the chunked copy → compute → copy pipeline split over several devices\n";
    out += &format!(
        "  buffer  {} of f32, {iters} compute step{} per element; each device runs its part on streams of its own\n\n",
        text::bytes(elements as u64 * 4),
        if iters == 1 { "" } else { "s" }
    );
    let mut t = Table::new(&[
        ("run", Align::Left),
        ("device", Align::Left),
        ("elements", Align::Right),
        ("streams × chunks", Align::Right),
        ("time", Align::Right),
    ]);
    t.row(vec![
        "one device".into(),
        devices[0].spec().to_string(),
        text::thousands(elements as u64),
        layout(&whole.pipe),
        text::dur_ms(one_ms),
    ]);
    for ((s, r), times) in shares.iter().zip(&parts).zip(per_device) {
        t.row(vec![
            "split: part".into(),
            s.dev.spec().to_string(),
            text::thousands(r.len() as u64),
            layout(&s.pipe),
            text::dur_ms(median(times)),
        ]);
    }
    t.row(vec![
        format!("split over {}", shares.len()),
        "all at once".into(),
        text::thousands(elements as u64),
        String::new(),
        text::dur_ms(split_ms),
    ]);
    out += &t.render(2);
    out += &format!(
        "  host wall-clock medians of {reps} runs, enqueue to output arrived (split: first part's start to last part's end);\n  all {} runs verified element by element, every part\n\n",
        2 * (reps + COPY_REPS) + 2
    );
    let (one_c, split_c) = (median(one_copy), median(split_copy));
    out += &format!(
        "copies alone (kernels of 0 steps, median of {COPY_REPS}): one device {}, split {} ({:.2}×)\n",
        text::dur_ms(one_c),
        text::dur_ms(split_c),
        one_c / split_c
    );
    out += &format!(
        "split over {} devices: {:.2}× the speed of one device (the copies alone allow {:.2}×)\n",
        shares.len(),
        one_ms / split_ms,
        one_c / split_c
    );
    print!("{out}");
    println!(
        "wrote {} (one group of rows per device) and {} (open in https://ui.perfetto.dev)",
        svg_path.display(),
        json_path.display()
    );
    Ok(())
}

impl Share {
    fn new(dev: &Device, elements: usize, a: &DemoArgs) -> CliResult<Share> {
        let pipe = ChunkedPipeline::new(dev)
            .streams(a.streams)
            .chunks(a.chunks)
            .build()?;
        Ok(Share {
            dev: dev.clone(),
            pipe,
            bufs: PipelineBuffers::new(dev, elements)?,
        })
    }
}

/// `streams × chunks` as configured, or as `auto` chose them.
fn layout(p: &ChunkedPipeline) -> String {
    match (p.layout(), p.auto_choice()) {
        ((Count::Fixed(s), Count::Fixed(c)), _) => format!("{s} × {c}"),
        (_, Some(c)) => format!("{} × {} (auto)", c.streams, c.chunks),
        _ => "auto".into(),
    }
}

/// One verified run of a share, timed on the host from before the first enqueue until the
/// output arrived (preparing the output and verifying it are outside the interval). `start`
/// is waited on just before the run begins.
fn timed_run(s: &mut Share, iters: u32, start: Option<&Barrier>) -> CliResult<(Instant, Instant)> {
    s.bufs.poison_output()?;
    if let Some(b) = start {
        b.wait();
    }
    let t0 = Instant::now();
    s.bufs.run(&mut s.pipe, iters)?;
    let t1 = Instant::now();
    let what = format!("{} part", s.dev.spec());
    s.bufs
        .verify(iters)?
        .map_err(|e| CliError::Verify(format!("{what}: {e}")))?;
    Ok((t0, t1))
}

fn ms(a: Instant, b: Instant) -> f64 {
    b.duration_since(a).as_secs_f64() * 1e3
}

/// Run every share at once, one thread per device, each verified. Returns the wall time from
/// the first share's start to the last share's end, and each share's own time, in ms.
fn all_at_once(shares: &mut [Share], iters: u32) -> CliResult<(f64, Vec<f64>)> {
    let start = Barrier::new(shares.len());
    let spans = std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter_mut()
            .map(|s| {
                let start = &start;
                scope.spawn(move || timed_run(s, iters, Some(start)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a share's thread panicked"))
            .collect::<CliResult<Vec<(Instant, Instant)>>>()
    })?;
    let first = spans.iter().map(|s| s.0).min().expect("at least one share");
    let last = spans.iter().map(|s| s.1).max().expect("at least one share");
    Ok((
        ms(first, last),
        spans.iter().map(|&(a, b)| ms(a, b)).collect(),
    ))
}

/// One traced, verified run of every share at once.
fn traced_at_once(shares: &mut [Share], iters: u32) -> CliResult<Vec<Trace>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter_mut()
            .map(|s| {
                scope.spawn(move || {
                    let label = s.dev.spec().to_string();
                    run_traced(&mut s.pipe, &mut s.bufs, iters, &label).map(|(_, t)| t)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a share's thread panicked"))
            .collect()
    })
}
