//! The simulated Kubernetes around the planner: the trainer Job controller (keeps one pod per
//! completion index in `[0, parallelism)` of the Indexed trainer Job), the binding of pending pods
//! (where the plan placed them, [`World::schedule`], or as kube-scheduler's default profile would,
//! [`World::schedule_kube`]), and node failures. Every change goes through [`ClusterState`]'s setters, as a watch stream would deliver
//! it; the only bookkeeping kept here is which pod is which.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::api::{JobKey, Resources};
use crate::cluster::{ClusterState, NodeId, NodeInfo, PodInfo, PodPhase, Role};

/// Namespace of every simulated object.
pub const NAMESPACE: &str = "sim";

/// A simulated node.
#[derive(Debug, Clone)]
pub struct SimNode {
    pub name: String,
    pub pool: String,
    pub allocatable: Resources,
    pub up: bool,
    pub id: NodeId,
}

/// The trainer pods of one job; pods are keyed by creation sequence.
#[derive(Debug, Clone, Default)]
pub struct JobPods {
    pub key: JobKey,
    pub trainer: Resources,
    /// The pods' priority (kube-scheduler's queue order).
    pub priority: i32,
    /// The trainer Job's `parallelism` (= `completions`).
    pub parallelism: u32,
    /// Pods not bound to a node.
    pub pending: BTreeSet<u64>,
    /// Bound pods and their node index.
    pub bound: BTreeMap<u64, usize>,
    /// Live pods (pending and bound) by completion index.
    pub by_index: BTreeMap<u32, u64>,
}

#[derive(Debug, Clone)]
struct SimPod {
    job: usize,
    /// Completion index.
    index: u32,
    name: String,
    created: i64,
}

/// The simulated cluster.
#[derive(Debug)]
pub struct World {
    pub state: ClusterState,
    /// Nodes in name order (the kube-scheduler's first-fit order).
    pub nodes: Vec<SimNode>,
    /// Node index by the state's node id.
    by_id: Vec<Option<usize>>,
    pub jobs: Vec<JobPods>,
    pods: HashMap<u64, SimPod>,
    /// Pending pods of every job, in creation order.
    pending: BTreeSet<u64>,
    next_seq: u64,
    /// Simulated seconds that bound pods waited pending, summed, and how many were bound.
    pub pending_wait: (f64, u64),
}

impl World {
    /// A cluster of the given `(name, pool, allocatable)` nodes, all up.
    pub fn new(mut nodes: Vec<(String, String, Resources)>) -> World {
        nodes.sort();
        let mut state = ClusterState::new();
        let mut out = Vec::with_capacity(nodes.len());
        for (name, pool, allocatable) in nodes {
            state.set_node(
                &name,
                Some(NodeInfo {
                    allocatable,
                    schedulable: true,
                }),
            );
            let id = state.node_id_of(&name).unwrap_or_default();
            out.push(SimNode {
                name,
                pool,
                allocatable,
                up: true,
                id,
            });
        }
        let mut by_id = vec![None; state.node_id_bound()];
        for (i, n) in out.iter().enumerate() {
            if let Some(slot) = by_id.get_mut(n.id as usize) {
                *slot = Some(i);
            }
        }
        World {
            state,
            nodes: out,
            by_id,
            jobs: Vec::new(),
            pods: HashMap::new(),
            pending: BTreeSet::new(),
            next_seq: 0,
            pending_wait: (0.0, 0),
        }
    }

    /// Registers a job's pods bookkeeping; returns its index.
    pub fn add_job(&mut self, key: JobKey, trainer: Resources) -> usize {
        self.jobs.push(JobPods {
            key,
            trainer,
            ..JobPods::default()
        });
        self.jobs.len() - 1
    }

    /// The index of a node by its id in `state` (nodes are never removed from it).
    pub fn node_of_id(&self, id: NodeId) -> Option<usize> {
        self.by_id.get(id as usize).copied().flatten()
    }

