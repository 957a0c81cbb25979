//! The job kinds trainscale plans, and how each is named on the API server.

use std::fmt;

use kube::core::{ApiResource, GroupVersionKind};

/// A kind of elastic training job. Every kind is read into the same planning model; only its
/// adapter (`cluster::kinds`) knows its fields.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum JobKind {
    /// `paddlepaddle.org/v1alpha1` TrainingJob.
    #[default]
    TrainingJob,
    /// `paddlepaddle.org/v1` PaddleJob (seed 001).
    PaddleJob,
    /// `batch.tensorstack.dev/v1beta1` PyTorchTrainingJob of T9k (seed 003); sized, never created.
    PyTorchTrainingJob,
    /// `kubeflow.org/v1` PyTorchJob of the Kubeflow training operator; sized, never created.
    PyTorchJob,
}

impl JobKind {
    /// Every kind, in the order listings show them.
    pub const ALL: [JobKind; 4] = [
        JobKind::TrainingJob,
        JobKind::PaddleJob,
        JobKind::PyTorchTrainingJob,
        JobKind::PyTorchJob,
    ];

    /// The kind as `kind:` writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobKind::TrainingJob => "TrainingJob",
            JobKind::PaddleJob => "PaddleJob",
            JobKind::PyTorchTrainingJob => "PyTorchTrainingJob",
            JobKind::PyTorchJob => "PyTorchJob",
        }
    }

    /// The API group.
    pub const fn group(self) -> &'static str {
        match self {
            JobKind::TrainingJob | JobKind::PaddleJob => "paddlepaddle.org",
            JobKind::PyTorchTrainingJob => "batch.tensorstack.dev",
            JobKind::PyTorchJob => "kubeflow.org",
        }
    }

    /// The API version within the group.
    pub const fn version(self) -> &'static str {
        match self {
            JobKind::TrainingJob => "v1alpha1",
            JobKind::PaddleJob | JobKind::PyTorchJob => "v1",
            JobKind::PyTorchTrainingJob => "v1beta1",
        }
    }

    /// `group/version`, as `apiVersion:` writes it.
    pub const fn api_version(self) -> &'static str {
        match self {
            JobKind::TrainingJob => "paddlepaddle.org/v1alpha1",
            JobKind::PaddleJob => "paddlepaddle.org/v1",
            JobKind::PyTorchTrainingJob => "batch.tensorstack.dev/v1beta1",
            JobKind::PyTorchJob => "kubeflow.org/v1",
        }
    }

    /// The resource's plural name.
    pub const fn plural(self) -> &'static str {
        match self {
            JobKind::TrainingJob => "trainingjobs",
            JobKind::PaddleJob => "paddlejobs",
            JobKind::PyTorchTrainingJob => "pytorchtrainingjobs",
            JobKind::PyTorchJob => "pytorchjobs",
        }
    }

    /// The kind as `--kinds` names it: the plural's singular, lowercase (`pytorchjob`).
    pub const fn flag_name(self) -> &'static str {
        match self {
            JobKind::TrainingJob => "trainingjob",
            JobKind::PaddleJob => "paddlejob",
            JobKind::PyTorchTrainingJob => "pytorchtrainingjob",
            JobKind::PyTorchJob => "pytorchjob",
        }
    }

    /// Whether trainscale's operator creates this kind's workload (the paddlepaddle.org kinds);
    /// the others are created by their own operators and only sized.
    pub const fn created_by_trainscale(self) -> bool {
        matches!(self, JobKind::TrainingJob | JobKind::PaddleJob)
    }

    /// The kind of an object by its `kind` and `apiVersion`.
    pub fn of(kind: &str, api_version: &str) -> Option<JobKind> {
        JobKind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind && k.api_version() == api_version)
    }

    /// The kind by its name alone (`TrainingJob`, `PaddleJob`).
    pub fn named(kind: &str) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The resource, for dynamic API calls.
    pub fn api_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group(), self.version(), self.as_str()),
            self.plural(),
        )
    }

    /// `Kind namespace/name`, the way errors name an object of this kind.
    pub fn object_ref(self, namespace: &str, name: &str) -> String {
        format!("{} {namespace}/{name}", self.as_str())
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_found_by_kind_and_api_version() {
        assert_eq!(
            JobKind::of("PaddleJob", "paddlepaddle.org/v1"),
            Some(JobKind::PaddleJob)
        );
        assert_eq!(
            JobKind::of("TrainingJob", "paddlepaddle.org/v1alpha1"),
            Some(JobKind::TrainingJob)
        );
        assert_eq!(JobKind::of("PaddleJob", "paddlepaddle.org/v1alpha1"), None);
        assert_eq!(JobKind::PaddleJob.api_resource().plural, "paddlejobs");
        assert_eq!(
            JobKind::of("PyTorchTrainingJob", "batch.tensorstack.dev/v1beta1"),
            Some(JobKind::PyTorchTrainingJob)
        );
        assert_eq!(
            JobKind::of("PyTorchJob", "kubeflow.org/v1"),
            Some(JobKind::PyTorchJob)
        );
        for kind in JobKind::ALL {
            assert_eq!(
                kind.api_version(),
                format!("{}/{}", kind.group(), kind.version())
            );
            assert_eq!(kind.flag_name(), kind.as_str().to_lowercase());
        }
    }
}
