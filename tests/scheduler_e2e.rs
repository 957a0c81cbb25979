//! End-to-end tests of trainscale as the scheduler of its own pods (issue 19), over real HTTP on
//! loopback against the kmock Kubernetes emulator (`tests/e2e/kmock_cluster.py`, PyPI `kmock`
//! 0.8), as `tests/daemon_e2e.rs` runs it.
//!
//! - [`harness_binds_and_patches_pod_status_as_the_api_server_does`]: the harness routes the
//!   daemon's binder relies on (`pods/binding`, strategic-merge `pods/status`, pending pods for
//!   another scheduler, `/_harness/bindings`), checked without the daemon.
//! - [`two_hundred_pending_trainers_are_bound_in_one_pass_where_they_fit`]: the issue's
//!   acceptance test. 20 TrainingJobs of 10 trainers each (min = max = 10), their trainer Jobs
//!   seeded with `schedulerName: trainscale` before the daemon starts, so the emulator's Job
//!   controller has created 200 pending pods; `trainscale run --operator=false` binds every one of
//!   them in its first scheduling pass, each onto a node where it fits (CPU, memory,
//!   `nvidia.com/gpu`, the node's `pods` allocatable, and `NoSchedule` taints).
//! - [`pods_with_pod_anti_affinity_are_left_pending_with_a_warning`]: trainers whose template
//!   asks for `podAntiAffinity` (which the binder does not evaluate) are not bound; each gets a
//!   Warning Event `FailedScheduling` whose note names `podAntiAffinity`.
//!
//! Reported as ignored (with how to install the emulator) when the build found no kmock and `CI`
//! is unset (`build.rs`); in CI a missing emulator fails them. The test's own requests carry the
//! User-Agent [`TEST_AGENT`], so the emulator's request log tells the daemon's apart. The daemon
//! authenticates as the service account (`kubeconfig`) under the RBAC of `deploy/`, the test's
//! own clients as the emulator's admin (`kubeconfig.admin`); each test ends by checking that the
//! emulator denied nothing.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{Value, json};
use trainscale::api::{JobKind, TrainingJob};
use trainscale::operator::{OperatorConfig, desired};

#[path = "support/kmock_harness.rs"]
mod kmock_harness;

use kmock_harness::{admin_kubeconfig, assert_no_denials};

/// The namespace of the trainers.
const NS: &str = "ml";
/// The scheduler name the daemon binds for (its `--scheduler-name` default).
const SCHEDULER: &str = "trainscale";
/// The User-Agent of the test's own requests (the daemon sends none).
const TEST_AGENT: &str = "trainscale-e2e-test";
/// The one taint of the tainted nodes.
const TAINT_KEY: &str = "dedicated";
const TAINT_VALUE: &str = "big";
const GPU: &str = "nvidia.com/gpu";

