//! The objects a job needs, built as pure functions of the job (a TrainingJob, or a PaddleJob's
//! TrainingJob view), its kind and the configuration.

use crate::api::trainer_job::ANNOTATION_ZERO_TRAINERS;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::DynamicObject;

use super::names::*;
use super::pod::{Role, Scheduling, pod_template, scheduling};
use super::podgroup::pod_group;
use super::{OperatorConfig, OperatorError};
use crate::api::validate::needs_pservers;
use crate::api::{JobKind, LABEL_TRAINER, TrainingJob};

/// Everything the operator creates for one job.
#[derive(Debug, Clone)]
pub struct Desired {
    /// `<name>-trainers`, holding the current trainer count (mounted in every pod).
    pub trainers_config: ConfigMap,
    /// The PodGroup, when `--podgroups` asks for one.
    pub pod_group: Option<DynamicObject>,
    /// `<name>-master` (1 replica), when the job is fault tolerant.
    pub master: Option<ReplicaSet>,
    /// `<name>-pserver` (`pserver.min-instance` replicas), when the job type needs pservers and
    /// `pserver.min-instance` is above 0.
    pub pserver: Option<ReplicaSet>,
    /// `<name>-trainer`, an Indexed Job with `parallelism` = `completions` = trainer min.
    pub trainer: Job,
}

/// `Kind namespace/name` of the `kind` job.
pub fn job_ref(job: &TrainingJob, kind: JobKind) -> String {
    kind.object_ref(&job.namespace().unwrap_or_default(), &job.name_any())
}

/// The controller ownerReference pointing at the `kind` job (deletion cascades through it).
pub fn owner_reference(job: &TrainingJob, kind: JobKind) -> Result<OwnerReference, OperatorError> {
    let uid = job.uid().ok_or_else(|| OperatorError::Missing {
        object: job_ref(job, kind),
        what: "metadata.uid",
    })?;
    Ok(OwnerReference {
        api_version: kind.api_version().to_string(),
        kind: kind.as_str().to_string(),
        name: job.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Metadata of a child object: name, namespace, the job label plus `labels`, the ownerReference.
pub fn child_meta(
    job: &TrainingJob,
    kind: JobKind,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, OperatorError> {
    let namespace = job.namespace().ok_or_else(|| OperatorError::Missing {
        object: job_ref(job, kind),
        what: "metadata.namespace",
    })?;
    let mut all = labels;
    all.insert(LABEL_JOB.to_string(), job.name_any());
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(all),
        owner_references: Some(vec![owner_reference(job, kind)?]),
        ..Default::default()
    })
}

fn replica_set(
    job: &TrainingJob,
    kind: JobKind,
    role: Role,
    name: String,
    replicas: i32,
    sched: &Scheduling,
) -> Result<ReplicaSet, OperatorError> {
    let selector = BTreeMap::from([(role.label().to_string(), job.name_any())]);
    Ok(ReplicaSet {
        metadata: child_meta(job, kind, name, selector.clone())?,
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template: Some(pod_template(job, kind, role, sched)?),
            ..Default::default()
        },
        status: None,
    })
}

/// The trainer Job's `backoffLimit`: 0 when not fault tolerant (any trainer failure fails the
/// job, as the original); otherwise `restart-limit` failures per trainer slot (`max-instance`).
pub fn trainer_backoff_limit(job: &TrainingJob, config: &OperatorConfig) -> i32 {
    if !job.spec.fault_tolerant {
        return 0;
    }
    let slots = job
        .spec
        .trainer
        .max_instance
        .max(job.spec.trainer.min_instance)
        .max(1);
    slots.saturating_mul(config.restart_limit.max(1))
}

/// The trainer Job: Indexed, `parallelism` = `completions` = `trainer.min-instance`. A min of 0
/// creates it held at zero trainers (suspended, counts 1: see [`crate::api::trainer_job`]) —
/// never `completions: 0`, which would complete it at once; under `--kueue` (Kueue owns
/// `suspend`) it starts at one trainer once admitted.
pub fn trainer_job(
    job: &TrainingJob,
    kind: JobKind,
    config: &OperatorConfig,
    sched: &Scheduling,
) -> Result<Job, OperatorError> {
    let min = job.spec.trainer.min_instance;
    let mut labels = BTreeMap::from([(LABEL_TRAINER.to_string(), job.name_any())]);
    let mut annotations = BTreeMap::new();
    if config.kueue {
        let queue = job
            .labels()
            .get(LABEL_KUEUE_QUEUE)
            .cloned()
            .unwrap_or_else(|| "default".to_string());
        labels.insert(LABEL_KUEUE_QUEUE.to_string(), queue);
        annotations.insert(ANNOTATION_KUEUE_ELASTIC.to_string(), "true".to_string());
    }
    let at_zero = min <= 0 && !config.kueue;
    if at_zero {
        annotations.insert(ANNOTATION_ZERO_TRAINERS.to_string(), "true".to_string());
    }
    let count = min.max(1);
    let mut metadata = child_meta(job, kind, trainer_name(&job.name_any()), labels)?;
    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    Ok(Job {
        metadata,
        spec: Some(JobSpec {
            parallelism: Some(count),
            completions: Some(count),
            completion_mode: Some("Indexed".to_string()),
            backoff_limit: Some(trainer_backoff_limit(job, config)),
            pod_replacement_policy: Some("Failed".to_string()),
            pod_failure_policy: Some(ignore_disruptions()),
            suspend: (config.kueue || at_zero).then_some(true),
            template: pod_template(job, kind, Role::Trainer, sched)?,
            ..Default::default()
        }),
        status: None,
    })
}

/// A pod failure policy under which a trainer stopped by a disruption (eviction, preemption,
/// node drain or taint: the pod condition `DisruptionTarget`) is replaced without counting
/// against `backoffLimit`.
pub fn ignore_disruptions() -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "Ignore".to_string(),
            on_exit_codes: None,
            on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                type_: "DisruptionTarget".to_string(),
                status: Some("True".to_string()),
            }]),
        }],
    }
}

