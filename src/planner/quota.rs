//! Kueue's quota as capacity. Before any trainer is placed, every Kueue-managed job that may
//! grow is given a quota ceiling ([`Candidate::quota_max`]) by water-filling them all together,
//! in the pass's own fairness order (least fulfilled first, or under `goodput` the largest gain
//! of the next trainer; ties by priority, age, name), one worker at a time, each charged at its
//! pod's request to its ClusterQueue in the flavors its admission assigned, while the queue and
//! its cohort have room (see `cluster::quota::QuotaRoom`). Every job starts at its current size;
//! the workers a job asks beyond what Kueue admitted (a pending scale-up) are charged first, as
//! Kueue admits that older slice before any newer one. The ceiling caps the job's growth
//! ([`Candidate::ceiling`]) and its fair max. It is below the job's current size only when the
//! job gives quota back (`reclaim`, run first): quota its queue borrows that other queues need
//! for their waiting Workloads or growing jobs, or that its own queue's waiting Workloads need,
//! or, within its queue's quota, workers above min that Workloads of the cohort waiting to start
//! need and the cohort has unused nowhere else.
//!
//! After water-filling, [`raise_quota`] hands quota that jobs could not use (no node had room
//! for their trainers) to the jobs quota stopped, so a ceiling no node could fill does not idle
//! the queue.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::candidates::Candidate;
use super::explain::bytes;
use super::fill_queue::{FillQueue, Key, key_at, tie_ranks};
use super::{JobPlan, KueueNote};
use crate::api::{GPU_RESOURCE_NAMES, JobKey, Quantity, Resources};
use crate::cluster::ClusterState;
use crate::cluster::filters::PodClassId;
use crate::cluster::quota::{Admission, Need, Owed, PerResource, QueueId, QuotaRoom, Stop};

/// Where a Kueue-managed job's workers are charged: its ClusterQueue and what one worker takes.
type Charge = Option<(QueueId, Need)>;

/// What one worker requests as the planner knows it (`t`, and the other resources of its class),
/// per resource in Kueue's units: the fallback when the admitted Workload states no per-pod
/// request.
fn trainer_request(state: &ClusterState, t: Resources, class: Option<PodClassId>) -> PerResource {
    let mut request: PerResource = vec![
        (Arc::from("cpu"), t.cpu_milli),
        (Arc::from("memory"), t.memory),
        (Arc::from(GPU_RESOURCE_NAMES[0]), t.gpu),
    ];
    if let Some(constraints) = class.and_then(|c| state.eligibility().constraints(c)) {
        request.extend(
            constraints
                .extended
                .iter()
                .map(|(name, amount)| (Arc::from(name.as_str()), *amount)),
        );
    }
    request.retain(|(_, amount)| *amount > 0);
    request
}

/// The note for a queue that cannot be charged at all.
fn stop_note(cluster_queue: &Arc<str>, stop: Stop) -> KueueNote {
    let cluster_queue = Arc::clone(cluster_queue);
    match stop {
        Stop::Uncovered { resource, flavor } => KueueNote::NotCovered {
            cluster_queue,
            resource,
            flavor,
        },
        Stop::Inactive(why) => KueueNote::Inactive { cluster_queue, why },
    }
}

/// What the job could grow to without quota: max-instance, at most its useful max.
fn unquoted_ceiling(j: &Candidate) -> i32 {
    let max = j.max.min(j.useful_max);
    if j.kept < j.current {
        j.kept.min(max)
    } else {
        max
    }
}

/// Whether the job would grow this pass, quota aside.
fn wants_growth(j: &Candidate, holding: bool) -> bool {
    !holding && !j.awaiting() && j.elastic() && j.current < unquoted_ceiling(j)
}

