//! One pass's work, computed on a store snapshot without I/O: the plan, the rescales it calls
//! for, the pods to bind, the sizing conditions to write, invalid jobs and warnings to report.

use crate::api::JobKey;
use crate::cluster::kinds::resize_of;
use crate::planner::{JobPlan, PlannerConfig, ScalePlan, plan};

use super::actuator::Rescale;
use super::scheduling::pods::PodKey;
use super::scheduling::{Assignments, Settings, assign_with};
use super::sizing::{SizingUpdate, decide};
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
    /// Jobs left alone for a reason an Event announces (a PyTorchJob left to its HPA), not yet
    /// reported.
    pub left_alone: Vec<InvalidJob>,
    /// Jobs the plan would resize that have no trainer Job yet; not written.
    pub waiting: Vec<JobKey>,
    /// The scheduler role's binds, reservations and unschedulable pods (when it is on).
    pub assignments: Assignments,
    /// Gated pods naming the scheduler whose `PodScheduled` condition is to say so.
    pub gated: Vec<PodKey>,
    /// The jobs whose sizing conditions were looked at (decision changed or object differs).
    pub sizing: Vec<SizingUpdate>,
}

/// Plans and resolves the plan against the store.
///
/// A job of a kind sized by a field of its own object is always rescaled when its target differs.
/// A job whose trainer Job does not exist yet (just applied: the operator has not created it, or
/// another operator creates it) is not rescaled but listed in `waiting`: there is nothing to patch,
/// and a `False` scale record every pass would only be noise. Its planned room stays reserved for
/// this pass.
///
/// With `scheduler` settings, the pass also assigns the pending pods naming it to the planned
/// nodes (see [`super::scheduling::assign_with`]).
pub fn prepare(store: &Store, config: &PlannerConfig, scheduler: Option<&Settings>) -> PassWork {
    let plan = plan(store.state(), config);
    let assignments = scheduler
        .map(|s| assign_with(store.state(), store.scheduling(), &plan, s))
        .unwrap_or_default();
    let gated = scheduler
        .map(|s| store.scheduling().gated_to_report(&s.name))
        .unwrap_or_default();
    let (rescales, waiting): (Vec<Rescale>, Vec<Rescale>) = plan
        .jobs
        .iter()
        .filter(|j| j.target != j.current)
        .map(|j| rescale_of(store, j))
        .partition(|r| r.trainer_job.is_some() || resize_of(r.key.kind).on_the_object());
    let waiting = waiting.into_iter().map(|r| r.key).collect();
    let sizing = decide(
        store.state(),
        &plan,
        config,
        &store.known_sizing_of(&plan.jobs),
    );
    PassWork {
        rescales,
        invalid: store.unreported_invalid(),
        warned: store.unreported_warnings(),
        left_alone: store.unreported_left_alone(),
        waiting,
        assignments,
        gated,
        sizing,
        plan: plan.into_owned(),
    }
}

fn rescale_of(store: &Store, job: &JobPlan) -> Rescale {
    let meta = store.training_job(&job.key);
    Rescale {
        key: job.key.clone().into_owned(),
        uid: meta.and_then(|m| m.uid.clone()),
        resource_version: meta.and_then(|m| m.resource_version.clone()),
        trainer_job: store.trainer_job(&job.key).cloned(),
        size_at: meta.and_then(|m| m.size_at.clone()),
        current: job.current,
        target: job.target,
        reason: job.reason,
    }
}
