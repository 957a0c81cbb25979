//! A job object that may fail to deserialize without stopping the watch.
//!
//! Like kube's `DeserializeGuard`, but the failure names the field (via `serde_path_to_error`), so
//! the Event sent for a malformed object says which field is wrong. The autoscaler's watches and
//! the operator's controllers both read job objects through it.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::schema::{Schema, shape_error};
use super::{PaddleJob, PyTorchJob, PyTorchTrainingJob, TrainingJob};

/// A job object as the watch delivers it: parsed (boxed: the types are over 10 kB, too big to
/// move through stream futures), or the reason it could not be.
#[derive(Debug, Clone)]
pub struct Guarded<K>(pub Result<Box<K>, MalformedJob>);

/// A watched TrainingJob.
pub type GuardedTrainingJob = Guarded<TrainingJob>;
/// A watched PaddleJob.
pub type GuardedPaddleJob = Guarded<PaddleJob>;
/// A watched PyTorchTrainingJob.
pub type GuardedPyTorchTrainingJob = Guarded<PyTorchTrainingJob>;
/// A watched PyTorchJob.
pub type GuardedPyTorchJob = Guarded<PyTorchJob>;

/// A job object that does not deserialize.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedJob {
    pub metadata: ObjectMeta,
    /// The path of the offending field, e.g. `spec.trainer.min-instance`.
    pub field: String,
    pub error: String,
}

impl<K: DeserializeOwned + Schema> Guarded<K> {
    /// Decodes an object; a failure keeps its metadata and names the field. `spec` and `status`
    /// must be objects, and every object and list nested in `spec` where the kind's schema says
    /// so ([`Schema`]), as the API server's schema types them (serde would read an array as a
    /// struct of defaults).
    pub fn from_value(value: &serde_json::Value) -> Self {
        let metadata = || {
            value
                .get("metadata")
                .and_then(|m| ObjectMeta::deserialize(m).ok())
                .unwrap_or_default()
        };
        let shape = shape_problem(value)
            .map(|(field, error)| (field.to_string(), error))
            .or_else(|| K::schema().and_then(|schema| shape_error(schema, value)));
        if let Some((field, error)) = shape {
            return Guarded(Err(MalformedJob {
                metadata: metadata(),
                field,
                error,
            }));
        }
        match serde_path_to_error::deserialize::<_, K>(value) {
            Ok(job) => Guarded(Ok(Box::new(job))),
            Err(e) => {
                let path = e.path().to_string();
                let field = if path == "." {
                    "(root)".to_string()
                } else {
                    path
                };
                Guarded(Err(MalformedJob {
                    metadata: metadata(),
                    field,
                    error: e.into_inner().to_string(),
                }))
            }
        }
    }
}

/// The top-level field of a job object that is not the object its schema says it is, and the
/// API server's words for it (`must be of type object, got array`).
pub fn shape_problem(value: &serde_json::Value) -> Option<(&'static str, String)> {
    use super::schema::type_name as kind;
    use serde_json::Value;
    ["metadata", "spec", "status"]
        .into_iter()
        .find_map(|field| {
            let v = value.get(field)?;
            (!matches!(v, Value::Object(_) | Value::Null))
                .then(|| (field, format!("must be of type object, got {}", kind(v))))
        })
}

impl<'de, K: DeserializeOwned + Schema> Deserialize<'de> for Guarded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Self::from_value(&value))
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Guarded<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(job) => job.meta(),
            Err(bad) => &bad.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(job) => job.meta_mut(),
            Err(bad) => &mut bad.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_job_names_the_field() {
        let value = serde_json::json!({
            "apiVersion": "paddlepaddle.org/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"trainer": {"min-instance": "two"}}
        });
        let guarded: GuardedTrainingJob = serde_json::from_value(value).unwrap();
        let bad = guarded.0.unwrap_err();
        assert_eq!(bad.field, "spec.trainer.min-instance");
        assert_eq!(bad.metadata.name.as_deref(), Some("bad"));
    }
}
