//! The planning pass: from a `ClusterState` to a `ScalePlan`. Pure and deterministic: no I/O, no
//! clock (time comes in through [`PlannerConfig::now`]), no randomness.

mod bulk;
mod candidates;
#[cfg(test)]
mod capacity_tests;
mod edl;
pub mod explain;
mod fill_queue;
mod fulfillment;

mod nodes;
mod plan;
pub mod progress;
mod quota;
mod rebalance;
mod relief;
mod relocate;
mod sorted_blocks;
mod static_policy;
mod summary;
mod support;

pub use plan::{
    JobPlan, KueueNote, NamedCount, NamedJobPlan, NamedRemoval, NodeCount, PlanSummary, Reason,
    Removal, ScalePlan, aligned,
};
pub use support::SupportPlacement;

use crate::cluster::ClusterState;

/// Which policy decides the trainer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Fair fulfillment with real per-node bin packing (ours).
    #[default]
    Fulfillment,
    /// The original Go autoscaler's dry run, reproduced.
    Edl,
    /// No elasticity: fixed-size gangs in arrival order with backfill.
    Static,
    /// `fulfillment`'s guarantees, but spare trainers go to the job whose next trainer adds the
    /// largest relative speedup (its `trainscale.io/speedup` curve; linear without one).
    Goodput,
    /// `fulfillment`'s guarantees, but spare trainers go to the job that finishes soonest at its
    /// current size by its progress reports (see [`progress`]); a job without a report is taken
    /// to have as long left as it has existed.
    Progress,
}

impl Policy {
    /// Every policy, in the order the CLI lists them.
    pub const ALL: [Policy; 5] = [
        Policy::Fulfillment,
        Policy::Edl,
        Policy::Static,
        Policy::Goodput,
        Policy::Progress,
    ];

    /// What the policy does, in one sentence (the CLI's `--help` lists it).
    pub fn summary(self) -> &'static str {
        match self {
            Policy::Fulfillment => "Fair fulfillment with real per-node bin packing (ours)",
            Policy::Edl => "The original Go autoscaler's dry run, reproduced",
            Policy::Static => "No elasticity: fixed-size gangs in arrival order with backfill",
            Policy::Goodput => {
                "`fulfillment`'s guarantees, but spare trainers go to the job whose next trainer \
                 adds the largest relative speedup (its `trainscale.io/speedup` curve; linear \
                 without one)"
            }
            Policy::Progress => {
                "`fulfillment`'s guarantees, but spare trainers go to the job that finishes \
                 soonest at its current size by its progress reports; a job without a report is \
                 taken to have as long left as it has existed"
            }
        }
    }

    /// The policy's name as the CLI and reports write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Fulfillment => "fulfillment",
            Policy::Edl => "edl",
            Policy::Static => "static",
            Policy::Goodput => "goodput",
            Policy::Progress => "progress",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fulfillment" => Ok(Policy::Fulfillment),
            "edl" => Ok(Policy::Edl),
            "static" => Ok(Policy::Static),
            "goodput" => Ok(Policy::Goodput),
            "progress" => Ok(Policy::Progress),
            other => Err(format!(
                "unknown policy {other:?} (known: fulfillment, edl, static, goodput, progress)"
            )),
        }
    }
}

/// Everything a pass needs besides the state.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannerConfig {
    pub policy: Policy,
    /// `edl` only: the load above which jobs are scaled down (the original's default 0.97).
    pub max_load_desired: f64,
    /// Current time, seconds since the epoch; used for cooldowns.
    pub now: i64,
    /// `fulfillment` only: seconds a job is left alone after its last rescale.
    pub cooldown_s: i64,
    /// `fulfillment` and `goodput`: the fewest trainers a bulk step hands out, and the fewest jobs
    /// at one water-filling level that are given their trainers at once; less is left to exact
    /// water-filling, one job at a time (see docs/planner.md).
    pub bulk_min_trainers: u32,
    /// `edl` only: outer iterations before the pass gives up with a warning.
    pub edl_iteration_cap: u32,
    /// `goodput` only: a job grows only by trainers that each add at least this relative
    /// speedup (`s(n+1)/s(n) − 1`); 0 lets it grow to max-instance.
    pub min_marginal_speedup: f64,
    /// `progress` only: a job grows only by trainers that each add at least this much speed in
    /// units of one trainer's (`s(n+1) − s(n)`, `s(1) = 1`), in [0, 1]; 0 lets it grow to
    /// max-instance.
    pub progress_min_marginal_speedup: f64,
    /// `progress` only: room no job takes at `progress_min_marginal_speedup` goes, in the same
    /// order, to jobs at their useful size, by trainers that add at least this much speed on
    /// average (in [0, 1]; at or above `progress_min_marginal_speedup`: none).
    pub progress_spare_min_marginal_speedup: f64,
    /// `progress` only: seconds a job may stay at or below min (since its last rescale, or its
    /// creation) before it goes ahead of every job that finishes sooner.
    pub starvation_bound_s: i64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            policy: Policy::Fulfillment,
            max_load_desired: 0.97,
            now: 0,
            cooldown_s: 0,
            bulk_min_trainers: 256,
            edl_iteration_cap: 10_000,
            min_marginal_speedup: 0.0,
            progress_min_marginal_speedup: progress::DEFAULT_MIN_MARGINAL_SPEEDUP,
            progress_spare_min_marginal_speedup: progress::DEFAULT_SPARE_MIN_MARGINAL_SPEEDUP,
            starvation_bound_s: progress::DEFAULT_STARVATION_BOUND_S,
        }
    }
}

/// What a policy's pass decided.
struct Outcome<'s> {
    jobs: Vec<JobPlan<'s>>,
    warnings: Vec<String>,
    /// The free room the plan leaves, when the pass kept it (else computed from the plans).
    free_after: Option<summary::FreeAfter>,
    /// Where the pending masters and pservers go.
    support: Vec<SupportPlacement>,
}

/// Runs one planning pass with the configured policy.
pub fn plan<'s>(state: &'s ClusterState, config: &PlannerConfig) -> ScalePlan<'s> {
    let Outcome {
        jobs,
        warnings,
        free_after,
        support,
    } = match config.policy {
        Policy::Fulfillment | Policy::Goodput | Policy::Progress => {
            fulfillment::plan(state, config)
        }
        Policy::Edl => edl::plan(state, config),
        Policy::Static => static_policy::plan(state),
    };
    let free_after = free_after.unwrap_or_else(|| summary::free_after(state, &jobs, &support));
    let summary = summary::summarize(&jobs, &free_after);
    ScalePlan {
        policy: config.policy,
        jobs,
        summary,
        warnings,
        support,
    }
}
