//! End-to-end smoke test over real HTTP on loopback: the `trainscale run` binary (autoscaler and
//! operator together, with leader election) against the kmock Kubernetes emulator (PyPI `kmock`
//! 0.8, driven by `tests/e2e/kmock_cluster.py`).
//!
//! The test applies an elastic TrainingJob with no trainer Job of its own. The operator creates
//! the master and pserver ReplicaSets, the Indexed trainer Job, the trainers ConfigMap and the
//! Volcano PodGroup, all owned by the TrainingJob. The emulator runs no controllers, so the helper
//! plays the ReplicaSet and Job controllers and the scheduler minimally (pods created bound to the
//! node, Running and Ready; see the helper's docstring). The autoscaler then scales the trainer Job
//! up to the job's max onto the roomy node and writes the scale record; the operator follows
//! (ConfigMap, phase Running). SIGTERM ends both cleanly. Reported as ignored (with how to install the
//! emulator) when the build found no kmock and `CI` is unset (`build.rs`); in CI (`.ci/run`
//! installs kmock) a missing emulator fails the test.
//!
//! The other tests: `--dry-run`, the original manifests, the request budget of a settled cluster,
//! readiness, a server back with other contents, 50 scale-down/scale-up cycles (no pod deleted by
//! the daemon, no trainer failure counted by the emulator's Job controller), a Lease taken over
//! by another replica (no write after the daemon notices), and a leader whose Lease renewals
//! fail (it stops acting before the Lease expires). The test's own requests carry the User-Agent
//! [`TEST_AGENT`], so the emulator's request log tells the daemon's apart. The daemon
//! authenticates as the service account (`kubeconfig`) under the RBAC of `deploy/`, the test's
//! own clients as the emulator's admin (`kubeconfig.admin`); every test checks before its end
//! that the emulator denied none of the daemon's requests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use trainscale::api::{ScaleResults, TrainingJob};

#[path = "support/kmock_harness.rs"]
mod kmock_harness;

use kmock_harness::{admin_kubeconfig, assert_no_denials};

const DEADLINE: Duration = Duration::from_secs(60);

/// Kills a child process when dropped (a failed assertion must not leak processes).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kmock_available() -> bool {
    Command::new("python3")
        .args(["-c", "import kmock, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Status code and body of a plain GET on the daemon's port, if it answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
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

fn http_status(port: u16, path: &str) -> Option<u16> {
    http_get(port, path).map(|(code, _)| code)
}

/// The User-Agent of the test's own requests: the emulator's log tells them from the daemon's
/// (which sends none).
const TEST_AGENT: &str = "trainscale-e2e-test";

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

/// An elastic, fault-tolerant legacy job: a master, one pserver, 1..4 trainers of 1 CPU.
fn training_job() -> TrainingJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {
            "image": "paddlepaddle/paddle:latest",
            "fault_tolerant": true,
            "pserver": {
                "min-instance": 1, "max-instance": 1,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                              "limits": {"cpu": "1", "memory": "1Gi"}},
            },
            "trainer": {
                "entrypoint": "python train.py --epochs 'ten passes'",
                "min-instance": 1, "max-instance": 4,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                              "limits": {"cpu": "1", "memory": "1Gi"}},
            },
        },
    }))
    .unwrap()
}

/// Polls `probe` until it returns `Some`, failing after the deadline (and if the daemon died).
async fn eventually<T, F, Fut>(daemon: &mut Guard, started: Instant, what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(DEADLINE, daemon, started, what, probe).await
}

/// [`eventually`] with its own deadline.
async fn eventually_within<T, F, Fut>(
    deadline: Duration,
    daemon: &mut Guard,
    started: Instant,
    what: &str,
    probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll_within(
        deadline,
        Duration::from_millis(250),
        daemon,
        started,
        what,
        probe,
    )
    .await
}

/// [`eventually_within`], probing every `every`.
async fn poll_within<T, F, Fut>(
    deadline: Duration,
    every: Duration,
    daemon: &mut Guard,
    started: Instant,
    what: &str,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "{what}: the daemon exited early"
        );
        tokio::time::sleep(every).await;
    }
}

/// Waits until the last watch events and debounced passes have landed: the daemon's request
/// counts (Lease renewals aside) do not move over two one-second probes.
async fn until_quiet(deadline: Duration, daemon: &mut Guard, started: Instant, port: u16) {
    let mut last = request_counts(port);
    let mut still = 0;
    poll_within(
        deadline,
        Duration::from_secs(1),
        daemon,
        started,
        "the daemon quiet",
        || {
            let now = request_counts(port);
            let moved = counts_between(&last, &now)
                .keys()
                .any(|(_, resource)| resource != "leases");
            still = if moved { 0 } else { still + 1 };
            last = now;
            std::future::ready((still >= 2).then_some(()))
        },
    )
    .await;
}

