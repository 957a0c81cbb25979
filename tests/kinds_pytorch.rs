//! The two PyTorch kinds trainscale only sizes: each adapter reads min, max, the per-worker
//! request, priority and size from the example manifests (seed 003's fields; Kubeflow's elastic
//! example), their worker pods count, the store resolves their rescales, and the actuator sends
//! exactly one merge patch of the one field (with the last-scale annotation) and an Event.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::api::DynamicObject;
use kube::client::Body;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower_test::mock;
use trainscale::api::manifest::read_documents;
use trainscale::api::priority::PriorityClasses;
use trainscale::api::{JobKey, JobKind, PyTorchJob, PyTorchTrainingJob, Resources, ScaleResults};
use trainscale::cluster::ClusterState;
use trainscale::cluster::kinds::{JobAdapter, Reading};
use trainscale::daemon::pass::prepare;
use trainscale::daemon::{Actuator, Rescale, Store, WatchEvent};
use trainscale::planner::{PlannerConfig, Reason};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, expect, respond};

const GI: i64 = 1 << 30;
const MERGE: Option<&str> = Some("application/merge-patch+json");
const T9K: &str = "/apis/batch.tensorstack.dev/v1beta1/namespaces/ml/pytorchtrainingjobs";
const KUBEFLOW: &str = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ml/events";
const STAMP: &str = "2024-05-01T12:00:00Z";

fn example(file: &str) -> Vec<Value> {
    read_documents(std::path::Path::new(file))
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .collect()
}

fn planned(reading: Reading) -> trainscale::cluster::kinds::ReadJob {
    match reading {
        Reading::Planned(read) => read,
        Reading::LeftAlone(why) => panic!("left alone: {why:?}"),
    }
}

#[test]
fn t9k_example_reads_min_max_request_priority_and_size() {
    let doc = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
    let job: PyTorchTrainingJob = serde_json::from_value(doc).unwrap();
    let read = planned(job.read(&PriorityClasses::new()).unwrap());
    assert_eq!(
        read.key,
        JobKey::of_kind(JobKind::PyTorchTrainingJob, "ml", "torch-elastic-mnist")
    );
    let info = read.info;
    assert_eq!((info.min, info.max), (2, 6));
    // max(init 2 CPU / 1Gi, container 1 CPU / 2Gi); the GPU requested at its limit.
    assert_eq!(info.trainer, Resources::new(2000, 2 * GI, 1));
    assert_eq!(info.priority, 50);
    assert_eq!(info.stored_parallelism, Some(2));
    assert!(read.warnings.is_empty(), "{:?}", read.warnings);
}

#[test]
fn t9k_enabled_spelling_paused_not_elastic_and_finished() {
    let base = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
    let read = |patch: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        patch(&mut v);
        let job: PyTorchTrainingJob = serde_json::from_value(v).unwrap();
        job.read(&PriorityClasses::new())
    };
    // T9k's current API reference spells the switch `enabled`.
    let enabled = read(&|v| {
        v["spec"]["elastic"] = json!({"enabled": true, "minReplicas": 1, "maxReplicas": 3})
    });
    let info = planned(enabled.unwrap()).info;
    assert_eq!((info.min, info.max, info.stored_parallelism), (1, 3, None));
    let paused = read(&|v| v["spec"]["runMode"] = json!({"pause": {"enable": true}}));
    assert!(
        matches!(paused, Ok(Reading::LeftAlone(l)) if l.field == "spec.runMode.pause.enable" && !l.announce)
    );
    let off = read(&|v| v["spec"]["elastic"]["enable"] = json!(false));
    assert!(matches!(off, Ok(Reading::LeftAlone(l)) if l.field == "spec.elastic.enable"));
    let done = read(&|v| v["status"] = json!({"phase": "Succeeded"}));
    assert!(planned(done.unwrap()).info.phase.is_finished());
    // No scheduler named: priority 0; named without a priority: T9k's default 10.
    let no_scheduler = read(&|v| {
        v["spec"]
            .as_object_mut()
            .unwrap()
            .remove("scheduler")
            .map_or((), |_| ())
    });
    assert_eq!(planned(no_scheduler.unwrap()).info.priority, 0);
    let default = read(&|v| v["spec"]["scheduler"] = json!({"t9kScheduler": {"queue": "q"}}));
    assert_eq!(planned(default.unwrap()).info.priority, 10);
}

