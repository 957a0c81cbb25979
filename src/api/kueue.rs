//! What trainscale reads of Kueue's `kueue.x-k8s.io/v1beta2` objects: ResourceFlavors,
//! ClusterQueues (quota), LocalQueues (namespace → ClusterQueue) and Workloads (what Kueue
//! admitted, and where). Only the fields the quota model uses are declared; every other field is
//! ignored on read. trainscale never writes these objects.
//!
//! Quantities stay Kubernetes quantity strings here; `cluster::quota` parses them with the
//! project's parser and names the field of any it rejects.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// Kueue's API group.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
/// The version read.
pub const KUEUE_VERSION: &str = "v1beta2";
/// `group/version`, as `apiVersion:` writes it.
pub const KUEUE_API_VERSION: &str = "kueue.x-k8s.io/v1beta2";
/// The label naming a job's LocalQueue (in the job's namespace).
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The annotation on a Workload slice naming (`namespace/name`) the slice it replaces.
pub const SLICE_REPLACEMENT_FOR: &str = "kueue.x-k8s.io/workload-slice-replacement-for";
/// Workload condition: quota is reserved in a ClusterQueue.
pub const CONDITION_QUOTA_RESERVED: &str = "QuotaReserved";
/// Workload condition: reserved, and every admission check passed.
pub const CONDITION_ADMITTED: &str = "Admitted";
/// Workload condition: being evicted (its quota goes back once the pods are gone).
pub const CONDITION_EVICTED: &str = "Evicted";
/// Workload condition: preempted by another Workload (comes with `Evicted`).
pub const CONDITION_PREEMPTED: &str = "Preempted";
/// Workload condition: finished (succeeded, failed, or a slice replaced by a newer one).
pub const CONDITION_FINISHED: &str = "Finished";

/// Implements [`kube::Resource`] for a Kueue type (cluster-scoped or namespaced).
macro_rules! kueue_resource {
    ($type:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }

            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(KUEUE_GROUP)
            }

            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(KUEUE_VERSION)
            }

            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(KUEUE_API_VERSION)
            }

            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A ResourceFlavor: only its name matters (a ClusterQueue naming a flavor that does not exist
/// is inactive: Kueue admits nothing to it).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ResourceFlavor {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

kueue_resource!(
    ResourceFlavor,
    "ResourceFlavor",
    "resourceflavors",
    k8s_openapi::ClusterResourceScope
);

/// A ClusterQueue: quota per flavor and resource, and the cohort it borrows in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterQueue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterQueueSpec,
}

kueue_resource!(
    ClusterQueue,
    "ClusterQueue",
    "clusterqueues",
    k8s_openapi::ClusterResourceScope
);

/// `spec` of a ClusterQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
    /// The cohort whose members lend each other unused quota; none: nominal quota only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
    /// `None`, `Hold` or `HoldAndDrain`: anything but `None` admits nothing new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<String>,
}

/// Resources quoted together, one quota per flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    #[serde(default)]
    pub covered_resources: Vec<String>,
    #[serde(default)]
    pub flavors: Vec<FlavorQuotas>,
}

/// The quotas of one flavor of a resource group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct FlavorQuotas {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub resources: Vec<ResourceQuota>,
}

/// The quota of one resource of one flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_quota: Option<Quantity>,
    /// How much more than nominal it may borrow from its cohort; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// How much of its unused nominal quota the cohort may borrow; unset: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// `spec.fairSharing`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct FairSharing {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Quantity>,
}

/// A LocalQueue: the namespaced name jobs label themselves with, backed by one ClusterQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LocalQueue {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: LocalQueueSpec,
}

kueue_resource!(
    LocalQueue,
    "LocalQueue",
    "localqueues",
    k8s_openapi::NamespaceResourceScope
);

/// `spec` of a LocalQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
}

/// A Workload: Kueue's unit of admission, owned by the job it stands for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Workload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WorkloadSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadStatus>,
}

kueue_resource!(
    Workload,
    "Workload",
    "workloads",
    k8s_openapi::NamespaceResourceScope
);

/// `spec` of a Workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
}

/// One group of identical pods of a Workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub count: i32,
    /// The pods' template: a pod's requests are what Kueue charges per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
}

/// `status` of a Workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    #[serde(default)]
    pub conditions: Vec<WorkloadCondition>,
    #[serde(default)]
    pub reclaimable_pods: Vec<ReclaimablePod>,
}

/// A condition of a Workload, read leniently (a hand-written dump may leave fields out).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct WorkloadCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where and how much a Workload was admitted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    #[serde(default)]
    pub cluster_queue: String,
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

