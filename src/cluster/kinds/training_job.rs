//! The TrainingJob adapter (`paddlepaddle.org/v1alpha1`).

use super::{JobAdapter, ReadJob, Reading};
use crate::api::priority::PriorityClasses;
use crate::api::validate::check_training_job;
use crate::api::{FieldError, JobKind, TrainingJob};
use crate::cluster::objects::read_training_job_spec;

impl JobAdapter for TrainingJob {
    const KIND: JobKind = JobKind::TrainingJob;

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
