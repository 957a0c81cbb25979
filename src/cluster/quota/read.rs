//! Reading Kueue objects into the quota model: quantities parsed with the project's parser into
//! Kueue's own units (CPU in thousandths, everything else in whole units, rounded up), every
//! rejected value a [`FieldError`] naming the object and the field.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

use crate::api::kueue::{
    CONDITION_ADMITTED, CONDITION_EVICTED, CONDITION_FINISHED, CONDITION_PREEMPTED,
    CONDITION_QUOTA_RESERVED, ClusterQueue, LocalQueue, SLICE_REPLACEMENT_FOR, Workload,
};
use crate::api::{FieldError, Quantity};
use crate::cluster::filters::Extended;
use crate::cluster::objects::pod_requests;

/// A flavor and a resource: the unit Kueue keeps quota and usage in.
pub type FlavorResource = (Arc<str>, Arc<str>);

/// Amounts by resource name, in Kueue's units.
pub type PerResource = Vec<(Arc<str>, i64)>;

/// A flavor by resource name.
pub type Flavors = Vec<(Arc<str>, Arc<str>)>;

/// Quotas by resource name.
pub type ResourceQuotas = Vec<(Arc<str>, Quota)>;

/// The quota of one flavor and resource of a ClusterQueue, in Kueue's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub nominal: i64,
    /// How much beyond nominal the queue may borrow from its cohort; `None`: no limit.
    pub borrowing_limit: Option<i64>,
    /// How much of its unused nominal quota the cohort may borrow; `None`: all of it.
    pub lending_limit: Option<i64>,
}

/// One resource group of a ClusterQueue: the resources it covers and, flavor by flavor in the
/// order Kueue tries them, their quotas.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub covered: Vec<Arc<str>>,
    pub flavors: Vec<(Arc<str>, ResourceQuotas)>,
}

/// What the model keeps of a ClusterQueue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    pub name: Arc<str>,
    pub cohort: Option<Arc<str>>,
    pub groups: Vec<Group>,
    /// `spec.fairSharing.weight` (read, not used by the planner: see docs/kueue.md).
    pub weight: Option<Quantity>,
    /// `spec.stopPolicy` when it is not `None`: the queue admits nothing new.
    pub stop_policy: Option<Arc<str>>,
}

impl QueueInfo {
    /// The group covering `resource`, if any.
    pub fn group_of(&self, resource: &str) -> Option<&Group> {
        self.groups
            .iter()
            .find(|g| g.covered.iter().any(|r| &**r == resource))
    }

    /// Whether the queue lists `resource` among its covered resources.
    pub fn covers(&self, resource: &str) -> bool {
        self.group_of(resource).is_some()
    }

    /// The quota of `flavor` and `resource`, when the queue lists it.
    pub fn quota(&self, flavor: &str, resource: &str) -> Option<Quota> {
        self.group_of(resource)?
            .flavors
            .iter()
            .find(|(f, _)| &**f == flavor)?
            .1
            .iter()
            .find(|(r, _)| &**r == resource)
            .map(|(_, q)| *q)
    }

    /// Every flavor the queue names, in order.
    pub fn flavors(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.groups
            .iter()
            .flat_map(|g| g.flavors.iter().map(|(f, _)| f))
    }

    /// Every (flavor, resource) it has a quota for, with the quota.
    pub fn quotas(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>, Quota)> + '_ {
        self.groups.iter().flat_map(|g| {
            g.flavors
                .iter()
                .flat_map(|(f, rs)| rs.iter().map(move |(r, q)| (f, r, *q)))
        })
    }
}

/// The owner a Workload names as its controller: the job object it stands for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerKey {
    pub namespace: Arc<str>,
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    pub name: Arc<str>,
}

/// The pod set of a Workload that holds the job's workers (the one with the most pods; on a
/// tie, the last listed: a master comes before its workers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSet {
    /// Pods the pod set asks for (`spec.podSets[].count`).
    pub asked: i32,
    /// Pods admitted (`status.admission.podSetAssignments[].count`, else `asked`); 0 before
    /// admission.
    pub admitted: i32,
    /// The flavor admission assigned, per resource.
    pub flavors: Flavors,
    /// What Kueue charges per pod: the template's requests (else the admitted usage divided by
    /// the admitted count), per resource.
    pub per_pod: PerResource,
}

