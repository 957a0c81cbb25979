//! The job-kind seam: one adapter per kind reads its object into the planning model
//! ([`JobInfo`]), says how the kind is resized and where its scale records go. Past the adapters
//! nothing knows the kind: the planner, `ClusterState` and the simulator see only `JobInfo`.
//!
//! Adding a kind means one adapter module here, its types in `api`, its RBAC in `deploy/` and its
//! tests; the daemon's watch list and the snapshot reader name the kind once each.

mod paddle_job;
mod training_job;

use kube::ResourceExt;

use super::objects::JobInfo;
use crate::api::priority::PriorityClasses;
use crate::api::{FieldError, JobKey, JobKind};

/// How a kind's trainer count is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// `spec.parallelism` (and `spec.completions` when Indexed) of the batch/v1 trainer Job that
    /// trainscale's operator created for the job and owns through it.
    TrainerJob,
}

/// Where a kind's scale records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// `status.scale_records.ScaleRecords` of the job object, through its status subresource.
    Status,
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
    /// `classes`; the errors when it cannot be planned.
    fn read(&self, classes: &PriorityClasses) -> Result<ReadJob, Vec<FieldError>>;
}

/// How jobs of `kind` are resized.
pub const fn resize_of(kind: JobKind) -> Resize {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => Resize::TrainerJob,
    }
}

/// Where scale records of `kind` go.
pub const fn records_of(kind: JobKind) -> Records {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => Records::Status,
    }
}

/// The field a kind's priority is read from.
pub const fn priority_field(kind: JobKind) -> &'static str {
    match kind {
        JobKind::TrainingJob | JobKind::PaddleJob => "spec.annotations.priority",
    }
}
