//! `trainscale progress NS/NAME --done N --total M`: a job reports its own progress, from its
//! training container, in the `trainscale.io/progress` annotation of its object (see
//! [`crate::api::progress`]). The command reads the object, keeps or restarts the measuring
//! window ([`next_report`]) and writes the annotation by a merge patch that carries the
//! resourceVersion it read, so a write racing another is refused (409) and done again on a fresh
//! read. With `--status` (TrainingJob, PaddleJob) it writes `status.progress` through the status
//! subresource instead. The job's ServiceAccount needs `get` and `patch` on the job's resource
//! (and `patch` on its `/status` for `--status`; `deploy/components/progress-reporter`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use super::flags;
use crate::api::JobKind;
use crate::api::progress::{
    PROGRESS_ANNOTATION, PROGRESS_STATUS_FIELD, ProgressReport, next_report,
};

/// How many times a write refused for a stale resourceVersion (409) is done again.
pub const CONFLICT_RETRIES: u32 = 5;

/// Flags of `trainscale progress`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProgressArgs {
    /// The job, as `NAMESPACE/NAME`.
    #[arg(value_parser = flags::Escaped(flags::job_ref))]
    pub job: (String, String),
    /// Units done so far (steps, passes, ...), a number at least 0.
    #[arg(long, value_parser = count)]
    pub done: f64,
    /// Units the job does in all, above 0; a TrainingJob or PaddleJob may leave it out for
    /// `spec.passes` (then `--done` counts passes).
    #[arg(long, value_parser = count)]
    pub total: Option<f64>,
    /// What `--done` and `--total` count, e.g. `steps`; informative.
    #[arg(long)]
    pub unit: Option<String>,
    /// The job's kind: trainingjob, paddlejob, pytorchtrainingjob, pytorchjob, job, jobset.
    #[arg(long, default_value = "trainingjob", value_parser = flags::job_kind)]
    pub kind: JobKind,
    /// TrainingJob or PaddleJob: write `status.progress` through the status subresource
    /// instead of the annotation (needs `patch` on `<kind>s/status`).
    #[arg(long)]
    pub status: bool,
    /// How long the rate is measured over before the window slides (e.g. 5m), 1s..7d.
    #[arg(long, default_value = "5m", value_parser = flags::progress_stale_after)]
    pub window: Duration,
    /// The kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service
    /// account (a training container's).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// A count flag: a finite number at least 0.
fn count(text: &str) -> Result<f64, String> {
    let n: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if n.is_finite() && n >= 0.0 {
        Ok(n)
    } else {
        Err(format!("{text:?} must be a number at least 0"))
    }
}

/// What `trainscale progress` could not do.
#[derive(Debug, thiserror::Error)]
pub enum ProgressError {
    #[error("{object}: not found")]
    NotFound { object: String },
    #[error("{object}: {verb}: {source}")]
    Api {
        object: String,
        verb: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error(
        "{object}: the object changed under every one of {attempts} writes (409 Conflict); try again"
    )]
    Conflicts { object: String, attempts: u32 },
    #[error("{object}: --total is needed (only a TrainingJob or PaddleJob takes spec.passes)")]
    NoTotal { object: String },
    #[error(
        "{object}: --status is for a TrainingJob or PaddleJob; other kinds report in the annotation"
    )]
    NoStatus { object: String },
}

/// One report to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub kind: JobKind,
    pub namespace: String,
    pub name: String,
    pub done: f64,
    pub total: Option<f64>,
    pub unit: Option<String>,
    /// Seconds the measuring window spans before it slides.
    pub window_s: f64,
    /// Write `status.progress` (TrainingJob, PaddleJob) rather than the annotation.
    pub status: bool,
}

/// Writes `report` at `now`: reads the object, builds the next report from the one on it and
/// patches the annotation at the resourceVersion read, again on a 409 up to
/// [`CONFLICT_RETRIES`] times. Returns the report written.
pub async fn write_progress(
    client: &kube::Client,
    report: &Report,
    now: Timestamp,
) -> Result<ProgressReport, ProgressError> {
    let object = report.kind.object_ref(&report.namespace, &report.name);
    if report.total.is_none() && !report.kind.created_by_trainscale() {
        return Err(ProgressError::NoTotal { object });
    }
    if report.status && !report.kind.created_by_trainscale() {
        return Err(ProgressError::NoStatus { object });
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &report.namespace,
        &report.kind.api_resource(),
    );
    let now_s = now.as_millisecond() as f64 / 1e3;
    let now_text = now.to_string();
    let attempts = CONFLICT_RETRIES + 1;
    for attempt in 1..=attempts {
        let current = match api.get(&report.name).await {
            Ok(o) => o,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(ProgressError::NotFound { object });
            }
            Err(source) => {
                return Err(ProgressError::Api {
                    object,
                    verb: "get",
                    source,
                });
            }
        };
        // A report that does not read restarts the window.
        let previous = if report.status {
            current
                .data
                .pointer("/status/progress")
                .and_then(|v| ProgressReport::from_value(v, &object, PROGRESS_STATUS_FIELD).ok())
        } else {
            current
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PROGRESS_ANNOTATION))
                .and_then(|text| ProgressReport::parse(text, &object).ok())
        };
        let next = next_report(
            previous.as_ref(),
            report.done,
            report.total,
            report.unit.clone(),
            now_s,
            &now_text,
            report.window_s,
        );
        let version = current.metadata.resource_version;
        let params = PatchParams::default();
        let written = if report.status {
            let patch = json!({
                "metadata": {"resourceVersion": version},
                "status": {"progress": next},
            });
            api.patch_status(&report.name, &params, &Patch::Merge(&patch))
                .await
        } else {
            let text = serde_json::to_string(&next).unwrap_or_default();
            let patch = json!({
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {PROGRESS_ANNOTATION: text},
                }
            });
            api.patch(&report.name, &params, &Patch::Merge(&patch))
                .await
        };
        match written {
            Ok(_) => return Ok(next),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(%object, attempt, "conflict; reading again");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(ProgressError::NotFound { object });
            }
            Err(source) => {
                return Err(ProgressError::Api {
                    object,
                    verb: "patch",
                    source,
                });
            }
        }
    }
    Err(ProgressError::Conflicts { object, attempts })
}

/// `trainscale progress`: writes the report and prints it.
pub fn run(args: ProgressArgs) -> anyhow::Result<ExitCode> {
    let (namespace, name) = args.job;
    let report = Report {
        kind: args.kind,
        namespace,
        name,
        done: args.done,
        total: args.total,
        unit: args.unit,
        window_s: args.window.as_secs_f64(),
        status: args.status,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let written = runtime.block_on(async {
        let client = super::live::client(args.kubeconfig.as_ref()).await?;
        anyhow::Ok(write_progress(&client, &report, Timestamp::now()).await?)
    })?;
    println!("{}", serde_json::to_string(&written).unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}
