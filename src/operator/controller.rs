//! The kube-rs Controllers (TrainingJob and PaddleJob): create the children missing from the
//! caches, follow the phase, write the status, report spec warnings. Both kinds share one
//! reconcile, run on the job's TrainingJob view and parameterised by its [`JobKind`], and one set
//! of [`Caches`]: after the first listing a reconcile reads nothing from the API server and writes
//! only what changed.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{reflector, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{debug, info, warn};

use super::cache::{self, Caches, Triggers, scoped};
use super::cached::CachedJob;
use super::error::rename_problem;
use super::names::*;
use super::phase::{self, Observation, PhasePolicy};
use super::podgroup::api_resource;
use super::resources::{desired, job_ref};
use super::{OperatorConfig, OperatorError};
use crate::api::guard::{Guarded, MalformedJob};
use crate::api::note::fields_note;
use crate::api::validate::check_training_job;
use crate::api::{FieldError, JobKind, LABEL_TRAINER, PaddleJob, TrainingJob, TrainingJobStatus};
use crate::cluster::sync::SyncReport;

/// How often a live job is looked at even without a watch event (pserver restarts, walltime).
pub const RESYNC: Duration = Duration::from_secs(30);
/// Requeue delay after a create answered AlreadyExists for an object not yet in the cache.
pub const CACHE_REQUEUE: Duration = Duration::from_secs(2);
/// How long an object may answer AlreadyExists while staying out of the cache before it is taken
/// for someone else's (unlabelled) object.
pub const CONFLICT_GRACE: SignedDuration = SignedDuration::from_secs(30);
/// The longest one reconcile may take; past it, it is an error and retried.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);
/// Reconciles each controller (TrainingJob, PaddleJob) runs at once, as the daemon's write stages
/// keep 16 jobs' writes in flight: kube's default is unbounded, so a start-up with tens of
/// thousands of jobs to serve would send all their requests together.
pub const CONCURRENT_RECONCILES: u16 = 16;
/// Requeue delay after a failed reconcile.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(15);
/// The `reportingController` of the operator's Events.
pub const EVENT_REPORTER: &str = "trainscale-operator";
/// Reason of the Warning Event listing a job's spec warnings.
pub const REASON_SPEC_WARNING: &str = "SpecWarning";

/// What every reconcile shares.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    /// The owned objects and pserver pods, as the watches last saw them.
    pub caches: Caches,
    /// The clock (replaceable in tests).
    pub now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// Publishes the operator's Events.
    pub recorder: Recorder,
    /// By job uid, the generation whose spec warnings were published.
    warned: Arc<Mutex<HashMap<String, i64>>>,
    /// By `Kind namespace/name`, when a create of the object first answered AlreadyExists while
    /// the cache lacked it.
    conflicts: Arc<Mutex<HashMap<String, Timestamp>>>,
    /// By `Kind namespace/name`, when this operator created the object, until its cache shows it
    /// (client-go's "expectations"): a reconcile in between waits instead of creating it again.
    created: Arc<Mutex<HashMap<String, Timestamp>>>,
}

impl Context {
    /// A context on the system clock, reading `caches`.
    pub fn new(client: Client, config: OperatorConfig, caches: Caches) -> Self {
        let reporter = Reporter {
            controller: EVENT_REPORTER.to_string(),
            instance: None,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            caches,
            now: Arc::new(Timestamp::now),
            warned: Arc::default(),
            conflicts: Arc::default(),
            created: Arc::default(),
        }
    }

    /// The context with `now` as its clock.
    pub fn with_clock(mut self, now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        self.now = Arc::new(now);
        self
    }

