//! The daemon's view of the cluster: `ClusterState` fed event by event from the watch streams,
//! plus the few facts the actuator needs that the planner does not (object names, uids,
//! resourceVersions, where a job object keeps its size).
//!
//! Watch restarts are absorbed here: an `Init` starts collecting the keys re-listed for that kind,
//! and `InitDone` deletes every object of the kind that was not re-listed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::runtime::watcher::Event;

use kube::api::DynamicObject;

use crate::api::kueue::{ClusterQueue, KueueKind, LocalQueue, ResourceFlavor, Workload};
use crate::api::progress::is_progress_field;
use crate::api::{FieldError, JobKey, JobKind, TrainingJobPhase};
use crate::cluster::kinds::{JobAdapter, JobObject, SizeAt, decode_dynamic, priority_field};
use crate::cluster::objects::{read_trainer_job, suspended_by_others, trainer_constraints};
use crate::cluster::{ClusterState, Role};

use super::scheduling::SchedulingPods;
use super::sizing::{Decision, Known, Written};
use crate::planner::{JobPlan, aligned};

/// The kinds the daemon watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Node,
    /// Pods of the watched namespace (all namespaces without `--namespace`).
    Pod,
    /// batch/v1 Jobs: the trainer Jobs and, with [`JobKind::BatchJob`] sized, the elastic Jobs.
    Job,
    PriorityClass,
    /// With `--namespace`: pods of other namespaces bound to a node, which hold its capacity.
    ForeignPod,
    /// The objects of a job kind with a watch of its own ([`JobKind::has_own_watch`]).
    JobObject(JobKind),
    /// Kueue's quota and admission objects, watched once discovery finds Kueue.
    Kueue(KueueKind),
}

/// The kinds before the job kinds (`Kind::JobObject`).
const FIXED_KINDS: usize = 5;
const KINDS: usize = FIXED_KINDS + JobKind::COUNT + KueueKind::COUNT;

impl Kind {
    /// The resource its watch lists, as readiness and the cache metrics name it.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::Job => "jobs",
            Kind::PriorityClass => "priorityclasses",
            Kind::ForeignPod => "pods (bound, other namespaces)",
            Kind::JobObject(kind) => kind.plural(),
            Kind::Kueue(kind) => kind.plural(),
        }
    }

    /// The kind's name in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Node => "node",
            Kind::Pod => "pod",
            Kind::Job => "job",
            Kind::PriorityClass => "priorityclass",
            Kind::ForeignPod => "foreignpod",
            Kind::JobObject(kind) => kind.flag_name(),
            Kind::Kueue(KueueKind::ResourceFlavor) => "resourceflavor",
            Kind::Kueue(KueueKind::ClusterQueue) => "clusterqueue",
            Kind::Kueue(KueueKind::LocalQueue) => "localqueue",
            Kind::Kueue(KueueKind::Workload) => "workload",
        }
    }

    /// The job kind this watch delivers, for the job kinds.
    pub fn job_kind(self) -> Option<JobKind> {
        match self {
            Kind::JobObject(kind) => Some(kind),
            _ => None,
        }
    }

    /// The watch that delivers a job kind's objects: its own, or the Job watch (the elastic
    /// batch/v1 Jobs).
    pub fn of_job_kind(kind: JobKind) -> Kind {
        if kind.has_own_watch() {
            Kind::JobObject(kind)
        } else {
            Kind::Job
        }
    }

    fn index(self) -> usize {
        match self {
            Kind::Node => 0,
            Kind::Pod => 1,
            Kind::Job => 2,
            Kind::PriorityClass => 3,
            Kind::ForeignPod => 4,
            Kind::JobObject(kind) => FIXED_KINDS + kind as usize,
            Kind::Kueue(kind) => FIXED_KINDS + JobKind::COUNT + kind as usize,
        }
    }
}

/// One event of one watch stream.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "Pod and Job are ~2.5 kB each; an event is moved once, from the stream into the store"
)]
pub enum WatchEvent {
    Node(Event<Node>),
    Pod(Event<Pod>),
    Job(Event<Job>),
    PriorityClass(Event<PriorityClass>),
    ForeignPod(Event<Pod>),
    /// An object of a job kind with a watch of its own, decoded by the store through the kind's
    /// registered adapter.
    JobObject(JobKind, Event<DynamicObject>),
    /// A Kueue object, decoded by the store into its typed form.
    Kueue(KueueKind, Event<DynamicObject>),
}

