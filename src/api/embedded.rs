//! An embedded Kubernetes object (a role's `replicaSpec`) that serializes back the way it came.
//!
//! k8s-openapi always writes `apiVersion` and `kind`; manifests for the original operator usually
//! omit them inside `replicaSpec`. `Embedded` remembers whether they were there.

use std::ops::{Deref, DerefMut};

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A typed object plus whether its manifest spelled out `apiVersion`/`kind`.
///
/// The object is boxed: a `replicaSpec` is a whole ReplicaSet or Job (2–3 KB inline even when
/// empty), and most jobs have none, so an unboxed one made every TrainingJob 11 KB.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Embedded<T> {
    pub object: Box<T>,
    typed: bool,
}

impl<T> Embedded<T> {
    /// Wraps an object that serializes without `apiVersion`/`kind`.
    pub fn new(object: T) -> Self {
        Embedded {
            object: Box::new(object),
            typed: false,
        }
    }
}

impl<T> Deref for Embedded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.object
    }
}

impl<T> DerefMut for Embedded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.object
    }
}

impl<T: Serialize> Serialize for Embedded<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serde_json::to_value(&self.object).map_err(S::Error::custom)?;
        if !self.typed
            && let Some(map) = value.as_object_mut()
        {
            map.remove("apiVersion");
            map.remove("kind");
        }
        value.serialize(serializer)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Embedded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let typed = value.get("apiVersion").is_some() || value.get("kind").is_some();
        let object = serde_json::from_value(value).map_err(D::Error::custom)?;
        Ok(Embedded {
            object: Box::new(object),
            typed,
        })
    }
}
