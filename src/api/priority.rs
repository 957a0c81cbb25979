//! A job's priority as the original wrote it (`spec.annotations.priority`, a string) and the
//! number it orders by.
//!
//! | the string               | orders as                          |
//! |--------------------------|------------------------------------|
//! | empty                    | 0                                  |
//! | an integer (`"7"`)       | its value (clamped to the i32 range, with a warning) |
//! | a PriorityClass's name   | that class's `value`               |
//! | a built-in class's name  | its value (`system-cluster-critical` 2000000000, `system-node-critical` 2000001000), listed or not |
//! | any other name           | 0, with a warning                  |

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::FieldError;

/// The number a priority string orders by, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priority {
    pub value: i32,
    /// The PriorityClass name the string refers to, when it is not a number.
    pub class: Option<Arc<str>>,
    /// Why the value is not what the user may expect.
    pub warning: Option<String>,
}

/// The PriorityClasses known (name → value).
pub type PriorityClasses = BTreeMap<String, i32>;

/// The PriorityClasses every cluster has (the API server creates them and refuses to delete
/// them), by name, with their values.
pub const BUILT_IN_CLASSES: [(&str, i32); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

/// The name prefix reserved for the built-in PriorityClasses.
pub const SYSTEM_PREFIX: &str = "system-";

/// The highest value of a PriorityClass not built in (`HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;

/// What the API server refuses in a PriorityClass besides its name's shape, as (field, problem),
/// after `ValidatePriorityClass` (kubernetes `pkg/apis/scheduling/validation`): a `system-` name
/// that is not a built-in class with its exact value and `globalDefault` false; any other name
/// with a value above [`HIGHEST_USER_DEFINABLE_PRIORITY`]; a `preemptionPolicy` other than
/// `PreemptLowerPriority` or `Never`.
pub fn priority_class_problems(
    name: &str,
    value: i32,
    global_default: bool,
    preemption_policy: Option<&str>,
) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if name.starts_with(SYSTEM_PREFIX) {
        let why = match BUILT_IN_CLASSES.iter().find(|(n, _)| *n == name) {
            None => Some(format!("{name} is not a known system priority class")),
            Some((_, v)) if *v != value => {
                Some(format!("value of {name} PriorityClass must be {v}"))
            }
            Some(_) if global_default => Some(format!(
                "globalDefault of {name} PriorityClass must be false"
            )),
            Some(_) => None,
        };
        if let Some(why) = why {
            problems.push((
                "metadata.name",
                format!(
                    "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system \
                     use only. error: {why}"
                ),
            ));
        }
    } else if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        problems.push((
            "value",
            format!(
                "{value}: maximum allowed value of a user defined priority is \
                 {HIGHEST_USER_DEFINABLE_PRIORITY}"
            ),
        ));
    }
    if let Some(policy) = preemption_policy
        && !matches!(policy, "PreemptLowerPriority" | "Never")
    {
        problems.push((
            "preemptionPolicy",
            format!(
                "unsupported value {policy:?}: supported values: \"Never\", \"PreemptLowerPriority\""
            ),
        ));
    }
    problems
}

/// [`priority_class_problems`] of a PriorityClass object, as errors of `object`.
pub fn priority_class_errors(object: &str, class: &PriorityClass) -> Vec<FieldError> {
    priority_class_problems(
        class.metadata.name.as_deref().unwrap_or_default(),
        class.value.unwrap_or(0),
        class.global_default.unwrap_or(false),
        class.preemption_policy.as_deref(),
    )
    .into_iter()
    .map(|(field, text)| FieldError::new(object, field, text))
    .collect()
}

/// The value of the PriorityClass `name`: the known one's, else a built-in one's.
pub fn class_value(name: &str, classes: &PriorityClasses) -> Option<i32> {
    classes.get(name).copied().or_else(|| {
        BUILT_IN_CLASSES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    })
}

/// Resolves a priority string against the known PriorityClasses (and the built-in ones).
pub fn resolve_priority(text: &str, classes: &PriorityClasses) -> Priority {
    let text = text.trim();
    if text.is_empty() {
        return Priority {
            value: 0,
            class: None,
            warning: None,
        };
    }
    if let Ok(number) = text.parse::<i64>() {
        let value = number.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let warning = (i64::from(value) != number)
            .then(|| format!("{number} is outside the i32 range; ordered as {value}"));
        return Priority {
            value,
            class: None,
            warning,
        };
    }
    match class_value(text, classes) {
        Some(value) => Priority {
            value,
            class: Some(Arc::from(text)),
            warning: None,
        },
        None => Priority {
            value: 0,
            class: Some(Arc::from(text)),
            warning: Some(format!(
                "{text:?} is neither an integer nor the name of a PriorityClass; ordered as 0"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_classes_and_unknown_names() {
        let classes = PriorityClasses::from([("high".to_string(), 1000)]);
        assert_eq!(resolve_priority("", &classes).value, 0);
        assert_eq!(resolve_priority(" 7 ", &classes).value, 7);
        assert_eq!(resolve_priority("-3", &classes).value, -3);
        let high = resolve_priority("high", &classes);
        assert_eq!((high.value, high.warning), (1000, None));
        assert_eq!(high.class.as_deref(), Some("high"));
        let urgent = resolve_priority("urgent", &classes);
        assert_eq!(urgent.value, 0);
        assert!(urgent.warning.unwrap().contains("urgent"));
        let critical = resolve_priority("system-node-critical", &classes);
        assert_eq!((critical.value, critical.warning), (2_000_001_000, None));
        let huge = resolve_priority("99999999999", &classes);
        assert_eq!(huge.value, i32::MAX);
        assert!(huge.warning.is_some());
    }

    #[test]
    fn priority_classes_as_the_api_server_validates_them() {
        let fields = |name: &str, value: i32, global: bool, policy: Option<&str>| {
            priority_class_problems(name, value, global, policy)
                .into_iter()
                .map(|(field, _)| field)
                .collect::<Vec<_>>()
        };
        assert!(fields("system-node-critical", 2_000_001_000, false, None).is_empty());
        assert!(fields("system-cluster-critical", 2_000_000_000, false, None).is_empty());
        assert!(fields("high", 1_000_000_000, true, Some("Never")).is_empty());
        assert!(fields("low", i32::MIN, false, Some("PreemptLowerPriority")).is_empty());
        assert_eq!(
            fields("system-node-critical", 5, false, None),
            ["metadata.name"]
        );
        assert_eq!(
            fields("system-cluster-critical", 2_000_000_000, true, None),
            ["metadata.name"]
        );
        assert_eq!(fields("system-mine", 5, false, None), ["metadata.name"]);
        assert_eq!(fields("high", 1_000_000_001, false, None), ["value"]);
        assert_eq!(
            fields("high", 1, false, Some("Always")),
            ["preemptionPolicy"]
        );
        let (_, text) = &priority_class_problems("system-x", 1, false, None)[0];
        assert_eq!(
            text,
            "priority class names with 'system-' prefix are reserved for system use only. error: \
             system-x is not a known system priority class"
        );
    }
}
