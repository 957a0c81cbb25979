//! From a plan to bindings: which pending pod goes to which node, which planned positions hold
//! room for pods not created yet, and which pods cannot be placed and why. Pure: the state, the
//! unbound pods, the plan and what the previous pass left ([`Memory`], the time) in; decisions
//! out.
//!
//! Pods outside the plan's trainer positions (a job's master and pservers, pods of jobs trainscale
//! only sizes, pods of no job) are placed first, by priority, then age, then name, so a new job's
//! master and pservers get room before anyone's growth; while one of them finds no room, none of
//! its job's trainers is bound. A job's pending trainers then take its
//! planned placements in position order (identical trainers are interchangeable); a position
//! whose pod does not exist yet is reserved on its node. A pod that finds no room takes room its
//! own job holds for a later position (one whose pod is not created yet, or one the plan drops),
//! or the node of a later position's pod, which then waits: a Job's lowest positions run first,
//! since lowering `parallelism` removes the highest.
//!
//! Every bind is checked against the node as the API server and the kubelet will see it: static
//! filters with the pod's own spec, CPU, memory, GPUs, the pod count (pods present, terminating
//! ones included, and this pass's binds and reservations), host ports, extended resources. A pod
//! filling a reserved position is checked the same way, its reservation's room counted once as
//! its own; when the check fails the reservation is released and the pod placed on the best node
//! that passes, unless the room is coming free (pods leaving the node), when it waits.
//!
//! A job below its min-instance is a gang: it binds whole or not at all within a pass. Only
//! members bound, sent to be bound, or bindable this pass after every check count; until they
//! reach min, placements are only reserved and the waiting members say what the gang waits for.
//! A gang that waits longer than its timeout releases its room for a while; a position reserved
//! for a pod that does not come stops being reserved.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::pods::{PodKey, SchedulingPods, UnboundPod};
use crate::api::{JobKey, Resources};
use crate::cluster::filters::{HostPort, PodConstraints, Unfit, check_static, unavailable_message};
use crate::cluster::objects::{PodPhase, Role};
use crate::cluster::{ClusterState, NodeId, NodeSlot};
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

/// A gang that could not bind whole within its timeout: its room is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangTimeout {
    pub job: JobKey,
    /// What its pods' condition and the job's Event say.
    pub message: String,
}

/// What a pass's scheduler role does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignments {
    pub binds: Vec<Bind>,
    pub reserves: Vec<Reserve>,
    pub unschedulable: Vec<Unschedulable>,
    /// Held room to give back (before `reserves` are held): `(job, position)`.
    pub unreserve: Vec<(JobKey, u32)>,
    /// Gangs that timed out this pass.
    pub timeouts: Vec<GangTimeout>,
    /// What the next pass starts from.
    pub memory: Memory,
}

/// What the scheduler role carries from one pass to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// Gangs that could not bind whole, by job.
    pub gangs: BTreeMap<JobKey, GangWait>,
    /// Positions reserved for a pod not created yet, and since when (seconds since the epoch).
    pub unfilled: BTreeMap<(JobKey, u32), i64>,
}

/// How long a gang has waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangWait {
    /// Seconds since the epoch from which its wait counts.
    pub since: i64,
    /// It timed out: its room is not held before this time (seconds since the epoch).
    pub held_back_until: Option<i64>,
}

/// The scheduler role's inputs besides the cluster and the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The scheduler name its pods carry in `spec.schedulerName`.
    pub name: String,
    /// This pass's time, seconds since the epoch.
    pub now: i64,
    /// Seconds a gang may wait to bind whole before its room is released; 0: no limit.
    pub gang_timeout: i64,
    /// Seconds a timed-out gang's room stays released before it tries again.
    pub gang_back_off: i64,
    /// Seconds a position may stay reserved for a pod that does not come before it is no
    /// longer reserved.
    pub unfilled_limit: i64,
    pub memory: Memory,
}

impl Settings {
    /// Settings for scheduler `name` at time 0 with nothing remembered: gangs wait without limit
    /// and positions are always reserved.
    pub fn new(name: &str) -> Self {
        Settings {
            name: name.to_string(),
            now: 0,
            gang_timeout: 0,
            gang_back_off: 0,
            unfilled_limit: 0,
            memory: Memory::default(),
        }
    }
}

/// Decides the bindings of one pass for the pods naming scheduler `name`, with nothing
/// remembered from an earlier pass (see [`assign_with`]).
pub fn assign(
    state: &ClusterState,
    pods: &SchedulingPods,
    plan: &ScalePlan,
    name: &str,
) -> Assignments {
    assign_with(state, pods, plan, &Settings::new(name))
}

