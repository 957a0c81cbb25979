"""A small Kubernetes API on loopback for the daemon's end-to-end tests.

Runs kmock's KubernetesEmulator (PyPI `kmock` 0.8) seeded with one roomy node and the
PriorityClass `high` (value 1000), with `--pytorch-crds` also serving the PyTorchTrainingJob and
PyTorchJob resources (discovery included), writes a
kubeconfig pointing at it, prints `READY <url>` and serves until stdin closes or `--lifetime`
seconds pass (so it never outlives a crashed test). The test itself applies the TrainingJob.

What it adds to kmock, playing the API server:
- kmock does not stamp resourceVersions; the kube-rs watcher needs one on every object, so every
  write is stamped here with an increasing resourceVersion;
- created objects get a `uid` and `creationTimestamp` when they have none (ownerReferences to a
  TrainingJob need its uid), and the namespace of the URL when their body names none (kmock
  filters a namespaced watch by the object's own namespace: kube-lease-manager creates the Lease
  without one, and the daemon watches its Lease);
- a missing object answers with the Status reason `NotFound` and a create of an existing one with
  `AlreadyExists`, as the API server does (kmock says `Object Not Found` / `Object Already
  Exists`; clients such as kube-rs `get_opt` key on the real reasons).
kmock deletes at once (no grace period, no finalizers on these objects), runs no garbage collector
(children outlive a deleted owner) and serves no `deletecollection` (it is logged, not applied).
Two shortcuts keep it fast over long or large tests without changing any answer: kmock keeps every
request it served and matches each new one against all of them, so a request is forgotten once
answered; and a request naming its object is answered by key instead of a scan of every stored
object.

What it plays besides, because the emulator runs no controllers (`--controllers`, on by default),
minimally and only for objects the operator creates (label `trainscale.io/job`), every
`--period` seconds (default 0.2):
- the ReplicaSet controller: pods `<rs>-<i>` for `spec.replicas`, then `status.replicas`,
  `readyReplicas`, `availableReplicas`;
- the Job controller for Indexed Jobs: pods `<job>-<i>` with the completion-index annotation for
  every i < min(`spec.parallelism`, `spec.completions`), lowest missing index first, recreating an
  index whose pod went away (at once: the real controller waits 10 s, 20 s, ... between
  replacements); pods of other indexes are deleted, and none run while the Job is suspended; then
  `status.active`, `status.ready` and, once a pod failed, `status.failed`. When `status.failed`
  exceeds `spec.backoffLimit` (default 6) the Job gets the condition `Failed` with reason
  `BackoffLimitExceeded` and loses its pods, as a real Job does;
- the kube-scheduler (and the other schedulers of `--schedulers`, default `default-scheduler`,
  `volcano` and `scheduler-plugins-scheduler`: those the operator's `--podgroups` modes name) and
  the kubelet: every such pod whose template names no `schedulerName`, or one of those, is created
  already bound to the node and Running and Ready (nothing checks that it fits; the autoscaler's
  planner decides how many trainers fit). A pod whose template names any other scheduler
  (`trainscale`) is created pending: no `nodeName`, phase `Pending`, no conditions, for that
  scheduler to bind through `pods/binding`; once bound, the next round starts it (the kubelet: a
  merge patch of its status to Running and Ready, keeping `PodScheduled`).
  `status.ready` of a Job (`readyReplicas` of a ReplicaSet) counts the Ready pods only.
These fake controllers write through the emulator's own HTTP API, so every change reaches the
watchers as a real watch event.

Pod failures of trainer Jobs. In a real cluster a running trainer pod that is deleted (by a client,
or by the Job controller itself when `parallelism` drops below the active count) is killed, ends
`Failed`, and the Job controller counts it in `status.failed` against `backoffLimit` when its
completion index is below `spec.completions`; a pod of an index >= completions (removed because
`completions` was lowered) is not counted. A pod stopped by a disruption carries the condition
`DisruptionTarget`, which the operator's `podFailurePolicy` ignores; a plain DELETE adds no such
condition, so it is counted. The harness counts the same way, for the Jobs it plays the controller
of: a trainer pod that goes away counts as one failure of its Job when its index is below the
Job's `completions` (else `parallelism`) at that moment, whoever removed it. A client's DELETE is
judged when it arrives (the real controller judges when the pod reaches `Failed`, seconds later;
a client that deletes a pod and then lowers `completions` is counted here, which is the stricter
reading); pods removed while the Job is suspended, or after it failed, are not counted.
`GET /_harness/failures` answers the counts as JSON `{"<namespace>/<job>": n}` (Jobs without
failures are absent).

Pod subresources, as the API server serves them (kmock serves none):
- `POST /api/v1/namespaces/NS/pods/NAME/binding` with a `v1 Binding` body
  (`{"metadata": {"name": NAME}, "target": {"kind": "Node", "name": NODE}}`): 400 BadRequest when
  the body's name (or namespace) differs from the URL's; 422 Invalid (causes `target.kind`
  FieldValueNotSupported, `target.name` FieldValueRequired) when the target is not a Node or has no
  name; 404 NotFound when the pod does not exist; 409 Conflict (`pod NAME is already assigned to
  node "N"`, or `is being deleted`) when it is bound already; otherwise `spec.nodeName` is set,
  `status.conditions` gets `PodScheduled=True` (added, or the existing one updated), the
  resourceVersion is bumped (watchers see MODIFIED) and the answer is 201 with a `v1 Status`
  `status: Success`. Whether the node exists is not checked (the API server does not either).
  Logged as `create pods/binding`.
- `PATCH /api/v1/namespaces/NS/pods/NAME/status` with `application/strategic-merge-patch+json`:
  only `status` changes; `status.conditions` is merged by `type` (an element of a known type is
  merged into it, `{"type": T, "$patch": "delete"}` removes it, a new type is appended), other
  status fields are merged as a JSON merge patch (lists replaced), `$`-directives are ignored.
  With `application/merge-patch+json` the status is merged as a plain JSON merge patch (lists
  replaced). 404 NotFound when the pod does not exist. Logged as `patch pods/status`.
`GET /_harness/bindings` answers every successful binding, in order, as a JSON list of
`{"namespace", "name", "node", "created", "bound"}`: `created` is when the pod was created (its
create request answered) and `bound` when the binding was applied, both wall-clock seconds since
the epoch (`time.time()`, float; `created` is null for a pod the harness did not see created).

Request log: every request from a client other than these fake controllers (the daemon, the test)
is counted by verb and resource (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
`deletecollection`; `pods`, `trainingjobs/status`, `pods/binding`, ...: a subresource is
`<resource>/<subresource>`); `GET /_harness/requests` answers the
counts as JSON `{"<verb> <resource>": n}`, and `GET /_harness/requests?by=agent` the same counts
per User-Agent header (`-` when a client sends none, as the daemon does):
`{"<agent>": {"<verb> <resource>": n}}`. Requests to `/_harness/...` are not counted.

CRDs installed late: `POST /_harness/serve-pytorch-crds` starts serving the resources of
`--pytorch-crds` (discovery included) from then on, as when their CRDs are applied to a running
cluster.

Outages: `POST /_harness/unavailable?resource=leases` (repeatable) makes every request for those
resources, but the fake controllers', answer 503 ServiceUnavailable (they are still logged), as an
API server whose storage for them is failing; `POST /_harness/unavailable` ends the outage.

Cut watches: `POST /_harness/cut-watches` ends every watch response open at that moment, cleanly
(the chunked body is terminated, as a real API server ends a watch at its timeout or on a
restart of its watch cache), and answers `{"cut": n}`. A client sees its watch stream end and
re-watches (kube-rs resumes from the last resourceVersion it saw, without a new list). kmock
ignores the resourceVersion of a watch: every new watch first replays the live objects as
`ADDED`, then streams changes. `GET /_harness/watches` answers the `resourceVersion` parameter of
every logged watch request, in order, by resource: `{"<resource>": ["<rv>", ...]}` (`""` when a
watch carried none), so a test can tell a resumed watch from a fresh one.
"""

