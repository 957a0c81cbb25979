//! The names a JobSet's controller derives from its name, as JobSet's validating webhook
//! (`pkg/webhooks/jobset_webhook.go`) and the API server check them: each replicated Job's child
//! Jobs `<jobset>-<replicatedJob>-<jobIndex>` and, Indexed with completions set, their pods
//! `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random>`, DNS-1035 labels; and the
//! elastic replicated Job's pod hostnames at its max (`<child Job>-<max-1>`, a DNS-1123 label, as
//! the API server checks a resized Indexed Job).

use crate::api::names::{JobName, dns1035_label_problems, indexed_hostname_problem, job_name};
use crate::api::{FieldError, JobSet, MAX_REPLICAS_ANNOTATION, ReplicatedJob};

/// The webhook's words for a name past 63 characters.
const JOB_NAME_TOO_LONG: &str =
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters";
const POD_NAME_TOO_LONG: &str =
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters";

/// The webhook's stand-in for the 5 random characters of a pod's name.
const POD_SUFFIX: &str = "-abcde";

/// `dns1035_label_problems` of `name`, its length problem in the webhook's words.
fn webhook_problems(name: &str, too_long: &str) -> Vec<String> {
    dns1035_label_problems(name)
        .into_iter()
        .map(|p| {
            if p.starts_with("must be no more than") {
                too_long.to_string()
            } else {
                p
            }
        })
        .collect()
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
        let problems = webhook_problems(&child, JOB_NAME_TOO_LONG);
        if !problems.is_empty() {
            out.push(FieldError::new(
                object,
                name.field,
                format!(
                    "{} names replicated Job {:?}'s Jobs up to {child:?} ({} characters; \
                     JobSet's webhook wants a DNS-1035 label): {}",
                    name.shown,
                    rjob.name,
                    child.len(),
                    problems.join("; ")
                ),
            ));
            continue;
        }
        let Some(spec) = rjob.template.spec.as_ref() else {
            continue;
        };
        // JobSet's defaulting webhook makes a Job naming no completion mode Indexed.
        let indexed = spec
            .completion_mode
            .as_deref()
            .is_none_or(|m| m == "Indexed");
        let Some(completions) = spec.completions.filter(|_| indexed) else {
            continue;
        };
        let pod = format!("{child}-{}{POD_SUFFIX}", completions - 1);
        let problems = webhook_problems(&pod, POD_NAME_TOO_LONG);
        if !problems.is_empty() {
            out.push(FieldError::new(
                object,
                name.field,
                format!(
                    "{} names replicated Job {:?}'s pods up to {pod:?} ({} characters, \
                     `{POD_SUFFIX}` standing for 5 random ones; JobSet's webhook wants a \
                     DNS-1035 label): {}",
                    name.shown,
                    rjob.name,
                    pod.len(),
                    problems.join("; ")
                ),
            ));
        }
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
