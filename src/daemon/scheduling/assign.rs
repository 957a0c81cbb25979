//! From a plan to bindings: which pending pod goes to which node, which planned positions hold
//! room for pods not created yet, and which pods cannot be placed and why. Pure: the state, the
//! unbound pods and the plan in; decisions out.
//!
//! A job's pending trainers take its planned placements in position order (identical trainers
//! are interchangeable); a position whose pod does not exist yet is reserved on its node. A job
//! below its min-instance is a gang: its pods are bound only when every position up to min is
//! bound, reserved-and-present or placed-and-present; otherwise its placements are only
//! reserved. Every bind is checked against the node as kube-scheduler would (static filters with
//! the pod's own spec, room, pod count, host ports, extended resources); a planned node that
//! fails is replaced by the best node that passes, or the pod is reported unschedulable.

use std::collections::{BTreeMap, HashMap};

use super::pods::{PodKey, SchedulingPods, UnboundPod};
use crate::api::{JobKey, Resources};
use crate::cluster::filters::{HostPort, Unfit, check_static, unavailable_message};
use crate::cluster::{ClusterState, NodeId, NodeSlot, Role};
use crate::planner::ScalePlan;

/// A pod to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub pod: PodKey,
    pub uid: Option<String>,
    pub node: String,
    /// The trainer position it fills, held as a reservation until its update arrives.
    pub position: Option<(JobKey, u32)>,
    pub requests: Resources,
    /// When the watch first showed the pod unbound.
    pub seen: std::time::Instant,
}

/// Room to hold for a planned trainer position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserve {
    pub job: JobKey,
    pub index: u32,
    pub node: String,
    pub requests: Resources,
    /// Held for a pod this pass binds (not for one still to be created).
    pub assumed: bool,
}

/// A pod that cannot be bound, and kube-scheduler's words for why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: PodKey,
    pub uid: Option<String>,
    pub message: String,
    /// The pod's `PodScheduled` condition already says this: nothing to write.
    pub unchanged: bool,
}

/// What a pass's scheduler role does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignments {
    pub binds: Vec<Bind>,
    pub reserves: Vec<Reserve>,
    pub unschedulable: Vec<Unschedulable>,
}

/// Decides the bindings of one pass for the pods naming scheduler `name`.
pub fn assign(
    state: &ClusterState,
    pods: &SchedulingPods,
    plan: &ScalePlan,
    name: &str,
) -> Assignments {
    let mut out = Assignments::default();
    let mut trainers: BTreeMap<&JobKey, BTreeMap<u32, (&PodKey, &UnboundPod)>> = BTreeMap::new();
    let mut others: Vec<(&PodKey, &UnboundPod)> = Vec::new();
    for (key, pod) in pods.unbound_for(name) {
        let info = state.pod(&key.0, &key.1);
        match info.and_then(|i| i.owner.as_ref().zip(i.index)) {
            Some(((job, Role::Trainer), index))
                if plan.job(job).is_some() && schedules_job(state, job, name) =>
            {
                trainers.entry(job).or_default().insert(index, (key, pod));
            }
            _ => others.push((key, pod)),
        }
    }
    let mut room = Room::new(state, pods, name);
    for job in &plan.jobs {
        if !schedules_job(state, &job.key, name) {
            continue;
        }
        let waiting = trainers.remove(&*job.key).unwrap_or_default();
        let placements: Vec<NodeId> = job
            .placements
            .iter()
            .flat_map(|p| std::iter::repeat_n(p.node, p.trainers as usize))
            .collect();
        if waiting.is_empty() && placements.is_empty() {
            continue;
        }
        assign_job(
            state,
            &mut room,
            job.key.as_ref(),
            job.min,
            job.target,
            job.trainer,
            &placements,
            waiting,
            &mut out,
        );
    }
    for (key, pod) in others {
        let requests = state
            .pod(&key.0, &key.1)
            .map_or(Resources::ZERO, |p| p.requests);
        match place_one(&mut room, pod, requests) {
            Ok(node) => out.binds.push(Bind {
                pod: key.clone(),
                uid: pod.uid.clone(),
                node: node_name(state, node),
                position: None,
                requests,
                seen: pod.seen,
            }),
            Err(message) => out.unschedulable.push(unschedulable(key, pod, message)),
        }
    }
    out
}

