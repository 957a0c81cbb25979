//! Why each job is at its size: a one-line message with the numbers that decide it, and, for a
//! job that wants more than it got, its place in the policy's queue. Computed after a pass and
//! only where asked (`plan`, `explain`), so the pass itself costs nothing more.

use std::cell::{OnceCell, RefCell};
use std::cmp::Reverse;
use std::collections::HashMap;

use serde::Serialize;

use super::progress::{self, Standing};
use super::quota::{describe as describe_quota, room_after};
use super::summary::free_by_node;
use super::{JobPlan, PlannerConfig, Policy, Reason, ScalePlan, aligned};
use crate::api::speedup::SpeedupCurve;
use crate::api::{GPU_RESOURCE_NAMES, Quantity, Resources};
use crate::cluster::filters::{Extended, PodClassId};
use crate::cluster::{ClusterState, JobInfo, NodeId};

/// What a job's decision says about itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    pub message: String,
    /// 1 = the next to get room, in the policy's own order; only for jobs that want more than
    /// they got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
}

/// The explanation of every job of `plan`, in the plan's order. `state` is the state the plan was
/// made from.
pub fn explain_all(
    state: &ClusterState,
    plan: &ScalePlan,
    config: &PlannerConfig,
) -> Vec<Explanation> {
    let every: Vec<usize> = (0..plan.jobs.len()).collect();
    explain_jobs(state, plan, config, &every)
}

/// The explanations of the jobs at `which` (indexes into `plan.jobs`), in that order; the cost
/// beyond the queue and the free room is per job asked about.
pub fn explain_jobs(
    state: &ClusterState,
    plan: &ScalePlan,
    config: &PlannerConfig,
    which: &[usize],
) -> Vec<Explanation> {
    if which.is_empty() {
        return Vec::new();
    }
    // The queue only places jobs that want more: without one asked about, it is not needed.
    let queue = if which
        .iter()
        .any(|&i| plan.jobs.get(i).is_some_and(wants_more))
    {
        queue(state, plan, config)
    } else {
        Vec::new()
    };
    let mut positions = vec![None; plan.jobs.len()];
    for (p, &i) in queue.iter().enumerate() {
        positions[i] = Some(p);
    }
    let free: Free = free_by_node(state, &plan.jobs, &plan.support);
    let slots = slots_after(state, plan);
    let room = Room {
        state,
        plan,
        free: &free,
        slots: &slots,
        classes: RefCell::default(),
        extended: RefCell::default(),
        quota: OnceCell::new(),
    };
    which
        .iter()
        .filter_map(|&i| plan.jobs.get(i).map(|job| (i, job)))
        .map(|(i, job)| {
            let position = positions[i];
            let mut message = message(&room, plan, job, config);
            if let Some(p) = position {
                let ahead: Vec<String> = queue[..p]
                    .iter()
                    .rev()
                    .take(3)
                    .rev()
                    .map(|&q| plan.jobs[q].key.to_string())
                    .collect();
                message.push_str(&format!(
                    "; {} in line for {}",
                    ordinal(p + 1),
                    describe(job.trainer)
                ));
                if !ahead.is_empty() {
                    let more = if p > ahead.len() { ", …" } else { "" };
                    message.push_str(&format!("; ahead: {}{more}", ahead.join(", ")));
                }
                if config.policy == Policy::Progress
                    && let Some(&q) = p.checked_sub(1).and_then(|a| queue.get(a))
                {
                    message.push_str(&sooner(state, &plan.jobs[q], job, config));
                }
            }
            Explanation {
                message,
                queue_position: position.map(|p| p as u32 + 1),
            }
        })
        .collect()
}