/// Decides the bindings of one pass.
pub fn assign_with(
    state: &ClusterState,
    pods: &SchedulingPods,
    plan: &ScalePlan,
    settings: &Settings,
) -> Assignments {
    let name = settings.name.as_str();
    let mut out = Assignments::default();
    let mut trainers: BTreeMap<&JobKey, BTreeMap<u32, (&PodKey, &UnboundPod)>> = BTreeMap::new();
    let mut others: Vec<(&PodKey, &UnboundPod)> = Vec::new();
    // One lookup per pod: `ScalePlan::job` scans the plan, and a first pass after start-up may
    // have hundreds of thousands of trainer pods to bind for tens of thousands of jobs.
    let planned_jobs: HashSet<&JobKey> = plan.jobs.iter().map(|j| &*j.key).collect();
    for (key, pod) in pods.unbound_for(name) {
        let info = state.pod(&key.0, &key.1);
        match info.and_then(|i| i.owner.as_ref().zip(i.index)) {
            Some(((job, Role::Trainer), index))
                if planned_jobs.contains(job) && schedules_job(state, job, name) =>
            {
                trainers.entry(job).or_default().insert(index, (key, pod));
            }
            _ => others.push((key, pod)),
        }
    }
    let mut room = Room::new(state, pods, name);
    // Pods outside the plan's positions first: higher priority, then older, then by name.
    let created = |key: &PodKey| state.pod(&key.0, &key.1).map_or(0, |p| p.created);
    others.sort_by(|(ka, a), (kb, b)| {
        (Reverse(a.priority), created(ka), *ka).cmp(&(Reverse(b.priority), created(kb), *kb))
    });
    // Where the plan held room for a job's master or pserver, it goes there when that node
    // passes every filter.
    let planned: HashMap<&PodKey, NodeId> = plan
        .support
        .iter()
        .filter_map(|s| s.node.map(|node| (&s.pod, node)))
        .collect();
    // Jobs whose master or a pserver could not be placed: their trainers wait for them.
    let mut support_unplaced: BTreeSet<&JobKey> = BTreeSet::new();
    for (key, pod) in others {
        let info = state.pod(&key.0, &key.1);
        let requests = info.map_or(Resources::ZERO, |p| p.requests);
        let placed = match planned.get(key) {
            Some(&node) => room.take_planned(node, pod, requests),
            None => place_one(&mut room, pod, requests),
        }
        .ok_or_else(|| room.why_unplaced(pod, requests));
        match placed {
            Ok(node) => out.binds.push(Bind {
                pod: key.clone(),
                uid: pod.uid.clone(),
                node: node_name(state, node),
                position: None,
                requests,
                seen: pod.seen,
            }),
            Err(message) => {
                if let Some((job, Role::Master | Role::Pserver)) =
                    info.and_then(|i| i.owner.as_ref())
                {
                    support_unplaced.insert(job);
                }
                out.unschedulable.push(unschedulable(key, pod, message));
            }
        }
    }
    let reserved: BTreeSet<&JobKey> = state.reservations().map(|(job, _, _)| job).collect();
    let mut leaving = Leaving::new(state, plan);
    for job in &plan.jobs {
        // `trainers` holds only jobs this scheduler binds. A job with nothing to bind, place or
        // hold is passed over before the lookups below: a steady pass has tens of thousands.
        let waiting = trainers.remove(&*job.key).unwrap_or_default();
        if waiting.is_empty()
            && job.placements.iter().all(|p| p.trainers == 0)
            && !reserved.contains(&*job.key)
        {
            continue;
        }
        if !schedules_job(state, &job.key, name) {
            continue;
        }
        let placements: Vec<NodeId> = job
            .placements
            .iter()
            .flat_map(|p| std::iter::repeat_n(p.node, p.trainers as usize))
            .collect();
        let pass = JobPass {
            state,
            settings,
            job: job.key.as_ref(),
            min: job.min.max(0) as u32,
            target: job.target.max(0) as u32,
            trainer: job.trainer,
            support_unplaced: support_unplaced.contains(&*job.key),
        };
        pass.run(&mut room, &mut leaving, &placements, waiting, &mut out);
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

/// One job's trainers in one pass.
struct JobPass<'a> {
    state: &'a ClusterState,
    settings: &'a Settings,
    job: &'a JobKey,
    min: u32,
    target: u32,
    trainer: Resources,
    /// Its master or a pserver found no room this pass: no trainer of it is bound before them.
    support_unplaced: bool,
}

/// What [`JobPass::own_room`] needs of the pass: the position asking, the pods still waiting
/// for later positions, and the positions released or given so far.
type OwnRoom<'m, 'p> = (
    u32,
    &'m BTreeMap<u32, (&'p PodKey, &'p UnboundPod)>,
    &'m mut Vec<u32>,
    &'m mut BTreeSet<u32>,
);

/// What became of one trainer position's pod this pass.
enum Member<'p> {
    /// It can be bound this pass, on this node.
    Bindable(Bind, &'p PodKey, &'p UnboundPod),
    /// The room held for it is taken now but coming free (pods leaving `node`): it waits there.
    Waiting(&'p PodKey, &'p UnboundPod, String),
    /// No node takes it.
    Unplaced(&'p PodKey, &'p UnboundPod),
}

impl<'p> Member<'p> {
    fn pod(&self) -> (&'p PodKey, &'p UnboundPod) {
        match self {
            Member::Bindable(_, key, pod)
            | Member::Waiting(key, pod, _)
            | Member::Unplaced(key, pod) => (key, pod),
        }
    }
}