    /// Live trainer pods of a job (pending and bound).
    pub fn live(&self, job: usize) -> u32 {
        let j = &self.jobs[job];
        (j.pending.len() + j.bound.len()) as u32
    }

    /// Bound trainer pods of a job.
    pub fn bound(&self, job: usize) -> u32 {
        self.jobs[job].bound.len() as u32
    }

    /// Pending trainer pods in the whole cluster.
    pub fn pending_pods(&self) -> usize {
        self.pending.len()
    }

    /// Distinct nodes the bound trainers of a job are on.
    pub fn nodes_spanned(&self, job: usize) -> u32 {
        let nodes: BTreeSet<usize> = self.jobs[job].bound.values().copied().collect();
        nodes.len() as u32
    }

    /// Requests of the pending pods, one entry per pod.
    pub fn pending_requests(&self) -> impl Iterator<Item = Resources> + '_ {
        self.pending
            .iter()
            .filter_map(|seq| self.pods.get(seq))
            .map(|p| self.jobs[p.job].trainer)
    }

    fn pod_info(&self, seq: u64, node: Option<usize>) -> Option<((String, String), PodInfo)> {
        let pod = self.pods.get(&seq)?;
        let job = &self.jobs[pod.job];
        Some((
            (NAMESPACE.to_string(), pod.name.clone()),
            PodInfo {
                node: node.map(|n| self.nodes[n].name.clone()),
                phase: if node.is_some() {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                },
                requests: job.trainer,
                terminating: false,
                owner: Some((job.key.clone(), Role::Trainer)),
                created: pod.created,
                index: Some(pod.index),
                extended: Default::default(),
                priority: 0,
                claim: None,
            },
        ))
    }

    /// The Job controller creates the pod of completion index `index` of `job`, pending.
    fn create_pod(&mut self, job: usize, index: u32, now: i64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let name = format!("{}-trainer-{index}-{seq}", self.jobs[job].key.name);
        self.pods.insert(
            seq,
            SimPod {
                job,
                index,
                name,
                created: now,
            },
        );
        let j = &mut self.jobs[job];
        j.pending.insert(seq);
        j.by_index.insert(index, seq);
        self.pending.insert(seq);
        if let Some((key, info)) = self.pod_info(seq, None) {
            self.state.set_pod(key, Some(info));
        }
    }

    fn delete_pod(&mut self, seq: u64) {
        let Some(pod) = self.pods.remove(&seq) else {
            return;
        };
        let j = &mut self.jobs[pod.job];
        j.pending.remove(&seq);
        j.bound.remove(&seq);
        if j.by_index.get(&pod.index) == Some(&seq) {
            j.by_index.remove(&pod.index);
        }
        self.pending.remove(&seq);
        self.state.set_pod((NAMESPACE.to_string(), pod.name), None);
    }

    /// The Job controller after `parallelism` (= `completions`) became `target`: deletes every
    /// pod whose index is `target` or more, pending or bound, then creates a pending pod for each
    /// missing index below `target`, in ascending order. Returns whether a bound pod went.
    pub fn scale_to(&mut self, job: usize, target: u32, now: i64) -> bool {
        self.jobs[job].parallelism = target;
        self.sync_job(job, now)
    }

    /// Brings the pods of `job` to one per index in `[0, parallelism)`. Returns whether a bound
    /// pod went.
    fn sync_job(&mut self, job: usize, now: i64) -> bool {
        let j = &self.jobs[job];
        let excess: Vec<u64> = j
            .by_index
            .range(j.parallelism..)
            .map(|(_, &seq)| seq)
            .collect();
        let mut bound_changed = false;
        for seq in excess {
            bound_changed |= self.jobs[job].bound.contains_key(&seq);
            self.delete_pod(seq);
        }
        let j = &self.jobs[job];
        let missing: Vec<u32> = (0..j.parallelism)
            .filter(|i| !j.by_index.contains_key(i))
            .collect();
        for index in missing {
            self.create_pod(job, index, now);
        }
        bound_changed
    }

    /// Deletes every pod of a finished job (its trainer Job is gone: parallelism 0).
    pub fn remove_job_pods(&mut self, job: usize) {
        self.jobs[job].parallelism = 0;
        let seqs: Vec<u64> = self.jobs[job].by_index.values().copied().collect();
        for seq in seqs {
            self.delete_pod(seq);
        }
    }

    fn fits(&self, node: usize, request: &Resources) -> bool {
        let n = &self.nodes[node];
        n.up && self
            .state
            .node(n.id)
            .is_some_and(|slot| slot.schedulable() && request.fits_in(&slot.free()))
    }

    fn bind(&mut self, seq: u64, node: usize, now: i64) {
        let Some((job, created)) = self.pods.get(&seq).map(|p| (p.job, p.created)) else {
            return;
        };
        self.pending_wait.0 += (now - created) as f64;
        self.pending_wait.1 += 1;
        self.pending.remove(&seq);
        let j = &mut self.jobs[job];
        j.pending.remove(&seq);
        j.bound.insert(seq, node);
        if let Some((key, info)) = self.pod_info(seq, Some(node)) {
            self.state.set_pod(key, Some(info));
        }
    }

    /// Undoes [`bind`](Self::bind) at `now` (a gang that did not fit whole).
    fn unbind(&mut self, seq: u64, now: i64) {
        let Some((job, created)) = self.pods.get(&seq).map(|p| (p.job, p.created)) else {
            return;
        };
        let j = &mut self.jobs[job];
        if j.bound.remove(&seq).is_none() {
            return;
        }
        self.pending_wait.0 -= (now - created) as f64;
        self.pending_wait.1 -= 1;
        j.pending.insert(seq);
        self.pending.insert(seq);
        if let Some((key, info)) = self.pod_info(seq, None) {
            self.state.set_pod(key, Some(info));
        }
    }

    /// Where one pod of `job` goes: the plan's node when it still fits, else the first node by name.
    fn pick(
        &self,
        job: usize,
        placements: &mut HashMap<usize, Vec<(usize, u32)>>,
    ) -> Option<usize> {
        let request = self.jobs[job].trainer;
        if let Some(places) = placements.get_mut(&job) {
            for (node, count) in places.iter_mut() {
                if *count > 0 && self.fits(*node, &request) {
                    *count -= 1;
                    return Some(*node);
                }
            }
        }
        (0..self.nodes.len()).find(|&n| self.fits(n, &request))
    }

    /// The kube-scheduler: binds pending pods in creation order, each on the node the plan placed
    /// it (`placements[job]`: node index and count), else on the first node (by name) it fits.
    ///
    /// With `gang` (the PodGroup the operator creates, `minMember` = min), a job below its
    /// `min[job]` trainers is bound all or nothing: up to min in one pass, or not at all.
    /// Returns the jobs that got pods bound, in job order.
    pub fn schedule(
        &mut self,
        placements: &mut HashMap<usize, Vec<(usize, u32)>>,
        min: &dyn Fn(usize) -> u32,
        gang: bool,
        now: i64,
    ) -> Vec<usize> {
        let order: Vec<u64> = self.pending.iter().copied().collect();
        // Requests that fitted nowhere in this pass: anything at least as large fits nowhere either.
        let mut no_fit: Vec<Resources> = Vec::new();
        let mut gang_failed = BTreeSet::new();
        let mut changed = BTreeSet::new();
        for seq in order {
            if !self.pending.contains(&seq) {
                continue;
            }
            let Some(job) = self.pods.get(&seq).map(|p| p.job) else {
                continue;
            };
            let request = self.jobs[job].trainer;
            if gang_failed.contains(&job) || no_fit.iter().any(|r| r.fits_in(&request)) {
                continue;
            }
            let need = min(job).saturating_sub(self.bound(job));
            if gang && need > 1 {
                let members: Vec<u64> = self.jobs[job]
                    .pending
                    .iter()
                    .copied()
                    .take(need as usize)
                    .collect();
                let mut done = Vec::new();
                for m in members {
                    match self.pick(job, placements) {
                        Some(node) => {
                            self.bind(m, node, now);
                            done.push(m);
                        }
                        None => break,
                    }
                }
                if done.len() < need as usize {
                    for m in done {
                        self.unbind(m, now);
                    }
                    gang_failed.insert(job);
                } else {
                    changed.insert(job);
                }
                continue;
            }
            match self.pick(job, placements) {
                Some(node) => {
                    self.bind(seq, node, now);
                    changed.insert(job);
                }
                None => no_fit.push(request),
            }
        }
        changed.into_iter().collect()
    }

    /// kube-scheduler's score of `node` for a pod requesting `request`, or `None` when it is
    /// filtered out (down, unschedulable, or the request does not fit its free CPU, memory or
    /// GPUs: NodeResourcesFit). The score is NodeResourcesFit's LeastAllocated plus
    /// NodeResourcesBalancedAllocation, each over CPU and memory with weight 1, in kube-scheduler's
    /// integer arithmetic: LeastAllocated = mean over the two of `(alloc − requested) · 100 /
    /// alloc`, BalancedAllocation = `(1 − std of requested / alloc) · 100`, where `requested`
    /// includes the pod.
    pub fn kube_score(&self, node: usize, request: &Resources) -> Option<i64> {
        let n = &self.nodes[node];
        let slot = self.state.node(n.id)?;
        if !n.up || !slot.schedulable() || !request.fits_in(&slot.free()) {
            return None;
        }
        let alloc = n.allocatable;
        let after = slot.used + *request;
        let least = |requested: i64, capacity: i64| -> i64 {
            if capacity <= 0 || requested > capacity {
                0
            } else {
                (capacity - requested) * 100 / capacity
            }
        };
        let least_allocated =
            (least(after.cpu_milli, alloc.cpu_milli) + least(after.memory, alloc.memory)) / 2;
        let fraction = |requested: i64, capacity: i64| -> f64 {
            if capacity <= 0 {
                0.0
            } else {
                (requested as f64 / capacity as f64).min(1.0)
            }
        };
        let (fc, fm) = (
            fraction(after.cpu_milli, alloc.cpu_milli),
            fraction(after.memory, alloc.memory),
        );
        // The standard deviation of two values is half their distance.
        let std = (fc - fm).abs() / 2.0;
        let balanced = ((1.0 - std) * 100.0) as i64;
        Some(least_allocated + balanced)
    }

    /// A model of kube-scheduler's default profile: pending pods one at a time in queue order
    /// (priority descending, then creation time, then name), each bound to the node of highest
    /// [`kube_score`](Self::kube_score), ties to the first by name; a pod that fits nowhere stays
    /// pending. No gangs: pods bind as they fit. Returns the jobs that got pods bound, in job
    /// order.
    pub fn schedule_kube(&mut self, now: i64) -> Vec<usize> {
        let mut order: Vec<(std::cmp::Reverse<i32>, i64, &str, u64)> = self
            .pending
            .iter()
            .filter_map(|seq| {
                let p = self.pods.get(seq)?;
                Some((
                    std::cmp::Reverse(self.jobs[p.job].priority),
                    p.created,
                    p.name.as_str(),
                    *seq,
                ))
            })
            .collect();
        order.sort();
        let order: Vec<u64> = order.into_iter().map(|(_, _, _, seq)| seq).collect();
        let mut no_fit: Vec<Resources> = Vec::new();
        let mut changed = BTreeSet::new();
        for seq in order {
            let Some(job) = self.pods.get(&seq).map(|p| p.job) else {
                continue;
            };
            let request = self.jobs[job].trainer;
            if no_fit.iter().any(|r| r.fits_in(&request)) {
                continue;
            }
            let mut best: Option<(i64, usize)> = None;
            for node in 0..self.nodes.len() {
                if let Some(score) = self.kube_score(node, &request)
                    && best.is_none_or(|(b, _)| score > b)
                {
                    best = Some((score, node));
                }
            }
            match best {
                Some((_, node)) => {
                    self.bind(seq, node, now);
                    changed.insert(job);
                }
                None => no_fit.push(request),
            }
        }
        changed.into_iter().collect()
    }

    /// A node fails: it turns NotReady, its pods are lost, and each job's controller recreates
    /// a pending pod for every lost index. Returns the jobs that lost trainers.
    pub fn fail_node(&mut self, node: usize, now: i64) -> Vec<usize> {
        self.set_up(node, false);
        let mut lost = BTreeSet::new();
        let victims: Vec<(u64, usize)> = self
            .jobs
            .iter()
            .enumerate()
            .flat_map(|(ji, j)| {
                j.bound
                    .iter()
                    .filter(|(_, n)| **n == node)
                    .map(move |(seq, _)| (*seq, ji))
            })
            .collect();
        for (seq, job) in victims {
            self.delete_pod(seq);
            lost.insert(job);
        }
        for &job in &lost {
            self.sync_job(job, now);
        }
        lost.into_iter().collect()
    }

    /// Sets a node Ready (`true`) or NotReady.
    pub fn set_up(&mut self, node: usize, up: bool) {
        let n = &mut self.nodes[node];
        n.up = up;
        let info = NodeInfo {
            allocatable: n.allocatable,
            schedulable: up,
        };
        let name = n.name.clone();
        self.state.set_node(&name, Some(info));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> World {
        let r = Resources::new(8000, 64 << 30, 4);
        World::new(vec![
            ("b".into(), "p".into(), r),
            ("a".into(), "p".into(), r),
        ])
    }

    fn node(w: &World, name: &str) -> usize {
        w.state
            .node_id_of(name)
            .and_then(|id| w.node_of_id(id))
            .unwrap()
    }

    /// The pending and the bound completion indexes of `job`, ascending, after checking that
    /// `state` holds exactly these pods, each with its index, its node, and a
    /// `<job>-trainer-<index>-<seq>` name.
    fn indexes(w: &World, job: usize) -> (Vec<u32>, Vec<u32>) {
        let j = &w.jobs[job];
        let mut want = Vec::new();
        for (&index, seq) in &j.by_index {
            let pod = &w.pods[seq];
            assert_eq!(pod.index, index);
            let node = j.bound.get(seq).map(|&n| w.nodes[n].name.clone());
            assert_eq!(j.pending.contains(seq), node.is_none());
            want.push((
                format!("{}-trainer-{index}-{seq}", j.key.name),
                Some(index),
                node,
            ));
        }
        assert_eq!(want.len(), j.pending.len() + j.bound.len());
        let mut got: Vec<(String, Option<u32>, Option<String>)> = w
            .state
            .pods()
            .filter(|(_, p)| p.owner.as_ref().is_some_and(|(k, _)| *k == j.key))
            .map(|((_, name), p)| (name.clone(), p.index, p.node.clone()))
            .collect();
        got.sort_by_key(|(_, index, _)| *index);
        assert_eq!(got, want);
        let of = |bound: bool| {
            want.iter()
                .filter(|(_, _, n)| n.is_some() == bound)
                .filter_map(|(_, i, _)| *i)
                .collect()
        };
        (of(false), of(true))
    }

    #[test]
    fn scale_down_removes_the_highest_indexes_bound_or_pending() {
        let mut w = world();
        let j = w.add_job(
            JobKey::new(NAMESPACE, "j"),
            Resources::new(1000, 1 << 30, 1),
        );
        let (a, b) = (node(&w, "a"), node(&w, "b"));
        assert!(!w.scale_to(j, 6, 0));
        assert_eq!(indexes(&w, j), (vec![0, 1, 2, 3, 4, 5], vec![]));
        assert_eq!(
            w.state.job(&w.jobs[j].key).map(|s| s.trainers.pending),
            Some(6)
        );
        // The plan puts two on b; the rest go first fit by name.
        let mut places = HashMap::from([(j, vec![(b, 2)])]);
        assert_eq!(w.schedule(&mut places, &|_| 1, true, 0), vec![j]);
        let on = |w: &World, n: usize| -> Vec<u32> {
            let mut v: Vec<u32> = w.jobs[j]
                .bound
                .iter()
                .filter(|(_, m)| **m == n)
                .map(|(seq, _)| w.pods[seq].index)
                .collect();
            v.sort();
            v
        };
        assert_eq!((on(&w, b), on(&w, a)), (vec![0, 1], vec![2, 3, 4, 5]));
        assert!(!w.scale_to(j, 10, 1));
        w.schedule(&mut HashMap::new(), &|_| 1, true, 0);
        assert_eq!(on(&w, b), vec![0, 1, 6, 7]);
        // b fails: 0, 1, 6 and 7 come back pending beside the still pending 8 and 9.
        w.fail_node(b, 2);
        assert_eq!(indexes(&w, j), (vec![0, 1, 6, 7, 8, 9], vec![2, 3, 4, 5]));
        // Down to 7: only pending pods are at 7 or above.
        assert!(!w.scale_to(j, 7, 3));
        assert_eq!(indexes(&w, j), (vec![0, 1, 6], vec![2, 3, 4, 5]));
        // Down to 3: bound 3, 4, 5 and pending 6 go; the lower pending 0 and 1 stay.
        assert!(w.scale_to(j, 3, 4));
        assert_eq!(indexes(&w, j), (vec![0, 1], vec![2]));
        assert_eq!((w.bound(j), w.live(j), w.pending_pods()), (1, 3, 2));
        assert_eq!(w.state.node(w.nodes[a].id).map(|s| s.free().gpu), Some(3));
    }

    #[test]
    fn a_failed_node_s_pods_come_back_with_their_indexes() {
        let mut w = world();
        let j = w.add_job(
            JobKey::new(NAMESPACE, "j"),
            Resources::new(1000, 1 << 30, 1),
        );
        let (a, b) = (node(&w, "a"), node(&w, "b"));
        w.scale_to(j, 3, 0);
        let mut places = HashMap::from([(j, vec![(b, 2)])]);
        w.schedule(&mut places, &|_| 1, true, 0);
        assert_eq!(indexes(&w, j), (vec![], vec![0, 1, 2]));
        let before: Vec<u64> = w.jobs[j].by_index.values().copied().collect();
        assert_eq!(w.fail_node(b, 5), vec![j]);
        assert_eq!(indexes(&w, j), (vec![0, 1], vec![2]));
        assert_eq!(
            w.state.node(w.nodes[b].id).map(|s| s.schedulable()),
            Some(false)
        );
        // New pods (new sequence, created now) for the same indexes; index 2's pod is untouched.
        let after: Vec<u64> = w.jobs[j].by_index.values().copied().collect();
        assert!(after[0] > before[2] && after[1] > before[2]);
        assert_eq!(after[2], before[2]);
        assert_eq!(w.pods[&after[0]].created, 5);
        w.schedule(&mut HashMap::new(), &|_| 1, true, 0);
        assert_eq!(indexes(&w, j), (vec![], vec![0, 1, 2]));
        assert!(w.jobs[j].bound.values().all(|n| *n == a));
    }

    #[test]
    fn scale_up_after_scale_down_recreates_the_freed_indexes() {
        let mut w = world();
        let j = w.add_job(
            JobKey::new(NAMESPACE, "j"),
            Resources::new(1000, 1 << 30, 1),
        );
        w.scale_to(j, 4, 0);
        w.schedule(&mut HashMap::new(), &|_| 1, true, 0);
        assert!(w.scale_to(j, 2, 1));
        assert_eq!(indexes(&w, j), (vec![], vec![0, 1]));
        assert!(!w.scale_to(j, 5, 2));
        assert_eq!(indexes(&w, j), (vec![2, 3, 4], vec![0, 1]));
        // Created in ascending index order.
        let seqs: Vec<u64> = w.jobs[j].pending.iter().copied().collect();
        let order: Vec<u32> = seqs.iter().map(|s| w.pods[s].index).collect();
        assert_eq!(order, vec![2, 3, 4]);
        w.schedule(&mut HashMap::new(), &|_| 1, true, 0);
        assert_eq!(indexes(&w, j), (vec![], vec![0, 1, 2, 3, 4]));
        w.remove_job_pods(j);
        assert_eq!(indexes(&w, j), (vec![], vec![]));
        assert_eq!(w.state.pod_count(), 0);
    }
}

