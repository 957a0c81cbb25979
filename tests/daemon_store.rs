//! The watch path: events into the store, relists, trainer Jobs, invalid jobs.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::json;
use trainscale::api::JobKey;
use trainscale::api::JobKind;
use trainscale::daemon::pass::prepare;
use trainscale::daemon::scheduling::Settings;
use trainscale::daemon::{Store, WatchEvent};
use trainscale::planner::PlannerConfig;

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}))
    .unwrap()
}

fn pod(name: &str, node: Option<&str>, job: &str, created: &str) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "ml", "resourceVersion": "1",
        "creationTimestamp": created, "labels": {"paddle-job": job}}, "spec": spec,
        "status": {"phase": if node.is_some() {"Running"} else {"Pending"}}}),
    )
    .unwrap()
}

fn trainer_job(name: &str, job: &str, parallelism: i32) -> Job {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ml", "resourceVersion": "4",
            "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                                 "name": job, "uid": format!("uid-{job}"), "controller": true}]},
        "spec": {"parallelism": parallelism, "completionMode": "Indexed",
                 "template": {"metadata": {"labels": {"paddle-job": job}}, "spec": {"containers": []}}}}))
    .unwrap()
}

fn tj(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn init<K>(items: Vec<K>, wrap: fn(Event<K>) -> WatchEvent, store: &mut Store) {
    store.handle(wrap(Event::Init));
    for item in items {
        store.handle(wrap(Event::InitApply(item)));
    }
    store.handle(wrap(Event::InitDone));
}

fn synced_store() -> Store {
    let mut store = Store::new();
    init(vec![node("n1"), node("n2")], WatchEvent::Node, &mut store);
    init(Vec::new(), WatchEvent::PriorityClass, &mut store);
    init(
        Vec::new(),
        |e| WatchEvent::JobObject(JobKind::PaddleJob, e),
        &mut store,
    );
    init(
        vec![
            pod("t-a", Some("n1"), "mnist", "2024-01-01T00:00:00Z"),
            pod("t-b", Some("n1"), "mnist", "2024-01-02T00:00:00Z"),
            pod("t-c", Some("n2"), "mnist", "2024-01-03T00:00:00Z"),
            pod("t-pending", None, "mnist", "2024-01-04T00:00:00Z"),
        ],
        WatchEvent::Pod,
        &mut store,
    );
    init(
        vec![trainer_job("mnist-trainer", "mnist", 4)],
        WatchEvent::Job,
        &mut store,
    );
    store
}

#[test]
fn ready_only_after_every_kind_listed() {
    let mut store = synced_store();
    assert!(!store.synced());
    init(
        Vec::new(),
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    assert!(store.synced());
    assert!(!store.relisting());
}

#[test]
fn trainer_job_is_indexed_by_training_job() {
    let store = synced_store();
    let key = JobKey::new("ml", "mnist");
    let r = store.trainer_job(&key).unwrap();
    assert_eq!(r.name, "mnist-trainer");
    assert!(r.indexed);
    assert_eq!(r.resource_version.as_deref(), Some("4"));
    assert_eq!(store.state().job(&key).unwrap().current(), 4);
    assert_eq!(store.trainer_pods(&key).count(), 4);
}

#[test]
fn relist_drops_objects_not_listed_again() {
    let mut store = synced_store();
    // The pod watch restarts (410 Gone) and t-c is gone by the time of the relist.
    store.handle(WatchEvent::Pod(Event::Init));
    assert!(store.relisting());
    for p in [
        pod("t-a", Some("n1"), "mnist", "2024-01-01T00:00:00Z"),
        pod("t-b", Some("n1"), "mnist", "2024-01-02T00:00:00Z"),
        pod("t-pending", None, "mnist", "2024-01-04T00:00:00Z"),
    ] {
        store.handle(WatchEvent::Pod(Event::InitApply(p)));
    }
    // Deletions are only known at InitDone.
    assert_eq!(store.state().pod_count(), 4);
    store.handle(WatchEvent::Pod(Event::InitDone));
    assert_eq!(store.state().pod_count(), 3);
    assert!(store.state().pod("ml", "t-c").is_none());
    assert_eq!(store.trainer_pods(&JobKey::new("ml", "mnist")).count(), 3);
    assert_eq!(store.restarts(), 1);

    // Same for nodes and jobs.
    init(vec![node("n1")], WatchEvent::Node, &mut store);
    assert!(store.state().node_id_of("n2").is_none());
    init(Vec::new(), WatchEvent::Job, &mut store);
    assert!(store.trainer_job(&JobKey::new("ml", "mnist")).is_none());
}

#[test]
fn deleted_events_remove_objects() {
    let mut store = synced_store();
    store.handle(WatchEvent::Pod(Event::Delete(pod(
        "t-a",
        Some("n1"),
        "mnist",
        "2024-01-01T00:00:00Z",
    ))));
    assert!(store.state().pod("ml", "t-a").is_none());
    store.handle(WatchEvent::Job(Event::Delete(trainer_job(
        "mnist-trainer",
        "mnist",
        4,
    ))));
    assert!(store.trainer_job(&JobKey::new("ml", "mnist")).is_none());
}

#[test]
fn invalid_and_malformed_jobs_are_reported_once_per_resource_version() {
    let mut store = synced_store();
    let invalid = json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "bad", "namespace": "ml", "resourceVersion": "5", "uid": "u1"},
        "spec": {"trainer": {"min-instance": 5, "max-instance": 2}}});
    let malformed = json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "garbled", "namespace": "ml", "resourceVersion": "6"},
        "spec": {"trainer": {"max-instance": "lots"}}});
    init(
        vec![tj(invalid.clone()), tj(malformed)],
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    let reports = store.unreported_invalid();
    assert_eq!(reports.len(), 2);
    let garbled = reports.iter().find(|r| &*r.key.name == "garbled").unwrap();
    assert_eq!(garbled.problems[0].field, "spec.trainer.max-instance");
    let bad = reports.iter().find(|r| &*r.key.name == "bad").unwrap();
    assert!(
        bad.problems
            .iter()
            .any(|p| p.field == "spec.trainer.min-instance")
    );
    for r in &reports {
        store.mark_reported(&r.key, &r.resource_version);
    }
    assert!(store.unreported_invalid().is_empty());
    // A new resourceVersion that is still invalid is reported again.
    let mut edited = invalid;
    edited["metadata"]["resourceVersion"] = json!("9");
    store.handle(WatchEvent::JobObject(
        JobKind::TrainingJob,
        Event::Apply(tj(edited)),
    ));
    assert_eq!(store.unreported_invalid().len(), 1);
}

