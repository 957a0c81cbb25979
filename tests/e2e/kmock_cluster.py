"""A small Kubernetes API on loopback for the daemon's end-to-end smoke test.

Runs kmock's KubernetesEmulator (PyPI `kmock` 0.8) seeded with one roomy node and the
PriorityClass `high` (value 1000), writes a
kubeconfig pointing at it, prints `READY <url>` and serves until stdin closes or `--lifetime`
seconds pass (so it never outlives a crashed test). The test itself applies the TrainingJob.

What it adds to kmock, playing the API server:
- kmock does not stamp resourceVersions; the kube-rs watcher needs one on every object, so every
  write is stamped here with an increasing resourceVersion;
- created objects get a `uid` and `creationTimestamp` when they have none (ownerReferences to a
  TrainingJob need its uid);
- a missing object answers with the Status reason `NotFound` and a create of an existing one with
  `AlreadyExists`, as the API server does (kmock says `Object Not Found` / `Object Already
  Exists`; clients such as kube-rs `get_opt` key on the real reasons).

What it plays besides, because the emulator runs no controllers (`--controllers`, on by default),
minimally and only for objects the operator creates (label `trainscale.io/job`):
- the ReplicaSet controller: pods `<rs>-<i>` for `spec.replicas`, then `status.replicas`,
  `readyReplicas`, `availableReplicas`;
- the Job controller for Indexed Jobs: pods `<job>-<i>` with the completion-index annotation for
  i < `spec.parallelism` (extra indexes deleted, none while suspended), then `status.active` and
  `status.ready`;
- the kube-scheduler and kubelet: every such pod is created already bound to node-1 and Running
  and Ready (nothing checks that it fits; the autoscaler's planner decides how many trainers fit).
These fake controllers write through the emulator's own HTTP API, so every change reaches the
watchers as a real watch event.

Request log: every request from a client other than these fake controllers (the daemon, the test)
is counted by verb and resource (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
`deletecollection`; `pods`, `trainingjobs/status`, ...); `GET /_harness/requests` answers the
counts as JSON `{"<verb> <resource>": n}`.
"""

import argparse
import asyncio
import collections
import datetime
import itertools
import sys
import uuid

import aiohttp
import aiohttp.web
import kmock

RESOURCES = {
    "v1/nodes": dict(namespaced=False, kind="Node"),
    "v1/pods": dict(namespaced=True, kind="Pod", subresources={"status"}),
    "v1/configmaps": dict(namespaced=True, kind="ConfigMap"),
    "apps/v1/replicasets": dict(namespaced=True, kind="ReplicaSet", subresources={"status"}),
    "batch/v1/jobs": dict(namespaced=True, kind="Job", subresources={"status"}),
    "paddlepaddle.org/v1alpha1/trainingjobs": dict(
        namespaced=True, kind="TrainingJob", subresources={"status"}
    ),
    "paddlepaddle.org/v1/paddlejobs": dict(
        namespaced=True, kind="PaddleJob", subresources={"status"}
    ),
    "scheduling.k8s.io/v1/priorityclasses": dict(namespaced=False, kind="PriorityClass"),
    "scheduling.volcano.sh/v1beta1/podgroups": dict(namespaced=True, kind="PodGroup"),
    "events.k8s.io/v1/events": dict(namespaced=True, kind="Event"),
    "coordination.k8s.io/v1/leases": dict(namespaced=True, kind="Lease"),
}

NODE = "node-1"
OWNED_LABEL = "trainscale.io/job"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# Status reasons of the real API server, by code, for the object-level errors kmock raises.
REASONS = {404: "NotFound", 409: "AlreadyExists"}

_versions = itertools.count(100)

# The fake controllers' User-Agent: their requests are not logged.
HARNESS_AGENT = "kmock-cluster-harness"
LOG_PATH = "/_harness/requests"
REQUESTS = collections.Counter()


def classify(method, path, query):
    """(verb, resource) of a request, as Kubernetes names them."""
    segs = [s for s in path.split("/") if s]
    if segs[:1] == ["api"] and len(segs) >= 2:
        rest = segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 3:
        rest = segs[3:]
    else:
        rest = []
    watch = query.get("watch") in ("true", "1")
    if rest[:1] == ["watch"]:
        watch, rest = True, rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return "get", "nonresource"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    verb = {
        "POST": "create", "PUT": "update", "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
        "GET": "watch" if watch else ("get" if named else "list"),
    }.get(method, "other")
    return verb, resource


def now():
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(obj):
    obj.setdefault("metadata", {})["resourceVersion"] = str(next(_versions))
    return obj


class StampingEmulator(kmock.KubernetesEmulator):
    async def _handle(self, request):
        if request.url.path == LOG_PATH:
            return aiohttp.web.json_response(dict(REQUESTS))
        if request.headers.get("User-Agent") != HARNESS_AGENT:
            method = str(getattr(request.method, "value", request.method)).upper()
            verb, resource = classify(method, request.url.path, request.url.query)
            REQUESTS[f"{verb} {resource}"] += 1
        writes = (kmock.action.CREATE, kmock.action.UPDATE)
        if request.resource is not None and request.action in writes and isinstance(request.data, dict):
            stamp(request.data)
            if request.action == kmock.action.CREATE:
                meta = request.data["metadata"]
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now())
        return await super()._handle(request)

    async def _render_error(self, exc):
        if isinstance(exc, kmock.KubernetesError) and exc.status in REASONS:
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "code": exc.status, "reason": REASONS[exc.status],
                "message": exc.message or repr(exc), "details": {},
            }, status=exc.status)
        return await super()._render_error(exc)


