//! End-to-end: the four job kinds side by side against the kmock emulator (`tests/e2e/
//! kmock_cluster.py --pytorch-crds --no-controllers`).
//!
//! The test writes a cluster with some room left: a TrainingJob and a PaddleJob, each with its
//! trainer batch/v1 Job and trainer pods, a T9k PyTorchTrainingJob and a Kubeflow PyTorchJob with
//! their worker pods, and a PyTorchJob whose `elasticPolicy.metrics` leaves it to an HPA. It dumps
//! the cluster, runs `trainscale plan` on the dump, then starts `trainscale run` (operator and
//! scheduler role off, kinds found by discovery). Each job ends at the size `plan` computed,
//! through its one field (trainer Job parallelism; `spec.elastic.expectedReplicas`;
//! `spec.pytorchReplicaSpecs.Worker.replicas`), the daemon's writes are exactly those patches,
//! the scale records, one write of each job's sizing conditions and the Events, across kinds; nothing else in
//! the job objects changes, and the HPA-managed job is untouched but for an Event saying why.
//! A second test installs the PyTorch CRDs while the daemon runs: discovery finds them and their
//! jobs are sized. Gated like `daemon_e2e.rs` (`cfg(kmock)`, see `build.rs`). The daemon
//! authenticates as the service account (`kubeconfig`) under the RBAC of `deploy/`, the test's
//! own clients as the emulator's admin (`kubeconfig.admin`); both tests end by checking that the
//! emulator denied none of the daemon's requests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{Value, json};

#[path = "support/kmock_harness.rs"]
mod kmock_harness;

use kmock_harness::{admin_kubeconfig, assert_no_denials};

const DEADLINE: Duration = Duration::from_secs(60);
const TEST_AGENT: &str = "trainscale-e2e-test";

/// Kills a child process when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// A client of the test's own, as the emulator's admin (`<kubeconfig>.admin`; the daemon gets
/// `kubeconfig`, the service account's).
async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(admin_kubeconfig(kubeconfig)).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(TEST_AGENT),
    ));
    Client::try_from(config).unwrap()
}

/// `(api_version, kind, plural, namespaced)` of every resource the dump holds.
const RESOURCES: [(&str, &str, &str, bool); 8] = [
    ("v1", "Node", "nodes", false),
    (
        "scheduling.k8s.io/v1",
        "PriorityClass",
        "priorityclasses",
        false,
    ),
    ("v1", "Pod", "pods", true),
    ("batch/v1", "Job", "jobs", true),
    (
        "paddlepaddle.org/v1alpha1",
        "TrainingJob",
        "trainingjobs",
        true,
    ),
    ("paddlepaddle.org/v1", "PaddleJob", "paddlejobs", true),
    (
        "batch.tensorstack.dev/v1beta1",
        "PyTorchTrainingJob",
        "pytorchtrainingjobs",
        true,
    ),
    ("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", true),
];

fn api(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    if namespaced {
        Api::namespaced_with(client.clone(), "ml", &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

fn api_of(client: &Client, kind: &str) -> Api<DynamicObject> {
    let (v, k, p, n) = RESOURCES.iter().find(|r| r.1 == kind).unwrap();
    api(client, v, k, p, *n)
}

/// Creates `value` (its `kind` names the resource); returns the stored object.
async fn create(client: &Client, value: Value) -> Value {
    let kind = value["kind"].as_str().unwrap().to_string();
    let obj: DynamicObject = serde_json::from_value(value).unwrap();
    let created = api_of(client, &kind)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
    serde_json::to_value(created).unwrap()
}

/// The object `kind` `ml/name` as JSON.
async fn get(client: &Client, kind: &str, name: &str) -> Value {
    let obj = api_of(client, kind).get(name).await.unwrap();
    serde_json::to_value(obj).unwrap()
}

fn worker_template(cpu: &str) -> Value {
    json!({"spec": {"containers": [{"name": "worker", "image": "trainer:1",
        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}})
}

fn pod(name: &str, labels: Value, owner: Option<Value>, cpu: &str) -> Value {
    let mut metadata = json!({"name": name, "namespace": "ml", "labels": labels});
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([owner]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": {"nodeName": "node-1", "containers": [{"name": "worker", "image": "trainer:1",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Running"}})
}

fn owner(api_version: &str, kind: &str, obj: &Value) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"],
           "uid": obj["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

/// A paddlepaddle.org job with its Indexed trainer Job at `parallelism` and as many trainer pods.
async fn paddle_kind(client: &Client, kind: &str, name: &str, max: i32, parallelism: i32) {
    let api_version = if kind == "TrainingJob" {
        "paddlepaddle.org/v1alpha1"
    } else {
        "paddlepaddle.org/v1"
    };
    let trainer = json!({"entrypoint": "python train.py", "min-instance": 1, "max-instance": max,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}});
    let mut spec = json!({"image": "paddle:1", "trainer": trainer,
        "pserver": {"min-instance": 1, "max-instance": 1,
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}});
    if kind == "TrainingJob" {
        spec["fault_tolerant"] = json!(true);
    }
    let job = create(
        client,
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, "namespace": "ml"}, "spec": spec}),
    )
    .await;
    let mut labels = json!({"paddle-job": name});
    if kind == "PaddleJob" {
        labels["paddle-job-name"] = json!(name);
    }
    let trainer_job = create(
        client,
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("{name}-trainer"), "namespace": "ml",
                         "ownerReferences": [owner(api_version, kind, &job)]},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "completionMode": "Indexed",
                     "template": {"metadata": {"labels": labels.clone()}, "spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "trainer", "image": "paddle:1"}]}}}}),
    )
    .await;
    for i in 0..parallelism {
        let mut p = pod(
            &format!("{name}-trainer-{i}"),
            labels.clone(),
            Some(owner("batch/v1", "Job", &trainer_job)),
            "1",
        );
        p["metadata"]["annotations"] =
            json!({"batch.kubernetes.io/job-completion-index": i.to_string()});
        create(client, p).await;
    }
}