/// Whether scheduler `name` binds a job's trainers as a job: a kind trainscale's operator
/// creates, whose trainer Job's pod template names it and uses nothing trainscale does not
/// evaluate. Other jobs are sized only: a PyTorch kind's workers carry no completion index to
/// hold a position by, so no room is reserved for them, and their pods that name `name` are
/// placed one by one like any other pod.
fn schedules_job(state: &ClusterState, job: &JobKey, name: &str) -> bool {
    job.kind.created_by_trainscale()
        && state
            .job(job)
            .and_then(|slot| slot.class)
            .and_then(|class| state.eligibility().constraints(class))
            .is_some_and(|c| c.scheduler_name.as_deref() == Some(name) && c.unsupported.is_empty())
}

/// One job's trainers: bind the present, reserve the missing, report the unplaced.
#[allow(clippy::too_many_arguments)]
fn assign_job(
    state: &ClusterState,
    room: &mut Room,
    job: &JobKey,
    min: i32,
    target: i32,
    trainer: Resources,
    placements: &[NodeId],
    waiting: BTreeMap<u32, (&PodKey, &UnboundPod)>,
    out: &mut Assignments,
) {
    let Some(slot) = state.job(job) else {
        return;
    };
    let positions = slot.controller_positions(state.size_cap());
    let target = target.max(0) as u32;
    let mut planned = placements.iter();
    let mut binds = Vec::new();
    let mut reserves = Vec::new();
    let mut unplaced = Vec::new();
    let mut present = 0u32;
    for index in 0..target {
        let at = positions.get(index as usize).copied().flatten();
        let reservation = state.reservation(job, index);
        // A pod sent to be bound in an earlier pass whose update has not arrived: wait for it.
        if reservation.is_some_and(|r| r.assumed) {
            present += 1;
            continue;
        }
        let reserved = reservation.and_then(|r| state.node_id_of(r.node()));
        let pod = waiting.get(&index);
        match (at, reserved, pod) {
            // A reserved position whose pod now exists: bind it where the room is held.
            (Some(_), Some(node), Some((key, pod))) => {
                let requests = pod_requests(state, key, trainer);
                match room.check_held(node, pod) {
                    Ok(()) if room.held_room_is_free(node) => {
                        binds.push(bind(state, key, pod, node, job, index, requests));
                    }
                    // The room held for it is still taken (a trainer shrunk away not gone yet,
                    // a pod placed there meanwhile): the kubelet would turn the pod away, so it
                    // waits, its room still held, and is bound once the node has it free.
                    Ok(()) => {}
                    Err(_) => unplaced.push((*key, *pod)),
                }
                present += 1;
            }
            // Bound (not only reserved, for a pod still to be created).
            (Some(_), _, _) => present += u32::from(reservation.is_none()),
            (None, _, pod) => {
                let Some(&node) = planned.next() else {
                    if let Some((key, pod)) = pod {
                        unplaced.push((*key, *pod));
                    }
                    continue;
                };
                match pod {
                    Some((key, pod)) => {
                        let requests = pod_requests(state, key, trainer);
                        match room.take_planned(node, pod, requests) {
                            Ok(node) => {
                                binds.push(bind(state, key, pod, node, job, index, requests));
                                present += 1;
                            }
                            Err(_) => unplaced.push((*key, *pod)),
                        }
                    }
                    None => {
                        let Some(name) = state.node(node).map(|n| n.name.to_string()) else {
                            continue;
                        };
                        room.take(node, trainer);
                        reserves.push(Reserve {
                            job: job.clone(),
                            index,
                            node: name,
                            requests: trainer,
                            assumed: false,
                        });
                    }
                }
            }
        }
    }
    // A gang below min: all of it present and placed, or none of it bound yet.
    let gang_waits = present < min.max(0) as u32;
    if gang_waits {
        reserves.extend(binds.iter().filter_map(|b| b.reserve(false)));
    } else {
        out.reserves
            .extend(binds.iter().filter_map(|b| b.reserve(true)));
        out.binds.extend(binds);
    }
    out.reserves.extend(reserves);
    // Identical trainers are refused for the same reasons: one diagnosis serves them all.
    let mut diagnosed: Vec<(&UnboundPod, Resources, String)> = Vec::new();
    for (key, pod) in unplaced {
        let requests = pod_requests(state, key, trainer);
        let known = diagnosed
            .iter()
            .find(|(other, r, _)| *r == requests && same_constraints(other, pod));
        let message = match known {
            Some((_, _, message)) => message.clone(),
            None => {
                let message = room.diagnose(pod, requests);
                diagnosed.push((pod, requests, message.clone()));
                message
            }
        };
        out.unschedulable.push(unschedulable(key, pod, message));
    }
}

