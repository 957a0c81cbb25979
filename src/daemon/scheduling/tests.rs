//! The scheduler role's decisions on small hand-made clusters: where pods go, what is held,
//! what is refused and why.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::assign::{Assignments, GangWait, Settings, assign, assign_with};
use super::pods::SchedulingPods;
use crate::api::{JobKey, Resources};
use crate::cluster::ClusterState;
use crate::planner::{PlannerConfig, plan};
use crate::testkit::job_info;

const GIB: i64 = 1 << 30;
const NAME: &str = "trainscale";

/// A node of `cpu` cores, 64 GiB, `gpus` GPUs, with extra `spec` and `status` fields merged in.
fn node(name: &str, cpu: i64, gpus: i64, labels: Value, spec: Value, pods: Option<i64>) -> Node {
    let mut allocatable =
        json!({"cpu": cpu.to_string(), "memory": "64Gi", "nvidia.com/gpu": gpus.to_string()});
    if let Some(pods) = pods {
        allocatable["pods"] = json!(pods.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}

/// A trainer pod template spec of 1 CPU, 1 GiB and `gpus` GPUs, with extra fields merged in.
fn template(gpus: i64, extra: Value) -> Value {
    let mut spec = json!({
        "schedulerName": NAME,
        "containers": [{"name": "t", "image": "x", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()},
            "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    spec
}

fn trainer_job(job: &str, parallelism: i32, spec: &Value) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{job}-trainer"), "namespace": "ns",
            "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                "name": job, "uid": "u", "controller": true}]},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "completionMode": "Indexed", "template": {"spec": spec}},
    }))
    .unwrap()
}

fn trainer_pod(job: &str, index: u32, spec: &Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{job}-trainer-{index}"), "namespace": "ns", "uid": format!("uid-{job}-{index}"),
            "labels": {"paddle-job": job, "batch.kubernetes.io/job-completion-index": index.to_string()},
            "creationTimestamp": "2024-05-01T12:00:00Z"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

/// A cluster being built: state and the scheduler's pods.
#[derive(Default)]
struct Cluster {
    state: ClusterState,
    pods: SchedulingPods,
}

impl Cluster {
    fn node(&mut self, node: Node) -> &mut Self {
        self.state.apply_node(&node).unwrap();
        self
    }

    /// A job of `min..=max` trainers of `gpus` GPUs, its trainer Job at `parallelism`, and
    /// pending pods at `indexes`.
    fn job(
        &mut self,
        name: &str,
        (min, max): (i32, i32),
        parallelism: i32,
        indexes: &[u32],
        spec: &Value,
    ) -> JobKey {
        let key = JobKey::new("ns", name);
        let gpus = spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        let trainer = Resources::new(1000, GIB, gpus);
        self.state
            .set_training_job(key.clone(), Some(job_info(min, max, trainer, 0)));
        self.state
            .apply_batch_job(&trainer_job(name, parallelism, spec));
        for &i in indexes {
            self.pod(&trainer_pod(name, i, spec));
        }
        key
    }

    fn pod(&mut self, pod: &Pod) {
        self.state.apply_pod(pod).unwrap();
        self.pods.apply(pod);
    }

    fn assign(&self) -> Assignments {
        let config = PlannerConfig::default();
        let plan = plan(&self.state, &config);
        assign(&self.state, &self.pods, &plan, NAME)
    }
}

fn bound_to(a: &Assignments) -> Vec<(String, String)> {
    let mut out: Vec<_> = a
        .binds
        .iter()
        .map(|b| (b.pod.1.clone(), b.node.clone()))
        .collect();
    out.sort();
    out
}

#[test]
fn pending_trainers_go_where_the_plan_placed_them() {
    let mut c = Cluster::default();
    c.node(node("a", 16, 4, json!({}), json!({}), None));
    c.node(node("b", 16, 4, json!({}), json!({}), None));
    let spec = template(2, json!({}));
    c.job("j", (1, 4), 4, &[0, 1, 2, 3], &spec);
    let a = c.assign();
    // Two 2-GPU trainers fill a 4-GPU node: two per node, every position held.
    let nodes: Vec<String> = bound_to(&a).into_iter().map(|(_, n)| n).collect();
    assert_eq!(nodes.iter().filter(|n| *n == "a").count(), 2);
    assert_eq!(nodes.iter().filter(|n| *n == "b").count(), 2);
    assert_eq!(a.reserves.len(), 4);
    assert!(a.unschedulable.is_empty());
}

#[test]
fn a_gang_below_min_is_bound_whole_or_only_held() {
    let mut c = Cluster::default();
    c.node(node("a", 16, 8, json!({}), json!({}), None));
    let spec = template(1, json!({}));
    let key = c.job("g", (3, 3), 3, &[0, 1], &spec);
    let a = c.assign();
    assert!(a.binds.is_empty(), "two of three pods exist: nothing bound");
    assert_eq!(a.reserves.len(), 3, "the whole gang's room is held");
    for r in &a.reserves {
        c.state
            .reserve(&r.job, r.index, &r.node, r.requests, 100, r.assumed);
    }
    // The third pod arrives: the gang binds whole, on the room held for it.
    c.pod(&trainer_pod("g", 2, &spec));
    let a = c.assign();
    assert_eq!(a.binds.len(), 3);
    assert!(a.binds.iter().all(|b| b.node == "a"));
    assert_eq!(
        c.state
            .reservations()
            .filter(|(k, _, _)| **k == key)
            .count(),
        3
    );
}

#[test]
fn a_position_not_created_yet_is_reserved_and_its_room_not_handed_out_twice() {
    let mut c = Cluster::default();
    c.node(node("a", 16, 2, json!({}), json!({}), None));
    let spec = template(2, json!({}));
    // Parallelism 1, no pod yet: its room is held.
    c.job("x", (1, 1), 1, &[], &spec);
    let a = c.assign();
    assert_eq!(a.reserves.len(), 1);
    let r = &a.reserves[0];
    c.state
        .reserve(&r.job, r.index, &r.node, r.requests, 100, r.assumed);
    // Another job's pod now finds the node full.
    c.job("y", (1, 1), 1, &[0], &spec);
    let a = c.assign();
    assert!(a.binds.iter().all(|b| !b.pod.1.starts_with("y-")));
    let refused = a
        .unschedulable
        .iter()
        .find(|u| u.pod.1 == "y-trainer-0")
        .unwrap();
    assert_eq!(
        refused.message,
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    );
}

/// Issue 29's acceptance run: a position's room was held on a node where a pod shrunk away had
/// not gone yet, and its trainer was bound there and rejected by the kubelet
/// (`OutOfnvidia.com/gpu`). Held room is bound only once the node really has it free.
#[test]
fn held_room_still_taken_on_the_node_waits_and_is_bound_once_free() {
    let mut c = Cluster::default();
    c.node(node("a", 16, 2, json!({}), json!({}), None));
    let spec = template(2, json!({}));
    c.job("x", (1, 1), 1, &[], &spec);
    let a = c.assign();
    let r = &a.reserves[0];
    c.state
        .reserve(&r.job, r.index, &r.node, r.requests, 100, r.assumed);
    // A 2-GPU donor terminating on `a` (shrunk away, not gone yet): the held room is taken
    // until it goes.
    let mut donor = trainer_pod("donor", 0, &spec);
    if let Some(spec) = donor.spec.as_mut() {
        spec.node_name = Some("a".to_string());
    }
    donor.metadata.deletion_timestamp = serde_json::from_value(json!("2024-05-01T12:05:00Z")).ok();
    c.pod(&donor);
    c.pod(&trainer_pod("x", 0, &spec));
    let a = c.assign();
    assert!(
        a.binds.iter().all(|b| b.pod.1 != "x-trainer-0"),
        "bound onto a node whose GPUs are taken: {:?}",
        bound_to(&a)
    );
    // It waits there, its room still held, and says so (not as a pod no node takes).
    assert!(a.unreserve.is_empty(), "{a:?}");
    assert_eq!(
        message_of(&a, "x-trainer-0"),
        Some("waiting for the room held for it on node a to come free (pods leaving the node)")
    );
    // The donor is gone: the pod binds where its room was held.
    c.state.delete_pod("ns", "donor-trainer-0");
    c.pods
        .forget(&("ns".to_string(), "donor-trainer-0".to_string()));
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("x-trainer-0".to_string(), "a".to_string())]
    );
}

