//! Objects and lists where a job's schema says so, as the API server's structural schema checks
//! them: serde reads a struct from an array (its fields defaulted), so `spec.trainer: []` would
//! pass as an empty trainer without this check.

use std::sync::OnceLock;

use serde_json::Value;

use super::{JobSet, PaddleJob, PyTorchJob, PyTorchTrainingJob, TrainingJob};

/// A job type whose objects are checked against its schema when decoded.
pub trait Schema {
    /// The JSON Schema of the whole object (`None`: the type checks itself, as the Kubernetes
    /// built-in types do).
    fn schema() -> Option<&'static Value>;
}

macro_rules! json_schema {
    ($($kind:ty),*) => {$(
        impl Schema for $kind {
            fn schema() -> Option<&'static Value> {
                static SCHEMA: OnceLock<Value> = OnceLock::new();
                Some(SCHEMA.get_or_init(|| schemars::schema_for!($kind).to_value()))
            }
        }
    )*};
}

json_schema!(
    TrainingJob,
    PaddleJob,
    PyTorchTrainingJob,
    PyTorchJob,
    JobSet
);

impl Schema for k8s_openapi::api::batch::v1::Job {
    fn schema() -> Option<&'static Value> {
        None
    }
}

/// The JSON type name the API server uses in its errors.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The first field of the object's `spec` that is not the object or list `root` (a JSON
/// Schema of the object whose references point into its own `$defs`) declares there: its path
/// (`spec.trainer`, `spec.replicaSpecs[1]`) and the API server's words (`must be of type
/// object, got array`). Scalars are left to the decoder; a null is an absent field. `status` is
/// not walked: its writers are controllers, and unreadable conditions are skipped by design.
pub fn shape_error(root: &Value, value: &Value) -> Option<(String, String)> {
    let spec = value.get("spec")?;
    let schema = resolve(root, root)?.get("properties")?.get("spec")?;
    let mut path = "spec".to_string();
    walk(root, schema, spec, &mut path, 0).map(|e| (path, e))
}

/// How deep references are followed (a recursive schema stops here; objects never nest this
/// deep in a job).
const MAX_DEPTH: usize = 64;

/// `schema` with `$ref`s, a lone `allOf` and an `anyOf`/`oneOf` of one non-null alternative
/// resolved; `None` when it cannot say one shape (untagged unions).
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> Option<&'a Value> {
    for _ in 0..MAX_DEPTH {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let name = r.strip_prefix("#/$defs/")?;
            schema = root.get("$defs")?.get(name)?;
            continue;
        }
        let one_of = ["allOf", "anyOf", "oneOf"].into_iter().find_map(|k| {
            let options = schema.get(k)?.as_array()?;
            let mut real = options
                .iter()
                .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"));
            let first = real.next()?;
            real.next().is_none().then_some(first)
        });
        match one_of {
            Some(next) if schema.get("type").is_none() => schema = next,
            _ => return Some(schema),
        }
    }
    None
}

/// The one non-null type `schema` declares (`"object"`, `["array", "null"]`).
fn declared_type(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(ts) => {
            let mut real = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null");
            let first = real.next()?;
            real.next().is_none().then_some(first)
        }
        _ => None,
    }
}

fn walk(
    root: &Value,
    schema: &Value,
    value: &Value,
    path: &mut String,
    depth: usize,
) -> Option<String> {
    if value.is_null() || depth > MAX_DEPTH {
        return None;
    }
    let schema = resolve(root, schema)?;
    let wrong = |want: &str| Some(format!("must be of type {want}, got {}", type_name(value)));
    match (declared_type(schema), value) {
        (Some("object"), Value::Object(map)) => {
            let properties = schema.get("properties");
            let rest = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, v) in map {
                let Some(field) = properties.and_then(|p| p.get(key)).or(rest) else {
                    continue;
                };
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                if let Some(e) = walk(root, field, v, path, depth + 1) {
                    return Some(e);
                }
                path.truncate(len);
            }
            None
        }
        (Some("object"), _) => wrong("object"),
        (Some("array"), Value::Array(items)) => {
            let item = schema.get("items").filter(|i| i.is_object())?;
            for (i, v) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                if let Some(e) = walk(root, item, v, path, depth + 1) {
                    return Some(e);
                }
                path.truncate(len);
            }
            None
        }
        (Some("array"), _) => wrong("array"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of<K: Schema>(value: Value) -> Option<(String, String)> {
        shape_error(K::schema().unwrap(), &value)
    }

    #[test]
    fn nested_objects_and_lists_are_typed() {
        let job = |spec: Value| {
            json!({"apiVersion": "paddlepaddle.org/v1alpha1",
            "kind": "TrainingJob", "metadata": {"name": "a"}, "spec": spec})
        };
        assert_eq!(
            error_of::<TrainingJob>(job(json!({"trainer": []}))),
            Some((
                "spec.trainer".into(),
                "must be of type object, got array".into()
            ))
        );
        assert_eq!(
            error_of::<TrainingJob>(job(json!([]))),
            Some(("spec".into(), "must be of type object, got array".into()))
        );
        assert_eq!(
            error_of::<TrainingJob>(job(json!({"trainer": {"min-instance": 1}, "port": 1}))),
            None
        );
        let t9k = json!({"spec": {"replicaSpecs": [{"type": "worker"}, "worker"]}});
        assert_eq!(
            error_of::<PyTorchTrainingJob>(t9k),
            Some((
                "spec.replicaSpecs[1]".into(),
                "must be of type object, got string".into()
            ))
        );
        let t9k = json!({"spec": {"replicaSpecs": {"type": "worker"}}});
        assert_eq!(
            error_of::<PyTorchTrainingJob>(t9k).map(|e| e.0),
            Some("spec.replicaSpecs".into())
        );
    }
}
