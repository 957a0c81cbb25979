//! `trainscale plan`: one planning pass on a cluster dump, printed as a table or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use serde::Serialize;

use super::{OutputFormat, flags};
use crate::api::progress::DEFAULT_STALE_AFTER_S;
use crate::cluster::ClusterState;
use crate::cluster::DumpError;
use crate::cluster::report::{JobProblem, job_warnings, left_alone_jobs, skipped_jobs};
use crate::planner::explain::{Explanation, explain_all};
use crate::planner::{NamedJobPlan, PlanSummary, PlannerConfig, Policy, plan};

/// The printed plan, nodes named.
#[derive(Debug, Serialize)]
pub struct PlanOutput<'a> {
    pub policy: Policy,
    /// Milliseconds the pass took (state loading excluded).
    pub pass_ms: f64,
    pub jobs: Vec<ExplainedJob<'a>>,
    pub summary: &'a PlanSummary,
    pub warnings: &'a [String],
    /// Jobs not planned because of errors: one entry per error.
    pub skipped: Vec<JobProblem>,
    /// Warnings of planned jobs.
    pub job_warnings: Vec<JobProblem>,
    /// Jobs of the kinds trainscale only sizes that are not planned, and why.
    pub left_alone: Vec<JobProblem>,
}

/// A job's plan with what explains it.
#[derive(Debug, Serialize)]
pub struct ExplainedJob<'a> {
    #[serde(flatten)]
    pub plan: NamedJobPlan<'a>,
    /// Trainers bound to a node and not terminating (`current` is what the job asks).
    pub running: u32,
    #[serde(flatten)]
    pub explanation: Explanation,
}

/// [`plan_snapshot_at`] with progress reports stale after the default 10 minutes.
pub fn plan_snapshot(
    snapshot: &Path,
    config: &PlannerConfig,
    format: OutputFormat,
) -> Result<(String, Vec<String>), DumpError> {
    plan_snapshot_at(snapshot, config, format, DEFAULT_STALE_AFTER_S)
}

/// Loads the dump, estimates the jobs' progress at `config.now` (reports older than
/// `stale_after_s` ignored, with a warning), runs the pass and renders it; also returns the
/// skipped-object warnings.
pub fn plan_snapshot_at(
    snapshot: &Path,
    config: &PlannerConfig,
    format: OutputFormat,
    stale_after_s: i64,
) -> Result<(String, Vec<String>), DumpError> {
    let mut snap = ClusterState::from_file(snapshot)?;
    let ignored = snap.state.estimate_progress(config.now, stale_after_s);
    let started = Instant::now();
    let result = plan(&snap.state, config);
    let pass_ms = started.elapsed().as_secs_f64() * 1e3;
    let output = PlanOutput {
        policy: result.policy,
        pass_ms,
        jobs: result
            .named_jobs(&snap.state)
            .into_iter()
            .zip(explain_all(&snap.state, &result, config))
            .map(|(plan, explanation)| ExplainedJob {
                running: snap.state.job(plan.key).map_or(0, |s| s.trainers.bound),
                plan,
                explanation,
            })
            .collect(),
        summary: &result.summary,
        warnings: &result.warnings,
        skipped: skipped_jobs(&snap.state),
        job_warnings: job_warnings(&snap.state)
            .into_iter()
            .chain(
                ignored
                    .iter()
                    .filter_map(|i| Some(JobProblem::of(&i.key, i.warning.as_ref()?))),
            )
            .collect(),
        left_alone: left_alone_jobs(&snap.state),
    };
    let text = match format {
        OutputFormat::Json => serde_json::to_string_pretty(&output).unwrap_or_default() + "\n",
        OutputFormat::Table => render_table(&output),
    };
    Ok((text, snap.warnings.iter().map(|w| w.to_string()).collect()))
}

