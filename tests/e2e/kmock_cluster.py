"""A small Kubernetes API on loopback for the daemon's end-to-end smoke test.

Runs kmock's KubernetesEmulator (PyPI `kmock` 0.8) seeded with one roomy node and one elastic
TrainingJob at 1 trainer, writes a kubeconfig pointing at it, prints `READY <url>` and serves
until stdin closes or `--lifetime` seconds pass (so it never outlives a crashed test).

kmock does not stamp resourceVersions; the kube-rs watcher needs one on every object, so every
write is stamped here with an increasing resourceVersion.
"""

import argparse
import asyncio
import itertools
import sys

import kmock

RESOURCES = {
    "v1/nodes": dict(namespaced=False, kind="Node"),
    "v1/pods": dict(namespaced=True, kind="Pod"),
    "batch/v1/jobs": dict(namespaced=True, kind="Job"),
    "paddlepaddle.org/v1alpha1/trainingjobs": dict(
        namespaced=True, kind="TrainingJob", subresources={"status"}
    ),
    "events.k8s.io/v1/events": dict(namespaced=True, kind="Event"),
    "coordination.k8s.io/v1/leases": dict(namespaced=True, kind="Lease"),
}

_versions = itertools.count(100)


def stamp(obj):
    obj.setdefault("metadata", {})["resourceVersion"] = str(next(_versions))
    return obj


class StampingEmulator(kmock.KubernetesEmulator):
    async def _handle(self, request):
        writes = (kmock.action.CREATE, kmock.action.UPDATE)
        if request.resource is not None and request.action in writes and isinstance(request.data, dict):
            stamp(request.data)
        return await super()._handle(request)


def seed(emulator):
    for key, info in RESOURCES.items():
        emulator.resources[key] = info
    emulator.objects["v1/nodes", None, "node-1"] = stamp({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1"},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
    emulator.objects["paddlepaddle.org/v1alpha1/trainingjobs", "ml", "mnist"] = stamp({
        "apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "mnist", "namespace": "ml", "uid": "uid-mnist",
                     "creationTimestamp": "2024-05-01T00:00:00Z"},
        "spec": {
            "image": "paddlepaddle/paddle:latest",
            "fault_tolerant": True,
            "frame_work": {"name": "paddle", "type": "nccl2"},
            "trainer": {
                "entrypoint": "python train.py",
                "min-instance": 1, "max-instance": 4,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                              "limits": {"cpu": "1", "memory": "1Gi"}},
                "replicaSpec": {"spec": {"parallelism": 1, "template": {"spec": {"containers": []}}}},
            },
        },
        "status": {"phase": "Running"},
    })
    emulator.objects["batch/v1/jobs", "ml", "mnist-trainer"] = stamp({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "mnist-trainer", "namespace": "ml",
                     "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1", "kind": "TrainingJob",
                                          "name": "mnist", "uid": "uid-mnist", "controller": True}]},
        "spec": {"parallelism": 1,
                 "template": {"metadata": {"labels": {"paddle-job": "mnist"}},
                              "spec": {"containers": [{"name": "trainer", "image": "paddle"}]}}},
    })
    emulator.objects["v1/pods", "ml", "mnist-trainer-0"] = stamp({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mnist-trainer-0", "namespace": "ml", "labels": {"paddle-job": "mnist"},
                     "creationTimestamp": "2024-05-01T00:00:10Z"},
        "spec": {"nodeName": "node-1",
                 "containers": [{"name": "trainer", "image": "paddle",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running"},
    })


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: kmock
  cluster:
    server: {url}
contexts:
- name: kmock
  context:
    cluster: kmock
    user: kmock
    namespace: default
current-context: kmock
users:
- name: kmock
  user:
    token: e2e
"""


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lifetime", type=float, default=120.0)
    args = parser.parse_args()

    emulator = StampingEmulator()
    seed(emulator)
    async with emulator, kmock.Server(emulator) as server:
        url = str(server.url).rstrip("/")
        with open(args.kubeconfig, "w") as f:
            f.write(KUBECONFIG.format(url=url))
        print(f"READY {url}", flush=True)
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await asyncio.wait([stdin_closed], timeout=args.lifetime)
    # The executor thread blocked on stdin must not keep the process alive.
    sys.stdout.flush()
    import os
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
