//! The jobs a pass plans, with the working counts the policies change.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::HashMap;

use foldhash::fast::RandomState;
use litemap::LiteMap;
use ordered_float::OrderedFloat;

use super::nodes::{NodeIndex, Shape};
use super::{JobPlan, KueueNote, NodeCount, Reason, Removal};
use crate::api::speedup::SpeedupCurve;
use crate::api::{JobKey, Resources, fulfillment_of};
use crate::cluster::filters::{Extended, PodClassId};
use crate::cluster::quota::JobKueue;
use crate::cluster::{ClusterState, JobSlot, NodeId};

/// Trainer counts per node in node-id order: a job's few nodes in one sorted vector (cheaper
/// than a `BTreeMap` for the handful of nodes a job's trainers land on).
pub type NodeCounts = LiteMap<NodeId, u32>;

/// A job's bound trainers per node that hold a kept position: the slot's own counts, borrowed
/// until a shrink changes them. Most jobs never shrink, and a copy for every job cost an
/// allocation and a copy per job each pass.
#[derive(Debug, Clone)]
pub struct KeptCounts<'a> {
    /// The slot's counts.
    slot: &'a [(NodeId, u32)],
    /// The job's own counts, once positions had to be built or the pass changed them.
    own: Option<NodeCounts>,
}

impl<'a> KeptCounts<'a> {
    /// The slot's counts, borrowed.
    fn borrowed(slot: &'a [(NodeId, u32)]) -> Self {
        KeptCounts { slot, own: None }
    }

    /// Counts of the job's own.
    fn owned(own: NodeCounts) -> Self {
        KeptCounts {
            slot: &[],
            own: Some(own),
        }
    }

    /// The counts in node-id order.
    fn slice(&self) -> &[(NodeId, u32)] {
        self.own.as_ref().map_or(self.slot, |own| own.as_slice())
    }

    /// The count on `node`, if any.
    pub fn get(&self, node: &NodeId) -> Option<u32> {
        let counts = self.slice();
        counts
            .binary_search_by_key(node, |(n, _)| *n)
            .ok()
            .map(|at| counts[at].1)
    }

    pub fn contains_key(&self, node: &NodeId) -> bool {
        self.get(node).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.slice().is_empty()
    }