/// Polls `probe` until it returns `Ok`, failing after `deadline` with its last error (and if the
/// daemon died).
async fn eventually_ok<T, F, Fut>(
    deadline: Duration,
    daemon: &mut Guard,
    what: &str,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        let last = match probe().await {
            Ok(value) => return value,
            Err(e) => e,
        };
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}: {last}"
        );
        assert!(
            daemon.0.try_wait().unwrap().is_none(),
            "{what}: the daemon exited early"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The one controller ownerReference, which must point at the TrainingJob.
fn assert_owned(meta: &ObjectMeta, tj_uid: &str, what: &str) {
    let refs: &[OwnerReference] = meta.owner_references.as_deref().unwrap_or_default();
    assert_eq!(refs.len(), 1, "{what}: ownerReferences {refs:?}");
    let owner = &refs[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("paddlepaddle.org/v1alpha1", "TrainingJob", "mnist", tj_uid),
        "{what}"
    );
    assert_eq!(owner.controller, Some(true), "{what}");
    assert_eq!(owner.block_owner_deletion, Some(true), "{what}");
    assert_eq!(
        meta.labels
            .as_ref()
            .and_then(|l| l.get("trainscale.io/job")),
        Some(&"mnist".to_string()),
        "{what}: labels {:?}",
        meta.labels
    );
}

fn template_label(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    key: &str,
) -> String {
    labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()
}

/// The emulator and the daemon, running; both are killed if the test fails.
struct Cluster {
    emulator: Guard,
    daemon: Guard,
    kubeconfig: std::path::PathBuf,
    port: u16,
    started: Instant,
    _dir: tempfile::TempDir,
}

/// Fails the test when the emulator is missing although the build found it (or CI is set).
fn require_kmock() {
    assert!(
        kmock_available(),
        "python3 with kmock is missing: pip install 'kmock==0.8.*' 'PyYAML==6.*' (CI installs it)"
    );
}

/// Starts the emulator and `trainscale run` with `extra` flags, and waits for `/readyz`.
async fn start(extra: &[&str]) -> Cluster {
    start_with(extra, &[]).await
}

/// Starts the emulator helper with `flags`, writing `kubeconfig`; returns once it is READY.
fn spawn_emulator(kubeconfig: &Path, flags: &[&str]) -> Guard {
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/kmock_cluster.py");
    let mut emulator = Guard(
        Command::new("python3")
            .arg(&helper)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--lifetime", "90"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut ready_line = String::new();
    BufReader::new(emulator.0.stdout.take().unwrap())
        .read_line(&mut ready_line)
        .unwrap();
    assert!(
        ready_line.starts_with("READY "),
        "emulator said {ready_line:?}"
    );
    emulator
}

/// [`start`], passing `emulator` flags to the emulator helper.
async fn start_with(extra: &[&str], emulator_flags: &[&str]) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let emulator = spawn_emulator(&kubeconfig, emulator_flags);

    let port = free_port();
    // Defaults, each unless `extra` sets the flag itself.
    let defaults = [
        ("--interval", "1s"),
        ("--debounce", "200ms"),
        ("--cooldown", "0s"),
        ("--lease-namespace", "trainscale-system"),
    ];
    let daemon = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(
            defaults
                .iter()
                .filter(|(flag, _)| !extra.contains(flag))
                .flat_map(|(flag, value)| [*flag, *value]),
        )
        .arg("--leader-elect")
        .args(extra)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    let mut cluster = Cluster {
        emulator,
        daemon: Guard(daemon),
        kubeconfig,
        port,
        started: Instant::now(),
        _dir: dir,
    };
    // Caches sync: /readyz turns 200.
    let started = cluster.started;
    eventually(&mut cluster.daemon, started, "/readyz 200", || async {
        (http_status(port, "/readyz") == Some(200)).then_some(())
    })
    .await;
    assert_eq!(http_status(port, "/healthz"), Some(200));
    cluster
}

/// SIGTERM: a clean exit, promptly; the emulator denied none of the daemon's requests; then the
/// emulator ends.
async fn stop(mut cluster: Cluster) {
    stop_daemon(&mut cluster).await;
    assert_no_denials(&client(&cluster.kubeconfig).await).await;
    // Closing the emulator's stdin ends it.
    drop(cluster.emulator.0.stdin.take());
}

/// SIGTERM: a clean exit, promptly; the emulator stays.
async fn stop_daemon(cluster: &mut Cluster) {
    let pid = cluster.daemon.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopping = Instant::now();
    let exit = loop {
        if let Some(status) = cluster.daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "exit status {exit}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn run_creates_and_scales_a_training_job_against_kmock() {
    require_kmock();
    let mut cluster = start(&["--podgroups", "volcano"]).await;
    let (started, port) = (cluster.started, cluster.port);
    let daemon = &mut cluster.daemon;
    let kubeconfig = cluster.kubeconfig.clone();

    // Apply the TrainingJob; nothing else exists for it.
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "ml");
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "ml");
    assert!(jobs.get_opt("mnist-trainer").await.unwrap().is_none());
    let created = tjs
        .create(&PostParams::default(), &training_job())
        .await
        .unwrap();
    let tj_uid = created.metadata.uid.clone().unwrap();

    // The operator (this replica leads) creates the children, owned by the TrainingJob.
    let master = eventually(daemon, started, "ReplicaSet mnist-master", || {
        let sets = sets.clone();
        async move { sets.get_opt("mnist-master").await.unwrap() }
    })
    .await;
    assert_owned(&master.metadata, &tj_uid, "mnist-master");
    let master_spec = master.spec;
    assert_eq!(master_spec.replicas, Some(1));
    assert_eq!(
        template_label(
            master_spec
                .template
                .as_ref()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.as_ref()),
            "paddle-job-master"
        ),
        "mnist"
    );
    let pserver = eventually(daemon, started, "ReplicaSet mnist-pserver", || {
        let sets = sets.clone();
        async move { sets.get_opt("mnist-pserver").await.unwrap() }
    })
    .await;
    assert_owned(&pserver.metadata, &tj_uid, "mnist-pserver");
    let pserver_spec = pserver.spec;
    assert_eq!(pserver_spec.replicas, Some(1));
    assert_eq!(
        template_label(
            pserver_spec
                .template
                .as_ref()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.as_ref()),
            "paddle-job-pserver"
        ),
        "mnist"
    );
    let trainer = eventually(daemon, started, "Job mnist-trainer", || {
        let jobs = jobs.clone();
        async move { jobs.get_opt("mnist-trainer").await.unwrap() }
    })
    .await;
    assert_owned(&trainer.metadata, &tj_uid, "mnist-trainer");
    let trainer_spec = trainer.spec.unwrap();
    assert_eq!(trainer_spec.completion_mode.as_deref(), Some("Indexed"));
    let template = trainer_spec.template.metadata.as_ref();
    assert_eq!(
        template_label(template.and_then(|m| m.labels.as_ref()), "paddle-job"),
        "mnist"
    );
    assert_eq!(
        template
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("scheduling.k8s.io/group-name"))
            .map(String::as_str),
        Some("mnist"),
        "trainer pods join the Volcano PodGroup"
    );
    let podgroups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "ml",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "scheduling.volcano.sh",
            "v1beta1",
            "PodGroup",
        )),
    );
    let group = podgroups.get("mnist").await.unwrap();
    assert_eq!(
        group.data["spec"]["minMember"],
        serde_json::json!(3),
        "gang = master + pserver min + trainer min"
    );
    assert_eq!(
        group
            .metadata
            .owner_references
            .as_ref()
            .map(|r| r[0].uid.clone()),
        Some(tj_uid.clone())
    );

    // The autoscaler grows the trainer Job to the job's max (the node has room for all four
    // trainers), patching parallelism and completions together, and records it; the operator
    // follows: the trainers ConfigMap holds 4 and, once the (emulated) pods are all ready, the
    // phase is Running.
    let (job, status) = eventually(daemon, started, "scale-up to 4 and phase Running", || {
        let (jobs, tjs) = (jobs.clone(), tjs.clone());
        async move {
            let job = jobs.get("mnist-trainer").await.unwrap();
            let tj = tjs.get("mnist").await.unwrap();
            let status = tj.status.unwrap_or_default();
            let parallelism = job.spec.as_ref().and_then(|s| s.parallelism);
            (parallelism == Some(4)
                && !status.scale_records.scale_records.is_empty()
                && status.phase.as_str() == "Running")
                .then_some((job, status))
        }
    })
    .await;
    assert_eq!(job.spec.and_then(|s| s.completions), Some(4));
    let records = &status.scale_records.scale_records;
    assert!(
        records.iter().all(|r| r.status == ScaleResults::True),
        "{records:?}"
    );
    assert_eq!(records.iter().map(|r| r.additional).sum::<i32>(), 3);
    assert!(status.start_time.is_some(), "Running sets startTime");
    let trainers = eventually(daemon, started, "ConfigMap trainers = 4", || {
        let configs = configs.clone();
        async move {
            let cm = configs.get_opt("mnist-trainers").await.unwrap()?;
            let value = cm.data.and_then(|d| d.get("trainers").cloned());
            (value.as_deref() == Some("4")).then_some(value)
        }
    })
    .await;
    assert_eq!(trainers.as_deref(), Some("4"));
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("trainscale_operator_running 1"),
        "the leader runs the operator"
    );
    assert!(metrics.contains("trainscale_leader 1"));

    stop(cluster).await;
}

/// `--dry-run`: the operator is not started, so an applied TrainingJob gets no children and no
/// status, while the autoscaler still syncs and plans.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn dry_run_keeps_the_operator_from_writing() {
    require_kmock();
    let mut cluster = start(&["--dry-run"]).await;
    let client = client(&cluster.kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "ml");
    tjs.create(&PostParams::default(), &training_job())
        .await
        .unwrap();
    // Several passes (--interval 1s) and, were it running, many reconciles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        cluster.daemon.0.try_wait().unwrap().is_none(),
        "the daemon exited early"
    );
    assert!(sets.get_opt("mnist-master").await.unwrap().is_none());
    assert!(sets.get_opt("mnist-pserver").await.unwrap().is_none());
    assert!(jobs.get_opt("mnist-trainer").await.unwrap().is_none());
    assert!(configs.get_opt("mnist-trainers").await.unwrap().is_none());
    assert!(tjs.get("mnist").await.unwrap().status.is_none());
    let (_, metrics) = http_get(cluster.port, "/metrics").unwrap();
    assert!(
        !metrics.contains("trainscale_operator_running 1"),
        "no operator in a dry run"
    );
    stop(cluster).await;
}

