//! The progress signal (issue 33): `trainscale progress` writes its report by a merge patch at
//! the resourceVersion it read (again on 409); `validate` and the cluster model warn about a
//! malformed report; a pass's estimate ignores a stale one.

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;
use trainscale::api::JobKind;
use trainscale::api::manifest::parse_documents;
use trainscale::api::progress::{Ignored, PROGRESS_ANNOTATION};
use trainscale::api::validate::validate_document;
use trainscale::cluster::ClusterState;
use trainscale::commands::progress::{CONFLICT_RETRIES, ProgressError, Report, write_progress};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, expect, respond};

const PATH: &str = "/apis/paddlepaddle.org/v1alpha1/namespaces/ns/trainingjobs/a";

fn report(done: f64) -> Report {
    Report {
        kind: JobKind::TrainingJob,
        namespace: "ns".into(),
        name: "a".into(),
        done,
        total: Some(100.0),
        unit: Some("steps".into()),
        window_s: 300.0,
        status: false,
    }
}

fn object(resource_version: &str, annotation: Option<&str>) -> Value {
    let mut meta = json!({"name": "a", "namespace": "ns", "resourceVersion": resource_version});
    if let Some(text) = annotation {
        meta["annotations"] = json!({ PROGRESS_ANNOTATION: text });
    }
    json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob", "metadata": meta,
           "spec": {}})
}

/// The report a patch body carries.
fn written(body: &Value) -> Value {
    let text = body["metadata"]["annotations"][PROGRESS_ANNOTATION]
        .as_str()
        .expect("the patch writes the annotation");
    serde_json::from_str(text).unwrap()
}

async fn conflict_then_write(mut handle: MockHandle) {
    // First read: no report yet, so the window opens at this one.
    let (_, _, _, send) = expect(&mut handle, Method::GET, PATH).await;
    respond(send, StatusCode::OK, object("5", None));
    let (_, content_type, body, send) = expect(&mut handle, Method::PATCH, PATH).await;
    assert_eq!(
        content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(body["metadata"]["resourceVersion"], "5");
    let first = written(&body);
    assert_eq!(first["done"], 40.0);
    assert_eq!(first["doneAtSince"], 40.0);
    assert_eq!(first["since"], first["updated"]);
    respond(
        send,
        StatusCode::CONFLICT,
        api_status(409, "Conflict", "the object has been modified"),
    );
    // Read again: someone reported meanwhile; its window is kept.
    let (_, _, _, send) = expect(&mut handle, Method::GET, PATH).await;
    let theirs = r#"{"done": 30, "total": 100, "unit": "steps", "updated": "2026-11-27T20:00:00Z",
                     "since": "2026-11-27T19:59:00Z", "doneAtSince": 20}"#;
    respond(send, StatusCode::OK, object("6", Some(theirs)));
    let (_, _, body, send) = expect(&mut handle, Method::PATCH, PATH).await;
    assert_eq!(body["metadata"]["resourceVersion"], "6");
    let second = written(&body);
    assert_eq!(second["since"], "2026-11-27T19:59:00Z");
    assert_eq!(second["doneAtSince"], 20.0);
    assert_eq!(second["updated"], "2026-11-27T20:01:00Z");
    respond(send, StatusCode::OK, object("7", None));
}

#[tokio::test]
async fn a_report_is_written_at_the_version_read_and_again_after_a_conflict() {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(conflict_then_write(handle));
    let now: Timestamp = "2026-11-27T20:01:00Z".parse().unwrap();
    let out = write_progress(&client, &report(40.0), now).await.unwrap();
    server.await.unwrap();
    assert_eq!(out.done, 40.0);
    assert_eq!(out.done_at_since, Some(20.0));
}

async fn always_conflicting(mut handle: MockHandle) {
    for _ in 0..=CONFLICT_RETRIES {
        let (_, _, _, send) = expect(&mut handle, Method::GET, PATH).await;
        respond(send, StatusCode::OK, object("5", None));
        let (_, _, _, send) = expect(&mut handle, Method::PATCH, PATH).await;
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "the object has been modified"),
        );
    }
}

#[tokio::test]
async fn conflicts_give_up_after_the_retries_naming_the_object() {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(always_conflicting(handle));
    let err = write_progress(&client, &report(1.0), Timestamp::now())
        .await
        .unwrap_err();
    server.await.unwrap();
    assert!(
        matches!(err, ProgressError::Conflicts { attempts, .. } if attempts == CONFLICT_RETRIES + 1)
    );
    assert!(err.to_string().starts_with("TrainingJob ns/a: "), "{err}");
}

