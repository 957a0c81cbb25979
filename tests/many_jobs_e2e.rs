//! Many jobs present at start: 50 TrainingJobs and PaddleJobs exist before `trainscale run`
//! starts, 10 more are applied while it runs, and every one must have its trainer Job within
//! 15 s of the later of the daemon's start and the job's create. One replica of the Deployment as
//! shipped (`deploy/deployment.yaml`'s args and literal env, `--kubeconfig` with the service
//! account's token, RBAC enforced by the emulator), in three variants: `--podgroups volcano`,
//! `--podgroups scheduler-plugins`, and none. The emulator runs with its defaults but a node of
//! 64 cpu, 256Gi and 400 pods, so that every job's pods are placed (the check is the operator's,
//! not the fit).
//!
//! After the trainer Jobs: with PodGroups, each job's PodGroup exists (a PodGroup is created
//! before its job's pods may be); and no request of the daemon was denied
//! (`/_harness/denied`). Gated like the other e2e tests (`cfg(kmock)`, see `build.rs`).

#[path = "support/e2e.rs"]
mod e2e;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};

use e2e::{Emulator, Replica, Workdir};

/// How soon every job must have its trainer Job.
const WITHIN: Duration = Duration::from_secs(15);
/// Jobs present before the daemon starts, and applied while it runs.
const BEFORE: usize = 50;
const WHILE: usize = 10;

/// Job `i`: a TrainingJob (even `i`, fault tolerant when `i % 4 == 0`) or a PaddleJob (odd),
/// in one of five namespaces, one pserver and 1..2 trainers of 100m CPU.
fn job(i: usize) -> (&'static str, Value) {
    let namespace = format!("team-{}", i % 5);
    let small = json!({"requests": {"cpu": "100m", "memory": "128Mi"},
                       "limits": {"cpu": "100m", "memory": "128Mi"}});
    let pserver = json!({"min-instance": 1, "max-instance": 1, "resources": small});
    let trainer = json!({"entrypoint": "python train.py", "workspace": "/workspace",
                         "min-instance": 1, "max-instance": 2, "resources": small});
    if i.is_multiple_of(2) {
        (
            "trainingjobs",
            json!({"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                   "metadata": {"name": format!("tj-{i:02}"), "namespace": namespace},
                   "spec": {"image": "paddlepaddle/paddle:2.6", "port": 7164, "ports_num": 1,
                            "ports_num_for_sparse": 1, "fault_tolerant": i.is_multiple_of(4),
                            "pserver": pserver, "trainer": trainer}}),
        )
    } else {
        (
            "paddlejobs",
            json!({"apiVersion": "paddlepaddle.org/v1", "kind": "PaddleJob",
                   "metadata": {"name": format!("pj-{i:02}"), "namespace": namespace},
                   "spec": {"image": "paddle/dist-train:1.0", "port": 7164, "ports_num": 1,
                            "ports_num_for_sparse": 1, "pserver": pserver,
                            "trainer": trainer}}),
        )
    }
}

/// `(namespace, name)` of a job and when its create was answered.
type Created = Vec<((String, String), Instant)>;