/// The labels of a pod template, or none.
fn labels_of(
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
) -> std::collections::BTreeMap<String, String> {
    template
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// The one controller ownerReference of a child: `(apiVersion, kind, name, uid)`.
fn owner_of(meta: &ObjectMeta) -> (String, String, String, String) {
    let refs: &[OwnerReference] = meta.owner_references.as_deref().unwrap_or_default();
    assert_eq!(refs.len(), 1, "ownerReferences {refs:?}");
    let o = &refs[0];
    assert_eq!(o.controller, Some(true));
    (
        o.api_version.clone(),
        o.kind.clone(),
        o.name.clone(),
        o.uid.clone(),
    )
}

/// Manifests written for the original operators, in one namespace: seed 001's PaddleJob applied
/// unchanged, a TrainingJob whose priority names the PriorityClass `high` (seeded in the
/// emulator), and a TrainingJob that does not deserialize. The operator creates the PaddleJob's
/// pserver ReplicaSet and trainer Job, owned by the PaddleJob and labelled `paddle-job-name`; the
/// autoscaler sizes both jobs' trainer Jobs within their ranges; the malformed job gets a Warning
/// Event and stops nothing.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn original_manifests_are_created_and_sized_against_kmock() {
    use trainscale::api::PaddleJob;
    use trainscale::api::manifest::read_documents;

    require_kmock();
    let mut cluster = start(&[]).await;
    let started = cluster.started;
    let daemon = &mut cluster.daemon;
    let client = client(&cluster.kubeconfig).await;
    let ns = "testspace";

    // The malformed job goes in first: nothing after it may be held up by it.
    let tj_resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "paddlepaddle.org",
        "v1alpha1",
        "TrainingJob",
    ));
    let raw_tjs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &tj_resource);
    let malformed: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "malformed", "namespace": ns},
        "spec": {"trainer": {"min-instance": "two", "max-instance": 4}},
    }))
    .unwrap();
    raw_tjs
        .create(&PostParams::default(), &malformed)
        .await
        .unwrap();

    let docs = read_documents(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/seeds/001-paddlejob.yaml"
    )))
    .unwrap();
    let seed: PaddleJob = docs[0].decode().unwrap();
    let pjs: Api<PaddleJob> = Api::namespaced(client.clone(), ns);
    let pj_uid = pjs
        .create(&PostParams::default(), &seed)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();

    let mut high = training_job();
    high.metadata.name = Some("high".into());
    high.metadata.namespace = Some(ns.into());
    high.spec.annotations.priority = "high".into();
    high.spec.trainer.max_instance = 3;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), ns);
    tjs.create(&PostParams::default(), &high).await.unwrap();

    // The PaddleJob's children: owned by the PaddleJob, pods labelled `paddle-job-name`.
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let pserver = eventually(daemon, started, "ReplicaSet paddlejob-pserver", || {
        let sets = sets.clone();
        async move { sets.get_opt("paddlejob-pserver").await.unwrap() }
    })
    .await;
    let owner = (
        "paddlepaddle.org/v1".to_string(),
        "PaddleJob".to_string(),
        "paddlejob".to_string(),
        pj_uid.clone(),
    );
    assert_eq!(owner_of(&pserver.metadata), owner);
    let pserver_spec = pserver.spec;
    assert_eq!(pserver_spec.replicas, Some(2));
    let labels = labels_of(pserver_spec.template.as_ref());
    assert_eq!(
        labels.get("paddle-job-name").map(String::as_str),
        Some("paddlejob")
    );
    assert_eq!(
        labels.get("paddle-job-pserver").map(String::as_str),
        Some("paddlejob")
    );
    let trainer = eventually(daemon, started, "Job paddlejob-trainer", || {
        let jobs = jobs.clone();
        async move { jobs.get_opt("paddlejob-trainer").await.unwrap() }
    })
    .await;
    assert_eq!(owner_of(&trainer.metadata), owner);
    let trainer_spec = trainer.spec.unwrap();
    let labels = labels_of(Some(&trainer_spec.template));
    assert_eq!(
        labels.get("paddle-job-name").map(String::as_str),
        Some("paddlejob")
    );
    assert_eq!(
        labels.get("paddle-job").map(String::as_str),
        Some("paddlejob")
    );
    assert!(assert_in_range(trainer_spec.parallelism, 2, 6));

    // Both jobs are sized: the node has room for every trainer, so each reaches its max, and
    // each records the rescale in its own status.
    let paddle_status = eventually(daemon, started, "PaddleJob trainers 6", || {
        let (jobs, pjs) = (jobs.clone(), pjs.clone());
        async move {
            let job = jobs.get("paddlejob-trainer").await.unwrap();
            let parallelism = job.spec.as_ref().and_then(|s| s.parallelism);
            assert!(assert_in_range(parallelism, 2, 6), "{parallelism:?}");
            let status = pjs
                .get("paddlejob")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            (parallelism == Some(6)
                && !status.scale_records.scale_records.is_empty()
                && status.trainers == Some(6))
            .then_some(status)
        }
    })
    .await;
    assert!(
        paddle_status
            .scale_records
            .scale_records
            .iter()
            .all(|r| r.status == ScaleResults::True)
    );
    eventually(daemon, started, "TrainingJob high trainers 3", || {
        let (jobs, tjs) = (jobs.clone(), tjs.clone());
        async move {
            let job = jobs.get_opt("high-trainer").await.unwrap()?;
            let status = tjs.get("high").await.unwrap().status.unwrap_or_default();
            (job.spec.and_then(|s| s.parallelism) == Some(3)
                && !status.scale_records.scale_records.is_empty())
            .then_some(())
        }
    })
    .await;

    // Warning Events: the malformed job's (InvalidSpec, naming the field) and the PaddleJob's
    // spec warning (elastic, not fault tolerant).
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event")),
    );
    let (invalid, warned) = eventually(daemon, started, "Warning Events", || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.unwrap().items;
            let find = |kind: &str, name: &str, reason: &str| {
                list.iter()
                    .find(|e| {
                        e.data["regarding"]["kind"] == kind
                            && e.data["regarding"]["name"] == name
                            && e.data["reason"] == reason
                            && e.data["type"] == "Warning"
                    })
                    .cloned()
            };
            Some((
                find("TrainingJob", "malformed", "InvalidSpec")?,
                find("PaddleJob", "paddlejob", "SpecWarning")?,
            ))
        }
    })
    .await;
    let note = invalid.data["note"].as_str().unwrap_or_default();
    assert!(note.contains("spec.trainer.min-instance"), "{note}");
    let note = warned.data["note"].as_str().unwrap_or_default();
    assert!(note.contains("not fault tolerant"), "{note}");
    let (_, metrics) = http_get(cluster.port, "/metrics").unwrap();
    assert!(
        metrics.contains("trainscale_jobs_skipped{kind=\"TrainingJob\"} 1"),
        "the malformed job is counted as skipped"
    );

    stop(cluster).await;
}

/// Whether a parallelism lies within `min..=max`.
fn assert_in_range(parallelism: Option<i32>, min: i32, max: i32) -> bool {
    parallelism.is_some_and(|p| (min..=max).contains(&p))
}

/// `trainscale_api_requests_total` from the daemon's `/metrics`, by `(verb, resource)`.
fn request_counts(port: u16) -> BTreeMap<(String, String), u64> {
    let (code, body) = http_get(port, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("trainscale_api_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").expect("a sample line");
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let count: f64 = value.trim().parse().expect("a number");
        out.insert((label("verb"), label("resource")), count as u64);
    }
    out
}

/// `after - before`, without zero rows.
fn counts_between(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
) -> BTreeMap<(String, String), u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The emulator's log of the requests it received from anyone but its own fake controllers.
async fn emulator_log(kubeconfig: &Path) -> BTreeMap<String, u64> {
    let client = client(kubeconfig).await;
    let request = http::Request::get("/_harness/requests")
        .body(Vec::new())
        .unwrap();
    client
        .request::<BTreeMap<String, u64>>(request)
        .await
        .unwrap()
}

/// The emulator's request log per User-Agent (`-`: none, as the daemon sends).
async fn emulator_log_by_agent(kubeconfig: &Path) -> BTreeMap<String, BTreeMap<String, u64>> {
    let client = client(kubeconfig).await;
    let request = http::Request::get("/_harness/requests?by=agent")
        .body(Vec::new())
        .unwrap();
    client.request(request).await.unwrap()
}

/// The emulator's log of the daemon's requests: everyone's but the test's own.
async fn daemon_log(kubeconfig: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (agent, counts) in emulator_log_by_agent(kubeconfig).await {
        if agent != TEST_AGENT {
            for (key, n) in counts {
                *out.entry(key).or_default() += n;
            }
        }
    }
    out
}

