//! `ClusterState`: nodes, pods and jobs, with per-node free resources and per-job trainer counts
//! kept incrementally, one object at a time, as a watch stream delivers them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use foldhash::fast::RandomState;
use litemap::LiteMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::filters::{Eligibility, Extended, NodeTraits, PodClassId, PodConstraints};
use super::kinds::{
    JobObject, LeftAlone, PodClaim, PodRule, Reading, priority_field, resize_of, size_fields,
};
use super::objects::{
    JobInfo, NodeInfo, PodInfo, PodPhase, Role, pod_key, read_node, read_pod, read_trainer_job,
    suspended_by_others, trainer_constraints,
};
use super::quota::{QuotaModel, queue_label};
use crate::api::priority::{PriorityClasses, class_value, resolve_priority};
use crate::api::progress::{Progress, malformed_warning};
use crate::api::{FieldError, JobKey, Resources};

mod kueue;
mod progress;
mod reservations;

pub use progress::IgnoredProgress;

pub use reservations::Reservation;

/// Why a job whose trainer Job is suspended by someone else than trainscale (Kueue, before it
/// admits the job) is left alone: it holds no room and is not resized until resumed.
pub static SUSPENDED: std::sync::LazyLock<LeftAlone> = std::sync::LazyLock::new(|| LeftAlone {
    field: "spec.suspend of its trainer Job",
    why: "its trainer Job is suspended (not admitted by Kueue yet)".to_string(),
    announce: false,
});

/// Index of a node slot; stable while the node or any pod bound to it exists.
pub type NodeId = u32;

/// The pods a Node that states no `pods` allocatable (or capacity) counts for in
/// [`ClusterState::pod_slots`], the kubelet's default `--max-pods`; also the smallest
/// [`ClusterState::size_cap`].
pub const DEFAULT_NODE_PODS: i64 = 110;

/// The most pods one Node counts for in [`ClusterState::pod_slots`], whatever it states: 2^16,
/// the addresses of a /16 pod range.
pub const MAX_NODE_PODS: i64 = 1 << 16;

/// A job's min, max and current size as the planning model takes them: each declared value
/// capped at [`ClusterState::size_cap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub min: i32,
    pub max: i32,
    pub current: i32,
}

/// A node as the state holds it; the node object may not have arrived yet while pods name it.
#[derive(Debug, Clone)]
pub struct NodeSlot {
    /// Shared, so copies of the name do not copy the string.
    pub name: Arc<str>,
    pub info: Option<NodeInfo>,
    /// Requests of the pods bound here that are not Succeeded or Failed.
    pub used: Resources,
    /// Number of such pods.
    pub pods: u32,
    /// The part of `used` held by pods being deleted: it comes free once they are gone.
    pub terminating: Resources,
    /// How many of `pods` are being deleted.
    pub terminating_pods: u32,
    /// Requests of other resources (see `filters::Extended`) of the pods counted in `used`;
    /// resources none of them requests are left out.
    pub extended: Extended,
    /// The most pods it takes ([`ClusterState::pod_limit`]), kept as its Node changes.
    pub pod_limit: i64,
}

impl NodeSlot {
    /// Whether the node exists and takes pods.
    pub fn schedulable(&self) -> bool {
        self.info.as_ref().is_some_and(|i| i.schedulable)
    }

    /// Allocatable minus used; zero capacity when the node is unknown, cordoned or NotReady.
    pub fn free(&self) -> Resources {
        match &self.info {
            Some(info) if info.schedulable => info.allocatable - self.used,
            _ => Resources::ZERO - self.used,
        }
    }

    /// The pods it takes besides those bound to it; below zero when it holds more than its
    /// limit.
    pub fn free_pods(&self) -> i64 {
        self.pod_limit - i64::from(self.pods)
    }

    /// [`NodeSlot::free`] once the pods being deleted are gone.
    pub fn free_after_terminating(&self) -> Resources {
        self.free() + self.terminating
    }

    /// [`NodeSlot::free_pods`] once the pods being deleted are gone.
    pub fn free_pods_after_terminating(&self) -> i64 {
        self.free_pods() + i64::from(self.terminating_pods)
    }

    /// Allocatable of a schedulable node, else zero.
    pub fn capacity(&self) -> Resources {
        match &self.info {
            Some(info) if info.schedulable => info.allocatable,
            _ => Resources::ZERO,
        }
    }
}

/// Trainer pods of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrainerPods {
    /// Bound, live (not terminating, not finished) trainers per node, in node id order (a
    /// sorted vector: a pass's candidates borrow it as a slice).
    pub bound_by_node: LiteMap<NodeId, u32>,
    /// Bound, live trainers.
    pub bound: u32,
    /// Bound, live trainers with a completion index, by `(index, pod name)`, in a sorted vector
    /// (a pass reads a job's positions in one piece; a B-tree was a cache miss per node).
    pub bound_by_index: LiteMap<(u32, String), NodeId>,
    /// One past the highest completion index in `bound_by_index` (0 when it is empty), kept
    /// beside it: a pass reads it for every job, and the map's last key is a cache miss away.
    pub index_end: u32,
    /// Bound, live trainers without a completion index, by `(creation time, pod name)`.
    pub bound_unindexed: BTreeMap<(i64, String), NodeId>,
    /// Live trainers not yet bound to a node, gated ones not included.
    pub pending: u32,
    /// Live unbound trainers held by scheduling gates: they will not come to a node until the
    /// gates are lifted, so they are not present for their gang.
    pub gated: u32,
    /// Trainers being deleted (they still hold their node's resources).
    pub terminating: u32,
    /// Trainers that finished (Succeeded or Failed).
    pub finished: u32,
}

/// Everything known about one job key.
#[derive(Debug, Clone, Default)]
pub struct JobSlot {
    /// The job, when it has arrived and has no error.
    pub info: Option<JobInfo>,
    /// Why the job was rejected, when it was.
    pub invalid: Option<Vec<FieldError>>,
    /// Warnings of the job's spec (see [`ClusterState::warnings`] for all of them).
    pub warnings: Vec<FieldError>,
    /// `spec.parallelism` of the trainer batch/v1 Job, when one exists.
    pub trainer_job_parallelism: Option<i32>,
    /// Whether a trainer Job exists.
    pub has_trainer_job: bool,
    pub trainers: TrainerPods,
    /// The eligibility class of the trainer pods (from the trainer Job's pod template); `None`:
    /// every schedulable node takes them (no trainer Job read yet, or a simulated one).
    pub class: Option<PodClassId>,
    /// Why the job, of a kind trainscale only sizes, is not planned (not an error).
    pub left_alone: Option<LeftAlone>,
    /// Sized by a field of the job object (no trainer Job): without a stored size, the live
    /// trainer pods are its size.
    pub sized_by_pods: bool,
    /// Its trainer Job is suspended by someone else than trainscale (Kueue has not admitted
    /// it): while the job is unfinished it holds no room and is not resized (see
    /// [`JobSlot::held_by_suspension`]).
    pub trainer_job_suspended: bool,
    /// The job's progress report as read from its object (`None`: none); a malformed one is
    /// also among `warnings`. Turned into `info.progress` by
    /// [`ClusterState::estimate_progress`].
    pub progress: Option<Result<Progress, FieldError>>,
}