#[tokio::test]
async fn a_missing_job_and_a_missing_total_are_errors_naming_the_object() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(async move {
        let (_, _, _, send) = expect(&mut handle, Method::GET, PATH).await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            api_status(404, "NotFound", "not found"),
        );
    });
    let err = write_progress(&client, &report(1.0), Timestamp::now())
        .await
        .unwrap_err();
    server.await.unwrap();
    assert_eq!(err.to_string(), "TrainingJob ns/a: not found");
    // A PyTorchJob has no spec.passes: --total is needed, and nothing is sent.
    let no_total = Report {
        kind: JobKind::PyTorchJob,
        total: None,
        ..report(1.0)
    };
    let err = write_progress(&client, &no_total, Timestamp::now())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--total is needed"), "{err}");
}

fn training_job(annotation: &str) -> Value {
    json!({
        "apiVersion": "paddlepaddle.org/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "a", "namespace": "ns",
                     "annotations": {PROGRESS_ANNOTATION: annotation}},
        "spec": {
            "fault_tolerant": true,
            "passes": 10,
            "pserver": {"min-instance": 1, "max-instance": 1},
            "trainer": {
                "min-instance": 1, "max-instance": 4,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                "replicaSpec": {"spec": {"parallelism": 1, "template": {"spec": {"containers": []}}}}
            }
        }
    })
}

#[test]
fn validate_shows_a_malformed_report_as_a_warning() {
    let doc = training_job(r#"{"done": "many", "updated": "2026-11-27T20:00:00Z"}"#);
    let docs = parse_documents(&doc.to_string(), "test.json").unwrap();
    let report = validate_document(&docs[0], &Default::default());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let warnings: Vec<String> = report.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "TrainingJob ns/a: metadata.annotations[\"trainscale.io/progress\"]: not a progress report"
        ),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("plans this job without progress"));
}

fn state_of(job: Value) -> ClusterState {
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [job]});
    let docs = parse_documents(&dump.to_string(), "dump.json").unwrap();
    ClusterState::from_documents(&docs).state
}

fn progress_of(state: &ClusterState) -> Option<f64> {
    state
        .jobs()
        .next()
        .and_then(|(_, _, i)| i.progress)
        .map(|p| p.remaining_worker_s)
}

#[test]
fn a_pass_estimates_from_the_report_and_ignores_stale_and_malformed_ones() {
    // Passes as the total: 2 passes in 100 s at the stored size (1 trainer, none bound), 7 left.
    let mut state = state_of(training_job(
        r#"{"done": 3, "updated": "2026-11-27T20:00:00Z",
            "since": "2026-11-27T19:58:20Z", "doneAtSince": 1}"#,
    ));
    let updated = "2026-11-27T20:00:00Z"
        .parse::<Timestamp>()
        .unwrap()
        .as_second();
    let ignored = state.estimate_progress(updated + 60, 600);
    assert!(ignored.is_empty(), "{ignored:?}");
    let left = progress_of(&state).unwrap();
    assert!((left - 350.0).abs() < 1e-6, "{left}");
    // Eleven minutes later it is stale: no estimate, a warning naming the annotation.
    let ignored = state.estimate_progress(updated + 660, 600);
    assert_eq!(progress_of(&state), None);
    assert_eq!(ignored.len(), 1);
    assert_eq!(ignored[0].why, Ignored::Stale(660.0));
    let warning = ignored[0].warning.as_ref().unwrap().to_string();
    assert!(
        warning.starts_with(
            "TrainingJob ns/a: metadata.annotations[\"trainscale.io/progress\"]: not updated for 660s"
        ),
        "{warning}"
    );
    // Malformed: planned without progress, the warning among the job's.
    let mut state = state_of(training_job("{not json"));
    let ignored = state.estimate_progress(updated, 600);
    assert_eq!(ignored.len(), 1);
    assert_eq!(ignored[0].why, Ignored::Malformed);
    assert_eq!(progress_of(&state), None);
    let (key, _, _) = state.jobs().next().unwrap();
    let warnings = state.warnings(&key.clone());
    assert!(
        warnings.iter().any(|w| w.problem.contains("not JSON")),
        "{warnings:?}"
    );
}

