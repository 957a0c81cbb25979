//! The job-kind seam: one adapter per kind reads its object into the planning model
//! ([`JobInfo`]), says how the kind is resized and where its scale records go. Past the adapters
//! nothing knows the kind: the planner, `ClusterState` and the simulator see only `JobInfo`.
//!
//! The paddlepaddle.org kinds run as trainer batch/v1 Jobs trainscale's operator creates; the
//! other kinds are created by their own operators (or by users) and sized by a field of the job
//! object, their current size read from that field (else from their live worker pods, see
//! [`pods`]).
//!
//! The daemon, the dump reader and `validate` are fed through [`REGISTRY`]: each kind's entry
//! decodes an object of its resource into a [`JobObject`] (or says it is no job of the kind), and
//! carries how the kind is resized, where its records go and which fields name its sizes and
//! priority. Adding a kind means its variant and names in `JobKind`, one adapter module here, its
//! line in [`REGISTRY`], its RBAC in `deploy/` and its tests.

mod batch_job;
mod jobset;
mod jobset_names;
mod paddle_job;
mod pods;
mod pytorch_job;
mod pytorch_training_job;
mod template;
mod training_job;
mod validate;

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::filters::PodConstraints;
use super::objects::{JobInfo, Role};
use crate::api::guard::{Guarded, MalformedJob};
use crate::api::names::job_name_problems;
use crate::api::priority::PriorityClasses;
use crate::api::progress::{PROGRESS_ANNOTATION, Progress, read_progress};
use crate::api::schema::Schema;
use crate::api::sizing::{SIZING_ANNOTATION, read_annotation};
use crate::api::{
    FieldError, JobKey, JobKind, JobSet, PaddleJob, PyTorchJob, PyTorchTrainingJob, TrainingJob,
    TrainingJobPhase,
};

pub use batch_job::{batch_job_phase, job_set_owner};
pub use jobset::jobset_phase;
pub use pods::{PodClaim, pod_claim, sized_pod_owner};
pub use pytorch_job::kubeflow_phase;
pub use pytorch_training_job::t9k_phase;
pub use template::{LastScale, last_scale_annotation};
pub use training_job::training_job_progress;
pub use validate::{check_document, ignored, unchecked_kind};

/// How a kind's trainer count is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// `spec.parallelism` (and `spec.completions` when Indexed) of the batch/v1 trainer Job that
    /// trainscale's operator created for the job and owns through it.
    TrainerJob,
    /// A merge patch of one field of the job object itself (its operator creates and removes the
    /// pods); the path from the object's root.
    Field(&'static [&'static str]),
    /// `parallelism` of a batch/v1 Job spec within the job object and, when that spec is
    /// Indexed, `completions` set equal in the same patch (the elastic Indexed Job rule: the API
    /// server refuses any other change of `completions`). Where the spec is, each object says
    /// ([`SizeAt`]): its own `spec` (a merge patch) or a list element's (a JSON Patch).
    JobSpec,
}

impl Resize {
    /// Whether the size is written on the job object itself (no trainer Job): without a stored
    /// size, its live trainer pods are its size.
    pub const fn on_the_object(self) -> bool {
        !matches!(self, Resize::TrainerJob)
    }
}

/// Where a job object of a kind resized by [`Resize::JobSpec`] keeps its Job spec, as read from
/// the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeAt {
    /// The JSON Pointer of the Job spec holding `parallelism` (`/spec`,
    /// `/spec/replicatedJobs/0/template/spec`).
    pub spec: String,
    /// `completionMode: Indexed`: `completions` is written equal to `parallelism`.
    pub indexed: bool,
    /// The list element the pointer goes through: the pointer of its `name` and the name it
    /// must still have (a JSON Patch `test`); `None` when the pointer crosses no list.
    pub element: Option<(String, String)>,
}

