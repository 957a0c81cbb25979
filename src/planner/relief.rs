//! Starvation relief: jobs below min are admitted as whole gangs, reclaiming trainers from more
//! fulfilled elastic jobs of no higher priority only when that makes the whole gang fit.

use std::cmp::Reverse;

use super::Reason;
use super::candidates::{Candidate, Shrunk};
use super::nodes::NodeIndex;
use super::relocate::{Repairs, place_gang};
use crate::api::Resources;
use crate::cluster::NodeId;
use crate::cluster::filters::PodClassId;

/// Admits jobs below min as whole gangs, in priority then age order, reclaiming trainers from
/// more fulfilled elastic jobs of no higher priority when that makes the gang fit. Returns which
/// jobs stay starving; a job whose min is above the cap (or its quota ceiling) always does.
pub fn admit_starving(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    cooling: &[bool],
    repairs: &mut Repairs,
) -> Vec<bool> {
    let mut starving: Vec<bool> = jobs
        .iter()
        .map(|j| j.planned < j.min || j.gang_blocked())
        .collect();
    retry_starving(jobs, index, cooling, &mut starving, repairs);
    starving
}

/// Tries again to admit the jobs marked starving, in priority then age order; returns whether
/// any got its gang. Run after water-filling, it can also take back trainers handed out in the
/// same pass, which costs nobody a running trainer. A job whose min is above the cap is never
/// admitted: no gang of it fits.
pub fn retry_starving(
    jobs: &mut [Candidate],
    index: &mut NodeIndex,
    cooling: &[bool],
    starving: &mut [bool],
    repairs: &mut Repairs,
) -> bool {
    let mut order: Vec<usize> = (0..jobs.len())
        .filter(|&i| starving[i] && !jobs[i].gang_blocked())
        .collect();
    order.sort_by(|&a, &b| jobs[a].order_key().cmp(&jobs[b].order_key()));
    let mut admitted = false;
    for s in order {
        let need = jobs[s].min - jobs[s].planned;
        if place_gang(jobs, index, s, need, repairs) || reclaim_for(jobs, index, cooling, s, need) {
            starving[s] = false;
            admitted = true;
        }
    }
    admitted
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
    let class = jobs[s].class;
    let priority = jobs[s].priority;
    let gang = want.times(i64::from(need));
    let mut steps: Vec<Step> = Vec::new();
    let mut room = index.total_free();
    let may_give = |jobs: &[Candidate], d: usize| {
        d != s
            && !cooling[d]
            && jobs[d].elastic()
            && jobs[d].priority <= priority
            && jobs[d].planned >= jobs[d].min
    };
    loop {
        let donor = (0..jobs.len())
            .filter(|&d| {
                may_give(jobs, d)
                    && jobs[d].planned > jobs[d].min
                    && !(jobs[d].on_node.is_empty() && jobs[d].placed.is_empty())
                    // Only room on nodes the gang may use helps it.
                    && (class.is_none()
                        || jobs[d]
                            .on_node
                            .keys()
                            .chain(jobs[d].placed.keys())
                            .any(|n| index.allowed(class, *n)))
            })
            .max_by(|&a, &b| jobs[a].gives_before(&jobs[b]))
            .and_then(|d| {
                // A trainer handed out earlier in this pass goes first, from the node where it
                // helps most: it is not running yet. Else the donor shrinks from its top.
                if jobs[d].placed.is_empty() {
                    return Some((d, 0, false));
                }
                most_useful_node(&jobs[d], index, want, class).map(|node| (d, node, true))
            });
        let step = match donor {
            Some((d, node, true)) => {
                jobs[d].unplace(node);
                index.give(node, jobs[d].trainer(), jobs[d].class, 1);
                room += jobs[d].trainer();
                Step::Unplace(d, node)
            }
            Some((d, _, false)) => match jobs[d].shrink(index) {
                Some(shrunk) => {
                    if shrunk.freed().is_some() {
                        room += jobs[d].trainer();
                    }
                    Step::Shrink(d, shrunk)
                }
                None => {
                    undo(jobs, index, steps);
                    return false;
                }
            },
            None => {
                undo(jobs, index, steps);
                return false;
            }
        };
        steps.push(step);
        // The gang cannot fit before the cluster's total free room could hold it.
        // No repairs here: they could fill room this attempt frees and then has to give back.
        if gang.fits_in(&room) && place_gang(jobs, index, s, need, &mut Repairs::none()) {
            give_back_unused(jobs, index, steps);
            return true;
        }
    }
}

