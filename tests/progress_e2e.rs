//! End-to-end (issue 33): a job's own `trainscale progress` write changes the next plan.
//!
//! On one 5-CPU node of the emulator (`tests/e2e/kmock_cluster.py`, its Job controller playing
//! the elastic Jobs, RBAC enforced as deployed) run two elastic Indexed Jobs, `long` and
//! `short`, 1 worker of 1 CPU each, 1..4, both just rescaled (`trainscale.io/last-scale` now)
//! and both reporting progress (`trainscale.io/progress`, 1 step/s at 1 worker): `long` has 500
//! steps left, `short` 900. Three CPUs are spare, room for one job to reach 4. The daemon runs
//! `--policy progress` with a 30 s cooldown, so it holds both at 1 while the test, once the
//! daemon has read both reports, runs the `trainscale progress` binary: `short` did 990 of
//! 1000. `trainscale plan --policy progress` on a dump taken before that write grows `long`; on
//! one taken after it grows `short`; and once the cooldown is over the daemon grows `short` to 4
//! and leaves `long` at 1, with no other write by the test.
//!
//! The progress writer uses the admin kubeconfig: the emulator knows two tokens (the daemon's
//! ServiceAccount and admin) and no impersonation, so the job ServiceAccount's RBAC of
//! `deploy/components/progress-reporter` is not exercised here (the emulator loads and parses
//! it). Gated like the other e2e tests (`cfg(kmock)`, see `build.rs`).

#[path = "support/e2e.rs"]
mod e2e;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use e2e::{Emulator, FAST_PASSES, JOB, Replica, poll};

const NS: &str = "ml";
const LIFETIME_S: u32 = 300;
const WITHIN: Duration = Duration::from_secs(90);
const EVERY: Duration = Duration::from_millis(250);
/// The daemon's cooldown: both jobs are held at their size this long after creation.
const COOLDOWN_S: i64 = 30;

/// An elastic Indexed Job of 1-CPU workers at 1 (1..4), just rescaled, reporting `done` of 1000
/// steps at 1 step/s over the last 100 s.
fn elastic_job(name: &str, done: i64, now: Timestamp) -> Value {
    let at = |s: i64| {
        Timestamp::from_second(now.as_second() - s)
            .unwrap_or(now)
            .to_string()
    };
    let progress = json!({"done": done, "total": 1000, "unit": "steps", "updated": at(0),
                          "since": at(100), "doneAtSince": done - 100});
    let last_scale = json!({"time": at(0), "from": 1, "to": 1, "reason": "created"});
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS,
                     "annotations": {"trainscale.io/min-replicas": "1",
                                     "trainscale.io/max-replicas": "4",
                                     "trainscale.io/last-scale": last_scale.to_string(),
                                     "trainscale.io/progress": progress.to_string()}},
        "spec": {"completionMode": "Indexed", "parallelism": 1, "completions": 1,
                 "backoffLimit": 20,
                 "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "worker", "image": "pytorch/pytorch:2.3.1",
                             "command": ["torchrun", "--nnodes=1:4", "/workspace/train.py"],
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}})
}

async fn parallelism(client: &kube::Client, name: &str) -> i64 {
    let obj = e2e::api_in(client, JOB.0, JOB.1, JOB.2, Some(NS))
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("getting Job {NS}/{name}: {e}"));
    serde_json::to_value(obj).unwrap_or(Value::Null)["spec"]["parallelism"]
        .as_i64()
        .unwrap_or(-1)
}

