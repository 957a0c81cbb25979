//! Reading Kubernetes manifests: YAML or JSON, one or many documents, `List`s flattened.

mod duplicates;
mod stream;
mod strict;
mod yaml;

use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::de::{DeserializeOwned, DeserializeSeed};
use serde_json::Value;

use super::FieldError;
use stream::{JsonTop, Reader};

pub use duplicates::{Duplicate, ObjectIndex, SharedChildren, shared_children_problem};
pub use yaml::budget as yaml_budget;

/// One object read from a manifest, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Where the object is, e.g. `jobs.yaml document 2` or `dump.json items[7]`.
    pub origin: String,
    pub value: Value,
}

impl Document {
    /// `Kind namespace/name` when the object says so, else its origin.
    pub fn object_ref(&self) -> String {
        let kind = self.value.get("kind").and_then(Value::as_str);
        let name = self.metadata_field("name");
        let namespace = self.metadata_field("namespace");
        match (kind, name) {
            (Some(kind), Some(name)) => match namespace {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            },
            _ => self.origin.clone(),
        }
    }

    /// The object's `kind`, or "".
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// The object's `apiVersion`, or "".
    pub fn api_version(&self) -> &str {
        self.value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The API group of its `apiVersion` (`batch` of `batch/v1`; "" for the core group's `v1`).
    pub fn api_group(&self) -> &str {
        self.api_version()
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// A string field of its `metadata` (`name`, `namespace`, `generateName`), when set.
    pub fn metadata_field(&self, field: &str) -> Option<&str> {
        self.value.get("metadata")?.get(field)?.as_str()
    }

    /// Decodes the object into a typed value; an error names the object and the field.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, FieldError> {
        serde_path_to_error::deserialize(&self.value).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." {
                "(root)".to_string()
            } else {
                path
            };
            FieldError::new(self.object_ref(), field, e.into_inner().to_string())
        })
    }
}

/// A manifest that cannot be read: not YAML or JSON, too large for the YAML reader's budget,
/// or unreadable; the message says where reading stopped.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct ManifestError {
    pub origin: String,
    pub message: String,
}

impl ManifestError {
    fn new(origin: &str, message: impl Into<String>) -> Self {
        Self {
            origin: origin.to_string(),
            message: message.into(),
        }
    }
}

/// Splits manifest text into objects: JSON or YAML (multi-document), `*List` kinds flattened.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Document>, ManifestError> {
    let mut docs = Vec::new();
    parse_each(text, origin, |doc| docs.push(doc))?;
    Ok(docs)
}

/// Reads and splits a manifest file.
pub fn read_documents(path: &Path) -> Result<Vec<Document>, ManifestError> {
    let mut docs = Vec::new();
    read_each(path, |doc| docs.push(doc))?;
    Ok(docs)
}

/// Hands each object of manifest text to `sink` as it is read (see [`read_each`]).
pub fn parse_each(
    text: &str,
    origin: &str,
    sink: impl FnMut(Document),
) -> Result<(), ManifestError> {
    let input = text.as_bytes();
    if is_json(input) {
        read_json(input, origin, sink)
    } else {
        let many =
            yaml::many_documents(input).map_err(|e| ManifestError::new(origin, e.to_string()))?;
        yaml::read_yaml(input, input.len(), origin, many, sink)
            .map_err(|message| ManifestError::new(origin, message))
    }
}

/// Hands each object of a manifest file to `sink` as it is read: JSON (text starting with `{`
/// or `[`) or YAML (multi-document), `*List` kinds flattened, one object at a time in memory.
/// Duplicate keys in an object are an error, in JSON as in YAML.
pub fn read_each(path: &Path, sink: impl FnMut(Document)) -> Result<(), ManifestError> {
    let origin = path.display().to_string();
    let fail = |e: std::io::Error| ManifestError::new(&origin, e.to_string());
    let open = || std::fs::File::open(path).map(|f| BufReader::with_capacity(1 << 16, f));
    let mut input = open().map_err(fail)?;
    let bytes = input.get_ref().metadata().map_err(fail)?.len();
    let json = is_json(skip_whitespace(&mut input).map_err(fail)?);
    if json {
        return read_json(input, &origin, sink);
    }
    let many = yaml::many_documents(open().map_err(fail)?).map_err(fail)?;
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    yaml::read_yaml(input, bytes, &origin, many, sink)
        .map_err(|message| ManifestError::new(&origin, message))
}