/// `after - before` of two request logs, without zero rows.
fn log_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The write rows (`create`, `update`, `patch`, `delete`, `deletecollection`) of a request log.
fn writes_in(log: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    log.iter()
        .filter(|(key, _)| {
            key.split_once(' ')
                .is_some_and(|(verb, _)| WRITE_VERBS.contains(&verb))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Trainer pod failures the emulator's Job controller counted, by `<namespace>/<job>`.
async fn harness_failures(kubeconfig: &Path) -> BTreeMap<String, u64> {
    let client = client(kubeconfig).await;
    let request = http::Request::get("/_harness/failures")
        .body(Vec::new())
        .unwrap();
    client.request(request).await.unwrap()
}

/// A markdown table of request counts by verb (rows) and resource.
fn table(title: &str, counts: &BTreeMap<(String, String), u64>) -> String {
    let mut out = format!("{title}\n| verb | resource | requests |\n|---|---|---|\n");
    for ((verb, resource), n) in counts {
        out.push_str(&format!("| {verb} | {resource} | {n} |\n"));
    }
    let mut by_verb: BTreeMap<&str, u64> = BTreeMap::new();
    for ((verb, _), n) in counts {
        *by_verb.entry(verb).or_default() += n;
    }
    out.push_str(&format!("by verb: {by_verb:?}\n"));
    out
}

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// A small elastic job: a master, one pserver, 1..2 trainers, 100m CPU each.
fn small_job(name: &str) -> TrainingJob {
    elastic_job_of(name, 2, "100m")
}

/// The request budget of a settled cluster: `TRAINSCALE_E2E_JOBS` (default 20) TrainingJobs are
/// created and sized (each grows to its max of 2 trainers, its ConfigMap follows, its phase is
/// Running); then, over a quiet window of `TRAINSCALE_E2E_WINDOW_S` (default 15) seconds with
/// `--interval 1s` (15 autoscaler passes; every job requeued at least once), the daemon sends no
/// list, no get and no write: only its watches stay open (its Lease's among them). Lease renewals
/// (leader election: a patch of the Lease every 2 s, no read) are the one traffic a steady
/// cluster needs and are reported apart. Counted from the daemon's own
/// `trainscale_api_requests_total` and cross-checked with the emulator's request log.
/// The deadlines and the probe interval grow with the job count; `TRAINSCALE_E2E_JOBS=1000` was
/// measured this way (README, Performance).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_settled_cluster_costs_no_list_get_or_write() {
    require_kmock();
    let jobs_wanted: usize = std::env::var("TRAINSCALE_E2E_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let window = Duration::from_secs(
        std::env::var("TRAINSCALE_E2E_WINDOW_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(15),
    );
    let lifetime = (300 + jobs_wanted * 6).to_string();
    // `--kinds`: the emulator serves no PyTorch CRDs, and without it discovery would look them up
    // again every `--discovery-interval` (two GETs a minute, the one read such a cluster sends).
    let mut cluster = start_with(
        &["--podgroups", "volcano", "--kinds", "trainingjob,paddlejob"],
        &[
            "--lifetime",
            &lifetime,
            "--node-cpu",
            "1000",
            "--node-memory",
            "4Ti",
            "--node-pods",
            "100000",
        ],
    )
    .await;
    let port = cluster.port;
    let kubeconfig = cluster.kubeconfig.clone();
    let daemon = &mut cluster.daemon;
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "ml");

    let at_start = request_counts(port);
    let creating = Instant::now();
    let names: Vec<String> = (0..jobs_wanted).map(|i| format!("job-{i:04}")).collect();
    for name in &names {
        tjs.create(&PostParams::default(), &small_job(name))
            .await
            .unwrap();
    }
    // Created and sized: every trainer Job at 2, every ConfigMap at 2, every job Running.
    let settle_deadline = Duration::from_secs(60 + 4 * jobs_wanted as u64);
    // Each probe lists every job three times: probe less often when there are many.
    let every = Duration::from_millis(250.max(jobs_wanted as u64));
    poll_within(
        settle_deadline,
        every,
        daemon,
        creating,
        "all jobs sized and Running",
        || {
            let (tjs, jobs, configs, names) = (tjs.clone(), jobs.clone(), configs.clone(), &names);
            async move {
                let sized = jobs
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|j| j.spec.as_ref().and_then(|s| s.parallelism) == Some(2))
                    .count();
                let counted = configs
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|c| {
                        c.data
                            .as_ref()
                            .and_then(|d| d.get("trainers"))
                            .map(String::as_str)
                            == Some("2")
                    })
                    .count();
                let running = tjs
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .iter()
                    .filter(|t| {
                        t.status
                            .as_ref()
                            .is_some_and(|s| s.phase.as_str() == "Running")
                    })
                    .count();
                (sized == names.len() && counted == names.len() && running == names.len())
                    .then_some(())
            }
        },
    )
    .await;
    let settled_after = creating.elapsed();
    until_quiet(settle_deadline, daemon, creating, port).await;
    let setup = counts_between(&at_start, &request_counts(port));

    let log_before = emulator_log(&kubeconfig).await;
    let before = request_counts(port);
    tokio::time::sleep(window).await;
    let after = request_counts(port);
    let log_after = emulator_log(&kubeconfig).await;
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "the daemon exited early"
    );
    let quiet = counts_between(&before, &after);

    println!(
        "{} jobs created, sized and Running after {settled_after:.1?}",
        names.len()
    );
    println!("{}", table("setup (create, size, settle)", &setup));
    println!("{}", table(&format!("steady window of {window:?}"), &quiet));

    let mut unexpected: Vec<String> = Vec::new();
    let mut lease_writes = 0;
    for ((verb, resource), n) in &quiet {
        let write = WRITE_VERBS.contains(&verb.as_str());
        if resource == "leases" && write {
            lease_writes += *n;
        } else if write || verb == "list" || verb == "get" {
            unexpected.push(format!("{n} x {verb} {resource}"));
        }
    }
    assert!(
        unexpected.is_empty(),
        "a settled cluster sent reads or writes: {unexpected:?}"
    );
    // Renewals every retry period (2 s) at most, plus one in flight.
    let renewals = window.as_secs() / 2 + 2;
    assert!(lease_writes <= renewals, "{lease_writes} lease writes");

    // The emulator saw the same: nothing but the test's own log reads, watches and lease
    // renewals during the window.
    let mut server_side: Vec<String> = Vec::new();
    for (key, n) in &log_after {
        let seen = n - log_before.get(key).copied().unwrap_or(0);
        if seen == 0
            || key == "get nonresource"
            || key.ends_with(" leases")
            || key.starts_with("watch ")
        {
            continue;
        }
        server_side.push(format!("{seen} x {key}"));
    }
    assert!(
        server_side.is_empty(),
        "the emulator received during the window: {server_side:?}"
    );

    stop(cluster).await;
}

/// Health that means something: with the API server gone, `/readyz` turns 503 (watches fail)
/// while `/healthz` stays 200 (the pass loop keeps running), and the leader/ready gauges are
/// still exported.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn readiness_follows_the_api_server() {
    require_kmock();
    let mut cluster = start(&[]).await;
    let (started, port) = (cluster.started, cluster.port);
    assert_eq!(http_status(port, "/readyz"), Some(200));
    assert_no_denials(&client(&cluster.kubeconfig).await).await;
    cluster.emulator.0.kill().unwrap();
    let _ = cluster.emulator.0.wait();
    let why = eventually(&mut cluster.daemon, started, "/readyz 503", || async {
        let (code, body) = http_get(port, "/readyz")?;
        (code == 503).then_some(body)
    })
    .await;
    assert!(why.contains("unreachable"), "{why}");
    assert_eq!(http_status(port, "/healthz"), Some(200));
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert!(metrics.contains("trainscale_leader"), "{metrics}");
    assert!(metrics.contains("trainscale_ready"), "{metrics}");
    let pid = cluster.daemon.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let _ = cluster.daemon.0.wait();
}

