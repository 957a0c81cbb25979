//! The scheduler role binds only what the kubelet admits, end to end: the release's daemon (the
//! Deployment's container as shipped, intervals shortened) against the emulator, whose kubelet
//! rejects a pod bound onto a node without its room or its host ports (terminating pods hold
//! both) and whose API server refuses to bind a gated pod (`/_harness/gated-binds`). Each case
//! checks what a user would see: pods Running where they fit, pending with kube-scheduler's reason
//! where they do not, and no pod the kubelet turned away (`/_harness/failed-pods` empty). A
//! cordoned or NotReady node keeps its trainers and takes no new ones until it is back; a drained
//! one's trainers are replaced where room is left, at no cost to the job's `backoffLimit`, and so
//! are a lost node's (its Node deleted, its pods failed by the pod garbage collector). Where pods
//! take time to stop (the emulator's `--pod-grace`: the drain case, and a job shrunk for another's
//! fair share), their room is given to others only once they are gone.

#[path = "support/e2e.rs"]
mod e2e;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use e2e::{Emulator, Replica, poll};
use serde_json::{Value, json};

const NS: &str = "ml";
const SCHEDULER: &str = "trainscale";
/// Each case's emulator lives at most this long.
const LIFETIME_S: u32 = 400;
/// How long a case waits for what it expects.
const WITHIN: Duration = Duration::from_secs(120);
const EVERY: Duration = Duration::from_millis(250);
/// How long a case checks that nothing changes: several of the daemon's 1 s passes.
const HOLD: Duration = Duration::from_secs(6);
/// How long a deleted pod terminates in the cases that pass `--pod-grace`: a trainer stopping on
/// `SIGTERM`, shortened from the 30 s default.
const GRACE_S: &str = "3";

/// A Ready node of `cpu` cores, 64Gi and 110 pods.
fn node(name: &str, cpu: u32) -> Value {
    let allocatable = json!({"cpu": cpu.to_string(), "memory": "64Gi", "pods": "110"});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"capacity": allocatable.clone(), "allocatable": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// The emulator on `nodes` and one replica of the shipped daemon (1 s passes, no cooldown).
fn start(dir: &Path, nodes: &[Value]) -> (Emulator, Replica) {
    start_with(dir, nodes, &[])
}

/// [`start`] with more of the emulator's `flags`.
fn start_with(dir: &Path, nodes: &[Value], flags: &[&str]) -> (Emulator, Replica) {
    let file = dir.join("nodes.json");
    std::fs::write(&file, Value::from(nodes.to_vec()).to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
    let file = file.to_string_lossy().to_string();
    let mut all = vec!["--nodes", file.as_str()];
    all.extend_from_slice(flags);
    let emulator = Emulator::start(dir, &all, LIFETIME_S);
    let overrides = [
        ("TRAINSCALE_INTERVAL", "1s"),
        ("TRAINSCALE_DEBOUNCE", "200ms"),
        ("TRAINSCALE_COOLDOWN", "0s"),
        ("TRAINSCALE_LOG_FORMAT", "text"),
    ];
    let replica = Replica::start(
        &e2e::shipped_container(),
        "trainscale-0",
        &emulator.kubeconfig,
        dir,
        &overrides,
        &[],
    );
    (emulator, replica)
}

/// Whether the replica still runs (for [`poll`]).
fn alive(replica: &mut Replica) -> impl FnMut() -> Result<(), String> + '_ {
    move || replica.guard.check_alive()
}

/// A TrainingJob scheduled by trainscale: trainers of `cpu` cores, `min`..`max`; `extra` is
/// merged into its spec.
fn training_job(name: &str, cpu: &str, min: i32, max: i32, extra: Value) -> Value {
    let amounts = json!({"cpu": cpu, "memory": "1Gi"});
    let mut spec = json!({
        "image": "paddlepaddle/paddle:latest",
        "is_nccl": true,
        // Not fault tolerant: no master (an etcd-backed master comes with fault tolerance).
        "fault_tolerant": false,
        "schedulerName": SCHEDULER,
        "trainer": {
            "entrypoint": "python train.py",
            "min-instance": min, "max-instance": max,
            "resources": {"requests": amounts, "limits": amounts},
        },
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

/// The pods of [`NS`].
async fn pods(emulator: &Emulator) -> Vec<Value> {
    e2e::list_all(&emulator.admin().await, "v1", "Pod", "pods")
        .await
        .into_iter()
        .filter(|p| p["metadata"]["namespace"] == NS)
        .collect()
}

fn name_of(pod: &Value) -> &str {
    pod["metadata"]["name"].as_str().unwrap_or("")
}

fn node_of(pod: &Value) -> Option<&str> {
    pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

/// The `PodScheduled` condition of a pod: `(status, reason, message)`.
fn scheduled(pod: &Value) -> Option<(String, String, String)> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (text("status"), text("reason"), text("message"))
        })
}

/// The pods the emulator's kubelet turned away.
async fn rejected(emulator: &Emulator) -> Vec<Value> {
    emulator.failed_pods().await
}

/// The trainer pods (`<job>-trainer-<i>`) of a job.
fn trainers_of<'a>(all: &'a [Value], job: &str) -> Vec<&'a Value> {
    let prefix = format!("{job}-trainer-");
    all.iter()
        .filter(|p| name_of(p).starts_with(&prefix))
        .collect()
}

