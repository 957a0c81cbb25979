//! Which job of a sized-only kind a pod belongs to, and in which role.
//!
//! - Kubeflow PyTorchJob: the job is named by the label `training.kubeflow.org/job-name` or by
//!   the pod's controller ownerReference (`kubeflow.org/v1` PyTorchJob); the role by
//!   `training.kubeflow.org/replica-type` (`worker` or `master`, any case). A pod without the
//!   replica-type label is nobody's worker.
//! - T9k PyTorchTrainingJob: the job is named by the controller ownerReference
//!   (`batch.tensorstack.dev/v1beta1` PyTorchTrainingJob); the pod is a worker unless a label
//!   whose key ends in `replica-type` says `master`, or its name has a `-master-` part.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{JobKind, KUBEFLOW_JOB_NAME, KUBEFLOW_REPLICA_TYPE};
use crate::cluster::objects::Role;

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
