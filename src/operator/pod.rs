//! Pod templates of the three roles: command, env vars, ports, resources, scheduling fields.
//!
//! Env vars follow the original operator (reference edl-autoscaler.md §4.2) plus `TRAINER_ID`
//! (the Indexed Job completion index) and `TRAINERS_FILE` (where the current trainer count is).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Lifecycle;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, ExecAction,
    LifecycleHandler, LocalObjectReference, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::names::*;
use super::{OperatorConfig, PodGroupMode};
use crate::api::validate::needs_pservers;
use crate::api::{
    FieldError, JobKind, LABEL_MASTER, LABEL_PADDLE_JOB, LABEL_PSERVER, LABEL_TRAINER, TrainingJob,
};

/// Image used when `spec.image` is empty (the original's default).
pub const DEFAULT_IMAGE: &str = "paddlepaddle/paddlecloud-job";
/// `spec.port` when unset.
pub const DEFAULT_PORT: i32 = crate::api::validate::DEFAULT_PORT;
/// The etcd sidecar of a master without `etcd-endpoint` (as the original).
pub const ETCD_IMAGE: &str = "m3ngyang/etcd:v3.2.1";

/// One of the three kinds of pod of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Master,
    Pserver,
    Trainer,
}

impl Role {
    /// `master`, `pserver` or `trainer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Pserver => "pserver",
            Role::Trainer => "trainer",
        }
    }

    /// The original's pod label of this role (`paddle-job-master`, `paddle-job-pserver`, `paddle-job`).
    pub fn label(self) -> &'static str {
        match self {
            Role::Master => LABEL_MASTER,
            Role::Pserver => LABEL_PSERVER,
            Role::Trainer => LABEL_TRAINER,
        }
    }
}

/// The scheduling settings shared by every pod of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scheduling {
    /// `spec.schedulerName`, overridden by `annotations.scheduler`, else the PodGroup kind's default.
    pub scheduler_name: Option<String>,
    /// A batch scheduler (named by the job or the PodGroup mode) gang-schedules the pods; not
    /// set for trainscale's own name.
    pub co_scheduled: bool,
    /// The PodGroup pods join: `spec.podGroupName`, else the job's name when PodGroups are created.
    pub group: Option<String>,
    /// From the TrainingJob annotation `trainscale.io/priority-class-name`.
    pub priority_class: Option<String>,
}

impl Scheduling {
    /// Whether the pods are gang-scheduled by a batch scheduler.
    pub fn co_scheduled(&self) -> bool {
        self.co_scheduled || self.group.is_some()
    }
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The scheduling settings of a job under a configuration.
pub fn scheduling(job: &TrainingJob, config: &OperatorConfig) -> Scheduling {
    let default_scheduler = match config.podgroups {
        PodGroupMode::Volcano => Some(VOLCANO_SCHEDULER.to_string()),
        PodGroupMode::SchedulerPlugins => Some(SCHEDULER_PLUGINS_SCHEDULER.to_string()),
        PodGroupMode::None => None,
    };
    let named = non_empty(&job.spec.annotations.scheduler)
        .or_else(|| non_empty(&job.spec.scheduler_name))
        .or(default_scheduler);
    let co_scheduled = named.is_some();
    // A job naming no scheduler gets trainscale's, unless its pods use what trainscale does not
    // evaluate (they keep the default scheduler; `own_scheduler_blockers` says why).
    let scheduler_name = named.or_else(|| {
        config
            .scheduler_name
            .clone()
            .filter(|_| own_scheduler_blockers(job).is_empty())
    });
    let group = non_empty(&job.spec.pod_group_name)
        .or_else(|| (config.podgroups != PodGroupMode::None).then(|| job.name_any()));
    let priority_class = job
        .annotations()
        .get(ANNOTATION_PRIORITY_CLASS)
        .and_then(|s| non_empty(s));
    Scheduling {
        scheduler_name,
        co_scheduled,
        group,
        priority_class,
    }
}

/// Why trainscale cannot bind a job's pods itself: the volumes whose binding it does not evaluate
/// (`persistentVolumeClaim`, `ephemeral`), as warnings naming each volume. Such a job's pods keep
/// the default scheduler and trainscale sizes the job only.
pub fn own_scheduler_blockers(job: &TrainingJob) -> Vec<FieldError> {
    job.spec
        .volumes
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let what = if v.persistent_volume_claim.is_some() {
                "persistentVolumeClaim"
            } else if v.ephemeral.is_some() {
                "ephemeral"
            } else {
                return None;
            };
            Some(FieldError::new(
                job.object_ref(),
                format!("spec.volumes[{i}]"),
                format!(
                    "a {what} volume needs volume binding, which trainscale does not evaluate: the job's pods keep the default scheduler and trainscale only sizes the job"
                ),
            ))
        })
        .collect()
}

