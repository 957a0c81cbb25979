//! The objects a TrainingJob needs, built as pure functions of the job and the configuration.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use super::names::*;
use super::pod::{Role, Scheduling, pod_template, scheduling};
use super::podgroup::pod_group;
use super::{OperatorConfig, OperatorError};
use crate::api::validate::needs_pservers;
use crate::api::{LABEL_TRAINER, TrainingJob};

/// Everything the operator creates for one TrainingJob.
#[derive(Debug, Clone)]
pub struct Desired {
    /// `<name>-trainers`, holding the current trainer count (mounted in every pod).
    pub trainers_config: ConfigMap,
    /// The PodGroup, when `--podgroups` asks for one.
    pub pod_group: Option<DynamicObject>,
    /// `<name>-master` (1 replica), when the job is fault tolerant.
    pub master: Option<ReplicaSet>,
    /// `<name>-pserver` (`pserver.min-instance` replicas), when the job type needs pservers.
    pub pserver: Option<ReplicaSet>,
    /// `<name>-trainer`, an Indexed Job with `parallelism` = `completions` = trainer min.
    pub trainer: Job,
}

/// The controller ownerReference pointing at the job (deletion cascades through it).
pub fn owner_reference(job: &TrainingJob) -> Result<OwnerReference, OperatorError> {
    let mut owner = job
        .controller_owner_ref(&())
        .ok_or_else(|| OperatorError::Missing {
            object: job.object_ref(),
            what: "metadata.uid",
        })?;
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

/// Metadata of a child object: name, namespace, the job label plus `labels`, the ownerReference.
pub fn child_meta(
    job: &TrainingJob,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, OperatorError> {
    let namespace = job.namespace().ok_or_else(|| OperatorError::Missing {
        object: job.object_ref(),
        what: "metadata.namespace",
    })?;
    let mut all = labels;
    all.insert(LABEL_JOB.to_string(), job.name_any());
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(all),
        owner_references: Some(vec![owner_reference(job)?]),
        ..Default::default()
    })
}

fn replica_set(
    job: &TrainingJob,
    role: Role,
    name: String,
    replicas: i32,
    sched: &Scheduling,
) -> Result<ReplicaSet, OperatorError> {
    let selector = BTreeMap::from([(role.label().to_string(), job.name_any())]);
    Ok(ReplicaSet {
        metadata: child_meta(job, name, selector.clone())?,
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template: Some(pod_template(job, role, sched)?),
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

/// The trainer Job: Indexed, `parallelism` = `completions` = `trainer.min-instance`.
pub fn trainer_job(
    job: &TrainingJob,
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
    let mut metadata = child_meta(job, trainer_name(&job.name_any()), labels)?;
    metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    Ok(Job {
        metadata,
        spec: Some(JobSpec {
            parallelism: Some(min),
            completions: Some(min),
            completion_mode: Some("Indexed".to_string()),
            backoff_limit: Some(trainer_backoff_limit(job, config)),
            pod_replacement_policy: Some("Failed".to_string()),
            suspend: config.kueue.then_some(true),
            template: pod_template(job, Role::Trainer, sched)?,
            ..Default::default()
        }),
        status: None,
    })
}

/// The `<name>-trainers` ConfigMap with the given trainer count.
pub fn trainers_config(job: &TrainingJob, trainers: i32) -> Result<ConfigMap, OperatorError> {
    Ok(ConfigMap {
        metadata: child_meta(job, trainers_config_name(&job.name_any()), BTreeMap::new())?,
        data: Some(BTreeMap::from([(
            TRAINERS_KEY.to_string(),
            trainers.to_string(),
        )])),
        ..Default::default()
    })
}

/// Everything the operator creates for `job`.
pub fn desired(job: &TrainingJob, config: &OperatorConfig) -> Result<Desired, OperatorError> {
    let sched = scheduling(job, config);
    let name = job.name_any();
    let master = if job.spec.fault_tolerant {
        Some(replica_set(
            job,
            Role::Master,
            master_name(&name),
            1,
            &sched,
        )?)
    } else {
        None
    };
    let pserver = if needs_pservers(job) {
        Some(replica_set(
            job,
            Role::Pserver,
            pserver_name(&name),
            job.spec.pserver.min_instance,
            &sched,
        )?)
    } else {
        None
    };
    Ok(Desired {
        trainers_config: trainers_config(job, job.spec.trainer.min_instance)?,
        pod_group: pod_group(job, config, &sched, master.is_some(), pserver.is_some())?,
        master,
        pserver,
        trainer: trainer_job(job, config, &sched)?,
    })
}
