//! The scheduler role's writes: `pods/binding` as kube-scheduler posts it, the `Scheduled` and
//! `FailedScheduling` Events, and the `PodScheduled=False` condition (a strategic merge patch
//! keyed by condition type, as kube-scheduler writes it, sent only when it changes). A stage of
//! writes ends at its deadline, when the leader lease is lost, or at shutdown, whichever comes
//! first.

use std::sync::atomic::{AtomicU8, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::assign::{Bind, GangTimeout, UNSCHEDULABLE, Unschedulable};
use super::pods::{SCHEDULING_GATED, SCHEDULING_GATED_MESSAGE};
use crate::api::JobKey;
use crate::api::note::truncate_note;
use crate::daemon::leader::Fence;
use crate::daemon::metrics;

/// Binds sent at once.
const CONCURRENT_BINDS: usize = 16;

/// Where one bind of a stage stands (see [`Binder::bind_all`]).
const NOT_BEGUN: u8 = 0;
const IN_FLIGHT: u8 = 1;
const BOUND: u8 = 2;

/// Unschedulable reports (a status patch and an Event each) sent at once.
const CONCURRENT_REPORTS: usize = 8;

/// When a stage of writes stops early.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The stage's deadline.
    pub until: tokio::time::Instant,
    /// Turns true when the daemon is asked to shut down.
    pub stop: watch::Receiver<bool>,
}

/// Why a stage of writes stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Deadline,
    LeaseLost,
    Shutdown,
}

impl Cut {
    pub fn as_str(self) -> &'static str {
        match self {
            Cut::Deadline => "deadline",
            Cut::LeaseLost => "lease_lost",
            Cut::Shutdown => "shutdown",
        }
    }
}

/// Resolves once `stop` turns true; never when its sender is gone while it is false.
async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How one bind ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    Bound,
    /// The pod is bound already (409) or gone (404): the watch will say where, nothing to retry.
    Moot(String),
    /// Any other failure: the next pass retries from fresh state.
    Failed(String),
    /// Not sent: the leader lease was lost, or the stage ended first.
    NotSent,
    /// Sent, but the stage ended before its answer: it may be bound.
    Unknown,
}

/// Writes bindings and scheduling reports.
pub struct Binder {
    client: Client,
    recorder: Recorder,
    fence: Fence,
    /// The scheduler name Events report as their source.
    name: String,
}

impl Binder {
    /// A binder publishing Events as scheduler `name` from `instance`.
    pub fn new(client: Client, name: &str, instance: &str, fence: Fence) -> Self {
        let reporter = Reporter {
            controller: name.to_string(),
            instance: Some(instance.to_string()),
        };
        Binder {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            fence,
            name: name.to_string(),
        }
    }

    /// Resolves when a stage must stop: its deadline, the lease lost, or shutdown.
    async fn cut(&self, limits: &Limits) -> Cut {
        tokio::select! {
            biased;
            _ = self.fence.lost() => Cut::LeaseLost,
            _ = stopped(limits.stop.clone()) => Cut::Shutdown,
            _ = tokio::time::sleep_until(limits.until) => Cut::Deadline,
        }
    }

