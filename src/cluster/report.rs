//! What `trainscale state` prints: per-node free resources and per-job trainer counts.

use serde::Serialize;

use super::ClusterState;
use crate::api::{FieldError, JobKey, JobKind, Resources};

/// One error or warning of one job, as plan output lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobProblem {
    pub kind: JobKind,
    pub namespace: String,
    pub name: String,
    pub field: String,
    pub message: String,
}

impl JobProblem {
    /// Problem `e` of job `key`.
    pub fn of(key: &JobKey, e: &FieldError) -> Self {
        JobProblem {
            kind: key.kind,
            namespace: key.namespace.to_string(),
            name: key.name.to_string(),
            field: e.field.clone(),
            message: e.problem.clone(),
        }
    }
}

impl std::fmt::Display for JobProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::api::names::printable;
        write!(
            f,
            "{} {}/{}: {}: {}",
            self.kind,
            printable(&self.namespace),
            printable(&self.name),
            printable(&self.field),
            printable(&self.message)
        )
    }
}

/// Every error of every job skipped for errors, one entry per error.
pub fn skipped_jobs(state: &ClusterState) -> Vec<JobProblem> {
    state
        .invalid_jobs()
        .flat_map(|(key, errors)| errors.iter().map(move |e| JobProblem::of(key, e)))
        .collect()
}

/// Every job of a sized-only kind that is not planned, and why (not an error).
pub fn left_alone_jobs(state: &ClusterState) -> Vec<JobProblem> {
    state
        .left_alone_jobs()
        .map(|(key, why)| JobProblem {
            kind: key.kind,
            namespace: key.namespace.to_string(),
            name: key.name.to_string(),
            field: why.field.to_string(),
            message: why.why.clone(),
        })
        .collect()
}

/// Every warning of every planned job.
pub fn job_warnings(state: &ClusterState) -> Vec<JobProblem> {
    state
        .jobs()
        .flat_map(|(key, _, _)| {
            state
                .warnings(key)
                .into_iter()
                .map(move |e| JobProblem::of(key, &e))
        })
        .collect()
}

/// One node's line of the report.
#[derive(Debug, Serialize)]
pub struct NodeLine {
    pub name: String,
    pub schedulable: bool,
    pub allocatable: Resources,
    pub free: Resources,
    pub pods: u32,
}

/// One job's line of the report.
#[derive(Debug, Serialize)]
pub struct JobLine {
    pub kind: JobKind,
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub min: i32,
    pub max: i32,
    pub current: i32,
    pub bound: u32,
    pub pending: u32,
    pub fulfillment: f64,
    /// Errors, when the job was skipped for them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Warnings of a planned job.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct StateReport {
    pub nodes: Vec<NodeLine>,
    pub jobs: Vec<JobLine>,
    pub capacity: Resources,
    pub free: Resources,
    pub pending_requests: Resources,
}

impl StateReport {
    /// Summarises a state.
    pub fn of(state: &ClusterState) -> Self {
        let nodes: Vec<NodeLine> = state
            .nodes()
            .filter_map(|(_, slot)| {
                let info = slot.info.as_ref()?;
                Some(NodeLine {
                    name: slot.name.to_string(),
                    schedulable: info.schedulable,
                    allocatable: info.allocatable,
                    free: slot.free(),
                    pods: slot.pods,
                })
            })
            .collect();
        let jobs = state
            .job_slots()
            .filter(|(_, s)| s.info.is_some() || s.invalid.is_some())
            .map(|(key, slot)| {
                let (min, max, phase) = slot
                    .info
                    .as_ref()
                    .map(|i| (i.min, i.max, i.phase.as_str().to_string()))
                    .unwrap_or((0, 0, "Invalid".to_string()));
                JobLine {
                    kind: key.kind,
                    namespace: key.namespace.to_string(),
                    name: key.name.to_string(),
                    phase,
                    min,
                    max,
                    current: slot.current(),
                    bound: slot.trainers.bound,
                    pending: slot.pending_trainers(),
                    fulfillment: crate::api::fulfillment_of(
                        i64::from(slot.current()),
                        i64::from(min),
                        i64::from(max),
                    ),
                    problems: slot
                        .invalid
                        .iter()
                        .flatten()
                        .map(|e| e.to_string())
                        .collect(),
                    warnings: state.warnings(key).iter().map(|e| e.to_string()).collect(),
                }
            })
            .collect();
        let free = state
            .nodes()
            .filter(|(_, n)| n.schedulable())
            .fold(Resources::ZERO, |acc, (_, n)| acc + n.free());
        StateReport {
            nodes,
            jobs,
            capacity: state.total_capacity(),
            free,
            pending_requests: state.pending_requests(),
        }
    }

    /// A plain-text table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<32} {:>5} {:>12} {:>14} {:>5} {:>5}",
            "NODE", "READY", "FREE CPU(m)", "FREE MEM(Mi)", "GPU", "PODS"
        );
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "{:<32} {:>5} {:>12} {:>14} {:>5} {:>5}",
                crate::api::names::printable(&n.name),
                if n.schedulable { "yes" } else { "no" },
                n.free.cpu_milli,
                n.free.memory >> 20,
                n.free.gpu,
                n.pods
            );
        }
        let _ = writeln!(
            out,
            "\n{:<18} {:<40} {:<9} {:>4} {:>4} {:>7} {:>5} {:>7} {:>6}",
            "KIND", "JOB", "PHASE", "MIN", "MAX", "CURRENT", "BOUND", "PENDING", "FULFIL"
        );
        for j in &self.jobs {
            let _ = writeln!(
                out,
                "{:<18} {:<40} {:<9} {:>4} {:>4} {:>7} {:>5} {:>7} {:>6.2}",
                j.kind.as_str(),
                format!(
                    "{}/{}",
                    crate::api::names::printable(&j.namespace),
                    crate::api::names::printable(&j.name)
                ),
                if j.phase.is_empty() { "-" } else { &j.phase },
                j.min,
                j.max,
                j.current,
                j.bound,
                j.pending,
                j.fulfillment
            );
            for p in &j.problems {
                let _ = writeln!(out, "    invalid: {p}");
            }
            for w in &j.warnings {
                let _ = writeln!(out, "    warning: {w}");
            }
        }
        let _ = writeln!(
            out,
            "\ncluster: capacity cpu {}m mem {}Mi gpu {}; free cpu {}m mem {}Mi gpu {}; pending cpu {}m mem {}Mi gpu {}",
            self.capacity.cpu_milli,
            self.capacity.memory >> 20,
            self.capacity.gpu,
            self.free.cpu_milli,
            self.free.memory >> 20,
            self.free.gpu,
            self.pending_requests.cpu_milli,
            self.pending_requests.memory >> 20,
            self.pending_requests.gpu
        );
        out
    }
}