/// The API server goes away and comes back with other contents (a second emulator on the same
/// address: another node, no jobs). The daemon plans nothing until every kind has re-listed, then
/// holds exactly the new contents, and sends the new server no write for an object it never had.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_server_back_with_other_contents_is_relisted_before_any_pass() {
    require_kmock();
    let api_port = free_port().to_string();
    let mut cluster = start_with(&[], &["--port", &api_port]).await;
    let started = cluster.started;
    let port = cluster.port;
    let client = client(&cluster.kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    tjs.create(&PostParams::default(), &training_job())
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    eventually(&mut cluster.daemon, started, "mnist scaled to 4", || {
        let jobs = jobs.clone();
        async move {
            let job = jobs.get_opt("mnist-trainer").await.unwrap()?;
            (job.spec.and_then(|s| s.parallelism) == Some(4)).then_some(())
        }
    })
    .await;

    // The first server goes; a second one answers on the same address with other contents.
    assert_no_denials(&client).await;
    cluster.emulator.0.kill().unwrap();
    let _ = cluster.emulator.0.wait();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = spawn_emulator(
        &cluster.kubeconfig,
        &[
            "--port",
            &api_port,
            "--node-name",
            "node-b",
            "--node-cpu",
            "8",
        ],
    );

    // The store holds exactly the new contents: node-b's 8 free CPUs, no job.
    eventually(
        &mut cluster.daemon,
        started,
        "the new contents planned",
        || async {
            let (_, metrics) = http_get(port, "/metrics")?;
            let ready = http_status(port, "/readyz") == Some(200);
            (ready && metrics.contains("trainscale_cluster_free_cpu_millicores 8000")).then_some(())
        },
    )
    .await;
    // A few more passes, then: the new server got no write for the old server's objects.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = emulator_log(&cluster.kubeconfig).await;
    let stray: Vec<(&String, &u64)> = log
        .iter()
        .filter(|(key, _)| {
            WRITE_VERBS
                .iter()
                .any(|verb| key.starts_with(&format!("{verb} ")))
                && !key.contains("leases")
                && !key.contains("events")
        })
        .collect();
    assert!(stray.is_empty(), "writes sent to the new server: {stray:?}");
    assert!(
        Api::<Job>::namespaced(client.clone(), "ml")
            .get_opt("mnist-trainer")
            .await
            .unwrap()
            .is_none()
    );
    assert_no_denials(&client).await;
    drop(second);
    let pid = cluster.daemon.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = cluster.daemon.0.wait();
}

/// An elastic job for the cycle tests: a master and a pserver of 100m, 1..=4 trainers of 500m.
fn elastic_job(name: &str) -> TrainingJob {
    elastic_job_of(name, 4, "500m")
}

/// A fault-tolerant job in `ml`: a master and a pserver of 100m, 1..=`max` trainers of
/// `trainer_cpu` each.
fn elastic_job_of(name: &str, max: i32, trainer_cpu: &str) -> TrainingJob {
    let small = serde_json::json!({"requests": {"cpu": "100m", "memory": "128Mi"},
                                   "limits": {"cpu": "100m", "memory": "128Mi"}});
    let trainer = serde_json::json!({"requests": {"cpu": trainer_cpu, "memory": "128Mi"},
                                     "limits": {"cpu": trainer_cpu, "memory": "128Mi"}});
    serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "image": "paddlepaddle/paddle:latest",
            "fault_tolerant": true,
            "master": {"resources": small},
            "pserver": {"min-instance": 1, "max-instance": 1, "resources": small},
            "trainer": {"min-instance": 1, "max-instance": max, "resources": trainer},
        },
    }))
    .unwrap()
}

/// Sets node-1's allocatable CPU, as a node that shrinks or grows (a merge patch of the Node's
/// status).
async fn set_node_cpu(nodes: &Api<Node>, cpu: &str) {
    nodes
        .patch_status(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"allocatable": {"cpu": cpu}}})),
        )
        .await
        .unwrap();
}

/// Each named TrainingJob's trainer Job size, when every one of them is consistent: parallelism
/// equals completions and its Running trainer pods hold exactly the indexes `0..parallelism`
/// (Running: admitted by the emulator's kubelet, which rejects a pod bound to a node that shrank
/// under it before it started).
async fn consistent_sizes(jobs: &Api<Job>, pods: &Api<Pod>, names: &[&str]) -> Option<Vec<i32>> {
    let jobs = jobs.list(&Default::default()).await.unwrap().items;
    let pods = pods.list(&Default::default()).await.unwrap().items;
    let mut sizes = Vec::new();
    for name in names {
        let trainer = format!("{name}-trainer");
        let spec = jobs
            .iter()
            .find(|j| j.metadata.name.as_deref() == Some(&trainer))?
            .spec
            .as_ref()?;
        let parallelism = spec.parallelism?;
        if spec.completions != Some(parallelism) {
            return None;
        }
        let mut indexes: Vec<i32> = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .owner_references
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|r| r.kind == "Job" && r.name == trainer)
            })
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| {
                p.metadata
                    .annotations
                    .as_ref()?
                    .get("batch.kubernetes.io/job-completion-index")?
                    .parse()
                    .ok()
            })
            .collect();
        indexes.sort_unstable();
        if indexes != (0..parallelism).collect::<Vec<_>>() {
            return None;
        }
        sizes.push(parallelism);
    }
    Some(sizes)
}

