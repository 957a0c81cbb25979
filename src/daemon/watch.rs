//! The six watch streams, merged into one stream of [`WatchEvent`]s.
//!
//! Each is a kube-runtime `watcher` with the default backoff: errors are reported and the stream
//! recovers by itself (resuming from the last resourceVersion, or relisting after 410 Gone).

use futures::stream::{BoxStream, StreamExt, select_all};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, ResourceExt};

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::store::{Kind, WatchEvent};
use crate::api::guard::{GuardedPaddleJob, GuardedTrainingJob};

/// An error of one watch stream; the stream retries after a backoff.
#[derive(Debug)]
pub struct WatchError {
    pub kind: Kind,
    pub error: watcher::Error,
}

/// Nodes and PriorityClasses (cluster-wide), and Pods, Jobs, TrainingJobs and PaddleJobs in
/// `namespace` or all namespaces.
pub fn watch_all(
    client: Client,
    namespace: Option<&str>,
) -> BoxStream<'static, Result<WatchEvent, WatchError>> {
    let config = watcher::Config::default;
    let nodes = watcher(Api::<Node>::all(client.clone()), config())
        .default_backoff()
        .map(move |r| r.map(WatchEvent::Node).map_err(err_of(Kind::Node)))
        .boxed();
    let pods = watcher(scoped::<Pod>(&client, namespace), config())
        .modify(|pod| pod.managed_fields_mut().clear())
        .default_backoff()
        .map(move |r| r.map(WatchEvent::Pod).map_err(err_of(Kind::Pod)))
        .boxed();
    let jobs = watcher(scoped::<Job>(&client, namespace), config())
        .modify(|job| job.managed_fields_mut().clear())
        .default_backoff()
        .map(move |r| r.map(WatchEvent::Job).map_err(err_of(Kind::Job)))
        .boxed();
    let training_jobs = watcher(scoped::<GuardedTrainingJob>(&client, namespace), config())
        .default_backoff()
        .map(move |r| {
            r.map(WatchEvent::TrainingJob)
                .map_err(err_of(Kind::TrainingJob))
        })
        .boxed();
    let paddle_jobs = watcher(scoped::<GuardedPaddleJob>(&client, namespace), config())
        .default_backoff()
        .map(move |r| {
            r.map(WatchEvent::PaddleJob)
                .map_err(err_of(Kind::PaddleJob))
        })
        .boxed();
    let priority_classes = watcher(Api::<PriorityClass>::all(client.clone()), config())
        .default_backoff()
        .map(move |r| {
            r.map(WatchEvent::PriorityClass)
                .map_err(err_of(Kind::PriorityClass))
        })
        .boxed();
    select_all([
        nodes,
        pods,
        jobs,
        priority_classes,
        training_jobs,
        paddle_jobs,
    ])
    .boxed()
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

fn err_of(kind: Kind) -> impl Fn(watcher::Error) -> WatchError {
    move |error| WatchError { kind, error }
}