/// `trainscale plan --policy progress` on a dump of the cluster now: the target of each job.
async fn planned(client: &kube::Client, dir: &std::path::Path, file: &str) -> (i64, i64) {
    let dump = e2e::dump(client, &["PyTorchTrainingJob", "PyTorchJob"]).await;
    let snapshot = dir.join(file);
    std::fs::write(&snapshot, dump.to_string()).unwrap_or_else(|e| panic!("writing {file}: {e}"));
    let plan = e2e::plan(&snapshot, &["--policy", "progress"]);
    let target = |name: &str| {
        plan["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| j["name"] == name)
            .and_then(|j| j["target"].as_i64())
            .unwrap_or_else(|| panic!("{name} is not planned: {plan}"))
    };
    (target("long"), target("short"))
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn a_progress_write_grows_the_nearly_done_job_first() {
    let dir = e2e::Workdir::new("progress-e2e");
    let emulator = Emulator::start(
        dir.path(),
        &["--node-cpu", "5", "--node-memory", "64Gi"],
        LIFETIME_S,
    );
    let client = emulator.admin().await;
    let created = Timestamp::now();
    e2e::create(&client, "jobs", &elastic_job("long", 500, created)).await;
    e2e::create(&client, "jobs", &elastic_job("short", 100, created)).await;
    poll(
        WITHIN,
        EVERY,
        "one worker of each job runs",
        || Ok(()),
        || {
            let client = client.clone();
            async move {
                let pods = e2e::list_all(&client, "v1", "Pod", "pods").await;
                let running: Vec<&str> = pods
                    .iter()
                    .filter(|p| p["status"]["phase"] == "Running")
                    .filter_map(|p| p["metadata"]["name"].as_str())
                    .collect();
                if running.contains(&"long-0") && running.contains(&"short-0") {
                    Ok(())
                } else {
                    Err(format!("running: {running:?}"))
                }
            }
        },
    )
    .await;
    let before = planned(&client, dir.path(), "before.json").await;
    assert_eq!(before, (4, 1), "before the write `long` finishes sooner");

    let cooldown = COOLDOWN_S.to_string() + "s";
    let mut overrides = FAST_PASSES.to_vec();
    overrides.push(("TRAINSCALE_COOLDOWN", &cooldown));
    overrides.push(("TRAINSCALE_POLICY", "progress"));
    let mut replica = Replica::start(
        &e2e::shipped_container(),
        "trainscale-0",
        &emulator.kubeconfig,
        dir.path(),
        &overrides,
        &["--operator=false"],
    );
    let port = replica.port;
    poll(
        WITHIN,
        EVERY,
        "the daemon estimates both jobs' progress",
        || replica.guard.check_alive(),
        || {
            let metrics = e2e::http_get(port, "/metrics")
                .map(|(_, body)| body)
                .unwrap_or_default();
            async move {
                match e2e::sample(&metrics, "trainscale_progress_estimated", &[]) {
                    Some(2.0) => Ok(()),
                    other => Err(format!("trainscale_progress_estimated {other:?}")),
                }
            }
        },
    )
    .await;
    // Still in cooldown: nothing grew.
    assert_eq!(parallelism(&client, "long").await, 1);
    assert_eq!(parallelism(&client, "short").await, 1);
    assert!(
        (Timestamp::now().as_second() - created.as_second()) < COOLDOWN_S - 5,
        "the cooldown must outlast the daemon's start; raise COOLDOWN_S"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_trainscale"))
        .args(["progress", "ml/short", "--kind", "job", "--done", "990"])
        .args(["--total", "1000", "--unit", "steps", "--kubeconfig"])
        .arg(&emulator.admin_kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("running trainscale progress: {e}"));
    assert!(
        out.status.success(),
        "trainscale progress: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("trainscale progress printed no JSON: {e}"));
    // The window the job opened is kept: the rate is over all its steps since.
    assert_eq!(written["doneAtSince"], 0.0, "{written}");
    assert_eq!(written["done"], 990.0, "{written}");

    let after = planned(&client, dir.path(), "after.json").await;
    assert_eq!(after, (1, 4), "after the write `short` finishes sooner");

    poll(
        WITHIN,
        EVERY,
        "the daemon grows `short` to 4 once the cooldown is over",
        || replica.guard.check_alive(),
        || {
            let client = client.clone();
            async move {
                let short = parallelism(&client, "short").await;
                if short == 4 {
                    Ok(())
                } else {
                    Err(format!("short at {short}"))
                }
            }
        },
    )
    .await;
    // A few passes later `long` is still at 1: the room went to `short`.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(parallelism(&client, "long").await, 1);
    assert_eq!(parallelism(&client, "short").await, 4);
    let metrics = replica.metrics().unwrap_or_default();
    assert_eq!(
        e2e::sample(
            &metrics,
            "trainscale_progress_ignored",
            &["reason=\"stale\""]
        ),
        Some(0.0)
    );
    assert!(emulator.denied().await.is_empty(), "no request denied");
    replica.guard.terminate(Duration::from_secs(10)).await;
}
