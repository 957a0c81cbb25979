//! Sizes stay bounded: an elastic worker of any kind without requests is an error naming the
//! field (in `validate`, `plan`/`state` and the daemon), and a declared size larger than the
//! cluster's nodes can hold (their `pods` summed) is planned at that cap, with a warning naming
//! the object and field, in every policy, in `explain` and in the daemon's pass.

use std::process::Command;

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use trainscale::api::manifest::parse_documents;
use trainscale::api::validate::validate_document;
use trainscale::api::{JobKey, JobKind};
use trainscale::cluster::ClusterState;
use trainscale::cluster::report::{job_warnings, skipped_jobs};
use trainscale::commands::OutputFormat;
use trainscale::commands::explain::explain_job;
use trainscale::commands::plan::plan_snapshot;
use trainscale::daemon::pass::prepare;
use trainscale::daemon::{Store, WatchEvent};
use trainscale::planner::{PlannerConfig, Policy, Reason, plan};

/// The largest size a manifest can declare.
const BIG: i64 = i32::MAX as i64;

/// A Node with 64 cores, 256Gi and `pods` pod slots.
fn node(name: &str, pods: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": pods}}})
}

/// A container named `c` with these resources (none when `resources` is null).
fn container(resources: Value) -> Value {
    let mut c = json!({"name": "c", "image": "x"});
    if !resources.is_null() {
        c["resources"] = resources;
    }
    c
}

fn one_cpu() -> Value {
    json!({"requests": {"cpu": "1", "memory": "1Gi"}})
}

fn pytorch_job(name: &str, min: i64, max: i64, replicas: i64, resources: Value) -> Value {
    json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "5",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"elasticPolicy": {"minReplicas": min, "maxReplicas": max},
                 "pytorchReplicaSpecs": {"Worker": {"replicas": replicas,
                     "template": {"spec": {"containers": [container(resources)]}}}}}})
}

fn t9k_job(name: &str, min: i64, max: i64, expected: i64, resources: Value) -> Value {
    json!({"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "PyTorchTrainingJob",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "5",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"elastic": {"enable": true, "minReplicas": min, "maxReplicas": max,
                             "expectedReplicas": expected},
                 "replicaSpecs": [{"type": "worker",
                     "template": {"spec": {"containers": [container(resources)]}}}]}})
}

fn training_job(name: &str, min: i64, max: i64, parallelism: Option<i64>) -> Value {
    let mut trainer = json!({"min-instance": min, "max-instance": max, "resources": one_cpu()});
    if let Some(p) = parallelism {
        trainer["replicaSpec"] = json!({"spec": {"parallelism": p, "template": {}}});
    }
    json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "5",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"fault_tolerant": true, "pserver": {"min-instance": 1, "max-instance": 1},
                 "trainer": trainer},
        "status": {"phase": "Running"}})
}

fn paddle_job(name: &str, min: i64, max: i64) -> Value {
    json!({"apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "5",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"pserver": {"min-instance": 1, "max-instance": 1},
                 "trainer": {"min-instance": min, "max-instance": max, "resources": one_cpu()}}})
}

/// The trainer batch/v1 Job of a paddlepaddle.org job, at `parallelism`.
fn trainer_job(kind: &str, api: &str, owner: &str, parallelism: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("{owner}-trainer"), "namespace": "ns", "resourceVersion": "3",
            "ownerReferences": [{"apiVersion": api, "kind": kind, "name": owner, "uid": "u",
                                 "controller": true}]},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "completionMode": "Indexed",
                 "template": {"spec": {"containers": [container(one_cpu())]}}}})
}

fn state_of(items: Vec<Value>) -> ClusterState {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let docs = parse_documents(&list.to_string(), "dump.json").unwrap();
    let snap = ClusterState::from_documents(&docs);
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);
    snap.state
}

/// Two nodes of 110 pods: the size cap is 220.
fn two_nodes() -> Vec<Value> {
    vec![node("n1", "110"), node("n2", "110")]
}

/// `validate`'s errors for one manifest.
fn validate_errors(doc: Value) -> Vec<(String, String)> {
    let docs = parse_documents(&doc.to_string(), "job.json").unwrap();
    validate_document(&docs[0], &Default::default())
        .errors
        .into_iter()
        .map(|e| (e.object, e.field))
        .collect()
}

