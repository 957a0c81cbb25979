//! Placing one trainer, with a repair when best fit finds no room: trainers another job placed
//! earlier in the same pass move from one node to others to make room.

use super::candidates::{Candidate, NodeCounts};
use std::cmp::Reverse;

use super::nodes::NodeIndex;
use crate::api::Resources;
use crate::cluster::NodeId;
use crate::cluster::filters::PodClassId;

/// Most trainers placed this pass that a full repack will take on.
const REPACK_LIMIT: usize = 64;

/// A sort key of trainer sizes, largest first after `Reverse`.
type SizeOrder = fn(&Resources) -> (i64, i64, i64);

/// Exact packing is tried only this small: trainers, nodes, and search steps.
const EXACT_ITEMS: usize = 16;
const EXACT_NODES: usize = 16;
const EXACT_STEPS: usize = 100_000;

/// Repair work (node checks, trainers repacked) one pass may spend in all; keeps a pass on a
/// large, full cluster bounded.
pub const PASS_REPAIR_BUDGET: usize = 1_000;

/// How much repair work is left: when a placement may move trainers placed earlier in the pass
/// to make room, and how far.
#[derive(Debug)]
pub struct Repairs {
    left: usize,
}

impl Repairs {
    /// Repairs worth `units` of work.
    pub fn budget(units: usize) -> Self {
        Repairs { left: units }
    }

    /// No repairs: for callers that undo their own steps and need the rest left where it is.
    pub fn none() -> Self {
        Repairs { left: 0 }
    }

    /// Spends `units` if that much is left.
    fn spend(&mut self, units: usize) -> bool {
        if self.left < units {
            self.left = 0;
            return false;
        }
        self.left -= units;
        true
    }
}

/// Places one trainer of job `i` by best fit, else (while the budget lasts) by moving trainers
/// placed earlier in the pass.
pub fn place_one(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    i: usize,
    repairs: &mut Repairs,
) -> bool {
    let (want, class) = jobs[i].shape();
    if let Some(best) = index.best_fit(want, class) {
        let node = home_as_good_as(&jobs[i], index, best).unwrap_or(best);
        index.take(node, want, class, 1);
        jobs[i].place(node);
        return true;
    }
    repairs.left > 0
        && (relocate_for(jobs, index, i, repairs) || repack_for(jobs, index, i, repairs))
}

/// A node the job already has trainers on (bound or placed this pass) that is as good a fit as
/// `best`: the trainer fits there and leaves as many free GPUs as at `best` (so it strands no
/// more), first in name order. Workers of one job on one node synchronise faster than across
/// nodes; among equal fits, that decides.
fn home_as_good_as(job: &Candidate, index: &NodeIndex, best: NodeId) -> Option<NodeId> {
    if job.on_node.contains_key(&best) || job.placed.contains_key(&best) {
        return None;
    }
    let want = job.trainer();
    let level = index.free(best)?.gpu;
    job.on_node
        .keys()
        .chain(job.placed.keys())
        .copied()
        .filter(|&n| index.allowed(job.class, n))
        .filter(|&n| {
            index.fits(n, want, job.class) && index.free(n).is_some_and(|f| f.gpu == level)
        })
        .min_by_key(|&n| index.rank(n))
}

/// Places `count` trainers of job `i`, all or none (moves made along the way stay; they are valid).
pub fn place_gang(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    i: usize,
    count: i32,
    repairs: &mut Repairs,
) -> bool {
    for added in 0..count {
        if !place_one(jobs, index, i, repairs) {
            for _ in 0..added {
                unplace_any(&mut jobs[i], index);
            }
            return false;
        }
    }
    true
}

/// Takes back one trainer the job placed this pass, from its last node in id order.
fn unplace_any(job: &mut Candidate, index: &mut NodeIndex) {
    if let Some(node) = job.placed.last().map(|(node, _)| *node) {
        job.unplace(node);
        index.give(node, job.trainer(), job.class, 1);
    }
}

