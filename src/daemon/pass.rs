//! One pass's work, computed under the store lock without I/O: the plan, the rescales it calls
//! for (with victims resolved to pod names), invalid jobs and warnings to report.

use crate::api::JobKey;
use crate::planner::{JobPlan, PlannerConfig, ScalePlan, plan};

use super::actuator::Rescale;
use super::store::{InvalidJob, Store};

/// What a pass has to do.
#[derive(Debug)]
pub struct PassWork {
    /// Owned (it outlives the store lock); its node ids refer to the store's state at planning
    /// time, and `rescales` are resolved already.
    pub plan: ScalePlan<'static>,
    pub rescales: Vec<Rescale>,
    pub invalid: Vec<InvalidJob>,
    /// Planned jobs with a warning only the autoscaler sees, not yet reported.
    pub warned: Vec<InvalidJob>,
    /// Jobs the plan would resize that have no trainer Job yet; not written.
    pub waiting: Vec<JobKey>,
}

/// Plans and resolves the plan against the store.
///
/// A job whose trainer Job does not exist yet (just applied: the operator has not created it, or
/// another operator creates it) is not rescaled but listed in `waiting`: there is nothing to patch,
/// and a `False` scale record every pass would only be noise. Its planned room stays reserved for
/// this pass.
pub fn prepare(store: &Store, config: &PlannerConfig) -> PassWork {
    let plan = plan(store.state(), config);
    let (rescales, waiting): (Vec<Rescale>, Vec<Rescale>) = plan
        .jobs
        .iter()
        .filter(|j| j.target != j.current)
        .map(|j| rescale_of(store, j))
        .partition(|r| r.trainer_job.is_some());
    let waiting = waiting.into_iter().map(|r| r.key).collect();
    PassWork {
        rescales,
        invalid: store.unreported_invalid(),
        warned: store.unreported_warnings(),
        waiting,
        plan: plan.into_owned(),
    }
}

fn rescale_of(store: &Store, job: &JobPlan) -> Rescale {
    Rescale {
        key: job.key.clone().into_owned(),
        uid: store.training_job(&job.key).and_then(|m| m.uid.clone()),
        trainer_job: store.trainer_job(&job.key).cloned(),
        current: job.current,
        target: job.target,
        reason: job.reason,
        victims: if job.target < job.current {
            victims(store, job)
        } else {
            Vec::new()
        },
    }
}

/// The trainer pods the plan's removals name: unbound ones first (node `None`), then the newest
/// live pods on each named node. `job` must have been planned from `store`'s current state.
pub fn victims(store: &Store, job: &JobPlan) -> Vec<String> {
    let state = store.state();
    let namespace = &*job.key.namespace;
    let mut live: Vec<(&str, Option<&str>, i64)> = store
        .trainer_pods(&job.key)
        .filter_map(|name| {
            let pod = state.pod(namespace, name)?;
            let finished = pod.phase == crate::cluster::PodPhase::Finished;
            (!pod.terminating && !finished).then_some((name, pod.node.as_deref(), pod.created))
        })
        .collect();
    // Newest first, then by name for determinism.
    live.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
    let mut chosen = Vec::new();
    let mut removals: Vec<_> = job.removals.iter().collect();
    removals.sort_by_key(|r| r.node.is_some());
    for removal in removals {
        // The plan was made from this state: its node ids name nodes here.
        let wanted = match removal.node.map(|id| (id, state.node(id))) {
            None => None,
            Some((_, Some(node))) => Some(&*node.name),
            Some((id, None)) => {
                tracing::warn!(job = %job.key, node = id, "removal names an unknown node id; skipped");
                continue;
            }
        };
        let picks = live
            .iter()
            .filter(|(name, node, _)| *node == wanted && !chosen.contains(&name.to_string()))
            .take(removal.trainers as usize)
            .map(|(name, _, _)| name.to_string())
            .collect::<Vec<_>>();
        chosen.extend(picks);
    }
    chosen
}
