//! The sizing conditions the autoscaler writes on a job (`AbleToScale`, `ScalingLimited`, shaped
//! as `metav1.Condition` and read the way `kubectl describe hpa` shows an HPA's): in
//! `status.conditions` of the paddlepaddle.org kinds, and as JSON in the `trainscale.io/sizing`
//! annotation of the kinds whose status another operator owns.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Deserializer};

/// The annotation holding the sizing conditions of a job whose status trainscale does not own.
pub const SIZING_ANNOTATION: &str = "trainscale.io/sizing";
/// Whether rescaling is held back (False, reason `Cooldown`).
pub const ABLE_TO_SCALE: &str = "AbleToScale";
/// Whether the job wants more trainers than it can get, or sits at its max.
pub const SCALING_LIMITED: &str = "ScalingLimited";
/// The condition types trainscale writes; any other type on a job is someone else's.
pub const SIZING_TYPES: [&str; 2] = [ABLE_TO_SCALE, SCALING_LIMITED];

/// Whether a condition is one trainscale writes.
pub fn is_sizing(condition: &Condition) -> bool {
    SIZING_TYPES.contains(&condition.type_.as_str())
}

/// The conditions of a `trainscale.io/sizing` annotation; an unreadable value reads as none
/// (the next write replaces it).
pub fn read_annotation(value: &str) -> Vec<Condition> {
    serde_json::from_str::<Vec<serde_json::Value>>(value)
        .map(readable)
        .unwrap_or_default()
}

/// `status.conditions` as written by anyone: an element that is not a readable condition is
/// left out rather than making the whole job unreadable.
pub fn lenient_conditions<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Condition>, D::Error> {
    let values = Option::<Vec<serde_json::Value>>::deserialize(deserializer)?;
    Ok(values.map(readable).unwrap_or_default())
}

fn readable(values: Vec<serde_json::Value>) -> Vec<Condition> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_annotation_and_elements_read_as_none() {
        assert!(read_annotation("not json").is_empty());
        let read = read_annotation(
            r#"[{"type":"ScalingLimited","status":"True","reason":"AtMaxInstance","message":"m",
                "lastTransitionTime":"2026-11-26T00:00:00Z"},{"type":"AbleToScale"}]"#,
        );
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].type_, SCALING_LIMITED);
        assert!(is_sizing(&read[0]));
    }
}