const KUBEFLOW_REQUESTS: &str =
    "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.requests";
const T9K_REQUESTS: &str = "spec.replicaSpecs[0].template.spec.containers[0].resources.requests";

#[test]
fn a_worker_without_requests_is_an_error_naming_the_field() {
    let cases = [
        (
            pytorch_job("w", 1, 8, 2, Value::Null),
            "PyTorchJob ml/w",
            KUBEFLOW_REQUESTS,
        ),
        (
            t9k_job("w", 1, 8, 2, Value::Null),
            "PyTorchTrainingJob ml/w",
            T9K_REQUESTS,
        ),
        // Zero requests and an explicit zero request beside a limit ask for nothing either.
        (
            pytorch_job(
                "w",
                1,
                8,
                2,
                json!({"requests": {"cpu": "0", "memory": "0"}}),
            ),
            "PyTorchJob ml/w",
            KUBEFLOW_REQUESTS,
        ),
        (
            t9k_job(
                "w",
                1,
                8,
                2,
                json!({"requests": {"cpu": "0"}, "limits": {"cpu": "2"}}),
            ),
            "PyTorchTrainingJob ml/w",
            T9K_REQUESTS,
        ),
    ];
    for (doc, object, field) in cases {
        assert_eq!(
            validate_errors(doc),
            vec![(object.to_string(), field.to_string())]
        );
    }
    // A TrainingJob trainer: the same rule, its own field.
    let mut tj = training_job("t", 1, 4, None);
    tj["spec"]["trainer"]["resources"] = json!({});
    assert_eq!(
        validate_errors(tj),
        vec![(
            "TrainingJob ns/t".to_string(),
            "spec.trainer.resources.requests".to_string()
        )]
    );
}

#[test]
fn any_resource_or_a_limit_counts_as_a_request() {
    for resources in [
        json!({"limits": {"nvidia.com/gpu": 1}}),
        json!({"limits": {"cpu": "500m"}}),
        json!({"requests": {"example.com/fpga": 1}, "limits": {"example.com/fpga": 1}}),
        json!({"requests": {"memory": "1Gi"}}),
    ] {
        let docs = [
            pytorch_job("w", 1, 8, 2, resources.clone()),
            t9k_job("w", 1, 8, 2, resources.clone()),
        ];
        for doc in docs {
            assert_eq!(validate_errors(doc), Vec::new(), "{resources}");
        }
        let mut tj = training_job("t", 1, 4, None);
        tj["spec"]["trainer"]["resources"] = resources.clone();
        assert_eq!(validate_errors(tj), Vec::new(), "{resources}");
    }
    // An init container's request counts too, as it does for the pod's request.
    let mut doc = t9k_job("w", 1, 8, 2, Value::Null);
    doc["spec"]["replicaSpecs"][0]["template"]["spec"]["initContainers"] =
        json!([container(json!({"requests": {"cpu": "1"}}))]);
    assert_eq!(validate_errors(doc), Vec::new());
    // A fixed-size T9k job (min = max) is no elastic worker: nothing to place elastically.
    assert_eq!(
        validate_errors(t9k_job("w", 3, 3, 3, Value::Null)),
        Vec::new()
    );
}

