//! Validation of job manifests: every error and warning, with object and field named.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use kube::ResourceExt;

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::guard::{Guarded, MalformedJob};
use super::manifest::Document;
use super::names::{
    NameRule, check_name, job_name, job_name_problems, name_problems, quoted, trainer_hostname,
};
use super::priority::{PriorityClasses, priority_class_errors};
use super::resource_names::{
    api_integer, extended_resource, hugepages, hugepages_problem, overcommit_allowed,
    resource_name_problem,
};
use super::speedup::{SPEEDUP_ANNOTATION, SpeedupCurve};
use super::{
    FRAMEWORKS, FieldError, JOB_TYPES, JobKind, PaddleJob, Quantity, TrainingJob,
    paddle_job_problem,
};

/// Whether a job's framework and flags call for parameter servers (edl-autoscaler.md §4.2).
pub fn needs_pservers(job: &TrainingJob) -> bool {
    match &job.spec.frame_work {
        None => !job.spec.local_job && !job.spec.is_nccl,
        Some(fw) => fw.job_type == "multi",
    }
}

/// What is wrong with a job: errors make it impossible to plan or create; warnings are what the
/// original operator accepted and trainscale accepts too, but the user should know.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<FieldError>,
}

/// The errors of one TrainingJob (its warnings dropped): what stops it being planned or created.
pub fn validate_training_job(job: &TrainingJob) -> Vec<FieldError> {
    check_training_job(job).errors
}

