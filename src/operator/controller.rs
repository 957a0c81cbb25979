//! The kube-rs Controller: get-or-create the children, follow the phase, write the status.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

use super::names::*;
use super::phase::{self, Observation, PhasePolicy};
use super::podgroup::api_resource;
use super::resources::desired;
use super::{OperatorConfig, OperatorError};
use crate::api::validate::validate_training_job;
use crate::api::{LABEL_PSERVER, LABEL_TRAINER, TrainingJob, TrainingJobStatus};

/// How often a live job is looked at even without a watch event (pserver restarts, walltime).
pub const RESYNC: Duration = Duration::from_secs(30);
/// Requeue delay after a failed reconcile.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(15);

/// What every reconcile shares.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    /// The clock (replaceable in tests).
    pub now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl Context {
    /// A context on the system clock.
    pub fn new(client: Client, config: OperatorConfig) -> Self {
        Context {
            client,
            config,
            now: Arc::new(Timestamp::now),
        }
    }
}

/// Runs the TrainingJob controller on every namespace until `shutdown` resolves.
pub async fn run_operator(
    client: Client,
    config: OperatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), OperatorError> {
    run_operator_in(client, config, None, shutdown).await
}

/// Runs the TrainingJob controller until `shutdown` resolves, watching TrainingJobs and their
/// ReplicaSets and Jobs in `namespace` only when given (as `trainscale run --namespace`).
///
/// On shutdown the controller stops taking work and lets in-flight reconciles finish.
pub async fn run_operator_in(
    client: Client,
    config: OperatorConfig,
    namespace: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), OperatorError> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let ns = namespace.as_deref();
    let owned = watcher::Config::default().labels(LABEL_JOB);
    let jobs = api::<TrainingJob>(&client, ns);
    let ctx = Arc::new(Context::new(client.clone(), config));
    info!(podgroups = ?ctx.config.podgroups, kueue = ctx.config.kueue, restart_limit = ctx.config.restart_limit, autoclean = ctx.config.autoclean, namespace = ?ns, "operator starting");
    Controller::new(jobs, watcher::Config::default())
        .owns(api::<ReplicaSet>(&client, ns), owned.clone())
        .owns(api::<Job>(&client, ns), owned)
        .graceful_shutdown_on(async move {
            let _ = rx.await;
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => tracing::debug!(job = %obj, "reconciled"),
                Err(e) => warn!(error = %e, "reconcile failed"),
            }
        })
        .await;
    info!("operator stopped");
    Ok(())
}

fn error_policy(job: Arc<TrainingJob>, error: &OperatorError, _: Arc<Context>) -> Action {
    warn!(job = %job.key(), %error, "reconcile error; retrying");
    Action::requeue(ERROR_REQUEUE)
}

fn is_permanent(error: &OperatorError) -> Option<String> {
    match error {
        OperatorError::Kube(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
            Some(s.message.clone())
        }
        OperatorError::NotOwned { .. } | OperatorError::Field(_) => Some(error.to_string()),
        _ => None,
    }
}

fn owned_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    job: &TrainingJob,
) -> bool {
    let uid = job.uid();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| Some(&o.uid) == uid.as_ref())
}

/// Returns the live object, creating it when absent; one owned by someone else is an error.
async fn ensure<K>(
    api: &Api<K>,
    want: &K,
    kind: &'static str,
    job: &TrainingJob,
) -> Result<K, OperatorError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = want.meta().name.clone().unwrap_or_default();
    let live = match api.get_opt(&name).await? {
        Some(live) => live,
        None => match api.create(&PostParams::default(), want).await {
            Ok(created) => {
                info!(job = %job.key(), kind, %name, "created");
                created
            }
            Err(kube::Error::Api(s)) if s.is_already_exists() => api.get(&name).await?,
            Err(e) => return Err(e.into()),
        },
    };
    if !owned_by(live.meta(), job) {
        return Err(OperatorError::NotOwned {
            kind,
            namespace: job.namespace().unwrap_or_default(),
            name,
            owner: job.name_any(),
        });
    }
    Ok(live)
}

/// The status fields the operator owns, as a merge patch (scale records belong to the daemon).
fn status_patch(status: &TrainingJobStatus) -> serde_json::Value {
    json!({
        "status": {
            "phase": status.phase,
            "reason": if status.reason.is_empty() { None } else { Some(&status.reason) },
            "replica_statuses": status.replica_statuses,
            "startTime": status.start_time,
            "released": status.released,
        }
    })
}

fn owned_fields_equal(a: &TrainingJobStatus, b: &TrainingJobStatus) -> bool {
    a.phase == b.phase
        && a.reason == b.reason
        && a.replica_statuses == b.replica_statuses
        && a.start_time == b.start_time
        && a.released == b.released
}

async fn write_status(
    api: &Api<TrainingJob>,
    job: &TrainingJob,
    prev: &TrainingJobStatus,
    next: &TrainingJobStatus,
) -> Result<(), OperatorError> {
    if owned_fields_equal(prev, next) {
        return Ok(());
    }
    if prev.phase != next.phase {
        info!(job = %job.key(), from = prev.phase.as_str(), to = next.phase.as_str(), reason = %next.reason, "phase");
    }
    api.patch_status(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(status_patch(next)),
    )
    .await?;
    Ok(())
}

