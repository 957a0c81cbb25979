//! The elastic batch/v1 Job adapter (`JobKind::BatchJob`).
//!
//! A Job is a job of this kind once it opts in with the annotations `trainscale.io/min-replicas`
//! and `trainscale.io/max-replicas` (both then required: integers, 0 <= min <= max) and is no
//! trainer Job of trainscale's operator (controller ownerReference a TrainingJob or PaddleJob:
//! the trainer view wins, annotated or not). Every other Job is no job at all, ignored without a
//! word: a cluster has thousands of ordinary Jobs.
//!
//! The size is `spec.parallelism` (else the live pods); the per-worker request and the priority
//! (`priorityClassName`) from `spec.template`; `trainscale.io/speedup` as on the other kinds.
//! It is resized by `spec.parallelism` and, for `completionMode: Indexed`, `spec.completions`
//! set equal in the same merge patch (the elastic Indexed Job rule); `spec.suspend`, scheduling
//! gates and Kueue's labels are never written. Left alone: a suspended Job (`spec.suspend`: it
//! holds no room), a Job one of its JobSet makes (the JobSet is sized instead) and a Job queued
//! by Kueue (label `kueue.x-k8s.io/queue-name`) without Kueue's `kueue.x-k8s.io/elastic-job:
//! "true"` (Kueue requeues such a Job when its parallelism changes); with that annotation, a
//! Kueue Job is sized like any other. A True `Complete` or `Failed` condition finishes it.
//!
//! An Indexed Job whose last pod `<name>-<completions-1>`, or `<name>-<max-1>` at its max, would
//! have a hostname that is no DNS-1123 label is an error (the job skipped, never sized to a count
//! the API server refuses).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::template::{
    MAX_FIELD, MIN_FIELD, annotation_bounds, negative_count, opted_in, read_job_spec,
};
use super::{
    JobAdapter, LeftAlone, PodRule, Reading, Records, Resize, SizeAt, template_constraints,
};
use crate::api::names::{indexed_hostname_problem, job_name};
use crate::api::priority::PriorityClasses;
use crate::api::{
    FieldError, JobKind, KUEUE_ELASTIC_ANNOTATION, KUEUE_QUEUE_LABEL, MAX_REPLICAS_ANNOTATION,
    TrainingJobPhase,
};
use crate::cluster::filters::PodConstraints;
use crate::cluster::objects::trainer_job_owner;

fn left_alone(field: &'static str, why: impl Into<String>, announce: bool) -> Reading {
    Reading::LeftAlone(LeftAlone {
        field,
        why: why.into(),
        announce,
    })
}

fn indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

/// The name of the JobSet that controls a Job, if one does.
pub fn job_set_owner(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == JobKind::JobSet.as_str()
                && o.api_version
                    .strip_prefix(JobKind::JobSet.group())
                    .is_some_and(|v| v.starts_with('/'))
        })
        .map(|o| o.name.as_str())
}

/// The error when an Indexed Job would name a pod with a hostname the API server refuses (see
/// [`indexed_hostname_problem`]): at its own `spec.completions` (as the API server checks it),
/// else at `max` completions (`trainscale.io/max-replicas`, what trainscale sizes it up to).
fn hostname_problem(job: &Job, object: &str, max: Option<i32>) -> Option<FieldError> {
    let name = job_name(&job.metadata)?;
    if !indexed(job) {
        return None;
    }
    let completions = job.spec.as_ref().and_then(|s| s.completions).unwrap_or(0);
    if completions > 0
        && let Some(e) = indexed_hostname_problem(
            object,
            &name,
            completions - 1,
            &format!("at spec.completions {completions}"),
        )
    {
        return Some(e);
    }
    let max = max.filter(|m| *m > completions)?;
    indexed_hostname_problem(
        object,
        &name,
        max - 1,
        &format!("at {MAX_REPLICAS_ANNOTATION} {max}, which trainscale sizes it up to"),
    )
}

impl JobAdapter for Job {
    const KIND: JobKind = JobKind::BatchJob;
    const RESIZE: Resize = Resize::JobSpec;
    const RECORDS: Records = Records::Annotation;
    const SIZE_FIELDS: [&'static str; 3] = [MIN_FIELD, MAX_FIELD, "spec.parallelism"];
    const PRIORITY_FIELD: &'static str = "spec.template.spec.priorityClassName";

    fn selects(meta: &ObjectMeta) -> bool {
        opted_in(meta) && trainer_job_owner(meta).is_none()
    }

    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        let spec = self.spec.as_ref()?;
        template_constraints(
            Some(&spec.template),
            &self.job_key().object_ref(),
            "spec.template",
        )
    }