    fn warned(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.warned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn conflicts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Timestamp>> {
        self.conflicts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn created(&self) -> std::sync::MutexGuard<'_, HashMap<String, Timestamp>> {
        self.created.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs the TrainingJob and PaddleJob controllers on every namespace until `shutdown` resolves.
pub async fn run_operator(
    client: Client,
    config: OperatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), OperatorError> {
    run_operator_in(client, config, None, &SyncReport::default(), shutdown).await
}

/// Runs the TrainingJob and PaddleJob controllers concurrently until `shutdown` resolves,
/// watching the jobs and the caches' objects in `namespace` only when given (as
/// `trainscale run --namespace`).
///
/// On shutdown both controllers stop taking work and let in-flight reconciles finish; the cache
/// watches stop with them.
pub async fn run_operator_in(
    client: Client,
    config: OperatorConfig,
    namespace: Option<String>,
    sync: &SyncReport,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), OperatorError> {
    let stop = shutdown.shared();
    let ns = namespace.as_deref();
    let (caches, writers) = Caches::new(config.podgroups);
    let (triggers, feeds) = cache::watch(&client, ns, writers, sync);
    // The caches are the operator's: when it stops (or is dropped), readiness no longer waits
    // for them.
    let _forget = ForgetOnDrop(sync.clone());
    let ctx = Arc::new(Context::new(client.clone(), config, caches));
    info!(podgroups = ?ctx.config.podgroups, kueue = ctx.config.kueue, restart_limit = ctx.config.restart_limit, autoclean = ctx.config.autoclean, namespace = ?ns, "operator starting");
    let controllers = futures::future::join(
        run_controller(
            JobKind::TrainingJob,
            scoped::<Guarded<TrainingJob>>(&client, ns),
            &triggers,
            ctx.clone(),
            stop.clone(),
            |job: Arc<Guarded<TrainingJob>>, ctx: Arc<Context>| async move {
                match &job.0 {
                    Ok(tj) => bounded(reconcile_kind(JobKind::TrainingJob, tj, &ctx)).await,
                    Err(bad) => Ok(skip_malformed(JobKind::TrainingJob, bad)),
                }
            },
        ),
        run_controller(
            JobKind::PaddleJob,
            scoped::<Guarded<PaddleJob>>(&client, ns),
            &triggers,
            ctx,
            stop,
            |job: Arc<Guarded<PaddleJob>>, ctx: Arc<Context>| async move {
                match &job.0 {
                    Ok(pj) => {
                        let tj = pj.as_training_job();
                        bounded(reconcile_kind(JobKind::PaddleJob, &tj, &ctx)).await
                    }
                    Err(bad) => Ok(skip_malformed(JobKind::PaddleJob, bad)),
                }
            },
        ),
    );
    match futures::future::select(Box::pin(controllers), feeds).await {
        futures::future::Either::Left(_) => {
            info!("operator stopped");
            Ok(())
        }
        futures::future::Either::Right(_) => Err(OperatorError::Controller(
            "the cache watches ended".to_string(),
        )),
    }
}

/// `reconcile` within [`RECONCILE_TIMEOUT`]: one that takes longer (an API call that hangs) is
/// an error, retried after [`ERROR_REQUEUE`], so no job's reconcile waits without bound.
async fn bounded(
    reconcile: impl Future<Output = Result<Action, OperatorError>>,
) -> Result<Action, OperatorError> {
    tokio::time::timeout(RECONCILE_TIMEOUT, reconcile)
        .await
        .unwrap_or_else(|_| {
            Err(OperatorError::Controller(format!(
                "the reconcile took longer than {} s",
                RECONCILE_TIMEOUT.as_secs()
            )))
        })
}

/// Takes the operator's caches out of the [`SyncReport`] when dropped.
struct ForgetOnDrop(SyncReport);

impl Drop for ForgetOnDrop {
    fn drop(&mut self) {
        for resource in cache::CACHE_RESOURCES {
            self.0.forget(resource);
        }
    }
}

/// A job object that does not deserialize is left alone until it changes: the autoscaler
/// reports it (Warning Event `InvalidSpec`, the skipped-jobs metric); one such object never stops
/// the controller's watch.
fn skip_malformed(kind: JobKind, bad: &MalformedJob) -> Action {
    let object = kind.object_ref(
        bad.metadata.namespace.as_deref().unwrap_or_default(),
        bad.metadata.name.as_deref().unwrap_or_default(),
    );
    warn!(job = %object, field = %bad.field, error = %bad.error, "malformed job; not reconciled");
    Action::await_change()
}

/// Runs one kind's Controller (triggered by the cached ReplicaSets and Jobs it owns) until `stop`
/// resolves.
async fn run_controller<K, F, Fut>(
    kind: JobKind,
    jobs: Api<K>,
    triggers: &Triggers,
    ctx: Arc<Context>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
    reconciler: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, OperatorError>> + Send + 'static,
{
    // As `Controller::new` builds it, but without the managed fields (1–2 KB an object from a
    // real API server, read by no reconcile) in the cache of every job.
    let writer = Writer::<K>::default();
    let reader = writer.as_reader();
    let jobs = reflector(
        writer,
        watcher(jobs, watcher::Config::default()).modify(cache::slim),
    )
    .applied_objects();
    Controller::for_stream(jobs, reader)
        .with_config(controller::Config::default().concurrency(CONCURRENT_RECONCILES))
        .owns_stream(triggers.replica_sets.subscribe())
        .owns_stream(triggers.jobs.subscribe())
        .graceful_shutdown_on(stop)
        .run(
            reconciler,
            move |job: Arc<K>, error: &OperatorError, _: Arc<Context>| {
                error_policy(kind, job.as_ref(), error)
            },
            ctx,
        )
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => tracing::debug!(%kind, job = %obj, "reconciled"),
                Err(e) => warn!(%kind, error = %e, "reconcile failed"),
            }
        })
        .await;
}

fn error_policy<K: Resource>(kind: JobKind, job: &K, error: &OperatorError) -> Action {
    let object = kind.object_ref(&job.namespace().unwrap_or_default(), &job.name_any());
    warn!(job = %object, %error, "reconcile error; retrying");
    Action::requeue(ERROR_REQUEUE)
}

fn is_permanent(error: &OperatorError) -> Option<String> {
    match error {
        OperatorError::Kube(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
            Some(s.message.clone())
        }
        OperatorError::NotOwned { .. }
        | OperatorError::NotLabelled { .. }
        | OperatorError::Field(_) => Some(error.to_string()),
        _ => None,
    }
}

/// A job under reconcile: its TrainingJob view and the kind it is stored as.
#[derive(Clone, Copy)]
struct Subject<'a> {
    kind: JobKind,
    job: &'a TrainingJob,
}

