//! The watch streams (four plus one per job kind with a watch of its own, one more with
//! `--namespace`), one task each, merged into one channel of [`WatchEvent`]s. The job kinds are
//! watched alike, as `DynamicObject`s of the kind's resource, decoded by the store through the
//! kind's registered adapter; the elastic batch/v1 Jobs come with the Job watch.
//!
//! A watch that fails is not resumed: its task reports the error, drops the watcher and, after
//! a backoff, starts a fresh one, which re-lists (`Init` … `InitDone`). The store marks the kind
//! as re-listing from the moment the error arrives, so no pass plans on a mix of contents from
//! before and after an outage (an API server may come back with other contents, and kinds fail
//! and recover at different times); objects that did not come back are deleted at `InitDone`.

use crate::cluster::sync::watch_error_status;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::store::{Kind, WatchEvent};
use crate::api::JobKind;
use crate::api::kueue::{KUEUE_API_VERSION, KueueKind};

/// First wait before a failed watch is started afresh.
pub const RESTART_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between restarts (doubling from [`RESTART_BACKOFF`]; reset by a full re-list).
pub const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);
/// Events buffered between the watch tasks and the store.
const CHANNEL: usize = 1024;
/// How often, by default, a job kind whose CRD the API server did not serve is looked up again.
pub const DISCOVERY_RECHECK: Duration = Duration::from_secs(60);

/// The job kinds to watch: from the start, and once discovery finds their CRD (looked up every
/// `recheck`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindSelection {
    pub now: Vec<JobKind>,
    pub when_served: Vec<JobKind>,
    pub recheck: Duration,
    /// Chosen by discovery (no `--kinds`): the kinds besides TrainingJob and PaddleJob are
    /// optional (see [`KindSelection::discovered`]).
    pub by_discovery: bool,
}

impl KindSelection {
    /// Whether `kind` is watched because discovery found it: a refused watch drops it.
    pub fn discovered(&self, kind: JobKind) -> bool {
        self.by_discovery && !kind.created_by_trainscale()
    }
}

/// Whether the API server serves `kind` (its group/version lists its plural); an unreachable
/// server counts as not serving it.
pub async fn served(client: &Client, kind: JobKind) -> bool {
    served_resource(client, kind.api_version(), kind.plural()).await
}

/// Whether the API server serves `plural` in `api_version` (group/version); an unreachable
/// server counts as not serving it.
pub async fn served_resource(client: &Client, api_version: &str, plural: &str) -> bool {
    match client.list_api_group_resources(api_version).await {
        Ok(list) => list.resources.iter().any(|r| r.name == plural),
        Err(e) => {
            tracing::debug!(api_version, plural, error = %e, "discovery: not served");
            false
        }
    }
}

/// The kinds to watch: `requested` exactly (`--kinds`), or by default TrainingJob, PaddleJob and
/// the elastic batch/v1 Job (every API server serves Jobs) plus each other kind whose CRD
/// discovery finds now; the rest are looked up again every `recheck` (`--discovery-interval`).
pub async fn select_kinds(
    client: &Client,
    requested: Option<&[JobKind]>,
    recheck: Duration,
) -> KindSelection {
    if let Some(kinds) = requested {
        return KindSelection {
            now: kinds.to_vec(),
            when_served: Vec::new(),
            recheck,
            by_discovery: false,
        };
    }
    let mut selection = KindSelection {
        recheck,
        by_discovery: true,
        ..KindSelection::default()
    };
    for kind in JobKind::ALL {
        if kind.created_by_trainscale() || !kind.has_own_watch() || served(client, kind).await {
            selection.now.push(kind);
        } else {
            tracing::info!(kind = kind.as_str(), every = ?recheck, "CRD not served; looked up again");
            selection.when_served.push(kind);
        }
    }
    selection
}

/// An error of one watch stream; its kind re-lists after a backoff.
#[derive(Debug)]
pub struct WatchError {
    pub kind: Kind,
    pub error: watcher::Error,
    /// The kind, found by discovery, was refused and is no longer watched (until discovery finds
    /// it again): the store forgets its objects instead of waiting for a relist.
    pub dropped: bool,
}