/// What the model keeps of a Workload.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadInfo {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    /// Creation time, seconds since the epoch (slices are ordered by it, then by name).
    pub created: i64,
    pub owner: Option<OwnerKey>,
    /// `namespace/name` of the slice this one replaces.
    pub replaces: Option<Arc<str>>,
    /// `QuotaReserved` (or `Admitted`) is True: it holds quota.
    pub reserved: bool,
    pub finished: bool,
    /// `Evicted` or `Preempted` is True: why (the condition's reason, else its type).
    pub evicted: Option<Arc<str>>,
    /// The ClusterQueue it was admitted to.
    pub cluster_queue: Option<Arc<str>>,
    /// The quota it takes per flavor and resource once reserved (after reclaimable pods).
    pub usage: Vec<(FlavorResource, i64)>,
    pub worker: Option<WorkerSet>,
    /// The LocalQueue it is queued in (`spec.queueName`), in its namespace.
    pub queue_name: Option<Arc<str>>,
}

impl WorkloadInfo {
    /// `namespace/name`, as the slice-replacement annotation names a Workload.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether it counts against its ClusterQueue's quota: reserved and not finished.
    pub fn holds_quota(&self) -> bool {
        self.reserved && !self.finished && self.cluster_queue.is_some()
    }
}

/// An amount of `resource` in Kueue's units: CPU in thousandths, anything else in whole units,
/// both rounded up and saturating at `i64::MAX` (a quota of `1E` cpu is past i64 thousandths).
pub fn amount_of(resource: &str, q: Quantity) -> i64 {
    if resource == "cpu" {
        q.milli_ceil()
    } else {
        q.value_ceil()
    }
}

/// Parses `q` at `field` of `object` into Kueue's units of `resource`.
fn read_amount(
    object: &str,
    field: String,
    resource: &str,
    q: &KubeQuantity,
) -> Result<i64, FieldError> {
    let parsed =
        Quantity::parse(&q.0).map_err(|e| FieldError::new(object, &field, e.to_string()))?;
    Ok(amount_of(resource, parsed))
}

/// Reads a ClusterQueue. A quota that is missing or does not parse is an error naming it.
pub fn read_cluster_queue(cq: &ClusterQueue) -> Result<QueueInfo, FieldError> {
    let name = cq.metadata.name.clone().unwrap_or_default();
    let object = format!("ClusterQueue {name}");
    if name.is_empty() {
        return Err(FieldError::new(
            object,
            "metadata.name",
            "a ClusterQueue needs a name",
        ));
    }
    let mut groups = Vec::with_capacity(cq.spec.resource_groups.len());
    for (g, group) in cq.spec.resource_groups.iter().enumerate() {
        let mut flavors = Vec::with_capacity(group.flavors.len());
        for (f, flavor) in group.flavors.iter().enumerate() {
            let at = format!("spec.resourceGroups[{g}].flavors[{f}]");
            if flavor.name.is_empty() {
                return Err(FieldError::new(
                    object,
                    format!("{at}.name"),
                    "a flavor needs a name",
                ));
            }
            let mut quotas = Vec::with_capacity(flavor.resources.len());
            for (r, quota) in flavor.resources.iter().enumerate() {
                let at = format!("{at}.resources[{r}]");
                if quota.name.is_empty() {
                    return Err(FieldError::new(
                        object,
                        format!("{at}.name"),
                        "a resource quota needs a name",
                    ));
                }
                let resource = quota.name.as_str();
                let read = |field: &str, q: &KubeQuantity| {
                    read_amount(&object, format!("{at}.{field}"), resource, q)
                };
                let nominal = match &quota.nominal_quota {
                    Some(q) => read("nominalQuota", q)?,
                    None => {
                        return Err(FieldError::new(
                            object,
                            format!("{at}.nominalQuota"),
                            "every resource quota needs a nominalQuota",
                        ));
                    }
                };
                let borrowing_limit = quota
                    .borrowing_limit
                    .as_ref()
                    .map(|q| read("borrowingLimit", q))
                    .transpose()?;
                let lending_limit = quota
                    .lending_limit
                    .as_ref()
                    .map(|q| read("lendingLimit", q))
                    .transpose()?;
                quotas.push((
                    Arc::from(resource),
                    Quota {
                        nominal,
                        borrowing_limit,
                        lending_limit,
                    },
                ));
            }
            flavors.push((Arc::from(flavor.name.as_str()), quotas));
        }
        groups.push(Group {
            covered: group
                .covered_resources
                .iter()
                .map(|r| Arc::from(r.as_str()))
                .collect(),
            flavors,
        });
    }
    let weight = cq
        .spec
        .fair_sharing
        .as_ref()
        .and_then(|f| f.weight.as_ref())
        .map(|w| {
            Quantity::parse(&w.0)
                .map_err(|e| FieldError::new(&object, "spec.fairSharing.weight", e.to_string()))
        })
        .transpose()?;
    Ok(QueueInfo {
        name: Arc::from(name.as_str()),
        cohort: cq
            .spec
            .cohort_name
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(Arc::from),
        groups,
        weight,
        stop_policy: cq
            .spec
            .stop_policy
            .as_deref()
            .filter(|p| !p.is_empty() && *p != "None")
            .map(Arc::from),
    })
}

