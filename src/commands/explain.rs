//! `trainscale explain NAMESPACE/NAME`: why one job is at its size, who is ahead of it, and what
//! would let it grow: added room, or a job holding trainers above its min shrinking to it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context, bail};
use serde::Serialize;

use super::{OutputFormat, flags, live};
use crate::api::{JobKey, Resources};
use crate::cluster::{ClusterState, NodeInfo, Snapshot};
use crate::planner::explain::{describe, explain_all};
use crate::planner::{JobPlan, PlanSummary, PlannerConfig, Policy, Reason, ScalePlan, plan};
use crate::testkit::apply_plan;

/// Jobs [`shrunk_room`] tries (one planning pass each): explain stays fast on a large cluster.
const SHRINK_REPLANS: usize = 8;

/// Flags of `trainscale explain`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExplainArgs {
    /// The job, as `NAMESPACE/NAME` (any kind).
    pub job: String,
    /// A List as printed by
    /// `kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs -A -o json`;
    /// without it, the live cluster is read (one LIST of each).
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    /// Without --snapshot: the kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then the
    /// in-cluster service account.
    #[arg(long, conflicts_with = "snapshot")]
    pub kubeconfig: Option<PathBuf>,
    #[arg(long, value_parser = flags::policy(), default_value = "fulfillment")]
    pub policy: Policy,
    /// The time the pass runs at (RFC 3339; default: now), for cooldowns.
    #[arg(long, value_parser = flags::rfc3339_seconds)]
    pub now: Option<i64>,
    /// Time left between two rescales of one job, as `plan --cooldown`.
    #[arg(long, default_value = "0s", value_parser = flags::cooldown)]
    pub cooldown: std::time::Duration,
    /// A job's progress report not updated for longer than this before `--now` is ignored,
    /// with a warning (as `plan --progress-stale-after`).
    #[arg(long, default_value = "10m", value_parser = flags::progress_stale_after)]
    pub progress_stale_after: std::time::Duration,
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
    /// The first job found holding trainers above its min, on nodes the job's trainers may use,
    /// whose shrink to its min lets the job grow, checked by planning again; `None` when none
    /// of those tried does (or the job wants nothing more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_grow_if_shrunk: Option<String>,
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
        if let Some((key, why)) = state
            .left_alone_jobs()
            .find(|(k, _)| &*k.namespace == namespace && &*k.name == name)
        {
            bail!("job {key} is left alone: {} ({})", why.why, why.field);
        }
        bail!(
            "job {}/{} is not in the cluster (or is not planned: see `trainscale state`)",
            crate::api::names::printable(namespace),
            crate::api::names::printable(name)
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
    let wants_more = explained.queue_position.is_some();
    let would_grow_with = wants_more
        .then(|| added_room(state, config, &job.key, job))
        .flatten();
    let would_grow_if_shrunk = wants_more
        .then(|| shrunk_room(state, config, &result, job))
        .flatten();
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
        would_grow_if_shrunk,
    })
}

/// The smallest room found that lets the job grow: one more node holding the trainers it waits
/// for (its gang when below min, else one trainer), as a node its trainers may use, checked by
/// planning again with it. A gang whose min-instance is above the size cap is planned at the
/// cap, which a node added raises as much: no node is enough, and none is tried.
fn added_room(
    state: &ClusterState,
    config: &PlannerConfig,
    key: &JobKey,
    job: &JobPlan,
) -> Option<String> {
    let slot = state.job(key)?;
    // Every node added raises the cap, and a gang capped at it, as much: none is enough.
    let declared_min = slot.info.as_ref().map_or(0, |i| i.min);
    if declared_min > state.size_cap() {
        return Some(format!(
            "no added node places its gang: min-instance {declared_min} is more than the {} \
             pods the cluster's nodes can hold, and each node added raises the gang it is \
             planned at as much",
            state.size_cap()
        ));
    }
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
    Some(if let Some(outcome) = growth(job, grown) {
        format!(
            "one more node with {} free (labelled as its other nodes) {outcome}",
            describe(room),
        )
    } else {
        format!(
            "one more node with {} free is not enough: the policy gives that room to jobs ahead \
             of it first",
            describe(room)
        )
    })
}