    /// The nodes, in id order.
    pub fn keys(&self) -> impl Iterator<Item = &NodeId> + '_ {
        self.slice().iter().map(|(node, _)| node)
    }

    /// The counts to change, copied out of the slot the first time.
    pub fn to_mut(&mut self) -> &mut NodeCounts {
        let slot = self.slot;
        self.own
            .get_or_insert_with(|| NodeCounts::from_sorted_store_unchecked(slot.to_vec()))
    }
}

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
    /// The max that fairness counts with: max-instance, capped at the trainers of this shape
    /// the cluster's schedulable nodes could hold if empty (see [`cap_fair_maxes`]), so declaring
    /// a huge max wins nothing, and at [`Candidate::quota_max`]. Never below min.
    pub fair_max: i32,
    /// The most trainers Kueue's quota lets the job reach in this pass (`planner::quota`):
    /// below `current` only when the job gives quota back that waiting Workloads need
    /// (`planner::quota`'s `reclaim`); `i32::MAX` for a job Kueue does not manage.
    pub quota_max: i32,
    /// What the quota pre-pass keeps of a Kueue-managed job (boxed: most jobs have none, and
    /// every candidate's size counts in the pass).
    pub quota: Option<Box<QuotaJob<'a>>>,
    /// The most trainers worth having (`goodput` with a marginal-speedup threshold: past this
    /// count the next trainer adds less); max-instance otherwise.
    pub useful_max: i32,
    /// `progress`: the most trainers the job may take of room no job wants below its
    /// [`Candidate::useful_max`] (see `planner::progress`); 0 otherwise. The pass trims a job
    /// down to the larger of the two.
    pub spare_max: i32,
    /// The declared speedup curve (`goodput`); `None` is linear.
    pub curve: Option<&'a SpeedupCurve>,
    /// Whether the pass orders jobs by the gain of their next trainer (`goodput`) instead of by
    /// fulfillment.
    pub goodput: bool,
    /// `progress`: the job's share at every count from min on, when it has one (see
    /// `planner::progress`); `None` leaves the share to `goodput`'s gain.
    pub lead: Option<f64>,
    pub priority: i32,
    pub trainer: Resources,
    /// The trainers' eligibility class: the nodes they may go to (`None`: every node).
    pub class: Option<PodClassId>,
    pub created: i64,
    pub last_scale: Option<i64>,
    /// The trainer count the job has asked for (its trainer Job's parallelism), capped at
    /// [`ClusterState::size_cap`] as min and max are.
    pub current: i32,
    /// The trainer count as declared: above `current` only when the cap lowered it. The plan
    /// reports it, so a resize brings the declared count down to the target.
    pub declared: i32,
    /// The declared min-instance is above the cap (which lowered `min`): more pods than the
    /// cluster's nodes hold. Its gang is never admitted, so it never runs below the min it
    /// declares; it waits (`starving`).
    pub min_above_cap: bool,
    /// Trainers bound to nodes when the pass started.
    pub bound: i32,
    /// Trainers kept or placed so far in the pass.
    pub planned: i32,
    /// Bound trainers still on each node (those holding a kept position).
    pub on_node: KeptCounts<'a>,
    /// Whether some bound trainer holds no kept position (see `trainers_in_positions`).
    strays: bool,
    /// Trainers placed by this pass, per node.
    pub placed: NodeCounts,
    /// Bound trainers removed by this pass, per node.
    pub removed: NodeCounts,
    /// The reason that stands so far, if anything happened.
    pub reason: Option<Reason>,
    /// Trainer positions kept (see [`JobSlot::controller_positions`]): the job shrinks only by
    /// lowering this, as lowering `parallelism` makes the Job controller remove the positions
    /// above it. Starts at `current`.
    pub kept: i32,
    /// The job's slot, read for its controller positions when it shrinks.
    slot: &'a JobSlot,
    /// The controller positions, built the first time they are needed.
    positions: Option<Vec<Option<NodeId>>>,
}

/// What the quota pre-pass keeps of a Kueue-managed job.
#[derive(Debug, Clone)]
pub struct QuotaJob<'a> {
    /// Kueue's view of the job.
    pub kueue: &'a JobKueue,
    /// [`Candidate::fair_max`] before the quota capped it.
    pub fair_cap: i32,
    /// What holds the job at its quota max (its quota, or an admission it waits for), if
    /// anything.
    pub note: Option<KueueNote>,
    /// The quota that stops the job is more than the nodes hold: it does not make the job
    /// count as served (its fair max stays [`QuotaJob::fair_cap`]).
    pub beyond_nodes: bool,
}

/// A job's share at a trainer count, the order every fair decision of the pass uses: the lower,
/// the sooner the job gets a trainer and the later it gives one up. Fair fulfillment, or under
/// `goodput` the negated gain of the next trainer (curves' gains never grow with the count, so
/// under either policy a job's share never falls as it grows).
#[derive(Debug, Clone, Copy)]
pub struct Share<'a> {
    min: i32,
    fair_max: i32,
    curve: Option<&'a SpeedupCurve>,
    goodput: bool,
    lead: Option<f64>,
}

impl<'a> Share<'a> {
    /// `goodput`'s share of a job with `curve` and min 0: its share at any count of at least
    /// one is every such job's at that count.
    pub fn of_curve(curve: Option<&'a SpeedupCurve>) -> Self {
        Share {
            min: 0,
            fair_max: 0,
            curve,
            goodput: true,
            lead: None,
        }
    }