#[test]
fn validate_command_rejects_both_pytorch_kinds_without_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        pytorch_job("noreq", 1, 1_000_000, 2, Value::Null),
        t9k_job("noreq", 1, 1_000_000, 2, Value::Null),
    ]});
    std::fs::write(&path, list.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["validate", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for line in [
        format!(
            "invalid: PyTorchJob ml/noreq: {KUBEFLOW_REQUESTS}: an elastic worker needs a request"
        ),
        format!(
            "invalid: PyTorchTrainingJob ml/noreq: {T9K_REQUESTS}: an elastic worker needs a request"
        ),
        "2 object(s) checked, 2 invalid".to_string(),
    ] {
        assert!(stdout.contains(&line), "{line:?} in {stdout}");
    }
}

#[test]
fn plan_and_state_skip_a_worker_without_requests() {
    // The case: a 110-pod node, max 1,000,000 workers requesting nothing.
    let state = state_of(vec![
        node("n1", "110"),
        pytorch_job("noreq", 1, 1_000_000, 2, Value::Null),
        t9k_job("noreq", 1, 1_000_000, 2, Value::Null),
    ]);
    assert!(plan(&state, &PlannerConfig::default()).jobs.is_empty());
    let skipped: Vec<(JobKind, String)> = skipped_jobs(&state)
        .into_iter()
        .map(|p| (p.kind, p.field))
        .collect();
    assert_eq!(
        skipped,
        vec![
            (JobKind::PyTorchTrainingJob, T9K_REQUESTS.to_string()),
            (JobKind::PyTorchJob, KUBEFLOW_REQUESTS.to_string()),
        ]
    );
    let report = trainscale::cluster::report::StateReport::of(&state);
    assert!(
        report
            .jobs
            .iter()
            .all(|j| j.phase == "Invalid" && j.problems[0].contains("needs a request")),
        "{:?}",
        report.jobs
    );
}

/// The plan of one job of `state` under `policy`: (current, target, min, max, reason).
fn planned(state: &ClusterState, policy: Policy) -> (i32, i32, i32, i32, Reason) {
    let config = PlannerConfig {
        policy,
        ..PlannerConfig::default()
    };
    let p = plan(state, &config);
    assert_eq!(p.jobs.len(), 1);
    let j = &p.jobs[0];
    (j.current, j.target, j.min, j.max, j.reason)
}

/// Each warning of `state`'s planned jobs as (kind, field).
fn warned(state: &ClusterState) -> Vec<(JobKind, String)> {
    job_warnings(state)
        .into_iter()
        .filter(|w| w.message.contains("pods the cluster's nodes can hold"))
        .map(|w| (w.kind, w.field))
        .collect()
}

#[test]
fn every_kinds_declared_sizes_are_capped_at_the_pod_slots_with_a_warning() {
    let cap = 220;
    // (job objects, the kind, the field capped, the plan's current).
    let cases: Vec<(Vec<Value>, JobKind, &str, i32)> = vec![
        (
            vec![pytorch_job("j", 1, BIG, 2, one_cpu())],
            JobKind::PyTorchJob,
            "spec.elasticPolicy.maxReplicas",
            2,
        ),
        (
            vec![pytorch_job("j", 1, 4, BIG, one_cpu())],
            JobKind::PyTorchJob,
            "spec.pytorchReplicaSpecs.Worker.replicas",
            i32::MAX,
        ),
        (
            vec![t9k_job("j", 1, BIG, 2, one_cpu())],
            JobKind::PyTorchTrainingJob,
            "spec.elastic.maxReplicas",
            2,
        ),
        (
            vec![t9k_job("j", 1, 4, BIG, one_cpu())],
            JobKind::PyTorchTrainingJob,
            "spec.elastic.expectedReplicas",
            i32::MAX,
        ),
        (
            vec![training_job("j", 1, BIG, None)],
            JobKind::TrainingJob,
            "spec.trainer.max-instance",
            0,
        ),
        (
            vec![training_job("j", 1, 4, Some(BIG))],
            JobKind::TrainingJob,
            "spec.trainer.replicaSpec.spec.parallelism",
            i32::MAX,
        ),
        (
            vec![
                training_job("j", 1, 4, None),
                trainer_job("TrainingJob", "paddlepaddle.org/v1alpha1", "j", BIG),
            ],
            JobKind::TrainingJob,
            "spec.parallelism of its trainer Job",
            i32::MAX,
        ),
        (
            vec![
                paddle_job("j", 1, BIG),
                trainer_job("PaddleJob", "paddlepaddle.org/v1", "j", BIG),
            ],
            JobKind::PaddleJob,
            "spec.trainer.max-instance",
            i32::MAX,
        ),
    ];
    for (jobs, kind, field, current) in cases {
        let mut items = two_nodes();
        items.extend(jobs);
        let state = state_of(items);
        assert_eq!(state.size_cap(), cap);
        let warnings = warned(&state);
        assert!(
            warnings.contains(&(kind, field.to_string())),
            "{kind} {field}: {warnings:?}"
        );
        for policy in [
            Policy::Fulfillment,
            Policy::Goodput,
            Policy::Edl,
            Policy::Static,
        ] {
            let (plan_current, target, min, max, reason) = planned(&state, policy);
            let what = format!("{kind} {field} under {policy:?}");
            // The plan reports the declared size, so a resize brings it down to the target.
            assert_eq!(plan_current, current, "{what}");
            assert!(min <= max && max <= cap, "{what}: min {min}, max {max}");
            assert!((0..=cap).contains(&target), "{what}: target {target}");
            if current > cap {
                assert_eq!(reason, Reason::OverMax, "{what}");
            }
        }
    }
}

#[test]
fn a_capped_size_plans_as_the_cap_would() {
    // 1-core trainers on two 64-core nodes: 128 fit, whether max says 220 or 2^31 - 1.
    let at = |max: i64| {
        let mut items = two_nodes();
        items.push(training_job("j", 1, max, None));
        let state = state_of(items);
        let p = plan(&state, &PlannerConfig::default());
        let j = &p.jobs[0];
        (j.target, j.max, j.reason, j.placements.len())
    };
    assert_eq!(at(BIG), at(220));
    assert_eq!(at(BIG).0, 128);
    // A size within the cap is not touched and not warned about.
    let mut items = two_nodes();
    items.push(training_job("j", 1, 220, Some(220)));
    let state = state_of(items);
    assert!(warned(&state).is_empty());
    assert_eq!(planned(&state, Policy::Fulfillment).3, 220);
}

#[test]
fn a_declared_size_above_the_cap_is_removed_down_to_the_target() {
    let mut items = two_nodes();
    items.push(training_job("j", 1, 4, None));
    items.push(trainer_job(
        "TrainingJob",
        "paddlepaddle.org/v1alpha1",
        "j",
        BIG,
    ));
    let state = state_of(items);
    let p = plan(&state, &PlannerConfig::default());
    let j = &p.jobs[0];
    assert_eq!(
        (j.current, j.target, j.reason),
        (i32::MAX, 4, Reason::OverMax)
    );
    // Every position from the target up goes; none of them is bound.
    let removed: u64 = j.removals.iter().map(|r| u64::from(r.trainers)).sum();
    assert_eq!(removed, (i32::MAX - 4) as u64);
    assert!(j.removals.iter().all(|r| r.node.is_none()));
    assert_eq!(p.summary.trainers_removed, (i32::MAX - 4) as u32);
}

#[test]
fn nodes_without_a_pod_count_count_the_kubelets_default() {
    let items = vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}}),
        training_job("j", 1, BIG, None),
    ];
    let state = state_of(items);
    assert_eq!(state.size_cap(), 110);
    assert_eq!(planned(&state, Policy::Fulfillment).3, 110);
}

