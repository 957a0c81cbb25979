//! The actuator against kube's mock service: every request is asserted (method, path, query,
//! content type, body) and answered by hand.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::watch;
use tower_test::mock;
use trainscale::api::{JobKey, ScaleResults};
use trainscale::daemon::actuator::CONCURRENT_JOB_WRITES;
use trainscale::daemon::store::{InvalidJob, TrainerJobRef};
use trainscale::daemon::{Actuator, Rescale, WriteLimits};
use trainscale::planner::Reason;

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, expect, next_any, respond};

const STAMP: &str = "2024-05-01T12:00:00Z";

fn fixed_clock() -> k8s_openapi::jiff::Timestamp {
    STAMP.parse().unwrap()
}

fn actuator() -> (Actuator, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    (
        Actuator::new(client, "test-0").with_clock(fixed_clock),
        handle,
    )
}

fn batch_job(name: &str, rv: &str, parallelism: i32, indexed: bool) -> Value {
    let mut spec = json!({"parallelism": parallelism, "template": {"spec": {"containers": []}}});
    if indexed {
        spec["completionMode"] = json!("Indexed");
        spec["completions"] = json!(parallelism);
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": "ml", "resourceVersion": rv}, "spec": spec})
}

fn training_job(name: &str, rv: &str, records: Value) -> Value {
    json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": name, "namespace": "ml", "resourceVersion": rv, "uid": format!("uid-{name}")},
           "spec": {"trainer": {"min-instance": 1, "max-instance": 8}},
           "status": {"phase": "Running", "scale_records": {"ScaleRecords": records}}})
}

fn rescale(name: &str, current: i32, target: i32, indexed: bool) -> Rescale {
    Rescale {
        key: JobKey::new("ml", name),
        uid: Some(format!("uid-{name}")),
        resource_version: None,
        trainer_job: Some(TrainerJobRef {
            namespace: "ml".to_string(),
            name: format!("{name}-trainer"),
            resource_version: Some("10".to_string()),
            indexed,
            parallelism: Some(current),
            at_zero: false,
            queue: None,
        }),
        size_at: None,
        current,
        target,
        reason: if target > current {
            Reason::ScaleUp
        } else {
            Reason::Reclaimed
        },
    }
}

const JOBS: &str = "/apis/batch/v1/namespaces/ml/jobs";
const TJS: &str = "/apis/paddlepaddle.org/v1alpha1/namespaces/ml/trainingjobs";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ml/events";
const MERGE: Option<&str> = Some("application/merge-patch+json");

/// Serves the status read and write of one job and returns the written status patch.
async fn expect_status_write(handle: &mut MockHandle, name: &str, existing: Value) -> Value {
    let (_, _, _, send) = expect(handle, Method::GET, &format!("{TJS}/{name}/status")).await;
    respond(send, StatusCode::OK, training_job(name, "20", existing));
    let (_, ct, body, send) = expect(handle, Method::PATCH, &format!("{TJS}/{name}/status")).await;
    assert_eq!(ct.as_deref(), MERGE);
    respond(send, StatusCode::OK, training_job(name, "21", json!([])));
    body
}

/// Serves the Event creation and returns the Event.
async fn expect_event(handle: &mut MockHandle) -> Value {
    let (_, _, body, send) = expect(handle, Method::POST, EVENTS).await;
    respond(send, StatusCode::CREATED, body.clone());
    body
}