    /// Whether both read the same curve (the same object, or both linear).
    pub fn same_curve(&self, other: &Share) -> bool {
        match (self.curve, other.curve) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// The share at `count` trainers.
    pub fn at(&self, count: i32) -> f64 {
        if self.goodput {
            // Below its gang a job comes before every job at or above its own (as negative
            // fulfillment does): nothing may take it below min.
            if count < self.min {
                return f64::NEG_INFINITY;
            }
            if let Some(lead) = self.lead {
                return lead;
            }
            -SpeedupCurve::gain_of(self.curve, count)
        } else {
            fulfillment_of(
                i64::from(count),
                i64::from(self.min),
                i64::from(self.fair_max),
            )
        }
    }
}

/// What one [`Candidate::shrink`] did, for [`Candidate::unshrink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shrunk {
    /// A trainer placed this pass beyond the kept positions was taken back from the node.
    Unplaced(NodeId),
    /// The top kept position was a trainer bound to the node; it goes.
    Bound(NodeId),
    /// The top kept position was pending; the placement that would have filled it, if any,
    /// was taken back from the node.
    Pending(Option<NodeId>),
}

impl Shrunk {
    /// The node where room came free, if any.
    pub fn freed(self) -> Option<NodeId> {
        match self {
            Shrunk::Unplaced(n) | Shrunk::Bound(n) | Shrunk::Pending(Some(n)) => Some(n),
            Shrunk::Pending(None) => None,
        }
    }
}

impl<'a> Candidate<'a> {
    /// Per-trainer resources.
    pub fn trainer(&self) -> Resources {
        self.trainer
    }

    /// Per-trainer resources and the class of nodes the trainers may go to.
    pub fn shape(&self) -> Shape {
        (self.trainer, self.class)
    }

    /// Fulfillment at `count` trainers against [`Candidate::fair_max`] (what fairness uses and
    /// the plan reports).
    pub fn fair_fulfillment_at(&self, count: i32) -> f64 {
        fulfillment_of(
            i64::from(count),
            i64::from(self.min),
            i64::from(self.fair_max),
        )
    }

    /// The job's share at `count` trainers (see [`Share`]).
    pub fn share_at(&self, count: i32) -> f64 {
        self.share().at(count)
    }