impl JobSlot {
    /// Current trainer count: the trainer Job's parallelism, else the job's stored size, else
    /// (kinds sized by a field of the job object) its live trainer pods, else 0.
    pub fn current(&self) -> i32 {
        self.trainer_job_parallelism
            .or(self.info.as_ref().and_then(|i| i.stored_parallelism))
            .unwrap_or_else(|| {
                if self.sized_by_pods {
                    let live = self.trainers.bound.saturating_add(self.trainers.pending);
                    i32::try_from(live).unwrap_or(i32::MAX)
                } else {
                    0
                }
            })
            .max(0)
    }

    /// Whether the job is left alone because its trainer Job is suspended by someone else
    /// (see [`SUSPENDED`]): unfinished, with such a trainer Job.
    pub fn held_by_suspension(&self) -> bool {
        self.trainer_job_suspended
            && self
                .info
                .as_ref()
                .is_some_and(|info| !info.phase.is_finished())
    }

    /// Trainers wanted but not running on a node: pending pods (gated ones too) plus pods not
    /// yet created.
    pub fn pending_trainers(&self) -> u32 {
        let live = self.trainers.bound.saturating_add(self.trainers.pending);
        let missing = (self.current() as u32).saturating_sub(live);
        self.trainers.pending.saturating_add(missing)
    }

    /// The job's trainer positions as the Job controller removes them, lowest first: position `p`
    /// holds the node of the trainer kept at `p`, `None` when that trainer is pending or not
    /// created yet. Lowering `parallelism` to `t` removes exactly positions `t..current`.
    ///
    /// Indexed pods sit at their completion index (the controller removes indexes >= the new
    /// completions); pods without an index (a NonIndexed Job, which removes unscheduled pods, then
    /// the newest) fill the lowest free positions oldest first. Bound pods with an index at or
    /// above `current` are already on their way out and hold no position.
    ///
    /// Only the first `cap` positions are built (the planning model's size, at most
    /// [`ClusterState::size_cap`]): the vector is never longer than the cluster could hold.
    pub fn controller_positions(&self, cap: i32) -> Vec<Option<NodeId>> {
        let current = self.current().min(cap).max(0) as usize;
        let mut positions = vec![None; current];
        for ((index, _), node) in &self.trainers.bound_by_index {
            match positions.get_mut(*index as usize) {
                Some(slot @ None) => *slot = Some(*node),
                Some(Some(_)) => {}
                None => break,
            }
        }
        let mut free = 0;
        for node in self.trainers.bound_unindexed.values() {
            while free < current && positions[free].is_some() {
                free += 1;
            }
            let Some(slot) = positions.get_mut(free) else {
                break;
            };
            *slot = Some(*node);
        }
        positions
    }

    fn is_empty(&self) -> bool {
        self.info.is_none()
            && self.invalid.is_none()
            && self.warnings.is_empty()
            && !self.has_trainer_job
            && self.class.is_none()
            && self.left_alone.is_none()
            && !self.trainer_job_suspended
            && self.trainers == TrainerPods::default()
    }
}

/// Where a live, bound trainer pod stands in its job's controller order (see
/// [`JobSlot::controller_positions`]).
#[derive(Debug, Clone)]
struct Position {
    job: JobKey,
    index: Option<u32>,
    created: i64,
    node: String,
}

impl Position {
    fn of(pod: &PodInfo) -> Option<Position> {
        position_parts(pod).map(|(job, index, created, node)| Position {
            job: job.clone(),
            index,
            created,
            node: node.to_string(),
        })
    }
}

/// A [`Position`]'s parts, borrowed from the pod (comparing them costs no copy).
fn position_parts(pod: &PodInfo) -> Option<(&JobKey, Option<u32>, i64, &str)> {
    match (&pod.owner, &pod.node) {
        (Some((job, Role::Trainer)), Some(node))
            if !pod.terminating && pod.phase != PodPhase::Finished =>
        {
            Some((job, pod.index, pod.created, node))
        }
        _ => None,
    }
}

/// The cluster as the planner sees it.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    node_ids: HashMap<Arc<str>, NodeId, RandomState>,
    slots: Vec<Option<NodeSlot>>,
    free_ids: Vec<NodeId>,
    /// Node ids sorted by node name.
    node_order: Vec<NodeId>,
    pods: HashMap<(String, String), PodInfo, RandomState>,
    jobs: BTreeMap<JobKey, JobSlot>,
    /// Requests of bound live pods.
    bound_requests: Resources,
    /// Requests of unbound live pods.
    pending_requests: Resources,
    priority_classes: PriorityClasses,
    /// Room held for planned trainers no watch event shows bound yet, by (job, position).
    reservations: BTreeMap<(JobKey, u32), Reservation>,
    /// Node traits and, per pod class, the nodes its static filters pass.
    eligibility: Eligibility,
    /// The pods the nodes can hold, summed (see [`ClusterState::pod_slots`]).
    pod_slots: i64,
    /// Live masters and pservers of jobs not bound to a node yet (see
    /// [`ClusterState::pending_support`]).
    pending_support: BTreeSet<(String, String)>,
    /// Which pods claiming each job are its (see [`PodClaim`]), from the job object.
    pod_rules: HashMap<JobKey, PodRule>,
    /// The names of the pods claiming each job, whether its object is known or not.
    claims: HashMap<JobKey, BTreeSet<String>>,
    /// Kueue's quota and admissions (see [`ClusterState::quota`]).
    quota: QuotaModel,
}

impl ClusterState {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    // ----- nodes -----

