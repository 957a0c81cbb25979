//! What the filters need of a Node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use super::extended::{Extended, read_extended};
use super::taints::Taint;
use crate::api::{FieldError, Quantity};

/// The parts of a Node the filters look at.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeTraits {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `NoSchedule` and `NoExecute` taints, in node order (`PreferNoSchedule` never filters).
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// The Ready condition is True; a node without any Ready condition counts as ready.
    pub ready: bool,
    /// `status.allocatable.pods` (else `status.capacity.pods`), rounded up; `None` when absent.
    pub max_pods: Option<i64>,
    /// Allocatable (else capacity) of every other resource (see `extended`), rounded up;
    /// zero amounts are left out.
    pub extended: Extended,
}

impl NodeTraits {
    /// Reads a Node. A Node without a name, or a bad quantity, is an error naming the field
    /// (`status.allocatable.<resource>`, or `status.capacity.<resource>` when read from there).
    pub fn read(node: &Node) -> Result<NodeTraits, FieldError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let object = format!("Node {name}");
        if name.is_empty() {
            return Err(FieldError::new(
                object,
                "metadata.name",
                "a Node needs a name",
            ));
        }
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        let allocatable = status.and_then(|s| s.allocatable.as_ref());
        let capacity = status.and_then(|s| s.capacity.as_ref());
        let max_pods = match (
            allocatable
                .and_then(|m| m.get("pods"))
                .map(|q| (q, "allocatable")),
            capacity
                .and_then(|m| m.get("pods"))
                .map(|q| (q, "capacity")),
        ) {
            (Some((q, map)), _) | (None, Some((q, map))) => Some(
                Quantity::parse(&q.0)
                    .map_err(|e| {
                        FieldError::new(&object, format!("status.{map}.pods"), e.to_string())
                    })?
                    .value_ceil(),
            ),
            (None, None) => None,
        };
        let extended = match (allocatable, capacity) {
            (Some(map), _) => read_extended(Some(map), &object, "status.allocatable")?,
            (None, map) => read_extended(map, &object, "status.capacity")?,
        };
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_none_or(|c| c.status == "True");
        Ok(NodeTraits {
            name,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter_map(Taint::read)
                .collect(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready,
            max_pods,
            extended,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::filters::taints::TaintEffect;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, KubeQuantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), KubeQuantity(v.to_string())))
            .collect()
    }

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn reads_every_trait() {
        let mut n = node("n1");
        n.metadata.labels = Some(BTreeMap::from([("zone".into(), "a".into())]));
        n.spec = Some(core::NodeSpec {
            unschedulable: Some(true),
            taints: Some(vec![
                core::Taint {
                    key: "a".into(),
                    value: Some("1".into()),
                    effect: "NoExecute".into(),
                    time_added: None,
                },
                core::Taint {
                    key: "soft".into(),
                    value: None,
                    effect: "PreferNoSchedule".into(),
                    time_added: None,
                },
                core::Taint {
                    key: "b".into(),
                    value: None,
                    effect: "NoSchedule".into(),
                    time_added: None,
                },
            ]),
            ..Default::default()
        });
        n.status = Some(core::NodeStatus {
            allocatable: Some(quantities(&[
                ("cpu", "8"),
                ("memory", "32Gi"),
                ("pods", "110"),
                ("nvidia.com/gpu", "8"),
                ("rdma/hca", "1k"),
                ("hugepages-2Mi", "1Gi"),
                ("ephemeral-storage", "100Gi"),
            ])),
            capacity: Some(quantities(&[("pods", "250"), ("rdma/hca", "2k")])),
            conditions: Some(vec![core::NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let t = NodeTraits::read(&n).unwrap();
        assert_eq!(t.name, "n1");
        assert_eq!(t.labels.get("zone").map(String::as_str), Some("a"));
        assert!(t.unschedulable);
        assert!(!t.ready);
        assert_eq!(t.max_pods, Some(110));
        assert_eq!(
            t.taints,
            vec![
                Taint {
                    key: "a".into(),
                    value: "1".into(),
                    effect: TaintEffect::NoExecute
                },
                Taint {
                    key: "b".into(),
                    value: "".into(),
                    effect: TaintEffect::NoSchedule
                },
            ]
        );
        assert_eq!(
            t.extended,
            Extended::from([
                ("ephemeral-storage".into(), 100 << 30),
                ("hugepages-2Mi".into(), 1 << 30),
                ("rdma/hca".into(), 1000),
            ])
        );
    }

    #[test]
    fn defaults_for_a_bare_node() {
        let t = NodeTraits::read(&node("bare")).unwrap();
        assert!(t.ready, "no Ready condition counts as ready");
        assert!(!t.unschedulable);
        assert_eq!(t.max_pods, None);
        assert!(t.taints.is_empty() && t.extended.is_empty());
    }

    #[test]
    fn capacity_is_the_fallback() {
        let mut n = node("n");
        n.status = Some(core::NodeStatus {
            capacity: Some(quantities(&[("pods", "16"), ("rdma/hca", "3")])),
            ..Default::default()
        });
        let t = NodeTraits::read(&n).unwrap();
        assert_eq!(t.max_pods, Some(16));
        assert_eq!(t.extended, Extended::from([("rdma/hca".into(), 3)]));
    }

    #[test]
    fn bad_input_is_a_field_error() {
        let mut n = node("n");
        n.status = Some(core::NodeStatus {
            allocatable: Some(quantities(&[("rdma/hca", "x")])),
            ..Default::default()
        });
        let e = NodeTraits::read(&n).unwrap_err();
        assert_eq!(
            (e.object.as_str(), e.field.as_str()),
            ("Node n", "status.allocatable.rdma/hca")
        );
        n.status = Some(core::NodeStatus {
            allocatable: Some(quantities(&[("pods", "-1")])),
            ..Default::default()
        });
        let e = NodeTraits::read(&n).unwrap_err();
        assert_eq!(e.field, "status.allocatable.pods");
        let e = NodeTraits::read(&Node::default()).unwrap_err();
        assert_eq!(e.field, "metadata.name");
    }
}