#[test]
fn t9k_bad_fields_are_named() {
    let base = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
    let errors = |patch: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        patch(&mut v);
        let job: PyTorchTrainingJob = serde_json::from_value(v).unwrap();
        job.read(&PriorityClasses::new()).unwrap_err()
    };
    let e = errors(&|v| v["spec"]["elastic"]["minReplicas"] = json!(9));
    assert_eq!(e[0].field, "spec.elastic.minReplicas");
    assert_eq!(e[0].object, "PyTorchTrainingJob ml/torch-elastic-mnist");
    let e = errors(&|v| {
        v["spec"]["elastic"]
            .as_object_mut()
            .unwrap()
            .remove("maxReplicas")
            .map_or((), |_| ())
    });
    assert_eq!(e[0].field, "spec.elastic.maxReplicas");
    let e = errors(&|v| v["spec"]["replicaSpecs"][0]["type"] = json!("master"));
    assert_eq!(e[0].field, "spec.replicaSpecs");
    let e = errors(&|v| {
        v["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
            ["memory"] = json!("lots")
    });
    assert_eq!(
        e[0].field,
        "spec.replicaSpecs[0].template.spec.containers[0].resources.requests.memory"
    );
}

#[test]
fn kubeflow_example_reads_min_max_request_and_priority_class() {
    let docs = example("deploy/examples/005-pytorchjob-elastic.yaml");
    let job: PyTorchJob = serde_json::from_value(docs[0].clone()).unwrap();
    let classes = PriorityClasses::from([("research".to_string(), 100)]);
    let read = planned(job.read(&classes).unwrap());
    let info = read.info;
    assert_eq!((info.min, info.max), (1, 4));
    assert_eq!(info.trainer, Resources::new(4000, 8 * GI, 1));
    assert_eq!(info.priority, 100);
    assert_eq!(info.priority_class.as_deref(), Some("research"));
    assert_eq!(info.stored_parallelism, Some(2));
}

#[test]
fn kubeflow_hpa_metrics_min_equal_max_and_no_policy_are_left_alone() {
    let hpa = example("deploy/examples/006-pytorchjob-elastic-hpa.yaml").remove(0);
    let job: PyTorchJob = serde_json::from_value(hpa).unwrap();
    match job.read(&PriorityClasses::new()) {
        Ok(Reading::LeftAlone(l)) => {
            assert_eq!(l.field, "spec.elasticPolicy.metrics");
            assert!(l.announce);
            assert!(l.why.contains("HorizontalPodAutoscaler"), "{}", l.why);
        }
        other => panic!("{other:?}"),
    }
    let base = example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0);
    let read = |patch: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        patch(&mut v);
        let job: PyTorchJob = serde_json::from_value(v).unwrap();
        job.read(&PriorityClasses::new())
    };
    let fixed = read(&|v| v["spec"]["elasticPolicy"]["maxReplicas"] = json!(1));
    assert!(matches!(fixed, Ok(Reading::LeftAlone(l)) if !l.announce));
    let plain = read(&|v| {
        v["spec"]
            .as_object_mut()
            .unwrap()
            .remove("elasticPolicy")
            .map_or((), |_| ())
    });
    assert!(matches!(plain, Ok(Reading::LeftAlone(_))));
    let failed = read(&|v| {
        v["status"] = json!({"conditions": [{"type": "Running", "status": "False"},
                                            {"type": "Failed", "status": "True"}]})
    });
    assert!(planned(failed.unwrap()).info.phase.is_finished());
    let e = read(&|v| v["spec"]["pytorchReplicaSpecs"] = json!({"Master": {"replicas": 1}}))
        .unwrap_err();
    assert_eq!(e[0].field, "spec.pytorchReplicaSpecs.Worker");
}