/// A TrainingJob just applied, before the operator has created its trainer Job: the plan may
/// give it trainers, but nothing is written for it until the Job exists.
#[test]
fn a_job_without_its_trainer_job_waits() {
    let mut store = synced_store();
    let fresh = json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "fresh", "namespace": "ml", "resourceVersion": "7", "uid": "u7",
                     "creationTimestamp": "2024-01-05T00:00:00Z"},
        "spec": {"fault_tolerant": true, "frame_work": {"name": "paddle", "type": "nccl2"},
                 "trainer": {"min-instance": 1, "max-instance": 2, "entrypoint": "python train.py",
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}});
    init(
        vec![tj(fresh)],
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    let key = JobKey::new("ml", "fresh");
    let work = prepare(&store, &PlannerConfig::default(), None);
    assert!(work.rescales.iter().all(|r| r.key != key));
    assert!(work.rescales.iter().all(|r| r.trainer_job.is_some()));
    assert!(
        work.plan
            .jobs
            .iter()
            .any(|j| *j.key == key && j.target > j.current),
        "the planner sizes it: {:?}",
        work.plan.jobs
    );
    assert_eq!(work.waiting, vec![key]);
}

/// PaddleJobs arrive through their own guarded watch and are keyed by kind; PriorityClasses
/// resolve priority names as they come and go; a job naming no known class is reported once per
/// resourceVersion and set of warnings; skipped jobs are counted per kind.
#[test]
fn paddle_jobs_and_priority_classes_through_the_watch() {
    use trainscale::api::JobKind;

    let mut store = synced_store();
    let paddle: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob",
        "metadata": {"name": "seed", "namespace": "ml", "resourceVersion": "7", "uid": "u7"},
        "spec": {"pserver": {"min-instance": 2, "max-instance": 2},
                 "trainer": {"min-instance": 2, "max-instance": 6,
                             "resources": {"requests": {"cpu": "200m", "memory": "200Mi"}}}}}))
    .unwrap();
    let broken: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob",
        "metadata": {"name": "broken", "namespace": "ml", "resourceVersion": "8"},
        "spec": {"trainer": {"min-instance": 3, "max-instance": 1}}}))
    .unwrap();
    store.handle(WatchEvent::JobObject(
        JobKind::PaddleJob,
        Event::Apply(paddle),
    ));
    store.handle(WatchEvent::JobObject(
        JobKind::PaddleJob,
        Event::Apply(broken),
    ));
    let high = tj(
        json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "high", "namespace": "ml", "resourceVersion": "9", "uid": "u9"},
        "spec": {"fault_tolerant": true, "annotations": {"priority": "high"},
                 "trainer": {"min-instance": 1, "max-instance": 2,
                             "resources": {"requests": {"cpu": "1"}}}}}),
    );
    store.handle(WatchEvent::JobObject(
        JobKind::TrainingJob,
        Event::Apply(high),
    ));

    let seed = JobKey::of_kind(JobKind::PaddleJob, "ml", "seed");
    let info = store.state().job(&seed).unwrap().info.clone().unwrap();
    assert_eq!((info.min, info.max), (2, 6));
    assert_eq!(
        store.training_job(&seed).unwrap().uid.as_deref(),
        Some("u7")
    );
    let skipped = store.skipped_counts();
    assert_eq!(skipped[&JobKind::PaddleJob], 1);
    assert_eq!(skipped[&JobKind::TrainingJob], 0);

    // "high" names no class yet: ordered as 0 and reported once.
    let high = JobKey::new("ml", "high");
    let priority = |store: &Store| {
        store
            .state()
            .job(&high)
            .unwrap()
            .info
            .as_ref()
            .unwrap()
            .priority
    };
    assert_eq!(priority(&store), 0);
    let warned = store.unreported_warnings();
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].problems[0].field, "spec.annotations.priority");
    store.mark_warned(&warned[0]);
    assert!(store.unreported_warnings().is_empty());

    let class: k8s_openapi::api::scheduling::v1::PriorityClass = serde_json::from_value(
        json!({"metadata": {"name": "high", "resourceVersion": "3"}, "value": 1000}),
    )
    .unwrap();
    store.handle(WatchEvent::PriorityClass(Event::Apply(class.clone())));
    assert_eq!(priority(&store), 1000);
    assert!(store.unreported_warnings().is_empty());
    store.handle(WatchEvent::PriorityClass(Event::Delete(class)));
    assert_eq!(priority(&store), 0);
    // Already reported at this resourceVersion with the same warning: not again.
    assert!(store.unreported_warnings().is_empty());
}