/// Container ports of pservers and trainers (reference §4.2 `podPorts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolePorts {
    pub pserver: Vec<i32>,
    pub trainer: Vec<i32>,
}

fn or_default(value: i32, default: i32) -> i32 {
    if value == 0 { default } else { value }
}

fn port_range(first: i32, count: i32) -> Vec<i32> {
    if first <= 0 || count <= 0 {
        return Vec::new();
    }
    (first..first.saturating_add(count))
        .filter(|p| *p <= 65535)
        .collect()
}

/// The ports of each role: legacy jobs put `port..` on pservers (trainers if `is_nccl`); `multi`
/// on pservers (and `trainer_port..` on TensorFlow trainers); `nccl2` `trainer_port..` on trainers.
pub fn role_ports(job: &TrainingJob) -> RolePorts {
    let spec = &job.spec;
    let base = port_range(
        or_default(spec.port, DEFAULT_PORT),
        or_default(spec.ports_num, 1) + or_default(spec.ports_num_for_sparse, 1),
    );
    let trainer_range = port_range(spec.trainer_port, spec.trainer_ports_num);
    match &spec.frame_work {
        None if spec.is_nccl => RolePorts {
            pserver: Vec::new(),
            trainer: base,
        },
        None => RolePorts {
            pserver: base,
            trainer: Vec::new(),
        },
        Some(fw) if fw.job_type == "multi" => RolePorts {
            pserver: base,
            trainer: if fw.name == "tensorflow" {
                trainer_range
            } else {
                Vec::new()
            },
        },
        Some(fw) if fw.job_type == "nccl2" => RolePorts {
            pserver: Vec::new(),
            trainer: trainer_range,
        },
        Some(_) => RolePorts::default(),
    }
}

fn env(name: &str, value: impl ToString) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        value_from: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.to_string(),
            }),
            ..Default::default()
        }),
    }
}

/// `PADDLE_INIT_TRAINER_COUNT`: the GPU request when trainers have a GPU limit, else the CPU
/// request rounded up (at least 1).
fn trainer_count(job: &TrainingJob) -> Result<i64, FieldError> {
    let gpu_limit = job.gpu()?;
    if gpu_limit > 0 {
        let requests = job.spec.trainer.resources.requests.as_ref();
        let mut request = 0;
        for name in crate::api::GPU_RESOURCE_NAMES {
            let q = crate::api::read_quantity(
                requests,
                name,
                &job.object_ref(),
                "spec.trainer.resources.requests",
            )?;
            if q.value_ceil() > 0 {
                request = q.value_ceil();
                break;
            }
        }
        return Ok(if request > 0 { request } else { gpu_limit });
    }
    Ok(job.trainer_cpu_request_quantity()?.value_ceil().max(1))
}

