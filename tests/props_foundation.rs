//! Property tests: quantity parsing against simple references, and incremental ClusterState
//! updates against a state rebuilt from the final set of objects.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;
use trainscale::api::{JobKey, Quantity, TrainingJob};
use trainscale::cluster::ClusterState;
use trainscale::planner::{PlannerConfig, Policy, ScalePlan, plan};

// ---------- quantities ----------

proptest! {
    #[test]
    fn milli_suffix_is_exact(x in 0i64..10_000_000_000) {
        prop_assert_eq!(Quantity::parse(&format!("{x}m")).unwrap().milli_ceil(), x);
    }

    #[test]
    fn decimal_fraction_is_exact(a in 0i64..1_000_000, b in 0i64..1000) {
        let q = Quantity::parse(&format!("{a}.{b:03}")).unwrap();
        prop_assert_eq!(q.milli_ceil(), a * 1000 + b);
        // Value() rounds up unless the fraction is zero.
        prop_assert_eq!(q.value_ceil(), a + i64::from(b > 0));
    }

    #[test]
    fn binary_suffixes_multiply_by_powers_of_two(x in 0i64..1_000_000, k in 0usize..4) {
        let suffix = ["Ki", "Mi", "Gi", "Ti"][k];
        let q = Quantity::parse(&format!("{x}{suffix}")).unwrap();
        prop_assert_eq!(q.value_ceil(), x << (10 * (k + 1)));
    }

    #[test]
    fn decimal_suffixes_and_exponents_agree(x in 0i64..1_000_000, k in 0usize..4) {
        let suffix = ["k", "M", "G", "T"][k];
        let by_suffix = Quantity::parse(&format!("{x}{suffix}")).unwrap();
        let by_exponent = Quantity::parse(&format!("{x}e{}", 3 * (k + 1))).unwrap();
        prop_assert_eq!(by_suffix, by_exponent);
        prop_assert_eq!(by_suffix.value_ceil(), x * 10i64.pow(3 * (k as u32 + 1)));
    }

    #[test]
    fn display_round_trips(nanos in 0i64..i64::MAX) {
        let q = Quantity::parse(&format!("{nanos}n")).unwrap();
        prop_assert_eq!(Quantity::parse(&q.to_string()).unwrap(), q);
    }

    #[test]
    fn order_follows_the_numbers(a in 0i64..1_000_000_000, b in 0i64..1_000_000_000) {
        let qa = Quantity::parse(&format!("{a}m")).unwrap();
        let qb = Quantity::parse(&format!("{}", b as f64 / 1000.0)).unwrap();
        prop_assert_eq!(qa.cmp_exact(qb), a.cmp(&b));
    }

    #[test]
    fn garbage_never_panics(text in "\\PC{0,12}") {
        let _ = Quantity::parse(&text);
    }
}

// ---------- ClusterState ----------

const NODES: usize = 4;
const PODS: usize = 12;
const JOBS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Node {
        i: usize,
        cpu: i64,
        mem: i64,
        gpu: i64,
        ready: bool,
    },
    DeleteNode(usize),
    Pod {
        i: usize,
        node: Option<usize>,
        cpu: i64,
        gpu: i64,
        phase: usize,
        job: Option<usize>,
        terminating: bool,
    },
    DeletePod(usize),
    TrainingJob {
        j: usize,
        min: i32,
        extra: i32,
    },
    DeleteTrainingJob(usize),
    TrainerJob {
        j: usize,
        parallelism: i32,
    },
    DeleteTrainerJob(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..NODES, 1i64..64, 1i64..256, 0i64..9, any::<bool>()).prop_map(
            |(i, cpu, mem, gpu, ready)| Op::Node {
                i,
                cpu,
                mem,
                gpu,
                ready
            }
        ),
        (0..NODES).prop_map(Op::DeleteNode),
        (
            0..PODS,
            proptest::option::of(0..NODES),
            0i64..8000,
            0i64..3,
            0usize..4,
            proptest::option::of(0..JOBS),
            proptest::bool::weighted(0.15),
        )
            .prop_map(|(i, node, cpu, gpu, phase, job, terminating)| Op::Pod {
                i,
                node,
                cpu,
                gpu,
                phase,
                job,
                terminating
            }),
        (0..PODS).prop_map(Op::DeletePod),
        (0..JOBS, 1i32..4, 0i32..4).prop_map(|(j, min, extra)| Op::TrainingJob { j, min, extra }),
        (0..JOBS).prop_map(Op::DeleteTrainingJob),
        (0..JOBS, 0i32..8).prop_map(|(j, parallelism)| Op::TrainerJob { j, parallelism }),
        (0..JOBS).prop_map(Op::DeleteTrainerJob),
    ]
}