    /// What the job's share depends on, copied out (so it can be read while the job changes).
    pub fn share(&self) -> Share<'a> {
        Share {
            min: self.min,
            fair_max: self.fair_max,
            curve: self.curve,
            goodput: self.goodput,
            lead: self.lead,
        }
    }

    /// What orders jobs of equal share before the tie rank: fair fulfillment after one more
    /// trainer, or under `goodput` fair fulfillment now.
    pub fn second_at(&self, count: i32) -> f64 {
        if self.goodput {
            self.fair_fulfillment_at(count)
        } else {
            self.fair_fulfillment_at(count + 1)
        }
    }

    /// Whether the job scales at all.
    pub fn elastic(&self) -> bool {
        self.min < self.max
    }

    /// Kueue's view of the job, when Kueue manages it.
    pub fn kueue(&self) -> Option<&'a JobKueue> {
        self.quota.as_ref().map(|q| q.kueue)
    }

    /// What holds the job at its quota max, if anything.
    pub fn quota_note(&self) -> Option<&KueueNote> {
        self.quota.as_ref().and_then(|q| q.note.as_ref())
    }

    /// Sets what holds the job at its quota max (a job Kueue does not manage has none).
    pub fn set_quota_note(&mut self, note: Option<KueueNote>) {
        if let Some(q) = self.quota.as_mut() {
            q.note = note;
        }
    }

    /// Whether Kueue admitted less than the job asks (a scale-up waits): it keeps its size.
    pub fn awaiting(&self) -> bool {
        self.quota
            .as_ref()
            .is_some_and(|q| q.kueue.awaiting(self.current))
    }

    /// Whether no gang of its min can be admitted: more pods than the nodes hold, or more than
    /// its quota lets it reach.
    pub fn gang_blocked(&self) -> bool {
        self.min_above_cap || self.min > self.quota_max
    }

    /// The tie-break order: higher priority, then older, then namespace/name.
    pub fn order_key(&self) -> (Reverse<i32>, i64, usize) {
        (Reverse(self.priority), self.created, self.rank)
    }

    /// Which of two jobs gives up a trainer first, as the greater: the more fulfilled at its
    /// planned size, then the later in [`Candidate::order_key`]'s order.
    pub fn gives_before(&self, other: &Candidate) -> std::cmp::Ordering {
        OrderedFloat(self.share_at(self.planned))
            .cmp(&OrderedFloat(other.share_at(other.planned)))
            .then_with(|| other.order_key().cmp(&self.order_key()))
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

    /// `progress`: lets the job grow up to its spare max; whether that raised its useful max.
    pub fn open_spare(&mut self) -> bool {
        let raised = self.spare_max > self.useful_max;
        if raised {
            self.useful_max = self.spare_max;
        }
        raised
    }

    /// The most trainers the job may reach in this pass: max-instance (at most its useful max
    /// and its quota max), or, once it has shrunk, its kept positions (growing back would only undo the shrink: the Job controller cannot
    /// move a trainer).
    pub fn ceiling(&self) -> i32 {
        let max = self.max.min(self.useful_max).min(self.quota_max);
        if self.kept < self.current {
            self.kept.min(max)
        } else {
            max
        }
    }

    /// Bound pods per node that hold no position (see `trainers_in_positions`): the Job
    /// controller is removing them, so the room they hold comes free without any shrink.
    pub fn leaving(&self) -> impl Iterator<Item = (NodeId, u32)> + '_ {
        // Without strays every bound pod holds a position: nothing to walk.
        let walked = if self.strays {
            self.slot.trainers.bound_by_node.len()
        } else {
            0
        };
        self.slot
            .trainers
            .bound_by_node
            .iter()
            .take(walked)
            .filter_map(move |(node, n)| {
                let kept = self.on_node.get(node).unwrap_or(0);
                let held = kept + self.removed.get(node).copied().unwrap_or(0);
                let gone = n.saturating_sub(held);
                (gone > 0).then_some((*node, gone))
            })
    }

    /// The controller positions (built once), `current` of them.
    pub fn positions(&mut self) -> &[Option<NodeId>] {
        self.positions
            .get_or_insert_with(|| self.slot.controller_positions(self.current))
    }

    /// Takes away the job's top trainer the way lowering `parallelism` by one does: a trainer
    /// placed this pass beyond the kept positions first, else the highest kept position (a bound
    /// trainer, or a pending one, which frees nothing unless a placement was filling it). Gives
    /// the room back to `index`; `None` when nothing is left to take.
    pub fn shrink(&mut self, index: &mut NodeIndex) -> Option<Shrunk> {
        if self.planned > self.kept
            && let Some(node) = self.any_placed()
        {
            self.unplace(node);
            index.give(node, self.trainer, self.class, 1);
            return Some(Shrunk::Unplaced(node));
        }
        if self.kept <= 0 {
            return None;
        }
        self.kept -= 1;
        let top_position = self.kept as usize;
        let top = self.positions().get(top_position).copied().flatten();
        if let Some(node) = top
            && self.on_node.contains_key(&node)
        {
            let on_node = self.on_node.to_mut();
            if let Some(n) = on_node.get_mut(&node) {
                *n -= 1;
                if *n == 0 {
                    on_node.remove(&node);
                }
            }
            *self.removed.entry(node).or_insert(0) += 1;
            self.planned -= 1;
            index.give(node, self.trainer, self.class, 1);
            return Some(Shrunk::Bound(node));
        }
        let unplaced = (self.planned > self.kept)
            .then(|| self.any_placed())
            .flatten();
        if let Some(node) = unplaced {
            self.unplace(node);
            index.give(node, self.trainer, self.class, 1);
        }
        Some(Shrunk::Pending(unplaced))
    }

    /// Reverts a [`Candidate::shrink`]; shrinks must be reverted newest first.
    pub fn unshrink(&mut self, index: &mut NodeIndex, shrunk: Shrunk) {
        match shrunk {
            Shrunk::Unplaced(_) => {}
            Shrunk::Bound(node) => {
                self.kept += 1;
                if let Some(n) = self.removed.get_mut(&node) {
                    *n -= 1;
                    if *n == 0 {
                        self.removed.remove(&node);
                    }
                }
                *self.on_node.to_mut().entry(node).or_insert(0) += 1;
                self.planned += 1;
                index.take(node, self.trainer, self.class, 1);
                return;
            }
            Shrunk::Pending(_) => self.kept += 1,
        }
        if let Some(node) = shrunk.freed() {
            self.place(node);
            index.take(node, self.trainer, self.class, 1);
        }
    }

    /// A node holding a trainer placed this pass (the last in id order).
    fn any_placed(&self) -> Option<NodeId> {
        self.placed.iter().next_back().map(|(node, _)| *node)
    }

    /// The target the job's counts stand for, as the Job controller will realise it: growth
    /// when trainers were placed beyond the kept positions; else the kept positions, less the
    /// pending ones at the top that no placement fills (dropping those costs nothing).
    pub fn target(&mut self) -> i32 {
        if self.kept == self.current && self.planned >= self.current {
            return self.planned;
        }
        let mut unplaced = (self.kept - self.planned).max(0);
        let mut target = self.kept;
        let kept = self.kept;
        let positions = self.positions();
        while unplaced > 0 && target > 0 && target <= kept {
            match positions.get(target as usize - 1) {
                Some(Some(_)) => break,
                _ => {
                    target -= 1;
                    unplaced -= 1;
                }
            }
        }
        target
    }

    /// The job's plan once the pass is done; nodes are listed in name order. A job whose
    /// declared count the cap lowered is brought down to the target (reason `over_max` unless
    /// the pass shrank it for a reason of its own).
    pub fn finish(self, index: &NodeIndex, target: i32, reason: Reason) -> JobPlan<'a> {
        // Against the max the cluster can hold: a max-instance beyond every node's room would
        // read a well-served job as unserved.
        let fulfillment_before = self.fair_fulfillment_at(self.declared);
        let fulfillment_after = self.fair_fulfillment_at(target);
        let reason = capped_reason(self.declared, self.current, target, reason);
        // A gang placed below what the job asks is not a scale-up (5 asked, a gang of 4 placed:
        // 5 → 4): the rest found no room.
        let reason = if reason == Reason::ScaleUp && target < self.declared {
            Reason::NoFit
        } else {
            reason
        };
        // The placement counts become the plan's list in their own storage.
        let placements = by_name(index, self.placed, |node, trainers| NodeCount {
            node,
            trainers,
        });
        let removals = if target < self.declared {
            let positions = self
                .positions
                .unwrap_or_else(|| self.slot.controller_positions(self.current));
            controller_removals(&positions, self.declared, target, |id| {
                Some(index.rank(id)).filter(|rank| *rank != u32::MAX)
            })
        } else {
            Vec::new()
        };
        JobPlan {
            key: Cow::Borrowed(self.key),
            current: self.declared,
            target,
            min: self.min,
            max: self.max,
            fulfillment_before,
            fulfillment_after,
            reason,
            placements,
            removals,
            trainer: self.trainer,
            kueue: self
                .quota
                .and_then(|q| q.note)
                .filter(|note| match reason {
                    Reason::QuotaExhausted | Reason::AwaitingAdmission => true,
                    Reason::Reclaimed => matches!(note, KueueNote::Reclaimed { .. }),
                    _ => false,
                })
                .map(Box::new),
        }
    }
}

