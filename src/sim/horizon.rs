//! How long a run may go, and how finely it is sampled.
//!
//! A run ends when every job has finished, when nothing can change any more, or at its horizon:
//! the scenario's `horizon_s`, else the trace's last submit plus every job run one after another
//! at one worker, each with a rescale, a cooldown and a tick to spare. The horizon is capped at
//! [`MAX_HORIZON_S`] and at [`MAX_TICKS`] ticks; a trace one of whose jobs cannot finish within
//! the cap even at its max workers is refused, naming the row. Samples are kept at a fixed
//! resolution: one a tick until there are [`MAX_SAMPLES`], then the bucket doubles and
//! neighbouring ticks merge (see `TickSample::merge`).

use super::SimError;
use super::scenario::Scenario;
use super::trace::TraceJob;

/// The longest run, in simulated seconds (about 3.2 years).
pub const MAX_HORIZON_S: f64 = 1e8;
/// The most planner ticks one run may take.
pub const MAX_TICKS: f64 = 5e6;
/// The most samples one run keeps, whatever its length.
pub const MAX_SAMPLES: usize = 100_000;

/// The latest a run under `scenario` may end: [`MAX_HORIZON_S`], or [`MAX_TICKS`] ticks.
pub fn cap_s(scenario: &Scenario) -> f64 {
    MAX_HORIZON_S.min(MAX_TICKS * scenario.interval_s)
}

/// The horizon of a run of `jobs` under `scenario`.
pub fn horizon_s(scenario: &Scenario, jobs: &[TraceJob]) -> f64 {
    let horizon = scenario.horizon_s.unwrap_or_else(|| {
        let last_submit = jobs.iter().map(|j| j.submit_s).fold(0.0, f64::max);
        let one_by_one: f64 = jobs.iter().map(|j| j.work_worker_s).sum();
        let spare = scenario.rescale_cost_s + scenario.cooldown_s as f64 + scenario.interval_s;
        last_submit + one_by_one + jobs.len() as f64 * spare
    });
    horizon.min(cap_s(scenario))
}

/// Refuses a run that cannot end: a `horizon_s` past the cap, or a job that cannot finish
/// within the cap even at its max workers (naming its row).
pub fn check(scenario: &Scenario, jobs: &[TraceJob]) -> Result<(), SimError> {
    let cap = cap_s(scenario);
    let cap_text = format!(
        "the simulator's horizon cap of {cap:e} s (the lesser of {MAX_HORIZON_S:e} s, about 3.2 years, and {MAX_TICKS:e} ticks of interval_s {} s)",
        scenario.interval_s
    );
    if let Some(h) = scenario.horizon_s
        && h > cap
    {
        return Err(SimError::key(
            &scenario.path,
            "horizon_s",
            format!("{h} is past {cap_text}"),
        ));
    }
    for job in jobs {
        let alone = job.work_worker_s / f64::from(job.max_workers.max(1));
        if job.submit_s + alone > cap {
            return Err(SimError::Row {
                path: scenario.trace.path.clone(),
                row: job.row,
                column: "work_worker_s".into(),
                message: format!(
                    "job {} cannot end within {cap_text}: submitted at {:e} s, its {:e} worker-seconds of work take at least {alone:e} s at its max of {} workers",
                    job.id, job.submit_s, job.work_worker_s, job.max_workers
                ),
            });
        }
    }
    Ok(())
}