#[tokio::test]
async fn scale_up_patches_parallelism_then_records_and_publishes() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (query, ct, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/mnist-trainer")).await;
        assert_eq!(query.as_deref().unwrap_or(""), "");
        assert_eq!(ct.as_deref(), MERGE);
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "10"}, "spec": {"parallelism": 4}})
        );
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "11", 4, false),
        );

        let old =
            json!([{"scaleTimestamp": "2024-04-30T00:00:00Z", "additional": 1, "status": "True"}]);
        let status = expect_status_write(&mut handle, "mnist", old).await;
        assert_eq!(
            status,
            json!({
                "metadata": {"resourceVersion": "20"},
                "status": {
                    "scale_records": {"ScaleRecords": [
                        {"scaleTimestamp": "2024-04-30T00:00:00Z", "additional": 1, "status": "True"},
                        {"scaleTimestamp": STAMP, "additional": 2, "status": "True"}
                    ]}
                }
            })
        );

        let event = expect_event(&mut handle).await;
        assert_eq!(event["type"], "Normal");
        assert_eq!(event["reason"], "Rescaled");
        assert_eq!(event["action"], "Rescale");
        assert_eq!(event["note"], "trainers 2 -> 4 (scale_up)");
        assert_eq!(event["regarding"]["kind"], "TrainingJob");
        assert_eq!(
            event["regarding"]["apiVersion"],
            "paddlepaddle.org/v1alpha1"
        );
        assert_eq!(event["regarding"]["name"], "mnist");
        assert_eq!(event["regarding"]["uid"], "uid-mnist");
        assert_eq!(event["reportingController"], "trainscale");
    });
    let outcome = actuator.rescale(&rescale("mnist", 2, 4, false)).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::True);
    assert_eq!(outcome.reason, "");
}

#[tokio::test]
async fn indexed_job_gets_completions_too() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/bert-trainer")).await;
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "10"}, "spec": {"parallelism": 3, "completions": 3}})
        );
        respond(
            send,
            StatusCode::OK,
            batch_job("bert-trainer", "11", 3, true),
        );
        expect_status_write(&mut handle, "bert", json!([])).await;
        expect_event(&mut handle).await;
    });
    let outcome = actuator.rescale(&rescale("bert", 1, 3, true)).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::True);
}

#[tokio::test]
async fn conflict_is_retried_after_a_fresh_read() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBS}/mnist-trainer");
        let (_, _, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(body["metadata"]["resourceVersion"], "10");
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "the object has been modified"),
        );
        // The re-read finds a new resourceVersion and that the Job is now Indexed.
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "12", 2, true),
        );
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(ct.as_deref(), MERGE);
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "12"}, "spec": {"parallelism": 4, "completions": 4}})
        );
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "13", 4, true),
        );
        let status = expect_status_write(&mut handle, "mnist", json!([])).await;
        assert_eq!(
            status["status"]["scale_records"]["ScaleRecords"][0]["status"],
            "True"
        );
        expect_event(&mut handle).await;
    });
    let outcome = actuator.rescale(&rescale("mnist", 2, 4, false)).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::True);
}

/// Serves one rescale's writes after its trainer Job patch was answered: the status read and
/// write (returning the written patch) and the Event, in whatever order the jobs' requests come.
async fn serve_records(handle: &mut MockHandle, jobs: usize) -> Vec<(String, Value)> {
    let mut written = Vec::new();
    let mut events = 0;
    while written.len() < jobs || events < jobs {
        let (method, path, body, send) = next_any(handle).await;
        let name = path
            .strip_prefix(&format!("{TJS}/"))
            .and_then(|rest| rest.strip_suffix("/status"))
            .map(str::to_string);
        match (method, name) {
            (Method::GET, Some(name)) => {
                respond(send, StatusCode::OK, training_job(&name, "20", json!([])))
            }
            (Method::PATCH, Some(name)) => {
                respond(send, StatusCode::OK, training_job(&name, "21", json!([])));
                written.push((name, body));
            }
            (Method::POST, None) if path == EVENTS => {
                respond(send, StatusCode::CREATED, body);
                events += 1;
            }
            (method, _) => panic!("unexpected {method} {path}"),
        }
    }
    written.sort_by(|a, b| a.0.cmp(&b.0));
    written
}

/// The trainer Job patches of `names`, all in flight at once (none answered yet), by name.
async fn expect_patches_in_flight(
    handle: &mut MockHandle,
    names: &[&str],
) -> Vec<(
    String,
    Value,
    tower_test::mock::SendResponse<Response<Body>>,
)> {
    let mut sent = Vec::new();
    for _ in names {
        let (method, path, body, send) = next_any(handle).await;
        assert_eq!(method, Method::PATCH, "{path}");
        let name = path
            .strip_prefix(&format!("{JOBS}/"))
            .and_then(|rest| rest.strip_suffix("-trainer"))
            .unwrap_or_else(|| panic!("not a trainer Job patch: {path}"))
            .to_string();
        sent.push((name, body, send));
    }
    sent.sort_by(|a, b| a.0.cmp(&b.0));
    let got: Vec<&str> = sent.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(got, names);
    sent
}

