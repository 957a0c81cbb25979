//! Kueue's quota as the cluster model holds it: ResourceFlavors, ClusterQueues, LocalQueues and
//! Workloads, kept one object at a time, with each ClusterQueue's usage per flavor and resource
//! and each Kueue-managed job's admission.
//!
//! A job is managed by Kueue when it (or, for the kinds trainscale's operator runs as trainer
//! Jobs, its trainer Job) carries the label `kueue.x-k8s.io/queue-name` and at least one
//! ClusterQueue is known: without Kueue objects nothing changes. Such a job is planned only
//! while Kueue has admitted it ([`Admission::Admitted`], [`Admission::SlicePending`]); it is
//! left alone otherwise (see [`QuotaModel::held`]).
//!
//! Updates cost the objects they touch: a Workload event updates its queue's usage and
//! re-derives its job; a LocalQueue event re-derives the jobs naming it; a ClusterQueue event the
//! jobs of the LocalQueues pointing to it (every labelled job when the first ClusterQueue comes
//! or the last goes).

mod admission;
mod read;
mod room;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::api::kueue::QUEUE_NAME_LABEL;
use crate::api::{JobKey, JobKind};
use crate::cluster::kinds::LeftAlone;

pub use admission::{Admission, derive};
pub use read::{
    FlavorResource, Flavors, Group, LocalQueueInfo, OwnerKey, PerResource, QueueInfo, Quota,
    ResourceQuotas, WorkerSet, WorkloadInfo, amount_of, read_cluster_queue, read_local_queue,
    read_workload,
};
pub use room::{Need, Owed, QueueId, QuotaRoom, Standing, Stop};

/// The field a job's queue is named in, on the job object.
pub const QUEUE_FIELD: &str = "metadata.labels[kueue.x-k8s.io/queue-name]";
/// The field a job's queue is named in, on its trainer Job.
pub const TRAINER_QUEUE_FIELD: &str =
    "metadata.labels[kueue.x-k8s.io/queue-name] of its trainer Job";
/// The field that says a job is not admitted.
pub const ADMISSION_FIELD: &str = "status.admission of its Workload";
/// The field that says Kueue is moving a job.
pub const CONDITIONS_FIELD: &str = "status.conditions of its Workload";

/// What a planned Kueue-managed job brings to the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKueue {
    pub local_queue: Arc<str>,
    /// The ClusterQueue its active slice is admitted to.
    pub cluster_queue: Arc<str>,
    /// [`Admission::Admitted`] or [`Admission::SlicePending`].
    pub admission: Admission,
    /// The active slice's name.
    pub workload: Arc<str>,
    /// The active slice's worker pod set: flavors assigned and what each pod is charged.
    pub worker: WorkerSet,
}

impl JobKueue {
    /// Workers Kueue admitted.
    pub fn admitted(&self) -> i32 {
        match self.admission {
            Admission::Admitted { count } => count,
            Admission::SlicePending { admitted_count, .. } => admitted_count,
            Admission::NotAdmitted | Admission::InFlight(_) => 0,
        }
    }

    /// Whether the job asks for more than Kueue admitted (a scale-up slice waits, or Kueue has
    /// not made one yet): it is not resized until that settles.
    pub fn awaiting(&self, current: i32) -> bool {
        matches!(self.admission, Admission::SlicePending { .. }) || current > self.admitted()
    }
}

/// The queue labels of one job, and what they derive.
#[derive(Debug, Clone, Default)]
struct JobEntry {
    /// The label on the job object.
    label: Option<Arc<str>>,
    /// Its trainer Job: name, and the label on it.
    trainer_job: Option<(Arc<str>, Option<Arc<str>>)>,
    /// The LocalQueue (namespace, name) it is indexed under in `by_local_queue`.
    indexed: Option<(Arc<str>, Arc<str>)>,
    admission: Option<Admission>,
    held: Option<LeftAlone>,
    planned: Option<Arc<JobKueue>>,
}

impl JobEntry {
    /// The LocalQueue name Kueue reads, and the field it is read from.
    fn queue(&self) -> Option<(&Arc<str>, &'static str)> {
        match &self.trainer_job {
            Some((_, Some(label))) => Some((label, TRAINER_QUEUE_FIELD)),
            _ => self.label.as_ref().map(|l| (l, QUEUE_FIELD)),
        }
    }
}

