//! Acceptance: the deployment as shipped, against the kmock emulator (`tests/e2e/kmock_cluster.py`)
//! with RBAC enforced (the RBAC objects of `deploy/rbac.yaml` and `deploy/components/*/rbac.yaml`)
//! and 18 nodes of mixed shapes (pod limits that bind, a cordoned and a NotReady node among them).
//!
//! Two replicas of the debug `trainscale` binary run as pods of `deploy/deployment.yaml` would:
//! its container's `args` and every `env` with a literal `value` (leader election on, interval
//! 30 s, debounce 2 s, cooldown 60 s), `POD_NAME` distinct per replica, `POD_NAMESPACE`
//! `trainscale-system`, with only `TRAINSCALE_METRICS_ADDR` replaced (a loopback port) and
//! `--kubeconfig` added (the service account's kubeconfig the harness writes). The test's own
//! requests use the admin kubeconfig and carry the User-Agent `TEST_AGENT`.
//!
//! The test applies every example of `deploy/examples/` and 40 generated jobs of the four kinds
//! at once (GPU and CPU trainers, min/max ranges, some selecting the `pool=big` nodes, some
//! tolerating the `dedicated=infer:NoSchedule` taint, some with min 0), then 10 more while the
//! daemon runs, and checks:
//! - every TrainingJob and PaddleJob has its workloads (the trainers ConfigMap, the master
//!   ReplicaSet when fault tolerant, the pserver ReplicaSet when its type uses pservers and asks
//!   for some, the trainer Job, and in the PodGroup variant its PodGroup) within 15 s of the
//!   later of its create being answered and its serving leader's takeover;
//! - every job converges, within 6 minutes, to what `trainscale plan` computes on a dump of the
//!   same cluster (see [`converged`] for the criterion), every job planned (none failed) and
//!   every trainer Job running its trainers; a pod that ends Failed meanwhile fails the test at
//!   once;
//! - trainscale deleted no pod, no pod failed (`/_harness/failed-pods`, `/_harness/failures`),
//!   every planned job carries its sizing conditions, and no request was denied
//!   (`/_harness/denied`);
//! - no pod is bound to the cordoned or the NotReady node, and no node holds more pods than its
//!   limit (the nodes whose pod count binds are filled to it in a passing run);
//! - leader failover: the leader (the replica whose `POD_NAME` starts the Lease's
//!   holderIdentity) is killed (SIGKILL); the other replica holds the Lease and leads within the
//!   lease duration (15 s) plus 2 s, and serves a job applied meanwhile;
//! - fencing: with a third replica started as standby, the leader is paused (SIGSTOP) until the
//!   standby holds the Lease; once resumed (SIGCONT) it writes nothing (its requests told apart
//!   by the User-Agent `trainscale/<version> (<identity>)`; a refused Lease renewal aside, checked
//!   on the Lease), and reports it does not lead;
//! - a deleted Lease is created again and held within the lease duration plus 2 s, and a job
//!   applied then is served.
//!
//! The PyTorch kinds' pods are created by their own operators in a real cluster; neither the
//! harness nor trainscale plays those, so the test stands in for them ([`PyTorchOperators`]: one
//! worker pod per replica, bound by trainscale's scheduler role, admitted by the emulator's kubelet)
//! and checks those jobs for their size and sizing annotation only.
//! `acceptance_with_volcano_podgroups` runs the same with `TRAINSCALE_PODGROUPS=volcano`, half of
//! the generated TrainingJobs naming their own `podGroupName` (half of those made by the user
//! beforehand, which the operator must join as they are, the rest created by it); the harness
//! places the Volcano pods first-fit, so trainer pods may wait Pending there.
//!
//! Each test takes about 3 minutes when it passes (the shipped 60 s cooldown sets the pace of
//! convergence) and up to 5 when it fails at the convergence bound. `TRAINSCALE_E2E_KEEP=1`
//! keeps the work directory: the replicas' logs, the emulator's, and the last dump.
//!
//! Gated like the other e2e tests (`cfg(kmock)`, see `build.rs`).

#[path = "support/e2e.rs"]
mod e2e;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, DynamicObject};
use kube::{Api, Client};
use serde_json::{Value, json};

use e2e::{Emulator, Replica, TEST_AGENT, Workdir};
// The job kinds trainscale sizes.
use trainscale::api::JobKind as Kind;

/// Where the daemon's Lease lives (`POD_NAMESPACE`) and its name (the default `--lease-name`).
const LEASE_NAMESPACE: &str = "trainscale-system";
const LEASE_NAME: &str = "trainscale-leader";
/// `leaseDurationSeconds` of the daemon's Lease.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Time a standby needs after the Lease expires to take it and see its own renewal (it sleeps
/// until the expiry it read, then patches and reads the Lease).
const TAKEOVER_SLACK: Duration = Duration::from_secs(2);
/// How soon after its create every TrainingJob/PaddleJob must have its workloads.
const WORKLOADS_WITHIN: Duration = Duration::from_secs(15);
/// Bound on the convergence to the plan (cooldown 60 s and interval 30 s as shipped: a job
/// reclaimed for another's growth moves at most once a minute, so a chain of such moves takes
/// several minutes).
const CONVERGE_WITHIN: Duration = Duration::from_secs(360);
/// The two variants run one after the other: each starts two replicas and an emulator with
/// dozens of jobs, and together on two cores they starved each other's passes (a run once hit
/// the convergence bound with every remaining change held by the cooldown).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The emulator's lifetime: it ends by itself if a test dies without closing it.
const EMULATOR_LIFETIME_S: u32 = 900;

/// A job the test applied.
#[derive(Debug, Clone)]
struct Applied {
    kind: Kind,
    namespace: String,
    name: String,
    /// The object as applied.
    value: Value,
    /// When its create was answered.
    at: Instant,
}

impl Applied {
    fn key(&self) -> (Kind, String, String) {
        (self.kind, self.namespace.clone(), self.name.clone())
    }

