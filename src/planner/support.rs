//! Room for jobs' pending masters and pservers, held before any trainer is placed: a job's
//! trainers do nothing while its master or pservers wait for room that growth took.

use std::cmp::Reverse;

use super::Reason;
use super::candidates::Candidate;
use super::nodes::NodeIndex;
use crate::api::Resources;
use crate::cluster::{ClusterState, NodeId, PodInfo};

/// Where the plan puts one pending master or pserver pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportPlacement {
    /// The pod's namespace and name.
    pub pod: (String, String),
    /// The node whose room the plan holds for it; `None` when no node has room for it.
    pub node: Option<NodeId>,
}

/// A pending support pod of the state, borrowed.
pub type PendingPod<'s> = (&'s (String, String), &'s PodInfo);

/// The live, unbound master and pserver pods of `state`, in the order they get room: higher
/// `spec.priority` first, then older, then namespace/name.
pub fn pending(state: &ClusterState) -> Vec<PendingPod<'_>> {
    let mut pods: Vec<PendingPod<'_>> = state.pending_support().collect();
    pods.sort_by_key(|(key, pod)| (Reverse(pod.priority), pod.created, *key));
    pods
}

/// The requests of `pods`, for [`NodeIndex::for_shapes`].
pub fn shapes<'a>(pods: &'a [PendingPod<'_>]) -> impl Iterator<Item = Resources> + 'a {
    pods.iter().map(|(_, pod)| pod.requests)
}

/// Places each pod, in order, on its best-fit node among every schedulable one (a trainer class
/// does not apply to it), taking its room, a pod slot and the other resources it requests out
/// of `index`. One placement per pod, in the order given.
pub fn place<'s>(pods: &[PendingPod<'s>], index: &mut NodeIndex<'s>) -> Vec<SupportPlacement> {
    pods.iter()
        .map(|&(key, pod)| {
            let extended = Some(&pod.extended).filter(|e| !e.is_empty());
            let node = index.best_fit_pod(pod.requests, extended);
            if let Some(node) = node {
                index.take_pod(node, pod.requests, extended);
            }
            SupportPlacement {
                pod: key.clone(),
                node,
            }
        })
        .collect()
}

/// Frees room for the pods [`place`] found none for, in order: trainers of donor jobs (elastic,
/// above their min, not cooling, not the pod's own job, of no higher priority than it) shrink one
/// at a time, most fulfilled first, until the pod fits a node; when it never does, every shrink
/// for it is undone. A job's master and pservers are part of its admission: without them its
/// trainers run for nothing.
pub fn reclaim<'s>(
    placements: &mut [SupportPlacement],
    pods: &[PendingPod<'s>],
    jobs: &mut [Candidate<'s>],
    index: &mut NodeIndex<'s>,
    cooling: &[bool],
) {
    for (placement, &(_, pod)) in placements.iter_mut().zip(pods) {
        if placement.node.is_some() {
            continue;
        }
        let owner = pod.owner.as_ref().map(|(job, _)| job);
        let priority = owner
            .and_then(|key| jobs.iter().find(|j| j.key == key))
            .map_or(pod.priority, |j| j.priority);
        let extended = Some(&pod.extended).filter(|e| !e.is_empty());
        let mut shrunk = Vec::new();
        let node = loop {
            if let Some(node) = index.best_fit_pod(pod.requests, extended) {
                break Some(node);
            }
            let donor = (0..jobs.len())
                .filter(|&d| {
                    let j = &jobs[d];
                    Some(j.key) != owner
                        && !cooling[d]
                        && j.elastic()
                        && j.priority <= priority
                        && j.planned > j.min
                })
                .max_by(|&a, &b| jobs[a].gives_before(&jobs[b]));
            match donor.and_then(|d| jobs[d].shrink(index).map(|s| (d, s))) {
                Some(step) => shrunk.push(step),
                None => break None,
            }
        };
        match node {
            Some(node) => {
                index.take_pod(node, pod.requests, extended);
                placement.node = Some(node);
                for (d, _) in &shrunk {
                    jobs[*d].reason = Some(Reason::Reclaimed);
                }
            }
            None => {
                for (d, step) in shrunk.into_iter().rev() {
                    jobs[d].unshrink(index, step);
                }
            }
        }
    }
}
