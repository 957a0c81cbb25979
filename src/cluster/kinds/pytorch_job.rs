//! The Kubeflow PyTorchJob adapter (`kubeflow.org/v1`).
//!
//! Planned when `spec.elasticPolicy` has `minReplicas < maxReplicas` and no `metrics` (with
//! metrics the training operator creates an HPA that owns the size: the job is left to it, and
//! the daemon says so with an Event); not when `spec.runPolicy.suspend` is true. The size is
//! `spec.pytorchReplicaSpecs.Worker.replicas` (else the live worker pods); the per-worker request
//! from the Worker pod template (one requesting nothing is an error); priority from the Worker
//! template's `priorityClassName` (what Kubernetes orders and preempts the worker pods by),
//! resolved against the PriorityClasses. A `Succeeded` or `Failed` condition that is True
//! finishes it.

use super::template::{
    SizedFields, check_bounds, check_requests, negative_count, sized_job_info, template_request,
};
use std::sync::Arc;

use super::{JobAdapter, LeftAlone, ReadJob, Reading, Records, Resize, template_constraints};
use crate::api::priority::{PriorityClasses, resolve_priority};
use crate::api::{FieldError, JobKind, PyTorchJob, TrainingJobPhase};
use crate::cluster::filters::PodConstraints;

/// The replica type whose size trainscale writes.
pub const WORKER: &str = "Worker";

/// The replica type of the one master.
const MASTER: &str = "Master";

/// The replica types a PyTorchJob may have.
const REPLICA_TYPES: [&str; 2] = [MASTER, WORKER];

fn left_alone(field: &'static str, why: impl Into<String>, announce: bool) -> Reading {
    Reading::LeftAlone(LeftAlone {
        field,
        why: why.into(),
        announce,
    })
}

impl JobAdapter for PyTorchJob {
    const KIND: JobKind = JobKind::PyTorchJob;
    const RESIZE: Resize = Resize::Field(&["spec", "pytorchReplicaSpecs", "Worker", "replicas"]);
    const RECORDS: Records = Records::Annotation;
    const SIZE_FIELDS: [&'static str; 3] = [
        "spec.elasticPolicy.minReplicas",
        "spec.elasticPolicy.maxReplicas",
        "spec.pytorchReplicaSpecs.Worker.replicas",
    ];
    const PRIORITY_FIELD: &'static str =
        "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName";