    fn label(&self) -> String {
        format!("{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// The 18 nodes: 6 GPU nodes (8 `nvidia.com/gpu`, 64 cpu, 512Gi), 6 CPU nodes (32 cpu, 128Gi),
/// a pool of 2 tainted `dedicated=infer:NoSchedule` (4 GPUs, 32 cpu, 256Gi) and a pool of 2
/// labelled `pool=big` (96 cpu, 768Gi). Most nodes take the kubelet's default 110 pods; on
/// `gpu-05`, `gpu-06`, `cpu-05`, `cpu-06` ([`SLOT_BOUND_PODS`]) and `big-02`
/// ([`BIG_SLOT_BOUND_PODS`]) the pod count binds before the other resources do (16 and 48 of the
/// 2-cpu CPU trainers would fit by CPU, 8 of the 1-GPU trainers by GPU beside masters and
/// pservers), as on nodes whose `--max-pods` is lowered: trainers planned there past the free pod slots would be
/// rejected `OutOfpods` by the emulator's kubelet, and a pod that fails fails the test. Two
/// more GPU nodes have room but must take no pod: `cordoned-01` (`spec.unschedulable`, with the
/// taint the node controller adds) and `not-ready-01` (`Ready=False`, with the node lifecycle
/// controller's `not-ready` taints); [`check_placements`] checks both.
fn nodes() -> Value {
    let node =
        |name: &str, cpu: u32, memory: &str, gpu: u32, pods: u32, labels: Value, taints: Value| {
            let mut allocatable =
                json!({"cpu": cpu.to_string(), "memory": memory, "pods": pods.to_string()});
            if gpu > 0 {
                allocatable["nvidia.com/gpu"] = json!(gpu.to_string());
            }
            let mut all_labels =
                json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"});
            for (k, v) in labels.as_object().into_iter().flatten() {
                all_labels[k] = v.clone();
            }
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": all_labels},
                "spec": {"taints": taints},
                "status": {"capacity": allocatable.clone(), "allocatable": allocatable,
                           "conditions": [{"type": "Ready", "status": "True"}]},
            })
        };
    let mut out = Vec::new();
    for i in 1..=6 {
        let pods = if i >= 5 { SLOT_BOUND_PODS } else { 110 };
        out.push(node(
            &format!("gpu-{i:02}"),
            64,
            "512Gi",
            8,
            pods,
            json!({"accelerator": "nvidia"}),
            json!([]),
        ));
        out.push(node(
            &format!("cpu-{i:02}"),
            32,
            "128Gi",
            0,
            pods,
            json!({}),
            json!([]),
        ));
    }
    for i in 1..=2 {
        out.push(node(
            &format!("infer-{i:02}"),
            32,
            "256Gi",
            4,
            110,
            json!({"dedicated": "infer"}),
            json!([{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]),
        ));
        out.push(node(
            &format!("big-{i:02}"),
            96,
            "768Gi",
            0,
            if i == 2 { BIG_SLOT_BOUND_PODS } else { 110 },
            json!({"pool": "big"}),
            json!([]),
        ));
    }
    let mut cordoned = node(
        CORDONED,
        64,
        "512Gi",
        8,
        110,
        json!({"accelerator": "nvidia"}),
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
    );
    cordoned["spec"]["unschedulable"] = json!(true);
    out.push(cordoned);
    let mut not_ready = node(
        NOT_READY,
        64,
        "512Gi",
        8,
        110,
        json!({"accelerator": "nvidia"}),
        json!([
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        ]),
    );
    not_ready["status"]["conditions"] =
        json!([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]);
    out.push(not_ready);
    Value::Array(out)
}

/// A GPU node cordoned (`kubectl cordon`): no pod may be bound there.
const CORDONED: &str = "cordoned-01";
/// A GPU node whose kubelet stopped reporting Ready: no pod may be bound there.
const NOT_READY: &str = "not-ready-01";

/// The pod limit of `gpu-05`, `gpu-06` (8 GPUs, 64 cpu), `cpu-05` and `cpu-06` (32 cpu).
const SLOT_BOUND_PODS: u32 = 10;
/// The pod limit of `big-02` (96 cpu), which only the `pool=big` jobs' trainers may use besides
/// unselected pods.
const BIG_SLOT_BOUND_PODS: u32 = 20;

/// Container resources: requests equal to limits.
fn resources(cpu: &str, memory: &str, gpu: u32) -> Value {
    let mut r = json!({"cpu": cpu, "memory": memory});
    if gpu > 0 {
        r["nvidia.com/gpu"] = json!(gpu.to_string());
    }
    json!({"requests": r.clone(), "limits": r})
}

/// Generated job `i`: the kind cycles through the four kinds, the namespace through three, and
/// the shape through GPU or CPU trainers, ranges (min 0 for some paddlepaddle.org jobs), the
/// `pool=big` selector (CPU jobs), the `dedicated=infer` toleration (GPU jobs), fault tolerance
/// and, with `podgroups`, a user-named `podGroupName` on every other TrainingJob.
fn generated_job(i: usize, podgroups: bool) -> Value {
    let kind = Kind::ALL[i % 4];
    let v = i / 4;
    let namespace = ["team-a", "team-b", "team-c"][i % 3];
    let gpu = match kind {
        Kind::PaddleJob => v.is_multiple_of(3),
        _ => v.is_multiple_of(2),
    };
    let min = if kind.created_by_trainscale() && v % 5 == 3 {
        0
    } else {
        1 + (v % 3) as i32
    };
    let max = min.max(1) + 1 + (v % 4) as i32;
    let trainer = if gpu {
        resources("4", "16Gi", 1)
    } else {
        resources("2", "4Gi", 0)
    };
    let node_selector = (!gpu && v % 4 == 1).then(|| json!({"pool": "big"}));
    let tolerations = (gpu && v % 4 == 2).then(|| {
        json!([{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}])
    });
    let pserver = json!({"min-instance": 1 + (v % 2) as i32, "max-instance": 1 + (v % 2) as i32,
                         "resources": resources("1", "2Gi", 0)});
    match kind {
        Kind::TrainingJob => {
            let name = format!("tj-{i:02}");
            let mut t = json!({"entrypoint": "python train.py", "workspace": "/workspace",
                               "min-instance": min, "max-instance": max, "resources": trainer});
            if let Some(s) = node_selector {
                t["node_selector"] = s;
            }
            if let Some(t2) = tolerations {
                t["tolerations"] = t2;
            }
            let mut spec = json!({"image": "paddlepaddle/paddle:2.6", "port": 7164,
                                  "ports_num": 1, "ports_num_for_sparse": 1,
                                  "fault_tolerant": v.is_multiple_of(2),
                                  "pserver": pserver, "trainer": t});
            if podgroups && v % 2 == 1 {
                spec["podGroupName"] = json!(format!("gang-{name}"));
            }
            json!({"apiVersion": kind.api_version(), "kind": kind.as_str(),
                   "metadata": {"name": name, "namespace": namespace}, "spec": spec})
        }
        Kind::PaddleJob => json!({
            "apiVersion": kind.api_version(), "kind": kind.as_str(),
            "metadata": {"name": format!("pj-{i:02}"), "namespace": namespace},
            "spec": {"image": "paddle/dist-train:1.0", "port": 7164, "ports_num": 1,
                     "ports_num_for_sparse": 1, "pserver": pserver,
                     "trainer": {"entrypoint": "python train.py", "workspace": "/workspace",
                                 "passes": 10, "min-instance": min, "max-instance": max,
                                 "resources": trainer}},
        }),
        Kind::PyTorchTrainingJob | Kind::PyTorchJob => {
            let mut template = json!({"spec": {"containers": [{
                "name": "pytorch", "image": "pytorch/elastic:2.3", "resources": trainer}]}});
            if let Some(s) = node_selector {
                template["spec"]["nodeSelector"] = s;
            }
            if let Some(t) = tolerations {
                template["spec"]["tolerations"] = t;
            }
            if kind == Kind::PyTorchTrainingJob {
                json!({
                    "apiVersion": kind.api_version(), "kind": kind.as_str(),
                    "metadata": {"name": format!("ptj-{i:02}"), "namespace": namespace},
                    "spec": {"elastic": {"enable": true, "minReplicas": min, "maxReplicas": max,
                                         "expectedReplicas": min},
                             "torchrunConfig": {"enable": true, "rdzvBackend": "c10d",
                                                "procPerNode": "1"},
                             "scheduler": {"t9kScheduler": {"queue": "default", "priority": 10}},
                             "replicaSpecs": [{"type": "worker", "replicas": max,
                                               "restartPolicy": "OnFailure",
                                               "template": template}]},
                })
            } else {
                json!({
                    "apiVersion": kind.api_version(), "kind": kind.as_str(),
                    "metadata": {"name": format!("kf-{i:02}"), "namespace": namespace},
                    "spec": {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": min,
                                               "maxReplicas": max, "maxRestarts": 100},
                             "pytorchReplicaSpecs": {"Worker": {
                                 "replicas": min, "restartPolicy": "OnFailure",
                                 "template": template}}},
                })
            }
        }
        Kind::BatchJob | Kind::JobSet => {
            unreachable!("generated jobs cycle through the first four kinds")
        }
    }
}

/// Whether generated job `i` names a PodGroup its user made before applying it (with
/// `podgroups`: every fourth TrainingJob; every other TrainingJob names its own group, which the
/// operator creates when nobody made it).
fn user_made_group(i: usize) -> bool {
    Kind::ALL[i % 4] == Kind::TrainingJob && (i / 4) % 4 == 3
}

/// The PodGroup the user of generated job `i` makes before applying it: `gang-<job>`, one member,
/// labelled `made-by: user`.
fn user_pod_group(i: usize) -> Value {
    let job = generated_job(i, true);
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": job["spec"]["podGroupName"], "namespace": job["metadata"]["namespace"],
                     "labels": {"made-by": "user"}},
        "spec": {"minMember": 1, "queue": "default"},
    })
}