/// Where a kind's scale records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// `status.scale_records.ScaleRecords` of the job object, through its status subresource.
    Status,
    /// The annotation `trainscale.io/last-scale` on the job object, written in the same patch
    /// as the size, plus an Event; never the other operator's status.
    Annotation,
}

/// Which pods claiming a job (see [`PodClaim`]) are its trainers, for kinds whose pods cannot
/// say so themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodRule {
    /// Every pod claiming the job (an elastic Job's pods).
    Trainers,
    /// The pods of this group (a JobSet's elastic replicated Job); the pods of its other groups
    /// are the job's masters (its support role: placed before trainers, see `planner::support`).
    Group(Arc<str>),
}

impl PodRule {
    /// The role of a pod claiming the job from `group`.
    pub fn role(&self, group: Option<&str>) -> Role {
        match self {
            PodRule::Trainers => Role::Trainer,
            PodRule::Group(g) if group == Some(&**g) => Role::Trainer,
            PodRule::Group(_) => Role::Master,
        }
    }
}

/// A job object read into the planning model.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadJob {
    pub key: JobKey,
    pub info: JobInfo,
    /// What the original accepted but the user should know (not the unknown-PriorityClass
    /// warning, which `ClusterState` derives as classes come and go).
    pub warnings: Vec<FieldError>,
}

/// Why a job of a kind trainscale only sizes is not planned (and not an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftAlone {
    /// The field that decides it.
    pub field: &'static str,
    pub why: String,
    /// Whether the daemon says so with an Event (once per resourceVersion); the ordinary cases
    /// (not elastic, paused) are silent.
    pub announce: bool,
}

/// What an adapter reads of an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    Planned(ReadJob),
    LeftAlone(LeftAlone),
}

/// One job kind's adapter.
pub trait JobAdapter:
    ResourceExt + DeserializeOwned + Schema + Debug + Send + Sync + 'static
{
    /// The kind this adapter reads.
    const KIND: JobKind;
    /// How jobs of the kind are resized.
    const RESIZE: Resize;
    /// Where their scale records go.
    const RECORDS: Records;
    /// The fields the kind declares its min, max and size in (the size: where the planning model
    /// reads a job's current size when no trainer Job has one).
    const SIZE_FIELDS: [&'static str; 3];
    /// The field the kind's priority is read from.
    const PRIORITY_FIELD: &'static str;

    /// Whether an object of the kind's resource is a job of the kind at all (a batch/v1 Job only
    /// once it opts in); the others are no jobs, ignored without a word.
    fn selects(meta: &ObjectMeta) -> bool {
        let _ = meta;
        true
    }

    /// The job's key.
    fn job_key(&self) -> JobKey {
        JobKey::of_kind(
            Self::KIND,
            self.namespace().unwrap_or_default(),
            self.name_any(),
        )
    }

    /// Reads the object into the model with its warnings, resolving its priority against
    /// `classes`, or says why it is left alone; the errors when it cannot be planned.
    /// [`JobObject::read`] checks names and types first ([`JobAdapter::name_problems`],
    /// [`JobAdapter::type_problems`]).
    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>>;

    /// What the API server would refuse in the object's name and namespace (see
    /// [`job_name_problems`]). The paddlepaddle.org kinds check theirs in `check_training_job`,
    /// with the names their operator derives.
    fn name_problems(&self) -> Vec<FieldError> {
        job_name_problems(Self::KIND, &self.job_key().object_ref(), self.meta())
    }

    /// What the kind's schema refuses that the types let through (negative replica counts, one
    /// replica type twice), whether or not the job is planned.
    fn type_problems(&self) -> Vec<FieldError> {
        Vec::new()
    }

    /// The scheduling constraints (selectors, affinity, tolerations, ...) of the worker pod
    /// template, for kinds whose workers no trainer Job of trainscale's makes; `None` for the
    /// others (their trainer Job's template is read instead). An unreadable template counts as
    /// unconstrained, as a trainer Job's does.
    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        None
    }

    /// The job's phase in the planning model.
    fn phase(&self) -> TrainingJobPhase;

    /// The conditions the sizing conditions live among: those of the `trainscale.io/sizing`
    /// annotation unless the kind's status holds them.
    fn conditions(&self) -> Vec<Condition> {
        self.annotations()
            .get(SIZING_ANNOTATION)
            .map(|v| read_annotation(v))
            .unwrap_or_default()
    }

    /// Where the object keeps the Job spec it is resized by ([`Resize::JobSpec`] kinds).
    fn size_at(&self) -> Option<SizeAt> {
        None
    }

    /// Which pods claiming the job are its trainers (kinds whose pods are told apart by the job
    /// object, see [`PodClaim`]); `None`: no pod is the job's.
    fn pod_rule(&self) -> Option<PodRule> {
        None
    }

    /// The job's own progress report (see [`crate::api::progress`]): the
    /// `trainscale.io/progress` annotation; kinds with a `status.progress` or `spec.passes` add
    /// theirs. `Ok(None)`: no report; an error names the object and field.
    fn progress(&self) -> Result<Option<Progress>, FieldError> {
        read_progress(
            self.annotations()
                .get(PROGRESS_ANNOTATION)
                .map(String::as_str),
            None,
            None,
            &self.job_key().object_ref(),
        )
    }
}