/// Whether two pods' specs read to the same constraints.
fn same_constraints(a: &UnboundPod, b: &UnboundPod) -> bool {
    matches!((&a.constraints, &b.constraints), (Ok(x), Ok(y)) if x == y)
}

fn pod_requests(state: &ClusterState, key: &PodKey, trainer: Resources) -> Resources {
    state.pod(&key.0, &key.1).map_or(trainer, |p| p.requests)
}

fn bind(
    state: &ClusterState,
    key: &PodKey,
    pod: &UnboundPod,
    node: NodeId,
    job: &JobKey,
    index: u32,
    requests: Resources,
) -> Bind {
    Bind {
        pod: key.clone(),
        uid: pod.uid.clone(),
        node: node_name(state, node),
        position: Some((job.clone(), index)),
        requests,
        seen: pod.seen,
    }
}

/// The name of a node id of `state` (empty for an id it does not hold).
fn node_name(state: &ClusterState, node: NodeId) -> String {
    state
        .node(node)
        .map_or_else(String::new, |n| n.name.to_string())
}

impl Bind {
    /// The reservation holding this bind's position, if it fills one; `assumed` when the bind is
    /// sent this pass.
    fn reserve(&self, assumed: bool) -> Option<Reserve> {
        self.position.as_ref().map(|(job, index)| Reserve {
            job: job.clone(),
            index: *index,
            node: self.node.clone(),
            requests: self.requests,
            assumed,
        })
    }
}

fn unschedulable(key: &PodKey, pod: &UnboundPod, message: String) -> Unschedulable {
    let unchanged = pod
        .condition
        .as_ref()
        .is_some_and(|c| c.status == "False" && c.reason == UNSCHEDULABLE && c.message == message);
    Unschedulable {
        pod: key.clone(),
        uid: pod.uid.clone(),
        message,
        unchanged,
    }
}

/// The `PodScheduled=False` reason kube-scheduler writes.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// The message for a pod whose spec uses what trainscale does not evaluate.
pub fn unsupported_message(features: &[&str]) -> String {
    format!(
        "trainscale does not evaluate {}; set spec.schedulerName to default-scheduler (or leave it empty) for such pods",
        features.join(", ")
    )
}

/// Node room as the pass hands it out: the state's free room, taken from as pods are bound or
/// positions reserved, with the pod count, host ports and extended resources of each node; what
/// is promised to pods of other schedulers nominated for a node is not free.
struct Room<'s> {
    state: &'s ClusterState,
    pods: &'s SchedulingPods,
    /// The scheduler name this pass binds for (its own nominated pods hold nothing).
    scheduler: &'s str,
    /// What this pass took on each touched node.
    taken: HashMap<NodeId, Taken>,
}

