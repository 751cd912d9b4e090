//! `cueflow demo`: the chunked copy → compute → copy pipeline on pinned memory, serial (one
//! stream, whole buffer) against concurrent (N streams, chunked), every output element verified,
//! with a table, an SVG timeline of both runs and a Chrome trace.

use std::path::PathBuf;

use cueflow::kernels;
use cueflow::model::{self, Choice};
use cueflow::pipeline::measure::{probe_overhead, OverheadProbe, StageMeasurement};
use cueflow::pipeline::tune::{self, SizedModel, MAX_CHUNKS, MAX_STREAMS};
use cueflow::pipeline::{median, ChunkedPipeline, PipelineBuffers};
use cueflow::trace::chrome::to_chrome_json;
use cueflow::trace::svg::{to_svg, RowMode, SvgOptions};

use crate::args::{self, Count, Iters};
use crate::errors::{CliError, CliResult};
use crate::progress::Progress;
use crate::runner::{merge, run_traced, run_verified};
use crate::text::{self, Align, Table};

/// Runs per stage in the stage measurement.
const STAGE_REPS: usize = 5;
/// Runs of the overhead probe.
const PROBE_REPS: usize = 9;

/// Arguments of `cueflow demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Device, or several (`host:2x`, `cuda:all`, `cuda:0,cuda:1`): with several the buffer is
    /// split over them [default: $CUEFLOW_DEVICE, else host]
    #[arg(long, value_name = "host|cuda:N|LIST")]
    pub device: Option<String>,
    /// Compute workers of the host device [default: all cores but two, at least one]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub host_workers: Option<u32>,
    /// Buffer size in MiB (of f32 elements)
    #[arg(long, value_name = "MiB", default_value = "64", value_parser = args::parse_mib)]
    pub size: f64,
    /// Streams of the concurrent run, or `auto` (chosen by the performance model)
    #[arg(long, value_name = "N|auto", default_value = "auto")]
    pub streams: Count,
    /// Chunks of the concurrent run (chunk c goes to stream c mod N), or `auto`
    #[arg(long, value_name = "N|auto", default_value = "auto")]
    pub chunks: Count,
    /// Compute steps per element, or `balanced` (kernel about as long as the host-to-device
    /// copy)
    #[arg(long, value_name = "K|balanced", default_value = "balanced")]
    pub iters: Iters,
    /// Timed runs of each configuration; the table shows their median
    #[arg(long, value_name = "R", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub reps: u32,
    /// Directory for timeline.svg and trace.json (created if missing)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Run every pipeline under the race sanitizer (it must stay silent), then show what it
    /// reports for a copy → compute program that forgot its event
    #[arg(long)]
    pub sanitize: bool,
}

/// Everything measured by one demo, for the report.
struct Outcome {
    device: String,
    host_backend: bool,
    workers: u32,
    elements: usize,
    bytes: u64,
    iters: u32,
    balanced: bool,
    stages: StageMeasurement,
    probe: OverheadProbe,
    params: model::ModelParams,
    model: SizedModel,
    auto: bool,
    choice: Choice,
    serial_ms: f64,
    concurrent_ms: f64,
    traced_ms: (f64, f64),
    runs_verified: u32,
}

