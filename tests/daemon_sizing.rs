//! The sizing conditions (`AbleToScale`, `ScalingLimited`): what each reason says, the
//! `lastTransitionTime` rule, no message and no write while a decision holds, and the writes
//! against kube's mock service (status for the paddlepaddle.org kinds, the `trainscale.io/sizing`
//! annotation for the PyTorch kinds).

mod common;

use std::borrow::Cow;
use std::time::Duration;

use common::*;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::watch;
use tower_test::mock;
use trainscale::api::sizing::{SIZING_ANNOTATION, read_annotation};
use trainscale::api::{JobKey, JobKind, Resources};
use trainscale::cluster::ClusterState;
use trainscale::daemon::sizing::{
    Decision, Desired, Known, SizingUpdate, Verdict, decide, merged, verdicts,
};
use trainscale::daemon::{Actuator, WriteLimits};
use trainscale::planner::{JobPlan, PlannerConfig, Reason, plan};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{api_status, expect, next_any, respond};

fn job(current: i32, target: i32, min: i32, max: i32, reason: Reason) -> JobPlan<'static> {
    JobPlan {
        key: Cow::Owned(JobKey::new("ml", "j")),
        current,
        target,
        min,
        max,
        fulfillment_before: 0.0,
        fulfillment_after: 0.0,
        reason,
        placements: Vec::new(),
        removals: Vec::new(),
        trainer: Resources::new(1_000, GIB, 1),
        kueue: None,
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, at: &str) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Time(at.parse().unwrap()),
        observed_generation: None,
    }
}

fn pairs(v: [Verdict; 2]) -> Vec<(String, String, String)> {
    v.into_iter()
        .map(|(t, s, r)| (t.to_string(), s.to_string(), r.to_string()))
        .collect()
}

fn expect_pairs(able: (&str, &str), limited: (&str, &str)) -> Vec<(String, String, String)> {
    vec![
        (
            "AbleToScale".to_string(),
            able.0.to_string(),
            able.1.to_string(),
        ),
        (
            "ScalingLimited".to_string(),
            limited.0.to_string(),
            limited.1.to_string(),
        ),
    ]
}

#[test]
fn each_reason_says_what_limits_the_job() {
    let ready = ("True", "ReadyForNewScale");
    let cases = [
        (
            job(1, 1, 2, 4, Reason::Starving),
            ready,
            ("True", "GangDoesNotFit"),
        ),
        (
            job(2, 2, 1, 4, Reason::NoFit),
            ready,
            ("True", "InsufficientCapacity"),
        ),
        (
            job(2, 2, 1, 4, Reason::Unchanged),
            ready,
            ("True", "InsufficientCapacity"),
        ),
        (
            job(2, 3, 1, 4, Reason::ScaleUp),
            ready,
            ("True", "InsufficientCapacity"),
        ),
        (
            job(2, 4, 1, 4, Reason::ScaleUp),
            ready,
            ("True", "AtMaxInstance"),
        ),
        (
            job(4, 4, 1, 4, Reason::Unchanged),
            ready,
            ("True", "AtMaxInstance"),
        ),
        (
            job(6, 4, 1, 4, Reason::OverMax),
            ready,
            ("True", "AtMaxInstance"),
        ),
        (
            job(3, 4, 4, 4, Reason::ScaleUp),
            ready,
            ("True", "AtMaxInstance"),
        ),
        (
            job(4, 2, 1, 4, Reason::Reclaimed),
            ready,
            ("True", "Reclaimed"),
        ),
        (
            job(4, 3, 1, 4, Reason::Overload),
            ready,
            ("True", "Overload"),
        ),
        (
            job(2, 2, 1, 4, Reason::LowGain),
            ready,
            ("False", "DesiredWithinRange"),
        ),
        (
            job(2, 2, 1, 4, Reason::Cooldown),
            ("False", "Cooldown"),
            ("False", "DesiredWithinRange"),
        ),
    ];
    for (plan, able, limited) in cases {
        assert_eq!(
            pairs(verdicts(&plan, &[])),
            expect_pairs(able, limited),
            "{:?} at {} → {} of {}..{}",
            plan.reason,
            plan.current,
            plan.target,
            plan.min,
            plan.max
        );
    }
}