async fn t9k_job(client: &Client, name: &str, max: i32, expected: i32) {
    let job = create(
        client,
        json!({"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "PyTorchTrainingJob",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"elastic": {"enable": true, "minReplicas": 1, "maxReplicas": max,
                                 "expectedReplicas": expected},
                     "torchrunConfig": {"enable": true, "rdzvBackend": "c10d"},
                     "scheduler": {"t9kScheduler": {"queue": "default", "priority": 10}},
                     "replicaSpecs": [{"type": "worker", "replicas": max,
                                       "restartPolicy": "OnFailure",
                                       "template": worker_template("1")}]},
            "status": {"phase": "Running"}}),
    )
    .await;
    for i in 0..expected {
        let owner = owner("batch.tensorstack.dev/v1beta1", "PyTorchTrainingJob", &job);
        create(
            client,
            pod(&format!("{name}-worker-{i}"), json!({}), Some(owner), "1"),
        )
        .await;
    }
}

async fn kubeflow_job(client: &Client, name: &str, max: i32, replicas: i32, hpa: bool) {
    let mut policy = json!({"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": max,
                            "maxRestarts": 100});
    if hpa {
        policy["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}]);
    }
    let job = create(
        client,
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"elasticPolicy": policy,
                     "pytorchReplicaSpecs": {"Worker": {"replicas": replicas,
                         "restartPolicy": "OnFailure", "template": worker_template("1")}}},
            "status": {"conditions": [{"type": "Running", "status": "True"}]}}),
    )
    .await;
    for i in 0..replicas {
        let labels = json!({"training.kubeflow.org/job-name": name,
                            "training.kubeflow.org/replica-type": "worker",
                            "training.kubeflow.org/replica-index": i.to_string()});
        let owner = owner("kubeflow.org/v1", "PyTorchJob", &job);
        create(
            client,
            pod(&format!("{name}-worker-{i}"), labels, Some(owner), "1"),
        )
        .await;
    }
}

