//! Applying a plan to the cluster: the trainer Job's parallelism (the paddlepaddle.org kinds) or
//! one field of the job object with the `trainscale.io/last-scale` annotation (the PyTorch
//! kinds), the TrainingJob's scale records, and Events. The
//! autoscaler writes no phase: `status.phase` has one writer, the operator. Every write is bounded and one job's failure is returned
//! as its outcome, never propagated to the others.

use crate::api::trainer_job::{ANNOTATION_ZERO_TRAINERS, at_zero_trainers, trainer_count};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::http::Health;
use super::leader::Fence;
use super::metrics;
use super::sizing::{SizingUpdate, Written, merged, sizing_only};
use super::store::{InvalidJob, TrainerJobRef};
use crate::api::LAST_SCALE_ANNOTATION;
use crate::api::note::{fields_note, truncate_note};
use crate::api::sizing::SIZING_ANNOTATION;
use crate::api::{FieldError, JobKey, ScaleResults, TrainerJobScaleRecord, TrainingJobStatus};
use crate::cluster::kinds::{
    Records, Resize, SizeAt, decode_dynamic, last_scale_annotation, priority_field, records_of,
    resize_of,
};
use crate::planner::Reason;

/// Scale records kept in a TrainingJob's status.
pub const MAX_SCALE_RECORDS: usize = 50;
/// Attempts of a write that meets 409 Conflict (each retry re-reads the object).
pub const MAX_ATTEMPTS: u32 = 4;
/// Jobs whose writes one stage of a pass has in flight at once (rescales, sizing conditions), as
/// the scheduler role's binds: a first pass on a large cluster writes tens of thousands of jobs.
pub const CONCURRENT_JOB_WRITES: usize = 16;

/// One job's rescale, resolved against the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Rescale {
    pub key: JobKey,
    pub uid: Option<String>,
    /// The job object's resourceVersion as planned (kinds sized by a field of the object).
    pub resource_version: Option<String>,
    pub trainer_job: Option<TrainerJobRef>,
    /// Where the job object keeps the Job spec it is resized by, as planned
    /// ([`Resize::JobSpec`] kinds).
    pub size_at: Option<SizeAt>,
    pub current: i32,
    pub target: i32,
    pub reason: Reason,
}

/// A stage deadline no pass reaches (a year; `Instant` arithmetic must not overflow).
const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The bounds of one stage of a pass's job writes.
#[derive(Debug, Clone, Copy)]
pub struct WriteLimits {
    /// Upper bound on one job's writes.
    pub timeout: Duration,
    /// No job's writes start after this; the rest wait for the next pass.
    pub until: tokio::time::Instant,
}

impl WriteLimits {
    /// Limits of a stage that starts now and may start writes for `deadline`.
    pub fn from_now(timeout: Duration, deadline: Duration) -> Self {
        WriteLimits {
            timeout,
            until: tokio::time::Instant::now() + deadline,
        }
    }

    /// Limits that bound each job's writes by `timeout` and the stage not at all.
    pub fn per_job(timeout: Duration) -> Self {
        WriteLimits {
            timeout,
            until: tokio::time::Instant::now() + FAR_FUTURE,
        }
    }

    fn passed(&self) -> bool {
        tokio::time::Instant::now() >= self.until
    }

    /// Says that `stage` stopped at its deadline with `left` jobs' writes not started.
    fn cut(&self, stage: &'static str, left: usize) {
        metrics::write_stage_cut(stage);
        tracing::warn!(
            stage,
            left,
            "write deadline reached; the rest waits for the next pass"
        );
    }
}

/// How a rescale ended, as the scale record states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub result: ScaleResults,
    /// Empty on success; the error otherwise.
    pub reason: String,
    /// The object to write is gone (404): the rescale is dropped, nothing more is written.
    pub vanished: bool,
    /// The job object's resourceVersion after this rescale's writes to it, if it wrote any.
    pub object_version: Option<String>,
}

impl Outcome {
    fn ok() -> Self {
        Outcome {
            result: ScaleResults::True,
            reason: String::new(),
            vanished: false,
            object_version: None,
        }
    }

    fn failed(reason: impl Into<String>) -> Self {
        Outcome {
            result: ScaleResults::False,
            reason: reason.into(),
            vanished: false,
            object_version: None,
        }
    }

    /// The object is gone: nothing to record, nothing to retry.
    fn vanished(reason: impl Into<String>) -> Self {
        Outcome {
            vanished: true,
            ..Outcome::failed(reason)
        }
    }

    /// The write may or may not have happened.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Outcome {
            result: ScaleResults::Unknown,
            reason: reason.into(),
            vanished: false,
            object_version: None,
        }
    }

    /// The result as the API writes it.
    pub fn result_str(&self) -> &'static str {
        match self.result {
            ScaleResults::True => "True",
            ScaleResults::False => "False",
            ScaleResults::Unknown => "Unknown",
        }
    }
}

