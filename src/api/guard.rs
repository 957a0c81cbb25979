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

impl<K: DeserializeOwned> Guarded<K> {
    /// Decodes an object; a failure keeps its metadata and names the field.
    pub fn from_value(value: &serde_json::Value) -> Self {
        match serde_path_to_error::deserialize::<_, K>(value) {
            Ok(job) => Guarded(Ok(Box::new(job))),
            Err(e) => {
                let path = e.path().to_string();
                let field = if path == "." {
                    "(root)".to_string()
                } else {
                    path
                };
                let metadata = value
                    .get("metadata")
                    .and_then(|m| ObjectMeta::deserialize(m).ok())
                    .unwrap_or_default();
                Guarded(Err(MalformedJob {
                    metadata,
                    field,
                    error: e.into_inner().to_string(),
                }))
            }
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Guarded<K> {
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