/// The reason a plan reports for a job whose declared count (`declared`) the cap lowered to
/// `current`: one planned below what it declares is brought down (`over_max`), unless the pass
/// shrank it for a reason of its own.
pub fn capped_reason(declared: i32, current: i32, target: i32, reason: Reason) -> Reason {
    let shrunk = matches!(
        reason,
        Reason::OverMax | Reason::Overload | Reason::Reclaimed | Reason::LowGain
    );
    if declared > current && target < declared && !shrunk {
        Reason::OverMax
    } else {
        reason
    }
}

/// What lowering `parallelism` from `current` to `target` removes, by the Job controller's
/// rule: the positions at and above `target` (`positions` from
/// [`JobSlot::controller_positions`]), pending ones as one entry with node `None`, first, then
/// bound ones per node in `order` (a node's sort key; `None` for a node the plan cannot name,
/// whose entry is left out). Positions from `positions.len()` up to `current` (above the cap)
/// count as pending.
pub fn controller_removals<K: Ord>(
    positions: &[Option<NodeId>],
    current: i32,
    target: i32,
    order: impl Fn(NodeId) -> Option<K>,
) -> Vec<Removal> {
    let from = (target.max(0) as usize).min(positions.len());
    let beyond = (i64::from(current) - i64::from(target).max(positions.len() as i64)).max(0);
    let mut pending = u32::try_from(beyond).unwrap_or(u32::MAX);
    let mut bound = NodeCounts::new();
    for position in &positions[from..] {
        match position {
            Some(node) => *bound.entry(*node).or_insert(0) += 1,
            None => pending += 1,
        }
    }
    let mut named: Vec<(K, NodeId, u32)> = bound
        .into_tuple_vec()
        .into_iter()
        .filter_map(|(node, n)| Some((order(node)?, node, n)))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(named.len() + 1);
    if pending > 0 {
        out.push(Removal {
            node: None,
            trainers: pending,
        });
    }
    out.extend(named.into_iter().map(|(_, node, trainers)| Removal {
        node: Some(node),
        trainers,
    }));
    out
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

/// A job's bound trainers that hold one of its first `current` controller positions (the
/// planning model's size): all of them, as the slot counts them, unless some stand above it (an
/// index at or above parallelism, a duplicate index, more unindexed pods than parallelism),
/// which the Job controller is removing already (or removes once the capped size is written):
/// those still hold their node's room but are not the job's trainers. Also the positions, when
/// they had to be built.
#[allow(clippy::type_complexity)]
fn trainers_in_positions(
    slot: &JobSlot,
    current: i32,
) -> (i32, KeptCounts<'_>, Option<Vec<Option<NodeId>>>) {
    let t = &slot.trainers;
    let planned = current;
    let current = current.max(0) as usize;
    if t.index_end as usize <= current
        && t.bound_by_index.len() + t.bound_unindexed.len() <= current
    {
        return (
            t.bound as i32,
            KeptCounts::borrowed(t.bound_by_node.as_slice()),
            None,
        );
    }
    let positions = slot.controller_positions(planned);
    let mut nodes: Vec<NodeId> = positions.iter().flatten().copied().collect();
    nodes.sort_unstable();
    let on_node = nodes
        .chunk_by(|a, b| a == b)
        .map(|run| (run[0], run.len() as u32))
        .collect();
    (
        nodes.len() as i32,
        KeptCounts::owned(on_node),
        Some(positions),
    )
}

/// Valid jobs that have not finished, in namespace/name order, their min, max and current
/// size capped at [`ClusterState::size_cap`] first of all (see [`ClusterState::sizes`]).
pub fn candidates(state: &ClusterState) -> Vec<Candidate<'_>> {
    // Sized up front: growing a vector of 5,000 candidates copied it a dozen times.
    let mut out = Vec::with_capacity(state.job_slots().len());
    out.extend(
        state
            .jobs()
            .filter(|(_, _, info)| !info.phase.is_finished())
            .enumerate()
            .map(|(rank, (key, slot, info))| {
                let sizes = state.sizes(slot, info);
                let (bound, on_node, positions) = trainers_in_positions(slot, sizes.current);
                let strays = positions.is_some();
                Candidate {
                    key,
                    rank,
                    min: sizes.min,
                    max: sizes.max,
                    fair_max: sizes.max,
                    quota_max: i32::MAX,
                    quota: state.quota().job(key).map(|kueue| {
                        Box::new(QuotaJob {
                            kueue,
                            fair_cap: sizes.max,
                            note: None,
                            beyond_nodes: false,
                        })
                    }),
                    useful_max: sizes.max,
                    spare_max: 0,
                    curve: info.speedup.as_deref(),
                    goodput: false,
                    lead: None,
                    priority: info.priority,
                    trainer: info.trainer,
                    class: slot.class,
                    created: info.created,
                    last_scale: info.last_scale,
                    current: sizes.current,
                    declared: slot.current(),
                    min_above_cap: info.min > sizes.min,
                    bound,
                    planned: bound,
                    on_node,
                    strays,
                    placed: NodeCounts::new(),
                    removed: NodeCounts::new(),
                    reason: None,
                    kept: sizes.current,
                    slot,
                    positions,
                }
            }),
    );
    out
}

