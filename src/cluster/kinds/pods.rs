//! Which job of a sized-only kind a pod belongs to, and in which role.
//!
//! - Kubeflow PyTorchJob: the job is named by the label `training.kubeflow.org/job-name` or by
//!   the pod's controller ownerReference (`kubeflow.org/v1` PyTorchJob); the role by
//!   `training.kubeflow.org/replica-type` (`worker` or `master`, any case). A pod without the
//!   replica-type label is nobody's worker.
//! - T9k PyTorchTrainingJob: the job is named by the controller ownerReference
//!   (`batch.tensorstack.dev/v1beta1` PyTorchTrainingJob); the pod is a worker unless a label
//!   whose key ends in `replica-type` says `master`, or its name has a `-master-` part.
//!
//! The pods of the elastic batch/v1 Job and of the JobSet cannot tell by themselves whether they
//! are a job's: a pod of any Job has a Job owner, and which replicated Job of a JobSet is the
//! elastic one only the JobSet says. Such a pod *claims* a job ([`pod_claim`]); `ClusterState`
//! makes it the job's once the job object gives a [`super::PodRule`], and forgets that when the
//! object goes:
//! - JobSet: the labels `jobset.sigs.k8s.io/jobset-name` and `jobset.sigs.k8s.io/replicatedjob-name`
//!   (on every pod of its child Jobs) claim the JobSet, the replicated Job being the group;
//! - elastic Job: the controller ownerReference (`batch/v1` Job), else the label
//!   `batch.kubernetes.io/job-name`, claims the Job.
//!
//! A pod of trainscale's own trainer Jobs is the TrainingJob's or PaddleJob's by its labels before
//! any claim is looked at.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{
    JOB_NAME_LABEL, JOBSET_NAME_LABEL, JobKey, JobKind, KUBEFLOW_JOB_NAME, KUBEFLOW_REPLICA_TYPE,
    REPLICATED_JOB_NAME_LABEL,
};
use crate::cluster::objects::Role;

/// The job a pod may belong to, which only the job object can confirm (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodClaim {
    pub job: JobKey,
    /// The part of the job the pod was made for (a JobSet's replicated Job).
    pub group: Option<Arc<str>>,
}

/// The job a pod in `namespace` claims, if any.
pub fn pod_claim(meta: &ObjectMeta, namespace: &str) -> Option<PodClaim> {
    let labels = meta.labels.as_ref();
    if let Some(jobset) = labels.and_then(|l| l.get(JOBSET_NAME_LABEL)) {
        return Some(PodClaim {
            job: JobKey::of_kind(JobKind::JobSet, namespace, jobset.as_str()),
            group: labels
                .and_then(|l| l.get(REPLICATED_JOB_NAME_LABEL))
                .map(|g| Arc::from(g.as_str())),
        });
    }
    let job = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == JobKind::BatchJob.as_str()
                && o.api_version == JobKind::BatchJob.api_version()
        })
        .map(|o| o.name.as_str())
        .or_else(|| {
            labels
                .and_then(|l| l.get(JOB_NAME_LABEL))
                .map(String::as_str)
        })?;
    Some(PodClaim {
        job: JobKey::of_kind(JobKind::BatchJob, namespace, job),
        group: None,
    })
}

/// The kind, name and role of the sized-only job a pod belongs to, if any.
pub fn sized_pod_owner(meta: &ObjectMeta) -> Option<(JobKind, String, Role)> {
    let labels = meta.labels.as_ref();
    let controller = |kind: JobKind| {
        meta.owner_references
            .iter()
            .flatten()
            .find(|o| {
                o.controller == Some(true)
                    && o.kind == kind.as_str()
                    && o.api_version == kind.api_version()
            })
            .map(|o| o.name.clone())
    };
    let kubeflow_name = labels
        .and_then(|l| l.get(KUBEFLOW_JOB_NAME))
        .cloned()
        .or_else(|| controller(JobKind::PyTorchJob));
    if let Some(name) = kubeflow_name {
        let role = labels
            .and_then(|l| l.get(KUBEFLOW_REPLICA_TYPE))
            .and_then(|t| role_named(t))?;
        return Some((JobKind::PyTorchJob, name, role));
    }
    let name = controller(JobKind::PyTorchTrainingJob)?;
    let labelled_master = labels.is_some_and(|l| {
        l.iter()
            .any(|(k, v)| k.ends_with("replica-type") && v.eq_ignore_ascii_case("master"))
    });
    let named_master = meta.name.as_deref().is_some_and(|n| n.contains("-master-"));
    let role = if labelled_master || named_master {
        Role::Master
    } else {
        Role::Trainer
    };
    Some((JobKind::PyTorchTrainingJob, name, role))
}

