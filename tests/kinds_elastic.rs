//! The elastic batch/v1 Job and the elastic JobSet: each adapter reads min, max, the per-worker
//! request, priority and size from the example manifests (007, 008), names the field of every
//! error, says why a job is left alone; their pods are attributed once the job object says so;
//! the store routes the Job watch (trainer Job, elastic Job, ordinary Job); the actuator writes
//! one guarded patch of the counts (a merge patch of the Job, a JSON Patch of the JobSet's
//! element); a dump with both kinds and ordinary Jobs plans only the two.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::DynamicObject;
use kube::client::Body;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower_test::mock;
use trainscale::api::manifest::{Document, read_documents};
use trainscale::api::priority::PriorityClasses;
use trainscale::api::{JobKey, JobKind, JobSet, Resources, ScaleResults};
use trainscale::cluster::kinds::{
    JobAdapter, PodRule, Reading, SizeAt, check_document, ignored, registered,
};
use trainscale::cluster::{ClusterState, Role};
use trainscale::daemon::pass::prepare;
use trainscale::daemon::{Actuator, Rescale, Store, WatchEvent};
use trainscale::planner::{PlannerConfig, Reason};

#[path = "support/mock_api.rs"]
mod mock_api;

use mock_api::{MockHandle, api_status, expect, respond};

const GI: i64 = 1 << 30;
const MERGE: Option<&str> = Some("application/merge-patch+json");
const JSON_PATCH: Option<&str> = Some("application/json-patch+json");
const JOBS: &str = "/apis/batch/v1/namespaces/ml/jobs";
const JOBSETS: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ml/events";
const STAMP: &str = "2024-05-01T12:00:00Z";
const MIN: &str = "metadata.annotations[trainscale.io/min-replicas]";
const MAX: &str = "metadata.annotations[trainscale.io/max-replicas]";

fn example(file: &str) -> Value {
    read_documents(std::path::Path::new(file))
        .unwrap()
        .remove(0)
        .value
}

fn batch_example() -> Value {
    example("deploy/examples/007-batchjob-elastic.yaml")
}

fn jobset_example() -> Value {
    example("deploy/examples/008-jobset-elastic.yaml")
}

fn classes() -> PriorityClasses {
    PriorityClasses::from([("research".to_string(), 100)])
}

fn planned(reading: Reading) -> trainscale::cluster::kinds::ReadJob {
    match reading {
        Reading::Planned(read) => read,
        Reading::LeftAlone(why) => panic!("left alone: {why:?}"),
    }
}

fn job(value: Value) -> Job {
    serde_json::from_value(value).unwrap()
}

fn jobset(value: Value) -> JobSet {
    serde_json::from_value(value).unwrap()
}

fn edited(base: &Value, patch: impl Fn(&mut Value)) -> Value {
    let mut v = base.clone();
    patch(&mut v);
    v
}

fn remove(v: &mut Value, key: &str) {
    v.as_object_mut().unwrap().remove(key);
}

#[test]
fn the_elastic_job_example_reads_min_max_request_priority_size_and_speedup() {
    let read = planned(job(batch_example()).read(&classes()).unwrap());
    assert_eq!(
        read.key,
        JobKey::of_kind(JobKind::BatchJob, "ml", "elastic-resnet")
    );
    let info = read.info;
    assert_eq!((info.min, info.max), (2, 8));
    assert_eq!(info.trainer, Resources::new(8000, 32 * GI, 1));
    assert_eq!(info.priority, 100);
    assert_eq!(info.priority_class.as_deref(), Some("research"));
    assert_eq!(info.stored_parallelism, Some(2));
    assert!(info.speedup.is_some());
    assert!(read.warnings.is_empty(), "{:?}", read.warnings);
    let j = job(batch_example());
    assert_eq!(
        j.size_at(),
        Some(SizeAt {
            spec: "/spec".into(),
            indexed: true,
            element: None
        })
    );
    assert_eq!(j.pod_rule(), Some(PodRule::Trainers));
}

