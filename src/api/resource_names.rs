//! Container resource names as the API server checks them (kubernetes
//! `pkg/apis/core/validation` `validateContainerResourceName`, `pkg/apis/core/helper`): which
//! names a container may request, and which must be whole or have a request equal to the limit.

use super::Quantity;
use super::names::{NameRule, label_value_shaped, name_problems};

/// The prefix of the huge page resources (`hugepages-2Mi`, `hugepages-1Gi`).
const HUGEPAGES_PREFIX: &str = "hugepages-";

/// The names a container may request without a domain.
const STANDARD_CONTAINER_RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// The other names without a domain the API server knows (quota and object-count resources,
/// helper `standardResources`): no container's.
const STANDARD_OTHER_RESOURCES: [&str; 16] = [
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "requests.storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "services.nodeports",
];

const NAME_PART_MESSAGE: &str = "name part must consist of alphanumeric characters, '-', '_' or \
     '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  \
     or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Whether `name` is a huge page resource.
pub fn hugepages(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

/// Whether `name` is a native resource: no domain, or one of `kubernetes.io`.
fn native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Whether a request of `name` may be below its limit: a native resource but huge pages.
pub fn overcommit_allowed(name: &str) -> bool {
    native(name) && !hugepages(name)
}

/// Whether the API server takes `name` as an extended resource (a domain-prefixed name outside
/// `kubernetes.io`, not a quota's `requests.` name): whole amounts only, request equal to limit.
pub fn extended_resource(name: &str) -> bool {
    !native(name)
        && !name.starts_with("requests.")
        && qualified_name_problems(&format!("requests.{name}")).is_empty()
}

/// What apimachinery's `IsQualifiedName` says is wrong with `name`: an optional lowercase DNS
/// subdomain prefix and '/', then at most 63 alphanumerics, '-', '_' or '.'.
fn qualified_name_problems(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let part = match name.split('/').collect::<Vec<_>>().as_slice() {
        [part] => *part,
        [prefix, part] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    name_problems(prefix, NameRule::Subdomain)
                        .into_iter()
                        .map(|p| format!("prefix part {p}")),
                );
            }
            part
        }
        _ => {
            out.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                &NAME_PART_MESSAGE["name part ".len()..]
            ));
            return out;
        }
    };
    if part.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if part.len() > 63 {
        out.push("name part must be no more than 63 characters".to_string());
    }
    if !label_value_shaped(part) {
        out.push(NAME_PART_MESSAGE.to_string());
    }
    out
}

/// What the API server says is wrong with `name` as a container's resource name (`None`:
/// nothing): a qualified name; without a domain one of cpu, memory, ephemeral-storage or
/// `hugepages-<size>`; with a domain outside `kubernetes.io` an extended resource name.
pub fn resource_name_problem(name: &str) -> Option<String> {
    let problems = qualified_name_problems(name);
    if !problems.is_empty() {
        return Some(problems.join("; "));
    }
    if !name.contains('/') {
        if STANDARD_CONTAINER_RESOURCES.contains(&name) || hugepages(name) {
            return None;
        }
        let standard = STANDARD_OTHER_RESOURCES.contains(&name)
            || name == "services.loadbalancers"
            || name.starts_with("requests.hugepages-");
        return Some(if standard {
            "must be a standard resource for containers (cpu, memory, ephemeral-storage, \
             hugepages-<size>)"
                .to_string()
        } else {
            "must be a standard resource type or fully qualified (cpu, memory, \
             ephemeral-storage, hugepages-<size>, or a name with a domain such as nvidia.com/gpu)"
                .to_string()
        });
    }
    (!native(name) && !extended_resource(name))
        .then(|| "doesn't follow extended resource name standard".to_string())
}

/// Whether the API server takes `quantity` as a whole amount of an extended resource
/// (`ValidateResourceQuantityValue`: `MilliValue() % 1000 == 0`). `MilliValue` rounds up, so
/// `999999999n` (1000m) is whole and `1000000001n` (1001m) is not. Past i64 thousandths Go's
/// `MilliValue` overflows (to 0 for a quantity held as an int64 amount, such as `1E`): taken.
pub fn api_integer(quantity: Quantity) -> bool {
    quantity
        .checked_milli_ceil()
        .is_none_or(|milli| milli % 1000 == 0)
}

/// Why the API server refuses `quantity` of huge pages `name` (`None`: it does not, or `name`
/// is not a huge page resource): core validation's `IsHugePageResourceValueDivisible` wants the
/// size after `hugepages-` to parse as a positive whole quantity and `Value()` of the amount to
/// be a multiple of it.
pub fn hugepages_problem(name: &str, quantity: Quantity) -> Option<String> {
    let size_text = name.strip_prefix(HUGEPAGES_PREFIX)?;
    let size = match Quantity::parse(size_text) {
        Err(e) => return Some(format!("the page size is not a quantity: {e}")),
        Ok(size) if size == Quantity::ZERO || !api_integer(size) => {
            return Some(format!(
                "the page size {size_text:?} is not a positive whole quantity"
            ));
        }
        Ok(size) => size.value_ceil(),
    };
    (quantity.value_ceil() % size != 0).then(|| {
        format!("the API server refuses huge pages that are not whole pages of {size_text}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_resource_names() {
        for ok in [
            "cpu",
            "memory",
            "ephemeral-storage",
            "hugepages-2Mi",
            "nvidia.com/gpu",
            "example.com/fpga",
            "alpha.kubernetes.io/nvidia-gpu",
        ] {
            assert_eq!(resource_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "gpu",
            "storage",
            "foo",
            "pods",
            "NVIDIA.com/gpu",
            "a/b/c",
            "/gpu",
            "x.io/",
        ] {
            assert!(resource_name_problem(bad).is_some(), "{bad}");
        }
        assert!(resource_name_problem("requests.nvidia.com/gpu").is_some());
        assert!(
            resource_name_problem("NVIDIA.com/gpu")
                .unwrap()
                .starts_with("prefix part a lowercase RFC 1123 subdomain")
        );
        assert!(!overcommit_allowed("hugepages-1Gi") && !overcommit_allowed("nvidia.com/gpu"));
        assert!(overcommit_allowed("cpu") && overcommit_allowed("kubernetes.io/x"));
    }
}
