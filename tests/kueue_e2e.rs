//! End-to-end: trainscale as the sizer Kueue leaves to others, against the kmock emulator playing
//! Kueue (`tests/e2e/kmock_cluster.py --kueue`: its Job webhooks, Workloads and slices, quota
//! with a cohort and borrowing, the ungater), with RBAC enforced as deployed (`deploy/rbac.yaml`
//! and its components, `deploy/components/kueue` among them: read only).
//!
//! One roomy node (64 CPUs: the nodes never bind); two ClusterQueues in the cohort `research`,
//! `cq-a` (8 CPUs, may borrow 4) and `cq-b` (8 CPUs, no limit), a LocalQueue each, and 12 elastic
//! Indexed Jobs (annotations `trainscale.io/min-replicas: 1`, `max-replicas: 4`, Kueue's
//! `elastic-job`), 6 per queue, one 1-CPU worker each. Kueue admits all 12; one replica of the
//! shipped Deployment then sizes them:
//! - every queue stays within its quota plus what it may borrow, the cohort within its 16 CPUs,
//!   and the cohort's quota is used (the node has room: quota is the limit);
//! - the jobs that did not grow carry the sizing condition `QuotaExhausted` naming their
//!   ClusterQueue;
//! - a 13th Job Kueue cannot admit (suspended by Kueue) is never resized;
//! - another writer grows a Job trainscale had grown: the increase is a pending slice; while it
//!   is pending trainscale writes nothing to that Job (its condition says `AwaitingAdmission`);
//!   once quota frees and the slice is admitted, the other writer's size is the Job's current
//!   size: never written back to trainscale's old target, and a later rescale starts from it;
//! - the daemon's only writes are Job patches and Events (never `suspend`, never a pod's
//!   scheduling gates: no pod write at all) and the emulator denied none of its requests.
//!
//! `borrowed_quota_goes_back_to_a_lenders_waiting_jobs`: cq-a's four Jobs grow into the whole
//! cohort; four Jobs then arrive in cq-b and wait; trainscale shrinks cq-a's Jobs (never below
//! min, Events with reason `reclaimed`) until cq-b's 8 CPUs are free and Kueue admits all four.
//!
//! Gated like the other e2e tests (`cfg(kmock)`, see `build.rs`).

#[path = "support/e2e.rs"]
mod e2e;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use e2e::{Emulator, JOB, Replica, poll};

const NS: &str = "ml";
const LIFETIME_S: u32 = 300;
const WITHIN: Duration = Duration::from_secs(90);
const EVERY: Duration = Duration::from_millis(250);
const KUEUE: &str = "kueue.x-k8s.io/v1beta2";
/// The cohort's CPUs (two queues of 8).
const COHORT_CPUS: i64 = 16;

fn cluster_queue(name: &str, borrowing_limit: Option<i64>) -> Value {
    let mut cpu = json!({"name": "cpu", "nominalQuota": 8});
    if let Some(limit) = borrowing_limit {
        cpu["borrowingLimit"] = json!(limit);
    }
    json!({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"cohortName": "research", "namespaceSelector": {},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                     "flavors": [{"name": "default", "resources": [
                         cpu, {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
}

fn local_queue(name: &str, cluster_queue: &str) -> Value {
    json!({"apiVersion": KUEUE, "kind": "LocalQueue",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"clusterQueue": cluster_queue}})
}

/// An elastic Indexed Job of `parallelism` 1-CPU workers in LocalQueue `queue`, 1..4.
fn elastic_job(name: &str, queue: &str, parallelism: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kueue.x-k8s.io/queue-name": queue},
                     "annotations": {"trainscale.io/min-replicas": "1",
                                     "trainscale.io/max-replicas": "4",
                                     "kueue.x-k8s.io/elastic-job": "true"}},
        "spec": {"completionMode": "Indexed", "parallelism": parallelism,
                 "completions": parallelism, "backoffLimit": 20,
                 "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "worker", "image": "pytorch/pytorch:2.3.1",
                             "command": ["torchrun", "--nnodes=1:4", "/workspace/train.py"],
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}})
}

fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(-1)
}

fn annotation<'v>(job: &'v Value, name: &str) -> Option<&'v str> {
    job["metadata"]["annotations"][name].as_str()
}

/// The elastic Jobs of [`NS`] by name.
async fn jobs(client: &kube::Client) -> BTreeMap<String, Value> {
    e2e::list_all(client, JOB.0, JOB.1, JOB.2)
        .await
        .into_iter()
        .filter(|j| j["metadata"]["namespace"] == NS)
        .map(|j| (j["metadata"]["name"].as_str().unwrap_or("").to_string(), j))
        .collect()
}

