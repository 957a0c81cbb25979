//! A job's own progress reports (issue 33), read by the `progress` policy.
//!
//! A job reports on its own object, in the annotation `trainscale.io/progress` (any kind) or in
//! `status.progress` (TrainingJob, PaddleJob), a JSON object:
//!
//! ```json
//! {"done": 1200, "total": 5000, "unit": "steps", "updated": "2026-11-27T20:00:00Z",
//!  "since": "2026-11-27T19:55:00Z", "doneAtSince": 900}
//! ```
//!
//! `done` and `total` count the same units (steps, passes, ...); on a TrainingJob or PaddleJob
//! `total` may be left out and is then `spec.passes` (`done` then counts passes). `updated` is
//! when `done` was measured. `since` and `doneAtSince` open the reporter's current measuring
//! window: the rate is `(done − doneAtSince) / (updated − since)` units per second, measured at
//! the job's current size. `trainscale progress` keeps that window (see [`next_report`]).
//!
//! The estimate ([`Progress::estimate`]) is deterministic from the report, the job's current size
//! and speedup curve, and the pass's `now`: one trainer's rate is the measured rate divided by
//! the speedup at the current size, and the remaining one-trainer work is
//! `(total − done) / that rate`. The approximation: a window that spans a rescale is credited
//! wholly to the current size (the reporter restarts its window every `--window`, so the error
//! lasts one window). A report older than the stale limit, one whose `done` went below
//! `doneAtSince` (the job restarted), or one without a window yet gives no estimate.

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::FieldError;

/// The annotation a job reports its progress in.
pub const PROGRESS_ANNOTATION: &str = "trainscale.io/progress";

/// The default stale limit of `run`, `plan` and `explain` (`--progress-stale-after`): 10 min.
pub const DEFAULT_STALE_AFTER_S: i64 = 600;

/// The status field TrainingJob and PaddleJob report their progress in.
pub const PROGRESS_STATUS_FIELD: &str = "status.progress";

/// The field path of the annotation, as errors name it.
pub fn annotation_field() -> String {
    format!("metadata.annotations[\"{PROGRESS_ANNOTATION}\"]")
}

/// Whether `field` (of a warning) is where a job reports its progress.
pub fn is_progress_field(field: &str) -> bool {
    field.starts_with(&annotation_field()) || field.starts_with(PROGRESS_STATUS_FIELD)
}

/// A progress report as written on the object (the JSON of the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressReport {
    /// Units done when `updated` was measured.
    pub done: f64,
    /// Units the job does in all; on a TrainingJob or PaddleJob `spec.passes` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What `done` and `total` count (`steps`, `passes`, ...); informative only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// When `done` was measured (RFC 3339).
    pub updated: String,
    /// When the current measuring window opened (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Units done when the window opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_at_since: Option<f64>,
}

/// A checked report: times in seconds since the epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub done: f64,
    pub total: f64,
    pub unit: Option<String>,
    pub updated: f64,
    /// The window's opening time and count, when the report has one.
    pub window: Option<(f64, f64)>,
    /// `done` went below the last report seen without the window restarting after it: the job
    /// restarted (see [`Progress::after`]).
    pub restarted: bool,
}

/// Why a report gives no estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ignored {
    /// It does not parse (the job's warnings say why).
    Malformed,
    /// Not updated for longer than the stale limit; the age in seconds.
    Stale(f64),
    /// `done` went below `doneAtSince`: the job restarted, its window with it.
    Restarted,
    /// No window of positive length with work done in it yet.
    NoRate,
    /// The job runs no trainer, so no rate is measured at its size.
    NotRunning,
}

impl Ignored {
    /// The `reason` label of `trainscale_progress_ignored`.
    pub fn reason(self) -> &'static str {
        match self {
            Ignored::Malformed => "malformed",
            Ignored::Stale(_) => "stale",
            Ignored::Restarted => "restarted",
            Ignored::NoRate => "no_rate",
            Ignored::NotRunning => "not_running",
        }
    }

    /// Every reason, for zeroing the metric.
    pub const REASONS: [&'static str; 5] =
        ["malformed", "stale", "restarted", "no_rate", "not_running"];

    /// Whether the job should be told (a warning): a stale or malformed report is the
    /// reporter's fault; the others are ordinary moments of a job's life.
    pub fn warns(self) -> bool {
        matches!(self, Ignored::Malformed | Ignored::Stale(_))
    }

    /// What a warning says.
    pub fn describe(self, stale_after_s: i64) -> String {
        match self {
            Ignored::Malformed => "the report does not parse".to_string(),
            Ignored::Stale(age) => format!(
                "not updated for {age:.0}s (more than the {stale_after_s}s allowed); the progress policy plans this job without progress"
            ),
            Ignored::Restarted => "done went below doneAtSince: read as restarted".to_string(),
            Ignored::NoRate => "no measuring window with work done yet".to_string(),
            Ignored::NotRunning => "the job runs no trainer".to_string(),
        }
    }
}

