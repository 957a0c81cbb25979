use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::api::JobKind;
use crate::api::kueue::{ClusterQueue, Workload};
use crate::cluster::ClusterState;
use crate::testkit::kueue::{
    cluster_queue, cluster_queue_json, local_queue, pytorch_job, resource_flavor, workload,
    workload_json,
};

const GPU_WORKER: (&str, &str, &str) = ("1", "1Gi", "1");
const PER_POD: &[(&str, &str)] = &[("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")];

fn key(name: &str) -> JobKey {
    JobKey::of_kind(JobKind::PyTorchJob, "ml", name)
}

/// A cluster with flavor `default`, the given ClusterQueues, and LocalQueue `ml/q` → `team-a`.
fn cluster(queues: &[ClusterQueue]) -> ClusterState {
    let mut state = ClusterState::new();
    state
        .apply_resource_flavor(&resource_flavor("default"))
        .unwrap();
    for cq in queues {
        state.apply_cluster_queue(cq).unwrap();
    }
    state
        .apply_local_queue(&local_queue("ml", "q", "team-a"))
        .unwrap();
    state
}

fn gpu_queue(name: &str, cohort: Option<&str>, gpus: &str) -> ClusterQueue {
    cluster_queue(
        name,
        cohort,
        "default",
        &[
            ("cpu", "100", None, None),
            ("memory", "100Gi", None, None),
            ("nvidia.com/gpu", gpus, None, None),
        ],
    )
}

fn add_job(state: &mut ClusterState, name: &str, sizes: (i32, i32, i32), queue: Option<&str>) {
    state
        .apply_job(&pytorch_job("ml", name, sizes, queue, GPU_WORKER))
        .unwrap();
}

fn admitted(state: &mut ClusterState, wl: &str, job: &str, cq: &str, count: i32) {
    state
        .apply_workload(&workload(
            wl,
            &key(job),
            count,
            PER_POD,
            Some((cq, "default", count)),
        ))
        .unwrap();
}

fn gpus(state: &ClusterState, cq: &str) -> i64 {
    let fr: FlavorResource = (Arc::from("default"), Arc::from("nvidia.com/gpu"));
    state
        .quota()
        .usage(cq)
        .and_then(|u| u.get(&fr))
        .copied()
        .unwrap_or(0)
}

fn with_condition(mut wl: serde_json::Value, type_: &str, reason: &str) -> Workload {
    let conditions = wl["status"]["conditions"].as_array_mut().unwrap();
    conditions.push(json!({"type": type_, "status": "True", "reason": reason}));
    serde_json::from_value(wl).unwrap()
}

#[test]
fn usage_is_the_reserved_unfinished_workloads_after_reclaimable_pods() {
    let mut state = cluster(&[gpu_queue("team-a", None, "8")]);
    admitted(&mut state, "a", "a", "team-a", 3);
    admitted(&mut state, "b", "b", "team-a", 2);
    assert_eq!(gpus(&state, "team-a"), 5);
    // Not reserved: holds nothing.
    let pending = workload("c", &key("c"), 4, PER_POD, None);
    state.apply_workload(&pending).unwrap();
    assert_eq!(gpus(&state, "team-a"), 5);
    // Finished: gives its quota back.
    let done = with_condition(
        workload_json("b", &key("b"), 2, PER_POD, Some(("team-a", "default", 2))),
        "Finished",
        "Succeeded",
    );
    state.apply_workload(&done).unwrap();
    assert_eq!(gpus(&state, "team-a"), 3);
    // One of three pods reclaimable: usage scaled to two.
    let mut partly = workload_json("a", &key("a"), 3, PER_POD, Some(("team-a", "default", 3)));
    partly["status"]["reclaimablePods"] = json!([{"name": "worker", "count": 1}]);
    state
        .apply_workload(&serde_json::from_value(partly).unwrap())
        .unwrap();
    assert_eq!(gpus(&state, "team-a"), 2);
    state.delete_workload("ml", "a");
    assert_eq!(gpus(&state, "team-a"), 0);
    assert!(state.quota().usage("team-a").is_none());
}

