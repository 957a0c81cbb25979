//! The PaddleJob adapter (`paddlepaddle.org/v1`, seed 001): read as the TrainingJob spec it runs
//! as, with problems named by the PaddleJob's own object and fields.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{JobAdapter, ReadJob, Reading, Records, Resize};
use crate::api::priority::PriorityClasses;
use crate::api::progress::Progress;
use crate::api::validate::check_training_job;
use crate::api::{
    FieldError, JobKind, PaddleJob, TrainingJob, TrainingJobPhase, paddle_job_problem,
};
use crate::cluster::objects::read_training_job_spec;

impl JobAdapter for PaddleJob {
    const KIND: JobKind = JobKind::PaddleJob;
    const RESIZE: Resize = Resize::TrainerJob;
    const RECORDS: Records = Records::Status;
    const SIZE_FIELDS: [&'static str; 3] = <TrainingJob as JobAdapter>::SIZE_FIELDS;
    const PRIORITY_FIELD: &'static str = <TrainingJob as JobAdapter>::PRIORITY_FIELD;

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

    /// As a TrainingJob's, named by the PaddleJob's fields (`spec.trainer.passes`).
    fn progress(&self) -> Result<Option<Progress>, FieldError> {
        super::training_job::training_job_progress(&self.as_training_job())
            .map_err(paddle_job_problem)
    }

    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let rename = |problems: Vec<FieldError>| -> Vec<FieldError> {
            problems.into_iter().map(paddle_job_problem).collect()
        };
        let view = self.as_training_job();
        let findings = check_training_job(&view);
        if !findings.errors.is_empty() {
            return Err(rename(findings.errors));
        }
        let (info, priority_warning) = read_training_job_spec(&view, classes).map_err(rename)?;
        let mut warnings = rename(findings.warnings);
        warnings.extend(priority_warning.map(paddle_job_problem));
        Ok(Reading::Planned(ReadJob {
            key: self.job_key(),
            info,
            warnings,
        }))
    }
}
