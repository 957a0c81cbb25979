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
    let queued: Vec<usize> = (0..jobs.len())
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
    // Every job of a step reaches the same level or none does, so the order only shapes the
    // packing: largest trainers first (first-fit decreasing), which also fails a step early;
    // equal shapes keep exact water-filling's order (least fulfilled first).
    let mut order: Vec<_> = queued
        .iter()
        .map(|&i| {
            let t = jobs[i].trainer();
            std::cmp::Reverse(((t.gpu, t.memory, t.cpu_milli), queueing.key(jobs, i)))
        })
        .collect();
    order.sort_unstable();
    let mut wants: Vec<Want> = order
        .iter()
        .map(|std::cmp::Reverse((_, key))| Want::of(key.job, &jobs[key.job]))
        .collect();
    let mut level = 0;
    let mut quotas: Vec<(usize, i32)> = Vec::with_capacity(wants.len());
    for _ in 0..MAX_STEPS {
        let free = index.total_free();
        let Some(next) = highest_level(&wants, level, free) else {
            return;
        };
        quotas.clear();
        quotas.extend(
            wants
                .iter()
                .map(|w| (w.job, w.quota(next)))
                .filter(|(_, q)| *q > 0),
        );
        let total: i64 = quotas.iter().map(|(_, q)| i64::from(*q)).sum();
        if total == 0 || total < i64::from(min_trainers) {
            return;
        }
        if !place_step(jobs, index, &quotas) {
            return;
        }
        for w in &mut wants {
            w.planned = i64::from(jobs[w.job].planned);
        }
        level = next;
    }
}

/// What a queued job needs per level, copied out of its candidate so a level search reads one
/// small array.
#[derive(Debug, Clone, Copy)]
struct Want {
    job: usize,
    min: i64,
    span: i64,
    max: i64,
    planned: i64,
    trainer: Resources,
}

impl Want {
    fn of(job: usize, j: &Candidate) -> Self {
        Want {
            job,
            min: i64::from(j.info.min),
            span: i64::from(j.info.max - j.info.min),
            max: i64::from(j.info.max),
            planned: i64::from(j.planned),
            trainer: j.trainer(),
        }
    }

    /// Trainers the job needs to reach fulfillment `level / LEVEL_STEPS` (0 if it is there).
    fn quota(&self, level: i64) -> i32 {
        let target = self.min + (level * self.span + LEVEL_STEPS - 1) / LEVEL_STEPS;
        (target.min(self.max) - self.planned).max(0) as i32
    }
}

/// The highest level above `from` whose quotas fit the room share, if any.
fn highest_level(wants: &[Want], from: i64, free: Resources) -> Option<i64> {
    let fits = |level: i64| {
        let (mut cpu, mut memory, mut gpu) = (0i128, 0i128, 0i128);
        for w in wants {
            let q = i128::from(w.quota(level));
            cpu += q * i128::from(w.trainer.cpu_milli);
            memory += q * i128::from(w.trainer.memory);
            gpu += q * i128::from(w.trainer.gpu);
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
///
/// Adjacent jobs with the same trainer shape are placed as one run: each chunk fills the best-fit
/// node as far as the run still needs, the jobs taking their shares of it in order. One job after
/// another would pick the same node (it stays the tightest while it has room), so a run spends
/// one index update per node instead of one per job and node.
fn place_step(jobs: &mut [Candidate], index: &mut NodeIndex, quotas: &[(usize, i32)]) -> bool {
    let mut placed: Vec<(usize, NodeId, u32)> = Vec::new();
    let mut start = 0;
    while start < quotas.len() {
        let want = jobs[quotas[start].0].trainer();
        let len = quotas[start..]
            .iter()
            .take_while(|(i, _)| jobs[*i].trainer() == want)
            .count();
        let run = &quotas[start..start + len];
        start += len;
        let mut shares = run.iter().map(|&(i, q)| (i, q.max(0) as u32));
        let mut current = shares.next();
        let mut run_left: i64 = run.iter().map(|(_, q)| i64::from((*q).max(0))).sum();
        while run_left > 0 {
            let Some(node) = index.best_fit(want) else {
                undo(jobs, index, placed);
                return false;
            };
            let room = index.free(node).unwrap_or(Resources::ZERO);
            let n = want.fit_count(&room).min(run_left).max(1);
            index.adjust(node, want.times(n), -1);
            run_left -= n;
            let mut chunk = n as u32;
            while chunk > 0 {
                let Some((i, left)) = current.as_mut() else {
                    break;
                };
                let take = chunk.min(*left);
                if take > 0 {
                    jobs[*i].place_many(node, take);
                    placed.push((*i, node, take));
                }
                chunk -= take;
                *left -= take;
                if *left == 0 {
                    current = shares.next();
                }
            }
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