/// Each Kueue-managed job's queue and per-worker charge, with every job's workers beyond its
/// admission charged (at `count_of` each) to `room`; a job whose queue cannot be charged gets a
/// note saying why, when it would grow.
fn charges(
    state: &ClusterState,
    jobs: &mut [Candidate],
    room: &mut QuotaRoom,
    holding: &[bool],
    count_of: impl Fn(&Candidate) -> i32,
) -> Vec<Charge> {
    let mut out: Vec<Charge> = vec![None; jobs.len()];
    for (i, j) in jobs.iter_mut().enumerate() {
        let Some(k) = j.kueue() else {
            continue;
        };
        let wants = wants_growth(j, holding[i]);
        let Some(q) = room.queue(&k.cluster_queue) else {
            if wants {
                j.set_quota_note(Some(KueueNote::Inactive {
                    cluster_queue: Arc::clone(&k.cluster_queue),
                    why: "it does not exist".to_string(),
                }));
            }
            continue;
        };
        match room.need(q, &k.worker, || {
            trainer_request(state, j.trainer(), j.class)
        }) {
            Ok(need) => {
                // Workers beyond its admission are charged; workers it no longer asks (a
                // shrink Kueue has not applied to its Workload yet, which Kueue does in place)
                // are free already, so two passes never give the same quota back twice.
                let count = count_of(j);
                let admitted = k.admitted();
                room.take(q, &need, i64::from((count - admitted).max(0)));
                room.give(q, &need, i64::from((admitted - count).max(0)));
                out[i] = Some((q, need));
            }
            Err(stop) if wants => j.set_quota_note(Some(stop_note(&k.cluster_queue, stop))),
            Err(_) => {}
        }
    }
    out
}

/// Water-fills the jobs `growing` selects from `granted` up to their unquoted ceiling, charging
/// each worker beyond `granted` to its queue (the room already counts each job at `granted`);
/// a job the room stops below its ceiling gets a `QuotaExhausted` note.
fn water_fill(
    jobs: &mut [Candidate],
    ties: &[u32],
    room: &mut QuotaRoom,
    charge: &[Charge],
    granted: &mut [i32],
    growing: impl Fn(usize, &Candidate) -> bool,
) {
    let mut queue = FillQueue::new();
    for (i, j) in jobs.iter().enumerate() {
        if charge[i].is_some() && growing(i, j) && granted[i] < unquoted_ceiling(j) {
            queue.push(key_at(j, ties[i], i, granted[i]));
        }
    }
    while let Some(Key { job: i, .. }) = queue.pop() {
        let Some((q, need)) = &charge[i] else {
            continue;
        };
        let j = &jobs[i];
        let cap = unquoted_ceiling(j);
        // Every worker beyond what the job asks is charged, those Kueue still counts as
        // admitted included: `charges` gave a shrink Kueue has not applied yet back to the room
        // already, so taking them again for free would lend them twice.
        let (fit, stopped_by) = room.fit(*q, need);
        let most = i64::from(cap - granted[i]).min(fit);
        if most <= 0 {
            if let (Some(fr), Some(k)) = (stopped_by, j.kueue()) {
                let (flavor, resource) = room.flavor_resource(fr).clone();
                jobs[i].set_quota_note(Some(KueueNote::QuotaExhausted {
                    cluster_queue: Arc::clone(&k.cluster_queue),
                    flavor,
                    resource,
                }));
            }
            continue;
        }
        // The job keeps the lead while its key stays ahead of the next one's: grant those
        // workers at once (keys only fall as a job grows, so a binary search finds the end).
        let n = match queue.peek() {
            None => most,
            Some(next) => {
                let from = granted[i];
                let ahead = |count: i64| key_at(j, ties[i], i, from + count as i32) > next;
                let (mut low, mut high) = (1i64, most);
                while low < high {
                    let mid = low + (high - low + 1) / 2;
                    if ahead(mid - 1) {
                        low = mid;
                    } else {
                        high = mid - 1;
                    }
                }
                low
            }
        };
        let before = granted[i];
        let after = before + n as i32;
        room.take(*q, need, i64::from(after - before));
        granted[i] = after;
        if after < cap {
            queue.push(key_at(&jobs[i], ties[i], i, after));
        }
    }
}

/// Whether a policy's jobs give quota back: `static` never resizes a running job, so its
/// ceilings must not count on quota another job would give back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Borrowers (and lenders, for Workloads that must borrow) give quota back first.
    Yes,
    /// Ceilings are water-filled from what every job holds now.
    No,
}

