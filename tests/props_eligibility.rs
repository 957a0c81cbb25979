//! Property: the planner places trainers only on nodes kube-scheduler's static filters let them
//! use (taints and tolerations, node selectors, required node affinity, cordons), whatever the
//! policy; checked against the filters evaluated directly, pod by node.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use proptest::prelude::*;
use serde_json::{Value, json};
use trainscale::api::{JobKey, Resources};
use trainscale::cluster::ClusterState;
use trainscale::cluster::filters::{NodeTraits, PodConstraints, check_static};
use trainscale::planner::{PlannerConfig, Policy, plan};

const GIB: i64 = 1 << 30;

/// A node: zone label 0..3, taint none/a/b, cordoned or not, 8 GPUs.
fn node(i: usize, zone: u8, taint: u8, cordoned: bool) -> Node {
    let taints = match taint {
        0 => json!([]),
        t => {
            json!([{"key": "dedicated", "value": format!("t{t}"), "effect": if t == 1 { "NoSchedule" } else { "NoExecute" }}])
        }
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("n{i:02}"), "labels": {"zone": format!("z{zone}")}},
        "spec": {"taints": taints, "unschedulable": cordoned},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}},
    }))
    .unwrap()
}

/// A trainer template: selector on a zone or not, affinity NotIn a zone or not, toleration of
/// taint t1, of every taint, or none.
fn template(gpus: i64, selector: Option<u8>, not_in: Option<u8>, toleration: u8) -> Value {
    let mut spec = json!({"schedulerName": "trainscale", "containers": [{"name": "t", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()}}}]});
    if let Some(z) = selector {
        spec["nodeSelector"] = json!({"zone": format!("z{z}")});
    }
    if let Some(z) = not_in {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": [format!("z{z}")]}]}]}}});
    }
    spec["tolerations"] = match toleration {
        1 => {
            json!([{"key": "dedicated", "operator": "Equal", "value": "t1", "effect": "NoSchedule"}])
        }
        2 => json!([{"operator": "Exists"}]),
        _ => json!([]),
    };
    spec
}

fn trainer_job(name: &str, parallelism: i32, spec: &Value) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-trainer"), "namespace": "ns",
            "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                "name": name, "uid": "u", "controller": true}]},
        "spec": {"parallelism": parallelism, "completionMode": "Indexed", "template": {"spec": spec}},
    }))
    .unwrap()
}

type JobSpec = (i64, i32, i32, Option<u8>, Option<u8>, u8);

fn arb_job() -> impl Strategy<Value = JobSpec> {
    (
        prop_oneof![Just(0i64), Just(1), Just(2), Just(4)],
        1i32..4,
        0i32..12,
        proptest::option::of(0u8..3),
        proptest::option::of(0u8..3),
        0u8..3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn trainers_land_only_on_nodes_their_filters_pass(
        nodes in proptest::collection::vec((0u8..3, 0u8..3, proptest::bool::weighted(0.1)), 1..10),
        jobs in proptest::collection::vec(arb_job(), 1..8),
        policy in prop_oneof![Just(Policy::Fulfillment), Just(Policy::Static)],
    ) {
        let mut state = ClusterState::new();
        let mut traits = Vec::new();
        for (i, (zone, taint, cordoned)) in nodes.iter().enumerate() {
            let n = node(i, *zone, *taint, *cordoned);
            state.apply_node(&n).unwrap();
            traits.push(NodeTraits::read(&n).unwrap());
        }
        let mut constraints = Vec::new();
        for (k, (gpus, min, extra, selector, not_in, toleration)) in jobs.iter().enumerate() {
            let name = format!("j{k}");
            let key = JobKey::new("ns", name.as_str());
            let trainer = Resources::new(1000, GIB, *gpus);
            let info = trainscale::testkit::job_info(*min, min + extra, trainer, k as i64);
            state.set_training_job(key.clone(), Some(info));
            let spec = template(*gpus, *selector, *not_in, *toleration);
            state.apply_batch_job(&trainer_job(&name, *min, &spec));
            let pod_spec = serde_json::from_value(spec).unwrap();
            constraints.push((key, PodConstraints::read(&pod_spec, "t", "spec").unwrap()));
        }
        let config = PlannerConfig { policy, ..PlannerConfig::default() };
        let plan = plan(&state, &config);
        for job in &plan.jobs {
            let (_, c) = constraints.iter().find(|(k, _)| *k == *job.key).unwrap();
            for p in &job.placements {
                let name = &state.node(p.node).unwrap().name;
                let t = traits.iter().find(|t| *t.name == **name).unwrap();
                prop_assert!(
                    check_static(c, t).is_ok(),
                    "{} placed on {} which its filters refuse: {:?}",
                    job.key, name, check_static(c, t)
                );
            }
        }
    }
}
