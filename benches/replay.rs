//! Replay of the watch path: a 10,000-node, 100,000-pod, 5,000-job cluster fed to the daemon's
//! store as the watchers deliver it (Init, one InitApply per object decoded from JSON bytes,
//! InitDone per kind), timed to "ready" (every cache synced). Objects are generated one at a time
//! and dropped after they are applied, as on the wire, so resident memory is the store's.
//!
//! `cargo bench --bench replay` first replays once and prints the peak resident set (VmHWM from
//! /proc/self/status), then lets criterion time the replay. Under `cargo test` it runs a small
//! cluster once. `REPLAY_ONLY=100000,1000000,50000 cargo bench --bench replay` replays that many
//! nodes, pods and jobs once and stops (the 1,000,000-pod figure in README). Each replay is
//! followed by [`PASSES_AFTER_REPLAY`] passes on the ready store (`daemon::pass::prepare`: plan,
//! binds, rescales, sizing), each timed, with the peak resident set they leave: the store's memory
//! and a pass's together. Between passes the store takes the watch events of what the pass asked
//! for (`settle`), so the later passes are steady.
//!
//! The daemon's operator holds more per job than the store: the Controller's own cache of every
//! TrainingJob, and the caches of what it creates for each (the trainers ConfigMap, the master
//! and pserver ReplicaSets, the trainer Job), in the shapes its watches keep. Once the store is
//! ready the replay fills those for every job (`operator_side`: each job's children as
//! `operator::desired` builds them, with a status as the API server returns them) and holds them
//! through the passes, so the resident sets reported from then on are the whole daemon's.
//!
//! `event_lag_during_pass` measures the lag of a watch event that arrives as a pass starts on
//! that cluster: the pass plans on the store's snapshot in another thread, as the daemon's
//! blocking task does, and the event waits in the daemon's own `EventGate` until the pass lets go
//! of the snapshot, then is applied; the figure is the event's arrival-to-applied time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use trainscale::api::{JobKey, JobKind, TrainingJob};
use trainscale::daemon::gate::{EventGate, SharedStore, lock};
use trainscale::daemon::pass::{PassWork, prepare};
use trainscale::daemon::scheduling::Settings;
use trainscale::daemon::sizing::merged;
use trainscale::daemon::{Store, WatchEvent};
use trainscale::operator::{CacheWriters, Caches, OperatorConfig, PodGroupMode, desired};
use trainscale::planner::{PlannerConfig, plan};

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy)]
struct Scale {
    nodes: usize,
    pods: usize,
    jobs: usize,
}

const FULL: Scale = Scale {
    nodes: 10_000,
    pods: 100_000,
    jobs: 5_000,
};
const SMOKE: Scale = Scale {
    nodes: 100,
    pods: 1_000,
    jobs: 50,
};
const TRAINERS_PER_JOB: usize = 8;
/// The scheduler the trainer pods name; the passes after a replay schedule them.
const SCHEDULER: &str = "trainscale";
/// Passes planned on the replayed store before its memory is reported.
const PASSES_AFTER_REPLAY: usize = 5;

fn decode<T: DeserializeOwned>(value: &Value) -> T {
    let bytes = serde_json::to_vec(value).expect("generated JSON serializes");
    serde_json::from_slice(&bytes).expect("generated object decodes")
}

fn node(i: usize) -> Node {
    let mut allocatable = json!({"cpu": "64", "memory": "256Gi", "pods": "110"});
    if i.is_multiple_of(4) {
        allocatable["nvidia.com/gpu"] = json!("8");
    }
    decode(&json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i:05}"), "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": format!("node-{i:05}"), "topology.kubernetes.io/zone": "z1"}},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {"allocatable": allocatable.clone(), "capacity": allocatable,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    }))
}

fn pod(i: usize, scale: Scale) -> Pod {
    let trainer_pods = scale.jobs * TRAINERS_PER_JOB;
    let pending = i.is_multiple_of(50);
    let node = (!pending).then(|| node_name(i % scale.nodes));
    if i < trainer_pods {
        return trainer_pod(i / TRAINERS_PER_JOB, i % TRAINERS_PER_JOB, node.as_deref());
    }
    let labels = json!({"app": "batch"});
    let (namespace, name) = (format!("svc-{}", i % 100), format!("pod-{i:06}"));
    pod_object(&namespace, &name, labels, node.as_deref(), None)
}

fn node_name(n: usize) -> String {
    format!("node-{n:05}")
}