    fn phase(&self) -> TrainingJobPhase {
        kubeflow_phase(self)
    }

    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        let worker = self.spec.pytorch_replica_specs.get(WORKER)?;
        template_constraints(
            worker.template.as_ref(),
            &self.job_key().object_ref(),
            &format!("spec.pytorchReplicaSpecs.{WORKER}.template"),
        )
    }

    fn type_problems(&self) -> Vec<FieldError> {
        let object = self.job_key().object_ref();
        let specs = &self.spec.pytorch_replica_specs;
        let mut problems: Vec<FieldError> = specs
            .iter()
            .filter_map(|(kind, r)| {
                negative_count(
                    &object,
                    &format!("spec.pytorchReplicaSpecs.{kind}.replicas"),
                    r.replicas,
                )
            })
            .collect();
        // The training operator's webhook runs one master: `Master.replicas` other than 1 is
        // refused ("must be 1").
        for (kind, r) in specs {
            if let Some(n) = r
                .replicas
                .filter(|n| *n >= 0 && *n != 1 && kind.eq_ignore_ascii_case(MASTER))
            {
                problems.push(FieldError::new(
                    &object,
                    format!("spec.pytorchReplicaSpecs.{kind}.replicas"),
                    format!("must be 1, got {n}: the training operator's webhook refuses any other master count"),
                ));
            }
        }
        // The training operator's defaulting renames a replica type to its camel case
        // (`worker` → `Worker`); its webhook then refuses any other type.
        for kind in specs.keys() {
            let field = format!("spec.pytorchReplicaSpecs.{kind}");
            match REPLICA_TYPES.iter().find(|t| t.eq_ignore_ascii_case(kind)) {
                None => problems.push(FieldError::new(
                    &object,
                    field,
                    format!(
                        "unsupported replica type {kind:?}: supported values: {}",
                        REPLICA_TYPES.join(", ")
                    ),
                )),
                Some(canonical) => {
                    let same: Vec<&str> = specs
                        .keys()
                        .filter(|k| k.eq_ignore_ascii_case(canonical))
                        .map(String::as_str)
                        .collect();
                    if same.len() > 1 && same.first() == Some(&kind.as_str()) {
                        problems.push(FieldError::new(
                            &object,
                            field,
                            format!(
                                "replica type {canonical} is given {} times ({}): the training \
                                 operator keeps one of them",
                                same.len(),
                                same.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        problems
    }

    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let object = self.job_key().object_ref();
        let spec = &self.spec;
        let Some(policy) = spec.elastic_policy.as_ref() else {
            return Ok(left_alone(
                "spec.elasticPolicy",
                "not elastic (no elasticPolicy)",
                false,
            ));
        };
        if policy.metrics.as_ref().is_some_and(|m| !m.is_empty()) {
            return Ok(left_alone(
                "spec.elasticPolicy.metrics",
                "left to the HorizontalPodAutoscaler the training operator creates from \
                 spec.elasticPolicy.metrics: two autoscalers on one field fight",
                true,
            ));
        }
        let run_policy = spec.run_policy.as_ref();
        if run_policy.and_then(|r| r.suspend) == Some(true) {
            return Ok(left_alone(
                "spec.runPolicy.suspend",
                "the job is suspended",
                false,
            ));
        }
        // The training operator defaults a missing bound to the other, and both to the Worker
        // replicas: a job naming at most one bound has a fixed size.
        let (min, max) = match (policy.min_replicas, policy.max_replicas) {
            (Some(_), Some(_)) => check_bounds(
                &object,
                (policy.min_replicas, "spec.elasticPolicy.minReplicas"),
                (policy.max_replicas, "spec.elasticPolicy.maxReplicas"),
            )?,
            (min, max) => {
                let negative: Vec<FieldError> = [
                    (min, "spec.elasticPolicy.minReplicas"),
                    (max, "spec.elasticPolicy.maxReplicas"),
                ]
                .into_iter()
                .filter_map(|(v, field)| {
                    v.filter(|v| *v < 0)
                        .map(|v| FieldError::new(&object, field, format!("{v} is negative")))
                })
                .collect();
                if !negative.is_empty() {
                    return Err(negative);
                }
                return Ok(left_alone(
                    "spec.elasticPolicy",
                    "minReplicas and maxReplicas are not both set: the training operator \
                     defaults the missing one to the other (or both to the Worker replicas), a \
                     fixed size",
                    false,
                ));
            }
        };
        if min == max {
            return Ok(left_alone(
                "spec.elasticPolicy",
                format!("minReplicas equals maxReplicas ({min}): nothing to size"),
                false,
            ));
        }
        if let Some(kind) = spec
            .pytorch_replica_specs
            .keys()
            .find(|k| k.as_str() != WORKER && k.eq_ignore_ascii_case(WORKER))
        {
            return Ok(left_alone(
                "spec.pytorchReplicaSpecs",
                format!(
                    "the replica type is written {kind:?}: trainscale resizes \
                     spec.pytorchReplicaSpecs.{WORKER}.replicas, which the training operator's \
                     defaulting webhook writes (it renames {kind:?} to {WORKER} on create)"
                ),
                true,
            ));
        }
        let Some(worker) = spec.pytorch_replica_specs.get(WORKER) else {
            return Err(vec![FieldError::new(
                object,
                format!("spec.pytorchReplicaSpecs.{WORKER}"),
                "required: the elastic workers",
            )]);
        };
        let field = format!("spec.pytorchReplicaSpecs.{WORKER}.template");
        let Some(template) = worker.template.as_ref() else {
            return Err(vec![FieldError::new(object, field, "required")]);
        };
        let trainer = template_request(template, &object, &field).map_err(|e| vec![e])?;
        check_requests(template, &object, &field).map_err(|e| vec![e])?;
        // A negative Worker replicas is a type problem (see `type_problems`).
        // The class Kubernetes orders the worker pods by (and preempts with).
        let class = template
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.clone())
            .unwrap_or_default();
        // A number is no PriorityClass name: only names are resolved.
        let priority = if class.trim().parse::<i64>().is_ok() {
            resolve_priority("", classes)
        } else {
            resolve_priority(&class, classes)
        };
        let (info, warnings) = sized_job_info(
            &self.metadata,
            &object,
            SizedFields {
                min,
                max,
                stored: worker.replicas,
                trainer,
                priority: priority.value,
                priority_class: priority.class,
                phase: kubeflow_phase(self),
            },
        );
        Ok(Reading::Planned(ReadJob {
            key: self.job_key(),
            info,
            warnings,
        }))
    }
}

/// The job's phase in the planning model, from its conditions: a True `Succeeded` or `Failed`
/// finishes it.
pub fn kubeflow_phase(job: &PyTorchJob) -> TrainingJobPhase {
    let condition = |kind: &str| {
        job.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == kind && c.status == "True")
        })
    };
    if condition("Succeeded") {
        TrainingJobPhase::Succeed
    } else if condition("Failed") {
        TrainingJobPhase::Failed
    } else if condition("Running") {
        TrainingJobPhase::Running
    } else if job.status.is_some() {
        TrainingJobPhase::Creating
    } else {
        TrainingJobPhase::None
    }
}
