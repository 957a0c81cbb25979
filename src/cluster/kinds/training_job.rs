//! The TrainingJob adapter (`paddlepaddle.org/v1alpha1`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{JobAdapter, ReadJob, Reading, Records, Resize};
use crate::api::priority::PriorityClasses;
use crate::api::progress::{PROGRESS_ANNOTATION, Progress, read_progress};
use crate::api::validate::check_training_job;
use crate::api::{FieldError, JobKind, TrainingJob, TrainingJobPhase};
use crate::cluster::objects::read_training_job_spec;

impl JobAdapter for TrainingJob {
    const KIND: JobKind = JobKind::TrainingJob;
    const RESIZE: Resize = Resize::TrainerJob;
    const RECORDS: Records = Records::Status;
    const SIZE_FIELDS: [&'static str; 3] = [
        "spec.trainer.min-instance",
        "spec.trainer.max-instance",
        "spec.trainer.replicaSpec.spec.parallelism",
    ];
    const PRIORITY_FIELD: &'static str = "spec.annotations.priority";

    fn phase(&self) -> TrainingJobPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }

    fn conditions(&self) -> Vec<Condition> {
        self.status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default()
    }

    /// Checked by `check_training_job` in [`JobAdapter::read`], with the derived names.
    fn name_problems(&self) -> Vec<FieldError> {
        Vec::new()
    }

    /// The annotation or `status.progress`, `spec.passes` the total when the report has none.
    fn progress(&self) -> Result<Option<Progress>, FieldError> {
        training_job_progress(self)
    }

    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let findings = check_training_job(self);
        if !findings.errors.is_empty() {
            return Err(findings.errors);
        }
        let (info, priority_warning) = read_training_job_spec(self, classes)?;
        let mut warnings = findings.warnings;
        warnings.extend(priority_warning);
        Ok(Reading::Planned(ReadJob {
            key: self.job_key(),
            info,
            warnings,
        }))
    }
}

/// A TrainingJob's progress report (see [`JobAdapter::progress`]).
pub fn training_job_progress(job: &TrainingJob) -> Result<Option<Progress>, FieldError> {
    read_progress(
        job.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROGRESS_ANNOTATION))
            .map(String::as_str),
        job.status.as_ref().and_then(|s| s.progress.as_ref()),
        Some(job.spec.passes).filter(|p| *p > 0),
        &job.object_ref(),
    )
}