#[test]
fn elastic_job_errors_name_the_annotation_or_field() {
    let base = batch_example();
    let errors = |patch: &dyn Fn(&mut Value)| {
        job(edited(&base, patch))
            .read(&classes())
            .unwrap_err()
            .into_iter()
            .map(|e| (e.object, e.field))
            .collect::<Vec<_>>()
    };
    let object = "Job ml/elastic-resnet".to_string();
    assert_eq!(
        errors(&|v| remove(
            &mut v["metadata"]["annotations"],
            "trainscale.io/max-replicas"
        )),
        vec![(object.clone(), MAX.to_string())]
    );
    assert_eq!(
        errors(&|v| v["metadata"]["annotations"]["trainscale.io/min-replicas"] = json!("two")),
        vec![(object.clone(), MIN.to_string())]
    );
    assert_eq!(
        errors(&|v| v["metadata"]["annotations"]["trainscale.io/min-replicas"] = json!("9")),
        vec![(object.clone(), MIN.to_string())]
    );
    // An Indexed Job at 0 completions completes at once.
    assert_eq!(
        errors(&|v| v["metadata"]["annotations"]["trainscale.io/min-replicas"] = json!("0")),
        vec![(object.clone(), MIN.to_string())]
    );
    assert_eq!(
        errors(&|v| v["spec"]["completions"] = json!(4)),
        vec![(object.clone(), "spec.completions".to_string())]
    );
    assert_eq!(
        errors(&|v| v["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({})),
        vec![(
            object.clone(),
            "spec.template.spec.containers[0].resources.requests".to_string()
        )]
    );
    assert_eq!(
        errors(
            &|v| v["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
                json!("lots")
        ),
        vec![(
            object,
            "spec.template.spec.containers[0].resources.requests.cpu".to_string()
        )]
    );
    // NonIndexed: parallelism alone is the size; min 0 and other completions are fine.
    let non_indexed = job(edited(&base, |v| {
        remove(&mut v["spec"], "completionMode");
        remove(&mut v["spec"], "completions");
        v["metadata"]["annotations"]["trainscale.io/min-replicas"] = json!("0");
    }));
    assert_eq!(planned(non_indexed.read(&classes()).unwrap()).info.min, 0);
    assert!(!non_indexed.size_at().unwrap().indexed);
}

#[test]
fn elastic_job_left_alone_suspended_kueue_jobset_child_and_finished() {
    let base = batch_example();
    let read = |patch: &dyn Fn(&mut Value)| job(edited(&base, patch)).read(&classes());
    let suspended = read(&|v| v["spec"]["suspend"] = json!(true)).unwrap();
    assert!(
        matches!(&suspended, Reading::LeftAlone(l) if l.field == "spec.suspend"
            && l.why == "suspended: holds no room" && !l.announce),
        "{suspended:?}"
    );
    let queued = read(&|v| {
        v["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team-a"});
    })
    .unwrap();
    assert!(
        matches!(&queued, Reading::LeftAlone(l) if l.announce
            && l.field == "metadata.annotations[kueue.x-k8s.io/elastic-job]"),
        "{queued:?}"
    );
    // Kueue's own opt-in is honoured beside trainscale's: planned as any other Job.
    let kueue_elastic = read(&|v| {
        v["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team-a"});
        v["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] = json!("true");
    })
    .unwrap();
    assert_eq!(planned(kueue_elastic).info.max, 8);
    let child = read(&|v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet", "name": "js", "uid": "u", "controller": true}]);
    })
    .unwrap();
    assert!(
        matches!(&child, Reading::LeftAlone(l) if l.announce && l.why.contains("JobSet js")),
        "{child:?}"
    );
    let done =
        read(&|v| v["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}]}));
    assert!(planned(done.unwrap()).info.phase.is_finished());
    let failed =
        read(&|v| v["status"] = json!({"conditions": [{"type": "Failed", "status": "True"}]}));
    assert!(planned(failed.unwrap()).info.phase.is_finished());
}

/// A trainer Job of trainscale's operator (controlled by a TrainingJob).
fn trainer_job(annotated: bool) -> Value {
    let mut v = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "mnist-trainer", "namespace": "ml", "resourceVersion": "4",
            "labels": {"trainscale.io/job": "mnist"},
            "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                                 "name": "mnist", "uid": "uid-mnist", "controller": true}]},
        "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                 "template": {"metadata": {"labels": {"paddle-job": "mnist"}},
                              "spec": {"containers": [{"name": "c", "image": "i",
                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}});
    if annotated {
        v["metadata"]["annotations"] = json!({"trainscale.io/min-replicas": "1",
                                              "trainscale.io/max-replicas": "4"});
    }
    v
}

/// An ordinary Job: no annotations.
fn ordinary_job() -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "backup", "namespace": "ml", "resourceVersion": "5"},
        "spec": {"parallelism": 1,
                 "template": {"spec": {"containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}}})
}

#[test]
fn a_job_is_an_elastic_job_only_once_it_opts_in_and_never_when_a_trainer_job() {
    let decode = registered(JobKind::BatchJob).decode;
    assert!(decode(&batch_example()).unwrap().is_some());
    assert!(decode(&ordinary_job()).unwrap().is_none());
    // The trainer view wins, annotated or not.
    assert!(decode(&trainer_job(true)).unwrap().is_none());
    assert!(
        trainscale::cluster::objects::read_trainer_job(&job(trainer_job(true))).is_some(),
        "still the TrainingJob's trainer Job"
    );
    // An ordinary Job that does not even deserialize is still no job.
    let mut garbled = ordinary_job();
    garbled["spec"]["parallelism"] = json!("many");
    assert!(decode(&garbled).unwrap().is_none());
    let mut bad = batch_example();
    bad["spec"]["parallelism"] = json!("many");
    assert_eq!(decode(&bad).unwrap_err().field, "spec.parallelism");
    // A JobSet's child Job is no trainer Job.
    let mut child = ordinary_job();
    child["metadata"]["ownerReferences"] = json!([{"apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet", "name": "js", "uid": "u", "controller": true}]);
    assert!(trainscale::cluster::objects::read_trainer_job(&job(child)).is_none());
}

#[test]
fn the_jobset_example_reads_its_elastic_replicated_job() {
    let js = jobset(jobset_example());
    let read = planned(js.read(&classes()).unwrap());
    assert_eq!(
        read.key,
        JobKey::of_kind(JobKind::JobSet, "ml", "elastic-llm")
    );
    let info = read.info;
    assert_eq!((info.min, info.max), (1, 4));
    assert_eq!(info.trainer, Resources::new(8000, 32 * GI, 1));
    assert_eq!(info.priority, 100);
    assert_eq!(info.stored_parallelism, Some(2));
    assert!(read.warnings.is_empty(), "{:?}", read.warnings);
    assert_eq!(
        js.size_at(),
        Some(SizeAt {
            spec: "/spec/replicatedJobs/1/template/spec".into(),
            indexed: true,
            element: Some(("/spec/replicatedJobs/1/name".into(), "workers".into())),
        })
    );
    assert_eq!(js.pod_rule(), Some(PodRule::Group("workers".into())));
    // One replicated Job needs no naming annotation.
    let single = jobset(edited(&jobset_example(), |v| {
        let workers = v["spec"]["replicatedJobs"][1].clone();
        v["spec"]["replicatedJobs"] = json!([workers]);
        remove(
            &mut v["metadata"]["annotations"],
            "trainscale.io/replicated-job",
        );
    }));
    assert_eq!(planned(single.read(&classes()).unwrap()).info.max, 4);
}

#[test]
fn jobset_errors_name_the_annotation_or_field() {
    let base = jobset_example();
    let errors = |patch: &dyn Fn(&mut Value)| {
        jobset(edited(&base, patch))
            .read(&classes())
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect::<Vec<_>>()
    };
    let named = "metadata.annotations[trainscale.io/replicated-job]";
    assert_eq!(
        errors(
            &|v| v["metadata"]["annotations"]["trainscale.io/replicated-job"] = json!("trainers")
        ),
        vec![named]
    );
    assert_eq!(
        errors(&|v| remove(
            &mut v["metadata"]["annotations"],
            "trainscale.io/replicated-job"
        )),
        vec![named]
    );
    assert_eq!(
        errors(&|v| v["spec"]["replicatedJobs"][1]["replicas"] = json!(2)),
        vec!["spec.replicatedJobs[1].replicas"]
    );
    // No completion mode is Indexed (JobSet's webhook defaults it); NonIndexed is refused.
    let defaulted = jobset(edited(&base, |v: &mut Value| {
        remove(
            &mut v["spec"]["replicatedJobs"][1]["template"]["spec"],
            "completionMode",
        )
    }));
    assert_eq!(planned(defaulted.read(&classes()).unwrap()).info.max, 4);
    assert_eq!(
        errors(
            &|v| v["spec"]["replicatedJobs"][1]["template"]["spec"]["completionMode"] =
                json!("NonIndexed")
        ),
        vec!["spec.replicatedJobs[1].template.spec.completionMode"]
    );
    assert_eq!(
        errors(&|v| v["spec"]["replicatedJobs"][1]["template"]["spec"]["completions"] = json!(3)),
        vec!["spec.replicatedJobs[1].template.spec.completions"]
    );
    assert_eq!(
        errors(&|v| v["metadata"]["annotations"]["trainscale.io/min-replicas"] = json!("0")),
        vec![MIN]
    );
    assert_eq!(
        errors(&|v| remove(
            &mut v["metadata"]["annotations"],
            "trainscale.io/min-replicas"
        )),
        vec![MIN]
    );
    assert_eq!(
        errors(
            &|v| v["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"]
                [0]["resources"]["requests"]["memory"] = json!("lots")
        ),
        vec![
            "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.requests.memory"
        ]
    );
}

#[test]
fn jobset_left_alone_not_opted_in_owned_by_a_train_job_suspended_and_finished() {
    let base = jobset_example();
    let read = |patch: &dyn Fn(&mut Value)| jobset(edited(&base, patch)).read(&classes());
    let plain = read(&|v| remove(&mut v["metadata"], "annotations")).unwrap();
    assert!(
        matches!(&plain, Reading::LeftAlone(l) if !l.announce && l.field == MIN),
        "{plain:?}"
    );
    let trainer = edited(&base, |v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "name": "llama", "uid": "u", "controller": true}]);
    });
    match jobset(trainer.clone()).read(&classes()).unwrap() {
        Reading::LeftAlone(l) => {
            assert!(l.announce);
            assert_eq!(l.field, "metadata.ownerReferences");
            assert_eq!(
                l.why,
                "owned by TrainJob llama: Kubeflow Trainer rewrites it"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(jobset(trainer).pod_rule(), None);
    let suspended = read(&|v| v["spec"]["suspend"] = json!(true)).unwrap();
    assert!(
        matches!(&suspended, Reading::LeftAlone(l) if l.field == "spec.suspend" && !l.announce)
    );
    let done = read(&|v| {
        v["status"] = json!({"conditions": [{"type": "Completed", "status": "True",
            "reason": "AllJobsCompleted", "message": "", "lastTransitionTime": STAMP}]})
    });
    assert!(planned(done.unwrap()).info.phase.is_finished());
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8,
                                      "pods": "110"}}})
}

