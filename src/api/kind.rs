//! The job kinds trainscale plans, and how each is named on the API server.

use std::fmt;

use kube::core::{ApiResource, GroupVersionKind};

/// A kind of elastic training job. Every kind is read into the same planning model; only its
/// adapter (`cluster::kinds`) knows its fields. Its names on the API server are one row of
/// [`NAMES`].
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
    /// A `batch/v1` Job that opts in with the `trainscale.io/min-replicas` and `max-replicas`
    /// annotations (an elastic Job); sized, never created. Its objects come with the Job watch
    /// that also carries the trainer Jobs. Serialized as `kind:` writes it, `Job`.
    #[serde(rename = "Job")]
    BatchJob,
    /// `jobset.x-k8s.io/v1alpha2` JobSet with one elastic replicated Job; sized, never created.
    JobSet,
}

/// How the API server names a kind.
struct Names {
    kind: &'static str,
    group: &'static str,
    version: &'static str,
    api_version: &'static str,
    plural: &'static str,
    /// The `--kinds` name.
    flag: &'static str,
}

/// The names of each kind, in the order of the variants.
const NAMES: [Names; JobKind::COUNT] = [
    Names {
        kind: "TrainingJob",
        group: "paddlepaddle.org",
        version: "v1alpha1",
        api_version: "paddlepaddle.org/v1alpha1",
        plural: "trainingjobs",
        flag: "trainingjob",
    },
    Names {
        kind: "PaddleJob",
        group: "paddlepaddle.org",
        version: "v1",
        api_version: "paddlepaddle.org/v1",
        plural: "paddlejobs",
        flag: "paddlejob",
    },
    Names {
        kind: "PyTorchTrainingJob",
        group: "batch.tensorstack.dev",
        version: "v1beta1",
        api_version: "batch.tensorstack.dev/v1beta1",
        plural: "pytorchtrainingjobs",
        flag: "pytorchtrainingjob",
    },
    Names {
        kind: "PyTorchJob",
        group: "kubeflow.org",
        version: "v1",
        api_version: "kubeflow.org/v1",
        plural: "pytorchjobs",
        flag: "pytorchjob",
    },
    Names {
        kind: "Job",
        group: "batch",
        version: "v1",
        api_version: "batch/v1",
        plural: "jobs",
        flag: "job",
    },
    Names {
        kind: "JobSet",
        group: "jobset.x-k8s.io",
        version: "v1alpha2",
        api_version: "jobset.x-k8s.io/v1alpha2",
        plural: "jobsets",
        flag: "jobset",
    },
];

impl JobKind {
    /// How many kinds there are.
    pub const COUNT: usize = 6;

    /// Every kind, in the order listings show them.
    pub const ALL: [JobKind; JobKind::COUNT] = [
        JobKind::TrainingJob,
        JobKind::PaddleJob,
        JobKind::PyTorchTrainingJob,
        JobKind::PyTorchJob,
        JobKind::BatchJob,
        JobKind::JobSet,
    ];

    const fn names(self) -> &'static Names {
        &NAMES[self as usize]
    }

    /// The kind as `kind:` writes it.
    pub const fn as_str(self) -> &'static str {
        self.names().kind
    }

    /// The API group.
    pub const fn group(self) -> &'static str {
        self.names().group
    }

    /// The API version within the group.
    pub const fn version(self) -> &'static str {
        self.names().version
    }

    /// `group/version`, as `apiVersion:` writes it.
    pub const fn api_version(self) -> &'static str {
        self.names().api_version
    }

    /// The resource's plural name.
    pub const fn plural(self) -> &'static str {
        self.names().plural
    }

    /// The kind as `--kinds` names it: the plural's singular, lowercase (`pytorchjob`, `job`).
    pub const fn flag_name(self) -> &'static str {
        self.names().flag
    }

    /// Whether trainscale's operator creates this kind's workload (the paddlepaddle.org kinds);
    /// the others are created by their own operators and only sized.
    pub const fn created_by_trainscale(self) -> bool {
        matches!(self, JobKind::TrainingJob | JobKind::PaddleJob)
    }

    /// Whether the kind's objects have a watch of their own; the elastic batch/v1 Jobs come with
    /// the Job watch (of the trainer Jobs), which every API server serves.
    pub const fn has_own_watch(self) -> bool {
        !matches!(self, JobKind::BatchJob)
    }

    /// The kind of an object by its `kind` and `apiVersion`. A batch/v1 Job is of
    /// [`JobKind::BatchJob`] only once its adapter selects it (opted in, no trainer Job).
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

    /// `Kind namespace/name`, the way errors name an object of this kind (control characters
    /// escaped, see [`printable`](super::names::printable)).
    pub fn object_ref(self, namespace: &str, name: &str) -> String {
        use super::names::printable;
        format!(
            "{} {}/{}",
            self.as_str(),
            printable(namespace),
            printable(name)
        )
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
        assert_eq!(JobKind::of("Job", "batch/v1"), Some(JobKind::BatchJob));
        assert_eq!(
            JobKind::of("JobSet", "jobset.x-k8s.io/v1alpha2"),
            Some(JobKind::JobSet)
        );
        assert_eq!(JobKind::BatchJob.api_resource().plural, "jobs");
        assert_eq!(JobKind::BatchJob.flag_name(), "job");
        assert!(!JobKind::BatchJob.has_own_watch() && JobKind::JobSet.has_own_watch());
        for (i, kind) in JobKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i, "ALL is in the order of NAMES");
        }
        for kind in JobKind::ALL {
            assert_eq!(
                kind.api_version(),
                format!("{}/{}", kind.group(), kind.version())
            );
            assert_eq!(kind.flag_name(), kind.as_str().to_lowercase());
        }
    }
}
