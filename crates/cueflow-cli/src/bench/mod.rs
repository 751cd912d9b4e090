//! `cueflow bench`: (1) API overhead and copy bandwidth against references measured in the same
//! run; (2) a pipeline sweep over streams × chunks, with the `auto` choice timed beside it —
//! printed as tables, plotted in `bench_sweep.svg`, and written in full to `bench.json`.

mod overhead;
mod sweep;

use std::path::PathBuf;

use cueflow::model::{Choice, ModelParams};
use cueflow::pipeline::{self, PipelineBuffers};
use cueflow::{Device, DeviceSpec};
use serde_json::json;

use crate::args::{self, Count, Iters};
use crate::errors::{CliError, CliResult};
use crate::plot::{HLine, LinePlot, Marker, Series};
use crate::progress::Progress;
use crate::text::{self, Align, Table};
use crate::tune::{self, MAX_CHUNKS};

use overhead::{ApiCost, Bandwidth, Settings};
use sweep::Sweep;

/// Largest `auto` / best ratio the issue accepts on the host backend.
const AUTO_TOLERANCE: f64 = 1.10;

/// Arguments of `cueflow bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Device: `host` or `cuda:N` [default: $CUEFLOW_DEVICE, else host]
    #[arg(long, value_name = "host|cuda:N", value_parser = args::parse_device)]
    pub device: Option<DeviceSpec>,
    /// Compute workers of the host device [default: one per core]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub host_workers: Option<u32>,
    /// Shrink everything (sizes, batches, repetitions) for a CI smoke test
    #[arg(long)]
    pub quick: bool,
    /// Pipeline buffer size in MiB [default: 64, or 2 with --quick]
    #[arg(long, value_name = "MiB", value_parser = args::parse_mib)]
    pub size: Option<f64>,
    /// Timed rounds of the sweep [default: 9, or 2 with --quick]
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub reps: Option<u32>,
    /// Compute steps per element, or `balanced`
    #[arg(long, value_name = "K|balanced", default_value = "balanced")]
    pub iters: Iters,
    /// Directory for bench_sweep.svg and bench.json (created if missing)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

/// Everything `bench` decided before measuring.
#[derive(Clone, Copy, Debug)]
struct Plan {
    size_mib: f64,
    elements: usize,
    reps: usize,
    stage_reps: usize,
    probe_reps: usize,
    api: Settings,
}

impl Plan {
    fn new(a: &BenchArgs) -> CliResult<Plan> {
        let size_mib = a.size.unwrap_or(if a.quick { 2.0 } else { 64.0 });
        let elements = args::elements_for_mib(size_mib)?;
        let reps = a.reps.unwrap_or(if a.quick { 2 } else { 9 }) as usize;
        let api = if a.quick {
            Settings {
                batches: 5,
                ops: 200,
                copy_bytes: 16 << 20,
                copy_reps: 3,
            }
        } else {
            Settings {
                batches: 21,
                ops: 2_000,
                copy_bytes: 256 << 20,
                copy_reps: 7,
            }
        };
        Ok(Plan {
            size_mib,
            elements,
            reps,
            stage_reps: if a.quick { 3 } else { 5 },
            probe_reps: if a.quick { 3 } else { 9 },
            api,
        })
    }
}