impl Subject<'_> {
    /// `Kind namespace/name`.
    fn object(&self) -> String {
        job_ref(self.job, self.kind)
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

/// Returns the cached object `cached`, or creates `want` when the cache lacks it (returning
/// what the server stored, in the cache's shape `C`); `None` when
/// the create answered AlreadyExists (the cache is behind: requeue). An object owned by someone
/// else, or one that stays out of the cache for [`CONFLICT_GRACE`], is an error.
async fn ensure<K, C>(
    ctx: &Context,
    api: &Api<K>,
    cached: Option<Arc<C>>,
    want: &K,
    kind: &'static str,
    owner: Subject<'_>,
) -> Result<Option<Arc<C>>, OperatorError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    C: Resource + DeserializeOwned,
{
    let name = want.meta().name.clone().unwrap_or_default();
    let namespace = owner.job.namespace().unwrap_or_default();
    let key = format!("{kind} {namespace}/{name}");
    let live = match cached {
        Some(live) => {
            ctx.created().remove(&key);
            live
        }
        None => {
            let now = (ctx.now)();
            let pending = ctx
                .created()
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < CONFLICT_GRACE);
            if pending {
                debug!(job = %owner.object(), kind, %name, "created, not cached yet; requeue");
                return Ok(None);
            }
            match api.create(&PostParams::default(), want).await {
                Ok(created) => {
                    info!(job = %owner.object(), kind, %name, "created");
                    let mut expected = ctx.created();
                    // Entries of objects deleted before the cache showed them go after the grace.
                    expected.retain(|_, at| now.duration_since(*at) < CONFLICT_GRACE);
                    expected.insert(key.clone(), now);
                    // In the shape the cache keeps it.
                    let kept = serde_json::to_value(&created)
                        .and_then(serde_json::from_value::<C>)
                        .map_err(|source| OperatorError::Json {
                            what: "a created object",
                            source,
                        })?;
                    Arc::new(kept)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    let now = (ctx.now)();
                    let mut conflicts = ctx.conflicts();
                    let first = *conflicts.entry(key).or_insert(now);
                    if now.duration_since(first) < CONFLICT_GRACE {
                        info!(job = %owner.object(), kind, %name, "exists but not cached yet; requeue");
                        return Ok(None);
                    }
                    return Err(OperatorError::NotLabelled {
                        kind,
                        owner_kind: owner.kind,
                        namespace,
                        name,
                        owner: owner.job.name_any(),
                        label: LABEL_JOB,
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    ctx.conflicts().remove(&key);
    if !owned_by(live.meta(), owner.job) {
        return Err(OperatorError::NotOwned {
            kind,
            owner_kind: owner.kind,
            namespace,
            name,
            owner: owner.job.name_any(),
        });
    }
    Ok(Some(live))
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
            "trainers": status.trainers,
        }
    })
}

fn owned_fields_equal(a: &TrainingJobStatus, b: &TrainingJobStatus) -> bool {
    a.phase == b.phase
        && a.reason == b.reason
        && a.replica_statuses == b.replica_statuses
        && a.start_time == b.start_time
        && a.released == b.released
        && a.trainers == b.trainers
}

/// Merge-patches the owned status fields into the job's status subresource when they changed.
async fn write_status(
    ctx: &Context,
    subject: Subject<'_>,
    prev: &TrainingJobStatus,
    next: &TrainingJobStatus,
) -> Result<(), OperatorError> {
    if owned_fields_equal(prev, next) {
        return Ok(());
    }
    if prev.phase != next.phase {
        info!(job = %subject.object(), from = prev.phase.as_str(), to = next.phase.as_str(), reason = %next.reason, "phase");
    }
    let job = subject.job;
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &job.namespace().unwrap_or_default(),
        &subject.kind.api_resource(),
    );
    jobs.patch_status(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(status_patch(next)),
    )
    .await?;
    Ok(())
}

/// The Warning Event listing `warnings` (`field: message; …`, at most 1 kB), if there are any.
pub fn spec_warning_event(warnings: &[FieldError]) -> Option<Event> {
    if warnings.is_empty() {
        return None;
    }
    Some(Event {
        type_: EventType::Warning,
        reason: REASON_SPEC_WARNING.to_string(),
        note: Some(fields_note(warnings)),
        action: "Validate".to_string(),
        secondary: None,
    })
}

/// The Event's reference to the job: its kind, apiVersion, uid and resourceVersion (so each
/// version's warnings are an Event of their own, not a repeat of an older note).
fn event_reference(subject: Subject<'_>) -> ObjectReference {
    let job = subject.job;
    ObjectReference {
        api_version: Some(subject.kind.api_version().to_string()),
        kind: Some(subject.kind.as_str().to_string()),
        name: Some(job.name_any()),
        namespace: job.namespace(),
        uid: job.uid(),
        resource_version: job.resource_version(),
        ..ObjectReference::default()
    }
}

/// Publishes the job's spec warnings as one Warning Event, once per (uid, generation) in this
/// process; a failed publish is logged and retried on the next reconcile.
async fn report_warnings(ctx: &Context, subject: Subject<'_>, warnings: &[FieldError]) {
    let Some(event) = spec_warning_event(warnings) else {
        return;
    };
    let Some(uid) = subject.job.uid() else {
        return;
    };
    let generation = subject.job.metadata.generation.unwrap_or(0);
    if ctx.warned().get(&uid) == Some(&generation) {
        return;
    }
    match ctx
        .recorder
        .publish(&event, &event_reference(subject))
        .await
    {
        Ok(()) => {
            info!(job = %subject.object(), generation, warnings = warnings.len(), "reported spec warnings");
            ctx.warned().insert(uid, generation);
        }
        Err(e) => warn!(job = %subject.object(), error = %e, "could not publish the spec warnings"),
    }
}

/// One pass over one TrainingJob.
pub async fn reconcile(job: Arc<TrainingJob>, ctx: Arc<Context>) -> Result<Action, OperatorError> {
    reconcile_kind(JobKind::TrainingJob, &job, &ctx).await
}

/// One pass over one PaddleJob: its TrainingJob view, reconciled as a PaddleJob.
pub async fn reconcile_paddle_job(
    job: Arc<PaddleJob>,
    ctx: Arc<Context>,
) -> Result<Action, OperatorError> {
    reconcile_kind(JobKind::PaddleJob, &job.as_training_job(), &ctx).await
}

/// One pass over a `kind` job, given as its TrainingJob view.
pub async fn reconcile_kind(
    kind: JobKind,
    job: &TrainingJob,
    ctx: &Context,
) -> Result<Action, OperatorError> {
    let subject = Subject { kind, job };
    let ns = job.namespace().ok_or_else(|| OperatorError::Missing {
        object: subject.object(),
        what: "metadata.namespace",
    })?;
    let prev = job.status.clone().unwrap_or_default();
    let now = (ctx.now)();
    if let Some(cache) = ctx.caches.unsynced() {
        debug!(job = %subject.object(), cache, "operator cache not synced yet; requeue");
        return Ok(Action::requeue(CACHE_REQUEUE));
    }

    if prev.phase.is_finished() {
        if let Some(uid) = job.uid() {
            ctx.warned().remove(&uid);
        }
        let mut next = prev.clone();
        release(subject, ctx, &ns, &mut next).await?;
        write_status(ctx, subject, &prev, &next).await?;
        return Ok(Action::await_change());
    }

    let findings = check_training_job(job);
    let rename = |problems: Vec<FieldError>| -> Vec<FieldError> {
        problems
            .into_iter()
            .map(|p| rename_problem(kind, p))
            .collect()
    };
    let errors = rename(findings.errors);
    if !errors.is_empty() {
        let next = phase::invalid(&prev, kind, &errors);
        write_status(ctx, subject, &prev, &next).await?;
        return Ok(Action::await_change());
    }
    let mut warnings = findings.warnings;
    let sched = super::pod::scheduling(job, &ctx.config);
    if ctx.config.scheduler_name.is_some() && !sched.co_scheduled {
        warnings.extend(super::pod::own_scheduler_blockers(job));
    }
    report_warnings(ctx, subject, &rename(warnings)).await;

    let observed = match create_and_observe(subject, ctx, &ns).await {
        Ok(Some(obs)) => obs,
        Ok(None) => return Ok(Action::requeue(CACHE_REQUEUE)),
        Err(e) => match is_permanent(&e) {
            Some(reason) => {
                let next = phase::finish(
                    &prev,
                    crate::api::TrainingJobPhase::Failed,
                    format!("creating the job's objects: {reason}"),
                );
                write_status(ctx, subject, &prev, &next).await?;
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
        release(subject, ctx, &ns, &mut next).await?;
        write_status(ctx, subject, &prev, &next).await?;
        return Ok(Action::await_change());
    }
    write_status(ctx, subject, &prev, &next).await?;
    let wait = phase::walltime_remaining(&next, &policy, now).map_or(RESYNC, |w| w.min(RESYNC));
    Ok(Action::requeue(wait))
}

/// Creates every child missing from the caches, keeps the trainers ConfigMap current, and
/// observes the children; `None` when a child exists but is not cached yet.
async fn create_and_observe(
    subject: Subject<'_>,
    ctx: &Context,
    ns: &str,
) -> Result<Option<Observation>, OperatorError> {
    let job = subject.job;
    let name = job.name_any();
    let client = ctx.client.clone();
    let caches = &ctx.caches;
    let want = desired(job, subject.kind, &ctx.config)?;

    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cached = caches.config_map(ns, &trainers_config_name(&name));
    let Some(config_map) = ensure(
        ctx,
        &configs,
        cached,
        &want.trainers_config,
        "ConfigMap",
        subject,
    )
    .await?
    else {
        return Ok(None);
    };

    if let (Some(group), Some(resource)) = (&want.pod_group, api_resource(ctx.config.podgroups)) {
        let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let cached = caches.pod_group(ns, &group.name_any());
        let user_named = !job.spec.pod_group_name.trim().is_empty();
        match cached {
            // `podGroupName` names a group its pods join; one that exists (made by the user or
            // by another job naming it too) is joined as it is, never taken over.
            Some(existing) if user_named && !owned_by(existing.meta(), job) => {
                debug!(job = %subject.object(), group = %group.name_any(), "joins an existing PodGroup");
            }
            cached => {
                if ensure(ctx, &groups, cached, group, "PodGroup", subject)
                    .await?
                    .is_none()
                {
                    return Ok(None);
                }
            }
        }
    }

    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let mut obs = Observation::default();
    if let Some(master) = &want.master {
        let cached = caches.replica_set(ns, &master_name(&name));
        let Some(live) = ensure(ctx, &sets, cached, master, "ReplicaSet", subject).await? else {
            return Ok(None);
        };
        obs.master = Some(phase::observe_replica_set(&live));
    }
    if let Some(pserver) = &want.pserver {
        let cached = caches.replica_set(ns, &pserver_name(&name));
        let Some(live) = ensure(ctx, &sets, cached, pserver, "ReplicaSet", subject).await? else {
            return Ok(None);
        };
        obs.pserver = Some(phase::observe_replica_set(&live));
        obs.pserver_max_restarts = caches.pserver_max_restarts(ns, &name);
    }
    let trainer_jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let cached = caches.job(ns, &trainer_name(&name));
    let Some(trainer) = ensure(ctx, &trainer_jobs, cached, &want.trainer, "Job", subject).await?
    else {
        return Ok(None);
    };
    let counts = phase::observe_job(&trainer);

    let current = counts.parallelism.to_string();
    let stored = config_map.data.as_ref().and_then(|d| d.get(TRAINERS_KEY));
    if stored != Some(&current) {
        configs
            .patch(
                &trainers_config_name(&name),
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": { TRAINERS_KEY: current } })),
            )
            .await?;
    }
    obs.trainer = Some(counts);
    Ok(Some(obs))
}

/// The patch that stops a finished job's trainer Job: `spec.suspend`, or under `--kueue` (Kueue
/// owns `suspend` and would lift it again while the Workload is admitted) zero trainers: an
/// Indexed Job with `parallelism` = `completions` = 0 completes, so Kueue finishes its Workload and
/// gives back the quota; a non-Indexed one keeps no pod.
fn stop_patch(trainer: &CachedJob, kueue: bool) -> serde_json::Value {
    if !kueue {
        return json!({ "spec": { "suspend": true } });
    }
    if trainer.indexed() {
        json!({ "spec": { "parallelism": 0, "completions": 0 } })
    } else {
        json!({ "spec": { "parallelism": 0 } })
    }
}

/// Ends a finished job's work: stops the trainer Job if it still runs (so Timeout and a
/// restart-limit Failed really end it) and, with `--autoclean`, releases every pod once.
async fn release(
    subject: Subject<'_>,
    ctx: &Context,
    ns: &str,
    status: &mut TrainingJobStatus,
) -> Result<(), OperatorError> {
    if status.released {
        return Ok(());
    }
    let name = subject.job.name_any();
    let client = ctx.client.clone();
    let trainer_jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    if let Some(trainer) = ctx.caches.job(ns, &trainer_name(&name)) {
        let counts = phase::observe_job(&trainer);
        if counts.outcome.is_none() && !trainer.suspended() {
            let stop = stop_patch(&trainer, ctx.config.kueue);
            info!(job = %subject.object(), patch = %stop, "stopping the trainer Job");
            trainer_jobs
                .patch(
                    &trainer_name(&name),
                    &PatchParams::default(),
                    &Patch::Merge(stop),
                )
                .await?;
        }
    }
    if !ctx.config.autoclean {
        return Ok(());
    }
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    for rs in [master_name(&name), pserver_name(&name)] {
        let running = ctx
            .caches
            .replica_set(ns, &rs)
            .is_some_and(|set| set.replicas() != 0);
        if !running {
            continue;
        }
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
    // Only finished trainer pods: the suspended trainer Job's controller removes the others
    // (and the admission policy lets trainscale delete no other pod).
    let pods: Api<Pod> = Api::namespaced(client, ns);
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default()
            .labels(&format!("{LABEL_TRAINER}={name}"))
            .fields(FINISHED_PODS),
    )
    .await?;
    info!(job = %subject.object(), "released");
    status.released = true;
    Ok(())
}

/// A pod field selector for pods that have finished (Succeeded or Failed).
pub const FINISHED_PODS: &str = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_warnings_make_one_truncated_warning_event() {
        assert!(spec_warning_event(&[]).is_none());
        let warnings = [
            FieldError::new("TrainingJob ns/a", "spec.a", "first"),
            FieldError::new("TrainingJob ns/a", "spec.b", "second"),
        ];
        let event = spec_warning_event(&warnings).unwrap();
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "SpecWarning");
        assert_eq!(event.action, "Validate");
        assert_eq!(event.note.as_deref(), Some("spec.a: first; spec.b: second"));

        let long = [FieldError::new(
            "TrainingJob ns/a",
            "spec.a",
            "é".repeat(800),
        )];
        let note = spec_warning_event(&long).unwrap().note.unwrap();
        assert!(note.ends_with('…'));
        assert!(
            note.len() <= crate::api::note::NOTE_LIMIT + '…'.len_utf8(),
            "{}",
            note.len()
        );
        assert!(note.starts_with("spec.a: éé"));
    }
}