/// Every object of the dump's resources, as one List.
async fn dump(client: &Client) -> Value {
    let mut items = Vec::new();
    for (api_version, kind, plural, namespaced) in RESOURCES {
        let list = api(client, api_version, kind, plural, namespaced)
            .list(&ListParams::default())
            .await
            .unwrap();
        for obj in list.items {
            let mut v = serde_json::to_value(obj).unwrap();
            v["apiVersion"] = json!(api_version);
            v["kind"] = json!(kind);
            items.push(v);
        }
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// The emulator's request log of the daemon (every client but the test).
async fn daemon_log(kubeconfig: &Path) -> BTreeMap<String, u64> {
    let client = client(kubeconfig).await;
    let request = http::Request::get("/_harness/requests?by=agent")
        .body(Vec::new())
        .unwrap();
    let by_agent: BTreeMap<String, BTreeMap<String, u64>> = client.request(request).await.unwrap();
    let mut out = BTreeMap::new();
    for (agent, counts) in by_agent {
        if agent != TEST_AGENT {
            for (key, n) in counts {
                *out.entry(key).or_default() += n;
            }
        }
    }
    out
}

/// The integer at a dotted path.
fn at(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_i64()
}

/// An object without what a rescale may change: the size at `path`, the last-scale and sizing
/// annotations, the resourceVersion and generation, the scale records and the sizing conditions.
fn unchanging(mut v: Value, path: &[&str]) -> Value {
    if let Some((last, parents)) = path.split_last() {
        let parent = parents.iter().try_fold(&mut v, |v, k| v.get_mut(*k));
        if let Some(map) = parent.and_then(Value::as_object_mut) {
            map.remove(*last);
        }
    }
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        // The API server bumps the generation with the size (a spec change).
        meta.remove("generation");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("trainscale.io/last-scale");
            a.remove("trainscale.io/sizing");
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("scale_records");
        if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            list.retain(|c| {
                !["AbleToScale", "ScalingLimited"].contains(&c["type"].as_str().unwrap_or(""))
            });
            if list.is_empty() {
                status.remove("conditions");
            }
        }
        if status.is_empty()
            && let Some(obj) = v.as_object_mut()
        {
            obj.remove("status");
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn four_kinds_are_sized_to_the_plan_through_their_one_field() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let emulator = spawn_emulator(&kubeconfig, &["--pytorch-crds"]);

    // 16 CPUs; 2 + 1 + 2 + 2 + 2 (the HPA job) trainers of 1 CPU run: 7 free, 12 wanted.
    let client = client(&kubeconfig).await;
    paddle_kind(&client, "TrainingJob", "tj", 5, 2).await;
    paddle_kind(&client, "PaddleJob", "pj", 5, 1).await;
    t9k_job(&client, "t9k", 5, 2).await;
    kubeflow_job(&client, "kf", 5, 2, false).await;
    kubeflow_job(&client, "kf-hpa", 5, 2, true).await;

    let snapshot = dir.path().join("dump.json");
    std::fs::write(&snapshot, dump(&client).await.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["plan", "--output", "json", "--snapshot"])
        .arg(&snapshot)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = plan["jobs"].as_array().unwrap().clone();
    let planned: Vec<(String, String, i64, i64)> = jobs
        .iter()
        .map(|j| {
            (
                j["kind"].as_str().unwrap().to_string(),
                j["name"].as_str().unwrap().to_string(),
                j["current"].as_i64().unwrap(),
                j["target"].as_i64().unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = planned.iter().map(|p| p.1.as_str()).collect();
    assert_eq!(names.len(), 4, "the HPA job is not planned: {planned:?}");
    assert!(!names.contains(&"kf-hpa"));
    assert!(
        planned
            .iter()
            .all(|(_, _, current, target)| target > current),
        "every kind grows: {planned:?}"
    );
    let left_alone = plan["left_alone"].as_array().unwrap();
    assert_eq!(left_alone.len(), 1, "{left_alone:?}");
    assert_eq!(left_alone[0]["field"], "spec.elasticPolicy.metrics");

    let size_path = |kind: &str| -> Vec<&'static str> {
        match kind {
            "PyTorchTrainingJob" => vec!["spec", "elastic", "expectedReplicas"],
            "PyTorchJob" => vec!["spec", "pytorchReplicaSpecs", "Worker", "replicas"],
            _ => vec!["spec", "parallelism"],
        }
    };
    // The object that holds each job's size.
    let sized = |kind: &str, name: &str| -> (String, String) {
        match kind {
            "TrainingJob" | "PaddleJob" => ("Job".to_string(), format!("{name}-trainer")),
            _ => (kind.to_string(), name.to_string()),
        }
    };
    let mut before = BTreeMap::new();
    for (kind, name, _, _) in &planned {
        before.insert((kind.clone(), name.clone()), get(&client, kind, name).await);
        let (k, n) = sized(kind, name);
        before.insert((k.clone(), n.clone()), get(&client, &k, &n).await);
    }
    let hpa_before = get(&client, "PyTorchJob", "kf-hpa").await;

    let port = free_port();
    let started = Instant::now();
    let mut daemon = spawn_daemon(&kubeconfig, port, &[]);
    // Every job reaches its planned size.
    loop {
        let mut done = true;
        for (kind, name, _, target) in &planned {
            let (k, n) = sized(kind, name);
            let now = at(&get(&client, &k, &n).await, &size_path(kind));
            done &= now == Some(*target);
        }
        if done {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "not sized to the plan: {planned:?}"
        );
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(http_status(port, "/readyz"), Some(200));
    // The pass after each resize writes the job's sizing conditions.
    loop {
        let mut done = true;
        for (kind, name, _, _) in &planned {
            let obj = get(&client, kind, name).await;
            done &= if kind.starts_with("PyTorch") {
                obj["metadata"]["annotations"]["trainscale.io/sizing"].is_string()
            } else {
                obj["status"]["conditions"].is_array()
            };
        }
        if done {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no sizing conditions: {planned:?}"
        );
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Three more passes: nothing is written again.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let writes: BTreeMap<String, u64> = daemon_log(&kubeconfig)
        .await
        .into_iter()
        .filter(|(key, _)| {
            let verb = key.split_once(' ').map_or("", |(v, _)| v);
            ["create", "update", "patch", "delete", "deletecollection"].contains(&verb)
                && !key.ends_with(" leases")
        })
        .collect();
    // Per job kind: the rescale (the size field, or the scale record in status), then, on the
    // pass after it, the sizing conditions (status, or the `trainscale.io/sizing` annotation).
    let want: BTreeMap<String, u64> = [
        ("patch jobs", 2),
        ("patch trainingjobs/status", 2),
        ("patch paddlejobs/status", 2),
        ("patch pytorchtrainingjobs", 2),
        ("patch pytorchjobs", 2),
        // Four Rescaled, one NotPlanned for the HPA job.
        ("create events", 5),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(writes, want, "the daemon's writes");

    // Nothing else changed in the job objects and the sized objects.
    for ((kind, name), old) in &before {
        let now = get(&client, kind, name).await;
        let path = if kind == "Job" {
            vec!["spec", "parallelism"]
        } else {
            size_path(kind)
        };
        let mut old = unchanging(old.clone(), &path);
        let mut now = unchanging(now, &path);
        if kind == "Job" {
            // Indexed: completions follow parallelism.
            old["spec"].as_object_mut().unwrap().remove("completions");
            now["spec"].as_object_mut().unwrap().remove("completions");
        }
        assert_eq!(now, old, "{kind} {name} changed beyond its size");
    }
    assert_eq!(
        get(&client, "PyTorchJob", "kf-hpa").await,
        hpa_before,
        "the HPA job is untouched"
    );

    // The PyTorch kinds carry the last-scale annotation; the paddlepaddle.org kinds a scale record.
    for (kind, name, current, target) in &planned {
        let obj = get(&client, kind, name).await;
        if kind.starts_with("PyTorch") {
            let text = obj["metadata"]["annotations"]["trainscale.io/last-scale"]
                .as_str()
                .unwrap_or_else(|| panic!("{kind} {name}: no last-scale annotation"));
            let record: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                (record["from"].as_i64(), record["to"].as_i64()),
                (Some(*current), Some(*target))
            );
            // The other operator's status is not written: no scale record, none of our conditions.
            assert!(
                obj.get("status")
                    .is_none_or(|s| s.get("scale_records").is_none())
            );
            let theirs = obj["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                theirs.iter().all(|c| !["AbleToScale", "ScalingLimited"]
                    .contains(&c["type"].as_str().unwrap_or(""))),
                "{kind} {name}: {theirs:?}"
            );
            let sizing = obj["metadata"]["annotations"]["trainscale.io/sizing"]
                .as_str()
                .unwrap_or_else(|| panic!("{kind} {name}: no sizing annotation"));
            let types: Vec<String> = trainscale::api::sizing::read_annotation(sizing)
                .into_iter()
                .map(|c| c.type_)
                .collect();
            assert_eq!(types, ["AbleToScale", "ScalingLimited"], "{kind} {name}");
        } else {
            let records = obj["status"]["scale_records"]["ScaleRecords"]
                .as_array()
                .unwrap();
            assert_eq!(records.len(), 1, "{kind} {name}");
            assert_eq!(records[0]["additional"].as_i64(), Some(target - current));
            let types: Vec<&str> = obj["status"]["conditions"]
                .as_array()
                .unwrap_or_else(|| panic!("{kind} {name}: no conditions"))
                .iter()
                .filter_map(|c| c["type"].as_str())
                .collect();
            assert_eq!(types, ["AbleToScale", "ScalingLimited"], "{kind} {name}");
        }
    }

    // The Events: one Rescaled per job across kinds (in the order the writes were answered: the
    // stage writes several jobs at once), and why kf-hpa is not.
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "ml",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    let listed: Vec<Value> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let mut rescaled: Vec<(String, String)> = listed
        .iter()
        .filter(|e| e["reason"] == "Rescaled")
        .map(|e| {
            (
                e["regarding"]["kind"].as_str().unwrap_or("").to_string(),
                e["regarding"]["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let mut jobs: Vec<(String, String)> =
        planned.iter().map(|p| (p.0.clone(), p.1.clone())).collect();
    rescaled.sort();
    jobs.sort();
    assert_eq!(rescaled, jobs, "one Rescaled event per planned job");
    let not_planned: Vec<&Value> = listed
        .iter()
        .filter(|e| e["reason"] == "NotPlanned")
        .collect();
    assert_eq!(not_planned.len(), 1);
    assert_eq!(not_planned[0]["regarding"]["name"], "kf-hpa");
    assert!(
        not_planned[0]["note"]
            .as_str()
            .unwrap_or("")
            .contains("HorizontalPodAutoscaler"),
        "{}",
        not_planned[0]["note"]
    );

    stop(daemon, emulator, &kubeconfig).await;
}

/// The emulator helper without controllers (nothing creates or removes pods), 16 CPUs, 64Gi,
/// with `flags`; returns once it is READY.
fn spawn_emulator(kubeconfig: &Path, flags: &[&str]) -> Guard {
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kmock_cluster.py");
    let mut emulator = Guard(
        Command::new("python3")
            .arg(&helper)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--lifetime", "90", "--no-controllers"])
            .args(["--node-cpu", "16", "--node-memory", "64Gi"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut ready = String::new();
    BufReader::new(emulator.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("READY "), "emulator said {ready:?}");
    emulator
}

/// `trainscale run` with the operator and the scheduler role off, 1 s passes, no cooldown.
fn spawn_daemon(kubeconfig: &Path, port: u16, extra: &[&str]) -> Guard {
    Guard(
        Command::new(env!("CARGO_BIN_EXE_trainscale"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--interval",
                "1s",
                "--debounce",
                "200ms",
                "--cooldown",
                "0s",
            ])
            .args(["--lease-namespace", "trainscale-system", "--leader-elect"])
            .args(["--operator=false", "--scheduler-name="])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap(),
    )
}

/// SIGTERM: a clean exit, promptly; the emulator denied none of the daemon's requests; then the
/// emulator ends.
async fn stop(mut daemon: Guard, mut emulator: Guard, kubeconfig: &Path) {
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.0.id().to_string()])
        .status();
    let stopping = Instant::now();
    let status = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "exit status {status}");
    assert_no_denials(&client(kubeconfig).await).await;
    drop(emulator.0.stdin.take());
}

/// Polls `probe` until it holds, failing after [`DEADLINE`] or if the daemon exits.
async fn until<F, Fut>(daemon: &mut Guard, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !probe().await {
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "{what}: the daemon exited"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A CRD installed while the daemon runs: discovery finds it at the next look-up
/// (`--discovery-interval 1s`), the kind is watched from then on, readiness never drops, and a
/// PyTorchJob applied then is sized like any job.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_crd_installed_later_is_found_and_its_jobs_sized() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let emulator = spawn_emulator(&kubeconfig, &[]);
    let port = free_port();
    let mut daemon = spawn_daemon(&kubeconfig, port, &["--discovery-interval", "1s"]);
    until(&mut daemon, "/readyz 200", || async {
        http_status(port, "/readyz") == Some(200)
    })
    .await;
    let log = daemon_log(&kubeconfig).await;
    assert!(!log.contains_key("watch pytorchjobs"), "{log:?}");

    let client = client(&kubeconfig).await;
    let served: Value = client
        .request(
            http::Request::post("/_harness/serve-pytorch-crds")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(served.as_array().map(Vec::len), Some(2));
    kubeflow_job(&client, "late", 4, 1, false).await;
    until(&mut daemon, "the late PyTorchJob sized to 4", || async {
        let job = get(&client, "PyTorchJob", "late").await;
        at(&job, &["spec", "pytorchReplicaSpecs", "Worker", "replicas"]) == Some(4)
    })
    .await;
    // The pass after the resize writes its sizing conditions (the annotation).
    until(
        &mut daemon,
        "the late PyTorchJob's sizing annotation",
        || async {
            let job = get(&client, "PyTorchJob", "late").await;
            job["metadata"]["annotations"]["trainscale.io/sizing"].is_string()
        },
    )
    .await;
    let log = daemon_log(&kubeconfig).await;
    assert!(log.contains_key("watch pytorchjobs"), "{log:?}");
    assert!(log.contains_key("watch pytorchtrainingjobs"), "{log:?}");
    // One resize, one sizing annotation.
    assert_eq!(log.get("patch pytorchjobs"), Some(&2), "{log:?}");
    assert_eq!(http_status(port, "/readyz"), Some(200));
    stop(daemon, emulator, &kubeconfig).await;
}