/// The jobs that want more than they got (below min, or below max with no room), in the order
/// the policy would hand them room: gangs below min first (higher priority, then older, then
/// name), then the others by their share at their target (least fulfilled, or under `goodput`
/// the largest gain of the next trainer), then the same tie order.
fn queue(state: &ClusterState, plan: &ScalePlan, config: &PlannerConfig) -> Vec<usize> {
    let infos = infos(state, &plan.jobs);
    let mut waiting: Vec<(bool, f64, Reverse<i32>, i64, usize)> = plan
        .jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| wants_more(j))
        .map(|(i, j)| {
            let info = infos[i];
            let (priority, created) = info.map_or((0, 0), |info| (info.priority, info.created));
            let lead = info
                .filter(|_| config.policy == Policy::Progress)
                .map(|info| Standing::of(info, j.current, j.min, config).lead());
            let share = if let Some(lead) = lead {
                lead
            } else if matches!(config.policy, Policy::Goodput | Policy::Progress) {
                -SpeedupCurve::gain_of(info.and_then(|i| i.speedup.as_deref()), j.target)
            } else {
                j.fulfillment_after
            };
            (
                j.reason != Reason::Starving,
                share,
                Reverse(priority),
                created,
                i,
            )
        })
        .collect();
    waiting.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
            .then(a.4.cmp(&b.4))
    });
    waiting.into_iter().map(|w| w.4).collect()
}

/// `progress`: why the job just ahead in line (`ahead`) goes before `job`: it finishes sooner
/// (and by how much), it has waited at min past the starvation bound, or `job` has no estimate.
fn sooner(state: &ClusterState, ahead: &JobPlan, job: &JobPlan, config: &PlannerConfig) -> String {
    let standing = |j: &JobPlan| {
        state
            .job(&j.key)
            .and_then(|s| s.info.as_ref())
            .map(|info| Standing::of(info, j.current, j.min, config))
    };
    let s = |v: f64| format!("{v:.0} s");
    match (standing(ahead), standing(job)) {
        (Some(Standing::Aged(waited)), _) => format!(
            "; {} has waited at min {} (past the {} starvation bound)",
            ahead.key,
            s(waited as f64),
            s(config.starvation_bound_s as f64)
        ),
        (Some(Standing::Finishes(a)), Some(Standing::Finishes(b))) => format!(
            "; {} finishes sooner: {} left vs {} ({} sooner)",
            ahead.key,
            s(a),
            s(b),
            s(b - a)
        ),
        (Some(Standing::Finishes(a)), Some(Standing::Guessed(b))) => format!(
            "; {} finishes in {}, and this job reports no progress: it has existed {}, taken \
             as its time left",
            ahead.key,
            s(a),
            s(b as f64)
        ),
        (Some(Standing::Guessed(a)), Some(Standing::Finishes(b))) => format!(
            "; {} reports no progress and has existed {}, taken as its time left, against {} \
             left here",
            ahead.key,
            s(a as f64),
            s(b)
        ),
        (Some(Standing::Guessed(a)), Some(Standing::Guessed(b))) => format!(
            "; neither reports progress: {} has existed {}, this job {} (each taken as its \
             time left)",
            ahead.key,
            s(a as f64),
            s(b as f64)
        ),
        _ => String::new(),
    }
}

/// Each planned job's info.
fn infos<'s>(state: &'s ClusterState, jobs: &[JobPlan]) -> Vec<Option<&'s JobInfo>> {
    aligned(
        state
            .job_slots()
            .map(|(key, slot)| (key, slot.info.as_ref())),
        jobs,
        |key| state.job(key).map(|s| s.info.as_ref()),
    )
    .into_iter()
    .map(Option::flatten)
    .collect()
}

/// Whether the job ends the pass wanting more than it got: below its gang, or below max-instance
/// with nothing but room holding it back (not a cooldown, a marginal-gain cap or max-instance).
fn wants_more(job: &JobPlan) -> bool {
    let held_otherwise = matches!(
        job.reason,
        Reason::Cooldown
            | Reason::LowGain
            | Reason::OverMax
            | Reason::QuotaExhausted
            | Reason::AwaitingAdmission
    );
    let fixed = job.reason == Reason::Unchanged && job.min == job.max;
    job.reason == Reason::Starving || (job.target < job.max && !held_otherwise && !fixed)
}

