//! What the sized-only kinds share: a replica's per-pod request from its pod template, and the
//! `trainscale.io/last-scale` and `trainscale.io/speedup` annotations.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::api::speedup::{SPEEDUP_ANNOTATION, SpeedupCurve};
use crate::api::validate::{NEEDS_A_REQUEST, requests_anything};
use crate::api::{FieldError, LAST_SCALE_ANNOTATION, Quantity, Resources, parse_resources};
use crate::cluster::objects::{pod_requests, read_speedup};

/// The request of one pod made from `template` (at `field`), as kube-scheduler counts it (see
/// [`pod_requests`]: sidecars added, a limit standing for a missing request, overhead on top).
pub fn template_request(
    template: &PodTemplateSpec,
    object: &str,
    field: &str,
) -> Result<Resources, FieldError> {
    let Some(spec) = template.spec.as_ref() else {
        return Err(FieldError::new(
            object,
            format!("{field}.spec"),
            "the pod template has no spec",
        ));
    };
    if spec.containers.is_empty() {
        return Err(FieldError::new(
            object,
            format!("{field}.spec.containers"),
            "the pod template has no containers",
        ));
    }
    pod_requests(spec, |m| {
        parse_resources(Some(&m.map)).map_err(|(name, e)| {
            FieldError::new(
                object,
                format!("{field}.spec.{}", m.field(name)),
                e.to_string(),
            )
        })
    })
}

/// Checks that a pod made from `template` (at `field`) requests something, as an elastic worker
/// must for the planner to place it: a container or init container asking for any resource (see
/// [`requests_anything`]), or a nonzero overhead. The error names the first container's
/// requests.
pub fn check_requests(
    template: &PodTemplateSpec,
    object: &str,
    field: &str,
) -> Result<(), FieldError> {
    let spec = template.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    let overhead = spec.and_then(|s| s.overhead.as_ref());
    let asks = containers
        .filter_map(|c| c.resources.as_ref())
        .any(requests_anything)
        || overhead
            .into_iter()
            .flatten()
            .any(|(_, q)| Quantity::parse(&q.0).is_ok_and(|q| q != Quantity::ZERO));
    if asks {
        Ok(())
    } else {
        Err(FieldError::new(
            object,
            format!("{field}.spec.containers[0].resources.requests"),
            format!("an elastic worker {NEEDS_A_REQUEST}"),
        ))
    }
}

/// The exact quantities `JobInfo::exact` holds (GPU, CPU, memory) for a request read in whole
/// units.
pub fn exact_of(r: Resources) -> [Quantity; 3] {
    [
        Quantity::from_units(r.gpu),
        Quantity::from_milli(r.cpu_milli),
        Quantity::from_units(r.memory),
    ]
}

/// The value of the `trainscale.io/last-scale` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastScale {
    /// RFC 3339.
    pub time: String,
    pub from: i32,
    pub to: i32,
    /// The planner's reason.
    pub reason: String,
}

/// The annotation's value for a rescale at `time`.
pub fn last_scale_annotation(time: Timestamp, from: i32, to: i32, reason: &str) -> String {
    let record = LastScale {
        time: time.to_string(),
        from,
        to,
        reason: reason.to_string(),
    };
    serde_json::to_string(&record).unwrap_or_default()
}

/// The time of the last rescale from the annotation, seconds since the epoch; an unreadable
/// annotation is a warning and counts as none.
/// The speedup curve the object's `trainscale.io/speedup` annotation declares, and a warning
/// naming the annotation when it does not parse (the job is then planned as linear).
pub fn speedup_of(
    meta: &ObjectMeta,
    object: &str,
) -> (Option<Arc<SpeedupCurve>>, Option<FieldError>) {
    match read_speedup(meta) {
        Ok(curve) => (curve.map(Arc::new), None),
        Err(text) => (
            None,
            Some(FieldError::new(
                object.to_string(),
                format!("metadata.annotations[\"{SPEEDUP_ANNOTATION}\"]"),
                format!("{text}; the goodput policy plans this job as if its speedup were linear"),
            )),
        ),
    }
}