/// Skips leading whitespace; returns what is buffered next.
fn skip_whitespace(input: &mut impl BufRead) -> std::io::Result<&[u8]> {
    loop {
        let buf = input.fill_buf()?;
        let blanks = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
        if blanks < buf.len() || buf.is_empty() {
            input.consume(blanks);
            return input.fill_buf();
        }
        input.consume(blanks);
    }
}

fn is_json(text: &[u8]) -> bool {
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    matches!(first, Some(b'{' | b'['))
}

fn read_json(
    input: impl std::io::Read,
    origin: &str,
    sink: impl FnMut(Document),
) -> Result<(), ManifestError> {
    let mut reader = Reader::new(sink);
    let mut de = serde_json::Deserializer::from_reader(input);
    let top = JsonTop {
        reader: &mut reader,
        origin: origin.to_string(),
    };
    top.deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| {
            let whereabouts = reader.whereabouts(origin);
            ManifestError::new(origin, format!("not valid YAML or JSON{whereabouts}: {e}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_multi_document_and_list() {
        let text = "kind: Node\nmetadata: {name: a}\n---\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: p, namespace: ns}\n- kind: Pod\n  metadata: {name: q, namespace: ns}\n---\n";
        let docs = parse_documents(text, "f.yaml").unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].object_ref(), "Node a");
        assert_eq!(docs[1].object_ref(), "Pod ns/p");
        assert_eq!(docs[2].origin, "f.yaml document 2 items[1]");
    }

    #[test]
    fn yaml_1_1_booleans_stay_strings() {
        let docs = parse_documents(
            "kind: Pod\nmetadata: {name: y, namespace: n}\nx: no\nt: true\n",
            "f",
        )
        .unwrap();
        assert_eq!(docs[0].object_ref(), "Pod n/y");
        assert_eq!(docs[0].value["x"], "no");
        assert_eq!(docs[0].value["t"], true);
    }

    #[test]
    fn json_list() {
        let text = r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"n"}}]}"#;
        let docs = parse_documents(text, "d.json").unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].kind(), "Node");
    }

    #[test]
    fn broken_text_names_the_file() {
        let err = parse_documents("{ not json", "bad.json").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("bad.json: not valid YAML or JSON")
        );
        let err = parse_documents("a: [1, 2", "bad.yaml").unwrap_err();
        assert!(err.to_string().starts_with("bad.yaml:"));
    }

    #[test]
    fn items_before_kind_are_streamed_and_only_a_list_may_have_them() {
        let text = r#"{"apiVersion": "v1", "items": [{"kind": "Node", "metadata": {"name": "n"}},
            {"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p", "namespace": "s"}}]}],
            "kind": "List", "metadata": {}}"#;
        let docs = parse_documents(text, "d.json").unwrap();
        assert_eq!(docs[1].origin, "d.json items[1] items[0]");
        let err = parse_documents(r#"{"items": [{"kind": "Node"}], "kind": "Node"}"#, "d.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a List"), "{err}");
        // The kind first: `items` is a field like any other.
        let docs = parse_documents(r#"{"kind": "Node", "items": [1]}"#, "d.json").unwrap();
        assert_eq!(docs[0].value["items"][0], 1);
    }

    #[test]
    fn json_arrays_are_documents_and_yaml_documents_are_counted_by_content() {
        let docs = parse_documents(r#"[{"kind": "A"}, null, {"kind": "B"}]"#, "a.json").unwrap();
        let origins: Vec<&str> = docs.iter().map(|d| d.origin.as_str()).collect();
        assert_eq!(origins, ["a.json document 1", "a.json document 3"]);
        let docs = parse_documents("# c\n---\nkind: A\n---\n# only a comment\n", "y").unwrap();
        assert_eq!(docs[0].origin, "y");
    }

    #[test]
    fn the_yaml_budget_grows_with_the_input_but_keeps_the_alias_caps() {
        let small = yaml_budget(1_000);
        let large = yaml_budget(50_000_000);
        assert_eq!(small.max_nodes, 250_000);
        assert_eq!(large.max_nodes, 50_000_000);
        assert_eq!(large.max_documents, 12_500_000);
        assert_eq!(large.max_aliases, small.max_aliases);
        assert_eq!(
            large.max_recorded_anchor_events,
            small.max_recorded_anchor_events
        );
    }
}
