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
use trainscale::daemon::scheduling::{
    Bind, BindOutcome, Binder, Cut, GangTimeout, Limits, Unschedulable,
};

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

/// Limits of a stage: `until` from now, and a shutdown flag the test holds.
fn limits(until: Duration) -> (Limits, tokio::sync::watch::Sender<bool>) {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let limits = Limits {
        until: tokio::time::Instant::now() + until,
        stop,
    };
    (limits, stop_tx)
}

fn binds(n: usize) -> Vec<Bind> {
    (0..n).map(|i| bind_of(&format!("p{i}"), "n")).collect()
}

/// Takes `n` binding requests without answering them; returns their reply handles (dropping one
/// would fail its request).
async fn take_binds(
    handle: &mut MockHandle,
    n: usize,
) -> Vec<tower_test::mock::SendResponse<Response<Body>>> {
    let mut held = Vec::new();
    for _ in 0..n {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), Method::POST);
        assert!(req.uri().path().ends_with("/binding"), "{}", req.uri());
        held.push(send);
    }
    held
}

/// 16 binds in flight get no answer: at the stage's deadline they are `Unknown` (they may be
/// bound), the 4 not begun `NotSent`.
#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_the_binds_short() {
    let (binder, mut handle) = binder();
    let server = tokio::spawn(async move {
        let held = take_binds(&mut handle, 16).await;
        (held, handle)
    });
    let (limits, _stop) = limits(Duration::from_secs(5));
    let (outcomes, cut) = binder.bind_all(&binds(20), &limits).await;
    assert_eq!(cut, Some(Cut::Deadline));
    let unknown = outcomes
        .iter()
        .filter(|o| **o == BindOutcome::Unknown)
        .count();
    let not_sent = outcomes
        .iter()
        .filter(|o| **o == BindOutcome::NotSent)
        .count();
    assert_eq!((unknown, not_sent), (16, 4), "{outcomes:?}");
    server.await.unwrap();
}

/// Losing the Lease while binds are in flight ends the stage at once.
#[tokio::test]
async fn losing_the_lease_stops_the_binds_at_once() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (lead_tx, lead) = tokio::sync::watch::channel(true);
    let binder = Binder::new(client, "trainscale", "test-0", Fence::following(lead));
    let (limits, _stop) = limits(Duration::from_secs(3600));
    let server = async move {
        // The Lease is lost with 16 binds in flight.
        let held = take_binds(&mut handle, 16).await;
        lead_tx.send(false).unwrap();
        (held, handle)
    };
    let sent = binds(30);
    let ((outcomes, cut), _) = tokio::join!(binder.bind_all(&sent, &limits), server);
    assert_eq!(cut, Some(Cut::LeaseLost));
    let unknown = outcomes
        .iter()
        .filter(|o| **o == BindOutcome::Unknown)
        .count();
    let not_sent = outcomes
        .iter()
        .filter(|o| **o == BindOutcome::NotSent)
        .count();
    assert_eq!((unknown, not_sent), (16, 14), "{outcomes:?}");
}

/// A shutdown request while binds are in flight ends the stage at once.
#[tokio::test]
async fn shutdown_stops_the_binds_at_once() {
    let (binder, mut handle) = binder();
    let (limits, stop) = limits(Duration::from_secs(3600));
    let server = async move {
        let held = take_binds(&mut handle, 3).await;
        stop.send(true).unwrap();
        (held, handle)
    };
    let sent = binds(3);
    let ((outcomes, cut), _) = tokio::join!(binder.bind_all(&sent, &limits), server);
    assert_eq!(cut, Some(Cut::Shutdown));
    assert!(
        outcomes.iter().all(|o| *o == BindOutcome::Unknown),
        "{outcomes:?}"
    );
    // A stage begun after shutdown sends nothing.
    let (limits, stop) = limits_stopped();
    let (outcomes, cut) = binder.bind_all(&binds(2), &limits).await;
    drop(stop);
    assert_eq!(cut, Some(Cut::Shutdown));
    assert!(
        outcomes.iter().all(|o| *o == BindOutcome::NotSent),
        "{outcomes:?}"
    );
}

fn limits_stopped() -> (Limits, tokio::sync::watch::Sender<bool>) {
    let (limits, stop) = limits(Duration::from_secs(3600));
    stop.send(true).unwrap();
    (limits, stop)
}

fn report(pod: &str, unchanged: bool) -> Unschedulable {
    Unschedulable {
        pod: ("ml".to_string(), pod.to_string()),
        uid: Some(format!("uid-{pod}")),
        message: "waiting for its gang job ml/g: 3 of min 4 trainers placeable; 1 not created yet"
            .to_string(),
        unchanged,
    }
}