fn render_table(p: &PlanOutput<'_>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} {:<36} {:>7} {:>6} {:>4} {:>4} {:>6} {:>6}  {:<10} PLACEMENTS / REMOVALS",
        "KIND", "JOB", "CURRENT", "TARGET", "MIN", "MAX", "F.BEF", "F.AFT", "REASON"
    );
    for explained in &p.jobs {
        let j = &explained.plan;
        let placements: Vec<String> = j
            .placements
            .iter()
            .map(|c| format!("+{}@{}", c.trainers, c.node))
            .collect();
        let removals: Vec<String> = j
            .removals
            .iter()
            .map(|r| format!("-{}@{}", r.trainers, r.node.unwrap_or("pending")))
            .collect();
        let _ = writeln!(
            out,
            "{:<18} {:<36} {:>7} {:>6} {:>4} {:>4} {:>6.2} {:>6.2}  {:<10} {}",
            j.key.kind.as_str(),
            j.key.to_string(),
            format!("{}/{}", explained.running, j.current),
            j.target,
            j.min,
            j.max,
            j.fulfillment_before,
            j.fulfillment_after,
            j.reason.as_str(),
            placements
                .into_iter()
                .chain(removals)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let _ = writeln!(out);
    for j in &p.jobs {
        let _ = writeln!(out, "{}: {}", j.plan.key, j.explanation.message);
    }
    let s = &p.summary;
    let _ = writeln!(
        out,
        "\npolicy {}: +{} / -{} trainers, {} job(s) up, {} down, min fulfillment {:.2}, free GPUs {} ({} stranded), pass {:.3} ms",
        p.policy.as_str(),
        s.trainers_added,
        s.trainers_removed,
        s.jobs_scaled_up,
        s.jobs_scaled_down,
        s.min_fulfillment,
        s.free_gpus_after,
        s.stranded_gpus_after,
        p.pass_ms
    );
    for w in p.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for w in &p.job_warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for s in &p.skipped {
        let _ = writeln!(out, "skipped: {s}");
    }
    for l in &p.left_alone {
        let _ = writeln!(out, "left alone: {l}");
    }
    out
}

/// Flags of `trainscale plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// A List as printed by
    /// `kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs,pytorchtrainingjobs,pytorchjobs,jobsets -A -o json`
    /// (with Kueue, also `resourceflavors,clusterqueues,localqueues,workloads`).
    #[arg(long)]
    pub snapshot: PathBuf,
    #[arg(long, value_parser = flags::policy(), default_value = "fulfillment")]
    pub policy: Policy,
    /// `edl` only: load above which jobs are scaled down, in (0, 1].
    #[arg(long, default_value = "0.97", allow_negative_numbers = true, value_parser = flags::max_load_desired)]
    pub max_load_desired: f64,
    /// `goodput` only: a job grows only by trainers that each add at least this relative
    /// speedup (`s(n+1)/s(n) − 1`), in [0, 1); 0 lets jobs grow to max-instance.
    #[arg(long, default_value = "0", allow_negative_numbers = true, value_parser = flags::min_marginal_speedup)]
    pub min_marginal_speedup: f64,
    /// `progress` only: a job grows only by trainers that each add at least this much speed in
    /// units of one trainer's (`s(n+1) − s(n)`), in [0, 1].
    #[arg(long, default_value = "0.9", value_parser = flags::progress_min_marginal_speedup)]
    pub progress_min_marginal_speedup: f64,
    /// `progress` only: room no job takes at `--progress-min-marginal-speedup` goes to jobs at
    /// their useful size by trainers that add at least this much speed each on average, in
    /// [0, 1] (at or above `--progress-min-marginal-speedup`: none).
    #[arg(long, default_value = "0.8", value_parser = flags::progress_min_marginal_speedup)]
    pub progress_spare_min_marginal_speedup: f64,
    /// `progress` only: how long a job may stay at or below min before it goes first (e.g. `4h`).
    #[arg(long, default_value = "4h", value_parser = flags::starvation_bound)]
    pub starvation_bound: Duration,
    /// Time left between two rescales of one job (`fulfillment`), e.g. `60s`, `2m`; at most
    /// 7 days.
    #[arg(long, default_value = "0s", value_parser = flags::cooldown)]
    pub cooldown: Duration,
    /// The time the pass runs at (RFC 3339, from 1970; default: now), for cooldowns; held as
    /// seconds since the epoch.
    #[arg(long, value_parser = flags::rfc3339_seconds)]
    pub now: Option<i64>,
    /// A job's progress report not updated for longer than this before `--now` is ignored,
    /// with a warning (as `run --progress-stale-after`).
    #[arg(long, default_value = "10m", value_parser = flags::progress_stale_after)]
    pub progress_stale_after: Duration,
    #[arg(long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

/// `trainscale plan`: prints the plan, warnings about skipped objects on stderr.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let now = match args.now {
        Some(now) => now,
        None => flags::epoch_seconds(SystemTime::now()).context("the clock is before 1970")?,
    };
    let config = PlannerConfig {
        policy: args.policy,
        max_load_desired: args.max_load_desired,
        now,
        // Bounded by flags::MAX_COOLDOWN.
        cooldown_s: i64::try_from(args.cooldown.as_secs()).unwrap_or(i64::MAX),
        min_marginal_speedup: args.min_marginal_speedup,
        progress_min_marginal_speedup: args.progress_min_marginal_speedup,
        progress_spare_min_marginal_speedup: args.progress_spare_min_marginal_speedup,
        // Bounded by flags::starvation_bound.
        starvation_bound_s: i64::try_from(args.starvation_bound.as_secs()).unwrap_or(i64::MAX),
        ..PlannerConfig::default()
    };
    let (text, warnings) = plan_snapshot_at(
        &args.snapshot,
        &config,
        args.output,
        args.progress_stale_after.as_secs() as i64,
    )?;
    for w in warnings {
        eprintln!("warning: skipped {w}");
    }
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