/// Trainer `index` of job `job`, bound to `node` or pending. Trainer pods name trainscale's
/// scheduler and carry their completion index, as the operator's Indexed trainer Jobs create
/// them: the scheduler role binds each to the node planned for its position.
fn trainer_pod(job: usize, index: usize, node: Option<&str>) -> Pod {
    let labels = json!({"paddle-job": format!("job-{job:05}"), "batch.kubernetes.io/job-name": format!("job-{job:05}-trainer"),
                        "batch.kubernetes.io/job-completion-index": index.to_string()});
    let name = format!("job-{job:05}-trainer-{index}");
    pod_object(
        &format!("team-{}", job % 50),
        &name,
        labels,
        node,
        Some(SCHEDULER),
    )
}

fn pod_object(
    namespace: &str,
    name: &str,
    labels: Value,
    node: Option<&str>,
    scheduler: Option<&str>,
) -> Pod {
    let mut spec = json!({"containers": [
        {"name": "main", "image": "registry.example/app:1.0",
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
        {"name": "sidecar", "image": "registry.example/sidecar:1.0",
         "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}
    ]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    if let Some(scheduler) = scheduler {
        spec["schedulerName"] = json!(scheduler);
    }
    decode(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1", "uid": format!("uid-pod-{namespace}-{name}"),
                     "creationTimestamp": "2024-05-01T00:00:00Z", "labels": labels},
        "spec": spec,
        "status": {"phase": if node.is_some() {"Running"} else {"Pending"}, "podIP": "10.0.0.1"}
    }))
}

fn training_job(j: usize) -> DynamicObject {
    decode(&training_job_json(j))
}

/// TrainingJob `j` as the API server sends it.
fn training_job_json(j: usize) -> Value {
    json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": format!("job-{j:05}"), "namespace": format!("team-{}", j % 50),
                     "resourceVersion": "1", "uid": format!("uid-tj-{j}"), "creationTimestamp": "2024-05-01T00:00:00Z"},
        "spec": {"image": "paddlepaddle/paddle:latest", "fault_tolerant": true,
                 "frame_work": {"name": "paddle", "type": "nccl2"},
                 "trainer": {"entrypoint": "python train.py", "min-instance": 2, "max-instance": 16,
                             "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                             "replicaSpec": {"spec": {"parallelism": TRAINERS_PER_JOB, "template": {"spec": {"containers": []}}}}}},
        "status": {"phase": "Running"}
    })
}

fn trainer_job(j: usize, parallelism: usize, version: u64) -> Job {
    decode(&json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("job-{j:05}-trainer"), "namespace": format!("team-{}", j % 50),
                     "resourceVersion": version.to_string(),
                     "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                                          "name": format!("job-{j:05}"), "uid": format!("uid-tj-{j}"), "controller": true}]},
        "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                 "template": {"metadata": {"labels": {"paddle-job": format!("job-{j:05}")}},
                              "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "trainer", "image": "paddle"}]}}}
    }))
}

/// The job number in a generated name (`job-00042`, `job-00042-trainer-3`).
fn job_number(name: &str) -> Option<usize> {
    name.strip_prefix("job-")?.get(..5)?.parse().ok()
}

