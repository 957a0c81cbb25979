//! The `static` policy: no elasticity, the rigid baseline. Each job runs at its min-instance (the
//! simulator gives a trace job min = max = its requested size), admitted as a whole gang in
//! arrival order; later jobs that fit are backfilled; running jobs are never resized. Trainers
//! asked for beyond that size are dropped with reason `over_max`. A Kueue-managed job's gang is
//! admitted only within its quota ceiling (`quota_exhausted` otherwise), and one whose scale-up
//! waits for Kueue keeps its size (`awaiting_admission`).

use super::candidates::{candidates, cap_fair_maxes};
use super::nodes::NodeIndex;
use super::quota::{GiveBack, cap_quota};
use super::relocate::{Repairs, place_gang};
use super::{Outcome, Reason, support};
use crate::cluster::ClusterState;

/// Runs the `static` pass.
pub fn plan<'s>(state: &'s ClusterState) -> Outcome<'s> {
    let mut index = NodeIndex::new(state);
    // Pending masters and pservers get room before any gang is admitted.
    let support = support::place(&support::pending(state), &mut index);
    let mut jobs = candidates(state);
    // Only for the fulfillment it reports: static never grows a job.
    cap_fair_maxes(state, &mut jobs);
    // A gang's ceiling under Kueue's quota (nothing to do without Kueue objects), counting on
    // no quota given back: static shrinks no running job.
    if state.quota().active() {
        let holding = vec![false; jobs.len()];
        cap_quota(state, &mut jobs, &holding, GiveBack::No);
    }
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| (jobs[a].created, jobs[a].key).cmp(&(jobs[b].created, jobs[b].key)));
    let mut decided = vec![(0, Reason::Unchanged); jobs.len()];
    for i in order {
        let (bound, current, min) = (jobs[i].bound, jobs[i].current, jobs[i].min);
        let size = min.max(0);
        decided[i] = if jobs[i].awaiting() {
            (current, Reason::AwaitingAdmission)
        } else if jobs[i].min_above_cap {
            // No gang of more pods than the nodes hold fits: it waits.
            (current, Reason::Starving)
        } else if bound < size && size > jobs[i].quota_max {
            // Its quota does not hold the gang.
            let reason = if jobs[i].quota_note().is_some() {
                Reason::QuotaExhausted
            } else {
                Reason::Starving
            };
            (current, reason)
        } else if bound >= size {
            let target = bound.max(size);
            let reason = if target < current {
                Reason::OverMax
            } else {
                Reason::Unchanged
            };
            (target, reason)
        } else if place_gang(&mut jobs, &mut index, i, size - bound, &mut Repairs::none()) {
            (size, Reason::ScaleUp)
        } else {
            (current, Reason::Starving)
        };
    }
    let plans = jobs
        .into_iter()
        .zip(decided)
        .map(|(j, (target, reason))| j.finish(&index, target, reason))
        .collect();
    Outcome {
        jobs: plans,
        warnings: Vec::new(),
        free_after: Some(index.schedulable()),
        support,
    }
}