impl WatchEvent {
    /// The watch that delivered the event and the event, with its object type erased.
    fn parts(&self) -> (Kind, EventKind) {
        fn of<K>(e: &Event<K>) -> EventKind {
            match e {
                Event::Init => EventKind::Init,
                Event::InitDone => EventKind::InitDone,
                _ => EventKind::Object,
            }
        }
        match self {
            WatchEvent::Node(e) => (Kind::Node, of(e)),
            WatchEvent::Pod(e) => (Kind::Pod, of(e)),
            WatchEvent::Job(e) => (Kind::Job, of(e)),
            WatchEvent::PriorityClass(e) => (Kind::PriorityClass, of(e)),
            WatchEvent::ForeignPod(e) => (Kind::ForeignPod, of(e)),
            WatchEvent::JobObject(kind, e) => (Kind::JobObject(*kind), of(e)),
            WatchEvent::Kueue(kind, e) => (Kind::Kueue(*kind), of(e)),
        }
    }

    /// The kind of the watch that delivered the event, and whether the event ends a listing
    /// (`InitDone`).
    pub fn kind_and_listed(&self) -> (Kind, bool) {
        let (kind, event) = self.parts();
        (kind, event == EventKind::InitDone)
    }

    /// The kind whose watch restarted (relists), for an `Init` event.
    pub fn restarted_kind(&self) -> Option<Kind> {
        let (kind, event) = self.parts();
        (event == EventKind::Init).then_some(kind)
    }
}

/// What an event is, whatever its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKind {
    Init,
    InitDone,
    Object,
}

/// The trainer batch/v1 Job of a TrainingJob, as the actuator patches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainerJobRef {
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    /// `spec.completionMode: Indexed`: completions must follow parallelism.
    pub indexed: bool,
    /// The trainer count it runs: 0 while held at zero trainers (suspended by trainscale, see
    /// [`crate::api::trainer_job`]), else `spec.parallelism`.
    pub parallelism: Option<i32>,
    /// Held at zero trainers: growing it must lift the suspension trainscale set.
    pub at_zero: bool,
    /// Its `kueue.x-k8s.io/queue-name` label (the operator's `--kueue`).
    pub queue: Option<String>,
}

/// What the daemon keeps of a job object besides its planning view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainingJobMeta {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub phase: TrainingJobPhase,
    /// `status.conditions` (the paddlepaddle.org kinds), or the conditions of the
    /// `trainscale.io/sizing` annotation (the PyTorch kinds).
    pub conditions: Vec<Condition>,
    /// The decision the sizing conditions were last written (or found written) for; kept across
    /// updates of the object.
    pub explained: Option<Decision>,
    /// Where the object keeps the Job spec it is resized by ([`crate::cluster::kinds::Resize::JobSpec`]
    /// kinds).
    pub size_at: Option<SizeAt>,
}

/// A job the planner cannot use, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidJob {
    pub key: JobKey,
    pub uid: Option<String>,
    pub resource_version: String,
    pub problems: Vec<FieldError>,
}

type ObjKey = (String, String);

