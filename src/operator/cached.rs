//! The trainer Jobs and ReplicaSets as the operator's caches keep them: only the fields the
//! reconciles read. A full `Job` or `ReplicaSet` is 2–3 KB before its pod template's contents
//! (k8s-openapi lays every optional field out inline), and the caches hold one of each per job:
//! at 50,000 jobs the whole daemon was 3,640 MiB resident once ready with the full objects,
//! 1,253 MiB with these and the boxed TrainingJob fields (`benches/replay.rs`, README).
//!
//! Each type deserializes from the object the API server sends (unknown fields ignored) and is
//! watched under its kind's API (`#[resource(inherit)]`).

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

use crate::api::trainer_job::{held_at_zero, trainer_count_of};

/// A trainer Job: its metadata (ownership, the hold-at-zero annotation), `parallelism`,
/// `suspend`, completion mode and status.
#[derive(Resource, Deserialize, Clone, Debug, Default, PartialEq)]
#[resource(inherit = "Job")]
pub struct CachedJob {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<CachedJobSpec>,
    #[serde(default)]
    pub status: Option<JobStatus>,
}

/// The fields of a Job's spec the operator reads.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedJobSpec {
    pub parallelism: Option<i32>,
    pub suspend: Option<bool>,
    pub completion_mode: Option<String>,
}

impl CachedJob {
    /// Whether it is suspended.
    pub fn suspended(&self) -> bool {
        self.spec.as_ref().and_then(|s| s.suspend) == Some(true)
    }

    /// The trainer count it runs, as [`crate::api::trainer_job::trainer_count`] reads a Job.
    pub fn trainer_count(&self) -> i32 {
        let held = held_at_zero(self.suspended(), self.metadata.annotations.as_ref());
        trainer_count_of(held, self.spec.as_ref().and_then(|s| s.parallelism))
    }

    /// Whether it is an Indexed Job.
    pub fn indexed(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.completion_mode.as_deref())
            == Some("Indexed")
    }
}

/// A master or pserver ReplicaSet: its metadata, `replicas` and status.
#[derive(Resource, Deserialize, Clone, Debug, Default, PartialEq)]
#[resource(inherit = "ReplicaSet")]
pub struct CachedReplicaSet {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<CachedReplicaSetSpec>,
    #[serde(default)]
    pub status: Option<ReplicaSetStatus>,
}

/// The field of a ReplicaSet's spec the operator reads.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CachedReplicaSetSpec {
    pub replicas: Option<i32>,
}

impl CachedReplicaSet {
    /// Its `spec.replicas` (the API server defaults it to 1).
    pub fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::trainer_job::{ANNOTATION_ZERO_TRAINERS, trainer_count};
    use serde_json::json;

    /// A trainer Job as the API server returns it, template and all.
    fn job(suspend: bool, marked: bool) -> serde_json::Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j-trainer", "namespace": "ml", "uid": "u1",
                         "annotations": {ANNOTATION_ZERO_TRAINERS: if marked { "true" } else { "false" }},
                         "ownerReferences": [{"apiVersion": "paddlepaddle.org/v1alpha1",
                             "kind": "TrainingJob", "name": "j", "uid": "tj", "controller": true}]},
            "spec": {"parallelism": 3, "completions": 3, "completionMode": "Indexed",
                     "suspend": suspend, "backoffLimit": 6,
                     "template": {"spec": {"containers": [{"name": "trainer", "image": "paddle"}]}}},
            "status": {"active": 2, "ready": 1, "succeeded": 0,
                       "conditions": [{"type": "Complete", "status": "True"}]},
        })
    }

    #[test]
    fn a_job_keeps_what_the_operator_reads_and_counts_as_the_full_job() {
        for (suspend, marked) in [(false, false), (true, false), (true, true), (false, true)] {
            let value = job(suspend, marked);
            let cached: CachedJob = serde_json::from_value(value.clone()).unwrap();
            let full: Job = serde_json::from_value(value).unwrap();
            assert_eq!(
                cached.trainer_count(),
                trainer_count(&full),
                "{suspend} {marked}"
            );
            assert_eq!(cached.suspended(), suspend);
            assert!(cached.indexed());
            assert_eq!(cached.metadata, full.metadata);
            assert_eq!(cached.status, full.status);
        }
        assert_eq!(
            serde_json::from_value::<CachedJob>(job(true, true))
                .unwrap()
                .trainer_count(),
            0
        );
    }

    #[test]
    fn a_replica_set_keeps_its_replicas_defaulting_to_one() {
        let set: CachedReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "j-master"},
            "spec": {"replicas": 0, "selector": {}, "template": {"spec": {"containers": []}}},
            "status": {"replicas": 0, "readyReplicas": 0},
        }))
        .unwrap();
        assert_eq!(set.replicas(), 0);
        assert_eq!(set.status.and_then(|s| s.ready_replicas), Some(0));
        let unset: CachedReplicaSet =
            serde_json::from_value(json!({"metadata": {"name": "j-master"}, "spec": {}})).unwrap();
        assert_eq!(unset.replicas(), 1);
    }
}
