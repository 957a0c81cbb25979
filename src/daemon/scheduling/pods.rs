//! The pods the scheduler role looks at, kept from the Pod watch: live pods not bound to a node
//! (with what binding them needs), and the host ports bound pods hold on each node.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::FieldError;
use crate::cluster::filters::{Extended, HostPort, PodConstraints};
use crate::cluster::objects::meta_ref;

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

/// The scheduler name of a pod that names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Unbound pods and bound host ports.
#[derive(Debug, Clone, Default)]
pub struct SchedulingPods {
    unbound: BTreeMap<PodKey, UnboundPod>,
    /// Host ports of live bound pods, by node name.
    ports: HashMap<String, BTreeMap<PodKey, Vec<HostPort>>>,
    /// The node each pod with host ports holds them on.
    ports_at: HashMap<PodKey, String>,
    /// Requests of other resources (see `filters::Extended`) of live bound pods, by node name.
    extended: HashMap<String, BTreeMap<PodKey, Extended>>,
    /// The node each pod with such requests holds them on.
    extended_at: HashMap<PodKey, String>,
}

impl SchedulingPods {
    /// Records a pod as the watch delivers it.
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
        if finished || pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        match spec.node_name.as_deref().filter(|n| !n.is_empty()) {
            Some(node) => {
                let ports = crate::cluster::filters::host_ports_of(
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
            None => {
                let object = meta_ref("Pod", &pod.metadata);
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
                self.unbound.insert(
                    key,
                    UnboundPod {
                        uid: pod.metadata.uid.clone(),
                        scheduler: spec
                            .scheduler_name
                            .clone()
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| DEFAULT_SCHEDULER.to_string()),
                        constraints: PodConstraints::read(spec, &object, "spec").map(Arc::new),
                        condition,
                        seen,
                        priority: spec.priority.unwrap_or(0),
                    },
                );
            }
        }
    }

    /// Forgets a pod (deleted, or about to be re-recorded).
    pub fn forget(&mut self, key: &PodKey) {
        self.unbound.remove(key);
        if let Some(node) = self.ports_at.remove(key)
            && let Some(on_node) = self.ports.get_mut(&node)
        {
            on_node.remove(key);
            if on_node.is_empty() {
                self.ports.remove(&node);
            }
        }
        if let Some(node) = self.extended_at.remove(key)
            && let Some(on_node) = self.extended.get_mut(&node)
        {
            on_node.remove(key);
            if on_node.is_empty() {
                self.extended.remove(&node);
            }
        }
    }

    /// How much of an extended resource the live pods bound to a node request.
    pub fn extended_on(&self, node: &str, resource: &str) -> i64 {
        self.extended.get(node).map_or(0, |pods| {
            pods.values()
                .filter_map(|e| e.get(resource))
                .fold(0i64, |sum, v| sum.saturating_add(*v))
        })
    }

    /// Number of unbound pods held.
    pub fn unbound_count(&self) -> usize {
        self.unbound.len()
    }

    /// Live unbound pods naming scheduler `name`, in namespace/name order.
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

    /// Host ports held on a node by its live pods.
    pub fn ports_on(&self, node: &str) -> impl Iterator<Item = &HostPort> + '_ {
        self.ports
            .get(node)
            .into_iter()
            .flat_map(|m| m.values().flatten())
    }
}
