//! Start-up helpers of the end-to-end suites that run the `trainscale` binary against the kmock
//! emulator (`tests/e2e/kmock_cluster.py`): process guards, loopback ports, plain HTTP probes,
//! the emulator and its two kubeconfigs (the service account's for the daemon, `.admin` for the
//! test), kube clients, the daemon container of `deploy/deployment.yaml`, the harness's own
//! endpoints (`/_harness/...`), dumps of the cluster for `trainscale plan`, and bounded polling.
//!
//! Every child process is held by a [`Guard`] that kills it when dropped, so a failed assertion
//! leaks no process; a [`Workdir`] is kept (and its path printed) when the test panics or
//! `TRAINSCALE_E2E_KEEP` is set, with the emulator's and every daemon's log in it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The User-Agent of the tests' own requests, so the harness's request log tells them apart.
pub const TEST_AGENT: &str = "trainscale-e2e-test";

/// The service account the harness authenticates the daemon's token as.
pub const SERVICE_ACCOUNT: &str = "system:serviceaccount:trainscale-system:trainscale";

/// The verbs that change objects.
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// A child process, killed (SIGKILL) and reaped when dropped.
pub struct Guard {
    child: Child,
    /// What the process is, for messages (`emulator`, `replica trainscale-a`).
    pub name: String,
}

impl Guard {
    pub fn new(name: impl Into<String>, child: Child) -> Self {
        Guard {
            child,
            name: name.into(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`TERM`, `KILL`, `STOP`, `CONT`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap_or_else(|e| panic!("kill -{signal} {}: {e}", self.name));
        assert!(
            status.success(),
            "kill -{signal} {} (pid {}): {status}",
            self.name,
            self.pid()
        );
    }

    /// The exit status, if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name))
    }

    /// `Err` naming the process when it has ended.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.exited() {
            None => Ok(()),
            Some(status) => Err(format!("{} exited early: {status}", self.name)),
        }
    }

    /// SIGKILL, then reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `within` for a successful exit.
    pub async fn terminate(&mut self, within: Duration) {
        self.signal("TERM");
        let stopping = Instant::now();
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(
                stopping.elapsed() < within,
                "{}: no exit within {within:?} of SIGTERM",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(status.success(), "{}: exit status {status}", self.name);
    }

    /// The child's stdin, if it was piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A temporary directory for kubeconfigs, fixtures and logs; kept (its path printed on stderr)
/// when the test panics or `TRAINSCALE_E2E_KEEP` is set, removed otherwise.
pub struct Workdir(tempfile::TempDir);

impl Workdir {
    pub fn new(prefix: &str) -> Self {
        Workdir(
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir()
                .unwrap_or_else(|e| panic!("creating a temporary directory: {e}")),
        )
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let keep = std::env::var_os("TRAINSCALE_E2E_KEEP").is_some_and(|v| !v.is_empty());
        if std::thread::panicking() || keep {
            self.0.disable_cleanup(true);
            eprintln!("logs and fixtures kept in {}", self.0.path().display());
        }
    }
}

/// Fails the test when python3 cannot import kmock although the build found it (or CI is set).
pub fn require_kmock() {
    let importable = Command::new("python3")
        .args(["-c", "import kmock, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        importable,
        "python3 with kmock is missing: pip install 'kmock==0.8.*' (CI installs it)"
    );
}

/// A loopback port free at the time of the call.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// Status code and whole response of a plain GET on a loopback port, if it answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, response))
}

/// The status code of a plain GET on a loopback port, if it answers.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    http_get(port, path).map(|(code, _)| code)
}

/// The value of the sample `name{labels…}` in a Prometheus text page; every label in `labels`
/// (`key="value"`) must be on the sample.
pub fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|l| label_text.split(',').any(|kv| kv == *l))
            .then(|| value.trim().parse().ok())?
    })
}

/// `trainscale_api_requests_total` of a daemon's `/metrics` on `port`, as `"<verb> <resource>"`
/// rows like the harness's request log; `None` when the port does not answer.
pub fn daemon_request_counts(port: u16) -> Option<BTreeMap<String, u64>> {
    let (code, body) = http_get(port, "/metrics")?;
    if code != 200 {
        return None;
    }
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("trainscale_api_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ")?;
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let count: f64 = value.trim().parse().ok()?;
        *out.entry(format!("{} {}", label("verb"), label("resource")))
            .or_default() += count as u64;
    }
    Some(out)
}

