//! The names a JobSet's controller derives from its name, as JobSet's validating webhook
//! (`pkg/webhooks/jobset_webhook.go`) and the API server check them: each replicated Job's child
//! Jobs `<jobset>-<replicatedJob>-<jobIndex>` and, Indexed with completions set, their pods
//! `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random>`, DNS-1035 labels; and the
//! elastic replicated Job's pod hostnames at its max (`<child Job>-<max-1>`, a DNS-1123 label, as
//! the API server checks a resized Indexed Job).

use super::jobset::is_indexed;
use crate::api::names::{JobName, dns1035_label_problems, indexed_hostname_problem, job_name};
use crate::api::{FieldError, JobSet, MAX_REPLICAS_ANNOTATION, ReplicatedJob};

/// The webhook's stand-in for the 5 random characters of a pod's name.
const POD_SUFFIX: &str = "-abcde";

/// A name JobSet's controller derives for a replicated Job's objects.
#[derive(Clone, Copy)]
enum Derived {
    /// Its child Jobs, `<jobset>-<replicatedJob>-<jobIndex>`.
    Jobs,
    /// Their pods, `<child Job>-<podIndex>-<5 random>`.
    Pods,
}

impl Derived {
    /// The webhook's words for such a name past 63 characters.
    fn too_long(self) -> &'static str {
        match self {
            Derived::Jobs => {
                "JobSet name is too long, job names generated for this JobSet will exceed 63 \
                 characters"
            }
            Derived::Pods => {
                "JobSet name is too long, pod names generated for this JobSet will exceed 63 \
                 characters"
            }
        }
    }

    /// What such names are, and what the length counts, for the error.
    fn description(self) -> (&'static str, String) {
        match self {
            Derived::Jobs => ("Jobs", String::new()),
            Derived::Pods => (
                "pods",
                format!(", `{POD_SUFFIX}` standing for 5 random ones"),
            ),
        }
    }
}

/// The error on the JobSet's name field when `derived`, the longest name of `rjob`'s `what`,
/// is not a DNS-1035 label (its length problem in the webhook's words).
fn derived_name_error(
    object: &str,
    name: &JobName,
    rjob: &ReplicatedJob,
    derived: &str,
    what: Derived,
) -> Option<FieldError> {
    let problems: Vec<String> = dns1035_label_problems(derived)
        .into_iter()
        .map(|p| {
            if p.starts_with("must be no more than") {
                what.too_long().to_string()
            } else {
                p
            }
        })
        .collect();
    if problems.is_empty() {
        return None;
    }
    let (objects, counted) = what.description();
    Some(FieldError::new(
        object,
        name.field,
        format!(
            "{} names replicated Job {:?}'s {objects} up to {derived:?} ({} characters{counted}; \
             JobSet's webhook wants a DNS-1035 label): {}",
            name.shown,
            rjob.name,
            derived.len(),
            problems.join("; ")
        ),
    ))
}

/// The child Job of `rjob` with index `index`.
fn child_job(jobset: &str, rjob: &ReplicatedJob, index: i32) -> String {
    format!("{jobset}-{}-{index}", rjob.name)
}

/// What JobSet's webhook refuses on create in the names the JobSet's controller derives from its
/// name (see the module doc), each error on the name's field.
pub fn webhook_name_problems(job: &JobSet, object: &str) -> Vec<FieldError> {
    let Some(name) = job_name(&job.metadata) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for rjob in &job.spec.replicated_jobs {
        let last_job = rjob.replicas.unwrap_or(1) - 1;
        let child = child_job(&name.name, rjob, last_job);
        if let Some(e) = derived_name_error(object, &name, rjob, &child, Derived::Jobs) {
            out.push(e);
            continue;
        }
        let Some(spec) = rjob.template.spec.as_ref() else {
            continue;
        };
        let Some(completions) = spec.completions.filter(|_| is_indexed(spec)) else {
            continue;
        };
        let pod = format!("{child}-{}{POD_SUFFIX}", completions - 1);
        out.extend(derived_name_error(object, &name, rjob, &pod, Derived::Pods));
    }
    out
}

/// The error when the elastic replicated Job `rjob` sized to `max` would give a pod a hostname
/// the API server refuses (its child Job `<jobset>-<rjob>-0` is resized, an Indexed Job).
pub fn max_hostname_problem(
    job: &JobSet,
    object: &str,
    rjob: &ReplicatedJob,
    max: i32,
) -> Option<FieldError> {
    let name = job_name(&job.metadata)?;
    let child = child_job(&name.name, rjob, 0);
    let shown = format!(
        "{}'s replicated Job {:?} (its Job {child:?})",
        name.shown, rjob.name
    );
    let child = JobName {
        name: child,
        field: name.field,
        shown,
    };
    indexed_hostname_problem(
        object,
        &child,
        max.max(1) - 1,
        &format!("at {MAX_REPLICAS_ANNOTATION} {max}, which trainscale sizes it up to"),
    )
}