/// Run the benchmark.
pub fn run(a: &BenchArgs) -> CliResult<()> {
    let plan = Plan::new(a)?;
    args::prepare_out_dir(&a.out)?;
    let dev = args::open_device(a.device, a.host_workers.map(|w| w as usize))?;
    // Bandwidth: a pinned buffer, a device buffer and two host vectors. Sweep: as the demo.
    args::check_memory(&dev, plan.api.copy_bytes as u64, 4, "the bandwidth test")?;
    args::check_memory(&dev, plan.elements as u64 * 4, 4, "the pipeline sweep")?;
    let progress = Progress::new(9);
    progress.println(format!(
        "cueflow bench on {} ({} cores){}",
        dev.properties().name,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if a.quick { ", --quick" } else { "" }
    ));

    progress.phase("API overhead");
    let api = overhead::measure_api(&dev, plan.api, || progress.step())?;
    progress.phase("copy bandwidth");
    let bw = overhead::measure_bandwidth(&dev, plan.api)?;
    progress.step();
    progress.println(api_report(&api, &bw, plan.api));

    progress.phase(format!(
        "allocating 3 × {}",
        text::bytes(plan.elements as u64 * 4)
    ));
    let mut bufs = PipelineBuffers::new(&dev, plan.elements)?;
    let iters = match a.iters {
        Iters::Fixed(k) => k,
        Iters::Balanced => pipeline::balance_iters(&dev, &mut bufs)?,
    };
    progress.step();
    progress.phase("measuring stages");
    let stages = pipeline::measure_stages(&dev, &mut bufs, iters, plan.stage_reps)?;
    let probe = tune::probe_overhead(&dev, &stages, plan.elements, iters, plan.probe_reps)?;
    let params = tune::params(&stages, probe.overhead_ns);
    let max_chunks = MAX_CHUNKS.min(u32::try_from(plan.elements).unwrap_or(u32::MAX));
    let auto = tune::choose(&params, Count::Auto, Count::Auto, max_chunks);
    progress.step();

    let mut timer = sweep::Timer {
        dev: &dev,
        bufs: &mut bufs,
        iters,
        params: &params,
        progress: &progress,
    };
    let sw = timer.sweep(plan.reps)?;
    let best = &sw.points[sw.best];
    let (h_best, h_auto) = timer.head_to_head(
        2 * plan.reps,
        (best.streams, best.chunks),
        (auto.streams, auto.chunks),
    )?;
    let verdict = Verdict {
        auto,
        best: h_best,
        auto_timed: h_auto,
    };
    progress.phase("writing files");
    let bound_ms = stages.bound_ns() / 1e6;
    let svg_path = a.out.join("bench_sweep.svg");
    let plot = sweep_plot(&dev, &plan, iters, bound_ms, &sw, &verdict);
    std::fs::write(&svg_path, plot.to_svg())
        .map_err(CliError::io(format!("cannot write {}", svg_path.display())))?;
    let json_path = a.out.join("bench.json");
    let doc = json!({
        "generator": format!("cueflow {}", env!("CARGO_PKG_VERSION")),
        "device": device_json(&dev),
        "machine": { "cores": std::thread::available_parallelism().map_or(0, |n| n.get()) },
        "quick": a.quick,
        "api": api.iter().map(api_json).collect::<Vec<_>>(),
        "bandwidth": {
            "bytes": bw.bytes,
            "h2d_ns": bw.h2d_ns,
            "reference": "copy_from_slice",
            "reference_ns": bw.reference_ns,
            "h2d_gbps": bw.h2d_gbps(),
            "reference_gbps": bw.reference_gbps(),
            "fraction": bw.h2d_gbps() / bw.reference_gbps(),
        },
        "pipeline": {
            "size_mib": plan.size_mib,
            "elements": plan.elements,
            "iters": iters,
            "reps": plan.reps,
            "stages_ns": {
                "h2d": stages.stages.h2d_ns,
                "kernel": stages.stages.kernel_ns,
                "d2h": stages.stages.d2h_ns,
                "duplex": stages.duplex_ns,
                "bound": stages.bound_ns(),
            },
            "model": {
                "per_op_overhead_ns": params.per_op_overhead_ns,
                "duplex_slowdown": params.duplex_slowdown,
                "compute_slots": params.compute_slots,
                "probe": {
                    "streams": probe.streams,
                    "chunks": probe.chunks,
                    "elements": probe.elements,
                    "measured_ns": probe.measured_ns,
                },
            },
            "sweep": sw.points.iter().map(point_json).collect::<Vec<_>>(),
            "noise_relative_mad": sw.noise(),
            "auto": {
                "streams": auto.streams,
                "chunks": auto.chunks,
                "predicted_ms": auto.predicted_ns / 1e6,
                "sweep_rank": sw.rank(auto.streams, auto.chunks),
            },
            "head_to_head": {
                "best": point_json(&verdict.best),
                "auto": point_json(&verdict.auto_timed),
                "auto_over_best": verdict.ratio(),
                "auto_within_10_percent": verdict.ratio() <= AUTO_TOLERANCE,
            },
        },
    });
    let text_json = serde_json::to_string_pretty(&doc).unwrap_or_else(|_| doc.to_string());
    std::fs::write(&json_path, text_json).map_err(CliError::io(format!(
        "cannot write {}",
        json_path.display()
    )))?;
    progress.step();
    progress.finish();

    print!(
        "{}",
        sweep_report(&plan, iters, &stages, &params, &sw, &verdict)
    );
    println!("\nwrote {} and {}", svg_path.display(), json_path.display());
    Ok(())
}

