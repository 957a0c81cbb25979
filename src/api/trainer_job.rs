//! Zero trainers on a trainer `batch/v1` Job: "no pods now, more later".
//!
//! An Indexed Job with `completions: 0` is complete at once (`succeeded >= completions` and no
//! active pod), so a job at zero trainers would be marked done without having run. Zero is
//! instead `spec.suspend: true` (the Job controller removes its pods, counts none of them as a
//! failure, and creates none until resumed), with `parallelism`/`completions` left at their last
//! positive value and the annotation [`ANNOTATION_ZERO_TRAINERS`] saying the suspension is
//! trainscale's: a Job suspended by anyone else (Kueue, a finished job) keeps its own meaning.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;

/// Set (to `"true"`) on a trainer Job that trainscale suspended because its size is 0.
pub const ANNOTATION_ZERO_TRAINERS: &str = "trainscale.io/zero-trainers";

/// Whether trainscale holds `job` at zero trainers: suspended, with [`ANNOTATION_ZERO_TRAINERS`].
pub fn at_zero_trainers(job: &Job) -> bool {
    let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    held_at_zero(suspended, job.metadata.annotations.as_ref())
}

/// Whether a Job that is `suspended` (or not) with these annotations is held at zero trainers
/// (the rule of [`at_zero_trainers`], for Jobs kept in other shapes).
pub fn held_at_zero(suspended: bool, annotations: Option<&BTreeMap<String, String>>) -> bool {
    let marked = annotations
        .and_then(|a| a.get(ANNOTATION_ZERO_TRAINERS))
        .is_some_and(|v| v == "true");
    suspended && marked
}

/// The trainer count `job` runs: 0 when held at zero, else its `parallelism` (default 1).
pub fn trainer_count(job: &Job) -> i32 {
    let parallelism = job.spec.as_ref().and_then(|s| s.parallelism);
    trainer_count_of(at_zero_trainers(job), parallelism)
}

/// The trainer count of a Job `held` at zero (or not) with this `parallelism` (the rule of
/// [`trainer_count`]).
pub fn trainer_count_of(held: bool, parallelism: Option<i32>) -> i32 {
    if held { 0 } else { parallelism.unwrap_or(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(suspend: Option<bool>, marked: bool, parallelism: i32) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "t", "annotations": if marked {
                serde_json::json!({ANNOTATION_ZERO_TRAINERS: "true"})
            } else {
                serde_json::json!({})
            }},
            "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": suspend,
                     "template": {}},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_suspension_marked_as_ours_is_zero() {
        assert_eq!(trainer_count(&job(Some(true), true, 2)), 0);
        // Kueue's (or a finished job's) suspension keeps the declared size.
        assert_eq!(trainer_count(&job(Some(true), false, 2)), 2);
        // Resumed by someone else: the mark alone is not zero.
        assert_eq!(trainer_count(&job(Some(false), true, 3)), 3);
        assert_eq!(trainer_count(&job(None, false, 4)), 4);
    }
}