/// Each queue's CPUs by its Jobs' `spec.parallelism` (`a-*`: cq-a, `b-*`: cq-b).
fn per_queue(jobs: &BTreeMap<String, Value>) -> (i64, i64) {
    let sum = |prefix: &str| {
        jobs.iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(_, j)| int(j, "/spec/parallelism"))
            .sum::<i64>()
    };
    (sum("a-"), sum("b-"))
}

async fn patch_job(client: &kube::Client, name: &str, body: Value) {
    e2e::api_in(client, JOB.0, JOB.1, JOB.2, Some(NS))
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap_or_else(|e| panic!("patching Job {NS}/{name}: {e}"));
}

async fn delete_job(client: &kube::Client, name: &str) {
    e2e::api_in(client, JOB.0, JOB.1, JOB.2, Some(NS))
        .delete(name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("deleting Job {NS}/{name}: {e}"));
}

/// The emulator playing Kueue with one roomy node, ResourceFlavor `default`, ClusterQueues
/// `cq-a` (its borrowing limit `a_borrowing_limit`) and `cq-b` in cohort `research`, and
/// LocalQueues `lq-a`, `lq-b`; with the admin client.
async fn kueue_cluster(
    dir: &e2e::Workdir,
    a_borrowing_limit: Option<i64>,
) -> (Emulator, kube::Client) {
    let emulator = Emulator::start(
        dir.path(),
        &["--kueue", "--node-cpu", "64", "--node-memory", "256Gi"],
        LIFETIME_S,
    );
    let client = emulator.admin().await;
    e2e::create(
        &client,
        "resourceflavors",
        &json!({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}}),
    )
    .await;
    let cq_a = cluster_queue("cq-a", a_borrowing_limit);
    e2e::create(&client, "clusterqueues", &cq_a).await;
    e2e::create(&client, "clusterqueues", &cluster_queue("cq-b", None)).await;
    e2e::create(&client, "localqueues", &local_queue("lq-a", "cq-a")).await;
    e2e::create(&client, "localqueues", &local_queue("lq-b", "cq-b")).await;
    (emulator, client)
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn elastic_jobs_are_sized_within_their_queues_quota_and_never_fight_kueue() {
    let dir = e2e::Workdir::new("kueue-e2e");
    let (emulator, client) = kueue_cluster(&dir, Some(4)).await;
    for i in 0..6 {
        e2e::create(&client, "jobs", &elastic_job(&format!("a-{i}"), "lq-a", 1)).await;
        e2e::create(&client, "jobs", &elastic_job(&format!("b-{i}"), "lq-b", 1)).await;
    }
    poll(
        WITHIN,
        EVERY,
        "Kueue admits the 12 Jobs",
        || Ok(()),
        || {
            let client = client.clone();
            async move {
                let all = jobs(&client).await;
                let running = all
                    .values()
                    .filter(|j| j["spec"]["suspend"] == false && int(j, "/status/active") == 1)
                    .count();
                if running == 12 {
                    Ok(())
                } else {
                    Err(format!("{running} of 12 running"))
                }
            }
        },
    )
    .await;

    let mut replica = Replica::sizer(&emulator, dir.path());

    // The cohort's quota is the limit: trainscale grows the Jobs until it is used.
    let settled = poll(
        WITHIN,
        EVERY,
        "the Jobs grown until the cohort's 16 CPUs are used, every one explained",
        || replica.guard.check_alive(),
        || {
            let client = client.clone();
            async move {
                let all = jobs(&client).await;
                let (a, b) = per_queue(&all);
                let explained = all
                    .values()
                    .all(|j| annotation(j, "trainscale.io/sizing").is_some());
                if a + b == COHORT_CPUS && explained {
                    Ok(all)
                } else {
                    Err(format!(
                        "cq-a {a}, cq-b {b} CPUs; all explained: {explained}"
                    ))
                }
            }
        },
    )
    .await;
    let (a, b) = per_queue(&settled);
    assert!(a <= 8 + 4, "cq-a past its quota and borrowing limit: {a}");
    assert!(
        b <= COHORT_CPUS - a,
        "cq-b past what the cohort leaves: {b}"
    );
    for (name, job) in &settled {
        let size = int(job, "/spec/parallelism");
        assert!((1..=4).contains(&size), "{name}: {size}");
        assert_eq!(
            size,
            int(job, "/spec/completions"),
            "{name}: Indexed counts"
        );
        let sizing = annotation(job, "trainscale.io/sizing").unwrap_or_default();
        if size == 1 {
            let queue = if name.starts_with("a-") {
                "cq-a"
            } else {
                "cq-b"
            };
            assert!(
                sizing.contains("QuotaExhausted")
                    && sizing.contains(&format!("ClusterQueue {queue}")),
                "{name} not grown: its condition names the exhausted ClusterQueue: {sizing}"
            );
        }
    }
    let grown = settled
        .iter()
        .find(|(_, j)| int(j, "/spec/parallelism") == 2)
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| panic!("no Job was grown: {settled:?}"));

    // A Job Kueue cannot admit when it comes (the cohort is full): suspended by Kueue, never
    // resized.
    e2e::create(&client, "jobs", &elastic_job("c-0", "lq-b", 2)).await;

    // Another writer grows a Job trainscale grew: a pending slice (the cohort is full).
    patch_job(
        &client,
        &grown,
        json!({"spec": {"parallelism": 3, "completions": 3}}),
    )
    .await;
    poll(
        WITHIN,
        EVERY,
        "the other writer's scale-up is a pending slice, and trainscale says it waits for it",
        || replica.guard.check_alive(),
        || {
            let (client, emulator, grown) = (client.clone(), &emulator, grown.clone());
            async move {
                let kueue: Value = emulator.harness("/_harness/kueue").await;
                let pending = kueue["workloads"].as_object().is_some_and(|w| {
                    w.values().any(|w| {
                        w["owner"] == grown.as_str()
                            && !w["sliceOf"].is_null()
                            && w["admitted"] == false
                            && w["finished"].is_null()
                    })
                });
                let job = &jobs(&client).await[&grown];
                let sizing = annotation(job, "trainscale.io/sizing").unwrap_or_default();
                if pending && sizing.contains("AwaitingAdmission") {
                    Ok(())
                } else {
                    Err(format!("pending slice: {pending}; sizing: {sizing}"))
                }
            }
        },
    )
    .await;
    // Several passes while the slice is pending: nothing is written to the Job.
    let before = jobs(&client).await[&grown].clone();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = jobs(&client).await[&grown].clone();
    assert_eq!(int(&during, "/spec/parallelism"), 3, "{during}");
    assert_eq!(
        annotation(&during, "trainscale.io/last-scale"),
        annotation(&before, "trainscale.io/last-scale"),
        "trainscale rescaled {grown} while its slice was pending"
    );

    // Quota frees (two Jobs of the other queue end): the slice is admitted; the other writer's
    // size is the Job's current size.
    delete_job(&client, "b-4").await;
    delete_job(&client, "b-5").await;
    poll(
        WITHIN,
        EVERY,
        "the slice admitted and the Job's pods ungated",
        || replica.guard.check_alive(),
        || {
            let client = client.clone();
            let grown = grown.clone();
            async move {
                let job = &jobs(&client).await[&grown];
                if int(job, "/status/active") == 3 {
                    Ok(())
                } else {
                    Err(format!("{grown}: {}", job["status"]))
                }
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = jobs(&client).await;
    let job = &after[&grown];
    assert!(
        int(job, "/spec/parallelism") >= 3,
        "{grown} written back below the other writer's 3: {job}"
    );
    if let Some(text) = annotation(job, "trainscale.io/last-scale")
        && Some(text) != annotation(&before, "trainscale.io/last-scale")
    {
        let record: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("last-scale {text:?}: {e}"));
        assert_eq!(
            record["from"].as_i64(),
            Some(3),
            "a rescale after the other writer's starts from its size: {record}"
        );
    }
    let (a, b) = per_queue(&after);
    assert!(a <= 12 && a + b <= COHORT_CPUS, "cq-a {a}, cq-b {b}");

    // The Job Kueue never admitted was never resized.
    let never = &after["c-0"];
    assert_eq!(int(never, "/spec/parallelism"), 2, "{never}");
    assert!(
        annotation(never, "trainscale.io/last-scale").is_none(),
        "c-0 resized though never admitted: {never}"
    );

    // The daemon wrote Jobs and Events only: never a pod (gates), never a Kueue object.
    let writes = emulator.daemon_writes().await;
    assert!(
        writes
            .keys()
            .all(|k| k == "create events" || k == "patch jobs"),
        "the daemon's writes: {writes:?}"
    );
    assert!(
        emulator.denied().await.is_empty(),
        "denied: {:?}",
        emulator.denied().await
    );
    replica.guard.terminate(Duration::from_secs(15)).await;
    emulator.stop();
}

/// Quota given back: cq-a's Jobs grow into cq-b's idle quota (the cohort's 16 CPUs); then four
/// Jobs arrive in cq-b and their Workloads wait. trainscale shrinks cq-a's Jobs (never below
/// min) until cq-b's nominal quota is free, Kueue admits the four, and nothing is preempted.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn borrowed_quota_goes_back_to_a_lenders_waiting_jobs() {
    let dir = e2e::Workdir::new("kueue-give-back-e2e");
    let (emulator, client) = kueue_cluster(&dir, None).await;
    for i in 0..4 {
        e2e::create(&client, "jobs", &elastic_job(&format!("a-{i}"), "lq-a", 1)).await;
    }
    // No cooldown: each Job may move every pass.
    let overrides: Vec<(&str, &str)> = e2e::FAST_PASSES
        .into_iter()
        .chain([("TRAINSCALE_COOLDOWN", "0s")])
        .collect();
    let mut replica = Replica::start(
        &e2e::shipped_container(),
        "trainscale-0",
        &emulator.kubeconfig,
        dir.path(),
        &overrides,
        &["--operator=false"],
    );
    poll(
        WITHIN,
        EVERY,
        "cq-a's Jobs grown into the whole cohort (16 CPUs, 8 borrowed)",
        || replica.guard.check_alive(),
        || {
            let client = client.clone();
            async move {
                // Ready: admitted and ungated (a pending slice's pods exist but stay gated).
                let all = jobs(&client).await;
                let running: i64 = all.values().map(|j| int(j, "/status/ready")).sum();
                if running == COHORT_CPUS {
                    Ok(())
                } else {
                    Err(format!("{running} workers running"))
                }
            }
        },
    )
    .await;

    for i in 0..4 {
        e2e::create(&client, "jobs", &elastic_job(&format!("b-{i}"), "lq-b", 2)).await;
    }
    let settled = poll(
        WITHIN,
        EVERY,
        "cq-a gives back cq-b's 8 CPUs and Kueue admits cq-b's four Jobs",
        || replica.guard.check_alive(),
        || {
            let client = client.clone();
            async move {
                let all = jobs(&client).await;
                let b_running: i64 = all
                    .iter()
                    .filter(|(n, _)| n.starts_with("b-"))
                    .map(|(_, j)| int(j, "/status/ready"))
                    .sum();
                let (a, b) = per_queue(&all);
                if b_running == 8 && a == 8 && b == 8 {
                    Ok(all)
                } else {
                    Err(format!(
                        "cq-a {a}, cq-b {b} asked; cq-b running {b_running}"
                    ))
                }
            }
        },
    )
    .await;
    // Settled means settled: three more passes (1 s apart) leave every size as it is (before
    // a shrink Kueue had not applied yet was taken back, the Jobs of cq-a went 4 → 2 → 4).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = jobs(&client).await;
    let sizes = |all: &BTreeMap<String, Value>| -> Vec<(String, i64)> {
        all.iter()
            .map(|(n, j)| (n.clone(), int(j, "/spec/parallelism")))
            .collect()
    };
    assert_eq!(sizes(&later), sizes(&settled), "sizes moved after settling");
    for (name, job) in settled.iter().filter(|(n, _)| n.starts_with("a-")) {
        let size = int(job, "/spec/parallelism");
        assert!((1..=4).contains(&size), "{name}: {size}");
        assert_eq!(
            size,
            int(job, "/spec/completions"),
            "{name}: Indexed counts"
        );
    }
    // The shrinks say why: each shrunk Job's last-scale record.
    let reclaimed: Vec<&String> = settled
        .iter()
        .filter(|(n, _)| n.starts_with("a-"))
        .filter(|(_, j)| {
            annotation(j, "trainscale.io/last-scale")
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|r| r["reason"] == "reclaimed")
        })
        .map(|(n, _)| n)
        .collect();
    assert!(
        !reclaimed.is_empty(),
        "no Job of cq-a was shrunk for quota: {settled:?}"
    );
    // Nothing was suspended (the emulator's Kueue does not preempt; neither does trainscale):
    // every Job of cq-a still runs what it asks.
    for (name, job) in settled.iter().filter(|(n, _)| n.starts_with("a-")) {
        assert_eq!(job["spec"]["suspend"], false, "{name}: {job}");
    }
    // Jobs and Events only (a repeated Event is patched: its series count).
    let writes = emulator.daemon_writes().await;
    assert!(
        writes
            .keys()
            .all(|k| k == "create events" || k == "patch events" || k == "patch jobs"),
        "the daemon's writes: {writes:?}"
    );
    assert!(emulator.denied().await.is_empty());
    replica.guard.terminate(Duration::from_secs(5)).await;
}