#[test]
fn a_cooldown_keeps_what_scaling_limited_said() {
    let said = [condition(
        "ScalingLimited",
        "True",
        "InsufficientCapacity",
        "m",
        "2026-11-26T10:00:00Z",
    )];
    assert_eq!(
        pairs(verdicts(&job(2, 2, 1, 4, Reason::Cooldown), &said)),
        expect_pairs(("False", "Cooldown"), ("True", "InsufficientCapacity"))
    );
}

fn desired(type_: &'static str, status: &str, reason: &str, message: &str) -> Desired {
    Desired {
        type_,
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

#[test]
fn the_transition_time_moves_only_with_the_status() {
    let then = "2026-11-26T10:00:00Z";
    let now: k8s_openapi::jiff::Timestamp = "2026-11-26T11:00:00Z".parse().unwrap();
    let existing = [
        condition("Ready", "True", "Mine", "someone else's", then),
        condition(
            "ScalingLimited",
            "True",
            "InsufficientCapacity",
            "old",
            then,
        ),
        condition("AbleToScale", "True", "ReadyForNewScale", "x", then),
    ];
    let want = [
        desired("AbleToScale", "False", "Cooldown", "held"),
        desired(
            "ScalingLimited",
            "True",
            "AtMaxInstance",
            "at max-instance 4",
        ),
    ];
    let out = merged(&existing, &want, now);
    let view: Vec<(&str, &str, &str, String)> = out
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.0.to_string(),
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            // Another writer's condition is kept, in place.
            ("Ready", "True", "Mine", then.to_string()),
            // Same status, new reason and message: the transition time stays.
            ("ScalingLimited", "True", "AtMaxInstance", then.to_string()),
            // The status changed: now.
            ("AbleToScale", "False", "Cooldown", now.to_string()),
        ]
    );
    // A condition seen for the first time starts now.
    let fresh = merged(&[], &want, now);
    assert!(fresh.iter().all(|c| c.last_transition_time.0 == now));
}

/// A node of 8 GPUs and a job whose trainers need 64 each.
fn stuck_cluster() -> ClusterState {
    let mut s = ClusterState::new();
    add_node(&mut s, "node-1", 64_000, 512, 8);
    add_job(
        &mut s,
        "huge",
        job_info(1, 2, Resources::new(8_000, 8 * GIB, 64)),
        1,
        &[],
    );
    s
}

#[test]
fn a_steady_decision_costs_no_message_and_no_write() {
    let s = stuck_cluster();
    let config = PlannerConfig::default();
    let p = plan(&s, &config);
    // First pass: nothing known, the message is computed and written.
    let first = decide(&s, &p, &config, &[Known::default()]);
    assert_eq!(first.len(), 1);
    let u = &first[0];
    assert!(u.write);
    let limited = u
        .desired
        .iter()
        .find(|d| d.type_ == "ScalingLimited")
        .unwrap();
    assert_eq!(
        (limited.status.as_str(), limited.reason.as_str()),
        ("True", "GangDoesNotFit")
    );
    assert!(
        limited
            .message
            .contains("every trainer needs 64 nvidia.com/gpu, more than any node has"),
        "{}",
        limited.message
    );
    let now = "2026-11-26T10:00:00Z".parse().unwrap();
    let written = merged(&u.existing, &u.desired, now);

    // The same decision over what was written: nothing to do.
    let steady = decide(
        &s,
        &p,
        &config,
        &[Known {
            explained: Some(&u.decision),
            conditions: &written,
            resource_version: Some("5"),
        }],
    );
    assert!(steady.is_empty(), "{steady:?}");

    // After a restart nothing is known, but the object already says it: no write.
    let restarted = decide(
        &s,
        &p,
        &config,
        &[Known {
            explained: None,
            conditions: &written,
            resource_version: Some("5"),
        }],
    );
    assert_eq!(restarted.len(), 1);
    assert!(!restarted[0].write);

    // Someone removed ScalingLimited: it is written again.
    let able_only: Vec<Condition> = written
        .iter()
        .filter(|c| c.type_ == "AbleToScale")
        .cloned()
        .collect();
    let repaired = decide(
        &s,
        &p,
        &config,
        &[Known {
            explained: Some(&u.decision),
            conditions: &able_only,
            resource_version: Some("5"),
        }],
    );
    assert_eq!(repaired.len(), 1);
    assert!(repaired[0].write);

    // A new decision (the range changed) is explained again.
    let other = Decision {
        max: 3,
        ..u.decision
    };
    let changed = decide(
        &s,
        &p,
        &config,
        &[Known {
            explained: Some(&other),
            conditions: &written,
            resource_version: Some("5"),
        }],
    );
    assert_eq!(changed.len(), 1);
    assert!(!changed[0].write, "same statuses, reasons and messages");
}

