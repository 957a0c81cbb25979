//! The T9k PyTorchTrainingJob adapter (`batch.tensorstack.dev/v1beta1`, seed 003).
//!
//! Planned when `spec.elastic.enable` is true, not paused (`spec.runMode.pause.enable`); min and
//! max from `spec.elastic.{minReplicas,maxReplicas}`; the size from `expectedReplicas` (else the
//! live worker pods); the per-worker request from the `worker` replica's pod template (an elastic
//! job's requesting nothing is an error); priority `spec.scheduler.t9kScheduler.priority` (T9k's
//! default 10 when the T9k scheduler is named without one, else 0). Status phases Succeeded and
//! Failed finish it.

use super::template::{
    SizedFields, check_bounds, check_requests, negative_count, repeated_names, sized_job_info,
    template_request,
};
use std::sync::Arc;

use super::{JobAdapter, LeftAlone, ReadJob, Reading, Records, Resize, template_constraints};
use crate::api::priority::PriorityClasses;
use crate::api::{FieldError, JobKind, PyTorchTrainingJob, TrainingJobPhase};
use crate::cluster::filters::PodConstraints;

/// T9k's default priority of a job naming its scheduler without a priority.
const T9K_DEFAULT_PRIORITY: i32 = 10;

impl JobAdapter for PyTorchTrainingJob {
    const KIND: JobKind = JobKind::PyTorchTrainingJob;
    const RESIZE: Resize = Resize::Field(&["spec", "elastic", "expectedReplicas"]);
    const RECORDS: Records = Records::Annotation;
    const SIZE_FIELDS: [&'static str; 3] = [
        "spec.elastic.minReplicas",
        "spec.elastic.maxReplicas",
        "spec.elastic.expectedReplicas",
    ];
    const PRIORITY_FIELD: &'static str = "spec.scheduler.t9kScheduler.priority";

    fn phase(&self) -> TrainingJobPhase {
        t9k_phase(self)
    }

    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        let (i, worker) = self
            .spec
            .replica_specs
            .iter()
            .enumerate()
            .find(|(_, r)| r.type_.eq_ignore_ascii_case("worker"))?;
        template_constraints(
            worker.template.as_ref(),
            &self.job_key().object_ref(),
            &format!("spec.replicaSpecs[{i}].template"),
        )
    }

    fn type_problems(&self) -> Vec<FieldError> {
        let object = self.job_key().object_ref();
        let specs = &self.spec.replica_specs;
        let mut out: Vec<FieldError> = specs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                negative_count(
                    &object,
                    &format!("spec.replicaSpecs[{i}].replicas"),
                    r.replicas,
                )
            })
            .collect();
        out.extend(repeated_names(
            &object,
            "spec.replicaSpecs",
            "replica type",
            specs.iter().map(|r| r.type_.as_str()),
            |a, b| a.eq_ignore_ascii_case(b),
        ));
        out
    }

    fn read(&self, _classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let object = self.job_key().object_ref();
        let spec = &self.spec;
        let elastic = spec.elastic.clone().unwrap_or_default();
        if elastic.enable != Some(true) {
            return Ok(Reading::LeftAlone(LeftAlone {
                field: "spec.elastic.enable",
                why: "elastic training is not enabled".to_string(),
                announce: false,
            }));
        }
        let paused = spec
            .run_mode
            .as_ref()
            .and_then(|m| m.pause.as_ref())
            .and_then(|p| p.enable)
            == Some(true);
        if paused {
            return Ok(Reading::LeftAlone(LeftAlone {
                field: "spec.runMode.pause.enable",
                why: "the job is paused".to_string(),
                announce: false,
            }));
        }
        let (min, max) = check_bounds(
            &object,
            (elastic.min_replicas, "spec.elastic.minReplicas"),
            (elastic.max_replicas, "spec.elastic.maxReplicas"),
        )?;
        let Some((i, worker)) = spec
            .replica_specs
            .iter()
            .enumerate()
            .find(|(_, r)| r.type_.eq_ignore_ascii_case("worker"))
        else {
            return Err(vec![FieldError::new(
                object,
                "spec.replicaSpecs",
                "no replica spec of type worker",
            )]);
        };
        let field = format!("spec.replicaSpecs[{i}].template");
        let Some(template) = worker.template.as_ref() else {
            return Err(vec![FieldError::new(object, field, "required")]);
        };
        let trainer = template_request(template, &object, &field).map_err(|e| vec![e])?;
        if min < max {
            check_requests(template, &object, &field).map_err(|e| vec![e])?;
        }
        let mut warnings = Vec::new();
        if let Some(expected) = elastic.expected_replicas
            && expected < 0
        {
            return Err(vec![FieldError::new(
                object,
                "spec.elastic.expectedReplicas",
                format!("{expected} is negative"),
            )]);
        }
        let t9k = spec
            .scheduler
            .as_ref()
            .and_then(|s| s.t9k_scheduler.as_ref());
        let priority = match t9k {
            Some(s) => s.priority.unwrap_or(T9K_DEFAULT_PRIORITY),
            None => 0,
        };
        let (info, more) = sized_job_info(
            &self.metadata,
            &object,
            SizedFields {
                min,
                max,
                stored: elastic.expected_replicas,
                trainer,
                priority,
                priority_class: None,
                phase: t9k_phase(self),
            },
        );
        warnings.extend(more);
        Ok(Reading::Planned(ReadJob {
            key: self.job_key(),
            info,
            warnings,
        }))
    }
}

/// The job's phase in the planning model: `status.phase` Succeeded and Failed finish it.
pub fn t9k_phase(job: &PyTorchTrainingJob) -> TrainingJobPhase {
    match job.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => TrainingJobPhase::Succeed,
        Some("Failed") => TrainingJobPhase::Failed,
        Some("Running") => TrainingJobPhase::Running,
        Some(_) => TrainingJobPhase::Creating,
        None => TrainingJobPhase::None,
    }
}
