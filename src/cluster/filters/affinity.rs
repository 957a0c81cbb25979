//! Node selector terms (required node affinity) and how a node's name and labels match them,
//! as `k8s.io/component-helpers/scheduling/corev1/nodeaffinity` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use crate::api::FieldError;

/// The only `matchFields` key Kubernetes supports.
pub const FIELD_NODE_NAME: &str = "metadata.name";

/// A node selector requirement operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    /// The label, read as an integer, is greater than the one value.
    Gt,
    /// The label, read as an integer, is less than the one value.
    Lt,
}

/// One requirement of a term.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A node selector term: its requirements are ANDed; a term without any matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorTerm {
    pub match_expressions: Vec<Requirement>,
    /// Requirements on node fields: only `metadata.name` with `In`/`NotIn` and one value is
    /// valid; any other makes the term match nothing.
    pub match_fields: Vec<Requirement>,
}

impl Requirement {
    /// Reads one requirement; an unknown operator is an error naming `field.operator`.
    pub fn read(
        r: &core::NodeSelectorRequirement,
        object: &str,
        field: &str,
    ) -> Result<Requirement, FieldError> {
        let operator = match r.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            other => {
                return Err(FieldError::new(
                    object,
                    format!("{field}.operator"),
                    format!(
                        "unknown node selector operator {other:?} (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)"
                    ),
                ));
            }
        };
        Ok(Requirement {
            key: r.key.clone(),
            operator,
            values: r.values.clone().unwrap_or_default(),
        })
    }

    /// Whether the requirement matches `labels`. A requirement Kubernetes would reject
    /// (`In`/`NotIn` without values, `Exists`/`DoesNotExist` with values, `Gt`/`Lt` without
    /// exactly one integer value) matches nothing; a label `Gt`/`Lt` cannot read as an integer
    /// does not match.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        let label = labels.get(&self.key);
        match self.operator {
            Operator::In => {
                !self.values.is_empty() && label.is_some_and(|l| self.values.contains(l))
            }
            Operator::NotIn => {
                !self.values.is_empty() && label.is_none_or(|l| !self.values.contains(l))
            }
            Operator::Exists => self.values.is_empty() && label.is_some(),
            Operator::DoesNotExist => self.values.is_empty() && label.is_none(),
            Operator::Gt | Operator::Lt => {
                let [bound] = self.values.as_slice() else {
                    return false;
                };
                let (Ok(bound), Some(Ok(value))) =
                    (bound.parse::<i64>(), label.map(|l| l.parse::<i64>()))
                else {
                    return false;
                };
                if self.operator == Operator::Gt {
                    value > bound
                } else {
                    value < bound
                }
            }
        }
    }

    /// Whether the field requirement matches a node named `node_name`: only `metadata.name`
    /// with `In` or `NotIn` and exactly one value ever matches.
    pub fn matches_name(&self, node_name: &str) -> bool {
        if self.key != FIELD_NODE_NAME {
            return false;
        }
        let [value] = self.values.as_slice() else {
            return false;
        };
        match self.operator {
            Operator::In => value == node_name,
            Operator::NotIn => value != node_name,
            _ => false,
        }
    }
}

