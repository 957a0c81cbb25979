//! Reading Kubernetes manifests: YAML or JSON, one or many documents, `List`s flattened.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::FieldError;

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
        let meta = self.value.get("metadata");
        let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str);
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

/// A manifest that cannot be read as YAML or JSON at all.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: not valid YAML or JSON: {message}")]
pub struct ManifestError {
    pub origin: String,
    pub message: String,
}

/// Splits manifest text into objects: JSON or YAML (multi-document), `*List` kinds flattened.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Document>, ManifestError> {
    let trimmed = text.trim_start();
    let values: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(text).map_err(|e| ManifestError {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        match v {
            Value::Array(items) => items,
            other => vec![other],
        }
    } else {
        // YAML 1.2 booleans only: `n` or `no` as a name or namespace stays a string.
        let options = serde_saphyr::options! { strict_booleans: true };
        serde_saphyr::from_multiple_with_options::<Value>(text, options).map_err(|e| {
            ManifestError {
                origin: origin.to_string(),
                message: e.to_string(),
            }
        })?
    };
    let many = values.iter().filter(|v| !v.is_null()).count() > 1;
    let mut docs = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        let doc_origin = if many {
            format!("{origin} document {}", i + 1)
        } else {
            origin.to_string()
        };
        flatten(value, doc_origin, &mut docs);
    }
    Ok(docs)
}

fn flatten(value: Value, origin: String, out: &mut Vec<Document>) {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array);
    if !is_list {
        out.push(Document { origin, value });
        return;
    }
    if let Some(Value::Array(items)) = value.get("items") {
        for (i, item) in items.iter().enumerate() {
            flatten(item.clone(), format!("{origin} items[{i}]"), out);
        }
    }
}

/// Reads and splits a manifest file.
pub fn read_documents(path: &std::path::Path) -> Result<Vec<Document>, ManifestError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
        origin: origin.clone(),
        message: e.to_string(),
    })?;
    parse_documents(&text, &origin)
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
}
