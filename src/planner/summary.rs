//! Totals of a plan, computed from the state and the per-job decisions.

use super::{JobPlan, PlanSummary, SupportPlacement};
use crate::api::Resources;
use crate::cluster::{ClusterState, NodeId};

/// Free resources of each schedulable node once a plan is applied.
pub type FreeAfter = Vec<(NodeId, Resources)>;

/// Free resources per schedulable node once the plans' placements and removals, and the
/// support pods' placements, made from `state`, are applied.
pub fn free_after(
    state: &ClusterState,
    jobs: &[JobPlan],
    support: &[SupportPlacement],
) -> FreeAfter {
    let free = free_by_node(state, jobs, support);
    state
        .nodes()
        .filter(|(_, n)| n.schedulable())
        .map(|(id, _)| (id, free[id as usize]))
        .collect()
}

/// [`free_after`] indexed by node id (zero for the nodes that are not schedulable).
pub fn free_by_node(
    state: &ClusterState,
    jobs: &[JobPlan],
    support: &[SupportPlacement],
) -> Vec<Resources> {
    let mut free = vec![Resources::ZERO; state.node_id_bound()];
    for (id, n) in state.nodes().filter(|(_, n)| n.schedulable()) {
        // As the planner counts it: pods being deleted hold nothing once the plan is real.
        free[id as usize] = n.free_after_terminating();
    }
    let schedulable = |id: NodeId| state.node(id).is_some_and(|n| n.schedulable());
    for plan in jobs {
        for p in plan.placements.iter().filter(|p| schedulable(p.node)) {
            free[p.node as usize] -= plan.trainer.times(i64::from(p.trainers));
        }
        for r in &plan.removals {
            if let Some(id) = r.node.filter(|id| schedulable(*id)) {
                free[id as usize] += plan.trainer.times(i64::from(r.trainers));
            }
        }
    }
    for placed in support {
        if let Some(id) = placed.node.filter(|id| schedulable(*id))
            && let Some(pod) = state.pod(&placed.pod.0, &placed.pod.1)
        {
            free[id as usize] -= pod.requests;
        }
    }
    free
}

/// Summarises the decisions of a pass.
pub fn summarize(jobs: &[JobPlan], free: &FreeAfter) -> PlanSummary {
    let mut s = PlanSummary {
        min_fulfillment: 1.0,
        ..PlanSummary::default()
    };
    for j in jobs {
        let delta = j.target - j.current;
        // Saturating: a declared size above the cap may be brought down by up to 2^31 - 1.
        if delta > 0 {
            s.trainers_added = s.trainers_added.saturating_add(delta.unsigned_abs());
            s.jobs_scaled_up += 1;
        } else if delta < 0 {
            s.trainers_removed = s.trainers_removed.saturating_add(delta.unsigned_abs());
            s.jobs_scaled_down += 1;
        }
        if j.min < j.max {
            s.min_fulfillment = s.min_fulfillment.min(j.fulfillment_after);
        }
    }
    // GPU trainers that still want room: jobs below min, or elastic jobs below max.
    let mut wanting: Vec<Resources> = jobs
        .iter()
        .filter(|j| j.target < j.max || j.target < j.min)
        .map(|j| j.trainer)
        .filter(|t| t.gpu > 0)
        .collect();
    // A node hosts some wanting trainer iff it hosts one of the smallest shapes. A shape that
    // fits in another sorts before it, so one sweep against the smallest kept so far finds them.
    wanting.sort_unstable();
    wanting.dedup();
    let mut smallest: Vec<Resources> = Vec::new();
    for t in wanting {
        if !smallest.iter().any(|m| m.fits_in(&t)) {
            smallest.push(t);
        }
    }
    let wanting = smallest;
    for (_, f) in free {
        if f.gpu <= 0 {
            continue;
        }
        s.free_gpus_after = s.free_gpus_after.saturating_add(f.gpu);
        if !wanting.is_empty() && !wanting.iter().any(|t| t.fits_in(f)) {
            s.stranded_gpus_after = s.stranded_gpus_after.saturating_add(f.gpu);
        }
    }
    s
}