/// The env vars every role gets, in a fixed order.
pub fn common_env(job: &TrainingJob) -> Result<Vec<EnvVar>, FieldError> {
    let spec = &job.spec;
    let trainers = spec.trainer.min_instance;
    let pservers = if needs_pservers(job) {
        spec.pserver.min_instance
    } else {
        0
    };
    Ok(vec![
        env("PADDLE_JOB_NAME", job.name_any()),
        env("TRAINERS", trainers),
        env("TRAINERS_FILE", TRAINERS_FILE),
        env("PSERVERS", pservers),
        env("ENTRY", &spec.trainer.entrypoint),
        env("TOPOLOGY", &spec.trainer.entrypoint),
        env("TRAINER_PACKAGE", &spec.trainer.workspace),
        env("PADDLE_INIT_PORT", or_default(spec.port, DEFAULT_PORT)),
        env("PADDLE_INIT_TRAINER_COUNT", trainer_count(job)?),
        env("PADDLE_INIT_PORTS_NUM", or_default(spec.ports_num, 1)),
        env(
            "PADDLE_INIT_PORTS_NUM_FOR_SPARSE",
            or_default(spec.ports_num_for_sparse, 1),
        ),
        env("PADDLE_INIT_NUM_GRADIENT_SERVERS", trainers),
        env("PADDLE_INIT_NUM_PASSES", or_default(spec.passes, 1)),
        env("PADDLE_INIT_USE_GPU", u8::from(job.need_gpu()?)),
        env("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
        field_env("NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
    ])
}

/// Adds (or replaces, keeping the position) env vars from a role's `envs` map.
fn merge_envs(mut vars: Vec<EnvVar>, user: &BTreeMap<String, String>) -> Vec<EnvVar> {
    for (name, value) in user {
        match vars.iter_mut().find(|v| &v.name == name) {
            Some(v) => *v = env(name, value),
            None => vars.push(env(name, value)),
        }
    }
    vars
}

/// Splits an entrypoint as a POSIX shell would (quotes and escapes honoured).
pub fn split_entrypoint(
    job: &TrainingJob,
    field: &str,
    text: &str,
) -> Result<Vec<String>, FieldError> {
    shell_words::split(text).map_err(|e| {
        FieldError::new(
            job.object_ref(),
            field,
            format!("cannot split {text:?}: {e}"),
        )
    })
}

/// The container command of a role: the user's entrypoint, else the original's `paddle_k8s` verb.
pub fn command(job: &TrainingJob, role: Role) -> Result<Vec<String>, FieldError> {
    let ft = job.spec.fault_tolerant;
    let (field, entry, default) = match role {
        Role::Master => return Ok(vec!["paddle_k8s".into(), "start_master".into()]),
        Role::Pserver => (
            "spec.pserver.entrypoint",
            job.spec.pserver.entrypoint.as_str(),
            if ft {
                "start_new_pserver"
            } else {
                "start_pserver"
            },
        ),
        Role::Trainer => (
            "spec.trainer.entrypoint",
            job.spec.trainer.entrypoint.as_str(),
            if ft {
                "start_new_trainer"
            } else {
                "start_trainer"
            },
        ),
    };
    let words = split_entrypoint(job, field, entry)?;
    if words.is_empty() {
        Ok(vec!["paddle_k8s".into(), default.into()])
    } else {
        Ok(words)
    }
}

/// The per-role fields of the TrainingJob spec, each role its own (the original gave masters and
/// pservers the trainer's tolerations).
struct RoleFields<'a> {
    resources: ResourceRequirements,
    envs: &'a BTreeMap<String, String>,
    grace_period_seconds: Option<i64>,
    pre_stop_cmd: &'a [String],
    tolerations: &'a [Toleration],
    node_selector: &'a BTreeMap<String, String>,
    liveness_probe: &'a Option<Box<Probe>>,
    readiness_probe: &'a Option<Box<Probe>>,
    image_pull_secrets: &'a [LocalObjectReference],
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, KubeQuantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), KubeQuantity(v.to_string())))
        .collect()
}

