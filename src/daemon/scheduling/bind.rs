//! The scheduler role's writes: `pods/binding` as kube-scheduler posts it, the `Scheduled` and
//! `FailedScheduling` Events, and the `PodScheduled=False` condition (a strategic merge patch
//! keyed by condition type, as kube-scheduler writes it, sent only when it changes).

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};

use super::assign::{Bind, UNSCHEDULABLE, Unschedulable};
use super::pods::{SCHEDULING_GATED, SCHEDULING_GATED_MESSAGE};
use crate::api::note::truncate_note;
use crate::daemon::leader::Fence;
use crate::daemon::metrics;

/// Binds sent at once.
const CONCURRENT_BINDS: usize = 16;

/// How one bind ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    Bound,
    /// The pod is bound already (409) or gone (404): the watch will say where, nothing to retry.
    Moot(String),
    /// Any other failure: the next pass retries from fresh state.
    Failed(String),
    /// Not sent: the leader lease was lost.
    NotSent,
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

    /// Sends every bind, a few at a time; each outcome in the order of `binds`.
    pub async fn bind_all(&self, binds: &[Bind]) -> Vec<BindOutcome> {
        futures::stream::iter(binds.iter().map(|b| self.bind(b)))
            .buffered(CONCURRENT_BINDS)
            .collect()
            .await
    }

    /// Binds one pod to its node and reports it with a `Scheduled` Event.
    pub async fn bind(&self, b: &Bind) -> BindOutcome {
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
        metrics::bind(match outcome {
            BindOutcome::Bound => "bound",
            BindOutcome::Moot(_) => "moot",
            BindOutcome::Failed(_) => "failed",
            BindOutcome::NotSent => "not_sent",
        });
        if outcome == BindOutcome::Bound {
            let note = format!(
                "Successfully assigned {}/{} to {}",
                b.pod.0, b.pod.1, b.node
            );
            self.publish(&b.pod, b.uid.clone(), EventType::Normal, "Scheduled", note)
                .await;
        }
        outcome
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
        self.publish(
            &u.pod,
            u.uid.clone(),
            EventType::Warning,
            "FailedScheduling",
            u.message.clone(),
        )
        .await;
    }

    /// Writes `PodScheduled=False, reason SchedulingGated` on a gated pod, as kube-scheduler
    /// does (no Event). Called only for pods whose condition does not say so yet.
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
        pod: &(String, String),
        uid: Option<String>,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        if !self.fence.held() {
            return;
        }
        let reference = ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            name: Some(pod.1.clone()),
            namespace: Some(pod.0.clone()),
            uid,
            ..ObjectReference::default()
        };
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