/// A running pod on `n1` with `labels` and a controller owner Job.
fn pod(name: &str, labels: Value, owner_job: Option<&str>) -> Value {
    let mut meta = json!({"name": name, "namespace": "ml", "labels": labels,
                          "creationTimestamp": "2024-01-01T00:00:00Z"});
    if let Some(owner) = owner_job {
        meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
            "name": owner, "uid": format!("uid-{owner}"), "controller": true}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"nodeName": "n1", "containers": [{"name": "c",
               "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
           "status": {"phase": "Running"}})
}

fn jobset_pod(name: &str, rjob: &str) -> Value {
    pod(
        name,
        json!({"jobset.sigs.k8s.io/jobset-name": "elastic-llm",
               "jobset.sigs.k8s.io/replicatedjob-name": rjob,
               "batch.kubernetes.io/job-name": format!("elastic-llm-{rjob}-0")}),
        Some(&format!("elastic-llm-{rjob}-0")),
    )
}

/// Every pod of the dump, nodes first: the elastic Job's, the JobSet's worker and launcher, an
/// ordinary Job's and a trainer Job's.
fn pods() -> Vec<Value> {
    vec![
        pod(
            "elastic-resnet-0",
            json!({"batch.kubernetes.io/job-name": "elastic-resnet"}),
            Some("elastic-resnet"),
        ),
        pod(
            "elastic-resnet-1",
            json!({"batch.kubernetes.io/job-name": "elastic-resnet"}),
            Some("elastic-resnet"),
        ),
        jobset_pod("elastic-llm-workers-0-0", "workers"),
        jobset_pod("elastic-llm-workers-0-1", "workers"),
        jobset_pod("elastic-llm-launcher-0-0", "launcher"),
        pod(
            "backup-x",
            json!({"batch.kubernetes.io/job-name": "backup"}),
            Some("backup"),
        ),
        pod(
            "mnist-trainer-0",
            json!({"paddle-job": "mnist"}),
            Some("mnist-trainer"),
        ),
    ]
}