/// A decoded job object of any kind: what the store, the dump reader and `validate` use of it.
pub trait JobObject: Debug + Send + Sync {
    /// The job's key.
    fn key(&self) -> JobKey;
    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// See [`JobAdapter::read`].
    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>>;
    /// See [`JobAdapter::worker_constraints`].
    fn worker_constraints(&self) -> Option<Arc<PodConstraints>>;
    /// See [`JobAdapter::phase`].
    fn phase(&self) -> TrainingJobPhase;
    /// See [`JobAdapter::conditions`].
    fn conditions(&self) -> Vec<Condition>;
    /// See [`JobAdapter::size_at`].
    fn size_at(&self) -> Option<SizeAt>;
    /// See [`JobAdapter::pod_rule`].
    fn pod_rule(&self) -> Option<PodRule>;
    /// See [`JobAdapter::progress`].
    fn progress(&self) -> Result<Option<Progress>, FieldError>;
}

impl<A: JobAdapter> JobObject for A {
    fn key(&self) -> JobKey {
        JobAdapter::job_key(self)
    }
    fn metadata(&self) -> &ObjectMeta {
        self.meta()
    }
    fn read(&self, classes: &PriorityClasses) -> Result<Reading, Vec<FieldError>> {
        let mut problems = JobAdapter::name_problems(self);
        problems.extend(JobAdapter::type_problems(self));
        let read = JobAdapter::read(self, classes);
        if problems.is_empty() {
            return read;
        }
        if let Err(more) = read {
            for e in more {
                if !problems.contains(&e) {
                    problems.push(e);
                }
            }
        }
        Err(problems)
    }
    fn worker_constraints(&self) -> Option<Arc<PodConstraints>> {
        JobAdapter::worker_constraints(self)
    }
    fn phase(&self) -> TrainingJobPhase {
        JobAdapter::phase(self)
    }
    fn conditions(&self) -> Vec<Condition> {
        JobAdapter::conditions(self)
    }
    fn size_at(&self) -> Option<SizeAt> {
        JobAdapter::size_at(self)
    }
    fn pod_rule(&self) -> Option<PodRule> {
        JobAdapter::pod_rule(self)
    }
    fn progress(&self) -> Result<Option<Progress>, FieldError> {
        JobAdapter::progress(self)
    }
}

/// An object of a kind's resource, decoded: a job (`Ok(Some)`), no job of the kind (`Ok(None)`:
/// a batch/v1 Job that did not opt in), or an object of the kind that does not deserialize.
pub type Decoded = Result<Option<Box<dyn JobObject>>, Box<MalformedJob>>;

