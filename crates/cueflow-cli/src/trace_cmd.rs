//! `cueflow trace merge`: the traces of a job's ranks (each rank writes its own with
//! `CUEFLOW_TRACE`) as one Perfetto timeline, ranks as processes, clocks aligned at the end of
//! their communicator's first call.

use std::path::PathBuf;

use clap::Subcommand;
use cueflow::trace::merge::merge_chrome_json;

use crate::errors::{CliError, CliResult};

/// Arguments of `cueflow trace`.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Merge the ranks' Chrome traces into one timeline (ranks as processes, clocks aligned
    /// at their communicator's first call)
    Merge(MergeArgs),
}

#[derive(clap::Args, Debug)]
struct MergeArgs {
    /// The ranks' traces, as CUEFLOW_TRACE wrote them (e.g. trace-0.json trace-1.json)
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Where to write the merged trace
    #[arg(short, long, default_value = "merged.json")]
    output: PathBuf,
}

/// Run `cueflow trace …`.
pub fn run(args: &TraceArgs) -> CliResult<()> {
    let TraceCommand::Merge(m) = &args.command;
    let texts = m
        .traces
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(CliError::io(p.display()))?;
            Ok((p.display().to_string(), text))
        })
        .collect::<CliResult<Vec<_>>>()?;
    let inputs: Vec<(&str, &str)> = texts.iter().map(|(n, t)| (&n[..], &t[..])).collect();
    let merged = merge_chrome_json(&inputs).map_err(CliError::Trace)?;
    std::fs::write(&m.output, merged).map_err(CliError::io(m.output.display()))?;
    println!(
        "merged {} rank trace(s) into {} (open it in https://ui.perfetto.dev)",
        inputs.len(),
        m.output.display()
    );
    Ok(())
}