#[test]
fn plan_json_lists_the_cap_warning_and_caps_min_instance() {
    let mut items = two_nodes();
    items.push(training_job("j", BIG, BIG, None));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let (text, skipped) =
        plan_snapshot(&path, &PlannerConfig::default(), OutputFormat::Json).unwrap();
    assert!(skipped.is_empty());
    let out: Value = serde_json::from_str(&text).unwrap();
    let job = &out["jobs"][0];
    assert_eq!(
        (&job["min"], &job["max"], &job["target"], &job["reason"]),
        (&json!(220), &json!(220), &json!(0), &json!("starving"))
    );
    let fields: Vec<&str> = out["job_warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["spec.trainer.min-instance", "spec.trainer.max-instance"]
    );
    let message = out["job_warnings"][0]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "2147483647 is more than the 220 pods the cluster's nodes can hold (their \
         status.allocatable.pods summed); planned as 220"
    );
    assert!(
        job["message"].as_str().unwrap().starts_with(
            "waits for its gang: min-instance 2147483647 is more than the 220 pods the \
             cluster's nodes can hold"
        ),
        "{}",
        job["message"]
    );
}

#[test]
fn a_gang_above_the_cap_waits_instead_of_running_below_its_min() {
    // 300 pods asked on 220: 128 small trainers would fit, but never the gang.
    let mut items = two_nodes();
    let mut job = training_job("j", 300, 400, Some(300));
    job["spec"]["trainer"]["resources"] = json!({"requests": {"cpu": "10m", "memory": "1Mi"}});
    items.push(job);
    let state = state_of(items);
    for policy in [Policy::Fulfillment, Policy::Goodput, Policy::Static] {
        let (current, target, min, max, reason) = planned(&state, policy);
        // Its 300 positions are brought down to the 220 the cluster holds; none is placed.
        assert_eq!(
            (current, target, min, max, reason),
            (300, 220, 220, 220, Reason::OverMax),
            "{policy:?}"
        );
        let p = plan(
            &state,
            &PlannerConfig {
                policy,
                ..PlannerConfig::default()
            },
        );
        assert!(p.jobs[0].placements.is_empty(), "{policy:?}");
    }
    // Within the cap the same gang is placed.
    let mut items = two_nodes();
    let mut job = training_job("j", 200, 400, Some(200));
    job["spec"]["trainer"]["resources"] = json!({"requests": {"cpu": "10m", "memory": "1Mi"}});
    items.push(job);
    let state = state_of(items);
    let (_, target, _, _, reason) = planned(&state, Policy::Fulfillment);
    assert_eq!((target, reason), (220, Reason::ScaleUp));
}