fn quantities(pairs: &[(&str, String)]) -> BTreeMap<String, KubeQuantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), KubeQuantity(v.clone())))
        .collect()
}

fn node(i: usize, cpu: i64, mem: i64, gpu: i64, ready: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(format!("node-{i}")),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: Some(!ready && cpu % 2 == 0),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(quantities(&[
                ("cpu", cpu.to_string()),
                ("memory", format!("{mem}Gi")),
                ("nvidia.com/gpu", gpu.to_string()),
            ])),
            ..Default::default()
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn pod(
    i: usize,
    node: Option<usize>,
    cpu: i64,
    gpu: i64,
    phase: usize,
    job: Option<usize>,
    terminating: bool,
) -> Pod {
    let labels = job.map(|j| BTreeMap::from([("paddle-job".to_string(), format!("job-{j}"))]));
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{i}")),
            namespace: Some("ns".into()),
            labels,
            deletion_timestamp: terminating.then(|| Time(Default::default())),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(|n| format!("node-{n}")),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(&[
                        ("cpu", format!("{cpu}m")),
                        ("memory", "1Gi".into()),
                        ("nvidia.com/gpu", gpu.to_string()),
                    ])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(["Pending", "Running", "Succeeded", "Failed"][phase].into()),
            ..Default::default()
        }),
    }
}

fn training_job(j: usize, min: i32, extra: i32) -> TrainingJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": format!("job-{j}"), "namespace": "ns"},
        "spec": {"fault_tolerant": true, "pserver": {"min-instance": 1, "max-instance": 1},
                 "trainer": {"min-instance": min, "max-instance": min + extra,
                             "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

fn trainer_job(j: usize, parallelism: i32) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(format!("job-{j}-trainer")),
            namespace: Some("ns".into()),
            owner_references: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "paddlepaddle.org/v1alpha1".into(),
                    kind: "TrainingJob".into(),
                    name: format!("job-{j}"),
                    uid: format!("uid-{j}"),
                    controller: Some(true),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            parallelism: Some(parallelism),
            template: k8s_openapi::api::core::v1::PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([("paddle-job".into(), format!("job-{j}"))])),
                    ..Default::default()
                }),
                spec: None,
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The final objects after a sequence of operations.
#[derive(Default)]
struct World {
    nodes: BTreeMap<usize, Node>,
    pods: BTreeMap<usize, Pod>,
    tjs: BTreeMap<usize, TrainingJob>,
    trainer_jobs: BTreeMap<usize, Job>,
}

fn apply(state: &mut ClusterState, world: &mut World, op: &Op) {
    match op.clone() {
        Op::Node {
            i,
            cpu,
            mem,
            gpu,
            ready,
        } => {
            let n = node(i, cpu, mem, gpu, ready);
            state.apply_node(&n).unwrap();
            world.nodes.insert(i, n);
        }
        Op::DeleteNode(i) => {
            state.delete_node(&format!("node-{i}"));
            world.nodes.remove(&i);
        }
        Op::Pod {
            i,
            node,
            cpu,
            gpu,
            phase,
            job,
            terminating,
        } => {
            let p = pod(i, node, cpu, gpu, phase, job, terminating);
            state.apply_pod(&p).unwrap();
            world.pods.insert(i, p);
        }
        Op::DeletePod(i) => {
            state.delete_pod("ns", &format!("pod-{i}"));
            world.pods.remove(&i);
        }
        Op::TrainingJob { j, min, extra } => {
            let t = training_job(j, min, extra);
            state.apply_training_job(&t).unwrap();
            world.tjs.insert(j, t);
        }
        Op::DeleteTrainingJob(j) => {
            state.delete_training_job("ns", &format!("job-{j}"));
            world.tjs.remove(&j);
        }
        Op::TrainerJob { j, parallelism } => {
            let b = trainer_job(j, parallelism);
            state.apply_batch_job(&b);
            world.trainer_jobs.insert(j, b);
        }
        Op::DeleteTrainerJob(j) => {
            if let Some(b) = world.trainer_jobs.remove(&j) {
                state.delete_batch_job(&b);
            }
        }
    }
}

