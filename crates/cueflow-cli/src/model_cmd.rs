//! `cueflow model`: the performance model alone — predicted serial and concurrent times of the
//! pipeline for a hypothetical machine and workload, and their simulated timelines as SVG.
//! What-if planning without a device.

use std::path::PathBuf;

use cueflow::model::{self, ModelParams, StageTimes};
use cueflow::trace::svg::{to_svg, RowMode, SvgOptions};

use crate::args::{self, Count};
use crate::errors::{CliError, CliResult};
use crate::text::{self, Align, Table};
use cueflow::pipeline::tune::{self, MAX_CHUNKS, MAX_STREAMS};

/// Arguments of `cueflow model`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// Host-to-device copy rate in GB/s (10⁹ bytes per second)
    #[arg(long, value_name = "X", value_parser = args::parse_positive)]
    pub h2d_gbps: f64,
    /// Device-to-host copy rate in GB/s
    #[arg(long, value_name = "Y", value_parser = args::parse_positive)]
    pub d2h_gbps: f64,
    /// Kernel time over the whole buffer, in ms
    #[arg(long, value_name = "K", value_parser = args::parse_non_negative)]
    pub kernel_ms: f64,
    /// Buffer size in MiB
    #[arg(long, value_name = "S", value_parser = args::parse_mib)]
    pub size_mib: f64,
    /// Fixed cost of every operation (copy or kernel), in µs
    #[arg(long, value_name = "O", default_value = "0", value_parser = args::parse_non_negative)]
    pub overhead_us: f64,
    /// Slowdown (≥ 1) of each copy direction while the other one moves data too
    #[arg(long, value_name = "F", default_value = "1", value_parser = args::parse_factor)]
    pub duplex: f64,
    /// Kernels that run side by side without slowing each other (1: kernels serialize)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub compute_slots: u32,
    /// Cores the engines share (the host backend on a small machine): at most this many
    /// operations run at once, the others wait for a core (0: engines of their own, a GPU)
    #[arg(long, value_name = "C", default_value_t = 0)]
    pub shared_cores: u32,
    /// Streams of the concurrent pipeline, or `auto`
    #[arg(long, value_name = "N|auto", default_value = "auto")]
    pub streams: Count,
    /// Chunks of the concurrent pipeline, or `auto`
    #[arg(long, value_name = "M|auto", default_value = "auto")]
    pub chunks: Count,
    /// Directory for model.svg (created if missing)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

/// Predict, print, and write `model.svg`.
pub fn run(a: &ModelArgs) -> CliResult<()> {
    let elements = args::elements_for_mib(a.size_mib)?;
    args::check_layout(a.streams, a.chunks, elements)?;
    if let Count::Fixed(c) = a.chunks {
        if c > 1 << 20 {
            return Err(CliError::usage(format!(
                "--chunks {c} is more than the model simulates (1048576)"
            )));
        }
    }
    args::prepare_out_dir(&a.out)?;
    let bytes = elements as u64 * 4;
    let p = ModelParams {
        stages: StageTimes {
            h2d_ns: bytes as f64 / a.h2d_gbps,
            kernel_ns: a.kernel_ms * 1e6,
            d2h_ns: bytes as f64 / a.d2h_gbps,
        },
        per_op_overhead_ns: a.overhead_us * 1e3,
        duplex_slowdown: a.duplex,
        compute_slots: a.compute_slots,
        shared_cores: a.shared_cores,
    };
    let max_chunks = MAX_CHUNKS.min(u32::try_from(elements).unwrap_or(u32::MAX));
    let choice = tune::choose(&p, a.streams, a.chunks, max_chunks);
    let serial_ns = model::predict_serial(&p);
    let bound_ns = p.stages.max();

    println!(
        "model: {} buffer; H2D {} ({} GB/s), kernel {}, D2H {} ({} GB/s)",
        text::bytes(bytes),
        text::dur_ns(p.stages.h2d_ns),
        a.h2d_gbps,
        text::dur_ns(p.stages.kernel_ns),
        text::dur_ns(p.stages.d2h_ns),
        a.d2h_gbps
    );
    println!(
        "       {} per operation, duplex ×{:.2}, {} compute slot{}{}",
        text::dur_ns(p.per_op_overhead_ns),
        p.duplex_slowdown,
        p.compute_slots,
        if p.compute_slots == 1 { "" } else { "s" },
        if p.shared_cores > 0 {
            format!(", engines share {} cores", p.shared_cores)
        } else {
            String::new()
        }
    );
    if a.streams == Count::Auto || a.chunks == Count::Auto {
        println!(
            "auto:  {} streams × {} chunks (model::choose over ≤ {MAX_STREAMS} streams, ≤ {MAX_CHUNKS} chunks)",
            choice.streams, choice.chunks
        );
    }
    println!();
    let mut t = Table::new(&[
        ("run", Align::Left),
        ("streams", Align::Right),
        ("chunks", Align::Right),
        ("predicted", Align::Right),
        ("speedup", Align::Right),
        ("time/bound", Align::Right),
    ]);
    for (name, s, c, ns) in [
        ("serial", 1, 1, serial_ns),
        (
            "concurrent",
            choice.streams,
            choice.chunks,
            choice.predicted_ns,
        ),
    ] {
        t.row(vec![
            name.into(),
            s.to_string(),
            c.to_string(),
            text::dur_ns(ns),
            format!("{:.2}×", serial_ns / ns),
            format!("{:.2}", ns / bound_ns),
        ]);
    }
    print!("{}", t.render(2));
    println!(
        "  bound: the slowest stage, {}; closed form for {} chunks: {}",
        text::dur_ns(bound_ns),
        choice.chunks,
        text::dur_ns(model::predict_closed_form(&p, choice.chunks))
    );

    let serial = model::simulate(&p, 1, 1, bytes);
    let conc = model::simulate(&p, choice.streams, choice.chunks, bytes);
    let label = format!(
        "concurrent ({} streams × {} chunks)",
        choice.streams, choice.chunks
    );
    let svg = to_svg(
        &[("serial", &serial), (&label, &conc)],
        &SvgOptions {
            title: format!("cueflow model: predicted pipeline, {}", text::bytes(bytes)),
            rows: RowMode::ByEngine,
            width_px: 1200,
        },
    );
    let path = a.out.join("model.svg");
    std::fs::write(&path, svg).map_err(CliError::io(format!("cannot write {}", path.display())))?;
    println!(
        "\nwrote {} (predicted timelines, model::simulate)",
        path.display()
    );
    Ok(())
}