#[tokio::test]
async fn a_failed_patch_is_recorded_false_and_the_next_job_still_scales() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        // Both jobs' patches are sent before either is answered.
        let mut sent = expect_patches_in_flight(&mut handle, &["a", "b"])
            .await
            .into_iter();
        let (_, _, send) = sent.next().unwrap();
        respond(
            send,
            StatusCode::INTERNAL_SERVER_ERROR,
            api_status(500, "InternalError", "etcd is down"),
        );
        let (_, body, send) = sent.next().unwrap();
        assert_eq!(body["spec"], json!({"parallelism": 5}));
        respond(send, StatusCode::OK, batch_job("b-trainer", "11", 5, false));
        let written = serve_records(&mut handle, 2).await;
        assert_eq!(
            written[0].1,
            json!({
                "metadata": {"resourceVersion": "20"},
                "status": {"scale_records": {"ScaleRecords": [{
                    "scaleTimestamp": STAMP, "additional": 3, "status": "False",
                    "reason": "patching the trainer Job: 500 InternalError: etcd is down"
                }]}}
            })
        );
        let b = &written[1].1;
        // One writer per field: the operator owns the phase.
        assert!(b["status"].get("phase").is_none(), "{b}");
        assert_eq!(b["status"].as_object().map(|o| o.len()), Some(1));
        assert_eq!(
            b["status"]["scale_records"]["ScaleRecords"][0]["status"],
            "True"
        );
    });
    let (_stop_tx, stop) = watch::channel(false);
    let outcomes = actuator
        .apply_all(
            &[rescale("a", 1, 4, false), rescale("b", 2, 5, false)],
            WriteLimits::per_job(Duration::from_secs(10)),
            &stop,
        )
        .await;
    server.await.unwrap();
    assert_eq!(outcomes.len(), 2);
    assert_eq!(outcomes[0].0.name.as_ref(), "a");
    assert_eq!(outcomes[0].1.result, ScaleResults::False);
    assert_eq!(outcomes[1].1.result, ScaleResults::True);
}

/// A stage has at most `CONCURRENT_JOB_WRITES` jobs in flight, and starts no job after its
/// deadline: the first 16 rescales are sent at once, the API server answers them after the
/// deadline has passed, and the 17th is never sent (no outcome: it waits for the next pass).
#[tokio::test(start_paused = true)]
async fn the_rescale_stage_starts_nothing_after_its_deadline() {
    let names: Vec<String> = (0..=CONCURRENT_JOB_WRITES)
        .map(|i| format!("j{i:02}"))
        .collect();
    let in_flight: Vec<&str> = names[..CONCURRENT_JOB_WRITES]
        .iter()
        .map(String::as_str)
        .collect();
    let (actuator, mut handle) = actuator();
    let expected: Vec<String> = in_flight.iter().map(|n| n.to_string()).collect();
    let server = tokio::spawn(async move {
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        let sent = expect_patches_in_flight(&mut handle, &expected).await;
        // The API server answers after the stage's deadline has passed.
        tokio::time::sleep(Duration::from_secs(10)).await;
        for (name, _, send) in sent {
            respond(
                send,
                StatusCode::OK,
                batch_job(&format!("{name}-trainer"), "11", 4, false),
            );
        }
        serve_records(&mut handle, CONCURRENT_JOB_WRITES).await;
        handle
    });
    let (_stop_tx, stop) = watch::channel(false);
    let limits = WriteLimits::from_now(Duration::from_secs(30), Duration::from_secs(5));
    let rescales: Vec<Rescale> = names.iter().map(|n| rescale(n, 1, 4, false)).collect();
    let outcomes = actuator.apply_all(&rescales, limits, &stop).await;
    let mut handle = server.await.unwrap();
    let done: Vec<&str> = outcomes.iter().map(|(k, _)| k.name.as_ref()).collect();
    assert_eq!(done, in_flight, "outcomes in the order of the rescales");
    assert!(outcomes.iter().all(|(_, o)| o.result == ScaleResults::True));
    let next = tokio::time::timeout(Duration::from_secs(60), handle.next_request()).await;
    assert!(
        next.is_err(),
        "the 17th rescale was sent after the deadline"
    );
}

