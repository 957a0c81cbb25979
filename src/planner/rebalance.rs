//! Fair-share moves: a job that cannot grow takes trainers from a more fulfilled job on a node
//! where that makes room, as long as the donor stays strictly above the taker's fulfillment.
//!
//! Every move raises the taker and leaves the donor above the taker's old level, so the sorted
//! fulfillment vector rises and no later pass moves the trainer back.

use super::Reason;
use super::candidates::Candidate;
use super::fill_queue::{Queueing, lowest_first};
use super::nodes::NodeIndex;
use crate::cluster::NodeId;

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
    let mut takers: Vec<usize> = (0..jobs.len())
        .filter(|&i| {
            eligible(i)
                && no_fit[i]
                && jobs[i].planned >= jobs[i].min
                && jobs[i].planned < jobs[i].max
        })
        .collect();
    if takers.is_empty() {
        return false;
    }
    // Least fulfilled first, then by the tie order (priority, age, name), packed with the job.
    let key = |i: usize| {
        let j = &jobs[i];
        let ascending = !lowest_first(j.fulfillment_at(j.planned));
        (u128::from(ascending) << 64) | (u128::from(u32::MAX - queueing.ties[i]) << 32)
    };
    sort_by_packed_key(&mut takers, key);
    let mut donors: Vec<usize> = (0..jobs.len())
        .filter(|&d| eligible(d) && jobs[d].elastic() && jobs[d].planned > jobs[d].min)
        .collect();
    sort_by_packed_key(&mut donors, |d| !key(d) & !u128::from(u32::MAX));
    let mut moved = false;
    let mut nodes = Vec::new();
    for t in takers {
        if *budget == 0 {
            break;
        }
        // Until a move changes counts, donors are in descending fulfillment order.
        let sorted = !moved;
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
    let floor = jobs[t].fulfillment_at(jobs[t].planned);
    let want = jobs[t].trainer();
    let priority = jobs[t].priority;
    for &d in donors {
        if sorted && jobs[d].fulfillment_at(jobs[d].planned) <= floor {
            break;
        }
        if d == t
            || jobs[d].priority > priority
            || jobs[d].fulfillment_at(jobs[d].planned - 1) <= floor
        {
            continue;
        }
        let give = jobs[d].trainer();
        // The donor's nodes in name order with its trainers there (placed this pass and bound).
        nodes.clear();
        nodes.extend(
            jobs[d]
                .placed
                .iter()
                .chain(jobs[d].on_node.iter())
                .map(|(n, count)| (index.rank(*n), *n, *count)),
        );
        // Two runs, each usually in rank order already: the stable sort merges them in O(n).
        nodes.sort_by_key(|(rank, _, _)| *rank);
        nodes.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.2 += later.2;
            }
            same
        });
        for &(_, node, have) in nodes.iter() {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            let Some(mut room) = index.free(node) else {
                continue;
            };
            let mut k = 0;
            while !want.fits_in(&room)
                && k < have as i32
                && jobs[d].fulfillment_at(jobs[d].planned - k - 1) > floor
            {
                k += 1;
                room += give;
            }
            if !want.fits_in(&room) {
                continue;
            }
            for _ in 0..k {
                take_from(&mut jobs[d], index, node);
            }
            index.adjust(node, want, -1);
            jobs[t].place(node);
            return true;
        }
    }
    false
}

/// Takes one of the donor's trainers off `node`: one placed this pass first, else a bound one.
fn take_from(donor: &mut Candidate, index: &mut NodeIndex, node: NodeId) {
    if donor.placed.contains_key(&node) {
        donor.unplace(node);
    } else {
        donor.remove_bound(node);
        donor.reason = Some(Reason::Reclaimed);
    }
    index.adjust(node, donor.trainer(), 1);
}