/// Sets every Kueue-managed job's [`Candidate::quota_max`] (and caps its fair max there) by
/// water-filling the quota of all ClusterQueues, after quota is given back (`give_back`);
/// `holding[i]`: job `i` keeps its size this pass (a cooldown). Costs nothing without Kueue
/// objects (kept out of line: the pass's hot loops stay as they are).
#[inline(never)]
pub fn cap_quota(
    state: &ClusterState,
    jobs: &mut [Candidate],
    holding: &[bool],
    give_back: GiveBack,
) {
    if !state.quota().active() || jobs.iter().all(|j| j.quota.is_none()) {
        return;
    }
    let ties = &tie_ranks(jobs);
    for j in jobs.iter_mut() {
        let fair_max = j.fair_max;
        if let Some(q) = j.quota.as_mut() {
            q.fair_cap = fair_max;
        }
    }
    let mut room = QuotaRoom::new(state.quota());
    let charge = charges(state, jobs, &mut room, holding, |j| j.current);
    let mut granted: Vec<i32> = jobs.iter().map(|j| j.current).collect();
    for j in jobs.iter_mut().filter(|j| j.awaiting()) {
        if let Some(k) = j.kueue() {
            j.set_quota_note(Some(KueueNote::AwaitingAdmission {
                cluster_queue: Arc::clone(&k.cluster_queue),
                workload: match &k.admission {
                    Admission::SlicePending { slice, .. } => Some(Arc::clone(slice)),
                    _ => None,
                },
                admitted: k.admitted(),
            }));
        }
    }
    let reclaimed = match give_back {
        GiveBack::Yes => reclaim(state, jobs, ties, &mut room, &charge, &mut granted, holding),
        GiveBack::No => vec![false; jobs.len()],
    };
    water_fill(jobs, ties, &mut room, &charge, &mut granted, |i, j| {
        !reclaimed[i] && wants_growth(j, holding[i])
    });
    grant_spare(
        jobs,
        ties,
        &mut room,
        &charge,
        &mut granted,
        &reclaimed,
        holding,
    );
    // What the nodes hold, summed over every node only once some job's quota stopped it.
    let nodes = OnceCell::new();
    let nodes = || *nodes.get_or_init(|| state.total_capacity());
    for (i, j) in jobs.iter_mut().enumerate() {
        let beyond_nodes = stopped_beyond_nodes(&room, &charge[i], j.quota_note(), nodes);
        if let Some(q) = j.quota.as_mut() {
            q.beyond_nodes = beyond_nodes;
            j.quota_max = if reclaimed[i] {
                granted[i]
            } else {
                granted[i].max(j.current)
            };
            cap_fair_max(j);
        }
    }
}

/// Whether the quota that stopped a job (its `QuotaExhausted` note) is of a resource its queue
/// could hold more of than the schedulable nodes do: the water-fill stopped it in quota no node
/// could fill, at a level that moves with what every job of the cohort could ask, so it says
/// nothing of how well the job is served.
fn stopped_beyond_nodes(
    room: &QuotaRoom,
    charge: &Charge,
    note: Option<&KueueNote>,
    nodes: impl FnOnce() -> Resources,
) -> bool {
    let (
        Some((q, _)),
        Some(KueueNote::QuotaExhausted {
            flavor, resource, ..
        }),
    ) = (charge, note)
    else {
        return false;
    };
    let held = match &**resource {
        "cpu" => nodes().cpu_milli,
        "memory" => nodes().memory,
        r if GPU_RESOURCE_NAMES.contains(&r) => nodes().gpu,
        _ => return false,
    };
    room.id(flavor, resource)
        .is_some_and(|fr| room.pool(*q, fr) > held)
}

/// Caps a Kueue-managed job's fair max at its quota max, so a job its quota holds back counts as
/// served, unless that quota is more than the nodes hold
/// ([`super::candidates::QuotaJob::beyond_nodes`]).
fn cap_fair_max(j: &mut Candidate) {
    if let Some(q) = j.quota.as_ref() {
        j.fair_max = if q.beyond_nodes {
            q.fair_cap
        } else {
            q.fair_cap.min(j.quota_max.max(j.min))
        };
    }
}

/// `progress`: the quota left after every job's useful size goes, in the same order, to jobs
/// granted their useful size, up to their spare max (as the pass's spare stage hands out room),
/// so quota no job wants at the threshold is not left idle. Useful maxes are as they were after.
fn grant_spare(
    jobs: &mut [Candidate],
    ties: &[u32],
    room: &mut QuotaRoom,
    charge: &[Charge],
    granted: &mut [i32],
    reclaimed: &[bool],
    holding: &[bool],
) {
    let useful: Vec<i32> = jobs.iter().map(|j| j.useful_max).collect();
    let mut raised = false;
    for (i, j) in jobs.iter_mut().enumerate() {
        if granted[i] >= unquoted_ceiling(j) {
            raised |= j.open_spare();
        }
    }
    if !raised {
        return;
    }
    water_fill(jobs, ties, room, charge, granted, |i, j| {
        !reclaimed[i] && wants_growth(j, holding[i])
    });
    for (j, useful) in jobs.iter_mut().zip(useful) {
        j.useful_max = useful;
    }
}

