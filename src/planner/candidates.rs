//! The jobs a pass plans, with the working counts the policies change.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BTreeMap;

use litemap::LiteMap;

use super::nodes::NodeIndex;
use super::{JobPlan, NodeCount, Reason, Removal};
use crate::api::{JobKey, Resources, fulfillment_of};
use crate::cluster::{ClusterState, NodeId};

/// Trainer counts per node in node-id order: a job's few nodes in one sorted vector (cheaper
/// than a `BTreeMap` for the handful of nodes a job's trainers land on).
pub type NodeCounts = LiteMap<NodeId, u32>;

/// One job under planning.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub key: &'a JobKey,
    /// Position in namespace/name order.
    pub rank: usize,
    /// The job's min-instance, max-instance, priority, trainer, creation time and last rescale,
    /// copied out of its `JobInfo`: the pass reads them for every queue key, tie and placement,
    /// and a copy beside the counts saves a cache miss each.
    pub min: i32,
    pub max: i32,
    pub priority: i32,
    pub trainer: Resources,
    pub created: i64,
    pub last_scale: Option<i64>,
    /// The trainer count the job has asked for (its trainer Job's parallelism).
    pub current: i32,
    /// Trainers bound to nodes when the pass started.
    pub bound: i32,
    /// Trainers kept or placed so far in the pass.
    pub planned: i32,
    /// Bound trainers still on each node (borrowed from the state until the pass changes it).
    pub on_node: Cow<'a, BTreeMap<NodeId, u32>>,
    /// Trainers placed by this pass, per node.
    pub placed: NodeCounts,
    /// Bound trainers removed by this pass, per node.
    pub removed: NodeCounts,
    /// The reason that stands so far, if anything happened.
    pub reason: Option<Reason>,
}

impl<'a> Candidate<'a> {
    /// Per-trainer resources.
    pub fn trainer(&self) -> Resources {
        self.trainer
    }

    /// Fulfillment at `count` trainers.
    pub fn fulfillment_at(&self, count: i32) -> f64 {
        fulfillment_of(i64::from(count), i64::from(self.min), i64::from(self.max))
    }

    /// Whether the job scales at all.
    pub fn elastic(&self) -> bool {
        self.min < self.max
    }

    /// The tie-break order: higher priority, then older, then namespace/name.
    pub fn order_key(&self) -> (Reverse<i32>, i64, usize) {
        (Reverse(self.priority), self.created, self.rank)
    }

    /// Records one trainer placed on `node`.
    pub fn place(&mut self, node: NodeId) {
        *self.placed.entry(node).or_insert(0) += 1;
        self.planned += 1;
    }

    /// Records `n` trainers placed on `node`.
    pub fn place_many(&mut self, node: NodeId, n: u32) {
        *self.placed.entry(node).or_insert(0) += n;
        self.planned += n as i32;
    }

    /// Records trainers placed on several nodes: `(node, trainers)` in any order, a node possibly
    /// more than once (sorted in place).
    pub fn place_all(&mut self, counts: &mut [(NodeId, u32)]) {
        counts.sort_unstable_by_key(|(node, _)| *node);
        // Room for a few more nodes: water-filling usually adds some after bulk steps.
        let mut merged: Vec<(NodeId, u32)> = Vec::with_capacity(counts.len() + 4);
        for &(node, n) in counts.iter() {
            match merged.last_mut() {
                Some((last, m)) if *last == node => *m += n,
                _ => merged.push((node, n)),
            }
            self.planned += n as i32;
        }
        if self.placed.is_empty() {
            self.placed = NodeCounts::from_sorted_store_unchecked(merged);
        } else {
            for (node, n) in merged {
                *self.placed.entry(node).or_insert(0) += n;
            }
        }
    }

    /// Takes back one trainer this pass placed on `node`.
    pub fn unplace(&mut self, node: NodeId) {
        if let Some(n) = self.placed.get_mut(&node) {
            *n -= 1;
            if *n == 0 {
                self.placed.remove(&node);
            }
            self.planned -= 1;
        }
    }

