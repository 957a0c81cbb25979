//! The pods the scheduler role looks at, kept from the Pod watch: live pods not bound to a node
//! (with what binding them needs), the host ports and other resources bound pods hold on each
//! node (terminating ones too, as the kubelet still runs them), the pods held by scheduling
//! gates, and the room promised to pods another scheduler nominated for a node.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::ResourceExt;

use crate::api::{FieldError, Resources, parse_resources};
use crate::cluster::filters::{Extended, HostPort, PodConstraints, host_ports_of};
use crate::cluster::objects::{is_gated, meta_ref, pod_requests};

/// `(namespace, name)`.
pub type PodKey = (String, String);

/// The `PodScheduled` condition as a pod carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledCondition {
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// A live pod no node is named for yet.
#[derive(Debug, Clone, PartialEq)]
pub struct UnboundPod {
    pub uid: Option<String>,
    /// `spec.schedulerName`, `default-scheduler` when empty.
    pub scheduler: String,
    /// What the filters need, or why the spec could not be read.
    pub constraints: Result<Arc<PodConstraints>, FieldError>,
    /// The pod's `PodScheduled` condition, if it has one.
    pub condition: Option<ScheduledCondition>,
    /// When the watch first showed it unbound (for the bind latency).
    pub seen: std::time::Instant,
    /// `spec.priority` (0 when unset): pods outside the plan are placed higher first.
    pub priority: i32,
}

/// A live unbound pod held by `spec.schedulingGates`: the API server refuses to bind it until
/// the gates are lifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatedPod {
    pub uid: Option<String>,
    /// `spec.schedulerName`, `default-scheduler` when empty.
    pub scheduler: String,
    /// Its `PodScheduled` condition says so already ([`SCHEDULING_GATED`]).
    pub reported: bool,
}

/// The `PodScheduled=False` reason kube-scheduler writes on a gated pod.
pub const SCHEDULING_GATED: &str = "SchedulingGated";

/// The message kube-scheduler writes with [`SCHEDULING_GATED`].
pub const SCHEDULING_GATED_MESSAGE: &str =
    "Scheduling is blocked due to non-empty scheduling gates";

/// What an unbound pod nominated for a node (`status.nominatedNodeName`, set by the scheduler
/// that preempted room for it there) is promised on that node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NominatedPod {
    scheduler: String,
    requests: Resources,
    ports: Vec<HostPort>,
    extended: Extended,
}

/// The scheduler name of a pod that names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Unbound, gated and nominated pods, and what bound pods hold per node.
#[derive(Debug, Clone, Default)]
pub struct SchedulingPods {
    unbound: BTreeMap<PodKey, UnboundPod>,
    gated: BTreeMap<PodKey, GatedPod>,
    /// Host ports of live bound pods, by node name.
    ports: HashMap<String, BTreeMap<PodKey, Vec<HostPort>>>,
    /// The node each pod with host ports holds them on.
    ports_at: HashMap<PodKey, String>,
    /// Requests of other resources (see `filters::Extended`) of live bound pods, by node name.
    extended: HashMap<String, BTreeMap<PodKey, Extended>>,
    /// The node each pod with such requests holds them on.
    extended_at: HashMap<PodKey, String>,
    /// Unbound pods nominated for a node, by node name.
    nominated: HashMap<String, BTreeMap<PodKey, NominatedPod>>,
    /// The node each nominated pod is nominated for.
    nominated_at: HashMap<PodKey, String>,
}

/// `spec.schedulerName`, [`DEFAULT_SCHEDULER`] when empty.
fn scheduler_of(spec: &PodSpec) -> String {
    spec.scheduler_name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_SCHEDULER.to_string())
}