/// What the cluster does with a pass's work before the next pass, as its watch events: each
/// rescale's trainer Job at its target, and the Job controller's pods for it (new trainers
/// pending, removed ones deleted); each bind's pod on its node; each sizing update of a job not
/// rescaled written.
/// Returns how many events that was.
fn settle(store: &mut Store, work: &PassWork, version: u64) -> usize {
    let mut events = 0;
    for r in &work.rescales {
        let Some(j) = job_number(&r.key.name) else {
            continue;
        };
        let target = r.target.max(0) as usize;
        let current = r.current.max(0) as usize;
        store.handle(WatchEvent::Job(Event::Apply(trainer_job(
            j, target, version,
        ))));
        events += 1;
        for index in target.min(current)..target.max(current) {
            let pod = trainer_pod(j, index, None);
            store.handle(WatchEvent::Pod(if target > current {
                Event::Apply(pod)
            } else {
                Event::Delete(pod)
            }));
            events += 1;
        }
    }
    for b in &work.assignments.binds {
        let Some((j, index)) = job_number(&b.pod.1).zip(
            b.pod
                .1
                .rsplit('-')
                .next()
                .and_then(|i| i.parse::<usize>().ok()),
        ) else {
            continue;
        };
        store.handle(WatchEvent::Pod(Event::Apply(trainer_pod(
            j,
            index,
            Some(&b.node),
        ))));
        events += 1;
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    // A job rescaled this pass gets its conditions in the next (as the runner leaves it).
    let rescaled: std::collections::HashSet<&JobKey> =
        work.rescales.iter().map(|r| &r.key).collect();
    for u in work.sizing.iter().filter(|u| !rescaled.contains(&u.key)) {
        // As the runner records a write: the conditions written, at the version planned.
        let written = u.write.then(|| {
            let conditions = merged(&u.existing, &u.desired, now);
            ((None, conditions), u.resource_version.as_deref())
        });
        store.mark_explained(&u.key, u.decision, written);
    }
    events
}

fn list<K>(store: &mut Store, wrap: fn(Event<K>) -> WatchEvent, items: impl Iterator<Item = K>) {
    store.handle(wrap(Event::Init));
    for item in items {
        store.handle(wrap(Event::InitApply(item)));
    }
    store.handle(wrap(Event::InitDone));
}

/// Replays a whole cluster into a fresh store; returns it ready.
fn replay(scale: Scale) -> Store {
    let mut store = Store::new();
    list(&mut store, WatchEvent::Node, (0..scale.nodes).map(node));
    list(&mut store, WatchEvent::PriorityClass, std::iter::empty());
    list(
        &mut store,
        |e| WatchEvent::JobObject(JobKind::PaddleJob, e),
        std::iter::empty(),
    );
    list(
        &mut store,
        |e| WatchEvent::JobObject(JobKind::TrainingJob, e),
        (0..scale.jobs).map(training_job),
    );
    list(
        &mut store,
        WatchEvent::Job,
        (0..scale.jobs).map(|j| trainer_job(j, TRAINERS_PER_JOB, 1)),
    );
    list(
        &mut store,
        WatchEvent::Pod,
        (0..scale.pods).map(|i| pod(i, scale)),
    );
    assert!(store.synced());
    store
}

/// One pass on the store's snapshot in another thread; an event (`pod`) arrives as it starts.
/// Returns the event's lag: until the pass has let go and the gate has applied it.
fn event_lag_during_pass(shared: &SharedStore, pod: Pod) -> Duration {
    let snapshot = Arc::clone(&lock(shared));
    let pass = std::thread::spawn(move || {
        let work = prepare(&snapshot, &PlannerConfig::default(), None);
        drop(snapshot);
        work.rescales.len()
    });
    let mut gate = EventGate::default();
    gate.hold(WatchEvent::Pod(Event::Apply(pod)));
    let _ = pass.join();
    let applied = gate
        .apply(shared, |store, event| {
            store.handle(event);
        })
        .expect("the pass let go of the snapshot");
    assert_eq!(applied.events, 1);
    applied.max_lag
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn report_memory(scale: Scale) {
    let before = proc_status_kib("VmRSS:").unwrap_or(0);
    let started = Instant::now();
    let store = replay(scale);
    let elapsed = started.elapsed();
    let peak = proc_status_kib("VmHWM:").unwrap_or(0);
    let after = proc_status_kib("VmRSS:").unwrap_or(0);
    println!(
        "replay {} nodes, {} pods, {} jobs: ready in {:.2?}; {} pods held; RSS before {:.1} MiB, after {:.1} MiB, peak (VmHWM) {:.1} MiB",
        scale.nodes,
        scale.pods,
        scale.jobs,
        elapsed,
        store.state().pod_count(),
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    // The operator's caches fill at start-up too: held from here on.
    let started = Instant::now();
    let operator = operator_side(scale.jobs);
    println!(
        "operator side of {} jobs (the Controller's TrainingJobs, {} cached children) in {:.2?}: the whole daemon's RSS {:.1} MiB, peak (VmHWM) {:.1} MiB",
        scale.jobs,
        operator.children,
        started.elapsed(),
        proc_status_kib("VmRSS:").unwrap_or(0) as f64 / 1024.0,
        proc_status_kib("VmHWM:").unwrap_or(0) as f64 / 1024.0
    );
    // The daemon plans on the store it holds: passes on it, and the peak with a pass's working
    // memory on top of the store's. The first pass touches the store's memory first. `prepare`
    // is what the daemon's blocking task runs: the planning pass, then the scheduler role's
    // binds and the rescales and sizing conditions of every job it changes. Between passes the
    // cluster does what the pass asked (`settle`), so the passes go from the first after start-up
    // (every job changes) to steady ones (none does).
    let mut store = store;
    for n in 1..=PASSES_AFTER_REPLAY {
        let started = Instant::now();
        let planned = plan(store.state(), &PlannerConfig::default()).jobs.len();
        let planning = started.elapsed();
        let started = Instant::now();
        let work = prepare(
            &store,
            &PlannerConfig::default(),
            Some(&Settings::new(SCHEDULER)),
        );
        let elapsed = started.elapsed();
        println!(
            "pass {n} on the ready store: plan {planning:.2?} ({planned} jobs), prepare {elapsed:.2?} ({} rescales, {} sizing updates, {} binds); RSS after {:.1} MiB, peak (VmHWM) {:.1} MiB",
            work.rescales.len(),
            work.sizing.len(),
            work.assignments.binds.len(),
            proc_status_kib("VmRSS:").unwrap_or(0) as f64 / 1024.0,
            proc_status_kib("VmHWM:").unwrap_or(0) as f64 / 1024.0
        );
        let started = Instant::now();
        let events = settle(&mut store, &work, 1 + n as u64);
        println!(
            "  settled: {events} watch events applied in {:.2?}",
            started.elapsed()
        );
    }
    drop(operator);
    drop(store);
}

/// What the operator holds for the replayed jobs.
struct OperatorSide {
    /// The Controller's cache of the TrainingJobs.
    _jobs: Writer<TrainingJob>,
    _caches: (Caches, CacheWriters),
    /// Children cached.
    children: usize,
}

/// Fills the operator's caches for `jobs` replayed TrainingJobs: each job as the Controller caches
/// it, and its children as `desired` builds them, with the status the API server would add,
/// through [`CacheWriters::apply`] (which slims them as the watches do).
fn operator_side(jobs: usize) -> OperatorSide {
    let config = OperatorConfig::default();
    let (caches, mut writers) = Caches::new(PodGroupMode::None);
    writers.mark_listed();
    let mut controller: Writer<TrainingJob> = Writer::default();
    controller.apply_watcher_event(&Event::Init);
    let mut children = 0;
    for j in 0..jobs {
        let job: TrainingJob = decode(&training_job_json(j));
        let want = desired(&job, JobKind::TrainingJob, &config).expect("the replayed job builds");
        let mut objects = vec![
            child("v1", "ConfigMap", &want.trainers_config, json!(null)),
            child(
                "batch/v1",
                "Job",
                &want.trainer,
                json!({"active": TRAINERS_PER_JOB, "ready": TRAINERS_PER_JOB}),
            ),
        ];
        for set in [&want.master, &want.pserver].into_iter().flatten() {
            objects.push(child(
                "apps/v1",
                "ReplicaSet",
                set,
                json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}),
            ));
        }
        for object in &objects {
            writers.apply(object).expect("a child caches");
        }
        children += objects.len();
        controller.apply_watcher_event(&Event::InitApply(job));
    }
    controller.apply_watcher_event(&Event::InitDone);
    OperatorSide {
        _jobs: controller,
        _caches: (caches, writers),
        children,
    }
}

/// A child object as a watch delivers it: `object` with its type, a uid, a resourceVersion and
/// `status`.
fn child<K: serde::Serialize>(
    api_version: &str,
    kind: &str,
    object: &K,
    status: Value,
) -> DynamicObject {
    let mut value = serde_json::to_value(object).expect("json");
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    value["metadata"]["uid"] = json!(format!("uid-{kind}-{name}"));
    value["metadata"]["resourceVersion"] = json!("2");
    if !status.is_null() {
        value["status"] = status;
    }
    decode(&value)
}

/// The scale `REPLAY_ONLY` names (`nodes,pods,jobs`, e.g. `100000,1000000,50000`), if set.
fn replay_only() -> Option<Scale> {
    let spec = std::env::var("REPLAY_ONLY").ok()?;
    let mut parts = spec.split(',').map(|p| p.trim().parse::<usize>().ok());
    let (Some(Some(nodes)), Some(Some(pods)), Some(Some(jobs)), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("REPLAY_ONLY={spec:?}: expected nodes,pods,jobs");
    };
    Some(Scale { nodes, pods, jobs })
}

fn main() {
    // `REPLAY_ONLY=nodes,pods,jobs`: one replay of that size, its time to ready and memory, and
    // nothing else (a million pods is too slow for criterion's samples).
    if let Some(scale) = replay_only() {
        report_memory(scale);
        return;
    }
    let benchmarking = std::env::args().any(|a| a == "--bench");
    let scale = if benchmarking { FULL } else { SMOKE };
    report_memory(scale);
    let mut criterion = Criterion::default().sample_size(10).configure_from_args();
    criterion.bench_function("replay_to_ready", |b| b.iter(|| replay(scale)));
    // The event lag while a pass plans: a watch event that arrives while the pass holds the
    // store's snapshot copies the store once (copy on write) before it is applied.
    let store = replay(scale);
    criterion.bench_function("store_copy_on_write", |b| b.iter(|| store.clone()));
    let shared: SharedStore = Mutex::new(Arc::new(store));
    criterion.bench_function("event_lag_during_pass", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                total += event_lag_during_pass(&shared, pod(i as usize % scale.pods, scale));
            }
            total
        })
    });
    criterion.final_summary();
}