/// One thing done to make room for a gang.
enum Step {
    /// A donor shrank from its top position.
    Shrink(usize, Shrunk),
    /// A trainer the donor was handed earlier in this pass taken back from a node.
    Unplace(usize, NodeId),
}

/// Reverts the steps, newest first.
fn undo(jobs: &mut [Candidate], index: &mut NodeIndex, steps: Vec<Step>) {
    for step in steps.into_iter().rev() {
        match step {
            Step::Shrink(d, shrunk) => jobs[d].unshrink(index, shrunk),
            Step::Unplace(d, node) => {
                jobs[d].place(node);
                index.take(node, jobs[d].trainer(), jobs[d].class, 1);
            }
        }
    }
}

/// The node among the donor's trainers placed this pass whose freed trainer most helps a
/// trainer of shape `want` and class `class` fit.
fn most_useful_node(
    donor: &Candidate,
    index: &NodeIndex,
    want: Resources,
    class: Option<PodClassId>,
) -> Option<NodeId> {
    let give = donor.trainer();
    let rate = |id: NodeId| {
        let after = index.free(id).unwrap_or(Resources::ZERO) + give;
        let fits =
            index.allowed(class, id) && index.fits_after(id, (want, class), (give, donor.class), 1);
        (
            fits,
            after.gpu,
            after.cpu_milli,
            Reverse(index.rank(id)),
            id,
        )
    };
    donor.placed.keys().map(|&id| rate(id)).max().map(|t| t.4)
}

/// Puts back the reclaimed trainers the gang did not need, newest first, where they still fit;
/// marks the donors that did give. A donor's shrinks come back only in order: once one cannot,
/// the lower ones stay given too.
fn give_back_unused(jobs: &mut [Candidate], index: &mut NodeIndex, steps: Vec<Step>) {
    let mut stuck: Vec<usize> = Vec::new();
    for step in steps.into_iter().rev() {
        match step {
            Step::Unplace(d, node) => {
                let (give, class) = jobs[d].shape();
                // Not past a shrink of the same donor that stays: that would regrow it.
                if jobs[d].planned < jobs[d].ceiling() && index.fits(node, give, class) {
                    jobs[d].place(node);
                    index.take(node, give, class, 1);
                }
            }
            Step::Shrink(d, shrunk) => {
                let (give, class) = jobs[d].shape();
                let fits = shrunk
                    .freed()
                    .is_none_or(|node| index.fits(node, give, class));
                if fits && !stuck.contains(&d) {
                    jobs[d].unshrink(index, shrunk);
                } else {
                    stuck.push(d);
                    jobs[d].reason = Some(Reason::Reclaimed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::JobKey;
    use crate::cluster::{ClusterState, NodeInfo};
    use crate::planner::candidates::candidates;
    use crate::testkit::job_info;

    const GIB: i64 = 1 << 30;

    #[test]
    fn retry_takes_back_trainers_of_a_donor_with_none_bound() {
        // One 4-core node. The donor has no bound trainer; earlier in the pass it was handed all
        // four cores. The starving gang of two takes two of them back.
        let trainer = Resources::new(1000, GIB, 0);
        let mut state = ClusterState::new();
        state.set_node(
            "a",
            Some(NodeInfo {
                allocatable: Resources::new(4000, 16 * GIB, 0),
                schedulable: true,
            }),
        );
        let node = state.node_id_of("a").expect("node a");
        for (name, min, max) in [("donor", 1, 4), ("gang", 2, 2)] {
            let key = JobKey::new("ns", name);
            state.set_training_job(key.clone(), Some(job_info(min, max, trainer, 0)));
            state.set_trainer_job(key, Some(Some(0)));
        }
        let mut index = NodeIndex::new(&state);
        let mut jobs = candidates(&state);
        assert_eq!(&*jobs[0].key.name, "donor");
        index.take(node, trainer, None, 4);
        jobs[0].place_many(node, 4);
        let mut starving = vec![false, true];
        let admitted = retry_starving(
            &mut jobs,
            &mut index,
            &[false, false],
            &mut starving,
            &mut Repairs::budget(0),
        );
        assert!(admitted);
        assert_eq!(starving, vec![false, false]);
        assert_eq!((jobs[0].planned, jobs[1].planned), (2, 2));
        assert_eq!(index.free(node), Some(Resources::new(0, 12 * GIB, 0)));
    }
}
