"""A small Kubernetes API on loopback for the daemon's end-to-end tests.

Runs kmock's KubernetesEmulator (PyPI `kmock` 0.8) seeded with the nodes (one roomy `node-1`, or
`--nodes FILE`) and the PriorityClass `high` (value 1000), with `--pytorch-crds` also serving the
PyTorchTrainingJob and PyTorchJob resources (discovery included), with `--jobset-crd` the JobSet
resource (`jobset.x-k8s.io/v1alpha2` jobsets, discovery included), writes two kubeconfigs pointing
at it, prints `READY <url>` and serves until stdin closes or `--lifetime` seconds pass (so it
never outlives a crashed test). The test itself applies the TrainingJob. Bad input (an RBAC file,
a `--nodes` file) is one line on stderr naming the file, object and field, and exit status 2,
before READY (conflicting flags: argparse's usage error, status 2 too). `--self-test` checks the RBAC evaluation, the request
classification, the fit and the Kueue model without a server (exit status 0 when every check passes).

Nodes: `node-1` by default, its allocatable (and capacity) set by `--node-cpu` (16),
`--node-memory` (64Gi), `--node-pods` (110), `--node-gpu` (`nvidia.com/gpu`, none) and its name
by `--node-name`; or `--nodes FILE`, a JSON list of Node objects (metadata with labels, spec with
taints and `unschedulable`, status with allocatable and capacity, extended resources included,
and conditions) seeded instead (it excludes the `--node-*` flags). Tests may create, patch and
delete nodes through the API as well; the fake scheduler uses the nodes of each moment.

Authentication and RBAC (on by default), as the API server enforces them:
- Kubeconfigs: `--kubeconfig PATH` gets the bearer token `trainscale-sa` with the context
  namespace `trainscale-system` (what the in-cluster config gives the daemon: its Lease lives
  there, where the Role grants it); `PATH.admin` gets the token `admin` with namespace `default`
  (for the test's own clients). Token `trainscale-sa` is the user
  `system:serviceaccount:trainscale-system:trainscale` (groups `system:serviceaccounts`,
  `system:serviceaccounts:trainscale-system`, `system:authenticated`); token `admin` is the user
  `admin` in `system:masters` (allowed everything). The fake controllers below use `admin`. A
  request with no or an unknown bearer token answers 401 `Unauthorized` (a Status).
- The policy: the RBAC objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding) of
  `deploy/rbac.yaml` and of every `deploy/components/*/rbac.yaml` (found from this script's
  location: the repository root is two levels up), or only those of the files given by
  repeatable `--rbac FILE`; other kinds in the files (ServiceAccount) are ignored. `--no-rbac`
  turns authentication and authorization off (every request allowed; `?by=user` then names the
  users of known tokens and `-` for the others). A Role or RoleBinding must name its namespace;
  `aggregationRule` is refused; a binding to a role that does not exist grants nothing. The RBAC
  objects are not served by the API.
- Evaluation, as the RBAC authorizer: `system:masters` may do anything; any authenticated user
  may GET the discovery and non-resource paths `/api`, `/api/...`, `/apis`, `/apis/...` that are
  not resources (`/api/v1`, `/apis/G`, `/apis/G/V`), `/version`, `/openapi/...`, `/healthz`,
  `/livez`, `/readyz` (system:discovery, system:public-info-viewer); otherwise a rule must grant
  the request: a ClusterRoleBinding grants its ClusterRole's rules cluster-wide, a RoleBinding
  its Role's (or a ClusterRole's) in the RoleBinding's namespace only (never a cluster-scoped
  request, such as a list of pods in all namespaces). Subjects: ServiceAccount (namespace and
  name), User, Group. A rule matches on `verbs` (`*` too), `apiGroups` (`*` too), `resources`:
  `*` (every resource and subresource), the exact `resource` or `resource/subresource`, or
  `*/subresource` (that subresource of any resource) — as in Kubernetes, `pods/*` is no wildcard
  and matches no request; `resourceNames` only when the request names an object (a create or an
  unnamed list never matches them); `nonResourceURLs` (exact, `*`, or a `prefix*`) with the
  lower-case HTTP method as verb.
- Verbs, as the API server classifies requests: GET of an object `get`, of a collection `list`,
  with `?watch=true` (or `1`) or a `/watch/` path `watch` (a named GET with `?watch=true` too);
  POST `create`, PUT `update`, PATCH `patch`, DELETE of an object `delete`, of a collection
  `deletecollection`. A list or watch whose field selector requires `metadata.name=X` (or `==`)
  names X, as the API server does.
- A denial answers 403 with the API server's Status, e.g.
  `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is
  forbidden: User \\"system:serviceaccount:trainscale-system:trainscale\\" cannot list resource
  \\"pods\\" in API group \\"\\" at the cluster scope","reason":"Forbidden","details":{"kind":
  "pods"},"code":403}`; namespaced: `... in the namespace "ns"`; a subresource: `cannot create
  resource "pods/binding" ...`; a named object: `pods "p" is forbidden: ...` and `details.name`;
  another group: `jobs.batch is forbidden: ...` and `details.group`; a non-resource path:
  `forbidden: User "u" cannot get path "/metrics"`. `GET /_harness/denied` answers every denial,
  in order, as a JSON list of `{"user", "verb", "group", "resource", "subresource",
  "namespace", "name"}` (an absent part is `""`).
- Requests to `/_harness/...` are neither authenticated nor authorized (they are the harness's,
  not the API server's). Authorization comes before the outages below (a denied request answers
  403 even for a resource made unavailable).

What it adds to kmock, playing the API server:
- kmock does not stamp resourceVersions; the kube-rs watcher needs one on every object, so every
  write (deletes too: the DELETED event carries a new one) is stamped here with an increasing
  resourceVersion;
- created objects get a `uid` and `creationTimestamp` when they have none (ownerReferences to a
  TrainingJob need its uid), `metadata.generation` 1, a name from `generateName` (five random
  hex characters appended), and the namespace of the URL when their body names none (kmock
  filters a namespaced watch by the object's own namespace, and a client may create an object
  without one, as the API server allows); a create whose body names another namespace than the URL answers 400
  `BadRequest`; a cluster-scoped object keeps no namespace. A create keeps the body's `status`
  (the API server resets it for pods, Jobs and custom resources with a status subresource; the
  fake controllers rely on creating pods Running);
- a missing object answers with the Status reason `NotFound` (a GET keeps kmock's message,
  `The object is not found ...`; writes and deletes say `jobs.batch "x" not found`) and a create
  of an existing one with `AlreadyExists` (`pods "x" already exists`), as the API server does
  (clients such as kube-rs `get_opt` key on the reasons); a create or a write of another
  subresource than `pods/binding`, `pods/eviction` and `/status` answers 405;
- writes (PUT `update`, PATCH `patch`; of an object or of its `/status`) are the harness's, not
  kmock's: a merge patch (`application/merge-patch+json`) is RFC 7386; a strategic merge patch
  merges the lists named `conditions` by `type` (`{"type": T, "$patch": "delete"}` removes one),
  ignores `$`-directives and replaces every other list; a JSON patch (RFC 6902) applies; a
  server-side apply patch (`application/apply-patch+yaml`) is taken as a merge patch (no field
  managers, so never an apply conflict); PUT replaces the object. A written object whose
  `metadata.resourceVersion` is set and differs from the stored one answers 409 `Conflict`
  (`Operation cannot be fulfilled on jobs.batch "x": the object has been modified; please apply
  your changes to the latest version and try again`, `details` name, group, kind); without one
  the write is unconditional. For a resource with a status subresource (nodes, pods,
  ReplicaSets, Jobs, TrainingJobs, PaddleJobs, the PyTorch kinds) a write of the object keeps
  the stored `status`, and a write of `/status` changes only `status`. A write never changes
  `name`, `namespace`, `uid`, `creationTimestamp` or `deletionTimestamp`; `generation` is bumped
  when `spec` changes (not by `/status`); a write that changes nothing stores nothing (no new
  resourceVersion, no watch event), as the API server. A write that empties the `finalizers` of
  an object being deleted removes it. Other subresources: `pods/binding` (below); `scale` of
  PyTorchJobs is listed in discovery but answers 405;
- DELETE of an object (a Lease too) removes it at once, or marks it with a `deletionTimestamp`
  while it has `finalizers`; `preconditions` of the DeleteOptions (uid, resourceVersion) are
  checked (409). Pods: with `--pod-grace S` (default 1; 0: every pod goes at once), a pod bound
  to a node and not Succeeded or Failed terminates first, as the API server's graceful deletion
  has it: `deletionGracePeriodSeconds` is the DeleteOptions' `gracePeriodSeconds`, else the
  pod's `terminationGracePeriodSeconds` (default 30), `deletionTimestamp` when that ends (a
  MODIFIED event); its kubelet removes it (DELETED) after that grace period or `S` seconds,
  whichever is less. A DELETE with `gracePeriodSeconds: 0` removes it at once (a force
  delete); another DELETE changes nothing; it cannot be bound (409). Simplified: its status is
  left as it was (a kubelet would mark it not Ready and end it `Failed` before the last
  DELETE), and the controllers below, whose pod names are fixed, bring its name back only once
  it is gone (as the Job controller with `podReplacementPolicy: Failed`, the default with a
  `podFailurePolicy`, waits; a ReplicaSet's replacement would not); `deletecollection` deletes every object of the URL's
  namespace (every namespace for a cluster-wide URL) matching `labelSelector` (`k=v`, `k==v`,
  `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`) and `fieldSelector` (`=`, `==`, `!=` on
  `metadata.name`, `metadata.namespace`, and for pods `status.phase`, `spec.nodeName`,
  `spec.schedulerName`; any other field answers 400 `field label not supported: F`) and answers
  the list of them (`<Kind>List`);
- list and watch ignore `labelSelector` and `fieldSelector` (kmock): every object of the
  namespace (or the cluster) comes. No garbage collector runs (children outlive a deleted
  owner).
Two shortcuts keep it fast over long or large tests without changing any answer: kmock keeps every
request it served and matches each new one against all of them, so a request is forgotten once
answered; and a request naming its object is answered by key instead of a scan of every stored
object.

What it plays besides, because the emulator runs no controllers (`--controllers`, on by default),
minimally and only for objects the operator creates (label `trainscale.io/job`), every
`--period` seconds (default 0.2):
- the ReplicaSet controller: pods `<rs>-<i>` for `spec.replicas`, then `status.replicas`,
  `readyReplicas`, `availableReplicas`; a pod that ended `Failed` is deleted and created again;
- the Job controller for Indexed Jobs: pods `<job>-<i>` with the completion-index annotation for
  every i < min(`spec.parallelism`, `spec.completions`), lowest missing index first, recreating an
  index whose pod went away or ended `Failed` (at once: the real controller waits 10 s, 20 s, ...
  between replacements); pods of other indexes are deleted; then `status.active` (the pods it
  wants), `status.ready`, `status.startTime` and, once a pod failed, `status.failed`. When
  `status.failed` exceeds `spec.backoffLimit` (default 6) the Job gets the condition `Failed`
  with reason `BackoffLimitExceeded` and loses its pods, as a real Job does. A Job whose
  `completions` is reached (`succeeded >= completions` with no pod active: pods never succeed
  here, so this is `completions: 0`) gets the conditions `SuccessCriteriaMet` and `Complete`
  (`True`, reason `CompletionsReached`), `status.succeeded` (written even when 0, which the API
  server would omit) and `completionTime`, and no more pods. A suspended Job (`spec.suspend`)
  has no pods (removed without counting as failures) and the condition `Suspended=True`
  (reason `JobSuspended`); lifting `suspend` sets it `False` (reason `JobResumed`), resets
  `startTime` and brings the pods back. A Complete or Failed Job stays so, whatever its spec
  becomes;
- the kube-scheduler (and the other schedulers of `--schedulers`, default `default-scheduler`,
  `volcano` and `scheduler-plugins-scheduler`: those the operator's `--podgroups` modes name):
  every pod these controllers create whose template names no `schedulerName`, or one of those,
  is created bound to the first node, in name order, where it fits (kube-scheduler scores the
  nodes, this does not), with `PodScheduled=True`, and Running and Ready (the kubelet). It fits
  a node that is not `spec.unschedulable` (unless the pod tolerates
  `node.kubernetes.io/unschedulable`), whose `NoSchedule` and `NoExecute` taints the pod
  tolerates, whose labels match the pod's `nodeSelector` and required node affinity (terms OR'ed,
  expressions AND'ed: In, NotIn, Exists, DoesNotExist, Gt, Lt; `matchFields` on
  `metadata.name`), and whose free `status.allocatable` holds the pod's requests: cpu, memory,
  every extended resource (`nvidia.com/gpu`) and one of `pods` (a resource the node does not
  list is 0). A pod's requests: its containers (a resource only limited is requested at its
  limit) plus its sidecars (init containers with `restartPolicy: Always`), or an ordinary init
  container with the sidecars before it when larger, plus `spec.overhead`. Every bound pod
  holds its requests (terminating ones too) but Succeeded and Failed ones. A pod that fits
  nowhere is created Pending (no `nodeName`) with `PodScheduled=False`, reason `Unschedulable`,
  message as kube-scheduler's (`0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had
  untolerated taint {dedicated: big}.`), and is tried again every round (bound through
  `pods/binding`, then started). A pod with `spec.schedulingGates` (its template's) is created
  Pending with `PodScheduled=False`, reason `SchedulingGated`, and left alone until its gates
  are gone (then tried as above). Pods created by clients are not scheduled by the harness.
  A pod whose template names any other scheduler (`trainscale`) is created pending: no
  `nodeName`, phase `Pending`, no conditions, for that scheduler to bind through `pods/binding`;
- the kubelet: once such a pod is bound, the next round admits it as the kubelet does, against
  what the node's admitted pods hold (itself and the bound pods not admitted yet excluded): when
  it does not fit, it ends `Failed` with `reason` `NodePorts` (a host port of it is held on the
  node: same protocol and port, same host IP or either `0.0.0.0`; terminating pods hold theirs)
  or `OutOf<resource>` (`OutOfcpu`, `OutOfmemory`,
  `OutOfnvidia.com/gpu`, `OutOfpods`; message `Pod was rejected: Node didn't have enough
  resource: cpu, requested: 1000, used: 15500, capacity: 16000`, cpu in millicores), or
  `NodeAffinity` (its node selector or affinity does not match), or `UntoleratedTaint` (a
  `NoExecute` taint; `NoSchedule` taints and `unschedulable` are the scheduler's concern), or
  `NodeNotFound`; else it starts (a merge patch of its status to Running and Ready, keeping
  `PodScheduled`). Bound pods of no owner, or of an owner no controller here plays (the
  PyTorch kinds' workers a test creates), are admitted or rejected the same way: one kubelet per
  node admits every pod bound there, one after another. The Job controller then counts the Failed pod as a failure (unless the Job's
  `podFailurePolicy` has an `Ignore` rule on a condition the pod carries) and replaces it.
  `GET /_harness/failed-pods` answers every pod that ended Failed, in order, as a JSON list of
  `{"namespace", "name", "reason", "node", "owner"}` (`owner`: the kind of its controller, or
  null).
  `status.ready` of a Job (`readyReplicas` of a ReplicaSet) counts the Ready pods only.
- the pod garbage collector: a pod bound to a node that does not exist (a Node deleted, as when
  a spot instance is reclaimed or the cluster autoscaler removes a node) ends `Failed` with the
  condition `DisruptionTarget=True`, reason `DeletionByPodGC`, once the node has been missing for
  1 s (kube-controller-manager waits 40 s); the trainer Jobs' `podFailurePolicy` ignores it, and
  the controllers above replace such a pod as any Failed one (a pod of no owner, or of an owner
  no controller here plays, is deleted). It sets no `status.reason`, so `/_harness/failed-pods`
  lists it with reason null;
- the JobSet controller (with `--jobset-crd`), with its ElasticJobSet feature gate on: for each
  JobSet, one child batch/v1 Job per replicated Job and replica, named `<jobset>-<rjob>-<i>`, made
  from the replicated Job's template, labelled `jobset.sigs.k8s.io/jobset-name`,
  `jobset.sigs.k8s.io/replicatedjob-name` and `jobset.sigs.k8s.io/job-index` (the Job and its pod
  template), controlled by the JobSet (ownerReference), suspended while the JobSet is; when a
  replicated Job's `template.spec.parallelism` or `completions` changes (kept equal, as the
  feature requires), its child Jobs' are patched to match. It writes no JobSet status and deletes
  no child Job. The Job controller above plays these child Jobs, and the Jobs that opt in to
  trainscale's elastic sizing (annotation `trainscale.io/min-replicas`), as the operator's;
These fake controllers write through the emulator's own HTTP API, so every change reaches the
watchers as a real watch event.

Pod failures of trainer Jobs. In a real cluster a running trainer pod that is deleted (by a client,
or by the Job controller itself when `parallelism` drops below the active count) is killed, ends
`Failed`, and the Job controller counts it in `status.failed` against `backoffLimit` when its
completion index is below `spec.completions`; a pod of an index >= completions (removed because
`completions` was lowered) is not counted. A pod stopped by a disruption carries the condition
`DisruptionTarget`, which the operator's `podFailurePolicy` ignores; a plain DELETE adds no such
condition, so it is counted; an eviction (`pods/eviction`, below) adds it. The harness counts the
same way, for the Jobs it plays the controller of: a trainer pod that goes away counts as one
failure of its Job when its index is below the Job's `completions` (else `parallelism`) at that
moment, whoever removed it (a `deletecollection` too), unless it carries a condition the Job's
`podFailurePolicy` ignores. A client's DELETE is judged when it arrives (the real controller
judges when the pod reaches `Failed`, seconds later; a client that deletes a pod and then lowers
`completions` is counted here, which is the stricter reading), or with `--pod-grace` when the
terminating pod is gone (by the Job's `completions` then); pods removed while the Job is
suspended, complete or failed are not counted. A pod that ends `Failed` (kubelet admission, or a
client's status write) counts once. `GET /_harness/failures` answers the counts as JSON
`{"<namespace>/<job>": n}` (Jobs without failures are absent).

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
  A pod with non-empty `spec.schedulingGates` cannot be bound: 409 Conflict (`pod NAME has
  non-empty .spec.schedulingGates`); `GET /_harness/gated-binds` answers each such refusal as
  `{"namespace", "name"}`. Logged as `create pods/binding`.
- `POST /api/v1/namespaces/NS/pods/NAME/eviction` with a `policy/v1 Eviction` body (what
  `kubectl drain` sends): 400 BadRequest when the body's name (or namespace) differs from the
  URL's; 404 NotFound when the pod does not exist; otherwise the pod gets the condition
  `DisruptionTarget=True` (reason `EvictionByEvictionAPI`; watchers see MODIFIED) and is deleted
  as by a DELETE (with the Eviction's `deleteOptions`; at once unless `--pod-grace`), and the
  answer is 201 with a `v1 Status`
  `status: Success`. A pod being deleted already is deleted without a new condition. No
  PodDisruptionBudget is served, so none is checked (the API server answers 429 when one allows
  no disruption). The Job controller below judges the evicted pod gone as a client's DELETE, and
  the trainer Jobs' `podFailurePolicy` ignores it. Logged as `create pods/eviction`.
- `PATCH /api/v1/namespaces/NS/pods/NAME/status`: a write of `/status` as above (a strategic
  merge patch merges `status.conditions` by `type`, a JSON merge patch replaces the list).
  Logged as `patch pods/status`.
`GET /_harness/bindings` answers every successful binding, in order, as a JSON list of
`{"namespace", "name", "node", "created", "bound", "user"}`: `created` is when the pod was
created (its create request answered) and `bound` when the binding was applied, both wall-clock
seconds since the epoch (`time.time()`, float; `created` is null for a pod the harness did not
see created); `user` is who bound it (`admin` for the harness's own scheduler).

Request log: every request from a client other than these fake controllers (the daemon, the test)
is counted by verb and resource (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
`deletecollection`; `pods`, `trainingjobs/status`, `pods/binding`, ...: a subresource is
`<resource>/<subresource>`; every non-resource path is `get nonresource`), whether it was
answered, denied or refused; `GET /_harness/requests` answers the counts as JSON
`{"<verb> <resource>": n}`, `GET /_harness/requests?by=agent` the same counts per User-Agent
header (`-` when a client sends none): `{"<agent>": {"<verb> <resource>": n}}`, and
`GET /_harness/requests?by=user` per authenticated user (`-` for a request without a known
token): `{"<user>": {"<verb> <resource>": n}}`. Requests to `/_harness/...` are not counted.

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

Compaction: `POST /_harness/compact` answers `{"compacted": "<rv>"}`, the last resourceVersion
given out; from then on a watch from an older resourceVersion (not `""` or `"0"`) answers one
`ERROR` event whose object is the API server's 410 Status (`reason: Expired`, `message: too old
resource version: <rv> (<compacted>)`) and ends, so the client lists again. Lists are not
affected.

Kueue (`--kueue`, off by default). The API also serves `kueue.x-k8s.io/v1beta2` resourceflavors
and clusterqueues (cluster-scoped), localqueues and workloads (namespaced), discovery included,
with a `status` subresource for clusterqueues, localqueues and workloads; tests create the
flavors and queues through the API (admin token). A client's write of them is checked as the
CRD schema and Kueue's webhooks check it: 422 Invalid naming the field (a ClusterQueue's
`resourceGroups`: non-empty `coveredResources`, each flavor listing them in order,
`nominalQuota` a non-negative quantity, `borrowingLimit` and `lendingLimit` only with a
`cohortName`; `queueingStrategy`; a LocalQueue's `clusterQueue`, required and immutable; a
Workload's `podSets`); an unknown field of a ClusterQueue's spec answers 400 `strict decoding
error: unknown field "spec.cohort"` (v1beta2 names it `cohortName`), as under
`fieldValidation=Strict`. Kueue's webhooks on batch/v1 Jobs apply to every client:
- on create, a Job labelled `kueue.x-k8s.io/queue-name` is stored with `spec.suspend: true`
  (tests may create it suspended or not), and an elastic one (annotation
  `kueue.x-k8s.io/elastic-job: "true"`) also with the scheduling gate
  `kueue.x-k8s.io/elastic-job` in its pod template, so every pod of it starts gated;
- refused with 403 Forbidden, `admission webhook "vjob.kb.io" denied the request: <field
  error>` (how the API server answers a validating webhook's denial): the elastic annotation
  together with `kueue.x-k8s.io/job-min-parallelism`; a change of the elastic annotation; a
  change of the queue label of a Job not suspended; a change of `spec.parallelism` of a Job
  with `job-min-parallelism` not suspended (`spec.parallelism: Forbidden: cannot change when
  partial admission is enabled and the job is not suspended`). A plain (non-elastic) Job's
  parallelism may change: Kueue does not refuse it, its Job reconciler requeues the Job.
Kueue's controllers play in the rounds of the fake controllers (after the Job controller), as
`admin`, for every Job labelled with a queue name (the Job controller above creates pods only
for those labelled `trainscale.io/job`):
- the Job reconciler: one Workload per Job, `job-<job>-<5 hex>` (sha1 of kind, group, name,
  uid and, for an elastic Job, its generation, as Kueue names them), label
  `kueue.x-k8s.io/job-uid`, a controller ownerReference to the Job (its uid), `spec.queueName`,
  `spec.podSets: [{name: main, count: min(parallelism, completions), template}]`,
  `spec.priority` (the value of the template's PriorityClass, with `priorityClassRef`); an
  elastic Job's carry the annotations `kueue.x-k8s.io/elastic-job` and
  `kueue.x-k8s.io/workload-slice-name` (the first slice's name). An elastic Job
  (EnsureWorkloadSlices): a parallelism increase while its Workload is admitted creates a new
  slice (annotation `kueue.x-k8s.io/workload-slice-replacement-for: <ns>/<old slice>`, count the
  new one), pending until the quota allows the increase; a decrease, or a change while not
  admitted, updates the count in place (`spec.podSets` and, admitted,
  `status.admission.podSetAssignments[].count` and `resourceUsage`: the quota comes back at
  once); of two admitted slices the older finishes `WorkloadSliceReplaced`, other strays
  `OutOfSync`. Another Job whose Workload's count no longer matches (its parallelism changed)
  has that Workload deleted and, running, is suspended (its template's node selector and
  tolerations restored), then requeued with a new Workload (the same name) and resumed when it
  is admitted. A Job `Complete` or `Failed` finishes its Workloads (`Finished=True`, reason
  `Succeeded` or `Failed`, the Job condition's message); a deleted Job's Workloads are deleted
  (the garbage collector's part, played for Workloads only);
- the scheduler: the pending Workloads (no `status.admission`, not finished, `spec.active` not
  false), by `spec.priority` then creation, each admitted when its ClusterQueue (its
  LocalQueue's) has the quota: for each resource group covering a requested resource, the first
  flavor (a replacement slice keeps its old slice's) where count × the pod's requests (as the
  scheduler adds them; `pods` only when covered) fit what the queue may use now: without a
  cohort `nominalQuota - usage`; in a cohort (`spec.cohortName`) what the cohort's nominal quota
  leaves unused (the members' nominalQuota minus their usage, summed), capped by `nominalQuota +
  borrowingLimit - usage` when the limit is set. A replacement slice needs room only for its
  increase. Admission writes `status.admission {clusterQueue, podSetAssignments: [{name,
  flavors, count, resourceUsage}]}` and the conditions `QuotaReserved` (reason `QuotaReserved`,
  `Quota reserved in ClusterQueue <cq>`) and `Admitted` (`Admitted`) True; the replaced slice
  gets `Finished=True`, reason `WorkloadSliceReplaced`. A Workload that does not fit gets
  `QuotaReserved=False` with Kueue's reason and message: `WaitingForQuota` (`couldn't assign
  flavors to pod set main: insufficient unused quota for cpu in flavor F, 2 more needed`),
  `ExceedsMaxQuota` (`... > maximum capacity (8)`: more than the queue could ever use),
  `NoMatchingFlavor` (`resource memory unavailable in ClusterQueue`), `Misconfigured`
  (`LocalQueue L doesn't exist`, `ClusterQueue C doesn't exist`, `workload namespace doesn't
  match ClusterQueue selector`) or `Suspended` (`ClusterQueue C is inactive`), and
  `Admitted=False` (`NoReservation`). An admitted Workload whose `spec.active` turns false is
  evicted (`Evicted=True`, reason `Deactivated`, `The workload is deactivated`; its admission
  and quota released, `QuotaReserved=False`) and its Job suspended; set true again, it queues
  again. A `StrictFIFO` queue admits nothing past its first Workload that does not fit;
  `BestEffortFIFO` (the default) goes on. As in Kueue, a ClusterQueue without
  `namespaceSelector` admits nothing: give `namespaceSelector: {}` (a selector is matched
  against the namespace's `kubernetes.io/metadata.name` label only). A ClusterQueue naming a
  flavor that does not exist, or with a `stopPolicy`, is inactive;
- the Job starter: a suspended Job whose newest Workload is admitted is unsuspended (its pod
  template given the assigned flavors' node labels, as node selector, and tolerations), also
  after a client suspended it (Kueue owns `suspend`: stop a Job by deactivating its Workload,
  or delete it); a running Job with a deactivated Workload, or non-elastic without an admitted
  one, is suspended;
- the elastic-job ungater: an elastic Job's gated pods are ungated (a patch removing the gate)
  up to the count its newest admitted slice grants, less the pods already ungated (Succeeded
  and Failed ones aside), lowest names first; the others stay gated, Pending;
- the queues' status: a ClusterQueue's `Active` condition (`Ready`; `FlavorNotFound`,
  `Stopped`), `flavorsReservation` and `flavorsUsage` (each flavor and resource of its spec:
  `total`, `borrowed` beyond nominal), `pendingWorkloads`, `reservingWorkloads` and
  `admittedWorkloads`; a LocalQueue's three counts.
Where it simplifies: no preemption (nor reclaim within a cohort), no fair sharing, no
`lendingLimit` (checked, not applied), no Cohort objects, no admission checks (a quota
reservation is the admission), no partial admission (`job-min-parallelism` is only checked:
admission is all or nothing), no PartialScaleUp, no waitForPodsReady, no `resource-in-use`
finalizer, no flavor fungibility (the first flavor that fits, borrowing or not), no other job
kinds than batch/v1 Jobs; a Workload a test creates itself is scheduled too. Amounts are
quantity strings: whole ones plain (`3`), fractions in millis (`1500m`), memory with the largest
binary suffix (`2Gi`). `GET /_harness/kueue` (404 without `--kueue`) answers `{"clusterQueues":
{"<cq>": {"cohort", "active", "inactive" (why, or null), "queueingStrategy", "nominal",
"usage", "borrowed" (each `{"<flavor>": {"<resource>": "<amount>"}}`), "admitted", "pending"
(`["<ns>/<workload>"]`)}}, "workloads": {"<ns>/<workload>": {"owner" (its controller's name, or
null), "ownerKind", "queue", "clusterQueue" (of its admission, or null), "count" (its spec's),
"active" (`spec.active`), "admitted" (holds quota now), "admittedCount" (its admission's, or null), "flavors"
(`{"<resource>": "<flavor>"}`), "finished" (the Finished reason, or null), "sliceOf" (the
`"<ns>/<workload>"` it replaces, or null), "pending" (the QuotaReserved=False message, or
null)}}}`. The daemon's requests for Kueue's objects go through RBAC like any
(deploy/components/kueue/rbac.yaml). `tests/e2e/kueue_check.py` drives all this live.
"""