/// A stage whose deadline has passed before it starts sends nothing.
#[tokio::test(start_paused = true)]
async fn a_rescale_stage_past_its_deadline_sends_nothing() {
    let (actuator, mut handle) = actuator();
    let (_stop_tx, stop) = watch::channel(false);
    let limits = WriteLimits::from_now(Duration::from_secs(30), Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let outcomes = actuator
        .apply_all(&[rescale("a", 1, 4, false)], limits, &stop)
        .await;
    assert!(outcomes.is_empty(), "{outcomes:?}");
    let next = tokio::time::timeout(Duration::from_secs(60), handle.next_request()).await;
    assert!(next.is_err(), "a rescale was sent after the deadline");
}

/// Shrinks go first: no growth is sent before every shrink's writes are answered (the room a
/// shrink gives back is what growth was planned into).
#[tokio::test]
async fn shrinks_are_written_before_any_growth() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/small-trainer")).await;
        assert_eq!(body["spec"], json!({"parallelism": 1}));
        let early = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
        assert!(
            early.is_err(),
            "a growth was sent while a shrink was in flight"
        );
        respond(
            send,
            StatusCode::OK,
            batch_job("small-trainer", "11", 1, false),
        );
        serve_records(&mut handle, 1).await;
        let (_, _, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/big-trainer")).await;
        assert_eq!(body["spec"], json!({"parallelism": 6}));
        respond(
            send,
            StatusCode::OK,
            batch_job("big-trainer", "11", 6, false),
        );
        serve_records(&mut handle, 1).await;
    });
    let (_stop_tx, stop) = watch::channel(false);
    let outcomes = actuator
        .apply_all(
            &[rescale("big", 2, 6, false), rescale("small", 3, 1, false)],
            WriteLimits::per_job(Duration::from_secs(10)),
            &stop,
        )
        .await;
    server.await.unwrap();
    let done: Vec<&str> = outcomes.iter().map(|(k, _)| k.name.as_ref()).collect();
    assert_eq!(
        done,
        ["big", "small"],
        "outcomes in the order of the rescales"
    );
    assert!(outcomes.iter().all(|(_, o)| o.result == ScaleResults::True));
}

/// A scale-down is one patch of the trainer Job: the Job controller removes the highest indexes;
/// Zero trainers is a suspension marked as trainscale's, never `completions: 0` (which
/// completes an Indexed Job at once); growing again lifts it with the new counts.
#[tokio::test]
async fn zero_suspends_the_trainer_job_and_growing_resumes_it() {
    let (first, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBS}/bert-trainer");
        let (_, _, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "10",
                                "annotations": {"trainscale.io/zero-trainers": "true"}},
                   "spec": {"suspend": true}})
        );
        let mut suspended = batch_job("bert-trainer", "11", 2, true);
        suspended["spec"]["suspend"] = json!(true);
        suspended["metadata"]["annotations"] = json!({"trainscale.io/zero-trainers": "true"});
        respond(send, StatusCode::OK, suspended);
        expect_status_write(&mut handle, "bert", json!([])).await;
        expect_event(&mut handle).await;
    });
    let down = first.rescale(&rescale("bert", 2, 0, true)).await;
    server.await.unwrap();
    assert_eq!(down.result, ScaleResults::True, "{down:?}");

    // Another pass (a fresh actuator: its Event is a new one, not a series).
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBS}/bert-trainer");
        let (_, _, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "10",
                                "annotations": {"trainscale.io/zero-trainers": null}},
                   "spec": {"suspend": false, "parallelism": 3, "completions": 3}})
        );
        respond(
            send,
            StatusCode::OK,
            batch_job("bert-trainer", "12", 3, true),
        );
        expect_status_write(&mut handle, "bert", json!([])).await;
        expect_event(&mut handle).await;
    });
    let mut up = rescale("bert", 0, 3, true);
    if let Some(job) = up.trainer_job.as_mut() {
        job.at_zero = true;
        job.parallelism = Some(0);
    }
    let up = actuator.rescale(&up).await;
    server.await.unwrap();
    assert_eq!(up.result, ScaleResults::True, "{up:?}");
}