/// Finds a node where trainers placed this pass by another job can leave for other nodes, and
/// puts job `i`'s trainer in their place.
fn relocate_for(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    i: usize,
    repairs: &mut Repairs,
) -> bool {
    let (want, class) = jobs[i].shape();
    for k in 0..jobs.len() {
        let (shape, shape_class) = jobs[k].shape();
        if k == i || shape == want || jobs[k].placed.is_empty() {
            continue;
        }
        if !repairs.spend(1) {
            return false;
        }
        let nodes: Vec<(NodeId, u32)> = jobs[k].placed.iter().map(|(n, c)| (*n, *c)).collect();
        for (node, count) in nodes {
            if !repairs.spend(1) {
                return false;
            }
            if !index.allowed(class, node) {
                continue;
            }
            let Some(mut room) = index.free(node) else {
                continue;
            };
            // The room first (cheap), then the pod slots and other resources too.
            let mut moving = 0;
            while !want.fits_in(&room) && moving < count {
                moving += 1;
                room += shape;
            }
            let fits = |moving: u32| {
                index.fits_after(node, (want, class), (shape, shape_class), i64::from(moving))
            };
            while want.fits_in(&room) && !fits(moving) && moving < count {
                moving += 1;
            }
            // A move attempt costs index updates and a search: it counts for more.
            if fits(moving) && repairs.spend(8) && try_move(jobs, index, i, k, node, moving) {
                return true;
            }
        }
    }
    false
}

/// Moves `moving` of job `k`'s trainers placed this pass off `node` to other nodes and places one
/// of job `i`'s there; all or nothing.
fn try_move(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    i: usize,
    k: usize,
    node: NodeId,
    moving: u32,
) -> bool {
    let (want, class) = jobs[i].shape();
    let (shape, shape_class) = jobs[k].shape();
    for _ in 0..moving {
        index.give(node, shape, shape_class, 1);
        jobs[k].unplace(node);
    }
    index.take(node, want, class, 1);
    let mut landed = Vec::new();
    for _ in 0..moving {
        // `want` did not fit `node` before, so nothing moved can land there again.
        match index.best_fit(shape, shape_class) {
            Some(other) => {
                index.take(other, shape, shape_class, 1);
                jobs[k].place(other);
                landed.push(other);
            }
            None => {
                for other in landed {
                    index.give(other, shape, shape_class, 1);
                    jobs[k].unplace(other);
                }
                index.give(node, want, class, 1);
                for _ in 0..moving {
                    index.take(node, shape, shape_class, 1);
                    jobs[k].place(node);
                }
                return false;
            }
        }
    }
    jobs[i].place(node);
    true
}

/// Repacks every trainer placed this pass, plus one of job `i`'s, largest first (trying a few
/// size orders); keeps the first packing where all fit, else changes nothing.
fn repack_for(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    i: usize,
    repairs: &mut Repairs,
) -> bool {
    // Counted only as far as the limit: after bulk steps nearly every job has placed trainers.
    let mut holders = Vec::new();
    let mut placed = 0;
    for (k, j) in jobs.iter().enumerate() {
        let count = j.placed.values().map(|n| *n as usize).sum::<usize>();
        if count == 0 {
            continue;
        }
        placed += count;
        if placed >= REPACK_LIMIT {
            return false;
        }
        holders.push(k);
    }
    if placed == 0 || !repairs.spend(placed) {
        return false;
    }
    let mut items: Vec<(usize, Resources)> = holders
        .iter()
        .flat_map(|&k| {
            let count: u32 = jobs[k].placed.values().sum();
            std::iter::repeat_n((k, jobs[k].trainer()), count as usize)
        })
        .collect();
    items.push((i, jobs[i].trainer()));
    let before: Vec<(usize, NodeCounts)> = holders
        .iter()
        .map(|&k| (k, jobs[k].placed.clone()))
        .collect();
    release_all(jobs, &holders, index);
    let orders: [SizeOrder; 3] = [
        |r| (r.gpu, r.cpu_milli, r.memory),
        |r| (r.memory, r.cpu_milli, r.gpu),
        |r| (r.cpu_milli, r.memory, r.gpu),
    ];
    // Every job that may hold a trainer placed below: the holders and job `i`.
    let mut touched = holders.clone();
    touched.push(i);
    for order in orders {
        items.sort_by_key(|(k, r)| (Reverse(order(r)), *k));
        let mut all = true;
        for (k, r) in &items {
            match index.best_fit(*r, jobs[*k].class) {
                Some(node) => {
                    index.take(node, *r, jobs[*k].class, 1);
                    jobs[*k].place(node);
                }
                None => {
                    all = false;
                    break;
                }
            }
        }
        if all {
            return true;
        }
        release_all(jobs, &touched, index);
    }
    let classes: Vec<_> = items.iter().map(|(k, _)| jobs[*k].class).collect();
    if let Some(nodes) = exact_pack(index, &items, &classes) {
        for ((k, r), node) in items.iter().zip(nodes) {
            index.take(node, *r, jobs[*k].class, 1);
            jobs[*k].place(node);
        }
        return true;
    }
    for (k, placed) in before {
        let j = &mut jobs[k];
        for (node, count) in placed {
            index.take(node, j.trainer(), j.class, i64::from(count));
            j.place_many(node, count);
        }
    }
    false
}

