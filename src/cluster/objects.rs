//! Reading the parts of Nodes, Pods, trainer Jobs and TrainingJobs that the planner needs.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

use super::filters::{Extended, NodeTraits, PodConstraints, add_into, is_extended, max_into};
use super::kinds::PodClaim;

use crate::api::priority::PriorityClasses;
use crate::api::speedup::{SPEEDUP_ANNOTATION, SpeedupCurve};
use crate::api::{
    FieldError, GPU_RESOURCE_NAMES, JobKey, JobKind, LABEL_MASTER, LABEL_PADDLE_JOB, LABEL_PSERVER,
    LABEL_TRAINER, Quantity, Resources, TrainingJob, TrainingJobPhase, parse_resources,
    resources_of,
};

/// What the state keeps of a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub allocatable: Resources,
    /// Neither cordoned (`spec.unschedulable`) nor NotReady: its capacity counts.
    pub schedulable: bool,
}

/// Most allocatable CPU (milli) or memory (bytes) a Node may have: 2^53 (9·10^12 cores, 8 PiB),
/// the largest integer a metrics gauge (f64) holds exactly.
pub const MAX_NODE_AMOUNT: i64 = 1 << 53;

/// Most allocatable GPUs a Node may have: 2^20. The planner sums GPUs over up to 2^32 nodes in
/// an i64, which 2^20 each cannot overflow.
pub const MAX_NODE_GPUS: i64 = 1 << 20;

/// Reads a Node: allocatable CPU, memory and GPUs, whether it takes pods, and what the
/// scheduler's filters look at. An amount above [`MAX_NODE_AMOUNT`] or [`MAX_NODE_GPUS`] is an
/// error naming `status.allocatable.<resource>`.
pub fn read_node(node: &Node) -> Result<(NodeInfo, NodeTraits), FieldError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let object = format!("Node {}", crate::api::names::printable(&name));
    if name.is_empty() {
        return Err(FieldError::new(
            object,
            "metadata.name",
            "a Node needs a name",
        ));
    }
    // The API server takes a Node's name as a DNS-1123 subdomain.
    if let Some(e) = meta_name_problem(&object, &node.metadata) {
        return Err(e);
    }
    let status = node.status.as_ref();
    let map = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let allocatable = resources_of(map, &object, "status.allocatable")?;
    let too_much = |resource: &str, max: String| {
        let text = map
            .and_then(|m| m.get(resource))
            .map_or("", |q| q.0.as_str());
        FieldError::new(
            object.clone(),
            format!("status.allocatable.{resource}"),
            format!("quantity {text:?} is more than a node can have (at most {max})"),
        )
    };
    if allocatable.cpu_milli > MAX_NODE_AMOUNT {
        return Err(too_much("cpu", format!("{MAX_NODE_AMOUNT}m")));
    }
    if allocatable.memory > MAX_NODE_AMOUNT {
        return Err(too_much("memory", MAX_NODE_AMOUNT.to_string()));
    }
    if allocatable.gpu > MAX_NODE_GPUS {
        // The name `resources_of` read the GPUs from: the first with a nonzero amount.
        let name = GPU_RESOURCE_NAMES
            .into_iter()
            .find(|name| {
                map.and_then(|m| m.get(*name))
                    .is_some_and(|q| Quantity::parse(&q.0).is_ok_and(|q| q != Quantity::ZERO))
            })
            .unwrap_or(GPU_RESOURCE_NAMES[0]);
        return Err(too_much(name, MAX_NODE_GPUS.to_string()));
    }
    // Cordoned and Ready as the filters read them (a node without any Ready condition, as in a
    // hand-written snapshot, counts as ready).
    let traits = NodeTraits::read(node)?;
    let info = NodeInfo {
        allocatable,
        schedulable: !traits.unschedulable && traits.ready,
    };
    Ok((info, traits))
}

/// The role of a pod in its job (a PyTorch kind's worker is a `Trainer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Trainer,
    Pserver,
    Master,
}

