//! Plans within what a bind accepts: each node's free pod slots and other resources
//! (`rdma/hca`), the pod limits behind the target of a huge job, no shrink for room that
//! terminating pods give back (nor a second shrink of a job whose removed trainers are still
//! stopping), and room held for pending masters and pservers before growth.
//! Clusters are built from Kubernetes objects, as the watches deliver them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::{PlannerConfig, Policy, Reason, ScalePlan, plan};
use crate::api::{JobKey, Resources};
use crate::cluster::filters::PodConstraints;
use crate::cluster::{ClusterState, NodeId};
use crate::testkit::job_info;

const GIB: i64 = 1 << 30;

/// A Ready Node with `cpu` cores, 64Gi and `more` allocatable (`pods`, `rdma/hca`…).
fn node(name: &str, cpu: &str, more: &[(&str, &str)], cordoned: bool) -> Node {
    let mut allocatable = json!({"cpu": cpu, "memory": "64Gi"});
    for (resource, amount) in more {
        allocatable[*resource] = Value::from(*amount);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
        "status": {"allocatable": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("a Node")
}

/// A state of Ready 4-core nodes named `names`.
fn four_core_nodes(names: &[&str]) -> ClusterState {
    let mut state = ClusterState::new();
    for name in names {
        state
            .apply_node(&node(name, "4", &[], false))
            .expect("node");
    }
    state
}

/// What a test pod is.
struct PodSpec<'a> {
    labels: Value,
    annotations: Value,
    node: Option<&'a str>,
    cpu: &'a str,
    extended: &'a [(&'a str, &'a str)],
    terminating: bool,
    priority: Option<i32>,
    created: &'a str,
}

impl Default for PodSpec<'_> {
    fn default() -> Self {
        PodSpec {
            labels: json!({}),
            annotations: json!({}),
            node: None,
            cpu: "1",
            extended: &[],
            terminating: false,
            priority: None,
            created: "2026-01-01T00:00:00Z",
        }
    }
}

fn pod(name: &str, spec: PodSpec) -> Pod {
    let mut requests = json!({"cpu": spec.cpu, "memory": "1Gi"});
    for (resource, amount) in spec.extended {
        requests[*resource] = Value::from(*amount);
    }
    let mut metadata = json!({
        "namespace": "ns", "name": name, "labels": spec.labels,
        "annotations": spec.annotations, "creationTimestamp": spec.created,
    });
    if spec.terminating {
        metadata["deletionTimestamp"] = Value::from("2026-01-02T00:00:00Z");
    }
    let mut pod_spec = json!({"containers": [{"name": "c", "resources": {"requests": requests}}]});
    if let Some(node) = spec.node {
        pod_spec["nodeName"] = Value::from(node);
    }
    if let Some(priority) = spec.priority {
        pod_spec["priority"] = Value::from(priority);
    }
    let phase = if spec.node.is_some() {
        "Running"
    } else {
        "Pending"
    };
    serde_json::from_value(json!({
        "metadata": metadata, "spec": pod_spec, "status": {"phase": phase},
    }))
    .expect("a Pod")
}

/// Trainer `index` of job `job` (1 core and `extended`), bound to `node` or pending.
fn trainer(job: &str, index: u32, node: Option<&str>, extended: &[(&str, &str)]) -> Pod {
    pod(
        &format!("{job}-trainer-{index}"),
        PodSpec {
            labels: json!({"paddle-job": job}),
            annotations: json!({"batch.kubernetes.io/job-completion-index": index.to_string()}),
            node,
            extended,
            ..PodSpec::default()
        },
    )
}

/// A running job `name` of 1-core trainers (min, max), its trainer Job at `parallelism`.
fn job(state: &mut ClusterState, name: &str, (min, max): (i32, i32), parallelism: i32) -> JobKey {
    let key = JobKey::new("ns", name);
    let info = job_info(min, max, Resources::new(1000, GIB, 0), 0);
    state.set_training_job(key.clone(), Some(info));
    state.set_trainer_job(key.clone(), Some(Some(parallelism)));
    key
}

fn config(policy: Policy) -> PlannerConfig {
    PlannerConfig {
        policy,
        ..PlannerConfig::default()
    }
}

