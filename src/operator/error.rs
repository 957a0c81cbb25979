//! Errors of the operator.

use crate::api::FieldError;

/// Why a reconcile (or building the desired objects) failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The TrainingJob lacks something every stored object has (namespace, uid).
    #[error("{object}: {what} is missing")]
    Missing { object: String, what: &'static str },
    /// A field of the TrainingJob cannot be used (e.g. an unparsable quantity).
    #[error(transparent)]
    Field(#[from] FieldError),
    /// An object the operator would create already exists and belongs to someone else.
    #[error("{kind} {namespace}/{name} exists and is not owned by TrainingJob {namespace}/{owner}")]
    NotOwned {
        kind: &'static str,
        namespace: String,
        name: String,
        owner: String,
    },
    /// Serializing an object failed.
    #[error("serializing {what}: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The controller's watch of TrainingJobs failed for good.
    #[error("controller: {0}")]
    Controller(String),
}