/// Takes every trainer the jobs `which` placed this pass back off its node.
fn release_all(jobs: &mut [Candidate], which: &[usize], index: &mut NodeIndex) {
    for &k in which {
        let j = &mut jobs[k];
        let placed: Vec<(NodeId, u32)> = j.placed.iter().map(|(n, c)| (*n, *c)).collect();
        for (node, count) in placed {
            index.give(node, j.trainer(), j.class, i64::from(count));
            for _ in 0..count {
                j.unplace(node);
            }
        }
    }
}

/// An exact packing of `items` onto the schedulable nodes by depth-first search, within their
/// free room and pod slots, for small instances only (see the `EXACT_*` bounds); `None` when
/// there is none or the search is too big. `classes[i]` is the node class item `i` may use; a
/// class requesting other resources is not packed here.
fn exact_pack(
    index: &NodeIndex,
    items: &[(usize, Resources)],
    classes: &[Option<PodClassId>],
) -> Option<Vec<NodeId>> {
    // Checked before the nodes are listed: a large cluster never gets this far.
    if items.len() > EXACT_ITEMS
        || index.schedulable_count() > EXACT_NODES
        || classes.iter().any(|c| index.extended_of(*c).is_some())
    {
        return None;
    }
    let nodes = index.schedulable();
    let allowed: Vec<Vec<bool>> = classes
        .iter()
        .map(|c| nodes.iter().map(|(id, _)| index.allowed(*c, *id)).collect())
        .collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| Reverse((items[i].1.gpu, items[i].1.memory, items[i].1.cpu_milli, i)));
    let mut free: Vec<(Resources, i64)> =
        nodes.iter().map(|(id, f)| (*f, index.slots(*id))).collect();
    let mut chosen = vec![0usize; items.len()];
    let mut steps = 0;
    if !search(
        &order,
        items,
        &allowed,
        &mut free,
        &mut chosen,
        0,
        &mut steps,
    ) {
        return None;
    }
    Some(chosen.iter().map(|&n| nodes[n].0).collect())
}

fn search(
    order: &[usize],
    items: &[(usize, Resources)],
    allowed: &[Vec<bool>],
    free: &mut [(Resources, i64)],
    chosen: &mut [usize],
    depth: usize,
    steps: &mut usize,
) -> bool {
    let Some(&item) = order.get(depth) else {
        return true;
    };
    let need = items[item].1;
    for n in 0..free.len() {
        *steps += 1;
        if *steps > EXACT_STEPS {
            return false;
        }
        // Allowed nodes with the same free room and slots are interchangeable: try the first.
        let ok = &allowed[item];
        let (room, slots) = free[n];
        if !ok[n]
            || slots < 1
            || !need.fits_in(&room)
            || (0..n).any(|m| ok[m] && free[m] == free[n])
        {
            continue;
        }
        free[n] = (room - need, slots - 1);
        chosen[item] = n;
        let done = search(order, items, allowed, free, chosen, depth + 1, steps);
        free[n] = (room, slots);
        if done {
            return true;
        }
    }
    false
}
