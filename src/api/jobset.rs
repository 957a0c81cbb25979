//! The two kinds trainscale sizes through the batch/v1 Job API: the elastic batch/v1 Job (its
//! type is k8s-openapi's `Job`) and the `jobset.x-k8s.io/v1alpha2` JobSet (declared here), plus
//! the annotations by which both opt in.
//!
//! Only the JobSet fields trainscale reads are declared; every other field is ignored on read and,
//! since trainscale writes a JobSet only by a JSON Patch of its elastic replicated Job's counts
//! (see `cluster::kinds`), left untouched on the server. The type is never serialized back.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation declaring an elastic Job's or JobSet's least trainer count (an integer).
pub const MIN_REPLICAS_ANNOTATION: &str = "trainscale.io/min-replicas";
/// The annotation declaring an elastic Job's or JobSet's largest trainer count (an integer).
pub const MAX_REPLICAS_ANNOTATION: &str = "trainscale.io/max-replicas";
/// The annotation naming a JobSet's elastic replicated Job (required with several).
pub const REPLICATED_JOB_ANNOTATION: &str = "trainscale.io/replicated-job";
/// Kueue's opt-in to resizing an admitted Job (`"true"`): without it Kueue requeues a Job whose
/// parallelism changes.
pub const KUEUE_ELASTIC_ANNOTATION: &str = "kueue.x-k8s.io/elastic-job";
/// The label that puts a Job under Kueue's management (its LocalQueue).
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The label the Job controller puts on every pod of a Job, naming it.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The label the JobSet controller puts on its child Jobs and their pods, naming the JobSet.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// The label the JobSet controller puts on its child Jobs and their pods, naming the replicated
/// Job they were made from.
pub const REPLICATED_JOB_NAME_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// What trainscale reads of a JobSet's spec.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    plural = "jobsets",
    namespaced,
    status = "JobSetStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    /// The groups of Jobs the set is made of.
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
    /// Suspends every child Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
}

/// One replicated Job of a JobSet: `replicas` Jobs made from `template`, named
/// `<jobset>-<name>-<index>`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ReplicatedJob {
    #[serde(default)]
    pub name: String,
    /// How many Jobs are made from the template (the API server defaults it to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub template: JobTemplateSpec,
}

/// What trainscale reads of a JobSet's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStatus {
    /// `Completed`, `Failed`, `Suspended`, ...
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// `Completed` or `Failed` once the JobSet has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_state: Option<String>,
}