/// Gives back quota that waiting Workloads need ([`QuotaRoom::owes`]): one worker at a time
/// from the elastic jobs of queues borrowing it (or whose own waiting Workloads hold it), then,
/// while the cohort still has too little unused, from the jobs of queues within their quota;
/// in each, the job that stays most served first (the reverse of the fill order), never below
/// min, never one that keeps its size this pass (`holding`, a cooldown) or waits for an
/// admission. Kueue would preempt whole Workloads to reclaim that quota (`reclaimWithinCohort`);
/// shrinking elastic jobs first leaves it nothing to preempt. Returns which jobs gave workers
/// back (their `granted` lowered, a `Reclaimed` note set).
fn reclaim(
    state: &ClusterState,
    jobs: &mut [Candidate],
    ties: &[u32],
    room: &mut QuotaRoom,
    charge: &[Charge],
    granted: &mut [i32],
    holding: &[bool],
) -> Vec<bool> {
    let mut reclaimed = vec![false; jobs.len()];
    let may_give = |i: usize, j: &Candidate, granted: i32| {
        j.elastic() && !holding[i] && !j.awaiting() && granted > j.min
    };
    // What each queue's jobs could give back, per flavor-resource.
    let mut reclaimable: BTreeMap<(QueueId, u32), i64> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if let Some((q, need)) = &charge[i]
            && may_give(i, j, granted[i])
        {
            for &(fr, amount) in need {
                let slot = reclaimable.entry((*q, fr)).or_insert(0);
                *slot = slot.saturating_add(amount.saturating_mul(i64::from(granted[i] - j.min)));
            }
        }
    }
    room.hold_for_waiting(state.quota(), |q, fr| {
        reclaimable.get(&(q, fr)).copied().unwrap_or(0)
    });
    // What each queue's jobs want to grow by (quota aside), per flavor-resource.
    let mut wanted: BTreeMap<(QueueId, u32), i64> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        if let Some((q, need)) = &charge[i]
            && wants_growth(j, holding[i])
        {
            let more = i64::from((unquoted_ceiling(j) - granted[i]).max(0));
            for &(fr, amount) in need {
                let slot = wanted.entry((*q, fr)).or_insert(0);
                *slot = slot.saturating_add(amount.saturating_mul(more));
            }
        }
    }
    room.claim_for_growth(|q, fr| wanted.get(&(q, fr)).copied().unwrap_or(0));
    if !room.holds_for_waiting() {
        return reclaimed;
    }
    // A job may give while its queue owes a resource its workers take: queues that borrow it
    // (or whose own waiting Workloads hold it) before queues within their nominal quota.
    let owed = |room: &QuotaRoom, q: QueueId, need: &Need| {
        need.iter()
            .filter_map(|&(fr, _)| room.owes(q, fr).map(|why| (why, fr)))
            .min()
    };
    loop {
        let donor = (0..jobs.len())
            .filter_map(|i| {
                let (q, need) = charge[i].as_ref()?;
                let j = &jobs[i];
                let may = may_give(i, j, granted[i]);
                let (why, fr) = may.then(|| owed(room, *q, need)).flatten()?;
                Some(((why, key_at(j, ties[i], i, granted[i] - 1)), i, fr))
            })
            .min_by(|a, b| a.0.cmp(&b.0));
        let Some(((why, _), i, fr)) = donor else {
            break;
        };
        let Some((q, need)) = &charge[i] else {
            break;
        };
        let borrowing = room.borrows(*q, fr);
        room.give(*q, need, 1);
        granted[i] -= 1;
        reclaimed[i] = true;
        if let Some(k) = jobs[i].kueue() {
            let (_, resource) = room.flavor_resource(fr).clone();
            let note = KueueNote::Reclaimed {
                cluster_queue: Arc::clone(&k.cluster_queue),
                cohort: room.cohort(*q).cloned(),
                resource,
                borrowing,
                lending: why == Owed::Lent,
            };
            jobs[i].set_quota_note(Some(note));
        }
    }
    reclaimed
}