/// The running watches; dropping it stops them.
pub struct Watches {
    pub events: mpsc::Receiver<Result<WatchEvent, WatchError>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

type Raw<K> = BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// Nodes and PriorityClasses (cluster-wide), and Pods, Jobs and the objects of each job kind in
/// `namespace` or all namespaces. With a namespace, also the live pods of every other namespace
/// that are bound to a node (read only, field-selected): they hold node capacity, so without
/// them the plan would overcommit nodes shared with other namespaces.
///
/// Of the job kinds, those of `kinds.now` are watched from the start, those of
/// `kinds.when_served` once discovery finds their CRD.
pub fn watch_all(client: Client, namespace: Option<&str>, kinds: &KindSelection) -> Watches {
    let (tx, events) = mpsc::channel(CHANNEL);
    let ns = namespace.map(str::to_string);
    let config = watcher::Config::default;
    let c = client.clone();
    let nodes = spawn_kind(Kind::Node, WatchEvent::Node, tx.clone(), move || {
        watcher(Api::<Node>::all(c.clone()), config()).boxed()
    });
    let c = client.clone();
    let classes = spawn_kind(
        Kind::PriorityClass,
        WatchEvent::PriorityClass,
        tx.clone(),
        move || watcher(Api::<PriorityClass>::all(c.clone()), config()).boxed(),
    );
    let (c, n) = (client.clone(), ns.clone());
    let pods = spawn_kind(Kind::Pod, WatchEvent::Pod, tx.clone(), move || {
        watcher(scoped::<Pod>(&c, n.as_deref()), config())
            .modify(|pod| pod.managed_fields_mut().clear())
            .boxed()
    });
    let (c, n) = (client.clone(), ns.clone());
    let jobs = spawn_kind(Kind::Job, WatchEvent::Job, tx.clone(), move || {
        watcher(scoped::<Job>(&c, n.as_deref()), config())
            .modify(|job| job.managed_fields_mut().clear())
            .boxed()
    });
    let mut tasks = vec![nodes, classes, pods, jobs];
    let job_kinds = kinds.now.iter().map(|k| (*k, true));
    let job_kinds = job_kinds.chain(kinds.when_served.iter().map(|k| (*k, false)));
    // The elastic batch/v1 Jobs come with the Job watch above.
    for (kind, served) in job_kinds.filter(|(k, _)| k.has_own_watch()) {
        let gate = kinds.discovered(kind).then(|| Discovered {
            client: client.clone(),
            api_version: kind.api_version(),
            plural: kind.plural(),
            name: kind.as_str(),
            recheck: kinds.recheck,
            served,
            look_up_now: false,
        });
        let (c, n) = (client.clone(), ns.clone());
        let resource = kind.api_resource();
        tasks.push(spawn_kind_when(
            gate,
            Kind::JobObject(kind),
            move |e| WatchEvent::JobObject(kind, e),
            tx.clone(),
            move || {
                let api = match n.as_deref() {
                    Some(ns) => Api::<DynamicObject>::namespaced_with(c.clone(), ns, &resource),
                    None => Api::<DynamicObject>::all_with(c.clone(), &resource),
                };
                watcher(api, config())
                    .modify(|job| job.managed_fields_mut().clear())
                    .boxed()
            },
        ));
    }
    // Kueue's quota and admissions: read wherever its CRDs are served, looked up again while
    // they are not; a refused watch (no deploy/components/kueue) drops the kind.
    for kind in KueueKind::ALL {
        let gate = Discovered {
            client: client.clone(),
            api_version: KUEUE_API_VERSION,
            plural: kind.plural(),
            name: kind.as_str(),
            recheck: kinds.recheck,
            served: false,
            look_up_now: true,
        };
        let (c, n) = (client.clone(), ns.clone());
        let resource = kind.api_resource();
        tasks.push(spawn_kind_when(
            Some(gate),
            Kind::Kueue(kind),
            move |e| WatchEvent::Kueue(kind, e),
            tx.clone(),
            move || {
                let api = match n.as_deref() {
                    Some(ns) if kind.namespaced() => {
                        Api::<DynamicObject>::namespaced_with(c.clone(), ns, &resource)
                    }
                    _ => Api::<DynamicObject>::all_with(c.clone(), &resource),
                };
                watcher(api, config())
                    .modify(|o| o.managed_fields_mut().clear())
                    .boxed()
            },
        ));
    }
    if let Some(own) = ns {
        let selector = foreign_pods_selector(&own);
        tasks.push(spawn_kind(
            Kind::ForeignPod,
            WatchEvent::ForeignPod,
            tx,
            move || {
                watcher(Api::<Pod>::all(client.clone()), config().fields(&selector))
                    .modify(|pod| pod.managed_fields_mut().clear())
                    .boxed()
            },
        ));
    }
    Watches { events, tasks }
}

/// A job kind watched because discovery found it (not named by `--kinds`): it waits until its
/// CRD is served, and a watch the server refuses (403: RBAC; 404: the CRD was removed) is given
/// up and the kind looked up again, so a kind trainscale may not read never stalls the others.
struct Discovered {
    client: Client,
    /// What discovery looks for: the group/version and the plural it must list.
    api_version: &'static str,
    plural: &'static str,
    /// The kind, in logs.
    name: &'static str,
    recheck: Duration,
    /// Served at start: watch at once.
    served: bool,
    /// Not known to be served: look it up at once rather than after `recheck`.
    look_up_now: bool,
}

/// [`spawn_kind`], for a kind discovery found (`gate`) when there is one.
fn spawn_kind_when<K: Send + 'static>(
    gate: Option<Discovered>,
    kind: Kind,
    wrap: impl Fn(Event<K>) -> WatchEvent + Send + Sync + 'static,
    tx: mpsc::Sender<Result<WatchEvent, WatchError>>,
    start: impl Fn() -> Raw<K> + Send + Sync + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some(gate) = gate else {
            run_kind(kind, &wrap, &tx, &start, false).await;
            return;
        };
        let mut found = gate.served;
        let mut wait = !gate.look_up_now;
        loop {
            while !found {
                if wait {
                    tokio::time::sleep(gate.recheck).await;
                }
                wait = true;
                if tx.is_closed() {
                    return;
                }
                found = served_resource(&gate.client, gate.api_version, gate.plural).await;
                if found {
                    tracing::info!(kind = gate.name, "CRD now served; watching");
                }
            }
            if run_kind(kind, &wrap, &tx, &start, true).await == Ended::ReceiverGone {
                return;
            }
            tracing::warn!(kind = gate.name, every = ?gate.recheck, "watch refused or CRD gone: the kind is not sized; looked up again");
            found = false;
        }
    })
}