/// `after - before` of two request logs, without zero rows.
pub fn log_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The write rows (`create`, `update`, `patch`, `delete`, `deletecollection`) of a request log.
pub fn writes_in(log: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    log.iter()
        .filter(|(key, _)| {
            key.split_once(' ')
                .is_some_and(|(verb, _)| WRITE_VERBS.contains(&verb))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The emulator (`tests/e2e/kmock_cluster.py`), serving on loopback until its guard drops or
/// its stdin closes.
pub struct Emulator {
    pub guard: Guard,
    /// The service account's kubeconfig (context namespace `trainscale-system`): the daemon's.
    pub kubeconfig: PathBuf,
    /// `kubeconfig` + `.admin`: the admin token, namespace `default`; the test's.
    pub admin_kubeconfig: PathBuf,
    pub url: String,
}

impl Emulator {
    /// Starts the emulator with `flags`, writing its kubeconfigs and its log (stderr,
    /// `emulator.log`) into `dir`, living at most `lifetime_s` seconds; returns once it is READY.
    pub fn start(dir: &Path, flags: &[&str], lifetime_s: u32) -> Emulator {
        let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kmock_cluster.py");
        let kubeconfig = dir.join("kubeconfig");
        let log = File::create(dir.join("emulator.log"))
            .unwrap_or_else(|e| panic!("creating emulator.log: {e}"));
        let child = Command::new("python3")
            .arg(&helper)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--lifetime", &lifetime_s.to_string()])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", helper.display()));
        let mut guard = Guard::new("emulator", child);
        let stdout = guard
            .child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("the emulator's stdout is not piped"));
        let mut ready = String::new();
        BufReader::new(stdout)
            .read_line(&mut ready)
            .unwrap_or_else(|e| panic!("reading the emulator's READY line: {e}"));
        let url = ready
            .strip_prefix("READY ")
            .unwrap_or_else(|| {
                panic!(
                    "the emulator said {ready:?}, not READY <url> (its log: {})",
                    dir.join("emulator.log").display()
                )
            })
            .trim()
            .to_string();
        let mut admin_kubeconfig = kubeconfig.clone().into_os_string();
        admin_kubeconfig.push(".admin");
        Emulator {
            guard,
            kubeconfig,
            admin_kubeconfig: admin_kubeconfig.into(),
            url,
        }
    }

    /// A client with the admin token, sending [`TEST_AGENT`].
    pub async fn admin(&self) -> Client {
        client(&self.admin_kubeconfig).await
    }

    /// GET of a harness endpoint (`/_harness/...`), as admin.
    pub async fn harness<T: DeserializeOwned>(&self, path: &str) -> T {
        let request = http::Request::get(path)
            .body(Vec::new())
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        self.admin()
            .await
            .request(request)
            .await
            .unwrap_or_else(|e| panic!("GET {path} of the harness: {e}"))
    }

    /// The harness's request log by `by` (`agent` or `user`): `{"<who>": {"<verb> <resource>": n}}`.
    pub async fn requests_by(&self, by: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
        self.harness(&format!("/_harness/requests?by={by}")).await
    }

    /// The daemon's service account's writes (`"<verb> <resource>"` → count), its Lease
    /// renewals aside.
    pub async fn daemon_writes(&self) -> BTreeMap<String, u64> {
        let by_user = self.requests_by("user").await;
        let daemon = by_user.get(SERVICE_ACCOUNT).cloned().unwrap_or_default();
        writes_in(&daemon)
            .into_iter()
            .filter(|(k, _)| !k.ends_with(" leases"))
            .collect()
    }

    /// Every request the harness's RBAC denied, in order.
    pub async fn denied(&self) -> Vec<Value> {
        self.harness("/_harness/denied").await
    }

    /// Pods that ended Failed (`{"namespace","name","reason","node"}`).
    pub async fn failed_pods(&self) -> Vec<Value> {
        self.harness("/_harness/failed-pods").await
    }

    /// Trainer pod failures counted by the harness's Job controller, by `<namespace>/<job>`.
    pub async fn failures(&self) -> BTreeMap<String, u64> {
        self.harness("/_harness/failures").await
    }

    /// Closes the emulator's stdin, which ends it.
    pub fn stop(mut self) {
        drop(self.guard.take_stdin());
    }
}

/// A client for `kubeconfig`, sending [`TEST_AGENT`] as its User-Agent.
pub async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("loading {}: {e}", kubeconfig.display()));
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(TEST_AGENT),
    ));
    Client::try_from(config)
        .unwrap_or_else(|e| panic!("a client for {}: {e}", kubeconfig.display()))
}

/// An environment variable of the daemon container.
#[derive(Debug, Clone, PartialEq)]
pub enum EnvSource {
    /// A literal `value`.
    Value(String),
    /// `valueFrom.fieldRef.fieldPath` (`metadata.name`, `metadata.namespace`).
    Field(String),
}