#[test]
fn a_cohort_lends_unused_quota_within_borrowing_and_lending_limits() {
    let gpu = |name: &str, cohort: &str, borrow: Option<&str>, lend: Option<&str>| {
        cluster_queue(
            name,
            Some(cohort),
            "default",
            &[("nvidia.com/gpu", "8", borrow, lend)],
        )
    };
    let mut state = cluster(&[
        gpu("team-a", "research", Some("4"), None),
        gpu("team-b", "research", None, Some("2")),
        gpu("team-d", "other", Some("4"), None),
        gpu("team-e", "other", None, None),
        cluster_queue(
            "solo",
            None,
            "default",
            &[("nvidia.com/gpu", "4", None, None)],
        ),
    ]);
    let per_pod: &[(&str, &str)] = &[("nvidia.com/gpu", "1")];
    for (wl, cq, n) in [("b", "team-b", 2), ("s", "solo", 1)] {
        let w = workload(wl, &key(wl), n, per_pod, Some((cq, "default", n)));
        state.apply_workload(&w).unwrap();
    }
    let mut room = QuotaRoom::new(state.quota());
    let q = |room: &QuotaRoom, name: &str| room.queue(name).unwrap();
    let fr = room.id("default", "nvidia.com/gpu").unwrap();
    let (a, b, d, solo) = (
        q(&room, "team-a"),
        q(&room, "team-b"),
        q(&room, "team-d"),
        q(&room, "solo"),
    );
    // team-b keeps 6 of its 8 (lending limit 2): the cohort holds 8 + 2, none of it used.
    assert_eq!(room.available(a, fr), 10);
    // team-b: the 4 it keeps unused, plus the cohort's 10.
    assert_eq!(room.available(b, fr), 14);
    // team-d may borrow 4 beyond its 8 though its cohort has 16.
    assert_eq!(room.available(d, fr), 12);
    // No cohort: nominal only.
    assert_eq!(room.available(solo, fr), 3);
    let one: Need = vec![(fr, 1)];
    room.take(a, &one, 9);
    assert_eq!((room.available(a, fr), room.available(b, fr)), (1, 5));
    room.take(a, &one, 1);
    // team-a used all the cohort lends; team-b still has what it keeps.
    assert_eq!(room.fit(a, &one), (0, Some(fr)));
    assert_eq!(room.available(b, fr), 4);
    assert_eq!(
        room.standing(a, fr),
        Standing {
            nominal: 8,
            used: 10,
            available: 0
        }
    );
    assert_eq!(room.overdrawn(), None);
    room.take(b, &one, 5);
    assert_eq!(room.overdrawn(), Some((a, fr)));
}