fn state_of(docs: Vec<Value>) -> ClusterState {
    let mut state = ClusterState::new();
    let mut warnings = Vec::new();
    for value in docs {
        let doc = Document {
            value,
            origin: "test".into(),
        };
        state.apply_document(&doc, &mut warnings);
    }
    assert!(warnings.is_empty(), "{warnings:?}");
    state
}

fn owner(state: &ClusterState, pod: &str) -> Option<(JobKind, String, Role)> {
    state
        .pod("ml", pod)
        .unwrap()
        .owner
        .as_ref()
        .map(|(k, r)| (k.kind, k.name.to_string(), *r))
}

#[test]
fn pods_are_the_jobs_once_the_job_object_says_so_in_either_order() {
    let jobs = vec![
        batch_example(),
        jobset_example(),
        ordinary_job(),
        trainer_job(true),
    ];
    let mut pods_first = vec![node("n1")];
    pods_first.extend(pods());
    pods_first.extend(jobs.clone());
    let mut jobs_first = vec![node("n1")];
    jobs_first.extend(jobs);
    jobs_first.extend(pods());
    for docs in [pods_first, jobs_first] {
        let state = state_of(docs);
        let elastic = Some((JobKind::BatchJob, "elastic-resnet".into(), Role::Trainer));
        assert_eq!(owner(&state, "elastic-resnet-0"), elastic);
        assert_eq!(
            owner(&state, "elastic-llm-workers-0-1"),
            Some((JobKind::JobSet, "elastic-llm".into(), Role::Trainer))
        );
        assert_eq!(
            owner(&state, "elastic-llm-launcher-0-0"),
            Some((JobKind::JobSet, "elastic-llm".into(), Role::Master))
        );
        assert_eq!(owner(&state, "backup-x"), None, "an ordinary Job's pod");
        assert_eq!(
            owner(&state, "mnist-trainer-0"),
            Some((JobKind::TrainingJob, "mnist".into(), Role::Trainer)),
            "a trainer Job's pod keeps its TrainingJob"
        );
        let key = JobKey::of_kind(JobKind::BatchJob, "ml", "elastic-resnet");
        assert_eq!(state.job(&key).unwrap().trainers.bound, 2);
        let js = JobKey::of_kind(JobKind::JobSet, "ml", "elastic-llm");
        assert_eq!(state.job(&js).unwrap().trainers.bound, 2);
        // No job of the ordinary Job, nor of the annotated trainer Job.
        assert!(
            state
                .job(&JobKey::of_kind(JobKind::BatchJob, "ml", "backup"))
                .is_none()
        );
        assert!(
            state
                .job(&JobKey::of_kind(JobKind::BatchJob, "ml", "mnist-trainer"))
                .is_none()
        );
    }
    // The job object gone: its pods are nobody's again.
    let mut state = state_of(
        std::iter::once(node("n1"))
            .chain(pods())
            .chain([batch_example(), jobset_example()])
            .collect(),
    );
    let key = JobKey::of_kind(JobKind::BatchJob, "ml", "elastic-resnet");
    state.delete_job(&key);
    assert_eq!(owner(&state, "elastic-resnet-0"), None);
    assert!(state.job(&key).is_none());
    // A JobSet that stops opting in gives its pods back too.
    let mut plain = jobset_example();
    remove(&mut plain["metadata"], "annotations");
    let doc = Document {
        value: plain,
        origin: "test".into(),
    };
    state.apply_document(&doc, &mut Vec::new());
    assert_eq!(owner(&state, "elastic-llm-workers-0-0"), None);
}