/// Everything observable about a state, keyed by names rather than internal ids.
fn observe(state: &ClusterState) -> String {
    let mut out = String::new();
    for (_, n) in state.nodes() {
        out += &format!(
            "{} sched={} free={:?} cap={:?} pods={}\n",
            n.name,
            n.schedulable(),
            n.free(),
            n.capacity(),
            n.pods
        );
    }
    for (key, slot) in state.job_slots() {
        let by_node: BTreeMap<String, u32> = slot
            .trainers
            .bound_by_node
            .iter()
            .map(|(id, c)| (state.node(*id).unwrap().name.to_string(), *c))
            .collect();
        out += &format!(
            "{key} info={} current={} pending={} bound={} term={} fin={} by_node={by_node:?}\n",
            slot.info.is_some(),
            slot.current(),
            slot.pending_trainers(),
            slot.trainers.bound,
            slot.trainers.terminating,
            slot.trainers.finished,
        );
    }
    out += &format!(
        "bound={:?} pending={:?} pods={}\n",
        state.bound_requests(),
        state.pending_requests(),
        state.pod_count()
    );
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn incremental_equals_rebuilt(ops in proptest::collection::vec(op(), 1..80)) {
        let mut incremental = ClusterState::new();
        let mut world = World::default();
        for op in &ops {
            apply(&mut incremental, &mut world, op);
        }
        // Rebuild from the final objects, in a different order (jobs and pods before nodes).
        let mut rebuilt = ClusterState::new();
        for t in world.tjs.values().rev() {
            rebuilt.apply_training_job(t).unwrap();
        }
        for p in world.pods.values().rev() {
            rebuilt.apply_pod(p).unwrap();
        }
        for b in world.trainer_jobs.values() {
            rebuilt.apply_batch_job(b);
        }
        for n in world.nodes.values().rev() {
            rebuilt.apply_node(n).unwrap();
        }
        prop_assert_eq!(observe(&incremental), observe(&rebuilt));

        // The same objects give the same plan, however the state was built (node ids may
        // differ, so plans are compared by node name).
        for policy in [Policy::Fulfillment, Policy::Edl, Policy::Static] {
            let config = PlannerConfig { policy, ..PlannerConfig::default() };
            let (a, b) = (plan(&incremental, &config), plan(&rebuilt, &config));
            prop_assert_eq!(a.named_jobs(&incremental), b.named_jobs(&rebuilt));
            let trainers = |p: &ScalePlan| p.jobs.iter().map(|j| j.trainer).collect::<Vec<_>>();
            prop_assert_eq!(trainers(&a), trainers(&b));
        }
    }
}

#[test]
fn terminating_pods_hold_resources_and_missing_pods_are_pending() {
    let mut s = ClusterState::new();
    s.apply_node(&node(0, 8, 64, 0, true)).unwrap();
    s.apply_training_job(&training_job(0, 1, 3)).unwrap();
    s.apply_batch_job(&trainer_job(0, 4));
    s.apply_pod(&pod(0, Some(0), 1000, 0, 1, Some(0), false))
        .unwrap();
    s.apply_pod(&pod(1, Some(0), 1000, 0, 1, Some(0), true))
        .unwrap();
    let slot = s.job(&JobKey::new("ns", "job-0")).unwrap();
    assert_eq!(slot.current(), 4);
    assert_eq!(slot.trainers.bound, 1);
    assert_eq!(slot.trainers.terminating, 1);
    // Four wanted, one bound: three more are demand (pods not yet created).
    assert_eq!(slot.pending_trainers(), 3);
    let id = s.node_id_of("node-0").unwrap();
    assert_eq!(s.node(id).unwrap().free().cpu_milli, 6000);
}
