//! The result of a pass.

use std::sync::Arc;

use serde::Serialize;

use super::Policy;
use crate::api::{JobKey, Resources};

/// Why a job's target is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Grown onto free capacity.
    ScaleUp,
    /// Shrunk to give trainers to a starving job.
    Reclaimed,
    /// Shrunk because the cluster holds more than it can.
    Overload,
    /// Brought down to max-instance.
    OverMax,
    /// Left alone: rescaled too recently.
    Cooldown,
    /// Wants more trainers, none fits anywhere.
    NoFit,
    /// Nothing to do.
    Unchanged,
    /// Below min and its whole gang does not fit.
    Starving,
}

impl Reason {
    /// The reason as plans, events and logs write it (the serialized name).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ScaleUp => "scale_up",
            Reason::Reclaimed => "reclaimed",
            Reason::Overload => "overload",
            Reason::OverMax => "over_max",
            Reason::Cooldown => "cooldown",
            Reason::NoFit => "no_fit",
            Reason::Unchanged => "unchanged",
            Reason::Starving => "starving",
        }
    }
}

/// Trainers placed on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeCount {
    pub node: Arc<str>,
    pub trainers: u32,
}

/// Trainers removed from one node; `node` is `None` for trainers not bound to any node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Removal {
    pub node: Option<Arc<str>>,
    pub trainers: u32,
}

/// The decision for one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPlan {
    #[serde(flatten)]
    pub key: JobKey,
    pub current: i32,
    pub target: i32,
    pub min: i32,
    pub max: i32,
    pub fulfillment_before: f64,
    pub fulfillment_after: f64,
    pub reason: Reason,
    /// Where trainers not yet on a node go: new ones and pending ones the plan keeps.
    pub placements: Vec<NodeCount>,
    /// Trainers taken away: pending ones (node `None`) first, then bound ones by node.
    pub removals: Vec<Removal>,
    /// Resources of one trainer (not serialized: the TrainingJob states them).
    #[serde(skip)]
    pub trainer: Resources,
}

/// Totals over the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PlanSummary {
    pub trainers_added: u32,
    pub trainers_removed: u32,
    pub jobs_scaled_up: u32,
    pub jobs_scaled_down: u32,
    /// The lowest fulfillment after the pass over elastic jobs (1 when there are none).
    pub min_fulfillment: f64,
    pub free_gpus_after: i64,
    /// Free GPUs on nodes whose free CPU or memory cannot host any GPU trainer that wants room.
    pub stranded_gpus_after: i64,
}

/// The plan of one pass.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalePlan {
    pub policy: Policy,
    pub jobs: Vec<JobPlan>,
    pub summary: PlanSummary,
    /// Anything the pass wants an operator to know (e.g. the `edl` iteration cap was hit).
    pub warnings: Vec<String>,
}

impl ScalePlan {
    /// The plan of one job.
    pub fn job(&self, key: &JobKey) -> Option<&JobPlan> {
        self.jobs.iter().find(|j| &j.key == key)
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn reason_names_are_the_serialized_names() {
        for reason in [
            Reason::ScaleUp,
            Reason::Reclaimed,
            Reason::Overload,
            Reason::OverMax,
            Reason::Cooldown,
            Reason::NoFit,
            Reason::Unchanged,
            Reason::Starving,
        ] {
            assert_eq!(
                serde_json::to_value(reason).ok(),
                Some(serde_json::Value::from(reason.as_str()))
            );
        }
    }
}
