//! The `fulfillment` and `goodput` policies: starvation relief for whole gangs, then water-filling
//! with best-fit placement on real nodes, after over-max and overload trims (design.md §3). The
//! two differ only in the order of jobs (`Candidate::share_at`): max-min fair fulfillment, or the
//! largest relative speedup of the next trainer.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use super::bulk::bulk_fill;
use super::candidates::{Candidate, candidates, cap_fair_maxes, cap_useful_maxes};
use super::fill_queue::{FillQueue, Key, Queueing, key_at, tie_ranks};
use super::nodes::{NodeIndex, Shape};
use super::quota::{GiveBack, cap_quota, raise_quota};
use super::rebalance::rebalance;
use super::relief::{admit_starving, retry_starving};
use super::relocate::{PASS_REPAIR_BUDGET, Repairs, place_one};
use super::support;
use super::{Outcome, PlannerConfig, Policy, Reason};
use crate::cluster::{ClusterState, NodeId};

/// Water-filling and fair-share rounds before the pass settles for what it has; every round
/// raises the sorted fulfillment vector, so this only bounds pathological inputs.
const MAX_ROUNDS: usize = 64;

/// Node checks the fair-share moves may spend in one pass.
const PASS_MOVE_CHECKS: usize = 20_000;

/// Runs the `fulfillment` pass.
pub fn plan<'s>(state: &'s ClusterState, config: &PlannerConfig) -> Outcome<'s> {
    let mut jobs = candidates(state);
    cap_fair_maxes(state, &mut jobs);
    if config.policy == Policy::Goodput {
        for j in &mut jobs {
            j.goodput = true;
        }
        cap_useful_maxes(&mut jobs, config.min_marginal_speedup);
    }
    if config.policy == Policy::Progress {
        super::progress::prepare(state, &mut jobs, config);
    }
    let support_pods = support::pending(state);
    let mut index = NodeIndex::for_shapes(
        state,
        jobs.iter()
            .map(Candidate::trainer)
            .chain(support::shapes(&support_pods)),
    );
    // A job Kueue admitted less than it asks keeps its size, as one in cooldown does.
    let cooling: Vec<bool> = jobs
        .iter()
        .map(|j| {
            j.awaiting()
                || j.last_scale
                    .is_some_and(|t| config.now.saturating_sub(t) < config.cooldown_s)
        })
        .collect();
    give_back_leaving(&jobs, &mut index);
    cap_quota(state, &mut jobs, &cooling, GiveBack::Yes);
    trim_over_max(&mut jobs, &mut index);
    relieve_overload(&mut jobs, &mut index);
    // Pending masters and pservers get room before any trainer is placed.
    let mut support = support::place(&support_pods, &mut index);
    support::reclaim(&mut support, &support_pods, &mut jobs, &mut index, &cooling);
    place_cooling_pending(&mut jobs, &mut index, &cooling);
    let mut repairs = Repairs::budget(PASS_REPAIR_BUDGET);
    let mut moves_budget = PASS_MOVE_CHECKS;
    let mut starving = admit_starving(&mut jobs, &mut index, &cooling, &mut repairs);
    let ties = tie_ranks(&jobs);
    let queueing = Queueing::new(&cooling, &starving, &ties);
    // Bulk levels are fulfillments or curve gains; `progress` orders by remaining time instead.
    if config.policy != Policy::Progress {
        bulk_fill(&mut jobs, &mut index, queueing, config.bulk_min_trainers);
    }
    let mut no_fit = vec![false; jobs.len()];
    // Levels this full are placed at once (see `LevelFill`); `progress` orders by remaining time,
    // and goes one job at a time.
    let level_min = if config.policy == Policy::Progress {
        usize::MAX
    } else {
        config.bulk_min_trainers as usize
    };
    let mut rounds = 0;
    loop {
        // After the first round only nodes that gained room can take a job that failed before.
        let grown = index.take_grown();
        let only = (rounds > 0).then_some(grown.as_slice());
        water_fill(
            &mut jobs,
            &mut index,
            Queueing::new(&cooling, &starving, &ties),
            &mut no_fit,
            only,
            &mut repairs,
            level_min,
        );
        // Repairs during water-filling may have freed room a job failed to find earlier.
        let repaired = index.has_grown();
        rounds += 1;
        if rounds >= MAX_ROUNDS {
            break;
        }
        // Jobs still below min may now take trainers handed out this pass; then fair moves.
        let admitted = retry_starving(&mut jobs, &mut index, &cooling, &mut starving, &mut repairs);
        if !admitted
            && !repaired
            && !rebalance(
                &mut jobs,
                &mut index,
                Queueing::new(&cooling, &starving, &ties),
                &no_fit,
                &mut moves_budget,
            )
            // Quota that jobs could not use goes to those quota stopped, for another round.
            && !raise_quota(state, &mut jobs, &ties, &cooling)
        {
            break;
        }
    }
    if config.policy == Policy::Progress {
        fill_spare(
            &mut jobs,
            &mut index,
            Queueing::new(&cooling, &starving, &ties),
            &mut no_fit,
            &mut repairs,
        );
    }
    let plans = jobs
        .into_iter()
        .enumerate()
        .map(|(i, mut j)| {
            let (target, reason) = decide(&mut j, cooling[i], starving[i], no_fit[i]);
            j.finish(&index, target, reason)
        })
        .collect();
    Outcome {
        jobs: plans,
        warnings: Vec::new(),
        free_after: Some(index.schedulable()),
        support,
    }
}