#[test]
fn a_gang_the_free_room_cannot_hold_is_counted() {
    // 200 one-core trainers on 128 cores: each fits alone, the gang does not.
    let mut items = two_nodes();
    items.push(training_job("j", 200, 200, None));
    let state = state_of(items);
    let config = PlannerConfig::default();
    let p = plan(&state, &config);
    let e = trainscale::planner::explain::explain_all(&state, &p, &config);
    assert_eq!(p.jobs[0].reason, Reason::Starving);
    assert!(
        e[0].message.starts_with(
            "waits for its gang: 200 trainers of 1 cpu, 1Gi memory each do not fit: the free room of \
             the nodes holds 128 of them"
        ),
        "{}",
        e[0].message
    );
}

#[test]
fn explain_of_a_min_instance_above_the_cap_says_no_node_is_enough() {
    let mut items = two_nodes();
    items.push(training_job("j", BIG, BIG, None));
    let state = state_of(items);
    let e = explain_job(&state, &PlannerConfig::default(), "ns/j").unwrap();
    assert_eq!((e.min, e.max, e.reason.as_str()), (220, 220, "starving"));
    assert_eq!(
        e.would_grow_with.as_deref(),
        Some(
            "no added node places its gang: min-instance 2147483647 is more than the 220 pods \
             the cluster's nodes can hold, and each node added raises the gang it is planned at \
             as much"
        )
    );
    // A gang within the cap gets its node.
    let mut items = two_nodes();
    items.push(training_job("j", 200, 200, None));
    let state = state_of(items);
    let e = explain_job(&state, &PlannerConfig::default(), "ns/j").unwrap();
    assert!(
        e.would_grow_with
            .as_deref()
            .is_some_and(|w| w.contains("lets its gang of 200 be placed")),
        "{:?}",
        e.would_grow_with
    );
}

/// A synced store of every kind holding `nodes`.
fn synced_store(nodes: Vec<Value>) -> Store {
    let mut store = Store::new();
    store.expect_job_kinds(&JobKind::ALL);
    store.handle(WatchEvent::Node(Event::Init));
    for n in nodes {
        store.handle(WatchEvent::Node(Event::InitApply(
            serde_json::from_value(n).unwrap(),
        )));
    }
    store.handle(WatchEvent::Node(Event::InitDone));
    for (init, done) in [
        (
            WatchEvent::Pod(Event::Init),
            WatchEvent::Pod(Event::InitDone),
        ),
        (
            WatchEvent::Job(Event::Init),
            WatchEvent::Job(Event::InitDone),
        ),
        (
            WatchEvent::PriorityClass(Event::Init),
            WatchEvent::PriorityClass(Event::InitDone),
        ),
        (
            WatchEvent::JobObject(JobKind::TrainingJob, Event::Init),
            WatchEvent::JobObject(JobKind::TrainingJob, Event::InitDone),
        ),
        (
            WatchEvent::JobObject(JobKind::PaddleJob, Event::Init),
            WatchEvent::JobObject(JobKind::PaddleJob, Event::InitDone),
        ),
        (
            WatchEvent::JobObject(JobKind::PyTorchTrainingJob, Event::Init),
            WatchEvent::JobObject(JobKind::PyTorchTrainingJob, Event::InitDone),
        ),
        (
            WatchEvent::JobObject(JobKind::PyTorchJob, Event::Init),
            WatchEvent::JobObject(JobKind::PyTorchJob, Event::InitDone),
        ),
        (
            WatchEvent::JobObject(JobKind::JobSet, Event::Init),
            WatchEvent::JobObject(JobKind::JobSet, Event::InitDone),
        ),
    ] {
        store.handle(init);
        store.handle(done);
    }
    assert!(store.synced());
    store
}