const POLICIES: [Policy; 4] = [
    Policy::Fulfillment,
    Policy::Goodput,
    Policy::Edl,
    Policy::Static,
];

/// Checks that the plan's placements (trainers and support pods) fit every node's free CPU,
/// memory, GPU, pod slots and other resources, as a bind counts them.
fn assert_binds(state: &ClusterState, plan: &ScalePlan) {
    let mut free: BTreeMap<NodeId, (Resources, i64)> = state
        .nodes()
        .filter(|(_, slot)| slot.schedulable())
        .map(|(id, slot)| (id, (slot.free(), state.free_pod_slots(id))))
        .collect();
    let mut extended: BTreeMap<(NodeId, String), i64> = BTreeMap::new();
    let mut take = |id: NodeId, requests: Resources, other: Vec<(String, i64)>, n: i64| {
        let room = free.get_mut(&id).expect("placed on a schedulable node");
        room.0 -= requests.times(n);
        room.1 -= n;
        for (name, amount) in other {
            *extended
                .entry((id, name.clone()))
                .or_insert_with(|| state.free_extended(id, &name)) -= amount * n;
        }
    };
    for job in &plan.jobs {
        let class = state.job(&job.key).and_then(|s| s.class);
        let other: Vec<(String, i64)> = class
            .and_then(|c| state.eligibility().constraints(c))
            .map(|c| c.extended.clone().into_iter().collect())
            .unwrap_or_default();
        for p in &job.placements {
            take(p.node, job.trainer, other.clone(), i64::from(p.trainers));
        }
        // Trainers the plan removes from a node give their room back (the Job controller
        // deletes them; the bind waits for them to go).
        for r in &job.removals {
            if let Some(node) = r.node {
                take(node, job.trainer, other.clone(), -i64::from(r.trainers));
            }
        }
    }
    for placed in &plan.support {
        let pod = state
            .pod(&placed.pod.0, &placed.pod.1)
            .expect("a pending pod");
        if let Some(id) = placed.node {
            take(
                id,
                pod.requests,
                pod.extended.clone().into_iter().collect(),
                1,
            );
        }
    }
    for (id, (room, slots)) in free {
        let name = &state.node(id).expect("a node").name;
        let touched = plan
            .jobs
            .iter()
            .any(|j| j.placements.iter().any(|p| p.node == id))
            || plan.support.iter().any(|s| s.node == Some(id));
        if touched {
            assert!(!room.any_negative(), "{name} overcommitted: {room:?}");
            assert!(slots >= 0, "{name}: {slots} pod slots");
        }
    }
    for ((id, resource), left) in extended {
        assert!(left >= 0, "node {id}: {left} {resource}");
    }
}

#[test]
fn a_node_takes_no_more_trainers_than_its_free_pod_slots() {
    // Node a takes 4 pods, a daemon's and a trainer's among them: 2 more trainers at most,
    // whatever its CPUs hold.
    let mut state = ClusterState::new();
    state
        .apply_node(&node("a", "64", &[("pods", "4")], false))
        .expect("node a");
    let daemon = PodSpec {
        node: Some("a"),
        cpu: "100m",
        ..PodSpec::default()
    };
    state.apply_pod(&pod("daemon", daemon)).expect("daemon");
    let key = job(&mut state, "j", (1, 10), 1);
    state
        .apply_pod(&trainer("j", 0, Some("a"), &[]))
        .expect("trainer");
    for policy in POLICIES {
        let plan = plan(&state, &config(policy));
        assert_binds(&state, &plan);
        let j = plan.job(&key).expect("planned");
        let placed: u32 = j.placements.iter().map(|p| p.trainers).sum();
        assert!(placed <= 2, "{policy:?}: {placed} trainers placed on a");
        assert!(j.target <= 3, "{policy:?}: target {}", j.target);
    }
    let fulfillment = plan(&state, &config(Policy::Fulfillment));
    assert_eq!(fulfillment.job(&key).map(|j| j.target), Some(3));
}