import argparse
import asyncio
import collections
import copy
import datetime
import itertools
import json
import sys
import time
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
        namespaced=True, kind="TrainingJob", subresources={"status"}, singular="trainingjob",
        shortnames={"tj"},
    ),
    "paddlepaddle.org/v1/paddlejobs": dict(
        namespaced=True, kind="PaddleJob", subresources={"status"}
    ),
    "scheduling.k8s.io/v1/priorityclasses": dict(namespaced=False, kind="PriorityClass"),
    "scheduling.volcano.sh/v1beta1/podgroups": dict(namespaced=True, kind="PodGroup"),
    "events.k8s.io/v1/events": dict(namespaced=True, kind="Event"),
    "coordination.k8s.io/v1/leases": dict(namespaced=True, kind="Lease"),
}

# The CRDs of the kinds trainscale only sizes, served with `--pytorch-crds` (off by default, so the
# other tests see a cluster without them): T9k's PyTorchTrainingJob and Kubeflow's PyTorchJob.
PYTORCH_RESOURCES = {
    "batch.tensorstack.dev/v1beta1/pytorchtrainingjobs": dict(
        namespaced=True, kind="PyTorchTrainingJob", subresources={"status"}
    ),
    "kubeflow.org/v1/pytorchjobs": dict(
        namespaced=True, kind="PyTorchJob", subresources={"status", "scale"}
    ),
}

