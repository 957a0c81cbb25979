//! Fair-share moves: a job that cannot grow takes trainers from a more fulfilled job on a node
//! where that makes room, as long as the donor stays strictly above the taker's fulfillment.
//!
//! Every move raises the taker and leaves the donor above the taker's old level, so the sorted
//! fulfillment vector rises and no later pass moves the trainer back.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Reason;
use super::candidates::{Candidate, NodeCounts};
use super::fill_queue::{Queueing, lowest_first};
use super::nodes::NodeIndex;
use crate::api::Resources;
use crate::cluster::NodeId;
use crate::cluster::filters::PodClassId;

/// One round of moves; returns whether anything moved.
pub fn rebalance(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    queueing: Queueing,
    no_fit: &[bool],
    budget: &mut usize,
) -> bool {
    if *budget == 0 {
        return false;
    }
    let eligible = |i: usize| !queueing.cooling[i] && !queueing.starving[i];
    // Least fulfilled first, then by the tie order (priority, age, name), packed with the job.
    let key = |i: usize| {
        let j = &jobs[i];
        let ascending = !lowest_first(j.share_at(j.planned));
        (u128::from(ascending) << 64) | (u128::from(u32::MAX - queueing.ties[i]) << 32)
    };
    // The move budget usually runs out after a few takers: a heap hands them out in order
    // without sorting them all.
    let mut takers: BinaryHeap<Reverse<u128>> = (0..jobs.len())
        .filter(|&i| {
            eligible(i)
                && no_fit[i]
                && jobs[i].planned >= jobs[i].min
                && jobs[i].planned < jobs[i].ceiling()
        })
        .map(|i| Reverse(key(i) | i as u32 as u128))
        .collect();
    if takers.is_empty() {
        return false;
    }
    let mut donors: Vec<usize> = (0..jobs.len())
        .filter(|&d| eligible(d) && jobs[d].elastic() && jobs[d].planned > jobs[d].min)
        .collect();
    sort_by_packed_key(&mut donors, |d| !key(d) & !u128::from(u32::MAX));
    let mut moved = false;
    let mut nodes = Vec::new();
    while *budget > 0 {
        let Some(Reverse(packed)) = takers.pop() else {
            break;
        };
        // Until a move changes counts, donors are in descending fulfillment order.
        let sorted = !moved;
        let t = packed as u32 as usize;
        moved |= take_one(jobs, index, &donors, sorted, t, budget, &mut nodes);
    }
    moved
}

/// Sorts job indices by `key`, whose low 32 bits must be zero and which must differ between
/// jobs: keys and indices are sorted as one integer each.
fn sort_by_packed_key(jobs: &mut [usize], key: impl Fn(usize) -> u128) {
    let mut packed: Vec<u128> = jobs.iter().map(|&i| key(i) | i as u32 as u128).collect();
    packed.sort_unstable();
    for (slot, p) in jobs.iter_mut().zip(&packed) {
        *slot = *p as u32 as usize;
    }
}