import argparse
import asyncio
import collections
import copy
import datetime
import decimal
import hashlib
import itertools
import json
import os
import pathlib
import re
import sys
import time
import uuid

import aiohttp
import aiohttp.web
import jsonpatch
import kmock
import yaml

RESOURCES = {
    "v1/nodes": dict(namespaced=False, kind="Node", subresources={"status"}),
    "v1/pods": dict(namespaced=True, kind="Pod", subresources={"status", "binding", "eviction"}),
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
    "scheduling.x-k8s.io/v1alpha1/podgroups": dict(namespaced=True, kind="PodGroup"),
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

# The JobSet CRD, served with `--jobset-crd` (off by default), and the labels its controller puts
# on child Jobs and their pods.
JOBSET_RESOURCES = {
    "jobset.x-k8s.io/v1alpha2/jobsets": dict(
        namespaced=True, kind="JobSet", subresources={"status"},
        verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
    ),
}
JOBSET_KEY = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# The annotation by which a batch/v1 Job opts in to trainscale's elastic sizing: the harness's Job
# controller plays such Jobs.
ELASTIC_JOB_ANNOTATION = "trainscale.io/min-replicas"

# Discovery answers these verbs for every resource, so `kubectl get` and `kubectl describe` work
# against the emulator (it serves them all).
for _info in (*RESOURCES.values(), *PYTORCH_RESOURCES.values()):
    _info["verbs"] = {"create", "delete", "deletecollection", "get", "list", "patch", "update",
                      "watch"}


def resource_key(key):
    """(group, version, plural) of a RESOURCES key such as `v1/pods` or `batch/v1/jobs`."""
    parts = key.split("/")
    return ("", *parts) if len(parts) == 2 else tuple(parts)


SERVED = {resource_key(k): info for k, info in RESOURCES.items()}  # what the API serves now

NODE = "node-1"
OWNED_LABEL = "trainscale.io/job"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# Status reasons of the real API server, by code, for the object-level errors kmock raises.
REASONS = {404: "NotFound", 409: "AlreadyExists"}

# The schedulers the harness stands in for (`--schedulers`): a pod its fake controllers create
# that names one of them, or none, is placed by the harness; one naming any other scheduler
# (trainscale) stays pending for that scheduler to bind. Volcano's and scheduler-plugins' are
# played too: the operator names them with `--podgroups`, and the daemon's tests rely on those
# pods running.
PLAYED_SCHEDULERS = {"default-scheduler", "volcano", "scheduler-plugins-scheduler"}
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# Strategic-merge keys of the lists the harness merges by key (every other list in a strategic
# merge patch is replaced, as in a JSON merge patch).
STRATEGIC_MERGE_KEYS = {"conditions": "type"}

_versions = itertools.count(100)
LAST_VERSION = [99]  # the last resourceVersion given out
COMPACTED = [0]  # watches from a resourceVersion below this one end with 410 Expired

# The fake controllers' User-Agent: their requests are not logged.
HARNESS_AGENT = "kmock-cluster-harness"
LOG_PATH = "/_harness/requests"
FAILURES_PATH = "/_harness/failures"
FAILED_PODS_PATH = "/_harness/failed-pods"
GATED_BINDS_PATH = "/_harness/gated-binds"
DENIED_PATH = "/_harness/denied"
COMPACT_PATH = "/_harness/compact"
UNAVAILABLE_PATH = "/_harness/unavailable"
UNAVAILABLE = set()  # resources whose requests (but the fake controllers') answer 503
CUT_WATCHES_PATH = "/_harness/cut-watches"
WATCHES = set()  # one asyncio.Event per open watch response; setting it ends that response
WATCH_VERSIONS_PATH = "/_harness/watches"
WATCH_VERSIONS = collections.defaultdict(list)  # resource -> resourceVersion of each logged watch
REQUESTS = collections.Counter()
REQUESTS_BY_AGENT = collections.defaultdict(collections.Counter)
REQUESTS_BY_USER = collections.defaultdict(collections.Counter)
BINDINGS_PATH = "/_harness/bindings"
SERVE_PYTORCH_PATH = "/_harness/serve-pytorch-crds"  # starts serving PYTORCH_RESOURCES
POD_CREATED = {}  # (namespace, name) -> wall-clock time (time.time()) the live pod was created
BINDINGS = []  # one {namespace, name, node, created, bound, user} per successful binding
DENIED = []  # one {user, verb, group, resource, subresource, namespace, name} per 403
GATED_BINDS = []  # one {namespace, name} per binding refused because the pod is gated
FAILED_PODS = []  # one {namespace, name, reason, node} per pod that ended Failed
FAILED_UIDS = set()  # uids of the pods in FAILED_PODS
# The pod garbage collector's quarantine: a pod bound to a node that does not exist is collected
# once the node has been missing this long (kube-controller-manager waits 40 s).
ORPHAN_QUARANTINE_S = 1.0
ORPHANED_SINCE = {}  # pod uid -> when it was first seen bound to a missing node
# Graceful pod deletion (`--pod-grace S`): the most seconds a deleted pod stays terminating on its
# node before its kubelet removes it (0: removed at once); `main` sets it from the flag.
POD_GRACE_S = [0.0]
TERMINATING_UNTIL = {}  # pod uid -> when (time.monotonic()) its kubelet removes it


# ---------------------------------------------------------------------------------------------
# Authentication and RBAC.

SA_TOKEN = "trainscale-sa"
SA_NAMESPACE = "trainscale-system"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:trainscale"
ADMIN_TOKEN = "admin"
ANONYMOUS = "system:anonymous"


class User:
    """An authenticated user: name and groups."""

    def __init__(self, name, groups):
        self.name = name
        self.groups = frozenset(groups)

    def __repr__(self):
        return f"User({self.name!r})"


USERS = {
    SA_TOKEN: User(SA_USER, ("system:serviceaccounts", f"system:serviceaccounts:{SA_NAMESPACE}",
                             "system:authenticated")),
    ADMIN_TOKEN: User("admin", ("system:masters", "system:authenticated")),
}

# Non-resource paths every authenticated user may GET (the `system:discovery`,
# `system:basic-user` and `system:public-info-viewer` ClusterRoles): exact paths, and prefixes
# ending in `/`.
DISCOVERY_PATHS = {"/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi/v2"}
DISCOVERY_PREFIXES = ("/api/", "/apis/", "/openapi/")


class RbacError(Exception):
    """An RBAC object the harness cannot load: the message names the file, object and field."""


class Attributes:
    """What the API server authorizes of a request (its `authorizer.Attributes`)."""

    def __init__(self, verb, path, resource_request, group="", resource="", subresource="",
                 namespace="", name=""):
        self.verb = verb
        self.path = path
        self.resource_request = resource_request
        self.group = group
        self.resource = resource
        self.subresource = subresource
        self.namespace = namespace
        self.name = name

    def combined(self):
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


WATCH_TRUE = {"true", "1", "t", "True", "TRUE", "T"}


def field_requirements(selector):
    """`[(field, op, value)]` of a field selector (`op` `=` or `!=`; `==` is `=`)."""
    out = []
    for term in (t.strip() for t in (selector or "").split(",")):
        if not term:
            continue
        match = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", term)
        if match is None:
            raise ValueError(f"invalid field selector term {term!r}")
        field, op, value = match.groups()
        out.append((field.strip(), "=" if op == "==" else op, value.strip()))
    return out


def request_attributes(method, path, query):
    """The authorizer attributes of a request, classified as the API server's RequestInfo does:
    `get`/`list`/`watch` (GET; `watch` for `?watch=true` or a `/watch/` path), `create` (POST),
    `update` (PUT), `patch`, `delete` (named) or `deletecollection`; a list or watch whose field
    selector requires `metadata.name=X` names X. Paths outside `/api/v1/...` and `/apis/G/V/...`
    resources are non-resource requests (verb: the method, lower case)."""
    segs = [s for s in path.split("/") if s]
    if segs[:1] == ["api"] and len(segs) >= 2:
        group, rest = "", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 3:
        group, rest = segs[1], segs[3:]
    else:
        rest = []
    if not rest:
        return Attributes(method.lower(), path, False)
    watch = query.get("watch") in WATCH_TRUE
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace = rest[1]
        rest = rest[2:] if len(rest) > 2 else ["namespaces", namespace]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
            "GET": "get", "HEAD": "get"}.get(method, method.lower())
    if verb == "get" and watch:
        verb = "watch"
    elif verb == "get" and not name:
        verb = "list"
    if verb in ("list", "watch") and not name:
        try:
            for field, op, value in field_requirements(query.get("fieldSelector")):
                if field == "metadata.name" and op == "=":
                    name = value
        except ValueError:
            pass  # the request itself answers 400 later
    return Attributes(verb, path, True, group, resource, subresource, namespace, name)


def rule_allows(rule, attrs):
    """Whether one PolicyRule grants `attrs` (rbac/v1 evaluation_helpers: `*` verbs, groups and
    resources; `*/sub` matches a subresource of any resource; `resourceNames` only match a
    request that names one of them)."""
    if not any(v in ("*", attrs.verb) for v in rule["verbs"]):
        return False
    if not attrs.resource_request:
        for url in rule["nonResourceURLs"]:
            if url in ("*", attrs.path) or (url.endswith("*") and attrs.path.startswith(url.rstrip("*"))):
                return True
        return False
    if not any(g in ("*", attrs.group) for g in rule["apiGroups"]):
        return False
    combined = attrs.combined()
    resource_ok = any(
        r == "*" or r == combined or (attrs.subresource and r == f"*/{attrs.subresource}")
        for r in rule["resources"])
    if not resource_ok:
        return False
    return not rule["resourceNames"] or attrs.name in rule["resourceNames"]


def _strings(value, where, field, required=False):
    """A list of strings at `field` of `where`, or an RbacError."""
    if value is None:
        if required:
            raise RbacError(f"{where}: {field} is required")
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RbacError(f"{where}: {field} must be a list of strings, not {value!r}")
    return list(value)


class Rbac:
    """Roles, ClusterRoles and their bindings, evaluated as the API server's RBAC authorizer."""

    KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")

    def __init__(self):
        self.roles = {}  # (namespace, name) -> rules
        self.cluster_roles = {}  # name -> rules
        self.role_bindings = []  # (namespace, roleRef kind, roleRef name, subjects)
        self.cluster_role_bindings = []  # (roleRef name, subjects)
        self.seen = set()
        self.sources = []

    @classmethod
    def from_files(cls, paths):
        rbac = cls()
        for path in paths:
            rbac.load_file(path)
        return rbac

    def load_file(self, path):
        try:
            text = pathlib.Path(path).read_text()
        except OSError as e:
            raise RbacError(f"{path}: cannot read: {e.strerror}") from None
        self.load_text(text, str(path))

    def load_text(self, text, source):
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as e:
            raise RbacError(f"{source}: not YAML: {e}") from None
        self.sources.append(source)
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise RbacError(f"{source}: document {i + 1} is not a mapping")
            if doc.get("kind") in self.KINDS:
                self.add(doc, f"{source}: document {i + 1}")

    def add(self, obj, where):
        kind = obj["kind"]
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise RbacError(f"{where}: {kind}: metadata.name is required")
        where = f"{where}: {kind} {name}"
        if obj.get("apiVersion") != "rbac.authorization.k8s.io/v1":
            raise RbacError(f"{where}: apiVersion must be rbac.authorization.k8s.io/v1, not "
                            f"{obj.get('apiVersion')!r}")
        namespaced = kind in ("Role", "RoleBinding")
        namespace = meta.get("namespace")
        if namespaced and (not isinstance(namespace, str) or not namespace):
            raise RbacError(f"{where}: metadata.namespace is required (the harness applies no "
                            "default namespace)")
        key = (kind, namespace if namespaced else None, name)
        if key in self.seen:
            raise RbacError(f"{where}: defined twice")
        self.seen.add(key)
        if kind in ("Role", "ClusterRole"):
            if obj.get("aggregationRule") is not None:
                raise RbacError(f"{where}: aggregationRule is not supported by the harness")
            rules = self.rules(obj.get("rules"), where, cluster=kind == "ClusterRole")
            if namespaced:
                self.roles[namespace, name] = rules
            else:
                self.cluster_roles[name] = rules
        else:
            ref = obj.get("roleRef")
            if not isinstance(ref, dict):
                raise RbacError(f"{where}: roleRef is required")
            if ref.get("apiGroup") != "rbac.authorization.k8s.io":
                raise RbacError(f"{where}: roleRef.apiGroup must be rbac.authorization.k8s.io, "
                                f"not {ref.get('apiGroup')!r}")
            allowed = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
            if ref.get("kind") not in allowed:
                raise RbacError(f"{where}: roleRef.kind must be {' or '.join(allowed)}, not "
                                f"{ref.get('kind')!r}")
            if not isinstance(ref.get("name"), str) or not ref["name"]:
                raise RbacError(f"{where}: roleRef.name is required")
            subjects = self.subjects(obj.get("subjects"), where)
            if namespaced:
                self.role_bindings.append((namespace, ref["kind"], ref["name"], subjects))
            else:
                self.cluster_role_bindings.append((ref["name"], subjects))

    @staticmethod
    def rules(value, where, cluster):
        if value is None:
            return []
        if not isinstance(value, list):
            raise RbacError(f"{where}: rules must be a list")
        out = []
        for i, rule in enumerate(value):
            at = f"{where}: rules[{i}]"
            if not isinstance(rule, dict):
                raise RbacError(f"{at} is not a mapping")
            parsed = {
                "verbs": _strings(rule.get("verbs"), at, "verbs", required=True),
                "apiGroups": _strings(rule.get("apiGroups"), at, "apiGroups"),
                "resources": _strings(rule.get("resources"), at, "resources"),
                "resourceNames": _strings(rule.get("resourceNames"), at, "resourceNames"),
                "nonResourceURLs": _strings(rule.get("nonResourceURLs"), at, "nonResourceURLs"),
            }
            if not parsed["verbs"]:
                raise RbacError(f"{at}: verbs must not be empty")
            if parsed["nonResourceURLs"]:
                if not cluster:
                    raise RbacError(f"{at}: nonResourceURLs only belong in a ClusterRole")
                if parsed["resources"]:
                    raise RbacError(f"{at}: a rule has either resources or nonResourceURLs")
            elif not parsed["resources"]:
                raise RbacError(f"{at}: resources is required (or nonResourceURLs)")
            elif "apiGroups" not in rule:
                raise RbacError(f"{at}: apiGroups is required with resources")
            out.append(parsed)
        return out

    @staticmethod
    def subjects(value, where):
        if value is None:
            return []
        if not isinstance(value, list):
            raise RbacError(f"{where}: subjects must be a list")
        out = []
        for i, subject in enumerate(value):
            at = f"{where}: subjects[{i}]"
            if not isinstance(subject, dict):
                raise RbacError(f"{at} is not a mapping")
            kind, name = subject.get("kind"), subject.get("name")
            if kind not in ("ServiceAccount", "User", "Group"):
                raise RbacError(f"{at}: kind must be ServiceAccount, User or Group, not {kind!r}")
            if not isinstance(name, str) or not name:
                raise RbacError(f"{at}: name is required")
            if kind == "ServiceAccount":
                ns = subject.get("namespace")
                if not isinstance(ns, str) or not ns:
                    raise RbacError(f"{at}: namespace is required for a ServiceAccount")
                out.append(("User", f"system:serviceaccount:{ns}:{name}"))
            else:
                out.append((kind, name))
        return out

    @staticmethod
    def applies(subjects, user):
        return any((kind == "User" and name == user.name) or (kind == "Group" and name in user.groups)
                   for kind, name in subjects)

    def allows(self, user, attrs):
        """Whether `user` may do `attrs`: `system:masters` may do anything; authenticated users
        may GET the discovery paths; otherwise a rule of a role bound to the user must grant it
        (ClusterRoleBindings everywhere, RoleBindings in their namespace only)."""
        if "system:masters" in user.groups:
            return True
        if not attrs.resource_request and attrs.verb == "get" and \
                "system:authenticated" in user.groups and \
                (attrs.path in DISCOVERY_PATHS or attrs.path.startswith(DISCOVERY_PREFIXES)):
            return True
        for role, subjects in self.cluster_role_bindings:
            if self.applies(subjects, user) and \
                    any(rule_allows(r, attrs) for r in self.cluster_roles.get(role, [])):
                return True
        if not attrs.resource_request or not attrs.namespace:
            return False
        for namespace, kind, role, subjects in self.role_bindings:
            if namespace != attrs.namespace or not self.applies(subjects, user):
                continue
            rules = (self.roles.get((namespace, role), []) if kind == "Role"
                     else self.cluster_roles.get(role, []))
            if any(rule_allows(r, attrs) for r in rules):
                return True
        return False


def forbidden_status(user, attrs):
    """The API server's 403 Status for a denied request (ForbiddenStatusError)."""
    if not attrs.resource_request:
        message = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
        details = {}
    else:
        scope = (f'in the namespace "{attrs.namespace}"' if attrs.namespace
                 else "at the cluster scope")
        why = (f'User "{user.name}" cannot {attrs.verb} resource "{attrs.combined()}" in API '
               f'group "{attrs.group}" {scope}')
        qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
        message = (f'{qualified} "{attrs.name}" is forbidden: {why}' if attrs.name
                   else f"{qualified} is forbidden: {why}")
        details = {}
        if attrs.name:
            details["name"] = attrs.name
        if attrs.group:
            details["group"] = attrs.group
        details["kind"] = attrs.resource
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": "Forbidden", "details": details, "code": 403}


UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def default_rbac_files():
    """deploy/rbac.yaml and every deploy/components/*/rbac.yaml of this repository."""
    root = pathlib.Path(__file__).resolve().parents[2]
    return [root / "deploy" / "rbac.yaml",
            *sorted((root / "deploy" / "components").glob("*/rbac.yaml"))]


# ---------------------------------------------------------------------------------------------
# Quantities, pod requests and fit (kube-scheduler's filters, kubelet admission).

_SUFFIXES = {
    "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
    "n": decimal.Decimal("1e-9"), "u": decimal.Decimal("1e-6"), "m": decimal.Decimal("1e-3"),
    "": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18,
}


def quantity(value, where):
    """A Kubernetes quantity (`500m`, `1Gi`, `1e3`, a number) as a Decimal of its unit, or a
    ValueError naming `where`."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return decimal.Decimal(str(value))
    match = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?",
                         str(value).strip())
    if match is None:
        raise ValueError(f"{where}: not a quantity: {value!r}")
    number, suffix = match.group(1), match.group(2) or ""
    if suffix[:1] in ("e", "E") and suffix not in _SUFFIXES:
        return decimal.Decimal(number + suffix)
    return decimal.Decimal(number) * decimal.Decimal(_SUFFIXES[suffix])


def resource_map(values, where):
    """`{resource: Decimal}` of a requests/limits/allocatable map."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"{where}: not a map")
    return {k: quantity(v, f"{where}.{k}") for k, v in values.items()}


def container_requests(container, where):
    resources = container.get("resources") or {}
    requests = resource_map(resources.get("requests"), f"{where}.resources.requests")
    # The API server defaults a request to the limit when only the limit is set.
    for k, v in resource_map(resources.get("limits"), f"{where}.resources.limits").items():
        requests.setdefault(k, v)
    return requests


def _add(into, other):
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def pod_requests(pod):
    """A pod's requests as the scheduler and the kubelet add them (AggregateContainerRequests):
    the containers plus the restartable init containers (sidecars), or an ordinary init container
    with the sidecars started before it when larger, plus `spec.overhead`; and one `pods`."""
    name = (pod.get("metadata") or {}).get("name")
    spec = pod.get("spec") or {}
    total = {}
    for i, c in enumerate(spec.get("containers") or []):
        _add(total, container_requests(c, f"pod {name}: spec.containers[{i}]"))
    sidecars, init_max = {}, {}
    for i, c in enumerate(spec.get("initContainers") or []):
        requests = container_requests(c, f"pod {name}: spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _add(total, requests)
        else:
            with_sidecars = dict(sidecars)
            _add(with_sidecars, requests)
            for k, v in with_sidecars.items():
                init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, 0), v)
    _add(total, resource_map(spec.get("overhead"), f"pod {name}: spec.overhead"))
    total["pods"] = decimal.Decimal(1)
    return {k: v for k, v in total.items() if v}


_REQUESTS_SEEN = {}  # (uid, resourceVersion) -> pod_requests of that stored version