# Discovery answers these verbs for every resource, so `kubectl get` and `kubectl describe` work
# against the emulator (it serves them all).
for _info in (*RESOURCES.values(), *PYTORCH_RESOURCES.values()):
    _info["verbs"] = {"create", "delete", "get", "list", "patch", "update", "watch"}

NODE = "node-1"
OWNED_LABEL = "trainscale.io/job"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# Status reasons of the real API server, by code, for the object-level errors kmock raises.
REASONS = {404: "NotFound", 409: "AlreadyExists"}

# The schedulers the harness stands in for (`--schedulers`): a pod its fake controllers create
# that names one of them, or none, is created bound; one naming any other scheduler (trainscale)
# stays pending for that scheduler to bind. Volcano's and scheduler-plugins' are played too: the
# operator names them with `--podgroups`, and the daemon's tests rely on those pods running.
PLAYED_SCHEDULERS = {"default-scheduler", "volcano", "scheduler-plugins-scheduler"}
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
# Strategic-merge keys of the pod status lists the harness merges by key (every other list in a
# strategic merge patch of pods/status is replaced, as in a JSON merge patch).
STATUS_MERGE_KEYS = {"conditions": "type"}

_versions = itertools.count(100)

# The fake controllers' User-Agent: their requests are not logged.
HARNESS_AGENT = "kmock-cluster-harness"
LOG_PATH = "/_harness/requests"
FAILURES_PATH = "/_harness/failures"
UNAVAILABLE_PATH = "/_harness/unavailable"
UNAVAILABLE = set()  # resources whose requests (but the fake controllers') answer 503
CUT_WATCHES_PATH = "/_harness/cut-watches"
WATCHES = set()  # one asyncio.Event per open watch response; setting it ends that response
WATCH_VERSIONS_PATH = "/_harness/watches"
WATCH_VERSIONS = collections.defaultdict(list)  # resource -> resourceVersion of each logged watch
REQUESTS = collections.Counter()
REQUESTS_BY_AGENT = collections.defaultdict(collections.Counter)
BINDINGS_PATH = "/_harness/bindings"
SERVE_PYTORCH_PATH = "/_harness/serve-pytorch-crds"  # starts serving PYTORCH_RESOURCES
POD_CREATED = {}  # (namespace, name) -> wall-clock time (time.time()) the live pod was created
BINDINGS = []  # one {namespace, name, node, created, bound} per successful binding, in order


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


def header(request, name):
    """A request header by case-insensitive name, or None."""
    name = name.lower()
    for key, value in request.headers.items():
        if str(key).lower() == name:
            return value
    return None


def live(emulator, resource, namespace, name):
    """The live object, or None."""
    try:
        obj = emulator.objects[resource, namespace, name]
    except KeyError:
        return None
    return None if obj.deleted else obj.raw


def completion_index(pod):
    try:
        return int((pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX))
    except (TypeError, ValueError):
        return None


def controller_uid(obj):
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


class Failures:
    """Trainer pod failures by Job, judged as the Job controller counts them (module docstring)."""

    def __init__(self):
        self.counts = collections.Counter()  # "<ns>/<job>" -> failures
        self.judged = set()  # uids of pods whose going away was judged already
        self.seen = {}  # Job uid -> {pod uid: pod} at the last reconcile

    def judge(self, job, pod, counts=True):
        """Judges `pod` (of `job`) gone: a failure if `counts` and the Job still wanted its index,
        unless the Job is suspended or failed."""
        self.judged.add(pod["metadata"].get("uid"))
        spec = job.get("spec") or {}
        if not counts or spec.get("suspend") or job_failed(job):
            return
        index = completion_index(pod)
        wanted = spec.get("completions", spec.get("parallelism", 1))
        if index is not None and index < wanted:
            self.counts[f"{job['metadata']['namespace']}/{job['metadata']['name']}"] += 1

    def of(self, job):
        return self.counts[f"{job['metadata']['namespace']}/{job['metadata']['name']}"]