/// Kueue's objects and what they say of jobs.
#[derive(Debug, Clone, Default)]
pub struct QuotaModel {
    flavors: BTreeSet<Arc<str>>,
    queues: BTreeMap<Arc<str>, Arc<QueueInfo>>,
    /// (namespace, name) → ClusterQueue name.
    local_queues: BTreeMap<(Arc<str>, Arc<str>), Arc<str>>,
    workloads: BTreeMap<(Arc<str>, Arc<str>), WorkloadInfo>,
    /// Workload names by the owner they name (same namespace).
    owned: BTreeMap<OwnerKey, BTreeSet<Arc<str>>>,
    /// Per ClusterQueue name: the quota held, per flavor and resource.
    usage: BTreeMap<Arc<str>, BTreeMap<FlavorResource, i64>>,
    jobs: BTreeMap<JobKey, JobEntry>,
    /// Trainer Job (namespace, name) → its job.
    trainer_jobs: BTreeMap<(Arc<str>, Arc<str>), JobKey>,
    /// Jobs by the LocalQueue (namespace, name) they name.
    by_local_queue: BTreeMap<(Arc<str>, Arc<str>), BTreeSet<JobKey>>,
    /// How many jobs are held (so `held` costs nothing when none is).
    held_count: usize,
}

impl QuotaModel {
    /// Whether quota limits anything: at least one ClusterQueue is known.
    pub fn active(&self) -> bool {
        !self.queues.is_empty()
    }

    /// Why job `key` is left alone on Kueue's account, if it is.
    pub fn held(&self, key: &JobKey) -> Option<&LeftAlone> {
        if self.held_count == 0 {
            return None;
        }
        self.jobs.get(key).and_then(|e| e.held.as_ref())
    }

    /// What a planned Kueue-managed job brings to the planner; `None` for other jobs.
    pub fn job(&self, key: &JobKey) -> Option<&JobKueue> {
        if !self.active() {
            return None;
        }
        self.jobs.get(key).and_then(|e| e.planned.as_deref())
    }

    /// The admission of a Kueue-managed job whose queues exist.
    pub fn admission(&self, key: &JobKey) -> Option<&Admission> {
        self.jobs.get(key).and_then(|e| e.admission.as_ref())
    }