/// Every error and warning of one TrainingJob's spec; its priority is resolved separately
/// (`TrainingJob::priority`), against the PriorityClasses of the cluster.
pub fn check_training_job(job: &TrainingJob) -> Findings {
    let object = job.object_ref();
    let mut findings = Findings::default();
    let mut error = |field: &str, text: String| {
        findings
            .errors
            .push(FieldError::new(object.clone(), field, text));
    };

    let name = job_name(&job.metadata);
    if name.is_none() {
        error(
            "metadata.name",
            "a job needs a name: name or generateName is required".into(),
        );
    }
    let name_errors = job_name_problems(JobKind::TrainingJob, &object, &job.metadata);
    let name_valid = name_errors.is_empty();
    for e in name_errors {
        error(&e.field, e.problem);
    }
    // The group names a PodGroup and is the label `scheduling.x-k8s.io/pod-group` on every pod.
    if !job.spec.pod_group_name.is_empty()
        && let Some(e) = check_name(
            &object,
            "spec.podGroupName",
            &job.spec.pod_group_name,
            NameRule::LabelValueSubdomain,
        )
    {
        error(&e.field, e.problem);
    }
    // Either becomes every pod's `spec.schedulerName`, a subdomain (`annotations.scheduler` wins).
    for (field, value) in [
        ("spec.schedulerName", &job.spec.scheduler_name),
        (
            "spec.annotations.scheduler",
            &job.spec.annotations.scheduler,
        ),
    ] {
        let value = value.trim();
        if !value.is_empty()
            && let Some(e) = check_name(&object, field, value, NameRule::Subdomain)
        {
            error(&e.field, e.problem);
        }
    }
    let trainer = &job.spec.trainer;
    let (tmin, tmax) = (trainer.min_instance, trainer.max_instance);
    if tmin < 0 {
        error(
            "spec.trainer.min-instance",
            format!("must not be negative, got {tmin}"),
        );
    }
    if tmax < 0 {
        error(
            "spec.trainer.max-instance",
            format!("must not be negative, got {tmax}"),
        );
    }
    if tmin > tmax {
        error(
            "spec.trainer.min-instance",
            format!("min-instance {tmin} is greater than max-instance {tmax}"),
        );
    }
    if name_valid && let Some(name) = &name {
        let hostname = trainer_hostname(&name.name, tmax.max(1) - 1);
        let problems = name_problems(&hostname, NameRule::Label);
        if !problems.is_empty() {
            error(
                name.field,
                format!(
                    "{} gives the trainer pods hostnames up to {hostname:?} ({} characters; the Job controller names an Indexed Job's pod `<job>-<index>`): {}",
                    name.shown,
                    hostname.len(),
                    problems.join("; ")
                ),
            );
        }
    }
    if let Some(p) = job
        .spec
        .trainer
        .replica_spec
        .as_ref()
        .and_then(|j| j.spec.as_ref())
        .and_then(|s| s.parallelism)
        .filter(|p| *p < 0)
    {
        error(
            "spec.trainer.replicaSpec.spec.parallelism",
            format!("must not be negative, got {p}"),
        );
    }
    let pserver = &job.spec.pserver;
    let (pmin, pmax) = (pserver.min_instance, pserver.max_instance);
    if pmin < 0 || pmax < 0 {
        error(
            "spec.pserver.min-instance",
            format!("counts must not be negative, got min {pmin}, max {pmax}"),
        );
    } else if needs_pservers(job) && pmax != 0 && pmax < pmin {
        error(
            "spec.pserver.max-instance",
            format!("max-instance {pmax} is less than min-instance {pmin}"),
        );
    }
    if let Some(fw) = &job.spec.frame_work {
        if !FRAMEWORKS.contains(&fw.name.as_str()) {
            error(
                "spec.frame_work.name",
                format!(
                    "unknown framework {:?} (known: paddle, tensorflow)",
                    fw.name
                ),
            );
        }
        if !JOB_TYPES.contains(&fw.job_type.as_str()) {
            error(
                "spec.frame_work.type",
                format!(
                    "unknown job type {:?} (known: local, nccl2, multi)",
                    fw.job_type
                ),
            );
        }
    }
    if job.spec.annotations.walltime < 0 {
        error(
            "spec.annotations.walltime",
            format!(
                "must not be negative, got {}",
                job.spec.annotations.walltime
            ),
        );
    }
    for (field, value) in [
        ("spec.ports_num", job.spec.ports_num),
        ("spec.ports_num_for_sparse", job.spec.ports_num_for_sparse),
        ("spec.trainer_ports_num", job.spec.trainer_ports_num),
        ("spec.passes", job.spec.passes),
    ] {
        if value < 0 {
            error(field, format!("must not be negative, got {value}"));
        }
    }
    let spec = &job.spec;
    let or_one = |n: i32| if n == 0 { 1 } else { n.max(0) };
    for (field, first, default, count) in [
        (
            "spec.port",
            spec.port,
            Some(DEFAULT_PORT),
            or_one(spec.ports_num) + or_one(spec.ports_num_for_sparse),
        ),
        (
            "spec.trainer_port",
            spec.trainer_port,
            None,
            spec.trainer_ports_num.max(1),
        ),
    ] {
        if let Some(text) = port_problem(first, default, count) {
            error(field, text);
        }
    }
    for (role, resources) in [
        ("master", &job.spec.master.resources),
        ("pserver", &job.spec.pserver.resources),
        ("trainer", &job.spec.trainer.resources),
    ] {
        check_resources(&object, role, resources, &mut findings.errors);
    }
    if job.elastic() && !requests_anything(&job.spec.trainer.resources) {
        findings.errors.push(FieldError::new(
            &object,
            "spec.trainer.resources.requests",
            format!("an elastic trainer {NEEDS_A_REQUEST}"),
        ));
    }

    let mut warning = |field: &str, text: &str| {
        findings
            .warnings
            .push(FieldError::new(object.clone(), field, text));
    };
    if tmax == 0 && tmin == 0 {
        warning(
            "spec.trainer.max-instance",
            "0: the job runs no trainers until max-instance is raised",
        );
    }
    if needs_pservers(job) && pmin == 0 && pmax >= 0 {
        warning(
            "spec.pserver.min-instance",
            "0: no parameter servers will be created, although this job type uses them",
        );
    }
    if job.elastic() && !job.spec.fault_tolerant {
        warning(
            "spec.fault_tolerant",
            "the job is elastic but not fault tolerant: trainers restart when it is resized and \
             must re-read their count (/etc/trainscale/trainers) on restart",
        );
    }
    if let Some(text) = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SPEEDUP_ANNOTATION))
        && let Err(e) = SpeedupCurve::parse(text)
    {
        warning(
            &format!("metadata.annotations[\"{SPEEDUP_ANNOTATION}\"]"),
            &format!("{e}; the goodput policy plans this job as if its speedup were linear"),
        );
    }
    findings
}

/// What is wrong with a port field holding `first` (0: unset, `default` used) whose range is
/// `count` ports long: a port is 1 to 65535, and the range must end by 65535.
fn port_problem(first: i32, default: Option<i32>, count: i32) -> Option<String> {
    let from = match (first, default) {
        (0, None) => return None,
        (0, Some(d)) => d,
        (p, _) if p < 0 => return Some(format!("must not be negative, got {p}")),
        (p, _) if p > MAX_PORT => {
            return Some(format!(
                "must be between 1 and {MAX_PORT} (0 or unset: the default), got {p}"
            ));
        }
        (p, _) => p,
    };
    let last = i64::from(from) + i64::from(count) - 1;
    (last > i64::from(MAX_PORT))
        .then(|| format!("the job's {count} port(s) from {from} run past {MAX_PORT} (to {last})"))
}

/// `spec.port` when unset (the original operator's default).
pub const DEFAULT_PORT: i32 = 7164;

/// The largest port number.
pub const MAX_PORT: i32 = 65535;

/// What an elastic worker of any kind lacks when [`requests_anything`] finds nothing, after
/// "an elastic trainer" or "an elastic worker".
pub const NEEDS_A_REQUEST: &str = "needs a request (cpu, memory, a GPU or any other resource; a \
     limit stands for a missing request) for the planner to place it";