#[test]
fn each_filter_excludes_its_node() {
    // Five nodes, each failing one filter, and one that passes all of them.
    let mut c = Cluster::default();
    c.node(node(
        "a-tainted",
        64,
        8,
        json!({"zone": "z1", "size": "8"}),
        json!({"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}),
        None,
    ));
    c.node(node(
        "b-other-zone",
        64,
        8,
        json!({"zone": "z2", "size": "8"}),
        json!({}),
        None,
    ));
    c.node(node(
        "c-too-small",
        64,
        8,
        json!({"zone": "z1", "size": "2"}),
        json!({}),
        None,
    ));
    c.node(node(
        "d-no-room-for-pods",
        64,
        8,
        json!({"zone": "z1", "size": "8"}),
        json!({}),
        Some(0),
    ));
    c.node(node(
        "e-cordoned",
        64,
        8,
        json!({"zone": "z1", "size": "8"}),
        json!({"unschedulable": true}),
        None,
    ));
    c.node(node(
        "f-ok",
        64,
        8,
        json!({"zone": "z1", "size": "8"}),
        json!({}),
        None,
    ));
    let spec = template(
        1,
        json!({
            "nodeSelector": {"zone": "z1"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "size", "operator": "Gt", "values": ["4"]},
                    {"key": "zone", "operator": "In", "values": ["z1", "z3"]},
                    {"key": "gone", "operator": "DoesNotExist"},
                    {"key": "zone", "operator": "Exists"},
                    {"key": "zone", "operator": "NotIn", "values": ["z9"]},
                    {"key": "size", "operator": "Lt", "values": ["100"]}]}]}}},
        }),
    );
    c.job("j", (1, 4), 4, &[0, 1, 2, 3], &spec);
    let a = c.assign();
    assert_eq!(a.binds.len(), 4);
    assert!(a.binds.iter().all(|b| b.node == "f-ok"), "{a:?}");
}

