//! The JobSet adapter (`jobset.x-k8s.io/v1alpha2`).
//!
//! A JobSet opts in with the annotations `trainscale.io/min-replicas` and
//! `trainscale.io/max-replicas` (as the elastic Job; without them it is left alone, silently) and
//! names its elastic replicated Job with `trainscale.io/replicated-job` (required when it has
//! more than one). That replicated Job must have `replicas: 1` and be Indexed: the JobSet
//! controller's ElasticJobSet feature resizes only Indexed child Jobs, from the template's
//! `parallelism` and `completions` kept equal and at least 1. The size is its
//! `template.spec.parallelism` (else the live pods); the per-worker request and priority from its
//! pod template. It is resized by a JSON Patch of that element (a merge patch cannot address one
//! list element), guarded by `test`s of the resourceVersion and of the element's name. A JobSet
//! controlled by a Kubeflow Trainer `TrainJob` is left alone with an Event (Trainer rewrites it);
//! a suspended one is left alone silently. A True `Completed` or `Failed` condition finishes it.
//! The names its controller derives are checked as JobSet's webhook and the API server check
//! them, the elastic replicated Job's pod hostnames at the max (see [`super::jobset_names`]).
//!
//! Pods (see [`super::pods`]): those of the elastic replicated Job are its trainers, those of its
//! other replicated Jobs its masters (the support role: launchers, drivers, parameter servers,
//! placed before any trainer).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::jobset_names::{max_hostname_problem, webhook_name_problems};
use super::template::{
    MAX_FIELD, MIN_FIELD, annotation_bounds, annotation_field, negative_count, opted_in,
    read_job_spec, repeated_names,
};
use super::{
    JobAdapter, LeftAlone, PodRule, Reading, Records, Resize, SizeAt, template_constraints,
};
use crate::api::priority::PriorityClasses;
use crate::api::{
    FieldError, JobKind, JobSet, REPLICATED_JOB_ANNOTATION, ReplicatedJob, TrainingJobPhase,
};
use crate::cluster::filters::PodConstraints;

/// Kubeflow Trainer's API group: its TrainJobs own the JobSets they run as.
const TRAINER_GROUP: &str = "trainer.kubeflow.org";

fn left_alone(field: &'static str, why: impl Into<String>, announce: bool) -> Reading {
    Reading::LeftAlone(LeftAlone {
        field,
        why: why.into(),
        announce,
    })
}

/// The name of the TrainJob that controls a JobSet, if one does.
fn train_job_owner(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == "TrainJob"
                && o.api_version
                    .strip_prefix(TRAINER_GROUP)
                    .is_some_and(|v| v.starts_with('/'))
        })
        .map(|o| o.name.as_str())
}

impl JobSet {
    /// The elastic replicated Job and its index: the one `trainscale.io/replicated-job` names,
    /// else the only one.
    fn elastic_replicated_job(&self, object: &str) -> Result<(usize, &ReplicatedJob), FieldError> {
        let jobs = &self.spec.replicated_jobs;
        match self.annotations().get(REPLICATED_JOB_ANNOTATION) {
            Some(name) => jobs
                .iter()
                .enumerate()
                .find(|(_, r)| r.name == *name)
                .ok_or_else(|| {
                    let names: Vec<&str> = jobs.iter().map(|r| r.name.as_str()).collect();
                    FieldError::new(
                        object,
                        annotation_field(REPLICATED_JOB_ANNOTATION),
                        format!(
                            "{name:?} names no replicated Job of the JobSet (it has {})",
                            names.join(", ")
                        ),
                    )
                }),
            None => match jobs.as_slice() {
                [] => Err(FieldError::new(
                    object,
                    "spec.replicatedJobs",
                    "required: the elastic replicated Job",
                )),
                [one] => Ok((0, one)),
                many => Err(FieldError::new(
                    object,
                    annotation_field(REPLICATED_JOB_ANNOTATION),
                    format!(
                        "required: the JobSet has {} replicated Jobs; name the elastic one",
                        many.len()
                    ),
                )),
            },
        }
    }

    /// Whether trainscale sizes the JobSet at all: opted in and not a TrainJob's.
    fn sized(&self) -> bool {
        opted_in(&self.metadata) && train_job_owner(&self.metadata).is_none()
    }

    /// The elastic replicated Job's index and Job spec, when it resolves.
    fn elastic_spec(&self) -> Option<(usize, &ReplicatedJob, &JobSpec)> {
        let (i, rjob) = self.elastic_replicated_job("").ok()?;
        Some((i, rjob, rjob.template.spec.as_ref()?))
    }
}

/// Whether a replicated Job is Indexed; JobSet's defaulting webhook makes one that names no
/// completion mode Indexed. The one reading of that rule (the adapter, the names' checks).
pub(super) fn is_indexed(spec: &JobSpec) -> bool {
    spec.completion_mode
        .as_deref()
        .is_none_or(|m| m == "Indexed")
}