/// The watched cluster. Cloned only when a watch event arrives while a pass still plans on a
/// shared snapshot (copy on write, `Arc::make_mut`).
#[derive(Debug, Default, Clone)]
pub struct Store {
    /// The namespace watched (`--namespace`), or none for all.
    namespace: Option<String>,
    state: ClusterState,
    nodes: HashSet<String>,
    /// Trainer batch/v1 Jobs by (namespace, name), with the TrainingJob they run.
    batch_jobs: HashMap<ObjKey, (JobKey, TrainerJobRef)>,
    /// The trainer batch Jobs of each TrainingJob (normally one).
    batch_jobs_of: HashMap<JobKey, BTreeSet<ObjKey>>,
    /// Trainer batch Jobs suspended by someone else than trainscale (Kueue, before admission).
    suspended_batch_jobs: HashSet<ObjKey>,
    /// Whether opted-in batch/v1 Jobs are sized ([`JobKind::BatchJob`] expected).
    elastic_jobs: bool,
    /// Job objects of every kind.
    training_jobs: BTreeMap<JobKey, TrainingJobMeta>,
    /// Job objects that did not deserialize.
    malformed: BTreeMap<JobKey, InvalidJob>,
    /// Keys re-listed since the kind's last `Init`, while a relist is in progress.
    relisting: [Option<HashSet<ObjKey>>; KINDS],
    synced: [bool; KINDS],
    /// Kinds that completed a list (`InitDone`): a later `Init` is a restart. A job kind watched
    /// only once discovery found it counts as synced before its first list, not as listed.
    listed: [bool; KINDS],
    /// The resourceVersion last reported for each invalid job.
    reported_invalid: HashMap<JobKey, String>,
    /// The resourceVersion and warnings last reported for each job with autoscaler warnings.
    reported_warnings: HashMap<JobKey, (String, Vec<FieldError>)>,
    restarts: u64,
    /// Unbound pods and bound host ports, for the scheduler role.
    scheduling: SchedulingPods,
    /// The Kueue objects held, by kind (`KueueKind as usize`).
    kueue_objects: [BTreeSet<ObjKey>; KueueKind::COUNT],
}

impl Store {
    /// An empty store of every namespace; not ready until every kind has been listed once
    /// (the PyTorch kinds only once [`Store::expect_job_kinds`] names them).
    pub fn new() -> Self {
        let mut store = Self::default();
        // Every pod is a `Pod` already: there are no foreign pods to list.
        store.synced[Kind::ForeignPod.index()] = true;
        store.expect_job_kinds(&[JobKind::TrainingJob, JobKind::PaddleJob]);
        store
    }

    /// Makes readiness wait for the first list of exactly these job kinds; the others count as
    /// listed (empty). A kind found later by discovery re-lists like a restarted watch: passes
    /// wait for its `InitDone`, readiness does not drop. The elastic batch/v1 Jobs, which come
    /// with the Job watch, are sized only when [`JobKind::BatchJob`] is among them.
    pub fn expect_job_kinds(&mut self, kinds: &[JobKind]) {
        for kind in JobKind::ALL {
            // A kind without a watch of its own has nothing to list.
            self.synced[Kind::JobObject(kind).index()] =
                !(kind.has_own_watch() && kinds.contains(&kind));
        }
        self.elastic_jobs = kinds.contains(&JobKind::BatchJob);
        // Kueue is optional: its kinds are watched once discovery finds them, and re-list like
        // a restarted watch then (passes wait for the list, readiness does not drop).
        for kind in KueueKind::ALL {
            self.synced[Kind::Kueue(kind).index()] = true;
        }
    }

    /// An empty store of one namespace: besides its pods, it needs the pods of other namespaces
    /// bound to nodes (`Kind::ForeignPod`), or free capacity would be overstated.
    pub fn for_namespace(namespace: &str) -> Self {
        let mut store = Store {
            namespace: Some(namespace.to_string()),
            ..Self::default()
        };
        store.expect_job_kinds(&[JobKind::TrainingJob, JobKind::PaddleJob]);
        store
    }