fn dynamic(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn init<K>(store: &mut Store, wrap: impl Fn(Event<K>) -> WatchEvent, items: Vec<K>) {
    store.handle(wrap(Event::Init));
    for item in items {
        store.handle(wrap(Event::InitApply(item)));
    }
    store.handle(wrap(Event::InitDone));
}

/// A synced store sizing every kind, with one node, the pods and the Jobs of `jobs`.
fn store_with(jobs: Vec<Value>, kinds: &[JobKind]) -> Store {
    let mut store = Store::new();
    store.expect_job_kinds(kinds);
    init(
        &mut store,
        WatchEvent::Node,
        vec![serde_json::from_value(node("n1")).unwrap()],
    );
    init(&mut store, WatchEvent::PriorityClass, Vec::new());
    init(
        &mut store,
        WatchEvent::Pod,
        pods()
            .into_iter()
            .map(|p| serde_json::from_value(p).unwrap())
            .collect(),
    );
    init(
        &mut store,
        WatchEvent::Job,
        jobs.into_iter().map(job).collect(),
    );
    for kind in kinds.iter().filter(|k| k.has_own_watch()) {
        let items = if *kind == JobKind::JobSet {
            let mut js = jobset_example();
            js["metadata"]["resourceVersion"] = json!("30");
            vec![dynamic(js)]
        } else {
            Vec::new()
        };
        init(&mut store, |e| WatchEvent::JobObject(*kind, e), items);
    }
    assert!(store.synced());
    store
}

fn with_version(mut v: Value, rv: &str) -> Value {
    v["metadata"]["resourceVersion"] = json!(rv);
    v
}

#[test]
fn the_job_watch_routes_trainer_elastic_and_ordinary_jobs() {
    let mut store = store_with(
        vec![
            with_version(batch_example(), "20"),
            ordinary_job(),
            trainer_job(true),
        ],
        &JobKind::ALL,
    );
    let elastic = JobKey::of_kind(JobKind::BatchJob, "ml", "elastic-resnet");
    let meta = store.training_job(&elastic).unwrap();
    assert_eq!(meta.resource_version.as_deref(), Some("20"));
    assert_eq!(
        meta.size_at.as_ref().map(|a| a.spec.as_str()),
        Some("/spec")
    );
    assert!(store.state().job(&elastic).unwrap().info.is_some());
    assert!(
        store
            .training_job(&JobKey::of_kind(JobKind::BatchJob, "ml", "backup"))
            .is_none()
    );
    let mnist = JobKey::new("ml", "mnist");
    assert!(store.trainer_job(&mnist).is_some(), "the trainer view wins");
    assert!(
        store
            .training_job(&JobKey::of_kind(JobKind::BatchJob, "ml", "mnist-trainer"))
            .is_none()
    );
    assert_eq!(store.trainer_pods(&elastic).count(), 2);

    // The pass resizes both kinds, each with where its spec is.
    let work = prepare(&store, &PlannerConfig::default(), None);
    let of = |kind: JobKind| work.rescales.iter().find(|r| r.key.kind == kind).cloned();
    let batch = of(JobKind::BatchJob).expect("the elastic Job is resized");
    assert_eq!(batch.resource_version.as_deref(), Some("20"));
    assert_eq!(batch.current, 2);
    assert!(batch.size_at.as_ref().is_some_and(|a| a.indexed));
    let js = of(JobKind::JobSet).expect("the JobSet is resized");
    assert_eq!(js.resource_version.as_deref(), Some("30"));
    assert!(js.size_at.as_ref().is_some_and(|a| a.element.is_some()));

    // Annotations removed: no longer a job; its pods are nobody's.
    let mut plain = with_version(batch_example(), "21");
    remove(&mut plain["metadata"], "annotations");
    store.handle(WatchEvent::Job(Event::Apply(job(plain.clone()))));
    assert!(store.training_job(&elastic).is_none());
    assert!(store.state().job(&elastic).is_none());
    assert_eq!(store.trainer_pods(&elastic).count(), 0);
    // Annotated again, then not re-listed by a restarted watch: forgotten at InitDone.
    store.handle(WatchEvent::Job(Event::Apply(job(with_version(
        batch_example(),
        "22",
    )))));
    assert!(store.training_job(&elastic).is_some());
    store.handle(WatchEvent::Job(Event::Init));
    store.handle(WatchEvent::Job(Event::InitApply(job(trainer_job(true)))));
    assert!(store.training_job(&elastic).is_some(), "until InitDone");
    store.handle(WatchEvent::Job(Event::InitDone));
    assert!(store.training_job(&elastic).is_none());
    assert!(
        store.trainer_job(&mnist).is_some(),
        "the trainer Job was re-listed"
    );
    assert_eq!(store.restarts(), 1);
    // Deleted.
    store.handle(WatchEvent::Job(Event::Apply(job(with_version(
        batch_example(),
        "23",
    )))));
    store.handle(WatchEvent::Job(Event::Delete(job(batch_example()))));
    assert!(store.training_job(&elastic).is_none());
    assert!(store.state().job(&elastic).is_none());
    let _ = plain;
}

#[test]
fn without_the_job_kind_opted_in_jobs_are_not_sized() {
    let store = store_with(
        vec![batch_example()],
        &[JobKind::TrainingJob, JobKind::PaddleJob],
    );
    let elastic = JobKey::of_kind(JobKind::BatchJob, "ml", "elastic-resnet");
    assert!(store.training_job(&elastic).is_none());
    assert!(store.state().job(&elastic).is_none());
}

#[test]
fn a_left_alone_elastic_job_is_announced_once() {
    let mut queued = with_version(batch_example(), "40");
    queued["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "q"});
    let mut store = store_with(vec![queued], &[JobKind::BatchJob]);
    let work = prepare(&store, &PlannerConfig::default(), None);
    assert_eq!(work.left_alone.len(), 1);
    let key = JobKey::of_kind(JobKind::BatchJob, "ml", "elastic-resnet");
    assert_eq!(work.left_alone[0].key, key);
    store.mark_reported(&key, "40");
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

fn rescale(kind: JobKind, name: &str, size_at: SizeAt, current: i32, target: i32) -> Rescale {
    Rescale {
        key: JobKey::of_kind(kind, "ml", name),
        uid: Some(format!("uid-{name}")),
        resource_version: Some("7".to_string()),
        trainer_job: None,
        size_at: Some(size_at),
        current,
        target,
        reason: Reason::ScaleUp,
    }
}

fn annotation(from: i32, to: i32) -> String {
    format!(r#"{{"time":"{STAMP}","from":{from},"to":{to},"reason":"scale_up"}}"#)
}

async fn no_more_requests(handle: &mut MockHandle) {
    let next = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
    assert!(
        !matches!(next, Ok(Some(_))),
        "an unexpected further request"
    );
}

fn own_spec(indexed: bool) -> SizeAt {
    SizeAt {
        spec: "/spec".into(),
        indexed,
        element: None,
    }
}

#[tokio::test]
async fn an_indexed_elastic_job_is_one_merge_patch_of_parallelism_and_completions() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBS}/elastic-resnet");
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(ct.as_deref(), MERGE);
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7",
                                "annotations": {"trainscale.io/last-scale": annotation(2, 5)}},
                   "spec": {"parallelism": 5, "completions": 5}})
        );
        let mut updated = batch_example();
        updated["spec"]["parallelism"] = json!(5);
        updated["spec"]["completions"] = json!(5);
        respond(send, StatusCode::OK, updated);
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["regarding"]["kind"], "Job");
        assert_eq!(event["regarding"]["apiVersion"], "batch/v1");
        assert_eq!(event["reason"], "Rescaled");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::BatchJob,
            "elastic-resnet",
            own_spec(true),
            2,
            5,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::True, "{outcome:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn a_non_indexed_job_gets_parallelism_only_and_a_size_written_meanwhile_wins() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBS}/elastic-resnet");
        let (_, _, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(body["spec"], json!({"parallelism": 4}));
        respond(
            send,
            StatusCode::CONFLICT,
            api_status(409, "Conflict", "changed"),
        );
        // Someone else set parallelism 3 meanwhile: the new current, not overwritten.
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        let mut fresh = batch_example();
        remove(&mut fresh["spec"], "completionMode");
        fresh["spec"]["parallelism"] = json!(3);
        fresh["metadata"]["resourceVersion"] = json!("9");
        respond(send, StatusCode::OK, fresh);
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["reason"], "RescaleFailed");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::BatchJob,
            "elastic-resnet",
            own_spec(false),
            2,
            4,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::False);
    assert!(
        outcome.reason.contains("spec.parallelism changed to 3"),
        "{}",
        outcome.reason
    );
    server.await.unwrap();
}