    fn type_problems(&self) -> Vec<FieldError> {
        let object = self.job_key().object_ref();
        let spec = self.spec.as_ref();
        [
            ("spec.parallelism", spec.and_then(|s| s.parallelism)),
            ("spec.completions", spec.and_then(|s| s.completions)),
        ]
        .into_iter()
        .filter_map(|(field, value)| negative_count(&object, field, value))
        .chain(hostname_problem(self, &object, None))
        .collect()
    }

    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let object = self.job_key().object_ref();
        if let Some(owner) = job_set_owner(&self.metadata) {
            return Ok(left_alone(
                "metadata.ownerReferences",
                format!(
                    "made by JobSet {owner}, whose controller sets its parallelism from the \
                     JobSet: annotate the JobSet instead"
                ),
                true,
            ));
        }
        let Some(spec) = self.spec.as_ref() else {
            return Err(vec![FieldError::new(object, "spec", "required")]);
        };
        if spec.suspend == Some(true) {
            return Ok(left_alone(
                "spec.suspend",
                "suspended: holds no room",
                false,
            ));
        }
        let kueue_elastic = self
            .annotations()
            .get(KUEUE_ELASTIC_ANNOTATION)
            .is_some_and(|v| v == "true");
        if self.labels().contains_key(KUEUE_QUEUE_LABEL) && !kueue_elastic {
            return Ok(left_alone(
                "metadata.annotations[kueue.x-k8s.io/elastic-job]",
                format!(
                    "queued by Kueue (label {KUEUE_QUEUE_LABEL}) without \
                     {KUEUE_ELASTIC_ANNOTATION}: \"true\": Kueue suspends and requeues a Job \
                     whose parallelism changes"
                ),
                true,
            ));
        }
        let (min, max) = annotation_bounds(&self.metadata, &object)?;
        let mut errors = Vec::new();
        // Never sized to a count whose last pod the API server would refuse.
        errors.extend(hostname_problem(self, &object, Some(max)));
        if let Some(p) = spec.parallelism
            && p < 0
        {
            errors.push(FieldError::new(
                &object,
                "spec.parallelism",
                format!("{p} is negative"),
            ));
        }
        if indexed(self) {
            if min < 1 {
                errors.push(FieldError::new(
                    &object,
                    MIN_FIELD,
                    "0 is too few for an Indexed Job: at 0 completions it completes at once",
                ));
            }
            if let (Some(c), Some(p)) = (spec.completions, spec.parallelism)
                && c != p
            {
                errors.push(FieldError::new(
                    &object,
                    "spec.completions",
                    format!(
                        "{c} differs from spec.parallelism ({p}): an elastic Indexed Job keeps \
                         them equal (the API server changes completions only with parallelism, \
                         to the same value)"
                    ),
                ));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        read_job_spec(
            &self.metadata,
            &object,
            self.job_key(),
            spec,
            "spec.template",
            (min, max),
            batch_job_phase(self),
            classes,
        )
    }

    fn phase(&self) -> TrainingJobPhase {
        batch_job_phase(self)
    }

    fn size_at(&self) -> Option<SizeAt> {
        Some(SizeAt {
            spec: "/spec".to_string(),
            indexed: indexed(self),
            element: None,
        })
    }

    fn pod_rule(&self) -> Option<PodRule> {
        Some(PodRule::Trainers)
    }
}

/// The Job's phase in the planning model: a True `Complete` or `Failed` condition finishes it;
/// active pods make it Running.
pub fn batch_job_phase(job: &Job) -> TrainingJobPhase {
    let status = job.status.as_ref();
    let condition = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
    };
    if condition("Complete") {
        TrainingJobPhase::Succeed
    } else if condition("Failed") {
        TrainingJobPhase::Failed
    } else if status.and_then(|s| s.active).unwrap_or(0) > 0 {
        TrainingJobPhase::Running
    } else if status.is_some() {
        TrainingJobPhase::Creating
    } else {
        TrainingJobPhase::None
    }
}