    /// Sends every bind, a few at a time, until `limits` cut the stage short: first the pods
    /// outside trainer positions (a job's master and pservers), answered before any trainer's is
    /// sent, then the trainers. Each outcome in the order of `binds` (`Unknown` for a bind cut off
    /// before its answer, `NotSent` for one not begun, `Bound` for one cut off while its Event was
    /// sent), and the cut, if any.
    pub async fn bind_all(
        &self,
        binds: &[Bind],
        limits: &Limits,
    ) -> (Vec<BindOutcome>, Option<Cut>) {
        let stands: Vec<AtomicU8> = binds.iter().map(|_| AtomicU8::new(NOT_BEGUN)).collect();
        let mut done: Vec<Option<BindOutcome>> = vec![None; binds.len()];
        let (first, then): (Vec<usize>, Vec<usize>) =
            (0..binds.len()).partition(|i| binds[*i].position.is_none());
        let cut = self.cut(limits);
        tokio::pin!(cut);
        let mut ended = None;
        for wave in [first, then] {
            let stands = &stands;
            let mut sent = futures::stream::iter(wave.into_iter().map(|i| async move {
                let b = &binds[i];
                stands[i].store(IN_FLIGHT, Ordering::Relaxed);
                let outcome = self.post(b).await;
                if outcome == BindOutcome::Bound {
                    stands[i].store(BOUND, Ordering::Relaxed);
                    self.announce(b).await;
                }
                (i, outcome)
            }))
            .buffer_unordered(CONCURRENT_BINDS);
            ended = loop {
                tokio::select! {
                    biased;
                    why = &mut cut => break Some(why),
                    next = sent.next() => match next {
                        Some((i, outcome)) => done[i] = Some(outcome),
                        None => break None,
                    },
                }
            };
            if ended.is_some() {
                break;
            }
        }
        let cut = ended;
        let outcomes = done
            .into_iter()
            .zip(&stands)
            .map(|(outcome, stands)| {
                outcome.unwrap_or_else(|| match stands.load(Ordering::Relaxed) {
                    BOUND => BindOutcome::Bound,
                    stands => {
                        let outcome = if stands == IN_FLIGHT {
                            BindOutcome::Unknown
                        } else {
                            BindOutcome::NotSent
                        };
                        metrics::bind(outcome_label(&outcome));
                        outcome
                    }
                })
            })
            .collect();
        (outcomes, cut)
    }

    /// Writes the reports whose condition changed, a few at a time, until `limits` cut the stage
    /// short: how many were sent, and the cut, if any.
    pub async fn report_all(
        &self,
        reports: &[Unschedulable],
        now: Timestamp,
        limits: &Limits,
    ) -> (usize, Option<Cut>) {
        let mut sent = futures::stream::iter(
            reports
                .iter()
                .filter(|u| !u.unchanged)
                .map(|u| self.report_unschedulable(u, now)),
        )
        .buffer_unordered(CONCURRENT_REPORTS);
        let cut = self.cut(limits);
        tokio::pin!(cut);
        let mut count = 0;
        loop {
            tokio::select! {
                biased;
                why = &mut cut => return (count, Some(why)),
                next = sent.next() => match next {
                    Some(()) => count += 1,
                    None => return (count, None),
                },
            }
        }
    }

    /// Publishes a Warning Event `GangTimeout` on a gang's job, until `limits` cut it short.
    pub async fn report_gang_timeout(
        &self,
        t: &GangTimeout,
        uid: Option<String>,
        limits: &Limits,
    ) -> Option<Cut> {
        let reference = job_reference(&t.job, uid);
        let publish = self.publish(
            reference,
            EventType::Warning,
            "GangTimeout",
            t.message.clone(),
        );
        tokio::select! {
            biased;
            why = self.cut(limits) => Some(why),
            _ = publish => None,
        }
    }

    /// Binds one pod to its node and reports it with a `Scheduled` Event.
    pub async fn bind(&self, b: &Bind) -> BindOutcome {
        let outcome = self.post(b).await;
        if outcome == BindOutcome::Bound {
            self.announce(b).await;
        }
        outcome
    }

    /// Posts one pod's binding.
    async fn post(&self, b: &Bind) -> BindOutcome {
        if !self.fence.held() {
            return BindOutcome::NotSent;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &b.pod.0);
        let sent: Result<Value, kube::Error> = pods
            .create_subresource("binding", &b.pod.1, &PostParams::default(), &binding(b))
            .await;
        let outcome = match sent {
            Ok(_) => BindOutcome::Bound,
            Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {
                BindOutcome::Moot(s.message)
            }
            Err(e) => {
                metrics::api_error("create");
                BindOutcome::Failed(e.to_string())
            }
        };
        metrics::bind(outcome_label(&outcome));
        outcome
    }

    /// The `Scheduled` Event of a pod bound.
    async fn announce(&self, b: &Bind) {
        let note = format!(
            "Successfully assigned {}/{} to {}",
            b.pod.0, b.pod.1, b.node
        );
        let reference = pod_reference(&b.pod, b.uid.clone());
        self.publish(reference, EventType::Normal, "Scheduled", note)
            .await;
    }