/// A LocalQueue as the model keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalQueueInfo {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub cluster_queue: Arc<str>,
}

/// Reads a LocalQueue: its namespace, name and ClusterQueue.
pub fn read_local_queue(lq: &LocalQueue) -> Result<LocalQueueInfo, FieldError> {
    let namespace = lq.metadata.namespace.as_deref().unwrap_or("");
    let name = lq.metadata.name.as_deref().unwrap_or("");
    let object = format!("LocalQueue {namespace}/{name}");
    if name.is_empty() {
        return Err(FieldError::new(
            object,
            "metadata.name",
            "a LocalQueue needs a name",
        ));
    }
    let cq = lq.spec.cluster_queue.as_deref().unwrap_or("");
    if cq.is_empty() {
        return Err(FieldError::new(
            object,
            "spec.clusterQueue",
            "a LocalQueue needs the ClusterQueue it submits to",
        ));
    }
    Ok(LocalQueueInfo {
        namespace: Arc::from(namespace),
        name: Arc::from(name),
        cluster_queue: Arc::from(cq),
    })
}

/// Reads a Workload: whom it stands for, where it holds quota and how much, and its worker pod
/// set. A count below zero or a quantity that does not parse is an error naming the field.
pub fn read_workload(wl: &Workload) -> Result<WorkloadInfo, FieldError> {
    let namespace = wl.metadata.namespace.as_deref().unwrap_or("");
    let name = wl.metadata.name.as_deref().unwrap_or("");
    let object = format!("Workload {namespace}/{name}");
    if name.is_empty() {
        return Err(FieldError::new(
            object,
            "metadata.name",
            "a Workload needs a name",
        ));
    }
    for (i, set) in wl.spec.pod_sets.iter().enumerate() {
        if set.count < 0 {
            return Err(FieldError::new(
                object,
                format!("spec.podSets[{i}].count"),
                format!("count {} is below zero", set.count),
            ));
        }
    }
    let owner = wl
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| OwnerKey {
            namespace: Arc::from(namespace),
            api_version: Arc::from(o.api_version.as_str()),
            kind: Arc::from(o.kind.as_str()),
            name: Arc::from(o.name.as_str()),
        });
    let replaces = wl
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SLICE_REPLACEMENT_FOR))
        .map(|r| Arc::from(r.as_str()));
    let evicted = [CONDITION_EVICTED, CONDITION_PREEMPTED]
        .into_iter()
        .find(|c| wl.condition(c))
        .map(|c| Arc::from(wl.condition_reason(c).unwrap_or(c)));
    let status = wl.status.as_ref();
    let admission = status.and_then(|s| s.admission.as_ref());
    let reclaimable: BTreeMap<&str, i32> = status
        .map(|s| {
            s.reclaimable_pods
                .iter()
                .map(|r| (r.name.as_str(), r.count))
                .collect()
        })
        .unwrap_or_default();
    let mut usage: BTreeMap<FlavorResource, i64> = BTreeMap::new();
    // Per pod set: the admitted count and the usage per pod (by resource), for the worker set.
    let mut admitted: BTreeMap<&str, (i32, PerResource, Flavors)> = BTreeMap::new();
    if let Some(admission) = admission {
        for (i, psa) in admission.pod_set_assignments.iter().enumerate() {
            let at = format!("status.admission.podSetAssignments[{i}]");
            let asked = wl
                .spec
                .pod_sets
                .iter()
                .find(|s| s.name == psa.name)
                .map_or(0, |s| s.count);
            let count = psa.count.unwrap_or(asked);
            if count < 0 {
                return Err(FieldError::new(
                    object,
                    format!("{at}.count"),
                    format!("count {count} is below zero"),
                ));
            }
            let after_reclaim = reclaimable
                .get(psa.name.as_str())
                .map_or(count, |r| asked.saturating_sub(*r).clamp(0, count));
            let mut per_pod = Vec::new();
            for (resource, q) in &psa.resource_usage {
                let total = read_amount(
                    &object,
                    format!("{at}.resourceUsage.{resource}"),
                    resource,
                    q,
                )?;
                let each = if count > 0 {
                    total / i64::from(count)
                } else {
                    0
                };
                // As Kueue counts it: the usage scaled down to the pods not yet reclaimable.
                let held = if after_reclaim < count {
                    each.saturating_mul(i64::from(after_reclaim))
                } else {
                    total
                };
                if let Some(flavor) = psa.flavors.get(resource) {
                    let slot = usage
                        .entry((Arc::from(flavor.as_str()), Arc::from(resource.as_str())))
                        .or_insert(0);
                    *slot = slot.saturating_add(held);
                }
                if each > 0 {
                    per_pod.push((Arc::from(resource.as_str()), each));
                }
            }
            let flavors: Flavors = psa
                .flavors
                .iter()
                .map(|(r, f)| (Arc::from(r.as_str()), Arc::from(f.as_str())))
                .collect();
            admitted.insert(psa.name.as_str(), (count, per_pod, flavors));
        }
    }
    let mut worker = None;
    let mut most = -1;
    for (i, set) in wl.spec.pod_sets.iter().enumerate() {
        if set.count < most {
            continue;
        }
        most = set.count;
        let requests = match set.template.as_ref().and_then(|t| t.spec.as_ref()) {
            Some(spec) => template_requests(spec, &object, i)?,
            None => Vec::new(),
        };
        let (count, usage_each, flavors) =
            admitted
                .get(set.name.as_str())
                .cloned()
                .unwrap_or((0, Vec::new(), Vec::new()));
        worker = Some(WorkerSet {
            asked: set.count,
            admitted: count,
            flavors,
            per_pod: if requests.is_empty() {
                usage_each
            } else {
                requests
            },
        });
    }
    Ok(WorkloadInfo {
        namespace: Arc::from(namespace),
        name: Arc::from(name),
        created: wl
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        owner,
        replaces,
        reserved: wl.condition(CONDITION_QUOTA_RESERVED) || wl.condition(CONDITION_ADMITTED),
        finished: wl.condition(CONDITION_FINISHED),
        evicted,
        cluster_queue: admission
            .map(|a| a.cluster_queue.as_str())
            .filter(|c| !c.is_empty())
            .map(Arc::from),
        usage: usage.into_iter().filter(|(_, v)| *v != 0).collect(),
        worker,
        queue_name: wl
            .spec
            .queue_name
            .as_deref()
            .filter(|q| !q.is_empty())
            .map(Arc::from),
    })
}

/// One pod's requests of pod set `index` as Kueue counts them (containers, sidecars and init
/// containers as kube-scheduler does, plus the overhead), per resource, zero amounts left out.
fn template_requests(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    object: &str,
    index: usize,
) -> Result<PerResource, FieldError> {
    let sum: Extended = pod_requests(spec, |m| {
        let mut amounts = Extended::new();
        for (resource, q) in m.map.iter() {
            let field = format!("spec.podSets[{index}].template.spec.{}", m.field(resource));
            let amount = read_amount(object, field, resource, q)?;
            amounts.insert(resource.clone(), amount);
        }
        Ok::<_, FieldError>(amounts)
    })?;
    Ok(sum
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(r, v)| (Arc::from(r.as_str()), v))
        .collect())
}