/// Writes plans to the API server.
pub struct Actuator {
    client: Client,
    recorder: Recorder,
    clock: fn() -> Timestamp,
    fence: Fence,
    health: Option<Arc<Health>>,
}

impl Actuator {
    /// An actuator publishing Events as `trainscale` from `instance`.
    pub fn new(client: Client, instance: &str) -> Self {
        let reporter = Reporter {
            controller: "trainscale".to_string(),
            instance: Some(instance.to_string()),
        };
        Actuator {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            clock: Timestamp::now,
            fence: Fence::Always,
            health: None,
        }
    }

    /// Reports each applied job as progress of the pass loop (for `/healthz`).
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.health = Some(health);
        self
    }

    /// Writes only while `fence` is held: a deposed leader issues no further writes.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Whether writes are still allowed (the leader lease is held).
    pub fn may_write(&self) -> bool {
        self.fence.held()
    }

    /// Replaces the clock that stamps scale records (tests).
    pub fn with_clock(mut self, clock: fn() -> Timestamp) -> Self {
        self.clock = clock;
        self
    }

    /// Applies the rescales of a pass, [`CONCURRENT_JOB_WRITES`] jobs at a time: first the
    /// shrinks (the room they give back is what growth was planned into), answered before any
    /// growth is sent, then the growths. Each job is bounded by `limits.timeout`; none starts
    /// after `limits.until` (the rest have no outcome and wait for the next pass). A failure is
    /// that job's outcome only; a requested shutdown (`stop`) starts no further job; a lost
    /// Lease cancels the writes in flight (no outcome) and starts none. Outcomes in the order of
    /// `rescales`.
    pub async fn apply_all(
        &self,
        rescales: &[Rescale],
        limits: WriteLimits,
        stop: &watch::Receiver<bool>,
    ) -> Vec<(JobKey, Outcome)> {
        let (shrinks, growths): (Vec<usize>, Vec<usize>) =
            (0..rescales.len()).partition(|&i| rescales[i].target < rescales[i].current);
        let mut ended: Vec<(usize, Outcome)> = Vec::with_capacity(rescales.len());
        let mut unstarted = Unstarted::default();
        for wave in [shrinks, growths] {
            let ends = self
                .each_job(wave, &limits, stop, |i| {
                    self.apply_one(&rescales[i], limits.timeout)
                })
                .await;
            for (i, end) in ends {
                match end {
                    Ended::Done(outcome) => ended.push((i, outcome)),
                    Ended::NotStarted(gate) => unstarted.count(gate),
                    Ended::Cancelled => {
                        tracing::warn!(job = %rescales[i].key, "leader lease lost mid-rescale; writes stopped");
                        metrics::rescale("Unknown");
                    }
                }
            }
        }
        unstarted.report("rescales", &limits);
        ended.sort_unstable_by_key(|(i, _)| *i);
        ended
            .into_iter()
            .map(|(i, outcome)| (rescales[i].key.clone(), outcome))
            .collect()
    }

    /// Whether a job's writes may start now: the stage's deadline, a shutdown and the Lease.
    fn gate(&self, limits: &WriteLimits, stop: &watch::Receiver<bool>) -> Option<Gate> {
        if *stop.borrow() {
            Some(Gate::Shutdown)
        } else if !self.fence.held() {
            Some(Gate::LeaseLost)
        } else if limits.passed() {
            Some(Gate::Deadline)
        } else {
            None
        }
    }

    /// Runs `write` for each of `jobs`, [`CONCURRENT_JOB_WRITES`] at a time. A job whose
    /// [`Actuator::gate`] is shut when its turn comes is not started; one in flight when the
    /// Lease is lost is cancelled (a write that has ended by then is the job's). Each job's end
    /// with its index, in the order they ended.
    async fn each_job<T, W>(
        &self,
        jobs: Vec<usize>,
        limits: &WriteLimits,
        stop: &watch::Receiver<bool>,
        write: impl Fn(usize) -> W,
    ) -> Vec<(usize, Ended<T>)>
    where
        W: std::future::Future<Output = T>,
    {
        let write = &write;
        futures::stream::iter(jobs.into_iter().map(|i| async move {
            if let Some(gate) = self.gate(limits, stop) {
                return (i, Ended::NotStarted(gate));
            }
            tokio::select! {
                biased;
                done = write(i) => (i, Ended::Done(done)),
                _ = self.fence.lost() => (i, Ended::Cancelled),
            }
        }))
        .buffer_unordered(CONCURRENT_JOB_WRITES)
        .collect()
        .await
    }

    /// One job's rescale within a pass's stage, bounded by `timeout` (see
    /// [`Actuator::apply_all`]).
    async fn apply_one(&self, r: &Rescale, timeout: Duration) -> Outcome {
        let outcome = tokio::time::timeout(timeout, self.rescale(r))
            .await
            .unwrap_or_else(|_| Outcome::unknown("timed out applying the rescale"));
        if let Some(health) = &self.health {
            health.progressed();
        }
        metrics::rescale(outcome.result_str());
        tracing::info!(job = %r.key, current = r.current, target = r.target, reason = r.reason.as_str(), result = outcome.result_str(), error = %outcome.reason, "rescale");
        outcome
    }

    /// Rescales one job: parallelism (the Job controller then adds or removes the highest
    /// indexes; trainscale deletes no pod), scale record, Event.
    /// Each write first checks the fence: after a lost lease nothing more is written.
    pub async fn rescale(&self, r: &Rescale) -> Outcome {
        if !self.fence.held() {
            return Outcome::unknown(
                "the leader lease was lost before the trainer Job was patched",
            );
        }
        let mut outcome = match resize_of(r.key.kind) {
            Resize::TrainerJob => self.patch_parallelism(r).await,
            Resize::Field(path) => self.patch_field(r, path).await,
            Resize::JobSpec => self.patch_job_spec(r).await,
        };
        if outcome.vanished {
            // Dropped, not retried; no record is written for an object that is gone.
            tracing::info!(job = %r.key, "the object to resize vanished; rescale dropped");
            return outcome;
        }
        if !self.fence.held() {
            return outcome;
        }
        match self.record(r, &outcome).await {
            Ok(Some(version)) => outcome.object_version = Some(version),
            Ok(None) => {}
            Err(e) => tracing::warn!(job = %r.key, error = %e, "could not write the scale record"),
        }
        self.publish_rescale(r, &outcome).await;
        outcome
    }

    /// Sets the trainer Job's parallelism (and completions for Indexed Jobs) to the target,
    /// guarded by the resourceVersion and retried with a fresh read on 409.
    async fn patch_parallelism(&self, r: &Rescale) -> Outcome {
        let Some(job) = &r.trainer_job else {
            return Outcome::failed("no trainer Job found for this TrainingJob");
        };
        let api: Api<Job> = Api::namespaced(self.client.clone(), &job.namespace);
        let mut resource_version = job.resource_version.clone();
        let mut indexed = job.indexed;
        let mut at_zero = job.at_zero;
        for attempt in 1..=MAX_ATTEMPTS {
            let body = trainer_job_patch(
                r.target,
                TrainerJobShape { indexed, at_zero },
                resource_version.as_deref(),
            );
            match api
                .patch(&job.name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(updated) => return read_back(&updated, r.target),
                Err(kube::Error::Api(s)) if s.is_not_found() => {
                    return Outcome::vanished("the trainer Job no longer exists");
                }
                Err(kube::Error::Api(s)) if s.is_conflict() && attempt < MAX_ATTEMPTS => {
                    tracing::debug!(job = %r.key, attempt, "conflict patching the trainer Job; re-reading");
                    match api.get(&job.name).await {
                        Ok(fresh) => {
                            // A size someone else wrote is the new current: not overwritten.
                            let now = trainer_count(&fresh);
                            if now != r.current {
                                return Outcome::failed(format!(
                                    "the trainer Job's size changed to {now} since planned at {}; left to the next pass",
                                    r.current
                                ));
                            }
                            resource_version = fresh.resource_version();
                            indexed = is_indexed(&fresh);
                            at_zero = at_zero_trainers(&fresh);
                        }
                        Err(kube::Error::Api(s)) if s.is_not_found() => {
                            return Outcome::vanished("the trainer Job no longer exists");
                        }
                        Err(e) => {
                            metrics::api_error("get");
                            return outcome_of(&e, "re-reading the trainer Job");
                        }
                    }
                }
                Err(e) => {
                    metrics::api_error("patch");
                    return outcome_of(&e, "patching the trainer Job");
                }
            }
        }
        Outcome::failed("conflict: gave up after repeated 409s")
    }

    /// The job object's API, whatever its kind.
    fn job_api(&self, key: &JobKey) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &key.kind.api_resource(),
        )
    }

    /// Appends a scale record where the job's kind keeps them (the status of both paddlepaddle.org
    /// kinds: newest 50 kept), guarded by the resourceVersion it read. Only the records: the
    /// operator owns the phase and every other status field.
    /// The job object's new resourceVersion when a record was written to it.
    async fn record(&self, r: &Rescale, outcome: &Outcome) -> Result<Option<String>, kube::Error> {
        match records_of(r.key.kind) {
            Records::Status => self.record_in_status(r, outcome).await,
            // Written with the size, in the same patch (see `patch_field`).
            Records::Annotation => Ok(None),
        }
    }

    /// Sets the field at `path` of the job object to the target and, in the same merge patch,
    /// the `trainscale.io/last-scale` annotation; guarded by the resourceVersion planned on. On
    /// 409 the object is re-read: if the size is still the one planned on, the patch is retried
    /// at the new resourceVersion, else the rescale is dropped for the next pass to re-decide.
    async fn patch_field(&self, r: &Rescale, path: &'static [&'static str]) -> Outcome {
        let api = self.job_api(&r.key);
        let mut resource_version = r.resource_version.clone();
        let annotation =
            last_scale_annotation((self.clock)(), r.current, r.target, r.reason.as_str());
        let field = path.join(".");
        for attempt in 1..=MAX_ATTEMPTS {
            let body = field_patch(path, r.target, &annotation, resource_version.as_deref());
            match api
                .patch(&r.key.name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(updated) => {
                    let outcome = match value_at(&updated.data, path) {
                        Some(v) if v == i64::from(r.target) => Outcome::ok(),
                        Some(v) => {
                            Outcome::unknown(format!("{field} reads back {v}, not {}", r.target))
                        }
                        None => Outcome::unknown(format!("{field} reads back nothing")),
                    };
                    return Outcome {
                        object_version: updated.resource_version(),
                        ..outcome
                    };
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => {
                    return Outcome::vanished(format!("{} no longer exists", r.key));
                }
                Err(kube::Error::Api(s)) if s.is_conflict() && attempt < MAX_ATTEMPTS => {
                    tracing::debug!(job = %r.key, attempt, "conflict patching the job; re-reading");
                    match api.get(&r.key.name).await {
                        Ok(fresh) => {
                            let now = value_at(&fresh.data, path);
                            if now.is_some() && now != Some(i64::from(r.current)) {
                                return Outcome::failed(format!(
                                    "{field} changed to {} since planned at {}; left to the next pass",
                                    now.unwrap_or_default(),
                                    r.current
                                ));
                            }
                            resource_version = fresh.resource_version();
                        }
                        Err(kube::Error::Api(s)) if s.is_not_found() => {
                            return Outcome::vanished(format!("{} no longer exists", r.key));
                        }
                        Err(e) => {
                            metrics::api_error("get");
                            return outcome_of(&e, "re-reading the job");
                        }
                    }
                }
                Err(e) => {
                    metrics::api_error("patch");
                    return outcome_of(&e, &format!("patching {field}"));
                }
            }
        }
        Outcome::failed("conflict: gave up after repeated 409s")
    }

    /// Sets `parallelism` of the Job spec the job object keeps at [`Rescale::size_at`] to the
    /// target (and `completions` too when Indexed), with the `trainscale.io/last-scale`
    /// annotation in the same patch: a merge patch guarded by the resourceVersion planned on when
    /// the spec is the object's own, else a JSON Patch whose `test`s guard the resourceVersion
    /// and the list element's name. When a guard refuses (409 Conflict; 422 for a failed `test`)
    /// the object is re-read: a size someone else wrote is the new current and the rescale is
    /// dropped for the next pass to re-decide; else the patch is retried where the fresh object
    /// keeps the spec. `suspend` and everything else are never written.
    async fn patch_job_spec(&self, r: &Rescale) -> Outcome {
        let Some(mut at) = r.size_at.clone() else {
            return Outcome::failed(format!("where {} keeps its size is not known", r.key));
        };
        if at.indexed && r.target < 1 {
            return Outcome::failed(format!(
                "an Indexed Job at {} completions completes at once; not written",
                r.target
            ));
        }
        let api = self.job_api(&r.key);
        let mut resource_version = r.resource_version.clone();
        let annotation =
            last_scale_annotation((self.clock)(), r.current, r.target, r.reason.as_str());
        for attempt in 1..=MAX_ATTEMPTS {
            let field = size_field(&at);
            let patch =
                match job_spec_patch(&at, r.target, &annotation, resource_version.as_deref()) {
                    Ok(patch) => patch,
                    Err(e) => {
                        return Outcome::failed(format!("building the patch of {field}: {e}"));
                    }
                };
            match api
                .patch(&r.key.name, &PatchParams::default(), &patch)
                .await
            {
                Ok(updated) => {
                    let outcome = match parallelism_at(&updated.data, &at) {
                        Some(v) if v == i64::from(r.target) => Outcome::ok(),
                        Some(v) => {
                            Outcome::unknown(format!("{field} reads back {v}, not {}", r.target))
                        }
                        None => Outcome::unknown(format!("{field} reads back nothing")),
                    };
                    return Outcome {
                        object_version: updated.resource_version(),
                        ..outcome
                    };
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => {
                    return Outcome::vanished(format!("{} no longer exists", r.key));
                }
                Err(kube::Error::Api(s))
                    if (s.is_conflict() || s.code == 422) && attempt < MAX_ATTEMPTS =>
                {
                    tracing::debug!(job = %r.key, attempt, code = s.code, "patch refused; re-reading the job");
                    let fresh = match api.get(&r.key.name).await {
                        Ok(fresh) => fresh,
                        Err(kube::Error::Api(e)) if e.is_not_found() => {
                            return Outcome::vanished(format!("{} no longer exists", r.key));
                        }
                        Err(e) => {
                            metrics::api_error("get");
                            return outcome_of(&e, "re-reading the job");
                        }
                    };
                    let version = fresh.resource_version();
                    if s.code == 422 && version == resource_version {
                        // Nothing changed: the server refused the patch itself.
                        metrics::api_error("patch");
                        return outcome_of(&kube::Error::Api(s), &format!("patching {field}"));
                    }
                    let data = fresh.data.clone();
                    let job = match decode_dynamic(r.key.kind, fresh) {
                        Ok(Some(job)) => job,
                        Ok(None) => {
                            return Outcome::failed(format!(
                                "{} is no longer sized by trainscale; left to the next pass",
                                r.key
                            ));
                        }
                        Err(bad) => {
                            return Outcome::failed(format!(
                                "{} no longer reads ({}: {}); left to the next pass",
                                r.key, bad.field, bad.error
                            ));
                        }
                    };
                    let Some(fresh_at) = job.size_at() else {
                        return Outcome::failed(format!(
                            "{} no longer says where its size is; left to the next pass",
                            r.key
                        ));
                    };
                    // Read where the fresh object keeps it (its list may have moved).
                    let now = parallelism_at(&data, &fresh_at);
                    if now != Some(i64::from(r.current)) {
                        return Outcome::failed(format!(
                            "{} changed to {} since planned at {}; left to the next pass",
                            size_field(&fresh_at),
                            now.unwrap_or_default(),
                            r.current
                        ));
                    }
                    resource_version = version;
                    at = fresh_at;
                }
                Err(e) => {
                    metrics::api_error("patch");
                    return outcome_of(&e, &format!("patching {field}"));
                }
            }
        }
        Outcome::failed("conflict: gave up after repeated 409s")
    }

    async fn record_in_status(
        &self,
        r: &Rescale,
        outcome: &Outcome,
    ) -> Result<Option<String>, kube::Error> {
        let api = self.job_api(&r.key);
        let record = TrainerJobScaleRecord {
            scale_timestamp: Some(Time((self.clock)())),
            additional: r.target - r.current,
            status: outcome.result,
            reason: outcome.reason.clone(),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = api.get_status(&r.key.name).await.inspect_err(|_| {
                metrics::api_error("get");
            })?;
            let mut records = status_of(&current)?
                .map(|s| s.scale_records.scale_records)
                .unwrap_or_default();
            records.push(record.clone());
            let excess = records.len().saturating_sub(MAX_SCALE_RECORDS);
            records.drain(..excess);
            let body = status_patch(&records, current.resource_version().as_deref());
            match api
                .patch_status(&r.key.name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(updated) => return Ok(updated.resource_version()),
                Err(kube::Error::Api(s)) if s.is_conflict() && attempt < MAX_ATTEMPTS => continue,
                Err(e) => {
                    metrics::api_error("patch");
                    return Err(e);
                }
            }
        }
    }

    /// Writes the sizing conditions of each update, [`CONCURRENT_JOB_WRITES`] jobs at a time,
    /// each bounded by `limits.timeout`, at the resourceVersion given with it, starting none
    /// after `limits.until`, after a shutdown or once the Lease is lost (which also cancels the
    /// writes in flight); a failed or unstarted write is that job's only (the next pass decides
    /// it again). Answers, per job written and in the order of `updates`, the object's new
    /// resourceVersion and the conditions as written.
    pub async fn write_sizing_all(
        &self,
        updates: &[(&SizingUpdate, Option<String>)],
        limits: WriteLimits,
        stop: &watch::Receiver<bool>,
    ) -> Vec<(JobKey, Written)> {
        let ends = self
            .each_job(
                (0..updates.len()).collect(),
                &limits,
                stop,
                |i| async move {
                    let (update, resource_version) = &updates[i];
                    let conditions = merged(&update.existing, &update.desired, (self.clock)());
                    let at = resource_version.as_deref();
                    let done = tokio::time::timeout(
                        limits.timeout,
                        self.write_sizing(update, &conditions, at),
                    )
                    .await;
                    sizing_written(update, at, done).map(|version| (version, conditions))
                },
            )
            .await;
        let mut written = Vec::new();
        let mut unstarted = Unstarted::default();
        for (i, end) in ends {
            match end {
                Ended::Done(Some(done)) => written.push((i, done)),
                Ended::Done(None) => {}
                Ended::NotStarted(gate) => unstarted.count(gate),
                // Counted with the jobs the lost Lease left.
                Ended::Cancelled => unstarted.count(Gate::LeaseLost),
            }
        }
        unstarted.report("sizing", &limits);
        written.sort_unstable_by_key(|(i, _)| *i);
        written
            .into_iter()
            .map(|(i, done)| (updates[i].0.key.clone(), done))
            .collect()
    }

    /// One job's sizing conditions: `status.conditions` through the status subresource (the
    /// paddlepaddle.org kinds; the list is the autoscaler's to replace, other types kept as they
    /// are), else the `trainscale.io/sizing` annotation; guarded by `resource_version`.
    async fn write_sizing(
        &self,
        update: &SizingUpdate,
        conditions: &[Condition],
        resource_version: Option<&str>,
    ) -> Result<Option<String>, kube::Error> {
        let api = self.job_api(&update.key);
        let params = PatchParams::default();
        let updated = match records_of(update.key.kind) {
            Records::Status => {
                let body = conditions_patch(conditions, resource_version);
                api.patch_status(&update.key.name, &params, &Patch::Merge(&body))
                    .await?
            }
            Records::Annotation => {
                let body = sizing_annotation_patch(&sizing_only(conditions), resource_version);
                api.patch(&update.key.name, &params, &Patch::Merge(&body))
                    .await?
            }
        };
        Ok(updated.resource_version())
    }

    async fn publish_rescale(&self, r: &Rescale, outcome: &Outcome) {
        let (type_, reason) = match outcome.result {
            ScaleResults::True => (EventType::Normal, "Rescaled"),
            ScaleResults::False => (EventType::Warning, "RescaleFailed"),
            ScaleResults::Unknown => (EventType::Warning, "RescaleUnknown"),
        };
        let mut note = format!(
            "trainers {} -> {} ({})",
            r.current,
            r.target,
            r.reason.as_str()
        );
        if !outcome.reason.is_empty() {
            note.push_str(": ");
            note.push_str(&outcome.reason);
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate_note(note)),
            action: "Rescale".to_string(),
            secondary: None,
        };
        self.publish(&r.key, r.uid.clone(), &event).await;
    }

    /// Reports a job skipped for errors with a Warning Event naming the fields.
    pub async fn report_invalid(&self, job: &InvalidJob) {
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidSpec".to_string(),
            note: Some(truncate_note(format!(
                "not planned: {}",
                fields_note(&job.problems)
            ))),
            action: "Validate".to_string(),
            secondary: None,
        };
        self.publish(&job.key, job.uid.clone(), &event).await;
    }

    /// Says with a Normal Event why a job is left alone (a PyTorchJob left to its HPA).
    pub async fn report_left_alone(&self, job: &InvalidJob) {
        let event = Event {
            type_: EventType::Normal,
            reason: "NotPlanned".to_string(),
            note: Some(truncate_note(format!(
                "trainscale leaves this job alone: {}",
                fields_note(&job.problems)
            ))),
            action: "Plan".to_string(),
            secondary: None,
        };
        self.publish(&job.key, job.uid.clone(), &event).await;
    }

    /// Reports a planned job's warnings that only the autoscaler sees with a Warning Event each:
    /// `PriorityClassNotFound` for a priority naming no PriorityClass, `SizeCapped` for declared
    /// sizes above the cluster's size cap.
    pub async fn report_warnings(&self, job: &InvalidJob) {
        let (priority, capped): (Vec<FieldError>, Vec<FieldError>) = job
            .problems
            .iter()
            .cloned()
            .partition(|p| p.field == priority_field(job.key.kind));
        for (reason, problems) in [("PriorityClassNotFound", priority), ("SizeCapped", capped)] {
            if problems.is_empty() {
                continue;
            }
            let event = Event {
                type_: EventType::Warning,
                reason: reason.to_string(),
                note: Some(fields_note(&problems)),
                action: "Plan".to_string(),
                secondary: None,
            };
            self.publish(&job.key, job.uid.clone(), &event).await;
        }
    }

    async fn publish(&self, key: &JobKey, uid: Option<String>, event: &Event) {
        if !self.fence.held() {
            tracing::debug!(job = %key, reason = %event.reason, "leader lease lost; Event not sent");
            return;
        }
        let reference = ObjectReference {
            api_version: Some(key.kind.api_version().to_string()),
            kind: Some(key.kind.as_str().to_string()),
            name: Some(key.name.to_string()),
            namespace: Some(key.namespace.to_string()),
            uid,
            ..ObjectReference::default()
        };
        if let Err(e) = self.recorder.publish(event, &reference).await {
            metrics::api_error("create");
            tracing::warn!(job = %key, error = %e, "could not publish an Event");
        }
    }
}