/// One registered kind.
#[derive(Debug)]
pub struct KindEntry {
    pub kind: JobKind,
    pub resize: Resize,
    pub records: Records,
    pub size_fields: [&'static str; 3],
    pub priority_field: &'static str,
    /// Decodes an object of the kind's resource.
    pub decode: fn(&Value) -> Decoded,
    /// Whether an object with this metadata is a job of the kind (see [`JobAdapter::selects`]).
    pub selects: fn(&ObjectMeta) -> bool,
}

const fn entry<A: JobAdapter>() -> KindEntry {
    KindEntry {
        kind: A::KIND,
        resize: A::RESIZE,
        records: A::RECORDS,
        size_fields: A::SIZE_FIELDS,
        priority_field: A::PRIORITY_FIELD,
        decode: decode::<A>,
        selects: A::selects,
    }
}

/// Every kind's adapter, in the order of [`JobKind::ALL`]: registering a kind is its line here.
pub static REGISTRY: [KindEntry; JobKind::COUNT] = [
    entry::<TrainingJob>(),
    entry::<PaddleJob>(),
    entry::<PyTorchTrainingJob>(),
    entry::<PyTorchJob>(),
    entry::<Job>(),
    entry::<JobSet>(),
];

/// The registered entry of `kind`.
pub fn registered(kind: JobKind) -> &'static KindEntry {
    &REGISTRY[kind as usize]
}

/// Decodes an object of `kind`'s resource as a watch or a read delivers it.
pub fn decode_dynamic(kind: JobKind, object: DynamicObject) -> Decoded {
    (registered(kind).decode)(&dynamic_value(object))
}

/// An object as the JSON the API server sent (its fields moved, not copied).
fn dynamic_value(object: DynamicObject) -> Value {
    let DynamicObject {
        types,
        metadata,
        data,
    } = object;
    let mut map = match data {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    if let Some(types) = types {
        map.insert("apiVersion".into(), types.api_version.into());
        map.insert("kind".into(), types.kind.into());
    }
    map.insert(
        "metadata".into(),
        serde_json::to_value(metadata).unwrap_or_default(),
    );
    Value::Object(map)
}

fn decode<A: JobAdapter>(value: &Value) -> Decoded {
    match Guarded::<A>::from_value(value).0 {
        Ok(job) => Ok(A::selects(job.meta()).then_some(job as Box<dyn JobObject>)),
        Err(bad) if A::selects(&bad.metadata) => Err(Box::new(bad)),
        Err(_) => Ok(None),
    }
}

/// The constraints of a worker pod template at `field` of `object`.
fn template_constraints(
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
    object: &str,
    field: &str,
) -> Option<Arc<PodConstraints>> {
    let spec = template?.spec.as_ref()?;
    PodConstraints::read(spec, object, &format!("{field}.spec"))
        .ok()
        .map(Arc::new)
}

/// How jobs of `kind` are resized.
pub fn resize_of(kind: JobKind) -> Resize {
    registered(kind).resize
}

/// Where scale records of `kind` go.
pub fn records_of(kind: JobKind) -> Records {
    registered(kind).records
}

/// The fields a kind declares its min, max and size in (the size: where the planning model reads
/// a job's current size when no trainer Job has one).
pub fn size_fields(kind: JobKind) -> [&'static str; 3] {
    registered(kind).size_fields
}

/// The field a kind's priority is read from.
pub fn priority_field(kind: JobKind) -> &'static str {
    registered(kind).priority_field
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_in_the_order_of_the_kinds() {
        for kind in JobKind::ALL {
            assert_eq!(registered(kind).kind, kind);
        }
        assert_eq!(resize_of(JobKind::TrainingJob), Resize::TrainerJob);
        assert_eq!(
            resize_of(JobKind::PyTorchJob),
            Resize::Field(&["spec", "pytorchReplicaSpecs", "Worker", "replicas"])
        );
        assert_eq!(resize_of(JobKind::BatchJob), Resize::JobSpec);
        assert_eq!(records_of(JobKind::JobSet), Records::Annotation);
    }
}