#[test]
fn a_node_takes_no_more_rdma_trainers_than_it_has_rdma_free() {
    // r has one rdma/hca, which the job's first trainer holds; s has two, one of them requested
    // by a pod bound there; t has none.
    let mut state = ClusterState::new();
    for (name, rdma) in [("r", "1"), ("s", "2"), ("t", "0")] {
        state
            .apply_node(&node(name, "64", &[("rdma/hca", rdma)], false))
            .expect("node");
    }
    let holder = PodSpec {
        node: Some("s"),
        extended: &[("rdma/hca", "1")],
        ..PodSpec::default()
    };
    state.apply_pod(&pod("holder", holder)).expect("holder");
    let key = job(&mut state, "j", (1, 9), 1);
    let class = PodConstraints {
        extended: BTreeMap::from([("rdma/hca".to_string(), 1)]),
        ..PodConstraints::default()
    };
    state.set_trainer_class(&key, Some(Arc::new(class)));
    state
        .apply_pod(&trainer("j", 0, Some("r"), &[("rdma/hca", "1")]))
        .expect("trainer");
    for policy in POLICIES {
        let plan = plan(&state, &config(policy));
        assert_binds(&state, &plan);
        let j = plan.job(&key).expect("planned");
        assert!(j.target <= 2, "{policy:?}: target {}", j.target);
    }
    let fulfillment = plan(&state, &config(Policy::Fulfillment));
    let j = fulfillment.job(&key).expect("planned");
    assert_eq!(j.target, 2);
    let on = |name: &str| {
        let id = state.node_id_of(name);
        j.placements
            .iter()
            .filter(|p| Some(p.node) == id)
            .map(|p| p.trainers)
            .sum::<u32>()
    };
    assert_eq!((on("r"), on("s"), on("t")), (0, 1, 0));
}

#[test]
fn pod_limits_cap_the_target_of_a_huge_job() {
    // Two schedulable nodes of 110 pods and room for 100,000 trainers each; a cordoned node
    // stating 65,536 pods raises the size cap, not the room.
    let mut state = ClusterState::new();
    for name in ["a", "b"] {
        state
            .apply_node(&node(name, "1000", &[("pods", "110")], false))
            .expect("node");
    }
    state
        .apply_node(&node("c", "1000", &[("pods", "65536")], true))
        .expect("node c");
    let key = JobKey::new("ns", "huge");
    let info = job_info(1, 64_000, Resources::new(10, 1 << 20, 0), 0);
    state.set_training_job(key.clone(), Some(info));
    state.set_trainer_job(key.clone(), Some(Some(0)));
    assert!(state.size_cap() > 64_000);
    for policy in [Policy::Fulfillment, Policy::Goodput, Policy::Edl] {
        let plan = plan(&state, &config(policy));
        assert_binds(&state, &plan);
        assert_eq!(plan.job(&key).map(|j| j.target), Some(220), "{policy:?}");
    }
}

/// Node a (4 cores) runs x's trainers 0 and 1 and y's trainer 0; y's trainer 1 is being deleted
/// there and the room of its replacement is reserved there too: 5 cores held on 4.
fn terminating_and_reserved() -> (ClusterState, JobKey, JobKey) {
    let mut state = ClusterState::new();
    state
        .apply_node(&node("a", "4", &[], false))
        .expect("node a");
    let x = job(&mut state, "x", (1, 4), 2);
    let y = job(&mut state, "y", (1, 4), 2);
    for (job, index) in [("x", 0), ("x", 1), ("y", 0)] {
        state
            .apply_pod(&trainer(job, index, Some("a"), &[]))
            .expect("trainer");
    }
    let leaving = PodSpec {
        labels: json!({"paddle-job": "y"}),
        annotations: json!({"batch.kubernetes.io/job-completion-index": "1"}),
        node: Some("a"),
        terminating: true,
        ..PodSpec::default()
    };
    state
        .apply_pod(&pod("y-trainer-1", leaving))
        .expect("terminating trainer");
    state.reserve(&y, 1, "a", Resources::new(1000, GIB, 0), i64::MAX, false);
    (state, x, y)
}

#[test]
fn terminating_trainers_room_and_a_reservation_in_it_shrink_nothing() {
    let (state, x, y) = terminating_and_reserved();
    let a = state.node_id_of("a").expect("node a");
    assert!(state.node(a).expect("a").free().any_negative());
    let plan = plan(&state, &config(Policy::Fulfillment));
    for key in [&x, &y] {
        let j = plan.job(key).expect("planned");
        assert_ne!(j.reason, Reason::Overload, "{key}");
        assert_eq!(j.target, 2, "{key}");
    }
}