#[test]
fn the_daemon_reports_a_worker_without_requests_invalid_and_plans_nothing() {
    let mut store = synced_store(vec![node("n1", "110")]);
    let job: DynamicObject =
        serde_json::from_value(pytorch_job("noreq", 1, 1_000_000, 2, Value::Null)).unwrap();
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchJob,
        Event::Apply(job),
    ));
    let job: DynamicObject =
        serde_json::from_value(t9k_job("noreq", 1, 1_000_000, 2, Value::Null)).unwrap();
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchTrainingJob,
        Event::Apply(job),
    ));
    let work = prepare(&store, &PlannerConfig::default(), None);
    assert!(work.plan.jobs.is_empty());
    assert!(work.rescales.is_empty());
    let invalid: Vec<(JobKind, String)> = work
        .invalid
        .iter()
        .map(|j| (j.key.kind, j.problems[0].field.clone()))
        .collect();
    assert_eq!(
        invalid,
        vec![
            (JobKind::PyTorchTrainingJob, T9K_REQUESTS.to_string()),
            (JobKind::PyTorchJob, KUBEFLOW_REQUESTS.to_string()),
        ]
    );
}

#[test]
fn the_daemon_patches_no_target_above_the_cap_and_warns() {
    let mut store = synced_store(two_nodes());
    let job: DynamicObject =
        serde_json::from_value(pytorch_job("big", 1, BIG, BIG, one_cpu())).unwrap();
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchJob,
        Event::Apply(job),
    ));
    let job: DynamicObject = serde_json::from_value(t9k_job("big", 1, BIG, 2, one_cpu())).unwrap();
    store.handle(WatchEvent::JobObject(
        JobKind::PyTorchTrainingJob,
        Event::Apply(job),
    ));
    let job: DynamicObject = serde_json::from_value(training_job("big", BIG, BIG, None)).unwrap();
    store.handle(WatchEvent::JobObject(
        JobKind::TrainingJob,
        Event::Apply(job),
    ));
    let job: DynamicObject = serde_json::from_value(paddle_job("big", 1, BIG)).unwrap();
    store.handle(WatchEvent::JobObject(JobKind::PaddleJob, Event::Apply(job)));
    store.handle(WatchEvent::Job(Event::Apply(
        serde_json::from_value(trainer_job("PaddleJob", "paddlepaddle.org/v1", "big", BIG))
            .unwrap(),
    )));
    let work = prepare(&store, &PlannerConfig::default(), None);
    assert!(!work.rescales.is_empty());
    for r in &work.rescales {
        assert!(r.target <= 220, "{} to {}", r.key, r.target);
    }
    // The Kubeflow job's 2^31 - 1 replicas and the PaddleJob's trainer Job are brought down.
    let kubeflow = JobKey::of_kind(JobKind::PyTorchJob, "ml", "big");
    let paddle = JobKey::of_kind(JobKind::PaddleJob, "ns", "big");
    for key in [&kubeflow, &paddle] {
        let r = work.rescales.iter().find(|r| &r.key == key).unwrap();
        assert_eq!((r.current, r.reason), (i32::MAX, Reason::OverMax), "{key}");
    }
    let warned: Vec<(JobKind, Vec<String>)> = work
        .warned
        .iter()
        .map(|j| {
            let fields = j.problems.iter().map(|p| p.field.clone()).collect();
            (j.key.kind, fields)
        })
        .collect();
    assert_eq!(
        warned,
        vec![
            (
                JobKind::PyTorchTrainingJob,
                vec!["spec.elastic.maxReplicas".to_string()]
            ),
            (
                JobKind::PyTorchJob,
                vec![
                    "spec.elasticPolicy.maxReplicas".to_string(),
                    "spec.pytorchReplicaSpecs.Worker.replicas".to_string()
                ]
            ),
            (
                JobKind::TrainingJob,
                vec![
                    "spec.trainer.min-instance".to_string(),
                    "spec.trainer.max-instance".to_string()
                ]
            ),
            (
                JobKind::PaddleJob,
                vec![
                    "spec.trainer.max-instance".to_string(),
                    "spec.parallelism of its trainer Job".to_string()
                ]
            ),
        ]
    );
    // Reported once: marked, nothing is left to warn about until something changes.
    for job in &work.warned {
        store.mark_warned(job);
    }
    assert!(store.unreported_warnings().is_empty());
}
