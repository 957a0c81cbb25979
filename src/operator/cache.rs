//! Caches of the objects the operator owns (trainers ConfigMaps, PodGroups, ReplicaSets, trainer
//! Jobs) and of the pserver pods, each fed by one label-selected watch and shared by both
//! controllers: reconciles read these instead of the API server. ReplicaSets and Jobs are kept
//! in the slim shapes of [`super::cached`], pods as their restart counts; no owned child keeps
//! its labels or managed fields.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodStatus};
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::core::PartialObjectMetaExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tracing::warn;

use super::cached::{CachedJob, CachedReplicaSet};
use super::names::LABEL_JOB;
use super::podgroup::api_resource;
use super::{OperatorError, PodGroupMode};
use crate::api::LABEL_PSERVER;
use crate::cluster::sync::{SyncReport, watch_error_reason};

/// Read access to the cached objects; cloning shares them.
#[derive(Clone)]
pub struct Caches {
    config_maps: Store<ConfigMap>,
    replica_sets: Store<CachedReplicaSet>,
    jobs: Store<CachedJob>,
    pod_groups: Option<(Store<DynamicObject>, ApiResource)>,
    pserver_pods: Store<Pod>,
}

/// The writing halves of [`Caches`]: fed by [`watch`] in the operator, by hand in tests.
pub struct CacheWriters {
    config_maps: Writer<ConfigMap>,
    replica_sets: Writer<CachedReplicaSet>,
    jobs: Writer<CachedJob>,
    pod_groups: Option<(Writer<DynamicObject>, ApiResource)>,
    pserver_pods: Writer<Pod>,
}

impl Caches {
    /// Empty caches, not ready until every writer has seen its first listing; a PodGroup cache
    /// only when `podgroups` asks for PodGroups.
    pub fn new(podgroups: PodGroupMode) -> (Caches, CacheWriters) {
        let writers = CacheWriters {
            config_maps: Writer::default(),
            replica_sets: Writer::default(),
            jobs: Writer::default(),
            pod_groups: api_resource(podgroups).map(|ar| (Writer::new(ar.clone()), ar)),
            pserver_pods: Writer::default(),
        };
        let caches = Caches {
            config_maps: writers.config_maps.as_reader(),
            replica_sets: writers.replica_sets.as_reader(),
            jobs: writers.jobs.as_reader(),
            pod_groups: writers
                .pod_groups
                .as_ref()
                .map(|(w, ar)| (w.as_reader(), ar.clone())),
            pserver_pods: writers.pserver_pods.as_reader(),
        };
        (caches, writers)
    }

    /// The first cache (by resource) that has not yet seen its first complete listing, if any;
    /// never waits. (A reconcile must not await `Store::wait_until_ready`: its one-shot channel
    /// wakes only the last of several waiting tasks, so all other reconciles waited for good.)
    pub fn unsynced(&self) -> Option<&'static str> {
        fn listed<K>(store: &Store<K>) -> bool
        where
            K: kube::runtime::reflector::Lookup + Clone + 'static,
            K::DynamicType: Eq + Hash + Clone,
        {
            // Polled once: ready, or the writer dropped (the feed ended; the operator stops).
            store.wait_until_ready().now_or_never().is_some()
        }
        if !listed(&self.config_maps) {
            return Some("configmaps");
        }
        if !listed(&self.replica_sets) {
            return Some("replicasets");
        }
        if !listed(&self.jobs) {
            return Some("jobs");
        }
        if let Some((groups, _)) = &self.pod_groups
            && !listed(groups)
        {
            return Some("podgroups");
        }
        if !listed(&self.pserver_pods) {
            return Some("pods");
        }
        None
    }

    /// The cached ConfigMap `namespace/name`.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.config_maps
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached ReplicaSet `namespace/name`.
    pub fn replica_set(&self, namespace: &str, name: &str) -> Option<Arc<CachedReplicaSet>> {
        self.replica_sets
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached Job `namespace/name`.
    pub fn job(&self, namespace: &str, name: &str) -> Option<Arc<CachedJob>> {
        self.jobs.get(&ObjectRef::new(name).within(namespace))
    }

    /// The cached PodGroup `namespace/name` (`None` also when PodGroups are off).
    pub fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let (groups, resource) = self.pod_groups.as_ref()?;
        groups.get(&ObjectRef::new_with(name, resource.clone()).within(namespace))
    }

    /// The highest container `restartCount` among the cached pserver pods of `job`.
    pub fn pserver_max_restarts(&self, namespace: &str, job: &str) -> i32 {
        self.pserver_pods
            .state_filter(|p| {
                p.metadata.namespace.as_deref() == Some(namespace)
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_PSERVER))
                        .is_some_and(|j| j == job)
            })
            .iter()
            .filter_map(|p| p.status.as_ref())
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|c| c.restart_count)
            .max()
            .unwrap_or(0)
    }
}

