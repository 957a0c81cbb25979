//! The `fulfillment` policy: starvation relief for whole gangs, then max-min fair water-filling
//! with best-fit placement on real nodes, after over-max and overload trims (design.md §3).

use std::cmp::Reverse;

use ordered_float::OrderedFloat;
use priority_queue::PriorityQueue;

use super::candidates::{Candidate, candidates};
use super::nodes::NodeIndex;
use super::{JobPlan, PlannerConfig, Reason};
use crate::api::Resources;
use crate::cluster::{ClusterState, NodeId};

/// Runs the `fulfillment` pass.
pub fn plan(state: &ClusterState, config: &PlannerConfig) -> (Vec<JobPlan>, Vec<String>) {
    let mut index = NodeIndex::new(state);
    let mut jobs = candidates(state);
    let cooling: Vec<bool> = jobs
        .iter()
        .map(|j| {
            j.info
                .last_scale
                .is_some_and(|t| config.now.saturating_sub(t) < config.cooldown_s)
        })
        .collect();
    trim_over_max(&mut jobs, &mut index);
    relieve_overload(&mut jobs, &mut index);
    place_cooling_pending(&mut jobs, &mut index, &cooling);
    let starving = admit_starving(&mut jobs, &mut index, &cooling);
    let no_fit = water_fill(&mut jobs, &mut index, &cooling, &starving);
    let plans = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let (target, reason) = decide(j, cooling[i], starving[i], no_fit[i]);
            j.finish(state, target, reason)
        })
        .collect();
    (plans, Vec::new())
}

/// The final target and reason of one job.
fn decide(j: &Candidate, cooling: bool, starving: bool, no_fit: bool) -> (i32, Reason) {
    if starving {
        return (j.current, Reason::Starving);
    }
    if let Some(reason) = j.reason {
        return (j.planned, reason);
    }
    if cooling {
        let target = j.current.min(j.info.max);
        let reason = if target == j.current {
            Reason::Cooldown
        } else {
            Reason::OverMax
        };
        return (target, reason);
    }
    let target = j.planned;
    let reason = if target > j.current || (!j.placed.is_empty() && j.bound < j.info.min) {
        Reason::ScaleUp
    } else if target < j.current {
        if j.current > j.info.max {
            Reason::OverMax
        } else {
            Reason::Overload
        }
    } else if no_fit {
        Reason::NoFit
    } else {
        Reason::Unchanged
    };
    (target, reason)
}

/// The node holding most of a job's bound trainers (ties: name order).
fn fullest_node(j: &Candidate, index: &NodeIndex) -> Option<NodeId> {
    j.on_node
        .iter()
        .max_by_key(|(id, n)| (**n, Reverse(index.rank(**id))))
        .map(|(id, _)| *id)
}

/// Brings jobs with more bound trainers than max-instance down to max.
fn trim_over_max(jobs: &mut [Candidate], index: &mut NodeIndex) {
    for j in jobs.iter_mut() {
        while j.planned > j.info.max {
            let Some(node) = fullest_node(j, index) else {
                break;
            };
            j.remove_bound(node);
            index.adjust(node, j.trainer(), 1);
            j.reason = Some(Reason::OverMax);
        }
    }
}

/// On nodes holding more than they have, removes trainers of the most fulfilled jobs, never
/// below min, until the node fits or nothing more may go.
fn relieve_overload(jobs: &mut [Candidate], index: &mut NodeIndex) {
    for node in index.overloaded() {
        while index.free(node).is_some_and(|f| f.any_negative()) {
            let victim = jobs
                .iter()
                .enumerate()
                .filter(|(_, j)| j.on_node.contains_key(&node) && j.planned > j.info.min)
                .max_by(|(_, a), (_, b)| {
                    OrderedFloat(a.fulfillment_at(a.planned))
                        .cmp(&OrderedFloat(b.fulfillment_at(b.planned)))
                        .then_with(|| b.order_key().cmp(&a.order_key()))
                })
                .map(|(i, _)| i);
            let Some(v) = victim else { break };
            let j = &mut jobs[v];
            j.remove_bound(node);
            index.adjust(node, j.trainer(), 1);
            j.reason = Some(Reason::Overload);
        }
    }
}

/// Jobs in cooldown keep their size: their pending trainers are placed where they fit.
fn place_cooling_pending(jobs: &mut [Candidate], index: &mut NodeIndex, cooling: &[bool]) {
    for (i, j) in jobs.iter_mut().enumerate() {
        if !cooling[i] || j.planned < j.info.min {
            continue;
        }
        while j.planned < j.current.min(j.info.max) {
            let Some(node) = index.best_fit(j.trainer()) else {
                break;
            };
            index.adjust(node, j.trainer(), -1);
            j.place(node);
        }
    }
}

