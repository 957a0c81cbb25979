//! The phase machine: "" → Creating → Running ⇄ Scaling → Succeed / Failed / Timeout.
//!
//! Pure: the caller observes the children and passes the time. Fixes of the original's bugs
//! (reference edl-autoscaler.md §4.3, §5.1 item 9): `startTime` and `released` are part of the
//! status we return (so they persist), walltime really ends a job with `Timeout`, every failure is
//! `Failed` (never a lowercase `failed`) with a reason, the pserver restart limit fails the job,
//! and `replica_statuses` are filled per role.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::cached::{CachedJob, CachedReplicaSet};
use crate::api::{
    FieldError, JobKind, TrainingJobPhase, TrainingJobStatus, TrainingResourceStatus,
};

/// What a ReplicaSet (master or pservers) reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    pub desired: i32,
    pub ready: i32,
}

/// How the trainer Job ended, from its conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    Complete,
    Failed { reason: String, message: String },
}

/// What the trainer Job reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrainerCounts {
    pub parallelism: i32,
    pub active: i32,
    pub ready: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub outcome: Option<JobOutcome>,
}

/// The children as last seen; `None` for a role the job has not (or not yet) got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub master: Option<ReplicaCounts>,
    pub pserver: Option<ReplicaCounts>,
    pub trainer: Option<TrainerCounts>,
    /// The highest container `restartCount` among the pserver pods.
    pub pserver_max_restarts: i32,
}

/// The job settings the phase machine reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhasePolicy {
    pub fault_tolerant: bool,
    /// `spec.annotations.walltime` in seconds; 0 means none.
    pub walltime_seconds: i64,
    /// `--restart-limit`; 0 means none.
    pub restart_limit: i32,
}

/// The counts of a ReplicaSet.
pub fn observe_replica_set(rs: &CachedReplicaSet) -> ReplicaCounts {
    ReplicaCounts {
        desired: rs.replicas(),
        ready: rs
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
    }
}

/// The counts and outcome of the trainer Job.
pub fn observe_job(job: &CachedJob) -> TrainerCounts {
    let status = job.status.clone().unwrap_or_default();
    let outcome = status.conditions.iter().flatten().find_map(|c| {
        if c.status != "True" {
            return None;
        }
        match c.type_.as_str() {
            "Complete" => Some(JobOutcome::Complete),
            "Failed" => Some(JobOutcome::Failed {
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            }),
            _ => None,
        }
    });
    TrainerCounts {
        parallelism: job.trainer_count(),
        active: status.active.unwrap_or(0),
        ready: status.ready.unwrap_or(0),
        succeeded: status.succeeded.unwrap_or(0),
        failed: status.failed.unwrap_or(0),
        outcome,
    }
}

fn replica_status(role: &str, c: ReplicaCounts) -> TrainingResourceStatus {
    TrainingResourceStatus {
        training_resource_type: role.to_string(),
        state: if c.ready >= c.desired {
            "running"
        } else {
            "starting"
        }
        .to_string(),
        resource_states: BTreeMap::from([
            ("running".to_string(), c.ready),
            ("starting".to_string(), (c.desired - c.ready).max(0)),
        ]),
    }
}

fn trainer_status(t: &TrainerCounts) -> TrainingResourceStatus {
    let state = match &t.outcome {
        Some(JobOutcome::Complete) => "succeeded",
        Some(JobOutcome::Failed { .. }) => "failed",
        None if t.ready + t.succeeded >= t.parallelism => "running",
        None => "starting",
    };
    TrainingResourceStatus {
        training_resource_type: "trainer".to_string(),
        state: state.to_string(),
        resource_states: BTreeMap::from([
            ("starting".to_string(), (t.active - t.ready).max(0)),
            ("running".to_string(), t.ready),
            ("succeeded".to_string(), t.succeeded),
            ("failed".to_string(), t.failed),
        ]),
    }
}

/// `replica_statuses`: one entry per role the job has, master, pserver, trainer.
pub fn replica_statuses(obs: &Observation) -> Vec<TrainingResourceStatus> {
    let mut out = Vec::new();
    if let Some(m) = obs.master {
        out.push(replica_status("master", m));
    }
    if let Some(p) = obs.pserver {
        out.push(replica_status("pserver", p));
    }
    if let Some(t) = &obs.trainer {
        out.push(trainer_status(t));
    }
    out
}

/// The status with the job finished in `phase` for `reason`.
pub fn finish(
    prev: &TrainingJobStatus,
    phase: TrainingJobPhase,
    reason: String,
) -> TrainingJobStatus {
    TrainingJobStatus {
        phase,
        reason,
        ..prev.clone()
    }
}

