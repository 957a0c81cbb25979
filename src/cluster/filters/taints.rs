//! Node taints, pod tolerations and the rule matching them (`Toleration.ToleratesTaint`).

use k8s_openapi::api::core::v1 as core;

use crate::api::FieldError;

/// Taint key the node lifecycle controller puts on cordoned nodes (`NoSchedule`).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Taint key the node lifecycle controller puts on NotReady nodes (`NoSchedule` and `NoExecute`).
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

/// The taint effects that keep pods off a node (`PreferNoSchedule` only scores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    NoSchedule,
    NoExecute,
}

/// A node taint that filters: `NoSchedule` or `NoExecute`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    /// The value; `""` when absent.
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    /// The filtering taint of a Node's taint; `None` for `PreferNoSchedule` and unknown effects.
    pub fn read(taint: &core::Taint) -> Option<Taint> {
        let effect = match taint.effect.as_str() {
            "NoSchedule" => TaintEffect::NoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            _ => return None,
        };
        Some(Taint {
            key: taint.key.clone(),
            value: taint.value.clone().unwrap_or_default(),
            effect,
        })
    }
}

/// How a toleration compares the taint value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TolerationOperator {
    /// The values must be equal (the default).
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// The taint effect a toleration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TolerationEffect {
    NoSchedule,
    /// Stored, but never matches a filtering taint.
    PreferNoSchedule,
    NoExecute,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    /// The taint key; `None` (empty or absent) matches every key.
    pub key: Option<String>,
    pub operator: TolerationOperator,
    /// The value `Equal` compares with; `None` (empty or absent) equals an empty taint value.
    pub value: Option<String>,
    /// The effect; `None` (empty or absent) matches every effect.
    pub effect: Option<TolerationEffect>,
}

impl Toleration {
    /// Reads one toleration; an unknown operator or effect is an error naming `field`'s
    /// `.operator` / `.effect`.
    pub fn read(t: &core::Toleration, object: &str, field: &str) -> Result<Toleration, FieldError> {
        let operator = match t.operator.as_deref().unwrap_or("") {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => {
                return Err(FieldError::new(
                    object,
                    format!("{field}.operator"),
                    format!("unknown toleration operator {other:?} (expected Equal or Exists)"),
                ));
            }
        };
        let effect = match t.effect.as_deref().unwrap_or("") {
            "" => None,
            "NoSchedule" => Some(TolerationEffect::NoSchedule),
            "PreferNoSchedule" => Some(TolerationEffect::PreferNoSchedule),
            "NoExecute" => Some(TolerationEffect::NoExecute),
            other => {
                return Err(FieldError::new(
                    object,
                    format!("{field}.effect"),
                    format!(
                        "unknown taint effect {other:?} (expected NoSchedule, PreferNoSchedule or NoExecute)"
                    ),
                ));
            }
        };
        let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        Ok(Toleration {
            key: non_empty(&t.key),
            operator,
            value: non_empty(&t.value),
            effect,
        })
    }