/// What a trainer Job's resize patch depends on besides the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainerJobShape {
    /// `completionMode: Indexed`: `completions` follows `parallelism`.
    pub indexed: bool,
    /// Held at zero trainers by trainscale (see [`crate::api::trainer_job`]).
    pub at_zero: bool,
}

/// Why a job's writes were not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// The stage's `--write-deadline` had passed.
    Deadline,
    Shutdown,
    LeaseLost,
}

/// The jobs of a stage whose writes were not started, by why.
#[derive(Debug, Default)]
struct Unstarted {
    deadline: usize,
    shutdown: usize,
    lease_lost: usize,
}

impl Unstarted {
    fn count(&mut self, gate: Gate) {
        match gate {
            Gate::Deadline => self.deadline += 1,
            Gate::Shutdown => self.shutdown += 1,
            Gate::LeaseLost => self.lease_lost += 1,
        }
    }

    /// Says once per stage which jobs were left and why.
    fn report(&self, stage: &'static str, limits: &WriteLimits) {
        if self.deadline > 0 {
            limits.cut(stage, self.deadline);
        }
        if self.shutdown > 0 {
            tracing::info!(
                stage,
                left = self.shutdown,
                "shutdown requested; leaving the rest of the plan"
            );
        }
        if self.lease_lost > 0 {
            tracing::warn!(
                stage,
                left = self.lease_lost,
                "leader lease lost; leaving the rest of the plan unwritten"
            );
        }
    }
}

