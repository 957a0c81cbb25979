//! Generated cluster dumps as `kubectl get nodes,pods,jobs,trainingjobs -A -o json` prints
//! them (a `List`, `items` before `kind`, four-space indents), written item by item.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{Value, json};

/// The size of a generated dump.
#[derive(Debug, Clone, Copy)]
pub struct DumpShape {
    pub nodes: usize,
    /// TrainingJobs, each with its trainer Job and `trainers_per_job` bound trainer Pods.
    pub jobs: usize,
    pub trainers_per_job: usize,
    /// This many of the first nodes are written a second time at the end, with other sizes.
    pub duplicate_nodes: usize,
}

/// Writes the dump; its items are [`node`]s, then per job [`training_job`], [`trainer_job`] and
/// [`trainer_pod`]s (pods bound round-robin), then the duplicate nodes.
pub fn write_dump(out: &mut impl Write, shape: DumpShape) -> io::Result<()> {
    out.write_all(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [")?;
    let mut first = true;
    let mut item = |out: &mut dyn Write, value: Value| -> io::Result<()> {
        out.write_all(if first { b"\n" } else { b",\n" })?;
        first = false;
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut *out, formatter);
        value.serialize(&mut ser).map_err(io::Error::other)
    };
    for n in 0..shape.nodes {
        item(out, node(n, 96))?;
    }
    for j in 0..shape.jobs {
        item(out, training_job(j, shape.trainers_per_job))?;
        item(out, trainer_job(j, shape.trainers_per_job))?;
        for t in 0..shape.trainers_per_job {
            let on = (j * shape.trainers_per_job + t) % shape.nodes.max(1);
            item(out, trainer_pod(j, t, on))?;
        }
    }
    for n in 0..shape.duplicate_nodes.min(shape.nodes) {
        item(out, node(n, 4))?;
    }
    out.write_all(b"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
}

/// The name of generated node `n`.
pub fn node_name(n: usize) -> String {
    format!("node-{n:06}")
}

fn namespace(job: usize) -> String {
    format!("team-{}", job % 50)
}

/// A Ready node with `cpus` cores, 768 GiB and 8 GPUs, labelled and addressed as kubelet does.
pub fn node(n: usize, cpus: u32) -> Value {
    let name = node_name(n);
    let resources = json!({"cpu": cpus.to_string(), "memory": "768Gi", "nvidia.com/gpu": "8",
        "pods": "110"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-11-01T08:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": format!("z{}", n % 4),
                "node.kubernetes.io/instance-type": "gpu-8x"}
        },
        "spec": {"podCIDR": format!("10.{}.{}.0/24", n / 256 % 256, n % 256),
            "providerID": format!("gce://project/zone/{name}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", n / 256 % 256, n % 256)},
                {"type": "Hostname", "address": name}],
            "allocatable": resources,
            "capacity": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
        }
    })
}

/// An elastic TrainingJob (min 1, max 2 × `trainers`) of 8-core, 1-GPU trainers, Running.
pub fn training_job(j: usize, trainers: usize) -> Value {
    let resources = json!({"requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}});
    json!({
        "apiVersion": "paddlepaddle.org/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": format!("job-{j:06}"), "namespace": namespace(j),
            "uid": format!("00000000-0000-0000-0002-{j:012}"),
            "creationTimestamp": "2026-11-20T09:00:00Z"},
        "spec": {
            "image": "paddlepaddle/paddle:2.6", "port": 7164, "ports_num": 1,
            "ports_num_for_sparse": 1, "fault_tolerant": true,
            "master": {"etcd-endpoint": "", "resources": {"requests": {"cpu": "1", "memory": "500Mi"}}},
            "pserver": {"min-instance": 1, "max-instance": 1,
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}},
            "trainer": {"entrypoint": "python train.py", "workspace": "/workspace",
                "min-instance": 1, "max-instance": 2 * trainers.max(1), "resources": resources}
        },
        "status": {"phase": "Running"}
    })
}

/// The batch/v1 Job of `j`'s trainers, `trainers` of them active.
pub fn trainer_job(j: usize, trainers: usize) -> Value {
    let name = format!("job-{j:06}");
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": format!("{name}-trainer"), "namespace": namespace(j),
            "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                "name": name, "uid": format!("00000000-0000-0000-0002-{j:012}"), "controller": true}]},
        "spec": {"parallelism": trainers, "completions": trainers, "completionMode": "Indexed",
            "template": {"metadata": {"labels": {"paddle-job": name}},
                "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "paddlepaddle/paddle:2.6"}]}}},
        "status": {"active": trainers}
    })
}

/// Trainer `t` of job `j`, Running on node `on`.
pub fn trainer_pod(j: usize, t: usize, on: usize) -> Value {
    let name = format!("job-{j:06}");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{name}-trainer-{t}-x7k2p"), "namespace": namespace(j),
            "uid": format!("00000000-0000-{t:04}-0003-{j:012}"),
            "creationTimestamp": "2026-11-20T09:01:00Z",
            "labels": {"paddle-job": name, "batch.kubernetes.io/job-completion-index": t.to_string(),
                "job-name": format!("{name}-trainer")},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": format!("{name}-trainer"),
                "uid": format!("00000000-0000-0000-0004-{j:012}"), "controller": true}]
        },
        "spec": {
            "nodeName": node_name(on),
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "paddlepaddle/paddle:2.6",
                "resources": {"requests": {"cpu": "8", "memory": "32Gi"},
                    "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}}]
        },
        "status": {"phase": "Running", "podIP": format!("10.1.{}.{}", on / 256 % 256, on % 256),
            "startTime": "2026-11-20T09:01:05Z"}
    })
}