    /// The ClusterQueues, by name.
    pub fn cluster_queues(&self) -> impl Iterator<Item = &QueueInfo> + '_ {
        self.queues.values().map(|q| &**q)
    }

    /// A ClusterQueue by name.
    pub fn cluster_queue(&self, name: &str) -> Option<&QueueInfo> {
        self.queues.get(name).map(|q| &**q)
    }

    /// The quota held in ClusterQueue `name` per flavor and resource (reserved, unfinished
    /// Workloads).
    pub fn usage(&self, name: &str) -> Option<&BTreeMap<FlavorResource, i64>> {
        self.usage.get(name)
    }

    /// Whether a ResourceFlavor of that name exists.
    pub fn flavor_exists(&self, name: &str) -> bool {
        self.flavors.contains(name)
    }

    /// Workloads waiting for their first admission (not holding quota, not finished, not a
    /// scale-up slice), with the ClusterQueue their LocalQueue submits to.
    pub fn waiting(&self) -> impl Iterator<Item = (&Arc<str>, &WorkloadInfo)> + '_ {
        self.workloads.values().filter_map(|w| {
            if w.reserved || w.finished || w.replaces.is_some() {
                return None;
            }
            let local = (Arc::clone(&w.namespace), Arc::clone(w.queue_name.as_ref()?));
            self.local_queues.get(&local).map(|cq| (cq, w))
        })
    }

    /// A Workload by namespace and name.
    pub fn workload(&self, namespace: &str, name: &str) -> Option<&WorkloadInfo> {
        let key: (Arc<str>, Arc<str>) = (Arc::from(namespace), Arc::from(name));
        self.workloads.get(&key)
    }

    // ----- objects -----

    /// Adds or updates a ResourceFlavor.
    pub fn apply_flavor(&mut self, name: &str) {
        if !name.is_empty() {
            self.flavors.insert(Arc::from(name));
        }
    }

    /// Removes a ResourceFlavor.
    pub fn delete_flavor(&mut self, name: &str) {
        self.flavors.remove(name);
    }

    /// Adds or updates a ClusterQueue (read with [`read_cluster_queue`]); returns the jobs that
    /// became left alone.
    pub fn put_cluster_queue(&mut self, info: QueueInfo) -> Vec<JobKey> {
        let first = !self.active();
        let name = Arc::clone(&info.name);
        let known = self.queues.contains_key(&name);
        self.queues.insert(Arc::clone(&name), Arc::new(info));
        if first {
            self.refresh_all()
        } else if known {
            Vec::new()
        } else {
            self.refresh_cluster_queue(&name)
        }
    }

    /// Removes a ClusterQueue; returns the jobs that became left alone.
    pub fn delete_cluster_queue(&mut self, name: &str) -> Vec<JobKey> {
        if self.queues.remove(name).is_none() {
            return Vec::new();
        }
        if self.active() {
            self.refresh_cluster_queue(name)
        } else {
            self.refresh_all()
        }
    }

    /// Adds or updates LocalQueue `namespace/name` submitting to ClusterQueue `cq`; returns the
    /// jobs that became left alone.
    pub fn put_local_queue(&mut self, namespace: &str, name: &str, cq: &str) -> Vec<JobKey> {
        let key: (Arc<str>, Arc<str>) = (Arc::from(namespace), Arc::from(name));
        if self.local_queues.get(&key).is_some_and(|c| &**c == cq) {
            return Vec::new();
        }
        self.local_queues.insert(key.clone(), Arc::from(cq));
        self.refresh_local_queue(&key)
    }

    /// Removes a LocalQueue; returns the jobs that became left alone.
    pub fn delete_local_queue(&mut self, namespace: &str, name: &str) -> Vec<JobKey> {
        let key: (Arc<str>, Arc<str>) = (Arc::from(namespace), Arc::from(name));
        if self.local_queues.remove(&key).is_none() {
            return Vec::new();
        }
        self.refresh_local_queue(&key)
    }

    /// Adds or updates a Workload (read with [`read_workload`]); returns the jobs that became
    /// left alone.
    pub fn put_workload(&mut self, info: WorkloadInfo) -> Vec<JobKey> {
        let key = (Arc::clone(&info.namespace), Arc::clone(&info.name));
        let old = self.workloads.remove(&key);
        if let Some(old) = &old {
            self.forget_workload(old);
        }
        self.index_workload(&info);
        let owners = [old.and_then(|w| w.owner), info.owner.clone()];
        self.workloads.insert(key, info);
        self.refresh_owners(owners)
    }

    /// Removes a Workload; returns the jobs that became left alone.
    pub fn delete_workload(&mut self, namespace: &str, name: &str) -> Vec<JobKey> {
        let key = (Arc::from(namespace), Arc::from(name));
        let Some(old) = self.workloads.remove(&key) else {
            return Vec::new();
        };
        self.forget_workload(&old);
        self.refresh_owners([old.owner, None])
    }

    /// Counts a Workload's usage and files it under its owner.
    fn index_workload(&mut self, info: &WorkloadInfo) {
        if let Some(owner) = &info.owner {
            self.owned
                .entry(owner.clone())
                .or_default()
                .insert(Arc::clone(&info.name));
        }
        self.add_usage(info, 1);
    }

    /// Takes a Workload's usage back and removes it from its owner's list.
    fn forget_workload(&mut self, info: &WorkloadInfo) {
        if let Some(owner) = &info.owner
            && let Some(names) = self.owned.get_mut(owner)
        {
            names.remove(&info.name);
            if names.is_empty() {
                self.owned.remove(owner);
            }
        }
        self.add_usage(info, -1);
    }

    fn add_usage(&mut self, info: &WorkloadInfo, sign: i64) {
        let Some(cq) = info.cluster_queue.as_ref().filter(|_| info.holds_quota()) else {
            return;
        };
        let usage = self.usage.entry(Arc::clone(cq)).or_default();
        for (fr, amount) in &info.usage {
            let slot = usage.entry(fr.clone()).or_insert(0);
            *slot = slot.saturating_add(amount.saturating_mul(sign));
            if *slot == 0 {
                usage.remove(fr);
            }
        }
        if usage.is_empty() {
            self.usage.remove(cq);
        }
    }

    // ----- jobs -----

    /// Records the queue label of job `key`'s object (`None`: unlabelled); returns the jobs that
    /// became left alone.
    pub fn set_job_label(&mut self, key: &JobKey, label: Option<&str>) -> Vec<JobKey> {
        let label = label.filter(|l| !l.is_empty());
        match self.jobs.get_mut(key) {
            Some(entry) => {
                if entry.label.as_deref() == label {
                    return Vec::new();
                }
                entry.label = label.map(Arc::from);
            }
            None => {
                let Some(label) = label else {
                    return Vec::new();
                };
                self.jobs.insert(
                    key.clone(),
                    JobEntry {
                        label: Some(Arc::from(label)),
                        ..JobEntry::default()
                    },
                );
            }
        }
        self.refresh_jobs([key.clone()])
    }

    /// Records job `key`'s trainer Job `name` and its queue label; returns the jobs that became
    /// left alone.
    pub fn set_trainer_job(
        &mut self,
        key: &JobKey,
        name: &str,
        label: Option<&str>,
    ) -> Vec<JobKey> {
        let trainer = (
            Arc::from(name),
            label.filter(|l| !l.is_empty()).map(Arc::from),
        );
        let entry = self.jobs.entry(key.clone()).or_default();
        if entry.trainer_job.as_ref() == Some(&trainer) {
            return Vec::new();
        }
        if let Some((old, _)) = entry.trainer_job.replace(trainer.clone()) {
            self.trainer_jobs.remove(&(Arc::clone(&key.namespace), old));
        }
        self.trainer_jobs
            .insert((Arc::clone(&key.namespace), trainer.0), key.clone());
        self.refresh_jobs([key.clone()])
    }

    /// Forgets job `key`'s trainer Job; returns the jobs that became left alone.
    pub fn clear_trainer_job(&mut self, key: &JobKey) -> Vec<JobKey> {
        let Some(entry) = self.jobs.get_mut(key) else {
            return Vec::new();
        };
        match entry.trainer_job.take() {
            Some((name, _)) => {
                self.trainer_jobs
                    .remove(&(Arc::clone(&key.namespace), name));
                self.refresh_jobs([key.clone()])
            }
            None => Vec::new(),
        }
    }

    /// Forgets job `key`'s object (it was deleted).
    pub fn remove_job(&mut self, key: &JobKey) {
        if let Some(entry) = self.jobs.get_mut(key) {
            entry.label = None;
            self.refresh_jobs([key.clone()]);
        }
    }

    /// The job a Workload's owner stands for: a job object, or a trainer Job of one.
    fn job_of(&self, owner: &OwnerKey) -> Option<JobKey> {
        if &*owner.kind == "Job"
            && &*owner.api_version == "batch/v1"
            && let Some(key) = self
                .trainer_jobs
                .get(&(Arc::clone(&owner.namespace), Arc::clone(&owner.name)))
        {
            return Some(key.clone());
        }
        JobKind::of(&owner.kind, &owner.api_version).map(|kind| {
            JobKey::of_kind(kind, Arc::clone(&owner.namespace), Arc::clone(&owner.name))
        })
    }

    /// The owners a job's Workloads name: the job object, and its trainer Job.
    fn owners_of(key: &JobKey, entry: &JobEntry) -> [Option<OwnerKey>; 2] {
        let own = OwnerKey {
            namespace: Arc::clone(&key.namespace),
            api_version: Arc::from(key.kind.api_version()),
            kind: Arc::from(key.kind.as_str()),
            name: Arc::clone(&key.name),
        };
        let trainer = entry.trainer_job.as_ref().map(|(name, _)| OwnerKey {
            namespace: Arc::clone(&key.namespace),
            api_version: Arc::from("batch/v1"),
            kind: Arc::from("Job"),
            name: Arc::clone(name),
        });
        [Some(own), trainer]
    }

    fn refresh_owners(&mut self, owners: [Option<OwnerKey>; 2]) -> Vec<JobKey> {
        let keys: Vec<JobKey> = owners
            .iter()
            .flatten()
            .filter_map(|o| self.job_of(o))
            .filter(|k| self.jobs.contains_key(k))
            .collect();
        self.refresh_jobs(keys)
    }

    fn refresh_local_queue(&mut self, lq: &(Arc<str>, Arc<str>)) -> Vec<JobKey> {
        let keys: Vec<JobKey> = self
            .by_local_queue
            .get(lq)
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default();
        self.refresh_jobs(keys)
    }

    fn refresh_cluster_queue(&mut self, cq: &str) -> Vec<JobKey> {
        let keys: Vec<JobKey> = self
            .local_queues
            .iter()
            .filter(|(_, target)| &***target == cq)
            .filter_map(|(lq, _)| self.by_local_queue.get(lq))
            .flat_map(|k| k.iter().cloned())
            .collect();
        self.refresh_jobs(keys)
    }

    fn refresh_all(&mut self) -> Vec<JobKey> {
        let keys: Vec<JobKey> = self.jobs.keys().cloned().collect();
        self.refresh_jobs(keys)
    }

    /// Re-derives the given jobs; returns those that became left alone.
    fn refresh_jobs(&mut self, keys: impl IntoIterator<Item = JobKey>) -> Vec<JobKey> {
        let mut newly_held = Vec::new();
        for key in keys {
            let Some(entry) = self.jobs.get(&key) else {
                continue;
            };
            let was_held = entry.held.is_some();
            let queue = entry.queue().map(|(q, f)| (Arc::clone(q), f));
            let indexed = queue
                .as_ref()
                .map(|(q, _)| (Arc::clone(&key.namespace), Arc::clone(q)));
            let (admission, held, planned) = match &queue {
                Some((queue, field)) if self.active() => self.derive_job(&key, entry, queue, field),
                _ => (None, None, None),
            };
            let old_index = entry.indexed.clone();
            let empty = queue.is_none() && entry.trainer_job.is_none();
            if old_index != indexed {
                if let Some(old) = &old_index
                    && let Some(set) = self.by_local_queue.get_mut(old)
                {
                    set.remove(&key);
                    if set.is_empty() {
                        self.by_local_queue.remove(old);
                    }
                }
                if let Some(new) = &indexed {
                    self.by_local_queue
                        .entry(new.clone())
                        .or_default()
                        .insert(key.clone());
                }
            }
            let now_held = held.is_some();
            if was_held != now_held {
                if now_held {
                    self.held_count += 1;
                    newly_held.push(key.clone());
                } else {
                    self.held_count -= 1;
                }
            }
            if empty {
                self.jobs.remove(&key);
                continue;
            }
            if let Some(entry) = self.jobs.get_mut(&key) {
                entry.indexed = indexed;
                entry.admission = admission;
                entry.held = held;
                entry.planned = planned;
            }
        }
        newly_held
    }

    /// A labelled job's admission, why it is left alone (if it is), and what it brings to the
    /// planner (if it is planned).
    fn derive_job(
        &self,
        key: &JobKey,
        entry: &JobEntry,
        queue: &Arc<str>,
        field: &'static str,
    ) -> (Option<Admission>, Option<LeftAlone>, Option<Arc<JobKueue>>) {
        let lq = (Arc::clone(&key.namespace), Arc::clone(queue));
        let Some(cq) = self.local_queues.get(&lq) else {
            let why = format!(
                "names LocalQueue {}/{queue}, which does not exist: Kueue admits none of its pods",
                key.namespace
            );
            return (None, Some(announced(field, why)), None);
        };
        if !self.queues.contains_key(cq) {
            let why = format!(
                "names LocalQueue {}/{queue}, whose ClusterQueue {cq} does not exist: Kueue \
                 admits none of its pods",
                key.namespace
            );
            return (None, Some(announced(field, why)), None);
        }
        let workloads: Vec<&WorkloadInfo> = Self::owners_of(key, entry)
            .iter()
            .flatten()
            .filter_map(|o| self.owned.get(o))
            .flatten()
            .filter_map(|name| {
                self.workloads
                    .get(&(Arc::clone(&key.namespace), Arc::clone(name)))
            })
            .collect();
        let (admission, active) = derive(&workloads);
        let planned = match (&admission, active) {
            (Admission::Admitted { .. } | Admission::SlicePending { .. }, Some(active)) => {
                Some(Arc::new(JobKueue {
                    local_queue: Arc::clone(queue),
                    cluster_queue: active
                        .cluster_queue
                        .clone()
                        .unwrap_or_else(|| Arc::clone(cq)),
                    admission: admission.clone(),
                    workload: Arc::clone(&active.name),
                    worker: active.worker.clone().unwrap_or(WorkerSet {
                        asked: 0,
                        admitted: 0,
                        flavors: Vec::new(),
                        per_pod: Vec::new(),
                    }),
                }))
            }
            _ => None,
        };
        let held = match &admission {
            Admission::NotAdmitted => {
                let pending = workloads.iter().filter(|w| !w.finished).count();
                let why = if pending == 0 {
                    format!("not admitted by Kueue (ClusterQueue {cq}): no Workload yet")
                } else {
                    format!(
                        "not admitted by Kueue (ClusterQueue {cq}): its Workload waits for quota"
                    )
                };
                Some(silent(ADMISSION_FIELD, why))
            }
            Admission::InFlight(why) => Some(silent(CONDITIONS_FIELD, why.clone())),
            Admission::Admitted { .. } | Admission::SlicePending { .. } => None,
        };
        (Some(admission), held, planned)
    }
}

/// A reason to leave a job alone that the daemon announces (a misconfiguration).
fn announced(field: &'static str, why: String) -> LeftAlone {
    LeftAlone {
        field,
        why,
        announce: true,
    }
}

/// A reason to leave a job alone that is the ordinary course of things.
fn silent(field: &'static str, why: String) -> LeftAlone {
    LeftAlone {
        field,
        why,
        announce: false,
    }
}

/// The queue label of an object's labels.
pub fn queue_label(labels: &BTreeMap<String, String>) -> Option<&str> {
    labels.get(QUEUE_NAME_LABEL).map(String::as_str)
}
