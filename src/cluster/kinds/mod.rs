//! The job-kind seam: one adapter per kind reads its object into the planning model
//! ([`JobInfo`]), says how the kind is resized and where its scale records go. Past the adapters
//! nothing knows the kind: the planner, `ClusterState` and the simulator see only `JobInfo`.
//!
//! The paddlepaddle.org kinds run as trainer batch/v1 Jobs trainscale's operator creates; the
//! PyTorch kinds are created by their own operators and sized by one field of the job object,
//! their current size read from that field (else from their live worker pods, see [`pods`]).
//!
//! Adding a kind means one adapter module here, its types in `api`, its RBAC in `deploy/` and its
//! tests; the daemon's watch list and the snapshot reader name the kind once each.

mod paddle_job;
mod pods;
mod pytorch_job;
mod pytorch_training_job;
mod template;
mod training_job;
mod validate;

use std::sync::Arc;

use kube::ResourceExt;

use super::filters::PodConstraints;
use super::objects::JobInfo;
use crate::api::priority::PriorityClasses;
use crate::api::{FieldError, JobKey, JobKind};

pub use pods::sized_pod_owner;
pub use pytorch_job::kubeflow_phase;
pub use pytorch_training_job::t9k_phase;
pub use template::{LastScale, last_scale_annotation};
pub use validate::check_document;

/// How a kind's trainer count is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// `spec.parallelism` (and `spec.completions` when Indexed) of the batch/v1 trainer Job that
    /// trainscale's operator created for the job and owns through it.
    TrainerJob,
    /// A merge patch of one field of the job object itself (its operator creates and removes the
    /// pods); the path from the object's root.
    Field(&'static [&'static str]),
}

/// Where a kind's scale records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// `status.scale_records.ScaleRecords` of the job object, through its status subresource.
    Status,
    /// The annotation `trainscale.io/last-scale` on the job object, written in the same merge
    /// patch as the size, plus an Event; never the other operator's status.
    Annotation,
}

/// A job object read into the planning model.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadJob {
    pub key: JobKey,
    pub info: JobInfo,
    /// What the original accepted but the user should know (not the unknown-PriorityClass
    /// warning, which `ClusterState` derives as classes come and go).
    pub warnings: Vec<FieldError>,
}

/// Why a job of a kind trainscale only sizes is not planned (and not an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftAlone {
    /// The field that decides it.
    pub field: &'static str,
    pub why: String,
    /// Whether the daemon says so with an Event (once per resourceVersion); the ordinary cases
    /// (not elastic, paused) are silent.
    pub announce: bool,
}

/// What an adapter reads of an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    Planned(ReadJob),
    LeftAlone(LeftAlone),
}

/// One job kind's adapter.
pub trait JobAdapter: ResourceExt {
    /// The kind this adapter reads.
    const KIND: JobKind;

    /// The job's key.
    fn job_key(&self) -> JobKey {
        JobKey::of_kind(
            Self::KIND,
            self.namespace().unwrap_or_default(),
            self.name_any(),
        )
    }

    /// Reads the object into the model with its warnings, resolving its priority against
    /// `classes`, or says why it is left alone; the errors when it cannot be planned.
    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>>;

    /// The scheduling constraints (selectors, affinity, tolerations, ...) of the worker pod
    /// template, for kinds whose workers no trainer Job of trainscale's makes; `None` for the
    /// others (their trainer Job's template is read instead). An unreadable template counts as
    /// unconstrained, as a trainer Job's does.
    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        None
    }
}

/// The constraints of a worker pod template at `field` of `object`.
fn template_constraints(
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
    object: &str,
    field: &str,
) -> Option<Arc<PodConstraints>> {
    let spec = template?.spec.as_ref()?;
    PodConstraints::read(spec, object, &format!("{field}.spec"))
        .ok()
        .map(Arc::new)
}

/// How jobs of `kind` are resized.
pub const fn resize_of(kind: JobKind) -> Resize {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => Resize::TrainerJob,
        JobKind::PyTorchTrainingJob => Resize::Field(&["spec", "elastic", "expectedReplicas"]),
        JobKind::PyTorchJob => {
            Resize::Field(&["spec", "pytorchReplicaSpecs", "Worker", "replicas"])
        }
    }
}

/// Where scale records of `kind` go.
pub const fn records_of(kind: JobKind) -> Records {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => Records::Status,
        JobKind::PyTorchTrainingJob | JobKind::PyTorchJob => Records::Annotation,
    }
}

/// The fields a kind declares its min, max and size in (the size: where the planning model reads
/// a job's current size when no trainer Job has one).
pub const fn size_fields(kind: JobKind) -> [&'static str; 3] {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => [
            "spec.trainer.min-instance",
            "spec.trainer.max-instance",
            "spec.trainer.replicaSpec.spec.parallelism",
        ],
        JobKind::PyTorchTrainingJob => [
            "spec.elastic.minReplicas",
            "spec.elastic.maxReplicas",
            "spec.elastic.expectedReplicas",
        ],
        JobKind::PyTorchJob => [
            "spec.elasticPolicy.minReplicas",
            "spec.elasticPolicy.maxReplicas",
            "spec.pytorchReplicaSpecs.Worker.replicas",
        ],
    }
}

/// The field a kind's priority is read from.
pub const fn priority_field(kind: JobKind) -> &'static str {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => "spec.annotations.priority",
        JobKind::PyTorchTrainingJob => "spec.scheduler.t9kScheduler.priority",
        JobKind::PyTorchJob => "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName",
    }
}