/// The message of one job's decision.
fn message(room: &Room, plan: &ScalePlan, job: &JobPlan, config: &PlannerConfig) -> String {
    let state = room.state;
    let slot = state.job(&job.key);
    let info = slot.and_then(|s| s.info.as_ref());
    let class = slot.and_then(|s| s.class);
    let (c, t) = (job.current, job.target);
    match job.reason {
        Reason::ScaleUp => {
            let below_min =
                c < job.min || slot.is_some_and(|s| (s.trainers.bound as i32) < job.min);
            let grew = if below_min {
                format!("its gang of {} is placed ({c} → {t})", trainers(job.min))
            } else {
                format!("grows {c} → {t}")
            };
            if t < job.max {
                format!(
                    "{grew}, then no room for more: {}",
                    room.shortfall(job.trainer, class, 1)
                )
            } else {
                format!("{grew}, to max-instance {}", job.max)
            }
        }
        Reason::Reclaimed if job.kueue.is_some() => room.kueue(job),
        Reason::Reclaimed => {
            let grew: Vec<String> = plan
                .jobs
                .iter()
                .filter(|j| j.target > j.current && j.key != job.key)
                .take(3)
                .map(|j| j.key.to_string())
                .collect();
            format!(
                "gives {} trainer(s) to jobs below their min or less served ({c} → {t}){}",
                c - t,
                if grew.is_empty() {
                    String::new()
                } else {
                    format!(": {}", grew.join(", "))
                }
            )
        }
        Reason::Overload => format!(
            "shrinks {c} → {t}: a node it runs on holds more than it has (its allocatable shrank \
             or pods were bound outside the plan)"
        ),
        Reason::OverMax if c > job.max => {
            format!("brought down {c} → {t}, to max-instance {}", job.max)
        }
        Reason::OverMax => format!("at max-instance {}", job.max),
        Reason::Cooldown => cooldown(info, config, c),
        Reason::Unchanged if job.min == job.max => format!("fixed size {}", job.min),
        Reason::Unchanged if t >= job.max => format!("at max-instance {}", job.max),
        Reason::Unchanged => format!(
            "keeps {t} of max {}: {}",
            job.max,
            held(room, job, info, config, class)
        ),
        Reason::LowGain if config.policy == Policy::Progress => {
            let curve = info.and_then(|i| i.speedup.as_deref());
            format!("at {t}: {}", progress_held(curve, t, job.max, config))
        }
        Reason::LowGain => {
            let gain = SpeedupCurve::gain_of(info.and_then(|i| i.speedup.as_deref()), t);
            format!(
                "at {t}: its next trainer would add {:.0}% speed, less than --min-marginal-speedup {}",
                gain * 100.0,
                config.min_marginal_speedup
            )
        }
        Reason::Starving if info.is_some_and(|i| i.min > job.min) => format!(
            "waits for its gang: min-instance {} is more than the {} pods the cluster's nodes \
             can hold",
            info.map_or(0, |i| i.min),
            state.size_cap()
        ),
        Reason::Starving => {
            let missing = (job.min - slot.map_or(0, |s| s.trainers.bound as i32)).max(1);
            format!(
                "waits for its gang: {}",
                room.shortfall(job.trainer, class, missing)
            )
        }
        Reason::NoFit if t < c => format!(
            "asks {c}, {t} placed ({c} → {t}) of max {}: {}",
            job.max,
            held(room, job, info, config, class)
        ),
        Reason::NoFit => format!(
            "at {t} of max {}: {}",
            job.max,
            held(room, job, info, config, class)
        ),
        Reason::QuotaExhausted => {
            let quota = room.kueue(job);
            if t < job.min {
                format!("waits for its gang of {}: {quota}", trainers(job.min))
            } else if t > c {
                format!("grows {c} → {t}, then {quota}")
            } else {
                format!("at {t} of max {}: {quota}", job.max)
            }
        }
        Reason::AwaitingAdmission => room.kueue(job),
    }
}

/// What holds a job below max-instance: the policy's own rule where that is what holds it (the
/// room would take another trainer), else what the room lacks.
fn held(
    room: &Room,
    job: &JobPlan,
    info: Option<&JobInfo>,
    config: &PlannerConfig,
    class: Option<PodClassId>,
) -> String {
    let t = job.target;
    match config.policy {
        Policy::Static => {
            return "the static policy runs every job at its min-instance and never resizes it \
                    (free room is not what holds it)"
                .to_string();
        }
        Policy::Edl if room.would_fit(job.trainer, class) => {
            return format!(
                "the edl policy grows a job only while the cluster's CPU requests stay under \
                 --max-load-desired {} of its CPU and more than one trainer's memory is free \
                 cluster-wide; another trainer would fit on a node",
                config.max_load_desired
            );
        }
        Policy::Progress if room.would_fit(job.trainer, class) => {
            let curve = info.and_then(|i| i.speedup.as_deref());
            return format!(
                "another trainer would fit, but {}",
                progress_held(curve, t, job.max, config)
            );
        }
        Policy::Goodput if room.would_fit(job.trainer, class) => {
            let gain = SpeedupCurve::gain_of(info.and_then(|i| i.speedup.as_deref()), t);
            return format!(
                "another trainer would fit, but it would add {:.0}% speed, less than \
                 --min-marginal-speedup {}",
                gain * 100.0,
                config.min_marginal_speedup
            );
        }
        _ => {}
    }
    room.shortfall(job.trainer, class, 1)
}

