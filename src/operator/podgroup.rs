//! PodGroups for gang scheduling (reference coscheduling.md §1, §2, §9).
//!
//! `minMember` is the gang minimum — 1 (master, if any) + pserver min + trainer min — and never the
//! current trainer count, so trainers above min are the elastic tail a scale-up adds without a new
//! gang wait. `minResources` is the sum of that gang's requests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Map, Value, json};

use super::names::ANNOTATION_VOLCANO_QUEUE;
use super::pod::{Scheduling, default_master_resources};
use super::resources::child_meta;
use super::{OperatorConfig, OperatorError, PodGroupMode};
use crate::api::{FieldError, JobKind, Quantity, TrainingJob};

/// `scheduleTimeoutSeconds` of scheduler-plugins PodGroups (the plugin's default permit wait).
pub const SCHEDULE_TIMEOUT_SECONDS: i32 = 60;

/// The API resource of a PodGroup kind, or `None` for [`PodGroupMode::None`].
pub fn api_resource(mode: PodGroupMode) -> Option<ApiResource> {
    let (group, version) = match mode {
        PodGroupMode::Volcano => ("scheduling.volcano.sh", "v1beta1"),
        PodGroupMode::SchedulerPlugins => ("scheduling.x-k8s.io", "v1alpha1"),
        PodGroupMode::None => return None,
    };
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, "PodGroup"),
        "podgroups",
    ))
}

/// The gang minimum: 1 (master) + pserver min + trainer min.
pub fn min_member(job: &TrainingJob, has_master: bool, has_pserver: bool) -> i32 {
    let master = i32::from(has_master);
    let pservers = if has_pserver {
        job.spec.pserver.min_instance.max(0)
    } else {
        0
    };
    master + pservers + job.spec.trainer.min_instance.max(0)
}

/// A pod's effective requests: `requests`, with `limits` standing in for names it lacks (as the
/// API server defaults them).
fn effective_requests(
    job: &TrainingJob,
    resources: &ResourceRequirements,
    field: &str,
) -> Result<BTreeMap<String, i128>, FieldError> {
    let mut out = BTreeMap::new();
    for (part, map) in [
        ("limits", resources.limits.as_ref()),
        ("requests", resources.requests.as_ref()),
    ] {
        for (name, q) in map.into_iter().flatten() {
            let nanos = Quantity::parse(&q.0)
                .map_err(|e| {
                    FieldError::new(
                        job.object_ref(),
                        format!("{field}.{part}.{name}"),
                        e.to_string(),
                    )
                })?
                .nanos();
            out.insert(name.clone(), nanos);
        }
    }
    Ok(out)
}

const NANO: i128 = 1_000_000_000;

/// Formats an exact amount as a Kubernetes quantity: binary suffixes for whole multiples of
/// 1024 (except CPU), else units, millis or nanos.
pub fn format_quantity(name: &str, nanos: i128) -> String {
    if nanos % NANO == 0 {
        let units = nanos / NANO;
        if name != "cpu" && units != 0 {
            for (suffix, div) in [("Gi", 1i128 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
                if units % div == 0 {
                    return format!("{}{suffix}", units / div);
                }
            }
        }
        units.to_string()
    } else if nanos % 1_000_000 == 0 {
        format!("{}m", nanos / 1_000_000)
    } else {
        format!("{nanos}n")
    }
}

/// The summed requests of the gang minimum, as a Kubernetes ResourceList.
pub fn min_resources(
    job: &TrainingJob,
    has_master: bool,
    has_pserver: bool,
) -> Result<BTreeMap<String, String>, FieldError> {
    let mut total: BTreeMap<String, i128> = BTreeMap::new();
    let mut add = |requests: BTreeMap<String, i128>, count: i32| {
        for (name, nanos) in requests {
            let slot = total.entry(name).or_default();
            *slot = slot.saturating_add(nanos.saturating_mul(i128::from(count.max(0))));
        }
    };
    if has_master {
        let resources = if job.spec.master.resources == ResourceRequirements::default() {
            default_master_resources()
        } else {
            job.spec.master.resources.clone()
        };
        add(
            effective_requests(job, &resources, "spec.master.resources")?,
            1,
        );
    }
    if has_pserver {
        add(
            effective_requests(job, &job.spec.pserver.resources, "spec.pserver.resources")?,
            job.spec.pserver.min_instance,
        );
    }
    add(
        effective_requests(job, &job.spec.trainer.resources, "spec.trainer.resources")?,
        job.spec.trainer.min_instance,
    );
    Ok(total
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, nanos)| {
            let text = format_quantity(&name, nanos);
            (name, text)
        })
        .collect())
}

/// The PodGroup body for the configured kind, or `None` when PodGroups are off.
pub fn pod_group(
    job: &TrainingJob,
    kind: JobKind,
    config: &OperatorConfig,
    sched: &Scheduling,
    has_master: bool,
    has_pserver: bool,
) -> Result<Option<DynamicObject>, OperatorError> {
    let Some(resource) = api_resource(config.podgroups) else {
        return Ok(None);
    };
    let name = sched.group.clone().unwrap_or_else(|| job.name_any());
    let mut spec = Map::new();
    spec.insert(
        "minMember".into(),
        json!(min_member(job, has_master, has_pserver).max(1)),
    );
    let resources = min_resources(job, has_master, has_pserver)?;
    if !resources.is_empty() {
        spec.insert("minResources".into(), json!(resources));
    }
    match config.podgroups {
        PodGroupMode::Volcano => {
            if let Some(queue) = job.annotations().get(ANNOTATION_VOLCANO_QUEUE)
                && !queue.trim().is_empty()
            {
                spec.insert("queue".into(), json!(queue.trim()));
            }
            if let Some(pc) = &sched.priority_class {
                spec.insert("priorityClassName".into(), json!(pc));
            }
        }
        PodGroupMode::SchedulerPlugins => {
            spec.insert(
                "scheduleTimeoutSeconds".into(),
                json!(SCHEDULE_TIMEOUT_SECONDS),
            );
        }
        PodGroupMode::None => {}
    }
    let mut object =
        DynamicObject::new(&name, &resource).data(json!({ "spec": Value::Object(spec) }));
    object.metadata = child_meta(job, kind, name, BTreeMap::new())?;
    Ok(Some(object))
}