/// How one job's writes within a stage ended.
enum Ended<T> {
    Done(T),
    NotStarted(Gate),
    /// The Lease was lost while its writes were in flight.
    Cancelled,
}

/// Counts and logs one job's sizing write; its new resourceVersion if it was written.
fn sizing_written(
    update: &SizingUpdate,
    resource_version: Option<&str>,
    done: Result<Result<Option<String>, kube::Error>, tokio::time::error::Elapsed>,
) -> Option<Option<String>> {
    match done {
        Ok(Ok(version)) => {
            metrics::sizing_write("True");
            Some(version)
        }
        Ok(Err(e)) => {
            let result = match &e {
                kube::Error::Api(s) if s.is_conflict() || s.is_not_found() => "False",
                _ => {
                    metrics::api_error("patch");
                    "Unknown"
                }
            };
            metrics::sizing_write(result);
            tracing::info!(job = %update.key, resource_version = ?resource_version, error = %e, "sizing conditions not written; the next pass decides again");
            None
        }
        Err(_) => {
            metrics::sizing_write("Unknown");
            tracing::warn!(job = %update.key, "timed out writing the sizing conditions");
            None
        }
    }
}

/// The merge patch setting a trainer Job's size. Zero suspends the Job (marked as trainscale's)
/// and keeps its counts, since `completions: 0` would complete it; growing from zero lifts that
/// suspension with the new counts.
pub fn trainer_job_patch(
    target: i32,
    shape: TrainerJobShape,
    resource_version: Option<&str>,
) -> Value {
    if target <= 0 {
        return guarded(
            json!({
                "metadata": { "annotations": { ANNOTATION_ZERO_TRAINERS: "true" } },
                "spec": { "suspend": true },
            }),
            resource_version,
        );
    }
    let mut spec = json!({ "parallelism": target });
    if shape.indexed {
        spec["completions"] = json!(target);
    }
    let mut body = json!({ "spec": spec });
    if shape.at_zero {
        body["spec"]["suspend"] = json!(false);
        body["metadata"] = json!({ "annotations": { ANNOTATION_ZERO_TRAINERS: null } });
    }
    guarded(body, resource_version)
}

