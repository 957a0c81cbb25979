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

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use trainscale::api::{ScaleResults, TrainingJob};

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
        .args(["-c", "import kmock"])
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

async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
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
        tokio::time::sleep(Duration::from_millis(250)).await;
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
        "python3 with kmock is missing: pip install 'kmock==0.8.*' (CI installs it)"
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
    let daemon = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--interval",
            "1s",
            "--debounce",
            "200ms",
            "--cooldown",
            "0s",
            "--leader-elect",
            "--lease-namespace",
            "trainscale-system",
        ])
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

/// SIGTERM: a clean exit, promptly; then the emulator ends.
async fn stop(mut cluster: Cluster) {
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
    // Closing the emulator's stdin ends it.
    drop(cluster.emulator.0.stdin.take());
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*', then `touch build.rs`"
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
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*', then `touch build.rs`"
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
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*', then `touch build.rs`"
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
    let small = serde_json::json!({"requests": {"cpu": "100m", "memory": "128Mi"},
                                   "limits": {"cpu": "100m", "memory": "128Mi"}});
    serde_json::from_value(serde_json::json!({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "image": "paddlepaddle/paddle:latest",
            "fault_tolerant": true,
            "master": {"resources": small},
            "pserver": {"min-instance": 1, "max-instance": 1, "resources": small},
            "trainer": {"min-instance": 1, "max-instance": 2, "resources": small},
        },
    }))
    .unwrap()
}

/// The request budget of a settled cluster: `TRAINSCALE_E2E_JOBS` (default 20) TrainingJobs are
/// created and sized (each grows to its max of 2 trainers, its ConfigMap follows, its phase is
/// Running); then, over a quiet window of `TRAINSCALE_E2E_WINDOW_S` (default 15) seconds with
/// `--interval 1s` (15 autoscaler passes; every job requeued at least once), the daemon sends no
/// list, no get and no write: only its watches stay open. Lease renewals (leader election: a get
/// and a patch of the Lease every 10 s) are the one traffic a steady cluster needs and are
/// reported apart. Counted from the daemon's own
/// `trainscale_api_requests_total` and cross-checked with the emulator's request log.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*', then `touch build.rs`"
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
    let mut cluster = start_with(
        &["--podgroups", "volcano"],
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
    eventually_within(
        settle_deadline,
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
    // Let the last watch events and debounced passes land.
    tokio::time::sleep(Duration::from_secs(3)).await;
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
        if resource == "leases" {
            lease_writes += if write { *n } else { 0 };
        } else if write || verb == "list" || verb == "get" {
            unexpected.push(format!("{n} x {verb} {resource}"));
        }
    }
    assert!(
        unexpected.is_empty(),
        "a settled cluster sent reads or writes: {unexpected:?}"
    );
    // Renewals every LEASE_DURATION - LEASE_GRACE (10 s) at most, plus one in flight.
    let renewals = window.as_secs() / 10 + 2;
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
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*', then `touch build.rs`"
)]
async fn readiness_follows_the_api_server() {
    require_kmock();
    let mut cluster = start(&[]).await;
    let (started, port) = (cluster.started, cluster.port);
    assert_eq!(http_status(port, "/readyz"), Some(200));
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
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*', then `touch build.rs`"
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
    drop(second);
    let pid = cluster.daemon.0.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = cluster.daemon.0.wait();
}
