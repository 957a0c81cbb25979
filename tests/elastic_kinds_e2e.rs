//! End-to-end: the elastic batch/v1 Job and the elastic JobSet against the kmock emulator
//! (`tests/e2e/kmock_cluster.py --jobset-crd`, its controllers on: the Job controller plays the
//! elastic Job and the JobSet's child Jobs, the JobSet controller makes the child Jobs and
//! follows their template's counts), with RBAC enforced as deployed (`deploy/rbac.yaml` and its
//! components).
//!
//! On one 16-CPU node run an elastic Indexed Job (annotations only, no Kueue: 2 workers of
//! 2 CPU, 1..6), a JobSet with a launcher and one elastic replicated Job (2 workers of 2 CPU,
//! 1..4) and, beside them, an ordinary Job. The test dumps the cluster, runs `trainscale plan` on
//! the dump, then starts one replica of the shipped Deployment (1 s passes, operator off). Each
//! elastic job ends at the size `plan` computed, through its one field: the Job's
//! `spec.parallelism` with `spec.completions` equal, the JobSet's
//! `spec.replicatedJobs[1].template.spec.parallelism` with its `completions` equal (then the
//! child Job follows); no version of any Job ever carries `spec.suspend`; the ordinary Job is
//! never written; nothing but the size, the annotations `trainscale.io/last-scale` and
//! `trainscale.io/sizing` and the generation changed in the job objects; the daemon wrote only
//! Jobs, JobSets and Events, and the emulator denied none of its requests. Gated like the other
//! e2e tests (`cfg(kmock)`, see `build.rs`).

#[path = "support/e2e.rs"]
mod e2e;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::{Value, json};

use e2e::{Emulator, JOB, Replica, poll};

const NS: &str = "ml";
const LIFETIME_S: u32 = 300;
const WITHIN: Duration = Duration::from_secs(90);
const EVERY: Duration = Duration::from_millis(250);
const JOBSET: (&str, &str, &str) = ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets");

fn worker_template(cpu: &str, labels: Value) -> Value {
    json!({"metadata": {"labels": labels},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "worker", "image": "pytorch/pytorch:2.3.1",
                        "command": ["torchrun", "--nnodes=1:6", "/workspace/train.py"],
                        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}})
}

/// The elastic Indexed Job: 2 workers of 2 CPU, 1..6.
fn elastic_job() -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "elastic", "namespace": NS,
                     "annotations": {"trainscale.io/min-replicas": "1",
                                     "trainscale.io/max-replicas": "6"}},
        "spec": {"completionMode": "Indexed", "parallelism": 2, "completions": 2,
                 "backoffLimit": 20,
                 "podFailurePolicy": {"rules": [{"action": "Ignore",
                     "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                 "template": worker_template("2", json!({"app": "elastic"}))}})
}

/// The JobSet: a launcher of 1 CPU and the elastic replicated Job `workers`, 2 workers of 2 CPU,
/// 1..4.
fn jobset() -> Value {
    json!({"apiVersion": JOBSET.0, "kind": JOBSET.1,
    "metadata": {"name": "js", "namespace": NS,
                 "annotations": {"trainscale.io/min-replicas": "1",
                                 "trainscale.io/max-replicas": "4",
                                 "trainscale.io/replicated-job": "workers"}},
    "spec": {"replicatedJobs": [
        {"name": "launcher", "replicas": 1, "template": {"spec": {
            "parallelism": 1, "completions": 1,
            "template": worker_template("1", json!({"app": "launcher"}))}}},
        {"name": "workers", "replicas": 1, "template": {"spec": {
            "completionMode": "Indexed", "parallelism": 2, "completions": 2,
            "backoffLimit": 20,
            "template": worker_template("2", json!({"app": "workers"}))}}},
    ]}})
}

/// A Job of no one's: no trainscale annotations (the harness plays no controller for it).
fn ordinary_job() -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "backup", "namespace": NS},
        "spec": {"parallelism": 1, "completions": 1,
                 "template": worker_template("1", json!({"app": "backup"}))}})
}

async fn get(
    client: &kube::Client,
    (api_version, kind, plural): (&str, &str, &str),
    name: &str,
) -> Value {
    let obj = e2e::api_in(client, api_version, kind, plural, Some(NS))
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("getting {kind} {NS}/{name}: {e}"));
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// An object without what a rescale may change: the counts at `spec` (a JSON Pointer), the
/// last-scale and sizing annotations, the resourceVersion, generation and status.
fn unchanging(mut v: Value, spec: &str) -> Value {
    if let Some(map) = v.pointer_mut(spec).and_then(Value::as_object_mut) {
        map.remove("parallelism");
        map.remove("completions");
    }
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
        meta.remove("generation");
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("trainscale.io/last-scale");
            a.remove("trainscale.io/sizing");
        }
    }
    if let Some(obj) = v.as_object_mut() {
        obj.remove("status");
    }
    v
}