/// Why `progress` grows a job at `t` trainers no further although room is free: what more
/// trainers would add on average, against the spare threshold (the lower of the two).
fn progress_held(curve: Option<&SpeedupCurve>, t: i32, max: i32, config: &PlannerConfig) -> String {
    let added = progress::best_added_speed(curve, t, max);
    let spare = progress::spare_threshold(config);
    format!(
        "more trainers would add at most {added:.2} of one trainer's speed each on average, \
         less than --progress-spare-min-marginal-speedup {spare} (room no job wants at \
         --progress-min-marginal-speedup {})",
        config.progress_min_marginal_speedup
    )
}

/// The cooldown message: when the job was last rescaled and when it may be again.
fn cooldown(info: Option<&JobInfo>, config: &PlannerConfig, current: i32) -> String {
    let Some(last) = info.and_then(|i| i.last_scale) else {
        return format!("held at {current} by the cooldown");
    };
    format!(
        "rescaled to {current} at {}; the cooldown allows the next rescale after {}",
        time(last),
        time(last.saturating_add(config.cooldown_s))
    )
}

/// Seconds since the epoch as RFC 3339.
fn time(seconds: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .map_or_else(|_| seconds.to_string(), |t| t.to_string())
}

/// An amount of one resource of a request or a node.
type Amount = fn(Resources) -> i64;

/// A resource as messages name it: its name, its amount, how to print an amount.
type Measure = (&'static str, Amount, fn(i64) -> String);

/// Free room per schedulable node once the plan is applied, by node id (zero for the others).
type Free = Vec<Resources>;

/// Free pod slots per schedulable node once the plan is applied, by node id (zero for the
/// others). Pods being deleted hold none, as the planner and [`free_by_node`] count them.
fn slots_after(state: &ClusterState, plan: &ScalePlan) -> Vec<i64> {
    let mut slots = vec![0i64; state.node_id_bound()];
    for (id, n) in state.nodes().filter(|(_, n)| n.schedulable()) {
        slots[id as usize] = n.free_pods_after_terminating();
    }
    let mut add = |id: NodeId, n: i64| {
        if let Some(s) = slots.get_mut(id as usize) {
            *s += n;
        }
    };
    for job in &plan.jobs {
        for p in &job.placements {
            add(p.node, -i64::from(p.trainers));
        }
        for r in &job.removals {
            if let Some(id) = r.node {
                add(id, i64::from(r.trainers));
            }
        }
    }
    for placed in &plan.support {
        if let Some(id) = placed.node {
            add(id, -1);
        }
    }
    slots
}

/// The resources messages name, in the order they are checked.
const MEASURES: [Measure; 3] = [
    (GPU_RESOURCE_NAMES[0], |r| r.gpu, |v| v.to_string()),
    ("cpu", |r| r.cpu_milli, cores),
    ("memory", |r| r.memory, bytes),
];

/// What the nodes one trainer class may use offer, found once per class.
#[derive(Debug, Clone)]
struct ClassRoom {
    schedulable: usize,
    eligible: usize,
    /// Per [`MEASURES`] entry: the most allocatable one node has, and that node.
    largest: [(i64, NodeId); 3],
    /// Per [`MEASURES`] entry: the most free room one node has after the plan, and that node.
    freest: [(i64, NodeId); 3],
    /// Whether some node has a free pod slot after the plan.
    slot_free: bool,
}

/// The state a plan was made from, with the free room the plan leaves.
struct Room<'a> {
    state: &'a ClusterState,
    plan: &'a ScalePlan<'a>,
    free: &'a Free,
    /// Free pod slots after the plan, by node id.
    slots: &'a [i64],
    classes: RefCell<HashMap<Option<PodClassId>, ClassRoom>>,
    /// Free amounts of other resources after the plan, by resource name then node id; found
    /// once per resource asked about.
    extended: RefCell<HashMap<String, Vec<i64>>>,
    /// Kueue's quota once the plan is applied; found once, when a message needs it.
    quota: OnceCell<crate::cluster::quota::QuotaRoom<'a>>,
}