impl CacheWriters {
    /// Marks every cache as listed (ready) and empty; later [`CacheWriters::apply`] adds objects.
    pub fn mark_listed(&mut self) {
        fn listed<K>(writer: &mut Writer<K>)
        where
            K: kube::runtime::reflector::Lookup + Clone,
            K::DynamicType: Eq + Hash + Clone,
        {
            writer.apply_watcher_event(&watcher::Event::Init);
            writer.apply_watcher_event(&watcher::Event::InitDone);
        }
        listed(&mut self.config_maps);
        listed(&mut self.replica_sets);
        listed(&mut self.jobs);
        if let Some((groups, _)) = &mut self.pod_groups {
            listed(groups);
        }
        listed(&mut self.pserver_pods);
    }

    /// Stores `object` (as a watch's Added or Modified event would, slimmed as the watch slims
    /// it) in the cache of its kind; returns whether one caches that kind.
    pub fn apply(&mut self, object: &DynamicObject) -> Result<bool, OperatorError> {
        fn put<K>(
            writer: &mut Writer<K>,
            object: &DynamicObject,
            modify: fn(&mut K),
        ) -> Result<bool, OperatorError>
        where
            K: Resource<DynamicType = ()> + Clone + DeserializeOwned,
        {
            let mut typed = serde_json::to_value(object)
                .and_then(serde_json::from_value::<K>)
                .map_err(|source| OperatorError::Json {
                    what: "a cached object",
                    source,
                })?;
            modify(&mut typed);
            writer.apply_watcher_event(&watcher::Event::Apply(typed));
            Ok(true)
        }
        let kind = object.types.as_ref().map(|t| t.kind.as_str());
        match kind {
            Some("ConfigMap") => put(&mut self.config_maps, object, slim_child),
            Some("ReplicaSet") => put(&mut self.replica_sets, object, slim_child),
            Some("Job") => put(&mut self.jobs, object, slim_child),
            Some("Pod") => put(&mut self.pserver_pods, object, slim_pod),
            Some("PodGroup") => match &mut self.pod_groups {
                Some((groups, _)) => {
                    groups.apply_watcher_event(&watcher::Event::Apply(object.clone()));
                    Ok(true)
                }
                None => Ok(false),
            },
            _ => Ok(false),
        }
    }
}

/// Owner triggers of one child kind: every subscriber gets the name, namespace and
/// ownerReferences of each changed (added, modified, deleted, relisted) child, after the cache
/// holds the change.
pub struct Fanout<K> {
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<PartialObjectMeta<K>>>>>,
}

impl<K> Clone for Fanout<K> {
    fn clone(&self) -> Self {
        Fanout {
            subscribers: self.subscribers.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Fanout<K> {
    fn new() -> Self {
        Fanout {
            subscribers: Arc::default(),
        }
    }

    /// A new trigger stream (for `Controller::owns_stream`), fed from now on.
    pub fn subscribe(
        &self,
    ) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
    where
        K: Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded();
        self.lock().push(tx);
        rx.map(Ok)
    }

    fn send(&self, child: &K) {
        let meta = child.meta();
        if meta.owner_references.as_ref().is_none_or(Vec::is_empty) {
            return;
        }
        let trigger = ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            owner_references: meta.owner_references.clone(),
            ..ObjectMeta::default()
        }
        .into_request_partial::<K>();
        // A controller that stopped has dropped its receiver; it needs no more triggers.
        self.lock()
            .retain(|tx| tx.unbounded_send(trigger.clone()).is_ok());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<mpsc::UnboundedSender<PartialObjectMeta<K>>>> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The owner triggers of the cached ReplicaSets and Jobs (the children whose changes move a
/// job's phase).
#[derive(Clone)]
pub struct Triggers {
    pub replica_sets: Fanout<CachedReplicaSet>,
    pub jobs: Fanout<CachedJob>,
}

/// `Api` on `namespace`, or on every namespace.
pub(super) fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Drops what no reconcile reads (managed fields).
pub(super) fn slim<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// [`slim`], and a child's labels: a reconcile finds a child by its name and checks its owner
/// references (and a trainer Job's annotations), and the watch selects by label on the server
/// (~600 bytes a child, 1.8 KB a job).
fn slim_child<K: Resource>(object: &mut K) {
    slim(object);
    object.meta_mut().labels = None;
}

/// Keeps of a pod only its metadata and container statuses (restart counts).
fn slim_pod(pod: &mut Pod) {
    slim(pod);
    pod.spec = None;
    pod.status = pod.status.take().map(|s| PodStatus {
        container_statuses: s.container_statuses,
        ..PodStatus::default()
    });
}

/// Runs a watch into `writer`, calling `each` on every touched object, until dropped; errors
/// are logged, reported to `sync` under `resource` (readiness names a cache that keeps failing)
/// and the watch retried with backoff.
fn feed<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    (sync, resource): (SyncReport, &'static str),
    modify: fn(&mut K),
    each: impl Fn(&K) + Send + 'static,
) -> BoxFuture<'static, ()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    sync.expect(resource, Instant::now());
    watcher(api, config)
        .default_backoff()
        .modify(modify)
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::InitDone) => sync.listed(resource, Instant::now()),
                Ok(watcher::Event::Init) => {}
                Ok(watcher::Event::InitApply(object)) => each(&object),
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                    sync.delivered(resource, Instant::now());
                    each(&object);
                }
                Err(error) => {
                    let reason = watch_error_reason(&error);
                    warn!(resource, %reason, "operator cache watch failed; retrying");
                    sync.failed(resource, reason, Instant::now());
                }
            }
            futures::future::ready(())
        })
        .boxed()
}