/// Kills a child process when dropped (a failed assertion must not leak processes).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn require_kmock() {
    let found = Command::new("python3")
        .args(["-c", "import kmock, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "python3 with kmock is missing: pip install 'kmock==0.8.*' 'PyYAML==6.*' (CI installs it)"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// Status code of a plain GET on the daemon's port, if it answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
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

/// Starts the emulator helper with `flags`, writing `kubeconfig`; returns once it is READY.
fn spawn_emulator(kubeconfig: &Path, flags: &[&str]) -> Guard {
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kmock_cluster.py");
    let mut emulator = Guard(
        Command::new("python3")
            .arg(&helper)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the emulator helper"),
    );
    let mut ready_line = String::new();
    BufReader::new(emulator.0.stdout.take().expect("the helper's stdout"))
        .read_line(&mut ready_line)
        .expect("the helper says READY");
    assert!(
        ready_line.starts_with("READY "),
        "emulator said {ready_line:?}"
    );
    emulator
}

/// A client of the test's own, as the emulator's admin (`<kubeconfig>.admin`; the daemon gets
/// `kubeconfig`, the service account's).
async fn client(kubeconfig: &Path) -> Client {
    let kc =
        Kubeconfig::read_from(admin_kubeconfig(kubeconfig)).expect("the emulator's kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(TEST_AGENT),
    ));
    Client::try_from(config).expect("a client")
}

/// `GET path` on the emulator, as JSON.
async fn harness_get<T: serde::de::DeserializeOwned>(client: &Client, path: &str) -> T {
    let request = http::Request::get(path)
        .body(Vec::new())
        .expect("a request");
    client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// The emulator's log of the daemon's requests (everyone's but the test's own), by
/// `"<verb> <resource>"`.
async fn daemon_requests(client: &Client) -> BTreeMap<String, u64> {
    let by_agent: BTreeMap<String, BTreeMap<String, u64>> =
        harness_get(client, "/_harness/requests?by=agent").await;
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

/// One binding the emulator applied (`GET /_harness/bindings`); times are wall-clock seconds.
#[derive(serde::Deserialize, Debug, Clone)]
struct Binding {
    namespace: String,
    name: String,
    node: String,
    created: Option<f64>,
    bound: f64,
}

async fn harness_bindings(client: &Client) -> Vec<Binding> {
    harness_get(client, "/_harness/bindings").await
}

/// The daemon, its log going to a file.
struct Daemon {
    child: Guard,
    log: PathBuf,
    port: u16,
}

impl Daemon {
    /// Starts `trainscale run` against `kubeconfig` with `extra` flags (after the defaults).
    fn start(kubeconfig: &Path, dir: &Path, extra: &[&str]) -> Daemon {
        let port = free_port();
        let log = dir.join("daemon.log");
        let out = File::create(&log).expect("the daemon's log file");
        let err = out.try_clone().expect("the log file, twice");
        let child = Command::new(env!("CARGO_BIN_EXE_trainscale"))
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
            .args(extra)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("the trainscale binary starts");
        Daemon {
            child: Guard(child),
            log,
            port,
        }
    }

    /// The daemon's log, ANSI colours stripped.
    fn log_text(&self) -> String {
        strip_ansi(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The last `n` lines of the daemon's log.
    fn tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.0.try_wait().expect("the daemon's status")
    }

    /// Waits for `/readyz` 200 (caches synced).
    async fn ready(&mut self, deadline: Duration) {
        let started = Instant::now();
        while http_status(self.port, "/readyz") != Some(200) {
            if let Some(status) = self.exited() {
                panic!(
                    "the daemon exited ({status}) before /readyz turned 200; its log:\n{}",
                    self.tail(40)
                );
            }
            assert!(
                started.elapsed() < deadline,
                "/readyz not 200 within {deadline:?}; daemon log tail:\n{}",
                self.tail(40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM, then a clean exit.
    async fn stop(mut self) {
        let pid = self.child.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let stopping = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                assert!(
                    status.success(),
                    "exit status {status}; log tail:\n{}",
                    self.tail(20)
                );
                return;
            }
            assert!(
                stopping.elapsed() < Duration::from_secs(15),
                "no exit after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The first log line whose message is `message` (a word of the line) and that has the field
/// `field` (a word `field=...`), and its `key=value` fields, in any order; `None` when no line
/// has both.
fn first_log_fields(
    log: &str,
    message: &str,
    field: &str,
) -> Option<(String, BTreeMap<String, String>)> {
    let prefix = format!("{field}=");
    log.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let found = words.contains(&message) && words.iter().any(|w| w.starts_with(&prefix));
        found.then(|| {
            let fields = words
                .iter()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                .collect();
            (line.to_string(), fields)
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Quantities and fit, computed here independently of the crate under test.

/// A Kubernetes quantity in thousandths of its unit (`"500m"` → 500, `"1Gi"` → 1073741824000).
fn milli(quantity: &str) -> i128 {
    let q = quantity.trim();
    let suffixes: [(&str, i128); 13] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("m", -1),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (number, factor) = suffixes
        .iter()
        .find_map(|(s, f)| q.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((q, 1));
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let whole: i128 = whole
        .parse()
        .unwrap_or_else(|_| panic!("quantity {quantity:?}"));
    let scale = 10i128.pow(frac.len() as u32);
    let frac: i128 = if frac.is_empty() {
        0
    } else {
        frac.parse()
            .unwrap_or_else(|_| panic!("quantity {quantity:?}"))
    };
    let thousandths = (whole * scale + frac) * 1000;
    if factor == -1 {
        thousandths / 1000 / scale
    } else {
        thousandths * factor / scale
    }
}

/// What a pod or a node holds, in thousandths: cpu, memory, GPUs; and a pod count.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Amounts {
    cpu: i128,
    memory: i128,
    gpu: i128,
    pods: i128,
}

impl Amounts {
    fn of(map: Option<&Value>) -> Amounts {
        let get = |key: &str| {
            map.and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .map(milli)
                .unwrap_or(0)
        };
        Amounts {
            cpu: get("cpu"),
            memory: get("memory"),
            gpu: get(GPU),
            pods: get("pods"),
        }
    }

    fn add(&mut self, other: Amounts) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.gpu += other.gpu;
        self.pods += other.pods;
    }

    fn max(self, other: Amounts) -> Amounts {
        Amounts {
            cpu: self.cpu.max(other.cpu),
            memory: self.memory.max(other.memory),
            gpu: self.gpu.max(other.gpu),
            pods: self.pods.max(other.pods),
        }
    }
}

/// A container's requests, a resource it only limits requested at its limit (the API server's
/// defaulting).
fn container_requests(container: &Value) -> Amounts {
    let resources = container.get("resources");
    let mut requests = resources
        .and_then(|r| r.get("requests"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(limits) = resources
        .and_then(|r| r.get("limits"))
        .and_then(Value::as_object)
    {
        for (k, v) in limits {
            if requests.get(k).is_none() {
                requests[k] = v.clone();
            }
        }
    }
    Amounts::of(Some(&requests))
}

/// A pod's effective requests as the kube-scheduler counts them: max(sum of containers, each
/// init container) + overhead, and one pod.
fn pod_requests(pod: &Value) -> Amounts {
    let spec = &pod["spec"];
    let mut sum = Amounts::default();
    for c in spec["containers"].as_array().into_iter().flatten() {
        sum.add(container_requests(c));
    }
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        sum = sum.max(container_requests(c));
    }
    sum.add(Amounts::of(spec.get("overhead")));
    sum.pods = 1000;
    sum
}

/// Whether `tolerations` tolerate `taint`, as the kube-scheduler matches them.
fn tolerated(taint: &Value, tolerations: &[Value]) -> bool {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    tolerations.iter().any(|t| {
        let effect_ok = s(t, "effect").is_empty() || s(t, "effect") == s(taint, "effect");
        let operator = if s(t, "operator").is_empty() {
            "Equal".to_string()
        } else {
            s(t, "operator")
        };
        let key_ok =
            (s(t, "key").is_empty() && operator == "Exists") || s(t, "key") == s(taint, "key");
        let value_ok = operator == "Exists" || s(t, "value") == s(taint, "value");
        effect_ok && key_ok && value_ok
    })
}

// ---------------------------------------------------------------------------------------------
// The cluster of the acceptance test.

/// One kind of node: how many, allocatable cpu, memory, GPUs, pods, and whether tainted.
struct NodeKind {
    count: usize,
    cpu: &'static str,
    memory: &'static str,
    gpu: &'static str,
    pods: &'static str,
    tainted: bool,
}

/// 37 nodes, `node-00` .. `node-36` in this order, plus the emulator's own `node-37`
/// (1 CPU, 2Gi, 110 pods). Names sort tainted and pod-limited nodes first, so a binder that ignores
/// either limit and takes nodes in name order, or the roomiest first, breaks it.
const NODE_KINDS: [NodeKind; 7] = [
    // Tainted `dedicated=big:NoSchedule` (3 of 38: ~8 %): the only nodes with room for the
    // tolerating GPU trainers (72Gi each), and room left for anyone who ignores the taint.
    NodeKind {
        count: 3,
        cpu: "64",
        memory: "576Gi",
        gpu: "16",
        pods: "110",
        tainted: true,
    },
    // Roomy, but 8 pods each (one taken by a system pod): the pod count binds.
    NodeKind {
        count: 2,
        cpu: "64",
        memory: "256Gi",
        gpu: "0",
        pods: "8",
        tainted: false,
    },
    // 8 pods, and little CPU (2500m, 500m taken by a system pod).
    NodeKind {
        count: 2,
        cpu: "2500m",
        memory: "256Gi",
        gpu: "0",
        pods: "8",
        tainted: false,
    },
    // GPU nodes: 4 GPUs each (64 for the 40 untolerating GPU trainers).
    NodeKind {
        count: 16,
        cpu: "32",
        memory: "64Gi",
        gpu: "4",
        pods: "110",
        tainted: false,
    },
    // Large CPU-only nodes: the roomiest untainted nodes, and no GPU.
    NodeKind {
        count: 2,
        cpu: "96",
        memory: "384Gi",
        gpu: "0",
        pods: "110",
        tainted: false,
    },
    // CPU-heavy, memory-poor.
    NodeKind {
        count: 6,
        cpu: "16",
        memory: "8Gi",
        gpu: "0",
        pods: "110",
        tainted: false,
    },
    // Memory-heavy, CPU-poor.
    NodeKind {
        count: 6,
        cpu: "4",
        memory: "32Gi",
        gpu: "0",
        pods: "110",
        tainted: false,
    },
];

/// The node list: `(name, kind index, tainted)`.
fn node_names() -> Vec<(String, usize, bool)> {
    let mut out = Vec::new();
    for (k, kind) in NODE_KINDS.iter().enumerate() {
        for _ in 0..kind.count {
            out.push((format!("node-{:02}", out.len()), k, kind.tainted));
        }
    }
    out
}

fn node_object(name: &str, kind: &NodeKind, tainted: bool) -> Node {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": kind.cpu, "memory": kind.memory, "pods": kind.pods},
            "capacity": {"cpu": kind.cpu, "memory": kind.memory, "pods": kind.pods},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    });
    if kind.gpu != "0" {
        node["status"]["allocatable"][GPU] = json!(kind.gpu);
        node["status"]["capacity"][GPU] = json!(kind.gpu);
    }
    if tainted {
        node["spec"]["taints"] = json!([
            {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"}
        ]);
    }
    serde_json::from_value(node).expect("a Node")
}

/// A bound, Running system pod in `kube-system` holding `cpu` and `memory` on `node`.
fn system_pod(name: &str, node: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("a Pod")
}

/// The system pods: one of 500m/512Mi on each pod-limited node (node-03 .. node-06), one of
/// 1 CPU/1Gi on every other small CPU-only node (node-25, -27, ..., -35).
fn system_pods() -> Vec<Pod> {
    let mut out = Vec::new();
    for i in 3..7 {
        out.push(system_pod(
            &format!("agent-{i:02}"),
            &format!("node-{i:02}"),
            "500m",
            "512Mi",
        ));
    }
    for i in (25..37).step_by(2) {
        out.push(system_pod(
            &format!("agent-{i:02}"),
            &format!("node-{i:02}"),
            "1",
            "1Gi",
        ));
    }
    out
}

/// One kind of job: how many, trainer cpu, memory, GPUs, and tolerations.
struct JobKindSpec {
    count: usize,
    cpu: &'static str,
    memory: &'static str,
    gpu: &'static str,
    tolerations: fn() -> Value,
}

fn no_tolerations() -> Value {
    json!([])
}

fn tolerate_everything() -> Value {
    json!([{"operator": "Exists"}])
}

fn tolerate_big_equal() -> Value {
    json!([{"key": TAINT_KEY, "operator": "Equal", "value": TAINT_VALUE, "effect": "NoSchedule"}])
}

fn tolerate_big_exists() -> Value {
    json!([{"key": TAINT_KEY, "operator": "Exists"}])
}

/// 20 jobs, `job-00` .. `job-19` in this order, 10 trainers each: 200 trainers needing 363 CPUs,
/// ~1.96Ti of memory and 80 GPUs.
const JOB_KINDS: [JobKindSpec; 7] = [
    JobKindSpec {
        count: 6,
        cpu: "500m",
        memory: "1Gi",
        gpu: "0",
        tolerations: no_tolerations,
    },
    JobKindSpec {
        count: 4,
        cpu: "2",
        memory: "4Gi",
        gpu: "0",
        tolerations: no_tolerations,
    },
    JobKindSpec {
        count: 4,
        cpu: "4",
        memory: "8Gi",
        gpu: "1",
        tolerations: no_tolerations,
    },
    JobKindSpec {
        count: 3,
        cpu: "100m",
        memory: "128Mi",
        gpu: "0",
        tolerations: no_tolerations,
    },
    // Tolerates every taint: may go anywhere.
    JobKindSpec {
        count: 1,
        cpu: "1",
        memory: "2Gi",
        gpu: "0",
        tolerations: tolerate_everything,
    },
    // 72Gi: only the tainted nodes hold them.
    JobKindSpec {
        count: 1,
        cpu: "4",
        memory: "72Gi",
        gpu: "2",
        tolerations: tolerate_big_equal,
    },
    JobKindSpec {
        count: 1,
        cpu: "4",
        memory: "72Gi",
        gpu: "2",
        tolerations: tolerate_big_exists,
    },
];

/// A collective (nccl) TrainingJob in `ml` scheduled by trainscale: no master, no pservers,
/// exactly `trainers` trainers (min = max) of the given resources and tolerations.
fn training_job(
    name: &str,
    trainers: i32,
    cpu: &str,
    memory: &str,
    gpu: &str,
    tolerations: Value,
) -> TrainingJob {
    let mut amounts = json!({"cpu": cpu, "memory": memory});
    if gpu != "0" {
        amounts[GPU] = json!(gpu);
    }
    serde_json::from_value(json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "image": "paddlepaddle/paddle:latest",
            "is_nccl": true,
            "schedulerName": SCHEDULER,
            "trainer": {
                "entrypoint": "python train.py",
                "min-instance": trainers, "max-instance": trainers,
                "resources": {"requests": amounts, "limits": amounts},
                "tolerations": tolerations,
            },
        },
    }))
    .expect("a TrainingJob")
}

/// Creates `job` and its trainer Job as the operator builds it (Indexed, parallelism =
/// completions = min, controller ownerReference to the TrainingJob, pod template with the job's
/// `schedulerName`, trainer requests and tolerations); `edit` may change the Job first.
async fn seed_job(client: &Client, job: &TrainingJob, edit: impl FnOnce(&mut Job)) -> Job {
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), NS);
    let created = tjs
        .create(&PostParams::default(), job)
        .await
        .expect("create the TrainingJob");
    let mut trainer = desired(&created, JobKind::TrainingJob, &OperatorConfig::default())
        .expect("the operator's objects for the job")
        .trainer;
    edit(&mut trainer);
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    jobs.create(&PostParams::default(), &trainer)
        .await
        .expect("create the trainer Job")
}

/// The pods of `NS` as JSON.
async fn pods_json(client: &Client, namespace: &str) -> Vec<Value> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.list(&Default::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .map(|p| serde_json::to_value(p).expect("a pod as JSON"))
        .collect()
}

fn node_of(pod: &Value) -> Option<&str> {
    pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())
}

/// `q`-quantile (nearest rank) of sorted `values`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

// ---------------------------------------------------------------------------------------------
// The harness, without the daemon.

/// The harness's pod subresources answer as the API server's: a binding sets `spec.nodeName` and
/// `PodScheduled=True` (201 `Success`), and is refused with 404 (no pod), 409 (bound already), 400
/// (name mismatch) or 422 (target not a Node, no name); a strategic merge patch of `pods/status`
/// merges conditions by `type`, a JSON merge patch replaces them; pods of a Job whose template
/// names `trainscale` stay pending while the default scheduler's are created bound; a bound
/// pending pod is started (Running, Ready, `PodScheduled` kept); `/_harness/bindings` and the
/// request log count the bindings.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn harness_binds_and_patches_pod_status_as_the_api_server_does() {
    require_kmock();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let emulator = spawn_emulator(&kubeconfig, &["--lifetime", "60"]);
    let client = client(&kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // Two Jobs of the operator's making: one for trainscale, one for the default scheduler.
    let ours = seed_job(
        &client,
        &training_job("ours", 2, "1", "1Gi", "0", json!([])),
        |_| {},
    )
    .await;
    seed_job(
        &client,
        &training_job("theirs", 1, "1", "1Gi", "0", json!([])),
        |job| {
            let spec = job.spec.as_mut().and_then(|s| s.template.spec.as_mut());
            spec.expect("a pod template").scheduler_name = Some("default-scheduler".into());
        },
    )
    .await;
    let started = Instant::now();
    let (ours0, ours1, theirs0) = loop {
        let (a, b, c) = (
            pods.get_opt("ours-trainer-0").await.expect("get"),
            pods.get_opt("ours-trainer-1").await.expect("get"),
            pods.get_opt("theirs-trainer-0").await.expect("get"),
        );
        if let (Some(a), Some(b), Some(c)) = (a, b, c) {
            break (a, b, c);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the Job controller created no pods"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    assert_eq!(node(&ours0), None, "a trainscale pod is created pending");
    assert_eq!(node(&ours1), None);
    assert_eq!(phase(&ours0).as_deref(), Some("Pending"));
    assert_eq!(node(&theirs0).as_deref(), Some("node-1"), "default: bound");
    assert_eq!(phase(&theirs0).as_deref(), Some("Running"));
    let owner = ours0
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    assert_eq!(
        owner.first().map(|o| o.name.as_str()),
        ours.metadata.name.as_deref()
    );

    let binding = |pod: &str, node: Value| {
        json!({"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": pod, "namespace": NS},
               "target": node})
    };
    let node_target = |name: &str| json!({"apiVersion": "v1", "kind": "Node", "name": name});
    let bind = |pod: &'static str, body: Value| {
        let pods = pods.clone();
        async move {
            pods.create_subresource::<Value, Value>("binding", pod, &PostParams::default(), &body)
                .await
        }
    };
    let code = |r: Result<Value, kube::Error>| match r {
        Ok(v) => (
            v["code"].as_u64().unwrap_or(0) as u16,
            v["status"].as_str().unwrap_or("").to_string(),
        ),
        Err(kube::Error::Api(s)) => (s.code, format!("{} {}", s.reason, s.message)),
        Err(e) => panic!("binding: {e}"),
    };

    // Refusals: no such pod; not a Node; no name; a name other than the URL's.
    let (c, what) = code(bind("nobody", binding("nobody", node_target("node-1"))).await);
    assert_eq!((c, what.starts_with("NotFound")), (404, true), "{what}");
    let (c, what) = code(
        bind(
            "ours-trainer-0",
            binding(
                "ours-trainer-0",
                json!({"kind": "Pod", "name": "ours-trainer-1"}),
            ),
        )
        .await,
    );
    assert_eq!(c, 422, "{what}");
    assert!(
        what.starts_with("Invalid") && what.contains("target.kind"),
        "{what}"
    );
    let (c, what) = code(
        bind(
            "ours-trainer-0",
            binding("ours-trainer-0", json!({"kind": "Node"})),
        )
        .await,
    );
    assert_eq!(c, 422, "{what}");
    assert!(what.contains("target.name"), "{what}");
    let (c, what) = code(
        bind(
            "ours-trainer-0",
            binding("ours-trainer-1", node_target("node-1")),
        )
        .await,
    );
    assert_eq!(c, 400, "{what}");
    assert_eq!(
        node(&pods.get("ours-trainer-0").await.expect("get")),
        None,
        "a refused binding binds nothing"
    );

    // A binding: 201 Success, nodeName and PodScheduled=True, a new resourceVersion.
    let before = pods.get("ours-trainer-0").await.expect("get");
    let (c, what) = code(
        bind(
            "ours-trainer-0",
            binding("ours-trainer-0", node_target("node-1")),
        )
        .await,
    );
    assert_eq!((c, what.as_str()), (201, "Success"));
    let after = pods.get("ours-trainer-0").await.expect("get");
    assert_eq!(node(&after).as_deref(), Some("node-1"));
    assert_ne!(
        after.metadata.resource_version, before.metadata.resource_version,
        "a binding bumps the resourceVersion"
    );
    let scheduled = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == "PodScheduled")
            .map(|c| (c.status.clone(), c.reason.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(scheduled(&after), vec![("True".to_string(), None)]);

    // Bound already: 409 Conflict naming the node.
    let (c, what) = code(
        bind(
            "ours-trainer-0",
            binding("ours-trainer-0", node_target("node-2")),
        )
        .await,
    );
    assert_eq!(c, 409, "{what}");
    assert!(
        what.starts_with("Conflict") && what.contains("is already assigned to node \"node-1\""),
        "{what}"
    );
    assert_eq!(
        node(&pods.get("ours-trainer-0").await.expect("get")).as_deref(),
        Some("node-1")
    );

    // The kubelet starts the bound pod: Running and Ready, PodScheduled kept.
    let started = Instant::now();
    let running = loop {
        let pod = pods.get("ours-trainer-0").await.expect("get");
        if phase(&pod).as_deref() == Some("Running") {
            break pod;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a bound pod never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let types: Vec<String> = running
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    assert_eq!(types, ["PodScheduled=True", "Ready=True"]);

    // Strategic merge of pods/status: conditions merged by type.
    let patched = pods
        .patch_status(
            "ours-trainer-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "Custom", "status": "True"},
            ]}})),
        )
        .await
        .expect("a strategic merge patch of pods/status");
    assert_eq!(scheduled(&patched), vec![]);
    let patched = pods
        .patch_status(
            "ours-trainer-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available"},
            ]}})),
        )
        .await
        .expect("a strategic merge patch of pods/status");
    let types: Vec<String> = patched
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    assert_eq!(
        types,
        ["Custom=True", "PodScheduled=False"],
        "merged by type"
    );
    assert_eq!(
        scheduled(&patched),
        vec![("False".to_string(), Some("Unschedulable".to_string()))]
    );
    // Again with another reason: the same condition updated, not a second one.
    let patched = pods
        .patch_status(
            "ours-trainer-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"},
            ]}})),
        )
        .await
        .expect("a strategic merge patch of pods/status");
    assert_eq!(
        scheduled(&patched),
        vec![("False".to_string(), Some("SchedulerError".to_string()))]
    );
    assert_eq!(node(&patched), None, "a status patch binds nothing");
    // A JSON merge patch replaces the list.
    let patched = pods
        .patch_status(
            "ours-trainer-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Custom", "status": "False"},
            ]}})),
        )
        .await
        .expect("a merge patch of pods/status");
    let types: Vec<String> = patched
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    assert_eq!(types, ["Custom=False"]);
    // No such pod: 404.
    let missing = pods
        .patch_status(
            "nobody",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": []}})),
        )
        .await;
    assert!(
        matches!(&missing, Err(kube::Error::Api(s)) if s.code == 404 && s.reason == "NotFound"),
        "{missing:?}"
    );

    // What the harness recorded: one binding, and every binding request in the log.
    let bindings = harness_bindings(&client).await;
    assert_eq!(bindings.len(), 1, "{bindings:?}");
    let b = &bindings[0];
    assert_eq!(
        (b.namespace.as_str(), b.name.as_str(), b.node.as_str()),
        (NS, "ours-trainer-0", "node-1")
    );
    let created = b.created.expect("the pod's creation time");
    assert!(created <= b.bound, "{b:?}");
    let log: BTreeMap<String, u64> = harness_get(&client, "/_harness/requests").await;
    assert_eq!(log.get("create pods/binding"), Some(&6), "{log:?}");
    assert_eq!(log.get("patch pods/status"), Some(&5), "{log:?}");

    assert_no_denials(&client).await;
    drop(emulator);
}