FAILURES = Failures()


def job_failed(job):
    return any(c.get("type") == "Failed" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def forget(requests, request):
    """Drops `request` (by identity) from a kmock request list, searching from its end."""
    for i in range(len(requests) - 1, -1, -1):
        if requests[i] is request:
            del requests[i]
            return


def status_response(code, reason, message, details=None):
    """A `v1 Status` answer: `Failure` with `reason`, or `Success` for a 2xx `code`."""
    body = {
        "apiVersion": "v1", "kind": "Status", "metadata": {},
        "status": "Success" if code < 300 else "Failure", "code": code,
    }
    if code >= 300:
        body.update(reason=reason, message=message, details=details or {})
    return aiohttp.web.json_response(body, status=code)


def not_found(resource, name):
    return status_response(404, "NotFound", f'{resource} "{name}" not found',
                           {"name": name, "kind": resource})


def json_merge(target, patch):
    """RFC 7386 JSON merge patch of `target` (not changed) by `patch`: a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = json_merge(out.get(key), value)
    return out


def merge_by_key(current, patch, key):
    """A strategic merge of the list `patch` into `current` by the merge key `key`: an element
    with a known key is merged into that element (JSON merge), `{key: k, "$patch": "delete"}`
    removes it, an unknown key is appended; elements keep their order."""
    out = [copy.deepcopy(e) for e in current or [] if isinstance(e, dict)]
    for element in patch:
        if not isinstance(element, dict):
            continue
        directive = element.get("$patch")
        element = {k: v for k, v in element.items() if k != "$patch"}
        at = next((i for i, e in enumerate(out) if e.get(key) == element.get(key)), None)
        if directive == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(json_merge({}, element))
        else:
            out[at] = json_merge(out[at], element)
    return out


def strategic_merge_status(status, patch):
    """A strategic merge patch of a pod's `status`: lists in STATUS_MERGE_KEYS merged by key,
    directives (`$setElementOrder/...`, `$retainKeys`) ignored, the rest JSON merge."""
    if patch is None:
        return {}
    if not isinstance(patch, dict):
        return copy.deepcopy(status or {})
    plain = {k: v for k, v in patch.items()
             if not k.startswith("$") and k not in STATUS_MERGE_KEYS}
    out = json_merge(status or {}, plain)
    for field, key in STATUS_MERGE_KEYS.items():
        if field not in patch:
            continue
        if patch[field] is None:
            out.pop(field, None)
        elif isinstance(patch[field], list):
            out[field] = merge_by_key((status or {}).get(field), patch[field], key)
    return out


def set_condition(status, condition):
    """Adds `condition` to `status.conditions`, or updates the one of its type (its
    `lastTransitionTime` kept when the status does not change)."""
    conditions = status.setdefault("conditions", [])
    for i, c in enumerate(conditions):
        if c.get("type") == condition["type"]:
            if c.get("status") == condition.get("status") and c.get("lastTransitionTime"):
                condition = dict(condition, lastTransitionTime=c["lastTransitionTime"])
            conditions[i] = condition
            return
    conditions.append(condition)


def request_json(request):
    """The request body as JSON, or None when it is not."""
    try:
        return json.loads(request.body or b"null")
    except ValueError:
        return None


def pod_subresource(request):
    """The subresource of a request for one pod (`binding`, `status`, ...), else None."""
    resource = request.resource
    if resource is None or request.name is None or request.namespace is None:
        return None
    if (resource.group, resource.version, resource.plural) != ("", "v1", "pods"):
        return None
    return request.subresource


class StampingEmulator(kmock.KubernetesEmulator):
    async def _handle(self, request):
        try:
            return await self._handle_counted(request)
        finally:
            # kmock keeps every request for assertions and matches each new one against all of
            # them (quadratic: a long test slowed to seconds per request); nothing here asserts
            # on kmock's requests, so one is forgotten once answered.
            forget(self._requests, request)
            for payload in self._payloads:
                forget(payload._requests, request)

    async def _handle_counted(self, request):
        if request.url.path == LOG_PATH:
            if request.url.query.get("by") == "agent":
                return aiohttp.web.json_response({a: dict(c) for a, c in REQUESTS_BY_AGENT.items()})
            return aiohttp.web.json_response(dict(REQUESTS))
        if request.url.path == FAILURES_PATH:
            return aiohttp.web.json_response({k: n for k, n in FAILURES.counts.items() if n})
        if request.url.path == UNAVAILABLE_PATH:
            UNAVAILABLE.clear()
            UNAVAILABLE.update(r for r in request.url.query.getall("resource", []) if r)
            return aiohttp.web.json_response(sorted(UNAVAILABLE))
        if request.url.path == CUT_WATCHES_PATH:
            open_watches = list(WATCHES)
            for cut in open_watches:
                cut.set()
            return aiohttp.web.json_response({"cut": len(open_watches)})
        if request.url.path == WATCH_VERSIONS_PATH:
            return aiohttp.web.json_response(WATCH_VERSIONS)
        if request.url.path == BINDINGS_PATH:
            return aiohttp.web.json_response(BINDINGS)
        if request.url.path == SERVE_PYTORCH_PATH:
            for key, info in PYTORCH_RESOURCES.items():
                self.resources[key] = info
            return aiohttp.web.json_response(sorted(PYTORCH_RESOURCES))
        agent = header(request, "User-Agent")
        deleted_pod = None
        if agent != HARNESS_AGENT:
            method = str(getattr(request.method, "value", request.method)).upper()
            verb, resource = classify(method, request.url.path, request.url.query)
            REQUESTS[f"{verb} {resource}"] += 1
            REQUESTS_BY_AGENT[agent or "-"][f"{verb} {resource}"] += 1
            if verb == "watch":
                WATCH_VERSIONS[resource].append(request.url.query.get("resourceVersion", ""))
            if resource.split("/")[0] in UNAVAILABLE:
                return aiohttp.web.json_response({
                    "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                    "code": 503, "reason": "ServiceUnavailable",
                    "message": f"{resource} made unavailable by the test", "details": {},
                }, status=503)
            if verb == "delete" and resource == "pods":
                deleted_pod = live(self, "v1/pods", request.namespace, request.name)
        # Pod subresources kmock does not serve: pods/binding, and pods/status patched the way
        # the API server does (status only; strategic merge by the pod condition `type`).
        subresource = pod_subresource(request)
        if subresource == "binding":
            return await self._bind(request)
        if subresource == "status" and request.action == kmock.action.UPDATE:
            content_type = (header(request, "Content-Type") or "").split(";")[0].strip()
            if content_type in (STRATEGIC_MERGE, MERGE_PATCH):
                return await self._patch_pod_status(request, content_type == STRATEGIC_MERGE)
        writes = (kmock.action.CREATE, kmock.action.UPDATE)
        if request.resource is not None and request.action in writes and isinstance(request.data, dict):
            stamp(request.data)
            if request.action == kmock.action.CREATE:
                meta = request.data["metadata"]
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now())
                if request.namespace:
                    meta.setdefault("namespace", request.namespace)
        response = await super()._handle(request)
        if (request.action == kmock.action.CREATE and request.resource is not None
                and request.resource.plural == "pods" and request.resource.group == ""
                and isinstance(request.data, dict) and response.status < 300):
            meta = request.data.get("metadata") or {}
            POD_CREATED[meta.get("namespace"), meta.get("name")] = time.time()
        if deleted_pod is not None and live(self, "v1/pods", request.namespace, request.name) is None:
            # A client deleted a pod: a trainer of a Job that still wants its index fails.
            owner = controller_uid(deleted_pod)
            for job in owned(self, "batch/v1/jobs"):
                if job["metadata"].get("uid") == owner:
                    FAILURES.judge(job, deleted_pod)
        return response

    async def _bind(self, request):
        """`POST pods/NAME/binding`, as the API server's binding storage answers it."""
        namespace, name = request.namespace, request.name
        if str(getattr(request.method, "value", request.method)).upper() != "POST":
            return status_response(405, "MethodNotAllowed",
                                   "the server does not allow this method on the requested resource")
        binding = request_json(request)
        if not isinstance(binding, dict):
            return status_response(400, "BadRequest", "the body is not a JSON object")
        meta = binding.get("metadata") or {}
        if meta.get("namespace") not in (None, "", namespace):
            return status_response(400, "BadRequest", "the namespace of the provided object does "
                                   "not match the namespace sent on the request")
        if meta.get("name") != name:
            return status_response(400, "BadRequest",
                                   "name in URL does not match name in Binding object")
        target = binding.get("target") or {}
        causes = []
        if target.get("kind") not in (None, "", "Node"):
            causes.append({"reason": "FieldValueNotSupported", "field": "target.kind",
                           "message": f'Unsupported value: "{target.get("kind")}": '
                                      'supported values: "Node"'})
        if not target.get("name"):
            causes.append({"reason": "FieldValueRequired", "field": "target.name",
                           "message": "Required value"})
        if causes:
            summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
            return status_response(422, "Invalid", f'Binding "{name}" is invalid: {summary}',
                                   {"name": name, "kind": "Binding", "causes": causes})
        node = target["name"]
        async with self._lock:
            obj = self.objects._objects.get((request.resource, namespace, name))
            if obj is None or obj.deleted:
                return not_found("pods", name)
            pod = copy.deepcopy(obj.raw)
            conflict = f'Operation cannot be fulfilled on pods/binding "{name}": '
            if pod["metadata"].get("deletionTimestamp"):
                return status_response(409, "Conflict", conflict + f"pod {name} is being deleted, "
                                       "cannot be assigned to a host", {"name": name, "kind": "pods/binding"})
            bound_to = (pod.get("spec") or {}).get("nodeName")
            if bound_to:
                return status_response(409, "Conflict", conflict + f'pod {name} is already '
                                       f'assigned to node "{bound_to}"', {"name": name, "kind": "pods/binding"})
            pod.setdefault("spec", {})["nodeName"] = node
            set_condition(pod.setdefault("status", {}), {
                "type": "PodScheduled", "status": "True", "lastProbeTime": None,
                "lastTransitionTime": now(),
            })
            stamp(pod)
            obj.history.append(pod)
            await self._buses[request.resource].put({"type": "MODIFIED", "object": obj.raw})
        BINDINGS.append({
            "namespace": namespace, "name": name, "node": node,
            "created": POD_CREATED.get((namespace, name)), "bound": time.time(),
        })
        return status_response(201, None, None)

    async def _patch_pod_status(self, request, strategic):
        """`PATCH pods/NAME/status`: only `status` changes; a strategic merge patch merges
        `status.conditions` by `type`, a JSON merge patch replaces lists."""
        patch = request_json(request)
        if not isinstance(patch, dict):
            return status_response(400, "BadRequest", "the patch is not a JSON object")
        async with self._lock:
            obj = self.objects._objects.get((request.resource, request.namespace, request.name))
            if obj is None or obj.deleted:
                return not_found("pods", request.name)
            pod = copy.deepcopy(obj.raw)
            if "status" in patch:
                current = pod.get("status") or {}
                pod["status"] = (strategic_merge_status(current, patch["status"]) if strategic
                                 else json_merge(current, patch["status"]) if patch["status"] is not None
                                 else {})
            stamp(pod)
            obj.history.append(pod)
            raw = obj.raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)

    async def _serve_watch(self, request):
        # kmock's watch stream runs until the client goes; this one also ends (cleanly: kmock's
        # renderer then terminates the chunked body) once `/_harness/cut-watches` sets its event.
        cut = asyncio.Event()
        WATCHES.add(cut)
        stream = aiter(super()._serve_watch(request))
        cutting = asyncio.ensure_future(cut.wait())
        try:
            while True:
                step = asyncio.ensure_future(anext(stream))
                try:
                    await asyncio.wait({step, cutting}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not step.done():  # cut (or this response cancelled): stop the stream
                        step.cancel()
                        try:
                            await step
                        except (asyncio.CancelledError, StopAsyncIteration):
                            pass
                if step.cancelled():
                    return
                try:
                    item = step.result()
                except StopAsyncIteration:
                    return
                yield item
        finally:
            WATCHES.discard(cut)
            cutting.cancel()

    def _KubernetesEmulator__get_objs(self, request, strict):
        # kmock answers every request by scanning all stored objects (every kind, deleted ones
        # included); a request that names its object in a namespace (or, strictly, a
        # cluster-scoped one) is answered from the store's key instead: the same result in O(1),
        # which keeps the emulator responsive with thousands of objects.
        if request.name is not None and (strict or request.namespace is not None):
            obj = self.objects._objects.get((request.resource, request.namespace, request.name))
            return [] if obj is None else [obj]
        return super()._KubernetesEmulator__get_objs(request, strict)

    async def _render_error(self, exc):
        if isinstance(exc, kmock.KubernetesError) and exc.status in REASONS:
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "code": exc.status, "reason": REASONS[exc.status],
                "message": exc.message or repr(exc), "details": {},
            }, status=exc.status)
        return await super()._render_error(exc)


