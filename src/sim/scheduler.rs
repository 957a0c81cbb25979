//! The simulated Kubernetes around the planner: the trainer Job controller (creates and deletes
//! trainer pods to match `parallelism`), the kube-scheduler (binds pending pods), and node
//! failures. Every change goes through [`ClusterState`]'s setters, as a watch stream would deliver
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

/// The trainer pods of one job, by creation sequence.
#[derive(Debug, Clone, Default)]
pub struct JobPods {
    pub key: JobKey,
    pub trainer: Resources,
    /// Pods not bound to a node.
    pub pending: BTreeSet<u64>,
    /// Bound pods and their node index.
    pub bound: BTreeMap<u64, usize>,
}

#[derive(Debug, Clone)]
struct SimPod {
    job: usize,
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
                index: None,
            },
        ))
    }

    /// The job controller: creates `n` pending trainer pods.
    pub fn create_pods(&mut self, job: usize, n: u32, now: i64) {
        for _ in 0..n {
            let seq = self.next_seq;
            self.next_seq += 1;
            let name = format!("{}-trainer-{seq}", self.jobs[job].key.name);
            self.pods.insert(
                seq,
                SimPod {
                    job,
                    name,
                    created: now,
                },
            );
            self.jobs[job].pending.insert(seq);
            self.pending.insert(seq);
            if let Some((key, info)) = self.pod_info(seq, None) {
                self.state.set_pod(key, Some(info));
            }
        }
    }

    fn delete_pod(&mut self, seq: u64) {
        let Some(pod) = self.pods.remove(&seq) else {
            return;
        };
        let j = &mut self.jobs[pod.job];
        j.pending.remove(&seq);
        j.bound.remove(&seq);
        self.pending.remove(&seq);
        self.state.set_pod((NAMESPACE.to_string(), pod.name), None);
    }

    /// The job controller after `parallelism` changed: creates pods up to `target`, or deletes
    /// pods down to it, pending ones first, then the newest. Returns whether a bound pod went.
    pub fn scale_to(&mut self, job: usize, target: u32, now: i64) -> bool {
        let live = self.live(job);
        if target > live {
            self.create_pods(job, target - live, now);
            return false;
        }
        let mut excess = live - target;
        let mut bound_changed = false;
        while excess > 0 {
            let j = &self.jobs[job];
            let victim = match j.pending.last() {
                Some(&seq) => seq,
                None => match j.bound.last_key_value() {
                    Some((&seq, _)) => {
                        bound_changed = true;
                        seq
                    }
                    None => break,
                },
            };
            self.delete_pod(victim);
            excess -= 1;
        }
        bound_changed
    }

    /// Deletes every pod of a finished job.
    pub fn remove_job_pods(&mut self, job: usize) {
        let j = &self.jobs[job];
        let seqs: Vec<u64> = j.pending.iter().chain(j.bound.keys()).copied().collect();
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

    fn bind(&mut self, seq: u64, node: usize) {
        let Some(job) = self.pods.get(&seq).map(|p| p.job) else {
            return;
        };
        self.pending.remove(&seq);
        let j = &mut self.jobs[job];
        j.pending.remove(&seq);
        j.bound.insert(seq, node);
        if let Some((key, info)) = self.pod_info(seq, Some(node)) {
            self.state.set_pod(key, Some(info));
        }
    }

    fn unbind(&mut self, seq: u64) {
        let Some(job) = self.pods.get(&seq).map(|p| p.job) else {
            return;
        };
        let j = &mut self.jobs[job];
        if j.bound.remove(&seq).is_none() {
            return;
        }
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
                            self.bind(m, node);
                            done.push(m);
                        }
                        None => break,
                    }
                }
                if done.len() < need as usize {
                    for m in done {
                        self.unbind(m);
                    }
                    gang_failed.insert(job);
                } else {
                    changed.insert(job);
                }
                continue;
            }
            match self.pick(job, placements) {
                Some(node) => {
                    self.bind(seq, node);
                    changed.insert(job);
                }
                None => no_fit.push(request),
            }
        }
        changed.into_iter().collect()
    }

    /// A node fails: it turns NotReady, its pods are lost, and each job's controller recreates
    /// them as pending pods. Returns the jobs that lost trainers.
    pub fn fail_node(&mut self, node: usize, now: i64) -> Vec<usize> {
        self.set_up(node, false);
        let mut lost: BTreeMap<usize, u32> = BTreeMap::new();
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
            *lost.entry(job).or_default() += 1;
        }
        for (&job, &n) in &lost {
            self.create_pods(job, n, now);
        }
        lost.into_keys().collect()
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

    #[test]
    fn first_fit_by_name_then_pending_first_newest_removal() {
        let mut w = world();
        let j = w.add_job(
            JobKey::new(NAMESPACE, "j"),
            Resources::new(1000, 1 << 30, 1),
        );
        w.create_pods(j, 6, 0);
        assert_eq!(
            w.state.job(&w.jobs[j].key).map(|s| s.trainers.pending),
            Some(6)
        );
        assert_eq!(w.schedule(&mut HashMap::new(), &|_| 1, true), vec![j]);
        assert_eq!(w.bound(j), 6);
        let a = w.node_of_id(w.state.node_id_of("a").unwrap()).unwrap();
        assert_eq!(w.jobs[j].bound.values().filter(|n| **n == a).count(), 4);
        w.create_pods(j, 4, 1);
        w.schedule(&mut HashMap::new(), &|_| 1, true);
        assert_eq!((w.bound(j), w.live(j)), (8, 10));
        // Down to 7: the two pending go, then the newest bound one.
        assert!(w.scale_to(j, 7, 2));
        assert_eq!((w.bound(j), w.live(j)), (7, 7));
        assert_eq!(w.jobs[j].bound.keys().max(), Some(&6));
        let slot = w.state.node(w.nodes[a].id).unwrap();
        assert_eq!(slot.free().gpu, 0);
    }

    #[test]
    fn placements_win_and_failures_recreate_pods() {
        let mut w = world();
        let j = w.add_job(
            JobKey::new(NAMESPACE, "j"),
            Resources::new(1000, 1 << 30, 1),
        );
        w.create_pods(j, 2, 0);
        let b = w.node_of_id(w.state.node_id_of("b").unwrap()).unwrap();
        let mut places = HashMap::from([(j, vec![(b, 2)])]);
        w.schedule(&mut places, &|_| 1, true);
        assert!(w.jobs[j].bound.values().all(|n| *n == b));
        assert_eq!(w.fail_node(b, 5), vec![j]);
        assert_eq!((w.bound(j), w.live(j)), (0, 2));
        assert_eq!(
            w.state.node(w.nodes[b].id).map(|s| s.schedulable()),
            Some(false)
        );
        w.schedule(&mut HashMap::new(), &|_| 1, true);
        assert!(w.jobs[j].bound.values().all(|n| *n != b));
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
        w.create_pods(small, 1, 0);
        w.create_pods(big, 4, 0);
        w.create_pods(late, 1, 0);
        let mins = |j: usize| if j == 1 { 4 } else { 1 };
        assert_eq!(
            w.schedule(&mut HashMap::new(), &mins, true),
            vec![small, late]
        );
        assert_eq!((w.bound(small), w.bound(big), w.bound(late)), (1, 0, 1));
        // Without gangs the big job grabs what is left.
        assert_eq!(w.schedule(&mut HashMap::new(), &mins, false), vec![big]);
        assert_eq!(w.bound(big), 2);
    }
}
