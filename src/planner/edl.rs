//! The `edl` policy: the original Go autoscaler's dry run (edl-autoscaler.md §2), quirks of §5.1
//! included.
//!
//! Documented deviations from the original:
//! 1. The node search takes the first fitting node in node-name order, not in Go map order.
//! 2. Jobs tied on every sort key keep namespace/name order (a stable sort over key-ordered input);
//!    the original sorted `sync.Map` order, so ties were unordered.
//! 3. The outer loop stops after [`PlannerConfig::edl_iteration_cap`] iterations with a warning,
//!    so the livelocks of §5.1.1 terminate.
//! 4. The node search also asks for a free pod slot and for the other resources (`rdma/hca`…)
//!    the job's trainers request, each node's taken as trainers are assigned to it, so the dry
//!    run never counts on room a bind refuses.
//! 5. Pending masters and pservers are given their best-fit nodes first (reported in the plan)
//!    and their room is taken from those nodes before the dry run.
//! 6. Kueue-managed jobs grow at most to the quota ceilings the `fulfillment` order gives them
//!    (`planner::quota`; `quota_exhausted` when that is what stops them), one whose ceiling
//!    gives borrowed quota back comes down to it (`reclaimed`: the other ceilings count on
//!    it), and one whose scale-up waits for Kueue keeps its size (`awaiting_admission`).
//!
//! Adaptations to what [`ClusterState`] holds are documented on [`ClusterResource::from_state`]
//! and [`is_pending`].

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use super::candidates::{capped_reason, controller_removals};
use super::nodes::NodeIndex;
use super::quota::{Ceiling, ceilings};
use super::{JobPlan, Outcome, PlannerConfig, Reason, Removal, support};
use crate::api::{JobKey, Quantity, TrainingJobPhase, fulfillment_of};
use crate::cluster::filters::Extended;
use crate::cluster::{ClusterState, JobInfo, JobSlot, PodInfo, Sizes};

#[cfg(test)]
mod tests;

/// Bytes per "Mega", the original's memory unit.
const MEGA: i64 = 1_000_000;

/// `ceil(bytes / 10^6)`, like Go's `ScaledValue(resource.Mega)`.
fn mega_ceil(bytes: i64) -> i64 {
    let whole = bytes.div_euclid(MEGA);
    if bytes.rem_euclid(MEGA) > 0 {
        whole + 1
    } else {
        whole
    }
}

/// `int64(float64(total) * maxLoad)`: the load threshold, truncated toward zero.
fn threshold(total: i64, max_load: f64) -> i64 {
    (total as f64 * max_load) as i64
}

/// One node's entry in the original's `NodesCPUIdleMilli` / `NodesMemoryFreeMega` maps, with
/// its free pod slots and other resources (deviation 4).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeIdle {
    name: Arc<str>,
    cpu_idle_milli: i64,
    memory_free_mega: i64,
    pods_free: i64,
    /// Free amounts of the other resources the node has allocatable.
    extended_free: Extended,
}

impl NodeIdle {
    /// Whether one pod of `cpu_milli`, `memory_mega` and `extended` fits.
    fn holds(&self, cpu_milli: i64, memory_mega: i64, extended: &Extended) -> bool {
        cpu_milli <= self.cpu_idle_milli
            && memory_mega <= self.memory_free_mega
            && self.pods_free >= 1
            && extended
                .iter()
                .all(|(name, want)| self.extended_free.get(name).copied().unwrap_or(0) >= *want)
    }

    /// Takes the room of `n` pods of `cpu_milli`, `memory_mega` and `extended`.
    fn take(&mut self, cpu_milli: i64, memory_mega: i64, extended: &Extended, n: i64) {
        self.cpu_idle_milli -= cpu_milli * n;
        self.memory_free_mega -= memory_mega * n;
        self.pods_free -= n;
        for (name, want) in extended {
            let free = self.extended_free.entry(name.clone()).or_insert(0);
            *free = free.saturating_sub(want.saturating_mul(n));
        }
    }
}