/// One pass over one TrainingJob.
pub async fn reconcile(job: Arc<TrainingJob>, ctx: Arc<Context>) -> Result<Action, OperatorError> {
    let ns = job.namespace().ok_or_else(|| OperatorError::Missing {
        object: job.object_ref(),
        what: "metadata.namespace",
    })?;
    let client = ctx.client.clone();
    let jobs: Api<TrainingJob> = Api::namespaced(client.clone(), &ns);
    let prev = job.status.clone().unwrap_or_default();
    let now = (ctx.now)();

    if prev.phase.is_finished() {
        let mut next = prev.clone();
        release(&job, &ctx, &ns, &mut next).await?;
        write_status(&jobs, &job, &prev, &next).await?;
        return Ok(Action::await_change());
    }

    let problems = validate_training_job(&job);
    if !problems.is_empty() {
        let next = phase::invalid(&prev, &problems);
        write_status(&jobs, &job, &prev, &next).await?;
        return Ok(Action::await_change());
    }

    let observed = match create_and_observe(&job, &ctx, &ns).await {
        Ok(obs) => obs,
        Err(e) => match is_permanent(&e) {
            Some(reason) => {
                let next = phase::finish(
                    &prev,
                    crate::api::TrainingJobPhase::Failed,
                    format!("creating the job's objects: {reason}"),
                );
                write_status(&jobs, &job, &prev, &next).await?;
                return Ok(Action::await_change());
            }
            None => return Err(e),
        },
    };

    let policy = PhasePolicy {
        fault_tolerant: job.spec.fault_tolerant,
        walltime_seconds: job.spec.annotations.walltime,
        restart_limit: ctx.config.restart_limit,
    };
    let mut next = phase::next_status(&prev, &observed, &policy, now);
    if next.phase.is_finished() {
        release(&job, &ctx, &ns, &mut next).await?;
        write_status(&jobs, &job, &prev, &next).await?;
        return Ok(Action::await_change());
    }
    write_status(&jobs, &job, &prev, &next).await?;
    let wait = phase::walltime_remaining(&next, &policy, now).map_or(RESYNC, |w| w.min(RESYNC));
    Ok(Action::requeue(wait))
}

/// Get-or-create every child, keep the trainers ConfigMap current, and observe the children.
async fn create_and_observe(
    job: &TrainingJob,
    ctx: &Context,
    ns: &str,
) -> Result<Observation, OperatorError> {
    let client = ctx.client.clone();
    let want = desired(job, &ctx.config)?;

    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let config_map = ensure(&configs, &want.trainers_config, "ConfigMap", job).await?;

    if let (Some(group), Some(resource)) = (&want.pod_group, api_resource(ctx.config.podgroups)) {
        let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        ensure(&groups, group, "PodGroup", job).await?;
    }

    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let mut obs = Observation::default();
    if let Some(master) = &want.master {
        let live = ensure(&sets, master, "ReplicaSet", job).await?;
        obs.master = Some(phase::observe_replica_set(&live));
    }
    if let Some(pserver) = &want.pserver {
        let live = ensure(&sets, pserver, "ReplicaSet", job).await?;
        obs.pserver = Some(phase::observe_replica_set(&live));
        obs.pserver_max_restarts = pserver_max_restarts(&client, ns, &job.name_any()).await?;
    }
    let trainer_jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let trainer = ensure(&trainer_jobs, &want.trainer, "Job", job).await?;
    let counts = phase::observe_job(&trainer);

    let current = counts.parallelism.to_string();
    let stored = config_map.data.as_ref().and_then(|d| d.get(TRAINERS_KEY));
    if stored != Some(&current) {
        configs
            .patch(
                &trainers_config_name(&job.name_any()),
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": { TRAINERS_KEY: current } })),
            )
            .await?;
    }
    obs.trainer = Some(counts);
    Ok(obs)
}

async fn pserver_max_restarts(client: &Client, ns: &str, job: &str) -> Result<i32, OperatorError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("{LABEL_PSERVER}={job}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0))
}

/// Ends a finished job's work: stops the trainer Job if it still runs (so Timeout and a
/// restart-limit Failed really end it) and, with `--autoclean`, releases every pod once.
async fn release(
    job: &TrainingJob,
    ctx: &Context,
    ns: &str,
    status: &mut TrainingJobStatus,
) -> Result<(), OperatorError> {
    if status.released {
        return Ok(());
    }
    let name = job.name_any();
    let client = ctx.client.clone();
    let trainer_jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    if let Some(trainer) = trainer_jobs.get_opt(&trainer_name(&name)).await? {
        let counts = phase::observe_job(&trainer);
        let suspended = trainer
            .spec
            .as_ref()
            .and_then(|s| s.suspend)
            .unwrap_or(false);
        if counts.outcome.is_none() && !suspended {
            info!(job = %job.key(), "stopping the trainer Job (suspend)");
            trainer_jobs
                .patch(
                    &trainer_name(&name),
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "suspend": true } })),
                )
                .await?;
        }
    }
    if !ctx.config.autoclean {
        return Ok(());
    }
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    for rs in [master_name(&name), pserver_name(&name)] {
        match sets
            .patch(
                &rs,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let pods: Api<Pod> = Api::namespaced(client, ns);
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&format!("{LABEL_TRAINER}={name}")),
    )
    .await?;
    info!(job = %job.key(), "released");
    status.released = true;
    Ok(())
}
