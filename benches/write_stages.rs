//! A pass's job write stages through kube's client to a mock API server that answers every
//! request after a fixed latency (`LATENCY`, as an API server across a network does):
//! `Actuator::apply_all` for `JOBS` TrainingJob rescales (each: the trainer Job's patch, the
//! status read and write of its scale record, an Event) and `Actuator::write_sizing_all` for as
//! many sizing condition writes. The figure is the stage's wall time; README has them.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use trainscale::api::JobKey;
use trainscale::daemon::sizing::{Decision, Desired, SizingUpdate};
use trainscale::daemon::store::TrainerJobRef;
use trainscale::daemon::{Actuator, Rescale, WriteLimits};
use trainscale::planner::Reason;

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const JOBS: usize = 200;
const LATENCY: Duration = Duration::from_millis(2);

const JOBS_PATH: &str = "/apis/batch/v1/namespaces/ml/jobs/";
const TJS_PATH: &str = "/apis/paddlepaddle.org/v1alpha1/namespaces/ml/trainingjobs/";

fn rescale(j: usize) -> Rescale {
    let name = format!("job-{j:04}");
    Rescale {
        key: JobKey::new("ml", name.as_str()),
        uid: Some(format!("uid-{name}")),
        resource_version: None,
        trainer_job: Some(TrainerJobRef {
            namespace: "ml".to_string(),
            name: format!("{name}-trainer"),
            resource_version: Some("10".to_string()),
            indexed: true,
            parallelism: Some(2),
            at_zero: false,
            queue: None,
        }),
        size_at: None,
        current: 2,
        target: 4,
        reason: Reason::ScaleUp,
    }
}

fn sizing(j: usize) -> SizingUpdate {
    SizingUpdate {
        key: JobKey::new("ml", format!("job-{j:04}").as_str()),
        decision: Decision {
            current: 2,
            target: 2,
            min: 4,
            max: 8,
            reason: Reason::Starving,
        },
        resource_version: Some("7".to_string()),
        desired: vec![Desired {
            type_: "ScalingLimited",
            status: "True".to_string(),
            reason: "GangDoesNotFit".to_string(),
            message: "waits for its gang".to_string(),
        }],
        existing: Vec::<Condition>::new(),
        write: true,
    }
}

/// What the API server answers `method` `path` with `body`: the object as written.
fn answer(method: &Method, path: &str, body: &Value) -> (StatusCode, Value) {
    if let Some(name) = path.strip_prefix(JOBS_PATH) {
        let parallelism = body["spec"]["parallelism"].as_i64().unwrap_or(0);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "11"},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "completionMode": "Indexed", "template": {"spec": {"containers": []}}}});
        return (StatusCode::OK, job);
    }
    if let Some(name) = path
        .strip_prefix(TJS_PATH)
        .and_then(|rest| rest.strip_suffix("/status"))
    {
        let version = if method == Method::GET { "20" } else { "21" };
        let job = json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": version},
            "spec": {"trainer": {"min-instance": 1, "max-instance": 8}},
            "status": {"phase": "Running"}});
        return (StatusCode::OK, job);
    }
    (StatusCode::CREATED, body.clone())
}

/// Serves every request after `LATENCY`, each on its own task (requests in flight overlap).
async fn serve(mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>) {
    while let Some((request, send)) = handle.next_request().await {
        tokio::spawn(async move {
            let (method, path) = (request.method().clone(), request.uri().path().to_string());
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            tokio::time::sleep(LATENCY).await;
            let (status, answer) = answer(&method, &path, &body);
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
                    .expect("response builds"),
            );
        });
    }
}

/// The wall time of `stage` run by an actuator against the mock API server.
async fn timed_stage(
    stage: impl AsyncFnOnce(&Actuator, WriteLimits, &tokio::sync::watch::Receiver<bool>),
) -> Duration {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle));
    let actuator = Actuator::new(Client::new(service, "default"), "bench");
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let limits = WriteLimits::per_job(Duration::from_secs(60));
    let started = Instant::now();
    stage(&actuator, limits, &stop).await;
    let took = started.elapsed();
    drop(actuator);
    server.abort();
    took
}

fn bench(c: &mut Criterion) {
    let rescales: Vec<Rescale> = (0..JOBS).map(rescale).collect();
    let updates: Vec<SizingUpdate> = (0..JOBS).map(sizing).collect();
    let writes: Vec<(&SizingUpdate, Option<String>)> =
        updates.iter().map(|u| (u, Some("7".to_string()))).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime starts");
    let mut group = c.benchmark_group("write_stages");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));
    let latency_ms = LATENCY.as_millis();
    group.bench_function(
        format!("apply_all {JOBS} rescales, {latency_ms} ms a request"),
        |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        runtime.block_on(timed_stage(async |actuator, limits, stop| {
                            let outcomes = actuator.apply_all(&rescales, limits, stop).await;
                            assert_eq!(outcomes.len(), JOBS);
                            assert!(outcomes.iter().all(|(_, o)| o.reason.is_empty()));
                        }))
                    })
                    .sum()
            })
        },
    );
    group.bench_function(
        format!("write_sizing_all {JOBS} jobs, {latency_ms} ms a request"),
        |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        runtime.block_on(timed_stage(async |actuator, limits, stop| {
                            let written = actuator.write_sizing_all(&writes, limits, stop).await;
                            assert_eq!(written.len(), JOBS);
                        }))
                    })
                    .sum()
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