/// A 409 whose re-read shows a size someone else wrote drops the rescale: that size is the new
/// current, never overwritten by a target planned on the old one.
#[tokio::test]
async fn a_size_written_by_someone_else_is_not_overwritten() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBS}/mnist-trainer");
        let (_, _, _, send) = expect(&mut handle, Method::PATCH, &path).await;
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "the object has been modified"),
        );
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "12", 5, false),
        );
        expect_status_write(&mut handle, "mnist", json!([])).await;
        expect_event(&mut handle).await;
    });
    let outcome = actuator.rescale(&rescale("mnist", 2, 4, false)).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::False, "{outcome:?}");
}

/// trainscale deletes no pod (the mock fails on any request other than the ones expected).
#[tokio::test]
async fn scale_down_only_lowers_parallelism_and_deletes_no_pod() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/mnist-trainer")).await;
        assert_eq!(body["spec"], json!({"parallelism": 2}));
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "11", 2, false),
        );
        let status = expect_status_write(&mut handle, "mnist", json!([])).await;
        assert_eq!(
            status["status"]["scale_records"]["ScaleRecords"][0]["additional"],
            -2
        );
        expect_event(&mut handle).await;
    });
    let outcome = actuator.rescale(&rescale("mnist", 4, 2, false)).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::True);
}

#[tokio::test]
async fn scale_records_keep_the_newest_fifty() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, _, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/mnist-trainer")).await;
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "11", 3, false),
        );
        let old: Vec<Value> = (0..50)
            .map(|i| json!({"scaleTimestamp": "2024-04-30T00:00:00Z", "additional": i, "status": "True"}))
            .collect();
        let status = expect_status_write(&mut handle, "mnist", Value::Array(old)).await;
        let records = status["status"]["scale_records"]["ScaleRecords"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(records.len(), 50);
        assert_eq!(records[0]["additional"], 1);
        assert_eq!(records[49]["scaleTimestamp"], STAMP);
        expect_event(&mut handle).await;
    });
    actuator.rescale(&rescale("mnist", 2, 3, false)).await;
    server.await.unwrap();
}

#[tokio::test]
async fn a_patch_read_back_that_differs_is_unknown() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, _, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/mnist-trainer")).await;
        // A mutating webhook capped the parallelism.
        respond(
            send,
            StatusCode::OK,
            batch_job("mnist-trainer", "11", 3, false),
        );
        let status = expect_status_write(&mut handle, "mnist", json!([])).await;
        let record = &status["status"]["scale_records"]["ScaleRecords"][0];
        assert_eq!(record["status"], "Unknown");
        assert!(status["status"].get("phase").is_none());
        let event = expect_event(&mut handle).await;
        assert_eq!(event["reason"], "RescaleUnknown");
    });
    let outcome = actuator.rescale(&rescale("mnist", 2, 4, false)).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::Unknown);
}

#[tokio::test]
async fn invalid_job_event_names_the_field() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let event = expect_event(&mut handle).await;
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reason"], "InvalidSpec");
        assert_eq!(
            event["note"],
            "not planned: spec.trainer.min-instance: min-instance 5 is greater than max-instance 2"
        );
        assert_eq!(event["regarding"]["name"], "broken");
        assert_eq!(event["regarding"]["kind"], "TrainingJob");
        assert_eq!(
            event["regarding"]["apiVersion"],
            "paddlepaddle.org/v1alpha1"
        );
    });
    let job = InvalidJob {
        key: JobKey::new("ml", "broken"),
        uid: Some("uid-broken".into()),
        resource_version: "3".into(),
        problems: vec![trainscale::api::FieldError::new(
            "TrainingJob ml/broken",
            "spec.trainer.min-instance",
            "min-instance 5 is greater than max-instance 2",
        )],
    };
    actuator.report_invalid(&job).await;
    server.await.unwrap();
}