/// Whether `resources` asks for a nonzero amount of any resource, a limit standing for a missing
/// request as the API server defaults it. A quantity that does not parse counts as nothing (it
/// is an error of its own).
pub fn requests_anything(resources: &ResourceRequirements) -> bool {
    let nonzero = |q: &KubeQuantity| Quantity::parse(&q.0).is_ok_and(|q| q != Quantity::ZERO);
    let requests = resources.requests.as_ref();
    requests.into_iter().flatten().any(|(_, q)| nonzero(q))
        || resources
            .limits
            .iter()
            .flatten()
            .any(|(name, q)| requests.is_none_or(|r| !r.contains_key(name)) && nonzero(q))
}

fn check_resources(
    object: &str,
    role: &str,
    resources: &ResourceRequirements,
    problems: &mut Vec<FieldError>,
) {
    problems.extend(resource_problems(
        object,
        &format!("spec.{role}.resources"),
        resources,
    ));
}

/// What the API server refuses in one container's `resources` (at `prefix`): a resource name no
/// container may have, a quantity that does not parse, a fraction of an extended resource, huge
/// pages that are not whole pages of a size that parses, a request above its limit, a
/// non-overcommitable resource (extended, huge pages) requested without a limit or unequal to
/// it, huge pages without cpu or memory.
pub fn resource_problems(
    object: &str,
    prefix: &str,
    resources: &ResourceRequirements,
) -> Vec<FieldError> {
    let mut problems = Vec::new();
    let field = |part: &str, name: &str| format!("{prefix}.{part}.{name}");
    let mut parsed: [BTreeMap<&str, (Quantity, &str)>; 2] = Default::default();
    let mut hugepages_named = false;
    let mut cpu_or_memory = false;
    for (at, (part, map)) in [
        ("requests", resources.requests.as_ref()),
        ("limits", resources.limits.as_ref()),
    ]
    .into_iter()
    .enumerate()
    {
        let map: Option<&BTreeMap<String, KubeQuantity>> = map;
        for (name, q) in map.into_iter().flatten() {
            if let Some(why) = resource_name_problem(name) {
                problems.push(FieldError::new(
                    object,
                    field(part, name),
                    format!("invalid resource name {}: {why}", quoted(name)),
                ));
                continue;
            }
            hugepages_named |= hugepages(name);
            cpu_or_memory |= matches!(name.as_str(), "cpu" | "memory");
            match Quantity::parse(&q.0) {
                Err(e) => problems.push(FieldError::new(object, field(part, name), e.to_string())),
                Ok(quantity) if extended_resource(name) && !api_integer(quantity) => {
                    problems.push(FieldError::new(
                        object,
                        field(part, name),
                        format!(
                            "{:?}: must be an integer (the API server reads an extended resource in thousandths, rounded up, and refuses a fraction of a unit)",
                            q.0
                        ),
                    ));
                }
                Ok(quantity) => {
                    if let Some(why) = hugepages_problem(name, quantity) {
                        problems.push(FieldError::new(
                            object,
                            field(part, name),
                            format!(
                                "{:?} is not positive integer multiple of {name}: {why}",
                                q.0
                            ),
                        ));
                    }
                    parsed[at].insert(name, (quantity, &q.0));
                }
            }
        }
    }
    if hugepages_named && !cpu_or_memory {
        problems.push(FieldError::new(
            object,
            prefix,
            "HugePages require cpu or memory: the API server refuses a container asking for huge \
             pages without a cpu or memory request or limit",
        ));
    }
    // A request against its limit, as the API server checks a container's.
    let [requests, limits] = &parsed;
    for (name, (request, request_text)) in requests {
        let what = if hugepages(name) {
            "huge pages"
        } else {
            "an extended resource"
        };
        let Some((limit, limit_text)) = limits.get(name) else {
            // Not overcommitted: the API server wants a non-overcommitable resource's limit set.
            if !overcommit_allowed(name) {
                problems.push(FieldError::new(
                    object,
                    field("requests", name),
                    format!(
                        "{request_text:?} has no limit: the API server refuses {what} requested without one (Limit must be set for non overcommitable resources)"
                    ),
                ));
            }
            continue;
        };
        let problem = if !overcommit_allowed(name) {
            (request != limit).then(|| {
                format!(
                    "{request_text:?} is not the limit {limit_text:?}: the API server refuses {what} requested below or above its limit"
                )
            })
        } else {
            (request.cmp_exact(*limit) == std::cmp::Ordering::Greater).then(|| {
                format!(
                    "{request_text:?} is more than the limit {limit_text:?}: the API server refuses a request above its limit"
                )
            })
        };
        if let Some(text) = problem {
            problems.push(FieldError::new(object, field("requests", name), text));
        }
    }
    problems
}

