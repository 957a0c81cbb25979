//! Building a `ClusterState` from a List dump (`kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,paddlejobs,pytorchtrainingjobs,pytorchjobs,jobsets -A -o json`, and Kueue's
//! `kubectl get resourceflavors,clusterqueues,localqueues,workloads -A -o json`).

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::ClusterState;
use crate::api::manifest::{
    Document, Duplicate, ManifestError, ObjectIndex, SharedChildren, read_each,
    shared_children_problem,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::kinds::{JobAdapter, registered};
use crate::api::kueue::{ClusterQueue, KUEUE_API_VERSION, LocalQueue, ResourceFlavor, Workload};
use crate::api::{FieldError, JobKey, JobKind};

/// A state built from a dump, with what was skipped and why.
#[derive(Debug)]
pub struct Snapshot {
    pub state: ClusterState,
    /// Objects other than jobs that were skipped (malformed, or of a kind the state does not
    /// use); jobs with errors are in the state (`report::skipped_jobs`).
    pub warnings: Vec<FieldError>,
    /// Objects whose kind, namespace and name an earlier object of the dump has (the first
    /// is applied, these are not).
    pub duplicates: Vec<Duplicate>,
}

/// A dump that cannot be read, or that has one object twice.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error(transparent)]
    Unreadable(#[from] ManifestError),
    #[error(
        "{path}: no objects found (a dump is `kubectl get nodes,pods,jobs,priorityclasses,trainingjobs,... -A -o json`)"
    )]
    Empty { path: String },
    #[error("{path}: {} object(s) twice: {}", .duplicates.len(), list(.duplicates))]
    Duplicates {
        path: String,
        duplicates: Vec<Duplicate>,
    },
}

/// The first ten duplicates, `; `-separated, and how many more.
fn list(duplicates: &[Duplicate]) -> String {
    let mut text: Vec<String> = duplicates.iter().take(10).map(|d| d.to_string()).collect();
    if duplicates.len() > 10 {
        text.push(format!("and {} more", duplicates.len() - 10));
    }
    text.join("; ")
}

/// What the API server would refuse in a PriorityClass: its name (a DNS-1123 subdomain), a
/// `system-` name not built in, a value above 1,000,000,000 (`priority_class_errors`).
fn priority_class_problems(class: &PriorityClass) -> Vec<FieldError> {
    let name = class.metadata.name.as_deref().unwrap_or_default();
    let object = format!("PriorityClass {}", crate::api::names::printable(name));
    match super::objects::meta_name_problem(&object, &class.metadata) {
        Some(e) => vec![e],
        None => crate::api::priority::priority_class_errors(&object, class),
    }
}

/// The key of job document `doc` of `kind`, from its namespace and name as written.
fn job_key_of(doc: &Document, kind: JobKind) -> JobKey {
    let text = |field: &str| doc.metadata_field(field).unwrap_or("").to_string();
    JobKey::of_kind(kind, text("namespace"), text("name"))
}

/// Builds a state object by object, as a dump is read.
#[derive(Default)]
struct Builder {
    state: ClusterState,
    /// How many objects were read.
    objects: usize,
    warnings: Vec<FieldError>,
    index: ObjectIndex,
    duplicates: Vec<Duplicate>,
    shared: SharedChildren,
}

impl Builder {
    fn apply(&mut self, doc: &Document) {
        self.objects += 1;
        if let Some(duplicate) = self.index.see(doc) {
            self.duplicates.push(duplicate);
        } else if let Some((kind, first, at)) = self.shared_children(doc) {
            // Two objects, but one set of children: the later is a job with an error.
            let key = job_key_of(doc, kind);
            let problem = shared_children_problem(&first, &at, &doc.origin);
            let error = FieldError::new(doc.object_ref(), "metadata.name", problem);
            self.state.set_invalid_job(key, vec![error]);
        } else {
            self.state.apply_document(doc, &mut self.warnings);
        }
    }

    /// For a TrainingJob or PaddleJob whose namespace and name an earlier one of the other kind
    /// has: its kind, and that object and where it is.
    fn shared_children(&mut self, doc: &Document) -> Option<(JobKind, String, String)> {
        let kind = JobKind::of(doc.kind(), doc.api_version())
            .filter(|k| matches!(k, JobKind::TrainingJob | JobKind::PaddleJob))?;
        let (first, at) = self.shared.see(doc)?;
        Some((kind, first, at))
    }

    fn finish(self) -> Snapshot {
        Snapshot {
            state: self.state,
            warnings: self.warnings,
            duplicates: self.duplicates,
        }
    }
}