/// The `<name>-trainers` ConfigMap with the given trainer count.
pub fn trainers_config(
    job: &TrainingJob,
    kind: JobKind,
    trainers: i32,
) -> Result<ConfigMap, OperatorError> {
    let name = trainers_config_name(&job.name_any());
    Ok(ConfigMap {
        metadata: child_meta(job, kind, name, BTreeMap::new())?,
        data: Some(BTreeMap::from([(
            TRAINERS_KEY.to_string(),
            trainers.to_string(),
        )])),
        ..Default::default()
    })
}

/// Everything the operator creates for the `kind` job `job`; problems name the `kind` object.
pub fn desired(
    job: &TrainingJob,
    kind: JobKind,
    config: &OperatorConfig,
) -> Result<Desired, OperatorError> {
    build(job, kind, config).map_err(|e| e.for_kind(kind))
}

/// Whether `job` gets a pserver ReplicaSet: its type uses pservers and it asks for at least one.
pub fn has_pservers(job: &TrainingJob) -> bool {
    needs_pservers(job) && job.spec.pserver.min_instance > 0
}

fn build(
    job: &TrainingJob,
    kind: JobKind,
    config: &OperatorConfig,
) -> Result<Desired, OperatorError> {
    let sched = scheduling(job, config);
    let name = job.name_any();
    let master = if job.spec.fault_tolerant {
        Some(replica_set(
            job,
            kind,
            Role::Master,
            master_name(&name),
            1,
            &sched,
        )?)
    } else {
        None
    };
    let pserver = if has_pservers(job) {
        Some(replica_set(
            job,
            kind,
            Role::Pserver,
            pserver_name(&name),
            job.spec.pserver.min_instance,
            &sched,
        )?)
    } else {
        None
    };
    Ok(Desired {
        trainers_config: trainers_config(job, kind, job.spec.trainer.min_instance)?,
        pod_group: pod_group(
            job,
            kind,
            config,
            &sched,
            master.is_some(),
            pserver.is_some(),
        )?,
        master,
        pserver,
        trainer: trainer_job(job, kind, config, &sched)?,
    })
}
