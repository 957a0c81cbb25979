//! Building a `ClusterState` from a List dump (`kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs,pytorchtrainingjobs,pytorchjobs -A -o json`).

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::ClusterState;
use crate::api::manifest::{Document, ManifestError, read_documents};
use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::kinds::JobAdapter;
use crate::api::{
    FieldError, JobKey, JobKind, PaddleJob, PyTorchJob, PyTorchTrainingJob, TrainingJob,
};

/// A state built from a dump, with what was skipped and why.
#[derive(Debug)]
pub struct Snapshot {
    pub state: ClusterState,
    /// Objects other than jobs that were skipped (malformed, or of a kind the state does not
    /// use); jobs with errors are in the state (`report::skipped_jobs`).
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
            ("PriorityClass", "scheduling.k8s.io/v1") => match doc.decode::<PriorityClass>() {
                Ok(class) => self.apply_priority_class(&class),
                Err(e) => warnings.push(e),
            },
            ("TrainingJob", "paddlepaddle.org/v1alpha1") => {
                self.apply_job_document::<TrainingJob>(doc, JobKind::TrainingJob)
            }
            ("PaddleJob", "paddlepaddle.org/v1") => {
                self.apply_job_document::<PaddleJob>(doc, JobKind::PaddleJob)
            }
            ("PyTorchTrainingJob", "batch.tensorstack.dev/v1beta1") => {
                self.apply_job_document::<PyTorchTrainingJob>(doc, JobKind::PyTorchTrainingJob)
            }
            ("PyTorchJob", "kubeflow.org/v1") => {
                self.apply_job_document::<PyTorchJob>(doc, JobKind::PyTorchJob)
            }
            (kind, api) => warnings.push(FieldError::new(
                doc.object_ref(),
                "kind",
                format!("{api} {kind} is not used by the cluster model; skipped"),
            )),
        }
    }

    /// Applies a job object of `kind`; one that does not decode is kept as skipped, with its
    /// error, so it is listed like any job with errors (see `report::skipped_jobs`).
    fn apply_job_document<A>(&mut self, doc: &Document, kind: JobKind)
    where
        A: JobAdapter + serde::de::DeserializeOwned,
    {
        match doc.decode::<A>() {
            // Errors are kept in the job's slot.
            Ok(job) => {
                let _ = self.apply_job(&job);
            }
            Err(e) => {
                let meta = doc.value.get("metadata");
                let text = |field: &str| {
                    meta.and_then(|m| m.get(field))
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_string()
                };
                let key = JobKey::of_kind(kind, text("namespace"), text("name"));
                self.set_invalid_job(key, vec![e]);
            }
        }
    }
}