/// Once water-filling is done: the quota jobs left unused (their trainers found no node) goes
/// to the jobs quota stopped, water-filled as in [`cap_quota`] from what they have; every other
/// Kueue-managed job's ceiling comes down to what it has, so the quota is not counted twice.
/// `ties`: the pass's tie ranks ([`tie_ranks`]). Returns whether some stopped job may now grow.
#[inline(never)]
pub fn raise_quota(
    state: &ClusterState,
    jobs: &mut [Candidate],
    ties: &[u32],
    holding: &[bool],
) -> bool {
    let stopped = |j: &Candidate| {
        matches!(j.quota_note(), Some(KueueNote::QuotaExhausted { .. })) && j.planned >= j.quota_max
    };
    if !jobs.iter().any(stopped) {
        return false;
    }
    let mut room = QuotaRoom::new(state.quota());
    let held = |j: &Candidate| j.planned.max(j.current);
    let charge = charges(state, jobs, &mut room, holding, held);
    // Quota held for waiting Workloads is not handed out here either.
    room.hold_for_waiting(state.quota(), |_, _| 0);
    let mut granted: Vec<i32> = jobs.iter().map(held).collect();
    let raising: Vec<bool> = jobs.iter().map(stopped).collect();
    water_fill(jobs, ties, &mut room, &charge, &mut granted, |i, _| {
        raising[i] && !holding[i]
    });
    let raised = (0..jobs.len()).any(|i| raising[i] && granted[i] > jobs[i].quota_max);
    if !raised {
        return false;
    }
    for (i, j) in jobs.iter_mut().enumerate() {
        if j.quota.is_none() {
            continue;
        }
        if raising[i] {
            j.quota_max = granted[i].max(j.quota_max);
            cap_fair_max(j);
            // Water-filling noted the quota again where it stopped the job below its ceiling.
            if j.quota_max >= unquoted_ceiling(j) {
                j.set_quota_note(None);
            }
        } else {
            // Not stopped by quota (its trainers found no node): it says so, not the quota.
            if matches!(j.quota_note(), Some(KueueNote::QuotaExhausted { .. })) {
                j.set_quota_note(None);
            }
            j.quota_max = held(j).min(j.quota_max);
        }
    }
    true
}

/// A Kueue-managed job's quota ceiling as [`cap_quota`] sets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ceiling {
    pub quota_max: i32,
    pub note: Option<Box<KueueNote>>,
    /// Kueue admitted less than the job asks: it keeps its size.
    pub awaiting: bool,
}

/// The quota ceiling of every Kueue-managed job, by key, for the policies that size jobs
/// without the `fulfillment` candidates (`edl`): that order's ceilings. Empty without Kueue.
pub fn ceilings(state: &ClusterState) -> BTreeMap<JobKey, Ceiling> {
    if !state.quota().active() {
        return BTreeMap::new();
    }
    let mut jobs = super::candidates::candidates(state);
    super::candidates::cap_fair_maxes(state, &mut jobs);
    let holding = vec![false; jobs.len()];
    cap_quota(state, &mut jobs, &holding, GiveBack::Yes);
    jobs.into_iter()
        .filter(|j| j.quota.is_some())
        .map(|j| {
            let awaiting = j.awaiting();
            let ceiling = Ceiling {
                quota_max: j.quota_max,
                note: j.quota.and_then(|q| q.note).map(Box::new),
                awaiting,
            };
            (j.key.clone(), ceiling)
        })
        .collect()
}

/// The quota room once the plan's jobs are at their targets: every Kueue-managed job charged for
/// its workers beyond what Kueue admitted (at least its current size), as [`cap_quota`] counts.
pub fn room_after<'s>(state: &'s ClusterState, jobs: &[JobPlan]) -> QuotaRoom<'s> {
    let mut room = QuotaRoom::new(state.quota());
    for job in jobs {
        let Some((q, need, k)) = job_need(state, &room, job) else {
            continue;
        };
        let beyond = (job.target.max(job.current) - k.admitted()).max(0);
        room.take(q, &need, i64::from(beyond));
    }
    room
}

/// A planned Kueue-managed job's queue, per-worker charge and Kueue view.
fn job_need<'s>(
    state: &'s ClusterState,
    room: &QuotaRoom,
    job: &JobPlan,
) -> Option<(QueueId, Need, &'s crate::cluster::quota::JobKueue)> {
    let k = state.quota().job(&job.key)?;
    let q = room.queue(&k.cluster_queue)?;
    let class = state.job(&job.key).and_then(|s| s.class);
    let need = room
        .need(q, &k.worker, || trainer_request(state, job.trainer, class))
        .ok()?;
    Some((q, need, k))
}