/// The final target and reason of one job.
fn decide(j: &mut Candidate, cooling: bool, starving: bool, no_fit: bool) -> (i32, Reason) {
    if starving {
        // A gang that waits keeps its pending pods; only a trim to max-instance lowers it.
        let reason = if j.kept < j.current {
            Reason::OverMax
        } else if j.min > j.quota_max && j.quota_note().is_some() {
            Reason::QuotaExhausted
        } else {
            Reason::Starving
        };
        return (j.kept, reason);
    }
    if let Some(reason) = j.reason {
        return (j.target(), reason);
    }
    if j.awaiting() {
        return (j.current, Reason::AwaitingAdmission);
    }
    if cooling {
        return (j.current, Reason::Cooldown);
    }
    let target = j.target();
    let reason = if target >= j.quota_max && j.quota_note().is_some() {
        Reason::QuotaExhausted
    } else if target > j.current || (!j.placed.is_empty() && j.bound < j.min) {
        Reason::ScaleUp
    } else if target < j.current {
        if j.current > j.max {
            Reason::OverMax
        } else {
            Reason::Overload
        }
    } else if j.useful_max < j.max && target >= j.useful_max {
        Reason::LowGain
    } else if no_fit {
        Reason::NoFit
    } else {
        Reason::Unchanged
    };
    (target, reason)
}

/// Brings jobs asking for more than max-instance down to max, as lowering `parallelism` does;
/// then (`goodput` with a threshold) jobs above their useful max down to it (`progress`: above
/// their spare max); then jobs giving back borrowed Kueue quota down to their quota max.
fn trim_over_max(jobs: &mut [Candidate], index: &mut NodeIndex) {
    for j in jobs.iter_mut() {
        while j.kept > j.quota_max.max(j.min) {
            if j.shrink(index).is_none() {
                break;
            }
            j.reason = Some(Reason::Reclaimed);
        }
        while j.kept > j.max {
            if j.shrink(index).is_none() {
                break;
            }
            j.reason = Some(Reason::OverMax);
        }
        while j.kept > j.useful_max.max(j.spare_max) {
            if j.shrink(index).is_none() {
                break;
            }
            j.reason = Some(Reason::LowGain);
        }
    }
}

/// Gives the index back the room of the trainers the Job controller is removing already (bound
/// at positions at or above their job's parallelism). As with pods being deleted, which the index
/// counts as gone (see `nodes`), that room comes free without a shrink: sizes decided as if it
/// were taken would shrink jobs again for room about to be free, or for overload that is not.
fn give_back_leaving(jobs: &[Candidate], index: &mut NodeIndex) {
    for j in jobs {
        for (node, n) in j.leaving() {
            index.give(node, j.trainer(), j.class, i64::from(n));
        }
    }
}

/// On nodes holding more than they have, shrinks the most fulfilled job with a trainer there,
/// never below min, until the node fits or nothing more may go. A job shrinks from its top
/// position, wherever that trainer runs (the Job controller removes the highest indexes), so a
/// job may give up trainers elsewhere before the one on this node goes. Room coming free (pods
/// being deleted, trainers above their job's parallelism) is free in the index already.
fn relieve_overload(jobs: &mut [Candidate], index: &mut NodeIndex) {
    let overloaded = index.overloaded();
    if overloaded.is_empty() {
        return;
    }
    // The jobs with trainers on each overloaded node, in job order, found in one pass over the
    // jobs (not one per shrink): relief only takes trainers away, so these lists stay a superset.
    let slot_of: HashMap<NodeId, usize, RandomState> = overloaded
        .iter()
        .enumerate()
        .map(|(k, n)| (*n, k))
        .collect();
    let mut on_overloaded: Vec<Vec<usize>> = vec![Vec::new(); overloaded.len()];
    for (i, j) in jobs.iter().enumerate() {
        for node in j.on_node.keys() {
            if let Some(&k) = slot_of.get(node) {
                on_overloaded[k].push(i);
            }
        }
    }
    for (node, holders) in overloaded.into_iter().zip(on_overloaded) {
        while index.free(node).is_some_and(|f| f.any_negative()) {
            let victim = holders
                .iter()
                .map(|&i| (i, &jobs[i]))
                .filter(|(_, j)| j.on_node.contains_key(&node) && j.planned > j.min)
                .max_by(|(_, a), (_, b)| a.gives_before(b))
                .map(|(i, _)| i);
            let Some(v) = victim else { break };
            let j = &mut jobs[v];
            if j.shrink(index).is_none() {
                break;
            }
            j.reason = Some(Reason::Overload);
        }
    }
}