/// The merge patch resizing a job of a kind sized by one field (`path`), with the
/// `trainscale.io/last-scale` annotation and, when given, the resourceVersion guard.
pub fn field_patch(
    path: &[&str],
    target: i32,
    annotation: &str,
    resource_version: Option<&str>,
) -> Value {
    let mut value = json!(target);
    for key in path.iter().rev() {
        value = json!({ *key: value });
    }
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "metadata".to_string(),
            json!({ "annotations": { LAST_SCALE_ANNOTATION: annotation } }),
        );
    }
    guarded(value, resource_version)
}

/// The field a [`SizeAt`] names, as errors write it (`spec.parallelism`,
/// `spec.replicatedJobs[0].template.spec.parallelism`).
fn size_field(at: &SizeAt) -> String {
    let mut field = String::new();
    for part in at.spec.split('/').filter(|p| !p.is_empty()) {
        if part.bytes().all(|b| b.is_ascii_digit()) {
            field.push_str(&format!("[{part}]"));
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(part);
        }
    }
    field.push_str(".parallelism");
    field
}

/// `parallelism` of the Job spec at `at` of an object's fields, if it is an integer.
fn parallelism_at(data: &Value, at: &SizeAt) -> Option<i64> {
    data.pointer(&format!("{}/parallelism", at.spec))?.as_i64()
}