fn actuator() -> (Actuator, mock_api::MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let clock = || "2026-11-26T12:00:00Z".parse().unwrap();
    (Actuator::new(client, "test-0").with_clock(clock), handle)
}

fn update(key: JobKey, existing: Vec<Condition>) -> SizingUpdate {
    SizingUpdate {
        key,
        decision: Decision {
            current: 1,
            target: 1,
            min: 1,
            max: 2,
            reason: Reason::Starving,
        },
        resource_version: Some("7".to_string()),
        existing,
        desired: vec![
            desired(
                "AbleToScale",
                "True",
                "ReadyForNewScale",
                "no cooldown holds rescaling back",
            ),
            desired(
                "ScalingLimited",
                "True",
                "GangDoesNotFit",
                "waits for its gang",
            ),
        ],
        write: true,
    }
}

const MERGE: Option<&str> = Some("application/merge-patch+json");

/// The sizing stage starts no write after its deadline: the job is left for the next pass,
/// which decides it again.
#[tokio::test(start_paused = true)]
async fn the_sizing_stage_starts_nothing_after_its_deadline() {
    let (actuator, mut handle) = actuator();
    let u = update(JobKey::new("ml", "huge"), Vec::new());
    let (_stop_tx, stop) = watch::channel(false);
    let limits = WriteLimits::from_now(Duration::from_secs(5), Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let written = actuator
        .write_sizing_all(&[(&u, Some("7".to_string()))], limits, &stop)
        .await;
    assert!(written.is_empty());
    let next = tokio::time::timeout(Duration::from_secs(60), handle.next_request()).await;
    assert!(next.is_err(), "a sizing write was sent after the deadline");
}

/// The sizing stage writes several jobs at once: three writes are in flight before any is
/// answered; answered in reverse, they are reported in the order of the updates.
#[tokio::test]
async fn the_sizing_stage_writes_jobs_concurrently() {
    let (actuator, mut handle) = actuator();
    let names = ["a", "b", "c"];
    let updates: Vec<SizingUpdate> = names
        .iter()
        .map(|n| update(JobKey::new("ml", *n), Vec::new()))
        .collect();
    let server = tokio::spawn(async move {
        let mut sent = Vec::new();
        for _ in 0..3 {
            let (method, path, body, send) = next_any(&mut handle).await;
            assert_eq!(method, Method::PATCH, "{path}");
            assert_eq!(body["metadata"]["resourceVersion"], json!("7"));
            sent.push((path, send));
        }
        for (path, send) in sent.into_iter().rev() {
            let name = path.split('/').nth_back(1).unwrap().to_string();
            respond(
                send,
                StatusCode::OK,
                json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                       "metadata": {"name": name, "namespace": "ml", "resourceVersion": format!("8{name}")}}),
            );
        }
    });
    let (_stop_tx, stop) = watch::channel(false);
    let writes: Vec<(&SizingUpdate, Option<String>)> =
        updates.iter().map(|u| (u, Some("7".to_string()))).collect();
    let written = actuator
        .write_sizing_all(&writes, WriteLimits::per_job(Duration::from_secs(5)), &stop)
        .await;
    server.await.unwrap();
    let got: Vec<(&str, Option<&str>)> = written
        .iter()
        .map(|(k, (version, _))| (k.name.as_ref(), version.as_deref()))
        .collect();
    assert_eq!(
        got,
        [("a", Some("8a")), ("b", Some("8b")), ("c", Some("8c"))]
    );
}