    /// Whether this toleration tolerates `taint`: the effect matches (or is empty), the key
    /// matches (or is empty), and `Exists`, or `Equal` with equal values.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect_ok = match self.effect {
            None => true,
            Some(TolerationEffect::NoSchedule) => taint.effect == TaintEffect::NoSchedule,
            Some(TolerationEffect::NoExecute) => taint.effect == TaintEffect::NoExecute,
            Some(TolerationEffect::PreferNoSchedule) => false,
        };
        if !effect_ok {
            return false;
        }
        if self.key.as_deref().is_some_and(|k| k != taint.key) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value.as_deref().unwrap_or("") == taint.value,
        }
    }
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// The first of `taints` (in node order) that no toleration tolerates.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|taint| !tolerated(tolerations, taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration::read(
            &core::Toleration {
                key: some(key),
                operator: some(op),
                value: some(value),
                effect: some(effect),
                toleration_seconds: None,
            },
            "Pod ns/p",
            "spec.tolerations[0]",
        )
        .unwrap()
    }

    use TaintEffect::{NoExecute, NoSchedule};

    #[test]
    fn empty_key_with_exists_tolerates_everything() {
        let t = tol("", "Exists", "", "");
        assert!(t.tolerates(&taint("a", "b", NoSchedule)));
        assert!(t.tolerates(&taint("c", "", NoExecute)));
    }

    #[test]
    fn empty_effect_matches_all_effects() {
        let t = tol("k", "Equal", "v", "");
        assert!(t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(t.tolerates(&taint("k", "v", NoExecute)));
    }

    #[test]
    fn effect_must_match_when_given() {
        let t = tol("k", "Exists", "", "NoSchedule");
        assert!(t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(!t.tolerates(&taint("k", "v", NoExecute)));
        let t = tol("k", "Exists", "", "NoExecute");
        assert!(!t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(t.tolerates(&taint("k", "v", NoExecute)));
        let t = tol("k", "Exists", "", "PreferNoSchedule");
        assert!(!t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(!t.tolerates(&taint("k", "v", NoExecute)));
    }

    #[test]
    fn equal_compares_value_and_is_the_default() {
        let t = tol("k", "Equal", "v", "NoSchedule");
        assert!(t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(!t.tolerates(&taint("k", "w", NoSchedule)));
        assert!(!t.tolerates(&taint("other", "v", NoSchedule)));
        let t = tol("k", "", "v", "NoSchedule");
        assert_eq!(t.operator, TolerationOperator::Equal);
        assert!(t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(!t.tolerates(&taint("k", "", NoSchedule)));
        // No value equals an empty taint value.
        let t = tol("k", "Equal", "", "");
        assert!(t.tolerates(&taint("k", "", NoSchedule)));
        assert!(!t.tolerates(&taint("k", "v", NoSchedule)));
    }

    #[test]
    fn exists_ignores_value() {
        let t = tol("k", "Exists", "ignored", "");
        assert!(t.tolerates(&taint("k", "v", NoSchedule)));
        assert!(t.tolerates(&taint("k", "", NoExecute)));
        assert!(!t.tolerates(&taint("j", "v", NoExecute)));
    }

    #[test]
    fn first_untolerated_follows_node_order() {
        let taints = [
            taint("a", "1", NoSchedule),
            taint("b", "2", NoExecute),
            taint("c", "3", NoSchedule),
        ];
        let tols = [tol("a", "Exists", "", "")];
        assert_eq!(first_untolerated(&taints, &tols), Some(&taints[1]));
        assert_eq!(
            first_untolerated(&taints, &[tol("", "Exists", "", "")]),
            None
        );
    }

    #[test]
    fn prefer_no_schedule_taints_are_dropped() {
        let read = |effect: &str| {
            Taint::read(&core::Taint {
                key: "k".into(),
                value: None,
                effect: effect.into(),
                time_added: None,
            })
        };
        assert_eq!(read("PreferNoSchedule"), None);
        assert_eq!(read("Bogus"), None);
        assert_eq!(read("NoSchedule"), Some(taint("k", "", NoSchedule)));
        assert_eq!(read("NoExecute"), Some(taint("k", "", NoExecute)));
    }

    #[test]
    fn unknown_operator_or_effect_is_a_field_error() {
        let bad = core::Toleration {
            key: Some("k".into()),
            operator: Some("Gt".into()),
            ..Default::default()
        };
        let e = Toleration::read(&bad, "Pod ns/p", "spec.tolerations[2]").unwrap_err();
        assert_eq!(e.object, "Pod ns/p");
        assert_eq!(e.field, "spec.tolerations[2].operator");
        let bad = core::Toleration {
            effect: Some("Never".into()),
            ..Default::default()
        };
        let e = Toleration::read(&bad, "Pod ns/p", "spec.tolerations[0]").unwrap_err();
        assert_eq!(e.field, "spec.tolerations[0].effect");
    }
}