#[derive(Default)]
struct Taken {
    resources: Resources,
    pods: i64,
    ports: Vec<HostPort>,
    extended: BTreeMap<String, i64>,
}

impl<'s> Room<'s> {
    fn new(state: &'s ClusterState, pods: &'s SchedulingPods, scheduler: &'s str) -> Self {
        Room {
            state,
            pods,
            scheduler,
            taken: HashMap::new(),
        }
    }

    /// Takes room and a pod slot on a node (for a reservation, on a node the plan chose).
    fn take(&mut self, node: NodeId, requests: Resources) {
        let t = self.taken.entry(node).or_default();
        t.resources += requests;
        t.pods += 1;
    }

    /// Binds a pod on its planned node if that node passes every filter, else on the best node
    /// that does.
    fn take_planned(
        &mut self,
        node: NodeId,
        pod: &UnboundPod,
        requests: Resources,
    ) -> Result<NodeId, String> {
        match self.fits(node, pod, requests, false) {
            Ok(()) => {
                self.commit(node, pod, requests, false);
                Ok(node)
            }
            Err(_) => place_one(self, pod, requests),
        }
    }

    /// Whether a pod fits where its position's room is held already (filters other than room).
    fn check_held(&mut self, node: NodeId, pod: &UnboundPod) -> Result<(), Unfit> {
        self.fits(node, pod, Resources::ZERO, true)?;
        self.commit(node, pod, Resources::ZERO, true);
        Ok(())
    }

    /// Whether the room held on `node` is really free: with every reservation counted, nothing
    /// on the node is overcommitted (CPU, memory, GPUs, the pod count) — pods present,
    /// terminating ones included, and what this pass took there.
    fn held_room_is_free(&self, node: NodeId) -> bool {
        let Some(slot) = self.state.node(node) else {
            return false;
        };
        let free = self.free(slot, node);
        let pods_fit = self
            .state
            .node_traits(node)
            .and_then(|t| t.max_pods)
            .is_none_or(|max| self.pods_on(slot, node) <= max);
        free.cpu_milli >= 0 && free.memory >= 0 && free.gpu >= 0 && pods_fit
    }

    /// The pods on a node, with those this pass placed there and those nominated for it.
    fn pods_on(&self, slot: &NodeSlot, node: NodeId) -> i64 {
        let (_, nominated) = self.pods.nominated_on(&slot.name, self.scheduler);
        i64::from(slot.pods) + self.taken.get(&node).map_or(0, |t| t.pods) + nominated
    }

    /// The free room of a node, less what this pass took there and what is nominated for it.
    fn free(&self, slot: &NodeSlot, node: NodeId) -> Resources {
        let (nominated, _) = self.pods.nominated_on(&slot.name, self.scheduler);
        slot.free()
            - nominated
            - self
                .taken
                .get(&node)
                .map_or(Resources::ZERO, |t| t.resources)
    }

