//! `trainscale validate` for any kind through its adapter: errors, warnings, and why a job would
//! be left alone.

use super::{JobAdapter, Reading, priority_field};
use crate::api::manifest::Document;
use crate::api::priority::{PriorityClasses, resolve_priority};
use crate::api::validate::ObjectReport;
use crate::api::{FieldError, JobKind, PaddleJob, PyTorchJob, PyTorchTrainingJob, TrainingJob};

/// Validates a manifest of `kind` through its adapter: the adapter's errors, its warnings
/// (a priority naming no PriorityClass among `classes` included), and why it would be left alone
/// (a warning).
pub fn check_document(doc: &Document, kind: JobKind, classes: &PriorityClasses) -> ObjectReport {
    match kind {
        JobKind::PyTorchTrainingJob => check::<PyTorchTrainingJob>(doc, classes),
        JobKind::PyTorchJob => check::<PyTorchJob>(doc, classes),
        JobKind::TrainingJob => check::<TrainingJob>(doc, classes),
        JobKind::PaddleJob => check::<PaddleJob>(doc, classes),
    }
}

fn check<A: JobAdapter + serde::de::DeserializeOwned>(
    doc: &Document,
    classes: &PriorityClasses,
) -> ObjectReport {
    let job = match doc.decode::<A>() {
        Ok(job) => job,
        Err(e) => {
            return ObjectReport {
                object: doc.object_ref(),
                errors: vec![e],
                warnings: Vec::new(),
            };
        }
    };
    let object = job.job_key().object_ref();
    let (errors, warnings) = match job.read(classes) {
        Ok(Reading::Planned(read)) => {
            let mut warnings = read.warnings;
            if let Some(text) = read
                .info
                .priority_class
                .as_deref()
                .and_then(|c| resolve_priority(c, classes).warning)
            {
                warnings.push(FieldError::new(&object, priority_field(A::KIND), text));
            }
            (Vec::new(), warnings)
        }
        Ok(Reading::LeftAlone(why)) => (
            Vec::new(),
            vec![FieldError::new(
                &object,
                why.field,
                format!("not planned: {}", why.why),
            )],
        ),
        Err(errors) => (errors, Vec::new()),
    };
    ObjectReport {
        object,
        errors,
        warnings,
    }
}
