//! `trainscale state`: what the cluster model derives from a dump.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cluster::ClusterState;
use crate::cluster::DumpError;
use crate::cluster::report::StateReport;

use super::OutputFormat;

/// The report and the warnings about skipped objects.
pub fn state_report(
    snapshot: &Path,
    format: OutputFormat,
) -> Result<(String, Vec<String>), DumpError> {
    let snap = ClusterState::from_file(snapshot)?;
    let report = StateReport::of(&snap.state);
    let text = match format {
        OutputFormat::Table => report.to_table(),
        OutputFormat::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
    };
    Ok((text, snap.warnings.iter().map(|w| w.to_string()).collect()))
}

/// Flags of `trainscale state`.
#[derive(Debug, Clone, clap::Args)]
pub struct StateArgs {
    /// A List as printed by
    /// `kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs -A -o json`.
    #[arg(long)]
    pub snapshot: PathBuf,
    #[arg(long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

/// `trainscale state`: prints the report, warnings about skipped objects on stderr.
pub fn run(args: StateArgs) -> anyhow::Result<ExitCode> {
    let (text, warnings) = state_report(&args.snapshot, args.output)?;
    for w in warnings {
        eprintln!("warning: skipped {w}");
    }
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
