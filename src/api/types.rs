//! The `paddlepaddle.org/v1alpha1` TrainingJob types, field for field as the original Go API.
//!
//! Every field is optional on input and omitted on output when it holds its default, so a manifest
//! written for the original operator deserializes unchanged and serializes back to the same JSON.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    LocalObjectReference, Probe, ResourceRequirements, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Embedded;

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// An embedded Kubernetes object kept as-is; the API server stores it without pruning.
fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// A list of embedded Kubernetes objects kept as-is.
fn preserved_object_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// The spec of a TrainingJob: one master, parameter servers and elastic trainers.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "paddlepaddle.org",
    version = "v1alpha1",
    kind = "TrainingJob",
    plural = "trainingjobs",
    shortname = "tj",
    namespaced,
    status = "TrainingJobStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Trainers","type":"integer","jsonPath":".status.trainers"}"#,
    printcolumn = r#"{"name":"Min","type":"integer","jsonPath":".spec.trainer.min-instance"}"#,
    printcolumn = r#"{"name":"Max","type":"integer","jsonPath":".spec.trainer.max-instance"}"#,
    printcolumn = r#"{"name":"Sizing","type":"string","jsonPath":".status.conditions[?(@.type==\"ScalingLimited\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct TrainingJobSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub image: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub host_network: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub port: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ports_num: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ports_num_for_sparse: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub trainer_port: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub trainer_ports_num: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub fault_tolerant: bool,
    /// Whether the job is a local (single-process) job rather than a cluster job.
    #[serde(default, skip_serializing_if = "is_default")]
    pub local_job: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub passes: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(schema_with = "preserved_object_list")]
    pub volumes: Vec<Volume>,
    #[serde(rename = "VolumeMounts", default, skip_serializing_if = "is_default")]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub mountpath: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub nfsmount: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub annotations: Annotations,
    #[serde(default, skip_serializing_if = "is_default")]
    pub master: MasterSpec,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pserver: PserverSpec,
    #[serde(default, skip_serializing_if = "is_default")]
    pub trainer: TrainerSpec,
    #[serde(default, skip_serializing_if = "is_default")]
    pub is_nccl: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_work: Option<Framework>,
    #[serde(rename = "schedulerName", default, skip_serializing_if = "is_default")]
    pub scheduler_name: String,
    #[serde(rename = "podGroupName", default, skip_serializing_if = "is_default")]
    pub pod_group_name: String,
    /// Whether the backend container is matrix.
    #[serde(default, skip_serializing_if = "is_default")]
    pub matrix: bool,
}

/// Additional metadata of a job (`spec.annotations`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Annotations {
    #[serde(default, skip_serializing_if = "is_default")]
    pub usergroupid: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub userid: String,
    /// Scheduling priority: an integer or a PriorityClass name (see `api::priority`); higher wins.
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub scheduler: String,
    /// Wall-clock limit in seconds; 0 means none.
    #[serde(default, skip_serializing_if = "is_default")]
    pub walltime: i64,
}

/// The framework a job runs on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Framework {
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub job_type: String,
}

/// Known framework names.
pub const FRAMEWORKS: [&str; 2] = ["paddle", "tensorflow"];
/// Known job types.
pub const JOB_TYPES: [&str; 3] = ["local", "nccl2", "multi"];

/// The master of a fault-tolerant job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MasterSpec {
    #[serde(rename = "etcd-endpoint", default, skip_serializing_if = "is_default")]
    pub etcd_endpoint: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: ResourceRequirements,
    #[serde(
        rename = "replicaSpec",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "preserved_object")]
    pub replica_spec: Option<Embedded<ReplicaSet>>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pre_stop_cmd: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub liveness_probe: Option<Box<Probe>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub readiness_probe: Option<Box<Probe>>,
}

/// The parameter servers of a job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PserverSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub entrypoint: String,
    #[serde(rename = "min-instance", default, skip_serializing_if = "is_default")]
    pub min_instance: i32,
    #[serde(rename = "max-instance", default, skip_serializing_if = "is_default")]
    pub max_instance: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: ResourceRequirements,
    #[serde(
        rename = "replicaSpec",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "preserved_object")]
    pub replica_spec: Option<Embedded<ReplicaSet>>,
    #[serde(
        rename = "imagePullSecrets",
        default,
        skip_serializing_if = "is_default"
    )]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pre_stop_cmd: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub node_selector: BTreeMap<String, String>,
    /// Whether the operator has indexed the pservers (original operator bookkeeping).
    #[serde(default, skip_serializing_if = "is_default")]
    pub index_succeed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub liveness_probe: Option<Box<Probe>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub readiness_probe: Option<Box<Probe>>,
}