def seed(emulator, cpu, memory, pods, pytorch_crds=False, gpu=None):
    for key, info in RESOURCES.items():
        emulator.resources[key] = info
    if pytorch_crds:
        for key, info in PYTORCH_RESOURCES.items():
            emulator.resources[key] = info
    emulator.objects["scheduling.k8s.io/v1/priorityclasses", None, "high"] = stamp({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "high", "uid": "uid-pc-high"}, "value": 1000,
    })
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpu:
        allocatable["nvidia.com/gpu"] = gpu
    emulator.objects["v1/nodes", None, NODE] = stamp({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "uid": f"uid-{NODE}"},
        "status": {
            "allocatable": allocatable,
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


def pod_from(owner, name, index=None):
    """A pod of `owner`'s template. One for a scheduler the harness plays (no `schedulerName`, or
    one of PLAYED_SCHEDULERS) is created bound to the node and Running (scheduler + kubelet); one
    for any other scheduler is created pending (no `nodeName`, phase `Pending`) for that scheduler
    to bind."""
    template = owner["spec"]["template"]
    meta = template.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    if index is not None:
        annotations[COMPLETION_INDEX] = str(index)
    spec = dict(template["spec"])
    if not spec.get("schedulerName") or spec["schedulerName"] in PLAYED_SCHEDULERS:
        spec["nodeName"] = NODE
        status = running_status(spec, [])
    else:
        spec.pop("nodeName", None)
        status = {"phase": "Pending"}
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
        "status": status,
    }


def running_status(spec, conditions):
    """The status the kubelet reports for a started pod: Running and Ready, keeping the other
    `conditions` it had (such as `PodScheduled`)."""
    conditions = [c for c in conditions if c.get("type") != "Ready"]
    return {
        "phase": "Running",
        "conditions": conditions + [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
             "restartCount": 0, "started": True, "state": {"running": {"startedAt": now()}}}
            for c in spec.get("containers", [])
        ],
    }


