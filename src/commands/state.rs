//! `trainscale state`: what the cluster model derives from a dump.

use std::path::Path;

use crate::api::manifest::ManifestError;
use crate::cluster::ClusterState;
use crate::cluster::report::StateReport;

use super::OutputFormat;

/// The report and the warnings about skipped objects.
pub fn state_report(
    snapshot: &Path,
    format: OutputFormat,
) -> Result<(String, Vec<String>), ManifestError> {
    let snap = ClusterState::from_file(snapshot)?;
    let report = StateReport::of(&snap.state);
    let text = match format {
        OutputFormat::Table => report.to_table(),
        OutputFormat::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
    };
    Ok((text, snap.warnings.iter().map(|w| w.to_string()).collect()))
}