impl<'a> JobPass<'a> {
    /// Binds the present, reserves the missing, reports the unplaced; a gang below min binds
    /// whole or only holds its room.
    fn run<'p>(
        &self,
        room: &mut Room,
        leaving: &mut Leaving,
        placements: &[NodeId],
        mut waiting: BTreeMap<u32, (&'p PodKey, &'p UnboundPod)>,
        out: &mut Assignments,
    ) {
        let (state, job, now) = (self.state, self.job, self.settings.now);
        let Some(slot) = state.job(job) else {
            return;
        };
        let positions = slot.controller_positions(state.size_cap());
        let mut planned = placements.iter();
        let mut members: Vec<Member<'p>> = Vec::new();
        let mut reserves = Vec::new();
        let mut unreserve = Vec::new();
        let mut unfilled = BTreeMap::new();
        // Bound, or sent to be bound in an earlier pass and not seen bound yet.
        let mut present = 0u32;
        let mut missing = 0u32;
        // Later positions whose held room an earlier position's pod took (see `own_room`).
        let mut given = BTreeSet::new();
        for index in 0..self.target {
            if given.contains(&index) {
                missing += 1;
                continue;
            }
            let reservation = state.reservation(job, index);
            if reservation.is_some_and(|r| r.assumed) {
                present += 1;
                continue;
            }
            let pod = waiting.remove(&index);
            let at = positions.get(index as usize).copied().flatten();
            match (reservation, pod) {
                // A reserved position whose pod exists: re-checked where its room is held.
                (Some(r), Some((key, pod))) => {
                    let requests = pod_requests(state, key, self.trainer);
                    let held = Allowance::held(r.requests());
                    let node = state.node_id_of(r.node());
                    let checked = node.map(|n| (n, room.take_held(n, pod, requests, held)));
                    match checked {
                        Some((n, Ok(()))) => members.push(Member::Bindable(
                            self.bind(key, pod, n, index, requests),
                            key,
                            pod,
                        )),
                        Some((n, Err(_)))
                            if room.fits(n, pod, requests, held + leaving.on(n)).is_ok() =>
                        {
                            members.push(Member::Waiting(key, pod, r.node().to_string()));
                        }
                        _ => {
                            // The room is gone for good: released, and the pod placed afresh.
                            unreserve.push(index);
                            if let Some(n) = node {
                                room.give_back(n, r.requests());
                            }
                            let placed = place_one(room, pod, requests).or_else(|| {
                                let own = (index, &waiting, &mut unreserve, &mut given);
                                self.own_room(room, pod, requests, own)
                            });
                            members.push(match placed {
                                Some(n) => Member::Bindable(
                                    self.bind(key, pod, n, index, requests),
                                    key,
                                    pod,
                                ),
                                None => Member::Unplaced(key, pod),
                            });
                        }
                    }
                }
                // A reserved position whose pod is not created yet.
                (Some(r), None) => {
                    missing += 1;
                    let node = state.node_id_of(r.node());
                    let usable = node.is_some_and(|n| self.usable(n));
                    let since = self.unfilled_since(index);
                    unfilled.insert(index, since);
                    if !usable || now - since >= self.unfilled_limit() {
                        // Its node no longer takes the job's trainers, or its pod never came.
                        unreserve.push(index);
                        if let Some(n) = node {
                            room.give_back(n, r.requests());
                        }
                    }
                }
                // Bound (its own pod, or another at the same index).
                (None, _) if at.is_some() => present += 1,
                (None, pod) => {
                    let next = planned.next();
                    match (pod, next) {
                        (Some((key, pod)), next) => {
                            let requests = pod_requests(state, key, self.trainer);
                            let placed = next
                                .and_then(|&node| room.take_planned(node, pod, requests))
                                .or_else(|| {
                                    let own = (index, &waiting, &mut unreserve, &mut given);
                                    self.own_room(room, pod, requests, own)
                                });
                            members.push(match placed {
                                Some(n) => Member::Bindable(
                                    self.bind(key, pod, n, index, requests),
                                    key,
                                    pod,
                                ),
                                None => Member::Unplaced(key, pod),
                            });
                        }
                        (None, None) => missing += 1,
                        (None, Some(&node)) => {
                            missing += 1;
                            let since = self.unfilled_since(index);
                            unfilled.insert(index, since);
                            if now - since >= self.unfilled_limit() {
                                continue;
                            }
                            let Some(name) = state.node(node).map(|n| n.name.to_string()) else {
                                continue;
                            };
                            room.take(node, self.trainer);
                            reserves.push(Reserve {
                                job: job.clone(),
                                index,
                                node: name,
                                requests: self.trainer,
                                assumed: false,
                            });
                        }
                    }
                }
            }
        }
        self.lowest_positions_first(&mut members, &mut unreserve);
        let bindable = members
            .iter()
            .filter(|m| matches!(m, Member::Bindable(..)))
            .count() as u32;
        let placeable = present + bindable;
        out.unreserve
            .extend(unreserve.iter().map(|i| (job.clone(), *i)));
        let mut remember_unfilled = |out: &mut Assignments| {
            let unfilled = std::mem::take(&mut unfilled);
            out.memory.unfilled.extend(
                unfilled
                    .into_iter()
                    .map(|(i, since)| ((job.clone(), i), since)),
            );
        };
        // Trainers without their master and pservers cannot train, and would take the room those
        // wait for: none is bound or newly reserved until they are placed.
        if self.support_unplaced {
            remember_unfilled(out);
            let message = format!(
                "waiting for the master and parameter servers of job {job} to be placed first"
            );
            for member in members {
                let (key, pod) = member.pod();
                out.unschedulable
                    .push(unschedulable(key, pod, message.clone()));
            }
            return;
        }
        // A job of min 1 has no gang to wait for: each pod is placed or refused on its own.
        if placeable >= self.min || self.min <= 1 {
            remember_unfilled(out);
            out.reserves.extend(reserves);
            for member in members {
                match member {
                    Member::Bindable(b, _, _) => {
                        out.reserves.extend(b.reserve(true));
                        out.binds.push(b);
                    }
                    Member::Waiting(key, pod, node) => {
                        let message = format!(
                            "waiting for the room held for it on node {node} to come free (pods leaving the node)"
                        );
                        out.unschedulable.push(unschedulable(key, pod, message));
                    }
                    Member::Unplaced(key, pod) => {
                        let requests = pod_requests(state, key, self.trainer);
                        let message = room.why_unplaced(pod, requests);
                        out.unschedulable.push(unschedulable(key, pod, message));
                    }
                }
            }
            return;
        }
        // A gang below min: its room held and nothing bound until all of it is placeable.
        let summary = self.summary(placeable, missing, &members);
        let wait = self.settings.memory.gangs.get(job).copied();
        let since = wait.map_or(now, |w| w.since);
        let held_back = wait
            .and_then(|w| w.held_back_until)
            .is_some_and(|until| now < until);
        let timeout = self.settings.gang_timeout;
        let times_out = !held_back && timeout > 0 && now - since >= timeout;
        if held_back || times_out {
            // It starts afresh after its back-off, positions still without a pod included.
            let message = format!(
                "gang job {job} could not bind whole within {}: {summary}; its room is released for {}, then it tries again",
                duration_text(timeout),
                duration_text(self.settings.gang_back_off)
            );
            if times_out {
                let until = now + self.settings.gang_back_off;
                out.memory.gangs.insert(
                    job.clone(),
                    GangWait {
                        since: until,
                        held_back_until: Some(until),
                    },
                );
                out.timeouts.push(GangTimeout {
                    job: job.clone(),
                    message: message.clone(),
                });
            } else if let Some(w) = wait {
                out.memory.gangs.insert(job.clone(), w);
            }
            // Every room it holds goes back (not what was sent to be bound already). This pass
            // still counts it taken: the next one plans without it.
            for (index, r) in state.reservations_of(job) {
                if !r.assumed && !unreserve.contains(&index) {
                    out.unreserve.push((job.clone(), index));
                }
            }
            for member in members {
                let (key, pod) = member.pod();
                out.unschedulable
                    .push(unschedulable(key, pod, message.clone()));
            }
            return;
        }
        out.memory.gangs.insert(
            job.clone(),
            GangWait {
                since,
                held_back_until: None,
            },
        );
        remember_unfilled(out);
        out.reserves.extend(reserves);
        let gang = format!("waiting for its gang job {job}: {summary}");
        for member in members {
            match member {
                Member::Bindable(b, key, pod) => {
                    out.reserves.extend(b.reserve(false));
                    out.unschedulable
                        .push(unschedulable(key, pod, gang.clone()));
                }
                Member::Waiting(key, pod, _) => {
                    out.unschedulable
                        .push(unschedulable(key, pod, gang.clone()));
                }
                Member::Unplaced(key, pod) => {
                    let why = room.why_unplaced(pod, pod_requests(state, key, self.trainer));
                    let message = format!("{why} Its gang job {job} waits: {summary}");
                    out.unschedulable.push(unschedulable(key, pod, message));
                }
            }
        }
    }

    /// Room the job holds for one of its later positions that the pod at `index` may take when
    /// no other room takes it: a position whose pod is not created yet, or one above the target
    /// (the plan drops it). Highest position first; the reservation is released. A Job's pods
    /// at low indexes must run before its growth does (the Job controller removes the highest
    /// indexes first, so a job running its growth while an earlier pod waits cannot shrink
    /// back to what runs).
    fn own_room(
        &self,
        room: &mut Room,
        pod: &UnboundPod,
        requests: Resources,
        (index, waiting, unreserve, given): OwnRoom<'_, '_>,
    ) -> Option<NodeId> {
        let mut held: Vec<(u32, &str, Resources)> = self
            .state
            .reservations_of(self.job)
            .filter(|(i, r)| {
                *i > index
                    && !r.assumed
                    && (*i >= self.target || !waiting.contains_key(i))
                    && !unreserve.contains(i)
                    && !given.contains(i)
            })
            .map(|(i, r)| (i, r.node(), r.requests()))
            .collect();
        held.sort_by_key(|(i, _, _)| Reverse(*i));
        for (i, node, held_room) in held {
            let Some(node) = self.state.node_id_of(node) else {
                continue;
            };
            if room
                .take_held(node, pod, requests, Allowance::held(held_room))
                .is_ok()
            {
                unreserve.push(i);
                given.insert(i);
                return Some(node);
            }
        }
        None
    }

    /// Gives the node of a later position's bindable pod to an earlier position's pod that no
    /// node took (same requests and constraints, so the same checks pass): the later pod waits
    /// instead, and the room held for its position (if any) goes with the node.
    fn lowest_positions_first(&self, members: &mut [Member<'_>], unreserve: &mut Vec<u32>) {
        let position = |m: &Member| match m {
            Member::Bindable(b, _, _) => b.position.as_ref().map(|(_, i)| *i),
            _ => None,
        };
        for low in 0..members.len() {
            let Member::Unplaced(key, pod) = members[low] else {
                continue;
            };
            let requests = pod_requests(self.state, key, self.trainer);
            let later = (low + 1..members.len()).rev().find(|&high| {
                matches!(&members[high], Member::Bindable(b, _, other)
                    if b.requests == requests && same_constraints(pod, other))
            });
            let Some(high) = later else {
                continue;
            };
            let Some(index) = self.index_of(key) else {
                continue;
            };
            let Member::Bindable(b, high_key, high_pod) = &members[high] else {
                continue;
            };
            let node = b.node.clone();
            if let Some(i) = position(&members[high])
                && self.state.reservation(self.job, i).is_some()
                && !unreserve.contains(&i)
            {
                unreserve.push(i);
            }
            members[high] = Member::Unplaced(high_key, high_pod);
            members[low] = Member::Bindable(
                Bind {
                    pod: key.clone(),
                    uid: pod.uid.clone(),
                    node,
                    position: Some((self.job.clone(), index)),
                    requests,
                    seen: pod.seen,
                },
                key,
                pod,
            );
        }
    }

    /// The completion index of one of the job's trainer pods.
    fn index_of(&self, key: &PodKey) -> Option<u32> {
        self.state.pod(&key.0, &key.1).and_then(|p| p.index)
    }

    fn bind(
        &self,
        key: &PodKey,
        pod: &UnboundPod,
        node: NodeId,
        index: u32,
        requests: Resources,
    ) -> Bind {
        Bind {
            pod: key.clone(),
            uid: pod.uid.clone(),
            node: node_name(self.state, node),
            position: Some((self.job.clone(), index)),
            requests,
            seen: pod.seen,
        }
    }

    /// Whether a node still takes the job's trainers: it exists, takes pods, and passes the
    /// static filters of the job's trainer class.
    fn usable(&self, node: NodeId) -> bool {
        let class = self.state.job(self.job).and_then(|slot| slot.class);
        self.state.node(node).is_some_and(NodeSlot::schedulable) && self.state.eligible(class, node)
    }

    /// Since when position `index` has been reserved for a pod not created yet (now if it was
    /// not before).
    fn unfilled_since(&self, index: u32) -> i64 {
        self.settings
            .memory
            .unfilled
            .get(&(self.job.clone(), index))
            .copied()
            .unwrap_or(self.settings.now)
    }

    /// Seconds a position may wait for its pod (no limit when not set).
    fn unfilled_limit(&self) -> i64 {
        match self.settings.unfilled_limit {
            0 => i64::MAX,
            limit => limit,
        }
    }

    /// What a gang waits for, e.g. `2 of min 3 trainers placeable; 1 not created yet, 1 fits
    /// no node`.
    fn summary(&self, placeable: u32, missing: u32, members: &[Member]) -> String {
        let mut parts = Vec::new();
        // A gated trainer exists but may not be bound until its gates are lifted.
        let gated = self
            .state
            .job(self.job)
            .map_or(0, |slot| slot.trainers.gated)
            .min(missing);
        if missing > gated {
            parts.push(format!("{} not created yet", missing - gated));
        }
        if gated > 0 {
            parts.push(format!("{gated} gated (spec.schedulingGates)"));
        }
        let mut waiting_on: Vec<&str> = members
            .iter()
            .filter_map(|m| match m {
                Member::Waiting(_, _, node) => Some(node.as_str()),
                _ => None,
            })
            .collect();
        if !waiting_on.is_empty() {
            let count = waiting_on.len();
            waiting_on.sort_unstable();
            waiting_on.dedup();
            parts.push(format!(
                "{count} waiting for room coming free on {}",
                waiting_on.join(", ")
            ));
        }
        let unplaced = members
            .iter()
            .filter(|m| matches!(m, Member::Unplaced(..)))
            .count();
        if unplaced > 0 {
            let verb = if unplaced == 1 { "fits" } else { "fit" };
            parts.push(format!("{unplaced} {verb} no node"));
        }
        let mut text = format!("{placeable} of min {} trainers placeable", self.min);
        if !parts.is_empty() {
            text.push_str("; ");
            text.push_str(&parts.join(", "));
        }
        text
    }
}