/// The patch resizing the Job spec at `at` to `target` (completions too when Indexed), with the
/// `trainscale.io/last-scale` annotation: a merge patch guarded by `resource_version` when the
/// spec crosses no list, else a JSON Patch testing the resourceVersion and the element's name
/// before replacing the counts.
pub fn job_spec_patch(
    at: &SizeAt,
    target: i32,
    annotation: &str,
    resource_version: Option<&str>,
) -> Result<Patch<Value>, serde_json::Error> {
    let Some((name_at, name)) = &at.element else {
        let mut counts = json!({ "parallelism": target });
        if at.indexed {
            counts["completions"] = json!(target);
        }
        let mut body = counts;
        for key in at.spec.split('/').filter(|p| !p.is_empty()).rev() {
            body = json!({ key: body });
        }
        if let Some(map) = body.as_object_mut() {
            map.insert(
                "metadata".to_string(),
                json!({ "annotations": { LAST_SCALE_ANNOTATION: annotation } }),
            );
        }
        return Ok(Patch::Merge(guarded(body, resource_version)));
    };
    let mut ops = Vec::new();
    if let Some(rv) = resource_version {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    ops.push(json!({"op": "test", "path": name_at, "value": name}));
    ops.push(json!({"op": "replace", "path": format!("{}/parallelism", at.spec), "value": target}));
    if at.indexed {
        ops.push(
            json!({"op": "replace", "path": format!("{}/completions", at.spec), "value": target}),
        );
    }
    // `~1` is `/` in a JSON Pointer; the opted-in object has annotations to add to.
    ops.push(json!({"op": "add",
        "path": format!("/metadata/annotations/{}", LAST_SCALE_ANNOTATION.replace('~', "~0").replace('/', "~1")),
        "value": annotation}));
    Ok(Patch::Json(serde_json::from_value(Value::Array(ops))?))
}

/// `body` with `metadata.resourceVersion` set when given: the server then answers 409 Conflict
/// if the object changed since that version.
fn guarded(mut body: Value, resource_version: Option<&str>) -> Value {
    if let (Some(rv), Some(map)) = (resource_version, body.as_object_mut()) {
        let metadata = map.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("resourceVersion".to_string(), json!(rv));
        }
    }
    body
}