/// Creates jobs `range` concurrently.
async fn create_jobs(client: &Client, range: std::ops::Range<usize>) -> Created {
    let creates = range.map(|i| async move {
        let (plural, value) = job(i);
        let created = e2e::create(client, plural, &value).await;
        let key = (
            created["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            created["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        (key, Instant::now())
    });
    futures::future::join_all(creates).await
}

/// `(namespace, name)` of every object of `api_version`/`kind` (plural `plural`).
async fn names(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> std::collections::BTreeSet<(String, String)> {
    e2e::list_all(client, api_version, kind, plural)
        .await
        .into_iter()
        .map(|o| {
            (
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Waits until every job of `jobs` has its `<name>-trainer` Job, each within [`WITHIN`] of the
/// later of `started` and its create; returns the slowest delay. Fails naming the late jobs and
/// how many were served.
async fn await_trainer_jobs(
    emulator: &Emulator,
    client: &Client,
    jobs: &Created,
    started: Instant,
    daemon: &mut Replica,
    what: &str,
) -> Duration {
    let mut served: BTreeMap<(String, String), Duration> = BTreeMap::new();
    loop {
        let trainer_jobs = names(client, "batch/v1", "Job", "jobs").await;
        let mut late = Vec::new();
        for ((ns, name), created) in jobs {
            let key = (ns.clone(), name.clone());
            if served.contains_key(&key) {
                continue;
            }
            let from = (*created).max(started);
            if trainer_jobs.contains(&(ns.clone(), format!("{name}-trainer"))) {
                served.insert(key, from.elapsed());
            } else if from.elapsed() > WITHIN {
                late.push(format!("{ns}/{name}"));
            }
        }
        if !late.is_empty() {
            let denied = emulator.denied().await;
            let readyz = e2e::http_get(daemon.port, "/readyz")
                .and_then(|(_, r)| r.split_once("\r\n\r\n").map(|(_, body)| body.to_string()));
            panic!(
                "{what}: {} of {} jobs have no trainer Job {WITHIN:?} after the later of the daemon's start and their create ({} served): {late:?}\nrequests denied so far: {denied:#?}\nthe daemon's /readyz: {readyz:?}\nthe daemon's log: {}",
                late.len(),
                jobs.len(),
                served.len(),
                daemon.log.display()
            );
        }
        if served.len() == jobs.len() {
            return served.values().copied().max().unwrap_or_default();
        }
        if let Err(dead) = daemon.guard.check_alive() {
            panic!("{what}: {dead} (log {})", daemon.log.display());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One variant: `podgroups` is the `--podgroups` value, if any.
async fn many_jobs(podgroups: Option<&str>) {
    e2e::require_kmock();
    let dir = Workdir::new(&format!("many-jobs-{}", podgroups.unwrap_or("none")));
    let emulator = Emulator::start(
        dir.path(),
        &[
            "--node-cpu",
            "64",
            "--node-memory",
            "256Gi",
            "--node-pods",
            "400",
        ],
        300,
    );
    let client = emulator.admin().await;
    let present = create_jobs(&client, 0..BEFORE).await;

    let container = e2e::shipped_container();
    let args: Vec<&str> = podgroups.map_or(Vec::new(), |mode| vec!["--podgroups", mode]);
    let started = Instant::now();
    let mut daemon = Replica::start(
        &container,
        "trainscale-5f6b8-a",
        &emulator.kubeconfig,
        dir.path(),
        &[],
        &args,
    );
    let what = format!("--podgroups {}", podgroups.unwrap_or("(none)"));
    let slowest =
        await_trainer_jobs(&emulator, &client, &present, started, &mut daemon, &what).await;
    println!(
        "{what}: {BEFORE} jobs present at start; the last trainer Job {slowest:.1?} after the daemon started"
    );
    let applied = create_jobs(&client, BEFORE..BEFORE + WHILE).await;
    let slowest =
        await_trainer_jobs(&emulator, &client, &applied, started, &mut daemon, &what).await;
    println!(
        "{what}: {WHILE} jobs applied while it runs; the slowest trainer Job {slowest:.1?} after its create"
    );

    if let Some(mode) = podgroups {
        let api_version = match mode {
            "volcano" => "scheduling.volcano.sh/v1beta1",
            _ => "scheduling.x-k8s.io/v1alpha1",
        };
        let groups = names(&client, api_version, "PodGroup", "podgroups").await;
        let missing: Vec<String> = present
            .iter()
            .chain(&applied)
            .filter(|((ns, name), _)| !groups.contains(&(ns.clone(), name.clone())))
            .map(|((ns, name), _)| format!("{ns}/{name}"))
            .collect();
        assert!(
            missing.is_empty(),
            "{what}: jobs with a trainer Job but no {api_version} PodGroup: {missing:?}"
        );
    }
    let denied = emulator.denied().await;
    assert!(denied.is_empty(), "{what}: requests denied: {denied:#?}");

    daemon.guard.terminate(Duration::from_secs(15)).await;
    emulator.stop();
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn many_jobs_present_at_start_without_podgroups() {
    many_jobs(None).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn many_jobs_present_at_start_with_volcano_podgroups() {
    many_jobs(Some("volcano")).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn many_jobs_present_at_start_with_scheduler_plugins_podgroups() {
    many_jobs(Some("scheduler-plugins")).await;
}