#[test]
fn a_worker_is_charged_in_its_admitted_flavors_and_an_uncovered_resource_is_named() {
    let mut state = cluster(&[cluster_queue(
        "team-a",
        None,
        "default",
        &[
            ("cpu", "16", None, None),
            ("memory", "64Gi", None, None),
            ("nvidia.com/gpu", "8", None, None),
            ("pods", "10", None, None),
        ],
    )]);
    add_job(&mut state, "j", (1, 4, 2), Some("q"));
    admitted(&mut state, "j-1", "j", "team-a", 2);
    let k = state.quota().job(&key("j")).unwrap().clone();
    assert_eq!(k.admitted(), 2);
    let room = QuotaRoom::new(state.quota());
    let q = room.queue("team-a").unwrap();
    let need = room.need(q, &k.worker, Vec::new).unwrap();
    let named: Vec<(String, i64)> = need
        .iter()
        .map(|(fr, a)| (room.flavor_resource(*fr).1.to_string(), *a))
        .collect();
    assert_eq!(
        named,
        [
            ("cpu".to_string(), 1000),
            ("memory".to_string(), 1 << 30),
            ("nvidia.com/gpu".to_string(), 1),
            ("pods".to_string(), 1)
        ]
    );
    // A worker requesting a resource the queue does not cover is admitted nowhere.
    let mut rdma = k.worker.clone();
    rdma.per_pod.push((Arc::from("rdma/hca"), 1));
    assert_eq!(
        room.need(q, &rdma, Vec::new),
        Err(Stop::Uncovered {
            resource: Arc::from("rdma/hca"),
            flavor: None
        })
    );
    // Without a per-pod request in the Workload, the planner's request stands in.
    let mut bare = k.worker.clone();
    bare.per_pod.clear();
    let fallback = room
        .need(q, &bare, || vec![(Arc::from("nvidia.com/gpu"), 2)])
        .unwrap();
    assert_eq!(fallback.len(), 2);
    // A flavor without its ResourceFlavor, or a stop policy: the queue admits nothing new.
    state.delete_resource_flavor("default");
    let room = QuotaRoom::new(state.quota());
    assert_eq!(
        room.need(q, &k.worker, Vec::new),
        Err(Stop::Inactive(
            "ResourceFlavor default does not exist".to_string()
        ))
    );
    state
        .apply_resource_flavor(&resource_flavor("default"))
        .unwrap();
    let mut held = cluster_queue_json("team-a", None, "default", &[("cpu", "16", None, None)]);
    held["spec"]["stopPolicy"] = json!("Hold");
    state
        .apply_cluster_queue(&serde_json::from_value(held).unwrap())
        .unwrap();
    let room = QuotaRoom::new(state.quota());
    assert_eq!(
        room.need(q, &k.worker, Vec::new),
        Err(Stop::Inactive("its spec.stopPolicy is Hold".to_string()))
    );
}

#[test]
fn admission_follows_the_workload_slices() {
    let mut state = cluster(&[gpu_queue("team-a", None, "8")]);
    add_job(&mut state, "j", (1, 8, 2), Some("q"));
    let j = key("j");
    let admission = |s: &ClusterState| s.quota().admission(&j).cloned();
    // No Workload yet: not admitted, left alone, silently.
    assert_eq!(admission(&state), Some(Admission::NotAdmitted));
    assert_eq!(state.jobs().count(), 0);
    let alone: Vec<_> = state.left_alone_jobs().collect();
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].1.field, ADMISSION_FIELD);
    assert_eq!(
        alone[0].1.why,
        "not admitted by Kueue (ClusterQueue team-a): no Workload yet"
    );
    assert!(!alone[0].1.announce);
    // Waiting for quota.
    let pending = workload("j-1", &j, 2, PER_POD, None);
    state.apply_workload(&pending).unwrap();
    assert_eq!(admission(&state), Some(Admission::NotAdmitted));
    // Admitted: planned.
    admitted(&mut state, "j-1", "j", "team-a", 2);
    assert_eq!(admission(&state), Some(Admission::Admitted { count: 2 }));
    assert_eq!(state.jobs().count(), 1);
    assert_eq!(state.left_alone_jobs().count(), 0);
    // A scale-up slice waits: planned, awaiting.
    let mut slice = workload_json("j-2", &j, 4, PER_POD, None);
    slice["metadata"]["annotations"] =
        json!({"kueue.x-k8s.io/workload-slice-replacement-for": "ml/j-1"});
    state
        .apply_workload(&serde_json::from_value(slice).unwrap())
        .unwrap();
    assert_eq!(
        admission(&state),
        Some(Admission::SlicePending {
            admitted_count: 2,
            slice: Arc::from("j-2"),
            asked: 4
        })
    );
    assert!(state.quota().job(&j).unwrap().awaiting(4));
    // The slice admitted while the old one still holds quota: in flight, left alone.
    let mut both = workload_json("j-2", &j, 4, PER_POD, Some(("team-a", "default", 4)));
    both["metadata"]["annotations"] =
        json!({"kueue.x-k8s.io/workload-slice-replacement-for": "ml/j-1"});
    state
        .apply_workload(&serde_json::from_value(both.clone()).unwrap())
        .unwrap();
    assert_eq!(
        admission(&state),
        Some(Admission::InFlight(
            "Workload j-1 is being replaced by j-2".to_string()
        ))
    );
    assert_eq!(
        state.left_alone_jobs().next().map(|(_, w)| w.field),
        Some(CONDITIONS_FIELD)
    );
    // The old slice finished (replaced): admitted for 4.
    let replaced = with_condition(
        workload_json("j-1", &j, 2, PER_POD, Some(("team-a", "default", 2))),
        "Finished",
        "WorkloadSliceReplaced",
    );
    state.apply_workload(&replaced).unwrap();
    assert_eq!(admission(&state), Some(Admission::Admitted { count: 4 }));
    assert_eq!(gpus(&state, "team-a"), 4);
    // Preempted: evicted while its quota is still held.
    let preempted = with_condition(both.clone(), "Evicted", "Preempted");
    state.apply_workload(&preempted).unwrap();
    assert_eq!(
        admission(&state),
        Some(Admission::InFlight(
            "Workload j-2 is being evicted by Kueue (Preempted)".to_string()
        ))
    );
    // A partial admission: 3 of the 4 asked; the job has 3.
    let mut partial = both;
    partial["status"]["admission"]["podSetAssignments"][0]["count"] = json!(3);
    state
        .apply_workload(&serde_json::from_value(partial).unwrap())
        .unwrap();
    assert_eq!(admission(&state), Some(Admission::Admitted { count: 3 }));
    let k = state.quota().job(&j).unwrap();
    assert!(k.awaiting(4) && !k.awaiting(3));
}