/// The master's resources when `spec.master.resources` is empty (the original's defaults).
pub fn default_master_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", "1"), ("memory", "500Mi")])),
        limits: Some(quantities(&[("cpu", "2"), ("memory", "1Gi")])),
        ..Default::default()
    }
}

fn role_fields(job: &TrainingJob, role: Role) -> RoleFields<'_> {
    let s = &job.spec;
    match role {
        Role::Master => RoleFields {
            resources: if s.master.resources == ResourceRequirements::default() {
                default_master_resources()
            } else {
                s.master.resources.clone()
            },
            envs: &s.master.envs,
            grace_period_seconds: s.master.grace_period_seconds,
            pre_stop_cmd: &s.master.pre_stop_cmd,
            tolerations: &s.master.tolerations,
            node_selector: &s.master.node_selector,
            liveness_probe: &s.master.liveness_probe,
            readiness_probe: &s.master.readiness_probe,
            // The master has no pull secrets of its own; it runs the job image like the trainers.
            image_pull_secrets: &s.trainer.image_pull_secrets,
        },
        Role::Pserver => RoleFields {
            resources: s.pserver.resources.clone(),
            envs: &s.pserver.envs,
            grace_period_seconds: s.pserver.grace_period_seconds,
            pre_stop_cmd: &s.pserver.pre_stop_cmd,
            tolerations: &s.pserver.tolerations,
            node_selector: &s.pserver.node_selector,
            liveness_probe: &s.pserver.liveness_probe,
            readiness_probe: &s.pserver.readiness_probe,
            image_pull_secrets: &s.pserver.image_pull_secrets,
        },
        Role::Trainer => RoleFields {
            resources: s.trainer.resources.clone(),
            envs: &s.trainer.envs,
            grace_period_seconds: s.trainer.grace_period_seconds,
            pre_stop_cmd: &s.trainer.pre_stop_cmd,
            tolerations: &s.trainer.tolerations,
            node_selector: &s.trainer.node_selector,
            liveness_probe: &s.trainer.liveness_probe,
            readiness_probe: &s.trainer.readiness_probe,
            image_pull_secrets: &s.trainer.image_pull_secrets,
        },
    }
}

/// Whether `value` is a valid label value (63 characters, alphanumeric at both ends).
pub fn valid_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && value
            .chars()
            .next()
            .is_none_or(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .last()
            .is_none_or(|c| c.is_ascii_alphanumeric())
}

fn container_ports(ports: &[i32]) -> Option<Vec<ContainerPort>> {
    (!ports.is_empty()).then(|| {
        ports
            .iter()
            .map(|p| ContainerPort {
                container_port: *p,
                ..Default::default()
            })
            .collect()
    })
}

fn some_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn some_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

/// The pod labels of a role: the original's role label and `priority`, the role, the
/// scheduler-plugins PodGroup label when co-scheduled, and `paddle-job-name` on a PaddleJob's pods.
pub fn pod_labels(
    job: &TrainingJob,
    kind: JobKind,
    role: Role,
    sched: &Scheduling,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(role.label().to_string(), job.name_any());
    if kind == JobKind::PaddleJob {
        labels.insert(LABEL_PADDLE_JOB.to_string(), job.name_any());
    }
    labels.insert(LABEL_ROLE.to_string(), role.as_str().to_string());
    let priority = job.spec.annotations.priority.trim();
    if !priority.is_empty() && valid_label_value(priority) {
        labels.insert("priority".to_string(), priority.to_string());
    }
    if let Some(group) = &sched.group {
        labels.insert(LABEL_SP_POD_GROUP.to_string(), group.clone());
    }
    labels
}

