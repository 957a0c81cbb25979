//! `trainscale explain NAMESPACE/NAME`: why one job is at its size, who is ahead of it, and what
//! added room would let it grow.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context, bail};
use serde::Serialize;

use super::{OutputFormat, flags};
use crate::api::{JobKey, Resources};
use crate::cluster::{ClusterState, NodeInfo};
use crate::planner::explain::{describe, explain_all};
use crate::planner::{JobPlan, PlannerConfig, Policy, plan};

/// Flags of `trainscale explain`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExplainArgs {
    /// The job, as `NAMESPACE/NAME` (any kind).
    pub job: String,
    /// A List as printed by
    /// `kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs -A -o json`.
    #[arg(long)]
    pub snapshot: PathBuf,
    #[arg(long, value_enum, default_value = "fulfillment")]
    pub policy: Policy,
    /// The time the pass runs at (RFC 3339; default: now), for cooldowns.
    #[arg(long, value_parser = flags::rfc3339_seconds)]
    pub now: Option<i64>,
    /// Time left between two rescales of one job, as `plan --cooldown`.
    #[arg(long, default_value = "0s", value_parser = flags::cooldown)]
    pub cooldown: std::time::Duration,
    #[arg(long, value_enum, default_value = "table")]
    pub output: OutputFormat,
}

/// A job ahead of the explained one in the queue.
#[derive(Debug, Serialize)]
pub struct Ahead {
    pub job: String,
    pub current: i32,
    pub target: i32,
    pub min: i32,
    pub max: i32,
}

/// What `explain` prints.
#[derive(Debug, Serialize)]
pub struct JobExplanation {
    pub job: String,
    pub kind: String,
    pub current: i32,
    pub target: i32,
    pub min: i32,
    pub max: i32,
    pub reason: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    pub ahead: Vec<Ahead>,
    /// The smallest added room found that lets the job grow by a trainer (or reach its gang),
    /// checked by planning again with it; `None` when the job wants nothing more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_grow_with: Option<String>,
}

/// Explains `job` (`namespace/name`) in `state` under `config`; an error naming it when the
/// state has no such job.
pub fn explain_job(
    state: &ClusterState,
    config: &PlannerConfig,
    job: &str,
) -> anyhow::Result<JobExplanation> {
    let (namespace, name) = job
        .split_once('/')
        .with_context(|| format!("{job:?}: write the job as NAMESPACE/NAME"))?;
    let result = plan(state, config);
    let Some(i) = result
        .jobs
        .iter()
        .position(|j| &*j.key.namespace == namespace && &*j.key.name == name)
    else {
        bail!(
            "job {namespace}/{name} is not in the cluster (or is not planned: see `trainscale state`)"
        );
    };
    let explanations = explain_all(state, &result, config);
    let plan_of = |j: &JobPlan| Ahead {
        job: j.key.to_string(),
        current: j.current,
        target: j.target,
        min: j.min,
        max: j.max,
    };
    let explained = &explanations[i];
    let ahead: Vec<Ahead> = match explained.queue_position {
        Some(p) => {
            let mut ahead: Vec<(u32, Ahead)> = explanations
                .iter()
                .zip(&result.jobs)
                .filter_map(|(e, j)| e.queue_position.filter(|q| *q < p).map(|q| (q, plan_of(j))))
                .collect();
            ahead.sort_by_key(|(q, _)| *q);
            ahead.into_iter().map(|(_, a)| a).collect()
        }
        None => Vec::new(),
    };
    let job = &result.jobs[i];
    let would_grow_with = explained
        .queue_position
        .and_then(|_| added_room(state, config, &job.key, job));
    Ok(JobExplanation {
        job: job.key.to_string(),
        kind: job.key.kind.as_str().to_string(),
        current: job.current,
        target: job.target,
        min: job.min,
        max: job.max,
        reason: job.reason.as_str().to_string(),
        message: explained.message.clone(),
        queue_position: explained.queue_position,
        ahead,
        would_grow_with,
    })
}

/// The smallest room found that lets the job grow: one more node holding the trainers it waits
/// for (its gang when below min, else one trainer), as a node its trainers may use, checked by
/// planning again with it.
fn added_room(
    state: &ClusterState,
    config: &PlannerConfig,
    key: &JobKey,
    job: &JobPlan,
) -> Option<String> {
    let slot = state.job(key)?;
    let bound = slot.trainers.bound as i32;
    let missing = if job.target < job.min {
        (job.min - bound).max(1)
    } else {
        1
    };
    let room: Resources = job.trainer.times(i64::from(missing));
    let mut bigger = state.clone();
    let name = "explain-added-node";
    bigger.set_node(
        name,
        Some(NodeInfo {
            allocatable: room,
            schedulable: true,
        }),
    );
    // The added node takes the labels and taints of a node the job's trainers may use.
    if let Some(traits) = state
        .nodes()
        .find(|(id, _)| state.eligible(slot.class, *id))
        .and_then(|(id, _)| state.node_traits(id))
    {
        bigger.set_node_traits(name, traits.clone());
    }
    let again = plan(&bigger, config);
    let grown = again.jobs.iter().find(|j| j.key == job.key)?;
    let wanted = if job.target < job.min {
        job.min
    } else {
        job.target + 1
    };
    Some(if grown.target >= wanted {
        format!(
            "one more node with {} free (labelled as its other nodes) lets it reach {} trainers",
            describe(room),
            grown.target
        )
    } else {
        format!(
            "one more node with {} free is not enough: the policy gives that room to jobs ahead \
             of it first",
            describe(room)
        )
    })
}

impl JobExplanation {
    fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} {}: {} → {} trainers (min {}, max {}), reason {}",
            self.kind, self.job, self.current, self.target, self.min, self.max, self.reason
        );
        let _ = writeln!(out, "why: {}", self.message);
        if let Some(p) = self.queue_position {
            let _ = writeln!(out, "queue position: {p}");
        }
        for a in &self.ahead {
            let _ = writeln!(
                out,
                "  ahead: {} ({} → {}, min {}, max {})",
                a.job, a.current, a.target, a.min, a.max
            );
        }
        if let Some(w) = &self.would_grow_with {
            let _ = writeln!(out, "what would change it: {w}");
        }
        out
    }
}

/// `trainscale explain`: prints the explanation; a job that does not exist is an error (exit 1).
pub fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let now = match args.now {
        Some(now) => now,
        None => flags::epoch_seconds(SystemTime::now()).context("the clock is before 1970")?,
    };
    let config = PlannerConfig {
        policy: args.policy,
        now,
        cooldown_s: i64::try_from(args.cooldown.as_secs()).unwrap_or(i64::MAX),
        ..PlannerConfig::default()
    };
    let snap = ClusterState::from_file(&args.snapshot)?;
    let explained = explain_job(&snap.state, &config, &args.job)?;
    match args.output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&explained).unwrap_or_default()
        ),
        OutputFormat::Table => print!("{}", explained.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}