/// The value of the sample `name{labels}` in a Prometheus text body whose labels contain all of
/// `labels` (`key="value"` each).
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_part, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let found: Vec<&str> = label_part.split(',').collect();
        labels
            .iter()
            .all(|l| found.contains(l))
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// Scale-down by parallelism alone, 50 times over: node-1 shrinks from 5 CPUs (room for both
/// jobs' 8 trainers of 500m) to 2 (room for 3) and grows back, 50 cycles. Each shrink makes the
/// daemon lower both trainer Jobs (overload relief: 8 trainers to 3), each growth raise them back
/// to 4; every phase ends when both Jobs are consistent (parallelism = completions, trainer pods
/// exactly at indexes `0..parallelism`) at the expected total. Then: the daemon sent no pod
/// `delete` or `deletecollection` in the whole run, the emulator's Job controller counted no
/// trainer failure (a trainer removed while its Job still wanted its index), every rescale was
/// recorded `True`, and each Job ends at the size the daemon planned (its target gauge) and at its
/// max, with its ConfigMap and newest scale records following. Last, the failure count is shown
/// to be live: a trainer the test itself deletes counts as one failure and is replaced.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn fifty_scale_cycles_delete_no_pod_and_fail_no_trainer() {
    require_kmock();
    const CYCLES: usize = 50;
    const BIG: (&str, i32) = ("5", 8);
    const SMALL: (&str, i32) = ("2", 3);
    let mut cluster = start_with(
        &["--debounce", "50ms"],
        &["--lifetime", "300", "--period", "0.05", "--node-cpu", BIG.0],
    )
    .await;
    let kubeconfig = cluster.kubeconfig.clone();
    let port = cluster.port;
    let daemon = &mut cluster.daemon;
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ml");
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "ml");
    let nodes: Api<Node> = Api::all(client.clone());
    let names = ["a", "b"];
    for name in names {
        tjs.create(&PostParams::default(), &elastic_job(name))
            .await
            .unwrap();
    }
    let phase_deadline = Duration::from_secs(30);
    let every = Duration::from_millis(50);
    let settled = |total: i32| {
        let (jobs, pods) = (jobs.clone(), pods.clone());
        move || {
            let (jobs, pods) = (jobs.clone(), pods.clone());
            async move {
                let sizes = consistent_sizes(&jobs, &pods, &names).await?;
                (sizes.iter().sum::<i32>() == total).then_some(sizes)
            }
        }
    };
    poll_within(
        DEADLINE,
        every,
        daemon,
        Instant::now(),
        "both jobs at 4 trainers",
        settled(BIG.1),
    )
    .await;

    let cycling = Instant::now();
    let mut small_sizes = Vec::new();
    for cycle in 0..CYCLES {
        set_node_cpu(&nodes, SMALL.0).await;
        small_sizes = poll_within(
            phase_deadline,
            every,
            daemon,
            Instant::now(),
            &format!("cycle {cycle}: scaled down to {} trainers", SMALL.1),
            settled(SMALL.1),
        )
        .await;
        assert!(
            small_sizes.iter().all(|&n| n >= 1),
            "cycle {cycle}: {small_sizes:?} below min"
        );
        set_node_cpu(&nodes, BIG.0).await;
        poll_within(
            phase_deadline,
            every,
            daemon,
            Instant::now(),
            &format!("cycle {cycle}: scaled back up to {} trainers", BIG.1),
            settled(BIG.1),
        )
        .await;
    }
    let cycled = cycling.elapsed();

    // Planned = written = running: each Job at its max, as the daemon's last plan says and last
    // saw, its ConfigMap following and its newest records those of the last cycle (the operator
    // and the next pass may still be a moment behind the pods).
    let sizes = consistent_sizes(&jobs, &pods, &names).await.unwrap();
    assert_eq!(sizes, vec![4, 4]);
    eventually_ok(
        DEADLINE,
        daemon,
        "each job planned, seen and recorded at 4",
        || {
            let (configs, tjs, small_sizes) = (configs.clone(), tjs.clone(), small_sizes.clone());
            async move {
                let (_, metrics) = http_get(port, "/metrics").ok_or("no /metrics")?;
                for (name, small) in names.iter().zip(&small_sizes) {
                    let job = format!("job=\"{name}\"");
                    let labels = [job.as_str(), "namespace=\"ml\""];
                    let target = sample(&metrics, "trainscale_job_trainers_target", &labels);
                    let current = sample(&metrics, "trainscale_job_trainers_current", &labels);
                    if (target, current) != (Some(4.0), Some(4.0)) {
                        return Err(format!("{name}: planned {target:?}, last seen {current:?}"));
                    }
                    let cm = configs.get(&format!("{name}-trainers")).await.unwrap();
                    let trainers = cm.data.and_then(|d| d.get("trainers").cloned());
                    if trainers.as_deref() != Some("4") {
                        return Err(format!("{name}: ConfigMap trainers {trainers:?}"));
                    }
                    let records = tjs
                        .get(name)
                        .await
                        .unwrap()
                        .status
                        .unwrap_or_default()
                        .scale_records
                        .scale_records;
                    if !records.iter().all(|r| r.status == ScaleResults::True) {
                        return Err(format!("{name}: records {records:?}"));
                    }
                    let newest: Vec<i32> =
                        records.iter().rev().take(2).map(|r| r.additional).collect();
                    if newest != vec![4 - small, small - 4] {
                        return Err(format!("{name}: newest records {newest:?}, after {small}"));
                    }
                }
                Ok(())
            }
        },
    )
    .await;
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    let rescales: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("trainscale_rescales_total{"))
        .collect();
    assert!(
        rescales
            .iter()
            .all(|l| l.starts_with("trainscale_rescales_total{result=\"True\"}")),
        "every rescale succeeded: {rescales:?}"
    );
    let succeeded = sample(&metrics, "trainscale_rescales_total", &["result=\"True\""]);
    assert!(
        succeeded.is_some_and(|n| n >= (2 * 2 * CYCLES) as f64),
        "both jobs rescaled down and up in every cycle: {succeeded:?}"
    );

    // No pod deleted by the daemon, none failed.
    let log = daemon_log(&kubeconfig).await;
    let pod_deletes: Vec<(&String, &u64)> = log
        .iter()
        .filter(|(key, _)| key.as_str() == "delete pods" || key.as_str() == "deletecollection pods")
        .collect();
    assert!(
        pod_deletes.is_empty(),
        "the daemon deleted pods: {pod_deletes:?}"
    );
    let own = request_counts(port);
    assert!(
        !own.keys()
            .any(|(verb, resource)| resource == "pods" && verb.starts_with("delete")),
        "the daemon's own count: {own:?}"
    );
    let failures = harness_failures(&kubeconfig).await;
    assert!(failures.is_empty(), "trainer pods failed: {failures:?}");
    let writes = writes_in(&log);
    assert!(
        writes
            .get("patch jobs")
            .is_some_and(|&n| n >= (2 * 2 * CYCLES) as u64),
        "{writes:?}"
    );
    println!("{CYCLES} cycles in {cycled:.1?}; the daemon's writes over the run: {writes:?}");

    // The count is live: a trainer deleted by a client (the test) while its Job wants its index
    // is one failure, and the Job controller brings the index back.
    pods.delete("a-trainer-3", &Default::default())
        .await
        .unwrap();
    let daemon = &mut cluster.daemon;
    eventually_ok(
        DEADLINE,
        daemon,
        "the deleted trainer counted and replaced",
        || {
            let (jobs, pods, kubeconfig) = (jobs.clone(), pods.clone(), kubeconfig.clone());
            async move {
                let failures = harness_failures(&kubeconfig).await;
                let sizes = consistent_sizes(&jobs, &pods, &names).await;
                if failures == BTreeMap::from([("ml/a-trainer".to_string(), 1)])
                    && sizes == Some(vec![4, 4])
                {
                    Ok(())
                } else {
                    Err(format!("failures {failures:?}, sizes {sizes:?}"))
                }
            }
        },
    )
    .await;

    // A leader that stops hands the lease over: it clears the holder on its way out.
    stop_daemon(&mut cluster).await;
    let lease = Api::<Lease>::namespaced(client.clone(), "trainscale-system")
        .get("trainscale-leader")
        .await
        .unwrap();
    assert_eq!(
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|holder| !holder.is_empty()),
        None,
        "the lease is released at shutdown"
    );
}

/// Ends every watch response open in the emulator (cleanly, as an API server ends a watch at its
/// timeout); answers how many it ended.
async fn cut_watches(kubeconfig: &Path) -> u64 {
    let request = http::Request::post("/_harness/cut-watches")
        .body(Vec::new())
        .unwrap();
    let answer: BTreeMap<String, u64> = client(kubeconfig).await.request(request).await.unwrap();
    answer["cut"]
}

/// The sum of every sample of the metric `name` (all label sets) in a `/metrics` body.
fn metric_total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

/// The `resourceVersion` of every watch request the emulator logged, in order, by resource.
async fn watch_versions(kubeconfig: &Path) -> BTreeMap<String, Vec<String>> {
    let request = http::Request::get("/_harness/watches")
        .body(Vec::new())
        .unwrap();
    client(kubeconfig).await.request(request).await.unwrap()
}

/// The `watch` rows of a request log.
fn watches_in(log: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    log.iter()
        .filter(|(key, _)| key.starts_with("watch "))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A watch stream cut mid-run: with one elastic job sized to 4 trainers, the emulator ends every
/// open watch response (a clean end of the chunked body, as a real API server ends a watch at its
/// timeout). kube-runtime's watcher takes a stream that ends without an error back to
/// `InitListed { resource_version }` and re-watches from the last resourceVersion it saw
/// (`watcher.rs`: `None => (None, State::InitListed { resource_version })`): no new list, no
/// `Init`/`InitDone`, so the daemon's store never re-lists and `/readyz` stays 200. (Only an
/// error, or 410 Gone, makes the daemon drop the watcher and re-list; see `daemon::watch`.) The
/// test then shrinks node-1 to 2 CPUs, so the job must shrink to 3 trainers (master and pserver
/// 100m each, trainers 500m), and asserts the change is planned and applied through the
/// re-opened watches, that every kind watched before the cut was watched again (the nodes watch
/// from node-1's resourceVersion, the last event it saw), that the daemon sent no list at all
/// after the cut and that its watch error and restart counters did not move. The emulator does
/// not honour the resourceVersion of a watch (kmock replays the live objects as `ADDED` on every
/// watch), so the resumed watches also see those replays, which the store takes as no-op applies.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_watch_stream_cut_mid_run_resumes_and_keeps_serving() {
    require_kmock();
    let mut cluster = start_with(&[], &["--period", "0.1"]).await;
    let (port, started) = (cluster.port, cluster.started);
    let kubeconfig = cluster.kubeconfig.clone();
    let daemon = &mut cluster.daemon;
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ml");
    let nodes: Api<Node> = Api::all(client.clone());
    tjs.create(&PostParams::default(), &elastic_job("a"))
        .await
        .unwrap();
    let sized = |want: i32| {
        let (jobs, pods) = (jobs.clone(), pods.clone());
        move || {
            let (jobs, pods) = (jobs.clone(), pods.clone());
            async move { (consistent_sizes(&jobs, &pods, &["a"]).await? == vec![want]).then_some(()) }
        }
    };
    eventually(daemon, started, "a sized to 4 trainers", sized(4)).await;

    // Cut every open watch; the daemon's watches are the only ones.
    let restarts = |metrics: &str| {
        (
            metric_total(metrics, "trainscale_watch_restarts_total"),
            metric_total(metrics, "trainscale_watch_errors_total"),
        )
    };
    let restarts_before = restarts(&http_get(port, "/metrics").unwrap().1);
    let node_version = nodes
        .get("node-1")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let before = daemon_log(&kubeconfig).await;
    let watched = watches_in(&before);
    let cut = cut_watches(&kubeconfig).await;
    let cut_at = Instant::now();
    println!("watches before the cut: {watched:?}; cut {cut} open watch responses");
    assert!(
        cut >= 6,
        "cut {cut} watches; the daemon watches at least nodes, priorityclasses, pods, jobs, trainingjobs and paddlejobs: {watched:?}"
    );

    // Every kind watched before is watched again.
    let rewatched = eventually_within(
        Duration::from_secs(10),
        daemon,
        cut_at,
        "every watch re-opened",
        || {
            let (kubeconfig, watched) = (kubeconfig.clone(), watched.clone());
            async move {
                let now = watches_in(&daemon_log(&kubeconfig).await);
                watched
                    .iter()
                    .all(|(key, n)| now.get(key).copied().unwrap_or(0) > *n)
                    .then_some(now)
            }
        },
    )
    .await;
    println!(
        "watches re-opened {:?} after the cut: {rewatched:?}",
        cut_at.elapsed()
    );
    assert_eq!(http_status(port, "/readyz"), Some(200));
    // The nodes watch resumed from the resourceVersion of the last event it saw (node-1's; the
    // node did not change), not from a new list's.
    let versions = watch_versions(&kubeconfig).await;
    println!("resourceVersions of the watch requests: {versions:?}");
    assert_eq!(
        versions["nodes"].last(),
        Some(&node_version),
        "the nodes watch after the cut: {versions:?}"
    );

    // The cluster changes after the cut: the node shrinks, the job must follow.
    set_node_cpu(&nodes, "2").await;
    let shrinking = Instant::now();
    eventually_within(
        Duration::from_secs(15),
        daemon,
        shrinking,
        "a shrunk to 3 trainers after the cut",
        sized(3),
    )
    .await;
    println!(
        "shrunk to 3 trainers {:?} after the node changed",
        shrinking.elapsed()
    );
    assert_eq!(http_status(port, "/readyz"), Some(200));

    let after = daemon_log(&kubeconfig).await;
    let since = log_between(&before, &after);
    println!("the daemon's requests since the cut: {since:?}");
    let watches_since: u64 = watches_in(&since).values().sum();
    assert!(
        watches_since >= cut,
        "{cut} watches cut, {watches_since} re-opened: {since:?}"
    );
    let lists: Vec<(&String, &u64)> = since
        .iter()
        .filter(|(key, _)| key.starts_with("list "))
        .collect();
    assert!(
        lists.is_empty(),
        "the re-watches resume from their resourceVersion, yet the daemon listed: {lists:?}"
    );
    // Nothing failed: the watcher resumed each stream itself (a failed watch would count a
    // watch error and a restart, and re-list).
    let restarts_after = restarts(&http_get(port, "/metrics").unwrap().1);
    assert_eq!(
        restarts_after, restarts_before,
        "(watch restarts, watch errors) moved across the cut"
    );
    println!("test wall time {:?}", started.elapsed());
    stop(cluster).await;
}