impl SchedulingPods {
    /// Records a pod as the watch delivers it. A bound pod holds its node's host ports and
    /// other resources until it is Succeeded, Failed or deleted (terminating, it still runs);
    /// an unbound one is bound only while it is neither terminating nor gated.
    pub fn apply(&mut self, pod: &Pod) {
        let key = (pod.namespace().unwrap_or_default(), pod.name_any());
        let seen = self
            .unbound
            .get(&key)
            .map_or_else(std::time::Instant::now, |p| p.seen);
        self.forget(&key);
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if finished {
            return;
        }
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        match spec.node_name.as_deref().filter(|n| !n.is_empty()) {
            Some(node) => {
                let ports = host_ports_of(
                    spec.init_containers.as_deref().unwrap_or_default(),
                    &spec.containers,
                    spec.host_network.unwrap_or(false),
                );
                if !ports.is_empty() {
                    self.ports
                        .entry(node.to_string())
                        .or_default()
                        .insert(key.clone(), ports);
                    self.ports_at.insert(key.clone(), node.to_string());
                }
                // Every bound pod's events pass here: no error context is built, as a request
                // that does not parse was reported by the planning view already.
                let extended =
                    PodConstraints::read_extended(spec, "Pod", "spec").unwrap_or_default();
                if !extended.is_empty() {
                    self.extended
                        .entry(node.to_string())
                        .or_default()
                        .insert(key.clone(), extended);
                    self.extended_at.insert(key, node.to_string());
                }
            }
            // Being deleted: the API server refuses to bind it.
            None if pod.metadata.deletion_timestamp.is_some() => {}
            None => {
                let condition = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                    .map(|c| ScheduledCondition {
                        status: c.status.clone(),
                        reason: c.reason.clone().unwrap_or_default(),
                        message: c.message.clone().unwrap_or_default(),
                    });
                if is_gated(spec) {
                    let reported = condition.as_ref().is_some_and(|c| {
                        c.status == "False"
                            && c.reason == SCHEDULING_GATED
                            && c.message == SCHEDULING_GATED_MESSAGE
                    });
                    self.gated.insert(
                        key,
                        GatedPod {
                            uid: pod.metadata.uid.clone(),
                            scheduler: scheduler_of(spec),
                            reported,
                        },
                    );
                    return;
                }
                if let Some(node) = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.as_deref())
                    .filter(|n| !n.is_empty())
                {
                    self.nominate(&key, node, spec);
                }
                let object = meta_ref("Pod", &pod.metadata);
                self.unbound.insert(
                    key,
                    UnboundPod {
                        uid: pod.metadata.uid.clone(),
                        scheduler: scheduler_of(spec),
                        constraints: PodConstraints::read(spec, &object, "spec").map(Arc::new),
                        condition,
                        seen,
                        priority: spec.priority.unwrap_or(0),
                    },
                );
            }
        }
    }

    /// Records what an unbound pod nominated for `node` is promised there. A request that does
    /// not parse counts as none (the planning view reports it).
    fn nominate(&mut self, key: &PodKey, node: &str, spec: &PodSpec) {
        let requests = pod_requests(spec, |m| parse_resources(Some(&m.map))).unwrap_or_default();
        let nominated = NominatedPod {
            scheduler: scheduler_of(spec),
            requests,
            ports: host_ports_of(
                spec.init_containers.as_deref().unwrap_or_default(),
                &spec.containers,
                spec.host_network.unwrap_or(false),
            ),
            extended: PodConstraints::read_extended(spec, "Pod", "spec").unwrap_or_default(),
        };
        self.nominated
            .entry(node.to_string())
            .or_default()
            .insert(key.clone(), nominated);
        self.nominated_at.insert(key.clone(), node.to_string());
    }

    /// Forgets a pod (deleted, or about to be re-recorded).
    pub fn forget(&mut self, key: &PodKey) {
        self.unbound.remove(key);
        self.gated.remove(key);
        forget_at(&mut self.ports, &mut self.ports_at, key);
        forget_at(&mut self.extended, &mut self.extended_at, key);
        forget_at(&mut self.nominated, &mut self.nominated_at, key);
    }

    /// How much of an extended resource the live pods bound to a node request.
    pub fn extended_on(&self, node: &str, resource: &str) -> i64 {
        self.extended.get(node).map_or(0, |pods| {
            pods.values()
                .filter_map(|e| e.get(resource))
                .fold(0i64, |sum, v| sum.saturating_add(*v))
        })
    }

    /// Number of unbound pods held (gated ones not included).
    pub fn unbound_count(&self) -> usize {
        self.unbound.len()
    }

    /// Live unbound pods naming scheduler `name`, in namespace/name order; gated ones are not
    /// among them.
    pub fn unbound_for<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a PodKey, &'a UnboundPod)> + 'a {
        self.unbound
            .iter()
            .filter(move |(_, p)| p.scheduler == name)
    }

    /// An unbound pod.
    pub fn unbound(&self, key: &PodKey) -> Option<&UnboundPod> {
        self.unbound.get(key)
    }

    /// Gated pods naming scheduler `name`, in namespace/name order.
    pub fn gated_for<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a PodKey, &'a GatedPod)> + 'a {
        self.gated.iter().filter(move |(_, p)| p.scheduler == name)
    }

    /// Gated pods naming scheduler `name` whose `PodScheduled` condition does not say
    /// [`SCHEDULING_GATED`] yet: the condition to write.
    pub fn gated_to_report(&self, name: &str) -> Vec<PodKey> {
        self.gated_for(name)
            .filter(|(_, p)| !p.reported)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Host ports held on a node by its live pods.
    pub fn ports_on(&self, node: &str) -> impl Iterator<Item = &HostPort> + '_ {
        self.ports
            .get(node)
            .into_iter()
            .flat_map(|m| m.values().flatten())
    }

    /// The pods of schedulers other than `scheduler` nominated for `node`: their requests
    /// summed, and how many they are (each takes a pod slot).
    pub fn nominated_on(&self, node: &str, scheduler: &str) -> (Resources, i64) {
        self.nominated_of(node, scheduler)
            .fold((Resources::ZERO, 0), |(sum, n), p| {
                (sum + p.requests, n + 1)
            })
    }

    /// How much of an extended resource the pods of schedulers other than `scheduler`
    /// nominated for `node` request.
    pub fn nominated_extended_on(&self, node: &str, resource: &str, scheduler: &str) -> i64 {
        self.nominated_of(node, scheduler)
            .filter_map(|p| p.extended.get(resource))
            .fold(0i64, |sum, v| sum.saturating_add(*v))
    }

    /// Host ports of the pods of schedulers other than `scheduler` nominated for `node`.
    pub fn nominated_ports_on<'a>(
        &'a self,
        node: &str,
        scheduler: &'a str,
    ) -> impl Iterator<Item = &'a HostPort> + 'a {
        self.nominated_of(node, scheduler)
            .flat_map(|p| p.ports.iter())
    }

    fn nominated_of<'a>(
        &'a self,
        node: &str,
        scheduler: &'a str,
    ) -> impl Iterator<Item = &'a NominatedPod> + 'a {
        self.nominated
            .get(node)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(move |p| p.scheduler != scheduler)
    }
}