/// What planning again did for `job`, if it grew: a job waiting for its gang (below min, or at
/// min with trainers that fit nowhere) is placed whole; any other reaches one more trainer.
fn growth(job: &JobPlan, again: &JobPlan) -> Option<String> {
    if job.reason == Reason::Starving || job.target < job.min {
        (again.reason != Reason::Starving && again.target >= again.min).then(|| {
            let gang = format!("lets its gang of {} be placed", again.min);
            if again.target > again.min {
                format!("{gang}, {} trainers in all", again.target)
            } else {
                gang
            }
        })
    } else {
        (again.target > job.target).then(|| format!("lets it reach {} trainers", again.target))
    }
}

/// The first job whose shrink to its min lets `job` grow, as "ns/name shrinking to its min
/// (6 → 2) lets it reach 4 trainers" (or "lets its gang of 2 be placed"). Tried: the jobs `result` keeps above their min that have
/// trainers bound on nodes `job`'s trainers may use, most trainers above min first, then by key.
/// Each try shrinks that job in a copy of `state` as the Job controller would (its positions from
/// min up removed, its max lowered to its min so the pass does not grow it back), then plans the
/// copy: the room the shrink frees is free to every policy, as in the daemon's next pass. At most
/// [`SHRINK_REPLANS`] tries.
fn shrunk_room(
    state: &ClusterState,
    config: &PlannerConfig,
    result: &ScalePlan,
    job: &JobPlan,
) -> Option<String> {
    let class = state.job(&job.key)?.class;
    let mut above: Vec<(i32, &JobPlan)> = result
        .jobs
        .iter()
        .filter(|j| j.key != job.key && j.target > j.min)
        .filter(|j| {
            state.job(&j.key).is_some_and(|slot| {
                slot.trainers
                    .bound_by_node
                    .keys()
                    .any(|node| state.eligible(class, *node))
            })
        })
        .map(|j| (j.target - j.min, j))
        .collect();
    above.sort_by(|(a, x), (b, y)| b.cmp(a).then_with(|| x.key.cmp(&y.key)));
    for (_, shrinking) in above.into_iter().take(SHRINK_REPLANS) {
        let Some(shrunk) = at_min(state, result.policy, shrinking) else {
            continue;
        };
        let again = plan(&shrunk, config);
        if let Some(outcome) = again.job(&job.key).and_then(|j| growth(job, j)) {
            return Some(format!(
                "{} shrinking to its min ({} → {}) {outcome}",
                shrinking.key, shrinking.target, shrinking.min
            ));
        }
    }
    None
}

/// A copy of `state` where the job of `shrinking` has shrunk to its min and its max is its min:
/// its trainer positions from min up are gone, as after the Job controller lowers `parallelism`.
fn at_min(state: &ClusterState, policy: Policy, shrinking: &JobPlan) -> Option<ClusterState> {
    let mut shrunk = state.clone();
    if !shrunk.set_job_max(&shrinking.key, shrinking.min) {
        return None;
    }
    let to_min = JobPlan {
        target: shrinking.min,
        placements: Vec::new(),
        removals: Vec::new(),
        ..shrinking.clone().into_owned()
    };
    let applied = ScalePlan {
        policy,
        jobs: vec![to_min],
        summary: PlanSummary::default(),
        warnings: Vec::new(),
        support: Vec::new(),
    };
    apply_plan(&mut shrunk, &applied);
    Some(shrunk)
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
        let changes = [&self.would_grow_with, &self.would_grow_if_shrunk];
        if changes.iter().any(|c| c.is_some()) {
            let _ = writeln!(out, "what would change it:");
            for change in changes.into_iter().flatten() {
                let _ = writeln!(out, "  {change}");
            }
        }
        out
    }
}

/// The live cluster through the kubeconfig (see [`live::read_cluster`]).
fn read_live(kubeconfig: Option<&PathBuf>) -> anyhow::Result<Snapshot> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let client = live::client(kubeconfig).await?;
        live::read_cluster(&client).await
    })
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
    let mut snap = match &args.snapshot {
        Some(path) => ClusterState::from_file(path)?,
        None => read_live(args.kubeconfig.as_ref())?,
    };
    let stale_after = args.progress_stale_after.as_secs() as i64;
    for ignored in snap.state.estimate_progress(now, stale_after) {
        if let Some(w) = ignored.warning {
            eprintln!("warning: {w}");
        }
    }
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