#[test]
fn host_ports_and_the_pod_limit_move_a_pod_off_its_planned_node() {
    let mut c = Cluster::default();
    // Node a holds a bound pod on host port 7164 and has room for one more pod only.
    c.node(node("a", 64, 8, json!({}), json!({}), Some(2)));
    c.node(node("b", 64, 8, json!({}), json!({}), None));
    let holder: Pod = serde_json::from_value(json!({
        "metadata": {"name": "holder", "namespace": "other"},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "ports": [{"containerPort": 7164, "hostPort": 7164}]}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    c.pod(&holder);
    let spec = template(
        1,
        json!({"hostNetwork": true, "containers": [{"name": "t", "image": "x",
        "ports": [{"containerPort": 7164}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}),
    );
    c.job("h", (1, 1), 1, &[0], &spec);
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("h-trainer-0".to_string(), "b".to_string())]
    );
    // Without the port, the pod limit: a takes one more pod, not two.
    let plain = template(0, json!({}));
    c.job("p", (2, 2), 2, &[0, 1], &plain);
    let a = c.assign();
    let on_a = a.binds.iter().filter(|b| b.node == "a").count();
    assert!(on_a <= 1, "{a:?}");
}

#[test]
fn a_pod_with_pod_anti_affinity_is_refused_with_a_message_naming_it() {
    let mut c = Cluster::default();
    c.node(node("a", 64, 8, json!({}), json!({}), None));
    let spec = template(
        1,
        json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
    );
    c.job("aa", (1, 1), 1, &[0], &spec);
    let a = c.assign();
    assert!(a.binds.is_empty());
    let u = &a.unschedulable[0];
    assert!(u.message.contains("podAntiAffinity"), "{}", u.message);
    assert!(!u.unchanged);
}

#[test]
fn a_pod_naming_another_scheduler_is_left_alone() {
    let mut c = Cluster::default();
    c.node(node("a", 64, 8, json!({}), json!({}), None));
    let mut spec = template(1, json!({}));
    spec["schedulerName"] = json!("volcano");
    c.job("v", (1, 1), 1, &[0], &spec);
    let a = c.assign();
    assert!(a.binds.is_empty() && a.unschedulable.is_empty());
    // Sized all the same: the plan still holds its room.
    assert_eq!(a.reserves.len(), 0);
}

/// A pending pod of no job naming `scheduler`, with its spec's containers and init containers.
fn plain_pod(name: &str, scheduler: &str, spec: Value, status: Value) -> Pod {
    let mut spec = spec;
    spec["schedulerName"] = json!(scheduler);
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "other", "uid": format!("uid-{name}")},
        "spec": spec,
        "status": status,
    }))
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Binds the kubelet never turns away: held room re-checked, whole gangs, support pods first.

impl Cluster {
    /// Holds every reservation of `a` in the state, as the runner does after a pass.
    fn hold(&mut self, a: &Assignments) {
        for r in &a.reserves {
            self.state
                .reserve(&r.job, r.index, &r.node, r.requests, 100, r.assumed);
        }
    }

    /// The node holding the reservation of `job`'s position `index`.
    fn reserved_node(&self, job: &JobKey, index: u32) -> String {
        self.state
            .reservation(job, index)
            .map(|r| r.node().to_string())
            .unwrap_or_default()
    }
}

/// A pod bound to `node` (kube-scheduler placed it) asking `gpus` GPUs; `terminating` sets a
/// deletion timestamp.
fn bound_pod(name: &str, node: &str, gpus: i64, terminating: bool) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"},
    });
    if terminating {
        pod["metadata"]["deletionTimestamp"] = json!("2024-05-01T12:05:00Z");
    }
    serde_json::from_value(pod).unwrap()
}

fn plain_node(name: &str, gpus: i64) -> Node {
    node(name, 16, gpus, json!({}), json!({}), None)
}

fn cordoned(name: &str, gpus: i64) -> Node {
    node(
        name,
        16,
        gpus,
        json!({}),
        json!({"unschedulable": true}),
        None,
    )
}

fn message_of<'a>(a: &'a Assignments, pod: &str) -> Option<&'a str> {
    a.unschedulable
        .iter()
        .find(|u| u.pod.1 == pod)
        .map(|u| u.message.as_str())
}

/// The node counts of a FailedScheduling message add up to its total (`0/N nodes ...`).
fn counts_add_up(message: &str) -> bool {
    let Some(rest) = message.strip_prefix("0/") else {
        return false;
    };
    let Some((total, reasons)) = rest.split_once(" nodes are available:") else {
        return false;
    };
    // The reasons end at the first sentence end (a resource name such as nvidia.com/gpu has dots).
    let reasons = reasons
        .split(". ")
        .next()
        .unwrap_or("")
        .trim_end_matches('.');
    let sum: usize = reasons
        .split(", ")
        .filter_map(|part| part.trim().split(' ').next()?.parse::<usize>().ok())
        .sum();
    total.parse::<usize>().is_ok_and(|t| t == sum)
}

#[test]
fn held_room_taken_by_a_pod_bound_meanwhile_sends_the_pod_to_a_node_that_fits() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 2));
    c.node(plain_node("b", 2));
    let spec = template(2, json!({}));
    let key = c.job("x", (1, 1), 1, &[], &spec);
    let a = c.assign();
    c.hold(&a);
    let held = c.reserved_node(&key, 0);
    let other = if held == "a" { "b" } else { "a" };
    // kube-scheduler, which does not see trainscale's reservations, placed a 2-GPU pod there.
    c.pod(&bound_pod("intruder", &held, 2, false));
    c.pod(&trainer_pod("x", 0, &spec));
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("x-trainer-0".to_string(), other.to_string())]
    );
    assert!(a.unschedulable.is_empty(), "{a:?}");
}