/// The warning a malformed report gives (the job is planned without progress).
pub fn malformed_warning(e: &FieldError) -> FieldError {
    let mut warning = e.clone();
    warning
        .problem
        .push_str("; the progress policy plans this job without progress");
    warning
}

/// Seconds since the epoch of an RFC 3339 time at `field`.
fn seconds_of(text: &str, object: &str, field: &str) -> Result<f64, FieldError> {
    let t: Timestamp = text.trim().parse().map_err(|e| {
        FieldError::new(
            object,
            field,
            format!("{text:?} is not an RFC 3339 time like 2026-01-31T12:00:00Z ({e})"),
        )
    })?;
    Ok(t.as_millisecond() as f64 / 1e3)
}

/// Checks `n` at `field` is a finite number at least 0.
fn count(n: f64, object: &str, field: &str) -> Result<f64, FieldError> {
    if n.is_finite() && n >= 0.0 {
        Ok(n)
    } else {
        Err(FieldError::new(
            object,
            field,
            format!("must be a number at least 0, got {n}"),
        ))
    }
}

impl ProgressReport {
    /// Reads a report from its JSON at `field` of `object`.
    pub fn from_value(value: &Value, object: &str, field: &str) -> Result<Self, FieldError> {
        serde_json::from_value(value.clone()).map_err(|e| {
            FieldError::new(
                object,
                field,
                format!(
                    "not a progress report ({e}); write {{\"done\": N, \"total\": M, \"updated\": \"<RFC 3339>\"}}"
                ),
            )
        })
    }

    /// Reads a report from the annotation's text.
    pub fn parse(text: &str, object: &str) -> Result<Self, FieldError> {
        let field = annotation_field();
        let value: Value = serde_json::from_str(text)
            .map_err(|e| FieldError::new(object, &field, format!("not JSON ({e})")))?;
        Self::from_value(&value, object, &field)
    }

    /// Checks the report; `passes` stands for a missing `total`. Errors name `field` of
    /// `object` and the report's field.
    pub fn check(
        &self,
        passes: Option<i32>,
        object: &str,
        field: &str,
    ) -> Result<Progress, FieldError> {
        let at = |name: &str| format!("{field}.{name}");
        let done = count(self.done, object, &at("done"))?;
        let total = match (self.total, passes) {
            (Some(t), _) => count(t, object, &at("total"))?,
            (None, Some(p)) if p > 0 => f64::from(p),
            (None, _) => {
                return Err(FieldError::new(
                    object,
                    at("total"),
                    "missing (only a TrainingJob or PaddleJob with spec.passes may leave it out)",
                ));
            }
        };
        if total <= 0.0 {
            return Err(FieldError::new(object, at("total"), "must be more than 0"));
        }
        let updated = seconds_of(&self.updated, object, &at("updated"))?;
        let window = match (&self.since, self.done_at_since) {
            (Some(since), Some(d)) => {
                let since = seconds_of(since, object, &at("since"))?;
                let d = count(d, object, &at("doneAtSince"))?;
                if since > updated {
                    return Err(FieldError::new(
                        object,
                        at("since"),
                        "is after updated: a window opens before it is measured",
                    ));
                }
                Some((since, d))
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(FieldError::new(
                    object,
                    at("doneAtSince"),
                    "missing: since and doneAtSince go together",
                ));
            }
            (None, Some(_)) => {
                return Err(FieldError::new(
                    object,
                    at("since"),
                    "missing: since and doneAtSince go together",
                ));
            }
        };
        Ok(Progress {
            done,
            total,
            unit: self.unit.clone(),
            updated,
            window,
            restarted: false,
        })
    }
}

/// Where a job's progress report is, if anywhere: the annotation, else (TrainingJob, PaddleJob)
/// `status.progress`; the newer of the two when both are there. `passes` is `spec.passes` of the
/// kinds that have it. `Ok(None)`: no report.
pub fn read_progress(
    annotation: Option<&str>,
    status: Option<&Value>,
    passes: Option<i32>,
    object: &str,
) -> Result<Option<Progress>, FieldError> {
    let from_annotation = annotation
        .map(|text| ProgressReport::parse(text, object)?.check(passes, object, &annotation_field()))
        .transpose()?;
    let from_status = status
        .filter(|v| !v.is_null())
        .map(|v| {
            ProgressReport::from_value(v, object, PROGRESS_STATUS_FIELD)?.check(
                passes,
                object,
                PROGRESS_STATUS_FIELD,
            )
        })
        .transpose()?;
    Ok(match (from_annotation, from_status) {
        (Some(a), Some(s)) => Some(if s.updated > a.updated { s } else { a }),
        (a, s) => a.or(s),
    })
}