/// An amount of `resource` in Kueue's units as a person reads it.
fn show(resource: &str, amount: i64) -> String {
    if resource == "cpu" {
        Quantity::from_milli(amount).to_string()
    } else if resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-")
    {
        bytes(amount)
    } else {
        amount.to_string()
    }
}

/// What Kueue's note on a job says, with the numbers of `room` (the room once the plan is
/// applied, [`room_after`]): e.g. `ClusterQueue team-a: nvidia.com/gpu quota exhausted (8 of 8
/// used, may borrow 0 more in cohort research; a worker needs 1)`.
pub fn describe(state: &ClusterState, room: &QuotaRoom, job: &JobPlan, note: &KueueNote) -> String {
    match note {
        KueueNote::QuotaExhausted {
            cluster_queue,
            flavor,
            resource,
        } => {
            let head = format!("ClusterQueue {cluster_queue}: {resource} quota");
            let Some(q) = room.queue(cluster_queue) else {
                return format!("{head} exhausted");
            };
            let Some(fr) = room.id(flavor, resource) else {
                return format!("{head} exhausted");
            };
            let flavors = room
                .info(q)
                .group_of(resource)
                .map_or(0, |g| g.flavors.len());
            let of_flavor = if flavors > 1 {
                format!(" of flavor {flavor}")
            } else {
                String::new()
            };
            let s = room.standing(q, fr);
            let unused = (s.nominal - s.used).max(0);
            let borrow = match room.cohort(q) {
                // Its unused quota is borrowed by the others.
                Some(cohort) if unused > s.available.max(0) => format!(
                    ", {} lent to cohort {cohort}",
                    show(resource, unused - s.available.max(0))
                ),
                Some(cohort) => {
                    let more = (s.available - unused).max(0);
                    format!(
                        ", may borrow {} more in cohort {cohort}",
                        show(resource, more)
                    )
                }
                None => "; no cohort to borrow from".to_string(),
            };
            let each = job_need(state, room, job)
                .and_then(|(_, need, _)| need.iter().find(|(f, _)| *f == fr).map(|(_, a)| *a))
                .map(|a| format!("; a worker needs {}", show(resource, a)))
                .unwrap_or_default();
            format!(
                "{head}{of_flavor} exhausted ({} of {} used{borrow}{each})",
                show(resource, s.used),
                show(resource, s.nominal)
            )
        }
        KueueNote::NotCovered {
            cluster_queue,
            resource,
            flavor,
        } => {
            let of_flavor = flavor
                .as_ref()
                .map(|f| format!(" in flavor {f}"))
                .unwrap_or_default();
            format!(
                "ClusterQueue {cluster_queue} has no {resource} quota{of_flavor}: Kueue admits \
                 no more of its workers, which request {resource}"
            )
        }
        KueueNote::Inactive { cluster_queue, why } => {
            format!("ClusterQueue {cluster_queue} admits nothing new: {why}")
        }
        KueueNote::Reclaimed {
            cluster_queue,
            cohort,
            resource,
            borrowing,
            lending,
        } => {
            let (c, t) = (job.current, job.target);
            match cohort {
                Some(cohort) if *lending => format!(
                    "gives back {resource} quota of ClusterQueue {cluster_queue} ({c} → {t}) to \
                     Workloads of cohort {cohort} waiting to start: the cohort has no unused \
                     quota for them, and a waiting job comes before growth above min"
                ),
                Some(cohort) if *borrowing => format!(
                    "gives back {resource} quota ClusterQueue {cluster_queue} borrows ({c} → \
                     {t}): queues of cohort {cohort} need their nominal quota for waiting \
                     Workloads or growing jobs"
                ),
                _ => format!(
                    "gives back {resource} quota ({c} → {t}) to Workloads waiting in its own \
                     ClusterQueue {cluster_queue}: a waiting job comes before growth above min"
                ),
            }
        }
        KueueNote::AwaitingAdmission {
            cluster_queue,
            workload,
            admitted,
        } => {
            let c = job.current;
            match workload {
                Some(w) => format!(
                    "keeps {c}: its scale-up waits for Kueue to admit Workload {w} \
                     (ClusterQueue {cluster_queue}; {admitted} of {c} workers admitted)"
                ),
                None => format!(
                    "keeps {c}: Kueue admitted {admitted} of its {c} workers (ClusterQueue \
                     {cluster_queue}); the rest wait for admission"
                ),
            }
        }
    }
}
