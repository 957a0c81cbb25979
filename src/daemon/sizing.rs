//! Each planned job's sizing conditions, `AbleToScale` and `ScalingLimited`, decided from a pass's
//! plan without I/O. A job's message is computed only when its decision (size, target, range,
//! reason) differs from the one last written, or its conditions on the object no longer say what
//! the decision does; a condition is written only when its status, reason or message changes,
//! and its `lastTransitionTime` moves only when its status does. A steady cluster costs no
//! message and no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::JobKey;
use crate::api::sizing::{ABLE_TO_SCALE, SCALING_LIMITED, is_sizing};
use crate::cluster::ClusterState;
use crate::planner::explain::explain_jobs;
use crate::planner::{JobPlan, PlannerConfig, Reason, ScalePlan};

/// What a job's conditions are decided from; its message is recomputed when this changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub current: i32,
    pub target: i32,
    pub min: i32,
    pub max: i32,
    pub reason: Reason,
}

impl Decision {
    /// The decision of one job's plan.
    pub fn of(job: &JobPlan) -> Self {
        Decision {
            current: job.current,
            target: job.target,
            min: job.min,
            max: job.max,
            reason: job.reason,
        }
    }
}

/// One sizing condition as decided, without its transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// What the daemon knows of a job besides its plan: the decision it last wrote (or found
/// written), and the conditions and resourceVersion of the job object as cached.
#[derive(Debug, Clone, Copy, Default)]
pub struct Known<'a> {
    pub explained: Option<&'a Decision>,
    pub conditions: &'a [Condition],
    pub resource_version: Option<&'a str>,
}

/// One job whose conditions were looked at this pass.
#[derive(Debug, Clone, PartialEq)]
pub struct SizingUpdate {
    pub key: JobKey,
    pub decision: Decision,
    pub resource_version: Option<String>,
    /// The object's conditions as cached (others' types included; for the PyTorch kinds, the
    /// annotation's).
    pub existing: Vec<Condition>,
    pub desired: Vec<Desired>,
    /// Whether a condition's status, reason or message differs from the object's.
    pub write: bool,
}

/// A job's sizing conditions as written: the object's new resourceVersion and its conditions.
pub type Written = (Option<String>, Vec<Condition>);

/// A condition's type, status and reason.
pub type Verdict<'c> = (&'static str, &'c str, &'c str);

/// `AbleToScale` when rescaling is not held back.
const READY_MESSAGE: &str = "no cooldown holds rescaling back";

/// The type, status and reason of both conditions for a job's plan; during a cooldown
/// `ScalingLimited` keeps what it said (the pass did not weigh growth), or says
/// `DesiredWithinRange`.
pub fn verdicts<'c>(job: &JobPlan, existing: &'c [Condition]) -> [Verdict<'c>; 2] {
    let able = if job.reason == Reason::Cooldown {
        ("False", "Cooldown")
    } else {
        ("True", "ReadyForNewScale")
    };
    let limited = match job.reason {
        Reason::Cooldown => find(existing, SCALING_LIMITED)
            .map_or(("False", "DesiredWithinRange"), |c| {
                (c.status.as_str(), c.reason.as_str())
            }),
        reason => limited(job, reason),
    };
    [
        (ABLE_TO_SCALE, able.0, able.1),
        (SCALING_LIMITED, limited.0, limited.1),
    ]
}

/// `ScalingLimited` outside a cooldown: True when the job wants more than it has and cannot get
/// it, or sits at its max.
fn limited(job: &JobPlan, reason: Reason) -> (&'static str, &'static str) {
    match reason {
        Reason::Starving => ("True", "GangDoesNotFit"),
        Reason::Reclaimed => ("True", "Reclaimed"),
        Reason::Overload => ("True", "Overload"),
        Reason::QuotaExhausted => ("True", "QuotaExhausted"),
        Reason::AwaitingAdmission => ("True", "AwaitingAdmission"),
        _ if job.target >= job.max => ("True", "AtMaxInstance"),
        Reason::LowGain => ("False", "DesiredWithinRange"),
        Reason::ScaleUp | Reason::NoFit | Reason::Unchanged => ("True", "InsufficientCapacity"),
        _ => ("False", "DesiredWithinRange"),
    }
}