/// Removes a pod from a per-node index and its node lookup.
fn forget_at<T>(
    by_node: &mut HashMap<String, BTreeMap<PodKey, T>>,
    at: &mut HashMap<PodKey, String>,
    key: &PodKey,
) {
    if let Some(node) = at.remove(key)
        && let Some(on_node) = by_node.get_mut(&node)
    {
        on_node.remove(key);
        if on_node.is_empty() {
            by_node.remove(&node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(metadata: Value, spec: Value, status: Value) -> Pod {
        let mut metadata = metadata;
        metadata["namespace"] = json!("ns");
        serde_json::from_value(json!({"metadata": metadata, "spec": spec, "status": status}))
            .unwrap()
    }

    fn key(name: &str) -> PodKey {
        ("ns".to_string(), name.to_string())
    }

    /// A container on host port 7164 requesting one `example.com/nic`, behind a sidecar that
    /// requests another.
    fn spec_on(node: Option<&str>) -> Value {
        json!({
            "nodeName": node,
            "initContainers": [{"name": "s", "restartPolicy": "Always",
                "resources": {"requests": {"example.com/nic": "1"}}}],
            "containers": [{"name": "c", "ports": [{"containerPort": 7164, "hostPort": 7164}],
                "resources": {"requests": {"example.com/nic": "1"}}}],
        })
    }

    #[test]
    fn a_bound_pod_holds_its_ports_and_extended_resources_until_finished_or_deleted() {
        let mut pods = SchedulingPods::default();
        pods.apply(&pod(
            json!({"name": "p"}),
            spec_on(Some("a")),
            json!({"phase": "Running"}),
        ));
        assert_eq!(pods.ports_on("a").count(), 1);
        // The sidecar's request adds to the container's.
        assert_eq!(pods.extended_on("a", "example.com/nic"), 2);
        // Terminating: the kubelet still runs it, so both stay held.
        pods.apply(&pod(
            json!({"name": "p", "deletionTimestamp": "2024-05-01T12:00:00Z"}),
            spec_on(Some("a")),
            json!({"phase": "Running"}),
        ));
        assert_eq!(pods.ports_on("a").count(), 1);
        assert_eq!(pods.extended_on("a", "example.com/nic"), 2);
        // Failed: nothing held.
        pods.apply(&pod(
            json!({"name": "p", "deletionTimestamp": "2024-05-01T12:00:00Z"}),
            spec_on(Some("a")),
            json!({"phase": "Failed"}),
        ));
        assert_eq!(pods.ports_on("a").count(), 0);
        assert_eq!(pods.extended_on("a", "example.com/nic"), 0);
        // Deleted: nothing held.
        pods.apply(&pod(
            json!({"name": "q"}),
            spec_on(Some("a")),
            json!({"phase": "Running"}),
        ));
        pods.forget(&key("q"));
        assert_eq!(pods.ports_on("a").count(), 0);
        assert_eq!(pods.extended_on("a", "example.com/nic"), 0);
    }

    #[test]
    fn a_terminating_unbound_pod_is_not_bound() {
        let mut pods = SchedulingPods::default();
        pods.apply(&pod(
            json!({"name": "p", "deletionTimestamp": "2024-05-01T12:00:00Z"}),
            spec_on(None),
            json!({"phase": "Pending"}),
        ));
        assert_eq!(pods.unbound_count(), 0);
    }

    #[test]
    fn a_gated_pod_is_kept_apart_and_reported_until_its_condition_says_so() {
        let mut pods = SchedulingPods::default();
        let spec = json!({"schedulerName": "trainscale",
            "schedulingGates": [{"name": "example.com/wait"}], "containers": [{"name": "c"}]});
        pods.apply(&pod(
            json!({"name": "g"}),
            spec.clone(),
            json!({"phase": "Pending"}),
        ));
        assert_eq!(pods.unbound_count(), 0);
        assert_eq!(pods.gated_for("trainscale").count(), 1);
        assert_eq!(pods.gated_to_report("trainscale"), vec![key("g")]);
        assert!(pods.gated_to_report("default-scheduler").is_empty());
        // Another reason in the condition: still to write.
        let status = |reason: &str, message: &str| {
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": reason, "message": message}]})
        };
        pods.apply(&pod(
            json!({"name": "g"}),
            spec.clone(),
            status("Unschedulable", "x"),
        ));
        assert_eq!(pods.gated_to_report("trainscale"), vec![key("g")]);
        pods.apply(&pod(
            json!({"name": "g"}),
            spec,
            status(SCHEDULING_GATED, SCHEDULING_GATED_MESSAGE),
        ));
        assert!(pods.gated_to_report("trainscale").is_empty());
        assert_eq!(pods.gated_for("trainscale").count(), 1);
        // The gates lifted: an ordinary unbound pod.
        pods.apply(&pod(
            json!({"name": "g"}),
            json!({"schedulerName": "trainscale", "containers": [{"name": "c"}]}),
            json!({"phase": "Pending"}),
        ));
        assert_eq!(pods.gated_for("trainscale").count(), 0);
        assert!(pods.unbound(&key("g")).is_some());
    }

    #[test]
    fn a_nominated_pod_holds_its_room_on_the_node_until_bound_or_gone() {
        let mut pods = SchedulingPods::default();
        let spec = |node: Option<&str>| {
            let mut spec = spec_on(node);
            spec["containers"][0]["resources"]["requests"]["cpu"] = json!("2");
            spec["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});
            spec
        };
        let nominated = json!({"phase": "Pending", "nominatedNodeName": "a"});
        pods.apply(&pod(json!({"name": "p"}), spec(None), nominated.clone()));
        // Another scheduler's pod (default-scheduler): held from trainscale.
        assert_eq!(
            pods.nominated_on("a", "trainscale"),
            (Resources::new(2000, 0, 1), 1)
        );
        assert_eq!(
            pods.nominated_extended_on("a", "example.com/nic", "trainscale"),
            2
        );
        assert_eq!(pods.nominated_ports_on("a", "trainscale").count(), 1);
        assert_eq!(pods.nominated_on("b", "trainscale"), (Resources::ZERO, 0));
        // Its own scheduler's pods hold nothing from it.
        assert_eq!(
            pods.nominated_on("a", DEFAULT_SCHEDULER),
            (Resources::ZERO, 0)
        );
        // Still an unbound pod (of its scheduler).
        assert!(pods.unbound(&key("p")).is_some());
        // Bound: what it holds is the bound pod's now.
        pods.apply(&pod(
            json!({"name": "p"}),
            spec(Some("a")),
            json!({"phase": "Running"}),
        ));
        assert_eq!(pods.nominated_on("a", "trainscale"), (Resources::ZERO, 0));
        assert_eq!(pods.extended_on("a", "example.com/nic"), 2);
        // Deleted while nominated: nothing held.
        pods.apply(&pod(json!({"name": "q"}), spec(None), nominated));
        pods.forget(&key("q"));
        assert_eq!(pods.nominated_on("a", "trainscale"), (Resources::ZERO, 0));
        assert_eq!(pods.nominated_ports_on("a", "trainscale").count(), 0);
    }
}