/// The daemon container of a Deployment manifest: its namespace, `args` and `env`.
#[derive(Debug, Clone)]
pub struct Container {
    /// The Deployment's namespace (what `metadata.namespace` gives its pods).
    pub namespace: String,
    pub args: Vec<String>,
    pub env: Vec<(String, EnvSource)>,
}

/// Reads the container named `container` of the Deployment in `path` (YAML, via the crate's
/// manifest reader); a missing or unexpected field fails naming it.
pub fn deployment_container(path: &Path, container: &str) -> Container {
    use trainscale::api::manifest::read_documents;
    let where_ = path.display();
    let docs = read_documents(path).unwrap_or_else(|e| panic!("{e}"));
    let deployment = docs
        .iter()
        .find(|d| d.kind() == "Deployment")
        .unwrap_or_else(|| panic!("{where_}: no Deployment"));
    let v = &deployment.value;
    let namespace = v["metadata"]["namespace"]
        .as_str()
        .unwrap_or_else(|| panic!("{where_}: Deployment metadata.namespace is not a string"))
        .to_string();
    let c = v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
        .unwrap_or_else(|| {
            panic!("{where_}: spec.template.spec.containers has no container {container:?}")
        });
    let args = match &c["args"] {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|a| {
                a.as_str()
                    .unwrap_or_else(|| {
                        panic!("{where_}: container {container} args: {a} is not a string")
                    })
                    .to_string()
            })
            .collect(),
        other => panic!("{where_}: container {container} args is not a list: {other}"),
    };
    let mut env = Vec::new();
    for (i, e) in c["env"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{where_}: container {container} env[{i}]");
        let name = e["name"]
            .as_str()
            .unwrap_or_else(|| panic!("{field}.name is not a string"))
            .to_string();
        let source = if let Some(value) = e.get("value") {
            EnvSource::Value(
                value
                    .as_str()
                    .unwrap_or_else(|| panic!("{field}.value is not a string: {value}"))
                    .to_string(),
            )
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            EnvSource::Field(path.to_string())
        } else {
            panic!("{field} ({name}): neither a value nor a valueFrom.fieldRef: {e}");
        };
        env.push((name, source));
    }
    Container {
        namespace,
        args,
        env,
    }
}

/// The daemon container of `deploy/deployment.yaml`.
pub fn shipped_container() -> Container {
    deployment_container(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/deployment.yaml"),
        "trainscale",
    )
}

/// One `trainscale` process started as a replica of the Deployment.
pub struct Replica {
    pub guard: Guard,
    /// Its `POD_NAME`; its Lease identity starts with it.
    pub pod_name: String,
    /// Its `/metrics`, `/healthz`, `/readyz` port on loopback.
    pub port: u16,
    pub log: PathBuf,
}

/// The pace the single-replica e2e tests run the daemon at: a pass every second, 200 ms
/// debounce, text logs (the shipped cooldown unless a test sets its own).
pub const FAST_PASSES: [(&str, &str); 3] = [
    ("TRAINSCALE_INTERVAL", "1s"),
    ("TRAINSCALE_DEBOUNCE", "200ms"),
    ("TRAINSCALE_LOG_FORMAT", "text"),
];

/// batch/v1 Jobs: apiVersion, kind, plural.
pub const JOB: (&str, &str, &str) = ("batch/v1", "Job", "jobs");

impl Replica {
    /// One replica of the shipped container (`trainscale-0`) sizing only (`--operator=false`),
    /// at [`FAST_PASSES`], against `emulator`, logging into `dir`.
    pub fn sizer(emulator: &Emulator, dir: &Path) -> Replica {
        Replica::start(
            &shipped_container(),
            "trainscale-0",
            &emulator.kubeconfig,
            dir,
            &FAST_PASSES,
            &["--operator=false"],
        )
    }