/// Jobs in cooldown keep their size: their pending trainers are placed where they fit.
fn place_cooling_pending(jobs: &mut [Candidate], index: &mut NodeIndex, cooling: &[bool]) {
    for (i, j) in jobs.iter_mut().enumerate() {
        if !cooling[i] || j.planned < j.min {
            continue;
        }
        while j.planned < j.current.min(j.ceiling()) {
            let Some(node) = index.best_fit(j.trainer(), j.class) else {
                break;
            };
            index.take(node, j.trainer(), j.class, 1);
            j.place(node);
        }
    }
}

/// Hands out one trainer at a time to the least fulfilled job that can place one, until no job
/// below max can place a trainer anywhere. Returns which jobs stopped for lack of room.
fn water_fill(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    queueing: Queueing,
    no_fit: &mut [bool],
    only_onto: Option<&[NodeId]>,
    repairs: &mut Repairs,
    level_min: usize,
) {
    let ties = queueing.ties;
    let mut queue = FillQueue::new();
    // Whether a trainer shape fits on some node of `only_onto`; many jobs share a shape.
    let mut fits_onto: HashMap<Shape, bool, RandomState> = HashMap::default();
    for (i, j) in jobs.iter().enumerate() {
        if !queueing.queues(jobs, i) {
            continue;
        }
        if let Some(nodes) = only_onto
            && no_fit[i]
            && !*fits_onto.entry(j.shape()).or_insert_with(|| {
                nodes
                    .iter()
                    .any(|n| index.allowed(j.class, *n) && index.fits(*n, j.trainer(), j.class))
            })
        {
            continue;
        }
        no_fit[i] = false;
        queue.push(queueing.key(jobs, i));
    }
    // Shapes that fit nowhere, per node class; free room only shrinks here, so anything at least
    // as big fails too on the same class of nodes.
    let mut failed: Vec<Shape> = Vec::new();
    let mut chunks = Vec::new();
    let mut level = LevelFill::default();
    // Levels whose jobs did not all fit at once: those go one at a time.
    let mut exact_levels: HashSet<(u64, u64), RandomState> = HashSet::default();
    while let Some(top) = queue.peek() {
        if queue.top_level_len() >= level_min && !exact_levels.contains(&(top.now, top.next)) {
            level.keys.clear();
            queue.pop_level(&mut level.keys);
            if level.fill(jobs, index, &failed, no_fit) {
                for i in level.placed() {
                    if jobs[i].planned < jobs[i].ceiling() {
                        queue.push(key_at(&jobs[i], ties[i], i, jobs[i].planned));
                    }
                }
            } else {
                exact_levels.insert((top.now, top.next));
                for key in &level.keys {
                    queue.push(*key);
                }
            }
            continue;
        }
        let Some(Key { job: i, .. }) = queue.pop() else {
            break;
        };
        let want = jobs[i].shape();
        if fails_like(&failed, want) || !place_one(jobs, index, i, repairs) {
            remember_failed(&mut failed, want);
            no_fit[i] = true;
            continue;
        }
        // The job keeps the lead until its key falls behind the next one in the queue: hand it
        // those trainers in one go (same order as one at a time, fewer queue and index updates).
        let next = queue.peek();
        let j = &jobs[i];
        let mut allowed = 0;
        while j.planned + allowed < j.ceiling()
            && next.is_none_or(|n| key_at(j, ties[i], i, j.planned + allowed) > n)
        {
            allowed += 1;
        }
        if allowed > 0 && !place_batch(jobs, index, i, allowed, repairs, &mut chunks) {
            remember_failed(&mut failed, want);
            no_fit[i] = true;
            continue;
        }
        if jobs[i].planned < jobs[i].ceiling() {
            queue.push(key_at(&jobs[i], ties[i], i, jobs[i].planned));
        }
    }
}

/// `progress`: hands the room water-filling left to jobs at their useful max, up to their spare
/// max, in the same order (see `planner::progress`). Jobs shrinking this pass, cooling or
/// waiting for their gang take none.
fn fill_spare(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    queueing: Queueing,
    no_fit: &mut [bool],
    repairs: &mut Repairs,
) {
    let mut raised = false;
    for (i, j) in jobs.iter_mut().enumerate() {
        if !queueing.cooling[i]
            && !queueing.starving[i]
            && j.kept >= j.current
            && j.planned >= j.useful_max.min(j.quota_max)
        {
            raised |= j.open_spare();
        }
    }
    if raised {
        water_fill(jobs, index, queueing, no_fit, None, repairs, usize::MAX);
    }
}