/// Every version of every Job of [`NS`] the test's watch saw: `(name, resourceVersion,
/// spec.suspend)`.
type Seen = Arc<Mutex<Vec<(String, String, Option<bool>)>>>;

fn watch_jobs(client: kube::Client) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let api: Api<Job> = Api::namespaced(client, NS);
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let job = match event {
                Ok(Event::Apply(job) | Event::InitApply(job) | Event::Delete(job)) => job,
                _ => continue,
            };
            let entry = (
                job.metadata.name.clone().unwrap_or_default(),
                job.metadata.resource_version.clone().unwrap_or_default(),
                job.spec.as_ref().and_then(|s| s.suspend),
            );
            if let Ok(mut seen) = out.lock() {
                seen.push(entry);
            }
        }
    });
    (seen, task)
}

/// The running pods of [`NS`] by name.
async fn running_pods(client: &kube::Client) -> Vec<String> {
    e2e::list_all(client, "v1", "Pod", "pods")
        .await
        .into_iter()
        .filter(|p| p["metadata"]["namespace"] == NS && p["status"]["phase"] == "Running")
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn the_elastic_job_and_jobset_are_sized_to_the_plan_through_their_one_field() {
    let dir = e2e::Workdir::new("elastic-kinds-e2e");
    let emulator = Emulator::start(
        dir.path(),
        &["--jobset-crd", "--node-cpu", "16", "--node-memory", "64Gi"],
        LIFETIME_S,
    );
    let client = emulator.admin().await;
    let (seen, watching) = watch_jobs(client.clone());
    e2e::create(&client, "jobs", &elastic_job()).await;
    e2e::create(&client, JOBSET.2, &jobset()).await;
    let backup = e2e::create(&client, "jobs", &ordinary_job()).await;
    let backup_version = backup["metadata"]["resourceVersion"].clone();

    // The controllers run 2 + 1 + 2 pods: 9 of the 16 CPUs; 12 more are wanted.
    let wanted = [
        "elastic-0",
        "elastic-1",
        "js-launcher-0-0",
        "js-workers-0-0",
        "js-workers-0-1",
    ];
    poll(
        WITHIN,
        EVERY,
        "the pods of the elastic Job and the JobSet run",
        || Ok(()),
        || {
            let client = client.clone();
            async move {
                let running = running_pods(&client).await;
                if wanted.iter().all(|w| running.iter().any(|r| r == w)) {
                    Ok(())
                } else {
                    Err(format!("running: {running:?}"))
                }
            }
        },
    )
    .await;
    // The controllers have written every status by now: nothing moves until the daemon acts.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut dump = e2e::dump(&client, &["PyTorchTrainingJob", "PyTorchJob"]).await;
    let jobsets = e2e::list_all(&client, JOBSET.0, JOBSET.1, JOBSET.2).await;
    dump["items"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("the dump has no items"))
        .extend(jobsets);
    let snapshot = dir.path().join("dump.json");
    std::fs::write(&snapshot, dump.to_string()).unwrap_or_else(|e| panic!("writing the dump: {e}"));
    let plan = e2e::plan(&snapshot, &["--policy", "fulfillment"]);
    let planned: BTreeMap<(String, String), (i64, i64)> = plan["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            (
                (
                    j["kind"].as_str().unwrap_or("").to_string(),
                    j["name"].as_str().unwrap_or("").to_string(),
                ),
                (
                    j["current"].as_i64().unwrap_or(-1),
                    j["target"].as_i64().unwrap_or(-1),
                ),
            )
        })
        .collect();
    let key = |kind: &str, name: &str| (kind.to_string(), name.to_string());
    assert_eq!(
        planned.keys().cloned().collect::<Vec<_>>(),
        vec![key("Job", "elastic"), key("JobSet", "js")],
        "only the two elastic jobs are planned: {plan}"
    );
    let (job_from, job_to) = planned[&key("Job", "elastic")];
    let (set_from, set_to) = planned[&key("JobSet", "js")];
    assert_eq!((job_from, set_from), (2, 2), "{plan}");
    assert!(job_to > 2 && set_to > 2, "both grow: {plan}");
    let workers = "/spec/replicatedJobs/1/template/spec";
    let job_before = get(&client, JOB, "elastic").await;
    let set_before = get(&client, JOBSET, "js").await;

    let mut replica = Replica::sizer(&emulator, dir.path());
    let sized = poll(
        WITHIN,
        EVERY,
        "both jobs sized to the plan, with their sizing conditions",
        || replica.guard.check_alive(),
        || {
            let client = client.clone();
            async move {
                let job = get(&client, JOB, "elastic").await;
                let set = get(&client, JOBSET, "js").await;
                let job_counts = (
                    int(&job, "/spec/parallelism"),
                    int(&job, "/spec/completions"),
                );
                let set_counts = (
                    int(&set, &format!("{workers}/parallelism")),
                    int(&set, &format!("{workers}/completions")),
                );
                let explained = |v: &Value| {
                    v.pointer("/metadata/annotations/trainscale.io~1sizing")
                        .is_some_and(Value::is_string)
                };
                if job_counts == (Some(job_to), Some(job_to))
                    && set_counts == (Some(set_to), Some(set_to))
                    && explained(&job)
                    && explained(&set)
                {
                    Ok((job, set))
                } else {
                    Err(format!("Job {job_counts:?}, JobSet {set_counts:?}"))
                }
            }
        },
    )
    .await;
    // The JobSet controller resizes the child Job; the Job controller adds its pods.
    poll(
        WITHIN,
        EVERY,
        "the JobSet's child Job follows",
        || Ok(()),
        || {
            let client = client.clone();
            async move {
                let child = get(&client, JOB, "js-workers-0").await;
                let counts = (
                    int(&child, "/spec/parallelism"),
                    int(&child, "/spec/completions"),
                );
                let running = running_pods(&client).await;
                let workers = running
                    .iter()
                    .filter(|p| p.starts_with("js-workers-0-"))
                    .count();
                if counts == (Some(set_to), Some(set_to)) && workers as i64 == set_to {
                    Ok(())
                } else {
                    Err(format!("child Job {counts:?}, {workers} workers running"))
                }
            }
        },
    )
    .await;
    // A few more passes: nothing else is written.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Nothing but the counts and trainscale's annotations changed in the job objects.
    let (job_after, set_after) = sized;
    assert_eq!(
        unchanging(get(&client, JOB, "elastic").await, "/spec"),
        unchanging(job_before, "/spec"),
        "the elastic Job changed beyond its counts"
    );
    assert_eq!(
        unchanging(get(&client, JOBSET, "js").await, workers),
        unchanging(set_before, workers),
        "the JobSet changed beyond its workers' counts"
    );
    for (obj, from, to) in [
        (&job_after, job_from, job_to),
        (&set_after, set_from, set_to),
    ] {
        let text = obj
            .pointer("/metadata/annotations/trainscale.io~1last-scale")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no last-scale annotation: {obj}"));
        let record: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("last-scale {text:?}: {e}"));
        assert_eq!(
            (record["from"].as_i64(), record["to"].as_i64()),
            (Some(from), Some(to))
        );
    }
    // The ordinary Job was never written.
    assert_eq!(
        get(&client, JOB, "backup").await["metadata"]["resourceVersion"],
        backup_version,
        "the ordinary Job was written"
    );

    // No version of any Job carried spec.suspend.
    watching.abort();
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(
        seen.iter().any(|(name, _, _)| name == "js-workers-0"),
        "the watch saw the Jobs: {seen:?}"
    );
    let suspended: Vec<_> = seen.iter().filter(|(_, _, s)| s.is_some()).collect();
    assert!(
        suspended.is_empty(),
        "spec.suspend was written: {suspended:?}"
    );
    assert!(
        seen.iter()
            .filter(|(name, _, _)| name == "backup")
            .all(|(_, rv, _)| Some(rv.as_str()) == backup_version.as_str()),
        "the ordinary Job changed: {seen:?}"
    );

    // The daemon wrote Jobs (the rescale and the sizing annotation; a write refused by a
    // conflict with the Job controller's status is retried), JobSets and Events, nothing else;
    // two Rescaled Events.
    let writes = emulator.daemon_writes().await;
    assert_eq!(
        writes.keys().cloned().collect::<Vec<_>>(),
        vec!["create events", "patch jobs", "patch jobsets"],
        "the daemon's writes: {writes:?}"
    );
    assert_eq!(writes["create events"], 2, "{writes:?}");
    assert!(
        writes["patch jobs"] >= 2 && writes["patch jobsets"] >= 2,
        "{writes:?}"
    );
    assert!(
        emulator.denied().await.is_empty(),
        "denied: {:?}",
        emulator.denied().await
    );
    replica.guard.terminate(Duration::from_secs(15)).await;
    emulator.stop();
}