impl Progress {
    /// This report read after `seen`, the last one seen of the same job (the daemon's check
    /// besides the reporter's own): `done` lower than there, in a window that opened before that
    /// report (a writer that did not restart it), reads as a restart, and stays one while the
    /// window stays the same.
    pub fn after(mut self, seen: Option<&Progress>) -> Progress {
        if let Some(seen) = seen {
            let window_kept = self.window.is_none_or(|(since, _)| since <= seen.updated);
            self.restarted = window_kept
                && (self.done < seen.done || (seen.restarted && self.window == seen.window));
        }
        self
    }

    /// The remaining one-trainer seconds (see the module doc) at `now` (seconds since the
    /// epoch), for a job whose speedup at its current size is `speedup_now` (its trainer count
    /// when linear; 0 when it runs none); `stale_after_s` is the stale limit.
    pub fn estimate(&self, now: i64, stale_after_s: i64, speedup_now: f64) -> Result<f64, Ignored> {
        let age = now as f64 - self.updated;
        if age > stale_after_s as f64 {
            return Err(Ignored::Stale(age));
        }
        if self.restarted || self.window.is_some_and(|(_, d)| self.done < d) {
            return Err(Ignored::Restarted);
        }
        let left = (self.total - self.done).max(0.0);
        if left == 0.0 {
            return Ok(0.0);
        }
        let (since, done_at_since) = self.window.ok_or(Ignored::NoRate)?;
        if !(speedup_now.is_finite() && speedup_now > 0.0) {
            return Err(Ignored::NotRunning);
        }
        let elapsed = self.updated - since;
        let worked = self.done - done_at_since;
        if elapsed <= 0.0 || worked <= 0.0 {
            return Err(Ignored::NoRate);
        }
        let per_trainer = worked / elapsed / speedup_now;
        Ok(left / per_trainer)
    }
}