    /// Writes `PodScheduled=False, reason Unschedulable` with the message, and a
    /// `FailedScheduling` Event, unless the pod says so already.
    pub async fn report_unschedulable(&self, u: &Unschedulable, now: Timestamp) {
        if u.unchanged || !self.fence.held() {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &u.pod.0);
        let patch = Patch::Strategic(unschedulable_patch(&u.message, now));
        if let Err(e) = pods
            .patch_status(&u.pod.1, &PatchParams::default(), &patch)
            .await
        {
            metrics::api_error("patch");
            tracing::warn!(pod = %format!("{}/{}", u.pod.0, u.pod.1), error = %e, "could not write PodScheduled");
        }
        let reference = pod_reference(&u.pod, u.uid.clone());
        self.publish(
            reference,
            EventType::Warning,
            "FailedScheduling",
            u.message.clone(),
        )
        .await;
    }

    /// Writes `PodScheduled=False, reason SchedulingGated` on a gated pod, as kube-scheduler
    /// does (no Event). Called only for pods whose condition does not say so yet.
    /// [`Binder::report_gated`] for each pod in turn until `limits` cut the stage short; the
    /// cut, if any.
    pub async fn report_gated_all(
        &self,
        pods: &[(String, String)],
        now: Timestamp,
        limits: &Limits,
    ) -> Option<Cut> {
        for pod in pods {
            tokio::select! {
                biased;
                cut = self.cut(limits) => return Some(cut),
                () = self.report_gated(pod, now) => {}
            }
        }
        None
    }

    pub async fn report_gated(&self, pod: &(String, String), now: Timestamp) {
        if !self.fence.held() {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.0);
        let patch = Patch::Strategic(scheduling_gated_patch(now));
        if let Err(e) = pods
            .patch_status(&pod.1, &PatchParams::default(), &patch)
            .await
        {
            metrics::api_error("patch");
            tracing::warn!(pod = %format!("{}/{}", pod.0, pod.1), error = %e, "could not write PodScheduled");
        }
    }

    async fn publish(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        if !self.fence.held() {
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate_note(note)),
            action: "Scheduling".to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            metrics::api_error("create");
            tracing::warn!(scheduler = %self.name, error = %e, "could not publish an Event");
        }
    }
}

/// The metrics label of a bind outcome.
fn outcome_label(outcome: &BindOutcome) -> &'static str {
    match outcome {
        BindOutcome::Bound => "bound",
        BindOutcome::Moot(_) => "moot",
        BindOutcome::Failed(_) => "failed",
        BindOutcome::NotSent => "not_sent",
        BindOutcome::Unknown => "unknown",
    }
}

fn pod_reference(pod: &(String, String), uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        name: Some(pod.1.clone()),
        namespace: Some(pod.0.clone()),
        uid,
        ..ObjectReference::default()
    }
}

fn job_reference(job: &JobKey, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(job.kind.api_version().to_string()),
        kind: Some(job.kind.as_str().to_string()),
        name: Some(job.name.to_string()),
        namespace: Some(job.namespace.to_string()),
        uid,
        ..ObjectReference::default()
    }
}

/// The `v1 Binding` body kube-scheduler posts to `pods/<name>/binding`.
pub fn binding(b: &Bind) -> Value {
    let mut metadata = json!({ "name": b.pod.1, "namespace": b.pod.0 });
    if let Some(uid) = &b.uid {
        metadata["uid"] = json!(uid);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": { "apiVersion": "v1", "kind": "Node", "name": b.node },
    })
}

/// The strategic merge patch of `status.conditions` (merged by `type`) setting `PodScheduled`.
pub fn unschedulable_patch(message: &str, now: Timestamp) -> Value {
    json!({
        "status": {
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": UNSCHEDULABLE,
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": now.to_string(),
            }]
        }
    })
}

/// The strategic merge patch setting `PodScheduled=False, reason SchedulingGated` with
/// kube-scheduler's message.
pub fn scheduling_gated_patch(now: Timestamp) -> Value {
    json!({
        "status": {
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": SCHEDULING_GATED,
                "message": SCHEDULING_GATED_MESSAGE,
                "lastProbeTime": null,
                "lastTransitionTime": now.to_string(),
            }]
        }
    })
}
