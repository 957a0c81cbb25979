//! The result of a pass.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;

use super::{Policy, SupportPlacement};
use crate::api::{JobKey, Resources};
use crate::cluster::{ClusterState, NodeId};

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
    /// `goodput`: held at (or brought down to) the size past which its next trainer adds less
    /// than `min_marginal_speedup`.
    LowGain,
    /// Kueue-managed: its ClusterQueue's quota (with what it may borrow in its cohort) holds no
    /// more of its workers ([`JobPlan::kueue`] names the queue and the resource).
    QuotaExhausted,
    /// Kueue-managed: a scale-up waits for Kueue's admission; kept at its size.
    AwaitingAdmission,
}

impl Reason {
    /// Every reason, in the order metrics and reports list them.
    pub const ALL: [Reason; 11] = [
        Reason::ScaleUp,
        Reason::Reclaimed,
        Reason::Overload,
        Reason::OverMax,
        Reason::Cooldown,
        Reason::NoFit,
        Reason::Unchanged,
        Reason::Starving,
        Reason::LowGain,
        Reason::QuotaExhausted,
        Reason::AwaitingAdmission,
    ];

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
            Reason::LowGain => "low_gain",
            Reason::QuotaExhausted => "quota_exhausted",
            Reason::AwaitingAdmission => "awaiting_admission",
        }
    }
}

/// What Kueue says of a Kueue-managed job's size: why its quota holds no more of its workers,
/// or which admission it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum KueueNote {
    /// The quota of `resource` in `flavor` (with what the queue may borrow) is used up.
    QuotaExhausted {
        cluster_queue: Arc<str>,
        flavor: Arc<str>,
        resource: Arc<str>,
    },
    /// Its workers request `resource`, for which the queue has no quota (in `flavor`, when its
    /// admission assigned one): Kueue admits no pod requesting it.
    NotCovered {
        cluster_queue: Arc<str>,
        resource: Arc<str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        flavor: Option<Arc<str>>,
    },
    /// The queue admits nothing new.
    Inactive {
        cluster_queue: Arc<str>,
        why: String,
    },
    /// The job gives workers back: its queue borrows `resource` that other queues of its
    /// `cohort` need for their waiting Workloads or growing jobs (`borrowing`), or its own
    /// waiting Workloads need what its jobs hold above their min, or (`lending`) its queue is
    /// within its nominal quota and Workloads of its cohort waiting to start need more than
    /// the cohort has unused.
    Reclaimed {
        cluster_queue: Arc<str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cohort: Option<Arc<str>>,
        resource: Arc<str>,
        borrowing: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        lending: bool,
    },
    /// Kueue admitted `admitted` workers; the rest wait (for Workload slice `workload`).
    AwaitingAdmission {
        cluster_queue: Arc<str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        workload: Option<Arc<str>>,
        admitted: i32,
    },
}

impl KueueNote {
    /// The ClusterQueue the note is about.
    pub fn cluster_queue(&self) -> &Arc<str> {
        match self {
            KueueNote::QuotaExhausted { cluster_queue, .. }
            | KueueNote::NotCovered { cluster_queue, .. }
            | KueueNote::Inactive { cluster_queue, .. }
            | KueueNote::Reclaimed { cluster_queue, .. }
            | KueueNote::AwaitingAdmission { cluster_queue, .. } => cluster_queue,
        }
    }
}

/// Trainers placed on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCount {
    pub node: NodeId,
    pub trainers: u32,
}

/// Trainers removed from one node; `node` is `None` for trainers not bound to any node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removal {
    pub node: Option<NodeId>,
    pub trainers: u32,
}

/// The decision for one job. Node ids refer to the `ClusterState` the plan was made from;
/// [`JobPlan::named`] resolves them to names.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan<'s> {
    /// Borrowed from the state the plan was made from ([`JobPlan::into_owned`] copies it).
    pub key: Cow<'s, JobKey>,
    pub current: i32,
    pub target: i32,
    pub min: i32,
    pub max: i32,
    pub fulfillment_before: f64,
    pub fulfillment_after: f64,
    pub reason: Reason,
    /// Where trainers not yet on a node go: new ones and pending ones the plan keeps, nodes in
    /// name order.
    pub placements: Vec<NodeCount>,
    /// Trainers taken away: pending ones (node `None`) first, then bound ones by node.
    pub removals: Vec<Removal>,
    /// Resources of one trainer (the TrainingJob states them).
    pub trainer: Resources,
    /// Kueue's word on the size, when its quota or admission decided it (reasons
    /// `quota_exhausted`, `awaiting_admission`).
    pub kueue: Option<Box<KueueNote>>,
}