/// A lease taken over while the daemon leads: the test rewrites the leader Lease to another
/// holder (as a replica that found it expired would: new holder, fresh acquire and renew times,
/// one more transition) and then renews it every 2 s as that replica. The daemon learns of it from
/// its watch of the Lease (confirmed by a read) or at its next renewal (every 2 s: a 409 and a
/// read against a real API server); from then on `trainscale_leader` and
/// `trainscale_operator_running` are 0 while `/readyz` stays 200 (a standby replica is ready), and
/// although a new TrainingJob arrives and the node shrinks under the running job (both would make
/// a leader write), the daemon sends no write at all, the Lease included, and nothing changes.
/// Between the takeover and that moment its only write is the one renewal that found the other
/// holder.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_deposed_leader_writes_nothing_after_a_takeover() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    require_kmock();
    let mut cluster = start(&[]).await;
    let (started, port) = (cluster.started, cluster.port);
    let kubeconfig = cluster.kubeconfig.clone();
    let daemon = &mut cluster.daemon;
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "trainscale-system");
    let nodes: Api<Node> = Api::all(client.clone());

    // The daemon leads and acts: mnist is created and sized.
    tjs.create(&PostParams::default(), &training_job())
        .await
        .unwrap();
    eventually(daemon, started, "mnist Running at 4 trainers", || {
        let (jobs, tjs) = (jobs.clone(), tjs.clone());
        async move {
            let job = jobs.get_opt("mnist-trainer").await.unwrap()?;
            let phase = tjs.get("mnist").await.unwrap().status?.phase;
            (job.spec?.parallelism == Some(4) && phase.as_str() == "Running").then_some(())
        }
    })
    .await;
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), "ml");
    eventually(daemon, started, "ConfigMap trainers = 4", || {
        let configs = configs.clone();
        async move {
            let cm = configs.get_opt("mnist-trainers").await.unwrap()?;
            (cm.data?.get("trainers")?.as_str() == "4").then_some(())
        }
    })
    .await;
    until_quiet(DEADLINE, daemon, started, port).await;
    let held = leases.get("trainscale-leader").await.unwrap().spec.unwrap();
    let identity = held.holder_identity.clone().unwrap();
    assert_ne!(identity, "other");
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(sample(&metrics, "trainscale_leader", &[]), Some(1.0));

    // Another replica takes the lease and keeps renewing it.
    let now = || MicroTime(k8s_openapi::jiff::Timestamp::now());
    let takeover = serde_json::json!({"spec": {
        "holderIdentity": "other",
        "acquireTime": now(),
        "renewTime": now(),
        "leaseDurationSeconds": 15,
        "leaseTransitions": held.lease_transitions.unwrap_or(0) + 1,
    }});
    leases
        .patch(
            "trainscale-leader",
            &PatchParams::default(),
            &Patch::Merge(takeover),
        )
        .await
        .unwrap();
    // Counted from here: a renewal of the daemon's own that arrived first is not its concern.
    let at_takeover = daemon_log(&kubeconfig).await;
    let renewing = {
        let leases = leases.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let renew = serde_json::json!({"spec": {"renewTime": now()}});
                let _ = leases
                    .patch(
                        "trainscale-leader",
                        &PatchParams::default(),
                        &Patch::Merge(renew),
                    )
                    .await;
            }
        })
    };

    // The daemon notices from its watch, or at its next renewal within 2 s.
    let took_over = Instant::now();
    eventually_within(
        Duration::from_secs(20),
        daemon,
        took_over,
        "the daemon no longer leads",
        || async {
            let (_, metrics) = http_get(port, "/metrics")?;
            (sample(&metrics, "trainscale_leader", &[]) == Some(0.0)
                && sample(&metrics, "trainscale_operator_running", &[]) == Some(0.0))
            .then_some(())
        },
    )
    .await;
    let noticed_after = took_over.elapsed();
    let at_notice = daemon_log(&kubeconfig).await;

    // Changes a leader would act on: a new job (the operator would create its children) and a
    // node too small for mnist's 4 trainers (the autoscaler would scale it down).
    let mut second = training_job();
    second.metadata.name = Some("second".into());
    tjs.create(&PostParams::default(), &second).await.unwrap();
    set_node_cpu(&nodes, "4").await;
    // The daemon sees both (it still watches and observes every pass)...
    eventually_within(
        DEADLINE,
        daemon,
        Instant::now(),
        "the daemon observed the changes",
        || async {
            let (_, metrics) = http_get(port, "/metrics")?;
            let pending = sample(&metrics, "trainscale_jobs", &["phase=\"Pending\""]);
            let free = sample(&metrics, "trainscale_cluster_free_cpu_millicores", &[]);
            (pending == Some(1.0) && free == Some(0.0)).then_some(())
        },
    )
    .await;
    // ...and a few passes (--interval 1s) later has still written nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at_end = daemon_log(&kubeconfig).await;
    renewing.abort();

    let before_notice = writes_in(&log_between(&at_takeover, &at_notice));
    let after_notice = writes_in(&log_between(&at_notice, &at_end));
    println!(
        "takeover noticed after {noticed_after:.1?}; the daemon's writes until then: {before_notice:?}; after: {after_notice:?}; all its requests after: {:?}",
        log_between(&at_notice, &at_end)
    );
    assert!(
        after_notice.is_empty(),
        "a deposed leader wrote: {after_notice:?}"
    );
    assert!(
        before_notice.keys().all(|k| k == "patch leases")
            && before_notice.get("patch leases").copied().unwrap_or(0) <= 1,
        "before noticing, only the renewal that found the other holder: {before_notice:?}"
    );
    assert_eq!(http_status(port, "/readyz"), Some(200));
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(sample(&metrics, "trainscale_leader", &[]), Some(0.0));
    assert!(jobs.get_opt("second-trainer").await.unwrap().is_none());
    assert!(tjs.get("second").await.unwrap().status.is_none());
    let mnist = jobs.get("mnist-trainer").await.unwrap().spec.unwrap();
    assert_eq!(mnist.parallelism, Some(4), "not rescaled by a non-leader");
    let lease = leases.get("trainscale-leader").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("other"));
    assert_eq!(
        lease.lease_transitions,
        Some(held.lease_transitions.unwrap_or(0) + 1)
    );

    stop(cluster).await;
}