/// The API overhead and bandwidth section.
fn api_report(api: &[ApiCost], bw: &Bandwidth, st: Settings) -> String {
    let mut s = format!(
        "\nAPI overhead: host-side time per call, median of {} batches (fastest batch in brackets)\n",
        st.batches
    );
    let mut t = Table::new(&[
        ("operation", Align::Left),
        ("calls/batch", Align::Right),
        ("cueflow", Align::Right),
        ("", Align::Left),
        ("reference", Align::Right),
        ("target", Align::Right),
        ("", Align::Left),
        ("CUDA H100", Align::Right),
    ]);
    for c in api {
        let verdict = match c.target_ns {
            Some(t) if c.median_ns <= t => "ok",
            Some(_) => "MISSED",
            None => "",
        };
        t.row(vec![
            c.name.into(),
            c.ops_per_batch.to_string(),
            text::dur_ns(c.median_ns),
            format!("({})", text::dur_ns(c.min_ns)),
            text::dur_ns(c.reference_ns),
            c.target_ns
                .map(|t| format!("≤ {}", text::dur_ns(t)))
                .unwrap_or_else(|| "—".into()),
            verdict.into(),
            c.cuda_h100_ns
                .map(text::dur_ns)
                .unwrap_or_else(|| "—".into()),
        ]);
    }
    s += &t.render(2);
    s += &format!(
        "  references, measured in this run:\n    enqueues:   {}\n    round trip: {}\n",
        overhead::ENQUEUE_REFERENCE,
        overhead::ROUND_TRIP_REFERENCE
    );
    s += &format!(
        "\nH2D copy bandwidth, {} pinned, median of {}: {:.2} GB/s = {:.0}% of copy_from_slice ({:.2} GB/s, same size, same run)\n",
        text::bytes(bw.bytes as u64),
        bw.h2d_ns.len(),
        bw.h2d_gbps(),
        100.0 * bw.h2d_gbps() / bw.reference_gbps(),
        bw.reference_gbps()
    );
    s
}

/// How `auto` fared against the sweep's fastest configuration, re-timed head to head.
struct Verdict {
    /// The model's choice.
    auto: Choice,
    /// The sweep's fastest configuration, re-timed.
    best: sweep::Point,
    /// The model's choice, timed beside it.
    auto_timed: sweep::Point,
}

impl Verdict {
    /// auto / best, head to head.
    fn ratio(&self) -> f64 {
        self.auto_timed.median_ms / self.best.median_ms
    }
}

/// The sweep section.
fn sweep_report(
    plan: &Plan,
    iters: u32,
    stages: &pipeline::StageMeasurement,
    params: &ModelParams,
    sw: &Sweep,
    v: &Verdict,
) -> String {
    let mut s = format!(
        "\npipeline sweep: {} buffer, {} compute step{}, median of {} runs per configuration\n",
        text::bytes(plan.elements as u64 * 4),
        iters,
        if iters == 1 { "" } else { "s" },
        plan.reps
    );
    s += &format!(
        "  stages: H2D {}, kernel {}, D2H {}, both copies at once {}; lower bound {}\n",
        text::dur_ns(stages.stages.h2d_ns),
        text::dur_ns(stages.stages.kernel_ns),
        text::dur_ns(stages.stages.d2h_ns),
        text::dur_ns(stages.duplex_ns),
        text::dur_ns(stages.bound_ns())
    );
    s += &format!(
        "  model: {} per operation, duplex ×{:.2}, 1 compute slot → auto: {} streams × {} chunks\n\n",
        text::dur_ns(params.per_op_overhead_ns),
        params.duplex_slowdown,
        v.auto.streams,
        v.auto.chunks
    );
    let mut headers: Vec<(String, Align)> = vec![("streams \\ chunks".into(), Align::Left)];
    headers.extend(sweep::CHUNKS.iter().map(|c| (c.to_string(), Align::Right)));
    let hdr: Vec<(&str, Align)> = headers.iter().map(|(h, a)| (h.as_str(), *a)).collect();
    let mut t = Table::new(&hdr);
    let best = &sw.points[sw.best];
    for st in sweep::STREAMS {
        let mut row = vec![st.to_string()];
        for c in sweep::CHUNKS {
            let cell = match sw.point(st, c) {
                Some(p) => {
                    let star = if (p.streams, p.chunks) == (best.streams, best.chunks) {
                        '*'
                    } else {
                        ' '
                    };
                    let a = if (p.streams, p.chunks) == (v.auto.streams, v.auto.chunks) {
                        'a'
                    } else {
                        ' '
                    };
                    format!("{:.2}{star}{a}", p.median_ms)
                }
                None => "·  ".into(),
            };
            row.push(cell);
        }
        t.row(row);
    }
    s += "  time in ms (* fastest, a = auto's choice)\n";
    s += &t.render(2);
    s += &format!(
        "  run-to-run noise: a typical configuration's runs deviate {:.1}% from their median (median absolute deviation)\n",
        100.0 * sw.noise()
    );
    s += &format!(
        "  auto's configuration ranks {} of {} in the sweep ({} faster)\n",
        sw.rank(v.auto.streams, v.auto.chunks) + 1,
        sw.points.len(),
        sw.rank(v.auto.streams, v.auto.chunks)
    );

    let ratio = v.ratio();
    s += &format!(
        "\nauto vs the sweep's fastest, re-timed head to head ({} alternating runs each, median):\n",
        v.best.samples_ms.len()
    );
    let mut t = Table::new(&[
        ("", Align::Left),
        ("streams", Align::Right),
        ("chunks", Align::Right),
        ("measured", Align::Right),
        ("model", Align::Right),
        ("model/measured", Align::Right),
    ]);
    for (name, p) in [("best swept", &v.best), ("auto", &v.auto_timed)] {
        t.row(vec![
            name.into(),
            p.streams.to_string(),
            p.chunks.to_string(),
            text::dur_ms(p.median_ms),
            text::dur_ms(p.predicted_ms),
            format!("{:.2}", p.predicted_ms / p.median_ms),
        ]);
    }
    s += &t.render(2);
    s += &format!(
        "  auto / best = {ratio:.3}: {} 10% of the best\n",
        if ratio <= AUTO_TOLERANCE {
            "within"
        } else {
            "NOT within"
        }
    );
    s
}