/// The admission of one pod set: a flavor per resource and the quota it takes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    /// The quota the pod set's `count` pods take, per resource.
    #[serde(default)]
    pub resource_usage: BTreeMap<String, Quantity>,
    /// The pods admitted (a partial admission admits fewer than the pod set asks); unset: the
    /// pod set's count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
}

/// Pods of a pod set that finished and give their quota back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ReclaimablePod {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub count: i32,
}

impl Workload {
    /// Whether condition `type_` is `True`.
    pub fn condition(&self, type_: &str) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
    }

    /// The reason of condition `type_`, when it is `True` and has one.
    pub fn condition_reason(&self, type_: &str) -> Option<&str> {
        self.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "True")
                .and_then(|c| c.reason.as_deref())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kueue_objects_read_what_the_quota_model_uses_and_ignore_the_rest() {
        let cq: ClusterQueue = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "team-a"},
            "spec": {"cohortName": "research", "namespaceSelector": {},
                     "queueingStrategy": "BestEffortFIFO",
                     "fairSharing": {"weight": "2"},
                     "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [{"name": "a100", "resources": [
                            {"name": "cpu", "nominalQuota": "64"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": "4",
                             "lendingLimit": "2"}]}]}]},
            "status": {"pendingWorkloads": 3}
        }))
        .unwrap();
        assert_eq!(cq.spec.cohort_name.as_deref(), Some("research"));
        let gpu = &cq.spec.resource_groups[0].flavors[0].resources[1];
        assert_eq!(gpu.nominal_quota, Some(Quantity("8".into())));
        assert_eq!(gpu.lending_limit, Some(Quantity("2".into())));
        assert_eq!(
            <ClusterQueue as kube::Resource>::url_path(&(), None),
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
        );
        assert_eq!(
            <Workload as kube::Resource>::url_path(&(), Some("ns")),
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads"
        );
        let wl: Workload = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 4, "minCount": 2}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True",
                                       "reason": "QuotaReserved", "lastTransitionTime": "x"},
                                      {"type": "Evicted", "status": "False"}],
                       "admission": {"clusterQueue": "team-a", "podSetAssignments": [
                           {"name": "main", "flavors": {"cpu": "default"},
                            "resourceUsage": {"cpu": "4"}, "count": 3}]}}
        }))
        .unwrap();
        assert!(wl.condition(CONDITION_QUOTA_RESERVED));
        assert!(!wl.condition(CONDITION_EVICTED));
        assert_eq!(
            wl.condition_reason(CONDITION_QUOTA_RESERVED),
            Some("QuotaReserved")
        );
        let psa = &wl.status.as_ref().unwrap().admission.as_ref().unwrap();
        assert_eq!(psa.pod_set_assignments[0].count, Some(3));
    }
}

/// The Kueue kinds trainscale reads (watched by the daemon once discovery finds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KueueKind {
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
    Workload,
}

impl KueueKind {
    /// Every Kueue kind read.
    pub const ALL: [KueueKind; 4] = [
        KueueKind::ResourceFlavor,
        KueueKind::ClusterQueue,
        KueueKind::LocalQueue,
        KueueKind::Workload,
    ];
    /// The number of kinds.
    pub const COUNT: usize = Self::ALL.len();

    /// The kind as `kind:` writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            KueueKind::ResourceFlavor => "ResourceFlavor",
            KueueKind::ClusterQueue => "ClusterQueue",
            KueueKind::LocalQueue => "LocalQueue",
            KueueKind::Workload => "Workload",
        }
    }

    /// The resource's plural name.
    pub const fn plural(self) -> &'static str {
        match self {
            KueueKind::ResourceFlavor => "resourceflavors",
            KueueKind::ClusterQueue => "clusterqueues",
            KueueKind::LocalQueue => "localqueues",
            KueueKind::Workload => "workloads",
        }
    }

    /// Whether its objects live in a namespace (LocalQueues and Workloads).
    pub const fn namespaced(self) -> bool {
        matches!(self, KueueKind::LocalQueue | KueueKind::Workload)
    }

    /// The resource, for dynamic API access.
    pub fn api_resource(self) -> kube::core::ApiResource {
        kube::core::ApiResource {
            group: KUEUE_GROUP.to_string(),
            version: KUEUE_VERSION.to_string(),
            api_version: KUEUE_API_VERSION.to_string(),
            kind: self.as_str().to_string(),
            plural: self.plural().to_string(),
        }
    }
}
