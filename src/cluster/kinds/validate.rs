//! `trainscale validate` for any kind through its adapter: errors, warnings, and why a job would
//! be left alone; which objects are no job at all.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::{Reading, priority_field, registered};
use crate::api::manifest::Document;
use crate::api::names::printable;
use crate::api::priority::{PriorityClasses, resolve_priority};
use crate::api::progress::malformed_warning;
use crate::api::validate::ObjectReport;
use crate::api::{FieldError, JobKind};

/// Whether a manifest object is of a job kind's resource but no job of it (a batch/v1 Job that
/// does not opt in, or a trainer Job): `validate` passes over it without a word.
pub fn ignored(doc: &Document) -> bool {
    let Some(kind) = JobKind::of(doc.kind(), doc.api_version()) else {
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

/// The line `validate` prints for an object of a kind it does not check (a Service, a ConfigMap,
/// a Namespace, ... of a bundle): `v1 Service ns/name (not a job kind)`. `None` for the kinds it
/// checks (job kinds in their own API group, under any version, and PriorityClasses) and for an object naming no
/// kind or no apiVersion, which are errors.
pub fn unchecked_kind(doc: &Document) -> Option<String> {
    let api_version = doc.api_version();
    let kind = doc.kind();
    // A job kind's name in another API group is another operator's resource (Kubeflow's
    // `kubeflow.org/v1` PaddleJob, Volcano's `batch.volcano.sh` Job): not checked. In the kind's
    // own group under another version it is checked (and refused).
    if kind.is_empty()
        || api_version.is_empty()
        || kind == "PriorityClass"
        || JobKind::named(kind).is_some_and(|k| k.group() == doc.api_group())
    {
        return None;
    }
    let object = doc.object_ref();
    // An object without a name is named by where it is.
    let object = object.strip_prefix(&format!("{kind} ")).map_or_else(
        || format!("{kind} at {object}"),
        |rest| format!("{kind} {rest}"),
    );
    Some(format!(
        "{} {} (not a job kind)",
        printable(api_version),
        printable(&object)
    ))
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
