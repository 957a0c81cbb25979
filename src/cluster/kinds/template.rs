//! What the sized-only kinds share: a replica's per-pod request and priority from its pod
//! template, the `trainscale.io/last-scale` and `trainscale.io/speedup` annotations, and the
//! `trainscale.io/min-replicas` and `max-replicas` annotations the elastic Job and the JobSet opt
//! in with.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::api::TrainingJobPhase;
use crate::api::names::{NameRule, check_name};
use crate::api::priority::{Priority, PriorityClasses, resolve_priority};
use crate::api::speedup::{SPEEDUP_ANNOTATION, SpeedupCurve};
use crate::api::validate::{NEEDS_A_REQUEST, requests_anything, resource_problems};
use crate::api::{
    FieldError, LAST_SCALE_ANNOTATION, MAX_REPLICAS_ANNOTATION, MIN_REPLICAS_ANNOTATION, Quantity,
    Resources, parse_resources,
};
use crate::cluster::objects::{JobInfo, pod_requests, read_speedup};

/// The request of one pod made from `template` (at `field`), as kube-scheduler counts it (see
/// [`pod_requests`]: sidecars added, a limit standing for a missing request, overhead on top);
/// the first error the API server would find in its `schedulerName` or containers' resources.
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
    // The pods' scheduler, a subdomain when set (as a TrainingJob's `spec.schedulerName`).
    if let Some(e) = spec
        .scheduler_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .and_then(|n| {
            check_name(
                object,
                &format!("{field}.spec.schedulerName"),
                n,
                NameRule::Subdomain,
            )
        })
    {
        return Err(e);
    }
    // What the API server refuses in a container's resources, it refuses in the template's pods.
    let lists = [
        ("containers", spec.containers.as_slice()),
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let Some(resources) = c.resources.as_ref() else {
                continue;
            };
            let prefix = format!("{field}.spec.{list}[{i}].resources");
            if let Some(problem) = resource_problems(object, &prefix, resources)
                .into_iter()
                .next()
            {
                return Err(problem);
            }
        }
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

/// The priority of the pods made from `template`: its `priorityClassName` (what Kubernetes orders
/// and preempts them by) resolved against `classes`. A number is no PriorityClass name: only
/// names are resolved.
pub fn template_priority(template: &PodTemplateSpec, classes: &PriorityClasses) -> Priority {
    let class = template
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .unwrap_or_default();
    if class.trim().parse::<i64>().is_ok() {
        resolve_priority("", classes)
    } else {
        resolve_priority(class, classes)
    }
}

/// The error for a count at `field` below 0, as the API server's schema refuses it.
pub fn negative_count(object: &str, field: &str, value: Option<i32>) -> Option<FieldError> {
    value.filter(|v| *v < 0).map(|v| {
        FieldError::new(
            object,
            field,
            format!("must be greater than or equal to 0, got {v}"),
        )
    })
}

/// The errors for list elements at `list[i]` sharing a name (`names` in list order, compared by
/// `same`): one per later element, naming both (`list[0]` and `list[2]`).
pub fn repeated_names<'a>(
    object: &str,
    list: &str,
    what: &str,
    names: impl IntoIterator<Item = &'a str>,
    same: impl Fn(&str, &str) -> bool,
) -> Vec<FieldError> {
    let names: Vec<&str> = names.into_iter().collect();
    let mut out = Vec::new();
    for (j, b) in names.iter().enumerate() {
        if let Some(i) = names[..j].iter().position(|a| same(a, b)) {
            out.push(FieldError::new(
                object,
                format!("{list}[{j}]"),
                format!(
                    "{what} {} again: {list}[{i}] and {list}[{j}] (one spec per {what})",
                    crate::api::names::quoted(b)
                ),
            ));
        }
    }
    out
}

/// The field an annotation is named by in errors: `metadata.annotations[trainscale.io/min-replicas]`.
pub fn annotation_field(name: &str) -> String {
    format!("metadata.annotations[{name}]")
}

/// `metadata.annotations[trainscale.io/min-replicas]`.
pub const MIN_FIELD: &str = "metadata.annotations[trainscale.io/min-replicas]";
/// `metadata.annotations[trainscale.io/max-replicas]`.
pub const MAX_FIELD: &str = "metadata.annotations[trainscale.io/max-replicas]";

/// Whether an object opts in to elastic sizing by annotation: it has `trainscale.io/min-replicas`
/// or `trainscale.io/max-replicas`.
pub fn opted_in(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| {
        a.contains_key(MIN_REPLICAS_ANNOTATION) || a.contains_key(MAX_REPLICAS_ANNOTATION)
    })
}