/// Waits until pod `name` of [`NS`] runs; its node.
async fn until_running(emulator: &Emulator, replica: &mut Replica, name: &str) -> String {
    poll(
        WITHIN,
        EVERY,
        &format!("{name} Running"),
        alive(replica),
        || async {
            let all = pods(emulator).await;
            match all.iter().find(|p| name_of(p) == name) {
                Some(p) if running(p) => Ok(node_of(p).unwrap_or("").to_string()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Creates `grower` (1-CPU trainers, 1..8) and waits until its 8 trainers run: the 2 × 4-CPU
/// cluster full.
async fn grow_to_the_whole_cluster(emulator: &Emulator, replica: &mut Replica) {
    let client = emulator.admin().await;
    e2e::create(
        &client,
        "trainingjobs",
        &training_job("grower", "1", 1, 8, json!({})),
    )
    .await;
    poll(
        WITHIN,
        EVERY,
        "grower at 8 Running",
        alive(replica),
        || async { running_trainers(emulator, "grower", 8).await },
    )
    .await;
}

/// `Ok` when `want` trainers of `job` run, else how many do.
async fn running_trainers(emulator: &Emulator, job: &str, want: usize) -> Result<(), String> {
    let all = pods(emulator).await;
    let up = trainers_of(&all, job)
        .into_iter()
        .filter(|p| running(p))
        .count();
    (up == want).then_some(()).ok_or(format!("{up} Running"))
}

/// A terminating pod still holds its host port: a trainer wanting the same port waits, pending
/// with the reason, and is bound once the old pod is gone; the kubelet rejects nothing.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_terminating_pods_host_port_is_not_given_to_a_trainer() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-ports");
    let (emulator, mut replica) = start(dir.path(), &[node("n1", 8)]);
    let client = emulator.admin().await;
    // A pod on n1 holding host port 7164, kept terminating by a finalizer once deleted.
    let donor = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "donor", "namespace": NS, "finalizers": ["e2e/hold"]},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "main", "image": "busybox",
                            "ports": [{"containerPort": 7164, "hostPort": 7164}],
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    });
    e2e::create(&client, "pods", &donor).await;
    let pods_api = e2e::api_in(&client, "v1", "Pod", "pods", Some(NS));
    until_running(&emulator, &mut replica, "donor").await;
    pods_api
        .delete("donor", &Default::default())
        .await
        .unwrap_or_else(|e| panic!("deleting the donor: {e}"));
    // Host network: the trainer's port 7164 is a host port.
    let job = training_job(
        "ported",
        "1",
        1,
        1,
        json!({"port": 7164, "host_network": true}),
    );
    e2e::create(&client, "trainingjobs", &job).await;
    let message = poll(
        WITHIN,
        EVERY,
        "the trainer pending with a reason",
        alive(&mut replica),
        || async {
            let all = pods(&emulator).await;
            match trainers_of(&all, "ported").as_slice() {
                [p] if node_of(p).is_some() => Err(format!("{} bound", name_of(p))),
                [p] => match scheduled(p) {
                    Some((status, _, message)) if status == "False" => Ok(message),
                    other => Err(format!("{} condition {other:?}", name_of(p))),
                },
                other => Err(format!("{} trainer(s)", other.len())),
            }
        },
    )
    .await;
    assert!(
        message.contains("ports"),
        "the reason names the ports: {message}"
    );
    // Several passes later: still not bound beside the terminating pod.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = pods(&emulator).await;
    let trainers = trainers_of(&all, "ported");
    assert!(
        trainers.iter().all(|p| node_of(p).is_none()),
        "bound beside the terminating pod: {trainers:?}"
    );
    // The old pod goes: the trainer is bound and runs.
    pods_api
        .patch(
            "donor",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("removing the donor's finalizer: {e}"));
    poll(
        WITHIN,
        EVERY,
        "the trainer Running",
        alive(&mut replica),
        || async {
            let all = pods(&emulator).await;
            match trainers_of(&all, "ported").as_slice() {
                [p] if running(p) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(rejected(&emulator).await, Vec::<Value>::new());
    emulator.stop();
}

/// A new job's master and parameter servers are placed on a full cluster before its trainers:
/// the job growing into the whole cluster gives room back, the new job's pods all run, and the
/// kubelet rejects nothing.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_jobs_master_and_pservers_are_admitted_with_its_gang_on_a_full_cluster() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-pservers");
    let (emulator, mut replica) = start(dir.path(), &[node("n1", 4), node("n2", 4)]);
    let client = emulator.admin().await;
    grow_to_the_whole_cluster(&emulator, &mut replica).await;
    let one_cpu = json!({"requests": {"cpu": "1", "memory": "1Gi"},
                         "limits": {"cpu": "1", "memory": "1Gi"}});
    let ps = training_job(
        "ps",
        "1",
        1,
        2,
        json!({
            "is_nccl": false,
            "fault_tolerant": true,
            "port": 7164,
            "master": {"etcd-endpoint": "", "resources": one_cpu},
            "pserver": {"min-instance": 2, "max-instance": 2, "resources": one_cpu},
        }),
    );
    e2e::create(&client, "trainingjobs", &ps).await;
    poll(
        WITHIN,
        EVERY,
        "every pod of ps Running",
        alive(&mut replica),
        || async {
            let all = pods(&emulator).await;
            let mine: Vec<&Value> = all
                .iter()
                .filter(|p| name_of(p).starts_with("ps-"))
                .collect();
            let up = mine.iter().filter(|p| running(p)).count();
            let roles = |role: &str| mine.iter().filter(|p| name_of(p).contains(role)).count();
            (up == mine.len()
                && roles("-master") == 1
                && roles("-pserver") == 2
                && roles("-trainer") >= 1)
                .then_some(())
                .ok_or(format!(
                    "{up} of {} Running: {:?}",
                    mine.len(),
                    mine.iter().map(|p| name_of(p)).collect::<Vec<_>>()
                ))
        },
    )
    .await;
    // Bound in order: the master and pservers no later than the first trainer.
    let bindings: Vec<Value> = emulator.harness("/_harness/bindings").await;
    let bound_at = |part: &str| {
        bindings
            .iter()
            .filter(|b| {
                b["namespace"] == NS
                    && b["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("ps-") && n.contains(part))
            })
            .filter_map(|b| b["bound"].as_f64())
            .collect::<Vec<f64>>()
    };
    let support: Vec<f64> = bound_at("-master")
        .into_iter()
        .chain(bound_at("-pserver"))
        .collect();
    let trainers = bound_at("-trainer");
    assert_eq!(support.len(), 3, "{bindings:?}");
    let last_support = support.iter().copied().fold(f64::MIN, f64::max);
    let first_trainer = trainers.iter().copied().fold(f64::MAX, f64::min);
    assert!(
        last_support <= first_trainer,
        "a trainer was bound before the master and pservers: {bindings:?}"
    );
    assert_eq!(rejected(&emulator).await, Vec::<Value>::new());
    emulator.stop();
}

/// A trainer Job suspended by someone else (Kueue has not admitted it) holds no room: a job that
/// wants the whole cluster gets it, and the suspended Job is not resized.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_suspended_trainer_job_holds_no_room() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-suspended");
    let (emulator, mut replica) = start(dir.path(), &[node("n1", 4), node("n2", 4)]);
    let client = emulator.admin().await;
    e2e::create(
        &client,
        "trainingjobs",
        &training_job("waiting", "1", 4, 4, json!({})),
    )
    .await;
    let jobs = e2e::api_in(&client, "batch/v1", "Job", "jobs", Some(NS));
    poll(
        WITHIN,
        EVERY,
        "waiting's trainer Job",
        alive(&mut replica),
        || async {
            jobs.get("waiting-trainer")
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    // Suspended as Kueue suspends a workload it has not admitted.
    jobs.patch(
        "waiting-trainer",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap_or_else(|e| panic!("suspending waiting-trainer: {e}"));
    grow_to_the_whole_cluster(&emulator, &mut replica).await;
    // Several passes later: grower keeps all 8, the suspended Job is untouched.
    tokio::time::sleep(Duration::from_secs(4)).await;
    if let Err(up) = running_trainers(&emulator, "grower", 8).await {
        panic!("grower shrank for a suspended gang: {up}");
    }
    let waiting = jobs
        .get("waiting-trainer")
        .await
        .unwrap_or_else(|e| panic!("reading waiting-trainer: {e}"));
    let spec = serde_json::to_value(&waiting.data["spec"]).unwrap_or(Value::Null);
    assert_eq!(spec["suspend"], true, "{spec}");
    assert_eq!(spec["parallelism"], 4, "{spec}");
    assert_eq!(rejected(&emulator).await, Vec::<Value>::new());
    emulator.stop();
}

/// A gated pod is never sent to be bound (the API server would answer 409) and says why; once
/// its gates are removed it is bound.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_gated_pod_waits_with_its_reason_and_is_bound_once_ungated() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-gated");
    let (emulator, mut replica) = start(dir.path(), &[node("n1", 4)]);
    let client = emulator.admin().await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gated", "namespace": NS},
        "spec": {
            "schedulerName": SCHEDULER,
            "schedulingGates": [{"name": "example.com/quota"}],
            "containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    });
    e2e::create(&client, "pods", &pod).await;
    poll(
        WITHIN,
        EVERY,
        "SchedulingGated",
        alive(&mut replica),
        || async {
            let all = pods(&emulator).await;
            match all
                .iter()
                .find(|p| name_of(p) == "gated")
                .and_then(scheduled)
            {
                Some((status, reason, _)) if status == "False" && reason == "SchedulingGated" => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused: Vec<Value> = emulator.harness("/_harness/gated-binds").await;
    assert_eq!(
        refused,
        Vec::<Value>::new(),
        "a gated pod was sent to be bound"
    );
    let pods_api = e2e::api_in(&client, "v1", "Pod", "pods", Some(NS));
    pods_api
        .patch(
            "gated",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"schedulingGates": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("removing the gates: {e}"));
    until_running(&emulator, &mut replica, "gated").await;
    assert_eq!(rejected(&emulator).await, Vec::<Value>::new());
    emulator.stop();
}

/// A pod with a native sidecar needs its sidecar's room too: it is bound to the node that holds
/// both (the tighter node holds the main container only), and runs.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_pod_with_a_sidecar_is_bound_where_both_fit() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-sidecar");
    let (emulator, mut replica) = start(dir.path(), &[node("n1", 3), node("n2", 8)]);
    let client = emulator.admin().await;
    let two_cpu = json!({"requests": {"cpu": "2", "memory": "1Gi"}});
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "with-sidecar", "namespace": NS},
        "spec": {
            "schedulerName": SCHEDULER,
            "initContainers": [{"name": "proxy", "image": "busybox", "restartPolicy": "Always",
                                "resources": two_cpu}],
            "containers": [{"name": "main", "image": "busybox", "resources": two_cpu}],
        },
    });
    e2e::create(&client, "pods", &pod).await;
    let node = until_running(&emulator, &mut replica, "with-sidecar").await;
    assert_eq!(node, "n2", "4 CPUs with the sidecar: only n2 holds them");
    assert_eq!(rejected(&emulator).await, Vec::<Value>::new());
    emulator.stop();
}

/// A merge patch of node `name`: its `spec` when `status` is false, else its `/status`.
async fn patch_node(emulator: &Emulator, name: &str, status: bool, patch: Value) {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(emulator.admin().await);
    let params = kube::api::PatchParams::default();
    let patch = kube::api::Patch::Merge(patch);
    let done = if status {
        nodes.patch_status(name, &params, &patch).await
    } else {
        nodes.patch(name, &params, &patch).await
    };
    done.unwrap_or_else(|e| panic!("patching node {name}: {e}"));
}

/// The nodes of `job`'s Running trainers among `all`, by trainer name.
fn running_trainer_nodes(all: &[Value], job: &str) -> BTreeMap<String, String> {
    trainers_of(all, job)
        .into_iter()
        .filter(|p| running(p))
        .map(|p| (name_of(p).to_string(), node_of(p).unwrap_or("").to_string()))
        .collect()
}

/// [`running_trainer_nodes`] of the pods now.
async fn trainer_nodes(emulator: &Emulator, job: &str) -> BTreeMap<String, String> {
    running_trainer_nodes(&pods(emulator).await, job)
}

/// Holds for `hold` (a few of the daemon's 1 s passes), checking on one listing at a time that
/// `job`'s trainers stay exactly the Running ones of `expected`: none removed, none added.
async fn holds(
    emulator: &Emulator,
    replica: &mut Replica,
    job: &str,
    expected: &BTreeMap<String, String>,
    hold: Duration,
    what: &str,
) {
    let started = std::time::Instant::now();
    while started.elapsed() < hold {
        replica
            .guard
            .check_alive()
            .unwrap_or_else(|dead| panic!("{what}: {dead}"));
        let all = pods(emulator).await;
        let now = running_trainer_nodes(&all, job);
        assert_eq!(&now, expected, "{what}: the Running trainers changed");
        let trainers = trainers_of(&all, job).len();
        assert_eq!(
            trainers,
            expected.len(),
            "{what}: {job} has {trainers} trainer pods, {} expected",
            expected.len()
        );
        tokio::time::sleep(EVERY).await;
    }
}

/// Node maintenance as a platform engineer does it. `kubectl cordon` evicts nothing: the job
/// keeps the trainers the node runs, and room that appears there is not planned into; uncordoned,
/// the node takes the job's growth. A node whose kubelet stops reporting Ready (the node
/// lifecycle controller's `not-ready` taints) is treated alike until it is Ready again. No pod is
/// deleted or rejected throughout.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_cordoned_or_not_ready_node_keeps_its_trainers_and_takes_no_new_ones() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-cordon");
    let (emulator, mut replica) = start(dir.path(), &[node("a", 4), node("b", 4)]);
    let client = emulator.admin().await;
    // 1-CPU trainers, 1..16: the job wants more than the cluster has throughout.
    e2e::create(
        &client,
        "trainingjobs",
        &training_job("j", "1", 1, 16, json!({})),
    )
    .await;
    poll(
        WITHIN,
        EVERY,
        "j at 8 Running",
        alive(&mut replica),
        || async { running_trainers(&emulator, "j", 8).await },
    )
    .await;
    let before = trainer_nodes(&emulator, "j").await;
    assert_eq!(
        before.values().filter(|n| *n == "b").count(),
        4,
        "{before:?}"
    );

    // Cordoned (`kubectl cordon` sets the field; the node controller adds the taint), then the
    // node gains 4 CPUs: the trainers there stay, and the new room takes none.
    patch_node(
        &emulator,
        "b",
        false,
        json!({"spec": {"unschedulable": true, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
    )
    .await;
    patch_node(
        &emulator,
        "b",
        true,
        json!({"status": {"allocatable": {"cpu": "8"}, "capacity": {"cpu": "8"}}}),
    )
    .await;
    holds(&emulator, &mut replica, "j", &before, HOLD, "b cordoned").await;

    // Uncordoned: the job grows onto b's room.
    patch_node(
        &emulator,
        "b",
        false,
        json!({"spec": {"unschedulable": null, "taints": null}}),
    )
    .await;
    poll(
        WITHIN,
        EVERY,
        "j at 12 Running",
        alive(&mut replica),
        || async { running_trainers(&emulator, "j", 12).await },
    )
    .await;
    let grown = trainer_nodes(&emulator, "j").await;
    assert_eq!(grown.values().filter(|n| *n == "b").count(), 8, "{grown:?}");

    // a's kubelet stops reporting Ready, and a gains 4 CPUs: its trainers stay (nothing here
    // evicts them), its room takes none.
    patch_node(
        &emulator,
        "a",
        false,
        json!({"spec": {"taints": [
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}),
    )
    .await;
    patch_node(
        &emulator,
        "a",
        true,
        json!({"status": {
            "allocatable": {"cpu": "8"}, "capacity": {"cpu": "8"},
            "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}}),
    )
    .await;
    holds(&emulator, &mut replica, "j", &grown, HOLD, "a NotReady").await;

    // Ready again: the job grows onto a's room, to its max.
    patch_node(&emulator, "a", false, json!({"spec": {"taints": null}})).await;
    patch_node(
        &emulator,
        "a",
        true,
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    )
    .await;
    poll(
        WITHIN,
        EVERY,
        "j at 16 Running",
        alive(&mut replica),
        || async { running_trainers(&emulator, "j", 16).await },
    )
    .await;
    no_pod_turned_away_or_deleted(&emulator).await;
    emulator.stop();
}

/// Asserts that no kubelet turned a pod away (the pod garbage collector's Failed pods carry no
/// reason; a kubelet's rejection does) and that trainscale deleted no pod.
async fn no_pod_turned_away_or_deleted(emulator: &Emulator) {
    let rejected: Vec<Value> = rejected(emulator)
        .await
        .into_iter()
        .filter(|p| !p["reason"].is_null())
        .collect();
    assert!(
        rejected.is_empty(),
        "pods the kubelet turned away: {rejected:#?}"
    );
    let writes = emulator.daemon_writes().await;
    assert!(
        !writes.keys().any(|k| k.starts_with("delete pods")),
        "trainscale deleted pods: {writes:?}"
    );
}

/// `kubectl drain` of node `name`: cordoned (the field and the node controller's taint), then
/// every pod of [`NS`] on it evicted through the eviction API, as kubectl sends it (pods being
/// deleted already are left to stop).
async fn drain(emulator: &Emulator, name: &str) {
    patch_node(
        emulator,
        name,
        false,
        json!({"spec": {"unschedulable": true, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
    )
    .await;
    let client = emulator.admin().await;
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, NS);
    let on_node: Vec<String> = pods(emulator)
        .await
        .iter()
        .filter(|p| node_of(p) == Some(name) && p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| name_of(p).to_string())
        .collect();
    assert!(!on_node.is_empty(), "no pod to drain from {name}");
    for pod in on_node {
        api.evict(&pod, &kube::api::EvictParams::default())
            .await
            .unwrap_or_else(|e| panic!("evicting {pod} from {name}: {e}"));
    }
}

/// The node of `candidates` on which most of the trainers in `nodes` (trainer → node) run (the
/// first of `candidates` on a tie), and how many run there.
fn busiest(nodes: &BTreeMap<String, String>, candidates: &[&str]) -> (String, usize) {
    let count = |n: &str| nodes.values().filter(|on| *on == n).count();
    let mut best = (String::new(), 0);
    for n in candidates {
        if count(n) > best.1 {
            best = (n.to_string(), count(n));
        }
    }
    best
}

/// Waits until `job`'s trainer Job is sized to `want` and exactly `want` trainer pods exist, all
/// Running and none on `off`; their nodes. (The size matters: just after a node goes, its pods
/// are gone and not yet replaced, and the rest can look like a smaller job.)
async fn settles_off(
    emulator: &Emulator,
    replica: &mut Replica,
    job: &str,
    want: usize,
    off: &[&str],
) -> BTreeMap<String, String> {
    poll(
        WITHIN,
        EVERY,
        &format!("{job} at {want} Running, none on {off:?}"),
        alive(replica),
        || async {
            let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
                kube::Api::namespaced(emulator.admin().await, NS);
            let sized = jobs
                .get_opt(&format!("{job}-trainer"))
                .await
                .ok()
                .flatten()
                .and_then(|j| j.spec?.parallelism);
            let all = pods(emulator).await;
            let trainers = trainers_of(&all, job).len();
            let nodes = running_trainer_nodes(&all, job);
            let on_gone = nodes.values().any(|n| off.contains(&n.as_str()));
            if sized == Some(want as i32) && trainers == want && nodes.len() == want && !on_gone {
                Ok(nodes)
            } else {
                Err(format!(
                    "parallelism {sized:?}, {trainers} trainer pods, Running on {nodes:?}"
                ))
            }
        },
    )
    .await
}

/// Node `name` gone, as when its spot instance is reclaimed: its Node object deleted.
async fn lose_node(emulator: &Emulator, name: &str) {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(emulator.admin().await);
    nodes
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting node {name}: {e}"));
}

/// How a case takes nodes away, and brings room back.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loss {
    /// `kubectl drain`; `kubectl uncordon` brings the node back.
    Drain,
    /// The Node deleted (its pods failed by the pod garbage collector); a new node joins.
    NodeGone,
}

/// Three 4-CPU nodes and a job of 1-CPU trainers, 2..8 (two nodes' worth). The busiest node goes
/// (`loss`): its trainers come back on the node with room and the job keeps 8. A second goes: the
/// job shrinks to the last node's 4 and stays there. Room comes back: the job grows to 8 again.
/// Throughout, no trainer failure is counted against `backoffLimit`, no pod is bound where it is
/// gone or turned away by a kubelet, and trainscale deletes no pod.
async fn two_of_three_nodes_go(loss: Loss) {
    e2e::require_kmock();
    let dir = e2e::Workdir::new(&format!("admission-{loss:?}").to_lowercase());
    // Evicted pods stop as a kubelet stops them, within their grace period; a lost node's pods
    // are failed by the pod garbage collector instead.
    let flags: &[&str] = match loss {
        Loss::Drain => &["--pod-grace", GRACE_S],
        Loss::NodeGone => &[],
    };
    let (emulator, mut replica) = start_with(
        dir.path(),
        &[node("a", 4), node("b", 4), node("c", 4)],
        flags,
    );
    let client = emulator.admin().await;
    e2e::create(
        &client,
        "trainingjobs",
        &training_job("j", "1", 2, 8, json!({})),
    )
    .await;
    let take_away = |name: String| {
        let emulator = &emulator;
        async move {
            match loss {
                Loss::Drain => drain(emulator, &name).await,
                Loss::NodeGone => lose_node(emulator, &name).await,
            }
        }
    };
    let all_nodes = ["a", "b", "c"];
    let placed = settles_off(&emulator, &mut replica, "j", 8, &[]).await;

    let (first, moved) = busiest(&placed, &all_nodes);
    assert!(moved > 0, "{placed:?}");
    take_away(first.clone()).await;
    let placed = settles_off(&emulator, &mut replica, "j", 8, &[&first]).await;

    let left: Vec<&str> = all_nodes.iter().copied().filter(|n| *n != first).collect();
    let (second, _) = busiest(&placed, &left);
    take_away(second.clone()).await;
    let shrunk = settles_off(&emulator, &mut replica, "j", 4, &[&first, &second]).await;
    holds(
        &emulator,
        &mut replica,
        "j",
        &shrunk,
        HOLD,
        "two nodes gone",
    )
    .await;

    match loss {
        Loss::Drain => {
            for n in [&first, &second] {
                patch_node(
                    &emulator,
                    n,
                    false,
                    json!({"spec": {"unschedulable": null, "taints": null}}),
                )
                .await;
            }
            settles_off(&emulator, &mut replica, "j", 8, &[]).await;
        }
        Loss::NodeGone => {
            e2e::create(&client, "nodes", &node("d", 4)).await;
            let grown = settles_off(&emulator, &mut replica, "j", 8, &[&first, &second]).await;
            assert_eq!(grown.values().filter(|n| *n == "d").count(), 4, "{grown:?}");
        }
    }

    let failures = emulator.failures().await;
    assert!(
        failures.is_empty(),
        "trainers lost to {loss:?} counted as failures: {failures:?}"
    );
    no_pod_turned_away_or_deleted(&emulator).await;
    emulator.stop();
}

/// Node maintenance with eviction: `kubectl drain` cordons a node and evicts its pods, which take
/// [`GRACE_S`] seconds to stop (holding their room meanwhile). The Job controller replaces each
/// evicted trainer at its index once it has stopped, without counting it against
/// `backoffLimit` (the trainer Job's `podFailurePolicy` ignores `DisruptionTarget`); trainscale
/// binds the replacements where room is left, and when too little is left the job shrinks to what
/// the remaining nodes hold (not below min). Nothing goes back to a drained node until it is
/// uncordoned; then the job grows back.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_drained_nodes_trainers_are_replaced_where_room_is_left() {
    two_of_three_nodes_go(Loss::Drain).await;
}

/// Node loss: a node's Node object goes (a spot instance reclaimed, the cluster autoscaler
/// removing it), and the pod garbage collector fails its pods with `DisruptionTarget`. The job's
/// lost trainers are replaced where room is left; with too little left it shrinks to what the
/// remaining node holds; a node added later takes its growth back to max.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_lost_nodes_trainers_are_replaced_and_a_new_node_takes_the_growth() {
    two_of_three_nodes_go(Loss::NodeGone).await;
}

/// The uids of `job`'s trainer pods by name, and the names of those terminating.
fn trainer_uids(all: &[Value], job: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let trainers = trainers_of(all, job);
    let uids = trainers
        .iter()
        .map(|p| {
            let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
            (name_of(p).to_string(), uid)
        })
        .collect();
    let terminating = trainers
        .iter()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| name_of(p).to_string())
        .collect();
    (uids, terminating)
}

/// A job shrunk to make room for another gives the room back only when its removed trainers have
/// stopped: here they take 3 s to terminate (`--pod-grace`), holding their CPUs as a kubelet
/// counts them. Job `a` (1-CPU trainers, 2..8) fills two 4-CPU nodes; job `b` (the same) arrives,
/// and the fair plan is 4 each. While `a`'s four removed trainers terminate, `b`'s wait pending;
/// once they are gone `b`'s four are bound and run. `a` keeps its first four trainers throughout
/// (the same pods: no further shrink for room its own terminating pods hold, no replacement), the
/// kubelet turns nothing away, no failure is counted and trainscale deletes no pod.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_shrunk_jobs_terminating_trainers_hold_their_room_until_they_are_gone() {
    e2e::require_kmock();
    let dir = e2e::Workdir::new("admission-grace");
    let (emulator, mut replica) = start_with(
        dir.path(),
        &[node("a", 4), node("b", 4)],
        &["--pod-grace", GRACE_S],
    );
    let client = emulator.admin().await;
    e2e::create(
        &client,
        "trainingjobs",
        &training_job("a", "1", 2, 8, json!({})),
    )
    .await;
    settles_off(&emulator, &mut replica, "a", 8, &[]).await;
    let (before, _) = trainer_uids(&pods(&emulator).await, "a");
    let kept: BTreeMap<String, String> = (0..4)
        .filter_map(|i| {
            let name = format!("a-trainer-{i}");
            Some((name.clone(), before.get(&name)?.clone()))
        })
        .collect();
    assert_eq!(kept.len(), 4, "a's first four trainers: {before:?}");

    e2e::create(
        &client,
        "trainingjobs",
        &training_job("b", "1", 2, 8, json!({})),
    )
    .await;
    // The grace period is seen: some of a's trainers terminate while b has fewer than 4 running.
    poll(
        WITHIN,
        Duration::from_millis(100),
        "a's removed trainers terminating while b waits",
        alive(&mut replica),
        || async {
            let all = pods(&emulator).await;
            let (_, terminating) = trainer_uids(&all, "a");
            let b_running = trainers_of(&all, "b").iter().filter(|p| running(p)).count();
            if !terminating.is_empty() && b_running < 4 {
                Ok(())
            } else {
                Err(format!(
                    "terminating {terminating:?}, b running {b_running}"
                ))
            }
        },
    )
    .await;
    settles_off(&emulator, &mut replica, "a", 4, &[]).await;
    settles_off(&emulator, &mut replica, "b", 4, &[]).await;
    let (after, terminating) = trainer_uids(&pods(&emulator).await, "a");
    assert!(terminating.is_empty(), "still terminating: {terminating:?}");
    assert_eq!(after, kept, "a's first four trainers were replaced");

    let failures = emulator.failures().await;
    assert!(failures.is_empty(), "failures counted: {failures:?}");
    no_pod_turned_away_or_deleted(&emulator).await;
    emulator.stop();
}