/// Whether two pods' specs read to the same constraints.
fn same_constraints(a: &UnboundPod, b: &UnboundPod) -> bool {
    matches!((&a.constraints, &b.constraints), (Ok(x), Ok(y)) if x == y)
}

fn pod_requests(state: &ClusterState, key: &PodKey, trainer: Resources) -> Resources {
    state.pod(&key.0, &key.1).map_or(trainer, |p| p.requests)
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

/// A duration in seconds as humans write it (`10m`, `1m 30s`).
fn duration_text(seconds: i64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(seconds.max(0) as u64)).to_string()
}

/// Room a check may count as the pod's beyond a node's free room: what is held for it (a
/// reservation's room and pod slot), and what is leaving the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Allowance {
    resources: Resources,
    pods: i64,
}

impl Allowance {
    /// Nothing beyond the free room.
    const NONE: Allowance = Allowance {
        resources: Resources::ZERO,
        pods: 0,
    };

    /// A reservation's room and its pod slot.
    fn held(resources: Resources) -> Self {
        Allowance { resources, pods: 1 }
    }
}

impl std::ops::Add for Allowance {
    type Output = Allowance;
    fn add(self, o: Allowance) -> Allowance {
        Allowance {
            resources: self.resources + o.resources,
            pods: self.pods + o.pods,
        }
    }
}