/// Admits jobs below min as whole gangs, in priority then age order, reclaiming trainers from
/// more fulfilled elastic jobs of no higher priority when that makes the gang fit. Returns which
/// jobs stay starving.
fn admit_starving(jobs: &mut [Candidate], index: &mut NodeIndex, cooling: &[bool]) -> Vec<bool> {
    let mut starving = vec![false; jobs.len()];
    let mut order: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].planned < jobs[i].info.min)
        .collect();
    order.sort_by(|&a, &b| jobs[a].order_key().cmp(&jobs[b].order_key()));
    for s in order {
        let need = jobs[s].info.min - jobs[s].planned;
        if jobs[s].place_gang(index, need) {
            continue;
        }
        if !reclaim_for(jobs, index, cooling, s, need) {
            starving[s] = true;
        }
    }
    starving
}

/// Frees trainers of donor jobs, most fulfilled first, until job `s`'s gang of `need` fits; undoes
/// everything when it never does.
fn reclaim_for(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    cooling: &[bool],
    s: usize,
    need: i32,
) -> bool {
    let want = jobs[s].trainer();
    let priority = jobs[s].info.priority;
    let gang = want.times(i64::from(need));
    let mut taken: Vec<(usize, NodeId)> = Vec::new();
    let mut room = index.total_free();
    loop {
        let donor = (0..jobs.len())
            .filter(|&d| {
                d != s
                    && !cooling[d]
                    && jobs[d].elastic()
                    && jobs[d].info.priority <= priority
                    && jobs[d].planned > jobs[d].info.min
                    && !jobs[d].on_node.is_empty()
            })
            .max_by(|&a, &b| {
                let (ja, jb) = (&jobs[a], &jobs[b]);
                OrderedFloat(ja.fulfillment_at(ja.planned))
                    .cmp(&OrderedFloat(jb.fulfillment_at(jb.planned)))
                    .then_with(|| jb.order_key().cmp(&ja.order_key()))
            });
        let Some(d) = donor else {
            for (d, node) in taken.into_iter().rev() {
                jobs[d].restore_bound(node);
                index.adjust(node, jobs[d].trainer(), -1);
            }
            return false;
        };
        let give = jobs[d].trainer();
        let node = most_useful_node(&jobs[d], index, give, want);
        jobs[d].remove_bound(node);
        index.adjust(node, give, 1);
        taken.push((d, node));
        room += give;
        // The gang cannot fit before the cluster's total free room could hold it.
        if gang.fits_in(&room) && jobs[s].place_gang(index, need) {
            for (d, _) in taken {
                jobs[d].reason = Some(Reason::Reclaimed);
            }
            return true;
        }
    }
}

/// The donor node whose freed trainer most helps a trainer of shape `want` fit.
fn most_useful_node(
    donor: &Candidate,
    index: &NodeIndex,
    give: Resources,
    want: Resources,
) -> NodeId {
    donor
        .on_node
        .keys()
        .map(|&id| {
            let after = index.free(id).unwrap_or(Resources::ZERO) + give;
            let fits = want.fits_in(&after);
            (
                fits,
                after.gpu,
                after.cpu_milli,
                Reverse(index.rank(id)),
                id,
            )
        })
        .max()
        .map(|t| t.4)
        .unwrap_or(0)
}

/// Hands out one trainer at a time to the least fulfilled job that can place one, until no job
/// below max can place a trainer anywhere. Returns which jobs stopped for lack of room.
fn water_fill(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    cooling: &[bool],
    starving: &[bool],
) -> Vec<bool> {
    type Key = (
        Reverse<OrderedFloat<f64>>,
        Reverse<OrderedFloat<f64>>,
        i32,
        Reverse<i64>,
        Reverse<usize>,
    );
    let key = |j: &Candidate, i: usize| -> Key {
        (
            Reverse(OrderedFloat(j.fulfillment_at(j.planned))),
            Reverse(OrderedFloat(j.fulfillment_at(j.planned + 1))),
            j.info.priority,
            Reverse(j.info.created),
            Reverse(i),
        )
    };
    let mut no_fit = vec![false; jobs.len()];
    let mut queue: PriorityQueue<usize, Key> = PriorityQueue::new();
    for (i, j) in jobs.iter().enumerate() {
        let shrunk = j.reason.is_some();
        if !cooling[i]
            && !starving[i]
            && !shrunk
            && j.planned >= j.info.min
            && j.planned < j.info.max
        {
            queue.push(i, key(j, i));
        }
    }
    // Shapes that fit nowhere; free room only shrinks here, so anything at least as big fails too.
    let mut failed: Vec<Resources> = Vec::new();
    while let Some((i, _)) = queue.pop() {
        let want = jobs[i].trainer();
        let node = if failed.iter().any(|f| f.fits_in(&want)) {
            None
        } else {
            index.best_fit(want)
        };
        let Some(node) = node else {
            failed.push(want);
            no_fit[i] = true;
            continue;
        };
        index.adjust(node, want, -1);
        jobs[i].place(node);
        if jobs[i].planned < jobs[i].info.max {
            let k = key(&jobs[i], i);
            queue.push(i, k);
        }
    }
    no_fit
}