#[test]
fn a_pod_asking_more_than_its_held_room_is_checked_for_all_it_asks() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 2));
    c.node(plain_node("b", 4));
    // The job states 1-GPU trainers: 1 GPU is held for its position (on `a`, the best fit).
    let key = c.job("x", (1, 1), 1, &[], &template(1, json!({})));
    let a = c.assign();
    c.hold(&a);
    assert_eq!(c.reserved_node(&key, 0), "a");
    c.pod(&bound_pod("neighbour", "a", 1, false));
    // Its pod asks 2 GPUs: `a` has 1 for it, `b` 4.
    c.pod(&trainer_pod("x", 0, &template(2, json!({}))));
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("x-trainer-0".to_string(), "b".to_string())]
    );
}

#[test]
fn a_reserved_pod_whose_node_was_cordoned_is_bound_on_a_node_that_takes_it() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 2));
    c.node(plain_node("b", 2));
    let spec = template(2, json!({}));
    let key = c.job("x", (1, 1), 1, &[], &spec);
    let a = c.assign();
    c.hold(&a);
    let held = c.reserved_node(&key, 0);
    let other = if held == "a" { "b" } else { "a" };
    c.node(cordoned(&held, 2));
    c.pod(&trainer_pod("x", 0, &spec));
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("x-trainer-0".to_string(), other.to_string())]
    );
    assert!(a.unschedulable.is_empty(), "{a:?}");
}

#[test]
fn a_gang_member_whose_reserved_node_went_bad_holds_the_whole_gang() {
    let mut c = Cluster::default();
    for n in ["a", "b", "c"] {
        c.node(plain_node(n, 1));
    }
    let spec = template(1, json!({}));
    let key = c.job("g", (3, 3), 3, &[0, 1], &spec);
    let a = c.assign();
    assert!(a.binds.is_empty());
    c.hold(&a);
    // The node of position 2 is cordoned; no other node has a GPU left for it.
    let bad = c.reserved_node(&key, 2);
    c.node(cordoned(&bad, 1));
    c.pod(&trainer_pod("g", 2, &spec));
    let a = c.assign();
    assert!(
        a.binds.is_empty(),
        "a gang binds whole or not at all: {a:?}"
    );
    for pod in ["g-trainer-0", "g-trainer-1"] {
        assert_eq!(
            message_of(&a, pod),
            Some("waiting for its gang job ns/g: 2 of min 3 trainers placeable; 1 fits no node"),
            "{pod}"
        );
    }
    let refused = message_of(&a, "g-trainer-2").unwrap_or_default();
    assert!(
        refused.starts_with(
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu."
        ),
        "{refused}"
    );
    assert!(refused.contains("gang job ns/g"), "{refused}");
}

