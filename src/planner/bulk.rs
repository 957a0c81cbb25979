//! Bulk steps before exact water-filling. While the cluster has ample room, every queued job is
//! raised to one common level at once (of fair fulfillment, or under `goodput` of the gain of the
//! next trainer), its trainers placed best-fit in per-node chunks:
//! far fewer index updates than one trainer at a time, and a job's trainers land together. Exact
//! water-filling takes over where room gets tight, so that is where fairness is decided.
//!
//! A step plans at most [`ROOM_SHARE_NUM`]/[`ROOM_SHARE_DEN`] of the free CPU, memory and GPU.
//! When a job of the step cannot place its share, the whole step is undone and bulk filling
//! stops: no job is left below a level others reached in bulk. The exception is a trainer class
//! confined to a minority of the nodes (a selector or an affinity): when its nodes run out, its
//! jobs leave bulk filling for exact water-filling (which gives them room first wherever they
//! are least fulfilled) and the step is tried again without them. Classes that may use the
//! fewest nodes are placed first in each step.

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use super::candidates::{Candidate, Share};
use super::fill_queue::{Key, Queueing};
use super::nodes::{NodeIndex, Shape};
use crate::api::Resources;
use crate::cluster::NodeId;
use crate::cluster::filters::PodClassId;

/// A step may plan up to this share of the free room in each resource.
const ROOM_SHARE_NUM: i128 = 3;
const ROOM_SHARE_DEN: i128 = 4;

/// Levels are fulfillments k / LEVEL_STEPS (under `goodput`, next-trainer gains 1 − k / LEVEL_STEPS).
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
    // its repairs) decides the whole pass. Largest shapes first, as they fail first. A trainer
    // class confined to some nodes that fits nowhere only says its nodes are full: its jobs are
    // left to water-filling, the others still go in bulk.
    let distinct: HashSet<Shape, RandomState> = queued.iter().map(|&i| jobs[i].shape()).collect();
    let everywhere = index.allowed_count(None);
    // Counting a class's nodes reads its whole bitset: once per class, not per comparison.
    let mut allowed: HashMap<Option<PodClassId>, usize, RandomState> = HashMap::default();
    for (_, class) in &distinct {
        allowed
            .entry(*class)
            .or_insert_with(|| index.allowed_count(*class));
    }
    let order_of = |shape: Shape| shape_order(shape, allowed.get(&shape.1).copied().unwrap_or(0));
    // Confined to a minority of the nodes (a selector, an affinity): when such a class runs out
    // of room, the rest of the cluster may still have plenty. A class kept off only a few nodes
    // (tainted ones) running out means the cluster is tight, as for an unconstrained one.
    let confined = |class: Option<PodClassId>| {
        allowed
            .get(&class)
            .is_some_and(|n| n.saturating_mul(2) < everywhere)
    };
    let mut shapes: Vec<Shape> = distinct.into_iter().collect();
    shapes.sort_by_cached_key(|t| order_of(*t));
    let mut left_out: Vec<Shape> = Vec::new();
    for &(t, class) in &shapes {
        if index.best_fit(t, class).is_none() {
            if !confined(class) {
                return;
            }
            left_out.push((t, class));
        }
    }
    // Every job of a step reaches the same level or none does, so the order only shapes the
    // packing: trainers that may use the fewest nodes first (so others do not fill those
    // first), then largest trainers first (first-fit decreasing), which also fails a step
    // early; equal shapes keep exact water-filling's order (least fulfilled first).
    let mut curves = Curves::default();
    let mut wants =
        wants_by_shape_then_key(jobs, &queued, &shapes, queueing, &mut curves, &left_out);
    let mut level = 0;
    let mut quotas: Vec<Quota> = Vec::with_capacity(wants.len());
    let mut placed = Placed::new();
    let mut scratch = Scratch::default();
    for _ in 0..MAX_STEPS {
        let free = index.total_free();
        let Some(next) = highest_level(&wants, &mut curves, level, free) else {
            break;
        };
        let counts = curves.at(next);
        quotas.clear();
        quotas.extend(wants.iter().filter_map(|w| {
            let trainers = w.quota(next, counts);
            (trainers > 0).then_some(Quota {
                job: w.job,
                trainers: trainers as u32,
                shape: (w.trainer, w.class),
            })
        }));
        let total: i64 = quotas.iter().map(|q| i64::from(q.trainers)).sum();
        if total == 0 || total < i64::from(min_trainers) {
            break;
        }
        // Each placement record holds at least one trainer: sized once, not grown by copying.
        placed.reserve(total as usize);
        if let Err(failed) = place_quotas(index, &quotas, &mut placed, &mut scratch) {
            // A class confined to some nodes that ran out of them leaves bulk filling (its jobs
            // go to water-filling) and the step is tried again without it; any other failure
            // ends bulk filling.
            if !confined(failed.1) {
                break;
            }
            // Its class's nodes are tight: every shape of the class leaves (one retry per class,
            // not per shape).
            wants.retain(|w| w.class != failed.1);
            continue;
        }
        let counts = curves.at(next);
        for w in &mut wants {
            w.planned += i64::from(w.quota(next, counts));
        }
        level = next;
    }
    record(jobs, placed);
}