impl Room<'_> {
    /// What Kueue's note on `job` says (its quota, or the admission it waits for).
    fn kueue(&self, job: &JobPlan) -> String {
        let Some(note) = job.kueue.as_deref() else {
            return "held by Kueue".to_string();
        };
        let room = self
            .quota
            .get_or_init(|| room_after(self.state, &self.plan.jobs));
        describe_quota(self.state, room, job, note)
    }

    /// What the nodes `class` may use offer (schedulable ones; ties go to the first by name).
    fn class_room(&self, class: Option<PodClassId>) -> ClassRoom {
        if let Some(room) = self.classes.borrow().get(&class) {
            return room.clone();
        }
        let state = self.state;
        let mut room = ClassRoom {
            schedulable: 0,
            eligible: 0,
            largest: [(i64::MIN, 0); 3],
            freest: [(i64::MIN, 0); 3],
            slot_free: false,
        };
        // `nodes()` goes in name order: the first node with the most wins ties.
        let eligible = state
            .nodes()
            .filter(|(_, slot)| slot.schedulable())
            .filter_map(|(id, slot)| {
                room.schedulable += 1;
                let alloc = slot.info.as_ref()?.allocatable;
                state
                    .eligible(class, id)
                    .then_some((id, alloc, self.free_on(id)))
            });
        for (id, alloc, free) in eligible {
            room.eligible += 1;
            room.slot_free |= self.slots_on(id) > 0;
            for (k, (_, amount, _)) in MEASURES.iter().enumerate() {
                if amount(alloc) > room.largest[k].0 {
                    room.largest[k] = (amount(alloc), id);
                }
                let f = amount(free).max(0);
                if f > room.freest[k].0 {
                    room.freest[k] = (f, id);
                }
            }
        }
        self.classes.borrow_mut().insert(class, room.clone());
        room
    }

    fn free_on(&self, id: NodeId) -> Resources {
        self.free
            .get(id as usize)
            .copied()
            .unwrap_or(Resources::ZERO)
    }

    fn slots_on(&self, id: NodeId) -> i64 {
        self.slots.get(id as usize).copied().unwrap_or(0)
    }

    /// How much of other resource `name` node `id` has free once the plan is applied.
    fn extended_on(&self, id: NodeId, name: &str) -> i64 {
        if let Some(free) = self.extended.borrow().get(name) {
            return free.get(id as usize).copied().unwrap_or(0);
        }
        let state = self.state;
        let mut free: Vec<i64> = (0..state.node_id_bound() as NodeId)
            .map(|id| state.free_extended(id, name))
            .collect();
        let mut add = |id: NodeId, amount: i64| {
            if let Some(f) = free.get_mut(id as usize) {
                *f = f.saturating_add(amount);
            }
        };
        for job in &self.plan.jobs {
            let each = state
                .job(&job.key)
                .and_then(|slot| slot.class)
                .and_then(|class| state.eligibility().constraints(class))
                .and_then(|c| c.extended.get(name).copied())
                .unwrap_or(0);
            if each == 0 {
                continue;
            }
            for p in &job.placements {
                add(p.node, -each.saturating_mul(i64::from(p.trainers)));
            }
            for r in &job.removals {
                if let Some(id) = r.node {
                    add(id, each.saturating_mul(i64::from(r.trainers)));
                }
            }
        }
        for placed in &self.plan.support {
            let each = state
                .pod(&placed.pod.0, &placed.pod.1)
                .and_then(|pod| pod.extended.get(name).copied());
            if let (Some(id), Some(each)) = (placed.node, each) {
                add(id, -each);
            }
        }
        let on = free.get(id as usize).copied().unwrap_or(0);
        self.extended.borrow_mut().insert(name.to_string(), free);
        on
    }

    /// How many trainers requesting `extended` each node `id`'s free other resources hold
    /// once the plan is applied, and the first resource that holds none (with its amount).
    fn extended_fit<'e>(
        &self,
        id: NodeId,
        extended: &'e Extended,
    ) -> (i64, Option<(&'e str, i64)>) {
        let mut fit = i64::MAX;
        let mut short = None;
        for (name, amount) in extended.iter().filter(|(_, a)| **a > 0) {
            let n = (self.extended_on(id, name) / amount).max(0);
            if n == 0 && short.is_none() {
                short = Some((name.as_str(), *amount));
            }
            fit = fit.min(n);
        }
        (fit, short)
    }

    /// The nodes `class` may use that are schedulable, in name order.
    fn eligible_nodes(&self, class: Option<PodClassId>) -> impl Iterator<Item = NodeId> + '_ {
        let state = self.state;
        state
            .nodes()
            .filter(move |(id, slot)| slot.schedulable() && state.eligible(class, *id))
            .map(|(id, _)| id)
    }

    fn name(&self, id: NodeId) -> &str {
        self.state.node(id).map_or("", |n| &*n.name)
    }

    /// What keeps `count` more trainers of `trainer` off the nodes `class` may use once the plan is
    /// applied: the resource that blocks, with the largest amount of it one node has (allocatable,
    /// then free).
    fn shortfall(&self, trainer: Resources, class: Option<PodClassId>, count: i32) -> String {
        let (what, verb) = if count == 1 {
            (format!("a trainer of {}", describe(trainer)), "does")
        } else {
            (
                format!("{count} trainers of {} each", describe(trainer)),
                "do",
            )
        };
        let room = self.class_room(class);
        if room.schedulable == 0 {
            return format!("{what} {verb} not fit: no node is schedulable");
        }
        if room.eligible == 0 {
            return format!(
                "{what} {verb} not fit: none of the {} schedulable nodes passes its node \
                 selector, affinity or tolerations",
                room.schedulable
            );
        }
        let filtered = if room.eligible < room.schedulable {
            format!(
                " (on the {} of {} nodes its selector, affinity and tolerations allow)",
                room.eligible, room.schedulable
            )
        } else {
            String::new()
        };
        for (k, (name, amount, show)) in MEASURES.iter().enumerate() {
            let (largest, node) = room.largest[k];
            if amount(trainer) > largest {
                return format!(
                    "{what} {verb} not fit: every trainer needs {} {name}, more than any node \
                     has{filtered} (the largest: {} on {})",
                    show(amount(trainer)),
                    show(largest),
                    self.name(node)
                );
            }
        }
        if !room.slot_free {
            return format!("{what} {verb} not fit: no node has a free pod slot{filtered}");
        }
        let extended = class
            .and_then(|c| self.state.eligibility().constraints(c))
            .map(|c| &c.extended)
            .filter(|e| !e.is_empty());
        if let Some(extended) = extended {
            for (name, amount) in extended.iter().filter(|(_, a)| **a > 0) {
                if !self
                    .eligible_nodes(class)
                    .any(|id| self.extended_on(id, name) >= *amount)
                {
                    return format!(
                        "{what} {verb} not fit: no node has {amount} {name} free{filtered}"
                    );
                }
            }
        }
        for (k, (name, amount, show)) in MEASURES.iter().enumerate() {
            let (freest, node) = room.freest[k];
            if amount(trainer) > freest {
                return format!(
                    "{what} {verb} not fit: the largest free block on one node is {} {name} \
                     ({}){filtered}",
                    show(freest),
                    self.name(node)
                );
            }
        }
        // A gang whose trainers each fit somewhere: how many the free room holds in all.
        if count > 1 {
            let held = self.holds(trainer, class, extended);
            if held < i64::from(count) {
                return format!(
                    "{what} {verb} not fit: the free room of the nodes{filtered} holds {held} of \
                     them"
                );
            }
        }
        // Each resource alone is free somewhere: what the node with the most of the scarcest
        // one (GPUs for a GPU trainer, else CPU) lacks.
        let node = room.freest[if trainer.gpu > 0 { 0 } else { 1 }].1;
        let free = self.free_on(node);
        let lacking: Vec<String> = MEASURES
            .iter()
            .filter(|(_, amount, _)| amount(trainer) > amount(free))
            .map(|(name, amount, show)| format!("only {} {name}", show(amount(free).max(0))))
            .collect();
        if lacking.is_empty() {
            // Room somewhere, but no pod slot or other resource beside it.
            let roomy: Vec<NodeId> = self
                .eligible_nodes(class)
                .filter(|id| trainer.fits_in(&self.free_on(*id)))
                .collect();
            if !roomy.iter().any(|id| self.slots_on(*id) > 0) {
                return format!(
                    "{what} {verb} not fit: no node with room for it has a free pod slot{filtered}"
                );
            }
            if let Some(extended) = extended
                && let Some(&id) = roomy.iter().find(|id| self.slots_on(**id) > 0)
                && !roomy
                    .iter()
                    .any(|id| self.slots_on(*id) > 0 && self.extended_fit(*id, extended).0 > 0)
                && let (_, Some((name, amount))) = self.extended_fit(id, extended)
            {
                return format!(
                    "{what} {verb} not fit: no node with room for it has {amount} {name} \
                     free{filtered}"
                );
            }
            return format!(
                "{what} would fit in the free room the plan leaves{filtered}, but the pass did \
                 not place it"
            );
        }
        format!(
            "{what} {verb} not fit: no node has all of it free at once{filtered}; {}, with the \
             most, has {}",
            self.name(node),
            lacking.join(" and ")
        )
    }

    /// Whether one more trainer of `trainer` fits on some node `class` may use once the plan is
    /// applied (room, a pod slot and the class's other resources).
    fn would_fit(&self, trainer: Resources, class: Option<PodClassId>) -> bool {
        let extended = class
            .and_then(|c| self.state.eligibility().constraints(c))
            .map(|c| &c.extended)
            .filter(|e| !e.is_empty());
        self.holds(trainer, class, extended) > 0
    }

    /// How many trainers of `trainer` (each requesting `extended`) the free room, pod slots and
    /// other resources of the schedulable nodes `class` may use hold in all, once the plan is
    /// applied.
    fn holds(
        &self,
        trainer: Resources,
        class: Option<PodClassId>,
        extended: Option<&Extended>,
    ) -> i64 {
        self.eligible_nodes(class)
            .map(|id| {
                let fit = trainer
                    .fit_count(&self.free_on(id))
                    .min(self.slots_on(id).max(0));
                extended.map_or(fit, |e| fit.min(self.extended_fit(id, e).0))
            })
            .fold(0i64, i64::saturating_add)
    }
}