#[test]
fn plan_on_a_dump_warns_of_a_stale_report_at_its_now() {
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [training_job(
        r#"{"done": 3, "updated": "2026-11-27T20:00:00Z",
            "since": "2026-11-27T19:58:20Z", "doneAtSince": 1}"#,
    )]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    std::fs::write(&path, dump.to_string()).unwrap();
    let at = |now: &str, stale_after_s: i64| -> Value {
        let config = trainscale::planner::PlannerConfig {
            now: now.parse::<Timestamp>().unwrap().as_second(),
            ..Default::default()
        };
        let (text, _) = trainscale::commands::plan::plan_snapshot_at(
            &path,
            &config,
            trainscale::commands::OutputFormat::Json,
            stale_after_s,
        )
        .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let stale = |plan: &Value| {
        plan["job_warnings"].as_array().unwrap().iter().any(|w| {
            w["message"]
                .as_str()
                .unwrap()
                .starts_with("not updated for")
        })
    };
    assert!(!stale(&at("2026-11-27T20:05:00Z", 600)));
    assert!(stale(&at("2026-11-27T20:20:00Z", 600)));
    // A longer limit takes it again.
    assert!(!stale(&at("2026-11-27T20:20:00Z", 3600)));
}

#[tokio::test]
async fn status_writes_status_progress_through_the_subresource() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(async move {
        let (_, _, _, send) = expect(&mut handle, Method::GET, PATH).await;
        let mut job = object("8", None);
        job["status"] = json!({"progress": {"done": 2, "unit": "passes",
            "updated": "2026-11-27T20:00:00Z", "since": "2026-11-27T19:50:00Z", "doneAtSince": 1}});
        respond(send, StatusCode::OK, job);
        let status_path = format!("{PATH}/status");
        let (_, content_type, body, send) = expect(&mut handle, Method::PATCH, &status_path).await;
        assert_eq!(
            content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        assert_eq!(body["metadata"]["resourceVersion"], "8");
        assert!(body["metadata"].get("annotations").is_none());
        // Passes as the total; the status's window, older than 5 min, slides to its report.
        let progress = &body["status"]["progress"];
        assert_eq!(progress["done"], 3.0);
        assert!(progress.get("total").is_none());
        assert_eq!(progress["since"], "2026-11-27T20:00:00Z");
        assert_eq!(progress["doneAtSince"], 2.0);
        respond(send, StatusCode::OK, object("9", None));
    });
    let passes = Report {
        total: None,
        unit: Some("passes".into()),
        status: true,
        ..report(3.0)
    };
    let now: Timestamp = "2026-11-27T20:01:00Z".parse().unwrap();
    write_progress(&client, &passes, now).await.unwrap();
    server.await.unwrap();
    // Only the paddlepaddle.org kinds have it.
    let job = Report {
        kind: JobKind::BatchJob,
        status: true,
        ..report(3.0)
    };
    let err = write_progress(&client, &job, now).await.unwrap_err();
    assert!(
        err.to_string().contains("--status is for a TrainingJob"),
        "{err}"
    );
}

/// The daemon reports a malformed report once per object version (a Warning Event), among the
/// warnings only the autoscaler sees.
#[test]
fn the_daemon_warns_of_a_malformed_report_once_per_version() {
    use kube::api::DynamicObject;
    use kube::runtime::watcher::Event;
    use trainscale::daemon::{Store, WatchEvent};
    let mut store = Store::new();
    let apply = |store: &mut Store, version: &str, annotation: &str| {
        let mut job = training_job(annotation);
        job["metadata"]["resourceVersion"] = json!(version);
        let obj: DynamicObject = serde_json::from_value(job).unwrap();
        store.handle(WatchEvent::JobObject(
            JobKind::TrainingJob,
            Event::Apply(obj),
        ));
    };
    apply(&mut store, "1", "{not json");
    let warned = store.unreported_warnings();
    assert_eq!(warned.len(), 1);
    assert_eq!(
        warned[0].problems[0].field,
        "metadata.annotations[\"trainscale.io/progress\"]"
    );
    store.mark_warned(&warned[0]);
    assert!(store.unreported_warnings().is_empty());
    // Fixed: nothing to report.
    apply(
        &mut store,
        "2",
        r#"{"done": 1, "total": 5, "updated": "2026-11-27T20:00:00Z"}"#,
    );
    assert!(store.unreported_warnings().is_empty());
    // Broken again at a new version: reported again.
    apply(
        &mut store,
        "3",
        r#"{"done": -1, "total": 5, "updated": "2026-11-27T20:00:00Z"}"#,
    );
    assert_eq!(store.unreported_warnings().len(), 1);
}