fn find<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the object's conditions already carry these statuses and reasons.
fn says(existing: &[Condition], verdicts: &[Verdict; 2]) -> bool {
    verdicts.iter().all(|(type_, status, reason)| {
        find(existing, type_).is_some_and(|c| c.status == *status && c.reason == *reason)
    })
}

/// The sizing updates of a pass: every job of `plan` whose decision changed since `known` (one
/// per job of the plan, in its order) last recorded it, or whose object says otherwise, with its
/// messages; the others are left out.
pub fn decide(
    state: &ClusterState,
    plan: &ScalePlan,
    config: &PlannerConfig,
    known: &[Known],
) -> Vec<SizingUpdate> {
    let mut pending = Vec::new();
    for (i, job) in plan.jobs.iter().enumerate() {
        let k = known.get(i).copied().unwrap_or_default();
        let decision = Decision::of(job);
        let verdicts = verdicts(job, k.conditions);
        if k.explained == Some(&decision) && says(k.conditions, &verdicts) {
            continue;
        }
        pending.push((i, decision, verdicts, k));
    }
    let which: Vec<usize> = pending.iter().map(|p| p.0).collect();
    let explanations = explain_jobs(state, plan, config, &which);
    pending
        .into_iter()
        .zip(explanations)
        .map(|((i, decision, verdicts, k), explanation)| {
            let job = &plan.jobs[i];
            let desired: Vec<Desired> = verdicts
                .into_iter()
                .map(|(type_, status, reason)| {
                    let (status, reason) = (status.to_string(), reason.to_string());
                    let message = match (type_, job.reason) {
                        (ABLE_TO_SCALE, Reason::Cooldown) => explanation.message.clone(),
                        (ABLE_TO_SCALE, _) => READY_MESSAGE.to_string(),
                        (_, Reason::Cooldown) => find(k.conditions, type_)
                            .map_or_else(|| explanation.message.clone(), |c| c.message.clone()),
                        _ => explanation.message.clone(),
                    };
                    Desired {
                        type_,
                        status,
                        reason,
                        message,
                    }
                })
                .collect();
            let write = !desired.iter().all(|d| {
                find(k.conditions, d.type_).is_some_and(|c| {
                    c.status == d.status && c.reason == d.reason && c.message == d.message
                })
            });
            SizingUpdate {
                key: job.key.clone().into_owned(),
                decision,
                resource_version: k.resource_version.map(str::to_string),
                existing: k.conditions.to_vec(),
                desired,
                write,
            }
        })
        .collect()
}

/// The object's conditions with the desired ones in place (others' types kept where they are,
/// new types appended): a condition's `lastTransitionTime` is kept while its status is, else
/// `now`.
pub fn merged(existing: &[Condition], desired: &[Desired], now: Timestamp) -> Vec<Condition> {
    let condition = |d: &Desired| {
        let since = find(existing, d.type_)
            .filter(|c| c.status == d.status)
            .map_or(Time(now), |c| c.last_transition_time.clone());
        Condition {
            type_: d.type_.to_string(),
            status: d.status.clone(),
            reason: d.reason.clone(),
            message: d.message.clone(),
            last_transition_time: since,
            observed_generation: None,
        }
    };
    let mut out: Vec<Condition> = existing
        .iter()
        .map(|c| match desired.iter().find(|d| d.type_ == c.type_) {
            Some(d) => condition(d),
            None => c.clone(),
        })
        .collect();
    for d in desired {
        if find(existing, d.type_).is_none() {
            out.push(condition(d));
        }
    }
    out
}

/// Only the sizing conditions of a list (what the `trainscale.io/sizing` annotation holds).
pub fn sizing_only(conditions: &[Condition]) -> Vec<Condition> {
    conditions
        .iter()
        .filter(|c| is_sizing(c))
        .cloned()
        .collect()
}