fn pod(name: &str, node: Option<&str>, meta: Value) -> Value {
    let mut metadata = json!({"name": name, "namespace": "ml", "resourceVersion": "1",
        "creationTimestamp": "2024-01-01T00:00:00Z"});
    for (k, v) in meta.as_object().unwrap() {
        metadata[k] = v.clone();
    }
    let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
           "status": {"phase": if node.is_some() {"Running"} else {"Pending"}}})
}

fn t9k_owner() -> Value {
    json!({"ownerReferences": [{"apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob", "name": "torch-elastic-mnist", "uid": "u1", "controller": true}]})
}

#[test]
fn without_a_stored_size_the_live_worker_pods_are_the_size() {
    let mut t9k = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
    t9k["spec"]["elastic"]
        .as_object_mut()
        .unwrap()
        .remove("expectedReplicas");
    let mut kubeflow = example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0);
    kubeflow["spec"]["pytorchReplicaSpecs"]["Worker"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let kf = |role: &str| {
        json!({"labels": {"training.kubeflow.org/job-name": "elastic-example-imagenet",
                          "training.kubeflow.org/replica-type": role}})
    };
    let mut finished = pod("torch-elastic-mnist-worker-9", Some("n1"), t9k_owner());
    finished["status"]["phase"] = json!("Succeeded");
    let docs = vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8}}}),
        t9k,
        kubeflow,
        pod("torch-elastic-mnist-worker-0", Some("n1"), t9k_owner()),
        pod("torch-elastic-mnist-worker-1", Some("n1"), t9k_owner()),
        pod("torch-elastic-mnist-worker-2", None, t9k_owner()),
        pod("torch-elastic-mnist-master-0", Some("n1"), t9k_owner()),
        finished,
        pod(
            "elastic-example-imagenet-worker-0",
            Some("n1"),
            kf("worker"),
        ),
        pod(
            "elastic-example-imagenet-master-0",
            Some("n1"),
            kf("master"),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string(),
    )
    .unwrap();
    let snap = ClusterState::from_file(&path).unwrap();
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);
    let t9k_key = JobKey::of_kind(JobKind::PyTorchTrainingJob, "ml", "torch-elastic-mnist");
    let kf_key = JobKey::of_kind(JobKind::PyTorchJob, "ml", "elastic-example-imagenet");
    let t9k_slot = snap.state.job(&t9k_key).unwrap();
    assert_eq!(t9k_slot.current(), 3, "two bound and one pending worker");
    assert_eq!((t9k_slot.trainers.bound, t9k_slot.trainers.pending), (2, 1));
    assert_eq!(snap.state.job(&kf_key).unwrap().current(), 1);
}

fn guarded<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

/// A synced store with one node, the T9k and the two Kubeflow examples.
fn store_with_examples() -> Store {
    let mut store = Store::new();
    store.expect_job_kinds(&JobKind::ALL[..4]);
    let node: k8s_openapi::api::core::v1::Node = guarded(json!({"metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8}}}));
    let init = |store: &mut Store, events: Vec<WatchEvent>| {
        for e in events {
            store.handle(e);
        }
    };
    init(
        &mut store,
        vec![
            WatchEvent::Node(Event::Init),
            WatchEvent::Node(Event::InitApply(node)),
            WatchEvent::Node(Event::InitDone),
        ],
    );
    for e in [
        WatchEvent::Pod(Event::Init),
        WatchEvent::Pod(Event::InitDone),
        WatchEvent::Job(Event::Init),
        WatchEvent::Job(Event::InitDone),
        WatchEvent::PriorityClass(Event::Init),
        WatchEvent::PriorityClass(Event::InitDone),
        WatchEvent::JobObject(JobKind::TrainingJob, Event::Init),
        WatchEvent::JobObject(JobKind::TrainingJob, Event::InitDone),
        WatchEvent::JobObject(JobKind::PaddleJob, Event::Init),
        WatchEvent::JobObject(JobKind::PaddleJob, Event::InitDone),
    ] {
        store.handle(e);
    }
    assert!(!store.synced(), "the PyTorch kinds are expected");
    let mut t9k = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
    t9k["metadata"]["resourceVersion"] = json!("7");
    t9k["metadata"]["uid"] = json!("uid-t9k");
    let t9k: DynamicObject = guarded(t9k);
    let mut kf = example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0);
    kf["metadata"]["resourceVersion"] = json!("8");
    let mut hpa = example("deploy/examples/006-pytorchjob-elastic-hpa.yaml").remove(0);
    hpa["metadata"]["resourceVersion"] = json!("9");
    let kf: Vec<DynamicObject> = vec![guarded(kf), guarded(hpa)];
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchTrainingJob,
        Event::Init,
    ));
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchTrainingJob,
        Event::InitApply(t9k),
    ));
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchTrainingJob,
        Event::InitDone,
    ));
    store.handle(WatchEvent::JobObject(JobKind::PyTorchJob, Event::Init));
    for job in kf {
        store.handle(WatchEvent::JobObject(
            JobKind::PyTorchJob,
            Event::InitApply(job),
        ));
    }
    store.handle(WatchEvent::JobObject(JobKind::PyTorchJob, Event::InitDone));
    assert!(store.synced());
    store
}