/// Gives job `t` one trainer from the first donor that can make room for it. When `sorted`,
/// `donors` are in descending order of fulfillment, and the scan ends at the first donor no
/// more fulfilled than the taker (none after it can give either).
fn take_one(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    donors: &[usize],
    sorted: bool,
    t: usize,
    budget: &mut usize,
    nodes: &mut Vec<(u32, NodeId, u32)>,
) -> bool {
    // A taker that gave trainers earlier in this round may not grow back (see `ceiling`).
    if jobs[t].planned >= jobs[t].ceiling() {
        return false;
    }
    let floor = jobs[t].share_at(jobs[t].planned);
    let want = jobs[t].trainer();
    let class = jobs[t].class;
    let priority = jobs[t].priority;
    for &d in donors {
        if sorted && jobs[d].share_at(jobs[d].planned) <= floor {
            break;
        }
        if d == t || jobs[d].priority > priority || jobs[d].share_at(jobs[d].planned - 1) <= floor {
            continue;
        }
        // Room comes free only on the donor's nodes: none the taker may use, no help.
        if class.is_some()
            && !jobs[d]
                .on_node
                .keys()
                .chain(jobs[d].placed.keys())
                .any(|n| index.allowed(class, *n))
        {
            continue;
        }
        let (give, give_class) = jobs[d].shape();
        // Trainers the donor was handed this pass can be taken back from any node, in name order.
        nodes.clear();
        nodes.extend(
            jobs[d]
                .placed
                .iter()
                .map(|(n, count)| (index.rank(*n), *n, *count)),
        );
        nodes.sort_by_key(|(rank, _, _)| *rank);
        for &(_, node, have) in nodes.iter() {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            if !index.allowed(class, node) {
                continue;
            }
            let Some(mut room) = index.free(node) else {
                continue;
            };
            let may_take =
                |k: i32| k < have as i32 && jobs[d].share_at(jobs[d].planned - k - 1) > floor;
            // The room first (cheap), then the pod slots and other resources too.
            let mut k = 0;
            while !want.fits_in(&room) && may_take(k) {
                k += 1;
                room += give;
            }
            let fits =
                |k: i32| index.fits_after(node, (want, class), (give, give_class), i64::from(k));
            while want.fits_in(&room) && !fits(k) && may_take(k) {
                k += 1;
            }
            if !fits(k) {
                continue;
            }
            for _ in 0..k {
                jobs[d].unplace(node);
            }
            index.give(node, give, give_class, i64::from(k));
            index.take(node, want, class, 1);
            jobs[t].place(node);
            return true;
        }
        // Running trainers go only from the top, as lowering parallelism removes them.
        let Some((steps, node)) = top_run(&mut jobs[d], index, (want, class), floor, budget) else {
            continue;
        };
        for _ in 0..steps {
            jobs[d].shrink(index);
        }
        jobs[d].reason = Some(Reason::Reclaimed);
        index.take(node, want, class, 1);
        jobs[t].place(node);
        return true;
    }
    false
}

/// The fewest [`Candidate::shrink`] steps of `donor` (trainers handed out this pass beyond its
/// kept positions first, then its top positions) after which one node holds one trainer of shape
/// `want`, the donor staying above fulfillment `floor`: their count and that node. Simulates
/// `shrink` step for step without changing the donor.
fn top_run(
    donor: &mut Candidate,
    index: &NodeIndex,
    (want, class): (Resources, Option<PodClassId>),
    floor: f64,
    budget: &mut usize,
) -> Option<(usize, NodeId)> {
    let (give, give_class) = (donor.trainer(), donor.class);
    let (mut kept, mut planned) = (donor.kept, donor.planned);
    let share = donor.share();
    let mut placed = donor.placed.clone();
    let take_placed = |placed: &mut NodeCounts| {
        let (node, n) = placed.iter_mut().next_back()?;
        let node = *node;
        *n -= 1;
        if *n == 0 {
            placed.remove(&node);
        }
        Some(node)
    };
    let mut freed = NodeCounts::new();
    let positions = donor.positions();
    for steps in 1.. {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let node = if planned > kept && !placed.is_empty() {
            take_placed(&mut placed)
        } else if kept > 0 {
            kept -= 1;
            match positions.get(kept as usize).copied().flatten() {
                Some(node) => Some(node),
                None if planned > kept => take_placed(&mut placed),
                None => None,
            }
        } else {
            return None;
        };
        let Some(node) = node else {
            continue;
        };
        if share.at(planned - 1) <= floor {
            return None;
        }
        planned -= 1;
        let n = freed.entry(node).or_insert(0);
        *n += 1;
        if index.allowed(class, node)
            && index.fits_after(node, (want, class), (give, give_class), i64::from(*n))
        {
            return Some((steps, node));
        }
    }
    None
}