#[test]
fn a_missing_queue_leaves_the_job_alone_naming_its_label_and_no_queues_change_nothing() {
    let mut state = ClusterState::new();
    add_job(&mut state, "j", (1, 4, 2), Some("nowhere"));
    // Without any ClusterQueue Kueue is not there: planned as always.
    assert_eq!(state.jobs().count(), 1);
    state
        .apply_cluster_queue(&gpu_queue("team-a", None, "8"))
        .unwrap();
    let why = |s: &ClusterState| {
        s.left_alone_jobs()
            .map(|(_, w)| (w.field, w.why.clone(), w.announce))
            .next()
    };
    assert_eq!(
        why(&state),
        Some((
            QUEUE_FIELD,
            "names LocalQueue ml/nowhere, which does not exist: Kueue admits none of its pods"
                .to_string(),
            true
        ))
    );
    assert_eq!(state.jobs().count(), 0);
    state
        .apply_local_queue(&local_queue("ml", "nowhere", "team-x"))
        .unwrap();
    assert_eq!(
        why(&state).map(|w| w.1),
        Some(
            "names LocalQueue ml/nowhere, whose ClusterQueue team-x does not exist: Kueue admits \
             none of its pods"
                .to_string()
        )
    );
    state
        .apply_local_queue(&local_queue("ml", "nowhere", "team-a"))
        .unwrap();
    assert_eq!(
        why(&state).map(|w| w.1),
        Some("not admitted by Kueue (ClusterQueue team-a): no Workload yet".to_string())
    );
    // The label removed: not Kueue's.
    add_job(&mut state, "j", (1, 4, 2), None);
    assert_eq!(state.jobs().count(), 1);
    add_job(&mut state, "j", (1, 4, 2), Some("nowhere"));
    assert_eq!(state.jobs().count(), 0);
    // The last ClusterQueue gone: planned as before.
    state.delete_cluster_queue("team-a");
    assert_eq!(state.jobs().count(), 1);
    assert_eq!(state.left_alone_jobs().count(), 0);
}