/// Min and max from the `trainscale.io/min-replicas` and `max-replicas` annotations: both
/// required, integers, 0 <= min <= max; each error names its annotation.
pub fn annotation_bounds(meta: &ObjectMeta, object: &str) -> Result<(i32, i32), Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut number = |name: &str, field: &str| {
        let text = meta.annotations.as_ref().and_then(|a| a.get(name))?;
        match text.trim().parse::<i32>() {
            Ok(v) => Some(v),
            Err(_) => {
                errors.push(FieldError::new(
                    object,
                    field,
                    format!("{text:?} is not an integer"),
                ));
                None
            }
        }
    };
    let min = number(MIN_REPLICAS_ANNOTATION, MIN_FIELD);
    let max = number(MAX_REPLICAS_ANNOTATION, MAX_FIELD);
    if !errors.is_empty() {
        return Err(errors);
    }
    check_bounds(object, (min, MIN_FIELD), (max, MAX_FIELD))
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

/// The planning view of a job sized through one batch/v1 Job spec (a plain Job's own, or a
/// JobSet replicated Job's): the request and priority of the pod template at `field` (checked
/// as the API server would), with the job's `min`, `max` and `phase`.
#[allow(clippy::too_many_arguments)]
pub fn read_job_spec(
    meta: &ObjectMeta,
    object: &str,
    key: crate::api::JobKey,
    spec: &k8s_openapi::api::batch::v1::JobSpec,
    field: &str,
    (min, max): (i32, i32),
    phase: TrainingJobPhase,
    classes: &PriorityClasses,
) -> Result<super::Reading, Vec<FieldError>> {
    let trainer = template_request(&spec.template, object, field).map_err(|e| vec![e])?;
    check_requests(&spec.template, object, field).map_err(|e| vec![e])?;
    let priority = template_priority(&spec.template, classes);
    let (info, warnings) = sized_job_info(
        meta,
        object,
        SizedFields {
            min,
            max,
            stored: spec.parallelism,
            trainer,
            priority: priority.value,
            priority_class: priority.class,
            phase,
        },
    );
    Ok(super::Reading::Planned(super::ReadJob {
        key,
        info,
        warnings,
    }))
}

/// What a sized-only kind's adapter reads of a job besides the annotations every such kind shares.
pub struct SizedFields {
    pub min: i32,
    pub max: i32,
    /// The size its field holds, if set.
    pub stored: Option<i32>,
    pub trainer: Resources,
    pub priority: i32,
    pub priority_class: Option<Arc<str>>,
    pub phase: TrainingJobPhase,
}

/// The planning model's view of a sized-only job: `fields` plus its creation time and its
/// `trainscale.io/last-scale` and `trainscale.io/speedup` annotations, with their warnings.
pub fn sized_job_info(
    meta: &ObjectMeta,
    object: &str,
    fields: SizedFields,
) -> (JobInfo, Vec<FieldError>) {
    let mut warnings = Vec::new();
    let (last_scale, warning) = last_scale_of(meta, object);
    warnings.extend(warning);
    let (speedup, warning) = speedup_of(meta, object);
    warnings.extend(warning);
    let info = JobInfo {
        min: fields.min,
        max: fields.max,
        trainer: fields.trainer,
        exact: exact_of(fields.trainer),
        priority: fields.priority,
        priority_class: fields.priority_class,
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0),
        phase: fields.phase,
        stored_parallelism: fields.stored,
        last_scale,
        speedup,
        progress: None,
    };
    (info, warnings)
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
    fn annotation_bounds_name_the_annotation() {
        let meta = |pairs: &[(&str, &str)]| ObjectMeta {
            annotations: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        };
        let ok = meta(&[
            (MIN_REPLICAS_ANNOTATION, "1"),
            (MAX_REPLICAS_ANNOTATION, " 4 "),
        ]);
        assert!(opted_in(&ok));
        assert_eq!(annotation_bounds(&ok, "Job ns/a"), Ok((1, 4)));
        let only_min = meta(&[(MIN_REPLICAS_ANNOTATION, "1")]);
        let e = annotation_bounds(&only_min, "Job ns/a").unwrap_err();
        assert_eq!(
            e[0].field,
            "metadata.annotations[trainscale.io/max-replicas]"
        );
        assert_eq!(e[0].object, "Job ns/a");
        let word = meta(&[
            (MIN_REPLICAS_ANNOTATION, "two"),
            (MAX_REPLICAS_ANNOTATION, "4"),
        ]);
        let e = annotation_bounds(&word, "Job ns/a").unwrap_err();
        assert_eq!(
            e[0].field,
            "metadata.annotations[trainscale.io/min-replicas]"
        );
        assert!(e[0].to_string().contains("not an integer"), "{}", e[0]);
        let inverted = meta(&[
            (MIN_REPLICAS_ANNOTATION, "5"),
            (MAX_REPLICAS_ANNOTATION, "4"),
        ]);
        let e = annotation_bounds(&inverted, "Job ns/a").unwrap_err();
        assert_eq!(e[0].field, MIN_FIELD);
        let negative = meta(&[
            (MIN_REPLICAS_ANNOTATION, "-1"),
            (MAX_REPLICAS_ANNOTATION, "4"),
        ]);
        assert!(annotation_bounds(&negative, "Job ns/a").is_err());
        assert!(!opted_in(&meta(&[("other", "1")])));
        assert_eq!(annotation_field("x/y"), "metadata.annotations[x/y]");
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
