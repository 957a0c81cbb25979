//! Object names, label, annotation and path constants the operator writes.

/// Label on every object the operator creates, naming the TrainingJob (used to scope watches).
pub const LABEL_JOB: &str = "trainscale.io/job";
/// Pod label of the role (`master`, `pserver`, `trainer`).
pub const LABEL_ROLE: &str = "trainscale.io/role";
/// Volcano: pod annotation naming the PodGroup (the only key the Volcano scheduler reads).
pub const ANNOTATION_VOLCANO_GROUP: &str = "scheduling.k8s.io/group-name";
/// scheduler-plugins Coscheduling: pod **label** naming the PodGroup.
pub const LABEL_SP_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Volcano: pods that must not be chosen as preemption victims (master, pservers).
pub const ANNOTATION_VOLCANO_PREEMPTABLE: &str = "volcano.sh/preemptable";
/// Volcano: TrainingJob annotation naming the Volcano Queue of its PodGroup.
pub const ANNOTATION_VOLCANO_QUEUE: &str = "scheduling.volcano.sh/queue-name";
/// Kueue: the LocalQueue label (read from the TrainingJob, written on the trainer Job).
pub const LABEL_KUEUE_QUEUE: &str = "kueue.x-k8s.io/queue-name";
/// Kueue: opt-in to elastic Jobs (workload slices), an annotation on the trainer Job.
pub const ANNOTATION_KUEUE_ELASTIC: &str = "kueue.x-k8s.io/elastic-job";
/// TrainingJob annotation naming a PriorityClass for the PodGroup and every pod.
pub const ANNOTATION_PRIORITY_CLASS: &str = "trainscale.io/priority-class-name";
/// Pod annotation the Job controller sets on Indexed Job pods.
pub const ANNOTATION_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Key of the trainer count in the trainers ConfigMap.
pub const TRAINERS_KEY: &str = "trainers";
/// Where the trainers ConfigMap is mounted in every pod.
pub const TRAINERS_MOUNT_PATH: &str = "/etc/trainscale";
/// The file holding the current trainer count, read by trainers and pservers.
pub const TRAINERS_FILE: &str = "/etc/trainscale/trainers";
/// Name of the pod volume holding the trainers ConfigMap.
pub const TRAINERS_VOLUME: &str = "trainscale-trainers";
/// Default scheduler name for Volcano PodGroups.
pub const VOLCANO_SCHEDULER: &str = "volcano";
/// Default scheduler name for scheduler-plugins PodGroups (helm "as a second scheduler").
pub const SCHEDULER_PLUGINS_SCHEDULER: &str = "scheduler-plugins-scheduler";

pub use crate::api::names::{master_name, pserver_name, trainer_name, trainers_config_name};
