//! The offline discrete-event simulator behind `trainscale simulate`.
//!
//! It replays a job trace in simulated time against the same [`ClusterState`](crate::cluster::ClusterState)
//! and [`plan`](crate::planner::plan) the daemon uses: jobs arrive as the original operator creates
//! them, a planner pass runs every `interval_s`, trainer pods are bound where the plan placed them
//! or by a model of kube-scheduler, and jobs progress at their speedup while at least `min`
//! trainers are bound.
//!
//! - [`scenario`]: the YAML scenario file.
//! - [`trace`]: the job trace (CSV).
//! - [`speedup`]: speedup models (`pollux`, `pollux-throughput`, `linear`, `amdahl:P`).
//! - [`engine`]: the event loop.
//! - [`horizon`]: how long a run may go and how finely it is sampled.
//! - [`kueue`]: Kueue's admission of the jobs of a scenario's `queues`.
//! - [`scheduler`]: the simulated binding of pods (both ways) and job controller.
//! - [`metrics`]: per-tick samples and per-job outcomes, summarised per policy.
//! - [`report`]: `summary.json`, `timeseries.csv`, `jobs.csv`, the terminal table.
//! - [`plot`]: SVG plots.

pub mod engine;
mod error;
pub mod horizon;
pub mod kueue;
pub mod metrics;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod scheduler;
pub mod speedup;
pub mod trace;

pub use engine::{Engine, RunResult};
pub use error::SimError;
pub use scenario::{Scenario, SchedulerKind};
pub use speedup::SpeedupModel;
pub use trace::TraceJob;

use crate::planner::Policy;

/// Runs every policy of `policies` under each of the scenario's schedulers on a loaded scenario,
/// one after the other (policy-major).
///
/// `progress(policy, jobs_done, jobs_total)` is called as jobs finish.
pub fn run_policies(
    scenario: &Scenario,
    jobs: &[TraceJob],
    speedup: &SpeedupModel,
    policies: &[Policy],
    progress: &mut dyn FnMut(Policy, usize, usize),
) -> Vec<RunResult> {
    policies
        .iter()
        .flat_map(|&policy| scenario.schedulers.iter().map(move |&s| (policy, s)))
        .map(|(policy, scheduler)| {
            let engine = Engine::new(scenario, jobs, speedup, policy, scheduler);
            engine.run(&mut |done, total| progress(policy, done, total))
        })
        .collect()
}

/// Why each trace job that can never run on the scenario's cluster cannot: its worker is larger
/// in some resource than every pool's node, or the nodes together hold fewer workers than its
/// smallest gang (`min_workers`). Such a job ends every run unfinished.
pub fn never_run<'t>(scenario: &Scenario, jobs: &'t [TraceJob]) -> Vec<(&'t TraceJob, String)> {
    jobs.iter()
        .filter_map(|job| {
            let worker = job.worker();
            let held: i64 = scenario
                .node_pools
                .iter()
                .map(|p| worker.fit_count(&p.allocatable).saturating_mul(i64::from(p.count)))
                .fold(0, i64::saturating_add);
            if held >= i64::from(job.min_workers) {
                return None;
            }
            let shape = format!(
                "{} GPU, {} CPU, {} MiB",
                job.gpus_per_worker, job.cpus_per_worker, job.mem_mib_per_worker
            );
            let why = if held == 0 {
                format!("a worker of {shape} fits no node of the cluster")
            } else {
                format!(
                    "the cluster's nodes hold {held} workers of {shape}, fewer than its min_workers {}",
                    job.min_workers
                )
            };
            Some((job, why))
        })
        .collect()
}

/// Loads the scenario's trace and speedup model; with `queues`, checks every trace VC has one.
pub fn load_inputs(scenario: &Scenario) -> Result<(Vec<TraceJob>, SpeedupModel), SimError> {
    let speedup = SpeedupModel::load(&scenario.speedup)?;
    let jobs = trace::load(&scenario.trace)?;
    speedup.check_applications(
        jobs.iter().map(|j| (j.application.as_str(), j.row)),
        &scenario.trace.path,
    )?;
    if let Some(queues) = &scenario.queues {
        queues.check_trace(&scenario.path, jobs.iter().map(|j| (j.vc.as_str(), j.row)))?;
    }
    horizon::check(scenario, &jobs)?;
    Ok((jobs, speedup))
}
