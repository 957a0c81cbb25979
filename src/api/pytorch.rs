//! The two PyTorch kinds trainscale sizes but never creates: T9k's `PyTorchTrainingJob`
//! (`batch.tensorstack.dev/v1beta1`, seed 003) and Kubeflow's `PyTorchJob` (`kubeflow.org/v1`).
//!
//! Only the fields trainscale reads are declared; every other field is ignored on read and, since
//! trainscale writes these objects only by a merge patch of one field (see `cluster::kinds`),
//! left untouched on the server. The types are never serialized back.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What trainscale reads of a PyTorchTrainingJob's spec.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "batch.tensorstack.dev",
    version = "v1beta1",
    kind = "PyTorchTrainingJob",
    plural = "pytorchtrainingjobs",
    namespaced,
    status = "T9kJobStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct PyTorchTrainingJobSpec {
    /// The replicas (`master`, `worker`), each with its pod template.
    #[serde(default)]
    pub replica_specs: Vec<T9kReplicaSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<T9kRunMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<T9kSchedulerPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<T9kElastic>,
}

/// One replica type of a T9k job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct T9kReplicaSpec {
    /// `master` or `worker`.
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
}

/// `spec.runMode`: only `pause` matters to trainscale.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct T9kRunMode {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<T9kSwitch>,
}

/// A mode with an `enable` switch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct T9kSwitch {
    /// `enable` (seed 003); T9k's current API reference spells it `enabled`.
    #[serde(default, alias = "enabled", skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
}

/// `spec.scheduler`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct T9kSchedulerPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t9k_scheduler: Option<T9kScheduler>,
}

/// `spec.scheduler.t9kScheduler`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct T9kScheduler {
    /// The queue (the seed spells it `Queue`, the operator `queue`).
    #[serde(default, alias = "Queue", skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// 0..=100; T9k's default is 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// `spec.elastic`: the knob trainscale turns.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct T9kElastic {
    /// `enable` (seed 003); T9k's current API reference spells it `enabled`.
    #[serde(default, alias = "enabled", skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// The size trainscale writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_replicas: Option<i32>,
}

/// What trainscale reads of a T9k job's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct T9kJobStatus {
    /// Pending, Running, Paused, Resuming, Succeeded, Failed or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// What trainscale reads of a Kubeflow PyTorchJob's spec.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v1",
    kind = "PyTorchJob",
    plural = "pytorchjobs",
    namespaced,
    status = "KubeflowJobStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct PyTorchJobSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_policy: Option<KubeflowElasticPolicy>,
    /// Replica specs by type (`Master`, `Worker`).
    #[serde(default)]
    pub pytorch_replica_specs: BTreeMap<String, KubeflowReplicaSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<KubeflowRunPolicy>,
}

/// `spec.elasticPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeflowElasticPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// HPA metrics: when present the training operator creates an HPA that owns the size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<serde_json::Value>>,
}

/// One replica type of a Kubeflow job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct KubeflowReplicaSpec {
    /// The size trainscale writes (on the `Worker` replica spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
}

/// `spec.runPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeflowRunPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
}

/// What trainscale reads of a Kubeflow job's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct KubeflowJobStatus {
    #[serde(default)]
    pub conditions: Vec<KubeflowCondition>,
}

/// One condition of a Kubeflow job (`Created`, `Running`, `Succeeded`, `Failed`, ...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct KubeflowCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

/// The annotation on a sized job of these kinds recording its last rescale (JSON: `time`,
/// `from`, `to`, `reason`).
pub const LAST_SCALE_ANNOTATION: &str = "trainscale.io/last-scale";
/// Pod label naming a Kubeflow job's pods' job.
pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
/// Pod label naming a Kubeflow pod's replica type (`worker`, `master`).
pub const KUBEFLOW_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