def stored_pod_requests(pod):
    """pod_requests of a stored pod, computed once per stored version."""
    meta = pod.get("metadata") or {}
    key = (meta.get("uid"), meta.get("resourceVersion"))
    if key[0] is None or key[1] is None:
        return pod_requests(pod)
    if key not in _REQUESTS_SEEN:
        if len(_REQUESTS_SEEN) > 50_000:
            _REQUESTS_SEEN.clear()
        _REQUESTS_SEEN[key] = pod_requests(pod)
    return _REQUESTS_SEEN[key]


def tolerates(taint, tolerations):
    """Whether a toleration of the list tolerates `taint` (key/operator/value/effect)."""
    for t in tolerations or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def expression_matches(expr, labels):
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_affinity_matches(pod, node):
    """`nodeSelector` and required node affinity (terms OR'ed, expressions AND'ed; `matchFields`
    on `metadata.name`)."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    fields = {"metadata.name": meta.get("name")}
    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        field_exprs = term.get("matchFields") or []
        if not exprs and not field_exprs:
            continue
        if all(expression_matches(e, labels) for e in exprs) and \
                all(expression_matches(e, fields) for e in field_exprs):
            return True
    return False


def untolerated_taint(pod, node, effects):
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in effects and not tolerates(taint, tolerations):
            return taint
    return None


def shortages(requests, allocatable, used):
    """Every resource the node lacks for `requests`, with the amounts: `[(resource, requested,
    used, allocatable)]`, in the order NodeResourcesFit checks them (pods, cpu, memory,
    ephemeral-storage, then the others by name)."""
    out = []
    order = {"pods": 0, "cpu": 1, "memory": 2, "ephemeral-storage": 3}
    for k in sorted(requests, key=lambda r: (order.get(r, 4), r)):
        have = allocatable.get(k, decimal.Decimal(0))
        if used.get(k, 0) + requests[k] > have:
            out.append((k, requests[k], used.get(k, 0), have))
    return out


def bound_node(pod):
    return (pod.get("spec") or {}).get("nodeName") or None


def terminal(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def terminating(pod):
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_grace_seconds(pod, grace):
    """The grace period the API server gives a deleted pod: the DeleteOptions' (`grace`), else
    its `spec.terminationGracePeriodSeconds` (default 30)."""
    if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0:
        return grace
    spec = pod.get("spec") or {}
    value = spec.get("terminationGracePeriodSeconds", 30)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 30


def pod_grace(pod, grace):
    """How long a deleted pod terminates here: 0 unless it is bound and not terminal (the API
    server deletes those at once), else its grace period capped at `--pod-grace`."""
    if not bound_node(pod) or terminal(pod):
        return 0
    return min(float(pod_grace_seconds(pod, grace)), POD_GRACE_S[0])


def grace_option(options):
    """`gracePeriodSeconds` of a DeleteOptions body, if it has one."""
    return options.get("gracePeriodSeconds") if isinstance(options, dict) else None


def amount_text(resource, value):
    """An amount as the kubelet prints it: cpu in millicores, others in units."""
    if resource == "cpu":
        value *= 1000
    return str(int(value.to_integral_value(rounding=decimal.ROUND_CEILING)))


class Placement:
    """The nodes and what the live pods hold on each (kube-scheduler's view: every bound pod
    that is not Succeeded or Failed; terminating pods included). Placing a pod adds it."""

    def __init__(self, nodes, pods, excluded=()):
        self.nodes = sorted(nodes, key=lambda n: n["metadata"]["name"])
        self.allocatable = {}
        for n in self.nodes:
            name = n["metadata"]["name"]
            try:
                self.allocatable[name] = resource_map(
                    (n.get("status") or {}).get("allocatable"), f"node {name}: status.allocatable")
            except ValueError as e:
                print(f"controllers: {e}", file=sys.stderr, flush=True)
                self.allocatable[name] = {}
        self.used = collections.defaultdict(dict)
        self.ports = collections.defaultdict(set)  # node -> {(protocol, hostIP, hostPort)}
        for pod in pods:
            node = bound_node(pod)
            if node is None or terminal(pod) or pod["metadata"].get("uid") in excluded:
                continue
            self.hold(pod, node)

    def hold(self, pod, node):
        try:
            _add(self.used[node], stored_pod_requests(pod))
        except ValueError as e:
            print(f"controllers: {e}", file=sys.stderr, flush=True)
        self.ports[node] |= host_ports(pod)

    def ports_conflict(self, pod, node):
        """Whether a host port of `pod` is held on `node` (kube-scheduler's NodePorts: same
        protocol and port, and the same host IP or either one `0.0.0.0`)."""
        held = self.ports[node]
        return any(protocol == p and port == q and (ip == i or "0.0.0.0" in (ip, i))
                   for protocol, ip, port in host_ports(pod) for p, i, q in held)

    def node(self, name):
        return next((n for n in self.nodes if n["metadata"]["name"] == name), None)

    def place(self, pod):
        """The first node, in name order, where the pod fits (`(name, None)`), or `(None,
        message)` saying why none does, as kube-scheduler's FailedScheduling message."""
        requests = pod_requests(pod)
        why = collections.Counter()
        for node in self.nodes:
            name = node["metadata"]["name"]
            spec = node.get("spec") or {}
            taint = untolerated_taint(pod, node, ("NoSchedule", "NoExecute"))
            if spec.get("unschedulable") and not tolerates(
                    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                    (pod.get("spec") or {}).get("tolerations")):
                why["node(s) were unschedulable"] += 1
            elif taint is not None:
                value = f": {taint['value']}" if taint.get("value") else ""
                why[f"node(s) had untolerated taint {{{taint.get('key')}{value}}}"] += 1
            elif not node_affinity_matches(pod, node):
                why["node(s) didn't match Pod's node affinity/selector"] += 1
            elif self.ports_conflict(pod, name):
                why["node(s) didn't have free ports for the requested pod ports"] += 1
            else:
                short = shortages(requests, self.allocatable[name], self.used[name])
                if not short:
                    _add(self.used[name], requests)
                    self.ports[name] |= host_ports(pod)
                    return name, None
                for resource, *_ in short:
                    why["Too many pods" if resource == "pods" else f"Insufficient {resource}"] += 1
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(why.items(), key=lambda x: x[0]))
        return None, f"0/{len(self.nodes)} nodes are available: {reasons}." if reasons else \
            "0/0 nodes are available."

    def admit(self, pod, name):
        """The kubelet's admission of `pod` on node `name`: None when it fits, else `(reason,
        message)` (`OutOf<resource>`, `NodeAffinity`, `UntoleratedTaint`, `NodePorts`,
        `NodeNotFound`)."""
        node = self.node(name)
        if node is None:
            return "NodeNotFound", f"Pod was rejected: node {name!r} not found"
        if not node_affinity_matches(pod, node):
            return "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed"
        taint = untolerated_taint(pod, node, ("NoExecute",))
        if taint is not None:
            return "UntoleratedTaint", (f"Pod was rejected: Predicate TaintToleration failed: "
                                        f"node(s) had untolerated taint {{{taint.get('key')}}}")
        if self.ports_conflict(pod, name):
            return "NodePorts", "Pod was rejected: Predicate NodePorts failed"
        requests = pod_requests(pod)
        short = shortages(requests, self.allocatable[name], self.used[name])
        if short:
            resource, want, used, have = short[0]
            return f"OutOf{resource}", (
                f"Pod was rejected: Node didn't have enough resource: {resource}, requested: "
                f"{amount_text(resource, want)}, used: {amount_text(resource, used)}, "
                f"capacity: {amount_text(resource, have)}")
        _add(self.used[name], requests)
        self.ports[name] |= host_ports(pod)
        return None


def host_ports(pod):
    """`{(protocol, hostIP, hostPort)}` a pod holds on its node: the `hostPort` of each port of
    its containers and init containers (with `hostNetwork`, every `containerPort`)."""
    spec = pod.get("spec") or {}
    host_network = bool(spec.get("hostNetwork"))
    out = set()
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for port in c.get("ports") or []:
            number = port.get("hostPort") or (port.get("containerPort") if host_network else None)
            if isinstance(number, int) and number > 0:
                out.add((port.get("protocol") or "TCP", port.get("hostIP") or "0.0.0.0", number))
    return out


# ---------------------------------------------------------------------------------------------
# Selectors (deletecollection).

def label_requirements(selector):
    """`[(key, op, values)]` of a label selector: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
    `k notin (a,b)`, `k`, `!k`; a ValueError when a term does not parse."""
    terms, depth, current = [], 0, ""
    for ch in selector or "":
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    out = []
    for term in (t.strip() for t in terms):
        if not term:
            continue
        if m := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term):
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            out.append((m.group(1), m.group(2), values))
        elif m := re.fullmatch(r"([\w./-]+)\s*(==|!=|=)\s*([\w./-]*)", term):
            out.append((m.group(1), "in" if m.group(2) != "!=" else "notin", {m.group(3)}))
        elif m := re.fullmatch(r"!\s*([\w./-]+)", term):
            out.append((m.group(1), "!", set()))
        elif m := re.fullmatch(r"([\w./-]+)", term):
            out.append((m.group(1), "exists", set()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return out


def labels_match(requirements, labels):
    for key, op, values in requirements:
        present = key in labels
        if op == "in" and not (present and labels[key] in values):
            return False
        if op == "notin" and present and labels[key] in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!" and present:
            return False
    return True


# Field selectors the harness evaluates, per resource (plural): metadata.name and
# metadata.namespace everywhere, and these.
FIELDS = {
    "pods": {"status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
             "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
             "spec.schedulerName": lambda o: (o.get("spec") or {}).get("schedulerName", "")},
}
COMMON_FIELDS = {"metadata.name": lambda o: (o.get("metadata") or {}).get("name", ""),
                 "metadata.namespace": lambda o: (o.get("metadata") or {}).get("namespace", "")}


def field_getters(plural, requirements):
    """The getter of each field of `requirements`, or a ValueError naming an unsupported one."""
    fields = {**COMMON_FIELDS, **FIELDS.get(plural, {})}
    out = []
    for field, op, value in requirements:
        if field not in fields:
            raise ValueError(f'field label not supported: {field}')
        out.append((fields[field], op, value))
    return out


def fields_match(getters, obj):
    return all((get(obj) == value) == (op == "=") for get, op, value in getters)


# ---------------------------------------------------------------------------------------------
# Objects.

def now(after_s=0):
    """The time, `after_s` seconds from now, as the API server writes timestamps."""
    at = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=after_s)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(obj):
    version = next(_versions)
    LAST_VERSION[0] = version
    obj.setdefault("metadata", {})["resourceVersion"] = str(version)
    return obj


def header(request, name):
    """A request header by case-insensitive name, or None."""
    name = name.lower()
    for key, value in request.headers.items():
        if str(key).lower() == name:
            return value
    return None


def method_of(request):
    return str(getattr(request.method, "value", request.method)).upper()


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


def condition_true(obj, kind):
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def job_failed(job):
    return condition_true(job, "Failed")


def job_complete(job):
    return condition_true(job, "Complete")


def ignored_by_policy(job, pod):
    """Whether the Job's `podFailurePolicy` has an `Ignore` rule on a condition the failed pod
    carries (the operator's rule on `DisruptionTarget`)."""
    conditions = {c.get("type") for c in (pod.get("status") or {}).get("conditions") or []
                  if c.get("status") == "True"}
    for rule in ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []:
        if rule.get("action") == "Ignore" and any(
                p.get("type") in conditions for p in rule.get("onPodConditions") or []):
            return True
    return False


class Failures:
    """Trainer pod failures by Job, judged as the Job controller counts them (module docstring)."""

    def __init__(self):
        self.counts = collections.Counter()  # "<ns>/<job>" -> failures
        self.judged = set()  # uids of pods whose going away was judged already
        self.seen = {}  # Job uid -> {pod uid: pod} at the last reconcile

    def judge(self, job, pod, counts=True):
        """Judges `pod` (of `job`) gone: a failure if `counts` and the Job still wanted its index,
        unless the Job is suspended, complete or failed."""
        self.judged.add(pod["metadata"].get("uid"))
        spec = job.get("spec") or {}
        if not counts or spec.get("suspend") or job_failed(job) or job_complete(job):
            return
        if ignored_by_policy(job, pod):
            return
        index = completion_index(pod)
        wanted = spec.get("completions", spec.get("parallelism", 1))
        if index is not None and index < wanted:
            self.counts[f"{job['metadata']['namespace']}/{job['metadata']['name']}"] += 1

    def failed(self, job, pod):
        """A pod of `job` that ended Failed: one failure unless the Job's podFailurePolicy
        ignores it."""
        self.judged.add(pod["metadata"].get("uid"))
        if not ignored_by_policy(job, pod):
            self.counts[f"{job['metadata']['namespace']}/{job['metadata']['name']}"] += 1

    def of(self, job):
        return self.counts[f"{job['metadata']['namespace']}/{job['metadata']['name']}"]


FAILURES = Failures()


def record_failed(pod):
    """Adds a Failed pod to `/_harness/failed-pods` (once)."""
    uid = pod["metadata"].get("uid")
    if uid in FAILED_UIDS:
        return
    FAILED_UIDS.add(uid)
    owner = next((r.get("kind") for r in pod["metadata"].get("ownerReferences") or []
                  if r.get("controller")), None)
    FAILED_PODS.append({
        "namespace": pod["metadata"].get("namespace"), "name": pod["metadata"].get("name"),
        "reason": (pod.get("status") or {}).get("reason"), "node": bound_node(pod),
        "owner": owner,
    })


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


def posted_subresource(request, kind):
    """The body of a POST to a pod subresource taking a `kind` object (`Binding`, `Eviction`), or
    the API server's refusal: 405 for another method, 400 for a body that is no object or names
    another object than the URL."""
    if method_of(request) != "POST":
        return None, status_response(405, "MethodNotAllowed",
                                     "the server does not allow this method on the requested "
                                     "resource")
    body = request_json(request)
    if not isinstance(body, dict):
        return None, bad_request("the body is not a JSON object")
    meta = body.get("metadata") or {}
    if meta.get("namespace") not in (None, "", request.namespace):
        return None, bad_request("the namespace of the provided object does not match the "
                                 "namespace sent on the request")
    if meta.get("name") != request.name:
        return None, bad_request(f"name in URL does not match name in {kind} object")
    return body, None


def qualified(group, plural):
    return f"{plural}.{group}" if group else plural


def not_found(group, plural, name):
    return status_response(404, "NotFound", f'{qualified(group, plural)} "{name}" not found',
                           {"name": name, **({"group": group} if group else {}), "kind": plural})


def conflict(group, plural, name):
    return status_response(
        409, "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        {"name": name, **({"group": group} if group else {}), "kind": plural})


def bad_request(message):
    return status_response(400, "BadRequest", message)


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


def strategic_merge(target, patch):
    """A strategic merge patch, as far as the harness plays it: lists named in
    STRATEGIC_MERGE_KEYS (`conditions`) merged by their key, `$`-directives ignored, the rest a
    JSON merge patch (other lists replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        elif key in STRATEGIC_MERGE_KEYS and isinstance(value, list):
            out[key] = merge_by_key(out.get(key), value, STRATEGIC_MERGE_KEYS[key])
        else:
            out[key] = strategic_merge(out.get(key), value)
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


def without_version(obj):
    out = copy.deepcopy(obj)
    (out.get("metadata") or {}).pop("resourceVersion", None)
    return out


class StampingEmulator(kmock.KubernetesEmulator):
    rbac = None  # an Rbac to enforce, or None (`--no-rbac`)

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

    def _harness_answer(self, request):
        """The answer to a `/_harness/...` request, or None for any other path."""
        path = request.url.path
        if path == LOG_PATH:
            by = request.url.query.get("by")
            if by == "agent":
                return aiohttp.web.json_response({a: dict(c) for a, c in REQUESTS_BY_AGENT.items()})
            if by == "user":
                return aiohttp.web.json_response({u: dict(c) for u, c in REQUESTS_BY_USER.items()})
            return aiohttp.web.json_response(dict(REQUESTS))
        if path == FAILURES_PATH:
            return aiohttp.web.json_response({k: n for k, n in FAILURES.counts.items() if n})
        if path == FAILED_PODS_PATH:
            return aiohttp.web.json_response(FAILED_PODS)
        if path == GATED_BINDS_PATH:
            return aiohttp.web.json_response(GATED_BINDS)
        if path == DENIED_PATH:
            return aiohttp.web.json_response(DENIED)
        if path == COMPACT_PATH:
            COMPACTED[0] = LAST_VERSION[0]
            return aiohttp.web.json_response({"compacted": str(COMPACTED[0])})
        if path == UNAVAILABLE_PATH:
            UNAVAILABLE.clear()
            UNAVAILABLE.update(r for r in request.url.query.getall("resource", []) if r)
            return aiohttp.web.json_response(sorted(UNAVAILABLE))
        if path == CUT_WATCHES_PATH:
            open_watches = list(WATCHES)
            for cut in open_watches:
                cut.set()
            return aiohttp.web.json_response({"cut": len(open_watches)})
        if path == WATCH_VERSIONS_PATH:
            return aiohttp.web.json_response(WATCH_VERSIONS)
        if path == BINDINGS_PATH:
            return aiohttp.web.json_response(BINDINGS)
        if path == KUEUE_PATH:
            return kueue_answer(self)
        if path == SERVE_PYTORCH_PATH:
            for key, info in PYTORCH_RESOURCES.items():
                self.resources[key] = info
                SERVED[resource_key(key)] = info
            return aiohttp.web.json_response(sorted(PYTORCH_RESOURCES))
        return None

    def _user(self, request):
        """The user of the request's bearer token: None when it is missing or unknown."""
        auth = header(request, "Authorization") or ""
        scheme, _, token = auth.partition(" ")
        return USERS.get(token.strip()) if scheme.lower() == "bearer" else None

    async def _handle_counted(self, request):
        answer = self._harness_answer(request)
        if answer is not None:
            return answer
        agent = header(request, "User-Agent")
        method = method_of(request)
        attrs = request_attributes(method, request.url.path, request.url.query)
        user = self._user(request)
        if agent != HARNESS_AGENT:
            key = f"{attrs.verb} {attrs.combined()}" if attrs.resource_request else "get nonresource"
            REQUESTS[key] += 1
            REQUESTS_BY_AGENT[agent or "-"][key] += 1
            REQUESTS_BY_USER[user.name if user else "-"][key] += 1
            if attrs.verb == "watch":
                WATCH_VERSIONS[attrs.combined()].append(request.url.query.get("resourceVersion", ""))
        if self.rbac is not None:
            if user is None:
                return aiohttp.web.json_response(UNAUTHORIZED, status=401)
            if not self.rbac.allows(user, attrs):
                DENIED.append({"user": user.name, "verb": attrs.verb, "group": attrs.group,
                               "resource": attrs.resource, "subresource": attrs.subresource,
                               "namespace": attrs.namespace, "name": attrs.name})
                return aiohttp.web.json_response(forbidden_status(user, attrs), status=403)
        if agent != HARNESS_AGENT and attrs.resource_request and attrs.resource in UNAVAILABLE:
            return status_response(503, "ServiceUnavailable",
                                   f"{attrs.combined()} made unavailable by the test")
        info = SERVED.get((attrs.group, request.resource.version, attrs.resource)) \
            if attrs.resource_request and request.resource is not None else None
        if info is None or attrs.verb in ("get", "list", "watch"):
            return await super()._handle(request)
        judge = agent != HARNESS_AGENT  # a client's pod deletions count as failures
        if attrs.subresource and attrs.subresource not in info.get("subresources", set()):
            return not_found(attrs.group, f"{attrs.resource}/{attrs.subresource}", attrs.name)
        if attrs.subresource == "binding":
            return await self._bind(request, user)
        if attrs.subresource == "eviction":
            return await self._evict(request, attrs, judge)
        if attrs.subresource not in ("", "status") or (attrs.subresource and attrs.verb == "create"):
            return status_response(405, "MethodNotAllowed", f"the harness does not serve "
                                   f"{attrs.verb} {attrs.combined()}")
        if attrs.verb == "create":
            return await self._create(request, info)
        if attrs.verb in ("update", "patch"):
            return await self._write(request, attrs, info)
        if attrs.verb == "delete":
            return await self._delete(request, attrs, judge)
        if attrs.verb == "deletecollection":
            return await self._delete_collection(request, attrs, info, judge)
        return await super()._handle(request)

    async def _create(self, request, info):
        body = request.data
        if not isinstance(body, dict):
            return bad_request("the body is not a JSON object")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            return bad_request("metadata is not an object")
        if info.get("namespaced"):
            if meta.get("namespace") not in (None, "", request.namespace):
                return bad_request("the namespace of the provided object does not match the "
                                   "namespace sent on the request")
            if request.namespace:
                meta["namespace"] = request.namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            return status_response(422, "Invalid", "metadata.name: Required value: name or "
                                   "generateName is required")
        refused = kueue_admission(request.resource.plural, request.resource.group, body)
        if refused is not None:
            return refused
        key = f"{request.resource.group}/{request.resource.version}/{request.resource.plural}" \
            if request.resource.group else f"{request.resource.version}/{request.resource.plural}"
        if live(self, key, meta.get("namespace"), meta["name"]) is not None:
            group = request.resource.group
            return status_response(
                409, "AlreadyExists",
                f'{qualified(group, request.resource.plural)} "{meta["name"]}" already exists',
                {"name": meta["name"], **({"group": group} if group else {}),
                 "kind": request.resource.plural})
        meta.pop("resourceVersion", None)
        stamp(body)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        meta["generation"] = 1
        response = await super()._handle(request)
        if request.resource.plural == "pods" and request.resource.group == "" and response.status < 300:
            POD_CREATED[meta.get("namespace"), meta.get("name")] = time.time()
        return response

    def _patched(self, request, attrs, current):
        """The object a PUT or PATCH asks for (before the subresource rules), or a response."""
        content_type = (header(request, "Content-Type") or "").split(";")[0].strip()
        body = request_json(request)
        if body is None and content_type == APPLY_PATCH:
            try:
                body = yaml.safe_load(request.body or b"")
            except yaml.YAMLError:
                body = None
        if attrs.verb == "update":
            return body if isinstance(body, dict) else bad_request("the body is not a JSON object")
        if content_type == JSON_PATCH:
            if not isinstance(body, list):
                return bad_request("a JSON patch is a list of operations")
            try:
                return jsonpatch.apply_patch(current, body, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                return status_response(422, "Invalid", f"the JSON patch does not apply: {e}")
        if not isinstance(body, dict):
            return bad_request("the patch is not a JSON object")
        if content_type == STRATEGIC_MERGE:
            return strategic_merge(current, body)
        if content_type in (MERGE_PATCH, APPLY_PATCH):
            return json_merge(current, body)
        return status_response(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format - accepted "
                               f"media types include: {JSON_PATCH}, {MERGE_PATCH}, "
                               f"{APPLY_PATCH}, {STRATEGIC_MERGE}")

    async def _write(self, request, attrs, info):
        """PUT or PATCH of an object or its `status`: 409 on a stale `resourceVersion`; a write
        of the object keeps its status when the resource has a status subresource, a write of
        `/status` changes only the status; `generation` is bumped when `spec` changes; a write
        that changes nothing stores nothing."""
        has_status = "status" in info.get("subresources", set())
        async with self._lock:
            obj = self.objects._objects.get((request.resource, request.namespace, request.name))
            if obj is None or obj.deleted:
                return not_found(attrs.group, attrs.resource, attrs.name)
            current = copy.deepcopy(obj.raw)
            wanted = self._patched(request, attrs, current)
            if isinstance(wanted, aiohttp.web.StreamResponse):
                return wanted
            stored_rv = (current.get("metadata") or {}).get("resourceVersion")
            asked_rv = (wanted.get("metadata") or {}).get("resourceVersion") \
                if isinstance(wanted.get("metadata"), dict) else None
            if asked_rv and asked_rv != stored_rv:
                return conflict(attrs.group, attrs.resource, attrs.name)
            if attrs.subresource == "status":
                new = copy.deepcopy(current)
                if wanted.get("status") is None:
                    new.pop("status", None)
                else:
                    new["status"] = wanted["status"]
            else:
                new = wanted
                if has_status:
                    if current.get("status") is None:
                        new.pop("status", None)
                    else:
                        new["status"] = current["status"]
                meta = new.setdefault("metadata", {})
                if not isinstance(meta, dict):
                    return bad_request("metadata is not an object")
                old_meta = current.get("metadata") or {}
                for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
                    if key in old_meta:
                        meta[key] = old_meta[key]
                    else:
                        meta.pop(key, None)
                meta["generation"] = old_meta.get("generation", 1) + (
                    new.get("spec") != current.get("spec"))
                refused = kueue_admission(attrs.resource, attrs.group, new, current)
                if refused is not None:
                    return refused
            if without_version(new) == without_version(current):
                return aiohttp.web.json_response(current)
            stamp(new)
            meta = new["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                obj.history.append(new)
                obj.delete()
                await self._buses[request.resource].put({"type": "DELETED", "object": new})
                return aiohttp.web.json_response(new)
            obj.history.append(new)
            raw = obj.raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)

    async def _remove(self, resource, obj, grace=None):
        """Deletes a stored object (under the lock): marked with a deletionTimestamp while it has
        finalizers or, for a pod, while it terminates (`pod_grace`: `grace` is the DeleteOptions'
        `gracePeriodSeconds`), else gone (a DELETED event with a new resourceVersion). The last
        state."""
        current = copy.deepcopy(obj.raw)
        meta = current.setdefault("metadata", {})
        if resource == "v1/pods" and meta.get("deletionTimestamp") and grace != 0:
            return current  # terminating already: a DELETE without grace 0 changes nothing
        wait = pod_grace(current, grace) if resource == "v1/pods" else 0
        if wait > 0 and not meta.get("deletionTimestamp"):
            # The API server's: when the grace period it gives ends (this kubelet may end sooner).
            meta["deletionGracePeriodSeconds"] = pod_grace_seconds(current, grace)
            meta["deletionTimestamp"] = now(meta["deletionGracePeriodSeconds"])
            TERMINATING_UNTIL[meta.get("uid")] = time.monotonic() + wait
            stamp(current)
            obj.history.append(current)
            await self._buses[resource].put({"type": "MODIFIED", "object": current})
            return current
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now()
                stamp(current)
                obj.history.append(current)
                await self._buses[resource].put({"type": "MODIFIED", "object": current})
            return current
        stamp(current)
        obj.history.append(current)
        obj.delete()
        TERMINATING_UNTIL.pop(meta.get("uid"), None)
        await self._buses[resource].put({"type": "DELETED", "object": current})
        return current

    def _judge_deleted_pod(self, pod):
        """A client deleted a pod: a trainer of a Job that still wants its index fails."""
        owner = controller_uid(pod)
        for job in owned(self, "batch/v1/jobs"):
            if job["metadata"].get("uid") == owner:
                FAILURES.judge(job, pod)

    async def _delete(self, request, attrs, judge):
        options = request_json(request)
        preconditions = (options or {}).get("preconditions") if isinstance(options, dict) else None
        async with self._lock:
            obj = self.objects._objects.get((request.resource, request.namespace, request.name))
            if obj is None or obj.deleted:
                return not_found(attrs.group, attrs.resource, attrs.name)
            meta = obj.raw.get("metadata") or {}
            for field in ("uid", "resourceVersion"):
                want = (preconditions or {}).get(field)
                if want and want != meta.get(field):
                    return status_response(
                        409, "Conflict",
                        f'Operation cannot be fulfilled on {qualified(attrs.group, attrs.resource)} '
                        f'"{attrs.name}": Precondition failed: {field}: {want}, {field} in object '
                        f"meta: {meta.get(field)}",
                        {"name": attrs.name, "kind": attrs.resource})
            last = await self._remove(request.resource, obj, grace_option(options))
        if judge and attrs.resource == "pods" and attrs.group == "" and obj.deleted:
            self._judge_deleted_pod(last)
        return aiohttp.web.json_response(last)

    async def _delete_collection(self, request, attrs, info, judge):
        """`deletecollection`: every object of the namespace (or the cluster) matching the label
        and field selectors is deleted; the answer lists them."""
        query = request.url.query
        try:
            labels = label_requirements(query.get("labelSelector"))
            fields = field_getters(attrs.resource, field_requirements(query.get("fieldSelector")))
        except ValueError as e:
            return bad_request(str(e))
        grace = grace_option(request_json(request))
        deleted, gone = [], []
        async with self._lock:
            for (res, ns, _name), obj in list(self.objects._objects.items()):
                if res != request.resource or obj.deleted:
                    continue
                if info.get("namespaced") and attrs.namespace and ns != attrs.namespace:
                    continue
                raw = obj.raw
                if not labels_match(labels, (raw.get("metadata") or {}).get("labels") or {}):
                    continue
                if not fields_match(fields, raw):
                    continue
                last = await self._remove(request.resource, obj, grace)
                deleted.append(last)
                if obj.deleted:
                    gone.append(last)
        if judge and attrs.resource == "pods" and attrs.group == "":
            for pod in gone:
                self._judge_deleted_pod(pod)
        kind = info.get("kind", "")
        version = request.resource.version
        return aiohttp.web.json_response({
            "apiVersion": f"{attrs.group}/{version}" if attrs.group else version,
            "kind": f"{kind}List", "metadata": {"resourceVersion": str(LAST_VERSION[0])},
            "items": deleted,
        })

    async def _evict(self, request, attrs, judge):
        """`POST pods/NAME/eviction`, as the API server's eviction storage answers it (no
        PodDisruptionBudget is served here, so none is checked)."""
        namespace, name = request.namespace, request.name
        eviction, refused = posted_subresource(request, "Eviction")
        if refused is not None:
            return refused
        async with self._lock:
            obj = self.objects._objects.get((request.resource, namespace, name))
            if obj is None or obj.deleted:
                return not_found("", "pods", name)
            pod = copy.deepcopy(obj.raw)
            if not pod["metadata"].get("deletionTimestamp"):
                set_condition(pod.setdefault("status", {}), {
                    "type": "DisruptionTarget", "status": "True",
                    "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
                    "lastProbeTime": None, "lastTransitionTime": now(),
                })
                stamp(pod)
                obj.history.append(pod)
                await self._buses[request.resource].put({"type": "MODIFIED", "object": obj.raw})
            last = await self._remove(request.resource, obj,
                                      grace_option((eviction or {}).get("deleteOptions")))
        if judge and obj.deleted:
            self._judge_deleted_pod(last)
        return status_response(201, None, None)

    async def _bind(self, request, user):
        """`POST pods/NAME/binding`, as the API server's binding storage answers it."""
        namespace, name = request.namespace, request.name
        binding, refused = posted_subresource(request, "Binding")
        if refused is not None:
            return refused
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
                return not_found("", "pods", name)
            pod = copy.deepcopy(obj.raw)
            conflicting = f'Operation cannot be fulfilled on pods/binding "{name}": '
            if pod["metadata"].get("deletionTimestamp"):
                return status_response(409, "Conflict", conflicting + f"pod {name} is being "
                                       "deleted, cannot be assigned to a host",
                                       {"name": name, "kind": "pods/binding"})
            if (pod.get("spec") or {}).get("schedulingGates"):
                GATED_BINDS.append({"namespace": namespace, "name": name})
                return status_response(409, "Conflict", conflicting + f"pod {name} has non-empty "
                                       ".spec.schedulingGates",
                                       {"name": name, "kind": "pods/binding"})
            bound_to = (pod.get("spec") or {}).get("nodeName")
            if bound_to:
                return status_response(409, "Conflict", conflicting + f'pod {name} is already '
                                       f'assigned to node "{bound_to}"',
                                       {"name": name, "kind": "pods/binding"})
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
            "user": user.name if user else None,
        })
        return status_response(201, None, None)

    async def _serve_list(self, request):
        # kmock answers `...` as the list's resourceVersion; the API server, the current one.
        answer = await super()._serve_list(request)
        answer["metadata"]["resourceVersion"] = str(LAST_VERSION[0])
        return answer

    async def _serve_watch(self, request):
        # A watch from a resourceVersion older than the last `/_harness/compact` ends at once
        # with the API server's 410 Expired ERROR event.
        since = request.url.query.get("resourceVersion", "")
        if since not in ("", "0") and since.isdigit() and int(since) < COMPACTED[0]:
            yield b""
            yield {"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f"too old resource version: {since} ({COMPACTED[0]})",
                "reason": "Expired", "code": 410}}
            return
        # kmock's watch stream runs until the client goes; this one also ends (cleanly: kmock's
        # renderer then terminates the chunked body) once `/_harness/cut-watches` sets its event.
        cut = asyncio.Event()
        WATCHES.add(cut)
        stream = aiter(self._watch_events(request))
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

    async def _watch_events(self, request):
        """The live objects as ADDED, then every later change, with no gap between them.

        kmock's own watch takes its snapshot under the lock but joins the event bus only after
        it has streamed the snapshot, so a write in between was never sent (a watcher resuming
        under load kept an old resourceVersion for good). Here the bus position is marked under
        the same lock as the snapshot (every write puts its event on the bus under that lock),
        as the API server's watch cache serves a list and the changes after it."""
        yield b""
        bus = self._buses[request.resource]
        async with self._lock:
            objs = self._KubernetesEmulator__get_objs(request, strict=False)
            events = [{"type": "ADDED", "object": obj.raw} for obj in objs if not obj.deleted]
            mark = await bus.mark()
        try:
            for event in events:
                yield event
            async for event in bus.stream(since=mark):
                meta = (event.get("object") or {}).get("metadata") or {}
                if self._KubernetesEmulator__check(request, request.resource, meta.get("namespace"),
                                                   meta.get("name"), strict=False):
                    yield event
        finally:
            await bus.unmark(mark)

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
    """A pod of `owner`'s template, not yet scheduled: no `nodeName`, phase `Pending`."""
    template = owner["spec"]["template"]
    meta = template.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    if index is not None:
        annotations[COMPLETION_INDEX] = str(index)
    spec = copy.deepcopy(template.get("spec") or {})
    spec.pop("nodeName", None)
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
        "status": {"phase": "Pending"},
    }


