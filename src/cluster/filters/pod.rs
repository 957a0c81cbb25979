//! What the filters need of a pod spec (a Pod's, or a job's pod template's).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use super::affinity::SelectorTerm;
use super::extended::{Extended, parse_extended};
use super::ports::{HostPort, host_ports_of};
use super::taints::Toleration;
use crate::api::FieldError;
use crate::cluster::objects::pod_requests;

/// The scheduling constraints of a pod spec that the node filters evaluate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodConstraints {
    /// `spec.schedulerName`; `None` when empty or absent (`default-scheduler`).
    pub scheduler_name: Option<String>,
    /// `spec.nodeName`; `None` when empty or absent. A pod naming a node fits only there.
    pub node_name: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`;
    /// `None` when there is no required node affinity (`Some` of no terms matches no node).
    pub required_affinity: Option<Vec<SelectorTerm>>,
    pub tolerations: Vec<Toleration>,
    /// Ports of containers and sidecars with `hostPort > 0`; with `hostNetwork` every
    /// `containerPort` is a host port.
    pub host_ports: Vec<HostPort>,
    /// Requests of the other resources (see `extended`), as kube-scheduler adds them (see
    /// `objects::pod_requests`: sidecars included). A container's limit counts where it has no
    /// request (API defaulting).
    pub extended: Extended,
    /// Features trainscale does not evaluate, named as in the spec: `podAffinity`,
    /// `podAntiAffinity` (required terms only), `topologySpreadConstraints` (`DoNotSchedule` ones
    /// only), `persistentVolumeClaim volume`, `ephemeral volume`, `resourceClaims`, `resources`
    /// (pod-level).
    pub unsupported: Vec<&'static str>,
}

impl PodConstraints {
    /// Only the extended-resource requests of a pod spec (see [`PodConstraints::extended`]).
    pub fn read_extended(
        spec: &PodSpec,
        object: &str,
        field_prefix: &str,
    ) -> Result<Extended, FieldError> {
        extended_requests(spec, object, field_prefix)
    }

    /// Reads a pod spec. `object` names it (`Pod ns/x`, `TrainingJob ns/y`) and `field_prefix`
    /// is the spec's path (`spec`, `spec.trainer.replicaSpec.spec.template.spec`); an unknown
    /// operator or effect, or a bad quantity, is an error naming the field.
    pub fn read(
        spec: &PodSpec,
        object: &str,
        field_prefix: &str,
    ) -> Result<PodConstraints, FieldError> {
        let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        let node_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        let terms_field = format!(
            "{field_prefix}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        );
        let required_affinity = node_affinity
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|selector| {
                selector
                    .node_selector_terms
                    .iter()
                    .enumerate()
                    .map(|(i, t)| SelectorTerm::read(t, object, &format!("{terms_field}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| Toleration::read(t, object, &format!("{field_prefix}.tolerations[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let init_containers = spec.init_containers.as_deref().unwrap_or_default();
        Ok(PodConstraints {
            scheduler_name: non_empty(&spec.scheduler_name),
            node_name: non_empty(&spec.node_name),
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_affinity,
            tolerations,
            host_ports: host_ports_of(
                init_containers,
                &spec.containers,
                spec.host_network.unwrap_or(false),
            ),
            extended: extended_requests(spec, object, field_prefix)?,
            unsupported: unsupported(spec),
        })
    }
}

/// The other resources a pod spec requests, as kube-scheduler adds them (see
/// [`pod_requests`]); a bad quantity is an error naming its field under `prefix`.
fn extended_requests(spec: &PodSpec, object: &str, prefix: &str) -> Result<Extended, FieldError> {
    pod_requests(spec, |m| {
        parse_extended(Some(&m.map)).map_err(|(name, e)| {
            FieldError::new(object, format!("{prefix}.{}", m.field(name)), e.to_string())
        })
    })
}

/// The features of `spec` that trainscale does not evaluate, in a fixed order.
fn unsupported(spec: &PodSpec) -> Vec<&'static str> {
    let affinity = spec.affinity.as_ref();
    let pod_affinity = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|terms| !terms.is_empty());
    let pod_anti_affinity = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|terms| !terms.is_empty());
    let spread = spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .any(|c| c.when_unsatisfiable != "ScheduleAnyway");
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    let claim = volumes.iter().any(|v| v.persistent_volume_claim.is_some());
    let ephemeral = volumes.iter().any(|v| v.ephemeral.is_some());
    let resource_claims = spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty());
    let pod_resources = spec.resources.as_ref().is_some_and(|r| {
        r.requests.as_ref().is_some_and(|m| !m.is_empty())
            || r.limits.as_ref().is_some_and(|m| !m.is_empty())
    });
    [
        (pod_affinity, "podAffinity"),
        (pod_anti_affinity, "podAntiAffinity"),
        (spread, "topologySpreadConstraints"),
        (claim, "persistentVolumeClaim volume"),
        (ephemeral, "ephemeral volume"),
        (resource_claims, "resourceClaims"),
        (pod_resources, "resources"),
    ]
    .into_iter()
    .filter_map(|(used, name)| used.then_some(name))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::filters::affinity::{Operator, Requirement};
    use crate::cluster::filters::taints::{TolerationEffect, TolerationOperator};
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

    fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, KubeQuantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), KubeQuantity(v.to_string())))
            .collect()
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: "c".into(),
            resources: Some(core::ResourceRequirements {
                requests: Some(quantities(requests)),
                limits: Some(quantities(limits)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn read(spec: &PodSpec) -> Result<PodConstraints, FieldError> {
        PodConstraints::read(spec, "Pod ns/p", "spec")
    }

    #[test]
    fn empty_spec_has_no_constraints() {
        let spec = PodSpec {
            scheduler_name: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(read(&spec).unwrap(), PodConstraints::default());
    }

    #[test]
    fn reads_selector_affinity_tolerations_and_names() {
        let spec = PodSpec {
            scheduler_name: Some("trainscale".into()),
            node_name: Some("n1".into()),
            node_selector: Some(BTreeMap::from([("zone".into(), "a".into())])),
            affinity: Some(core::Affinity {
                node_affinity: Some(core::NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                        node_selector_terms: vec![core::NodeSelectorTerm {
                            match_expressions: Some(vec![core::NodeSelectorRequirement {
                                key: "cores".into(),
                                operator: "Gt".into(),
                                values: Some(vec!["8".into()]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            tolerations: Some(vec![core::Toleration {
                key: Some("gpu".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let c = read(&spec).unwrap();
        assert_eq!(c.scheduler_name.as_deref(), Some("trainscale"));
        assert_eq!(c.node_name.as_deref(), Some("n1"));
        assert_eq!(c.node_selector.get("zone").map(String::as_str), Some("a"));
        assert_eq!(
            c.required_affinity,
            Some(vec![SelectorTerm {
                match_expressions: vec![Requirement {
                    key: "cores".into(),
                    operator: Operator::Gt,
                    values: vec!["8".into()],
                }],
                match_fields: vec![],
            }])
        );
        assert_eq!(
            c.tolerations,
            vec![Toleration {
                key: Some("gpu".into()),
                operator: TolerationOperator::Exists,
                value: None,
                effect: Some(TolerationEffect::NoSchedule),
            }]
        );
    }

    #[test]
    fn bad_operator_names_the_template_field() {
        let spec = PodSpec {
            affinity: Some(core::Affinity {
                node_affinity: Some(core::NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                        node_selector_terms: vec![
                            core::NodeSelectorTerm::default(),
                            core::NodeSelectorTerm {
                                match_fields: Some(vec![core::NodeSelectorRequirement {
                                    key: "metadata.name".into(),
                                    operator: "Like".into(),
                                    values: None,
                                }]),
                                ..Default::default()
                            },
                        ],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = PodConstraints::read(
            &spec,
            "TrainingJob ns/y",
            "spec.trainer.replicaSpec.spec.template.spec",
        )
        .unwrap_err();
        assert_eq!(e.object, "TrainingJob ns/y");
        assert_eq!(
            e.field,
            "spec.trainer.replicaSpec.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchFields[0].operator"
        );
        let spec = PodSpec {
            tolerations: Some(vec![
                core::Toleration::default(),
                core::Toleration {
                    operator: Some("Sometimes".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            read(&spec).unwrap_err().field,
            "spec.tolerations[1].operator"
        );
    }

    #[test]
    fn extended_requests_sum_containers_max_init_plus_overhead() {
        let spec = PodSpec {
            containers: vec![
                container(&[("cpu", "1"), ("rdma/hca", "1")], &[]),
                container(&[("rdma/hca", "2"), ("hugepages-2Mi", "2Mi")], &[]),
                // A limit without a request counts as the request.
                container(&[], &[("example.com/fpga", "1"), ("nvidia.com/gpu", "1")]),
            ],
            init_containers: Some(vec![
                container(&[("rdma/hca", "5")], &[]),
                container(&[("hugepages-2Mi", "1Mi")], &[]),
            ]),
            overhead: Some(quantities(&[("rdma/hca", "1"), ("cpu", "100m")])),
            ..Default::default()
        };
        let c = read(&spec).unwrap();
        assert_eq!(
            c.extended,
            Extended::from([
                ("example.com/fpga".into(), 1),
                ("hugepages-2Mi".into(), 2 << 20),
                ("rdma/hca".into(), 6),
            ])
        );
    }

    #[test]
    fn extended_requests_add_sidecars() {
        let mut sidecar = container(&[("rdma/hca", "1")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            containers: vec![container(&[("rdma/hca", "2")], &[])],
            init_containers: Some(vec![
                sidecar,
                // With the sidecar before it: 3 + 1 = 4, more than 2 + 1.
                container(&[("rdma/hca", "3")], &[]),
            ]),
            ..Default::default()
        };
        assert_eq!(
            read(&spec).unwrap().extended,
            Extended::from([("rdma/hca".into(), 4)])
        );
        let mut sidecar = container(&[("rdma/hca", "1")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            containers: vec![container(&[("rdma/hca", "2")], &[])],
            init_containers: Some(vec![container(&[("rdma/hca", "2")], &[]), sidecar]),
            ..Default::default()
        };
        assert_eq!(
            read(&spec).unwrap().extended,
            Extended::from([("rdma/hca".into(), 3)])
        );
    }

    #[test]
    fn request_wins_over_limit() {
        let spec = PodSpec {
            containers: vec![container(&[("rdma/hca", "1")], &[("rdma/hca", "4")])],
            ..Default::default()
        };
        assert_eq!(
            read(&spec).unwrap().extended,
            Extended::from([("rdma/hca".into(), 1)])
        );
    }

    #[test]
    fn bad_quantity_names_the_field() {
        let spec = PodSpec {
            containers: vec![container(&[], &[]), container(&[("rdma/hca", "one")], &[])],
            ..Default::default()
        };
        assert_eq!(
            read(&spec).unwrap_err().field,
            "spec.containers[1].resources.requests.rdma/hca"
        );
        let spec = PodSpec {
            overhead: Some(quantities(&[("rdma/hca", "-1")])),
            ..Default::default()
        };
        assert_eq!(read(&spec).unwrap_err().field, "spec.overhead.rdma/hca");
    }

    #[test]
    fn host_ports_with_host_network() {
        let ports = |host_network| {
            let spec = PodSpec {
                host_network: Some(host_network),
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![
                        core::ContainerPort {
                            container_port: 2222,
                            ..Default::default()
                        },
                        core::ContainerPort {
                            container_port: 80,
                            host_port: Some(8080),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                }],
                ..Default::default()
            };
            read(&spec).unwrap().host_ports
        };
        let hp = |port| HostPort {
            protocol: "TCP".into(),
            ip: String::new(),
            port,
        };
        assert_eq!(ports(false), vec![hp(8080)]);
        assert_eq!(ports(true), vec![hp(2222), hp(8080)]);
    }

    #[test]
    fn unsupported_features_are_named() {
        let term = core::PodAffinityTerm {
            topology_key: "zone".into(),
            ..Default::default()
        };
        let spec = PodSpec {
            affinity: Some(core::Affinity {
                pod_affinity: Some(core::PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term.clone()]),
                    ..Default::default()
                }),
                pod_anti_affinity: Some(core::PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            topology_spread_constraints: Some(vec![core::TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "zone".into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                ..Default::default()
            }]),
            volumes: Some(vec![
                core::Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                        claim_name: "data".into(),
                        read_only: None,
                    }),
                    ..Default::default()
                },
                core::Volume {
                    name: "scratch".into(),
                    ephemeral: Some(core::EphemeralVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            read(&spec).unwrap().unsupported,
            vec![
                "podAffinity",
                "podAntiAffinity",
                "topologySpreadConstraints",
                "persistentVolumeClaim volume",
                "ephemeral volume"
            ]
        );
    }

    #[test]
    fn scoring_only_features_are_supported() {
        let spec = PodSpec {
            affinity: Some(core::Affinity {
                pod_affinity: Some(core::PodAffinity {
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        core::WeightedPodAffinityTerm {
                            weight: 1,
                            pod_affinity_term: core::PodAffinityTerm {
                                topology_key: "zone".into(),
                                ..Default::default()
                            },
                        },
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            topology_spread_constraints: Some(vec![core::TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "zone".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                ..Default::default()
            }]),
            volumes: Some(vec![core::Volume {
                name: "tmp".into(),
                empty_dir: Some(core::EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(read(&spec).unwrap().unsupported.is_empty());
    }
}