/// Time vs chunks, one line per stream count, the bound, auto and best marked.
fn sweep_plot(
    dev: &Device,
    plan: &Plan,
    iters: u32,
    bound_ms: f64,
    sw: &Sweep,
    v: &Verdict,
) -> LinePlot {
    // auto sits on its line: its sweep time (the head-to-head time if it was not swept).
    let auto_y = sw
        .point(v.auto.streams, v.auto.chunks)
        .map_or(v.auto_timed.median_ms, |p| p.median_ms);
    let series = sweep::STREAMS
        .iter()
        .filter_map(|&st| {
            let points: Vec<(f64, f64)> = sw
                .points
                .iter()
                .filter(|p| p.streams == st)
                .map(|p| (f64::from(p.chunks), p.median_ms))
                .collect();
            (!points.is_empty()).then(|| Series {
                label: format!("{st} stream{}", if st == 1 { "" } else { "s" }),
                points,
            })
        })
        .collect();
    let best = &sw.points[sw.best];
    LinePlot {
        title: "cueflow bench: pipeline time vs chunks".into(),
        subtitle: format!(
            "{} · {} buffer · {} compute step{} · median of {} runs",
            dev.properties().name,
            text::bytes(plan.elements as u64 * 4),
            iters,
            if iters == 1 { "" } else { "s" },
            plan.reps
        ),
        x_label: "chunks (log₂ scale)".into(),
        y_label: "time (ms)".into(),
        log2_x: true,
        series,
        hlines: vec![HLine {
            y: bound_ms,
            label: format!("lower bound {}", text::dur_ms(bound_ms)),
        }],
        markers: vec![
            Marker {
                x: f64::from(v.auto.chunks),
                y: auto_y,
                label: format!(
                    "auto: {}×{}, {}",
                    v.auto.streams,
                    v.auto.chunks,
                    text::dur_ms(auto_y)
                ),
                colour: "#b00020",
            },
            Marker {
                x: f64::from(best.chunks),
                y: best.median_ms,
                label: format!(
                    "best: {}×{}, {}",
                    best.streams,
                    best.chunks,
                    text::dur_ms(best.median_ms)
                ),
                colour: "#2e7d32",
            },
        ],
    }
}

fn device_json(dev: &Device) -> serde_json::Value {
    let p = dev.properties();
    json!({
        "spec": dev.spec().to_string(),
        "name": p.name,
        "backend": p.backend,
        "async_engines": p.async_engines,
        "compute_units": p.compute_units,
        "priority_least": p.priority_least,
        "priority_greatest": p.priority_greatest,
        "total_memory": p.total_memory,
    })
}

fn api_json(c: &ApiCost) -> serde_json::Value {
    json!({
        "name": c.name,
        "median_ns": c.median_ns,
        "min_ns": c.min_ns,
        "ops_per_batch": c.ops_per_batch,
        "reference": c.reference,
        "reference_ns": c.reference_ns,
        "target_ns": c.target_ns,
        "cuda_h100_ns": c.cuda_h100_ns,
    })
}

fn point_json(p: &sweep::Point) -> serde_json::Value {
    json!({
        "streams": p.streams,
        "chunks": p.chunks,
        "median_ms": p.median_ms,
        "samples_ms": p.samples_ms,
        "relative_mad": p.relative_mad(),
        "predicted_ms": p.predicted_ms,
    })
}
