//! Two objects of one kind, namespace and name in one manifest or dump: the first is kept
//! and the pair reported, never the later one silently winning.

use std::collections::HashMap;

use super::Document;

/// A second object of the same kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// `Kind namespace/name`.
    pub object: String,
    /// Where the first one is.
    pub first: String,
    /// Where the second one is.
    pub second: String,
}

impl std::fmt::Display for Duplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is twice in the input: {} and {}",
            self.object, self.first, self.second
        )
    }
}

/// The objects seen so far, by API group, kind, namespace and name, with their origins.
#[derive(Debug, Default)]
pub struct ObjectIndex {
    seen: HashMap<(String, String, String, String), String>,
}

impl ObjectIndex {
    /// Records `doc`; a second object with its identity is returned as a [`Duplicate`].
    /// Objects without a kind or a name are not recorded (they are errors of their own).
    pub fn see(&mut self, doc: &Document) -> Option<Duplicate> {
        let kind = doc.kind();
        let name = doc.metadata_field("name").unwrap_or("");
        if kind.is_empty() || name.is_empty() {
            return None;
        }
        let namespace = doc.metadata_field("namespace").unwrap_or("");
        let key = (
            doc.api_group().to_string(),
            kind.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        match self.seen.get(&key) {
            Some(first) => Some(Duplicate {
                object: doc.object_ref(),
                first: first.clone(),
                second: doc.origin.clone(),
            }),
            None => {
                self.seen.insert(key, doc.origin.clone());
                None
            }
        }
    }
}

/// The paddlepaddle.org jobs seen so far by namespace and name: a TrainingJob and a PaddleJob
/// of one namespace and name are two objects, but the operator derives the same children
/// (`<name>-trainer`, `<name>-master`, ...) from both, so only one of them could run.
#[derive(Debug, Default)]
pub struct SharedChildren {
    seen: HashMap<(String, String), (String, String)>,
}

impl SharedChildren {
    /// Records `doc` if it is a TrainingJob or PaddleJob; one of the other kind with its
    /// namespace and name already seen is returned as `(that object, where it is)`.
    pub fn see(&mut self, doc: &Document) -> Option<(String, String)> {
        let kind = doc.kind();
        if doc.api_group() != "paddlepaddle.org" || !matches!(kind, "TrainingJob" | "PaddleJob") {
            return None;
        }
        let name = doc.metadata_field("name").unwrap_or("").to_string();
        if name.is_empty() {
            return None;
        }
        let namespace = doc.metadata_field("namespace").unwrap_or("").to_string();
        let this = doc.object_ref();
        match self.seen.get(&(namespace.clone(), name.clone())) {
            Some((first, at)) if !first.starts_with(&format!("{kind} ")) => {
                Some((first.clone(), at.clone()))
            }
            Some(_) => None,
            None => {
                self.seen
                    .insert((namespace, name), (this, doc.origin.clone()));
                None
            }
        }
    }
}

/// The error of the later of a TrainingJob and PaddleJob of one namespace and name (at
/// `here`), naming the earlier one (`first`, at `at`), for `metadata.name`.
pub fn shared_children_problem(first: &str, at: &str, here: &str) -> String {
    format!(
        "the namespace and name of {first} at {at} (here {here}): the operator derives the same \
         `<name>-trainer` Job, ReplicaSets and ConfigMap from both, so only one could run"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn doc(origin: &str, value: Value) -> Document {
        Document {
            origin: origin.into(),
            value,
        }
    }

    #[test]
    fn the_second_of_a_kind_namespace_and_name_is_named_with_the_first() {
        let mut index = ObjectIndex::default();
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}});
        assert_eq!(index.see(&doc("d items[0]", pod.clone())), None);
        let other_ns =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "b"}});
        assert_eq!(index.see(&doc("d items[1]", other_ns)), None);
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "p"}});
        assert_eq!(index.see(&doc("d items[2]", node)), None);
        let dup = index.see(&doc("d items[3]", pod)).unwrap();
        assert_eq!(
            dup.to_string(),
            "Pod a/p is twice in the input: d items[0] and d items[3]"
        );
    }
}