/// Run the demo.
pub fn run(a: &DemoArgs) -> CliResult<()> {
    let specs = args::device_list(a.device.as_deref())?;
    if specs.len() > 1 {
        return crate::demo_multi::run(a, &specs);
    }
    let elements = args::elements_for_mib(a.size)?;
    args::check_layout(a.streams, a.chunks, elements)?;
    args::prepare_out_dir(&a.out)?;
    let dev = args::open_device(Some(specs[0]), a.host_workers.map(|w| w as usize))?;
    if a.sanitize {
        dev.set_sanitize(cueflow::SanitizeMode::Warn);
    }
    // Pinned input and output, the device buffer, and a second one while measuring the stages.
    args::check_memory(&dev, elements as u64 * 4, 4, "the demo")?;
    let reps = a.reps as usize;

    let progress = Progress::new(8 + 2 * reps as u64);
    progress.phase(format!(
        "allocating 3 × {}",
        text::bytes(elements as u64 * 4)
    ));
    let mut bufs = PipelineBuffers::new(&dev, elements)?;
    progress.step();

    progress.phase("choosing compute steps");
    let (iters, balanced) = match a.iters {
        Iters::Fixed(k) => (k, false),
        Iters::Balanced => (bufs.balance_iters(&dev)?, true),
    };
    progress.step();

    progress.phase("measuring stages");
    let stages = bufs.measure_stages(&dev, iters, STAGE_REPS)?;
    progress.step();

    progress.phase("probing per-operation overhead");
    let work = |s: &cueflow::Stream, d: &cueflow::DeviceBuffer<f32>| kernels::compute(s, d, iters);
    let probe = probe_overhead(&dev, &stages, elements, work, PROBE_REPS)?;
    let params = tune::params(&stages, probe.overhead_ns);
    let max_chunks = MAX_CHUNKS.min(u32::try_from(elements).unwrap_or(u32::MAX));
    progress.step();

    progress.phase("probing chunk sizes");
    let mut counts = tune::candidate_chunks(max_chunks);
    if let Count::Fixed(c) = a.chunks {
        counts = vec![c];
    }
    let probes = bufs.probe_chunk_sizes(&dev, iters, &stages, &counts, STAGE_REPS)?;
    let sized = SizedModel {
        base: params,
        probes,
    };
    // The concurrent row is the point of the pipeline, work on several streams: when the stream count
    // is auto's to pick, it picks among two or more (with cores shared between the engines the
    // model can find one stream as fast, and the row would show no concurrency at all).
    let choice = match a.streams {
        Count::Auto => [2u32, 4, 8, 16]
            .into_iter()
            .map(|s| tune::choose_sized(&sized, Count::Fixed(s), a.chunks, max_chunks))
            .min_by(|x, y| x.predicted_ns.total_cmp(&y.predicted_ns))
            .expect("four stream counts"),
        fixed => tune::choose_sized(&sized, fixed, a.chunks, max_chunks),
    };
    progress.step();

    // The choice is the CLI's own (printed with its measurements), given to the pipelines.
    let mut serial = ChunkedPipeline::new(&dev).streams(1).chunks(1).build()?;
    let mut concurrent = ChunkedPipeline::new(&dev)
        .streams(choice.streams)
        .chunks(choice.chunks)
        .build()?;
    let conc_label = format!(
        "concurrent ({} stream{} × {} chunks)",
        choice.streams,
        plural(choice.streams),
        choice.chunks
    );

    progress.phase("warming up");
    run_verified(&mut serial, &mut bufs, iters, "serial warm-up")?;
    run_verified(&mut concurrent, &mut bufs, iters, "concurrent warm-up")?;
    progress.step();

    let (mut ts, mut tc) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for r in 0..reps {
        progress.phase(format!("timed runs {}/{reps}", r + 1));
        ts.push(run_verified(&mut serial, &mut bufs, iters, "serial")?);
        progress.step();
        tc.push(run_verified(
            &mut concurrent,
            &mut bufs,
            iters,
            &conc_label,
        )?);
        progress.step();
    }

    progress.phase("traced runs");
    let (s_ms, s_trace) = run_traced(&mut serial, &mut bufs, iters, "serial")?;
    let (c_ms, c_trace) = run_traced(&mut concurrent, &mut bufs, iters, "concurrent")?;
    progress.step();

    progress.phase("writing files");
    let svg_opts = SvgOptions {
        title: format!(
            "cueflow demo: serial vs concurrent pipeline, {}",
            text::bytes(bufs.bytes())
        ),
        rows: RowMode::ByEngine,
        width_px: 1200,
    };
    let svg = to_svg(&[("serial", &s_trace), (&conc_label, &c_trace)], &svg_opts);
    let svg_path = a.out.join("timeline.svg");
    std::fs::write(&svg_path, svg)
        .map_err(CliError::io(format!("cannot write {}", svg_path.display())))?;
    let json_path = a.out.join("trace.json");
    let merged = merge(&[&s_trace, &c_trace]);
    std::fs::write(&json_path, to_chrome_json(&merged)).map_err(CliError::io(format!(
        "cannot write {}",
        json_path.display()
    )))?;
    progress.step();
    progress.finish();

    let outcome = Outcome {
        device: dev.properties().name.clone(),
        host_backend: dev.properties().backend == "host",
        workers: dev.properties().compute_units,
        elements,
        bytes: bufs.bytes(),
        iters,
        balanced,
        stages,
        probe,
        params,
        model: sized,
        auto: a.streams == Count::Auto || a.chunks == Count::Auto,
        choice,
        serial_ms: median(ts),
        concurrent_ms: median(tc),
        traced_ms: (s_ms, c_ms),
        runs_verified: 2 * (a.reps + 2),
    };
    print!("{}", report(&outcome, reps));
    println!(
        "wrote {} (serial above concurrent, one row per engine) and {} (open in https://ui.perfetto.dev)",
        svg_path.display(),
        json_path.display()
    );
    if a.sanitize {
        let races = dev.sanitizer_reports();
        println!(
            "\nrace sanitizer: {} race{} in the demo's {} pipeline runs",
            races.len(),
            if races.len() == 1 { "" } else { "s" },
            outcome.runs_verified
        );
        if !races.is_empty() {
            return Err(CliError::Verify(format!(
                "the sanitizer reported a race in the demo's own pipeline:\n{}",
                races[0]
            )));
        }
        print!("{}", crate::race_demo::show(&dev)?);
    }
    Ok(())
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The printed report, without the list of files.
fn report(o: &Outcome, reps: usize) -> String {
    let mut s = String::new();
    let st = &o.stages.stages;
    let bound = o.stages.bound_ns();
    s += "cueflow demo: the chunked copy → compute → copy pipeline, serial vs concurrent\n";
    s += &format!("  device  {}\n", o.device);
    s += &format!(
        "  buffer  {} of f32 ({} elements), pinned input and output, one device buffer\n",
        text::bytes(o.bytes),
        text::thousands(o.elements as u64)
    );
    s += &format!(
        "  kernel  {} compute step{} per element{}\n\n",
        o.iters,
        plural(o.iters),
        if o.balanced {
            " (balanced: about as long as the H2D copy)"
        } else {
            ""
        }
    );

    s += &format!("stages over the whole buffer, each alone (median of {STAGE_REPS}):\n");
    let mut t = Table::new(&[
        ("stage", Align::Left),
        ("time", Align::Right),
        ("", Align::Left),
    ]);
    t.row(vec![
        "H2D copy".into(),
        text::dur_ns(st.h2d_ns),
        text::gbps(o.bytes, st.h2d_ns),
    ]);
    t.row(vec![
        "kernel".into(),
        text::dur_ns(st.kernel_ns),
        String::new(),
    ]);
    t.row(vec![
        "D2H copy".into(),
        text::dur_ns(st.d2h_ns),
        text::gbps(o.bytes, st.d2h_ns),
    ]);
    t.row(vec![
        "H2D + D2H at once".into(),
        text::dur_ns(o.stages.duplex_ns),
        format!("each direction ×{:.2} slower", o.stages.duplex_slowdown()),
    ]);
    t.row(vec![
        "lower bound".into(),
        text::dur_ns(bound),
        "max(kernel, both copies at once)".into(),
    ]);
    s += &t.render(2);
    s += "\n";

    s += &format!(
        "model: {} per operation (probe: {} streams × {} chunks of {} took {}), duplex ×{:.2}, {} compute slot{}\n",
        text::dur_ns(o.probe.overhead_ns),
        o.probe.streams,
        o.probe.chunks,
        text::bytes((o.probe.elements / o.probe.chunks as usize * 4) as u64),
        text::dur_ns(o.probe.measured_ns),
        o.params.duplex_slowdown,
        o.params.compute_slots,
        if o.params.shared_cores > 0 {
            format!(", engines share {} cores", o.params.shared_cores)
        } else {
            String::new()
        },
    );
    if let Some(p) = o.model.probe_at(o.choice.chunks) {
        s += &format!(
            "       at {} chunks, measured under concurrency ({} streams × {} chunks took {}): H2D {}, kernel {}, D2H {}, {} per operation\n",
            o.choice.chunks,
            p.streams,
            p.chunks,
            text::dur_ns(p.measured_ns),
            text::dur_ns(p.stages.h2d_ns),
            text::dur_ns(p.stages.kernel_ns),
            text::dur_ns(p.stages.d2h_ns),
            text::dur_ns(p.overhead_ns),
        );
    }
    if o.auto {
        s += &format!(
            "auto:  {} stream{} × {} chunks (model::choose over 2 to {MAX_STREAMS} streams, ≤ {MAX_CHUNKS} chunks, each chunk count with its probe)\n",
            o.choice.streams,
            plural(o.choice.streams),
            o.choice.chunks
        );
    }
    s += "\n";

    let serial_pred = model::predict_serial(&o.model.at(1));
    let conc_pred = o.choice.predicted_ns;
    let mut t = Table::new(&[
        ("run", Align::Left),
        ("streams", Align::Right),
        ("chunks", Align::Right),
        ("measured", Align::Right),
        ("model", Align::Right),
        ("model/measured", Align::Right),
        ("speedup", Align::Right),
        ("time/bound", Align::Right),
    ]);
    for (name, streams, chunks, ms, pred) in [
        ("serial", 1, 1, o.serial_ms, serial_pred),
        (
            "concurrent",
            o.choice.streams,
            o.choice.chunks,
            o.concurrent_ms,
            conc_pred,
        ),
    ] {
        let ns = ms * 1e6;
        t.row(vec![
            name.into(),
            streams.to_string(),
            chunks.to_string(),
            text::dur_ns(ns),
            text::dur_ns(pred),
            format!("{:.2}", pred / ns),
            format!("{:.2}×", o.serial_ms / ms),
            format!("{:.2}", ns / bound),
        ]);
    }
    s += &t.render(2);
    s += &format!(
        "  median of {reps} timed runs each (events, no tracing); traced runs: serial {}, concurrent {};\n  all {} runs verified element by element\n",
        text::dur_ms(o.traced_ms.0),
        text::dur_ms(o.traced_ms.1),
        o.runs_verified
    );
    s += &format!(
        "\nconcurrent takes {:.2} of the serial time (the ideal for three equal stages in 4 chunks: 0.50)\n",
        o.concurrent_ms / o.serial_ms
    );
    if o.host_backend && o.concurrent_ms * 1e6 > 1.25 * conc_pred {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        s += &format!(
            "note: on the host backend the copy engines and the {} compute workers are threads sharing this\n      machine's {cores} cores and memory bandwidth; the model runs at most as many operations at\n      once as there are cores, with costs measured at this chunk size beside each other, and\n      other programs busy on the cores slow the engines beyond that; fewer\n      workers (--host-workers {}) leave cores to the copy engines\n",
            o.workers,
            cores.saturating_sub(2).max(1)
        );
    }
    s
}