/// One level of the water-filling queue placed at once: every job at the level gets its next
/// trainer, as one at a time would give them (each job there gets one before any gets a second),
/// but each trainer shape's trainers go best-fit in per-node chunks, in one index scan, without
/// the preference for a job's own nodes. All or nothing: when some shape does not fit all its
/// jobs' trainers, nothing is placed and the level goes one job at a time (where the tie order
/// decides who gets the last room). Buffers are kept across levels.
#[derive(Default)]
struct LevelFill {
    /// The level's keys, greatest first.
    keys: Vec<Key>,
    /// The level's trainer shapes, in the order their first job comes, and their jobs.
    shapes: Vec<(Shape, Vec<usize>)>,
    /// Where each shape of the level is in `shapes` (a level may hold hundreds of shapes).
    slot_of: HashMap<Shape, usize, RandomState>,
    /// What each shape's fill took, in shape order, for the undo and for telling the jobs.
    taken: Vec<(NodeId, Shape, i64)>,
    /// The chunks `(node, trainers)` of the shape being filled.
    chunks: Vec<(NodeId, i64)>,
}

impl LevelFill {
    /// Places one trainer for each job of `keys` whose shape has not failed (those are marked
    /// as stopped for lack of room, as popping them would); false, with nothing placed, when
    /// some shape does not fit all its jobs.
    fn fill(
        &mut self,
        jobs: &mut [Candidate],
        index: &mut NodeIndex,
        failed: &[Shape],
        no_fit: &mut [bool],
    ) -> bool {
        self.taken.clear();
        self.shapes.clear();
        self.slot_of.clear();
        for key in &self.keys {
            let j = &jobs[key.job];
            let want = j.shape();
            if fails_like(failed, want) {
                // As popping it would (and will, if the level goes one at a time).
                no_fit[key.job] = true;
                continue;
            }
            let slot = *self.slot_of.entry(want).or_insert_with(|| {
                self.shapes.push((want, Vec::new()));
                self.shapes.len() - 1
            });
            self.shapes[slot].1.push(key.job);
        }
        // Every shape's fill first: the jobs are told only once all fit.
        for (shape, members) in &self.shapes {
            let count = members.len() as i64;
            self.chunks.clear();
            let filled = index.fill(shape.0, shape.1, count, &mut self.chunks);
            self.taken
                .extend(self.chunks.iter().map(|&(node, n)| (node, *shape, n)));
            if filled < count {
                index.undo_fills(&self.taken);
                return false;
            }
        }
        // Each shape's chunks hold exactly one trainer per job of the shape, in shape order.
        let nodes = self
            .taken
            .iter()
            .flat_map(|&(node, _, n)| std::iter::repeat_n(node, n as usize));
        let members = self.shapes.iter().flat_map(|(_, members)| members);
        for (&i, node) in members.zip(nodes) {
            jobs[i].place(node);
        }
        true
    }

    /// The jobs that got a trainer, after a [`LevelFill::fill`] that placed them.
    fn placed(&self) -> impl Iterator<Item = usize> + '_ {
        self.shapes
            .iter()
            .flat_map(|(_, members)| members.iter().copied())
    }
}

/// Whether `shape` is at least as big as one of the `failed` shapes on the same class of nodes,
/// so it fits nowhere either.
fn fails_like(failed: &[Shape], (shape, class): Shape) -> bool {
    failed.iter().any(|(f, c)| *c == class && f.fits_in(&shape))
}

/// Adds a shape that fit nowhere on its class of nodes, keeping only the smallest such shapes
/// per class (a shape at least as big as one of them fails too).
fn remember_failed(failed: &mut Vec<Shape>, (shape, class): Shape) {
    if fails_like(failed, (shape, class)) {
        return;
    }
    failed.retain(|(f, c)| *c != class || !shape.fits_in(f));
    failed.push((shape, class));
}

/// Places `count` trainers of job `i` best-fit, as many per node as fit there (with the repairs
/// of [`place_one`] when no node fits); false when it ran out of room before placing them all.
/// `chunks` is a buffer kept across calls.
fn place_batch(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    i: usize,
    count: i32,
    repairs: &mut Repairs,
    chunks: &mut Vec<(NodeId, i64)>,
) -> bool {
    let (want, class) = jobs[i].shape();
    let mut left = i64::from(count.max(0));
    while left > 0 {
        chunks.clear();
        left -= index.fill(want, class, left, chunks);
        for &(node, n) in chunks.iter() {
            jobs[i].place_many(node, n as u32);
        }
        if left > 0 {
            if !place_one(jobs, index, i, repairs) {
                return false;
            }
            left -= 1;
        }
    }
    true
}