    fn node_id(&mut self, name: &str) -> NodeId {
        if let Some(id) = self.node_ids.get(name) {
            return *id;
        }
        let name: Arc<str> = Arc::from(name);
        let slot = NodeSlot {
            name: Arc::clone(&name),
            info: None,
            used: Resources::ZERO,
            pods: 0,
            terminating: Resources::ZERO,
            terminating_pods: 0,
            extended: Extended::new(),
            pod_limit: 0,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(slot);
                id
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as NodeId
            }
        };
        let slots = &self.slots;
        let pos = self
            .node_order
            .partition_point(|other| slot_name(slots, *other) < &*name);
        self.node_ids.insert(name, id);
        self.node_order.insert(pos, id);
        id
    }

    fn release_node_if_unused(&mut self, id: NodeId) {
        let unused = self.slots[id as usize]
            .as_ref()
            .is_some_and(|s| s.info.is_none() && s.pods == 0);
        if !unused {
            return;
        }
        // `node_order` is sorted by (unique) name: find the slot while its name is still there.
        let name = slot_name(&self.slots, id);
        let slots = &self.slots;
        let pos = self
            .node_order
            .partition_point(|other| slot_name(slots, *other) < name);
        if self.node_order.get(pos) == Some(&id) {
            self.node_order.remove(pos);
        }
        if let Some(slot) = self.slots[id as usize].take() {
            self.node_ids.remove(&slot.name);
            self.free_ids.push(id);
        }
    }

    /// The pods node `id` counts for in [`ClusterState::pod_slots`]: its pod limit, or the pods
    /// bound to it when they are more.
    fn node_pod_slots(&self, id: NodeId) -> i64 {
        let Some(slot) = self.node(id) else {
            return 0;
        };
        self.pod_limit(id).max(i64::from(slot.pods))
    }

    /// The most pods node `id` takes: its `pods` allocatable (node traits `max_pods`, at most
    /// [`MAX_NODE_PODS`]), [`DEFAULT_NODE_PODS`] when it states none; 0 while its Node is
    /// unknown.
    pub fn pod_limit(&self, id: NodeId) -> i64 {
        self.node(id).map_or(0, |slot| slot.pod_limit)
    }

    /// [`ClusterState::pod_limit`] read from the node's info and traits.
    fn read_pod_limit(&self, id: NodeId) -> i64 {
        match self.node(id).map(|slot| &slot.info) {
            Some(Some(_)) => self
                .eligibility
                .traits(id)
                .and_then(|t| t.max_pods)
                .map_or(DEFAULT_NODE_PODS, |max| max.clamp(0, MAX_NODE_PODS)),
            _ => 0,
        }
    }

    /// The pods node `id` takes besides those bound to it ([`NodeSlot::pods`]: terminating
    /// ones and reservations included); below zero when it holds more than its limit.
    pub fn free_pod_slots(&self, id: NodeId) -> i64 {
        self.node(id).map_or(0, NodeSlot::free_pods)
    }

    /// How much of other resource `name` node `id` has allocatable and its bound pods do not
    /// request (terminating ones still hold theirs); 0 for a node that does not have it.
    pub fn free_extended(&self, id: NodeId, name: &str) -> i64 {
        let allocatable = self
            .eligibility
            .traits(id)
            .and_then(|t| t.extended.get(name).copied())
            .unwrap_or(0);
        let used = self
            .node(id)
            .and_then(|slot| slot.extended.get(name).copied())
            .unwrap_or(0);
        allocatable.saturating_sub(used)
    }

    /// Runs `change` on node `name`, keeping its [`NodeSlot::pod_limit`] and
    /// [`ClusterState::pod_slots`] up to date. `change` must not bind or unbind pods
    /// (`account_pod` counts those itself).
    fn recounting(&mut self, name: &str, change: impl FnOnce(&mut Self)) {
        let slots = |s: &Self| s.node_id_of(name).map_or(0, |id| s.node_pod_slots(id));
        let before = slots(self);
        change(self);
        if let Some(id) = self.node_id_of(name) {
            let limit = self.read_pod_limit(id);
            if let Some(slot) = self.slots[id as usize].as_mut() {
                slot.pod_limit = limit;
            }
        }
        self.pod_slots += slots(self) - before;
    }

    /// Adds or updates a Node. A malformed node is removed and its error returned.
    pub fn apply_node(&mut self, node: &Node) -> Result<(), FieldError> {
        match read_node(node) {
            Ok((info, traits)) => {
                let name = traits.name.clone();
                self.recounting(&name, |s| {
                    s.put_node(&name, info);
                    if let Some(id) = s.node_id_of(&name) {
                        s.eligibility.set_node(id, Some(Arc::new(traits)));
                    }
                });
                Ok(())
            }
            Err(e) => {
                if let Some(name) = node.metadata.name.as_deref() {
                    self.delete_node(name);
                }
                Err(e)
            }
        }
    }

    /// Adds, updates (`Some`) or removes (`None`) a node by its parsed form.
    pub fn set_node(&mut self, name: &str, info: Option<NodeInfo>) {
        match info {
            Some(info) => self.recounting(name, |s| s.put_node(name, info)),
            None => self.delete_node(name),
        }
    }

    /// Adds or updates a node, without counting its pod slots.
    fn put_node(&mut self, name: &str, info: NodeInfo) {
        let id = self.node_id(name);
        if let Some(slot) = self.slots[id as usize].as_mut() {
            slot.info = Some(info);
        }
        // A node given without its object (simulator, tests): no labels, no taints, no pod limit.
        if self.eligibility.traits(id).is_none() {
            let traits = NodeTraits {
                name: name.to_string(),
                ready: true,
                ..NodeTraits::default()
            };
            self.eligibility.set_node(id, Some(Arc::new(traits)));
        }
    }

    /// Removes a Node. Pods bound to it keep their accounting until they are deleted.
    pub fn delete_node(&mut self, name: &str) {
        self.unreserve_node(name);
        self.recounting(name, |s| {
            if let Some(&id) = s.node_ids.get(name) {
                if let Some(slot) = s.slots[id as usize].as_mut() {
                    slot.info = None;
                }
                s.eligibility.set_node(id, None);
                s.release_node_if_unused(id);
            }
        });
    }

    /// Sets the filters' view of a known node (labels, taints...), as a Node object would.
    pub fn set_node_traits(&mut self, name: &str, traits: NodeTraits) {
        self.recounting(name, |s| {
            if let Some(id) = s.node_id_of(name) {
                s.eligibility.set_node(id, Some(Arc::new(traits)));
            }
        });
    }

    /// The filters' view of a node (labels, taints, pod limit, extended resources).
    pub fn node_traits(&self, id: NodeId) -> Option<&NodeTraits> {
        self.eligibility.traits(id).map(|t| &**t)
    }

    /// Which nodes each pod class may use.
    pub fn eligibility(&self) -> &Eligibility {
        &self.eligibility
    }

    /// Whether trainers of a job of class `class` may go to node `id` (static filters only);
    /// `None` takes every node.
    pub fn eligible(&self, class: Option<PodClassId>, id: NodeId) -> bool {
        class.is_none_or(|c| self.eligibility.eligible(c, id))
    }

    /// The id of a known node name.
    pub fn node_id_of(&self, name: &str) -> Option<NodeId> {
        self.node_ids.get(name).copied()
    }

    /// A node slot by id.
    pub fn node(&self, id: NodeId) -> Option<&NodeSlot> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    /// Node slots in name order, including names pods refer to whose Node is unknown.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &NodeSlot)> + '_ {
        self.node_order
            .iter()
            .filter_map(|id| self.node(*id).map(|slot| (*id, slot)))
    }

    /// Number of node ids in use (an upper bound for indexing per-node arrays).
    pub fn node_id_bound(&self) -> usize {
        self.slots.len()
    }

    // ----- pods -----

    /// Adds or updates a Pod. A malformed pod is removed and its error returned.
    pub fn apply_pod(&mut self, pod: &Pod) -> Result<(), FieldError> {
        let key = pod_key(&pod.metadata);
        match read_pod(pod) {
            Ok(info) => {
                self.set_pod(key, Some(info));
                Ok(())
            }
            Err(e) => {
                self.set_pod(key, None);
                Err(e)
            }
        }
    }

    /// Removes a Pod.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        self.set_pod((namespace.to_string(), name.to_string()), None);
    }

    /// Adds, updates (`Some`) or removes (`None`) a pod by its parsed form. A pod claiming a job
    /// ([`PodInfo::claim`]) is that job's as the job object's [`PodRule`] says, else nobody's.
    pub fn set_pod(&mut self, key: (String, String), info: Option<PodInfo>) {
        let info = info.map(|mut info| {
            if let Some(claim) = &info.claim {
                info.owner = self.claimed_owner(claim);
            }
            info
        });
        let old_claim = self.pods.get(&key).and_then(|p| p.claim.as_ref());
        let new_claim = info.as_ref().and_then(|p| p.claim.as_ref());
        if old_claim != new_claim {
            if let Some(old) = old_claim.map(|c| c.job.clone()) {
                self.unclaim(&old, &key.1);
            }
            if let Some(new) = new_claim {
                self.claims
                    .entry(new.job.clone())
                    .or_default()
                    .insert(key.1.clone());
            }
        }
        // A live trainer bound at a reserved position takes over the reservation's room.
        if !self.reservations.is_empty()
            && let Some((job, Some(index), _, _)) = info.as_ref().and_then(position_parts)
        {
            let job = job.clone();
            self.unreserve(&job, index);
        }
        // Most pod events (status) leave the position as it is: compare before copying anything.
        let old_parts = self.pods.get(&key).and_then(position_parts);
        let moved = if old_parts == info.as_ref().and_then(position_parts) {
            None
        } else {
            if let Some(p) = self.pods.get(&key).and_then(Position::of) {
                self.unposition(&key.1, p);
            }
            info.as_ref().and_then(Position::of)
        };
        let support = info.as_ref().is_some_and(is_pending_support);
        if support != self.pending_support.contains(&key) {
            if support {
                self.pending_support.insert(key.clone());
            } else {
                self.pending_support.remove(&key);
            }
        }
        let old = match info {
            Some(new) => {
                if self.pods.get(&key) == Some(&new) {
                    return;
                }
                // Accounting is a sum, so the new pod may count before the old one is taken off.
                self.account_pod(&new, 1);
                if let Some(p) = moved {
                    self.position(&key.1, p);
                }
                self.pods.insert(key, new)
            }
            None => self.pods.remove(&key),
        };
        if let Some(old) = old {
            self.account_pod(&old, -1);
        }
    }

    /// The owner a claim gives a pod under its job's rule.
    fn claimed_owner(&self, claim: &PodClaim) -> Option<(JobKey, Role)> {
        self.pod_rules
            .get(&claim.job)
            .map(|rule| (claim.job.clone(), rule.role(claim.group.as_deref())))
    }

    fn unclaim(&mut self, job: &JobKey, pod: &str) {
        if let Some(names) = self.claims.get_mut(job) {
            names.remove(pod);
            if names.is_empty() {
                self.claims.remove(job);
            }
        }
    }

    /// Sets (`Some`) or clears (`None`) which pods claiming `key` are its, and re-reads the
    /// owner of each pod claiming it.
    pub fn set_pod_rule(&mut self, key: &JobKey, rule: Option<PodRule>) {
        if self.pod_rules.get(key) == rule.as_ref() {
            return;
        }
        match rule {
            Some(rule) => self.pod_rules.insert(key.clone(), rule),
            None => self.pod_rules.remove(key),
        };
        let Some(names) = self.claims.get(key) else {
            return;
        };
        let keys: Vec<(String, String)> = names
            .iter()
            .map(|name| (key.namespace.to_string(), name.clone()))
            .collect();
        for pod in keys {
            let info = self.pods.get(&pod).cloned();
            self.set_pod(pod, info);
        }
    }

    /// Records a live bound trainer at its place in its job's controller order.
    fn position(&mut self, name: &str, p: Position) {
        let node = self.node_id(&p.node);
        let t = &mut self.job_slot_mut(&p.job).trainers;
        match p.index {
            Some(i) => {
                t.bound_by_index.insert((i, name.to_string()), node);
                t.index_end = t.index_end.max(i.saturating_add(1));
            }
            None => {
                t.bound_unindexed
                    .insert((p.created, name.to_string()), node);
            }
        }
    }

    /// Forgets a trainer's place in its job's controller order.
    fn unposition(&mut self, name: &str, p: Position) {
        let t = &mut self.job_slot_mut(&p.job).trainers;
        match p.index {
            Some(i) => {
                t.bound_by_index.remove(&(i, name.to_string()));
                t.index_end = t
                    .bound_by_index
                    .last()
                    .map_or(0, |((top, _), _)| top.saturating_add(1));
            }
            None => {
                t.bound_unindexed.remove(&(p.created, name.to_string()));
            }
        }
        self.drop_job_if_empty(&p.job);
    }

    /// A pod by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodInfo> {
        self.pods.get(&(namespace.to_string(), name.to_string()))
    }

    /// All pods, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = (&(String, String), &PodInfo)> + '_ {
        self.pods.iter()
    }

    /// Live master and pserver pods not bound to a node yet, by namespace and name.
    pub fn pending_support(&self) -> impl Iterator<Item = (&(String, String), &PodInfo)> + '_ {
        self.pending_support
            .iter()
            .filter_map(|key| self.pods.get(key).map(|pod| (key, pod)))
    }

    fn account_pod(&mut self, pod: &PodInfo, sign: i64) {
        if pod.phase == PodPhase::Finished {
            if let Some((key, Role::Trainer)) = &pod.owner {
                let slot = self.job_slot_mut(key);
                slot.trainers.finished = add_u32(slot.trainers.finished, sign);
                self.drop_job_if_empty(key);
            }
            return;
        }
        let delta = pod.requests.times(sign);
        let node_id = match &pod.node {
            Some(name) => {
                let id = self.node_id(name);
                let before = self.node_pod_slots(id);
                if let Some(slot) = self.slots[id as usize].as_mut() {
                    slot.used += delta;
                    slot.pods = add_u32(slot.pods, sign);
                    if pod.terminating {
                        slot.terminating += delta;
                        slot.terminating_pods = add_u32(slot.terminating_pods, sign);
                    }
                    for (name, amount) in &pod.extended {
                        let used = slot.extended.entry(name.clone()).or_insert(0);
                        *used = used.saturating_add(amount.saturating_mul(sign));
                        if *used == 0 {
                            slot.extended.remove(name);
                        }
                    }
                }
                self.pod_slots += self.node_pod_slots(id) - before;
                self.bound_requests += delta;
                Some(id)
            }
            None => {
                self.pending_requests += delta;
                None
            }
        };
        if let Some((key, Role::Trainer)) = &pod.owner {
            let t = &mut self.job_slot_mut(key).trainers;
            match (pod.terminating, node_id) {
                (true, _) => t.terminating = add_u32(t.terminating, sign),
                (false, Some(id)) => {
                    t.bound = add_u32(t.bound, sign);
                    let n = t.bound_by_node.entry(id).or_insert(0);
                    *n = add_u32(*n, sign);
                    if *n == 0 {
                        t.bound_by_node.remove(&id);
                    }
                }
                (false, None) if pod.phase == PodPhase::Gated => t.gated = add_u32(t.gated, sign),
                (false, None) => t.pending = add_u32(t.pending, sign),
            }
            self.drop_job_if_empty(key);
        }
        if sign < 0
            && let Some(id) = node_id
        {
            self.release_node_if_unused(id);
        }
    }

    // ----- jobs -----

    /// Adds or updates a job of any kind. A job with errors is kept out of planning and its
    /// errors returned; it stays listed under [`ClusterState::invalid_jobs`].
    pub fn apply_job(&mut self, job: &dyn JobObject) -> Result<(), Vec<FieldError>> {
        let parsed = job.read(&self.priority_classes);
        let key = job.key();
        let labels = job.metadata().labels.as_ref();
        self.set_job_queue(&key, labels.and_then(queue_label));
        let sized_by_pods = resize_of(key.kind).on_the_object();
        if sized_by_pods {
            // The workers' eligibility comes from the job's own worker template.
            let class = matches!(parsed, Ok(Reading::Planned(_)))
                .then(|| job.worker_constraints())
                .flatten();
            self.set_trainer_class(&key, class);
        }
        self.set_pod_rule(&key, job.pod_rule());
        let slot = self.jobs.entry(key).or_default();
        slot.sized_by_pods = sized_by_pods;
        let seen = slot.progress.take().and_then(Result::ok);
        match parsed {
            Ok(Reading::Planned(read)) => {
                slot.info = Some(read.info);
                slot.invalid = None;
                slot.left_alone = None;
                slot.warnings = read.warnings;
                slot.progress = job.progress().transpose().map(|r| {
                    r.map(|p| p.after(seen.as_ref()))
                        .inspect_err(|e| slot.warnings.push(malformed_warning(e)))
                });
                Ok(())
            }
            Ok(Reading::LeftAlone(why)) => {
                slot.info = None;
                slot.invalid = None;
                slot.left_alone = Some(why);
                slot.warnings = Vec::new();
                Ok(())
            }
            Err(problems) => {
                slot.info = None;
                slot.invalid = Some(problems.clone());
                slot.left_alone = None;
                slot.warnings = Vec::new();
                Err(problems)
            }
        }
    }

    /// Adds or updates a TrainingJob (see [`ClusterState::apply_job`]).
    pub fn apply_training_job(
        &mut self,
        job: &crate::api::TrainingJob,
    ) -> Result<(), Vec<FieldError>> {
        self.apply_job(job)
    }

    /// Sets a job by its parsed form (the simulator's way in); its priority class, when named,
    /// is resolved against the known classes.
    pub fn set_training_job(&mut self, key: JobKey, info: Option<JobInfo>) {
        let classes = &self.priority_classes;
        let slot = self.jobs.entry(key.clone()).or_default();
        slot.info = info.map(|mut info| {
            if let Some(class) = &info.priority_class {
                info.priority = class_value(class, classes).unwrap_or(0);
            }
            info
        });
        slot.invalid = None;
        slot.warnings = Vec::new();
        self.drop_job_if_empty(&key);
    }

    /// Sets a planned job's max-instance (as if its spec said `max`); false when the state has
    /// no planned job `key`.
    pub fn set_job_max(&mut self, key: &JobKey, max: i32) -> bool {
        match self.jobs.get_mut(key).and_then(|s| s.info.as_mut()) {
            Some(info) => {
                info.max = max;
                true
            }
            None => false,
        }
    }

    /// Records a job object that could not be read at all (it does not deserialize).
    pub fn set_invalid_job(&mut self, key: JobKey, problems: Vec<FieldError>) {
        self.set_pod_rule(&key, None);
        let slot = self.jobs.entry(key).or_default();
        slot.info = None;
        slot.invalid = Some(problems);
        slot.left_alone = None;
        slot.warnings = Vec::new();
    }

    /// Removes a job.
    pub fn delete_job(&mut self, key: &JobKey) {
        self.unreserve_from(key, 0);
        self.quota.remove_job(key);
        if resize_of(key.kind).on_the_object() {
            self.set_trainer_class(key, None);
        }
        self.set_pod_rule(key, None);
        if let Some(slot) = self.jobs.get_mut(key) {
            slot.info = None;
            slot.invalid = None;
            slot.left_alone = None;
            slot.warnings = Vec::new();
        }
        self.drop_job_if_empty(key);
    }

    /// Removes a TrainingJob.
    pub fn delete_training_job(&mut self, namespace: &str, name: &str) {
        self.delete_job(&JobKey::new(namespace, name));
    }

    // ----- priority classes -----

    /// Adds or updates a PriorityClass; jobs naming it take its value.
    pub fn apply_priority_class(&mut self, class: &PriorityClass) {
        if let Some(name) = class.metadata.name.as_deref() {
            self.set_priority_class(name, Some(class.value.unwrap_or(0)));
        }
    }

    /// Removes a PriorityClass; jobs naming it order as 0 (with a warning), or as a built-in
    /// class of its name (see [`crate::api::priority::BUILT_IN_CLASSES`]).
    pub fn delete_priority_class(&mut self, name: &str) {
        self.set_priority_class(name, None);
    }

    /// Sets (`Some(value)`) or removes (`None`) a PriorityClass and re-resolves the jobs naming it.
    pub fn set_priority_class(&mut self, name: &str, value: Option<i32>) {
        match value {
            Some(v) => {
                if self.priority_classes.get(name) == Some(&v) {
                    return;
                }
                self.priority_classes.insert(name.to_string(), v);
            }
            None => {
                if self.priority_classes.remove(name).is_none() {
                    return;
                }
            }
        }
        let value = class_value(name, &self.priority_classes).unwrap_or(0);
        for slot in self.jobs.values_mut() {
            if let Some(info) = slot.info.as_mut()
                && info.priority_class.as_deref() == Some(name)
            {
                info.priority = value;
            }
        }
    }

    /// The PriorityClasses known, by name.
    pub fn priority_classes(&self) -> &PriorityClasses {
        &self.priority_classes
    }

    /// Every warning of a job: its spec's, a declared size above the cap
    /// ([`ClusterState::cap_warnings`]), and a priority naming no known PriorityClass.
    pub fn warnings(&self, key: &JobKey) -> Vec<FieldError> {
        let Some(slot) = self.jobs.get(key) else {
            return Vec::new();
        };
        let mut warnings = slot.warnings.clone();
        warnings.extend(self.cap_warnings(key));
        // The class name re-resolved against today's classes gives today's warning, if any.
        if let Some(text) = slot
            .info
            .as_ref()
            .and_then(|i| i.priority_class.as_deref())
            .and_then(|class| resolve_priority(class, &self.priority_classes).warning)
        {
            warnings.push(FieldError::new(
                key.object_ref(),
                priority_field(key.kind),
                text,
            ));
        }
        warnings
    }

    /// Adds or updates a batch/v1 Job; only trainer Jobs are kept.
    pub fn apply_batch_job(&mut self, job: &Job) {
        if let Some((key, parallelism)) = read_trainer_job(job) {
            self.set_trainer_class(&key, Some(trainer_constraints(job)));
            self.set_trainer_job_suspended(&key, suspended_by_others(job));
            let name = job.metadata.name.as_deref().unwrap_or("");
            let label = job.metadata.labels.as_ref().and_then(queue_label);
            self.set_trainer_job_queue(&key, Some((name, label)));
            self.set_trainer_job(key, Some(parallelism));
        }
    }

    /// Records whether the trainer Job of `key` is suspended by someone else than trainscale
    /// (see [`JobSlot::trainer_job_suspended`]).
    pub fn set_trainer_job_suspended(&mut self, key: &JobKey, suspended: bool) {
        if !suspended && !self.jobs.contains_key(key) {
            return;
        }
        self.job_slot_mut(key).trainer_job_suspended = suspended;
        // A suspended job holds no room: what was reserved for its positions goes back.
        if suspended {
            self.unreserve_from(key, 0);
        }
        self.drop_job_if_empty(key);
    }

    /// Sets (`Some`) or clears (`None`) the eligibility class of a job's trainers.
    pub fn set_trainer_class(&mut self, key: &JobKey, constraints: Option<Arc<PodConstraints>>) {
        let new = constraints.map(|c| self.eligibility.acquire(c));
        let slot = self.job_slot_mut(key);
        let old = std::mem::replace(&mut slot.class, new);
        if let Some(old) = old {
            self.eligibility.release(old);
        }
        self.drop_job_if_empty(key);
    }

    /// Removes a batch/v1 Job.
    pub fn delete_batch_job(&mut self, job: &Job) {
        if let Some((key, _)) = read_trainer_job(job) {
            self.set_trainer_class(&key, None);
            self.set_trainer_job_suspended(&key, false);
            self.set_trainer_job_queue(&key, None);
            self.set_trainer_job(key, None);
        }
    }

    /// Sets (`Some(parallelism)`) or removes (`None`) the trainer Job of `key`.
    pub fn set_trainer_job(&mut self, key: JobKey, job: Option<Option<i32>>) {
        let slot = self.jobs.entry(key.clone()).or_default();
        let before = slot.trainer_job_parallelism;
        slot.has_trainer_job = job.is_some();
        slot.trainer_job_parallelism = job.flatten();
        // Positions at or above a lowered size will not be created: their room goes back. (A
        // raise or an unchanged size keeps them: the raise may be the one they were made for.)
        let lowered = match (job, before) {
            (None, _) => Some(0),
            (Some(Some(now)), Some(before)) if now < before => Some(now.max(0) as u32),
            _ => None,
        };
        if let Some(keep) = lowered {
            self.unreserve_from(&key, keep);
        }
        self.drop_job_if_empty(&key);
    }

    /// The slot of `key`, created empty when missing (without cloning the key when present).
    fn job_slot_mut(&mut self, key: &JobKey) -> &mut JobSlot {
        if !self.jobs.contains_key(key) {
            return self.jobs.entry(key.clone()).or_default();
        }
        self.jobs
            .get_mut(key)
            .expect("the key was checked to be present")
    }

    fn drop_job_if_empty(&mut self, key: &JobKey) {
        if self.jobs.get(key).is_some_and(JobSlot::is_empty) {
            self.jobs.remove(key);
        }
    }

    /// A job slot by key.
    pub fn job(&self, key: &JobKey) -> Option<&JobSlot> {
        self.jobs.get(key)
    }

    /// Every job key seen, in namespace/name order, with its slot.
    pub fn job_slots(&self) -> impl ExactSizeIterator<Item = (&JobKey, &JobSlot)> + '_ {
        self.jobs.iter()
    }

    /// Jobs without errors, in namespace/name/kind order; not those left alone because their
    /// trainer Job is suspended by someone else ([`JobSlot::held_by_suspension`]) or on Kueue's
    /// account ([`QuotaModel::held`]).
    pub fn jobs(&self) -> impl Iterator<Item = (&JobKey, &JobSlot, &JobInfo)> + '_ {
        self.jobs
            .iter()
            .filter(|(k, s)| !s.held_by_suspension() && self.quota.held(k).is_none())
            .filter_map(|(k, s)| s.info.as_ref().map(|i| (k, s, i)))
    }

    /// Jobs skipped for errors, with their errors.
    pub fn invalid_jobs(&self) -> impl Iterator<Item = (&JobKey, &[FieldError])> + '_ {
        self.jobs
            .iter()
            .filter_map(|(k, s)| s.invalid.as_deref().map(|p| (k, p)))
    }

    /// Jobs that are not planned though valid, and why: of the sized-only kinds, those whose
    /// trainer Job is suspended by someone else ([`SUSPENDED`]), and those Kueue has not
    /// admitted or is moving ([`QuotaModel::held`]).
    pub fn left_alone_jobs(&self) -> impl Iterator<Item = (&JobKey, &LeftAlone)> + '_ {
        self.jobs.iter().filter_map(|(k, s)| {
            let why = match &s.left_alone {
                Some(why) => Some(why),
                None if s.held_by_suspension() => Some(&*SUSPENDED),
                None => s.info.as_ref().and_then(|_| self.quota.held(k)),
            };
            why.map(|why| (k, why))
        })
    }

    // ----- totals -----

    /// Allocatable of schedulable nodes.
    pub fn total_capacity(&self) -> Resources {
        self.nodes()
            .fold(Resources::ZERO, |acc, (_, n)| acc + n.capacity())
    }

    /// Requests of pods bound to nodes (not Succeeded or Failed).
    pub fn bound_requests(&self) -> Resources {
        self.bound_requests
    }

    /// Requests of live pods not yet bound to a node.
    pub fn pending_requests(&self) -> Resources {
        self.pending_requests
    }

    /// Number of pods held.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    // ----- size cap -----

    /// The pods the cluster's nodes can hold, summed over every node, cordoned and NotReady ones
    /// included: a node counts its `pods` allocatable (else capacity; [`DEFAULT_NODE_PODS`] when
    /// it states none, at most [`MAX_NODE_PODS`]), or the pods bound to it when they are more.
    pub fn pod_slots(&self) -> i64 {
        self.pod_slots
    }

    /// The largest size any job can be planned at: [`ClusterState::pod_slots`], at least
    /// [`DEFAULT_NODE_PODS`] (an empty or scaled-down cluster still holds a gang one node could:
    /// its pending pods stay for a cluster autoscaler to add nodes for) and at most `i32::MAX`.
    /// No job can have more trainers at once, so a declared size above it is planned as this,
    /// with a warning ([`ClusterState::cap_warnings`]), and nothing the planner builds per
    /// trainer or position grows past it.
    pub fn size_cap(&self) -> i32 {
        i32::try_from(self.pod_slots.max(DEFAULT_NODE_PODS)).unwrap_or(i32::MAX)
    }

    /// A job's min, max and current size, each capped at [`ClusterState::size_cap`].
    pub fn sizes(&self, slot: &JobSlot, info: &JobInfo) -> Sizes {
        let cap = self.size_cap();
        Sizes {
            min: info.min.min(cap),
            max: info.max.min(cap),
            current: slot.current().min(cap),
        }
    }

    /// A warning for each declared size of planned job `key` above [`ClusterState::size_cap`],
    /// naming the field it was read from.
    pub fn cap_warnings(&self, key: &JobKey) -> Vec<FieldError> {
        let Some((slot, info)) = self
            .jobs
            .get(key)
            .and_then(|s| s.info.as_ref().map(|i| (s, i)))
        else {
            return Vec::new();
        };
        let cap = self.size_cap();
        let current = slot.current();
        if info.min <= cap && info.max <= cap && current <= cap {
            return Vec::new();
        }
        let [min_field, max_field, size_field] = size_fields(key.kind);
        let (size_field, what) = if slot.trainer_job_parallelism.is_some() {
            ("spec.parallelism of its trainer Job", String::new())
        } else if info.stored_parallelism.is_some() {
            (size_field, String::new())
        } else {
            (size_field, " (unset: its live worker pods)".to_string())
        };
        let planned = format!(
            "is more than the {cap} pods the cluster's nodes can hold (their status.allocatable.pods \
             summed); planned as {cap}"
        );
        [
            (min_field, info.min, String::new()),
            (max_field, info.max, String::new()),
            (size_field, current, what),
        ]
        .into_iter()
        .filter(|(_, value, _)| *value > cap)
        .map(|(field, value, what)| {
            FieldError::new(key.object_ref(), field, format!("{value}{what} {planned}"))
        })
        .collect()
    }
}

