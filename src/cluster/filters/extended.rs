//! The "other" resources: everything but CPU, memory, pods and GPUs (which `Resources` and the
//! pod count cover), e.g. `rdma/hca`, `hugepages-2Mi`, `ephemeral-storage`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

use crate::api::{FieldError, GPU_RESOURCE_NAMES, Quantity, QuantityError};

/// Amounts of other resources by name, whole units rounded up.
pub type Extended = BTreeMap<String, i64>;

/// Whether `name` is one of the other resources.
pub fn is_extended(name: &str) -> bool {
    !matches!(name, "cpu" | "memory" | "pods") && !GPU_RESOURCE_NAMES.contains(&name)
}

/// The other resources of a resource map, rounded up; a bad quantity is an error naming
/// `field.<name>`. Zero amounts are left out.
pub fn read_extended(
    map: Option<&BTreeMap<String, KubeQuantity>>,
    object: &str,
    field: &str,
) -> Result<Extended, FieldError> {
    parse_extended(map)
        .map_err(|(name, e)| FieldError::new(object, format!("{field}.{name}"), e.to_string()))
}

/// [`read_extended`] without the error context: the error is the resource's name and why its
/// quantity was rejected.
pub fn parse_extended(
    map: Option<&BTreeMap<String, KubeQuantity>>,
) -> Result<Extended, (&str, QuantityError)> {
    let mut out = Extended::new();
    for (name, q) in map.into_iter().flatten() {
        if !is_extended(name) {
            continue;
        }
        let amount = Quantity::parse(&q.0)
            .map_err(|e| (name.as_str(), e))?
            .value_ceil();
        if amount > 0 {
            out.insert(name.clone(), amount);
        }
    }
    Ok(out)
}

/// Adds `more` into `sum` (saturating).
pub fn add_into(sum: &mut Extended, more: &Extended) {
    for (name, amount) in more {
        let slot = sum.entry(name.clone()).or_insert(0);
        *slot = slot.saturating_add(*amount);
    }
}

/// Raises each amount of `max` to at least the one in `other`.
pub fn max_into(max: &mut Extended, other: &Extended) {
    for (name, amount) in other {
        let slot = max.entry(name.clone()).or_insert(0);
        *slot = (*slot).max(*amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_resources_exclude_cpu_memory_pods_and_gpus() {
        for name in [
            "cpu",
            "memory",
            "pods",
            "nvidia.com/gpu",
            "alpha.kubernetes.io/nvidia-gpu",
        ] {
            assert!(!is_extended(name), "{name}");
        }
        for name in [
            "rdma/hca",
            "hugepages-2Mi",
            "ephemeral-storage",
            "amd.com/gpu",
        ] {
            assert!(is_extended(name), "{name}");
        }
    }

    #[test]
    fn read_rounds_up_and_names_bad_fields() {
        let map = BTreeMap::from([
            ("cpu".to_string(), KubeQuantity("2".into())),
            ("rdma/hca".to_string(), KubeQuantity("500m".into())),
            ("hugepages-2Mi".to_string(), KubeQuantity("4Mi".into())),
            ("example.com/zero".to_string(), KubeQuantity("0".into())),
        ]);
        let got = read_extended(Some(&map), "Node n", "status.allocatable").unwrap();
        assert_eq!(
            got,
            Extended::from([("hugepages-2Mi".into(), 4 << 20), ("rdma/hca".into(), 1)])
        );
        let bad = BTreeMap::from([("rdma/hca".to_string(), KubeQuantity("lots".into()))]);
        let e = read_extended(Some(&bad), "Node n", "status.allocatable").unwrap_err();
        assert_eq!(e.object, "Node n");
        assert_eq!(e.field, "status.allocatable.rdma/hca");
    }
}