def played(pod):
    """Whether the harness schedules `pod`: it names no scheduler, or one the harness plays."""
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    return not scheduler or scheduler in PLAYED_SCHEDULERS


def scheduled_condition():
    return {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
            "lastTransitionTime": now()}


def scheduling_gated(pod):
    """Whether a pod has scheduling gates (`spec.schedulingGates` not empty)."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def gated_condition():
    """kube-scheduler's condition on a pod it may not schedule yet."""
    return {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": None, "lastTransitionTime": now()}


def unschedulable_condition(message):
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message, "lastProbeTime": None, "lastTransitionTime": now()}


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
    """Whether a pod was bound but not started yet."""
    return bool(bound_node(pod)) and (pod.get("status") or {}).get("phase", "Pending") == "Pending"


def ready(pod):
    return condition_true(pod, "Ready")


class Controllers:
    """The ReplicaSet and Job controllers, the scheduler and the kubelet, as little as the tests
    need."""

    def __init__(self, emulator, url, period, kueue=None):
        self.emulator = emulator
        self.url = url
        self.period = period
        self.kueue = kueue  # a KueueController (`--kueue`), or None
        self.scheduler = None  # Placement: kube-scheduler's view, this round
        self.kubelet = None  # Placement: what the kubelets admitted, this round
        self.jobsets = JobSetController(self)

    async def run(self, session):
        while True:
            try:
                await self.reconcile(session)
            except Exception as e:  # keep playing; the test's deadline catches a stuck cluster
                print(f"controllers: {e!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(self.period)

    async def call(self, session, method, path, body=None, allowed=(404,)):
        headers = {"Content-Type": MERGE_PATCH} if method == "PATCH" else {}
        async with session.request(method, self.url + path, json=body, headers=headers) as r:
            if r.status >= 400 and r.status not in allowed:
                raise RuntimeError(f"{method} {path}: {r.status} {await r.text()}")
            return r.status

    async def start(self, session, pod, conditions):
        """The kubelet starts `pod`: Running and Ready."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        await self.call(session, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                        {"status": running_status(pod.get("spec") or {}, conditions)})

    async def sync_pods(self, session, owner, mine, names, wanted, on_delete=None,
                        on_failed=None):
        """Replaces the owner's Failed pods (`on_failed` judges each), creates the pods named in
        `wanted` (name -> completion index or None) that are missing from the namespace's pod
        `names`, deletes the owner's other pods (`mine`: name -> pod; `on_delete` judges each),
        schedules and starts them; returns how many wanted pods are not Ready."""
        ns = owner["metadata"]["namespace"]
        for name, pod in list(mine.items()):
            if (pod.get("status") or {}).get("phase") == "Failed":
                record_failed(pod)
                if on_failed is not None:
                    on_failed(pod)
                await self.call(session, "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
                del mine[name]
                names.discard(name)
        unready = 0
        for name, index in wanted.items():
            if name in names:
                continue
            pod = pod_from(owner, name, index)
            if played(pod) and scheduling_gated(pod):
                pod["status"]["conditions"] = [gated_condition()]
            elif played(pod):
                node, why = self.scheduler.place(pod)
                if node is None:
                    pod["status"]["conditions"] = [unschedulable_condition(why)]
                else:
                    pod["spec"]["nodeName"] = node
                    self.kubelet.hold(pod, node)
                    pod["status"] = running_status(pod["spec"], [scheduled_condition()])
            await self.call(session, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
            unready += not ready(pod)
        for name in set(mine) - set(wanted):
            if terminating(mine[name]):
                continue  # being deleted already: its kubelet removes it
            if on_delete is not None:
                on_delete(mine[name])
            await self.call(session, "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
        for name, pod in mine.items():
            if name not in wanted:
                continue
            if terminating(pod):
                # Its index comes back once it is gone (the pod's name is fixed here).
                unready += 1
                continue
            conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                          if c.get("type") != "PodScheduled"]
            node = bound_node(pod)
            if node is None and played(pod) and not terminal(pod):
                if scheduling_gated(pod):  # kube-scheduler leaves it until its gates go
                    unready += 1
                    continue
                # kube-scheduler retries an unschedulable pod.
                node, why = self.scheduler.place(pod)
                if node is None:
                    if any(c.get("reason") == "SchedulingGated" for c in
                           (pod.get("status") or {}).get("conditions") or []):
                        await self.call(session, "PATCH",
                                        f"/api/v1/namespaces/{ns}/pods/{name}/status",
                                        {"status": {"conditions": conditions +
                                                    [unschedulable_condition(why)]}})
                    unready += 1
                    continue
                binding = {"apiVersion": "v1", "kind": "Binding",
                           "metadata": {"name": name, "namespace": ns},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
                status = await self.call(session, "POST",
                                         f"/api/v1/namespaces/{ns}/pods/{name}/binding",
                                         binding, allowed=(404, 409))
                if status >= 400:
                    unready += 1
                    continue
                self.kubelet.hold(pod, node)
                await self.start(session, pod, [scheduled_condition()] + conditions)
            elif pending_bound(pod):
                # The kubelet admits a pod another scheduler bound, or rejects it.
                unready += not await self.admit_bound(session, pod)
            elif not ready(pod):
                unready += 1
        return unready

    async def admit_bound(self, session, pod):
        """The kubelet of a bound pod not started yet: starts it (True) or rejects it, Failed with
        the kubelet's reason (False)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        rejected = self.kubelet.admit(pod, bound_node(pod))
        if rejected is None:
            await self.start(session, pod, (pod.get("status") or {}).get("conditions") or [])
            return True
        reason, message = rejected
        status = {"phase": "Failed", "reason": reason, "message": message}
        await self.call(session, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                        {"status": status})
        record_failed(dict(pod, status=dict(pod.get("status") or {}, **status)))
        return False

    async def collect_orphans(self, session, nodes, pods, owners):
        """The pod garbage collector, on this round's `nodes` and `pods`: a pod bound to a node
        that has been missing for `ORPHAN_QUARANTINE_S` ends `Failed` with the condition
        `DisruptionTarget` (reason `DeletionByPodGC`), as kube-controller-manager's PodGC marks it;
        a pod of one of the `owners` played here is then deleted by its controller (as the Job
        controller's finalizer lets it see the pod fail), any other pod (of no owner, or of one a
        test plays) here. Writes carry the pod's resourceVersion (uid for the delete), so a pod
        changed or replaced since the round began is left to the next round."""
        present = {n["metadata"]["name"] for n in nodes}
        orphans = [p for p in pods if bound_node(p) and bound_node(p) not in present]
        seen = {p["metadata"].get("uid") for p in orphans}
        for uid in set(ORPHANED_SINCE) - seen:
            del ORPHANED_SINCE[uid]
        clock = time.monotonic()
        for pod in orphans:
            meta = pod["metadata"]
            if clock - ORPHANED_SINCE.setdefault(meta.get("uid"), clock) < ORPHAN_QUARANTINE_S:
                continue
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if (pod.get("status") or {}).get("phase") != "Failed":
                conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                              if c.get("type") != "DisruptionTarget"]
                conditions.append({"type": "DisruptionTarget", "status": "True",
                                   "reason": "DeletionByPodGC",
                                   "message": "PodGC: node no longer exists",
                                   "lastProbeTime": None, "lastTransitionTime": now()})
                await self.call(session, "PATCH", f"{path}/status",
                                {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                                 "status": {"phase": "Failed", "conditions": conditions}},
                                allowed=(404, 409))
            if controller_uid(pod) not in owners:
                await self.call(session, "DELETE", path,
                                {"preconditions": {"uid": meta.get("uid")}}, allowed=(404, 409))

    async def reconcile(self, session):
        await self.jobsets.reconcile(session)
        # One scan of the store: pods by controller uid and pod names by namespace.
        pods_of = collections.defaultdict(dict)
        names = collections.defaultdict(set)
        sets, jobs, nodes, pods = [], [], [], []
        for (res, ns, name), obj in list(self.emulator.objects.items()):
            if obj.deleted:
                continue
            if res == "v1/pods":
                raw = obj.raw
                pods.append(raw)
                names[ns].add(name)
                uid = controller_uid(raw)
                if uid is not None:
                    pods_of[uid][name] = raw
            elif res == "v1/nodes":
                nodes.append(obj.raw)
            elif res in ("apps/v1/replicasets", "batch/v1/jobs"):
                raw = obj.raw
                if OWNED_LABEL in (raw.get("metadata", {}).get("labels") or {}) \
                        or (res == "batch/v1/jobs" and played_job(raw)):
                    (sets if res == "apps/v1/replicasets" else jobs).append(raw)
        # The kubelets have not admitted the bound pods of these owners, nor bound pods of no
        # owner (created by clients), that did not start yet.
        # Every bound pod not started yet waits for its node's one kubelet, which admits them one
        # by one this round: those of owners played here as their controller syncs them, the
        # rest (no owner, or an owner a test plays, as the PyTorch kinds' workers) below. One
        # kubelet per node: two admitting apart would both hand out the same room.
        owners = {o["metadata"]["uid"] for o in (*sets, *jobs)}
        waiting = [p for p in pods if pending_bound(p)]
        bare = [p for p in waiting if controller_uid(p) not in owners]
        awaiting = {p["metadata"].get("uid") for p in waiting}
        self.scheduler = Placement(nodes, pods)
        self.kubelet = Placement(nodes, pods, excluded=awaiting)

        for rs in sets:
            name, ns = rs["metadata"]["name"], rs["metadata"]["namespace"]
            replicas = rs["spec"].get("replicas", 1)
            wanted = {f"{name}-{i}": None for i in range(replicas)}
            unready = await self.sync_pods(session, rs, pods_of[rs["metadata"]["uid"]], names[ns],
                                           wanted)
            n = len(wanted)
            status = {"replicas": n, "readyReplicas": n - unready, "availableReplicas": n - unready}
            if rs.get("status") != status:
                await self.call(session, "PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}/status",
                                {"status": status})

        for pod in bare:
            await self.admit_bound(session, pod)

        live_jobs = set()
        for job in jobs:
            await self.sync_job(session, job, pods_of[job["metadata"]["uid"]], names)
            live_jobs.add(job["metadata"]["uid"])
        for uid in set(FAILURES.seen) - live_jobs:
            del FAILURES.seen[uid]
        if self.kueue is not None:
            await self.kueue.reconcile(self, session)
        # Last: the pods it fails are seen Failed by their controllers next round.
        await self.collect_orphans(session, nodes, pods, owners)
        await self.end_terminated(session, pods)

    async def end_terminated(self, session, pods):
        """The kubelets of this round's terminating `pods` (`--pod-grace`): each whose time is up
        is removed, as the kubelet's final DELETE (grace 0) does once its containers stopped.
        Pods held by finalizers are left to them."""
        clock = time.monotonic()
        for pod in pods:
            meta = pod["metadata"]
            uid = meta.get("uid")
            until = TERMINATING_UNTIL.get(uid)
            if until is None or clock < until or meta.get("finalizers"):
                continue
            await self.call(session, "DELETE",
                            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                            allowed=(404, 409))

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

        current = job.get("status") or {}
        status = {"conditions": copy.deepcopy(current.get("conditions") or [])}
        complete = job_complete(job)
        failing = job_failed(job) or (not complete and FAILURES.of(job) > spec.get("backoffLimit", 6))
        if failing and not job_failed(job):
            set_condition(status, {
                "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": now(), "lastProbeTime": now(),
            })
        suspended = bool(spec.get("suspend")) and not complete and not failing
        if suspended and not condition_true(job, "Suspended"):
            set_condition(status, {"type": "Suspended", "status": "True", "reason": "JobSuspended",
                                   "message": "Job suspended", "lastProbeTime": now(),
                                   "lastTransitionTime": now()})
        elif not spec.get("suspend") and condition_true(job, "Suspended"):
            set_condition(status, {"type": "Suspended", "status": "False", "reason": "JobResumed",
                                   "message": "Job resumed", "lastProbeTime": now(),
                                   "lastTransitionTime": now()})
            status["startTime"] = now()
        stopped = complete or failing or suspended
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        count = 0 if stopped else min(parallelism, parallelism if completions is None else completions)
        if not stopped and "startTime" not in status:
            status["startTime"] = current.get("startTime") or now()
        wanted = {f"{name}-{i}": i for i in range(count)}
        # Pods this controller removes fail too while their index is below completions (but not
        # those of a stopped Job): the kubelet kills them. A pod that ended Failed counts unless
        # the Job's podFailurePolicy ignores it.

        def on_failed(pod):
            if stopped:
                FAILURES.judged.add(pod["metadata"].get("uid"))
            else:
                FAILURES.failed(job, pod)

        unready = await self.sync_pods(session, job, mine, names[ns], wanted,
                                       on_delete=lambda pod: FAILURES.judge(job, pod, counts=not stopped),
                                       on_failed=on_failed)
        status.update(active=count, ready=count - unready)
        if complete:
            status["completionTime"] = current.get("completionTime")
            status["succeeded"] = current.get("succeeded", 0)
        elif not stopped and completions is not None and completions <= 0:
            # succeeded (0) >= completions and no pod active: the Job is complete.
            for kind in ("SuccessCriteriaMet", "Complete"):
                set_condition(status, {
                    "type": kind, "status": "True", "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastProbeTime": now(), "lastTransitionTime": now()})
            status["completionTime"] = now()
            status["succeeded"] = 0
        if current.get("startTime") and "startTime" not in status:
            status["startTime"] = current["startTime"]
        failed = FAILURES.of(job)
        if failed:
            status["failed"] = failed
        if not status["conditions"]:
            del status["conditions"]
        if {k: current.get(k) for k in status} != status:
            await self.call(session, "PATCH", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status",
                            {"status": status})


# ---------------------------------------------------------------------------------------------
# Kueue (`--kueue`): its API, its webhooks on Jobs, its Job integration (workload slices), its
# scheduler (quota, cohorts, borrowing) and its elastic-job ungater. Module docstring: "Kueue".

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_RESOURCES = {
    f"{KUEUE_API}/resourceflavors": dict(
        namespaced=False, kind="ResourceFlavor", singular="resourceflavor",
        shortnames={"flavor", "flavors", "rf"}),
    f"{KUEUE_API}/clusterqueues": dict(
        namespaced=False, kind="ClusterQueue", subresources={"status"}, singular="clusterqueue",
        shortnames={"cq"}),
    f"{KUEUE_API}/localqueues": dict(
        namespaced=True, kind="LocalQueue", subresources={"status"}, singular="localqueue",
        shortnames={"queue", "queues", "lq"}),
    f"{KUEUE_API}/workloads": dict(
        namespaced=True, kind="Workload", subresources={"status"}, singular="workload",
        shortnames={"wl"}),
}
for _info in KUEUE_RESOURCES.values():
    _info["verbs"] = {"create", "delete", "deletecollection", "get", "list", "patch", "update",
                      "watch"}

KUEUE_PATH = "/_harness/kueue"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_ELASTIC = "kueue.x-k8s.io/elastic-job"  # the Job annotation, and the pods' scheduling gate
KUEUE_SLICE_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
KUEUE_SLICE_NAME = "kueue.x-k8s.io/workload-slice-name"
KUEUE_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
KUEUE_PODSET = "main"
KUEUE_SEQ = {}  # Workload uid -> its place in the queues (creation order, as first seen)
_kueue_seq = itertools.count()


def kueue_served():
    """Whether the Kueue API is served (`--kueue`): its webhooks then apply too."""
    return (KUEUE_GROUP, KUEUE_VERSION, "workloads") in SERVED


def serve_kueue(emulator):
    for key, info in KUEUE_RESOURCES.items():
        emulator.resources[key] = info
        SERVED[resource_key(key)] = info