impl SelectorTerm {
    /// Reads one term; `field` is its path (`...nodeSelectorTerms[i]`).
    pub fn read(
        t: &core::NodeSelectorTerm,
        object: &str,
        field: &str,
    ) -> Result<SelectorTerm, FieldError> {
        let read_all = |list: Option<&Vec<core::NodeSelectorRequirement>>, name: &str| {
            list.into_iter()
                .flatten()
                .enumerate()
                .map(|(i, r)| Requirement::read(r, object, &format!("{field}.{name}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(SelectorTerm {
            match_expressions: read_all(t.match_expressions.as_ref(), "matchExpressions")?,
            match_fields: read_all(t.match_fields.as_ref(), "matchFields")?,
        })
    }

    /// Whether the node matches every requirement; an empty term matches nothing.
    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions
            .iter()
            .all(|r| r.matches_labels(labels))
            && self.match_fields.iter().all(|r| r.matches_name(node_name))
    }
}

/// Whether the node matches any of `terms` (terms are ORed; no terms match nothing).
pub fn terms_match(
    terms: &[SelectorTerm],
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    terms.iter().any(|t| t.matches(node_name, labels))
}

/// Whether `labels` has every key of `selector` with the same value.
pub fn selector_matches(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn term(exprs: Vec<Requirement>, fields: Vec<Requirement>) -> SelectorTerm {
        SelectorTerm {
            match_expressions: exprs,
            match_fields: fields,
        }
    }

    use Operator::*;

    #[test]
    fn in_and_not_in() {
        let l = labels(&[("zone", "a")]);
        assert!(req("zone", In, &["a", "b"]).matches_labels(&l));
        assert!(!req("zone", In, &["b"]).matches_labels(&l));
        assert!(!req("other", In, &["a"]).matches_labels(&l));
        assert!(!req("zone", NotIn, &["a"]).matches_labels(&l));
        assert!(req("zone", NotIn, &["b"]).matches_labels(&l));
        // NotIn matches a node without the label.
        assert!(req("other", NotIn, &["a"]).matches_labels(&l));
        // Without values: invalid, matches nothing.
        assert!(!req("zone", In, &[]).matches_labels(&l));
        assert!(!req("other", NotIn, &[]).matches_labels(&l));
    }

    #[test]
    fn exists_and_does_not_exist() {
        let l = labels(&[("gpu", "")]);
        assert!(req("gpu", Exists, &[]).matches_labels(&l));
        assert!(!req("cpu", Exists, &[]).matches_labels(&l));
        assert!(req("cpu", DoesNotExist, &[]).matches_labels(&l));
        assert!(!req("gpu", DoesNotExist, &[]).matches_labels(&l));
        // With values: invalid, matches nothing.
        assert!(!req("gpu", Exists, &["x"]).matches_labels(&l));
        assert!(!req("cpu", DoesNotExist, &["x"]).matches_labels(&l));
    }

    #[test]
    fn gt_and_lt_compare_integers() {
        let l = labels(&[("cores", "16"), ("neg", "-3"), ("word", "many")]);
        assert!(req("cores", Gt, &["8"]).matches_labels(&l));
        assert!(!req("cores", Gt, &["16"]).matches_labels(&l));
        assert!(req("cores", Lt, &["17"]).matches_labels(&l));
        assert!(!req("cores", Lt, &["16"]).matches_labels(&l));
        assert!(req("neg", Lt, &["0"]).matches_labels(&l));
        // Integer comparison, not string comparison.
        assert!(req("cores", Gt, &["9"]).matches_labels(&l));
        // A non-integer label, a missing label, a bad bound or a wrong value count never match.
        assert!(!req("word", Gt, &["1"]).matches_labels(&l));
        assert!(!req("word", Lt, &["1"]).matches_labels(&l));
        assert!(!req("missing", Lt, &["1"]).matches_labels(&l));
        assert!(!req("cores", Gt, &["x"]).matches_labels(&l));
        assert!(!req("cores", Gt, &[]).matches_labels(&l));
        assert!(!req("cores", Gt, &["1", "2"]).matches_labels(&l));
    }

    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let l = labels(&[("zone", "a"), ("gpu", "v100")]);
        let both = term(
            vec![req("zone", In, &["a"]), req("gpu", In, &["v100"])],
            vec![],
        );
        let one_fails = term(
            vec![req("zone", In, &["a"]), req("gpu", In, &["a100"])],
            vec![],
        );
        assert!(both.matches("n", &l));
        assert!(!one_fails.matches("n", &l));
        assert!(terms_match(&[one_fails.clone(), both.clone()], "n", &l));
        assert!(!terms_match(std::slice::from_ref(&one_fails), "n", &l));
        assert!(!terms_match(&[], "n", &l));
    }

    #[test]
    fn empty_term_matches_nothing() {
        let empty = term(vec![], vec![]);
        assert!(!empty.matches("n", &labels(&[("a", "b")])));
        assert!(!terms_match(&[empty], "n", &BTreeMap::new()));
    }

    #[test]
    fn match_fields_metadata_name() {
        let l = BTreeMap::new();
        let name_in = term(vec![], vec![req(FIELD_NODE_NAME, In, &["n1"])]);
        assert!(name_in.matches("n1", &l));
        assert!(!name_in.matches("n2", &l));
        let name_not_in = term(vec![], vec![req(FIELD_NODE_NAME, NotIn, &["n1"])]);
        assert!(!name_not_in.matches("n1", &l));
        assert!(name_not_in.matches("n2", &l));
        // Other keys, operators or value counts never match.
        for bad in [
            req("metadata.uid", In, &["n1"]),
            req("metadata.uid", NotIn, &["x"]),
            req(FIELD_NODE_NAME, Exists, &[]),
            req(FIELD_NODE_NAME, In, &["n1", "n2"]),
            req(FIELD_NODE_NAME, In, &[]),
        ] {
            assert!(!term(vec![], vec![bad]).matches("n1", &l));
        }
        // Fields and expressions are ANDed.
        let mixed = term(
            vec![req("zone", In, &["a"])],
            vec![req(FIELD_NODE_NAME, In, &["n1"])],
        );
        assert!(mixed.matches("n1", &labels(&[("zone", "a")])));
        assert!(!mixed.matches("n1", &l));
    }

    #[test]
    fn node_selector_needs_every_pair() {
        let l = labels(&[("zone", "a"), ("gpu", "v100")]);
        assert!(selector_matches(&BTreeMap::new(), &l));
        assert!(selector_matches(&labels(&[("zone", "a")]), &l));
        assert!(!selector_matches(
            &labels(&[("zone", "a"), ("gpu", "a100")]),
            &l
        ));
        assert!(!selector_matches(&labels(&[("ssd", "true")]), &l));
    }

    #[test]
    fn unknown_operator_is_a_field_error() {
        let t = core::NodeSelectorTerm {
            match_expressions: Some(vec![core::NodeSelectorRequirement {
                key: "k".into(),
                operator: "Near".into(),
                values: None,
            }]),
            match_fields: None,
        };
        let e = SelectorTerm::read(&t, "Pod ns/p", "spec.x.nodeSelectorTerms[1]").unwrap_err();
        assert_eq!(e.object, "Pod ns/p");
        assert_eq!(
            e.field,
            "spec.x.nodeSelectorTerms[1].matchExpressions[0].operator"
        );
    }
}
