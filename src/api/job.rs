//! Helper methods of a TrainingJob, with the original Go semantics (edl-autoscaler.md §2.3).

use std::fmt;
use std::sync::Arc;

use kube::ResourceExt;

use super::priority::{Priority, PriorityClasses, resolve_priority};
use super::{FieldError, GPU_RESOURCE_NAMES, JobKind, Quantity, TrainingJob, read_quantity};

/// A job's identity: namespace, name and kind, ordered in that order.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct JobKey {
    /// Shared strings: plans and caches copy keys without copying the text.
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub kind: JobKind,
}

impl JobKey {
    /// The key of the TrainingJob `namespace/name`.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self::of_kind(JobKind::TrainingJob, namespace, name)
    }

    /// The key of the `kind` object `namespace/name`.
    pub fn of_kind(
        kind: JobKind,
        namespace: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
    ) -> Self {
        JobKey {
            namespace: namespace.into(),
            name: name.into(),
            kind,
        }
    }

    /// `Kind namespace/name`, the way errors and Events name the object.
    pub fn object_ref(&self) -> String {
        self.kind.object_ref(&self.namespace, &self.name)
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::names::printable;
        write!(
            f,
            "{}/{}",
            printable(&self.namespace),
            printable(&self.name)
        )
    }
}

/// `(current - min) / (max - min)`, or 1 when `min == max`; may fall outside 0..=1.
pub fn fulfillment_of(current: i64, min: i64, max: i64) -> f64 {
    if min == max {
        1.0
    } else {
        (current - min) as f64 / (max - min) as f64
    }
}

const TRAINER_REQUESTS: &str = "spec.trainer.resources.requests";
const TRAINER_LIMITS: &str = "spec.trainer.resources.limits";

impl TrainingJob {
    /// `TrainingJob namespace/name`, the way errors name this object.
    pub fn object_ref(&self) -> String {
        JobKind::TrainingJob.object_ref(&self.namespace().unwrap_or_default(), &self.name_any())
    }

    /// The job's key.
    pub fn key(&self) -> JobKey {
        JobKey::new(self.namespace().unwrap_or_default(), self.name_any())
    }

    /// Whether the trainers can scale: `min-instance < max-instance`.
    pub fn elastic(&self) -> bool {
        self.spec.trainer.min_instance < self.spec.trainer.max_instance
    }

    /// The trainer Job parallelism stored in `spec.trainer.replicaSpec`, or 0.
    pub fn stored_parallelism(&self) -> i32 {
        self.spec
            .trainer
            .replica_spec
            .as_ref()
            .and_then(|job| job.spec.as_ref())
            .and_then(|spec| spec.parallelism)
            .unwrap_or(0)
    }

    /// Fulfillment from the stored parallelism, as the original computed it.
    pub fn fulfillment(&self) -> f64 {
        fulfillment_of(
            i64::from(self.stored_parallelism()),
            i64::from(self.spec.trainer.min_instance),
            i64::from(self.spec.trainer.max_instance),
        )
    }

    /// The trainer's GPU limit, exact (`nvidia.com/gpu`, else the legacy name).
    pub fn trainer_gpu_limit_quantity(&self) -> Result<Quantity, FieldError> {
        let limits = self.spec.trainer.resources.limits.as_ref();
        for name in GPU_RESOURCE_NAMES {
            let q = read_quantity(limits, name, &self.object_ref(), TRAINER_LIMITS)?;
            if q != Quantity::ZERO {
                return Ok(q);
            }
        }
        Ok(Quantity::ZERO)
    }

    /// The trainer's request of `name`, exact: its limit where the requests name none, as the
    /// API server defaults a container's requests.
    fn trainer_request_quantity(&self, name: &str) -> Result<Quantity, FieldError> {
        let resources = &self.spec.trainer.resources;
        let requests = resources.requests.as_ref();
        if requests.is_some_and(|r| r.contains_key(name)) {
            read_quantity(requests, name, &self.object_ref(), TRAINER_REQUESTS)
        } else {
            let limits = resources.limits.as_ref();
            read_quantity(limits, name, &self.object_ref(), TRAINER_LIMITS)
        }
    }

    /// The trainer's CPU request, exact (its limit when only that is given).
    pub fn trainer_cpu_request_quantity(&self) -> Result<Quantity, FieldError> {
        self.trainer_request_quantity("cpu")
    }

    /// The trainer's memory request, exact (its limit when only that is given).
    pub fn trainer_mem_request_quantity(&self) -> Result<Quantity, FieldError> {
        self.trainer_request_quantity("memory")
    }

    /// GPUs per trainer, from the limits (whole devices, rounded up).
    pub fn gpu(&self) -> Result<i64, FieldError> {
        Ok(self.trainer_gpu_limit_quantity()?.value_ceil())
    }

    /// Whether the trainers need GPUs.
    pub fn need_gpu(&self) -> Result<bool, FieldError> {
        Ok(self.gpu()? > 0)
    }

    /// GPU limit of each trainer.
    pub fn trainer_gpu_limit(&self) -> Result<i64, FieldError> {
        self.gpu()
    }

    /// CPU request of each trainer in millicores, rounded up.
    pub fn trainer_cpu_request_milli(&self) -> Result<i64, FieldError> {
        Ok(self.trainer_cpu_request_quantity()?.milli_ceil())
    }

    /// Memory request of each trainer in units of 10^6 bytes, rounded up (100Mi → 105).
    pub fn trainer_mem_request_mega(&self) -> Result<i64, FieldError> {
        Ok(self.trainer_mem_request_quantity()?.mega_ceil())
    }

    /// The scheduling priority from `spec.annotations.priority`, resolved against `classes`.
    pub fn priority(&self, classes: &PriorityClasses) -> Priority {
        resolve_priority(&self.spec.annotations.priority, classes)
    }
}