impl JobAdapter for JobSet {
    const KIND: JobKind = JobKind::JobSet;
    const RESIZE: Resize = Resize::JobSpec;
    const RECORDS: Records = Records::Annotation;
    const SIZE_FIELDS: [&'static str; 3] = [
        MIN_FIELD,
        MAX_FIELD,
        "spec.replicatedJobs.template.spec.parallelism",
    ];
    const PRIORITY_FIELD: &'static str =
        "spec.replicatedJobs.template.spec.template.spec.priorityClassName";

    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        let (i, _, spec) = self.elastic_spec()?;
        template_constraints(
            Some(&spec.template),
            &self.job_key().object_ref(),
            &format!("spec.replicatedJobs[{i}].template.spec.template"),
        )
    }

    fn type_problems(&self) -> Vec<FieldError> {
        let object = self.job_key().object_ref();
        let jobs = &self.spec.replicated_jobs;
        let mut out: Vec<FieldError> = jobs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                negative_count(
                    &object,
                    &format!("spec.replicatedJobs[{i}].replicas"),
                    r.replicas,
                )
            })
            .collect();
        out.extend(repeated_names(
            &object,
            "spec.replicatedJobs",
            "replicated Job name",
            jobs.iter().map(|r| r.name.as_str()),
            |a, b| a == b,
        ));
        out.extend(webhook_name_problems(self, &object));
        out
    }

    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let object = self.job_key().object_ref();
        if !opted_in(&self.metadata) {
            return Ok(left_alone(
                MIN_FIELD,
                "not elastic (no trainscale.io/min-replicas annotation)",
                false,
            ));
        }
        if let Some(owner) = train_job_owner(&self.metadata) {
            return Ok(left_alone(
                "metadata.ownerReferences",
                format!("owned by TrainJob {owner}: Kubeflow Trainer rewrites it"),
                true,
            ));
        }
        if self.spec.suspend == Some(true) {
            return Ok(left_alone(
                "spec.suspend",
                "suspended: holds no room",
                false,
            ));
        }
        let (min, max) = annotation_bounds(&self.metadata, &object)?;
        let (i, rjob) = self.elastic_replicated_job(&object).map_err(|e| vec![e])?;
        let base = format!("spec.replicatedJobs[{i}]");
        let mut errors = Vec::new();
        let replicas = rjob.replicas.unwrap_or(1);
        if replicas != 1 {
            errors.push(FieldError::new(
                &object,
                format!("{base}.replicas"),
                format!("{replicas}: the elastic replicated Job must have replicas 1 (its one Job is resized)"),
            ));
        }
        let Some(spec) = rjob.template.spec.as_ref() else {
            errors.push(FieldError::new(
                &object,
                format!("{base}.template.spec"),
                "required",
            ));
            return Err(errors);
        };
        if !is_indexed(spec) {
            errors.push(FieldError::new(
                &object,
                format!("{base}.template.spec.completionMode"),
                "must be Indexed: the JobSet controller resizes only Indexed Jobs (ElasticJobSet)",
            ));
        }
        if min < 1 {
            errors.push(FieldError::new(
                &object,
                MIN_FIELD,
                "0 is too few: the JobSet controller keeps parallelism at least 1",
            ));
        }
        if let Some(p) = spec.parallelism
            && p < 0
        {
            errors.push(FieldError::new(
                &object,
                format!("{base}.template.spec.parallelism"),
                format!("{p} is negative"),
            ));
        }
        if let (Some(c), Some(p)) = (spec.completions, spec.parallelism)
            && c != p
        {
            errors.push(FieldError::new(
                &object,
                format!("{base}.template.spec.completions"),
                format!(
                    "{c} differs from parallelism ({p}): the JobSet controller resizes a Job \
                     only while they are equal"
                ),
            ));
        }
        // Never sized to a count whose last pod the API server would refuse (unless the webhook's
        // checks of the names as they are already fail).
        if max > spec.completions.unwrap_or(0) && webhook_name_problems(self, &object).is_empty() {
            errors.extend(max_hostname_problem(self, &object, rjob, max));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        read_job_spec(
            &self.metadata,
            &object,
            self.job_key(),
            spec,
            &format!("{base}.template.spec.template"),
            (min, max),
            jobset_phase(self),
            classes,
        )
    }

    fn phase(&self) -> TrainingJobPhase {
        jobset_phase(self)
    }

    fn size_at(&self) -> Option<SizeAt> {
        let (i, rjob, spec) = self.elastic_spec()?;
        Some(SizeAt {
            spec: format!("/spec/replicatedJobs/{i}/template/spec"),
            indexed: is_indexed(spec),
            element: Some((format!("/spec/replicatedJobs/{i}/name"), rjob.name.clone())),
        })
    }

    fn pod_rule(&self) -> Option<PodRule> {
        if !self.sized() {
            return None;
        }
        let (_, rjob) = self.elastic_replicated_job("").ok()?;
        Some(PodRule::Group(Arc::from(rjob.name.as_str())))
    }
}

/// The JobSet's phase in the planning model: a True `Completed` or `Failed` condition (or the
/// terminal state) finishes it.
pub fn jobset_phase(job: &JobSet) -> TrainingJobPhase {
    let status = job.status.as_ref();
    let condition = |kind: &str| {
        status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == kind && c.status == "True")
                || s.terminal_state.as_deref() == Some(kind)
        })
    };
    if condition("Completed") {
        TrainingJobPhase::Succeed
    } else if condition("Failed") {
        TrainingJobPhase::Failed
    } else if status.is_some() {
        TrainingJobPhase::Running
    } else {
        TrainingJobPhase::None
    }
}