#[test]
fn the_pass_resizes_the_elastic_jobs_and_announces_the_hpa_one() {
    let store = store_with_examples();
    let work = prepare(&store, &PlannerConfig::default(), None);
    let t9k = JobKey::of_kind(JobKind::PyTorchTrainingJob, "ml", "torch-elastic-mnist");
    let kf = JobKey::of_kind(JobKind::PyTorchJob, "ml", "elastic-example-imagenet");
    let hpa = JobKey::of_kind(JobKind::PyTorchJob, "ml", "elastic-example-hpa");
    // 8 GPUs, one per worker: both grow to max (6 + 4 would need 10; water-filling shares).
    let targets: Vec<(JobKey, i32, i32, Option<String>)> = work
        .rescales
        .iter()
        .map(|r| {
            (
                r.key.clone(),
                r.current,
                r.target,
                r.resource_version.clone(),
            )
        })
        .collect();
    assert_eq!(targets.len(), 2, "{targets:?}");
    let of = |key: &JobKey| targets.iter().find(|t| &t.0 == key).unwrap().clone();
    let (_, t9k_from, t9k_to, t9k_rv) = of(&t9k);
    let (_, kf_from, kf_to, kf_rv) = of(&kf);
    assert_eq!((t9k_from, kf_from), (2, 2));
    assert_eq!(t9k_to + kf_to, 8, "every GPU handed out");
    assert_eq!(
        (t9k_rv.as_deref(), kf_rv.as_deref()),
        (Some("7"), Some("8"))
    );
    assert!(work.waiting.is_empty());
    assert!(work.plan.jobs.iter().all(|j| j.key.as_ref() != &hpa));
    assert_eq!(work.left_alone.len(), 1);
    assert_eq!(work.left_alone[0].key, hpa);
    assert_eq!(
        work.left_alone[0].problems[0].field,
        "spec.elasticPolicy.metrics"
    );
    // Reported once per resourceVersion.
    let mut store = store;
    store.mark_reported(&hpa, "9");
    assert!(store.unreported_left_alone().is_empty());
}

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

fn rescale(kind: JobKind, name: &str, current: i32, target: i32) -> Rescale {
    Rescale {
        key: JobKey::of_kind(kind, "ml", name),
        uid: Some(format!("uid-{name}")),
        resource_version: Some("7".to_string()),
        trainer_job: None,
        size_at: None,
        current,
        target,
        reason: Reason::ScaleUp,
    }
}