#[test]
fn a_node_still_overloaded_past_its_terminating_pods_is_relieved() {
    // One more core bound on a: 6 held on 4, of which 1 is leaving: one trainer must go.
    let (mut state, x, y) = terminating_and_reserved();
    let extra = PodSpec {
        node: Some("a"),
        ..PodSpec::default()
    };
    state.apply_pod(&pod("extra", extra)).expect("extra");
    let plan = plan(&state, &config(Policy::Fulfillment));
    let removed: i32 = [&x, &y]
        .iter()
        .map(|key| plan.job(key).map_or(0, |j| j.current - j.target))
        .sum();
    assert_eq!(removed, 1);
    assert!(plan.jobs.iter().any(|j| j.reason == Reason::Overload));
}

/// Two 4-core nodes. `a` (2..8) was shrunk from 8 to 4 for `b`'s share: its trainers 0–3 run,
/// 4–7 hold their cores until gone: still running, the Job controller not having removed them
/// yet, or being deleted (`terminating`). `b` (2..8) has two trainers pending.
fn shrunk_for_a_newcomer(terminating: bool) -> (ClusterState, JobKey, JobKey) {
    let mut state = four_core_nodes(&["n1", "n2"]);
    let a = job(&mut state, "a", (2, 8), 4);
    let b = job(&mut state, "b", (2, 8), 2);
    for index in 0..8u32 {
        let node = if index % 2 == 0 { "n1" } else { "n2" };
        let spec = PodSpec {
            labels: json!({"paddle-job": "a"}),
            annotations: json!({"batch.kubernetes.io/job-completion-index": index.to_string()}),
            node: Some(node),
            terminating: terminating && index >= 4,
            ..PodSpec::default()
        };
        state
            .apply_pod(&pod(&format!("a-trainer-{index}"), spec))
            .expect("a's trainer");
    }
    for index in 0..2 {
        state
            .apply_pod(&trainer("b", index, None, &[]))
            .expect("b's trainer");
    }
    (state, a, b)
}

#[test]
fn a_job_is_not_shrunk_again_for_room_its_removed_trainers_give_back() {
    for terminating in [false, true] {
        let (state, a, b) = shrunk_for_a_newcomer(terminating);
        for policy in [Policy::Fulfillment, Policy::Goodput, Policy::Progress] {
            let what = format!("{policy:?}, removed trainers terminating: {terminating}");
            let plan = plan(&state, &config(policy));
            let (a_plan, b_plan) = (plan.job(&a).expect("a"), plan.job(&b).expect("b"));
            assert_eq!(a_plan.target, 4, "{what}: a shrunk again: {a_plan:?}");
            assert!(a_plan.removals.is_empty(), "{what}: {a_plan:?}");
            // b's gang goes where a's removed trainers are leaving, up to its share.
            assert_eq!(b_plan.target, 4, "{what}: {b_plan:?}");
            let placed: u32 = b_plan.placements.iter().map(|p| p.trainers).sum();
            assert_eq!(placed, 4, "{what}: {b_plan:?}");
        }
    }
}

#[test]
fn pending_masters_and_pservers_get_room_before_growth() {
    // a and b, 4 cores each; old runs 2 trainers on a and may grow to 8. New's master and two
    // pservers (1 core each) are pending, as is its first trainer.
    let mut state = four_core_nodes(&["a", "b"]);
    let old = job(&mut state, "old", (1, 8), 2);
    for index in 0..2 {
        state
            .apply_pod(&trainer("old", index, Some("a"), &[]))
            .expect("trainer");
    }
    let new = job(&mut state, "new", (1, 8), 1);
    state
        .apply_pod(&trainer("new", 0, None, &[]))
        .expect("trainer");
    let support = |name: &str, role: &str, priority: i32, created: &'static str| {
        pod(
            name,
            PodSpec {
                labels: json!({ role: "new" }),
                priority: Some(priority),
                created,
                ..PodSpec::default()
            },
        )
    };
    for p in [
        support(
            "new-pserver-b",
            "paddle-job-pserver",
            0,
            "2026-01-01T00:00:00Z",
        ),
        support(
            "new-pserver-a",
            "paddle-job-pserver",
            0,
            "2026-01-01T00:00:00Z",
        ),
        support(
            "new-master",
            "paddle-job-master",
            10,
            "2026-01-01T00:00:05Z",
        ),
    ] {
        state.apply_pod(&p).expect("support pod");
    }
    for policy in POLICIES {
        let plan = plan(&state, &config(policy));
        assert_binds(&state, &plan);
        let order: Vec<&str> = plan.support.iter().map(|s| s.pod.1.as_str()).collect();
        assert_eq!(
            order,
            ["new-master", "new-pserver-a", "new-pserver-b"],
            "{policy:?}"
        );
        assert!(plan.support.iter().all(|s| s.node.is_some()), "{policy:?}");
    }
    // 6 cores free: 3 held for the master and pservers, 3 for trainers.
    let plan = plan(&state, &config(Policy::Fulfillment));
    let grown: i32 = [&old, &new]
        .iter()
        .map(|key| plan.job(key).map_or(0, |j| j.target))
        .sum();
    assert_eq!(grown, 2 + 1 + 2);
}