/// A Job that only carries the trainer label, with no ownerReference to a job object, is not a
/// trainer Job: it is never indexed, so never resized.
#[test]
fn a_labelled_job_without_an_owner_is_not_a_trainer_job() {
    let mut store = synced_store();
    let stranger: Job = serde_json::from_value(json!({
        "metadata": {"name": "imposter", "namespace": "ml", "resourceVersion": "5"},
        "spec": {"parallelism": 1,
                 "template": {"metadata": {"labels": {"paddle-job": "other"}}, "spec": {"containers": []}}}}))
    .unwrap();
    store.handle(WatchEvent::Job(Event::Apply(stranger)));
    assert!(store.trainer_job(&JobKey::new("ml", "other")).is_none());
    assert!(store.trainer_job(&JobKey::new("ml", "mnist")).is_some());
}

/// A watch that failed marks its kind re-listing at once: no pass until the fresh list is done,
/// and objects the server no longer holds are gone after it.
#[test]
fn a_failed_watch_holds_passes_until_its_fresh_list_is_done() {
    use trainscale::daemon::store::Kind;

    let mut store = synced_store();
    init(
        Vec::new(),
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    assert!(store.synced() && !store.relisting());
    store.begin_relist(Kind::Pod);
    assert!(store.relisting(), "passes wait from the error on");
    // The fresh watch lists only one of the four pods the store held.
    init(
        vec![pod("t-a", Some("n1"), "mnist", "2024-01-01T00:00:00Z")],
        WatchEvent::Pod,
        &mut store,
    );
    assert!(!store.relisting());
    assert_eq!(store.state().pod_count(), 1);
    assert_eq!(store.trainer_pods(&JobKey::new("ml", "mnist")).count(), 1);
}

/// `--namespace`: pods of other namespaces bound to a node hold its capacity (the foreign-pod
/// watch); a re-list of either pod watch never deletes the other's pods; the store is not synced
/// until the foreign pods are listed too.
#[test]
fn a_namespaced_store_counts_other_namespaces_pods_on_its_nodes() {
    use trainscale::daemon::store::Kind;

    let foreign = |name: &str, ns: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                     "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}}))
        .unwrap()
    };
    let mut store = Store::for_namespace("ml");
    init(vec![node("n1"), node("n2")], WatchEvent::Node, &mut store);
    init(
        vec![pod("t-a", Some("n1"), "mnist", "2024-01-01T00:00:00Z")],
        WatchEvent::Pod,
        &mut store,
    );
    init(Vec::new(), WatchEvent::PriorityClass, &mut store);
    init(
        Vec::new(),
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    init(
        Vec::new(),
        |e| WatchEvent::JobObject(JobKind::PaddleJob, e),
        &mut store,
    );
    init(Vec::new(), WatchEvent::Job, &mut store);
    assert!(!store.synced(), "other namespaces' pods not listed yet");
    // The emulator ignores field selectors: the foreign watch may deliver the own namespace's
    // pods too; they are the `Pod` watch's and are left alone.
    init(
        vec![foreign("web-0", "other"), foreign("t-a", "ml")],
        WatchEvent::ForeignPod,
        &mut store,
    );
    assert!(store.synced());
    let n1 = store.state().node_id_of("n1").unwrap();
    let free = |store: &Store| store.state().node(n1).unwrap().free().cpu_milli;
    assert_eq!(free(&store), 8000 - 1000 - 4000);
    assert!(store.synced_kind(Kind::ForeignPod));

    // A fresh foreign list without web-0 removes it, and only it.
    store.begin_relist(Kind::ForeignPod);
    init(Vec::new(), WatchEvent::ForeignPod, &mut store);
    assert_eq!(free(&store), 8000 - 1000);
    // A fresh own-namespace list keeps a foreign pod that is still there.
    init(
        vec![foreign("web-1", "other")],
        WatchEvent::ForeignPod,
        &mut store,
    );
    init(Vec::new(), WatchEvent::Pod, &mut store);
    assert_eq!(free(&store), 8000 - 4000);
}

/// The store keeps each job's conditions from its status (an unreadable element left out, not
/// the job); a pass decides its sizing conditions once, and not again while the decision holds
/// and the object says it; a deleted job's decision is forgotten.
#[test]
fn sizing_conditions_are_decided_once_per_decision() {
    let mut store = synced_store();
    let job = |rv: &str| {
        tj(
            json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "mnist", "namespace": "ml", "resourceVersion": rv, "uid": "u1",
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"fault_tolerant": true,
                     "trainer": {"min-instance": 1, "max-instance": 4, "entrypoint": "python train.py",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "reason": "Theirs", "message": "",
                 "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "ScalingLimited", "status": "True"}]}}),
        )
    };
    init(
        vec![job("9")],
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    let key = JobKey::new("ml", "mnist");
    let known = store.known_sizing(&key);
    assert_eq!(known.resource_version, Some("9"));
    let types: Vec<&str> = known.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready"], "the unreadable element is left out");

    let work = prepare(&store, &PlannerConfig::default(), None);
    let update = work.sizing.iter().find(|u| u.key == key).unwrap();
    assert!(update.write);
    assert_eq!(update.resource_version.as_deref(), Some("9"));
    let written = trainscale::daemon::sizing::merged(
        &update.existing,
        &update.desired,
        "2024-02-01T00:00:00Z".parse().unwrap(),
    );
    // The watch delivered a later writer's version before the write's answer was recorded: the
    // answer's older version is not taken (it would be a stale precondition for good).
    let mut raced = store.clone();
    raced.handle(WatchEvent::JobObject(
        JobKind::TrainingJob,
        Event::Apply(job("11")),
    ));
    raced.mark_explained(
        &key,
        update.decision,
        Some(((Some("10".to_string()), written.clone()), Some("9"))),
    );
    assert_eq!(raced.known_sizing(&key).resource_version, Some("11"));

    store.mark_explained(
        &key,
        update.decision,
        Some(((Some("10".to_string()), written), Some("9"))),
    );
    assert_eq!(store.known_sizing(&key).resource_version, Some("10"));
    let again = prepare(&store, &PlannerConfig::default(), None);
    assert!(
        again.sizing.iter().all(|u| u.key != key),
        "{:?}",
        again.sizing
    );

    store.handle(WatchEvent::JobObject(
        JobKind::TrainingJob,
        Event::Delete(job("12")),
    ));
    store.handle(WatchEvent::JobObject(
        JobKind::TrainingJob,
        Event::Apply(job("13")),
    ));
    assert!(store.known_sizing(&key).explained.is_none());
}

/// A TrainingJob whose trainer Job Kueue holds suspended (not admitted yet): it holds no room
/// and is not resized, and says why; admitted, it is planned again. trainscale's own
/// zero-trainer suspension stays planned.
#[test]
fn a_trainer_job_kueue_has_not_admitted_is_left_alone() {
    let mut store = synced_store();
    let queued = json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "queued", "namespace": "ml", "resourceVersion": "7", "uid": "u7",
                     "creationTimestamp": "2024-01-05T00:00:00Z"},
        "spec": {"fault_tolerant": true, "frame_work": {"name": "paddle", "type": "nccl2"},
                 "trainer": {"min-instance": 2, "max-instance": 4, "entrypoint": "python train.py",
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}});
    init(
        vec![tj(queued)],
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        &mut store,
    );
    let key = JobKey::new("ml", "queued");
    let mut job = trainer_job("queued-trainer", "queued", 2);
    if let Some(spec) = job.spec.as_mut() {
        spec.suspend = Some(true);
    }
    store.handle(WatchEvent::Job(Event::Apply(job.clone())));
    let work = prepare(
        &store,
        &PlannerConfig::default(),
        Some(&Settings::new("trainscale")),
    );
    assert!(
        work.plan.jobs.iter().all(|j| *j.key != key),
        "planned: {:?}",
        work.plan.jobs
    );
    assert!(work.rescales.iter().all(|r| r.key != key));
    assert!(work.assignments.reserves.iter().all(|r| r.job != key));
    let alone: Vec<_> = store.state().left_alone_jobs().collect();
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].0, &key);
    assert_eq!(
        alone[0].1.why,
        "its trainer Job is suspended (not admitted by Kueue yet)"
    );
    // trainscale's own zero-trainer suspension: planned, and growth will lift it.
    let mut ours = job.clone();
    ours.metadata.annotations = Some(
        [(
            trainscale::api::trainer_job::ANNOTATION_ZERO_TRAINERS.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    store.handle(WatchEvent::Job(Event::Apply(ours)));
    assert_eq!(store.state().left_alone_jobs().count(), 0);
    let work = prepare(
        &store,
        &PlannerConfig::default(),
        Some(&Settings::new("trainscale")),
    );
    assert!(
        work.plan
            .jobs
            .iter()
            .any(|j| *j.key == key && j.current == 0)
    );
    // Admitted by Kueue: planned again.
    if let Some(spec) = job.spec.as_mut() {
        spec.suspend = Some(false);
    }
    store.handle(WatchEvent::Job(Event::Apply(job)));
    assert_eq!(store.state().left_alone_jobs().count(), 0);
    let work = prepare(
        &store,
        &PlannerConfig::default(),
        Some(&Settings::new("trainscale")),
    );
    assert!(work.plan.jobs.iter().any(|j| *j.key == key));
}

/// A gated pod naming the scheduler is not bound, and its `PodScheduled=False, reason
/// SchedulingGated` condition is written once: not when the pod says so already.
#[test]
fn a_gated_pod_is_reported_until_its_condition_says_so() {
    let mut store = synced_store();
    let gated = |condition: bool| -> Pod {
        let mut status = json!({"phase": "Pending"});
        if condition {
            status["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates"}]);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "g", "namespace": "ml", "resourceVersion": "8"},
            "spec": {"schedulerName": "trainscale", "schedulingGates": [{"name": "example.com/wait"}],
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": status}))
        .unwrap()
    };
    store.handle(WatchEvent::Pod(Event::Apply(gated(false))));
    let work = prepare(
        &store,
        &PlannerConfig::default(),
        Some(&Settings::new("trainscale")),
    );
    assert_eq!(work.gated, vec![("ml".to_string(), "g".to_string())]);
    assert!(work.assignments.binds.iter().all(|b| b.pod.1 != "g"));
    assert!(
        work.assignments
            .unschedulable
            .iter()
            .all(|u| u.pod.1 != "g")
    );
    // Another scheduler's gated pod is its own business.
    let work = prepare(
        &store,
        &PlannerConfig::default(),
        Some(&Settings::new("volcano")),
    );
    assert!(work.gated.is_empty());
    store.handle(WatchEvent::Pod(Event::Apply(gated(true))));
    let work = prepare(
        &store,
        &PlannerConfig::default(),
        Some(&Settings::new("trainscale")),
    );
    assert!(work.gated.is_empty());
}

#[test]
fn a_trainer_jobs_status_update_keeps_the_room_held_for_its_positions() {
    let mut store = synced_store();
    let key = JobKey::new("ml", "mnist");
    let one = trainscale::api::Resources::new(1_000, 1 << 30, 0);
    store
        .state_mut()
        .reserve(&key, 3, "n2", one, i64::MAX, false);
    assert_eq!(store.state().reservations().count(), 1);
    // The Job controller writes the trainer Job's status (same size): nothing is given back.
    let mut updated = trainer_job("mnist-trainer", "mnist", 4);
    updated.metadata.resource_version = Some("5".into());
    updated.status = Some(k8s_openapi::api::batch::v1::JobStatus {
        active: Some(4),
        ..Default::default()
    });
    store.handle(WatchEvent::Job(Event::Apply(updated)));
    assert_eq!(store.state().reservations().count(), 1);
    // Lowered below the position: its room goes back.
    store.handle(WatchEvent::Job(Event::Apply(trainer_job(
        "mnist-trainer",
        "mnist",
        3,
    ))));
    assert_eq!(store.state().reservations().count(), 0);
}