/// Makes the emulator answer 503 to every request for `resources` (none: the outage ends).
async fn make_unavailable(kubeconfig: &Path, resources: &[&str]) {
    let query: Vec<String> = resources.iter().map(|r| format!("resource={r}")).collect();
    let request = http::Request::post(format!("/_harness/unavailable?{}", query.join("&")))
        .body(Vec::new())
        .unwrap();
    let _: Vec<String> = client(kubeconfig).await.request(request).await.unwrap();
}

/// A leader that cannot renew its Lease must stop acting before the Lease expires (15 s after its
/// last renewal), when another replica may take over: the emulator answers 503 to every Lease
/// request while everything else works, and the daemon must report `trainscale_leader 0` within
/// 15 s and write nothing after. The daemon leads only until the renew deadline (10 s) after it
/// sent its last successful renewal (every 2 s), so it stops at most 10 s into the outage.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_leader_that_cannot_renew_stops_acting_before_the_lease_expires() {
    require_kmock();
    let mut cluster = start(&[]).await;
    let (started, port) = (cluster.started, cluster.port);
    let kubeconfig = cluster.kubeconfig.clone();
    // Leading needs the Lease acquired.
    eventually(&mut cluster.daemon, started, "the daemon leads", || async {
        let (_, metrics) = http_get(port, "/metrics")?;
        (sample(&metrics, "trainscale_leader", &[]) == Some(1.0)).then_some(())
    })
    .await;

    make_unavailable(&kubeconfig, &["leases"]).await;
    let outage = Instant::now();
    eventually_within(
        Duration::from_secs(15),
        &mut cluster.daemon,
        outage,
        "the daemon stops leading before its Lease expires",
        || async {
            let (_, metrics) = http_get(port, "/metrics")?;
            (sample(&metrics, "trainscale_leader", &[]) == Some(0.0)).then_some(())
        },
    )
    .await;
    let at_stepping_down = daemon_log(&kubeconfig).await;
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    tjs.create(&PostParams::default(), &training_job())
        .await
        .unwrap();
    // A few passes and operator reconciles (--interval 1s) later, still nothing written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes: BTreeMap<String, u64> = writes_in(&log_between(
        &at_stepping_down,
        &daemon_log(&kubeconfig).await,
    ))
    .into_iter()
    .filter(|(key, _)| !key.ends_with(" leases"))
    .collect();
    assert!(
        writes.is_empty(),
        "a leader without a Lease wrote: {writes:?}"
    );
    make_unavailable(&kubeconfig, &[]).await;
    stop(cluster).await;
}

/// A Lease deleted while the daemon leads is created again (it used to stay gone: no replica led
/// again, passes stopped and new jobs were ignored while health stayed 200). The daemon's watch
/// of the Lease sees the deletion and it recreates the Lease holding it, without a lapse in
/// leading; a TrainingJob created afterwards is sized.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_deleted_lease_is_recreated_and_the_leader_keeps_acting() {
    require_kmock();
    let mut cluster = start(&[]).await;
    let (started, port) = (cluster.started, cluster.port);
    let kubeconfig = cluster.kubeconfig.clone();
    let daemon = &mut cluster.daemon;
    eventually(daemon, started, "the daemon leads", || async {
        let (_, metrics) = http_get(port, "/metrics")?;
        (sample(&metrics, "trainscale_leader", &[]) == Some(1.0)).then_some(())
    })
    .await;
    let client = client(&kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "trainscale-system");
    let held = leases.get("trainscale-leader").await.unwrap();
    let identity = held.spec.and_then(|s| s.holder_identity).unwrap();
    let uid = held.metadata.uid;

    leases
        .delete("trainscale-leader", &Default::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    eventually_within(
        Duration::from_secs(10),
        daemon,
        deleted,
        "the Lease created again by its holder",
        || {
            let (leases, identity, uid) = (leases.clone(), identity.clone(), uid.clone());
            async move {
                let lease = leases.get_opt("trainscale-leader").await.unwrap()?;
                (lease.metadata.uid != uid
                    && lease.spec?.holder_identity.as_deref() == Some(identity.as_str()))
                .then_some(())
            }
        },
    )
    .await;
    println!("recreated {:.1?} after the deletion", deleted.elapsed());
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(sample(&metrics, "trainscale_leader", &[]), Some(1.0));

    // Still acting: a new job is created and sized.
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "ml");
    tjs.create(&PostParams::default(), &training_job())
        .await
        .unwrap();
    eventually(daemon, started, "mnist sized to 4 trainers", || {
        let jobs = jobs.clone();
        async move {
            let job = jobs.get_opt("mnist-trainer").await.unwrap()?;
            (job.spec?.parallelism == Some(4)).then_some(())
        }
    })
    .await;
    stop(cluster).await;
}

/// A job whose trainers need 64 GPUs each, on a cluster whose one node has 8, says why on its
/// status after the first passes: `ScalingLimited=True` (reason `GangDoesNotFit`, the message
/// naming the GPU shortfall) and `AbleToScale=True`, with `kubectl get`'s `Sizing` column's
/// source filled in. Then, while nothing changes, the daemon writes nothing more: no status
/// patch, no other write (Lease renewals aside), and the conditions' `lastTransitionTime` stays.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_job_that_cannot_grow_says_why_on_its_status() {
    require_kmock();
    let mut cluster = start_with(&["--kinds", "trainingjob,paddlejob"], &["--node-gpu", "8"]).await;
    let port = cluster.port;
    let started = cluster.started;
    let kubeconfig = cluster.kubeconfig.clone();
    let client = client(&kubeconfig).await;
    let tjs: Api<TrainingJob> = Api::namespaced(client.clone(), "ml");
    let small = serde_json::json!({"requests": {"cpu": "100m", "memory": "128Mi"},
                                   "limits": {"cpu": "100m", "memory": "128Mi"}});
    let huge: TrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "huge", "namespace": "ml"},
        "spec": {
            "image": "paddlepaddle/paddle:latest",
            "fault_tolerant": true,
            "master": {"resources": small},
            "pserver": {"min-instance": 1, "max-instance": 1, "resources": small},
            "trainer": {"min-instance": 1, "max-instance": 2, "resources": {
                "requests": {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "64"},
                "limits": {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "64"}}},
        },
    }))
    .unwrap();
    tjs.create(&PostParams::default(), &huge).await.unwrap();

    let limited = |tj: &TrainingJob| {
        tj.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "ScalingLimited")
                .cloned()
        })
    };
    let condition = eventually(
        &mut cluster.daemon,
        started,
        "ScalingLimited on huge",
        || {
            let tjs = tjs.clone();
            async move { limited(&tjs.get("huge").await.unwrap()).filter(|c| c.status == "True") }
        },
    )
    .await;
    assert_eq!(condition.reason, "GangDoesNotFit");
    assert!(
        condition
            .message
            .contains("every trainer needs 64 nvidia.com/gpu, more than any node has"),
        "{}",
        condition.message
    );
    let tj = tjs.get("huge").await.unwrap();
    let able = tj
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "AbleToScale"))
        .cloned()
        .expect("AbleToScale written beside ScalingLimited");
    assert_eq!(
        (able.status.as_str(), able.reason.as_str()),
        ("True", "ReadyForNewScale")
    );

    until_quiet(Duration::from_secs(60), &mut cluster.daemon, started, port).await;
    let before = daemon_log(&kubeconfig).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let window = log_between(&before, &daemon_log(&kubeconfig).await);
    let writes: BTreeMap<String, u64> = writes_in(&window)
        .into_iter()
        .filter(|(key, _)| !key.ends_with(" leases"))
        .collect();
    assert!(
        writes.is_empty(),
        "writes while nothing changed: {writes:?}"
    );
    let after = tjs.get("huge").await.unwrap();
    assert_eq!(limited(&after), Some(condition), "the condition moved");
    stop(cluster).await;
}