/// The integer at `path` of an object's fields (`spec`, ...), if there is one.
fn value_at(data: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(data, |v, key| v.get(key))?.as_i64()
}

/// The merge patch of a job's status: the whole record list (merge patches replace lists), and
/// nothing else.
pub fn status_patch(records: &[TrainerJobScaleRecord], resource_version: Option<&str>) -> Value {
    guarded(
        json!({ "status": { "scale_records": { "ScaleRecords": records } } }),
        resource_version,
    )
}

/// The merge patch of a job's `status.conditions` (the whole list: merge patches replace lists).
pub fn conditions_patch(conditions: &[Condition], resource_version: Option<&str>) -> Value {
    guarded(
        json!({ "status": { "conditions": conditions } }),
        resource_version,
    )
}

/// The merge patch of a job's `trainscale.io/sizing` annotation.
pub fn sizing_annotation_patch(conditions: &[Condition], resource_version: Option<&str>) -> Value {
    let value = serde_json::to_string(conditions).unwrap_or_default();
    guarded(
        json!({ "metadata": { "annotations": { SIZING_ANNOTATION: value } } }),
        resource_version,
    )
}

/// The status of a job object of a paddlepaddle.org kind; one that does not deserialize is an
/// error (its scale records must not be overwritten).
fn status_of(job: &DynamicObject) -> Result<Option<TrainingJobStatus>, kube::Error> {
    match job.data.get("status") {
        None => Ok(None),
        Some(status) => serde_json::from_value(status.clone())
            .map(Some)
            .map_err(kube::Error::SerdeError),
    }
}

fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

fn read_back(job: &Job, target: i32) -> Outcome {
    if target <= 0 {
        return if at_zero_trainers(job) {
            Outcome::ok()
        } else {
            Outcome::unknown("the trainer Job does not read back as suspended at zero trainers")
        };
    }
    if at_zero_trainers(job) {
        return Outcome::unknown(format!(
            "the trainer Job reads back suspended at zero, not {target}"
        ));
    }
    match job.spec.as_ref().and_then(|s| s.parallelism) {
        Some(p) if p == target => Outcome::ok(),
        Some(p) => Outcome::unknown(format!(
            "the trainer Job reads back parallelism {p}, not {target}"
        )),
        None => Outcome::unknown("the trainer Job reads back no parallelism"),
    }
}

/// An API error is a refusal (False); anything else (timeouts, broken connections, unreadable
/// responses) leaves the outcome Unknown.
fn outcome_of(error: &kube::Error, doing: &str) -> Outcome {
    match error {
        kube::Error::Api(s) => {
            Outcome::failed(format!("{doing}: {} {}: {}", s.code, s.reason, s.message))
        }
        other => Outcome::unknown(format!("{doing}: {other}")),
    }
}