#[tokio::test]
async fn an_indexed_job_is_never_written_zero_completions() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["reason"], "RescaleFailed");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::BatchJob,
            "elastic-resnet",
            own_spec(true),
            2,
            0,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::False);
    server.await.unwrap();
}

fn workers_at(i: usize) -> SizeAt {
    SizeAt {
        spec: format!("/spec/replicatedJobs/{i}/template/spec"),
        indexed: true,
        element: Some((format!("/spec/replicatedJobs/{i}/name"), "workers".into())),
    }
}

fn jobset_patch(rv: &str, i: usize, target: i32) -> Value {
    json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": format!("/spec/replicatedJobs/{i}/name"), "value": "workers"},
        {"op": "replace", "path": format!("/spec/replicatedJobs/{i}/template/spec/parallelism"),
         "value": target},
        {"op": "replace", "path": format!("/spec/replicatedJobs/{i}/template/spec/completions"),
         "value": target},
        {"op": "add", "path": "/metadata/annotations/trainscale.io~1last-scale",
         "value": annotation(2, target)},
    ])
}

#[tokio::test]
async fn a_jobset_is_one_json_patch_of_its_element_retried_where_it_moved() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBSETS}/elastic-llm");
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(ct.as_deref(), JSON_PATCH);
        assert_eq!(body, jobset_patch("7", 1, 4));
        // A `test` failed: the object changed.
        respond(
            send,
            StatusCode::UNPROCESSABLE_ENTITY,
            api_status(422, "Invalid", "the test operation failed"),
        );
        // Someone put a replicated Job first; the workers' size is still the one planned on.
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        let mut fresh = jobset_example();
        fresh["metadata"]["resourceVersion"] = json!("12");
        let workers = fresh["spec"]["replicatedJobs"][1].clone();
        let launcher = fresh["spec"]["replicatedJobs"][0].clone();
        let mut sidecar = launcher.clone();
        sidecar["name"] = json!("metrics");
        fresh["spec"]["replicatedJobs"] = json!([sidecar, launcher, workers]);
        respond(send, StatusCode::OK, fresh.clone());
        let (_, ct, body, send) = expect(&mut handle, Method::PATCH, &path).await;
        assert_eq!(ct.as_deref(), JSON_PATCH);
        assert_eq!(body, jobset_patch("12", 2, 4));
        fresh["spec"]["replicatedJobs"][2]["template"]["spec"]["parallelism"] = json!(4);
        fresh["spec"]["replicatedJobs"][2]["template"]["spec"]["completions"] = json!(4);
        fresh["metadata"]["resourceVersion"] = json!("13");
        respond(send, StatusCode::OK, fresh);
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["regarding"]["kind"], "JobSet");
        assert_eq!(event["reason"], "Rescaled");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::JobSet,
            "elastic-llm",
            workers_at(1),
            2,
            4,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::True, "{outcome:?}");
    assert_eq!(outcome.object_version.as_deref(), Some("13"));
    server.await.unwrap();
}