/// The pod template of a role of a `kind` job.
pub fn pod_template(
    job: &TrainingJob,
    kind: JobKind,
    role: Role,
    sched: &Scheduling,
) -> Result<PodTemplateSpec, FieldError> {
    let spec = &job.spec;
    let fields = role_fields(job, role);
    let name = job.name_any();

    let mut annotations = BTreeMap::new();
    if let Some(group) = &sched.group {
        annotations.insert(ANNOTATION_VOLCANO_GROUP.to_string(), group.clone());
    }
    if role != Role::Trainer && sched.co_scheduled() {
        annotations.insert(
            ANNOTATION_VOLCANO_PREEMPTABLE.to_string(),
            "false".to_string(),
        );
    }
    if role == Role::Trainer && !spec.annotations.priority.trim().is_empty() {
        annotations.insert(
            "priority".to_string(),
            spec.annotations.priority.trim().to_string(),
        );
    }

    let mut env = common_env(job)?;
    if role == Role::Trainer {
        env.push(field_env(
            "TRAINER_ID",
            &format!("metadata.annotations['{ANNOTATION_COMPLETION_INDEX}']"),
        ));
    }
    let env = merge_envs(env, fields.envs);

    let ports = role_ports(job);
    let ports = match role {
        Role::Master => vec![8080],
        Role::Pserver => ports.pserver,
        Role::Trainer => ports.trainer,
    };

    let mut volumes = spec.volumes.clone();
    volumes.push(Volume {
        name: TRAINERS_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: trainers_config_name(&name),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut mounts = spec.volume_mounts.clone();
    mounts.push(VolumeMount {
        name: TRAINERS_VOLUME.to_string(),
        mount_path: TRAINERS_MOUNT_PATH.to_string(),
        read_only: Some(true),
        ..Default::default()
    });

    let lifecycle = match (fields.grace_period_seconds, fields.pre_stop_cmd.is_empty()) {
        (Some(_), false) => Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(fields.pre_stop_cmd.to_vec()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        _ => None,
    };

    let image = non_empty(&spec.image).unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let mut containers = vec![Container {
        name: role.as_str().to_string(),
        image: Some(image),
        command: Some(command(job, role)?),
        env: Some(env),
        resources: (fields.resources != ResourceRequirements::default())
            .then(|| fields.resources.clone()),
        ports: container_ports(&ports),
        volume_mounts: Some(mounts),
        liveness_probe: fields.liveness_probe.as_deref().cloned(),
        readiness_probe: fields.readiness_probe.as_deref().cloned(),
        lifecycle,
        ..Default::default()
    }];
    if role == Role::Master && spec.master.etcd_endpoint.trim().is_empty() {
        containers.push(etcd_sidecar());
    }

    Ok(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels(job, kind, role, sched)),
            annotations: some_map(annotations),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers,
            restart_policy: Some(
                if role == Role::Trainer {
                    "Never"
                } else {
                    "Always"
                }
                .to_string(),
            ),
            scheduler_name: sched.scheduler_name.clone(),
            priority_class_name: sched.priority_class.clone(),
            host_network: spec.host_network.then_some(true),
            dns_policy: spec
                .host_network
                .then(|| "ClusterFirstWithHostNet".to_string()),
            tolerations: some_vec(fields.tolerations.to_vec()),
            node_selector: some_map(fields.node_selector.clone()),
            termination_grace_period_seconds: fields.grace_period_seconds,
            image_pull_secrets: some_vec(fields.image_pull_secrets.to_vec()),
            volumes: Some(volumes),
            ..Default::default()
        }),
    })
}

fn etcd_sidecar() -> Container {
    Container {
        name: "etcd".to_string(),
        image: Some(ETCD_IMAGE.to_string()),
        command: Some(
            [
                "etcd",
                "--name",
                "etcd0",
                "--advertise-client-urls",
                "http://$(POD_IP):2379",
                "--listen-client-urls",
                "http://0.0.0.0:2379",
            ]
            .map(String::from)
            .to_vec(),
        ),
        env: Some(vec![field_env("POD_IP", "status.podIP")]),
        ports: container_ports(&[2379]),
        ..Default::default()
    }
}