/// The names under which the operator's caches report to a [`SyncReport`].
pub const CACHE_RESOURCES: [&str; 5] = [
    "operator/configmaps",
    "operator/replicasets",
    "operator/jobs",
    "operator/pods (pservers)",
    "operator/podgroups",
];

/// Starts filling `writers` from label-selected watches in `namespace` (every namespace when
/// `None`): owned objects by `trainscale.io/job`, pods by the pserver label. Returns the owner
/// triggers and the future driving the watches (it runs until dropped).
pub fn watch(
    client: &Client,
    namespace: Option<&str>,
    writers: CacheWriters,
    sync: &SyncReport,
) -> (Triggers, BoxFuture<'static, ()>) {
    let [config_maps, replica_sets, jobs_name, pods_name, groups_name] = CACHE_RESOURCES;
    let report = |name| (sync.clone(), name);
    let owned = || watcher::Config::default().labels(LABEL_JOB);
    let triggers = Triggers {
        replica_sets: Fanout::new(),
        jobs: Fanout::new(),
    };
    let (sets, jobs) = (triggers.replica_sets.clone(), triggers.jobs.clone());
    let mut feeds = vec![
        feed(
            scoped::<ConfigMap>(client, namespace),
            owned(),
            writers.config_maps,
            report(config_maps),
            slim_child,
            |_| {},
        ),
        feed(
            scoped::<CachedReplicaSet>(client, namespace),
            owned(),
            writers.replica_sets,
            report(replica_sets),
            slim_child,
            move |rs| sets.send(rs),
        ),
        feed(
            scoped::<CachedJob>(client, namespace),
            owned(),
            writers.jobs,
            report(jobs_name),
            slim_child,
            move |job| jobs.send(job),
        ),
        feed(
            scoped::<Pod>(client, namespace),
            watcher::Config::default().labels(LABEL_PSERVER),
            writers.pserver_pods,
            report(pods_name),
            slim_pod,
            |_| {},
        ),
    ];
    if let Some((groups, resource)) = writers.pod_groups {
        let api = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        // Every PodGroup, not only the owned ones: a job's `podGroupName` may name a group
        // someone else created, which the job then joins.
        feeds.push(feed(
            api,
            watcher::Config::default(),
            groups,
            report(groups_name),
            slim,
            |_| {},
        ));
    }
    let all = futures::future::join_all(feeds).map(|_| ()).boxed();
    (triggers, all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::trainer_job::ANNOTATION_ZERO_TRAINERS;
    use serde_json::json;

    #[test]
    fn a_cached_child_keeps_its_owner_and_annotations_but_not_its_labels() {
        let (caches, mut writers) = Caches::new(PodGroupMode::None);
        writers.mark_listed();
        let owner = json!([{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                            "name": "j", "uid": "tj", "controller": true}]);
        let job: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j-trainer", "namespace": "ml", "uid": "u1",
                         "labels": {LABEL_JOB: "j"},
                         "annotations": {ANNOTATION_ZERO_TRAINERS: "true"},
                         "managedFields": [{"manager": "trainscale"}],
                         "ownerReferences": owner},
            "spec": {"parallelism": 1, "suspend": true},
        }))
        .unwrap();
        let config: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "j-trainers", "namespace": "ml", "labels": {LABEL_JOB: "j"},
                         "ownerReferences": owner},
            "data": {"trainers": "0"},
        }))
        .unwrap();
        assert!(writers.apply(&job).unwrap());
        assert!(writers.apply(&config).unwrap());

        let cached = caches.job("ml", "j-trainer").unwrap();
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(
            cached.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        // Held at zero by the annotation: it counts no trainer.
        assert_eq!(cached.trainer_count(), 0);
        let cached = caches.config_map("ml", "j-trainers").unwrap();
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(
            cached.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(
            cached.data.as_ref().and_then(|d| d.get("trainers")),
            Some(&"0".to_string())
        );
    }
}