#[test]
fn a_full_cluster_gives_room_back_for_a_new_jobs_master_and_pservers() {
    // a and b, 4 cores each, all taken by old's 8 trainers (min 1). New's master and two
    // pservers are pending: old shrinks so they get room, as a starving gang's trainers would.
    let mut state = four_core_nodes(&["a", "b"]);
    let old = job(&mut state, "old", (1, 8), 8);
    for index in 0..8 {
        let on = if index < 4 { "a" } else { "b" };
        state
            .apply_pod(&trainer("old", index, Some(on), &[]))
            .expect("trainer");
    }
    let new = job(&mut state, "new", (1, 2), 1);
    state
        .apply_pod(&trainer("new", 0, None, &[]))
        .expect("trainer");
    for (name, role) in [
        ("new-master", "paddle-job-master"),
        ("new-pserver-a", "paddle-job-pserver"),
        ("new-pserver-b", "paddle-job-pserver"),
    ] {
        let spec = PodSpec {
            labels: json!({ role: "new" }),
            created: "2026-01-01T00:00:00Z",
            ..PodSpec::default()
        };
        state.apply_pod(&pod(name, spec)).expect("support pod");
    }
    let plan = plan(&state, &config(Policy::Fulfillment));
    assert_binds(&state, &plan);
    assert!(
        plan.support.iter().all(|s| s.node.is_some()),
        "{:?}",
        plan.support
    );
    let old_plan = plan.job(&old).expect("old planned");
    let new_plan = plan.job(&new).expect("new planned");
    // 8 cores: 3 for the master and pservers, 5 for trainers (new's gang first; then fair
    // shares: new at 2 of 1..2 and old at 3 of 1..8 leave the least served best off).
    assert_eq!((old_plan.target, new_plan.target), (3, 2), "{plan:?}");
    assert_eq!(old_plan.reason, Reason::Reclaimed);
}

#[test]
fn explain_names_the_pod_limit_and_the_other_resource() {
    use super::explain::explain_all;
    let message = |state: &ClusterState, key: &JobKey| {
        let config = config(Policy::Fulfillment);
        let plan = plan(state, &config);
        let at = plan
            .jobs
            .iter()
            .position(|j| *j.key == *key)
            .expect("planned");
        explain_all(state, &plan, &config)[at].message.clone()
    };
    let mut state = ClusterState::new();
    state
        .apply_node(&node("a", "64", &[("pods", "3")], false))
        .expect("node a");
    let key = job(&mut state, "j", (1, 10), 1);
    let text = message(&state, &key);
    assert!(
        text.contains("does not fit: no node has a free pod slot;"),
        "{text}"
    );
    let mut state = ClusterState::new();
    state
        .apply_node(&node("r", "64", &[("rdma/hca", "2")], false))
        .expect("node r");
    let key = job(&mut state, "j", (1, 10), 1);
    let class = PodConstraints {
        extended: BTreeMap::from([("rdma/hca".to_string(), 1)]),
        ..PodConstraints::default()
    };
    state.set_trainer_class(&key, Some(Arc::new(class)));
    let text = message(&state, &key);
    assert!(
        text.contains("does not fit: no node has 1 rdma/hca free;"),
        "{text}"
    );
}