def played_job(job):
    """Whether the Job controller plays a Job the operator did not create: a JobSet's child Job,
    or a Job that opts in to trainscale's elastic sizing."""
    meta = job.get("metadata") or {}
    return JOBSET_NAME_LABEL in (meta.get("labels") or {}) \
        or ELASTIC_JOB_ANNOTATION in (meta.get("annotations") or {})


def jobset_children(jobset):
    """The child Jobs a JobSet wants, as the JobSet controller creates them: one per replicated
    Job and replica (`replicas`, default 1), `<jobset>-<rjob>-<i>`, from the replicated Job's
    template, labelled on the Job and its pod template, controlled by the JobSet."""
    meta = jobset["metadata"]
    name, ns = meta["name"], meta["namespace"]
    spec = jobset.get("spec") or {}
    out = []
    for rjob in spec.get("replicatedJobs") or []:
        template = rjob.get("template") or {}
        for i in range(rjob.get("replicas", 1)):
            labels = {JOBSET_NAME_LABEL: name, REPLICATED_JOB_LABEL: rjob["name"],
                      JOB_INDEX_LABEL: str(i)}
            job_spec = copy.deepcopy(template.get("spec") or {})
            if spec.get("suspend"):
                job_spec["suspend"] = True
            pod_meta = job_spec.setdefault("template", {}).setdefault("metadata", {})
            pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
            job_meta = template.get("metadata") or {}
            out.append({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rjob['name']}-{i}", "namespace": ns,
                    "labels": {**(job_meta.get("labels") or {}), **labels},
                    "annotations": dict(job_meta.get("annotations") or {}),
                    "ownerReferences": [{
                        "apiVersion": jobset.get("apiVersion", "jobset.x-k8s.io/v1alpha2"),
                        "kind": "JobSet", "name": name, "uid": meta.get("uid"),
                        "controller": True, "blockOwnerDeletion": True,
                    }],
                },
                "spec": job_spec,
            })
    return out


def child_scaling(wanted, current):
    """The merge patch ElasticJobSet makes on an existing child Job whose `parallelism` or
    `completions` differ from its template's, or None: none either while the template does not
    keep them equal (the controller's `jobScalingNeedsPatch`)."""
    want = wanted.get("spec") or {}
    have = current.get("spec") or {}
    p, c = want.get("parallelism"), want.get("completions")
    if p != c or (have.get("parallelism"), have.get("completions")) == (p, c):
        return None
    return {"spec": {"parallelism": p, "completions": c}}


class JobSetController:
    """The JobSet controller, minimally (see the module doc); a round of `Controllers`, only while
    the JobSet resource is served."""

    def __init__(self, controllers):
        self.controllers = controllers

    async def reconcile(self, session):
        if JOBSET_KEY not in SERVED:
            return
        jobsets, jobs = [], {}
        for (res, ns, name), obj in list(self.controllers.emulator.objects.items()):
            if obj.deleted:
                continue
            if res == "jobset.x-k8s.io/v1alpha2/jobsets":
                jobsets.append(obj.raw)
            elif res == "batch/v1/jobs":
                jobs[(ns, name)] = obj.raw
        for jobset in jobsets:
            for child in jobset_children(jobset):
                ns, name = child["metadata"]["namespace"], child["metadata"]["name"]
                current = jobs.get((ns, name))
                if current is None:
                    await self.controllers.call(session, "POST",
                                                f"/apis/batch/v1/namespaces/{ns}/jobs", child,
                                                allowed=(404, 409))
                    continue
                patch = child_scaling(child, current)
                if patch is not None:
                    await self.controllers.call(session, "PATCH",
                                                f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
                                                patch)


def seed_jobset_crd(emulator):
    """Serves the JobSet resource (`--jobset-crd`), discovery included."""
    for key, info in JOBSET_RESOURCES.items():
        emulator.resources[key] = info
        SERVED[resource_key(key)] = info


def kueue_amount(resource, value):
    """An amount as a Kubernetes quantity string: whole amounts plain (bytes of memory-like
    resources with the largest binary suffix dividing them), others in millis (or nanos)."""
    value = decimal.Decimal(value)
    if value == value.to_integral_value():
        n = int(value)
        if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                if n > 0 and n % _SUFFIXES[suffix] == 0:
                    return f"{n // _SUFFIXES[suffix]}{suffix}"
        return str(n)
    millis = value * 1000
    if millis == millis.to_integral_value():
        return f"{int(millis)}m"
    return f"{int((value * 10 ** 9).to_integral_value(rounding=decimal.ROUND_CEILING))}n"


def _meta(obj):
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(obj):
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def obj_key(obj):
    meta = _meta(obj)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def kueue_queue_name(obj):
    """The LocalQueue a Job names (label `kueue.x-k8s.io/queue-name`), or None."""
    return (_meta(obj).get("labels") or {}).get(KUEUE_QUEUE_LABEL) or None


def kueue_elastic(obj):
    """Whether an object is an elastic job (annotation `kueue.x-k8s.io/elastic-job: "true"`)."""
    return (_meta(obj).get("annotations") or {}).get(KUEUE_ELASTIC) == "true"


def job_suspended(job):
    return bool(_spec(job).get("suspend"))


def job_parallelism(job):
    value = _spec(job).get("parallelism", 1)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"job {obj_key(job)}: spec.parallelism: not a count: {value!r}")
    return value


def job_pod_count(job):
    """The pods a Job runs at once, as Kueue counts its pod set: min(parallelism, completions)."""
    count = job_parallelism(job)
    completions = _spec(job).get("completions")
    if completions is None:
        return count
    if not isinstance(completions, int) or isinstance(completions, bool) or completions < 0:
        raise ValueError(f"job {obj_key(job)}: spec.completions: not a count: {completions!r}")
    return min(count, completions)


def kueue_gated(pod):
    return any(isinstance(g, dict) and g.get("name") == KUEUE_ELASTIC
               for g in (pod.get("spec") or {}).get("schedulingGates") or [])


# The webhooks Kueue installs for Jobs (pkg/controller/jobs/job/job_webhook.go).

def kueue_default_job(job):
    """Kueue's mutating webhook on a Job create (`mjob.kb.io`): a Job naming a LocalQueue is
    created suspended, and an elastic one gets the `kueue.x-k8s.io/elastic-job` scheduling gate
    in its pod template (so every pod starts gated until the ungater lets it go)."""
    if not kueue_queue_name(job) or not isinstance(job.get("spec"), dict):
        return
    spec = job["spec"]
    spec["suspend"] = True
    if not kueue_elastic(job):
        return
    template = spec.setdefault("template", {})
    pod_spec = template.setdefault("spec", {}) if isinstance(template, dict) else None
    if not isinstance(pod_spec, dict):
        return
    gates = pod_spec.get("schedulingGates")
    gates = gates if isinstance(gates, list) else []
    if not any(isinstance(g, dict) and g.get("name") == KUEUE_ELASTIC for g in gates):
        gates.append({"name": KUEUE_ELASTIC})
    pod_spec["schedulingGates"] = gates


def kueue_job_errors(old, new):
    """What Kueue's validating webhook on Jobs (`vjob.kb.io`) refuses of a create (`old` None)
    or an update: the field errors, as `field.Error` prints them."""
    errors = []
    annotations = _meta(new).get("annotations") or {}
    if KUEUE_MIN_PARALLELISM in annotations and kueue_elastic(new):
        errors.append(f'metadata.annotations[{KUEUE_MIN_PARALLELISM}]: Invalid value: '
                      f'"{annotations[KUEUE_MIN_PARALLELISM]}": partial admission and elastic job '
                      "cannot be used together")
    if old is None:
        return errors
    if kueue_elastic(old) != kueue_elastic(new):
        errors.append(f"metadata.annotations[{KUEUE_ELASTIC}]: Invalid value: "
                      f"{str(kueue_elastic(new)).lower()}: field is immutable")
    if not job_suspended(new) and kueue_queue_name(old) != kueue_queue_name(new):
        errors.append(f'metadata.labels[{KUEUE_QUEUE_LABEL}]: Invalid value: '
                      f'"{kueue_queue_name(new) or ""}": field is immutable')
    if KUEUE_MIN_PARALLELISM in (_meta(old).get("annotations") or {}) and not job_suspended(old) \
            and _spec(old).get("parallelism", 1) != _spec(new).get("parallelism", 1):
        errors.append("spec.parallelism: Forbidden: cannot change when partial admission is "
                      "enabled and the job is not suspended")
    return errors


def webhook_denied(webhook, errors):
    """The API server's answer when a validating webhook denies a request: 403 Forbidden with
    the webhook's message (controller-runtime denies a field-error list as Forbidden)."""
    reason = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return status_response(403, "Forbidden",
                           f'admission webhook "{webhook}" denied the request: {reason}')


# The Kueue objects' schema (and Kueue's own webhooks), checked on create and update.

CQ_SPEC_FIELDS = {"resourceGroups", "cohortName", "queueingStrategy", "namespaceSelector",
                  "flavorFungibility", "preemption", "admissionChecksStrategy", "stopPolicy",
                  "fairSharing", "admissionScope", "concurrentAdmissionPolicy"}


def _quantity_error(value, field):
    """A field error for a quantity that does not parse or is negative, else None."""
    try:
        if quantity(value, field) < 0:
            return f"{field}: Invalid value: {json.dumps(value)}: must be greater than or equal to 0"
    except ValueError:
        return f"{field}: Invalid value: {json.dumps(value)}: must be a quantity"
    return None


def kueue_unknown_field(kind, obj):
    """The first unknown top-level `spec` field of a ClusterQueue (`spec.cohort`, v1beta1's
    name for `cohortName`, above all), or None."""
    if kind != "ClusterQueue":
        return None
    for key in _spec(obj):
        if key not in CQ_SPEC_FIELDS:
            return f"spec.{key}"
    return None


def kueue_object_errors(kind, obj, old=None):
    """The field errors the API server (the CRD's schema, Kueue's webhooks) finds in a Kueue
    object written by a client: a ClusterQueue's resource groups and quotas, a LocalQueue's
    `clusterQueue` (immutable), a Workload's pod sets."""
    errors = []
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, dict):
        return ["spec: Invalid value: must be an object"]
    spec = spec or {}
    if kind == "ClusterQueue":
        cohort = spec.get("cohortName")
        if cohort is not None and not isinstance(cohort, str):
            errors.append(f"spec.cohortName: Invalid value: {json.dumps(cohort)}: must be a string")
        strategy = spec.get("queueingStrategy")
        if strategy is not None and strategy not in ("StrictFIFO", "BestEffortFIFO"):
            errors.append(f'spec.queueingStrategy: Unsupported value: {json.dumps(strategy)}: '
                          'supported values: "BestEffortFIFO", "StrictFIFO"')
        selector = spec.get("namespaceSelector")
        if selector is not None and not isinstance(selector, dict):
            errors.append("spec.namespaceSelector: Invalid value: must be a label selector")
        groups = spec.get("resourceGroups") or []
        if not isinstance(groups, list):
            return errors + ["spec.resourceGroups: Invalid value: must be a list"]
        seen = set()
        for g, group in enumerate(groups):
            at = f"spec.resourceGroups[{g}]"
            if not isinstance(group, dict):
                errors.append(f"{at}: Invalid value: must be an object")
                continue
            covered = group.get("coveredResources")
            if not isinstance(covered, list) or not covered or \
                    not all(isinstance(r, str) and r for r in covered):
                errors.append(f"{at}.coveredResources: Required value: a non-empty list of "
                              "resource names")
                continue
            for r in covered:
                if r in seen:
                    errors.append(f'{at}.coveredResources: Duplicate value: "{r}"')
                seen.add(r)
            flavors = group.get("flavors")
            if not isinstance(flavors, list) or not flavors:
                errors.append(f"{at}.flavors: Required value: a non-empty list")
                continue
            for f, flavor in enumerate(flavors):
                fat = f"{at}.flavors[{f}]"
                if not isinstance(flavor, dict) or not isinstance(flavor.get("name"), str) \
                        or not flavor["name"]:
                    errors.append(f"{fat}.name: Required value")
                    continue
                resources = flavor.get("resources")
                if not isinstance(resources, list) or \
                        [r.get("name") if isinstance(r, dict) else None for r in resources] != covered:
                    errors.append(f"{fat}.resources: Invalid value: must list the coveredResources "
                                  f"{covered} in the same order")
                    continue
                for r, res in enumerate(resources):
                    rat = f"{fat}.resources[{r}]"
                    if "nominalQuota" not in res:
                        errors.append(f"{rat}.nominalQuota: Required value")
                    else:
                        errors.append(_quantity_error(res["nominalQuota"], f"{rat}.nominalQuota"))
                    for limit in ("borrowingLimit", "lendingLimit"):
                        if res.get(limit) is None:
                            continue
                        errors.append(_quantity_error(res[limit], f"{rat}.{limit}"))
                        if not cohort:
                            errors.append(f"{rat}.{limit}: Invalid value: {json.dumps(res[limit])}: "
                                          "must be nil when cohort is empty")
    elif kind == "LocalQueue":
        cq = spec.get("clusterQueue")
        if not isinstance(cq, str) or not cq:
            errors.append("spec.clusterQueue: Required value")
        elif old is not None and _spec(old).get("clusterQueue") != cq:
            errors.append(f'spec.clusterQueue: Invalid value: "{cq}": field is immutable')
    elif kind == "Workload":
        pod_sets = spec.get("podSets")
        if not isinstance(pod_sets, list) or not pod_sets:
            errors.append("spec.podSets: Required value: at least one pod set")
        else:
            for i, ps in enumerate(pod_sets):
                at = f"spec.podSets[{i}]"
                if not isinstance(ps, dict):
                    errors.append(f"{at}: Invalid value: must be an object")
                    continue
                if not isinstance(ps.get("name", KUEUE_PODSET), str):
                    errors.append(f"{at}.name: Invalid value: must be a string")
                count = ps.get("count")
                if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                    errors.append(f"{at}.count: Invalid value: {json.dumps(count)}: must be a "
                                  "non-negative integer")
                if not isinstance(ps.get("template"), dict):
                    errors.append(f"{at}.template: Required value")
        queue = spec.get("queueName")
        if queue is not None and not isinstance(queue, str):
            errors.append(f"spec.queueName: Invalid value: {json.dumps(queue)}: must be a string")
    elif kind == "ResourceFlavor":
        labels = spec.get("nodeLabels")
        if labels is not None and (not isinstance(labels, dict) or
                                   not all(isinstance(v, str) for v in labels.values())):
            errors.append("spec.nodeLabels: Invalid value: must map label keys to strings")
        tolerations = spec.get("tolerations")
        if tolerations is not None and not isinstance(tolerations, list):
            errors.append("spec.tolerations: Invalid value: must be a list")
    return [e for e in errors if e]


def kueue_admission(kind_plural, group, obj, old=None):
    """The API server's admission of a client's create (`old` None) or update of a Job or a
    Kueue object while Kueue is served: mutates a created Job (Kueue's defaulting webhook) and
    answers the refusal (a response), or None when the write may proceed."""
    if not kueue_served():
        return None
    if group == "batch" and kind_plural == "jobs":
        if old is None:
            kueue_default_job(obj)
        errors = kueue_job_errors(old, obj)
        return webhook_denied("vjob.kb.io", errors) if errors else None
    if group != KUEUE_GROUP:
        return None
    info = SERVED.get((KUEUE_GROUP, KUEUE_VERSION, kind_plural)) or {}
    kind = info.get("kind", kind_plural)
    unknown = kueue_unknown_field(kind, obj)
    if unknown is not None:
        hint = " (v1beta2 names it spec.cohortName)" if unknown == "spec.cohort" else ""
        return bad_request(f'strict decoding error: unknown field "{unknown}"{hint}')
    errors = kueue_object_errors(kind, obj, old)
    if not errors:
        return None
    name = _meta(obj).get("name")
    summary = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    causes = [{"reason": "FieldValueInvalid", "field": e.split(":", 1)[0],
               "message": e.split(": ", 1)[1] if ": " in e else e} for e in errors]
    return status_response(422, "Invalid", f'{kind}.{KUEUE_GROUP} "{name}" is invalid: {summary}',
                           {"name": name, "group": KUEUE_GROUP, "kind": kind, "causes": causes})


# Workloads: names, counts, states.

def kueue_workload_name(job, extra=""):
    """Kueue's Workload name for a Job: `job-<name>-<5 hex of sha1(kind, group, name, uid[,
    extra])>` (the Job's generation as `extra` for an elastic Job: each slice its own name)."""
    meta = _meta(job)
    digest = hashlib.sha1()
    parts = ["Job", "batch", meta.get("name", ""), meta.get("uid", "")] + ([extra] if extra else [])
    digest.update("\n".join(parts).encode())
    prefix = f"job-{meta.get('name', '')}"[:253 - 1 - 5]
    return f"{prefix}-{digest.hexdigest()[:5]}"


def wl_pod_sets(wl):
    pod_sets = _spec(wl).get("podSets")
    return [ps for ps in pod_sets if isinstance(ps, dict)] if isinstance(pod_sets, list) else []


def wl_count(wl):
    """The count of the Workload's `main` pod set (or of its first one)."""
    pod_sets = wl_pod_sets(wl)
    main = next((ps for ps in pod_sets if ps.get("name") == KUEUE_PODSET), None)
    main = main or (pod_sets[0] if pod_sets else {})
    count = main.get("count", 0)
    return count if isinstance(count, int) else 0


def wl_admission(wl):
    admission = (wl.get("status") or {}).get("admission")
    return admission if isinstance(admission, dict) else None


def wl_reserved(wl):
    """Whether the Workload holds quota: admitted (the harness plays no admission checks, so a
    reservation is an admission) and not finished."""
    return wl_admission(wl) is not None and condition_true(wl, "QuotaReserved") and \
        not condition_true(wl, "Finished")


def wl_admitted_count(wl):
    admission = wl_admission(wl) or {}
    for psa in admission.get("podSetAssignments") or []:
        if isinstance(psa, dict) and isinstance(psa.get("count"), int):
            return psa["count"]
    return wl_count(wl) if admission else None


def kueue_order(wl):
    """A Workload's place in its queue, after priority: creation order (as the harness saw it)."""
    meta = _meta(wl)
    priority = _spec(wl).get("priority")
    priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
    return (-priority, KUEUE_SEQ.get(meta.get("uid"), float("inf")),
            meta.get("creationTimestamp") or "", meta.get("name") or "")


def kueue_new_workload(job, count, priorities, replaces=None):
    """The Workload Kueue creates for a Job (one pod set `main` of `count` pods of its template,
    a controller reference to it): for an elastic Job, a slice, replacing `replaces` if given."""
    meta = _meta(job)
    elastic = kueue_elastic(job)
    name = kueue_workload_name(job, str(meta.get("generation", 1)) if elastic else "")
    template = copy.deepcopy(_spec(job).get("template") or {})
    class_name = (template.get("spec") or {}).get("priorityClassName")
    spec = {"queueName": kueue_queue_name(job),
            "podSets": [{"name": KUEUE_PODSET, "count": count, "template": template}],
            "priority": priorities.get(class_name, 0) if class_name else 0, "active": True}
    if class_name and class_name in priorities:
        spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                    "name": class_name}
    annotations = {}
    if elastic:
        annotations[KUEUE_ELASTIC] = "true"
        if replaces is None:
            annotations[KUEUE_SLICE_NAME] = name
        else:
            annotations[KUEUE_SLICE_FOR] = obj_key(replaces)
            annotations[KUEUE_SLICE_NAME] = (_meta(replaces).get("annotations") or {}).get(
                KUEUE_SLICE_NAME) or _meta(replaces).get("name")
    out_meta = {"name": name, "namespace": meta.get("namespace"),
                "labels": {KUEUE_JOB_UID: meta.get("uid")},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                     "name": meta.get("name"), "uid": meta.get("uid"),
                                     "controller": True, "blockOwnerDeletion": True}]}
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": KUEUE_API, "kind": "Workload", "metadata": out_meta, "spec": spec}


def kueue_normalize_slices(wls):
    """workloadslicing.normalizeActiveSlices over a Job's unfinished Workloads (oldest first):
    the one to keep in step with the Job (a pending replacement, else the newest admitted, else
    the newest) and the others to finish, `[(wl, reason, message)]`."""
    replacements = {}
    for wl in wls:
        key = (_meta(wl).get("annotations") or {}).get(KUEUE_SLICE_FOR)
        if key and (key not in replacements or
                    (not wl_reserved(replacements[key]) and wl_reserved(wl))):
            replacements[key] = wl
    latest_reserved = pending = latest = None
    for wl in wls:
        latest = wl
        if not wl_reserved(wl):
            continue
        replacement = replacements.get(obj_key(wl))
        if replacement is not None and wl_reserved(replacement):
            continue
        latest_reserved = wl
    if latest_reserved is not None:
        replacement = replacements.get(obj_key(latest_reserved))
        if replacement is not None and not wl_reserved(replacement):
            pending = replacement
    selected = pending or latest_reserved or latest
    finishing = []
    for wl in wls:
        if wl is selected or wl is latest_reserved:
            continue
        if obj_key(wl) in replacements:
            finishing.append((wl, "WorkloadSliceReplaced",
                              "Replaced to accommodate a new workload slice"))
        else:
            finishing.append((wl, "OutOfSync", "The workload slice is out of sync with its parent job"))
    return selected, finishing


def kueue_plan_job(job, wls, priorities):
    """What Kueue's Job reconciler does to a Job's Workloads (`wls`: its unfinished ones, oldest
    first), as a list of actions: `("create", workload)`, `("count", wl, n)` (the pod count
    changed in place), `("finish", wl, reason, message)`, `("delete", wl)`, `("stop", wl or None,
    message)` (suspend the Job). Elastic Jobs follow EnsureWorkloadSlices: a scale-up of an
    admitted Workload is a new slice, a scale-down (or any change while not admitted) updates it
    in place; other Jobs keep one Workload matching their count, else are stopped and requeued."""
    complete, failed = job_complete(job), job_failed(job)
    if complete or failed:
        kind = "Complete" if complete else "Failed"
        message = next((c.get("message") or "" for c in (job.get("status") or {}).get("conditions")
                        or [] if c.get("type") == kind), "")
        reason = "Succeeded" if complete else "Failed"
        return [("finish", wl, reason, message) for wl in wls]
    count = job_pod_count(job)
    if kueue_elastic(job):
        if not wls:
            return [("create", kueue_new_workload(job, count, priorities))]
        selected, finishing = (wls[0], []) if len(wls) == 1 else kueue_normalize_slices(wls)
        actions = [("finish", wl, reason, message) for wl, reason, message in finishing]
        have = wl_count(selected)
        if have == count:
            return actions
        if not wl_reserved(selected) or count < have:
            return actions + [("count", selected, count)]
        return actions + [("create", kueue_new_workload(job, count, priorities, replaces=selected))]
    match = next((wl for wl in wls if wl_count(wl) == count), None)
    others = [wl for wl in wls if wl is not match]
    if match is None and others and job_suspended(job) and not wl_reserved(others[0]):
        return [("count", others[0], count)] + [("delete", wl) for wl in others[1:]]
    actions = []
    if match is None and not job_suspended(job):
        actions.append(("stop", others[0] if len(others) == 1 else None,
                        "No matching Workload; restoring pod templates according to existent "
                        "Workload" if len(others) == 1 else "Missing Workload"))
    actions += [("delete", wl) for wl in others]
    if match is None and not others:
        actions.append(("create", kueue_new_workload(job, count, priorities)))
    return actions


def kueue_active_slice(wls):
    """The newest admitted Workload of a Job (FindLatestActiveWorkload), or None."""
    return next((wl for wl in reversed(wls) if wl_reserved(wl)), None)


def kueue_plan_run(job, wls):
    """Whether Kueue starts or stops a Job after scheduling: `("stop", wl, message)` when it
    runs with a deactivated Workload (`spec.active: false`), or, not elastic, without an admitted
    one; `("start", wl)` when it is suspended and a Workload of it is admitted; else None
    (elastic Jobs wait on their pods' gates)."""
    if job_complete(job) or job_failed(job):
        return None
    inactive = next((wl for wl in wls if _spec(wl).get("active", True) is False), None)
    if inactive is not None:
        return None if job_suspended(job) else ("stop", inactive, "The workload is deactivated")
    active = kueue_active_slice(wls)
    if job_suspended(job):
        return ("start", active) if active is not None else None
    if active is None and not kueue_elastic(job):
        return ("stop", wls[-1] if wls else None, "Not admitted by cluster queue")
    return None


def kueue_ungate(active, pods):
    """The names of the gated pods the elastic-job ungater lets go: as many as the admitted
    count leaves room for beyond the pods already ungated (terminated pods aside), lowest names
    first."""
    granted = wl_admitted_count(active) or 0
    live = [p for p in pods if not terminal(p)]
    gated = sorted(p["metadata"]["name"] for p in live if kueue_gated(p))
    room = granted - (len(live) - len(gated))
    return gated[:max(room, 0)]


# Quota and the scheduler.