#[tokio::test]
async fn a_jobset_patch_the_server_refuses_unchanged_is_not_retried() {
    let (actuator, mut handle) = actuator();
    let server = tokio::spawn(async move {
        let path = format!("{JOBSETS}/elastic-llm");
        let (_, _, _, send) = expect(&mut handle, Method::PATCH, &path).await;
        respond(
            send,
            StatusCode::UNPROCESSABLE_ENTITY,
            api_status(422, "Invalid", "completions must be equal to parallelism"),
        );
        let (_, _, _, send) = expect(&mut handle, Method::GET, &path).await;
        respond(send, StatusCode::OK, with_version(jobset_example(), "7"));
        let (_, _, event, send) = expect(&mut handle, Method::POST, EVENTS).await;
        assert_eq!(event["reason"], "RescaleFailed");
        respond(send, StatusCode::CREATED, event.clone());
        no_more_requests(&mut handle).await;
    });
    let outcome = actuator
        .rescale(&rescale(
            JobKind::JobSet,
            "elastic-llm",
            workers_at(1),
            2,
            3,
        ))
        .await;
    assert_eq!(outcome.result, ScaleResults::False);
    assert!(
        outcome.reason.contains("completions must be equal"),
        "{}",
        outcome.reason
    );
    server.await.unwrap();
}