/// The original's `ClusterResource`; mutated by the dry run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct ClusterResource {
    cpu_total_milli: i64,
    cpu_request_milli: i64,
    memory_total_mega: i64,
    memory_request_mega: i64,
    gpu_total: i64,
    gpu_limit: i64,
    /// Schedulable nodes in name order (deviation 1).
    nodes: Vec<NodeIdle>,
}

impl ClusterResource {
    /// Builds the resource view from the state.
    ///
    /// Totals are the allocatable of schedulable nodes (the original counted every node).
    /// Requests are those of every live pod, bound or not, with a pod's effective request
    /// (the original summed init containers and containers); GPU requests stand in for limits.
    /// Per-node idle CPU and free memory cover schedulable nodes and bound pods; a node's free
    /// memory is `ceil(allocatable / 10^6) - ceil(used / 10^6)` (the original rounded up each
    /// container's request before subtracting it). Free pod slots and other resources as the
    /// state counts them (deviation 4).
    fn from_state(state: &ClusterState) -> Self {
        let total = state.total_capacity();
        let requests = state.bound_requests() + state.pending_requests();
        let nodes = state
            .nodes()
            .filter(|(_, slot)| slot.schedulable())
            .map(|(id, slot)| NodeIdle {
                name: Arc::clone(&slot.name),
                cpu_idle_milli: slot.free().cpu_milli,
                memory_free_mega: mega_ceil(slot.capacity().memory) - mega_ceil(slot.used.memory),
                pods_free: state.free_pod_slots(id),
                extended_free: state
                    .node_traits(id)
                    .map(|t| {
                        t.extended
                            .keys()
                            .map(|name| (name.clone(), state.free_extended(id, name)))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        ClusterResource {
            cpu_total_milli: total.cpu_milli,
            cpu_request_milli: requests.cpu_milli,
            memory_total_mega: mega_ceil(total.memory),
            memory_request_mega: mega_ceil(requests.memory),
            gpu_total: total.gpu,
            gpu_limit: requests.gpu,
            nodes,
        }
    }

    /// `searchAssignableNode`: the first node whose idle CPU and free memory hold one trainer
    /// (and, deviation 4, a free pod slot and the other resources it requests).
    fn search_assignable_node(&self, job: &DryJob) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.holds(job.cpu_milli, job.memory_mega, &job.extended))
    }

    /// The deferred update of `scaleDryRun`: totals always, the chosen node (if any) by subtraction.
    fn apply(&mut self, job: &DryJob, additional: i64, node: Option<usize>) {
        self.gpu_limit += job.gpu * additional;
        self.cpu_request_milli += job.cpu_milli * additional;
        self.memory_request_mega += job.memory_mega * additional;
        if let Some(n) = node.and_then(|i| self.nodes.get_mut(i)) {
            n.take(job.cpu_milli, job.memory_mega, &job.extended, additional);
        }
    }

    /// Takes the room of a pending pod the plan puts on node `name` (deviation 5); its
    /// requests are in the totals already.
    fn hold(&mut self, name: &str, pod: &PodInfo) {
        if let Ok(i) = self.nodes.binary_search_by(|n| (*n.name).cmp(name)) {
            let memory_mega = mega_ceil(pod.requests.memory);
            self.nodes[i].take(pod.requests.cpu_milli, memory_mega, &pod.extended, 1);
        }
    }
}

/// An elastic candidate as the dry run sees it.
#[derive(Debug, Clone, PartialEq)]
struct DryJob {
    /// Trainer count the dry run starts from.
    current: i64,
    min: i64,
    max: i64,
    /// The most it may grow to: max, at most its Kueue quota ceiling (deviation 6).
    ceiling: i64,
    /// Per-trainer CPU request, milli, ceil.
    cpu_milli: i64,
    /// Per-trainer memory request, Mega, ceil.
    memory_mega: i64,
    /// Per-trainer GPU limit, whole devices, ceil.
    gpu: i64,
    /// Sort key, from `current`; frozen during the pass (§5.1.2).
    fulfillment: f64,
    /// Exact GPU limit, CPU request and memory request, for the tie-breaks.
    exact: [Quantity; 3],
    /// Per-trainer requests of other resources (the trainer class's; deviation 4).
    extended: Extended,
}

impl DryJob {
    fn new(sizes: Sizes, info: &JobInfo, extended: Extended, ceiling: Option<i32>) -> Self {
        let [gpu, cpu, memory] = info.exact;
        let Sizes { min, max, current } = sizes;
        DryJob {
            current: i64::from(current),
            min: i64::from(min),
            max: i64::from(max),
            ceiling: i64::from(ceiling.map_or(max, |c| c.min(max))),
            cpu_milli: cpu.milli_ceil(),
            memory_mega: memory.mega_ceil(),
            gpu: gpu.value_ceil(),
            fulfillment: fulfillment_of(i64::from(current), i64::from(min), i64::from(max)),
            exact: info.exact,
            extended,
        }
    }
}

/// The comparator of `trainingjob_list.go`: fulfillment, then exact GPU limit, CPU request and
/// memory request, all ascending.
fn compare(a: &DryJob, b: &DryJob) -> Ordering {
    if a.fulfillment == b.fulfillment {
        let [gpu_a, cpu_a, mem_a] = a.exact;
        let [gpu_b, cpu_b, mem_b] = b.exact;
        gpu_a
            .cmp_exact(gpu_b)
            .then(cpu_a.cmp_exact(cpu_b))
            .then(mem_a.cmp_exact(mem_b))
    } else if a.fulfillment < b.fulfillment {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

/// Indices of `jobs` in scale-up order; stable, so full ties keep input order (deviation 2).
fn sorted_order(jobs: &[DryJob]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| compare(&jobs[a], &jobs[b]));
    order
}

/// The scale-down branch of `scaleDryRun`: −1 over max or under load above min, else 0.
fn scale_down_step(r: &ClusterResource, job: &DryJob, planned: i64, max_load: f64) -> i64 {
    if planned > job.max {
        return -1;
    }
    let gpu_cond = r.gpu_limit > threshold(r.gpu_total, max_load);
    let cpu_cond = r.cpu_request_milli > threshold(r.cpu_total_milli, max_load);
    let mem_cond = r.memory_request_mega > threshold(r.memory_total_mega, max_load);
    if (gpu_cond || cpu_cond || mem_cond) && planned > job.min {
        -1
    } else {
        0
    }
}

/// The scale-up branch of `scaleDryRun`: the delta and the node found, if the search ran and hit.
fn scale_up_step(
    r: &ClusterResource,
    job: &DryJob,
    planned: i64,
    max_load: f64,
) -> (i64, Option<usize>) {
    if planned >= job.max {
        return (job.max - planned, None);
    }
    if planned >= job.ceiling {
        return (0, None);
    }
    if r.memory_total_mega - r.memory_request_mega <= job.memory_mega {
        return (0, None);
    }
    let Some(node) = r.search_assignable_node(job) else {
        return (0, None);
    };
    let cpu_ok = threshold(r.cpu_total_milli, max_load) - r.cpu_request_milli >= job.cpu_milli;
    let gpu_ok = job.gpu > 0 && r.gpu_total - r.gpu_limit >= job.gpu;
    let ok = if job.gpu > 0 {
        gpu_ok && cpu_ok
    } else {
        cpu_ok
    };
    (i64::from(ok), Some(node))
}

/// `scaleDryRun`: one step for one job given its diff so far; updates `r` on every return.
fn scale_dry_run(
    r: &mut ClusterResource,
    job: &DryJob,
    cur_diff: i64,
    max_load: f64,
    scale_down: bool,
) -> i64 {
    let planned = job.current + cur_diff;
    let (additional, node) = if scale_down {
        (scale_down_step(r, job, planned, max_load), None)
    } else {
        scale_up_step(r, job, planned, max_load)
    };
    r.apply(job, additional, node);
    additional
}

/// `scaleAllJobsDryRun`: up pass in sort order, down pass in reverse, until a pass pair changes
/// nothing or `cap` outer iterations ran. Returns the diffs (indexed like `jobs`) and whether the
/// loop settled.
fn scale_all_jobs_dry_run(
    jobs: &[DryJob],
    mut r: ClusterResource,
    max_load: f64,
    cap: u32,
) -> (Vec<i64>, bool) {
    let order = sorted_order(jobs);
    let mut diff = vec![0i64; jobs.len()];
    for _ in 0..cap {
        let mut changed = false;
        for &i in &order {
            let add = scale_dry_run(&mut r, &jobs[i], diff[i], max_load, false);
            diff[i] += add;
            changed |= add != 0;
        }
        for &i in order.iter().rev() {
            let add = scale_dry_run(&mut r, &jobs[i], diff[i], max_load, true);
            diff[i] += add;
            changed |= add != 0;
        }
        if !changed {
            return (diff, true);
        }
    }
    (diff, false)
}

/// Whether a job counts as "pending" for `findPendingJob`.
///
/// The original looked for master (fault-tolerant) or pserver pods that were all Unschedulable;
/// the state does not track those, so a job is pending here when it is not finished, wants
/// trainers that are not on a node, and has none bound.
fn is_pending(slot: &JobSlot, info: &JobInfo) -> bool {
    !info.phase.is_finished() && slot.pending_trainers() > 0 && slot.trainers.bound == 0
}

/// A job the pass plans for.
struct Candidate<'a> {
    key: &'a JobKey,
    slot: &'a JobSlot,
    info: &'a JobInfo,
    /// Min, max and current size, capped at the cluster's size cap.
    sizes: Sizes,
    /// The current size as declared (above `sizes.current` only when capped).
    declared: i32,
}

/// `findTrainingJobsMightBeRescheduled`: unfinished jobs that are Running, or all unfinished
/// jobs when any job is pending; namespace/name order. Their sizes are capped at the cluster's
/// size cap first of all ([`ClusterState::sizes`]).
fn candidates(state: &ClusterState) -> Vec<Candidate<'_>> {
    let have_pending = state.jobs().any(|(_, slot, info)| is_pending(slot, info));
    state
        .jobs()
        .filter(|(_, _, info)| !info.phase.is_finished())
        .filter(|(_, _, info)| have_pending || info.phase == TrainingJobPhase::Running)
        .map(|(key, slot, info)| Candidate {
            key,
            slot,
            info,
            sizes: state.sizes(slot, info),
            declared: slot.current(),
        })
        .collect()
}

/// The reason for a candidate's decision.
fn reason(current: i32, target: i32, max: i32) -> Reason {
    match target.cmp(&current) {
        Ordering::Less if current > max => Reason::OverMax,
        Ordering::Less => Reason::Overload,
        Ordering::Greater => Reason::ScaleUp,
        Ordering::Equal if current < max => Reason::NoFit,
        Ordering::Equal => Reason::Unchanged,
    }
}

/// Trainers to take away: the job's top `count` positions, as lowering `parallelism` by `count`
/// removes them (pending ones as one entry first, then bound ones per node by name). Positions
/// are built up to the size cap; those above it count as pending.
fn removals(state: &ClusterState, slot: &JobSlot, count: u32) -> Vec<Removal> {
    let positions = slot.controller_positions(state.size_cap());
    let current = slot.current();
    let target = i64::from(current) - i64::from(count);
    controller_removals(&positions, current, target.max(0) as i32, |id| {
        state.node(id).map(|node| &*node.name)
    })
}

/// The plan of one candidate moved by `diff` from its capped size; a job that is not elastic is
/// `unchanged` (or `over_max` when the cap brings it down). A Kueue-managed job held at its
/// quota ceiling is `quota_exhausted`; one waiting for admission `awaiting_admission`.
fn job_plan<'s>(
    state: &ClusterState,
    c: &Candidate<'s>,
    diff: i64,
    quota: Option<&Ceiling>,
) -> JobPlan<'s> {
    let Sizes { min, max, current } = c.sizes;
    let wide = (i64::from(current) + diff).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
    let target = i32::try_from(wide).unwrap_or(current);
    let removed = u32::try_from(i64::from(c.declared) - i64::from(target)).unwrap_or(0);
    let held = quota.filter(|q| {
        q.awaiting || (q.note.is_some() && target >= q.quota_max && target >= c.declared)
    });
    let reclaimed = quota.filter(|q| gives_back(q, c.sizes) && target <= q.quota_max.max(min));
    let decided = match (held, reclaimed) {
        (Some(q), _) if q.awaiting => Reason::AwaitingAdmission,
        (Some(_), _) => Reason::QuotaExhausted,
        (None, Some(_)) => Reason::Reclaimed,
        (None, None) if min < max => reason(c.declared, target, max),
        (None, None) => Reason::Unchanged,
    };
    JobPlan {
        key: Cow::Borrowed(c.key),
        current: c.declared,
        target,
        min,
        max,
        fulfillment_before: fulfillment_of(c.declared.into(), min.into(), max.into()),
        fulfillment_after: fulfillment_of(target.into(), min.into(), max.into()),
        reason: capped_reason(c.declared, current, target, decided),
        placements: Vec::new(),
        removals: removals(state, c.slot, removed),
        trainer: c.info.trainer,
        kueue: held.or(reclaimed).and_then(|q| q.note.clone()),
    }
}