    /// Starts the debug `trainscale` binary as a pod of the Deployment named `pod_name` would run:
    /// the container's `args` plus `--kubeconfig` and `extra_args`, its literal `env` values, `metadata.name` and
    /// `metadata.namespace` field references resolved as the kubelet does, `HOSTNAME` = the pod
    /// name, and nothing else from the test's environment; `overrides` replace or add variables
    /// (`TRAINSCALE_METRICS_ADDR` is always set to a free loopback port). Logs go to
    /// `<dir>/<pod_name>.log`.
    pub fn start(
        container: &Container,
        pod_name: &str,
        kubeconfig: &Path,
        dir: &Path,
        overrides: &[(&str, &str)],
        extra_args: &[&str],
    ) -> Replica {
        let port = free_port();
        let metrics_addr = format!("127.0.0.1:{port}");
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        for (name, source) in &container.env {
            let value = match source {
                EnvSource::Value(v) => v.clone(),
                EnvSource::Field(path) if path == "metadata.name" => pod_name.to_string(),
                EnvSource::Field(path) if path == "metadata.namespace" => {
                    container.namespace.clone()
                }
                EnvSource::Field(path) => {
                    panic!("env {name}: fieldRef {path} is not one the suite can play")
                }
            };
            env.insert(name.clone(), value);
        }
        env.insert("HOSTNAME".into(), pod_name.to_string());
        env.insert("TRAINSCALE_METRICS_ADDR".into(), metrics_addr);
        for (name, value) in overrides {
            env.insert(name.to_string(), value.to_string());
        }
        let log = dir.join(format!("{pod_name}.log"));
        let file = File::create(&log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let child = Command::new(env!("CARGO_BIN_EXE_trainscale"))
            .args(&container.args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra_args)
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting trainscale as {pod_name}: {e}"));
        Replica {
            guard: Guard::new(format!("replica {pod_name}"), child),
            pod_name: pod_name.to_string(),
            port,
            log,
        }
    }

    /// Its `/metrics` page, if it answers.
    pub fn metrics(&self) -> Option<String> {
        http_get(self.port, "/metrics")
            .filter(|(code, _)| *code == 200)
            .map(|(_, body)| body)
    }

    /// `trainscale_leader` on its `/metrics`.
    pub fn leads(&self) -> Option<bool> {
        sample(&self.metrics()?, "trainscale_leader", &[]).map(|v| v == 1.0)
    }
}

/// `(api_version, kind, plural, namespaced)` of every resource a dump holds, as
/// `kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs,pytorchtrainingjobs,pytorchjobs -A -o json`
/// lists them.
pub const DUMP_RESOURCES: [(&str, &str, &str, bool); 8] = [
    ("v1", "Node", "nodes", false),
    ("v1", "Pod", "pods", true),
    ("batch/v1", "Job", "jobs", true),
    (
        "scheduling.k8s.io/v1",
        "PriorityClass",
        "priorityclasses",
        false,
    ),
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

/// An API of `api_version`/`kind` (plural `plural`) across all namespaces.
pub fn api_all(client: &Client, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::all_with(client.clone(), &resource)
}

/// An API of `api_version`/`kind` (plural `plural`) in `namespace` (`None`: cluster-scoped).
pub fn api_in(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Every object of `api_version`/`kind` in the cluster as JSON, `apiVersion` and `kind` set.
pub async fn list_all(client: &Client, api_version: &str, kind: &str, plural: &str) -> Vec<Value> {
    let list = api_all(client, api_version, kind, plural)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing {plural}: {e}"));
    list.items
        .into_iter()
        .map(|obj| {
            let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
            v["apiVersion"] = json!(api_version);
            v["kind"] = json!(kind);
            v
        })
        .collect()
}

/// A `v1 List` of every object of [`DUMP_RESOURCES`] (the kinds in `skip` left out), read with
/// `client`.
pub async fn dump(client: &Client, skip: &[&str]) -> Value {
    let mut items = Vec::new();
    for (api_version, kind, plural, _) in DUMP_RESOURCES {
        if !skip.contains(&kind) {
            items.extend(list_all(client, api_version, kind, plural).await);
        }
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// `trainscale plan --snapshot <snapshot> --output json <args>` parsed; fails with its stderr.
pub fn plan(snapshot: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["plan", "--output", "json", "--snapshot"])
        .arg(snapshot)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running trainscale plan: {e}"));
    assert!(
        out.status.success(),
        "trainscale plan {} {args:?}: {}\n{}",
        snapshot.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "trainscale plan printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Creates `value` (its `apiVersion` and `kind`, with `plural`) in its namespace; returns the
/// stored object.
pub async fn create(client: &Client, plural: &str, value: &Value) -> Value {
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let kind = value["kind"].as_str().unwrap_or_default();
    let namespace = value["metadata"]["namespace"].as_str();
    let name = value["metadata"]["name"].as_str().unwrap_or_default();
    let obj: DynamicObject = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{kind} {name} is not an object: {e}"));
    let created = api_in(client, api_version, kind, plural, namespace)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {namespace:?}/{name}: {e}"));
    serde_json::to_value(created).unwrap_or(Value::Null)
}

/// Polls `probe` every `every` until it returns `Ok`, failing after `deadline` with `what` and
/// its last `Err` (what was seen), or as soon as `alive` reports a dead process.
pub async fn poll<T, F, Fut>(
    deadline: Duration,
    every: Duration,
    what: &str,
    mut alive: impl FnMut() -> Result<(), String>,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        let seen = match probe().await {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if let Err(dead) = alive() {
            panic!("{what}: {dead}; last seen: {seen}");
        }
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}; last seen: {seen}"
        );
        tokio::time::sleep(every).await;
    }
}