#[cfg(test)]
mod gang_tests {
    use super::*;

    #[test]
    fn a_gang_below_min_binds_all_or_nothing() {
        let r = Resources::new(8000, 64 << 30, 4);
        let mut w = World::new(vec![("a".into(), "p".into(), r)]);
        let t = Resources::new(1000, 1 << 30, 1);
        let small = w.add_job(JobKey::new(NAMESPACE, "small"), t);
        let big = w.add_job(JobKey::new(NAMESPACE, "big"), t);
        let late = w.add_job(JobKey::new(NAMESPACE, "late"), t);
        w.scale_to(small, 1, 0);
        w.scale_to(big, 4, 0);
        w.scale_to(late, 1, 0);
        let mins = |j: usize| if j == 1 { 4 } else { 1 };
        assert_eq!(
            w.schedule(&mut HashMap::new(), &mins, true, 0),
            vec![small, late]
        );
        assert_eq!((w.bound(small), w.bound(big), w.bound(late)), (1, 0, 1));
        // Without gangs the big job grabs what is left.
        assert_eq!(w.schedule(&mut HashMap::new(), &mins, false, 0), vec![big]);
        assert_eq!(w.bound(big), 2);
    }
}

#[cfg(test)]
mod kube_tests {
    use super::*;

    fn node(w: &World, name: &str) -> usize {
        w.nodes.iter().position(|n| n.name == name).unwrap()
    }