/// A PaddleJob is resized through its trainer Job like a TrainingJob; its scale record goes to the
/// PaddleJob's own status subresource and its Event regards the PaddleJob.
#[tokio::test]
async fn a_paddle_job_records_in_its_own_status() {
    const PJS: &str = "/apis/paddlepaddle.org/v1/namespaces/ml/paddlejobs";
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/seed-trainer")).await;
        assert_eq!(body["spec"]["parallelism"], 6);
        respond(
            send,
            StatusCode::OK,
            batch_job("seed-trainer", "11", 6, false),
        );
        let (_, _, _, send) = expect(&mut handle, Method::GET, &format!("{PJS}/seed/status")).await;
        let old =
            json!([{"scaleTimestamp": "2024-04-30T00:00:00Z", "additional": 1, "status": "True"}]);
        let mut job = training_job("seed", "20", old);
        job["apiVersion"] = json!("paddlepaddle.org/v1");
        job["kind"] = json!("PaddleJob");
        respond(send, StatusCode::OK, job.clone());
        let (_, ct, body, send) =
            expect(&mut handle, Method::PATCH, &format!("{PJS}/seed/status")).await;
        assert_eq!(ct.as_deref(), MERGE);
        let records = body["status"]["scale_records"]["ScaleRecords"]
            .as_array()
            .unwrap();
        assert_eq!(records.len(), 2, "the old record is kept: {body}");
        assert_eq!(records[1]["additional"], 4);
        assert_eq!(body["metadata"]["resourceVersion"], "20");
        respond(send, StatusCode::OK, job);
        let event = expect_event(&mut handle).await;
        assert_eq!(event["regarding"]["kind"], "PaddleJob");
        assert_eq!(event["regarding"]["apiVersion"], "paddlepaddle.org/v1");
        assert_eq!(event["reason"], "Rescaled");
    });
    let mut r = rescale("seed", 2, 6, false);
    r.key = JobKey::of_kind(trainscale::api::JobKind::PaddleJob, "ml", "seed");
    let outcome = actuator.rescale(&r).await;
    server.await.unwrap();
    assert_eq!(outcome.result, ScaleResults::True);
}

/// Fencing: the lease is lost while two jobs' trainer Job patches are in flight. Those rescales
/// are cancelled and nothing more is sent: no scale record, no Event, no further job.
#[tokio::test]
async fn a_lost_lease_stops_every_further_write() {
    use trainscale::daemon::leader::Fence;

    let (lease_tx, lease_rx) = watch::channel(true);
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let actuator = Actuator::new(Client::new(service, "default"), "test-0")
        .with_clock(fixed_clock)
        .with_fence(Fence::following(lease_rx));
    let server = tokio::spawn(async move {
        let mut sent = expect_patches_in_flight(&mut handle, &["a", "b", "c"])
            .await
            .into_iter();
        let (_, _, send) = sent.next().unwrap();
        respond(send, StatusCode::OK, batch_job("a-trainer", "11", 4, false));
        serve_records(&mut handle, 1).await;
        // b's and c's patches are in flight; the lease goes before their answers do.
        lease_tx.send(false).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for (name, _, send) in sent {
            respond(
                send,
                StatusCode::OK,
                batch_job(&format!("{name}-trainer"), "11", 4, false),
            );
        }
        // Nothing else: no status write or Event for b or c.
        let next = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        assert!(
            !matches!(next, Ok(Some(_))),
            "a write was sent after the lease was lost"
        );
    });
    let (_stop_tx, stop) = watch::channel(false);
    let outcomes = actuator
        .apply_all(
            &[
                rescale("a", 2, 4, false),
                rescale("b", 2, 4, false),
                rescale("c", 2, 4, false),
            ],
            WriteLimits::per_job(Duration::from_secs(5)),
            &stop,
        )
        .await;
    server.await.unwrap();
    assert_eq!(
        outcomes.len(),
        1,
        "only a's rescale completed: {outcomes:?}"
    );
    assert!(!actuator.may_write());
}

/// An actuation whose object has vanished (404) is dropped: no retry, no scale record, no Event.
#[tokio::test]
async fn a_vanished_trainer_job_drops_the_rescale() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, _, send) =
            expect(&mut handle, Method::PATCH, &format!("{JOBS}/gone-trainer")).await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            api_status(404, "NotFound", "jobs.batch \"gone-trainer\" not found"),
        );
        let next = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        assert!(!matches!(next, Ok(Some(_))), "a request followed the 404");
    });
    let outcome = actuator.rescale(&rescale("gone", 2, 4, false)).await;
    server.await.unwrap();
    assert!(outcome.vanished);
    assert_eq!(outcome.result, ScaleResults::False);
}
