//! Validation of TrainingJob manifests: every problem, with object and field named.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use kube::ResourceExt;

use super::manifest::Document;
use super::{FRAMEWORKS, FieldError, JOB_TYPES, Quantity, TrainingJob};

/// Whether a job's framework and flags call for parameter servers (edl-autoscaler.md §4.2).
pub fn needs_pservers(job: &TrainingJob) -> bool {
    match &job.spec.frame_work {
        None => !job.spec.local_job && !job.spec.is_nccl,
        Some(fw) => fw.job_type == "multi",
    }
}

/// Every problem with one TrainingJob.
pub fn validate_training_job(job: &TrainingJob) -> Vec<FieldError> {
    let object = job.object_ref();
    let mut problems = Vec::new();
    let mut problem = |field: &str, text: String| {
        problems.push(FieldError::new(object.clone(), field, text));
    };

    if job.metadata.name.as_deref().unwrap_or("").is_empty() {
        problem("metadata.name", "a TrainingJob needs a name".into());
    }
    let trainer = &job.spec.trainer;
    let (tmin, tmax) = (trainer.min_instance, trainer.max_instance);
    if tmin < 1 {
        problem(
            "spec.trainer.min-instance",
            format!("must be at least 1, got {tmin}"),
        );
    }
    if tmax < 1 {
        problem(
            "spec.trainer.max-instance",
            format!("must be at least 1, got {tmax}"),
        );
    }
    if tmin > tmax {
        problem(
            "spec.trainer.min-instance",
            format!("min-instance {tmin} is greater than max-instance {tmax}"),
        );
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
        problem(
            "spec.trainer.replicaSpec.spec.parallelism",
            format!("must not be negative, got {p}"),
        );
    }
    let pserver = &job.spec.pserver;
    let (pmin, pmax) = (pserver.min_instance, pserver.max_instance);
    if needs_pservers(job) {
        if pmin < 1 {
            problem(
                "spec.pserver.min-instance",
                format!("this job type runs parameter servers: must be at least 1, got {pmin}"),
            );
        }
        if pmax < pmin {
            problem(
                "spec.pserver.max-instance",
                format!("max-instance {pmax} is less than min-instance {pmin}"),
            );
        }
    } else if pmin < 0 || pmax < 0 {
        problem(
            "spec.pserver.min-instance",
            format!("counts must not be negative, got min {pmin}, max {pmax}"),
        );
    }
    if job.elastic() && !job.spec.fault_tolerant {
        problem(
            "spec.fault_tolerant",
            "an elastic job (trainer min-instance < max-instance) must be fault tolerant".into(),
        );
    }
    if let Some(fw) = &job.spec.frame_work {
        if !FRAMEWORKS.contains(&fw.name.as_str()) {
            problem(
                "spec.frame_work.name",
                format!(
                    "unknown framework {:?} (known: paddle, tensorflow)",
                    fw.name
                ),
            );
        }
        if !JOB_TYPES.contains(&fw.job_type.as_str()) {
            problem(
                "spec.frame_work.type",
                format!(
                    "unknown job type {:?} (known: local, nccl2, multi)",
                    fw.job_type
                ),
            );
        }
    }
    if job.spec.annotations.walltime < 0 {
        problem(
            "spec.annotations.walltime",
            format!(
                "must not be negative, got {}",
                job.spec.annotations.walltime
            ),
        );
    }
    for (field, value) in [
        ("spec.port", job.spec.port),
        ("spec.ports_num", job.spec.ports_num),
        ("spec.ports_num_for_sparse", job.spec.ports_num_for_sparse),
        ("spec.trainer_port", job.spec.trainer_port),
        ("spec.trainer_ports_num", job.spec.trainer_ports_num),
        ("spec.passes", job.spec.passes),
    ] {
        if value < 0 {
            problem(field, format!("must not be negative, got {value}"));
        }
    }

    if let Err(e) = job.priority() {
        problems.push(e);
    }
    for (role, resources) in [
        ("master", &job.spec.master.resources),
        ("pserver", &job.spec.pserver.resources),
        ("trainer", &job.spec.trainer.resources),
    ] {
        check_resources(&object, role, resources, &mut problems);
    }
    if job.elastic() {
        let cpu = job.trainer_cpu_request_quantity().unwrap_or(Quantity::ZERO);
        let mem = job.trainer_mem_request_quantity().unwrap_or(Quantity::ZERO);
        if cpu == Quantity::ZERO && mem == Quantity::ZERO {
            problems.push(FieldError::new(
                &object,
                "spec.trainer.resources.requests",
                "an elastic trainer needs a cpu or memory request for the planner to place it",
            ));
        }
    }
    problems
}

fn check_resources(
    object: &str,
    role: &str,
    resources: &ResourceRequirements,
    problems: &mut Vec<FieldError>,
) {
    for (part, map) in [
        ("requests", resources.requests.as_ref()),
        ("limits", resources.limits.as_ref()),
    ] {
        let map: Option<&BTreeMap<String, KubeQuantity>> = map;
        for (name, q) in map.into_iter().flatten() {
            if let Err(e) = Quantity::parse(&q.0) {
                problems.push(FieldError::new(
                    object,
                    format!("spec.{role}.resources.{part}.{name}"),
                    e.to_string(),
                ));
            }
        }
    }
}

/// The outcome of validating one manifest object.
#[derive(Debug)]
pub struct ObjectReport {
    /// `TrainingJob ns/name`, or where the object is when it has no name.
    pub object: String,
    pub problems: Vec<FieldError>,
}

/// Validates one manifest object; anything but a TrainingJob is a problem.
pub fn validate_document(doc: &Document) -> ObjectReport {
    let object = doc.object_ref();
    if doc.kind() != "TrainingJob" {
        let kind = doc.kind();
        let text = if kind.is_empty() {
            "has no kind; expected a TrainingJob".to_string()
        } else {
            format!("is a {kind}, not a TrainingJob")
        };
        return ObjectReport {
            problems: vec![FieldError::new(&object, "kind", text)],
            object,
        };
    }
    if let Some(api) = doc.value.get("apiVersion").and_then(|v| v.as_str())
        && api != "paddlepaddle.org/v1alpha1"
    {
        return ObjectReport {
            problems: vec![FieldError::new(
                &object,
                "apiVersion",
                format!("{api:?} is not paddlepaddle.org/v1alpha1"),
            )],
            object,
        };
    }
    match doc.decode::<TrainingJob>() {
        Ok(job) => ObjectReport {
            object: if job.name_any().is_empty() {
                object
            } else {
                job.object_ref()
            },
            problems: validate_training_job(&job),
        },
        Err(e) => ObjectReport {
            object,
            problems: vec![e],
        },
    }
}