    /// kube-scheduler's filters for one pod on one node, against the room left this pass.
    /// `held`: the room and pod slot are held for it already (a reservation).
    fn fits(
        &self,
        node: NodeId,
        pod: &UnboundPod,
        requests: Resources,
        held: bool,
    ) -> Result<(), Unfit> {
        // A spec that does not read, or uses what trainscale does not evaluate, fits nowhere
        // (`diagnose` says why).
        let constraints = match &pod.constraints {
            Ok(c) if c.unsupported.is_empty() => c,
            _ => return Err(Unfit::NodeAffinity),
        };
        let slot = self.state.node(node).ok_or(Unfit::NotReady)?;
        let traits = self.state.node_traits(node).ok_or(Unfit::NotReady)?;
        check_static(constraints, traits)?;
        let taken = self.taken.get(&node);
        if !held {
            if let Some(max) = traits.max_pods
                && self.pods_on(slot, node) + 1 > max
            {
                return Err(Unfit::TooManyPods);
            }
            let free = self.free(slot, node);
            if requests.cpu_milli > free.cpu_milli {
                return Err(Unfit::Insufficient("cpu".into()));
            }
            if requests.memory > free.memory {
                return Err(Unfit::Insufficient("memory".into()));
            }
            if requests.gpu > free.gpu {
                return Err(Unfit::Insufficient(
                    crate::api::GPU_RESOURCE_NAMES[0].into(),
                ));
            }
        }
        for (resource, amount) in &constraints.extended {
            let have = traits.extended.get(resource).copied().unwrap_or(0);
            let used = self.pods.extended_on(&slot.name, resource)
                + self
                    .pods
                    .nominated_extended_on(&slot.name, resource, self.scheduler)
                + taken
                    .and_then(|t| t.extended.get(resource))
                    .copied()
                    .unwrap_or(0);
            if *amount > have - used {
                return Err(Unfit::Insufficient(resource.clone()));
            }
        }
        let wanted = &constraints.host_ports;
        if !wanted.is_empty() {
            let mine = taken.map(|t| t.ports.as_slice()).unwrap_or_default();
            let nominated = self.pods.nominated_ports_on(&slot.name, self.scheduler);
            let mut in_use = self.pods.ports_on(&slot.name).chain(nominated).chain(mine);
            if in_use.any(|p| wanted.iter().any(|w| w.conflicts(p))) {
                return Err(Unfit::HostPorts);
            }
        }
        Ok(())
    }

    fn commit(&mut self, node: NodeId, pod: &UnboundPod, requests: Resources, held: bool) {
        if !held {
            self.take(node, requests);
        }
        let t = self.taken.entry(node).or_default();
        if let Ok(c) = &pod.constraints {
            t.ports.extend(c.host_ports.iter().cloned());
            for (resource, amount) in &c.extended {
                *t.extended.entry(resource.clone()).or_insert(0) += amount;
            }
        }
    }

    /// kube-scheduler's FailedScheduling message for a pod no node takes.
    fn diagnose(&self, pod: &UnboundPod, requests: Resources) -> String {
        let constraints = match &pod.constraints {
            Ok(c) => c,
            Err(e) => return format!("the pod's spec cannot be read: {e}"),
        };
        if !constraints.unsupported.is_empty() {
            return unsupported_message(&constraints.unsupported);
        }
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0;
        for (id, slot) in self.state.nodes() {
            if slot.info.is_none() {
                continue;
            }
            total += 1;
            if let Err(why) = self.fits(id, pod, requests, false) {
                *reasons.entry(why.to_string()).or_insert(0) += 1;
            }
        }
        unavailable_message(total, &reasons)
    }
}

/// The best node for a single pod, like kube-scheduler's filters then a best fit (fewest free
/// GPUs, then least free CPU, then name): the node, or why none fits.
fn place_one(room: &mut Room, pod: &UnboundPod, requests: Resources) -> Result<NodeId, String> {
    if let Ok(c) = &pod.constraints
        && !c.unsupported.is_empty()
    {
        return Err(unsupported_message(&c.unsupported));
    }
    let mut best: Option<(Resources, NodeId)> = None;
    for (id, slot) in room.state.nodes() {
        if slot.info.is_none() || room.fits(id, pod, requests, false).is_err() {
            continue;
        }
        let free = room.free(slot, id);
        let better = best.as_ref().is_none_or(|(b, _)| {
            (free.gpu, free.cpu_milli, free.memory) < (b.gpu, b.cpu_milli, b.memory)
        });
        if better {
            best = Some((free, id));
        }
    }
    match best {
        Some((_, node)) => {
            room.commit(node, pod, requests, false);
            Ok(node)
        }
        None => Err(room.diagnose(pod, requests)),
    }
}