/// Whether the quota pass gives back some of the job's workers (its ceiling below its size).
fn gives_back(q: &Ceiling, sizes: Sizes) -> bool {
    !q.awaiting && q.quota_max < sizes.current
}

/// One `edl` pass: a plan per candidate in namespace/name order, warnings, and the nodes of the
/// pending masters and pservers (deviation 5).
///
/// Only elastic candidates (min < max) are scaled; the others keep their count. A cap of 0 runs
/// one outer iteration.
pub fn plan<'s>(state: &'s ClusterState, config: &PlannerConfig) -> Outcome<'s> {
    let candidates = candidates(state);
    let quota = ceilings(state);
    let ceiling_of = |c: &Candidate| quota.get(c.key);
    let elastic: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].sizes.min < candidates[i].sizes.max)
        .filter(|&i| !ceiling_of(&candidates[i]).is_some_and(|q| q.awaiting))
        .collect();
    let jobs: Vec<DryJob> = elastic
        .iter()
        .map(|&i| {
            let c = &candidates[i];
            let extended = c
                .slot
                .class
                .and_then(|class| state.eligibility().constraints(class))
                .map(|constraints| constraints.extended.clone())
                .unwrap_or_default();
            DryJob::new(
                c.sizes,
                c.info,
                extended,
                ceiling_of(c).map(|q| q.quota_max),
            )
        })
        .collect();
    let cap = config.edl_iteration_cap.max(1);
    let mut resource = ClusterResource::from_state(state);
    let pods = support::pending(state);
    let support = if pods.is_empty() {
        Vec::new()
    } else {
        support::place(&pods, &mut NodeIndex::new(state))
    };
    for (placed, (_, pod)) in support.iter().zip(&pods) {
        if let Some(node) = placed.node.and_then(|id| state.node(id)) {
            resource.hold(&node.name, pod);
        }
    }
    let (diffs, settled) = scale_all_jobs_dry_run(&jobs, resource, config.max_load_desired, cap);
    let mut diff_of = vec![0i64; candidates.len()];
    for (&i, d) in elastic.iter().zip(diffs) {
        diff_of[i] = d;
    }
    // Quota the `fulfillment` order gives back (a borrower's job shrunk for a lender) is what
    // the other ceilings count on: the job comes down to its ceiling, as it does there.
    for (c, diff) in candidates.iter().zip(diff_of.iter_mut()) {
        if let Some(q) = ceiling_of(c).filter(|q| gives_back(q, c.sizes)) {
            let to = i64::from(q.quota_max.max(c.sizes.min)) - i64::from(c.sizes.current);
            *diff = (*diff).min(to);
        }
    }
    let plans = candidates
        .iter()
        .zip(diff_of)
        .map(|(c, d)| job_plan(state, c, d, ceiling_of(c)))
        .collect();
    let mut warnings = Vec::new();
    if !settled {
        warnings.push(format!(
            "edl: the dry run did not settle within {cap} outer iterations (livelock, \
             edl-autoscaler.md §5.1.1); the diffs of the last iteration are used"
        ));
    }
    Outcome {
        jobs: plans,
        warnings,
        free_after: None,
        support,
    }
}