fn annotation(from: i32, to: i32) -> String {
    format!(r#"{{"time":"{STAMP}","from":{from},"to":{to},"reason":"scale_up"}}"#)
}

/// Asserts the client sends nothing more.
async fn no_more_requests(handle: &mut MockHandle) {
    let next = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
    assert!(
        !matches!(next, Ok(Some(_))),
        "an unexpected further request"
    );
}

#[tokio::test]
async fn t9k_rescale_is_one_merge_patch_of_expected_replicas_and_an_event() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{T9K}/torch-elastic-mnist");
        let (query, ct, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(query.as_deref().unwrap_or(""), "");
        assert_eq!(ct.as_deref(), MERGE);
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7",
                                "annotations": {"trainscale.io/last-scale": annotation(2, 5)}},
                   "spec": {"elastic": {"expectedReplicas": 5}}})
        );
        let mut updated = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
        updated["spec"]["elastic"]["expectedReplicas"] = json!(5);
        respond(send, StatusCode::OK, updated);
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["regarding"]["kind"], "PyTorchTrainingJob");
        assert_eq!(
            event["regarding"]["apiVersion"],
            "batch.tensorstack.dev/v1beta1"
        );
        assert_eq!(event["reason"], "Rescaled");
        assert_eq!(event["note"], "trainers 2 -> 5 (scale_up)");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::PyTorchTrainingJob,
            "torch-elastic-mnist",
            2,
            5,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::True, "{outcome:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn kubeflow_rescale_patches_worker_replicas_and_retries_a_conflict() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{KUBEFLOW}/elastic-example-imagenet");
        let want = |rv: &str| {
            json!({"metadata": {"resourceVersion": rv,
                                "annotations": {"trainscale.io/last-scale": annotation(2, 4)}},
                   "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}})
        };
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(ct.as_deref(), MERGE);
        assert_eq!(body, want("7"));
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "changed"),
        );
        // The operator wrote its status meanwhile; the size is still the one planned on.
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        let mut fresh = example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0);
        fresh["metadata"]["resourceVersion"] = json!("12");
        respond(send, StatusCode::OK, fresh.clone());
        let (_, _, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(body, want("12"));
        fresh["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = json!(4);
        respond(send, StatusCode::OK, fresh);
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["regarding"]["kind"], "PyTorchJob");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::PyTorchJob,
            "elastic-example-imagenet",
            2,
            4,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::True, "{outcome:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn a_size_changed_since_planning_is_left_to_the_next_pass() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{KUBEFLOW}/elastic-example-imagenet");
        let (_, _, _, send) = expect(&mut handle, Method::PATCH, &path).await;
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "changed"),
        );
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        let mut fresh = example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0);
        fresh["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = json!(3);
        respond(send, StatusCode::OK, fresh);
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["reason"], "RescaleFailed");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::PyTorchJob,
            "elastic-example-imagenet",
            2,
            4,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::False);
    assert!(
        outcome.reason.contains("changed to 3"),
        "{}",
        outcome.reason
    );
    server.await.unwrap();
}