/// Whether a pod is a job's master or pserver, live and not bound to a node yet.
fn is_pending_support(pod: &PodInfo) -> bool {
    matches!(&pod.owner, Some((_, Role::Master | Role::Pserver)))
        && pod.node.is_none()
        && !pod.terminating
        && pod.phase != PodPhase::Finished
}

fn slot_name(slots: &[Option<NodeSlot>], id: NodeId) -> &str {
    slots[id as usize].as_ref().map(|s| &*s.name).unwrap_or("")
}

fn add_u32(value: u32, sign: i64) -> u32 {
    if sign >= 0 {
        value.saturating_add(1)
    } else {
        value.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{job_info, trainer_pod};

    /// [`ClusterState::pod_slots`] counted from scratch.
    fn recount(state: &ClusterState) -> i64 {
        state.nodes().map(|(id, _)| state.node_pod_slots(id)).sum()
    }

    fn node(name: &str, pods: Option<&str>) -> Node {
        let mut allocatable = serde_json::json!({"cpu": "4", "memory": "8Gi"});
        if let Some(pods) = pods {
            allocatable["pods"] = pods.into();
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "status": {"allocatable": allocatable}
        }))
        .unwrap()
    }

    /// A change made to a state, by name.
    type Step<'a> = Box<dyn Fn(&mut ClusterState) + 'a>;

    #[test]
    fn pod_slots_follow_nodes_and_bound_pods() {
        let mut state = ClusterState::new();
        let key = JobKey::new("ns", "j");
        let trainer = Resources::new(10, 1, 0);
        let bind = |state: &mut ClusterState, pod: usize, on: Option<&str>| {
            let info = trainer_pod(&key, on.map(str::to_string), trainer, None);
            state.set_pod(("ns".into(), format!("p{pod}")), Some(info));
        };
        let mut steps: Vec<(&str, Step<'_>)> = vec![
            (
                "a states 3",
                Box::new(|s| s.apply_node(&node("a", Some("3"))).unwrap()),
            ),
            (
                "b states none",
                Box::new(|s| s.apply_node(&node("b", None)).unwrap()),
            ),
            (
                "c states 2^31",
                Box::new(|s| s.apply_node(&node("c", Some("2147483648"))).unwrap()),
            ),
            (
                "d without its object",
                Box::new(|s| {
                    s.set_node(
                        "d",
                        Some(NodeInfo {
                            allocatable: trainer,
                            schedulable: true,
                        }),
                    )
                }),
            ),
            (
                "a lowered to 1",
                Box::new(|s| s.apply_node(&node("a", Some("1"))).unwrap()),
            ),
            ("c deleted", Box::new(|s| s.delete_node("c"))),
        ];
        // Five pods bound to a (limit 1) and two to a node no Node object names.
        for p in 0..5 {
            steps.push(("bind to a", Box::new(move |s| bind(s, p, Some("a")))));
        }
        for p in 5..7 {
            steps.push((
                "bind to ghost",
                Box::new(move |s| bind(s, p, Some("ghost"))),
            ));
        }
        steps.push((
            "a's pod limit 0",
            Box::new(|s| {
                s.set_node_traits(
                    "a",
                    NodeTraits {
                        name: "a".into(),
                        max_pods: Some(0),
                        ..NodeTraits::default()
                    },
                )
            }),
        ));
        for p in [0, 1, 5, 6] {
            steps.push((
                "unbind",
                Box::new(move |s| s.delete_pod("ns", &format!("p{p}"))),
            ));
        }
        steps.push(("a deleted", Box::new(|s| s.delete_node("a"))));
        steps.push((
            "reserved on b",
            Box::new(|s| {
                s.reserve(
                    &JobKey::new("ns", "j"),
                    9,
                    "b",
                    Resources::new(10, 1, 0),
                    100,
                    false,
                )
            }),
        ));
        steps.push(("b deleted", Box::new(|s| s.delete_node("b"))));
        for (what, step) in &steps {
            step(&mut state);
            assert_eq!(state.pod_slots(), recount(&state), "after {what}");
            for (id, slot) in state.nodes() {
                assert_eq!(slot.pod_limit, state.read_pod_limit(id), "after {what}");
            }
        }
        // d (110 by default) and the 3 pods still bound to the deleted a.
        assert_eq!(state.pod_slots(), DEFAULT_NODE_PODS + 3);
        state.apply_node(&node("c", Some("2147483648"))).unwrap();
        assert_eq!(state.pod_slots(), DEFAULT_NODE_PODS + 3 + MAX_NODE_PODS);
    }

    #[test]
    fn sizes_and_positions_stop_at_the_cap() {
        let mut state = ClusterState::new();
        // Never below one default node's pods.
        assert_eq!(state.size_cap(), 110);
        state.apply_node(&node("a", Some("150"))).unwrap();
        state.apply_node(&node("b", Some("50"))).unwrap();
        let key = JobKey::new("ns", "j");
        let trainer = Resources::new(10, 1, 0);
        state.set_training_job(key.clone(), Some(job_info(2, 1000, trainer, 0)));
        state.set_trainer_job(key.clone(), Some(Some(i32::MAX)));
        state.set_pod(
            ("ns".into(), "p".into()),
            Some(trainer_pod(&key, Some("a".into()), trainer, Some(1))),
        );
        let slot = state.job(&key).unwrap();
        let info = slot.info.as_ref().unwrap();
        assert_eq!(state.size_cap(), 200);
        assert_eq!(
            state.sizes(slot, info),
            Sizes {
                min: 2,
                max: 200,
                current: 200
            }
        );
        let positions = slot.controller_positions(state.size_cap());
        assert_eq!(positions.len(), 200);
        assert_eq!(positions[..3], [None, state.node_id_of("a"), None]);
        let fields: Vec<String> = state
            .cap_warnings(&key)
            .iter()
            .map(|w| w.field.clone())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.trainer.max-instance",
                "spec.parallelism of its trainer Job"
            ]
        );
    }

    #[test]
    fn index_end_follows_the_highest_bound_index() {
        let mut state = ClusterState::new();
        state.apply_node(&node("a", Some("110"))).unwrap();
        let key = JobKey::new("ns", "j");
        let trainer = Resources::new(10, 1, 0);
        state.set_training_job(key.clone(), Some(job_info(1, 8, trainer, 0)));
        let end = |state: &ClusterState| state.job(&key).map(|s| s.trainers.index_end);
        let bound = |index| Some(trainer_pod(&key, Some("a".into()), trainer, Some(index)));
        state.set_pod(("ns".into(), "p0".into()), bound(0));
        state.set_pod(("ns".into(), "p3".into()), bound(3));
        // A second pod at index 3 (the controller's replacement) and a pending one at 5.
        state.set_pod(("ns".into(), "q3".into()), bound(3));
        state.set_pod(
            ("ns".into(), "p5".into()),
            Some(trainer_pod(&key, None, trainer, Some(5))),
        );
        assert_eq!(end(&state), Some(4));
        state.set_pod(("ns".into(), "p3".into()), None);
        assert_eq!(end(&state), Some(4));
        state.set_pod(("ns".into(), "q3".into()), None);
        assert_eq!(end(&state), Some(1));
        state.set_pod(("ns".into(), "p0".into()), None);
        assert_eq!(end(&state), Some(0));
    }

    /// A trainer Job of TrainingJob `ns/j` at `parallelism`, suspended or not, with trainscale's
    /// zero-trainers mark or not.
    fn trainer_job(parallelism: i32, suspend: Option<bool>, ours: bool) -> Job {
        let annotations = if ours {
            serde_json::json!({crate::api::trainer_job::ANNOTATION_ZERO_TRAINERS: "true"})
        } else {
            serde_json::json!({})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j-trainer", "namespace": "ns", "annotations": annotations,
                "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1",
                    "kind": "TrainingJob", "name": "j", "uid": "u", "controller": true}]},
            "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": suspend,
                     "completionMode": "Indexed", "template": {"spec": {"containers": []}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_trainer_job_suspended_by_someone_else_is_left_alone_until_admitted() {
        let mut state = ClusterState::new();
        state.apply_node(&node("a", Some("110"))).unwrap();
        let key = JobKey::new("ns", "j");
        let trainer = Resources::new(1000, 1, 0);
        state.set_training_job(key.clone(), Some(job_info(2, 4, trainer, 0)));
        state.apply_batch_job(&trainer_job(2, Some(false), false));
        state.reserve(&key, 0, "a", trainer, i64::MAX, false);
        // Kueue holds it suspended: no room (the reservation goes back), no resize, a reason.
        state.apply_batch_job(&trainer_job(2, Some(true), false));
        assert_eq!(state.reservations().count(), 0);
        assert_eq!(
            state.jobs().count(),
            0,
            "a job Kueue has not admitted is planned"
        );
        let plan = crate::planner::plan(&state, &crate::planner::PlannerConfig::default());
        assert!(plan.job(&key).is_none());
        let alone: Vec<_> = state.left_alone_jobs().collect();
        assert_eq!(alone.len(), 1);
        assert_eq!(alone[0].0, &key);
        assert_eq!(alone[0].1.field, "spec.suspend of its trainer Job");
        assert_eq!(
            alone[0].1.why,
            "its trainer Job is suspended (not admitted by Kueue yet)"
        );
        // Admitted: planned again.
        state.apply_batch_job(&trainer_job(2, Some(false), false));
        assert_eq!(state.jobs().count(), 1);
        assert_eq!(state.left_alone_jobs().count(), 0);
        // trainscale's own zero-trainer suspension stays planned (and resizable).
        state.apply_batch_job(&trainer_job(2, Some(true), true));
        assert_eq!(state.jobs().count(), 1);
        assert_eq!(state.job(&key).map(JobSlot::current), Some(0));
        assert_eq!(state.left_alone_jobs().count(), 0);
        // Suspended by someone else again, then the trainer Job deleted: nothing holds it.
        state.apply_batch_job(&trainer_job(2, Some(true), false));
        assert_eq!(state.jobs().count(), 0);
        state.delete_batch_job(&trainer_job(2, Some(true), false));
        assert_eq!(state.jobs().count(), 1);
        assert_eq!(state.left_alone_jobs().count(), 0);
    }

    #[test]
    fn other_resources_terminating_room_and_pending_support_follow_pod_events() {
        let mut state = ClusterState::new();
        let a: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10", "rdma/hca": "4"}}
        }))
        .unwrap();
        state.apply_node(&a).unwrap();
        let id = state.node_id_of("a").unwrap();
        let pod = |name: &str, labels: serde_json::Value, node: Option<&str>, deleted: bool| {
            let mut pod = serde_json::json!({
                "metadata": {"namespace": "ns", "name": name, "labels": labels},
                "spec": {"containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "1", "rdma/hca": "1"}}}]},
            });
            if let Some(node) = node {
                pod["spec"]["nodeName"] = node.into();
            }
            if deleted {
                pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            serde_json::from_value::<Pod>(pod).unwrap()
        };
        let none = serde_json::json!({});
        state
            .apply_pod(&pod("p", none.clone(), Some("a"), false))
            .unwrap();
        assert_eq!(state.free_extended(id, "rdma/hca"), 3);
        assert_eq!(state.free_pod_slots(id), 9);
        // Being deleted, it still holds its rdma; its requests are counted as coming free.
        state
            .apply_pod(&pod("p", none.clone(), Some("a"), true))
            .unwrap();
        assert_eq!(state.free_extended(id, "rdma/hca"), 3);
        assert_eq!(
            state.node(id).unwrap().terminating,
            Resources::new(1000, 0, 0)
        );
        state.delete_pod("ns", "p");
        let slot = state.node(id).unwrap();
        assert_eq!(
            (slot.terminating, slot.extended.len()),
            (Resources::ZERO, 0)
        );
        assert_eq!(state.free_extended(id, "rdma/hca"), 4);
        // A pending pserver is listed until it is bound or deleted.
        let pserver = serde_json::json!({"paddle-job-pserver": "j"});
        state
            .apply_pod(&pod("ps", pserver.clone(), None, false))
            .unwrap();
        let listed: Vec<&str> = state.pending_support().map(|(k, _)| k.1.as_str()).collect();
        assert_eq!(listed, ["ps"]);
        state
            .apply_pod(&pod("ps", pserver.clone(), Some("a"), false))
            .unwrap();
        assert_eq!(state.pending_support().count(), 0);
        assert_eq!(state.free_extended(id, "rdma/hca"), 3);
        state.delete_pod("ns", "ps");
        // A reservation holds what its job's trainer class requests.
        let key = JobKey::new("ns", "j");
        let class = PodConstraints {
            extended: Extended::from([("rdma/hca".to_string(), 2)]),
            ..PodConstraints::default()
        };
        state.set_trainer_class(&key, Some(Arc::new(class)));
        state.reserve(&key, 0, "a", Resources::new(1000, 0, 0), 100, false);
        assert_eq!(
            (
                state.free_extended(id, "rdma/hca"),
                state.free_pod_slots(id)
            ),
            (2, 9)
        );
        state.unreserve(&key, 0);
        assert_eq!(state.free_extended(id, "rdma/hca"), 4);
        // A bad quantity of another resource is the pod's error, naming the field.
        let mut bad = pod("bad", none, Some("a"), false);
        if let Some(requests) = bad
            .spec
            .as_mut()
            .and_then(|s| s.containers[0].resources.as_mut())
            .and_then(|r| r.requests.as_mut())
        {
            let lots = k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into());
            requests.insert("rdma/hca".into(), lots);
        }
        let e = state.apply_pod(&bad).unwrap_err();
        assert_eq!(e.field, "spec.containers[0].resources.requests.rdma/hca");
    }
}