/// The lifecycle phase of a pod as far as resources go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodPhase {
    Pending,
    Running,
    /// Succeeded or Failed: holds nothing.
    Finished,
    Unknown,
    /// Pending, not bound, and held by `spec.schedulingGates`: no scheduler may bind it until
    /// the gates are lifted.
    Gated,
}

/// Whether a pod spec has scheduling gates (`spec.schedulingGates` not empty): the API server
/// refuses to bind such a pod.
pub fn is_gated(spec: &PodSpec) -> bool {
    spec.scheduling_gates
        .as_ref()
        .is_some_and(|g| !g.is_empty())
}

/// What the state keeps of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub node: Option<String>,
    pub phase: PodPhase,
    /// As kube-scheduler counts it (see [`pod_requests`]).
    pub requests: Resources,
    /// Has a deletion timestamp: still holds its resources, no longer counts as a trainer.
    pub terminating: bool,
    pub owner: Option<(JobKey, Role)>,
    /// Creation time, seconds since the epoch (0 when unknown).
    pub created: i64,
    /// The Indexed Job completion index (annotation or label
    /// `batch.kubernetes.io/job-completion-index`), when the pod has one.
    pub index: Option<u32>,
    /// Requests of the other resources (`rdma/hca`, `hugepages-2Mi`…), as the filters count them.
    pub extended: Extended,
    /// `spec.priority` (the value admission resolved from its PriorityClass); 0 when unset.
    pub priority: i32,
    /// The job the pod may belong to, which only that job's object confirms (an elastic Job's
    /// or a JobSet's pods, see [`PodClaim`]): `ClusterState` sets `owner` from it.
    pub claim: Option<PodClaim>,
}

/// The annotation (and, since Kubernetes 1.28, label) the Job controller puts on every pod of an
/// Indexed Job.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

fn seconds(time: Option<&Time>) -> i64 {
    time.map(|t| t.0.as_second()).unwrap_or(0)
}

/// `Kind namespace/name` for errors.
pub fn meta_ref(kind: &str, meta: &ObjectMeta) -> String {
    use crate::api::names::printable;
    format!(
        "{kind} {}/{}",
        printable(meta.namespace.as_deref().unwrap_or("")),
        printable(meta.name.as_deref().unwrap_or(""))
    )
}

/// The pod's key `(namespace, name)`.
pub fn pod_key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Amounts a pod's request is made of, added and maxed resource by resource: CPU, memory and
/// GPUs ([`Resources`]) or the other resources ([`Extended`]).
pub trait Amounts: Default {
    /// Adds `other` (saturating).
    fn add(&mut self, other: &Self);
    /// Raises each amount to at least `other`'s.
    fn raise_to(&mut self, other: &Self);
}

impl Amounts for Resources {
    fn add(&mut self, other: &Self) {
        *self += *other;
    }

    fn raise_to(&mut self, other: &Self) {
        *self = Resources::max(*self, *other);
    }
}

impl Amounts for Extended {
    fn add(&mut self, other: &Self) {
        add_into(self, other);
    }

    fn raise_to(&mut self, other: &Self) {
        max_into(self, other);
    }
}

/// One resource map of a pod spec as [`pod_requests`] hands it to its reader.
#[derive(Debug)]
pub struct RequestMap<'a> {
    /// A container's requests, its limits standing for the requests it does not state (the API
    /// server's defaulting), or the pod's overhead.
    pub map: Cow<'a, BTreeMap<String, KubeQuantity>>,
    /// The container (`None`: the overhead).
    container: Option<(&'a Container, &'static str, usize)>,
}

impl<'a> RequestMap<'a> {
    fn container(c: &'a Container, list: &'static str, index: usize) -> Self {
        let resources = c.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.as_ref());
        let limits = resources
            .and_then(|r| r.limits.as_ref())
            .filter(|l| !l.is_empty());
        let map = match (requests, limits) {
            (Some(requests), Some(limits))
                if limits.keys().all(|name| requests.contains_key(name)) =>
            {
                Cow::Borrowed(requests)
            }
            (requests, Some(limits)) => {
                let mut map = limits.clone();
                map.extend(
                    requests
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
                Cow::Owned(map)
            }
            (Some(requests), None) => Cow::Borrowed(requests),
            (None, None) => Cow::Owned(BTreeMap::new()),
        };
        RequestMap {
            map,
            container: Some((c, list, index)),
        }
    }