/// Runs one kind's watch until the receiver is gone: events are forwarded; an error is
/// forwarded, the watcher dropped and, after a backoff, a fresh one started (it re-lists).
fn spawn_kind<K: Send + 'static>(
    kind: Kind,
    wrap: impl Fn(Event<K>) -> WatchEvent + Send + Sync + 'static,
    tx: mpsc::Sender<Result<WatchEvent, WatchError>>,
    start: impl Fn() -> Raw<K> + Send + Sync + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        run_kind(kind, &wrap, &tx, &start, false).await;
    })
}

/// Why a watch loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    ReceiverGone,
    /// An optional kind's watch was refused (see [`refused`]).
    Dropped,
}

/// The watch loop of [`spawn_kind`]; with `optional`, a refused watch ends it (`Dropped`).
async fn run_kind<K: Send + 'static>(
    kind: Kind,
    wrap: &(impl Fn(Event<K>) -> WatchEvent + Sync),
    tx: &mpsc::Sender<Result<WatchEvent, WatchError>>,
    start: &(impl Fn() -> Raw<K> + Sync),
    optional: bool,
) -> Ended {
    let mut backoff = RESTART_BACKOFF;
    loop {
        let mut stream = start();
        while let Some(item) = stream.next().await {
            let sent = match item {
                Ok(event) => {
                    if matches!(event, Event::InitDone) {
                        backoff = RESTART_BACKOFF;
                    }
                    tx.send(Ok(wrap(event))).await
                }
                Err(error) => {
                    let dropped = optional && refused(&error);
                    let report = WatchError {
                        kind,
                        error,
                        dropped,
                    };
                    if tx.send(Err(report)).await.is_err() {
                        return Ended::ReceiverGone;
                    }
                    if dropped {
                        return Ended::Dropped;
                    }
                    break;
                }
            };
            if sent.is_err() {
                return Ended::ReceiverGone;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_RESTART_BACKOFF);
    }
}

/// Whether the server refused the watch for good: 403 Forbidden (RBAC) or 404 Not Found (no
/// such resource any more).
pub fn refused(error: &watcher::Error) -> bool {
    matches!(status_code(error), Some(403 | 404))
}

/// Whether the server refused the watch as not allowed (403 Forbidden: RBAC).
pub fn forbidden(error: &watcher::Error) -> bool {
    status_code(error) == Some(403)
}

/// The HTTP code of the API server's Status in a watch error, if it carries one.
fn status_code(error: &watcher::Error) -> Option<u16> {
    watch_error_status(error).map(|s| s.code)
}

/// Pods of namespaces other than `own` that are bound to a node and have not finished.
pub fn foreign_pods_selector(own: &str) -> String {
    format!(
        "spec.nodeName!=,metadata.namespace!={own},status.phase!=Succeeded,status.phase!=Failed"
    )
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
