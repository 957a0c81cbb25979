//! Kueue objects and Kueue-managed jobs for tests, as `kubectl get -o json` prints them.

use serde_json::{Value, json};

use crate::api::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, Workload};
use crate::api::{JobKey, PyTorchJob};
use crate::cluster::ClusterState;

/// One resource quota of a ClusterQueue: name, nominal, borrowing limit, lending limit.
pub type QuotaSpec<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>);

/// A ResourceFlavor.
pub fn resource_flavor(name: &str) -> ResourceFlavor {
    decode(
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                  "metadata": {"name": name}, "spec": {}}),
    )
}

/// A ClusterQueue with one resource group of one flavor covering the resources of `quotas`.
pub fn cluster_queue(
    name: &str,
    cohort: Option<&str>,
    flavor: &str,
    quotas: &[QuotaSpec],
) -> ClusterQueue {
    decode(cluster_queue_json(name, cohort, flavor, quotas))
}

/// [`cluster_queue`] as JSON.
pub fn cluster_queue_json(
    name: &str,
    cohort: Option<&str>,
    flavor: &str,
    quotas: &[QuotaSpec],
) -> Value {
    let resources: Vec<Value> = quotas
        .iter()
        .map(|(resource, nominal, borrowing, lending)| {
            let mut q = json!({"name": resource, "nominalQuota": nominal});
            if let Some(b) = borrowing {
                q["borrowingLimit"] = json!(b);
            }
            if let Some(l) = lending {
                q["lendingLimit"] = json!(l);
            }
            q
        })
        .collect();
    let covered: Vec<&str> = quotas.iter().map(|q| q.0).collect();
    let mut spec = json!({
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": covered,
                            "flavors": [{"name": flavor, "resources": resources}]}],
    });
    if let Some(cohort) = cohort {
        spec["cohortName"] = json!(cohort);
    }
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
           "metadata": {"name": name}, "spec": spec})
}

/// A LocalQueue `namespace/name` submitting to ClusterQueue `cq`.
pub fn local_queue(namespace: &str, name: &str, cq: &str) -> LocalQueue {
    decode(local_queue_json(namespace, name, cq))
}

/// [`local_queue`] as JSON.
pub fn local_queue_json(namespace: &str, name: &str, cq: &str) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"clusterQueue": cq}})
}

/// A Workload `name` of job `owner` whose one pod set `worker` asks `asked` pods requesting
/// `per_pod` each; `admitted`: reserved in `(cluster queue, flavor, count)`.
pub fn workload_json(
    name: &str,
    owner: &JobKey,
    asked: i32,
    per_pod: &[(&str, &str)],
    admitted: Option<(&str, &str, i32)>,
) -> Value {
    let requests: serde_json::Map<String, Value> = per_pod
        .iter()
        .map(|(r, q)| (r.to_string(), json!(q)))
        .collect();
    let mut wl = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": &*owner.namespace,
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "ownerReferences": [{"apiVersion": owner.kind.api_version(),
                         "kind": owner.kind.as_str(), "name": &*owner.name, "uid": "u",
                         "controller": true}]},
        "spec": {"queueName": "q", "podSets": [{"name": "worker", "count": asked,
            "template": {"spec": {"containers": [{"name": "c",
                "resources": {"requests": requests}}]}}}]},
        "status": {"conditions": []},
    });
    if let Some((cq, flavor, count)) = admitted {
        let usage: serde_json::Map<String, Value> = per_pod
            .iter()
            .map(|(r, q)| (r.to_string(), json!(times(q, count))))
            .collect();
        let flavors: serde_json::Map<String, Value> = per_pod
            .iter()
            .map(|(r, _)| (r.to_string(), json!(flavor)))
            .collect();
        wl["status"] = json!({
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                           {"type": "Admitted", "status": "True", "reason": "Admitted"}],
            "admission": {"clusterQueue": cq, "podSetAssignments": [{"name": "worker",
                "flavors": flavors, "resourceUsage": usage, "count": count}]},
        });
    }
    wl
}

/// [`workload_json`] decoded.
pub fn workload(
    name: &str,
    owner: &JobKey,
    asked: i32,
    per_pod: &[(&str, &str)],
    admitted: Option<(&str, &str, i32)>,
) -> Workload {
    decode(workload_json(name, owner, asked, per_pod, admitted))
}

/// A quantity of whole units (or `NNNm`, `NNGi`) times `n`, written in the same unit.
fn times(q: &str, n: i32) -> String {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (number, unit) = q.split_at(split);
    let value: i64 = number.parse().unwrap_or(0);
    format!("{}{unit}", value * i64::from(n))
}

/// An elastic, running Kubeflow PyTorchJob `namespace/name` in LocalQueue `queue` (none:
/// unlabelled), of `replicas` workers (`min..=max`) requesting `cpu`, `memory` and `gpu` each.
#[allow(clippy::too_many_arguments)]
pub fn pytorch_job_json(
    namespace: &str,
    name: &str,
    (min, max, replicas): (i32, i32, i32),
    queue: Option<&str>,
    (cpu, memory, gpu): (&str, &str, &str),
) -> Value {
    let mut labels = json!({});
    if let Some(q) = queue {
        labels["kueue.x-k8s.io/queue-name"] = json!(q);
    }
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"elasticPolicy": {"minReplicas": min, "maxReplicas": max},
                 "pytorchReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {
                     "containers": [{"name": "pytorch", "resources": {
                         "requests": {"cpu": cpu, "memory": memory},
                         "limits": {"nvidia.com/gpu": gpu}}}]}}}}},
        "status": {"conditions": [{"type": "Running", "status": "True"}]},
    })
}

/// [`pytorch_job_json`] decoded.
pub fn pytorch_job(
    namespace: &str,
    name: &str,
    sizes: (i32, i32, i32),
    queue: Option<&str>,
    request: (&str, &str, &str),
) -> PyTorchJob {
    decode(pytorch_job_json(namespace, name, sizes, queue, request))
}

/// Binds `n` worker pods of PyTorchJob `key` requesting `(cpu milli, memory bytes, gpu)` to
/// `node`, named `<job>-worker-<from + i>`.
pub fn bind_workers(
    state: &mut ClusterState,
    key: &JobKey,
    node: &str,
    from: usize,
    n: usize,
    (cpu, memory, gpu): (&str, &str, &str),
) {
    for i in from..from + n {
        let pod: k8s_openapi::api::core::v1::Pod = decode(json!({
            "metadata": {"name": format!("{}-worker-{i}", key.name), "namespace": &*key.namespace,
                         "labels": {"training.kubeflow.org/job-name": &*key.name,
                                    "training.kubeflow.org/replica-type": "worker"}},
            "spec": {"nodeName": node, "containers": [{"name": "pytorch", "resources": {
                "requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu},
                "limits": {"nvidia.com/gpu": gpu}}}]},
            "status": {"phase": "Running"},
        }));
        if let Err(e) = state.apply_pod(&pod) {
            panic!("test pod: {e}");
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(value: Value) -> T {
    match serde_json::from_value(value) {
        Ok(v) => v,
        Err(e) => panic!("test object does not decode: {e}"),
    }
}