/// The room leaving each node: pods terminating there, and trainers at positions their job is
/// shrunk below (by its size or this pass's plan). Read from the state once, when a check first
/// needs it.
struct Leaving<'s> {
    state: &'s ClusterState,
    plan: &'s ScalePlan<'s>,
    by_node: Option<HashMap<NodeId, Allowance>>,
}

impl<'s> Leaving<'s> {
    fn new(state: &'s ClusterState, plan: &'s ScalePlan<'s>) -> Self {
        Leaving {
            state,
            plan,
            by_node: None,
        }
    }

    /// The room leaving `node`.
    fn on(&mut self, node: NodeId) -> Allowance {
        let (state, plan) = (self.state, self.plan);
        let by_node = self.by_node.get_or_insert_with(|| {
            let targets: HashMap<&JobKey, i32> =
                plan.jobs.iter().map(|j| (&*j.key, j.target)).collect();
            // The positions a job keeps: its size, or less when this pass shrinks it; unknown
            // (nothing leaving) for a job neither sized by a trainer Job nor planned.
            let kept = |job: &JobKey| {
                let slot = state.job(job)?;
                let target = targets.get(job).copied();
                if !slot.has_trainer_job && !slot.sized_by_pods && target.is_none() {
                    return None;
                }
                let current = slot.current();
                Some(target.map_or(current, |t| current.min(t)).max(0) as u32)
            };
            let mut by_node: HashMap<NodeId, Allowance> = HashMap::new();
            for (_, pod) in state.pods() {
                let Some(id) = pod.node.as_deref().and_then(|n| state.node_id_of(n)) else {
                    continue;
                };
                let shrunk = match (&pod.owner, pod.index) {
                    (Some((job, Role::Trainer)), Some(index)) => {
                        kept(job).is_some_and(|kept| index >= kept)
                    }
                    _ => false,
                };
                if pod.phase != PodPhase::Finished && (pod.terminating || shrunk) {
                    let a = by_node.entry(id).or_default();
                    *a = *a + Allowance::held(pod.requests);
                }
            }
            by_node
        });
        by_node.get(&node).copied().unwrap_or_default()
    }
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
    /// What was found of the room as it is, per pod requests and constraints (pods alike are
    /// refused alike, so one scan of every node serves them all, across jobs); cleared whenever
    /// `taken` changes.
    found: Found,
    /// The known nodes by their free room left this pass, for [`place_one`]'s best fit: built
    /// the first time a pod needs it, kept up to date by every change of `taken` after that.
    by_free: Option<BestFitOrder>,
}

