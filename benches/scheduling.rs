//! The scheduler role in process: deciding the binds of one pass (`assign`) for 2,000 pending
//! trainer pods of 200 jobs on 1,000 nodes, and sending them (`Binder::bind_all`, each bind with
//! its `Scheduled` Event) through kube's client to a mock API server that answers at once. The
//! figures are the role's own cost per pass; an API server adds its latency per request (see
//! README for the emulator's figures).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, StatusCode};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use trainscale::api::{JobKey, Resources};
use trainscale::cluster::ClusterState;
use trainscale::daemon::leader::Fence;
use trainscale::daemon::scheduling::pods::SchedulingPods;
use trainscale::daemon::scheduling::{Binder, Limits, assign};
use trainscale::planner::{PlannerConfig, plan};
use trainscale::testkit::job_info;

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NODES: usize = 1_000;
const JOBS: usize = 200;
const TRAINERS: u32 = 10;

fn decode<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("generated object decodes")
}

fn cluster() -> (ClusterState, SchedulingPods) {
    let mut state = ClusterState::new();
    let mut pods = SchedulingPods::default();
    for n in 0..NODES {
        let node: Node = decode(json!({
            "metadata": {"name": format!("node-{n:04}"), "labels": {"zone": format!("z{}", n % 4)}},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8", "pods": "110"}},
        }));
        state.apply_node(&node).expect("generated node reads");
    }
    let spec = json!({"schedulerName": "trainscale", "containers": [{"name": "t", "resources": {
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}}]});
    for j in 0..JOBS {
        let name = format!("job-{j:03}");
        let key = JobKey::new("ml", name.as_str());
        let trainer = Resources::new(8000, 32 << 30, 1);
        state.set_training_job(
            key,
            Some(job_info(
                TRAINERS as i32,
                TRAINERS as i32,
                trainer,
                j as i64,
            )),
        );
        let batch: Job = decode(json!({
            "metadata": {"name": format!("{name}-trainer"), "namespace": "ml", "ownerReferences": [{
                "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob", "name": name,
                "uid": "u", "controller": true}]},
            "spec": {"parallelism": TRAINERS, "completionMode": "Indexed", "template": {"spec": spec}},
        }));
        state.apply_batch_job(&batch);
        for i in 0..TRAINERS {
            let pod: Pod = decode(json!({
                "metadata": {"name": format!("{name}-trainer-{i}"), "namespace": "ml",
                    "labels": {"paddle-job": name, "batch.kubernetes.io/job-completion-index": i.to_string()}},
                "spec": spec,
                "status": {"phase": "Pending"},
            }));
            state.apply_pod(&pod).expect("generated pod reads");
            pods.apply(&pod);
        }
    }
    (state, pods)
}

fn bench(c: &mut Criterion) {
    let (state, pods) = cluster();
    let plan = plan(&state, &PlannerConfig::default());
    let pending = JOBS * TRAINERS as usize;
    let binds = assign(&state, &pods, &plan, "trainscale").binds;
    assert_eq!(binds.len(), pending, "every pending pod is placed");
    let mut group = c.benchmark_group("scheduling");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function(
        format!("assign {pending} pending pods ({JOBS} jobs, {NODES} nodes)"),
        |b| b.iter(|| assign(black_box(&state), &pods, &plan, "trainscale")),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime starts");
    group.bench_function(
        format!("bind_all {pending} pods to a mock API server"),
        |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += runtime.block_on(async {
                        let (service, mut handle) =
                            tower_test::mock::pair::<Request<Body>, Response<Body>>();
                        let server = tokio::spawn(async move {
                            while let Some((_, send)) = handle.next_request().await {
                                send.send_response(
                                    Response::builder()
                                        .status(StatusCode::CREATED)
                                        .body(Body::from(b"{}".to_vec()))
                                        .expect("response builds"),
                                );
                            }
                        });
                        let binder = Binder::new(
                            Client::new(service, "default"),
                            "trainscale",
                            "bench",
                            Fence::Always,
                        );
                        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
                        let limits = Limits {
                            until: tokio::time::Instant::now() + Duration::from_secs(3600),
                            stop,
                        };
                        let started = Instant::now();
                        let (outcomes, cut) = binder.bind_all(&binds, &limits).await;
                        let took = started.elapsed();
                        assert_eq!((outcomes.len(), cut), (pending, None));
                        drop(binder);
                        server.abort();
                        took
                    });
                }
                total
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