fn role_named(replica_type: &str) -> Option<Role> {
    if replica_type.eq_ignore_ascii_case("worker") {
        Some(Role::Trainer)
    } else if replica_type.eq_ignore_ascii_case("master") {
        Some(Role::Master)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(value: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn kubeflow_workers_by_label_or_owner() {
        let by_label = meta(serde_json::json!({"name": "p-worker-0", "labels": {
            "training.kubeflow.org/job-name": "p", "training.kubeflow.org/replica-type": "worker"}}));
        assert_eq!(
            sized_pod_owner(&by_label),
            Some((JobKind::PyTorchJob, "p".into(), Role::Trainer))
        );
        let by_owner = meta(serde_json::json!({"name": "p-master-0",
            "labels": {"training.kubeflow.org/replica-type": "Master"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "name": "p", "uid": "u", "controller": true}]}));
        assert_eq!(
            sized_pod_owner(&by_owner),
            Some((JobKind::PyTorchJob, "p".into(), Role::Master))
        );
        let no_role = meta(serde_json::json!({"name": "x",
            "labels": {"training.kubeflow.org/job-name": "p"}}));
        assert_eq!(sized_pod_owner(&no_role), None);
    }

    #[test]
    fn jobset_and_job_pods_claim_their_job() {
        let jobset = meta(serde_json::json!({"name": "js-workers-0-1", "labels": {
            "jobset.sigs.k8s.io/jobset-name": "js",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "batch.kubernetes.io/job-name": "js-workers-0"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "js-workers-0",
                "uid": "u", "controller": true}]}));
        assert_eq!(
            pod_claim(&jobset, "ml"),
            Some(PodClaim {
                job: JobKey::of_kind(JobKind::JobSet, "ml", "js"),
                group: Some(Arc::from("workers")),
            })
        );
        let owned = meta(serde_json::json!({"name": "e-0", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "e", "uid": "u", "controller": true}]}));
        assert_eq!(
            pod_claim(&owned, "ml").map(|c| c.job),
            Some(JobKey::of_kind(JobKind::BatchJob, "ml", "e"))
        );
        let labelled = meta(serde_json::json!({"name": "e-1",
            "labels": {"batch.kubernetes.io/job-name": "e"}}));
        assert_eq!(
            pod_claim(&labelled, "ml").map(|c| c.job),
            Some(JobKey::of_kind(JobKind::BatchJob, "ml", "e"))
        );
        let not_controller = meta(serde_json::json!({"name": "x", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "e", "uid": "u"}]}));
        assert_eq!(pod_claim(&not_controller, "ml"), None);
    }

    #[test]
    fn t9k_pods_by_owner() {
        let owner = serde_json::json!([{"apiVersion": "batch.tensorstack.dev/v1beta1",
            "kind": "PyTorchTrainingJob", "name": "t", "uid": "u", "controller": true}]);
        let worker = meta(serde_json::json!({"name": "t-worker-1", "ownerReferences": owner}));
        assert_eq!(
            sized_pod_owner(&worker),
            Some((JobKind::PyTorchTrainingJob, "t".into(), Role::Trainer))
        );
        let master = meta(serde_json::json!({"name": "t-master-0", "ownerReferences": owner}));
        assert_eq!(sized_pod_owner(&master).map(|o| o.2), Some(Role::Master));
        let other = meta(
            serde_json::json!({"name": "t-worker-1", "ownerReferences": [{
            "apiVersion": "batch.tensorstack.dev/v1alpha1", "kind": "PyTorchTrainingJob",
            "name": "t", "uid": "u", "controller": true}]}),
        );
        assert_eq!(sized_pod_owner(&other), None);
    }
}