/// What a pass found of its room as it stands, per pod requests and constraints.
#[derive(Default)]
struct Found {
    /// No node takes such a pod.
    no_fit: Vec<(Resources, Arc<PodConstraints>)>,
    /// Such a pod's FailedScheduling message ([`Room::diagnose`]).
    messages: Vec<(Resources, Arc<PodConstraints>, String)>,
}

/// The known nodes in best-fit order: fewest free GPUs, then least free CPU, then least free
/// memory, then the order [`ClusterState::nodes`] gives them in.
struct BestFitOrder {
    keys: BTreeSet<FitKey>,
    /// Each node's place in `ClusterState::nodes`, by node id.
    order: Vec<u32>,
}

/// A node's key in [`BestFitOrder`]: free GPUs, CPU and memory, its place, its id.
type FitKey = (i64, i64, i64, u32, NodeId);

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
            found: Found::default(),
            by_free: None,
        }
    }

    /// Takes room and a pod slot on a node (for a reservation, on a node the plan chose).
    fn take(&mut self, node: NodeId, requests: Resources) {
        self.change_taken(node, |t| {
            t.resources += requests;
            t.pods += 1;
        });
    }

    /// Gives back room and a pod slot held on a node (a reservation released this pass).
    fn give_back(&mut self, node: NodeId, requests: Resources) {
        self.change_taken(node, |t| {
            t.resources -= requests;
            t.pods -= 1;
        });
    }

    /// Changes what this pass took on `node`, moving the node in the best-fit order if built.
    fn change_taken(&mut self, node: NodeId, change: impl FnOnce(&mut Taken)) {
        let before = self.fit_key(node);
        change(self.taken.entry(node).or_default());
        self.found = Found::default();
        if let (Some(order), Some(before)) = (self.by_free.as_mut(), before) {
            order.keys.remove(&before);
        }
        if let Some(after) = self.fit_key(node)
            && let Some(order) = self.by_free.as_mut()
        {
            order.keys.insert(after);
        }
    }

    /// The node's key in the best-fit order, while that order is built and the node is known
    /// and has a pod slot left.
    fn fit_key(&self, node: NodeId) -> Option<FitKey> {
        let order = self.by_free.as_ref()?;
        let place = *order.order.get(node as usize)?;
        self.key_at(node, place)
    }

    /// A node's key in the best-fit order at `place`; `None` for a node not known, or with
    /// every pod slot used: no pod fits there (`TooManyPods`), and in the order such nodes would
    /// sit ahead of the nodes that fit (best fit fills a node's slots before its CPU with small
    /// pods), visited by every later pod.
    fn key_at(&self, node: NodeId, place: u32) -> Option<FitKey> {
        let slot = self.state.node(node).filter(|slot| slot.info.is_some())?;
        let (free, pods) = self.left(slot, node);
        let full = self
            .state
            .node_traits(node)
            .and_then(|traits| traits.max_pods)
            .is_some_and(|max| pods >= max);
        if full {
            return None;
        }
        Some((free.gpu, free.cpu_milli, free.memory, place, node))
    }

    /// Builds the best-fit order of the known nodes, once a pass.
    fn build_best_fit_order(&mut self) {
        if self.by_free.is_none() {
            let mut order = vec![u32::MAX; self.state.node_id_bound()];
            let mut keys = BTreeSet::new();
            for (place, (id, _)) in self.state.nodes().enumerate() {
                if let Some(at) = order.get_mut(id as usize) {
                    *at = place as u32;
                }
                if let Some(key) = self.key_at(id, place as u32) {
                    keys.insert(key);
                }
            }
            self.by_free = Some(BestFitOrder { keys, order });
        }
    }

    /// Binds a pod on its planned node if that node passes every filter, else on the best node
    /// that does, if any ([`Room::diagnose`] says why none).
    fn take_planned(
        &mut self,
        node: NodeId,
        pod: &UnboundPod,
        requests: Resources,
    ) -> Option<NodeId> {
        match self.fits(node, pod, requests, Allowance::NONE) {
            Ok(()) => {
                self.commit(node, pod, requests, 1);
                Some(node)
            }
            Err(_) => place_one(self, pod, requests),
        }
    }

    /// Binds a pod where its position's room is held, if the node passes every filter with that
    /// room (`held`) counted once as the pod's; the pod's own requests replace the held room.
    fn take_held(
        &mut self,
        node: NodeId,
        pod: &UnboundPod,
        requests: Resources,
        held: Allowance,
    ) -> Result<(), Unfit> {
        self.fits(node, pod, requests, held)?;
        self.commit(node, pod, requests - held.resources, 1 - held.pods);
        Ok(())
    }

    /// The free room of a node and the pods on it, each counting what this pass took there and
    /// what is nominated for it (the nominated pods looked up once for both).
    fn left(&self, slot: &NodeSlot, node: NodeId) -> (Resources, i64) {
        let (nominated, nominated_pods) = self.pods.nominated_on(&slot.name, self.scheduler);
        let taken = self.taken.get(&node);
        let free = slot.free() - nominated - taken.map_or(Resources::ZERO, |t| t.resources);
        let pods = i64::from(slot.pods) + taken.map_or(0, |t| t.pods) + nominated_pods;
        (free, pods)
    }

    /// kube-scheduler's filters for one pod on one node, against the room left this pass (pods
    /// present, terminating ones included, and this pass's binds and reservations), counting
    /// `extra` as the pod's besides (room held for it, room leaving the node).
    fn fits(
        &self,
        node: NodeId,
        pod: &UnboundPod,
        requests: Resources,
        extra: Allowance,
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
        let (free, pods) = self.left(slot, node);
        if let Some(max) = traits.max_pods
            && pods + 1 - extra.pods > max
        {
            return Err(Unfit::TooManyPods);
        }
        let free = free + extra.resources;
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

    /// Records a pod placed on a node: `requests` and `pods` more taken there, and its host
    /// ports and extended resources.
    fn commit(&mut self, node: NodeId, pod: &UnboundPod, requests: Resources, pods: i64) {
        self.change_taken(node, |t| {
            t.resources += requests;
            t.pods += pods;
            if let Ok(c) = &pod.constraints {
                t.ports.extend(c.host_ports.iter().cloned());
                for (resource, amount) in &c.extended {
                    *t.extended.entry(resource.clone()).or_insert(0) += amount;
                }
            }
        });
    }

    /// [`Room::diagnose`], found once per pod requests and constraints while the room stays as
    /// it is.
    fn why_unplaced(&mut self, pod: &UnboundPod, requests: Resources) -> String {
        let Ok(constraints) = &pod.constraints else {
            return self.diagnose(pod, requests);
        };
        let known = self
            .found
            .messages
            .iter()
            .find(|(r, c, _)| *r == requests && c == constraints);
        if let Some((_, _, message)) = known {
            return message.clone();
        }
        let message = self.diagnose(pod, requests);
        self.found
            .messages
            .push((requests, Arc::clone(constraints), message.clone()));
        message
    }

    /// kube-scheduler's FailedScheduling message for a pod the pass does not bind: every node
    /// counted once, with the first filter it fails, or as left to other pods by the plan when
    /// it passes them all.
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
            // A name pods refer to whose Node is unknown is not a node.
            if slot.info.is_none() {
                continue;
            }
            total += 1;
            let why = match self.fits(id, pod, requests, Allowance::NONE) {
                Err(why) => why.to_string(),
                Ok(()) => NOT_PLANNED.to_string(),
            };
            *reasons.entry(why).or_insert(0) += 1;
        }
        unavailable_message(total, &reasons)
    }
}