/// The pending master of job `ns/fresh`, with pod spec `spec`.
fn fresh_master(spec: &Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "fresh-master", "namespace": "ns", "uid": "uid-m",
            "labels": {"paddle-job-master": "fresh"},
            "creationTimestamp": "2024-05-01T12:00:00Z"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

#[test]
fn a_jobs_master_is_placed_before_any_trainer_growth() {
    let mut c = Cluster::default();
    // 4 CPUs: the growing job's four 1-CPU trainers would take all of it.
    c.node(node("a", 4, 0, json!({}), json!({}), None));
    let spec = template(0, json!({}));
    c.job("grow", (1, 4), 4, &[0, 1, 2, 3], &spec);
    c.pod(&fresh_master(&spec));
    let a = c.assign();
    let bound = bound_to(&a);
    assert!(
        bound.contains(&("fresh-master".to_string(), "a".to_string())),
        "{bound:?}"
    );
    assert_eq!(bound.len(), 4, "{bound:?}");
}

#[test]
fn no_trainer_is_bound_while_its_jobs_master_finds_no_room() {
    let mut c = Cluster::default();
    c.node(node("a", 2, 0, json!({}), json!({}), None));
    let spec = template(0, json!({}));
    c.job("fresh", (1, 1), 1, &[0], &spec);
    let mut master_spec = spec.clone();
    master_spec["containers"][0]["resources"]["requests"]["cpu"] = json!("3");
    c.pod(&fresh_master(&master_spec));
    let a = c.assign();
    assert_eq!(bound_to(&a), Vec::<(String, String)>::new());
    assert_eq!(
        message_of(&a, "fresh-trainer-0"),
        Some("waiting for the master and parameter servers of job ns/fresh to be placed first")
    );
    assert!(
        message_of(&a, "fresh-master")
            .unwrap_or_default()
            .contains("Insufficient cpu"),
        "{a:?}"
    );
}

/// A pending pod of no job naming trainscale, asking 1 CPU, with a priority and a creation time.
fn lone_pod(name: &str, priority: i32, created: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
        "spec": {"schedulerName": NAME, "priority": priority,
            "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

/// A container of `cpu` cores (and 1 GiB), optionally a native sidecar.
fn cpu_container(name: &str, cpu: i64, sidecar: bool) -> Value {
    let mut c = json!({"name": name, "image": "x",
        "resources": {"requests": {"cpu": cpu.to_string(), "memory": "1Gi"}}});
    if sidecar {
        c["restartPolicy"] = json!("Always");
    }
    c
}

#[test]
fn a_native_sidecar_adds_to_the_pod_request() {
    // 8 CPUs; each pod is a 2-CPU worker with a 2-CPU sidecar: 4 CPUs a pod, so two fit.
    let mut c = Cluster::default();
    c.node(node("a", 8, 0, json!({}), json!({}), None));
    let spec = json!({
        "initContainers": [cpu_container("proxy", 2, true)],
        "containers": [cpu_container("worker", 2, false)],
    });
    for i in 0..4 {
        c.pod(&plain_pod(
            &format!("w{i}"),
            NAME,
            spec.clone(),
            json!({"phase": "Pending"}),
        ));
    }
    let a = c.assign();
    assert_eq!(a.binds.len(), 2, "{:?}", bound_to(&a));
    assert!(a.binds.iter().all(|b| b.requests.cpu_milli == 4000));
    assert_eq!(a.unschedulable.len(), 2);
    assert!(
        a.unschedulable
            .iter()
            .all(|u| u.message == "0/1 nodes are available: 1 Insufficient cpu."),
        "{:?}",
        a.unschedulable
    );
}

#[test]
fn a_terminating_pod_keeps_its_host_port_until_it_is_gone() {
    let mut c = Cluster::default();
    c.node(node("a", 64, 8, json!({}), json!({}), None));
    c.node(node("b", 64, 8, json!({}), json!({}), None));
    // A trainer of an earlier run being deleted on a, still holding host port 7164.
    let leaving: Pod = serde_json::from_value(json!({
        "metadata": {"name": "leaving", "namespace": "other",
                     "deletionTimestamp": "2024-05-01T12:00:00Z"},
        "spec": {"nodeName": "a", "containers": [{"name": "c",
            "ports": [{"containerPort": 7164, "hostPort": 7164}],
            "resources": {"requests": {"example.com/nic": "1"}}}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    c.pod(&leaving);
    let spec = template(
        1,
        json!({"containers": [{"name": "t", "image": "x",
        "ports": [{"containerPort": 7164, "hostPort": 7164}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}),
    );
    c.job("h", (1, 1), 1, &[0], &spec);
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("h-trainer-0".to_string(), "b".to_string())]
    );
    // Its extended resources stay held as well.
    assert_eq!(c.pods.extended_on("a", "example.com/nic"), 1);
    // Gone (deleted): a is free again.
    c.state.delete_pod("other", "leaving");
    c.pods.forget(&("other".to_string(), "leaving".to_string()));
    assert_eq!(c.pods.extended_on("a", "example.com/nic"), 0);
    assert_eq!(c.pods.ports_on("a").count(), 0);
}

#[test]
fn a_gated_trainer_is_not_bound_and_its_gang_waits() {
    let mut c = Cluster::default();
    c.node(node("a", 16, 8, json!({}), json!({}), None));
    let spec = template(1, json!({}));
    let key = c.job("g", (3, 3), 3, &[0, 1], &spec);
    let mut gated = trainer_pod("g", 2, &spec);
    if let Some(spec) = gated.spec.as_mut() {
        spec.scheduling_gates = Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
            name: "kueue.x-k8s.io/admission".to_string(),
        }]);
    }
    c.pod(&gated);
    // The gated trainer is no pending trainer that will come.
    let trainers = &c.state.job(&key).unwrap().trainers;
    assert_eq!((trainers.pending, trainers.gated), (2, 1));
    assert_eq!(c.state.job(&key).unwrap().pending_trainers(), 3);
    let a = c.assign();
    assert!(
        a.binds.is_empty(),
        "a gang with a gated trainer is bound: {a:?}"
    );
    assert_eq!(a.reserves.len(), 3, "the whole gang's room is held");
    // The members present wait for the gang, which names the gated one.
    assert_eq!(a.unschedulable.len(), 2, "{:?}", a.unschedulable);
    assert!(
        a.unschedulable.iter().all(|u| u.message
            == "waiting for its gang job ns/g: 2 of min 3 trainers placeable; 1 gated (spec.schedulingGates)"),
        "{:?}",
        a.unschedulable
    );
    // A job of one gated trainer: nothing to bind (the API server would answer 409).
    let mut c = Cluster::default();
    c.node(node("a", 16, 8, json!({}), json!({}), None));
    c.job("one", (1, 1), 1, &[], &spec);
    let mut gated = trainer_pod("one", 0, &spec);
    if let Some(spec) = gated.spec.as_mut() {
        spec.scheduling_gates = Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
            name: "example.com/wait".to_string(),
        }]);
    }
    c.pod(&gated);
    let a = c.assign();
    assert!(a.binds.is_empty(), "{a:?}");
}

#[test]
fn room_nominated_for_another_schedulers_pod_is_not_handed_out() {
    let mut c = Cluster::default();
    c.node(node("a", 16, 4, json!({}), json!({}), Some(3)));
    c.node(node("b", 16, 4, json!({}), json!({}), Some(3)));
    // kube-scheduler preempted for a 3-GPU pod on a and nominated it there.
    let nominated = plain_pod(
        "preemptor",
        "default-scheduler",
        json!({"containers": [{"name": "c", "image": "x",
            "ports": [{"containerPort": 9000, "hostPort": 9000}],
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "3", "example.com/nic": "1"},
                          "limits": {"nvidia.com/gpu": "3"}}}]}),
        json!({"phase": "Pending", "nominatedNodeName": "a"}),
    );
    c.pod(&nominated);
    // A 2-GPU trainer: the plan may pick a, where only 1 GPU is not promised.
    let spec = template(2, json!({}));
    c.job("n", (1, 1), 1, &[0], &spec);
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("n-trainer-0".to_string(), "b".to_string())]
    );
    // Its host port, extended resource and pod slot are held on a as well.
    let mut c2 = Cluster::default();
    let mut with_nic = node("a", 16, 8, json!({}), json!({}), None);
    if let Some(status) = with_nic.status.as_mut()
        && let Some(allocatable) = status.allocatable.as_mut()
    {
        allocatable.insert(
            "example.com/nic".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".to_string()),
        );
    }
    c2.node(with_nic);
    c2.pod(&nominated);
    let port = plain_pod(
        "port",
        NAME,
        json!({"containers": [{"name": "c", "image": "x",
            "ports": [{"containerPort": 9000, "hostPort": 9000}]}]}),
        json!({"phase": "Pending"}),
    );
    let nic = plain_pod(
        "nic",
        NAME,
        json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"example.com/nic": "1"}}}]}),
        json!({"phase": "Pending"}),
    );
    c2.pod(&port);
    c2.pod(&nic);
    let a = c2.assign();
    assert!(a.binds.is_empty(), "{a:?}");
    let messages: Vec<&str> = a.unschedulable.iter().map(|u| u.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "0/1 nodes are available: 1 Insufficient example.com/nic.",
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        ]
    );
    let mut c3 = Cluster::default();
    c3.node(node("a", 16, 8, json!({}), json!({}), Some(1)));
    c3.pod(&nominated);
    let small = plain_pod(
        "small",
        NAME,
        json!({"containers": [cpu_container("c", 1, false)]}),
        json!({"phase": "Pending"}),
    );
    c3.pod(&small);
    let a = c3.assign();
    assert!(a.binds.is_empty(), "{a:?}");
    assert_eq!(
        a.unschedulable[0].message,
        "0/1 nodes are available: 1 Too many pods."
    );
}