pub fn last_scale_of(meta: &ObjectMeta, object: &str) -> (Option<i64>, Option<FieldError>) {
    let Some(text) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(LAST_SCALE_ANNOTATION))
    else {
        return (None, None);
    };
    let field = format!("metadata.annotations.{LAST_SCALE_ANNOTATION}");
    let parsed = serde_json::from_str::<LastScale>(text)
        .map_err(|e| e.to_string())
        .and_then(|r| r.time.parse::<Timestamp>().map_err(|e| e.to_string()));
    match parsed {
        Ok(t) => (Some(t.as_second()), None),
        Err(e) => (
            None,
            Some(FieldError::new(
                object,
                field,
                format!("unreadable ({e}); the job counts as never rescaled"),
            )),
        ),
    }
}

/// Checks min and max as read from `min_field` and `max_field`.
pub fn check_bounds(
    object: &str,
    (min, min_field): (Option<i32>, &str),
    (max, max_field): (Option<i32>, &str),
) -> Result<(i32, i32), Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut need = |value: Option<i32>, field: &str| match value {
        None => {
            errors.push(FieldError::new(
                object,
                field,
                "required for elastic sizing",
            ));
            0
        }
        Some(v) if v < 0 => {
            errors.push(FieldError::new(object, field, format!("{v} is negative")));
            0
        }
        Some(v) => v,
    };
    let (min, max) = (need(min, min_field), need(max, max_field));
    if errors.is_empty() && min > max {
        errors.push(FieldError::new(
            object,
            min_field,
            format!("{min} is more than {max_field} ({max})"),
        ));
    }
    if errors.is_empty() {
        Ok((min, max))
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_counts_init_containers_and_limits_only_resources() {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "spec": {
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                "limits": {"nvidia.com/gpu": 2}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m"}}}
                ],
                "overhead": {"cpu": "100m"}
            }
        }))
        .unwrap();
        let r = template_request(&template, "X ns/a", "spec.t").unwrap();
        assert_eq!(r, Resources::new(3100, 1 << 30, 2));
    }

    #[test]
    fn template_adds_native_sidecars() {
        // A 2-CPU worker with a 2-CPU sidecar is a 4-CPU pod: two fit on 8 CPUs, not four.
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "spec": {
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}}},
                    {"name": "setup", "resources": {"requests": {"cpu": "3"}}}
                ],
                "containers": [{"name": "w", "resources": {"requests": {"cpu": "2"}}}]
            }
        }))
        .unwrap();
        let r = template_request(&template, "X ns/a", "spec.t").unwrap();
        // max(2 + 2, 3 + 2) CPUs; the sidecar's memory limit stands for its request.
        assert_eq!(r, Resources::new(5000, 1 << 30, 0));
    }

    #[test]
    fn bad_quantity_names_the_field() {
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}
        }))
        .unwrap();
        let e = template_request(&template, "X ns/a", "spec.t").unwrap_err();
        assert_eq!(e.field, "spec.t.spec.containers[0].resources.requests.cpu");
    }

    #[test]
    fn last_scale_round_trips_and_bad_values_warn() {
        let time: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let text = last_scale_annotation(time, 2, 4, "scale-up");
        let meta = ObjectMeta {
            annotations: Some([(LAST_SCALE_ANNOTATION.to_string(), text)].into()),
            ..ObjectMeta::default()
        };
        assert_eq!(last_scale_of(&meta, "X"), (Some(time.as_second()), None));
        let bad = ObjectMeta {
            annotations: Some([(LAST_SCALE_ANNOTATION.to_string(), "yesterday".into())].into()),
            ..ObjectMeta::default()
        };
        let (t, warning) = last_scale_of(&bad, "X");
        assert_eq!(t, None);
        assert!(warning.unwrap().field.ends_with(LAST_SCALE_ANNOTATION));
    }
}