#[tokio::test]
async fn a_training_job_gets_its_conditions_in_status_at_its_resource_version() {
    let (actuator, mut handle) = actuator();
    let theirs = condition("Ready", "True", "Mine", "kept", "2026-11-26T10:00:00Z");
    let u = update(JobKey::new("ml", "huge"), vec![theirs]);
    let server = tokio::spawn(async move {
        let path = "/apis/paddlepaddle.org/v1alpha1/namespaces/ml/trainingjobs/huge/status";
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, path).await;
        assert_eq!(ct.as_deref(), MERGE);
        respond(
            send,
            StatusCode::OK,
            json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                   "metadata": {"name": "huge", "namespace": "ml", "resourceVersion": "8"}}),
        );
        body
    });
    let (_stop_tx, stop) = watch::channel(false);
    let written = actuator
        .write_sizing_all(
            &[(&u, Some("7".to_string()))],
            WriteLimits::per_job(Duration::from_secs(5)),
            &stop,
        )
        .await;
    let body = server.await.unwrap();
    let stamp = "2026-11-26T12:00:00Z";
    assert_eq!(
        body,
        json!({"metadata": {"resourceVersion": "7"}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Mine", "message": "kept",
             "lastTransitionTime": "2026-11-26T10:00:00Z"},
            {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
             "message": "no cooldown holds rescaling back", "lastTransitionTime": stamp},
            {"type": "ScalingLimited", "status": "True", "reason": "GangDoesNotFit",
             "message": "waits for its gang", "lastTransitionTime": stamp},
        ]}})
    );
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].1.0.as_deref(), Some("8"));
    assert_eq!(written[0].1.1.len(), 3);
}

#[tokio::test]
async fn a_pytorch_job_gets_its_conditions_in_the_annotation_and_a_conflict_writes_nothing() {
    let (actuator, mut handle) = actuator();
    let key = JobKey::of_kind(JobKind::PyTorchJob, "ml", "bert");
    let u = update(key, Vec::new());
    let server = tokio::spawn(async move {
        let path = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/bert";
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, path).await;
        assert_eq!(ct.as_deref(), MERGE);
        respond(
            send,
            StatusCode::OK,
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                   "metadata": {"name": "bert", "namespace": "ml", "resourceVersion": "9"}}),
        );
        // The second write meets a newer object.
        let (_, _, _, send) = expect(&mut handle, Method::PATCH, path).await;
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "the object has been modified"),
        );
        body
    });
    let (_stop_tx, stop) = watch::channel(false);
    let first = actuator
        .write_sizing_all(
            &[(&u, Some("7".to_string()))],
            WriteLimits::per_job(Duration::from_secs(5)),
            &stop,
        )
        .await;
    let second = actuator
        .write_sizing_all(
            &[(&u, Some("7".to_string()))],
            WriteLimits::per_job(Duration::from_secs(5)),
            &stop,
        )
        .await;
    let body: Value = server.await.unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], json!("7"));
    assert!(body.get("spec").is_none() && body.get("status").is_none());
    let annotation = body["metadata"]["annotations"][SIZING_ANNOTATION]
        .as_str()
        .unwrap();
    let read = read_annotation(annotation);
    let view: Vec<(&str, &str, &str)> = read
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        view,
        vec![
            ("AbleToScale", "True", "ReadyForNewScale"),
            ("ScalingLimited", "True", "GangDoesNotFit")
        ]
    );
    assert_eq!(first.len(), 1);
    assert!(second.is_empty(), "a conflict is left to the next pass");
}