/// Generated jobs `range`, preceded (with `podgroups`) by the PodGroups their users made.
fn generated_batch(range: std::ops::Range<usize>, podgroups: bool) -> Vec<Value> {
    let mut out: Vec<Value> = if podgroups {
        range
            .clone()
            .filter(|i| user_made_group(*i))
            .map(user_pod_group)
            .collect()
    } else {
        Vec::new()
    };
    out.extend(range.map(|i| generated_job(i, podgroups)));
    out
}

/// Generated job `i`, which must be of a kind trainscale's operator serves (a TrainingJob or a
/// PaddleJob), for the checks that a leader serves a job.
fn served_job(i: usize, podgroups: bool) -> Value {
    let job = generated_job(i, podgroups);
    assert!(
        Kind::named(job["kind"].as_str().unwrap_or_default())
            .is_some_and(Kind::created_by_trainscale),
        "generated job {i} is a {}, not served by the operator",
        job["kind"]
    );
    job
}

/// The documents of every manifest in `deploy/examples/`, in file order.
fn examples() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no examples", dir.display());
    files
        .iter()
        .flat_map(|f| {
            trainscale::api::manifest::read_documents(f).unwrap_or_else(|e| panic!("{e}"))
        })
        .map(|d| d.value)
        // The elastic Job's and the JobSet's examples run in `elastic_kinds_e2e.rs`: this suite's
        // emulator serves no JobSets, and its convergence check reads no elastic Job.
        .filter(|v| !matches!(v["kind"].as_str(), Some("Job" | "JobSet")))
        .collect()
}