/// The reason given for a node that passes every filter but the plan did not choose for a pod.
pub const NOT_PLANNED: &str = "node(s) were not chosen by trainscale's plan for this pod";

/// The best node for a single pod, like kube-scheduler's filters then a best fit (fewest free
/// GPUs, then least free CPU, then name), its room taken; `None` when no node fits
/// ([`Room::diagnose`] says why, for the callers that report it: a scan of every node, so not
/// computed here for those that try other room next).
fn place_one(room: &mut Room, pod: &UnboundPod, requests: Resources) -> Option<NodeId> {
    if let Ok(c) = &pod.constraints
        && !c.unsupported.is_empty()
    {
        return None;
    }
    // A pod like one no node took, with the room as it was then, fits nowhere either.
    let constraints = pod.constraints.as_ref().ok();
    let failed_before = |(r, c): &(Resources, Arc<PodConstraints>)| {
        *r == requests && constraints.is_some_and(|mine| mine == c)
    };
    if room.found.no_fit.iter().any(failed_before) {
        return None;
    }
    // The first node in best-fit order that passes every filter: nodes with too few free GPUs
    // are not visited, nodes without a pod slot are not in the order, and one with too little
    // CPU or memory costs a comparison.
    room.build_best_fit_order();
    let best = room
        .by_free
        .iter()
        .flat_map(|order| order.keys.range((requests.gpu, i64::MIN, i64::MIN, 0, 0)..))
        .filter(|(_, cpu, memory, _, _)| requests.cpu_milli <= *cpu && requests.memory <= *memory)
        .map(|&(_, _, _, _, id)| id)
        .find(|&id| room.fits(id, pod, requests, Allowance::NONE).is_ok());
    let Some(node) = best else {
        if let Some(constraints) = constraints {
            room.found.no_fit.push((requests, Arc::clone(constraints)));
        }
        return None;
    };
    room.commit(node, pod, requests, 1);
    Some(node)
}