#[test]
fn pods_outside_the_plan_are_placed_by_priority_then_age_then_name() {
    let mut c = Cluster::default();
    // Room for one 1-CPU pod.
    c.node(node("a", 1, 0, json!({}), json!({}), None));
    c.pod(&lone_pod("p-a-low", 0, "2024-05-01T11:00:00Z"));
    c.pod(&lone_pod("p-b-high", 100, "2024-05-01T12:00:00Z"));
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("p-b-high".to_string(), "a".to_string())]
    );
    // Equal priorities: the older pod first, whatever its name.
    let mut c = Cluster::default();
    c.node(node("a", 1, 0, json!({}), json!({}), None));
    c.pod(&lone_pod("p-a-young", 0, "2024-05-01T12:00:00Z"));
    c.pod(&lone_pod("p-b-old", 0, "2024-05-01T11:00:00Z"));
    let a = c.assign();
    assert_eq!(bound_to(&a), vec![("p-b-old".to_string(), "a".to_string())]);
}

#[test]
fn a_failed_scheduling_message_gives_every_node_considered_a_reason() {
    let mut c = Cluster::default();
    // The trainer Job's template keeps trainers in zone z1 (where no GPU is free); the pod
    // itself asks for no zone, and node b in z2 would take it.
    c.node(node("a", 16, 1, json!({"zone": "z1"}), json!({}), None));
    c.node(node("b", 16, 1, json!({"zone": "z2"}), json!({}), None));
    c.pod(&bound_pod("busy", "a", 1, false));
    let template_spec = template(1, json!({"nodeSelector": {"zone": "z1"}}));
    c.job("z", (1, 1), 1, &[], &template_spec);
    c.pod(&trainer_pod("z", 0, &template(1, json!({}))));
    let a = c.assign();
    let message = message_of(&a, "z-trainer-0").unwrap_or_default();
    assert!(counts_add_up(message), "{message}");
    assert_eq!(
        message,
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were not chosen by trainscale's plan for this pod."
    );
}

impl Cluster {
    /// One pass with `settings` (time, timeouts, what the previous pass left).
    fn assign_with(&self, settings: &Settings) -> Assignments {
        let plan = plan(&self.state, &PlannerConfig::default());
        assign_with(&self.state, &self.pods, &plan, settings)
    }
}

/// Settings at `now` with a 600 s gang timeout, a 60 s back-off and a 180 s limit for positions
/// whose pod does not come.
fn at(now: i64, previous: &Assignments) -> Settings {
    Settings {
        now,
        gang_timeout: 600,
        gang_back_off: 60,
        unfilled_limit: 180,
        memory: previous.memory.clone(),
        ..Settings::new(NAME)
    }
}

