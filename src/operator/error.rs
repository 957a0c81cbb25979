//! Errors of the operator.

use crate::api::{FieldError, JobKind, paddle_job_problem};

/// Why a reconcile (or building the desired objects) failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The job lacks something every stored object has (namespace, uid).
    #[error("{object}: {what} is missing")]
    Missing { object: String, what: &'static str },
    /// A field of the job cannot be used (e.g. an unparsable quantity).
    #[error(transparent)]
    Field(#[from] FieldError),
    /// An object the operator would create already exists and belongs to someone else.
    #[error(
        "{kind} {namespace}/{name} exists and is not owned by {owner_kind} {namespace}/{owner}"
    )]
    NotOwned {
        kind: &'static str,
        owner_kind: JobKind,
        namespace: String,
        name: String,
        owner: String,
    },
    /// An object the operator would create exists but has stayed out of its cache (which holds
    /// only objects labelled `trainscale.io/job`): someone else's.
    #[error(
        "{kind} {namespace}/{name} exists and is not labelled {label}={owner}: not created for {owner_kind} {namespace}/{owner}"
    )]
    NotLabelled {
        kind: &'static str,
        owner_kind: JobKind,
        namespace: String,
        name: String,
        owner: String,
        label: &'static str,
    },
    /// Serializing an object failed.
    #[error("serializing {what}: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The controller's watch of jobs failed for good.
    #[error("controller: {0}")]
    Controller(String),
}

impl OperatorError {
    /// The error with a field problem renamed to the `kind` object's names (a PaddleJob's problems
    /// are found on its TrainingJob view).
    pub fn for_kind(self, kind: JobKind) -> Self {
        match self {
            OperatorError::Field(problem) => OperatorError::Field(rename_problem(kind, problem)),
            other => other,
        }
    }
}

/// A problem found on a job's TrainingJob view, named as the `kind` object.
pub fn rename_problem(kind: JobKind, problem: FieldError) -> FieldError {
    match kind {
        JobKind::PaddleJob => paddle_job_problem(problem),
        // The TrainingJob's own names; the operator creates no other kind.
        _ => problem,
    }
}