#[cfg(test)]
mod best_fit_tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use proptest::prelude::*;
    use serde_json::json;

    const GIB: i64 = 1 << 30;

    fn state(nodes: &[(i64, i64, i64)]) -> ClusterState {
        let mut state = ClusterState::new();
        for (n, (gpus, cpus, gib)) in nodes.iter().enumerate() {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": format!("n{n:02}")},
                "status": {"allocatable": {"cpu": cpus.to_string(), "memory": format!("{gib}Gi"),
                                           "nvidia.com/gpu": gpus.to_string(), "pods": "4"},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .expect("a valid Node");
            state.apply_node(&node).expect("a valid Node");
        }
        state
    }

    fn pod() -> UnboundPod {
        UnboundPod {
            uid: None,
            scheduler: "trainscale".into(),
            constraints: Ok(Arc::new(PodConstraints::default())),
            condition: None,
            seen: std::time::Instant::now(),
            priority: 0,
        }
    }

    /// The best fit by a scan of every known node, as `place_one` chose before it kept an
    /// order: of the nodes passing every filter, the fewest free GPUs, then the least free CPU,
    /// then memory, then the first.
    fn scanned(room: &Room, pod: &UnboundPod, requests: Resources) -> Option<NodeId> {
        let mut best: Option<(Resources, NodeId)> = None;
        for (id, slot) in room.state.nodes() {
            if slot.info.is_none() || room.fits(id, pod, requests, Allowance::NONE).is_err() {
                continue;
            }
            let (free, _) = room.left(slot, id);
            if best.as_ref().is_none_or(|(b, _)| {
                (free.gpu, free.cpu_milli, free.memory) < (b.gpu, b.cpu_milli, b.memory)
            }) {
                best = Some((free, id));
            }
        }
        best.map(|(_, id)| id)
    }

    /// A node whose pod slots are all used leaves the best-fit order (no pod fits there, and
    /// each later pod would visit it ahead of the nodes that fit) and comes back with a slot.
    #[test]
    fn a_node_without_a_pod_slot_leaves_the_best_fit_order() {
        // Four pod slots a node; n00 is the tightest, so best fit fills it first.
        let state = state(&[(0, 2, 8), (0, 4, 8)]);
        let pods = SchedulingPods::default();
        let mut room = Room::new(&state, &pods, "trainscale");
        let small = Resources::new(100, GIB / 8, 0);
        let n00 = state.node_id_of("n00");
        for _ in 0..4 {
            assert_eq!(place_one(&mut room, &pod(), small), n00);
        }
        let in_order = |room: &Room| room.by_free.as_ref().map(|o| o.keys.len());
        assert_eq!(in_order(&room), Some(1), "the full node left the order");
        assert_eq!(place_one(&mut room, &pod(), small), state.node_id_of("n01"));
        if let Some(n00) = n00 {
            room.give_back(n00, small);
        }
        assert_eq!(in_order(&room), Some(2), "a slot given back brings it back");
        assert_eq!(place_one(&mut room, &pod(), small), n00);
    }

    proptest! {
        /// Whatever this pass took and gave back before, `place_one` picks the node a scan of
        /// every node picks (ties included), and so does the next placement after it.
        #[test]
        fn place_one_picks_what_a_scan_of_every_node_picks(
            nodes in prop::collection::vec((0i64..3, 1i64..5, 1i64..5), 1..16),
            ops in prop::collection::vec((0u8..3, 0usize..16, 0i64..2, 0i64..3, 0i64..3), 1..40),
        ) {
            let state = state(&nodes);
            let pods = SchedulingPods::default();
            let mut room = Room::new(&state, &pods, "trainscale");
            let pod = pod();
            for (op, node, gpus, cpus, gib) in ops {
                let requests = Resources::new(cpus * 1000, gib * GIB, gpus);
                let node = state.node_id_of(&format!("n{:02}", node % nodes.len()));
                match (op, node) {
                    (0, Some(node)) => room.take(node, requests),
                    (1, Some(node)) => room.give_back(node, requests),
                    _ => {
                        let expected = scanned(&room, &pod, requests);
                        let got = place_one(&mut room, &pod, requests);
                        prop_assert_eq!(got, expected);
                    }
                }
            }
        }
    }
}