/// The status of a `kind` job that failed validation: `Failed`, naming every problem.
pub fn invalid(
    prev: &TrainingJobStatus,
    kind: JobKind,
    problems: &[FieldError],
) -> TrainingJobStatus {
    let text: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.problem))
        .collect();
    finish(
        prev,
        TrainingJobPhase::Failed,
        format!("invalid {kind}: {}", text.join("; ")),
    )
}

/// Seconds the job has run since `startTime`, if it has started.
fn run_seconds(status: &TrainingJobStatus, now: Timestamp) -> Option<i64> {
    status
        .start_time
        .as_ref()
        .map(|t| now.as_second() - t.0.as_second())
}

/// How long until the walltime ends a running job, if it has one.
pub fn walltime_remaining(
    status: &TrainingJobStatus,
    policy: &PhasePolicy,
    now: Timestamp,
) -> Option<Duration> {
    if policy.walltime_seconds <= 0 || status.phase.is_finished() {
        return None;
    }
    let ran = run_seconds(status, now)?;
    Some(Duration::from_secs(
        u64::try_from(policy.walltime_seconds - ran).unwrap_or(0) + 1,
    ))
}

/// Why the job ends now, if it does: (phase, reason).
fn terminal(
    status: &TrainingJobStatus,
    obs: &Observation,
    policy: &PhasePolicy,
    now: Timestamp,
) -> Option<(TrainingJobPhase, String)> {
    use TrainingJobPhase::{Failed, Succeed, Timeout};
    if policy.restart_limit > 0 && obs.pserver_max_restarts >= policy.restart_limit {
        return Some((
            Failed,
            format!(
                "a pserver restarted {} times, reaching the restart limit {}",
                obs.pserver_max_restarts, policy.restart_limit
            ),
        ));
    }
    if let Some(t) = &obs.trainer {
        match &t.outcome {
            Some(JobOutcome::Failed { reason, message }) => {
                return Some((Failed, format!("trainer Job failed: {reason}: {message}")));
            }
            Some(JobOutcome::Complete) => {
                return Some((Succeed, "all trainers succeeded".to_string()));
            }
            None => {}
        }
        if t.parallelism > 0 && t.succeeded >= t.parallelism && t.active == 0 {
            return Some((Succeed, "all trainers succeeded".to_string()));
        }
        if !policy.fault_tolerant && t.failed > 0 {
            return Some((
                Failed,
                format!(
                    "{} trainer pod(s) failed and the job is not fault tolerant",
                    t.failed
                ),
            ));
        }
        if policy.fault_tolerant && t.parallelism > 0 && t.failed >= t.parallelism && t.active == 0
        {
            return Some((Failed, format!("all {} trainers failed", t.parallelism)));
        }
    }
    if policy.walltime_seconds > 0
        && let Some(ran) = run_seconds(status, now)
        && ran > policy.walltime_seconds
    {
        return Some((
            Timeout,
            format!(
                "ran {ran} s, longer than the walltime of {} s",
                policy.walltime_seconds
            ),
        ));
    }
    None
}

/// The next status of a job from its previous status and what its children report.
///
/// Finished jobs keep their status. Otherwise: a terminal condition ends the job; when every
/// role is up and the trainer count equals the trainer Job's parallelism the job is `Running`
/// (setting `startTime` the first time); a started job whose trainer count differs from the
/// parallelism (a rescale in flight) is `Scaling`; before that it is `Creating`. `trainers` is the
/// observed trainer Job's parallelism, kept when the Job was not observed.
pub fn next_status(
    prev: &TrainingJobStatus,
    obs: &Observation,
    policy: &PhasePolicy,
    now: Timestamp,
) -> TrainingJobStatus {
    use TrainingJobPhase::{Creating, Running, Scaling};
    if prev.phase.is_finished() {
        return prev.clone();
    }
    let mut status = TrainingJobStatus {
        replica_statuses: replica_statuses(obs),
        trainers: obs
            .trainer
            .as_ref()
            .map(|t| t.parallelism)
            .or(prev.trainers),
        ..prev.clone()
    };
    if let Some((phase, reason)) = terminal(&status, obs, policy, now) {
        status.phase = phase;
        status.reason = reason;
        return status;
    }
    let up = |r: &Option<ReplicaCounts>| r.is_none_or(|c| c.ready >= c.desired);
    let support_up = up(&obs.master) && up(&obs.pserver);
    let trainers_settled = obs
        .trainer
        .as_ref()
        .is_some_and(|t| t.parallelism > 0 && t.ready + t.succeeded == t.parallelism);
    status.reason = String::new();
    status.phase = if status.start_time.is_none() {
        if support_up && trainers_settled {
            status.start_time = Some(Time(now));
            Running
        } else {
            Creating
        }
    } else if !trainers_settled {
        Scaling
    } else if support_up {
        Running
    } else {
        // A master or pserver is restarting: the job keeps its phase (the original's rule).
        match prev.phase {
            Scaling => Scaling,
            _ => Running,
        }
    };
    status
}