def pending_bound(pod):
    """Whether a pod was bound (by a binding) but not started yet."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase", "Pending") == "Pending"


def ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class Controllers:
    """The ReplicaSet and Job controllers and the scheduler, as little as the test needs."""

    def __init__(self, emulator, url, period):
        self.emulator = emulator
        self.url = url
        self.period = period

    async def run(self, session):
        while True:
            try:
                await self.reconcile(session)
            except Exception as e:  # keep playing; the test's deadline catches a stuck cluster
                print(f"controllers: {e!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(self.period)

    async def call(self, session, method, path, body=None):
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with session.request(method, self.url + path, json=body, headers=headers) as r:
            if r.status >= 400 and r.status != 404:
                raise RuntimeError(f"{method} {path}: {r.status} {await r.text()}")

    async def sync_pods(self, session, owner, mine, names, wanted, on_delete=None):
        """Creates the pods named in `wanted` (name -> completion index or None) that are missing
        from the namespace's pod `names`, deletes the owner's other pods (`mine`: name -> pod)."""
        ns = owner["metadata"]["namespace"]
        created = []
        for name, index in wanted.items():
            if name not in names:
                pod = pod_from(owner, name, index)
                await self.call(session, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
                created.append(pod)
        for name in set(mine) - set(wanted):
            if on_delete is not None:
                on_delete(mine[name])
            await self.call(session, "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
        # The kubelet: a pod some scheduler bound since the last round starts, Running and Ready.
        for name, pod in mine.items():
            if name in wanted and pending_bound(pod):
                status = running_status(pod["spec"], (pod.get("status") or {}).get("conditions") or [])
                await self.call(session, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                                {"status": status})
        # How many of the wanted pods are not Ready: created pending, or pending before.
        return sum(not ready(p) for p in created) + sum(
            not ready(p) and not pending_bound(p) for n, p in mine.items() if n in wanted)

    async def reconcile(self, session):
        # One scan of the store: pods by controller uid and pod names by namespace.
        pods_of = collections.defaultdict(dict)
        names = collections.defaultdict(set)
        sets, jobs = [], []
        for (res, ns, name), obj in list(self.emulator.objects.items()):
            if obj.deleted:
                continue
            if res == "v1/pods":
                raw = obj.raw
                names[ns].add(name)
                uid = controller_uid(raw)
                if uid is not None:
                    pods_of[uid][name] = raw
            elif res in ("apps/v1/replicasets", "batch/v1/jobs"):
                raw = obj.raw
                if OWNED_LABEL in (raw.get("metadata", {}).get("labels") or {}):
                    (sets if res == "apps/v1/replicasets" else jobs).append(raw)

        for rs in sets:
            name, ns = rs["metadata"]["name"], rs["metadata"]["namespace"]
            replicas = rs["spec"].get("replicas", 1)
            wanted = {f"{name}-{i}": None for i in range(replicas)}
            unready = await self.sync_pods(session, rs, pods_of[rs["metadata"]["uid"]], names[ns], wanted)
            n = len(wanted)
            status = {"replicas": n, "readyReplicas": n - unready, "availableReplicas": n - unready}
            if rs.get("status") != status:
                await self.call(session, "PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}/status",
                                {"status": status})

        live_jobs = set()
        for job in jobs:
            await self.sync_job(session, job, pods_of[job["metadata"]["uid"]], names)
            live_jobs.add(job["metadata"]["uid"])
        for uid in set(FAILURES.seen) - live_jobs:
            del FAILURES.seen[uid]

    async def sync_job(self, session, job, mine, names):
        name, ns, uid = job["metadata"]["name"], job["metadata"]["namespace"], job["metadata"]["uid"]
        spec = job["spec"]
        # Pods that went away since the last look without being judged yet (nobody here deleted
        # them; a client's DELETE is judged on arrival).
        present = {pod["metadata"]["uid"] for pod in mine.values()}
        for pod_uid, pod in FAILURES.seen.get(uid, {}).items():
            if pod_uid not in present:
                if pod_uid in FAILURES.judged:
                    FAILURES.judged.discard(pod_uid)
                else:
                    FAILURES.judge(job, pod)
        FAILURES.seen[uid] = {pod["metadata"]["uid"]: pod for pod in mine.values()}

        failed = FAILURES.of(job)
        backoff_limit = spec.get("backoffLimit", 6)
        conditions = list((job.get("status") or {}).get("conditions") or [])
        failing = failed > backoff_limit or job_failed(job)
        if failing and not job_failed(job):
            conditions.append({
                "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": now(), "lastProbeTime": now(),
            })
        stopped = bool(spec.get("suspend")) or failing
        if stopped:
            count = 0
        else:
            parallelism = spec.get("parallelism", 1)
            count = min(parallelism, spec.get("completions", parallelism))
        wanted = {f"{name}-{i}": i for i in range(count)}
        # Pods this controller removes fail too while their index is below completions (but not
        # those of a suspended or failed Job): the kubelet kills them.
        unready = await self.sync_pods(session, job, mine, names[ns], wanted,
                                       on_delete=lambda pod: FAILURES.judge(job, pod, counts=not stopped))
        status = {"active": count, "ready": count - unready}
        if failed:
            status["failed"] = failed
        if conditions:
            status["conditions"] = conditions
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
    global NODE, PLAYED_SCHEDULERS
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--lifetime", type=float, default=120.0)
    parser.add_argument("--controllers", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--node-cpu", default="16", help="allocatable CPU of node-1")
    parser.add_argument("--node-memory", default="64Gi", help="allocatable memory of node-1")
    parser.add_argument("--node-pods", default="110", help="allocatable pods of node-1")
    parser.add_argument("--node-gpu", default=None, help="allocatable nvidia.com/gpu of node-1 (none by default)")
    parser.add_argument("--node-name", default="node-1", help="the node's name")
    parser.add_argument("--period", type=float, default=0.2,
                        help="seconds between two rounds of the fake controllers")
    parser.add_argument("--port", type=int, default=None,
                        help="serve on this port (a second emulator replacing a first one)")
    parser.add_argument("--schedulers", default=",".join(sorted(PLAYED_SCHEDULERS)),
                        help="comma-separated schedulers the harness plays: pods naming one of "
                             "them (or none) are created bound, others stay pending")
    parser.add_argument("--pytorch-crds", action="store_true",
                        help="also serve pytorchtrainingjobs (batch.tensorstack.dev/v1beta1) "
                             "and pytorchjobs (kubeflow.org/v1)")
    args = parser.parse_args()
    NODE = args.node_name
    PLAYED_SCHEDULERS = {name for name in args.schedulers.split(",") if name}

    emulator = StampingEmulator()
    seed(emulator, args.node_cpu, args.node_memory, args.node_pods, args.pytorch_crds, args.node_gpu)
    headers = {"User-Agent": HARNESS_AGENT}
    async with emulator, kmock.Server(emulator, port=args.port) as server, aiohttp.ClientSession(headers=headers) as session:
        url = str(server.url).rstrip("/")
        with open(args.kubeconfig, "w") as f:
            f.write(KUBECONFIG.format(url=url))
        tasks = []
        if args.controllers:
            tasks.append(asyncio.create_task(Controllers(emulator, url, args.period).run(session)))
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