#[test]
fn workloads_of_a_trainer_job_belong_to_its_training_job() {
    let mut state = cluster(&[gpu_queue("team-a", None, "8")]);
    let tj = JobKey::new("ml", "t");
    state.set_training_job(
        tj.clone(),
        Some(crate::testkit::job_info(
            1,
            4,
            crate::api::Resources::new(1000, 1 << 30, 1),
            0,
        )),
    );
    let trainer_job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "t-trainer", "namespace": "ml",
                     "labels": {"kueue.x-k8s.io/queue-name": "q"},
                     "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1",
                         "kind": "TrainingJob", "name": "t", "uid": "u", "controller": true}]},
        "spec": {"parallelism": 2, "completionMode": "Indexed",
                 "template": {"spec": {"containers": []}}},
    }))
    .unwrap();
    state.apply_batch_job(&trainer_job);
    assert_eq!(
        state
            .left_alone_jobs()
            .next()
            .map(|(k, w)| (k.clone(), w.field)),
        Some((tj.clone(), ADMISSION_FIELD))
    );
    // Kueue's Workload is owned by the trainer Job.
    let mut wl = workload_json("t-1", &tj, 2, PER_POD, Some(("team-a", "default", 2)));
    wl["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": "t-trainer", "uid": "v", "controller": true}]);
    state
        .apply_workload(&serde_json::from_value(wl).unwrap())
        .unwrap();
    assert_eq!(
        state.quota().admission(&tj),
        Some(&Admission::Admitted { count: 2 })
    );
    assert_eq!(state.jobs().count(), 1);
    state.delete_batch_job(&trainer_job);
    assert!(state.quota().admission(&tj).is_none());
}

#[test]
fn malformed_kueue_objects_are_errors_naming_the_field() {
    let mut state = cluster(&[gpu_queue("team-a", None, "8")]);
    let mut bad = cluster_queue_json("team-a", None, "default", &[("cpu", "lots", None, None)]);
    let e = state
        .apply_cluster_queue(&serde_json::from_value(bad.clone()).unwrap())
        .unwrap_err();
    assert_eq!(
        (e.object.as_str(), e.field.as_str()),
        (
            "ClusterQueue team-a",
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
        )
    );
    // The malformed queue is gone.
    assert!(state.quota().cluster_queue("team-a").is_none());
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] =
        json!({"name": "cpu", "nominalQuota": "1", "borrowingLimit": "-1"});
    let e = state
        .apply_cluster_queue(&serde_json::from_value(bad).unwrap())
        .unwrap_err();
    assert_eq!(
        e.field,
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit"
    );
    let mut wl = workload_json("w", &key("j"), 2, PER_POD, Some(("team-a", "default", 2)));
    wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] = json!("two");
    let e = state
        .apply_workload(&serde_json::from_value(wl.clone()).unwrap())
        .unwrap_err();
    assert_eq!(
        (e.object.as_str(), e.field.as_str()),
        (
            "Workload ml/w",
            "status.admission.podSetAssignments[0].resourceUsage.cpu"
        )
    );
    wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] = json!("2");
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] =
        json!("1Qi");
    let e = state
        .apply_workload(&serde_json::from_value(wl.clone()).unwrap())
        .unwrap_err();
    assert_eq!(
        e.field,
        "spec.podSets[0].template.spec.containers[0].resources.requests.memory"
    );
    wl["spec"]["podSets"][0]["count"] = json!(-1);
    let e = state
        .apply_workload(&serde_json::from_value(wl).unwrap())
        .unwrap_err();
    assert_eq!(e.field, "spec.podSets[0].count");
    let lq: crate::api::kueue::LocalQueue = serde_json::from_value(json!({
        "metadata": {"name": "q", "namespace": "ml"}, "spec": {}}))
    .unwrap();
    let e = state.apply_local_queue(&lq).unwrap_err();
    assert_eq!(
        (e.object.as_str(), e.field.as_str()),
        ("LocalQueue ml/q", "spec.clusterQueue")
    );
}
