//! ClusterState update cost: one pod add + delete on a 10,000-node, 100,000-pod state (a
//! TrainingJob's trainer, and a Kubeflow PyTorchJob's worker found by its labels).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use trainscale::testkit::{ClusterShape, generate, node_name};

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn trainer_pod(node: &str) -> Pod {
    let requests = BTreeMap::from([
        ("cpu".to_string(), Quantity("4".into())),
        ("memory".to_string(), Quantity("16Gi".into())),
        ("nvidia.com/gpu".to_string(), Quantity("1".into())),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some("bench-trainer-0".into()),
            namespace: Some("team-7".into()),
            labels: Some(BTreeMap::from([(
                "paddle-job".to_string(),
                "job-00007".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "trainer".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(requests),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    }
}

fn bench(c: &mut Criterion) {
    let mut state = generate(ClusterShape {
        nodes: 10_000,
        jobs: 5_000,
        bound_per_job: 10,
        other_pods_per_node: 9,
        seed: 7,
        constrained: false,
    });
    assert!(state.pod_count() >= 100_000, "{}", state.pod_count());
    let pod = trainer_pod(&node_name(4242));
    c.bench_function("pod add+delete (10k nodes, 100k pods)", |b| {
        b.iter(|| {
            state.apply_pod(black_box(&pod)).ok();
            state.delete_pod("team-7", "bench-trainer-0");
        })
    });
    let mut worker = trainer_pod(&node_name(4242));
    worker.metadata.labels = Some(BTreeMap::from([
        (
            "training.kubeflow.org/job-name".to_string(),
            "elastic-7".to_string(),
        ),
        (
            "training.kubeflow.org/replica-type".to_string(),
            "worker".to_string(),
        ),
    ]));
    c.bench_function(
        "PyTorchJob worker pod add+delete (10k nodes, 100k pods)",
        |b| {
            b.iter(|| {
                state.apply_pod(black_box(&worker)).ok();
                state.delete_pod("team-7", "bench-trainer-0");
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