#[test]
fn validate_accepts_both_kinds_and_says_why_one_is_left_alone() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args([
            "validate",
            "-f",
            "deploy/examples/003-pytorchtrainingjob-elastic.yaml",
            "deploy/examples/005-pytorchjob-elastic.yaml",
            "deploy/examples/006-pytorchjob-elastic-hpa.yaml",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("ok: PyTorchTrainingJob ml/torch-elastic-mnist"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok: PyTorchJob ml/elastic-example-imagenet"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "warning: PyTorchJob ml/elastic-example-hpa: spec.elasticPolicy.metrics: not planned"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("invalid:"), "{stdout}");
}

#[test]
fn the_worker_template_confines_the_workers_to_its_nodes() {
    let mut t9k = example("deploy/examples/003-pytorchtrainingjob-elastic.yaml").remove(0);
    t9k["spec"]["replicaSpecs"][0]["template"]["spec"]["nodeSelector"] = json!({"gpu": "a100"});
    let node = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
               "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8}}})
    };
    let docs = vec![
        node("a100", json!({"gpu": "a100"})),
        node("t4", json!({"gpu": "t4"})),
        t9k,
    ];
    let mut state = ClusterState::new();
    let mut warnings = Vec::new();
    for doc in docs {
        let doc = trainscale::api::manifest::Document {
            value: doc,
            origin: "test".into(),
        };
        state.apply_document(&doc, &mut warnings);
    }
    assert!(warnings.is_empty(), "{warnings:?}");
    let key = JobKey::of_kind(JobKind::PyTorchTrainingJob, "ml", "torch-elastic-mnist");
    let class = state.job(&key).unwrap().class;
    assert!(class.is_some());
    let a100 = state.node_id_of("a100").unwrap();
    let t4 = state.node_id_of("t4").unwrap();
    assert!(state.eligible(class, a100));
    assert!(!state.eligible(class, t4));
    // Deleting the job gives the class back.
    state.delete_job(&key);
    assert!(state.job(&key).is_none());
}

#[test]
fn kinds_flag_names_each_kind_and_refuses_others() {
    use trainscale::commands::flags::job_kind;
    assert_eq!(job_kind("pytorchjob"), Ok(JobKind::PyTorchJob));
    assert_eq!(
        job_kind("PyTorchTrainingJob"),
        Ok(JobKind::PyTorchTrainingJob)
    );
    assert_eq!(job_kind("trainingjob"), Ok(JobKind::TrainingJob));
    let e = job_kind("tfjob").unwrap_err();
    assert!(
        e.contains("trainingjob, paddlejob, pytorchtrainingjob, pytorchjob"),
        "{e}"
    );
}

#[tokio::test]
async fn discovery_adds_the_kinds_whose_crd_is_served() {
    use trainscale::daemon::watch::select_kinds;
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(async move {
        let (_, _, _, send) = expect(
            &mut handle,
            Method::GET,
            "/apis/batch.tensorstack.dev/v1beta1",
        )
        .await;
        respond(
            send,
            StatusCode::NOT_FOUND,
            api_status(404, "NotFound", "not found"),
        );
        let (_, _, _, send) = expect(&mut handle, Method::GET, "/apis/kubeflow.org/v1").await;
        respond(
            send,
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": "kubeflow.org/v1",
                   "resources": [{"name": "pytorchjobs", "singularName": "pytorchjob",
                                  "namespaced": true, "kind": "PyTorchJob",
                                  "verbs": ["get", "list", "watch", "patch"]}]}),
        );
        // Jobs are served by every API server: no discovery of the elastic Job.
        let (_, _, _, send) =
            expect(&mut handle, Method::GET, "/apis/jobset.x-k8s.io/v1alpha2").await;
        respond(
            send,
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "APIResourceList",
                   "groupVersion": "jobset.x-k8s.io/v1alpha2",
                   "resources": [{"name": "jobsets", "singularName": "jobset",
                                  "namespaced": true, "kind": "JobSet",
                                  "verbs": ["get", "list", "watch", "patch"]}]}),
        );
    });
    let selection = select_kinds(&client, None, Duration::from_secs(60)).await;
    server.await.unwrap();
    assert_eq!(
        selection.now,
        vec![
            JobKind::TrainingJob,
            JobKind::PaddleJob,
            JobKind::PyTorchJob,
            JobKind::BatchJob,
            JobKind::JobSet
        ]
    );
    assert_eq!(selection.when_served, vec![JobKind::PyTorchTrainingJob]);
    // `--kinds` is taken as it is, without discovery.
    let (service, _handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let chosen = select_kinds(
        &client,
        Some(&[JobKind::PyTorchTrainingJob]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(chosen.now, vec![JobKind::PyTorchTrainingJob]);
    assert!(chosen.when_served.is_empty());
}

#[test]
fn a_malformed_pytorch_job_is_reported_and_the_others_still_planned() {
    let mut store = store_with_examples();
    let mut bad = example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0);
    bad["metadata"]["name"] = json!("bad");
    bad["metadata"]["resourceVersion"] = json!("11");
    bad["spec"]["elasticPolicy"]["minReplicas"] = json!("two");
    let bad: DynamicObject = guarded(bad);
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchJob,
        Event::Apply(bad),
    ));
    let invalid = store.unreported_invalid();
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert_eq!(invalid[0].key.name.as_ref(), "bad");
    assert_eq!(invalid[0].key.kind, JobKind::PyTorchJob);
    assert_eq!(
        invalid[0].problems[0].field,
        "spec.elasticPolicy.minReplicas"
    );
    assert_eq!(store.skipped_counts()[&JobKind::PyTorchJob], 1);
    let work = prepare(&store, &PlannerConfig::default(), None);
    assert_eq!(work.rescales.len(), 2, "the others are still planned");
    // Gone with its object.
    let gone: DynamicObject = guarded(json!({"apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob", "metadata": {"name": "bad", "namespace": "ml"}, "spec": {}}));
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchJob,
        Event::Delete(gone),
    ));
    assert!(store.unreported_invalid().is_empty());
}