    /// The field, under the pod spec, that `resource`'s amount comes from:
    /// `containers[0].resources.requests.cpu`, `initContainers[1].resources.limits.cpu` (a limit
    /// standing for a missing request) or `overhead.cpu`.
    pub fn field(&self, resource: &str) -> String {
        match self.container {
            None => format!("overhead.{resource}"),
            Some((c, list, index)) => {
                let requested = c
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .is_some_and(|m| m.contains_key(resource));
                let limited = c
                    .resources
                    .as_ref()
                    .and_then(|r| r.limits.as_ref())
                    .is_some_and(|m| m.contains_key(resource));
                let kind = if !requested && limited {
                    "limits"
                } else {
                    "requests"
                };
                format!("{list}[{index}].resources.{kind}.{resource}")
            }
        }
    }
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`): it keeps running
/// beside the containers.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// A pod's request as kube-scheduler and the kubelet count it (`PodRequests` of
/// k8s.io/component-helpers/resource): the containers plus every sidecar, or, when larger, an
/// ordinary init container plus the sidecars declared before it (resource by resource); then
/// `spec.overhead`. `read` turns each map into amounts; its error is returned as is.
pub fn pod_requests<R: Amounts, E>(
    spec: &PodSpec,
    read: impl Fn(&RequestMap<'_>) -> Result<R, E>,
) -> Result<R, E> {
    let mut sum = R::default();
    for (i, c) in spec.containers.iter().enumerate() {
        sum.add(&read(&RequestMap::container(c, "containers", i))?);
    }
    let mut sidecars = R::default();
    let mut init = R::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let mut request = read(&RequestMap::container(c, "initContainers", i))?;
        if is_sidecar(c) {
            sum.add(&request);
            sidecars.add(&request);
        } else {
            request.add(&sidecars);
            init.raise_to(&request);
        }
    }
    sum.raise_to(&init);
    if let Some(overhead) = spec.overhead.as_ref() {
        sum.add(&read(&RequestMap {
            map: Cow::Borrowed(overhead),
            container: None,
        })?);
    }
    Ok(sum)
}

/// What the API server would refuse in an object's name (a subdomain) or, when it has one, its
/// namespace (a label); `object` names it in the error.
pub fn meta_name_problem(object: &str, meta: &ObjectMeta) -> Option<FieldError> {
    use crate::api::names::{NameRule, check_name};
    let name = meta.name.as_deref().unwrap_or_default();
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    check_name(object, "metadata.name", name, NameRule::Subdomain).or_else(|| {
        (!namespace.is_empty())
            .then(|| check_name(object, "metadata.namespace", namespace, NameRule::Label))
            .flatten()
    })
}

/// Reads a Pod: its node, phase, effective requests and TrainingJob role.
pub fn read_pod(pod: &Pod) -> Result<PodInfo, FieldError> {
    // Error context is built only on failure: this runs for every pod event.
    let bad = |field: String, e: crate::api::QuantityError| {
        FieldError::new(
            meta_ref("Pod", &pod.metadata),
            format!("spec.{field}"),
            e.to_string(),
        )
    };
    if pod.metadata.name.as_deref().unwrap_or("").is_empty() {
        return Err(FieldError::new(
            meta_ref("Pod", &pod.metadata),
            "metadata.name",
            "a Pod needs a name",
        ));
    }
    if let Some(e) = meta_name_problem(&meta_ref("Pod", &pod.metadata), &pod.metadata) {
        return Err(e);
    }
    let mut requests = Resources::ZERO;
    let mut node = None;
    let mut gated = false;
    let mut extended = Extended::new();
    let mut priority = 0;
    if let Some(spec) = pod.spec.as_ref() {
        requests = pod_requests(spec, |m| {
            parse_resources(Some(&m.map)).map_err(|(name, e)| bad(m.field(name), e))
        })?;
        node = spec.node_name.clone().filter(|n| !n.is_empty());
        gated = node.is_none() && is_gated(spec);
        // Most pods request no other resource: the check costs no allocation, the reading does.
        if names_extended(spec) {
            extended =
                PodConstraints::read_extended(spec, &meta_ref("Pod", &pod.metadata), "spec")?;
        }
        priority = spec.priority.unwrap_or(0);
    }
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") | Some("Failed") => PodPhase::Finished,
        Some("Unknown") => PodPhase::Unknown,
        _ if gated => PodPhase::Gated,
        _ => PodPhase::Pending,
    };
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let labels = pod.metadata.labels.as_ref();
    let kind = labelled_kind(labels);
    let owner = [
        (LABEL_TRAINER, Role::Trainer),
        (LABEL_PSERVER, Role::Pserver),
        (LABEL_MASTER, Role::Master),
    ]
    .into_iter()
    .find_map(|(label, role)| {
        labels
            .and_then(|l| l.get(label))
            .map(|job| (JobKey::of_kind(kind, namespace.clone(), job.clone()), role))
    })
    .or_else(|| {
        crate::cluster::kinds::sized_pod_owner(&pod.metadata)
            .map(|(kind, job, role)| (JobKey::of_kind(kind, namespace.clone(), job), role))
    });
    let claim = owner
        .is_none()
        .then(|| crate::cluster::kinds::pod_claim(&pod.metadata, &namespace))
        .flatten();
    Ok(PodInfo {
        node,
        phase,
        requests,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        owner,
        created: seconds(pod.metadata.creation_timestamp.as_ref()),
        index: completion_index(&pod.metadata),
        extended,
        priority,
        claim,
    })
}

/// Whether a pod spec names any other resource (see `filters::is_extended`) in a container's
/// requests or limits or in its overhead.
fn names_extended(spec: &PodSpec) -> bool {
    let named = |map: Option<&std::collections::BTreeMap<String, _>>| {
        map.is_some_and(|m| m.keys().any(|name| is_extended(name)))
    };
    let container = |c: &Container| {
        let r = c.resources.as_ref();
        named(r.and_then(|r| r.requests.as_ref())) || named(r.and_then(|r| r.limits.as_ref()))
    };
    spec.containers.iter().any(container)
        || spec.init_containers.iter().flatten().any(container)
        || named(spec.overhead.as_ref())
}

/// The pod's completion index; a value that is not a number counts as none (the Job controller
/// then treats the pod as one it did not create, and so does the planner).
fn completion_index(meta: &ObjectMeta) -> Option<u32> {
    let of = |map: Option<&BTreeMap<String, String>>| {
        map.and_then(|m| m.get(COMPLETION_INDEX))
            .and_then(|v| v.parse::<u32>().ok())
    };
    of(meta.annotations.as_ref()).or_else(|| of(meta.labels.as_ref()))
}

/// The kind of job a set of pod labels names: a PaddleJob's pods carry `paddle-job-name`.
fn labelled_kind(labels: Option<&BTreeMap<String, String>>) -> JobKind {
    if labels.is_some_and(|l| l.contains_key(LABEL_PADDLE_JOB)) {
        JobKind::PaddleJob
    } else {
        JobKind::TrainingJob
    }
}

/// The job kind (one trainscale's operator creates: TrainingJob or PaddleJob, with its exact
/// apiVersion) and name of the job a Job's controller ownerReference names, if any: such a Job
/// is a trainer Job. Jobs controlled by anything else (a JobSet, a CronJob) are not.
pub fn trainer_job_owner(meta: &ObjectMeta) -> Option<(JobKind, String)> {
    meta.owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
        .find_map(|o| {
            JobKind::of(&o.kind, &o.api_version)
                .filter(|kind| kind.created_by_trainscale())
                .map(|kind| (kind, o.name.clone()))
        })
}

/// The job a batch/v1 Job runs the trainers of, and its parallelism.
///
/// A trainer Job is one whose controller ownerReference names a job kind trainscale's operator
/// creates (see [`trainer_job_owner`]): a label alone never makes a Job a trainer Job, so a Job
/// someone else labelled `paddle-job=x` is never resized. Other Jobs give `None`.
pub fn read_trainer_job(job: &Job) -> Option<(JobKey, Option<i32>)> {
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let (kind, name) = trainer_job_owner(&job.metadata)?;
    // Held at zero trainers (suspended by trainscale), whatever parallelism it keeps.
    let parallelism = if crate::api::trainer_job::at_zero_trainers(job) {
        Some(0)
    } else {
        job.spec.as_ref().and_then(|s| s.parallelism)
    };
    Some((JobKey::of_kind(kind, namespace, name), parallelism))
}

/// Whether a trainer Job is suspended by someone else than trainscale (Kueue, before it admits
/// the job): `spec.suspend` without trainscale's zero-trainers mark (see
/// [`crate::api::trainer_job`]).
pub fn suspended_by_others(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
        && !crate::api::trainer_job::at_zero_trainers(job)
}

/// The scheduling constraints of a trainer Job's pods, from its pod template. A template the
/// filters cannot read counts as unconstrained here; binding its pods reports the error on each.
pub fn trainer_constraints(job: &Job) -> Arc<crate::cluster::filters::PodConstraints> {
    let read = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|spec| {
            crate::cluster::filters::PodConstraints::read(
                spec,
                &meta_ref("Job", &job.metadata),
                "spec.template.spec",
            )
            .ok()
        });
    Arc::new(read.unwrap_or_default())
}

/// The speedup curve a job's metadata declares, if any; an annotation that does not parse is an
/// error naming it (validation reports it as a warning, and the job is planned as linear).
pub fn read_speedup(meta: &ObjectMeta) -> Result<Option<SpeedupCurve>, String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(SPEEDUP_ANNOTATION))
        .map(|text| SpeedupCurve::parse(text).map_err(|e| e.to_string()))
        .transpose()
}

/// What the planner needs of a job, whatever its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub min: i32,
    pub max: i32,
    /// Per-trainer CPU request (milli, ceil), memory request (bytes) and GPU limit.
    pub trainer: Resources,
    /// Exact per-trainer GPU limit, CPU and memory requests, for the `edl` tie-breaks.
    pub exact: [Quantity; 3],
    /// The resolved priority (see `api::priority`).
    pub priority: i32,
    /// The PriorityClass the priority names, when it is a name: re-resolved as classes change.
    pub priority_class: Option<Arc<str>>,
    /// Creation time, seconds since the epoch.
    pub created: i64,
    pub phase: TrainingJobPhase,
    /// `spec.trainer.replicaSpec.spec.parallelism` as stored in the TrainingJob.
    pub stored_parallelism: Option<i32>,
    /// Time of the newest scale record, seconds since the epoch.
    pub last_scale: Option<i64>,
    /// The declared speedup curve (`trainscale.io/speedup`), read by `goodput`; `None` is linear.
    pub speedup: Option<Arc<SpeedupCurve>>,
    /// What the job's own progress reports say is left, read by `progress`; `None`: no usable
    /// report (none, malformed or stale).
    pub progress: Option<ProgressEstimate>,
}

/// A job's remaining work as its progress reports estimate it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressEstimate {
    /// Estimated remaining work in seconds of one trainer (speedup 1): the time the job still
    /// needs at size n is this divided by its speedup at n.
    pub remaining_worker_s: f64,
}

/// Reads a checked TrainingJob spec (of any kind that runs as one) into the model; the warning
/// is a numeric priority outside the i32 range. Unknown-PriorityClass warnings are left to
/// `ClusterState`, which re-resolves them as classes come and go.
pub fn read_training_job_spec(
    job: &TrainingJob,
    classes: &PriorityClasses,
) -> Result<(JobInfo, Option<FieldError>), Vec<FieldError>> {
    let one = |r: Result<Quantity, FieldError>| r.map_err(|e| vec![e]);
    let gpu = one(job.trainer_gpu_limit_quantity())?;
    let cpu = one(job.trainer_cpu_request_quantity())?;
    let mem = one(job.trainer_mem_request_quantity())?;
    let status = job.status.as_ref();
    let last_scale = status
        .and_then(|s| {
            s.scale_records
                .scale_records
                .iter()
                .filter_map(|r| r.scale_timestamp.as_ref())
                .map(|t| t.0.as_second())
                .max()
        })
        .filter(|t| *t > 0);
    let priority = job.priority(classes);
    let warning = priority
        .warning
        .filter(|_| priority.class.is_none())
        .map(|text| FieldError::new(job.object_ref(), "spec.annotations.priority", text));
    let info = JobInfo {
        min: job.spec.trainer.min_instance,
        max: job.spec.trainer.max_instance,
        trainer: Resources::new(cpu.milli_ceil(), mem.value_ceil(), gpu.value_ceil()),
        exact: [gpu, cpu, mem],
        priority: priority.value,
        priority_class: priority.class,
        created: seconds(job.metadata.creation_timestamp.as_ref()),
        phase: status.map(|s| s.phase).unwrap_or_default(),
        stored_parallelism: job
            .spec
            .trainer
            .replica_spec
            .as_ref()
            .and_then(|j| j.spec.as_ref())
            .and_then(|s| s.parallelism),
        last_scale,
        speedup: read_speedup(&job.metadata).ok().flatten().map(Arc::new),
        progress: None,
    };
    Ok((info, warning))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"}, "spec": spec,
        }))
        .unwrap()
    }

    fn container(name: &str, cpu: &str, memory: &str, sidecar: bool) -> serde_json::Value {
        let mut c = serde_json::json!({"name": name,
            "resources": {"requests": {"cpu": cpu, "memory": memory}}});
        if sidecar {
            c["restartPolicy"] = serde_json::json!("Always");
        }
        c
    }

    #[test]
    fn sidecars_add_and_each_init_container_counts_with_the_sidecars_before_it() {
        let mut worker = container("w", "2", "1Gi", false);
        // A limit without a request is requested at the limit (the API server's defaulting).
        worker["resources"]["limits"] = serde_json::json!({"nvidia.com/gpu": "1"});
        let info = read_pod(&pod(serde_json::json!({
            "containers": [worker],
            "initContainers": [
                container("a", "2", "1Gi", true),
                container("b", "4", "1Gi", false),
                container("c", "1", "1Gi", true),
                container("d", "1", "5Gi", false),
            ],
            "overhead": {"cpu": "100m"},
        })))
        .unwrap();
        // CPU: containers and sidecars 2 + 2 + 1 = 5; init b with sidecar a: 4 + 2 = 6.
        // Memory: 1 + 1 + 1 = 3; init d with sidecars a and c: 5 + 2 = 7.
        assert_eq!(info.requests, Resources::new(6100, 7 * GIB, 1));
    }

    #[test]
    fn a_pod_of_only_sidecars_and_containers_sums_them() {
        let info = read_pod(&pod(serde_json::json!({
            "containers": [container("w", "2", "1Gi", false)],
            "initContainers": [container("s", "2", "1Gi", true)],
        })))
        .unwrap();
        assert_eq!(info.requests, Resources::new(4000, 2 * GIB, 0));
    }

    #[test]
    fn a_bad_sidecar_quantity_names_its_field() {
        let e = read_pod(&pod(serde_json::json!({
            "containers": [container("w", "2", "1Gi", false)],
            "initContainers": [container("ok", "1", "1Gi", false), container("s", "two", "1Gi", true)],
        })))
        .unwrap_err();
        assert_eq!(e.object, "Pod ns/p");
        assert_eq!(e.field, "spec.initContainers[1].resources.requests.cpu");
        let mut limited = container("w", "2", "1Gi", false);
        limited["resources"]["limits"] = serde_json::json!({"nvidia.com/gpu": "many"});
        let e = read_pod(&pod(serde_json::json!({"containers": [limited]}))).unwrap_err();
        assert_eq!(
            e.field,
            "spec.containers[0].resources.limits.nvidia.com/gpu"
        );
    }
}
