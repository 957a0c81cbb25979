//! The filters whose answer depends only on the pod and the node, not on what runs there.

use super::affinity::{selector_matches, terms_match};
use super::message::Unfit;
use super::node::NodeTraits;
use super::pod::PodConstraints;
use super::taints::{
    TAINT_NOT_READY, TAINT_UNSCHEDULABLE, Taint, TaintEffect, first_untolerated, tolerated,
};

/// The resource kube-scheduler checks before the other extended resources.
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// The filters whose answer depends only on the pod's constraints and the node's traits (not on
/// what runs there), in kube-scheduler's order: NodeUnschedulable, readiness, NodeName,
/// TaintToleration, NodeAffinity, then the static part of NodeResourcesFit (a node whose pod
/// count is 0; an other resource the pod requests more of than the node has allocatable at all,
/// including one the node does not have). NodePorts and the CPU/memory/GPU/pod-count fit depend
/// on the node's pods and are the caller's.
///
/// A cordoned node passes a pod tolerating `node.kubernetes.io/unschedulable:NoSchedule`, a
/// NotReady one a pod tolerating `node.kubernetes.io/not-ready:NoSchedule` (the taints the node
/// lifecycle controller sets for these states).
pub fn check_static(pod: &PodConstraints, node: &NodeTraits) -> Result<(), Unfit> {
    let tolerates = |key: &str| {
        tolerated(
            &pod.tolerations,
            &Taint {
                key: key.to_string(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            },
        )
    };
    if node.unschedulable && !tolerates(TAINT_UNSCHEDULABLE) {
        return Err(Unfit::Unschedulable);
    }
    if !node.ready && !tolerates(TAINT_NOT_READY) {
        return Err(Unfit::NotReady);
    }
    if pod.node_name.as_ref().is_some_and(|n| *n != node.name) {
        return Err(Unfit::NodeName);
    }
    if let Some(taint) = first_untolerated(&node.taints, &pod.tolerations) {
        return Err(Unfit::taint(&taint.key, &taint.value));
    }
    let affinity_ok = selector_matches(&pod.node_selector, &node.labels)
        && pod
            .required_affinity
            .as_ref()
            .is_none_or(|terms| terms_match(terms, &node.name, &node.labels));
    if !affinity_ok {
        return Err(Unfit::NodeAffinity);
    }
    if node.max_pods.is_some_and(|max| max < 1) {
        return Err(Unfit::TooManyPods);
    }
    let short =
        |name: &str, want: i64| want > 0 && want > node.extended.get(name).copied().unwrap_or(0);
    if let Some(want) = pod.extended.get(EPHEMERAL_STORAGE)
        && short(EPHEMERAL_STORAGE, *want)
    {
        return Err(Unfit::Insufficient(EPHEMERAL_STORAGE.to_string()));
    }
    if let Some((name, _)) = pod
        .extended
        .iter()
        .find(|(name, want)| name.as_str() != EPHEMERAL_STORAGE && short(name, **want))
    {
        return Err(Unfit::Insufficient(name.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::filters::affinity::{Operator, Requirement, SelectorTerm};
    use crate::cluster::filters::taints::{Toleration, TolerationEffect, TolerationOperator};

    fn node() -> NodeTraits {
        NodeTraits {
            name: "n1".into(),
            ready: true,
            ..Default::default()
        }
    }

    fn exists(key: &str, effect: Option<TolerationEffect>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect,
        }
    }

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_plain_pod_fits_a_plain_node() {
        assert_eq!(check_static(&PodConstraints::default(), &node()), Ok(()));
    }

    #[test]
    fn cordoned_node_unless_tolerated() {
        let n = NodeTraits {
            unschedulable: true,
            ..node()
        };
        let mut pod = PodConstraints::default();
        assert_eq!(check_static(&pod, &n), Err(Unfit::Unschedulable));
        pod.tolerations = vec![exists(
            TAINT_UNSCHEDULABLE,
            Some(TolerationEffect::NoExecute),
        )];
        assert_eq!(check_static(&pod, &n), Err(Unfit::Unschedulable));
        pod.tolerations = vec![exists(
            TAINT_UNSCHEDULABLE,
            Some(TolerationEffect::NoSchedule),
        )];
        assert_eq!(check_static(&pod, &n), Ok(()));
    }

    #[test]
    fn not_ready_node_unless_tolerated() {
        let n = NodeTraits {
            ready: false,
            ..node()
        };
        let mut pod = PodConstraints::default();
        assert_eq!(check_static(&pod, &n), Err(Unfit::NotReady));
        // The default NoExecute toleration of every pod does not count.
        pod.tolerations = vec![exists(TAINT_NOT_READY, Some(TolerationEffect::NoExecute))];
        assert_eq!(check_static(&pod, &n), Err(Unfit::NotReady));
        pod.tolerations = vec![exists(TAINT_NOT_READY, None)];
        assert_eq!(check_static(&pod, &n), Ok(()));
    }

    #[test]
    fn node_name_pins_the_pod() {
        let mut pod = PodConstraints {
            node_name: Some("n2".into()),
            ..Default::default()
        };
        assert_eq!(check_static(&pod, &node()), Err(Unfit::NodeName));
        pod.node_name = Some("n1".into());
        assert_eq!(check_static(&pod, &node()), Ok(()));
    }

    #[test]
    fn no_schedule_and_no_execute_taints_both_filter() {
        for effect in [TaintEffect::NoSchedule, TaintEffect::NoExecute] {
            let n = NodeTraits {
                taints: vec![taint("dedicated", "infra", effect)],
                ..node()
            };
            assert_eq!(
                check_static(&PodConstraints::default(), &n),
                Err(Unfit::taint("dedicated", "infra"))
            );
            let pod = PodConstraints {
                tolerations: vec![exists("dedicated", None)],
                ..Default::default()
            };
            assert_eq!(check_static(&pod, &n), Ok(()));
        }
    }

    #[test]
    fn prefer_no_schedule_taints_never_filter() {
        use k8s_openapi::api::core::v1 as core;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let n = core::Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..Default::default()
            },
            spec: Some(core::NodeSpec {
                taints: Some(vec![core::Taint {
                    key: "soft".into(),
                    effect: "PreferNoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let traits = NodeTraits::read(&n).unwrap();
        assert_eq!(check_static(&PodConstraints::default(), &traits), Ok(()));
    }

    #[test]
    fn the_first_untolerated_taint_is_named() {
        let n = NodeTraits {
            taints: vec![
                taint("a", "1", TaintEffect::NoSchedule),
                taint("b", "", TaintEffect::NoExecute),
            ],
            ..node()
        };
        let pod = PodConstraints {
            tolerations: vec![exists("a", None)],
            ..Default::default()
        };
        let unfit = check_static(&pod, &n).unwrap_err();
        assert_eq!(unfit.to_string(), "node(s) had untolerated taint {b: }");
    }

    #[test]
    fn node_selector_and_affinity_are_both_required() {
        let n = NodeTraits {
            labels: labels(&[("zone", "a"), ("cores", "32")]),
            ..node()
        };
        let term = |op, value: &str| SelectorTerm {
            match_expressions: vec![Requirement {
                key: "cores".into(),
                operator: op,
                values: vec![value.into()],
            }],
            match_fields: vec![],
        };
        let pod = |selector: &[(&str, &str)], terms: Option<Vec<SelectorTerm>>| PodConstraints {
            node_selector: labels(selector),
            required_affinity: terms,
            ..Default::default()
        };
        assert_eq!(check_static(&pod(&[("zone", "a")], None), &n), Ok(()));
        assert_eq!(
            check_static(&pod(&[("zone", "b")], None), &n),
            Err(Unfit::NodeAffinity)
        );
        assert_eq!(
            check_static(
                &pod(&[("zone", "a")], Some(vec![term(Operator::Gt, "16")])),
                &n
            ),
            Ok(())
        );
        // Selector matches, affinity does not.
        assert_eq!(
            check_static(
                &pod(&[("zone", "a")], Some(vec![term(Operator::Lt, "16")])),
                &n
            ),
            Err(Unfit::NodeAffinity)
        );
        // Affinity matches, selector does not.
        assert_eq!(
            check_static(
                &pod(&[("zone", "b")], Some(vec![term(Operator::Gt, "16")])),
                &n
            ),
            Err(Unfit::NodeAffinity)
        );
        // Required affinity without terms matches no node.
        assert_eq!(
            check_static(&pod(&[], Some(vec![])), &n),
            Err(Unfit::NodeAffinity)
        );
    }

    #[test]
    fn zero_pod_capacity_is_too_many_pods() {
        let pod = PodConstraints::default();
        let n = |max_pods| NodeTraits { max_pods, ..node() };
        assert_eq!(check_static(&pod, &n(Some(0))), Err(Unfit::TooManyPods));
        assert_eq!(check_static(&pod, &n(Some(1))), Ok(()));
        assert_eq!(check_static(&pod, &n(None)), Ok(()));
    }

    #[test]
    fn missing_or_too_small_extended_resource_is_insufficient() {
        let pod = PodConstraints {
            extended: BTreeMap::from([("rdma/hca".into(), 2)]),
            ..Default::default()
        };
        assert_eq!(
            check_static(&pod, &node()),
            Err(Unfit::Insufficient("rdma/hca".into()))
        );
        let with = |amount| NodeTraits {
            extended: BTreeMap::from([("rdma/hca".into(), amount)]),
            ..node()
        };
        assert_eq!(
            check_static(&pod, &with(1)).map_err(|u| u.to_string()),
            Err("Insufficient rdma/hca".to_string())
        );
        assert_eq!(check_static(&pod, &with(2)), Ok(()));
        assert_eq!(check_static(&PodConstraints::default(), &with(0)), Ok(()));
    }

    #[test]
    fn ephemeral_storage_is_checked_first() {
        let pod = PodConstraints {
            extended: BTreeMap::from([("a.io/x".into(), 1), ("ephemeral-storage".into(), 10)]),
            ..Default::default()
        };
        assert_eq!(
            check_static(&pod, &node()),
            Err(Unfit::Insufficient("ephemeral-storage".into()))
        );
    }

    #[test]
    fn filters_run_in_kube_scheduler_order() {
        let n = NodeTraits {
            unschedulable: true,
            taints: vec![taint("t", "v", TaintEffect::NoSchedule)],
            labels: labels(&[("zone", "a")]),
            ..node()
        };
        let mut pod = PodConstraints {
            node_selector: labels(&[("zone", "b")]),
            extended: BTreeMap::from([("rdma/hca".into(), 1)]),
            ..Default::default()
        };
        assert_eq!(check_static(&pod, &n), Err(Unfit::Unschedulable));
        pod.tolerations = vec![exists(TAINT_UNSCHEDULABLE, None)];
        assert_eq!(check_static(&pod, &n), Err(Unfit::taint("t", "v")));
        pod.tolerations.push(exists("t", None));
        assert_eq!(check_static(&pod, &n), Err(Unfit::NodeAffinity));
        pod.node_selector.clear();
        assert_eq!(
            check_static(&pod, &n),
            Err(Unfit::Insufficient("rdma/hca".into()))
        );
    }
}