    #[test]
    fn scores_are_least_allocated_plus_balanced_allocation() {
        let r = Resources::new(10_000, 100 << 30, 8);
        let mut w = World::new(vec![
            ("a".into(), "p".into(), r),
            ("b".into(), "p".into(), r),
        ]);
        let a = node(&w, "a");
        // Empty node, pod of 2 cores and 10 GiB: least (80 + 90) / 2 = 85; balanced
        // (1 - |0.2 - 0.1| / 2) * 100 = 95.
        let pod = Resources::new(2000, 10 << 30, 1);
        assert_eq!(w.kube_score(a, &pod), Some(85 + 95));
        // Too many GPUs: filtered.
        assert_eq!(w.kube_score(a, &Resources::new(1000, 1 << 30, 9)), None);
        w.set_up(a, false);
        assert_eq!(w.kube_score(a, &pod), None);
    }

    /// The pods of one job spread over the emptiest nodes (LeastAllocated), in queue order
    /// priority, creation time, name; a pod that fits nowhere stays pending, with no gang.
    #[test]
    fn pods_spread_and_bind_without_gangs() {
        let r = Resources::new(96_000, 768 << 30, 8);
        let mut w = World::new(vec![
            ("a".into(), "p".into(), r),
            ("b".into(), "p".into(), r),
        ]);
        let t = Resources::new(40_000, 300 << 30, 4);
        let j = w.add_job(JobKey::new(NAMESPACE, "j"), t);
        w.scale_to(j, 2, 0);
        assert_eq!(w.schedule_kube(10), vec![j]);
        assert_eq!(w.nodes_spanned(j), 2);
        assert_eq!(w.pending_wait, (20.0, 2));
        // A gang of three 4-GPU trainers gets two places; the third waits, bound pods stay.
        let big = w.add_job(JobKey::new(NAMESPACE, "big"), t);
        let high = w.add_job(JobKey::new(NAMESPACE, "high"), t);
        w.jobs[high].priority = 10;
        w.scale_to(big, 3, 20);
        w.scale_to(high, 1, 30);
        assert_eq!(w.schedule_kube(40), vec![big, high]);
        // high went first (priority), then big's first pod; big's others fit nowhere.
        assert_eq!((w.bound(high), w.bound(big), w.pending_pods()), (1, 1, 2));
    }
}