/// Creates every job of `values` concurrently (as `kubectl apply` of one file would, all at
/// once); other kinds (PriorityClasses, PodGroups) are created first, one by one.
async fn apply(client: &Client, values: Vec<Value>) -> Vec<Applied> {
    let (jobs, others): (Vec<Value>, Vec<Value>) = values
        .into_iter()
        .partition(|v| Kind::named(v["kind"].as_str().unwrap_or_default()).is_some());
    for other in others {
        let plural = match other["kind"].as_str() {
            Some("PriorityClass") => "priorityclasses",
            Some("PodGroup") => "podgroups",
            kind => panic!("an example holds a {kind:?}, which the suite does not apply"),
        };
        e2e::create(client, plural, &other).await;
    }
    let creates = jobs.into_iter().map(|value| async move {
        let kind = Kind::named(value["kind"].as_str().unwrap_or_default())
            .unwrap_or_else(|| unreachable!("partitioned by kind"));
        let created = e2e::create(client, kind.plural(), &value).await;
        Applied {
            kind,
            namespace: created["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            name: created["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            value,
            at: Instant::now(),
        }
    });
    futures::future::join_all(creates).await
}

/// The workloads trainscale's operator must create for a paddlepaddle.org job, as
/// `(kind, name)` in the job's namespace: the `<name>-trainers` ConfigMap; the `<name>-master`
/// ReplicaSet when the TrainingJob is fault tolerant; the `<name>-pserver` ReplicaSet when the
/// job's type uses pservers (no `frame_work`, not `local_job`, not `is_nccl`; or `frame_work`
/// type `multi`) and `pserver.min-instance` is above 0; the `<name>-trainer` Job; and with
/// PodGroups on, the PodGroup named by `spec.podGroupName`, else by the job.
fn expected_workloads(job: &Applied, podgroups: bool) -> Vec<(&'static str, String)> {
    let spec = &job.value["spec"];
    let name = &job.name;
    let mut out = vec![("ConfigMap", format!("{name}-trainers"))];
    if job.kind == Kind::TrainingJob && spec["fault_tolerant"].as_bool() == Some(true) {
        out.push(("ReplicaSet", format!("{name}-master")));
    }
    let uses_pservers = match spec.get("frame_work") {
        Some(fw) if !fw.is_null() => fw["type"] == "multi",
        _ => spec["local_job"].as_bool() != Some(true) && spec["is_nccl"].as_bool() != Some(true),
    };
    if uses_pservers && spec["pserver"]["min-instance"].as_i64().unwrap_or(0) > 0 {
        out.push(("ReplicaSet", format!("{name}-pserver")));
    }
    out.push(("Job", format!("{name}-trainer")));
    if podgroups {
        let group = spec["podGroupName"]
            .as_str()
            .filter(|g| !g.trim().is_empty())
            .unwrap_or(name);
        out.push(("PodGroup", group.to_string()));
    }
    out
}

/// `(kind, namespace, name)` of every ConfigMap, ReplicaSet, Job and (with `podgroups`) Volcano
/// PodGroup in the cluster.
async fn workloads(client: &Client, podgroups: bool) -> BTreeSet<(String, String, String)> {
    let mut kinds = vec![
        ("v1", "ConfigMap", "configmaps"),
        ("apps/v1", "ReplicaSet", "replicasets"),
        ("batch/v1", "Job", "jobs"),
    ];
    if podgroups {
        kinds.push(("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups"));
    }
    let mut out = BTreeSet::new();
    for (api_version, kind, plural) in kinds {
        for obj in e2e::list_all(client, api_version, kind, plural).await {
            out.insert((
                kind.to_string(),
                obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                obj["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ));
        }
    }
    out
}

/// A summary of the harness's RBAC denials, for failure messages.
async fn denials(emulator: &Emulator) -> String {
    let denied = emulator.denied().await;
    if denied.is_empty() {
        return "no request denied".to_string();
    }
    let mut rows: BTreeMap<String, u64> = BTreeMap::new();
    for d in &denied {
        let resource = match d["subresource"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{}/{sub}", d["resource"].as_str().unwrap_or_default()),
            None => d["resource"].as_str().unwrap_or_default().to_string(),
        };
        *rows
            .entry(format!(
                "{} {} {resource} (group {:?}, namespace {:?})",
                d["user"].as_str().unwrap_or_default(),
                d["verb"].as_str().unwrap_or_default(),
                d["group"].as_str().unwrap_or_default(),
                d["namespace"].as_str().unwrap_or_default(),
            ))
            .or_default() += 1;
    }
    format!("{} requests denied: {rows:#?}", denied.len())
}

/// Waits until every operated job of `jobs` has its workloads, each within [`WORKLOADS_WITHIN`]
/// of the later of its create and `leads_since` (when the serving leader took the Lease);
/// returns the slowest job's delay from that moment. Fails naming every late job and what it
/// lacked, with the RBAC denials so far.
async fn await_workloads(
    emulator: &Emulator,
    client: &Client,
    jobs: &[Applied],
    podgroups: bool,
    leads_since: Instant,
    replicas: &mut [&mut Replica],
) -> Duration {
    let operated: Vec<&Applied> = jobs
        .iter()
        .filter(|j| j.kind.created_by_trainscale())
        .collect();
    let mut done: BTreeMap<(Kind, String, String), Duration> = BTreeMap::new();
    loop {
        let seen = workloads(client, podgroups).await;
        let mut late = Vec::new();
        for job in &operated {
            if done.contains_key(&job.key()) {
                continue;
            }
            let missing: Vec<String> = expected_workloads(job, podgroups)
                .into_iter()
                .filter(|(kind, name)| {
                    !seen.contains(&(kind.to_string(), job.namespace.clone(), name.clone()))
                })
                .map(|(kind, name)| format!("{kind} {name}"))
                .collect();
            let from = job.at.max(leads_since);
            if missing.is_empty() {
                done.insert(job.key(), from.elapsed());
            } else if from.elapsed() > WORKLOADS_WITHIN {
                late.push(format!("{}: missing {missing:?}", job.label()));
            }
        }
        if !late.is_empty() {
            panic!(
                "{} of {} TrainingJobs/PaddleJobs lack workloads {WORKLOADS_WITHIN:?} after the later of their create and the leader's start ({} had them): {late:#?}\nRBAC: {}",
                late.len(),
                operated.len(),
                done.len(),
                denials(emulator).await
            );
        }
        if done.len() == operated.len() {
            return done.values().copied().max().unwrap_or_default();
        }
        for r in replicas.iter_mut() {
            if let Err(dead) = r.guard.check_alive() {
                panic!("waiting for workloads: {dead} (log {})", r.log.display());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One job of a plan: `(kind, namespace, name)`, current, target, reason.
#[derive(Debug, Clone, PartialEq)]
struct Planned {
    key: (String, String, String),
    current: i64,
    target: i64,
    reason: String,
}

fn planned(plan: &Value) -> Vec<Planned> {
    plan["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| Planned {
            key: (
                j["kind"].as_str().unwrap_or_default().to_string(),
                j["namespace"].as_str().unwrap_or_default().to_string(),
                j["name"].as_str().unwrap_or_default().to_string(),
            ),
            current: j["current"].as_i64().unwrap_or(-1),
            target: j["target"].as_i64().unwrap_or(-1),
            reason: j["reason"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// Why the trainer Job of an operated job is not running its trainers, from a dump: it is
/// missing; it carries a `Complete` or `Failed` condition (a job at zero trainers must be held
/// suspended, never completed); it is suspended without trainscale's zero-trainers mark
/// (`trainscale.io/zero-trainers: "true"`; nothing else suspends Jobs here); its pods are not
/// one per trainer (0 when held at zero, else `parallelism`); or, unless `pending_ok` (pods
/// placed by a scheduler the harness plays first-fit, as in the PodGroup variant), they are not
/// all Running.
fn trainer_job_problem(
    items: &[Value],
    namespace: &str,
    name: &str,
    pending_ok: bool,
) -> Option<String> {
    let job_name = format!("{name}-trainer");
    let Some(job) = items.iter().find(|o| {
        o["kind"] == "Job"
            && o["metadata"]["namespace"] == namespace
            && o["metadata"]["name"] == job_name.as_str()
    }) else {
        return Some(format!("{namespace}/{job_name}: no trainer Job"));
    };
    let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1);
    let ended: Vec<&str> = job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
        .filter_map(|c| c["type"].as_str())
        .collect();
    if !ended.is_empty() {
        return Some(format!(
            "{namespace}/{job_name}: {ended:?} at parallelism {parallelism} while its job runs"
        ));
    }
    let suspended = job["spec"]["suspend"].as_bool() == Some(true);
    let at_zero = job["metadata"]["annotations"]["trainscale.io/zero-trainers"] == "true";
    if suspended != at_zero {
        return Some(format!(
            "{namespace}/{job_name}: spec.suspend {suspended} but the zero-trainers mark {at_zero}"
        ));
    }
    let trainers = if at_zero { 0 } else { parallelism };
    let uid = &job["metadata"]["uid"];
    let phases: Vec<&str> = items
        .iter()
        .filter(|o| {
            o["kind"] == "Pod"
                && o["metadata"]["namespace"] == namespace
                && o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == *uid))
        })
        .map(|p| p["status"]["phase"].as_str().unwrap_or("Pending"))
        .collect();
    let running = phases.iter().filter(|p| **p == "Running").count() as i64;
    if phases.len() as i64 != trainers {
        return Some(format!(
            "{namespace}/{job_name}: {} trainer pods for {trainers} trainers ({phases:?})",
            phases.len()
        ));
    }
    if !pending_ok && running != trainers {
        return Some(format!(
            "{namespace}/{job_name}: {running} of {trainers} trainer pods Running ({phases:?})"
        ));
    }
    None
}

/// The convergence criterion. A dump of the cluster is planned twice with `trainscale plan`:
/// with `--cooldown 0s` (what the policy wants, the cooldown aside) and with the daemon's
/// cooldown (what the daemon may do now). The cluster has converged when the first plan proposes
/// no change at all (every job's target == current): the daemon has done everything its policy
/// asks on this state, and no rescale held back by the cooldown remains. A change only the
/// cooldown holds back is not convergence yet: the cooldown ends within 60 s and the daemon's
/// next pass (30 s interval, or a watch event) makes it, so the bound allows for it. Besides,
/// every trainer Job of a TrainingJob/PaddleJob must be running its trainers: not `Complete` or
/// `Failed`, one pod per unit of parallelism, each Running (pods for a scheduler the harness
/// plays first-fit, the PodGroup variant's, may be Pending), and every job in the cluster must be
/// planned (or left alone with a reason): a job that failed is not converged. `Err` lists what is
/// left.
fn converged(
    plan0: &Value,
    plan_cooldown: &Value,
    dump: &Value,
    pending_ok: bool,
) -> Result<(), String> {
    let now = planned(plan_cooldown);
    let mut left = Vec::new();
    let items = dump["items"].as_array().cloned().unwrap_or_default();
    let in_plan: BTreeSet<(String, String, String)> = planned(plan0)
        .into_iter()
        .map(|p| p.key)
        .chain(
            plan0["left_alone"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|j| {
                    (
                        j["kind"].as_str().unwrap_or_default().to_string(),
                        j["namespace"].as_str().unwrap_or_default().to_string(),
                        j["name"].as_str().unwrap_or_default().to_string(),
                    )
                }),
        )
        .collect();
    for o in &items {
        let kind = o["kind"].as_str().unwrap_or_default();
        // A batch/v1 Job is a job object only once it opts in; this suite applies none.
        if Kind::named(kind).is_none_or(|k| k == Kind::BatchJob) {
            continue;
        }
        let key = (
            kind.to_string(),
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if !in_plan.contains(&key) {
            left.push(format!(
                "{} {}/{}: not planned (phase {}, {})",
                key.0, key.1, key.2, o["status"]["phase"], o["status"]["reason"]
            ));
        }
    }
    for p in planned(plan0) {
        if p.current != p.target {
            let held = now
                .iter()
                .find(|q| q.key == p.key)
                .map(|q| q.reason.clone())
                .unwrap_or_default();
            left.push(format!(
                "{} {}/{}: {} -> {} ({}; under the cooldown: {held})",
                p.key.0, p.key.1, p.key.2, p.current, p.target, p.reason
            ));
        }
    }
    for p in planned(plan0) {
        if Kind::named(&p.key.0).is_some_and(Kind::created_by_trainscale)
            && let Some(problem) = trainer_job_problem(&items, &p.key.1, &p.key.2, pending_ok)
        {
            left.push(problem);
        }
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("{} left: {left:#?}", left.len()))
    }
}

/// A failed pod of a PyTorch kind: with PodGroups the harness's Volcano binds the operator's pods
/// beside trainscale's binds of these, two schedulers that may race for the same room; the
/// kubelet rejects the later pod and [`PyTorchOperators`] replaces it.
fn raced(failed: &Value) -> bool {
    matches!(
        failed["owner"].as_str(),
        Some("PyTorchTrainingJob" | "PyTorchJob")
    )
}

/// Pods that ended Failed; with `podgroups`, but PyTorch workers that [`raced`].
async fn failed_pods(emulator: &Emulator, podgroups: bool) -> Vec<Value> {
    let failed = emulator.failed_pods().await.into_iter();
    failed.filter(|p| !(podgroups && raced(p))).collect()
}

/// Polls dumps until [`converged`] holds; returns the last plan (cooldown 0) and dump.
async fn converge(
    emulator: &Emulator,
    client: &Client,
    dir: &Path,
    cooldown: &str,
    pending_ok: bool,
    replicas: &mut [&mut Replica],
) -> (Value, Value) {
    let snapshot = dir.join("dump.json");
    let started = Instant::now();
    loop {
        // A failed pod fails a job that is not fault tolerant for good: no point waiting.
        let failed = failed_pods(emulator, pending_ok).await;
        let failures = emulator.failures().await;
        assert!(
            failed.is_empty() && failures.is_empty(),
            "while converging ({:.0?} in): pods ended Failed: {failed:#?}; trainer failures counted by the Job controller: {failures:?}",
            started.elapsed()
        );
        let dump = e2e::dump(client, &[]).await;
        std::fs::write(&snapshot, dump.to_string())
            .unwrap_or_else(|e| panic!("writing {}: {e}", snapshot.display()));
        let plan0 = e2e::plan(&snapshot, &["--cooldown", "0s"]);
        let plan_cooldown = e2e::plan(&snapshot, &["--cooldown", cooldown]);
        let last = match converged(&plan0, &plan_cooldown, &dump, pending_ok) {
            Ok(()) => return (plan0, dump),
            Err(seen) => seen,
        };
        for r in replicas.iter_mut() {
            if let Err(dead) = r.guard.check_alive() {
                panic!(
                    "converging: {dead} (log {}); last seen: {last}",
                    r.log.display()
                );
            }
        }
        assert!(
            started.elapsed() < CONVERGE_WITHIN,
            "not converged to the plan within {CONVERGE_WITHIN:?}; last seen: {last}"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Jobs of a plan whose sizing conditions are missing: TrainingJob/PaddleJob `status.conditions`
/// `AbleToScale` and `ScalingLimited`; the PyTorch kinds the annotation `trainscale.io/sizing`
/// holding both.
fn missing_conditions(plan: &Value, dump: &Value) -> Vec<String> {
    let items = dump["items"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for p in planned(plan) {
        let (kind, ns, name) = &p.key;
        let obj = items.iter().find(|o| {
            o["kind"] == kind.as_str()
                && o["metadata"]["namespace"] == ns.as_str()
                && o["metadata"]["name"] == name.as_str()
        });
        let types: Vec<String> = match obj {
            None => {
                out.push(format!("{kind} {ns}/{name}: not in the dump"));
                continue;
            }
            Some(o) if Kind::named(kind).is_some_and(Kind::created_by_trainscale) => {
                o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["type"].as_str().map(str::to_string))
                    .collect()
            }
            Some(o) => o["metadata"]["annotations"]["trainscale.io/sizing"]
                .as_str()
                .map(|text| {
                    trainscale::api::sizing::read_annotation(text)
                        .into_iter()
                        .map(|c| c.type_)
                        .collect()
                })
                .unwrap_or_default(),
        };
        for wanted in ["AbleToScale", "ScalingLimited"] {
            if !types.iter().any(|t| t == wanted) {
                out.push(format!("{kind} {ns}/{name}: no {wanted} (has {types:?})"));
            }
        }
    }
    out
}

/// The Lease's holderIdentity and renewTime, if it exists.
async fn lease_holder(leases: &Api<Lease>) -> Option<(String, Option<String>)> {
    let lease = leases
        .get_opt(LEASE_NAME)
        .await
        .unwrap_or_else(|e| panic!("reading Lease {LEASE_NAMESPACE}/{LEASE_NAME}: {e}"))?;
    let spec = lease.spec?;
    let holder = spec.holder_identity?;
    let renewed = spec
        .renew_time
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null).to_string());
    Some((holder, renewed))
}

/// The Lease's holderIdentity and leaseTransitions: what a takeover changes.
async fn lease_record(leases: &Api<Lease>) -> (Option<String>, Option<i32>) {
    let lease = leases
        .get_opt(LEASE_NAME)
        .await
        .unwrap_or_else(|e| panic!("reading Lease {LEASE_NAMESPACE}/{LEASE_NAME}: {e}"));
    let spec = lease.and_then(|l| l.spec).unwrap_or_default();
    (spec.holder_identity, spec.lease_transitions)
}

/// The index of the replica whose `POD_NAME` starts `holder` (identities are `<POD_NAME>-<pid>`).
fn holder_of(holder: &str, replicas: &[&mut Replica]) -> Option<usize> {
    replicas
        .iter()
        .position(|r| holder.starts_with(&format!("{}-", r.pod_name)))
}

/// Waits until replica `which` holds the Lease and reports `trainscale_leader 1`; returns when.
async fn await_leader(
    leases: &Api<Lease>,
    replicas: &mut [&mut Replica],
    which: usize,
    within: Duration,
    what: &str,
) -> Instant {
    let started = Instant::now();
    loop {
        let holder = lease_holder(leases).await;
        let holds = holder
            .as_ref()
            .is_some_and(|(h, _)| holder_of(h, replicas) == Some(which));
        if holds && replicas[which].leads() == Some(true) {
            return Instant::now();
        }
        if let Err(dead) = replicas[which].guard.check_alive() {
            panic!("{what}: {dead} (log {})", replicas[which].log.display());
        }
        assert!(
            started.elapsed() < within,
            "{what}: {} does not lead within {within:?}; the Lease: {holder:?}, its trainscale_leader: {:?}",
            replicas[which].pod_name,
            replicas[which].leads()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One replica's requests as the harness logged them: the rows of the User-Agent naming its
/// Lease identity (`trainscale/<version> (<identity>)`; both replicas authenticate as the same
/// service account, so the agent is what tells them apart).
async fn replica_requests(emulator: &Emulator, identity: &str) -> BTreeMap<String, u64> {
    let suffix = format!("({identity})");
    let by_agent = emulator.requests_by("agent").await;
    let mut out = BTreeMap::new();
    let mut found = false;
    for (agent, counts) in &by_agent {
        if agent.starts_with("trainscale/") && agent.ends_with(&suffix) {
            found = true;
            for (k, n) in counts {
                *out.entry(k.clone()).or_default() += n;
            }
        }
    }
    assert!(
        found,
        "no User-Agent names the replica {identity}: agents {:?}",
        by_agent.keys().collect::<Vec<_>>()
    );
    out
}

/// Waits until a replica's requests (Lease traffic aside) stop moving over two 1 s probes.
async fn until_quiet(replica: &mut Replica, within: Duration) {
    let started = Instant::now();
    let mut last = e2e::daemon_request_counts(replica.port);
    let mut still = 0;
    while still < 2 {
        assert!(
            started.elapsed() < within,
            "{} not quiet within {within:?}",
            replica.pod_name
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = e2e::daemon_request_counts(replica.port);
        let moved = match (&last, &now) {
            (Some(a), Some(b)) => e2e::log_between(a, b)
                .keys()
                .any(|k| !k.ends_with(" leases")),
            _ => true,
        };
        still = if moved { 0 } else { still + 1 };
        last = now;
    }
}

/// Label on the pods [`PyTorchOperators`] makes, naming their job.
const PLAYED_WORKER: &str = "e2e.trainscale.io/pytorch-worker";

/// Stands in for the T9k and Kubeflow operators, which create the worker pods of the PyTorch
/// kinds in a real cluster and which neither the harness nor trainscale plays: every 500 ms each
/// PyTorchTrainingJob and PyTorchJob gets one pod per replica of its size
/// (`spec.elastic.expectedReplicas`, `spec.pytorchReplicaSpecs.Worker.replicas`), named
/// `<job>-worker-<i>`, from its worker template, owned by the job (a PyTorchJob's also labelled
/// `training.kubeflow.org/job-name`, `replica-type: worker`, `replica-index`); it deletes those of
/// an index past it and replaces those that failed. A template naming no scheduler gets
/// `schedulerName: trainscale`, as if its user had opted into trainscale's scheduler role: the
/// harness schedules no pod a client creates; requests only limited are set to the limits, as the
/// API server defaults them. Once bound, a pod is admitted by the emulator's kubelet, the one that
/// admits every pod bound to the node (a second kubelet here, counting only Running pods, let a
/// node run 13 GPU pods on 8 GPUs when Volcano's and trainscale's binds raced): started when it
/// fits beside every pod bound there, else ended `Failed` (`OutOf<resource>`). Without these pods every
/// PyTorch trainer would be a pending trainer the planner places anew each pass, a state no real
/// cluster holds for long. Its requests carry the test's User-Agent. Stops (aborted) when
/// dropped.
struct PyTorchOperators {
    task: tokio::task::JoinHandle<()>,
    played: std::sync::Arc<std::sync::Mutex<Played>>,
}

/// What [`PyTorchOperators`] saw go wrong.
#[derive(Debug, Default)]
struct Played {
    /// Failed requests.
    problems: Vec<String>,
}

impl PyTorchOperators {
    fn start(client: Client) -> Self {
        let played = std::sync::Arc::new(std::sync::Mutex::new(Played::default()));
        let sink = played.clone();
        let task = tokio::spawn(async move {
            loop {
                let result = play_pytorch_round(&client).await;
                if let (Err(problem), Ok(mut all)) = (result, sink.lock()) {
                    all.problems.push(problem);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        PyTorchOperators { task, played }
    }

    /// Failed requests (the first 10).
    fn problems(&self) -> Vec<String> {
        match self.played.lock() {
            Ok(p) => p.problems.iter().take(10).cloned().collect(),
            Err(_) => vec!["the record is poisoned".to_string()],
        }
    }
}

impl Drop for PyTorchOperators {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sets each container's requests to its limits for the resources it only limits, as the API
/// server defaults a pod at its create (the emulator does not).
fn default_requests(spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            let limits = c["resources"]["limits"].clone();
            for (name, q) in limits.as_object().into_iter().flatten() {
                if c["resources"]["requests"][name].is_null() {
                    if !c["resources"]["requests"].is_object() {
                        c["resources"]["requests"] = json!({});
                    }
                    c["resources"]["requests"][name] = q.clone();
                }
            }
        }
    }
}

/// One round of [`PyTorchOperators`].
async fn play_pytorch_round(client: &Client) -> Result<(), String> {
    use kube::api::{DeleteParams, ListParams, PostParams};
    let pods_api = e2e::api_all(client, "v1", "Pod", "pods");
    let listed = pods_api
        .list(&ListParams::default().labels(PLAYED_WORKER))
        .await
        .map_err(|e| format!("listing worker pods: {e}"))?;
    let pods: Vec<Value> = listed
        .items
        .into_iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .filter(|p| !p["metadata"]["labels"][PLAYED_WORKER].is_null())
        .collect();
    for kind in [Kind::PyTorchTrainingJob, Kind::PyTorchJob] {
        for job in e2e::list_all(client, kind.api_version(), kind.as_str(), kind.plural()).await {
            let ns = job["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = job["metadata"]["name"].as_str().unwrap_or_default();
            let uid = &job["metadata"]["uid"];
            let (size, template) = match kind {
                Kind::PyTorchJob => {
                    let worker = &job["spec"]["pytorchReplicaSpecs"]["Worker"];
                    (
                        worker["replicas"].as_i64().unwrap_or(1),
                        worker["template"].clone(),
                    )
                }
                _ => {
                    let worker = job["spec"]["replicaSpecs"]
                        .as_array()
                        .and_then(|r| r.iter().find(|r| r["type"] == "worker"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    let size = job["spec"]["elastic"]["expectedReplicas"]
                        .as_i64()
                        .or_else(|| worker["replicas"].as_i64())
                        .unwrap_or(1);
                    (size, worker["template"].clone())
                }
            };
            let api = e2e::api_in(client, "v1", "Pod", "pods", Some(ns));
            let mine: Vec<&Value> = pods
                .iter()
                .filter(|p| {
                    p["metadata"]["namespace"] == ns
                        && p["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == *uid))
                })
                .collect();
            let index_of = |p: &Value| {
                p["metadata"]["name"]
                    .as_str()
                    .and_then(|n| n.rsplit('-').next())
                    .and_then(|i| i.parse::<i64>().ok())
            };
            for i in 0..size.max(0) {
                if mine.iter().any(|p| index_of(p) == Some(i)) {
                    continue;
                }
                let mut labels = template["metadata"]["labels"].clone();
                if !labels.is_object() {
                    labels = json!({});
                }
                labels[PLAYED_WORKER] = json!(name);
                if kind == Kind::PyTorchJob {
                    labels["training.kubeflow.org/job-name"] = json!(name);
                    labels["training.kubeflow.org/replica-type"] = json!("worker");
                    labels["training.kubeflow.org/replica-index"] = json!(i.to_string());
                }
                let mut spec = template["spec"].clone();
                default_requests(&mut spec);
                if spec["schedulerName"].as_str().is_none_or(str::is_empty) {
                    spec["schedulerName"] = json!("trainscale");
                }
                let pod = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("{name}-worker-{i}"), "namespace": ns,
                                 "labels": labels,
                                 "ownerReferences": [{"apiVersion": kind.api_version(),
                                     "kind": kind.as_str(), "name": name, "uid": uid,
                                     "controller": true, "blockOwnerDeletion": true}]},
                    "spec": spec,
                    "status": {"phase": "Pending"},
                });
                let pod: DynamicObject = serde_json::from_value(pod)
                    .map_err(|e| format!("{ns}/{name}-worker-{i}: {e}"))?;
                api.create(&PostParams::default(), &pod)
                    .await
                    .map_err(|e| format!("creating {ns}/{name}-worker-{i}: {e}"))?;
            }
            for p in &mine {
                let pod_name = p["metadata"]["name"].as_str().unwrap_or_default();
                let past = index_of(p).is_none_or(|i| i >= size);
                // A pod being deleted already is left to stop (its kubelet removes it).
                let terminating = !p["metadata"]["deletionTimestamp"].is_null();
                if (past || p["status"]["phase"] == "Failed") && !terminating {
                    match api.delete(pod_name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        // Gone since the listing: what the delete was for.
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(format!("deleting {ns}/{pod_name}: {e}")),
                    }
                }
            }
        }
    }
    Ok(())
}

/// The whole acceptance run; `podgroups` adds `TRAINSCALE_PODGROUPS=volcano`.
async fn acceptance(podgroups: bool) {
    e2e::require_kmock();
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = Workdir::new(if podgroups {
        "acceptance-volcano"
    } else {
        "acceptance"
    });
    let nodes_file = dir.path().join("nodes.json");
    std::fs::write(&nodes_file, nodes().to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", nodes_file.display()));
    let nodes_arg = nodes_file.to_string_lossy().to_string();
    let emulator = Emulator::start(
        dir.path(),
        &["--nodes", &nodes_arg, "--pytorch-crds"],
        EMULATOR_LIFETIME_S,
    );
    let client = emulator.admin().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let pytorch_operators = PyTorchOperators::start(client.clone());

    // The Deployment's container, as shipped.
    let container = e2e::shipped_container();
    let shipped = |name: &str| {
        container.env.iter().find_map(|(n, s)| match s {
            e2e::EnvSource::Value(v) if n == name => Some(v.clone()),
            _ => None,
        })
    };
    assert_eq!(
        container.namespace, LEASE_NAMESPACE,
        "the Deployment's namespace"
    );
    assert_eq!(shipped("TRAINSCALE_LEADER_ELECT").as_deref(), Some("true"));
    let cooldown = shipped("TRAINSCALE_COOLDOWN")
        .unwrap_or_else(|| panic!("deploy/deployment.yaml sets no TRAINSCALE_COOLDOWN"));
    let overrides: Vec<(&str, &str)> = if podgroups {
        vec![("TRAINSCALE_PODGROUPS", "volcano")]
    } else {
        Vec::new()
    };
    println!(
        "deployment: args {:?}, env {:?}, overrides {overrides:?}",
        container.args, container.env
    );
    let mut a = Replica::start(
        &container,
        "trainscale-7c9d5-a",
        &emulator.kubeconfig,
        dir.path(),
        &overrides,
        &[],
    );
    let mut b = Replica::start(
        &container,
        "trainscale-7c9d5-b",
        &emulator.kubeconfig,
        dir.path(),
        &overrides,
        &[],
    );

    // Both ready; one leads.
    let started = Instant::now();
    {
        let mut replicas = [&mut a, &mut b];
        for r in replicas.iter_mut() {
            let port = r.port;
            let log = r.log.clone();
            e2e::poll(
                Duration::from_secs(30),
                Duration::from_millis(200),
                &format!("{} /readyz 200", r.pod_name),
                || {
                    r.guard
                        .check_alive()
                        .map_err(|e| format!("{e} (log {})", log.display()))
                },
                || async move {
                    match e2e::http_status(port, "/readyz") {
                        Some(200) => Ok(()),
                        other => Err(format!("/readyz {other:?}")),
                    }
                },
            )
            .await;
        }
    }
    let ready_after = started.elapsed();
    let leader = {
        let replicas = [&mut a, &mut b];
        let (replicas, leases) = (&replicas, &leases);
        e2e::poll(
            Duration::from_secs(30),
            Duration::from_millis(200),
            "a replica holds the Lease and leads",
            || Ok(()),
            move || async move {
                let holder = lease_holder(leases).await;
                match holder.as_ref().and_then(|(h, _)| holder_of(h, replicas)) {
                    Some(i) if replicas[i].leads() == Some(true) => Ok(i),
                    _ => Err(format!("the Lease: {holder:?}")),
                }
            },
        )
        .await
    };
    println!("ready after {ready_after:.1?}; replica {leader} leads");

    // Every example and 40 generated jobs, at once.
    let mut batch = examples();
    batch.extend(generated_batch(0..40, podgroups));
    let first = apply(&client, batch).await;
    let slowest = {
        let mut replicas = [&mut a, &mut b];
        await_workloads(
            &emulator,
            &client,
            &first,
            podgroups,
            started,
            &mut replicas,
        )
        .await
    };
    println!(
        "{} jobs applied at once ({} TrainingJobs/PaddleJobs); slowest workloads after {slowest:.1?}",
        first.len(),
        first
            .iter()
            .filter(|j| j.kind.created_by_trainscale())
            .count()
    );
    // 10 more while it runs.
    let second = apply(&client, generated_batch(40..50, podgroups)).await;
    let slowest = {
        let mut replicas = [&mut a, &mut b];
        await_workloads(
            &emulator,
            &client,
            &second,
            podgroups,
            started,
            &mut replicas,
        )
        .await
    };
    println!("10 more applied; slowest workloads after {slowest:.1?}");

    // Convergence to the plan, and what every settled job must show.
    let converging = Instant::now();
    let (plan0, dump) = {
        let mut replicas = [&mut a, &mut b];
        converge(
            &emulator,
            &client,
            dir.path(),
            &cooldown,
            podgroups,
            &mut replicas,
        )
        .await
    };
    let jobs = planned(&plan0);
    assert!(
        plan0["skipped"].as_array().is_none_or(Vec::is_empty),
        "jobs skipped by the plan: {}",
        plan0["skipped"]
    );
    let applied_jobs = first.len() + second.len();
    let left_alone = plan0["left_alone"].as_array().map_or(0, Vec::len);
    assert_eq!(
        jobs.len() + left_alone,
        applied_jobs,
        "every applied job is planned or left alone with a reason: planned {}, left alone {}",
        jobs.len(),
        plan0["left_alone"]
    );
    println!(
        "converged after {:.1?}: {} jobs planned, {} left alone ({}); summary {}",
        converging.elapsed(),
        jobs.len(),
        left_alone,
        plan0["left_alone"],
        plan0["summary"]
    );
    // The pass after each resize writes the sizing conditions.
    let snapshot = dir.path().join("dump.json");
    let mut conditions_dump = dump;
    let conditions_deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let missing = missing_conditions(&plan0, &conditions_dump);
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < conditions_deadline,
            "jobs without their sizing conditions 45 s after convergence: {missing:#?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        conditions_dump = e2e::dump(&client, &[]).await;
        std::fs::write(&snapshot, conditions_dump.to_string())
            .unwrap_or_else(|e| panic!("writing {}: {e}", snapshot.display()));
    }
    if podgroups {
        let all: Vec<Applied> = first.iter().chain(&second).cloned().collect();
        let users = check_pod_groups(&client, &all).await;
        println!(
            "PodGroups: every operated job's pods join its group; {users} made by their users, joined as they are"
        );
    }
    check_clean(&emulator, "after convergence", podgroups).await;
    let slots = check_placements(&conditions_dump, "after convergence");
    println!("after convergence: pods on the nodes whose pod count binds: {slots:?}");

    // Failover: the leader is killed; the other takes the Lease within its duration and serves a
    // job applied meanwhile.
    let mut replicas = [&mut a, &mut b];
    let (holder, _) = lease_holder(&leases)
        .await
        .unwrap_or_else(|| panic!("no Lease holder after convergence"));
    let old = holder_of(&holder, &replicas)
        .unwrap_or_else(|| panic!("the Lease holder {holder:?} is none of the replicas"));
    let new = 1 - old;
    replicas[old].guard.signal("KILL");
    let killed = Instant::now();
    replicas[old].guard.kill();
    let meanwhile = apply(&client, vec![served_job(52, podgroups)]).await;
    let took_over = await_leader(
        &leases,
        &mut replicas,
        new,
        LEASE_DURATION + TAKEOVER_SLACK,
        "after SIGKILL of the leader",
    )
    .await;
    println!(
        "{} killed; {} leads {:.1?} later",
        replicas[old].pod_name,
        replicas[new].pod_name,
        took_over - killed
    );
    {
        let mut alive = [&mut *replicas[new]];
        let slowest = await_workloads(
            &emulator, &client, &meanwhile, podgroups, took_over, &mut alive,
        )
        .await;
        println!("the job applied meanwhile has its workloads {slowest:.1?} after the takeover");
    }
    let survivor_identity = lease_holder(&leases)
        .await
        .map(|(h, _)| h)
        .unwrap_or_default();

    // Fencing: a third replica stands by; the leader is paused past its Lease, the standby
    // takes over; resumed, the old leader writes nothing.
    let mut c = Replica::start(
        &container,
        "trainscale-7c9d5-c",
        &emulator.kubeconfig,
        dir.path(),
        &overrides,
        &[],
    );
    let c_port = c.port;
    e2e::poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        "the standby /readyz 200",
        || Ok(()),
        || async move {
            match e2e::http_status(c_port, "/readyz") {
                Some(200) => Ok(()),
                other => Err(format!("/readyz {other:?}")),
            }
        },
    )
    .await;
    let paused = &mut *replicas[new];
    until_quiet(paused, Duration::from_secs(60)).await;
    let before = replica_requests(&emulator, &survivor_identity).await;
    paused.guard.signal("STOP");
    let stopped = Instant::now();
    let during = apply(&client, vec![served_job(53, podgroups)]).await;
    let standby_leads = {
        let mut pair = [&mut *paused, &mut c];
        await_leader(
            &leases,
            &mut pair,
            1,
            LEASE_DURATION + TAKEOVER_SLACK,
            "while the leader is paused",
        )
        .await
    };
    println!(
        "{} paused (SIGSTOP); {} leads {:.1?} later",
        paused.pod_name,
        c.pod_name,
        standby_leads - stopped
    );
    {
        let mut alive = [&mut c];
        await_workloads(
            &emulator,
            &client,
            &during,
            podgroups,
            standby_leads,
            &mut alive,
        )
        .await;
    }
    let standby_term = lease_record(&leases).await;
    paused.guard.signal("CONT");
    let resumed = Instant::now();
    // Past the renew deadline (10 s) and a debounced pass, with the backlog of watch events the
    // resumed replica receives.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = replica_requests(&emulator, &survivor_identity).await;
    // A resumed replica may still send the renewal it was about to make: client-go's elector
    // carries the resourceVersion it last saw, which the API server refuses (409) once another
    // replica has written the Lease. Such attempts are counted apart; that they changed nothing
    // is checked on the Lease itself (holder and transitions as the standby left them).
    let (lease_writes, writes): (BTreeMap<String, u64>, BTreeMap<String, u64>) =
        e2e::writes_in(&e2e::log_between(&before, &after))
            .into_iter()
            .partition(|(k, _)| k.ends_with(" leases"));
    let holder = lease_holder(&leases).await;
    let term = lease_record(&leases).await;
    println!(
        "{} resumed {:.1?} ago: its writes since the pause {writes:?}, Lease writes attempted {lease_writes:?}; the Lease {holder:?}",
        paused.pod_name,
        resumed.elapsed()
    );
    assert_eq!(
        term, standby_term,
        "the Lease's holder and transitions after the old leader resumed"
    );
    assert!(
        holder
            .as_ref()
            .is_some_and(|(h, _)| h.starts_with(&format!("{}-", c.pod_name))),
        "the standby keeps the Lease after the old leader resumes: {holder:?}"
    );
    assert!(
        writes.is_empty(),
        "{} wrote after it resumed without the Lease: {writes:?}",
        paused.pod_name
    );
    assert_eq!(
        paused.leads(),
        Some(false),
        "{} reports trainscale_leader 1 without the Lease",
        paused.pod_name
    );

    // A Lease deleted is created again and held within the lease duration; a job applied then
    // is served.
    leases
        .delete(LEASE_NAME, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting Lease {LEASE_NAMESPACE}/{LEASE_NAME}: {e}"));
    let deleted = Instant::now();
    let after_delete = apply(&client, vec![served_job(56, podgroups)]).await;
    let leases_ref = &leases;
    let (holder, recreated) = e2e::poll(
        LEASE_DURATION + TAKEOVER_SLACK,
        Duration::from_millis(200),
        "the deleted Lease created again and held",
        || Ok(()),
        move || async move {
            match lease_holder(leases_ref).await {
                Some((h, _)) => Ok((h, Instant::now())),
                None => Err("no Lease (or no holder)".to_string()),
            }
        },
    )
    .await;
    println!(
        "the Lease deleted; held again by {holder} {:.1?} later",
        recreated - deleted
    );
    {
        let mut alive = [&mut *paused, &mut c];
        await_workloads(
            &emulator,
            &client,
            &after_delete,
            podgroups,
            recreated,
            &mut alive,
        )
        .await;
    }
    check_clean(&emulator, "at the end", podgroups).await;
    let problems = pytorch_operators.problems();
    drop(pytorch_operators);
    assert!(
        problems.is_empty(),
        "the PyTorch operators' stand-in failed: {problems:#?}"
    );
    let rejected: Vec<Value> = emulator
        .failed_pods()
        .await
        .into_iter()
        .filter(raced)
        .collect();
    println!(
        "PyTorch worker pods the kubelet rejected: {} {rejected:?}",
        rejected.len()
    );
    // Without PodGroups trainscale binds every pod and must never bind one where it does not
    // fit; with them the harness's Volcano places the operator's pods beside trainscale's binds,
    // and two schedulers may race for the same room (reported only).
    assert!(
        podgroups || rejected.is_empty(),
        "pods trainscale bound where they did not fit: {rejected:#?}"
    );

    paused.guard.terminate(Duration::from_secs(15)).await;
    c.guard.terminate(Duration::from_secs(15)).await;
    emulator.stop();
}

/// With PodGroups: every operated job's trainer pods join its group (the trainer Job template's
/// `scheduling.k8s.io/group-name`: `podGroupName`, else the job's name); a group its user made is
/// joined as it is (no ownerReference added, `minMember` kept); every other group is the
/// operator's, owned by its job. Returns how many groups were the user's.
async fn check_pod_groups(client: &Client, jobs: &[Applied]) -> usize {
    let groups = e2e::list_all(
        client,
        "scheduling.volcano.sh/v1beta1",
        "PodGroup",
        "podgroups",
    )
    .await;
    let trainer_jobs = e2e::list_all(client, "batch/v1", "Job", "jobs").await;
    let mut problems = Vec::new();
    let mut users = 0;
    for job in jobs.iter().filter(|j| j.kind.created_by_trainscale()) {
        let ns = job.namespace.as_str();
        let group_name = job.value["spec"]["podGroupName"]
            .as_str()
            .filter(|g| !g.trim().is_empty())
            .unwrap_or(&job.name);
        let trainer_name = format!("{}-trainer", job.name);
        let trainer = trainer_jobs.iter().find(|o| {
            o["metadata"]["namespace"] == ns && o["metadata"]["name"] == trainer_name.as_str()
        });
        let joined = trainer.and_then(|t| {
            t["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
                .as_str()
        });
        if joined != Some(group_name) {
            problems.push(format!(
                "{}: trainer pods join {joined:?}, not {group_name:?}",
                job.label()
            ));
        }
        let Some(group) = groups
            .iter()
            .find(|g| g["metadata"]["namespace"] == ns && g["metadata"]["name"] == group_name)
        else {
            problems.push(format!("{}: no PodGroup {ns}/{group_name}", job.label()));
            continue;
        };
        let owners: Vec<&str> = group["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        if group["metadata"]["labels"]["made-by"] == "user" {
            users += 1;
            if !owners.is_empty() || group["spec"]["minMember"] != 1 {
                problems.push(format!(
                    "{}: the user's PodGroup {group_name} was taken over: owners {owners:?}, minMember {}",
                    job.label(),
                    group["spec"]["minMember"]
                ));
            }
        } else if owners != [job.name.as_str()] {
            problems.push(format!(
                "{}: PodGroup {group_name} owned by {owners:?}, not by its job",
                job.label()
            ));
        }
    }
    assert!(problems.is_empty(), "PodGroups: {problems:#?}");
    users
}

/// Every request but the test's own (the harness does not log its fake controllers): those of
/// the trainscale replicas, with the User-Agents they came with.
async fn trainscale_requests(emulator: &Emulator) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut agents = Vec::new();
    for (agent, counts) in emulator.requests_by("agent").await {
        if agent == TEST_AGENT {
            continue;
        }
        for (k, n) in counts {
            *out.entry(k).or_default() += n;
        }
        agents.push(agent);
    }
    (out, agents)
}

/// On the dump `dump`: no pod on [`CORDONED`] or [`NOT_READY`], and no node holding more pods
/// than its `pods` allocatable (pods that ended Succeeded or Failed hold no slot). Returns the pods
/// on each node whose pod count binds, as `name pods/limit`.
fn check_placements(dump: &Value, when: &str) -> Vec<String> {
    let mut on_node: BTreeMap<String, u32> = BTreeMap::new();
    for item in dump["items"].as_array().into_iter().flatten() {
        let ended = matches!(
            item["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if item["kind"] == "Pod"
            && !ended
            && let Some(node) = item["spec"]["nodeName"].as_str()
        {
            *on_node.entry(node.to_string()).or_default() += 1;
        }
    }
    for unusable in [CORDONED, NOT_READY] {
        assert!(
            !on_node.contains_key(unusable),
            "{when}: {} pod(s) bound to {unusable}, which takes none",
            on_node[unusable]
        );
    }
    let mut bound_by_slots = Vec::new();
    for node in nodes().as_array().into_iter().flatten() {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        let limit: u32 = node["status"]["allocatable"]["pods"]
            .as_str()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("node {name}: no pods allocatable"));
        let pods = on_node.get(name).copied().unwrap_or(0);
        assert!(
            pods <= limit,
            "{when}: node {name} holds {pods} pods, past its limit {limit}"
        );
        if limit < 110 {
            bound_by_slots.push(format!("{name} {pods}/{limit}"));
        }
    }
    bound_by_slots
}

/// No pod deleted by trainscale, no pod failed (with `podgroups`, but PyTorch workers that
/// [`raced`]), no trainer failure counted, no request denied.
async fn check_clean(emulator: &Emulator, when: &str, podgroups: bool) {
    let (sa, agents) = trainscale_requests(emulator).await;
    let deletes: BTreeMap<&String, &u64> = sa
        .iter()
        .filter(|(k, _)| *k == "delete pods" || *k == "deletecollection pods")
        .collect();
    assert!(
        deletes.is_empty(),
        "{when}: trainscale deleted pods: {deletes:?}"
    );
    let failed = failed_pods(emulator, podgroups).await;
    assert!(failed.is_empty(), "{when}: pods ended Failed: {failed:#?}");
    let failures = emulator.failures().await;
    assert!(
        failures.is_empty(),
        "{when}: trainer failures counted by the Job controller: {failures:?}"
    );
    let denied = emulator.denied().await;
    assert!(denied.is_empty(), "{when}: {}", denials(emulator).await);
    let writes = e2e::writes_in(&sa);
    println!("{when}: trainscale's writes {writes:?} (agents {agents:?})");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn acceptance_as_shipped() {
    acceptance(false).await;
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(kmock),
    ignore = "python3 could not import kmock when this crate was built: pip install 'kmock==0.8.*' 'PyYAML==6.*', then `touch build.rs`"
)]
async fn acceptance_with_volcano_podgroups() {
    acceptance(true).await;
}