def selector_matches(selector, labels):
    """A LabelSelector (`matchLabels`, `matchExpressions`) against labels; None matches nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


class KueueQuota:
    """The ClusterQueues' quota (nominal, borrowing limits, cohorts) and what the admitted
    Workloads use of it, per (ClusterQueue, flavor, resource): Kueue's cache snapshot. A
    ClusterQueue without a cohort has its nominal quota; in a cohort it may use up to
    `nominalQuota + borrowingLimit` (no limit when unset) of what the cohort's nominal quotas
    leave unused."""

    def __init__(self):
        self.nominal = {}  # (cq, flavor, resource) -> Decimal
        self.borrowing = {}  # (cq, flavor, resource) -> Decimal or None
        self.groups = {}  # cq -> [(covered resources, flavor names)]
        self.cohort = {}  # cq -> cohort name or None
        self.strict = {}  # cq -> StrictFIFO
        self.usage = collections.defaultdict(decimal.Decimal)

    def add_queue(self, cq):
        """Adds a ClusterQueue's spec; a ValueError names the field it cannot use."""
        name = _meta(cq).get("name")
        spec = _spec(cq)
        groups = []
        for g, group in enumerate(spec.get("resourceGroups") or []):
            covered = list(group.get("coveredResources") or [])
            flavors = []
            for f, flavor in enumerate(group.get("flavors") or []):
                flavors.append(flavor["name"])
                for r, res in enumerate(flavor.get("resources") or []):
                    at = (f"clusterqueue {name}: spec.resourceGroups[{g}].flavors[{f}]"
                          f".resources[{r}]")
                    key = (name, flavor["name"], res["name"])
                    self.nominal[key] = quantity(res.get("nominalQuota", 0), f"{at}.nominalQuota")
                    limit = res.get("borrowingLimit")
                    self.borrowing[key] = None if limit is None else \
                        quantity(limit, f"{at}.borrowingLimit")
            groups.append((covered, flavors))
        self.groups[name] = groups
        self.cohort[name] = spec.get("cohortName") or None
        self.strict[name] = spec.get("queueingStrategy") == "StrictFIFO"

    def members(self, cq):
        cohort = self.cohort.get(cq)
        return [q for q, c in self.cohort.items() if c == cohort] if cohort else [cq]

    def covers(self, cq, resource):
        return any(resource in covered for covered, _ in self.groups.get(cq, []))

    def add(self, cq, usage, sign=1):
        """Adds (or with `sign` -1 removes) `{(flavor, resource): amount}` to a queue's usage."""
        for (flavor, resource), amount in usage.items():
            self.usage[cq, flavor, resource] += sign * amount

    def capacity(self, cq, flavor, resource):
        """The most the queue could ever use (Kueue's PotentialAvailable)."""
        nominal = self.nominal.get((cq, flavor, resource), decimal.Decimal(0))
        if not self.cohort.get(cq):
            return nominal
        pool = sum((self.nominal.get((m, flavor, resource), decimal.Decimal(0))
                    for m in self.members(cq)), decimal.Decimal(0))
        limit = self.borrowing.get((cq, flavor, resource))
        return pool if limit is None else min(pool, nominal + limit)

    def available(self, cq, flavor, resource):
        """What the queue may still use now."""
        used = self.usage[cq, flavor, resource]
        nominal = self.nominal.get((cq, flavor, resource), decimal.Decimal(0))
        if not self.cohort.get(cq):
            return nominal - used
        members = self.members(cq)
        unused = sum((self.nominal.get((m, flavor, resource), decimal.Decimal(0)) -
                      self.usage[m, flavor, resource] for m in members), decimal.Decimal(0))
        limit = self.borrowing.get((cq, flavor, resource))
        return unused if limit is None else min(unused, nominal + limit - used)

    def assign(self, cq, pod_sets, replaced=None):
        """Kueue's flavor assignment of `pod_sets` (`[(name, count, per-pod requests)]`) in
        `cq`: for each resource group, the first flavor (the replaced slice's flavor for a
        replacement) where every requested resource of the group fits. `replaced` is the
        replaced slice's `(flavors {pod set: {resource: flavor}}, usage {(flavor, resource):
        amount})`, whose usage makes room for its replacement. Returns `(assignments, usage)`
        (podSetAssignments and `{(flavor, resource): amount}`) or `(None, (reason, message))`."""
        kept_flavors, old_usage = replaced if replaced is not None else ({}, {})
        assumed = collections.defaultdict(decimal.Decimal)
        assignments = []
        for name, count, per_pod in pod_sets:
            total = {r: v * count for r, v in per_pod.items() if r != "pods"}
            if self.covers(cq, "pods"):
                total["pods"] = decimal.Decimal(count)
            total = {r: v for r, v in total.items() if v}
            for r in sorted(total):
                if not self.covers(cq, r):
                    return None, ("NoMatchingFlavor", f"couldn't assign flavors to pod set "
                                  f"{name}: resource {r} unavailable in ClusterQueue")
            flavors = {}
            for covered, group_flavors in self.groups.get(cq, []):
                need = {r: total[r] for r in covered if r in total}
                if not need:
                    continue
                kept = {(kept_flavors.get(name) or {}).get(r) for r in need} - {None}
                candidates = sorted(kept) if len(kept) == 1 and kept <= set(group_flavors) \
                    else group_flavors
                problems, exceeds, chosen = [], 0, None
                for flavor in candidates:
                    misses = []
                    for r, amount in need.items():
                        ask = assumed[flavor, r] + amount
                        if ask > self.capacity(cq, flavor, r):
                            misses.append(("ExceedsMaxQuota", (
                                f"insufficient quota for {r} in flavor {flavor}, previously "
                                f"considered podsets requests ({kueue_amount(r, assumed[flavor, r])}) "
                                f"+ current podset request ({kueue_amount(r, amount)}) > maximum "
                                f"capacity ({kueue_amount(r, self.capacity(cq, flavor, r))})")))
                            continue
                        more = ask - old_usage.get((flavor, r), 0) - self.available(cq, flavor, r)
                        if more > 0:
                            misses.append(("WaitingForQuota", f"insufficient unused quota for {r} "
                                           f"in flavor {flavor}, {kueue_amount(r, more)} more needed"))
                    if not misses:
                        chosen = flavor
                        break
                    exceeds += all(reason == "ExceedsMaxQuota" for reason, _ in misses)
                    problems += [message for _, message in misses]
                if chosen is None:
                    reason = "ExceedsMaxQuota" if exceeds == len(candidates) else "WaitingForQuota"
                    return None, (reason, f"couldn't assign flavors to pod set {name}: " +
                                  ", ".join(problems))
                for r, amount in need.items():
                    flavors[r] = chosen
                    assumed[chosen, r] += amount
            assignments.append({
                "name": name, "flavors": flavors, "count": count,
                "resourceUsage": {r: kueue_amount(r, v) for r, v in sorted(total.items())},
            })
        usage = {k: v for k, v in assumed.items() if v}
        return assignments, usage


def kueue_pod_sets(wl):
    """`[(name, count, per-pod requests)]` of a Workload; a ValueError names the field."""
    out = []
    for i, ps in enumerate(wl_pod_sets(wl)):
        template = ps.get("template") if isinstance(ps.get("template"), dict) else {}
        try:
            per_pod = pod_requests({"metadata": {"name": obj_key(wl)}, "spec": template.get("spec")
                                    if isinstance(template.get("spec"), dict) else {}})
        except ValueError as e:
            raise ValueError(f"workload {obj_key(wl)}: spec.podSets[{i}].template: {e}") from None
        count = ps.get("count", 0)
        out.append((ps.get("name", KUEUE_PODSET), count if isinstance(count, int) else 0, per_pod))
    return out


def admission_usage(wl):
    """`{(flavor, resource): amount}` an admitted Workload holds, from its admission."""
    usage = collections.defaultdict(decimal.Decimal)
    for i, psa in enumerate((wl_admission(wl) or {}).get("podSetAssignments") or []):
        flavors = psa.get("flavors") or {}
        for r, amount in (psa.get("resourceUsage") or {}).items():
            if r in flavors:
                usage[flavors[r], r] += quantity(
                    amount, f"workload {obj_key(wl)}: status.admission.podSetAssignments[{i}]"
                    f".resourceUsage.{r}")
    return dict(usage)


def admission_flavors(wl):
    return {psa.get("name"): dict(psa.get("flavors") or {})
            for psa in (wl_admission(wl) or {}).get("podSetAssignments") or []}


class KueueView:
    """Kueue's view of the cluster at one moment: flavors, queues, Workloads and the quota they
    hold. Built from lists of stored objects; does no I/O (the self-test builds it by hand)."""

    def __init__(self, flavors, cqs, lqs, workloads):
        self.flavors = {_meta(f).get("name"): f for f in flavors}
        self.cqs = {_meta(q).get("name"): q for q in cqs}
        self.lqs = {(_meta(q).get("namespace"), _meta(q).get("name")): q for q in lqs}
        self.workloads = sorted(workloads, key=kueue_order)
        self.by_key = {obj_key(wl): wl for wl in self.workloads}
        self.quota = KueueQuota()
        self.broken = {}  # cq -> why its spec cannot be used
        for name, cq in self.cqs.items():
            try:
                self.quota.add_queue(cq)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                self.broken[name] = f"clusterqueue {name}: spec: {e}"
        self.held = {}  # workload key -> (cq, usage)
        for wl in self.workloads:
            if not wl_reserved(wl):
                continue
            cq = (wl_admission(wl) or {}).get("clusterQueue")
            try:
                usage = admission_usage(wl)
            except ValueError as e:
                print(f"kueue: {e}", file=sys.stderr, flush=True)
                continue
            self.held[obj_key(wl)] = (cq, usage)
            self.quota.add(cq, usage)

    def missing_flavors(self, cq):
        return sorted({f for _, flavors in self.quota.groups.get(cq, []) for f in flavors}
                      - set(self.flavors))

    def inactive(self, cq):
        """Why a ClusterQueue admits nothing (`(reason, message)`), or None when it is active."""
        if cq in self.broken:
            return "Unknown", f"Can't admit new workloads: {self.broken[cq]}."
        stop = _spec(self.cqs[cq]).get("stopPolicy")
        if stop not in (None, "None"):
            return "Stopped", "Can't admit new workloads: is stopped."
        missing = self.missing_flavors(cq)
        if missing:
            return "FlavorNotFound", ("Can't admit new workloads: references missing "
                                      f"ResourceFlavor(s): {','.join(missing)}.")
        return None

    def queue_of(self, wl):
        """The ClusterQueue a Workload goes to, or `(None, (reason, message))` why none takes it."""
        ns = _meta(wl).get("namespace")
        lq_name = _spec(wl).get("queueName")
        lq = self.lqs.get((ns, lq_name))
        if lq is None:
            return None, ("Misconfigured", f"LocalQueue {lq_name} doesn't exist")
        cq = _spec(lq).get("clusterQueue")
        if cq not in self.cqs:
            return None, ("Misconfigured", f"ClusterQueue {cq} doesn't exist")
        if self.inactive(cq) is not None:
            return None, ("Suspended", f"ClusterQueue {cq} is inactive")
        selector = _spec(self.cqs[cq]).get("namespaceSelector")
        if not selector_matches(selector, {"kubernetes.io/metadata.name": ns}):
            return None, ("Misconfigured", "workload namespace doesn't match ClusterQueue selector")
        return cq, None

    def pending(self):
        """The Workloads waiting for quota, in queue order (priority, then creation)."""
        return [wl for wl in self.workloads
                if wl_admission(wl) is None and not condition_true(wl, "Finished")
                and _spec(wl).get("active", True) is not False and _spec(wl).get("queueName")]

    def replaced_by(self, wl):
        """The admitted slice a pending Workload replaces (its `workload-slice-replacement-for`
        annotation), or None."""
        key = (_meta(wl).get("annotations") or {}).get(KUEUE_SLICE_FOR)
        old = self.by_key.get(key) if key else None
        return old if old is not None and obj_key(old) in self.held else None

    def schedule(self):
        """One scheduling pass: every pending Workload, in order, is admitted when it fits (its
        usage then counts for the next ones; a replacement frees its old slice's), else stays
        pending with Kueue's reason; a StrictFIFO queue admits nothing past its first Workload
        that does not fit. An admitted Workload whose `spec.active` is false is evicted first
        (its quota freed). Returns `[("evict", wl) | ("admit", wl, cq, assignments, replaced or
        None) | ("pending", wl, reason, message) | ("wait", wl)]`."""
        out, blocked = [], set()
        for wl in self.workloads:
            if obj_key(wl) in self.held and _spec(wl).get("active", True) is False:
                cq, usage = self.held.pop(obj_key(wl))
                self.quota.add(cq, usage, -1)
                out.append(("evict", wl))
        for wl in self.pending():
            cq, why = self.queue_of(wl)
            if cq is None:
                out.append(("pending", wl, *why))
                continue
            if cq in blocked:
                out.append(("wait", wl))
                continue
            try:
                pod_sets = kueue_pod_sets(wl)
            except ValueError as e:
                out.append(("pending", wl, "Misconfigured", str(e)))
                continue
            old = self.replaced_by(wl)
            replaced = None
            if old is not None:
                old_cq, old_usage = self.held[obj_key(old)]
                replaced = (admission_flavors(old), old_usage if old_cq == cq else {})
            assignments, result = self.quota.assign(cq, pod_sets, replaced)
            if assignments is None:
                out.append(("pending", wl, *result))
                if self.quota.strict.get(cq):
                    blocked.add(cq)
                continue
            if old is not None:
                old_cq, old_usage = self.held.pop(obj_key(old))
                self.quota.add(old_cq, old_usage, -1)
            self.quota.add(cq, result)
            self.held[obj_key(wl)] = (cq, result)
            out.append(("admit", wl, cq, assignments, old))
        return out

    def cq_counts(self, cq):
        """`(admitted, pending)` Workload keys of a ClusterQueue, in queue order."""
        admitted = [k for k, (q, _) in self.held.items() if q == cq]
        pending = [obj_key(wl) for wl in self.pending() if self.target(wl) == cq]
        return admitted, pending

    def target(self, wl):
        """The ClusterQueue a Workload's LocalQueue points to, or None."""
        lq = self.lqs.get((_meta(wl).get("namespace"), _spec(wl).get("queueName")))
        return _spec(lq).get("clusterQueue") if lq is not None else None

    def cq_status(self, cq, current):
        """The ClusterQueue's status: Active, flavorsReservation/flavorsUsage (every flavor and
        resource of its spec, `borrowed` beyond nominal) and the Workload counts."""
        status = copy.deepcopy(current or {})
        why = self.inactive(cq)
        set_condition(status, {
            "type": "Active", "status": "False" if why else "True",
            "reason": why[0] if why else "Ready",
            "message": why[1] if why else "Can admit new workloads",
            "observedGeneration": _meta(self.cqs[cq]).get("generation", 1),
            "lastTransitionTime": now()})
        usage = []
        for covered, flavors in self.quota.groups.get(cq, []):
            for flavor in flavors:
                resources = []
                for r in covered:
                    total = self.quota.usage[cq, flavor, r]
                    nominal = self.quota.nominal.get((cq, flavor, r), decimal.Decimal(0))
                    resources.append({"name": r, "total": kueue_amount(r, total),
                                      "borrowed": kueue_amount(r, max(total - nominal, 0))})
                usage.append({"name": flavor, "resources": resources})
        admitted, pending = self.cq_counts(cq)
        status.update(flavorsReservation=usage, flavorsUsage=copy.deepcopy(usage),
                      pendingWorkloads=len(pending), reservingWorkloads=len(admitted),
                      admittedWorkloads=len(admitted))
        return status

    def lq_status(self, key, current):
        """A LocalQueue's Workload counts."""
        status = copy.deepcopy(current or {})
        mine = {obj_key(wl) for wl in self.workloads
                if (_meta(wl).get("namespace"), _spec(wl).get("queueName")) == key}
        admitted = len(mine & set(self.held))
        pending = sum(obj_key(wl) in mine for wl in self.pending())
        status.update(pendingWorkloads=pending, reservingWorkloads=admitted,
                      admittedWorkloads=admitted)
        return status

    def summary(self):
        """The JSON of `GET /_harness/kueue` (module docstring)."""
        queues = {}
        for cq in sorted(self.cqs):
            nominal, usage, borrowed = {}, {}, {}
            for covered, flavors in self.quota.groups.get(cq, []):
                for flavor in flavors:
                    for r in covered:
                        n = self.quota.nominal.get((cq, flavor, r), decimal.Decimal(0))
                        u = self.quota.usage[cq, flavor, r]
                        nominal.setdefault(flavor, {})[r] = kueue_amount(r, n)
                        usage.setdefault(flavor, {})[r] = kueue_amount(r, u)
                        borrowed.setdefault(flavor, {})[r] = kueue_amount(r, max(u - n, 0))
            admitted, pending = self.cq_counts(cq)
            why = self.inactive(cq)
            queues[cq] = {"cohort": self.quota.cohort.get(cq), "active": why is None,
                          "inactive": why[1] if why else None,
                          "queueingStrategy": _spec(self.cqs[cq]).get("queueingStrategy",
                                                                      "BestEffortFIFO"),
                          "nominal": nominal, "usage": usage, "borrowed": borrowed,
                          "admitted": admitted, "pending": pending}
        workloads = {}
        for wl in self.workloads:
            owner = next((r for r in _meta(wl).get("ownerReferences") or []
                          if isinstance(r, dict) and r.get("controller")), None)
            finished = next((c for c in (wl.get("status") or {}).get("conditions") or []
                             if c.get("type") == "Finished" and c.get("status") == "True"), None)
            reserved = next((c for c in (wl.get("status") or {}).get("conditions") or []
                             if c.get("type") == "QuotaReserved"), None)
            admission = wl_admission(wl)
            workloads[obj_key(wl)] = {
                "owner": owner.get("name") if owner else None,
                "ownerKind": owner.get("kind") if owner else None,
                "queue": _spec(wl).get("queueName"),
                "clusterQueue": (admission or {}).get("clusterQueue"),
                "count": wl_count(wl),
                "active": _spec(wl).get("active", True) is not False,
                "admitted": wl_reserved(wl),
                "admittedCount": wl_admitted_count(wl) if admission else None,
                "flavors": admission_flavors(wl).get(KUEUE_PODSET, {}),
                "finished": finished.get("reason") if finished else None,
                "sliceOf": (_meta(wl).get("annotations") or {}).get(KUEUE_SLICE_FOR),
                "pending": reserved.get("message") if reserved is not None and
                reserved.get("status") == "False" else None,
            }
        return {"clusterQueues": queues, "workloads": workloads}


def kueue_condition(kind, status, reason, message, wl):
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "observedGeneration": _meta(wl).get("generation", 1), "lastTransitionTime": now()}