    /// Whether a pod key belongs to the `Pod` kind (the watched namespace) rather than to
    /// `ForeignPod`.
    fn own_pod(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// The planning view.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The planning view, to change outside watch events (the scheduler role's reservations).
    pub fn state_mut(&mut self) -> &mut ClusterState {
        &mut self.state
    }

    /// The pods the scheduler role looks at.
    pub fn scheduling(&self) -> &SchedulingPods {
        &self.scheduling
    }

    /// Whether every kind has completed its first list.
    pub fn synced(&self) -> bool {
        self.synced.iter().all(|s| *s)
    }

    /// Whether one kind has completed its first list.
    pub fn synced_kind(&self, kind: Kind) -> bool {
        self.synced[kind.index()]
    }

    /// Whether one kind was listed from a watch at least once (its next `Init` is a restart).
    pub fn listed_kind(&self, kind: Kind) -> bool {
        self.listed[kind.index()]
    }

    /// Whether a kind is being re-listed (deletions not yet known).
    pub fn relisting(&self) -> bool {
        self.relisting.iter().any(Option::is_some)
    }

    /// Marks a kind as re-listing from now (its watch failed and will list afresh): passes wait
    /// until its `InitDone`, which deletes whatever the new list did not hold.
    pub fn begin_relist(&mut self, kind: Kind) {
        let seen = &mut self.relisting[kind.index()];
        if seen.is_none() {
            *seen = Some(HashSet::new());
        }
    }

    /// Stops expecting a kind whose watch was given up (a job kind discovery found, refused by
    /// the server): its objects are forgotten and no relist is waited for.
    pub fn drop_kind(&mut self, kind: Kind) {
        self.relisting[kind.index()] = None;
        for stale in self.keys(kind) {
            self.delete(kind, &stale);
        }
        self.synced[kind.index()] = true;
    }

    /// Number of `Init` events after a kind's first list.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The trainer Job of a TrainingJob.
    pub fn trainer_job(&self, key: &JobKey) -> Option<&TrainerJobRef> {
        let first = self.batch_jobs_of.get(key)?.iter().next()?;
        self.batch_jobs.get(first).map(|(_, r)| r)
    }

    /// The TrainingJob object's metadata.
    pub fn training_job(&self, key: &JobKey) -> Option<&TrainingJobMeta> {
        self.training_jobs.get(key)
    }

    /// Names of the trainer pods of a job (a scan of every pod).
    pub fn trainer_pods<'a>(&'a self, key: &'a JobKey) -> impl Iterator<Item = &'a str> + 'a {
        self.state.pods().filter_map(move |((_, name), pod)| {
            matches!(&pod.owner, Some((job, Role::Trainer)) if job == key).then_some(name.as_str())
        })
    }

    /// Applies one watch event; returns whether anything may have changed.
    pub fn handle(&mut self, event: WatchEvent) -> bool {
        match event {
            WatchEvent::Node(e) => self.handle_kind(Kind::Node, e, |s, o| s.apply_node(&o)),
            WatchEvent::Pod(e) => self.handle_kind(Kind::Pod, e, |s, o| s.apply_pod(&o)),
            WatchEvent::ForeignPod(e) => {
                self.handle_kind(Kind::ForeignPod, e, |s, o| s.apply_foreign_pod(&o))
            }
            WatchEvent::Job(e) => self.handle_kind(Kind::Job, e, |s, o| s.apply_job(&o)),
            WatchEvent::PriorityClass(e) => {
                self.handle_kind(Kind::PriorityClass, e, |s, o| s.apply_priority_class(&o))
            }
            WatchEvent::JobObject(kind, e) => {
                self.handle_kind(Kind::JobObject(kind), e, |s, o| s.apply_object(kind, o))
            }
            WatchEvent::Kueue(kind, e) => {
                self.handle_kind(Kind::Kueue(kind), e, |s, o| s.apply_kueue(kind, &o))
            }
        }
    }

    fn handle_kind<K: kube::Resource>(
        &mut self,
        kind: Kind,
        event: Event<K>,
        apply: impl FnOnce(&mut Self, K),
    ) -> bool {
        let i = kind.index();
        match event {
            Event::Apply(obj) => {
                apply(self, obj);
                true
            }
            Event::Delete(obj) => {
                self.delete(kind, &key_of(&obj));
                true
            }
            Event::Init => {
                if self.listed[i] {
                    self.restarts += 1;
                }
                self.relisting[i] = Some(HashSet::new());
                false
            }
            Event::InitApply(obj) => {
                let k = key_of(&obj);
                apply(self, obj);
                if let Some(seen) = self.relisting[i].as_mut() {
                    seen.insert(k);
                }
                true
            }
            Event::InitDone => {
                if let Some(seen) = self.relisting[i].take() {
                    for stale in self.keys(kind) {
                        if !seen.contains(&stale) {
                            self.delete(kind, &stale);
                        }
                    }
                }
                self.synced[i] = true;
                self.listed[i] = true;
                true
            }
        }
    }