    /// Removes one bound trainer from `node`.
    pub fn remove_bound(&mut self, node: NodeId) {
        if self.on_node.contains_key(&node) {
            let on_node = self.on_node.to_mut();
            if let Some(n) = on_node.get_mut(&node) {
                *n -= 1;
                if *n == 0 {
                    on_node.remove(&node);
                }
            }
            *self.removed.entry(node).or_insert(0) += 1;
            self.planned -= 1;
        }
    }

    /// Puts back one bound trainer removed from `node`.
    pub fn restore_bound(&mut self, node: NodeId) {
        if let Some(n) = self.removed.get_mut(&node) {
            *n -= 1;
            if *n == 0 {
                self.removed.remove(&node);
            }
            *self.on_node.to_mut().entry(node).or_insert(0) += 1;
            self.planned += 1;
        }
    }

    /// The job's plan once the pass is done; nodes are listed in name order.
    pub fn finish(self, index: &NodeIndex, target: i32, reason: Reason) -> JobPlan<'a> {
        let fulfillment_before = self.fulfillment_at(self.current);
        let fulfillment_after = self.fulfillment_at(target);
        let placed: i32 = self.placed.values().map(|n| *n as i32).sum();
        // The placement counts become the plan's list in their own storage.
        let placements = by_name(index, self.placed, |node, trainers| NodeCount {
            node,
            trainers,
        });
        let unplaced = (self.current - self.bound).max(0);
        let mut removals = Vec::new();
        if target < self.current {
            let pending_removed = (unplaced - placed).max(0).min(self.current - target);
            if pending_removed > 0 {
                removals.push(Removal {
                    node: None,
                    trainers: pending_removed as u32,
                });
            }
        }
        if !self.removed.is_empty() {
            removals.extend(by_name(index, self.removed, |node, trainers| Removal {
                node: Some(node),
                trainers,
            }));
        }
        JobPlan {
            key: Cow::Borrowed(self.key),
            current: self.current,
            target,
            min: self.min,
            max: self.max,
            fulfillment_before,
            fulfillment_after,
            reason,
            placements,
            removals,
            trainer: self.trainer,
        }
    }
}

/// Per-node counts as `make(node, count)`, nodes in name order; nodes the state the index was
/// built from does not hold are left out. A `T` the size of a count pair reuses the counts'
/// storage (no allocation).
fn by_name<T>(index: &NodeIndex, counts: NodeCounts, make: impl Fn(NodeId, u32) -> T) -> Vec<T> {
    let mut counts = counts.into_tuple_vec();
    // Node ids are usually handed out in name order already; sort only when they are not.
    if !counts.is_sorted_by_key(|(id, _)| index.rank(*id)) {
        counts.sort_unstable_by_key(|(id, _)| index.rank(*id));
    }
    counts
        .into_iter()
        .filter(|(id, _)| index.rank(*id) != u32::MAX)
        .map(|(id, n)| make(id, n))
        .collect()
}

/// Valid TrainingJobs that have not finished, in namespace/name order.
pub fn candidates(state: &ClusterState) -> Vec<Candidate<'_>> {
    // Sized up front: growing a vector of 5,000 candidates copied it a dozen times.
    let mut out = Vec::with_capacity(state.job_slots().len());
    out.extend(
        state
            .jobs()
            .filter(|(_, _, info)| !info.phase.is_finished())
            .enumerate()
            .map(|(rank, (key, slot, info))| {
                let bound = slot.trainers.bound as i32;
                Candidate {
                    key,
                    rank,
                    min: info.min,
                    max: info.max,
                    priority: info.priority,
                    trainer: info.trainer,
                    created: info.created,
                    last_scale: info.last_scale,
                    current: slot.current(),
                    bound,
                    planned: bound,
                    on_node: Cow::Borrowed(&slot.trainers.bound_by_node),
                    placed: NodeCounts::new(),
                    removed: NodeCounts::new(),
                    reason: None,
                }
            }),
    );
    out
}
