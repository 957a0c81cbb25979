//! The one error shape for bad input: which object, which field, what is wrong.

use super::names::printable;

/// A problem with one field of one object, e.g. `TrainingJob ns/a: spec.trainer.min-instance: ...`.
///
/// Displayed on one line: control characters (a newline in a name) are escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}: {}", printable(object), printable(field), printable(problem))]
pub struct FieldError {
    /// The object, as `Kind namespace/name` (or a document position when it has no name).
    pub object: String,
    /// The field path, e.g. `spec.trainer.resources.requests.cpu`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl FieldError {
    /// A problem with `field` of `object`.
    pub fn new(
        object: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        FieldError {
            object: object.into(),
            field: field.into(),
            problem: problem.into(),
        }
    }
}