#[test]
fn a_kind_found_later_lists_like_a_relist_but_is_no_restart() {
    let mut store = Store::new();
    for e in [
        WatchEvent::Node(Event::Init),
        WatchEvent::Node(Event::InitDone),
        WatchEvent::Pod(Event::Init),
        WatchEvent::Pod(Event::InitDone),
        WatchEvent::Job(Event::Init),
        WatchEvent::Job(Event::InitDone),
        WatchEvent::PriorityClass(Event::Init),
        WatchEvent::PriorityClass(Event::InitDone),
        WatchEvent::JobObject(JobKind::TrainingJob, Event::Init),
        WatchEvent::JobObject(JobKind::TrainingJob, Event::InitDone),
        WatchEvent::JobObject(JobKind::PaddleJob, Event::Init),
        WatchEvent::JobObject(JobKind::PaddleJob, Event::InitDone),
    ] {
        store.handle(e);
    }
    // The PyTorch kinds are not expected by default: ready without them.
    assert!(store.synced() && !store.relisting());
    store.handle(WatchEvent::JobObject(JobKind::PyTorchJob, Event::Init));
    assert!(store.synced(), "readiness does not drop");
    assert!(
        store.relisting(),
        "passes wait for the new kind's first list"
    );
    let job: DynamicObject =
        guarded(example("deploy/examples/005-pytorchjob-elastic.yaml").remove(0));
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchJob,
        Event::InitApply(job),
    ));
    store.handle(WatchEvent::JobObject(JobKind::PyTorchJob, Event::InitDone));
    assert!(!store.relisting());
    assert_eq!(store.restarts(), 0);
    assert!(store.listed_kind(trainscale::daemon::Kind::JobObject(JobKind::PyTorchJob)));
    let key = JobKey::of_kind(JobKind::PyTorchJob, "ml", "elastic-example-imagenet");
    assert!(
        store
            .state()
            .job(&key)
            .and_then(|s| s.info.as_ref())
            .is_some()
    );
    // A later Init of that kind is a restart.
    store.handle(WatchEvent::JobObject(JobKind::PyTorchJob, Event::Init));
    assert_eq!(store.restarts(), 1);
}

#[test]
fn a_refused_watch_of_a_discovered_kind_is_dropped_not_waited_for() {
    use kube::core::Status;
    use kube::runtime::watcher::Error;
    use trainscale::daemon::watch::refused;
    let status = |code: u16| Box::new(Status::failure("no", "Forbidden").with_code(code));
    let api = |code: u16| kube::Error::Api(status(code));
    assert!(refused(&Error::InitialListFailed(api(403))));
    assert!(refused(&Error::WatchStartFailed(api(404))));
    assert!(!refused(&Error::InitialListFailed(api(503))));
    assert!(!refused(&Error::WatchError(status(410))));
    assert!(!refused(&Error::NoResourceVersion));

    // Expected at start, refused: the store stops waiting and forgets its objects.
    let mut store = store_with_examples();
    store.handle(WatchEvent::JobObject(JobKind::PyTorchJob, Event::Init));
    assert!(store.relisting());
    store.drop_kind(trainscale::daemon::Kind::JobObject(JobKind::PyTorchJob));
    assert!(store.synced() && !store.relisting());
    let kf = JobKey::of_kind(JobKind::PyTorchJob, "ml", "elastic-example-imagenet");
    assert!(store.state().job(&kf).is_none());
    let t9k = JobKey::of_kind(JobKind::PyTorchTrainingJob, "ml", "torch-elastic-mnist");
    let planned = store.state().job(&t9k).and_then(|s| s.info.as_ref());
    assert!(planned.is_some(), "the other kind is kept");
}
