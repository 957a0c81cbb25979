//! Bulk steps before exact water-filling. While the cluster has ample room, every queued job is
//! raised to one common fulfillment level at once, its trainers placed best-fit in per-node chunks:
//! far fewer index updates than one trainer at a time, and a job's trainers land together. Exact
//! water-filling takes over where room gets tight, so that is where fairness is decided.
//!
//! A step plans at most [`ROOM_SHARE_NUM`]/[`ROOM_SHARE_DEN`] of the free CPU, memory and GPU.
//! When a job of the step cannot place its share, the whole step is undone and bulk filling
//! stops: no job is left below a level others reached in bulk.

use super::candidates::Candidate;
use super::fill_queue::Queueing;
use super::nodes::NodeIndex;
use super::relocate::place_chunk;
use crate::api::Resources;
use crate::cluster::NodeId;

/// A step may plan up to this share of the free room in each resource.
const ROOM_SHARE_NUM: i128 = 3;
const ROOM_SHARE_DEN: i128 = 4;

/// Levels are fulfillments k / LEVEL_STEPS.
const LEVEL_STEPS: i64 = 256;

/// Steps before bulk filling gives the rest to exact water-filling.
const MAX_STEPS: usize = 16;

/// Runs bulk steps for the jobs water-filling would queue, each step handing out at least
/// `min_trainers`.
pub fn bulk_fill(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    queueing: Queueing,
    min_trainers: u32,
) {
    let mut queued: Vec<usize> = (0..jobs.len())
        .filter(|&i| queueing.queues(jobs, i))
        .collect();
    // When some queued trainer fits nowhere, room is already tight: exact water-filling (with
    // its repairs) decides the whole pass. Largest shapes first, as they fail first.
    let mut shapes: Vec<Resources> = queued.iter().map(|&i| jobs[i].trainer()).collect();
    shapes.sort_unstable_by_key(|t| std::cmp::Reverse((t.gpu, t.memory, t.cpu_milli)));
    shapes.dedup();
    if shapes.iter().any(|t| index.best_fit(*t).is_none()) {
        return;
    }
    // Exact water-filling's order (least fulfilled first), so equal shapes keep it.
    queued.sort_by_cached_key(|&i| std::cmp::Reverse(queueing.key(jobs, i)));
    let mut level = 0;
    for _ in 0..MAX_STEPS {
        let free = index.total_free();
        let Some(next) = highest_level(jobs, &queued, level, free) else {
            return;
        };
        let mut quotas: Vec<(usize, i32)> = queued
            .iter()
            .map(|&i| (i, quota(&jobs[i], next)))
            .filter(|(_, q)| *q > 0)
            .collect();
        // Every job of a step reaches the same level or none does, so the order only shapes the
        // packing: largest trainers first (first-fit decreasing), which also fails a step early.
        quotas.sort_by_cached_key(|&(i, _)| {
            let t = jobs[i].trainer();
            std::cmp::Reverse((t.gpu, t.memory, t.cpu_milli))
        });
        let total: i64 = quotas.iter().map(|(_, q)| i64::from(*q)).sum();
        if total == 0 || total < i64::from(min_trainers) {
            return;
        }
        if !place_step(jobs, index, &quotas) {
            return;
        }
        level = next;
    }
}

/// Trainers job `j` needs to reach fulfillment `level / LEVEL_STEPS` (0 if it is there already).
fn quota(j: &Candidate, level: i64) -> i32 {
    let span = i64::from(j.info.max - j.info.min);
    let target = i64::from(j.info.min) + (level * span + LEVEL_STEPS - 1) / LEVEL_STEPS;
    let target = target.min(i64::from(j.info.max));
    (target - i64::from(j.planned)).max(0) as i32
}

/// The highest level above `from` whose quotas fit the room share, if any.
fn highest_level(jobs: &[Candidate], queued: &[usize], from: i64, free: Resources) -> Option<i64> {
    let fits = |level: i64| {
        let (mut cpu, mut memory, mut gpu) = (0i128, 0i128, 0i128);
        for &i in queued {
            let q = i128::from(quota(&jobs[i], level));
            let t = jobs[i].trainer();
            cpu += q * i128::from(t.cpu_milli);
            memory += q * i128::from(t.memory);
            gpu += q * i128::from(t.gpu);
        }
        let within =
            |need: i128, room: i64| need * ROOM_SHARE_DEN <= i128::from(room) * ROOM_SHARE_NUM;
        within(cpu, free.cpu_milli) && within(memory, free.memory) && within(gpu, free.gpu)
    };
    // Demand grows with the level: binary search for the last level that fits.
    let (mut low, mut high) = (from, LEVEL_STEPS + 1);
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if fits(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    (low > from).then_some(low)
}

/// Places every quota best-fit in per-node chunks, in the given order; all or nothing.
fn place_step(jobs: &mut [Candidate], index: &mut NodeIndex, quotas: &[(usize, i32)]) -> bool {
    let mut placed: Vec<(usize, NodeId, u32)> = Vec::new();
    for &(i, quota) in quotas {
        let mut left = quota.max(0) as u32;
        while left > 0 {
            let Some((node, n)) = place_chunk(jobs, index, i, left) else {
                undo(jobs, index, placed);
                return false;
            };
            placed.push((i, node, n));
            left -= n;
        }
    }
    true
}

/// Takes back what a step placed, newest first.
fn undo(jobs: &mut [Candidate], index: &mut NodeIndex, placed: Vec<(usize, NodeId, u32)>) {
    for (i, node, n) in placed.into_iter().rev() {
        for _ in 0..n {
            jobs[i].unplace(node);
        }
        index.adjust(node, jobs[i].trainer().times(i64::from(n)), 1);
    }
}