def seed(emulator, cpu, memory, pods):
    for key, info in RESOURCES.items():
        emulator.resources[key] = info
    emulator.objects["scheduling.k8s.io/v1/priorityclasses", None, "high"] = stamp({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "high", "uid": "uid-pc-high"}, "value": 1000,
    })
    emulator.objects["v1/nodes", None, NODE] = stamp({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "uid": f"uid-{NODE}"},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })


def owned(emulator, resource):
    """Live objects of `resource` created by the operator."""
    out = []
    for (res, _ns, _name), obj in list(emulator.objects.items()):
        if res != resource or obj.deleted:
            continue
        raw = obj.raw
        if OWNED_LABEL in (raw.get("metadata", {}).get("labels") or {}):
            out.append(raw)
    return out


def live_pods(emulator, namespace):
    return {
        name: obj.raw
        for (res, ns, name), obj in list(emulator.objects.items())
        if res == "v1/pods" and ns == namespace and not obj.deleted
    }


def pod_from(owner, name, index=None):
    """A pod of `owner`'s template, bound to the node and Running (scheduler + kubelet)."""
    template = owner["spec"]["template"]
    meta = template.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    if index is not None:
        annotations[COMPLETION_INDEX] = str(index)
    spec = dict(template["spec"])
    spec["nodeName"] = NODE
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner["metadata"]["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"],
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                 "restartCount": 0, "started": True, "state": {"running": {"startedAt": now()}}}
                for c in spec.get("containers", [])
            ],
        },
    }


class Controllers:
    """The ReplicaSet and Job controllers and the scheduler, as little as the test needs."""

    def __init__(self, emulator, url):
        self.emulator = emulator
        self.url = url

    async def run(self, session):
        while True:
            try:
                await self.reconcile(session)
            except Exception as e:  # keep playing; the test's deadline catches a stuck cluster
                print(f"controllers: {e!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.2)

    async def call(self, session, method, path, body=None):
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with session.request(method, self.url + path, json=body, headers=headers) as r:
            if r.status >= 400 and r.status != 404:
                raise RuntimeError(f"{method} {path}: {r.status} {await r.text()}")

    async def sync_pods(self, session, owner, wanted):
        """Creates the pods named in `wanted` (name -> completion index or None), deletes the
        owner's other pods; returns how many pods it has."""
        ns = owner["metadata"]["namespace"]
        uid = owner["metadata"]["uid"]
        pods = live_pods(self.emulator, ns)
        mine = {
            name for name, pod in pods.items()
            if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
        }
        for name, index in wanted.items():
            if name not in pods:
                await self.call(session, "POST", f"/api/v1/namespaces/{ns}/pods",
                                pod_from(owner, name, index))
        for name in mine - set(wanted):
            await self.call(session, "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
        return len(wanted)

    async def reconcile(self, session):
        for rs in owned(self.emulator, "apps/v1/replicasets"):
            name, ns = rs["metadata"]["name"], rs["metadata"]["namespace"]
            replicas = rs["spec"].get("replicas", 1)
            n = await self.sync_pods(session, rs, {f"{name}-{i}": None for i in range(replicas)})
            status = {"replicas": n, "readyReplicas": n, "availableReplicas": n}
            if rs.get("status") != status:
                await self.call(session, "PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}/status",
                                {"status": status})
        for job in owned(self.emulator, "batch/v1/jobs"):
            name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
            spec = job["spec"]
            parallelism = 0 if spec.get("suspend") else spec.get("parallelism", 1)
            n = await self.sync_pods(session, job, {f"{name}-{i}": i for i in range(parallelism)})
            status = {"active": n, "ready": n}
            current = job.get("status") or {}
            if {k: current.get(k) for k in status} != status:
                await self.call(session, "PATCH", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status",
                                {"status": status})


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
    global NODE
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lifetime", type=float, default=120.0)
    parser.add_argument("--controllers", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--node-cpu", default="16", help="allocatable CPU of node-1")
    parser.add_argument("--node-memory", default="64Gi", help="allocatable memory of node-1")
    parser.add_argument("--node-pods", default="110", help="allocatable pods of node-1")
    parser.add_argument("--node-name", default="node-1", help="the node's name")
    parser.add_argument("--port", type=int, default=None,
                        help="serve on this port (a second emulator replacing a first one)")
    args = parser.parse_args()
    NODE = args.node_name

    emulator = StampingEmulator()
    seed(emulator, args.node_cpu, args.node_memory, args.node_pods)
    headers = {"User-Agent": HARNESS_AGENT}
    async with emulator, kmock.Server(emulator, port=args.port) as server, aiohttp.ClientSession(headers=headers) as session:
        url = str(server.url).rstrip("/")
        with open(args.kubeconfig, "w") as f:
            f.write(KUBECONFIG.format(url=url))
        tasks = []
        if args.controllers:
            tasks.append(asyncio.create_task(Controllers(emulator, url).run(session)))
        print(f"READY {url}", flush=True)
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await asyncio.wait([stdin_closed], timeout=args.lifetime)
        for task in tasks:
            task.cancel()
    # The executor thread blocked on stdin must not keep the process alive.
    sys.stdout.flush()
    import os
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