/// A trainer's request as a person reads it: `8 nvidia.com/gpu, 8 cpu, 32Gi memory`.
pub fn describe(trainer: Resources) -> String {
    let mut parts = Vec::new();
    if trainer.gpu > 0 {
        parts.push(format!("{} {}", trainer.gpu, GPU_RESOURCE_NAMES[0]));
    }
    parts.push(format!("{} cpu", cores(trainer.cpu_milli)));
    parts.push(format!("{} memory", bytes(trainer.memory)));
    parts.join(", ")
}

fn cores(milli: i64) -> String {
    Quantity::from_milli(milli).to_string()
}

/// An amount of memory in the largest unit that writes it exactly: binary (`Ti`, `Gi`, `Mi`,
/// `Ki`) or decimal (`T`, `G`, `M`, `k`) as it was likely written, else bytes.
pub fn bytes(b: i64) -> String {
    const UNITS: [(i64, &str); 8] = [
        (1 << 40, "Ti"),
        (1_000_000_000_000, "T"),
        (1 << 30, "Gi"),
        (1_000_000_000, "G"),
        (1 << 20, "Mi"),
        (1_000_000, "M"),
        (1 << 10, "Ki"),
        (1_000, "k"),
    ];
    if b == 0 {
        return "0".to_string();
    }
    UNITS.iter().find(|(unit, _)| b % unit == 0).map_or_else(
        || b.to_string(),
        |(unit, suffix)| format!("{}{suffix}", b / unit),
    )
}

/// `n trainer(s)`.
fn trainers(n: i32) -> String {
    if n == 1 {
        "1 trainer".to_string()
    } else {
        format!("{n} trainers")
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