// ---------------------------------------------------------------------------------------------
// The acceptance test.

/// Issue 19's acceptance test (see the module docs). The cluster: the 37 nodes of
/// [`NODE_KINDS`] (3 tainted `dedicated=big:NoSchedule`, 4 with 8 pods allocatable, 16 with
/// 4 GPUs, 2 large CPU-only, 12 small ones either CPU- or memory-poor) and the emulator's own small
/// `node-37`; 10 system pods already bound; the 20 jobs of [`JOB_KINDS`] (200 trainers; 3 jobs
/// tolerate the taint, 2 of them only fit on the tainted nodes). Total room holds all 200
/// trainers whatever order a greedy binder that respects every limit takes them in (first fit,
/// least or most allocated, random; simulated over 64 pod orders when the cluster was designed),
/// while such a binder that ignores one limit breaks it or gets stuck in most of those orders
/// (GPUs always; a stand-in binder run through this test was caught ignoring taints, GPUs, pods,
/// CPU or memory with first fit).
///
/// What it expects of the daemon, started after the 200 pending pods exist with
/// `--operator=false` (and the defaults `--scheduler-name trainscale`, `--log-format text`):
/// - every pod bound within 60 s of `/readyz`; the first log line with the message `bindings`
///   says `bound=200` (and `failed=0` when it has that field);
/// - the emulator saw exactly 200 `create pods/binding` from it, and no pod `list` or `get` after
///   `/readyz` (bindings are made from the watch cache);
/// - read back: every trainer on an existing node; per node, the requests of its pods (system
///   pods included) within allocatable CPU, memory and GPUs, its pod count within allocatable
///   pods; no pod on a node whose `NoSchedule` taint it does not tolerate.
///
/// Printed, not asserted: the binding rate over the pass (first bind to last) and the
/// creation-to-binding latency p50/p99, from `/_harness/bindings`.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn two_hundred_pending_trainers_are_bound_in_one_pass_where_they_fit() {
    require_kmock();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let emulator = spawn_emulator(
        &kubeconfig,
        &[
            "--lifetime",
            "240",
            "--node-name",
            "node-37",
            "--node-cpu",
            "1",
            "--node-memory",
            "2Gi",
            "--node-pods",
            "110",
        ],
    );
    let client = client(&kubeconfig).await;

    // Nodes and system pods.
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, k, tainted) in node_names() {
        nodes
            .create(
                &PostParams::default(),
                &node_object(&name, &NODE_KINDS[k], tainted),
            )
            .await
            .expect("create a Node");
    }
    let system: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    for pod in system_pods() {
        system
            .create(&PostParams::default(), &pod)
            .await
            .expect("create a system pod");
    }

    // The 20 jobs and their trainer Jobs.
    let mut index = 0;
    for kind in &JOB_KINDS {
        for _ in 0..kind.count {
            let job = training_job(
                &format!("job-{index:02}"),
                10,
                kind.cpu,
                kind.memory,
                kind.gpu,
                (kind.tolerations)(),
            );
            let trainer = seed_job(&client, &job, |_| {}).await;
            let template = trainer.spec.as_ref().and_then(|s| s.template.spec.as_ref());
            assert_eq!(
                template.and_then(|s| s.scheduler_name.as_deref()),
                Some(SCHEDULER),
                "the trainer template names trainscale"
            );
            index += 1;
        }
    }
    assert_eq!(index, 20);

    // The Job controller creates the 200 pending pods.
    let seeding = Instant::now();
    loop {
        let pods = pods_json(&client, NS).await;
        let pending = pods.iter().filter(|p| node_of(p).is_none()).count();
        assert_eq!(pending, pods.len(), "a trainscale pod was created bound");
        if pending == 200 {
            break;
        }
        assert!(
            seeding.elapsed() < Duration::from_secs(60),
            "the emulator's Job controller created {pending} of 200 pods"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "200 pending trainer pods seeded in {:.1?}",
        seeding.elapsed()
    );

    // The daemon: binds them.
    let mut daemon = Daemon::start(&kubeconfig, dir.path(), &["--operator=false"]);
    daemon.ready(Duration::from_secs(60)).await;
    let synced = daemon_requests(&client).await;
    let ready_at = Instant::now();
    let deadline = Duration::from_secs(60);
    let bound = loop {
        let pods = pods_json(&client, NS).await;
        let bound = pods.iter().filter(|p| node_of(p).is_some()).count();
        if bound == 200 {
            break bound;
        }
        if let Some(status) = daemon.exited() {
            panic!(
                "the daemon exited ({status}) with {bound} of 200 pods bound; its log:\n{}",
                daemon.tail(40)
            );
        }
        assert!(
            ready_at.elapsed() < deadline,
            "{bound} of 200 trainer pods bound {deadline:?} after /readyz; daemon log tail:\n{}",
            daemon.tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "{bound} pods bound {:.1?} after /readyz",
        ready_at.elapsed()
    );
    let bindings = harness_bindings(&client).await;
    let requests = daemon_requests(&client).await;

    // One pass: the first `bindings` line bound all 200.
    let log = daemon.log_text();
    let (line, fields) = first_log_fields(&log, "bindings", "bound").unwrap_or_else(|| {
        panic!(
            "no log line with the message `bindings` and a field `bound`; daemon log tail:\n{}",
            daemon.tail(40)
        )
    });
    assert_eq!(
        fields.get("bound").map(String::as_str),
        Some("200"),
        "the first scheduling pass bound every pod: {line}"
    );
    if let Some(failed) = fields.get("failed") {
        assert_eq!(failed, "0", "{line}");
    }
    println!("first scheduling pass: {line}");

    // Requests: exactly one binding per pod, and no pod read after the initial sync.
    assert_eq!(
        requests.get("create pods/binding").copied().unwrap_or(0),
        200,
        "binding requests; the daemon's requests: {requests:?}"
    );
    let after_sync =
        |key: &str| requests.get(key).copied().unwrap_or(0) - synced.get(key).copied().unwrap_or(0);
    assert_eq!(
        (after_sync("list pods"), after_sync("get pods")),
        (0, 0),
        "pod LIST/GET after /readyz; the daemon's requests: {requests:?}"
    );
    println!("the daemon's requests: {requests:?}");

    // Every pod where it fits.
    let nodes_json: Vec<Value> = nodes
        .list(&Default::default())
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .map(|n| serde_json::to_value(n).expect("a node as JSON"))
        .collect();
    assert_eq!(nodes_json.len(), 38);
    let mut used: BTreeMap<String, Amounts> = BTreeMap::new();
    let mut all_pods = pods_json(&client, NS).await;
    all_pods.extend(pods_json(&client, "kube-system").await);
    let mut problems = Vec::new();
    for pod in &all_pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let Some(node_name) = node_of(pod) else {
            problems.push(format!("{name}: not bound"));
            continue;
        };
        let Some(node) = nodes_json
            .iter()
            .find(|n| n["metadata"]["name"] == node_name)
        else {
            problems.push(format!("{name}: bound to {node_name}, which is no node"));
            continue;
        };
        used.entry(node_name.to_string())
            .or_default()
            .add(pod_requests(pod));
        let tolerations = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for taint in node["spec"]["taints"].as_array().into_iter().flatten() {
            let effect = taint["effect"].as_str().unwrap_or("");
            if (effect == "NoSchedule" || effect == "NoExecute") && !tolerated(taint, &tolerations)
            {
                problems.push(format!(
                    "{name}: on {node_name}, whose taint {taint} it does not tolerate"
                ));
            }
        }
    }
    for node in &nodes_json {
        let name = node["metadata"]["name"].as_str().unwrap_or("");
        let allocatable = Amounts::of(node["status"].get("allocatable"));
        let u = used.get(name).copied().unwrap_or_default();
        for (what, u, a) in [
            ("cpu", u.cpu, allocatable.cpu),
            ("memory", u.memory, allocatable.memory),
            (GPU, u.gpu, allocatable.gpu),
            ("pods", u.pods, allocatable.pods),
        ] {
            if u > a {
                // Thousandths of a core are millicores; of the others, whole units.
                let (u, a) = if what == "cpu" {
                    (format!("{u}m"), format!("{a}m"))
                } else {
                    (format!("{}", u / 1000), format!("{}", a / 1000))
                };
                problems.push(format!("{name}: {what} requested {u} > allocatable {a}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} placement problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    let tainted_used = node_names()
        .iter()
        .filter(|(name, _, tainted)| *tainted && used.contains_key(name))
        .count();
    println!("nodes used: {} of 38 ({tainted_used} tainted)", used.len());

    // Measurements, printed.
    let ours: Vec<&Binding> = bindings.iter().filter(|b| b.namespace == NS).collect();
    let first = ours.iter().map(|b| b.bound).fold(f64::INFINITY, f64::min);
    let last = ours
        .iter()
        .map(|b| b.bound)
        .fold(f64::NEG_INFINITY, f64::max);
    let span = last - first;
    let mut latencies: Vec<f64> = ours
        .iter()
        .filter_map(|b| b.created.map(|c| b.bound - c))
        .collect();
    latencies.sort_by(f64::total_cmp);
    println!(
        "bindings: {} in {:.3} s (first to last bind): {:.0} pods/s",
        ours.len(),
        span,
        if span > 0.0 {
            ours.len() as f64 / span
        } else {
            f64::INFINITY
        }
    );
    println!(
        "creation -> binding latency (includes the wait for the daemon to start): p50 {:.3} s, p99 {:.3} s",
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99)
    );

    daemon.stop().await;
    assert_no_denials(&client).await;
    drop(emulator);
}

// ---------------------------------------------------------------------------------------------
// podAntiAffinity: not bound, a Warning Event.

/// A job whose trainer template asks for `podAntiAffinity` (one trainer per host): the binder
/// does not evaluate inter-pod affinity, so it binds none of its 3 pending trainers and publishes
/// a Warning Event `FailedScheduling` regarding each pod, whose note names `podAntiAffinity`.
/// A plain job beside it is bound, so the daemon was scheduling. The daemon: `--operator=false`,
/// default scheduler name.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn pods_with_pod_anti_affinity_are_left_pending_with_a_warning() {
    require_kmock();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let emulator = spawn_emulator(&kubeconfig, &["--lifetime", "120"]);
    let client = client(&kubeconfig).await;

    seed_job(
        &client,
        &training_job("plain", 2, "500m", "512Mi", "0", json!([])),
        |_| {},
    )
    .await;
    seed_job(
        &client,
        &training_job("spread", 3, "500m", "512Mi", "0", json!([])),
        |job| {
            let template = &mut job.spec.as_mut().expect("a Job spec").template;
            let affinity = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"paddle-job": "spread"}},
                    "topologyKey": "kubernetes.io/hostname",
                }],
            }});
            template.spec.as_mut().expect("a pod spec").affinity =
                Some(serde_json::from_value(affinity).expect("an Affinity"));
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let seeding = Instant::now();
    while pods
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .len()
        < 5
    {
        assert!(
            seeding.elapsed() < Duration::from_secs(30),
            "the Job controller created no pods"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut daemon = Daemon::start(&kubeconfig, dir.path(), &["--operator=false"]);
    daemon.ready(Duration::from_secs(60)).await;
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event")),
    );
    let spread: Vec<String> = (0..3).map(|i| format!("spread-trainer-{i}")).collect();
    let ready_at = Instant::now();
    let deadline = Duration::from_secs(60);
    let warnings = loop {
        let list = pods.list(&Default::default()).await.expect("list").items;
        let plain_bound = list
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("plain-"))
            })
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        let found: Vec<DynamicObject> = events
            .list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| {
                e.data["type"] == "Warning"
                    && e.data["reason"] == "FailedScheduling"
                    && e.data["regarding"]["kind"] == "Pod"
            })
            .collect();
        let warned = spread.iter().all(|name| {
            found
                .iter()
                .any(|e| e.data["regarding"]["name"] == name.as_str())
        });
        if plain_bound == 2 && warned {
            break found;
        }
        if let Some(status) = daemon.exited() {
            panic!(
                "the daemon exited ({status}); its log:\n{}",
                daemon.tail(40)
            );
        }
        assert!(
            ready_at.elapsed() < deadline,
            "after {deadline:?}: {plain_bound} of 2 plain pods bound, FailedScheduling Events \
             {:?}; daemon log tail:\n{}",
            found
                .iter()
                .map(|e| e.data["regarding"]["name"].to_string())
                .collect::<Vec<_>>(),
            daemon.tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for name in &spread {
        let event = warnings
            .iter()
            .find(|e| e.data["regarding"]["name"] == name.as_str())
            .expect("an Event for the pod");
        let note = event.data["note"].as_str().unwrap_or_default();
        assert!(
            note.contains("podAntiAffinity"),
            "the Event on {name} names podAntiAffinity: {note:?}"
        );
        assert_eq!(event.data["regarding"]["namespace"], NS);
        let pod = pods.get(name).await.expect("get the pod");
        assert_eq!(
            pod.spec.and_then(|s| s.node_name),
            None,
            "{name} is left pending"
        );
    }
    let requests = daemon_requests(&client).await;
    assert_eq!(
        requests.get("create pods/binding").copied().unwrap_or(0),
        2,
        "only the plain job's pods are bound: {requests:?}"
    );

    daemon.stop().await;
    assert_no_denials(&client).await;
    drop(emulator);
}
