//! The scheduler role's writes against kube's mock service: every request is asserted (method,
//! path, content type, body) and answered by hand.

use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;
use trainscale::api::{JobKey, Resources};
use trainscale::daemon::leader::Fence;
use trainscale::daemon::scheduling::{Bind, BindOutcome, Binder, Unschedulable};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, expect, respond};

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ml/events";

fn binder() -> (Binder, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    (
        Binder::new(client, "trainscale", "test-0", Fence::Always),
        handle,
    )
}

fn success() -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201})
}

fn bind_of(pod: &str, node: &str) -> Bind {
    Bind {
        pod: ("ml".to_string(), pod.to_string()),
        uid: Some(format!("uid-{pod}")),
        node: node.to_string(),
        position: Some((JobKey::new("ml", "j"), 0)),
        requests: Resources::new(1000, 1 << 30, 1),
        seen: Instant::now(),
    }
}

/// Answers the Event the binder publishes after a bind or a refusal; returns its body.
async fn event(handle: &mut MockHandle) -> Value {
    let (_, _, body, send) = expect(handle, Method::POST, EVENTS).await;
    respond(send, StatusCode::CREATED, body.clone());
    body
}

#[tokio::test]
async fn a_bind_posts_the_binding_kube_scheduler_posts_and_reports_scheduled() {
    let (binder, mut handle) = binder();
    let b = bind_of("j-trainer-0", "node-7");
    let server = tokio::spawn(async move {
        let (_, content_type, body, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/j-trainer-0/binding",
        )
        .await;
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_eq!(
            body,
            json!({"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "j-trainer-0", "namespace": "ml", "uid": "uid-j-trainer-0"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"}})
        );
        respond(send, StatusCode::CREATED, success());
        let e = event(&mut handle).await;
        assert_eq!(e["reason"], "Scheduled");
        assert_eq!(e["type"], "Normal");
        assert_eq!(e["regarding"]["kind"], "Pod");
        assert_eq!(e["regarding"]["name"], "j-trainer-0");
        assert_eq!(e["note"], "Successfully assigned ml/j-trainer-0 to node-7");
    });
    assert_eq!(binder.bind(&b).await, BindOutcome::Bound);
    server.await.unwrap();
}

#[tokio::test]
async fn a_pod_bound_already_is_moot_and_a_server_error_is_a_failure_to_retry() {
    let (binder, mut handle) = binder();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/a/binding",
        )
        .await;
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "pod a is already assigned to node \"x\""),
        );
        let (_, _, _, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/b/binding",
        )
        .await;
        respond(
            send,
            StatusCode::INTERNAL_SERVER_ERROR,
            api_status(500, "InternalError", "etcd is sad"),
        );
        // The retry (the next pass's bind of the same pod) succeeds.
        let (_, _, _, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/b/binding",
        )
        .await;
        respond(send, StatusCode::CREATED, success());
        event(&mut handle).await;
    });
    assert!(matches!(
        binder.bind(&bind_of("a", "n")).await,
        BindOutcome::Moot(m) if m.contains("already assigned")
    ));
    assert!(matches!(
        binder.bind(&bind_of("b", "n")).await,
        BindOutcome::Failed(_)
    ));
    assert_eq!(binder.bind(&bind_of("b", "n")).await, BindOutcome::Bound);
    server.await.unwrap();
}

#[tokio::test]
async fn an_unschedulable_pod_gets_the_condition_by_strategic_merge_and_an_event_once() {
    let (binder, mut handle) = binder();
    let message = "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: a100}, 2 Insufficient nvidia.com/gpu.";
    let new = Unschedulable {
        pod: ("ml".to_string(), "p".to_string()),
        uid: Some("uid-p".to_string()),
        message: message.to_string(),
        unchanged: false,
    };
    let same = Unschedulable {
        unchanged: true,
        ..new.clone()
    };
    let server = tokio::spawn(async move {
        let (_, content_type, body, send) = expect(
            &mut handle,
            Method::PATCH,
            "/api/v1/namespaces/ml/pods/p/status",
        )
        .await;
        assert_eq!(
            content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        let condition = &body["status"]["conditions"][0];
        assert_eq!(condition["type"], "PodScheduled");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Unschedulable");
        assert_eq!(condition["message"], message);
        assert_eq!(
            body["status"].as_object().unwrap().len(),
            1,
            "only conditions"
        );
        respond(send, StatusCode::OK, json!({"metadata": {"name": "p"}}));
        let e = event(&mut handle).await;
        assert_eq!(e["reason"], "FailedScheduling");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["note"], message);
        // Nothing more: the unchanged report sends nothing.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), handle.next_request())
                .await
                .is_err()
        );
    });
    let now = "2024-05-01T12:00:00Z".parse().unwrap();
    binder.report_unschedulable(&new, now).await;
    binder.report_unschedulable(&same, now).await;
    server.await.unwrap();
}

#[tokio::test]
async fn a_binder_without_the_lease_sends_nothing() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let binder = Binder::new(client, "trainscale", "test-0", Fence::following(rx));
    assert_eq!(binder.bind(&bind_of("a", "n")).await, BindOutcome::NotSent);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), handle.next_request())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_gated_pod_gets_the_scheduling_gated_condition_by_strategic_merge_and_no_event() {
    let (binder, mut handle) = binder();
    let server = tokio::spawn(async move {
        let (_, content_type, body, send) = expect(
            &mut handle,
            Method::PATCH,
            "/api/v1/namespaces/ml/pods/g/status",
        )
        .await;
        assert_eq!(
            content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        assert_eq!(
            body,
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": null, "lastTransitionTime": "2024-05-01T12:00:00Z"}]}})
        );
        respond(send, StatusCode::OK, json!({"metadata": {"name": "g"}}));
        // No Event follows.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), handle.next_request())
                .await
                .is_err()
        );
    });
    let now = "2024-05-01T12:00:00Z".parse().unwrap();
    binder
        .report_gated(&("ml".to_string(), "g".to_string()), now)
        .await;
    server.await.unwrap();
}