#[test]
fn a_gang_that_cannot_bind_whole_in_time_releases_its_room_then_tries_again() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 8));
    let spec = template(1, json!({}));
    let key = c.job("g", (3, 3), 3, &[0, 1], &spec);
    let first = c.assign_with(&at(1000, &Assignments::default()));
    assert_eq!(first.reserves.len(), 3);
    assert_eq!(
        first.memory.gangs.get(&key),
        Some(&GangWait {
            since: 1000,
            held_back_until: None
        })
    );
    c.hold(&first);
    // Still waiting for its third pod at 1599: its wait keeps counting from 1000 (the position
    // of the pod that does not come is no longer held).
    let waiting = c.assign_with(&at(1599, &first));
    assert!(waiting.timeouts.is_empty());
    assert_eq!(waiting.unreserve, vec![(key.clone(), 2)]);
    assert_eq!(waiting.memory.gangs[&key].since, 1000);
    c.state.unreserve(&key, 2);
    // At 1600 it has waited 10 minutes: its room is released, and it says so.
    let out = c.assign_with(&at(1600, &waiting));
    assert_eq!(out.timeouts.len(), 1, "{out:?}");
    assert_eq!(out.timeouts[0].job, key);
    let mut released: Vec<u32> = out.unreserve.iter().map(|(_, i)| *i).collect();
    released.sort_unstable();
    assert_eq!(released, vec![0, 1]);
    assert!(out.reserves.is_empty() && out.binds.is_empty(), "{out:?}");
    let expected = "gang job ns/g could not bind whole within 10m: 2 of min 3 trainers placeable; 1 not created yet; its room is released for 1m, then it tries again";
    assert_eq!(out.timeouts[0].message, expected);
    for pod in ["g-trainer-0", "g-trainer-1"] {
        assert_eq!(message_of(&out, pod), Some(expected), "{pod}");
    }
    for (job, index) in &out.unreserve {
        c.state.unreserve(job, *index);
    }
    // During the back-off nothing is held for it.
    let held_back = c.assign_with(&at(1630, &out));
    assert!(held_back.reserves.is_empty() && held_back.binds.is_empty());
    assert!(held_back.timeouts.is_empty());
    // Then it tries again, its wait counted afresh.
    let again = c.assign_with(&at(1660, &held_back));
    assert_eq!(again.reserves.len(), 3, "{again:?}");
    assert_eq!(
        again.memory.gangs[&key],
        GangWait {
            since: 1660,
            held_back_until: None
        }
    );
    assert!(again.timeouts.is_empty());
}

#[test]
fn a_gang_bound_whole_is_forgotten() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 8));
    let spec = template(1, json!({}));
    let key = c.job("g", (2, 2), 2, &[0], &spec);
    let first = c.assign_with(&at(1000, &Assignments::default()));
    assert!(first.memory.gangs.contains_key(&key));
    c.hold(&first);
    c.pod(&trainer_pod("g", 1, &spec));
    let out = c.assign_with(&at(1010, &first));
    assert_eq!(out.binds.len(), 2);
    assert!(out.memory.gangs.is_empty(), "{:?}", out.memory);
}

#[test]
fn a_position_whose_pod_never_comes_stops_being_reserved() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 8));
    let spec = template(1, json!({}));
    let key = c.job("x", (1, 2), 2, &[0], &spec);
    // Position 1 has no pod: reserved from 1000 on.
    let first = c.assign_with(&at(1000, &Assignments::default()));
    assert!(first.reserves.iter().any(|r| r.index == 1 && !r.assumed));
    assert_eq!(first.memory.unfilled.get(&(key.clone(), 1)), Some(&1000));
    c.hold(&first);
    // Its reservation lapses (the TTL) and is made again while the limit allows.
    c.state.unreserve(&key, 1);
    let again = c.assign_with(&at(1100, &first));
    assert!(again.reserves.iter().any(|r| r.index == 1), "{again:?}");
    assert_eq!(again.memory.unfilled.get(&(key.clone(), 1)), Some(&1000));
    c.hold(&again);
    // Past the limit the reservation still held is released and not made again.
    let out = c.assign_with(&at(1180, &again));
    assert_eq!(out.unreserve, vec![(key.clone(), 1)]);
    c.state.unreserve(&key, 1);
    let out = c.assign_with(&at(1200, &out));
    assert!(out.reserves.iter().all(|r| r.index != 1), "{out:?}");
    // Its pod arrives after all: bound, and the position forgotten.
    c.pod(&trainer_pod("x", 1, &spec));
    let out = c.assign_with(&at(1300, &out));
    assert!(
        out.binds.iter().any(|b| b.pod.1 == "x-trainer-1"),
        "{out:?}"
    );
    assert!(out.memory.unfilled.is_empty());
}

#[test]
fn a_reservation_on_a_node_that_no_longer_takes_the_job_is_released() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 2));
    let spec = template(1, json!({}));
    let key = c.job("x", (1, 1), 1, &[], &spec);
    let a = c.assign();
    c.hold(&a);
    c.node(cordoned("a", 2));
    let a = c.assign();
    assert_eq!(a.unreserve, vec![(key, 0)]);
}