/// Sets each job's [`Candidate::useful_max`] to the count past which its next trainer adds less
/// than `threshold` (never below min; a threshold of 0 or less leaves max-instance).
pub fn cap_useful_maxes(jobs: &mut [Candidate], threshold: f64) {
    if threshold.is_nan() || threshold <= 0.0 {
        return;
    }
    for j in jobs.iter_mut() {
        let share = j.share();
        // Gains never grow with the count: the first count whose next trainer adds too little.
        let (mut low, mut high) = (j.min.max(0), j.max.max(j.min));
        while low < high {
            let mid = low + (high - low) / 2;
            if -share.at(mid) < threshold {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        j.useful_max = low.max(j.min);
    }
}

/// Nodes [`cap_fair_maxes`] counts before it asks whether any node of the class fits the trainer.
const QUICK_SCAN: usize = 64;

/// Caps each elastic job's [`Candidate::fair_max`] at the trainers of its shape that all
/// schedulable nodes its class may use could hold if they were empty (within each node's pod
/// limit and allocatable other resources the class requests). Counting stops once a
/// job's max is reached, so only a job declaring more than the cluster holds costs a scan of
/// its class's nodes; a trainer larger in some resource than every such node holds none without
/// a scan; full counts are kept per shape and class.
pub fn cap_fair_maxes(state: &ClusterState, jobs: &mut [Candidate]) {
    let mut full: HashMap<(Resources, Option<PodClassId>), i64, RandomState> = HashMap::default();
    // Per class: the largest amount of each resource on a schedulable node it may use.
    let mut largest: HashMap<Option<PodClassId>, Resources, RandomState> = HashMap::default();
    let rooms = |class: Option<PodClassId>| {
        state
            .nodes()
            .filter(move |(id, _)| state.eligible(class, *id))
            .filter_map(|(id, slot)| {
                let info = slot.info.as_ref().filter(|n| n.schedulable)?;
                Some((id, info.allocatable, slot.pod_limit))
            })
    };
    let eligibility = state.eligibility();
    for j in jobs.iter_mut().filter(|j| j.elastic()) {
        let shape = (j.trainer, j.class);
        let want = i64::from(j.max);
        let cap = match full.get(&shape) {
            Some(&cap) => cap,
            None => {
                let extended = j
                    .class
                    .and_then(|c| eligibility.constraints(c))
                    .map(|c| &c.extended)
                    .filter(|e| !e.is_empty());
                let mut held = 0i64;
                for (scanned, (id, room, pods)) in rooms(j.class).enumerate() {
                    // A long scan may be for a trainer no node of the class can hold: the
                    // class's largest node says so at once (found once per class).
                    if scanned == QUICK_SCAN {
                        let largest = largest.entry(j.class).or_insert_with(|| {
                            rooms(j.class)
                                .map(|(_, room, _)| room)
                                .fold(Resources::ZERO, Resources::max)
                        });
                        if !j.trainer.fits_in(largest) {
                            break;
                        }
                    }
                    let mut fit = j.trainer.fit_count(&room).min(pods);
                    if let Some(extended) = extended {
                        fit = fit.min(allocatable_count(state, id, extended));
                    }
                    held = held.saturating_add(fit);
                    if held >= want {
                        break;
                    }
                }
                if held < want {
                    full.insert(shape, held);
                }
                held
            }
        };
        if cap < want {
            j.fair_max = (cap.max(i64::from(j.min))) as i32;
        }
    }
}

/// How many pods requesting `extended` each node `id`'s allocatable other resources hold.
fn allocatable_count(state: &ClusterState, id: NodeId, extended: &Extended) -> i64 {
    let traits = state.node_traits(id);
    extended
        .iter()
        .filter(|(_, amount)| **amount > 0)
        .map(|(name, amount)| {
            let have = traits.and_then(|t| t.extended.get(name)).copied();
            have.unwrap_or(0).max(0) / amount
        })
        .min()
        .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeInfo;
    use crate::testkit::{job_info, trainer_pod};

    const GIB: i64 = 1 << 30;

    /// One job of parallelism 5 on nodes a and b: index 0 on a, 1 pending, 2 on b, 3 on a,
    /// 4 not created; plus a pod at index 5 the controller is removing already.
    fn state() -> (ClusterState, JobKey) {
        let trainer = Resources::new(1000, GIB, 0);
        let mut state = ClusterState::new();
        for name in ["a", "b"] {
            state.set_node(
                name,
                Some(NodeInfo {
                    allocatable: Resources::new(8000, 16 * GIB, 0),
                    schedulable: true,
                }),
            );
        }
        let key = JobKey::new("ns", "j");
        state.set_training_job(key.clone(), Some(job_info(1, 8, trainer, 0)));
        state.set_trainer_job(key.clone(), Some(Some(5)));
        for (index, node) in [
            (0, Some("a")),
            (1, None),
            (2, Some("b")),
            (3, Some("a")),
            (5, Some("b")),
        ] {
            state.set_pod(
                ("ns".into(), format!("j-{index}")),
                Some(trainer_pod(
                    &key,
                    node.map(str::to_string),
                    trainer,
                    Some(index),
                )),
            );
        }
        (state, key)
    }

    #[test]
    fn positions_follow_completion_indexes() {
        let (state, key) = state();
        let (a, b) = (
            state.node_id_of("a").unwrap(),
            state.node_id_of("b").unwrap(),
        );
        let slot = state.job(&key).unwrap();
        assert_eq!(
            slot.controller_positions(i32::MAX),
            vec![Some(a), None, Some(b), Some(a), None]
        );
        // The pod at index 5 holds room but is not one of the job's trainers.
        let jobs = candidates(&state);
        assert_eq!((jobs[0].bound, jobs[0].on_node.get(&b)), (3, Some(1)));
    }

    #[test]
    fn kept_counts_borrow_the_slot_until_a_shrink_changes_them() {
        let (mut state, key) = state();
        // Without the pod above parallelism every bound pod holds a position: no copy.
        state.set_pod(("ns".into(), "j-5".into()), None);
        let a = state.node_id_of("a").unwrap();
        let mut index = NodeIndex::new(&state);
        let mut jobs = candidates(&state);
        let j = &mut jobs[0];
        assert!(j.on_node.own.is_none());
        assert_eq!(j.on_node.get(&a), Some(2));
        // Index 4 is pending; index 3 is on a: that shrink copies the counts, the slot's stay.
        j.shrink(&mut index);
        assert_eq!(j.shrink(&mut index), Some(Shrunk::Bound(a)));
        assert!(j.on_node.own.is_some());
        assert_eq!(j.on_node.get(&a), Some(1));
        let slot = state.job(&key).unwrap();
        assert_eq!(slot.trainers.bound_by_node.get(&a), Some(&2));
    }

    #[test]
    fn shrink_goes_from_the_top_and_unshrink_undoes_it() {
        let (state, _) = state();
        let (a, b) = (
            state.node_id_of("a").unwrap(),
            state.node_id_of("b").unwrap(),
        );
        let mut index = NodeIndex::new(&state);
        let free_a = index.free(a).unwrap();
        let mut jobs = candidates(&state);
        let j = &mut jobs[0];
        // Index 4 was never created: nothing is freed; then index 3 on a, then 2 on b.
        assert_eq!(j.shrink(&mut index), Some(Shrunk::Pending(None)));
        assert_eq!(j.shrink(&mut index), Some(Shrunk::Bound(a)));
        assert_eq!(index.free(a), Some(free_a + j.trainer()));
        let last = j.shrink(&mut index).unwrap();
        assert_eq!(last, Shrunk::Bound(b));
        assert_eq!((j.kept, j.planned, j.ceiling()), (2, 1, 2));
        j.unshrink(&mut index, last);
        assert_eq!((j.kept, j.planned), (3, 2));
        let mut j = jobs.remove(0);
        // Kept positions 0..3 with index 1 pending and unplaced: the target keeps it (it is
        // below a bound one), and the plan names exactly indexes 3 and 4.
        assert_eq!(j.target(), 3);
        let plan = j.finish(&index, 3, Reason::Overload);
        assert_eq!(
            plan.removals,
            vec![
                Removal {
                    node: None,
                    trainers: 1
                },
                Removal {
                    node: Some(a),
                    trainers: 1
                }
            ]
        );
    }
}