/// Records the placements of all steps on the candidates, each job's at once: grouped by job
/// (a counting sort), then [`Candidate::place_all`]. Touching every candidate and growing its
/// node counts in every step cost more than the steps' index updates saved.
fn record(jobs: &mut [Candidate], placed: Placed) {
    if placed.is_empty() {
        return;
    }
    let mut starts = vec![0usize; jobs.len() + 1];
    for &(i, _, _) in &placed {
        starts[i + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut next = starts.clone();
    let mut by_job: Vec<(NodeId, u32)> = vec![(0, 0); placed.len()];
    for (i, node, n) in placed {
        by_job[next[i]] = (node, n);
        next[i] += 1;
    }
    for (i, job) in jobs.iter_mut().enumerate() {
        let counts = &mut by_job[starts[i]..starts[i + 1]];
        if !counts.is_empty() {
            job.place_all(counts);
        }
    }
}

/// What the queued jobs need (`left_out` shapes' jobs left out), by trainer shape as `shapes`
/// lists them, then by queue key, greatest first: each candidate is read once, in index order
/// (in sorted order every read was a cache miss on a large cluster), then a counting sort into
/// per-shape buckets (`shapes` is distinct) and each small bucket sorted alone.
fn wants_by_shape_then_key<'a>(
    jobs: &[Candidate<'a>],
    queued: &[usize],
    shapes: &[Shape],
    queueing: Queueing,
    curves: &mut Curves<'a>,
    left_out: &[Shape],
) -> Vec<Want> {
    // Each shape's bucket found by one hash per job (a pass has hundreds of shapes).
    let bucket_of: HashMap<Shape, usize, RandomState> = shapes
        .iter()
        .enumerate()
        .filter(|(_, shape)| !left_out.contains(shape))
        .map(|(b, shape)| (*shape, b))
        .collect();
    let mut buckets: Vec<usize> = Vec::with_capacity(queued.len());
    let mut keys: Vec<std::cmp::Reverse<Key>> = Vec::with_capacity(queued.len());
    let mut wants: Vec<Want> = Vec::with_capacity(queued.len());
    for &i in queued {
        let j = &jobs[i];
        let Some(&bucket) = bucket_of.get(&j.shape()) else {
            continue;
        };
        buckets.push(bucket);
        keys.push(std::cmp::Reverse(queueing.key(jobs, i)));
        wants.push(Want::of(i, j, curves.slot(j)));
    }
    let mut starts = vec![0usize; shapes.len() + 1];
    for &b in &buckets {
        starts[b + 1] += 1;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    // Keys and where their wants are, bucket by bucket; the small keys move, not the wants.
    let mut next = starts.clone();
    let mut sorted = vec![(std::cmp::Reverse(Key::default()), 0usize); keys.len()];
    for (at, (&b, key)) in buckets.iter().zip(keys).enumerate() {
        sorted[next[b]] = (key, at);
        next[b] += 1;
    }
    for bucket in starts.windows(2) {
        sorted[bucket[0]..bucket[1]].sort_unstable();
    }
    sorted.iter().map(|&(_, at)| wants[at]).collect()
}

/// The order of shapes in a step (see [`shape_order`]).
type ShapeOrder = (
    usize,
    std::cmp::Reverse<(i64, i64, i64)>,
    Option<PodClassId>,
);

/// Shapes whose class may use the fewest nodes (`allowed`) first, then the largest: GPU, then
/// memory, then CPU; then by class.
fn shape_order((t, class): Shape, allowed: usize) -> ShapeOrder {
    (
        allowed,
        std::cmp::Reverse((t.gpu, t.memory, t.cpu_milli)),
        class,
    )
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
    class: Option<PodClassId>,
    /// `goodput`: the job's curve, as its slot in [`Curves`].
    curve: Option<usize>,
}

impl Want {
    fn of(job: usize, j: &Candidate, curve: Option<usize>) -> Self {
        Want {
            job,
            min: i64::from(j.min),
            span: i64::from(j.fair_max - j.min),
            max: i64::from(j.ceiling()),
            planned: i64::from(j.planned),
            trainer: j.trainer(),
            class: j.class,
            curve,
        }
    }

    /// Trainers the job needs to reach level `level` (0 if it is there): fair fulfillment
    /// `level / LEVEL_STEPS`, or under `goodput` the count `counts` gives its curve at that
    /// level ([`Curves::at`]).
    fn quota(&self, level: i64, counts: &[i64]) -> i32 {
        let target = match self.curve {
            None => self.min + (level * self.span + LEVEL_STEPS - 1) / LEVEL_STEPS,
            // Shares never fall as a job grows: the curve's count, if the job is below it.
            Some(slot) => counts.get(slot).copied().unwrap_or(0).max(self.min),
        };
        (target.min(self.max) - self.planned).max(0) as i32
    }
}

/// `goodput`'s distinct speedup curves (`None`: linear) and, per level, the count each reaches:
/// the smallest count whose next trainer adds at most `1 − level / LEVEL_STEPS`. Jobs share a
/// few curves, so a level is searched once per curve, not per job.
#[derive(Default)]
struct Curves<'a> {
    shares: Vec<Share<'a>>,
    /// The largest ceiling among the curve's jobs: the search's upper end.
    caps: Vec<i64>,
    /// The counts at the level last given to [`Curves::at`].
    counts: Vec<i64>,
}

impl<'a> Curves<'a> {
    /// The slot of job `j`'s curve, added if new (`None` unless `goodput`).
    fn slot(&mut self, j: &Candidate<'a>) -> Option<usize> {
        if !j.goodput {
            return None;
        }
        // A curve's share at counts of at least 1 does not depend on the job's min or max.
        let share = Share::of_curve(j.curve);
        let slot = match self.shares.iter().position(|s| s.same_curve(&share)) {
            Some(slot) => slot,
            None => {
                self.shares.push(share);
                self.caps.push(0);
                self.counts.push(0);
                self.shares.len() - 1
            }
        };
        self.caps[slot] = self.caps[slot].max(i64::from(j.ceiling()));
        Some(slot)
    }

    /// Each curve's count at `level`.
    fn at(&mut self, level: i64) -> &[i64] {
        let floor = level as f64 / LEVEL_STEPS as f64 - 1.0;
        for ((share, cap), count) in self.shares.iter().zip(&self.caps).zip(&mut self.counts) {
            let (mut low, mut high) = (1i64, (*cap).max(1));
            while low < high {
                let mid = low + (high - low) / 2;
                if share.at(mid as i32) >= floor {
                    high = mid;
                } else {
                    low = mid + 1;
                }
            }
            *count = low;
        }
        &self.counts
    }
}

/// The highest level above `from` whose quotas fit the room share, if any.
fn highest_level(wants: &[Want], curves: &mut Curves, from: i64, free: Resources) -> Option<i64> {
    let mut fits = |level: i64| {
        let counts = curves.at(level);
        let (mut cpu, mut memory, mut gpu) = (0i128, 0i128, 0i128);
        // Wants come in runs of one trainer shape: count a run's trainers, multiply once.
        for run in wants.chunk_by(|a, b| a.trainer == b.trainer) {
            let q: i64 = run.iter().map(|w| i64::from(w.quota(level, counts))).sum();
            let (q, t) = (i128::from(q), run[0].trainer);
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

/// A job's share of a step: trainers of one shape.
#[derive(Debug, Clone, Copy)]
struct Quota {
    job: usize,
    trainers: u32,
    shape: Shape,
}

/// Trainers placed by a step: `(job, node, trainers)`.
type Placed = Vec<(usize, NodeId, u32)>;

/// Buffers a step works in, kept across steps.
#[derive(Default)]
struct Scratch {
    /// The chunks `(node, trainers)` of the run being placed.
    chunks: Vec<(NodeId, i64)>,
    /// What the index gave in this step, for the undo: trainers of a shape per node.
    taken: Vec<(NodeId, Shape, i64)>,
}

/// Places the quotas best-fit in per-node chunks, in order, appending the placements to
/// `placed`; all or nothing: the shape of the first run that does not fit (the index and
/// `placed` as they were) when some quota does not fit.
///
/// Adjacent jobs with the same trainer shape are placed as one run: each chunk fills the best-fit
/// node as far as the run still needs, the jobs taking their shares of it in order. One job after
/// another would pick the same node (it stays the tightest while it has room), so a run spends
/// one index update per node instead of one per job and node.
fn place_quotas(
    index: &mut NodeIndex,
    quotas: &[Quota],
    placed: &mut Placed,
    scratch: &mut Scratch,
) -> Result<(), Shape> {
    let before = placed.len();
    let Scratch { chunks, taken } = scratch;
    taken.clear();
    for run in quotas.chunk_by(|a, b| a.shape == b.shape) {
        let (want, class) = run[0].shape;
        let run_total: i64 = run.iter().map(|q| i64::from(q.trainers)).sum();
        chunks.clear();
        let filled = index.fill(want, class, run_total, chunks);
        taken.extend(chunks.iter().map(|&(node, n)| (node, (want, class), n)));
        if filled < run_total {
            index.undo_fills(taken);
            placed.truncate(before);
            return Err(run[0].shape);
        }
        // The run's jobs take their shares of its chunks in order.
        let mut shares = run.iter().map(|q| (q.job, q.trainers));
        let mut current = shares.next();
        for &(node, n) in chunks.iter() {
            let mut chunk = n as u32;
            while chunk > 0 {
                let Some((i, left)) = current.as_mut() else {
                    break;
                };
                let take = chunk.min(*left);
                if take > 0 {
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
    Ok(())
}