    /// Every key of a kind the store holds.
    fn keys(&self, kind: Kind) -> Vec<ObjKey> {
        match kind {
            Kind::Node => self
                .nodes
                .iter()
                .map(|n| (String::new(), n.clone()))
                .collect(),
            Kind::Pod => self
                .state
                .pods()
                .filter(|((ns, _), _)| self.own_pod(ns))
                .map(|(k, _)| k.clone())
                .collect(),
            Kind::ForeignPod => self
                .state
                .pods()
                .filter(|((ns, _), _)| !self.own_pod(ns))
                .map(|(k, _)| k.clone())
                .collect(),
            Kind::Job => {
                let elastic = self.job_object_keys(JobKind::BatchJob);
                let mut keys: BTreeSet<ObjKey> = self.batch_jobs.keys().cloned().collect();
                keys.extend(elastic);
                keys.into_iter().collect()
            }
            Kind::PriorityClass => self
                .state
                .priority_classes()
                .keys()
                .map(|n| (String::new(), n.clone()))
                .collect(),
            Kind::JobObject(job_kind) => self.job_object_keys(job_kind),
            Kind::Kueue(kueue_kind) => self.kueue_objects[kueue_kind as usize]
                .iter()
                .cloned()
                .collect(),
        }
    }

    /// The keys of the job objects of `kind` (malformed ones too).
    fn job_object_keys(&self, kind: JobKind) -> Vec<ObjKey> {
        self.training_jobs
            .keys()
            .chain(self.malformed.keys())
            .filter(|k| k.kind == kind)
            .map(|k| (k.namespace.to_string(), k.name.to_string()))
            .collect()
    }

    fn delete(&mut self, kind: Kind, (namespace, name): &ObjKey) {
        match kind {
            Kind::Node => {
                self.nodes.remove(name);
                self.state.delete_node(name);
            }
            Kind::ForeignPod if self.own_pod(namespace) => {}
            Kind::Pod | Kind::ForeignPod => {
                self.scheduling.forget(&(namespace.clone(), name.clone()));
                self.state.delete_pod(namespace, name);
            }
            Kind::Job => {
                self.remove_batch_job(&(namespace.clone(), name.clone()));
                self.forget_job(&JobKey::of_kind(
                    JobKind::BatchJob,
                    namespace.as_str(),
                    name.as_str(),
                ));
            }
            Kind::PriorityClass => self.state.delete_priority_class(name),
            Kind::JobObject(job_kind) => {
                self.forget_job(&JobKey::of_kind(
                    job_kind,
                    namespace.as_str(),
                    name.as_str(),
                ));
            }
            Kind::Kueue(kueue_kind) => self.delete_kueue(kueue_kind, namespace, name),
        }
    }