/// Three changed reports are in flight together (the server holds all three patches before
/// answering any); the unchanged one sends nothing.
#[tokio::test]
async fn unschedulable_reports_go_out_together_and_only_when_changed() {
    let (binder, mut handle) = binder();
    let reports = vec![
        report("a", false),
        report("b", true),
        report("c", false),
        report("d", false),
    ];
    let server = tokio::spawn(async move {
        let mut patched = Vec::new();
        let mut held = Vec::new();
        for _ in 0..3 {
            let (req, send) = handle.next_request().await.expect("a patch");
            assert_eq!(req.method(), Method::PATCH);
            patched.push(req.uri().path().to_string());
            held.push(send);
        }
        patched.sort();
        assert_eq!(
            patched,
            [
                "/api/v1/namespaces/ml/pods/a/status",
                "/api/v1/namespaces/ml/pods/c/status",
                "/api/v1/namespaces/ml/pods/d/status"
            ]
        );
        for send in held {
            respond(send, StatusCode::OK, json!({"metadata": {"name": "x"}}));
        }
        for _ in 0..3 {
            let e = event(&mut handle).await;
            assert_eq!(e["reason"], "FailedScheduling");
            assert_ne!(e["regarding"]["name"], "b");
        }
        // Nothing more: the client goes away without another request.
        assert!(handle.next_request().await.is_none());
    });
    let (limits, _stop) = limits(Duration::from_secs(3600));
    let now = "2024-05-01T12:00:00Z".parse().unwrap();
    let (sent, cut) = binder.report_all(&reports, now, &limits).await;
    assert_eq!((sent, cut), (3, None));
    drop(binder);
    server.await.unwrap();
}

/// A gang that timed out is announced by a Warning Event on its job.
#[tokio::test]
async fn a_gang_timeout_is_a_warning_event_on_the_job() {
    let (binder, mut handle) = binder();
    let timeout = GangTimeout {
        job: JobKey::new("ml", "g"),
        message: "gang job ml/g could not bind whole within 10m: 3 of min 4 trainers placeable; 1 fits no node; its room is released for 1m, then it tries again".to_string(),
    };
    let expected = timeout.message.clone();
    let server = tokio::spawn(async move {
        let e = event(&mut handle).await;
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["reason"], "GangTimeout");
        assert_eq!(e["regarding"]["kind"], "TrainingJob");
        assert_eq!(e["regarding"]["apiVersion"], "paddlepaddle.org/v1alpha1");
        assert_eq!(e["regarding"]["name"], "g");
        assert_eq!(e["regarding"]["uid"], "uid-g");
        assert_eq!(e["note"], expected);
    });
    let (limits, _stop) = limits(Duration::from_secs(3600));
    let cut = binder
        .report_gang_timeout(&timeout, Some("uid-g".to_string()), &limits)
        .await;
    assert_eq!(cut, None);
    server.await.unwrap();
}

/// A bind answered before the deadline is `Bound` even when its `Scheduled` Event was cut off.
#[tokio::test(start_paused = true)]
async fn a_bind_answered_before_the_deadline_is_bound_though_its_event_was_cut() {
    let (binder, mut handle) = binder();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/p0/binding",
        )
        .await;
        respond(send, StatusCode::CREATED, success());
        let (_, _, _, held) = expect(&mut handle, Method::POST, EVENTS).await;
        (held, handle)
    });
    let (limits, _stop) = limits(Duration::from_secs(5));
    let (outcomes, cut) = binder.bind_all(&binds(1), &limits).await;
    assert_eq!(cut, Some(Cut::Deadline));
    assert_eq!(outcomes, vec![BindOutcome::Bound]);
    server.await.unwrap();
}

/// A job's master and pservers (binds outside trainer positions) are bound before any trainer's
/// binding is sent.
#[tokio::test(start_paused = true)]
async fn pods_outside_trainer_positions_are_bound_before_any_trainer() {
    let (binder, mut handle) = binder();
    let trainer = bind_of("j-trainer-0", "n");
    let master = Bind {
        position: None,
        ..bind_of("j-master-0", "n")
    };
    let server = tokio::spawn(async move {
        let (_, _, _, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/j-master-0/binding",
        )
        .await;
        // Nothing else is sent while the master's bind is unanswered.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), handle.next_request())
                .await
                .is_err()
        );
        respond(send, StatusCode::CREATED, success());
        event(&mut handle).await;
        let (_, _, _, send) = expect(
            &mut handle,
            Method::POST,
            "/api/v1/namespaces/ml/pods/j-trainer-0/binding",
        )
        .await;
        respond(send, StatusCode::CREATED, success());
        event(&mut handle).await;
    });
    let (limits, _stop) = limits(Duration::from_secs(3600));
    let (outcomes, cut) = binder.bind_all(&[trainer, master], &limits).await;
    assert_eq!(cut, None);
    assert_eq!(outcomes, vec![BindOutcome::Bound, BindOutcome::Bound]);
    server.await.unwrap();
}