def kueue_store(emulator):
    """The stored objects Kueue looks at: `{"flavors", "cqs", "lqs", "workloads", "jobs"
    (naming a LocalQueue), "job_uids" (every live Job), "pods" (by controller uid),
    "priorities" (PriorityClass name -> value)}`. Workloads first seen get their queue place."""
    store = {k: [] for k in ("flavors", "cqs", "lqs", "workloads", "jobs")}
    store.update(job_uids=set(), pods=collections.defaultdict(list), priorities={})
    kinds = {(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors"): "flavors",
             (KUEUE_GROUP, KUEUE_VERSION, "clusterqueues"): "cqs",
             (KUEUE_GROUP, KUEUE_VERSION, "localqueues"): "lqs",
             (KUEUE_GROUP, KUEUE_VERSION, "workloads"): "workloads"}
    for (res, _ns, _name), obj in list(emulator.objects.items()):
        if obj.deleted:
            continue
        raw = obj.raw
        res = (res.group or "", res.version, res.plural)
        if res in kinds:
            store[kinds[res]].append(raw)
        elif res == ("batch", "v1", "jobs"):
            store["job_uids"].add(_meta(raw).get("uid"))
            if kueue_queue_name(raw):
                store["jobs"].append(raw)
        elif res == ("", "v1", "pods"):
            uid = controller_uid(raw)
            if uid is not None:
                store["pods"][uid].append(raw)
        elif res == ("scheduling.k8s.io", "v1", "priorityclasses") and isinstance(raw.get("value"), int):
            store["priorities"][_meta(raw).get("name")] = raw["value"]
    unseen = [wl for wl in store["workloads"] if _meta(wl).get("uid") not in KUEUE_SEQ]
    def created(wl):
        version = str(_meta(wl).get("resourceVersion") or "")
        return (_meta(wl).get("creationTimestamp") or "", int(version) if version.isdigit() else 0)

    for wl in sorted(unseen, key=created):
        KUEUE_SEQ[_meta(wl).get("uid")] = next(_kueue_seq)
    return store


def kueue_answer(emulator):
    """`GET /_harness/kueue`."""
    if not kueue_served():
        return status_response(404, "NotFound", "Kueue is not served (start with --kueue)")
    store = kueue_store(emulator)
    return aiohttp.web.json_response(
        KueueView(store["flavors"], store["cqs"], store["lqs"], store["workloads"]).summary())


class KueueController:
    """Kueue's controllers, one pass per round of the fake controllers, writing through the API
    as `admin`: the Job reconciler (Workloads, slices), the garbage collector of Workloads
    whose Job is gone, the scheduler, the Job starter, the elastic-job ungater and the queues'
    status."""

    def __init__(self, emulator):
        self.emulator = emulator

    @staticmethod
    def wl_path(wl, sub=""):
        meta = _meta(wl)
        return (f"/apis/{KUEUE_API}/namespaces/{meta.get('namespace')}/workloads/"
                f"{meta.get('name')}{'/' + sub if sub else ''}")

    @staticmethod
    def job_path(job):
        meta = _meta(job)
        return f"/apis/batch/v1/namespaces/{meta.get('namespace')}/jobs/{meta.get('name')}"

    async def put_status(self, ctl, session, wl, status):
        body = {"apiVersion": KUEUE_API, "kind": "Workload",
                "metadata": {"name": _meta(wl).get("name"), "namespace": _meta(wl).get("namespace")},
                "status": status}
        await ctl.call(session, "PUT", self.wl_path(wl, "status"), body)

    async def finish(self, ctl, session, wl, reason, message):
        status = copy.deepcopy(wl.get("status") or {})
        set_condition(status, kueue_condition("Finished", "True", reason, message, wl))
        await self.put_status(ctl, session, wl, status)

    async def set_count(self, ctl, session, wl, count):
        """An in-place count change: the pod set's count and, when admitted, its admission."""
        pod_sets = copy.deepcopy(wl_pod_sets(wl))
        for ps in pod_sets:
            if ps.get("name", KUEUE_PODSET) == KUEUE_PODSET:
                ps["count"] = count
        await ctl.call(session, "PATCH", self.wl_path(wl), {"spec": {"podSets": pod_sets}})
        if not wl_reserved(wl):
            return
        status = copy.deepcopy(wl["status"])
        per_pod = dict(kueue_pod_sets(wl)[0][2]) if wl_pod_sets(wl) else {}
        per_pod["pods"] = decimal.Decimal(1)
        for psa in status["admission"].get("podSetAssignments") or []:
            if psa.get("name") == KUEUE_PODSET:
                psa["count"] = count
                psa["resourceUsage"] = {r: kueue_amount(r, per_pod.get(r, 0) * count)
                                        for r in psa.get("resourceUsage") or {}}
        await self.put_status(ctl, session, wl, status)

    async def stop(self, ctl, session, job, wl):
        """Suspends a Job, its pod template's node selector and tolerations restored from the
        Workload's (what admission added goes)."""
        spec = {"suspend": True}
        if wl is not None and wl_pod_sets(wl):
            original = (wl_pod_sets(wl)[0].get("template") or {}).get("spec") or {}
            current = (_spec(job).get("template") or {}).get("spec") or {}
            selector = {k: None for k in current.get("nodeSelector") or {}}
            selector.update(original.get("nodeSelector") or {})
            template = {}
            if selector != dict(current.get("nodeSelector") or {}):
                template["nodeSelector"] = selector or None
            if original.get("tolerations") != current.get("tolerations"):
                template["tolerations"] = original.get("tolerations")
            if template:
                spec["template"] = {"spec": template}
        await ctl.call(session, "PATCH", self.job_path(job), {"spec": spec})

    async def start(self, ctl, session, job, wl, flavors):
        """Unsuspends a Job, its pod template given the node labels (as a node selector) and
        tolerations of the flavors its Workload was admitted with."""
        spec = {"suspend": False}
        current = (_spec(job).get("template") or {}).get("spec") or {}
        selector, tolerations = dict(current.get("nodeSelector") or {}), \
            list(current.get("tolerations") or [])
        for name in sorted(set(admission_flavors(wl).get(KUEUE_PODSET, {}).values())):
            flavor_spec = _spec(flavors.get(name) or {})
            selector.update(flavor_spec.get("nodeLabels") or {})
            tolerations += [t for t in flavor_spec.get("tolerations") or [] if t not in tolerations]
        template = {}
        if selector != (current.get("nodeSelector") or {}):
            template["nodeSelector"] = selector
        if tolerations != list(current.get("tolerations") or []):
            template["tolerations"] = tolerations
        if template:
            spec["template"] = {"spec": template}
        await ctl.call(session, "PATCH", self.job_path(job), {"spec": spec})

    async def reconcile(self, ctl, session):
        # The Job reconciler, and the garbage collector for Workloads of Jobs that are gone.
        store = kueue_store(self.emulator)
        owned = collections.defaultdict(list)
        for wl in sorted(store["workloads"], key=kueue_order):
            uid = controller_uid(wl)
            if uid is not None and not condition_true(wl, "Finished"):
                owned[uid].append(wl)
        for job in store["jobs"]:
            try:
                actions = kueue_plan_job(job, owned[_meta(job).get("uid")], store["priorities"])
                for action in actions:
                    await self.apply(ctl, session, job, action)
            except (ValueError, RuntimeError) as e:
                print(f"kueue: job {obj_key(job)}: {e}", file=sys.stderr, flush=True)
        for wl in store["workloads"]:
            owner = next((r for r in _meta(wl).get("ownerReferences") or []
                          if isinstance(r, dict) and r.get("kind") == "Job"
                          and r.get("apiVersion") == "batch/v1"), None)
            if owner is not None and owner.get("uid") not in store["job_uids"]:
                await ctl.call(session, "DELETE", self.wl_path(wl))

        # The scheduler.
        store = kueue_store(self.emulator)
        view = KueueView(store["flavors"], store["cqs"], store["lqs"], store["workloads"])
        for decision in view.schedule():
            try:
                await self.decide(ctl, session, decision)
            except RuntimeError as e:
                print(f"kueue: workload {obj_key(decision[1])}: {e}", file=sys.stderr, flush=True)

        # Jobs start (or stop) with their Workloads' admission; the ungater lets admitted pods go.
        store = kueue_store(self.emulator)
        flavors = {_meta(f).get("name"): f for f in store["flavors"]}
        owned = collections.defaultdict(list)
        for wl in sorted(store["workloads"], key=kueue_order):
            uid = controller_uid(wl)
            if uid is not None and not condition_true(wl, "Finished"):
                owned[uid].append(wl)
        for job in store["jobs"]:
            uid = _meta(job).get("uid")
            try:
                run = kueue_plan_run(job, owned[uid])
                if run is not None and run[0] == "start":
                    await self.start(ctl, session, job, run[1], flavors)
                elif run is not None:
                    await self.stop(ctl, session, job, run[1])
                active = kueue_active_slice(owned[uid])
                if kueue_elastic(job) and active is not None and not job_suspended(job):
                    for name in kueue_ungate(active, store["pods"][uid]):
                        pod = next(p for p in store["pods"][uid] if p["metadata"]["name"] == name)
                        gates = [g for g in pod["spec"]["schedulingGates"]
                                 if not (isinstance(g, dict) and g.get("name") == KUEUE_ELASTIC)]
                        await ctl.call(session, "PATCH",
                                       f"/api/v1/namespaces/{_meta(job).get('namespace')}/pods/{name}",
                                       {"spec": {"schedulingGates": gates or None}})
            except RuntimeError as e:
                print(f"kueue: job {obj_key(job)}: {e}", file=sys.stderr, flush=True)

        # The queues' status.
        view = KueueView(store["flavors"], store["cqs"], store["lqs"], store["workloads"])
        for name, cq in view.cqs.items():
            status = view.cq_status(name, cq.get("status"))
            if status != cq.get("status"):
                await ctl.call(session, "PUT", f"/apis/{KUEUE_API}/clusterqueues/{name}/status",
                               {"apiVersion": KUEUE_API, "kind": "ClusterQueue",
                                "metadata": {"name": name}, "status": status})
        for (ns, name), lq in view.lqs.items():
            status = view.lq_status((ns, name), lq.get("status"))
            if status != lq.get("status"):
                await ctl.call(session, "PUT",
                               f"/apis/{KUEUE_API}/namespaces/{ns}/localqueues/{name}/status",
                               {"apiVersion": KUEUE_API, "kind": "LocalQueue",
                                "metadata": {"name": name, "namespace": ns}, "status": status})

    async def apply(self, ctl, session, job, action):
        """One action of kueue_plan_job."""
        kind = action[0]
        if kind == "create":
            wl = action[1]
            await ctl.call(session, "POST",
                           f"/apis/{KUEUE_API}/namespaces/{wl['metadata']['namespace']}/workloads",
                           wl, allowed=(404, 409))
        elif kind == "count":
            await self.set_count(ctl, session, action[1], action[2])
        elif kind == "finish":
            await self.finish(ctl, session, action[1], action[2], action[3])
        elif kind == "delete":
            await ctl.call(session, "DELETE", self.wl_path(action[1]))
        elif kind == "stop":
            await self.stop(ctl, session, job, action[1])

    async def decide(self, ctl, session, decision):
        """Writes one decision of KueueView.schedule."""
        kind, wl = decision[0], decision[1]
        if kind == "wait":
            return
        status = copy.deepcopy(wl.get("status") or {})
        if kind == "evict":
            status.pop("admission", None)
            message = "The workload is deactivated"
            set_condition(status, kueue_condition("Evicted", "True", "Deactivated", message, wl))
            set_condition(status, kueue_condition("QuotaReserved", "False", "PendingEvaluation",
                                                  message, wl))
            set_condition(status, kueue_condition("Admitted", "False", "NoReservation",
                                                  "The workload has no reservation", wl))
            await self.put_status(ctl, session, wl, status)
            return
        if kind == "pending":
            _, _, reason, message = decision
            set_condition(status, kueue_condition("QuotaReserved", "False", reason, message, wl))
            set_condition(status, kueue_condition("Admitted", "False", "NoReservation",
                                                  "The workload has no reservation", wl))
            if status != (wl.get("status") or {}):
                await self.put_status(ctl, session, wl, status)
            return
        _, _, cq, assignments, replaced = decision
        status["admission"] = {"clusterQueue": cq, "podSetAssignments": assignments}
        status["conditions"] = [c for c in status.get("conditions") or []
                                if c.get("type") != "Evicted"]
        set_condition(status, kueue_condition("QuotaReserved", "True", "QuotaReserved",
                                              f"Quota reserved in ClusterQueue {cq}", wl))
        set_condition(status, kueue_condition("Admitted", "True", "Admitted",
                                              "The workload is admitted", wl))
        await self.put_status(ctl, session, wl, status)
        if replaced is not None:
            await self.finish(ctl, session, replaced, "WorkloadSliceReplaced", (
                f"Replaced to accommodate a workload (UID: {_meta(wl).get('uid')}, JobUID: "
                f"{(_meta(wl).get('labels') or {}).get(KUEUE_JOB_UID, '')}) due to workload "
                "slice aggregation"))


def kueue_self_test(check):
    """`--self-test` checks of the Kueue model: quantities, quota arithmetic (fits, borrowing,
    the cohort's limit), flavor assignment, admission order, workload slices, the webhooks, the
    schema checks and the ungater."""
    d = decimal.Decimal
    check([kueue_amount("cpu", d("2.5")), kueue_amount("cpu", 3), kueue_amount("memory", 2 ** 31),
           kueue_amount("memory", 1000), kueue_amount("nvidia.com/gpu", 4)] ==
          ["2500m", "3", "2Gi", "1000", "4"], "kueue amounts")

    def cq(name, cpu, cohort=None, borrowing=None, flavors=("f",), strategy=None, covered=("cpu",),
           selector=None):
        def resources(flavor):
            out = []
            for r in covered:
                res = {"name": r, "nominalQuota": cpu if r == "cpu" else "100"}
                if borrowing is not None and r == "cpu":
                    res["borrowingLimit"] = borrowing
                out.append(res)
            return out
        spec = {"namespaceSelector": {} if selector is None else selector, "resourceGroups": [
            {"coveredResources": list(covered),
             "flavors": [{"name": f, "resources": resources(f)} for f in flavors]}]}
        if cohort:
            spec["cohortName"] = cohort
        if strategy:
            spec["queueingStrategy"] = strategy
        return {"metadata": {"name": name, "generation": 1}, "spec": spec}

    def quota(*queues):
        q = KueueQuota()
        for queue in queues:
            q.add_queue(queue)
        return q

    def cpus(n, per="1", count=1):
        return [(KUEUE_PODSET, count * n, {"cpu": quantity(per, "per-pod cpu"), "pods": d(1)})]

    def fits(result):
        return result[0] is not None

    def refused(result):
        """`(reason, message)` of a refused assignment, or `("fits", "")`."""
        return result[1] if result[0] is None else ("fits", "")

    # Without a cohort: the nominal quota, waiting (how much more) and beyond it for good.
    q = quota(cq("a", "4"))
    assignments, usage = q.assign("a", cpus(2))
    check(assignments == [{"name": "main", "flavors": {"cpu": "f"}, "count": 2,
                           "resourceUsage": {"cpu": "2"}}] and usage == {("f", "cpu"): 2},
          f"kueue: 2 CPUs fit in 4: {assignments} {usage}")
    q.add("a", usage)
    why = refused(q.assign("a", cpus(3)))
    check(why == ("WaitingForQuota", "couldn't assign flavors to pod set main: insufficient "
                  "unused quota for cpu in flavor f, 1 more needed"), f"kueue: waiting: {why}")
    why = refused(q.assign("a", cpus(5)))
    check(why[0] == "ExceedsMaxQuota" and "> maximum capacity (4)" in why[1],
          f"kueue: beyond nominal without a cohort: {why}")
    check(fits(q.assign("a", cpus(4, per="500m"))), "kueue: 4 half CPUs fit in the 2 left")

    # A cohort: borrowing up to nominal + borrowingLimit, within what the others leave unused.
    q = quota(cq("a", "4", "team", borrowing="2"), cq("b", "4", "team"), cq("solo", "4"))
    check(fits(q.assign("a", cpus(6))), "kueue: a borrows 2 of b's idle quota")
    why = refused(q.assign("a", cpus(7)))
    check(why[0] == "ExceedsMaxQuota" and "maximum capacity (6)" in why[1],
          f"kueue: the borrowing limit caps a at 6: {why}")
    q.add("b", {("f", "cpu"): d(3)})
    why = refused(q.assign("a", cpus(6)))
    check(why[0] == "WaitingForQuota" and why[1].endswith("1 more needed"),
          f"kueue: b's use leaves a 5: {why}")
    check(fits(q.assign("b", cpus(5))), "kueue: b (no limit) borrows a's unused quota")
    why = refused(q.assign("b", cpus(6)))
    check(why[0] == "WaitingForQuota" and why[1].endswith("1 more needed"),
          f"kueue: the cohort's unused quota limits b: {why}")
    why = refused(q.assign("b", cpus(9)))
    check(why[0] == "ExceedsMaxQuota" and "maximum capacity (8)" in why[1],
          f"kueue: the cohort's total nominal caps b: {why}")
    check(not fits(q.assign("solo", cpus(5))) and q.capacity("solo", "f", "cpu") == 4,
          "kueue: a queue outside the cohort borrows nothing")

    # Flavors in order; resources the queue does not cover; `pods` when covered.
    q = quota(cq("m", "2", flavors=("small", "big"), covered=("cpu", "pods")))
    q.add("m", {("small", "cpu"): d(2)})
    assignments, usage = q.assign("m", cpus(2))
    check(assignments[0]["flavors"] == {"cpu": "big", "pods": "big"} and
          usage == {("big", "cpu"): 2, ("big", "pods"): 2}, f"kueue: the next flavor: {usage}")
    why = refused(quota(cq("c", "8")).assign(
        "c", [(KUEUE_PODSET, 1, {"cpu": d(1), "memory": d(2 ** 30), "pods": d(1)})]))
    check(why == ("NoMatchingFlavor", "couldn't assign flavors to pod set main: resource memory "
                  "unavailable in ClusterQueue"), f"kueue: an uncovered resource: {why}")

    # Admission order: priority, then creation; BestEffortFIFO passes a Workload that does not
    # fit, StrictFIFO stops at it.
    def workload(name, cpu, count=1, queue="lq", ns="ml", priority=0, admitted_in=None,
                 annotations=None, seq=None):
        uid = f"uid-{ns}-{name}"
        KUEUE_SEQ[uid] = seq if seq is not None else next(_kueue_seq)
        wl = {"metadata": {"name": name, "namespace": ns, "uid": uid, "generation": 1,
                           "annotations": annotations or {}},
              "spec": {"queueName": queue, "priority": priority, "podSets": [
                  {"name": KUEUE_PODSET, "count": count, "template": {"spec": {"containers": [
                      {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}}]}}
        if admitted_in is not None:
            total = quantity(cpu, "cpu") * count
            wl["status"] = {"admission": {"clusterQueue": admitted_in, "podSetAssignments": [
                {"name": KUEUE_PODSET, "flavors": {"cpu": "f"}, "count": count,
                 "resourceUsage": {"cpu": kueue_amount("cpu", total)}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True"},
                               {"type": "Admitted", "status": "True"}]}
        return wl

    flavor = {"metadata": {"name": "f"}}

    def lq(name="lq", target="q", ns="ml"):
        return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": target}}

    def decisions(view):
        return [(x[0], _meta(x[1])["name"]) for x in view.schedule()]

    w1, w2, w3 = workload("w1", "1"), workload("w2", "2"), workload("w3", "1")
    got = decisions(KueueView([flavor], [cq("q", "2")], [lq()], [w3, w2, w1]))
    check(got == [("admit", "w1"), ("pending", "w2"), ("admit", "w3")],
          f"kueue: BestEffortFIFO: {got}")
    got = decisions(KueueView([flavor], [cq("q", "2", strategy="StrictFIFO")], [lq()], [w1, w2, w3]))
    check(got == [("admit", "w1"), ("pending", "w2"), ("wait", "w3")], f"kueue: StrictFIFO: {got}")
    urgent = workload("urgent", "2", priority=1000)
    got = decisions(KueueView([flavor], [cq("q", "2")], [lq()], [w1, urgent]))
    check(got == [("admit", "urgent"), ("pending", "w1")], f"kueue: priority first: {got}")
    view = KueueView([flavor], [cq("q", "2", selector={"matchLabels": {
        "kubernetes.io/metadata.name": "other"}})], [lq()], [w1])
    check(view.schedule()[0][2:] == ("Misconfigured", "workload namespace doesn't match "
                                     "ClusterQueue selector"), "kueue: the namespace selector")
    view = KueueView([], [cq("q", "2")], [lq(), lq("lost", "gone")], [w1, workload("w4", "1",
                                                                                  queue="lost")])
    got = [x[2:] for x in view.schedule()]
    check(got == [("Suspended", "ClusterQueue q is inactive"),
                  ("Misconfigured", "ClusterQueue gone doesn't exist")] and
          view.inactive("q") == ("FlavorNotFound", "Can't admit new workloads: references missing "
                                 "ResourceFlavor(s): f."), f"kueue: inactive queues: {got}")

    idle = workload("idle", "2", admitted_in="q")
    idle["spec"]["active"] = False
    got = decisions(KueueView([flavor], [cq("q", "2")], [lq()], [idle, w1]))
    check(got == [("evict", "idle"), ("admit", "w1")],
          f"kueue: a deactivated Workload is evicted, its quota freed: {got}")

    # Workload slices: a replacement needs quota only for the increase, and replaces its slice.
    old = workload("old", "1", count=2, admitted_in="q")
    other = workload("other", "1", admitted_in="q")
    bigger = workload("bigger", "1", count=4, annotations={KUEUE_SLICE_FOR: "ml/old"})
    view = KueueView([flavor], [cq("q", "4")], [lq()], [old, other, bigger])
    got = view.schedule()
    check(got[0][0] == "pending" and got[0][3].endswith("1 more needed"),
          f"kueue: a slice of 4 over 2 needs 2 more of 1 left: {got}")
    bigger["spec"]["podSets"][0]["count"] = 3
    view = KueueView([flavor], [cq("q", "4")], [lq()], [old, other, bigger])
    got = view.schedule()
    check(got[0][0] == "admit" and got[0][4] is old and view.quota.usage["q", "f", "cpu"] == 4 and
          sorted(view.held) == ["ml/bigger", "ml/other"],
          f"kueue: the slice of 3 replaces the one of 2: {got}")

    def job(parallelism, elastic=True, suspend=False, conditions=None, generation=1):
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": "ml", "uid": "uid-j", "generation": generation,
                             "labels": {KUEUE_QUEUE_LABEL: "lq"},
                             "annotations": {KUEUE_ELASTIC: "true"} if elastic else {}},
                "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": suspend,
                         "template": {"spec": {"priorityClassName": "high", "containers": [
                             {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
                "status": {"conditions": conditions or []}}

    plan = kueue_plan_job(job(2), [], {"high": 1000})
    created = plan[0][1] if plan and plan[0][0] == "create" else {}
    check(len(plan) == 1 and re.fullmatch(r"job-j-[0-9a-f]{5}", _meta(created).get("name", "")) and
          wl_count(created) == 2 and _spec(created).get("priority") == 1000 and
          _meta(created)["annotations"] == {KUEUE_ELASTIC: "true",
                                            KUEUE_SLICE_NAME: _meta(created)["name"]} and
          _meta(created)["ownerReferences"][0]["uid"] == "uid-j", f"kueue: a Job's first Workload: {plan}")
    first = workload("job-j-aaaaa", "1", count=2, admitted_in="q",
                     annotations={KUEUE_ELASTIC: "true", KUEUE_SLICE_NAME: "job-j-aaaaa"})
    plan = kueue_plan_job(job(4, generation=2), [first], {})
    check([a[0] for a in plan] == ["create"] and wl_count(plan[0][1]) == 4 and
          _meta(plan[0][1])["annotations"][KUEUE_SLICE_FOR] == "ml/job-j-aaaaa" and
          _meta(plan[0][1])["annotations"][KUEUE_SLICE_NAME] == "job-j-aaaaa" and
          _meta(plan[0][1])["name"] != _meta(created)["name"], f"kueue: a scale-up slice: {plan}")
    check(kueue_plan_job(job(1), [first], {}) == [("count", first, 1)],
          "kueue: a scale-down changes the admitted Workload in place")
    pending = workload("job-j-bbbbb", "1", count=4, annotations={KUEUE_SLICE_FOR: "ml/job-j-aaaaa"})
    check(kueue_plan_job(job(4), [first, pending], {}) == [], "kueue: a pending slice in step")
    check(kueue_plan_job(job(3), [first, pending], {}) == [("count", pending, 3)],
          "kueue: a pending slice follows the Job")
    admitted = workload("job-j-bbbbb", "1", count=4, admitted_in="q",
                        annotations={KUEUE_SLICE_FOR: "ml/job-j-aaaaa"})
    plan = kueue_plan_job(job(4), [first, admitted], {})
    check(plan == [("finish", first, "WorkloadSliceReplaced",
                    "Replaced to accommodate a new workload slice")],
          f"kueue: two admitted slices: the old one finishes: {plan}")
    check(kueue_plan_run(job(2, suspend=True), [first]) == ("start", first) and
          kueue_plan_run(job(4), [first, pending]) is None, "kueue: an elastic Job starts, waits")
    fixed = workload("job-j-ccccc", "1", count=1, admitted_in="q")
    plan = kueue_plan_job(job(2, elastic=False), [fixed], {})
    check([a[0] for a in plan] == ["stop", "delete"] and plan[0][1] is fixed,
          f"kueue: a non-elastic Job resized while admitted is stopped and requeued: {plan}")
    check([a[0] for a in kueue_plan_job(job(2, elastic=False, suspend=True), [], {})] == ["create"],
          "kueue: requeued with a new Workload")
    check(kueue_plan_run(job(2, elastic=False), [workload("p", "1")])[0] == "stop",
          "kueue: a non-elastic Job runs only admitted")
    check(kueue_plan_run(job(2), [idle])[:2] == ("stop", idle) and
          kueue_plan_run(job(2, suspend=True), [idle]) is None,
          "kueue: a deactivated Workload stops its Job, which stays stopped")
    done = job(2, conditions=[{"type": "Complete", "status": "True", "message": "done"}])
    check(kueue_plan_job(done, [first], {}) == [("finish", first, "Succeeded", "done")],
          "kueue: a finished Job finishes its Workloads")
    base = kueue_workload_name(job(2))
    check(base == kueue_workload_name(job(2)) and base != kueue_workload_name(job(2), "2") and
          base == "job-j-" + hashlib.sha1(b"Job\nbatch\nj\nuid-j").hexdigest()[:5],
          f"kueue: workload names: {base}")

    # The ungater: as many gated pods as the admitted count leaves room for, lowest names first.
    def pod(name, gated_pod=False, phase="Running"):
        return {"metadata": {"name": name}, "status": {"phase": phase},
                "spec": {"schedulingGates": [{"name": KUEUE_ELASTIC}] if gated_pod else []}}
    pods = [pod("j-0"), pod("j-3", True), pod("j-1", True), pod("j-2", True),
            pod("j-9", phase="Failed")]
    active = workload("a", "1", count=3, admitted_in="q")
    check(kueue_ungate(active, pods) == ["j-1", "j-2"], "kueue: ungating within the admitted count")

    # The webhooks and the schema.
    created = job(2)
    kueue_default_job(created)
    check(created["spec"]["suspend"] is True and
          created["spec"]["template"]["spec"]["schedulingGates"] == [{"name": KUEUE_ELASTIC}],
          "kueue: the Job webhook suspends and gates")
    unqueued = job(2)
    unqueued["metadata"]["labels"] = {}
    kueue_default_job(unqueued)
    check(unqueued["spec"]["suspend"] is False, "kueue: a Job naming no queue is left alone")
    partial = job(1, elastic=False)
    partial["metadata"]["annotations"] = {KUEUE_MIN_PARALLELISM: "1"}
    resized = copy.deepcopy(partial)
    resized["spec"]["parallelism"] = 2
    moved = job(2)
    moved["metadata"]["labels"][KUEUE_QUEUE_LABEL] = "other"
    check(kueue_job_errors(partial, resized) == [
        "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the "
        "job is not suspended"] and kueue_job_errors(job(2), job(2, elastic=False)) == [
        f"metadata.annotations[{KUEUE_ELASTIC}]: Invalid value: false: field is immutable"] and
        kueue_job_errors(job(2), moved) == [
        f'metadata.labels[{KUEUE_QUEUE_LABEL}]: Invalid value: "other": field is immutable'] and
        kueue_job_errors(job(2), job(5)) == [], "kueue: the Job validating webhook")
    bad = cq("bad", "lots", borrowing="1")
    errors = kueue_object_errors("ClusterQueue", bad)
    check(errors == ['spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: '
                     '"lots": must be a quantity',
                     'spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: Invalid '
                     'value: "1": must be nil when cohort is empty'], f"kueue: schema: {errors}")
    check(kueue_object_errors("LocalQueue", {"spec": {}}) == ["spec.clusterQueue: Required value"]
          and kueue_object_errors("LocalQueue", lq("x", "b"), lq("x", "a")) ==
          ['spec.clusterQueue: Invalid value: "b": field is immutable'] and
          kueue_unknown_field("ClusterQueue", {"spec": {"cohort": "t"}}) == "spec.cohort",
          "kueue: LocalQueue and unknown fields")

    sa = USERS[SA_TOKEN]
    deploy = Rbac.from_files(default_rbac_files())
    for method, path, allowed in [
        ("GET", f"/apis/{KUEUE_API}/workloads", True),
        ("GET", f"/apis/{KUEUE_API}/clusterqueues/q", True),
        ("PATCH", f"/apis/{KUEUE_API}/namespaces/ml/workloads/w", False),
    ]:
        check(deploy.allows(sa, request_attributes(method, path, {})) == allowed,
              f"kueue RBAC: the service account {method} {path}: want allowed={allowed}")


def jobset_self_test(check):
    """The JobSet checks of `--self-test`: deploy/'s RBAC for JobSets, the child Jobs and the
    ElasticJobSet patch."""
    sa = USERS[SA_TOKEN]
    deploy = Rbac.from_files(default_rbac_files())
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets"
    for method, url, query, allowed in [
        ("GET", path, {"watch": "true"}, True), ("GET", "/apis/jobset.x-k8s.io/v1alpha2/jobsets",
                                                 {}, True),
        ("GET", f"{path}/js", {}, True), ("PATCH", f"{path}/js", {}, True),
        ("PUT", f"{path}/js", {}, False), ("DELETE", f"{path}/js", {}, False),
        ("PATCH", f"{path}/js/status", {}, False), ("POST", path, {}, False),
    ]:
        method_path = f"{method} {url} {query}"
        attrs = request_attributes(method, url, query)
        check(deploy.allows(sa, attrs) == allowed,
              f"deploy RBAC: the service account {method_path}: want allowed={allowed}")
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "uid": "uid-js"},
        "spec": {"replicatedJobs": [
            {"name": "launcher", "template": {"spec": {"parallelism": 1, "template": {
                "spec": {"containers": [{"name": "c"}]}}}}},
            {"name": "workers", "replicas": 2, "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"completionMode": "Indexed", "parallelism": 3, "completions": 3,
                         "template": {"metadata": {"labels": {"app": "w"}},
                                      "spec": {"containers": [{"name": "c"}]}}}}},
        ]},
    }
    children = jobset_children(jobset)
    check([c["metadata"]["name"] for c in children] == ["js-launcher-0", "js-workers-0",
                                                        "js-workers-1"],
          f"one child Job per replicated Job and replica: {[c['metadata']['name'] for c in children]}")
    worker = children[2]
    want = {JOBSET_NAME_LABEL: "js", REPLICATED_JOB_LABEL: "workers", JOB_INDEX_LABEL: "1"}
    check(worker["metadata"]["labels"] == {"team": "a", **want}, f"Job labels: {worker['metadata']}")
    check(worker["spec"]["template"]["metadata"]["labels"] == {"app": "w", **want},
          f"pod template labels: {worker['spec']['template']}")
    owner = worker["metadata"]["ownerReferences"][0]
    check(owner["kind"] == "JobSet" and owner["uid"] == "uid-js" and owner["controller"],
          f"controlled by the JobSet: {owner}")
    check(worker["spec"]["parallelism"] == 3 and not worker["spec"].get("suspend"),
          f"the template's spec: {worker['spec']}")
    check(played_job(worker) and not played_job({"metadata": {"name": "backup"}}),
          "a child Job is played, an ordinary Job is not")
    check(played_job({"metadata": {"annotations": {ELASTIC_JOB_ANNOTATION: "1"}}}),
          "an elastic Job is played")
    suspended = jobset_children(dict(jobset, spec=dict(jobset["spec"], suspend=True)))
    check(all(c["spec"].get("suspend") for c in suspended), "a suspended JobSet's children are")
    resized = copy.deepcopy(worker)
    resized["spec"]["parallelism"] = resized["spec"]["completions"] = 5
    check(child_scaling(resized, worker) == {"spec": {"parallelism": 5, "completions": 5}},
          "a template resized with parallelism == completions patches the child")
    check(child_scaling(worker, worker) is None, "an unchanged template patches nothing")
    uneven = copy.deepcopy(resized)
    uneven["spec"]["completions"] = 4
    check(child_scaling(uneven, worker) is None, "parallelism != completions patches nothing")


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
    user: {user}
    namespace: {namespace}
current-context: kmock
users:
- name: {user}
  user:
    token: {token}
"""


def write_kubeconfigs(path, url):
    """PATH: the service account's token, namespace trainscale-system; PATH.admin: the admin's,
    namespace default."""
    with open(path, "w") as f:
        f.write(KUBECONFIG.format(url=url, user="trainscale", namespace=SA_NAMESPACE,
                                  token=SA_TOKEN))
    with open(f"{path}.admin", "w") as f:
        f.write(KUBECONFIG.format(url=url, user="admin", namespace="default", token=ADMIN_TOKEN))


class SetupError(Exception):
    """A flag or an input file the harness cannot use (the message names it)."""


def load_nodes(path):
    """The Node objects of a `--nodes` file (a JSON list)."""
    try:
        nodes = json.loads(pathlib.Path(path).read_text())
    except OSError as e:
        raise SetupError(f"--nodes {path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise SetupError(f"--nodes {path}: not JSON: {e}") from None
    if not isinstance(nodes, list):
        raise SetupError(f"--nodes {path}: not a JSON list of Node objects")
    seen = set()
    out = []
    for i, node in enumerate(nodes):
        where = f"--nodes {path}: [{i}]"
        if not isinstance(node, dict):
            raise SetupError(f"{where}: not an object")
        meta = node.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise SetupError(f"{where}: metadata.name is required")
        if node.get("kind", "Node") != "Node":
            raise SetupError(f"{where} ({name}): kind must be Node, not {node.get('kind')!r}")
        if name in seen:
            raise SetupError(f"{where}: node {name} is listed twice")
        seen.add(name)
        try:
            resource_map((node.get("status") or {}).get("allocatable"),
                         f"node {name}: status.allocatable")
            resource_map((node.get("status") or {}).get("capacity"), f"node {name}: status.capacity")
        except ValueError as e:
            raise SetupError(f"{where}: {e}") from None
        node = copy.deepcopy(node)
        node.setdefault("apiVersion", "v1")
        node["kind"] = "Node"
        out.append(node)
    return out


def default_node(name, cpu, memory, pods, gpu):
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpu:
        allocatable["nvidia.com/gpu"] = gpu
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable),
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def seed(emulator, nodes, pytorch_crds=False):
    for key, info in RESOURCES.items():
        emulator.resources[key] = info
    if pytorch_crds:
        for key, info in PYTORCH_RESOURCES.items():
            emulator.resources[key] = info
            SERVED[resource_key(key)] = info
    emulator.objects["scheduling.k8s.io/v1/priorityclasses", None, "high"] = stamp({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "high", "uid": "uid-pc-high", "generation": 1}, "value": 1000,
    })
    for node in nodes:
        meta = node["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", now())
        meta["generation"] = 1
        emulator.objects["v1/nodes", None, meta["name"]] = stamp(node)


# ---------------------------------------------------------------------------------------------
# Self-test (`--self-test`): the RBAC evaluation and the fit, without a server.

SELF_TEST_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: wide}
rules:
  - {apiGroups: ["*"], resources: ["*"], verbs: ["get"]}
  - {apiGroups: ["apps"], resources: ["*/scale"], verbs: ["update"]}
  - {apiGroups: [""], resources: ["pods/*"], verbs: ["create"]}
  - {nonResourceURLs: ["/metrics", "/debug/*"], verbs: ["get"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: wide}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wide}
subjects: [{kind: Group, name: readers}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: named}
rules:
  - {apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [mine],
     verbs: [get, list, watch, "*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: named, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: named}
subjects: [{kind: User, name: alice}]
"""


def self_test():
    """Checks the RBAC evaluation against deploy/ and a small policy, the request
    classification, the loader's errors and the fit; prints each failure; 0 when all pass."""
    failures, count = [], 0

    def check(ok, what):
        nonlocal count
        count += 1
        if not ok:
            failures.append(what)

    def attrs(method, path, query=None):
        return request_attributes(method, path, query or {})

    sa = USERS[SA_TOKEN]
    deploy = Rbac.from_files(default_rbac_files())
    for method, path, query, allowed in [
        ("GET", "/api/v1/pods", {}, True),
        ("GET", "/api/v1/pods", {"watch": "true"}, True),
        ("POST", "/api/v1/namespaces/ml/pods/p/binding", {}, True),
        ("POST", "/api/v1/namespaces/ml/pods", {}, False),
        ("POST", "/api/v1/namespaces/ml/pods/p/eviction", {}, False),
        ("DELETE", "/api/v1/namespaces/ml/pods", {}, True),
        ("DELETE", "/api/v1/namespaces/ml/pods/p", {}, False),
        ("PATCH", "/apis/batch/v1/namespaces/ml/jobs/j", {}, True),
        ("PUT", "/apis/batch/v1/namespaces/ml/jobs/j", {}, False),
        ("PATCH", "/apis/paddlepaddle.org/v1alpha1/namespaces/ml/trainingjobs/t/status", {}, True),
        ("PATCH", "/apis/paddlepaddle.org/v1alpha1/namespaces/ml/trainingjobs/t", {}, False),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/trainscale-system/leases/l", {}, True),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l", {}, False),
        ("GET", "/apis/coordination.k8s.io/v1/leases", {}, False),
        ("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/p", {}, True),
        ("GET", "/api", {}, True), ("GET", "/apis", {}, True), ("GET", "/api/v1", {}, True),
        ("GET", "/apis/batch/v1", {}, True), ("GET", "/version", {}, True),
        ("GET", "/openapi/v3/apis/batch/v1", {}, True), ("GET", "/metrics", {}, False),
    ]:
        check(deploy.allows(sa, attrs(method, path, query)) == allowed,
              f"deploy RBAC: the service account {method} {path} {query}: want allowed={allowed}")
    check(deploy.allows(USERS[ADMIN_TOKEN], attrs("DELETE", "/api/v1/nodes/n")),
          "system:masters may do anything")
    check(not deploy.allows(User("nobody", ["system:authenticated"]), attrs("GET", "/api/v1/pods")),
          "an unbound user lists nothing")

    denied = forbidden_status(sa, attrs("GET", "/api/v1/pods"))
    check(denied["message"] == 'pods is forbidden: User "system:serviceaccount:trainscale-system:'
          'trainscale" cannot list resource "pods" in API group "" at the cluster scope',
          f"cluster-scope message: {denied['message']}")
    check(denied["details"] == {"kind": "pods"} and denied["code"] == 403
          and denied["reason"] == "Forbidden", f"details: {denied}")
    denied = forbidden_status(sa, attrs("POST", "/api/v1/namespaces/ml/pods/p/eviction"))
    check(denied["message"].endswith('cannot create resource "pods/eviction" in API group "" in '
                                     'the namespace "ml"')
          and denied["message"].startswith('pods "p" is forbidden: '),
          f"subresource message: {denied['message']}")
    check(denied["details"] == {"name": "p", "kind": "pods"}, f"named details: {denied}")
    denied = forbidden_status(sa, attrs("DELETE", "/apis/batch/v1/namespaces/ml/jobs/j"))
    check(denied["message"].startswith('jobs.batch "j" is forbidden: ')
          and denied["details"] == {"name": "j", "group": "batch", "kind": "jobs"},
          f"group details: {denied}")
    denied = forbidden_status(sa, attrs("GET", "/metrics"))
    check(denied["message"] == 'forbidden: User "system:serviceaccount:trainscale-system:'
          'trainscale" cannot get path "/metrics"', f"non-resource message: {denied['message']}")

    for method, path, query, want in [
        ("GET", "/api/v1/namespaces/ml/pods", {}, ("list", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/namespaces/ml/pods", {"watch": "1"}, ("watch", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/watch/namespaces/ml/pods", {}, ("watch", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/namespaces/ml/pods/p", {}, ("get", "", "pods", "", "ml", "p")),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/s/leases",
         {"fieldSelector": "metadata.name=l"}, ("list", "coordination.k8s.io", "leases", "", "s", "l")),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/s/leases",
         {"watch": "true", "fieldSelector": "metadata.name==l"},
         ("watch", "coordination.k8s.io", "leases", "", "s", "l")),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/s/leases",
         {"fieldSelector": "metadata.name!=l"}, ("list", "coordination.k8s.io", "leases", "", "s", "")),
        ("DELETE", "/api/v1/namespaces/ml/pods", {}, ("deletecollection", "", "pods", "", "ml", "")),
        ("PUT", "/apis/batch/v1/namespaces/ml/jobs/j/status", {},
         ("update", "batch", "jobs", "status", "ml", "j")),
        ("GET", "/api/v1/namespaces/ml", {}, ("get", "", "namespaces", "", "ml", "ml")),
        ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "", "")),
    ]:
        a = attrs(method, path, query)
        got = (a.verb, a.group, a.resource, a.subresource, a.namespace, a.name)
        check(a.resource_request and got == want, f"classify {method} {path} {query}: {got} != {want}")
    check(not attrs("GET", "/apis/batch/v1").resource_request, "/apis/G/V is non-resource")

    policy = Rbac()
    policy.load_text(SELF_TEST_RBAC, "self-test")
    reader = User("r", ["readers", "system:authenticated"])
    alice = User("alice", ["system:authenticated"])
    for user, method, path, query, allowed in [
        (reader, "GET", "/api/v1/namespaces/x/pods/p/log", {}, True),  # `*` covers subresources
        (reader, "GET", "/apis/anything.io/v1/things/t", {}, True),
        (reader, "GET", "/apis/anything.io/v1/things", {}, False),
        (reader, "PUT", "/apis/apps/v1/namespaces/x/deployments/d/scale", {}, True),  # `*/scale`
        (reader, "PUT", "/apis/apps/v1/namespaces/x/deployments/d", {}, False),
        (reader, "POST", "/api/v1/namespaces/x/pods/p/binding", {}, False),  # `pods/*`: literal
        (reader, "GET", "/metrics", {}, True), (reader, "GET", "/debug/pprof", {}, True),
        (reader, "POST", "/metrics", {}, False),
        (alice, "GET", "/apis/coordination.k8s.io/v1/namespaces/team/leases/mine", {}, True),
        (alice, "GET", "/apis/coordination.k8s.io/v1/namespaces/team/leases/other", {}, False),
        (alice, "GET", "/apis/coordination.k8s.io/v1/namespaces/team/leases", {}, False),
        (alice, "GET", "/apis/coordination.k8s.io/v1/namespaces/team/leases",
         {"watch": "true", "fieldSelector": "metadata.name=mine"}, True),
        (alice, "GET", "/apis/coordination.k8s.io/v1/namespaces/other/leases/mine", {}, False),
        (alice, "POST", "/apis/coordination.k8s.io/v1/namespaces/team/leases", {}, False),
        (alice, "DELETE", "/apis/coordination.k8s.io/v1/namespaces/team/leases/mine", {}, True),
    ]:
        check(policy.allows(user, attrs(method, path, query)) == allowed,
              f"policy: {user.name} {method} {path} {query}: want allowed={allowed}")

    for text, error in [
        ("kind: Role\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: r}\n",
         "Role r: metadata.namespace is required"),
        ("kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: c}\n"
         "rules: [{apiGroups: [''], resources: [pods]}]\n", "ClusterRole c: rules[0]: verbs is required"),
        ("kind: ClusterRoleBinding\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: b}\n"
         "subjects: []\n", "ClusterRoleBinding b: roleRef is required"),
        ("kind: RoleBinding\napiVersion: rbac.authorization.k8s.io/v1\n"
         "metadata: {name: b, namespace: n}\n"
         "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: c}\n"
         "subjects: [{kind: ServiceAccount, name: s}]\n",
         "RoleBinding b: subjects[0]: namespace is required for a ServiceAccount"),
        ("kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: c}\n"
         "rules: [{resources: [pods], verbs: [get]}]\n", "rules[0]: apiGroups is required"),
        ("kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: c}\n"
         "rules: [{apiGroups: [''], resources: pods, verbs: [get]}]\n",
         "rules[0]: resources must be a list of strings"),
    ]:
        try:
            Rbac().load_text(text, "bad.yaml")
            check(False, f"no error for {text!r}")
        except RbacError as e:
            check(str(e).startswith("bad.yaml: document 1: ") and error in str(e),
                  f"error {str(e)!r} does not say {error!r}")

    # Fit: requests (limits default them, init containers and sidecars), taints, affinity.
    q = quantity
    check(q("500m", "q") == decimal.Decimal("0.5") and q("1Gi", "q") == 2 ** 30 and
          q("1e3", "q") == 1000 and q("2E", "q") == 2 * 10 ** 18 and q(3, "q") == 3, "quantities")
    try:
        quantity("lots", "pod p: cpu")
        check(False, "a bad quantity parses")
    except ValueError as e:
        check("pod p: cpu" in str(e), f"quantity error: {e}")
    pod = {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}}},
                       {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
        "initContainers": [{"name": "side", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "250m"}}},
                           {"name": "init", "resources": {"requests": {"cpu": "4"}}}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"zone": "a"},
    }}
    requests = pod_requests(pod)
    check(requests == {"cpu": decimal.Decimal("4.25"), "memory": 2 ** 30, "nvidia.com/gpu": 1,
                       "pods": 1}, f"pod requests: {requests}")

    def node(name, cpu, labels=None, taints=None, unschedulable=False, pods="110"):
        return {"metadata": {"name": name, "labels": labels or {}},
                "spec": {"taints": taints or [], "unschedulable": unschedulable},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods,
                                           "nvidia.com/gpu": "1"}}}

    nodes = [node("a-small", "2", {"zone": "a"}),
             node("b-tainted", "8", {"zone": "a"}, [{"key": "other", "effect": "NoSchedule"}]),
             node("c-other-zone", "8", {"zone": "b"}),
             node("d-cordoned", "8", {"zone": "a"}, unschedulable=True),
             node("e-fits", "8", {"zone": "a"}, [{"key": "gpu", "effect": "NoSchedule"}]),
             node("f-fits-too", "8", {"zone": "a"})]
    placement = Placement(nodes, [])
    check(placement.place(pod) == ("e-fits", None), "first fitting node in name order")
    where, why = placement.place(pod)  # e-fits has no GPU left: f-fits-too
    check(where == "f-fits-too", f"second pod: {where} {why}")
    where, why = placement.place(pod)
    check(where is None and why.startswith("0/6 nodes are available: ") and
          "3 Insufficient cpu" in why and "2 Insufficient nvidia.com/gpu" in why and
          "1 node(s) had untolerated taint {other}" in why and
          "1 node(s) didn't match Pod's node affinity/selector" in why and
          "1 node(s) were unschedulable" in why, f"unschedulable message: {why}")
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"},
                              {"key": "zone", "operator": "DoesNotExist"}]}]}}
    picky = {"spec": {"affinity": {"nodeAffinity": affinity}}}
    check([n["metadata"]["name"] for n in nodes if node_affinity_matches(picky, n)] ==
          ["c-other-zone"], "node affinity: In/NotIn/Exists/DoesNotExist, terms OR'ed")
    kubelet = Placement([node("n", "1", pods="2")], [
        {"metadata": {"name": "done", "uid": "1"}, "spec": {"nodeName": "n", "containers": []},
         "status": {"phase": "Succeeded"}}])
    small = {"metadata": {"name": "s"}, "spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "600m"}}}]}}
    check(kubelet.admit(small, "n") is None, "a Succeeded pod holds nothing")
    rejected = kubelet.admit(small, "n")
    check(rejected is not None and rejected[0] == "OutOfcpu" and
          "cpu, requested: 600, used: 600, capacity: 1000" in rejected[1], f"admission: {rejected}")
    empty = {"metadata": {"name": "z"}, "spec": {"containers": []}}
    check(kubelet.admit(empty, "n") is None, "the second pod of two")
    check(kubelet.admit(empty, "n")[0] == "OutOfpods", "the pods allocatable")
    ported = lambda name, ip=None: {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "c", "ports": [dict({"containerPort": 7164, "hostPort": 7164},
                                     **({"hostIP": ip} if ip else {}))]}]}}
    terminating = dict(ported("old"), metadata={"name": "old", "uid": "2",
                                                "deletionTimestamp": "2026-01-01T00:00:00Z"})
    terminating["spec"] = dict(terminating["spec"], nodeName="p")
    kubelet = Placement([node("p", "4", pods="10")], [terminating])
    check(kubelet.admit(ported("new"), "p")[0] == "NodePorts",
          "a terminating pod still holds its host port")
    check(kubelet.admit({"metadata": {"name": "other"}, "spec": {"containers": [
        {"name": "c", "ports": [{"containerPort": 7164, "hostPort": 7164, "protocol": "UDP"}]}]}},
        "p") is None, "another protocol is another port")
    # Graceful deletion (`--pod-grace`): who terminates, and for how long.
    saved_grace = POD_GRACE_S[0]
    POD_GRACE_S[0] = 5.0
    running_bound = {"spec": {"nodeName": "p", "terminationGracePeriodSeconds": 2},
                     "status": {"phase": "Running"}}
    check(pod_grace(running_bound, None) == 2.0, "a bound pod terminates for its own grace")
    check(pod_grace(dict(running_bound, spec={"nodeName": "p"}), None) == 5.0,
          "the default 30 s grace is capped at --pod-grace")
    check(pod_grace(running_bound, 0) == 0, "gracePeriodSeconds 0 deletes at once")
    check(pod_grace(running_bound, 1) == 1.0, "the DeleteOptions' grace comes first")
    check(pod_grace(dict(running_bound, status={"phase": "Failed"}), None) == 0,
          "an ended pod goes at once")
    check(pod_grace({"spec": {}, "status": {"phase": "Pending"}}, None) == 0,
          "an unbound pod goes at once")
    POD_GRACE_S[0] = 0.0
    check(pod_grace(running_bound, None) == 0, "without --pod-grace every pod goes at once")
    POD_GRACE_S[0] = saved_grace
    check(labels_match(label_requirements("a=1,b in (x, y),!c,d,e!=2"),
                       {"a": "1", "b": "y", "d": "", "e": "3"}), "label selector")
    check(not labels_match(label_requirements("b notin (x,y)"), {"b": "x"}), "notin")

    kueue_self_test(check)
    jobset_self_test(check)

    for failure in failures:
        print(f"FAIL {failure}")
    print(f"self-test: {count - len(failures)} of {count} checks passed")
    return 1 if failures else 0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", help="write the service account's kubeconfig here, the "
                        "admin's to KUBECONFIG.admin")
    parser.add_argument("--lifetime", type=float, default=120.0)
    parser.add_argument("--controllers", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--nodes", help="a JSON list of Node objects to seed instead of node-1")
    parser.add_argument("--node-cpu", help="allocatable CPU of node-1 (default 16)")
    parser.add_argument("--node-memory", help="allocatable memory of node-1 (default 64Gi)")
    parser.add_argument("--node-pods", help="allocatable pods of node-1 (default 110)")
    parser.add_argument("--node-gpu", help="allocatable nvidia.com/gpu of node-1 (none by default)")
    parser.add_argument("--node-name", help="the node's name (default node-1)")
    parser.add_argument("--pod-grace", type=float, default=1.0,
                        help="the most seconds a deleted pod stays terminating (default 1; 0: "
                             "gone at once)")
    parser.add_argument("--period", type=float, default=0.2,
                        help="seconds between two rounds of the fake controllers")
    parser.add_argument("--port", type=int, default=None,
                        help="serve on this port (a second emulator replacing a first one)")
    parser.add_argument("--schedulers", default=",".join(sorted(PLAYED_SCHEDULERS)),
                        help="comma-separated schedulers the harness plays: pods naming one of "
                             "them (or none) are placed by it, others stay pending")
    parser.add_argument("--pytorch-crds", action="store_true",
                        help="also serve pytorchtrainingjobs (batch.tensorstack.dev/v1beta1) "
                             "and pytorchjobs (kubeflow.org/v1)")
    parser.add_argument("--kueue", action="store_true",
                        help="also serve Kueue (kueue.x-k8s.io/v1beta2) and play its webhooks "
                             "and controllers")
    parser.add_argument("--jobset-crd", action="store_true",
                        help="also serve jobsets (jobset.x-k8s.io/v1alpha2) and play the JobSet "
                             "controller")
    parser.add_argument("--rbac", action="append", metavar="FILE",
                        help="enforce the RBAC objects of FILE (repeatable) instead of deploy/'s")
    parser.add_argument("--no-rbac", action="store_true", help="authorize every request")
    parser.add_argument("--self-test", action="store_true",
                        help="check the RBAC evaluation, the fit and the Kueue model, then exit")
    args = parser.parse_args(argv)
    if args.self_test:
        return args
    if not args.kubeconfig:
        parser.error("--kubeconfig is required")
    if args.rbac and args.no_rbac:
        parser.error("--rbac and --no-rbac exclude each other")
    flags = ("node_cpu", "node_memory", "node_pods", "node_gpu", "node_name")
    if args.nodes and any(getattr(args, f) is not None for f in flags):
        parser.error("--nodes replaces node-1: give it or the --node-* flags, not both")
    return args


async def main():
    global NODE, PLAYED_SCHEDULERS
    args = parse_args(sys.argv[1:])
    if args.self_test:
        sys.exit(self_test())
    try:
        rbac = None if args.no_rbac else Rbac.from_files(args.rbac or default_rbac_files())
        if args.nodes:
            nodes = load_nodes(args.nodes)
        else:
            NODE = args.node_name or NODE
            nodes = [default_node(NODE, args.node_cpu or "16", args.node_memory or "64Gi",
                                  args.node_pods or "110", args.node_gpu)]
    except (RbacError, SetupError) as e:
        print(f"kmock_cluster: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    PLAYED_SCHEDULERS = {name for name in args.schedulers.split(",") if name}
    POD_GRACE_S[0] = max(0.0, args.pod_grace)

    emulator = StampingEmulator()
    emulator.rbac = rbac
    seed(emulator, nodes, args.pytorch_crds)
    if args.kueue:
        serve_kueue(emulator)
    if args.jobset_crd:
        seed_jobset_crd(emulator)
    headers = {"User-Agent": HARNESS_AGENT, "Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with emulator, kmock.Server(emulator, port=args.port) as server, aiohttp.ClientSession(headers=headers) as session:
        url = str(server.url).rstrip("/")
        write_kubeconfigs(args.kubeconfig, url)
        tasks = []
        if args.controllers:
            kueue = KueueController(emulator) if args.kueue else None
            tasks.append(asyncio.create_task(
                Controllers(emulator, url, args.period, kueue).run(session)))
        print(f"READY {url}", flush=True)
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await asyncio.wait([stdin_closed], timeout=args.lifetime)
        for task in tasks:
            task.cancel()
    # The executor thread blocked on stdin must not keep the process alive.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