#[test]
fn a_gang_members_condition_is_written_once() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 8));
    let spec = template(1, json!({}));
    c.job("g", (3, 3), 3, &[0, 1], &spec);
    let a = c.assign();
    let message = message_of(&a, "g-trainer-0")
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        message,
        "waiting for its gang job ns/g: 2 of min 3 trainers placeable; 1 not created yet"
    );
    assert!(a.unschedulable.iter().all(|u| !u.unchanged));
    // The pods carry the condition now: nothing more to write.
    for i in [0, 1] {
        let mut pod = trainer_pod("g", i, &spec);
        pod.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message}]}))
        .ok();
        c.pod(&pod);
    }
    let a = c.assign();
    assert_eq!(a.unschedulable.len(), 2);
    assert!(a.unschedulable.iter().all(|u| u.unchanged), "{a:?}");
}

#[test]
fn held_room_taken_by_a_trainer_its_job_was_shrunk_below_waits_for_it_to_go() {
    let mut c = Cluster::default();
    c.node(plain_node("a", 2));
    let spec = template(2, json!({}));
    c.job("x", (1, 1), 1, &[], &spec);
    let a = c.assign();
    c.hold(&a);
    // Job d's trainer Job was lowered to 0: its trainer at index 0, still running on `a`, is on
    // its way out (the Job controller deletes it).
    c.job("d", (0, 1), 0, &[], &spec);
    let mut leaving = trainer_pod("d", 0, &spec);
    if let Some(spec) = leaving.spec.as_mut() {
        spec.node_name = Some("a".to_string());
    }
    c.pod(&leaving);
    c.pod(&trainer_pod("x", 0, &spec));
    let a = c.assign();
    assert!(a.binds.iter().all(|b| b.pod.1 != "x-trainer-0"), "{a:?}");
    assert!(a.unreserve.is_empty(), "{a:?}");
    assert_eq!(
        message_of(&a, "x-trainer-0"),
        Some("waiting for the room held for it on node a to come free (pods leaving the node)")
    );
}

/// Job `x` (1..=2 trainers of 2 GPUs) on nodes `a` and `b` of 2 GPUs each, grown to 2 before
/// any pod came (both positions' room held, on different nodes), then both pods pending: its
/// key and the nodes holding positions 0 and 1.
fn grown_before_its_pods(c: &mut Cluster) -> (JobKey, String, String) {
    c.node(plain_node("a", 2));
    c.node(plain_node("b", 2));
    let spec = template(2, json!({}));
    let key = c.job("x", (1, 2), 1, &[], &spec);
    let a = c.assign();
    c.hold(&a);
    assert_eq!(a.reserves.len(), 2, "{a:?}");
    let held = c.reserved_node(&key, 0);
    let other = c.reserved_node(&key, 1);
    assert_ne!(held, other);
    c.state.apply_batch_job(&trainer_job("x", 2, &spec));
    c.pod(&trainer_pod("x", 0, &spec));
    c.pod(&trainer_pod("x", 1, &spec));
    (key, held, other)
}

/// The acceptance run of stop 36: a job's first trainer lost its held room to a pod another
/// scheduler bound, while room held for the job's growth stayed free. The lower position gets
/// that room: a Job's first pods never wait behind its own growth (the Job controller removes the
/// highest indexes, so a job running its growth while its first pod waits cannot shrink back to
/// what runs).
#[test]
fn a_lower_position_that_lost_its_room_takes_room_held_for_a_dropped_one() {
    let mut c = Cluster::default();
    let (key, held, other) = grown_before_its_pods(&mut c);
    // kube-scheduler, which does not see trainscale's reservations, placed a 2-GPU pod where
    // position 0's room was held: the plan drops position 1 (the node is overloaded), and
    // position 0's pod takes the room held for it.
    c.pod(&bound_pod("intruder", &held, 2, false));
    let a = c.assign();
    assert_eq!(
        bound_to(&a),
        vec![("x-trainer-0".to_string(), other)],
        "{a:?}"
    );
    assert!(a.unreserve.contains(&(key.clone(), 0)), "{a:?}");
    assert!(a.unreserve.contains(&(key.clone(), 1)), "{a:?}");
}

/// The same with the plan made before the intruder came (the target keeps position 1): position
/// 1's pod was bindable on its held room, position 0's on none. They trade: position 0 binds,
/// position 1 waits and its room goes with the node.
#[test]
fn a_lower_position_that_lost_its_room_takes_the_node_of_a_higher_one() {
    let mut c = Cluster::default();
    let (key, held, other) = grown_before_its_pods(&mut c);
    // The plan was made on the state before the intruder came.
    let before = c.state.clone();
    let plan = plan(&before, &PlannerConfig::default());
    assert_eq!(plan.jobs[0].target, 2);
    c.pod(&bound_pod("intruder", &held, 2, false));
    let a = assign(&c.state, &c.pods, &plan, NAME);
    assert_eq!(
        bound_to(&a),
        vec![("x-trainer-0".to_string(), other)],
        "{a:?}"
    );
    assert_eq!(
        message_of(&a, "x-trainer-1"),
        Some("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        "{a:?}"
    );
    assert!(a.unreserve.contains(&(key.clone(), 0)), "{a:?}");
    assert!(a.unreserve.contains(&(key.clone(), 1)), "{a:?}");
    assert!(
        a.reserves.iter().all(|r| r.index == 0 && r.assumed),
        "{a:?}"
    );
}
