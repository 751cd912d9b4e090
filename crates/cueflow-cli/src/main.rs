//! `cueflow`: the command-line tool of the cueflow runtime.
//!
//! - `cueflow demo`: the chunked copy → compute → copy pipeline, serial against concurrent,
//!   verified, with a table, an SVG timeline and a Chrome trace;
//! - `cueflow bench`: API overhead, copy bandwidth and a streams × chunks sweep;
//! - `cueflow info`: backends, devices and their properties;
//! - `cueflow model`: the performance model alone, for what-if planning;
//! - `cueflow trace merge`: the traces of a job's ranks as one timeline.
//!
//! Exit codes: 0 on success, 1 when the device, a verification or a file write fails, 2 for bad
//! arguments. Errors are one line on stderr.

mod args;
mod bench;
mod demo;
mod demo_multi;
mod errors;
mod info;
mod model_cmd;
mod plot;
mod progress;
mod race_demo;
mod runner;
mod text;
mod trace_cmd;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use errors::CliResult;

/// Streams, events and the copy/compute pipeline of the CUDA execution model, on the host
/// backend (threads as engines) or a real GPU.
#[derive(Parser, Debug)]
#[command(name = "cueflow", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the chunked copy → compute → copy pipeline serially and over several streams; verify,
    /// tabulate, draw
    Demo(demo::DemoArgs),
    /// Measure API overhead, copy bandwidth, and sweep streams × chunks
    Bench(bench::BenchArgs),
    /// Show backends, devices and their properties
    Info(info::InfoArgs),
    /// Predict pipeline times with the performance model alone (no device)
    Model(model_cmd::ModelArgs),
    /// Work with traces: merge the traces of a job's ranks into one timeline
    Trace(trace_cmd::TraceArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    match dispatch(&cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cueflow: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn dispatch(cmd: &Command) -> CliResult<()> {
    match cmd {
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Info(a) => info::run(a),
        Command::Model(a) => model_cmd::run(a),
        Command::Trace(a) => trace_cmd::run(a),
    }
}

/// Help and version go to stdout as clap formats them (exit 0; help for a missing subcommand
/// exits 2). Every other parse error becomes one line on stderr, exit 2.
fn clap_exit(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            eprintln!("cueflow: error: {} (see cueflow --help)", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The first paragraph of a clap error (its message, and for missing arguments their list) as
/// one line, without the `error: ` prefix.
fn one_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let text = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    if text.is_empty() {
        "invalid arguments".into()
    } else {
        text.to_string()
    }
}