impl ClusterState {
    /// Applies every object of a dump; objects it cannot use are skipped with a warning, a
    /// second object of one kind, namespace and name is listed in `duplicates`, not applied, and
    /// a PaddleJob after a TrainingJob of its namespace and name (or the reverse) is a job with
    /// an error naming both (the operator derives the same children from both).
    pub fn from_documents(docs: &[Document]) -> Snapshot {
        let mut builder = Builder::default();
        for doc in docs {
            builder.apply(doc);
        }
        builder.finish()
    }

    /// Reads a dump file (JSON or YAML) into a state object by object, keeping only the
    /// state; an object twice in it is an error naming both, a dump of no object an error too.
    pub fn from_file(path: &Path) -> Result<Snapshot, DumpError> {
        let mut builder = Builder::default();
        read_each(path, |doc| builder.apply(&doc))?;
        if builder.objects == 0 {
            return Err(DumpError::Empty {
                path: path.display().to_string(),
            });
        }
        let snapshot = builder.finish();
        if snapshot.duplicates.is_empty() {
            Ok(snapshot)
        } else {
            Err(DumpError::Duplicates {
                path: path.display().to_string(),
                duplicates: snapshot.duplicates,
            })
        }
    }

    /// Applies one object of a dump by its kind: a batch/v1 Job as a trainer Job or, once it
    /// opts in, an elastic Job; a job kind through its registered adapter.
    pub fn apply_document(&mut self, doc: &Document, warnings: &mut Vec<FieldError>) {
        match (doc.kind(), doc.api_version()) {
            ("Node", "v1") => match doc.decode::<Node>() {
                Ok(node) => warnings.extend(self.apply_node(&node).err()),
                Err(e) => warnings.push(e),
            },
            ("Pod", "v1") => match doc.decode::<Pod>() {
                Ok(pod) => warnings.extend(self.apply_pod(&pod).err()),
                Err(e) => warnings.push(e),
            },
            ("Job", "batch/v1") => match doc.decode::<Job>() {
                Ok(job) => {
                    self.apply_batch_job(&job);
                    if <Job as JobAdapter>::selects(&job.metadata) {
                        // Errors are kept in the job's slot.
                        let _ = self.apply_job(&job);
                    }
                }
                Err(e) => warnings.push(e),
            },
            ("PriorityClass", "scheduling.k8s.io/v1") => match doc.decode::<PriorityClass>() {
                Ok(class) => {
                    let problems = priority_class_problems(&class);
                    if problems.is_empty() {
                        self.apply_priority_class(&class);
                    }
                    warnings.extend(problems);
                }
                Err(e) => warnings.push(e),
            },
            ("ResourceFlavor", KUEUE_API_VERSION) => match doc.decode::<ResourceFlavor>() {
                Ok(flavor) => warnings.extend(self.apply_resource_flavor(&flavor).err()),
                Err(e) => warnings.push(e),
            },
            ("ClusterQueue", KUEUE_API_VERSION) => match doc.decode::<ClusterQueue>() {
                Ok(cq) => warnings.extend(self.apply_cluster_queue(&cq).err()),
                Err(e) => warnings.push(e),
            },
            ("LocalQueue", KUEUE_API_VERSION) => match doc.decode::<LocalQueue>() {
                Ok(lq) => warnings.extend(self.apply_local_queue(&lq).err()),
                Err(e) => warnings.push(e),
            },
            ("Workload", KUEUE_API_VERSION) => match doc.decode::<Workload>() {
                Ok(wl) => warnings.extend(self.apply_workload(&wl).err()),
                Err(e) => warnings.push(e),
            },
            (kind, api) => match JobKind::of(kind, api) {
                Some(job_kind) => self.apply_job_document(doc, job_kind),
                None => warnings.push(FieldError::new(
                    doc.object_ref(),
                    "kind",
                    format!("{api} {kind} is not used by the cluster model; skipped"),
                )),
            },
        }
    }

    /// Applies a job object of `kind`; one that does not decode is kept as skipped, with its
    /// error, so it is listed like any job with errors (see `report::skipped_jobs`).
    fn apply_job_document(&mut self, doc: &Document, kind: JobKind) {
        match (registered(kind).decode)(&doc.value) {
            // Errors are kept in the job's slot.
            Ok(Some(job)) => {
                let _ = self.apply_job(job.as_ref());
            }
            Ok(None) => {}
            Err(bad) => {
                let key = job_key_of(doc, kind);
                let error = FieldError::new(doc.object_ref(), &bad.field, &bad.error);
                self.set_invalid_job(key, vec![error]);
            }
        }
    }
}