/// The report `trainscale progress` writes at `now` (seconds since the epoch, RFC 3339 text
/// `now_text`) for `done` of `total`, given the report on the object (`previous`, `None` when
/// there is none or it does not parse).
///
/// The measuring window is kept while `done` does not go down and the unit and total stay; it
/// restarts at this report when `done` went down (the job restarted) or the unit or total
/// changed; when it is older than `window_s` it slides to open at the previous report, so the
/// rate is always measured over the last `window_s` or so and a rescale is forgotten within a
/// window.
pub fn next_report(
    previous: Option<&ProgressReport>,
    done: f64,
    total: Option<f64>,
    unit: Option<String>,
    now: f64,
    now_text: &str,
    window_s: f64,
) -> ProgressReport {
    let restart = ProgressReport {
        done,
        total,
        unit: unit.clone(),
        updated: now_text.to_string(),
        since: Some(now_text.to_string()),
        done_at_since: Some(done),
    };
    let Some(prev) = previous else {
        return restart;
    };
    let parse = |t: &str| t.trim().parse::<Timestamp>().ok();
    let (Some(prev_updated), Some(since), Some(at_since)) = (
        parse(&prev.updated),
        prev.since.as_deref().and_then(parse),
        prev.done_at_since,
    ) else {
        return restart;
    };
    if done < prev.done || done < at_since || prev.unit != unit || prev.total != total {
        return restart;
    }
    let secs = |t: Timestamp| t.as_millisecond() as f64 / 1e3;
    let (since, at_since) = if now - secs(since) > window_s && now > secs(prev_updated) {
        (prev.updated.clone(), prev.done)
    } else {
        (prev.since.clone().unwrap_or_default(), at_since)
    };
    ProgressReport {
        done,
        total,
        unit,
        updated: now_text.to_string(),
        since: Some(since),
        done_at_since: Some(at_since),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJ: &str = "TrainingJob ns/a";

    fn report(text: &str) -> Result<Progress, FieldError> {
        read_progress(Some(text), None, None, OBJ).map(|p| p.expect("a report"))
    }

    fn t(s: &str) -> f64 {
        s.parse::<Timestamp>().expect("test time").as_millisecond() as f64 / 1e3
    }

    #[test]
    fn a_good_report_gives_remaining_one_trainer_seconds() {
        let p = report(
            r#"{"done": 1200, "total": 5000, "unit": "steps", "updated": "2026-11-27T20:10:00Z",
                "since": "2026-11-27T20:00:00Z", "doneAtSince": 600}"#,
        )
        .unwrap();
        assert_eq!(p.total, 5000.0);
        assert_eq!(p.unit.as_deref(), Some("steps"));
        // 600 steps in 600 s at speedup 2: one trainer does 0.5 step/s; 3800 left → 7600 s.
        let now = t("2026-11-27T20:11:00Z") as i64;
        let left = p.estimate(now, 600, 2.0).unwrap();
        assert!((left - 7600.0).abs() < 1e-6, "{left}");
        // Done: nothing left, whatever the rate.
        let done =
            report(r#"{"done": 10, "total": 10, "updated": "2026-11-27T20:10:00Z"}"#).unwrap();
        assert_eq!(done.estimate(now, 600, 2.0), Ok(0.0));
    }

    #[test]
    fn malformed_reports_name_the_object_and_field() {
        for (text, field, says) in [
            (
                "{",
                "metadata.annotations[\"trainscale.io/progress\"]",
                "not JSON",
            ),
            (
                r#"{"total": 5, "updated": "2026-11-27T20:10:00Z"}"#,
                "metadata.annotations[\"trainscale.io/progress\"]",
                "missing field `done`",
            ),
            (
                r#"{"done": -1, "total": 5, "updated": "2026-11-27T20:10:00Z"}"#,
                "metadata.annotations[\"trainscale.io/progress\"].done",
                "at least 0",
            ),
            (
                r#"{"done": 1, "total": 0, "updated": "2026-11-27T20:10:00Z"}"#,
                "metadata.annotations[\"trainscale.io/progress\"].total",
                "more than 0",
            ),
            (
                r#"{"done": 1, "updated": "2026-11-27T20:10:00Z"}"#,
                "metadata.annotations[\"trainscale.io/progress\"].total",
                "spec.passes",
            ),
            (
                r#"{"done": 1, "total": 5, "updated": "yesterday"}"#,
                "metadata.annotations[\"trainscale.io/progress\"].updated",
                "RFC 3339",
            ),
            (
                r#"{"done": 1, "total": 5, "updated": "2026-11-27T20:10:00Z", "since": "2026-11-27T20:00:00Z"}"#,
                "metadata.annotations[\"trainscale.io/progress\"].doneAtSince",
                "go together",
            ),
            (
                r#"{"done": 1, "total": 5, "updated": "2026-11-27T20:10:00Z", "since": "2026-11-27T20:20:00Z", "doneAtSince": 0}"#,
                "metadata.annotations[\"trainscale.io/progress\"].since",
                "after updated",
            ),
        ] {
            let e = report(text).unwrap_err();
            assert_eq!(e.object, OBJ, "{text}");
            assert_eq!(e.field, field, "{text}");
            assert!(e.problem.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_stale_report_is_ignored() {
        let p = report(
            r#"{"done": 10, "total": 100, "updated": "2026-11-27T20:00:00Z",
                "since": "2026-11-27T19:50:00Z", "doneAtSince": 0}"#,
        )
        .unwrap();
        let updated = t("2026-11-27T20:00:00Z") as i64;
        assert!(p.estimate(updated + 600, 600, 1.0).is_ok());
        assert_eq!(
            p.estimate(updated + 601, 600, 1.0),
            Err(Ignored::Stale(601.0))
        );
        assert!(Ignored::Stale(601.0).warns());
    }

    #[test]
    fn going_backwards_is_a_restart() {
        // The reporter's own check: done below the window's start.
        let p = report(
            r#"{"done": 5, "total": 100, "updated": "2026-11-27T20:00:00Z",
                "since": "2026-11-27T19:50:00Z", "doneAtSince": 40}"#,
        )
        .unwrap();
        let now = t("2026-11-27T20:00:00Z") as i64;
        assert_eq!(p.estimate(now, 600, 1.0), Err(Ignored::Restarted));
        // The writer restarts its window when done goes down.
        let prev = ProgressReport {
            done: 50.0,
            total: Some(100.0),
            unit: None,
            updated: "2026-11-27T20:00:00Z".into(),
            since: Some("2026-11-27T19:58:00Z".into()),
            done_at_since: Some(40.0),
        };
        let next = next_report(
            Some(&prev),
            5.0,
            Some(100.0),
            None,
            t("2026-11-27T20:01:00Z"),
            "2026-11-27T20:01:00Z",
            300.0,
        );
        assert_eq!(next.since.as_deref(), Some("2026-11-27T20:01:00Z"));
        assert_eq!(next.done_at_since, Some(5.0));
        // A fresh window has no rate yet.
        let fresh = next.check(None, OBJ, "f").unwrap();
        assert_eq!(
            fresh.estimate(t("2026-11-27T20:01:00Z") as i64, 600, 1.0),
            Err(Ignored::NoRate)
        );
    }

    #[test]
    fn done_below_the_last_report_seen_is_a_restart_until_the_window_restarts() {
        let at = |done: i32, since: &str, updated: &str| {
            report(&format!(
                r#"{{"done": {done}, "total": 100, "updated": "{updated}",
                    "since": "{since}", "doneAtSince": 0}}"#
            ))
            .unwrap()
        };
        let first = at(50, "2026-11-27T20:00:00Z", "2026-11-27T20:05:00Z").after(None);
        assert!(!first.restarted);
        // A writer that keeps its window while done drops from 50 to 10.
        let back = at(10, "2026-11-27T20:00:00Z", "2026-11-27T20:06:00Z").after(Some(&first));
        assert!(back.restarted);
        let now = t("2026-11-27T20:06:00Z") as i64;
        assert_eq!(back.estimate(now, 600, 1.0), Err(Ignored::Restarted));
        // Same window, more done: still a restart.
        let on = at(20, "2026-11-27T20:00:00Z", "2026-11-27T20:07:00Z").after(Some(&back));
        assert!(on.restarted);
        // A window opened after the drop: read again.
        let fresh = at(30, "2026-11-27T20:06:30Z", "2026-11-27T20:08:00Z").after(Some(&on));
        assert!(!fresh.restarted);
        // Forward progress in the same window is no restart.
        let forward = at(60, "2026-11-27T20:00:00Z", "2026-11-27T20:06:00Z").after(Some(&first));
        assert!(!forward.restarted);
    }

    #[test]
    fn the_window_is_kept_then_slides() {
        let prev = ProgressReport {
            done: 50.0,
            total: Some(100.0),
            unit: Some("steps".into()),
            updated: "2026-11-27T20:02:00Z".into(),
            since: Some("2026-11-27T20:00:00Z".into()),
            done_at_since: Some(40.0),
        };
        let step = |now: &str| {
            next_report(
                Some(&prev),
                60.0,
                Some(100.0),
                Some("steps".into()),
                t(now),
                now,
                300.0,
            )
        };
        let kept = step("2026-11-27T20:03:00Z");
        assert_eq!(kept.since.as_deref(), Some("2026-11-27T20:00:00Z"));
        assert_eq!(kept.done_at_since, Some(40.0));
        let slid = step("2026-11-27T20:06:00Z");
        assert_eq!(slid.since.as_deref(), Some("2026-11-27T20:02:00Z"));
        assert_eq!(slid.done_at_since, Some(50.0));
        // Another total: a new window.
        let other = next_report(
            Some(&prev),
            60.0,
            Some(200.0),
            Some("steps".into()),
            t("2026-11-27T20:03:00Z"),
            "2026-11-27T20:03:00Z",
            300.0,
        );
        assert_eq!(other.done_at_since, Some(60.0));
    }

    #[test]
    fn passes_stand_for_a_missing_total() {
        let status = serde_json::json!({
            "done": 3, "unit": "passes", "updated": "2026-11-27T20:10:00Z",
            "since": "2026-11-27T20:00:00Z", "doneAtSince": 1
        });
        let p = read_progress(None, Some(&status), Some(10), OBJ)
            .unwrap()
            .unwrap();
        assert_eq!(p.total, 10.0);
        // 2 passes in 600 s on one trainer: 7 left take 2100 s.
        let left = p
            .estimate(t("2026-11-27T20:10:00Z") as i64, 600, 1.0)
            .unwrap();
        assert!((left - 2100.0).abs() < 1e-6, "{left}");
        // A malformed status names status.progress.
        let bad = serde_json::json!({"done": "x", "updated": "2026-11-27T20:10:00Z"});
        let e = read_progress(None, Some(&bad), Some(10), OBJ).unwrap_err();
        assert_eq!(e.field, "status.progress");
        // The newer of annotation and status wins.
        let newer = serde_json::json!({"done": 4, "updated": "2026-11-27T20:20:00Z"});
        let p = read_progress(
            Some(r#"{"done": 3, "updated": "2026-11-27T20:10:00Z"}"#),
            Some(&newer),
            Some(10),
            OBJ,
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.done, 4.0);
    }
}