    /// Applies a Kueue object; one that does not decode is skipped with a warning naming the
    /// field (an earlier version of it is forgotten: what it said may no longer hold).
    fn apply_kueue(&mut self, kind: KueueKind, object: &DynamicObject) {
        let key = key_of(object);
        let value = match serde_json::to_value(object) {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(kind = kind.as_str(), name = %key.1, error = %e, "skipping a Kueue object that does not serialize");
                return;
            }
        };
        fn decode<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
            serde_path_to_error::deserialize(value)
                .map_err(|e| format!("{}: {}", e.path(), e.inner()))
        }
        let applied = match kind {
            KueueKind::ResourceFlavor => decode::<ResourceFlavor>(value).and_then(|o| {
                self.state
                    .apply_resource_flavor(&o)
                    .map_err(|e| e.to_string())
            }),
            KueueKind::ClusterQueue => decode::<ClusterQueue>(value).and_then(|o| {
                self.state
                    .apply_cluster_queue(&o)
                    .map_err(|e| e.to_string())
            }),
            KueueKind::LocalQueue => decode::<LocalQueue>(value)
                .and_then(|o| self.state.apply_local_queue(&o).map_err(|e| e.to_string())),
            KueueKind::Workload => decode::<Workload>(value)
                .and_then(|o| self.state.apply_workload(&o).map_err(|e| e.to_string())),
        };
        match applied {
            Ok(()) => {
                self.kueue_objects[kind as usize].insert(key);
            }
            Err(error) => {
                tracing::warn!(kind = kind.as_str(), namespace = %key.0, name = %key.1, %error, "skipping a malformed Kueue object");
                self.delete_kueue(kind, &key.0, &key.1);
            }
        }
    }

    /// Forgets a Kueue object.
    fn delete_kueue(&mut self, kind: KueueKind, namespace: &str, name: &str) {
        self.kueue_objects[kind as usize].remove(&(namespace.to_string(), name.to_string()));
        match kind {
            KueueKind::ResourceFlavor => self.state.delete_resource_flavor(name),
            KueueKind::ClusterQueue => self.state.delete_cluster_queue(name),
            KueueKind::LocalQueue => self.state.delete_local_queue(namespace, name),
            KueueKind::Workload => self.state.delete_workload(namespace, name),
        }
    }

    /// Forgets a job object (gone, or no longer a job of its kind).
    fn forget_job(&mut self, key: &JobKey) {
        let known = self.training_jobs.remove(key).is_some() | self.malformed.remove(key).is_some();
        self.reported_invalid.remove(key);
        self.reported_warnings.remove(key);
        if known || self.state.job(key).is_some() {
            self.state.delete_job(key);
        }
    }

    fn apply_priority_class(&mut self, class: &PriorityClass) {
        self.state.apply_priority_class(class);
    }

    fn apply_node(&mut self, node: &Node) {
        let name = node.name_any();
        match self.state.apply_node(node) {
            Ok(()) => {
                self.nodes.insert(name);
            }
            Err(e) => {
                self.nodes.remove(&name);
                tracing::warn!(error = %e, "skipping malformed Node");
            }
        }
    }

    /// A pod of another namespace bound to a node: it holds capacity, nothing more. The
    /// watched namespace's own pods come from the `Pod` watch.
    fn apply_foreign_pod(&mut self, pod: &Pod) {
        if !self.own_pod(&pod.namespace().unwrap_or_default()) {
            self.apply_pod(pod);
        }
    }

    fn apply_pod(&mut self, pod: &Pod) {
        self.scheduling.apply(pod);
        if let Err(e) = self.state.apply_pod(pod) {
            tracing::warn!(error = %e, "skipping malformed Pod");
        }
    }

    fn apply_job(&mut self, job: &Job) {
        let obj_key = (job.namespace().unwrap_or_default(), job.name_any());
        let read = read_trainer_job(job);
        // An update of a trainer Job of the same job is applied in place: removing it first
        // would give back the room held for its positions at every status update.
        let same_job = matches!(
            (self.batch_jobs.get(&obj_key), &read),
            (Some((before, _)), Some((key, _))) if before == key
        );
        if !same_job {
            self.remove_batch_job(&obj_key);
        }
        self.suspended_batch_jobs.remove(&obj_key);
        if let Some((key, parallelism)) = read {
            let indexed =
                job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed");
            let reference = TrainerJobRef {
                namespace: obj_key.0.clone(),
                name: obj_key.1.clone(),
                resource_version: job.resource_version(),
                indexed,
                parallelism,
                at_zero: crate::api::trainer_job::at_zero_trainers(job),
                queue: job
                    .labels()
                    .get(crate::api::kueue::QUEUE_NAME_LABEL)
                    .cloned(),
            };
            self.batch_jobs_of
                .entry(key.clone())
                .or_default()
                .insert(obj_key.clone());
            if suspended_by_others(job) {
                self.suspended_batch_jobs.insert(obj_key.clone());
            }
            self.batch_jobs.insert(obj_key, (key.clone(), reference));
            self.state
                .set_trainer_class(&key, Some(trainer_constraints(job)));
            self.refresh_trainer_job(&key);
        }
        // The same Job as an elastic Job: one while it opts in (never a trainer Job), forgotten
        // once it stops (its annotations removed).
        if self.elastic_jobs && <Job as JobAdapter>::selects(&job.metadata) {
            self.apply_job_object(job);
        } else if !self.training_jobs.is_empty() {
            let key = JobKey::of_kind(
                JobKind::BatchJob,
                job.namespace().unwrap_or_default(),
                job.name_any(),
            );
            if self.training_jobs.contains_key(&key) {
                self.forget_job(&key);
            }
        }
    }

    fn remove_batch_job(&mut self, obj_key: &ObjKey) {
        self.suspended_batch_jobs.remove(obj_key);
        if let Some((key, _)) = self.batch_jobs.remove(obj_key) {
            if let Some(set) = self.batch_jobs_of.get_mut(&key) {
                set.remove(obj_key);
                if set.is_empty() {
                    self.batch_jobs_of.remove(&key);
                    self.state.set_trainer_class(&key, None);
                }
            }
            self.refresh_trainer_job(&key);
        }
    }

    /// Re-derives a TrainingJob's trainer Job in the state from the remaining batch Jobs: its
    /// size, and whether someone else holds it suspended.
    fn refresh_trainer_job(&mut self, key: &JobKey) {
        let parallelism = self.trainer_job(key).map(|r| r.parallelism);
        let suspended = self
            .batch_jobs_of
            .get(key)
            .and_then(|set| set.iter().next())
            .is_some_and(|first| self.suspended_batch_jobs.contains(first));
        self.state.set_trainer_job_suspended(key, suspended);
        let queue = self
            .trainer_job(key)
            .map(|r| (r.name.clone(), r.queue.clone()));
        self.state.set_trainer_job_queue(
            key,
            queue
                .as_ref()
                .map(|(name, label)| (name.as_str(), label.as_deref())),
        );
        self.state.set_trainer_job(key.clone(), parallelism);
    }

    /// Applies an object of a job kind's own watch through the kind's registered adapter; one
    /// that does not deserialize is kept as malformed, one that is no job of the kind forgotten.
    fn apply_object(&mut self, kind: JobKind, object: DynamicObject) {
        let key = JobKey::of_kind(
            kind,
            object.metadata.namespace.clone().unwrap_or_default(),
            object.metadata.name.clone().unwrap_or_default(),
        );
        match decode_dynamic(kind, object) {
            Ok(Some(job)) => self.apply_job_object(job.as_ref()),
            Ok(None) => self.forget_job(&key),
            Err(bad) => {
                self.training_jobs.remove(&key);
                self.state.delete_job(&key);
                self.malformed.insert(
                    key.clone(),
                    InvalidJob {
                        problems: vec![FieldError::new(key.object_ref(), &bad.field, &bad.error)],
                        key,
                        uid: bad.metadata.uid.clone(),
                        resource_version: bad.metadata.resource_version.clone().unwrap_or_default(),
                    },
                );
            }
        }
    }

    /// Applies a decoded job object of any kind.
    fn apply_job_object(&mut self, job: &dyn JobObject) {
        let key = job.key();
        self.malformed.remove(&key);
        let explained = self.training_jobs.get(&key).and_then(|m| m.explained);
        let meta = job.metadata();
        let stored = TrainingJobMeta {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            phase: job.phase(),
            conditions: job.conditions(),
            explained,
            size_at: job.size_at(),
        };
        self.training_jobs.insert(key, stored);
        if let Err(problems) = self.state.apply_job(job) {
            for p in &problems {
                tracing::debug!(problem = %p, "job with errors");
            }
        }
    }

    /// Number of jobs of each kind skipped for errors (malformed objects included).
    pub fn skipped_counts(&self) -> BTreeMap<JobKind, usize> {
        let mut counts: BTreeMap<JobKind, usize> = JobKind::ALL.iter().map(|k| (*k, 0)).collect();
        let keys = self
            .state
            .invalid_jobs()
            .map(|(k, _)| k)
            .chain(self.malformed.keys());
        for key in keys {
            *counts.entry(key.kind).or_default() += 1;
        }
        counts
    }

    /// Invalid or malformed jobs not yet reported at their current resourceVersion.
    pub fn unreported_invalid(&self) -> Vec<InvalidJob> {
        let invalid = self.state.invalid_jobs().map(|(key, problems)| {
            let meta = self.training_jobs.get(key).cloned().unwrap_or_default();
            InvalidJob {
                key: key.clone(),
                uid: meta.uid,
                resource_version: meta.resource_version.unwrap_or_default(),
                problems: problems.to_vec(),
            }
        });
        invalid
            .chain(self.malformed.values().cloned())
            .filter(|j| self.reported_invalid.get(&j.key) != Some(&j.resource_version))
            .collect()
    }

    /// Jobs left alone for a reason the daemon announces (a PyTorchJob left to its HPA), not yet
    /// reported at their current resourceVersion (marked with [`Store::mark_reported`]).
    pub fn unreported_left_alone(&self) -> Vec<InvalidJob> {
        self.state
            .left_alone_jobs()
            .filter(|(_, why)| why.announce)
            .filter_map(|(key, why)| {
                let meta = self.training_jobs.get(key).cloned().unwrap_or_default();
                let resource_version = meta.resource_version.unwrap_or_default();
                (self.reported_invalid.get(key) != Some(&resource_version)).then(|| InvalidJob {
                    key: key.clone(),
                    uid: meta.uid,
                    resource_version,
                    problems: vec![FieldError::new(key.object_ref(), why.field, &why.why)],
                })
            })
            .collect()
    }

    /// Planned jobs whose priority names no known PriorityClass, or with a declared size above
    /// the cluster's size cap, not yet reported with these warnings at their current
    /// resourceVersion. (Spec warnings are the operator's to report.)
    pub fn unreported_warnings(&self) -> Vec<InvalidJob> {
        let cap = self.state.size_cap();
        self.state
            .jobs()
            .filter(|(_, slot, info)| {
                info.priority_class
                    .as_deref()
                    .is_some_and(|c| !self.state.priority_classes().contains_key(c))
                    || info.min.max(info.max).max(slot.current()) > cap
                    || matches!(slot.progress, Some(Err(_)))
            })
            .filter_map(|(key, _, _)| {
                let meta = self.training_jobs.get(key).cloned().unwrap_or_default();
                let resource_version = meta.resource_version.unwrap_or_default();
                let mut problems: Vec<FieldError> = self
                    .state
                    .warnings(key)
                    .into_iter()
                    .filter(|w| w.field == priority_field(key.kind) || is_progress_field(&w.field))
                    .collect();
                problems.extend(self.state.cap_warnings(key));
                let reported = self.reported_warnings.get(key);
                let fresh =
                    reported.is_none_or(|(rv, p)| *rv != resource_version || *p != problems);
                fresh.then(|| InvalidJob {
                    key: key.clone(),
                    uid: meta.uid,
                    resource_version,
                    problems,
                })
            })
            .collect()
    }

    /// Records that a job's warnings were reported.
    pub fn mark_warned(&mut self, job: &InvalidJob) {
        self.reported_warnings.insert(
            job.key.clone(),
            (job.resource_version.clone(), job.problems.clone()),
        );
    }

    /// What the store knows of a job's sizing conditions.
    pub fn known_sizing(&self, key: &JobKey) -> Known<'_> {
        known_of(self.training_jobs.get(key))
    }

    /// [`Store::known_sizing`] of each job of a plan, in its order.
    pub fn known_sizing_of(&self, jobs: &[JobPlan]) -> Vec<Known<'_>> {
        aligned(self.training_jobs.iter(), jobs, |key| {
            self.training_jobs.get(key)
        })
        .into_iter()
        .map(known_of)
        .collect()
    }

    /// Records that a job's conditions say what `decision` does (found so, or just written,
    /// ahead of the watch event of the write).
    ///
    /// `written`: the object's version after the write with the conditions written, and the
    /// version the write was made at. They are taken only while the cache still holds that version: a
    /// watch event that arrived meanwhile (the write's own, or a later writer's) is newer than
    /// the write's answer, and taking the answer then would keep a stale version for good.
    pub fn mark_explained(
        &mut self,
        key: &JobKey,
        decision: Decision,
        written: Option<(Written, Option<&str>)>,
    ) {
        let Some(meta) = self.training_jobs.get_mut(key) else {
            return;
        };
        if let Some(((resource_version, conditions), written_at)) = written
            && meta.resource_version.as_deref() == written_at
        {
            if resource_version.is_some() {
                meta.resource_version = resource_version;
            }
            meta.conditions = conditions;
        }
        meta.explained = Some(decision);
    }

    /// Records that an invalid job was reported at a resourceVersion.
    pub fn mark_reported(&mut self, key: &JobKey, resource_version: &str) {
        self.reported_invalid
            .insert(key.clone(), resource_version.to_string());
    }
}

fn key_of<K: kube::Resource>(obj: &K) -> ObjKey {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

/// What a job object's cached meta says of its sizing conditions.
fn known_of(meta: Option<&TrainingJobMeta>) -> Known<'_> {
    Known {
        explained: meta.and_then(|m| m.explained.as_ref()),
        conditions: meta.map_or(&[], |m| m.conditions.as_slice()),
        resource_version: meta.and_then(|m| m.resource_version.as_deref()),
    }
}