#[test]
fn a_dump_with_both_kinds_and_ordinary_jobs_plans_only_the_two() {
    let mut docs = vec![node("n1")];
    docs.extend(pods());
    docs.extend([
        batch_example(),
        jobset_example(),
        ordinary_job(),
        trainer_job(false),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump.json");
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string(),
    )
    .unwrap();
    let (output, _) = trainscale::commands::plan::plan_snapshot(
        &path,
        &PlannerConfig::default(),
        trainscale::commands::OutputFormat::Json,
    )
    .unwrap();
    let plan: Value = serde_json::from_str(&output).unwrap();
    let mut planned: Vec<(String, String)> = plan["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["kind"].as_str().unwrap_or_default().to_string(),
                j["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    planned.sort();
    assert_eq!(
        planned,
        vec![
            ("Job".to_string(), "elastic-resnet".to_string()),
            ("JobSet".to_string(), "elastic-llm".to_string()),
        ],
        "{output}"
    );
}

#[test]
fn validate_accepts_both_examples_and_passes_over_ordinary_jobs() {
    for file in [
        "deploy/examples/007-batchjob-elastic.yaml",
        "deploy/examples/008-jobset-elastic.yaml",
    ] {
        let docs = read_documents(std::path::Path::new(file)).unwrap();
        let kind = JobKind::of(
            docs[0].kind(),
            docs[0].value["apiVersion"].as_str().unwrap(),
        )
        .unwrap();
        let report = check_document(&docs[0], kind, &classes());
        assert!(report.errors.is_empty(), "{file}: {:?}", report.errors);
        assert!(report.warnings.is_empty(), "{file}: {:?}", report.warnings);
    }
    let doc = |value: Value| Document {
        value,
        origin: "test".into(),
    };
    assert!(ignored(&doc(ordinary_job())));
    assert!(ignored(&doc(trainer_job(true))));
    assert!(!ignored(&doc(batch_example())));
    assert!(!ignored(&doc(jobset_example())));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.json");
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List",
               "items": [ordinary_job(), batch_example()]})
        .to_string(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["validate", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("ok: Job ml/elastic-resnet"), "{stdout}");
    assert!(!stdout.contains("backup"), "{stdout}");
    assert!(stdout.contains("1 object(s) checked"), "{stdout}");
}

#[test]
fn kinds_flag_names_the_two_kinds() {
    use trainscale::commands::flags::job_kind;
    assert_eq!(job_kind("job"), Ok(JobKind::BatchJob));
    assert_eq!(job_kind("JobSet"), Ok(JobKind::JobSet));
}