/// What `sorted` (keyed in [`JobKey`] order, as the state and the daemon's store keep jobs) holds
/// for each of `jobs`, walked side by side: a plan lists its jobs in key order, so each costs a
/// step, not a search; a job out of that order is found with `lookup`.
pub fn aligned<'m, V: Copy>(
    sorted: impl Iterator<Item = (&'m JobKey, V)>,
    jobs: &[JobPlan],
    lookup: impl Fn(&JobKey) -> Option<V>,
) -> Vec<Option<V>> {
    let mut sorted = sorted.peekable();
    jobs.iter()
        .map(|job| {
            while sorted.next_if(|(key, _)| **key < *job.key).is_some() {}
            match sorted.peek() {
                Some((key, value)) if **key == *job.key => Some(*value),
                _ => lookup(&job.key),
            }
        })
        .collect()
}

impl JobPlan<'_> {
    /// This plan, no longer borrowing the state it was made from.
    pub fn into_owned(self) -> JobPlan<'static> {
        JobPlan {
            key: Cow::Owned(self.key.into_owned()),
            ..self
        }
    }

    /// This plan with node names from `state`, the state it was made from; entries whose node
    /// `state` does not hold are left out.
    pub fn named<'a>(&'a self, state: &'a ClusterState) -> NamedJobPlan<'a> {
        let name = |id: NodeId| state.node(id).map(|n| &*n.name);
        NamedJobPlan {
            key: &self.key,
            current: self.current,
            target: self.target,
            min: self.min,
            max: self.max,
            fulfillment_before: self.fulfillment_before,
            fulfillment_after: self.fulfillment_after,
            reason: self.reason,
            kueue: self.kueue.as_deref(),
            placements: self
                .placements
                .iter()
                .filter_map(|p| {
                    Some(NamedCount {
                        node: name(p.node)?,
                        trainers: p.trainers,
                    })
                })
                .collect(),
            removals: self
                .removals
                .iter()
                .filter_map(|r| {
                    let node = match r.node {
                        Some(id) => Some(name(id)?),
                        None => None,
                    };
                    Some(NamedRemoval {
                        node,
                        trainers: r.trainers,
                    })
                })
                .collect(),
        }
    }
}

/// A [`JobPlan`] with node names, as plans are printed (`trainscale plan --output json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedJobPlan<'a> {
    #[serde(flatten)]
    pub key: &'a JobKey,
    pub current: i32,
    pub target: i32,
    pub min: i32,
    pub max: i32,
    pub fulfillment_before: f64,
    pub fulfillment_after: f64,
    pub reason: Reason,
    /// Kueue's word on the size (the ClusterQueue, the resource), when it decided it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kueue: Option<&'a KueueNote>,
    pub placements: Vec<NamedCount<'a>>,
    pub removals: Vec<NamedRemoval<'a>>,
}

/// Trainers placed on one named node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NamedCount<'a> {
    pub node: &'a str,
    pub trainers: u32,
}

/// Trainers removed from one named node, or (`None`) not bound to any node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NamedRemoval<'a> {
    pub node: Option<&'a str>,
    pub trainers: u32,
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

/// The plan of one pass. It borrows job keys from the `ClusterState` it was made from (copying
/// one key per job costs a cache miss each on a large cluster; [`ScalePlan::into_owned`] copies
/// them), and its node ids refer to that state, resolved to names where names are needed
/// ([`ScalePlan::named_jobs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePlan<'s> {
    pub policy: Policy,
    pub jobs: Vec<JobPlan<'s>>,
    pub summary: PlanSummary,
    /// Anything the pass wants an operator to know (e.g. the `edl` iteration cap was hit).
    pub warnings: Vec<String>,
    /// The pending masters and pservers of jobs and the nodes whose room the plan held for them
    /// before placing any trainer, in the order they got room (higher priority, then older,
    /// then namespace/name); `node` is `None` for one no node had room for.
    pub support: Vec<SupportPlacement>,
}

impl<'s> ScalePlan<'s> {
    /// The plan of one job (a scan of the plan: for a lookup or two, not one per pod or job).
    pub fn job(&self, key: &JobKey) -> Option<&JobPlan<'s>> {
        self.jobs.iter().find(|j| *j.key == *key)
    }

    /// This plan, no longer borrowing the state it was made from.
    pub fn into_owned(self) -> ScalePlan<'static> {
        ScalePlan {
            policy: self.policy,
            jobs: self.jobs.into_iter().map(JobPlan::into_owned).collect(),
            summary: self.summary,
            warnings: self.warnings,
            support: self.support,
        }
    }

    /// The job plans with node names from `state`, the state the plan was made from.
    pub fn named_jobs<'a>(&'a self, state: &'a ClusterState) -> Vec<NamedJobPlan<'a>> {
        self.jobs.iter().map(|j| j.named(state)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn reason_names_are_the_serialized_names() {
        for reason in Reason::ALL {
            assert_eq!(
                serde_json::to_value(reason).ok(),
                Some(serde_json::Value::from(reason.as_str()))
            );
        }
    }
}
