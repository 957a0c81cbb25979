//! The planning view of the jobs' progress reports: each pass (the daemon's, `plan`'s and
//! `explain`'s, at their `now`) turns the reports read from the objects into
//! [`JobInfo::progress`](crate::cluster::JobInfo::progress) estimates, so the planner stays pure.

use super::ClusterState;
use crate::api::progress::{Ignored, annotation_field};
use crate::api::speedup::SpeedupCurve;
use crate::api::{FieldError, JobKey};
use crate::cluster::ProgressEstimate;

/// A planned job whose report gave no estimate at this pass.
#[derive(Debug, Clone, PartialEq)]
pub struct IgnoredProgress {
    pub key: JobKey,
    pub why: Ignored,
    /// What to tell the job's owner, for the reasons that warn ([`Ignored::warns`]); a
    /// malformed report's warning is among the job's spec warnings already, so not here.
    pub warning: Option<FieldError>,
}

impl ClusterState {
    /// Sets every planned job's [`JobInfo::progress`](crate::cluster::JobInfo::progress) from
    /// its report at `now` (seconds since the epoch), a report older than `stale_after_s`
    /// ignored; returns the jobs with a report that gave no estimate. The rate is credited to
    /// the trainers bound now (the job's current size while none is bound).
    pub fn estimate_progress(&mut self, now: i64, stale_after_s: i64) -> Vec<IgnoredProgress> {
        let mut ignored = Vec::new();
        let cap = self.size_cap();
        for (key, slot) in self.jobs.iter_mut() {
            let current = slot.current().min(cap);
            let bound = i32::try_from(slot.trainers.bound)
                .unwrap_or(i32::MAX)
                .min(cap);
            let Some(info) = slot.info.as_mut() else {
                continue;
            };
            let n = if bound > 0 { bound } else { current };
            let speedup = if n <= 0 {
                0.0
            } else {
                SpeedupCurve::speedup_of(info.speedup.as_deref(), n)
            };
            let estimate = match &slot.progress {
                None => {
                    info.progress = None;
                    continue;
                }
                Some(Err(_)) => Err(Ignored::Malformed),
                Some(Ok(report)) => report.estimate(now, stale_after_s, speedup),
            };
            match estimate {
                Ok(remaining_worker_s) => {
                    info.progress = Some(ProgressEstimate { remaining_worker_s });
                }
                Err(why) => {
                    info.progress = None;
                    let warning = (why.warns() && why != Ignored::Malformed).then(|| {
                        FieldError::new(
                            key.object_ref(),
                            annotation_field(),
                            why.describe(stale_after_s),
                        )
                    });
                    ignored.push(IgnoredProgress {
                        key: key.clone(),
                        why,
                        warning,
                    });
                }
            }
        }
        ignored
    }
}
