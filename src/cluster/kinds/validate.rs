//! `trainscale validate` for any kind through its adapter: errors, warnings, and why a job would
//! be left alone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::{Reading, priority_field, registered};
use crate::api::manifest::Document;
use crate::api::priority::{PriorityClasses, resolve_priority};
use crate::api::progress::malformed_warning;
use crate::api::validate::ObjectReport;
use crate::api::{FieldError, JobKind};

/// Whether a manifest object is of a job kind's resource but no job of it (a batch/v1 Job that
/// does not opt in, or a trainer Job): `validate` passes over it without a word.
pub fn ignored(doc: &Document) -> bool {
    let api_version = doc
        .value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let Some(kind) = JobKind::of(doc.kind(), api_version) else {
        return false;
    };
    let Some(meta) = doc
        .value
        .get("metadata")
        .and_then(|m| ObjectMeta::deserialize(m).ok())
    else {
        return false;
    };
    !(registered(kind).selects)(&meta)
}

/// Validates a manifest of `kind` through its adapter: the adapter's errors, its warnings
/// (a priority naming no PriorityClass among `classes` included), and why it would be left alone
/// (a warning).
pub fn check_document(doc: &Document, kind: JobKind, classes: &PriorityClasses) -> ObjectReport {
    let job = match (registered(kind).decode)(&doc.value) {
        Ok(Some(job)) => job,
        Ok(None) => {
            let object = doc.object_ref();
            return ObjectReport {
                warnings: vec![FieldError::new(
                    &object,
                    "metadata.annotations",
                    format!(
                        "not planned: no {kind} trainscale sizes (not opted in, or a trainer \
                         Job of trainscale's operator)"
                    ),
                )],
                object,
                errors: Vec::new(),
            };
        }
        Err(bad) => {
            let object = doc.object_ref();
            return ObjectReport {
                errors: vec![FieldError::new(&object, &bad.field, &bad.error)],
                object,
                warnings: Vec::new(),
            };
        }
    };
    let object = job.key().object_ref();
    let (errors, warnings) = match job.read(classes) {
        Ok(Reading::Planned(read)) => {
            let mut warnings = read.warnings;
            if let Some(text) = read
                .info
                .priority_class
                .as_deref()
                .and_then(|c| resolve_priority(c, classes).warning)
            {
                warnings.push(FieldError::new(&object, priority_field(kind), text));
            }
            if let Err(e) = job.progress() {
                warnings.push(malformed_warning(&e));
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