/// The elastic trainers of a job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TrainerSpec {
    #[serde(rename = "etcd-endpoint", default, skip_serializing_if = "is_default")]
    pub etcd_endpoint: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub entrypoint: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub workspace: String,
    #[serde(rename = "min-instance", default, skip_serializing_if = "is_default")]
    pub min_instance: i32,
    #[serde(rename = "max-instance", default, skip_serializing_if = "is_default")]
    pub max_instance: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: ResourceRequirements,
    #[serde(
        rename = "replicaSpec",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "preserved_object")]
    pub replica_spec: Option<Embedded<Job>>,
    #[serde(
        rename = "imagePullSecrets",
        default,
        skip_serializing_if = "is_default"
    )]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub pre_stop_cmd: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub node_selector: BTreeMap<String, String>,
    /// Whether the operator has indexed the trainers (original operator bookkeeping).
    #[serde(default, skip_serializing_if = "is_default")]
    pub index_succeed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub liveness_probe: Option<Box<Probe>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub readiness_probe: Option<Box<Probe>>,
}

/// The phase of a TrainingJob.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum TrainingJobPhase {
    #[default]
    #[serde(rename = "")]
    None,
    Creating,
    Running,
    Scaling,
    Succeed,
    #[serde(alias = "failed")]
    Failed,
    Timeout,
}

impl TrainingJobPhase {
    /// The phase as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TrainingJobPhase::None => "",
            TrainingJobPhase::Creating => "Creating",
            TrainingJobPhase::Running => "Running",
            TrainingJobPhase::Scaling => "Scaling",
            TrainingJobPhase::Succeed => "Succeed",
            TrainingJobPhase::Failed => "Failed",
            TrainingJobPhase::Timeout => "Timeout",
        }
    }

    /// Whether the job has finished (Succeed, Failed or Timeout).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TrainingJobPhase::Succeed | TrainingJobPhase::Failed | TrainingJobPhase::Timeout
        )
    }
}

/// The outcome of a rescale.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ScaleResults {
    True,
    False,
    #[default]
    Unknown,
}

/// One rescale of the trainer Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TrainerJobScaleRecord {
    #[serde(
        rename = "scaleTimestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub scale_timestamp: Option<Time>,
    /// The change in trainer count.
    #[serde(default)]
    pub additional: i32,
    #[serde(default)]
    pub status: ScaleResults,
    /// Why the rescale failed, when it did.
    #[serde(default, skip_serializing_if = "is_default")]
    pub reason: String,
}

/// The rescale history; the Go struct's field has no JSON tag, hence `ScaleRecords`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TrainerJobScaleRecords {
    #[serde(rename = "ScaleRecords", default, skip_serializing_if = "is_default")]
    pub scale_records: Vec<TrainerJobScaleRecord>,
}

/// Per-role resource status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TrainingResourceStatus {
    /// `master`, `pserver` or `trainer`.
    #[serde(default)]
    pub training_resource_type: String,
    /// `""`, `starting`, `running`, `failed` or `succeeded`.
    #[serde(default)]
    pub state: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resource_states: BTreeMap<String, i32>,
}

/// The status of a TrainingJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TrainingJobStatus {
    #[serde(default)]
    pub phase: TrainingJobPhase,
    #[serde(default, skip_serializing_if = "is_default")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub scale_records: TrainerJobScaleRecords,
    #[serde(default, skip_serializing_if = "is_default")]
    pub replica_statuses: Vec<TrainingResourceStatus>,
    #[serde(rename = "startTime", default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub released: bool,
    /// The trainer Job's parallelism as the operator last saw it (trainscale extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainers: Option<i32>,
    /// The autoscaler's sizing conditions (`AbleToScale`, `ScalingLimited`; trainscale
    /// extension); elements that do not read as a condition are ignored.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "super::sizing::lenient_conditions"
    )]
    pub conditions: Vec<Condition>,
    /// The job's own progress report (trainscale extension; see `api::progress`); kept as
    /// written, read leniently: a malformed one is a warning, not a broken object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<super::progress::ProgressReport>")]
    pub progress: Option<serde_json::Value>,
}