/// The outcome of validating one manifest object.
#[derive(Debug)]
pub struct ObjectReport {
    /// `Kind ns/name`, or where the object is when it has no name.
    pub object: String,
    pub errors: Vec<FieldError>,
    pub warnings: Vec<FieldError>,
}

impl ObjectReport {
    fn error(object: String, field: &str, text: String) -> Self {
        ObjectReport {
            errors: vec![FieldError::new(&object, field, text)],
            warnings: Vec::new(),
            object,
        }
    }
}

/// The PriorityClasses (`scheduling.k8s.io/v1`) among manifest objects, by name, but those the
/// API server refuses (a name or value [`priority_class_errors`] refuses: a job naming one
/// resolves as if it were absent, a built-in name to the built-in class); malformed ones are
/// left to [`validate_document`] to report.
pub fn priority_classes_of(docs: &[Document]) -> PriorityClasses {
    docs.iter()
        .filter(|d| d.kind() == "PriorityClass")
        .filter_map(|d| d.decode::<PriorityClass>().ok())
        .filter(|pc| priority_class_errors("", pc).is_empty())
        .filter_map(|pc| Some((pc.metadata.name?, pc.value.unwrap_or(0))))
        .collect()
}

/// Validates one manifest object: a job of any kind or a PriorityClass (resolving job
/// priorities against `classes`); any other kind is an error (`validate` skips those first, see
/// [`crate::cluster::kinds::unchecked_kind`]), and so is an object naming no kind or apiVersion.
pub fn validate_document(doc: &Document, classes: &PriorityClasses) -> ObjectReport {
    let object = doc.object_ref();
    let api = doc.api_version();
    let kind = doc.kind();
    if kind == "PriorityClass" {
        return match doc.decode::<PriorityClass>() {
            Ok(pc) => ObjectReport {
                errors: pc
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| check_name(&object, "metadata.name", n, NameRule::Subdomain))
                    .into_iter()
                    .chain(priority_class_errors(&object, &pc))
                    .collect(),
                object,
                warnings: Vec::new(),
            },
            Err(e) => ObjectReport {
                object,
                errors: vec![e],
                warnings: Vec::new(),
            },
        };
    }
    let Some(job_kind) = JobKind::named(kind) else {
        if !kind.is_empty() && api.is_empty() {
            return ObjectReport::error(
                object,
                "apiVersion",
                format!("required: a {kind} names its apiVersion"),
            );
        }
        let text = if kind.is_empty() {
            "has no kind; expected a TrainingJob, PaddleJob, PyTorchTrainingJob, PyTorchJob, Job \
             or JobSet"
                .to_string()
        } else {
            format!(
                "is a {kind}, not a TrainingJob, PaddleJob, PyTorchTrainingJob, PyTorchJob, Job \
                 or JobSet"
            )
        };
        return ObjectReport::error(object, "kind", text);
    };
    if JobKind::of(kind, api) != Some(job_kind) {
        return ObjectReport::error(
            object,
            "apiVersion",
            format!("{api:?} is not {}", job_kind.api_version()),
        );
    }
    // Through `Guarded`, as the daemon and the operator read them.
    let malformed = |bad: MalformedJob| FieldError::new(&object, bad.field, bad.error);
    let decoded = match job_kind {
        JobKind::TrainingJob => Guarded::<TrainingJob>::from_value(&doc.value)
            .0
            .map(|job| *job)
            .map_err(malformed),
        JobKind::PaddleJob => Guarded::<PaddleJob>::from_value(&doc.value)
            .0
            .map(|job| job.as_training_job())
            .map_err(malformed),
        _ => return crate::cluster::kinds::check_document(doc, job_kind, classes),
    };
    let job = match decoded {
        Ok(job) => job,
        Err(e) => {
            return ObjectReport {
                object,
                errors: vec![e],
                warnings: Vec::new(),
            };
        }
    };
    let mut findings = check_training_job(&job);
    if let Some(text) = job.priority(classes).warning {
        findings.warnings.push(FieldError::new(
            job.object_ref(),
            "spec.annotations.priority",
            text,
        ));
    }
    if let Err(e) = crate::cluster::kinds::training_job_progress(&job) {
        findings
            .warnings
            .push(super::progress::malformed_warning(&e));
    }
    let rename = |problems: Vec<FieldError>| -> Vec<FieldError> {
        match job_kind {
            JobKind::PaddleJob => problems.into_iter().map(paddle_job_problem).collect(),
            _ => problems,
        }
    };
    ObjectReport {
        object: if job.name_any().is_empty() {
            object
        } else {
            job_kind.object_ref(&job.namespace().unwrap_or_default(), &job.name_any())
        },
        errors: rename(findings.errors),
        warnings: rename(findings.warnings),
    }
}
