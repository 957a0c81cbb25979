//! Building a `ClusterState` from a List dump (`kubectl get nodes,pods,jobs,trainingjobs -A -o json`).

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::ClusterState;
use crate::api::manifest::{Document, ManifestError, read_documents};
use crate::api::{FieldError, TrainingJob};

/// A state built from a dump, with what was skipped and why.
#[derive(Debug)]
pub struct Snapshot {
    pub state: ClusterState,
    /// Objects skipped (malformed, invalid or of a kind the state does not use).
    pub warnings: Vec<FieldError>,
}

impl ClusterState {
    /// Applies every object of a dump; objects it cannot use are skipped with a warning.
    pub fn from_documents(docs: &[Document]) -> Snapshot {
        let mut state = ClusterState::new();
        let mut warnings = Vec::new();
        for doc in docs {
            state.apply_document(doc, &mut warnings);
        }
        Snapshot { state, warnings }
    }

    /// Reads a dump file (JSON or YAML) into a state.
    pub fn from_file(path: &Path) -> Result<Snapshot, ManifestError> {
        Ok(Self::from_documents(&read_documents(path)?))
    }

    /// Applies one object of a dump by its kind.
    pub fn apply_document(&mut self, doc: &Document, warnings: &mut Vec<FieldError>) {
        let api_version = doc
            .value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        match (doc.kind(), api_version) {
            ("Node", "v1") => match doc.decode::<Node>() {
                Ok(node) => warnings.extend(self.apply_node(&node).err()),
                Err(e) => warnings.push(e),
            },
            ("Pod", "v1") => match doc.decode::<Pod>() {
                Ok(pod) => warnings.extend(self.apply_pod(&pod).err()),
                Err(e) => warnings.push(e),
            },
            ("Job", "batch/v1") => match doc.decode::<Job>() {
                Ok(job) => self.apply_batch_job(&job),
                Err(e) => warnings.push(e),
            },
            ("TrainingJob", "paddlepaddle.org/v1alpha1") => match doc.decode::<TrainingJob>() {
                Ok(job) => {
                    if let Err(problems) = self.apply_training_job(&job) {
                        warnings.extend(problems);
                    }
                }
                Err(e) => warnings.push(e),
            },
            (kind, api) => warnings.push(FieldError::new(
                doc.object_ref(),
                "kind",
                format!("{api} {kind} is not used by the cluster model; skipped"),
            )),
        }
    }
}
