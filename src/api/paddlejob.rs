//! The `paddlepaddle.org/v1` PaddleJob of seed 001, field for field, and the TrainingJob spec it is
//! planned and created by.
//!
//! A PaddleJob is a TrainingJob without a master, framework or scheduling fields: parameter
//! servers and elastic trainers only, pods labelled `paddle-job-name=<name>`.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    FieldError, PserverSpec, TrainerSpec, TrainingJob, TrainingJobSpec, TrainingJobStatus,
};

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The spec of a PaddleJob: parameter servers and elastic trainers.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "paddlepaddle.org",
    version = "v1",
    kind = "PaddleJob",
    plural = "paddlejobs",
    namespaced,
    status = "TrainingJobStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Trainers","type":"integer","jsonPath":".status.trainers"}"#,
    printcolumn = r#"{"name":"Min","type":"integer","jsonPath":".spec.trainer.min-instance"}"#,
    printcolumn = r#"{"name":"Max","type":"integer","jsonPath":".spec.trainer.max-instance"}"#,
    printcolumn = r#"{"name":"Sizing","type":"string","jsonPath":".status.conditions[?(@.type==\"ScalingLimited\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct PaddleJobSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub image: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub port: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ports_num: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ports_num_for_sparse: i32,
    /// Where the job's data volume is mounted.
    #[serde(rename = "mountPath", default, skip_serializing_if = "is_default")]
    pub mount_path: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pserver: PaddlePserverSpec,
    #[serde(default, skip_serializing_if = "is_default")]
    pub trainer: PaddleTrainerSpec,
}

/// The parameter servers of a PaddleJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PaddlePserverSpec {
    #[serde(rename = "min-instance", default, skip_serializing_if = "is_default")]
    pub min_instance: i32,
    #[serde(rename = "max-instance", default, skip_serializing_if = "is_default")]
    pub max_instance: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: ResourceRequirements,
}

/// The elastic trainers of a PaddleJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PaddleTrainerSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub entrypoint: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub workspace: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub passes: i32,
    #[serde(rename = "min-instance", default, skip_serializing_if = "is_default")]
    pub min_instance: i32,
    #[serde(rename = "max-instance", default, skip_serializing_if = "is_default")]
    pub max_instance: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: ResourceRequirements,
}

impl PaddleJob {
    /// The TrainingJob spec this PaddleJob runs as: same metadata and status, no master, not
    /// fault tolerant (the seed has no such field), `trainer.passes` as `passes`.
    pub fn as_training_job(&self) -> TrainingJob {
        let spec = &self.spec;
        TrainingJob {
            metadata: self.metadata.clone(),
            spec: TrainingJobSpec {
                image: spec.image.clone(),
                port: spec.port,
                ports_num: spec.ports_num,
                ports_num_for_sparse: spec.ports_num_for_sparse,
                mountpath: spec.mount_path.clone(),
                passes: spec.trainer.passes,
                pserver: PserverSpec {
                    min_instance: spec.pserver.min_instance,
                    max_instance: spec.pserver.max_instance,
                    resources: spec.pserver.resources.clone(),
                    ..PserverSpec::default()
                },
                trainer: TrainerSpec {
                    entrypoint: spec.trainer.entrypoint.clone(),
                    workspace: spec.trainer.workspace.clone(),
                    min_instance: spec.trainer.min_instance,
                    max_instance: spec.trainer.max_instance,
                    resources: spec.trainer.resources.clone(),
                    ..TrainerSpec::default()
                },
                ..TrainingJobSpec::default()
            },
            status: self.status.clone(),
        }
    }
}

/// Renames a problem found on [`PaddleJob::as_training_job`] to the PaddleJob's own object and
/// field names.
pub fn paddle_job_problem(mut problem: FieldError) -> FieldError {
    if let Some(rest) = problem.object.strip_prefix("TrainingJob ") {
        problem.object = format!("PaddleJob {rest}");
    }
    problem.field = match problem.field.as_str() {
        "spec.passes" => "spec.trainer.passes".to_string(),
        // A PaddleJob has no fault_tolerant field: it is never fault tolerant.
        "spec.fault_tolerant" => "spec.trainer".to_string(),
        "spec.mountpath" => "spec.mountPath".to_string(),
        _ => problem.field,
    };
    problem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_manifest_reads_into_a_training_job_spec() {
        let job: PaddleJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "paddlepaddle.org/v1",
            "kind": "PaddleJob",
            "metadata": {"name": "paddlejob", "namespace": "testspace"},
            "spec": {
                "image": "img", "port": 7164, "ports_num": 1, "ports_num_for_sparse": 1,
                "mountPath": "/home/work/namespace/",
                "pserver": {"min-instance": 2, "max-instance": 2},
                "trainer": {"entrypoint": "python train.py", "workspace": "/home/job-1/",
                            "passes": 10, "min-instance": 2, "max-instance": 6}
            }
        }))
        .unwrap();
        let view = job.as_training_job();
        assert_eq!(view.spec.passes, 10);
        assert_eq!(view.spec.mountpath, "/home/work/namespace/");
        assert_eq!(
            (
                view.spec.trainer.min_instance,
                view.spec.trainer.max_instance
            ),
            (2, 6)
        );
        assert!(!view.spec.fault_tolerant);
        let renamed = paddle_job_problem(FieldError::new(
            "TrainingJob testspace/paddlejob",
            "spec.passes",
            "bad",
        ));
        assert_eq!(renamed.object, "PaddleJob testspace/paddlejob");
        assert_eq!(renamed.field, "spec.trainer.passes");
    }
}
