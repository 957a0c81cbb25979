//! Prometheus metrics: names in one place, the recorder, and the gauges refreshed every pass.

use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use crate::api::{JobKind, Resources, TrainingJobPhase};
use crate::cluster::ClusterState;
use crate::cluster::sync::SyncReport;
use crate::planner::{Reason, ScalePlan};

pub const PASS_DURATION: &str = "trainscale_pass_duration_seconds";
pub const WATCH_EVENT_LAG: &str = "trainscale_watch_event_lag_seconds";
pub const JOBS: &str = "trainscale_jobs";
pub const PLANNED_JOBS: &str = "trainscale_planned_jobs";
pub const SKIPPED_JOBS: &str = "trainscale_jobs_skipped";
pub const TRAINERS_CURRENT: &str = "trainscale_job_trainers_current";
pub const TRAINERS_TARGET: &str = "trainscale_job_trainers_target";
pub const FREE_CPU: &str = "trainscale_cluster_free_cpu_millicores";
pub const FREE_MEMORY: &str = "trainscale_cluster_free_memory_bytes";
pub const FREE_GPU: &str = "trainscale_cluster_free_gpus";
pub const RESCALES: &str = "trainscale_rescales_total";
pub const SIZING_WRITES: &str = "trainscale_sizing_writes_total";
pub const API_ERRORS: &str = "trainscale_api_errors_total";
pub const API_REQUESTS: &str = "trainscale_api_requests_total";
pub const WATCH_RESTARTS: &str = "trainscale_watch_restarts_total";
pub const WATCH_ERRORS: &str = "trainscale_watch_errors_total";
pub const LEADER: &str = "trainscale_leader";
pub const READY: &str = "trainscale_ready";
pub const CACHE_SYNCED: &str = "trainscale_cache_synced";
pub const CACHE_FAILING: &str = "trainscale_cache_failing_seconds";
pub const OPERATOR_RUNNING: &str = "trainscale_operator_running";
pub const BINDS: &str = "trainscale_binds_total";
pub const BIND_LATENCY: &str = "trainscale_pod_bind_latency_seconds";
pub const RESERVATIONS: &str = "trainscale_reservations";
pub const UNSCHEDULABLE_PODS: &str = "trainscale_unschedulable_pods";
pub const GANG_TIMEOUTS: &str = "trainscale_gang_timeouts_total";
pub const SCHEDULING_CUTS: &str = "trainscale_scheduling_cuts_total";
pub const WRITE_STAGE_CUTS: &str = "trainscale_write_stage_cuts_total";
pub const PROGRESS_IGNORED: &str = "trainscale_progress_ignored";
pub const PROGRESS_ESTIMATED: &str = "trainscale_progress_estimated";

/// Installs the global Prometheus recorder. Per-job gauges not refreshed for `stale_after`
/// (deleted jobs) disappear from the output.
pub fn install(stale_after: Duration) -> Result<PrometheusHandle, BuildError> {
    PrometheusBuilder::new()
        .idle_timeout(MetricKindMask::GAUGE, Some(stale_after))
        .set_buckets_for_metric(Matcher::Full(PASS_DURATION.to_string()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(WATCH_EVENT_LAG.to_string()), LAG_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(BIND_LATENCY.to_string()), SECONDS_BUCKETS)?
        .install_recorder()
}

/// Histogram buckets of the pass duration, seconds.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Histogram buckets of the watch event lag, seconds (most events wait for nothing).
const LAG_BUCKETS: &[f64] = &[
    0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// How long a watch event waited to reach the store (held while a pass planned).
pub fn watch_event_lag(lag: Duration) {
    histogram!(WATCH_EVENT_LAG).record(lag.as_secs_f64());
}

/// Whether the operator runs on this replica (1 only on the leader, with the operator enabled).
pub fn operator_running(running: bool) {
    gauge!(OPERATOR_RUNNING).set(if running { 1.0 } else { 0.0 });
}

/// Records one pass's duration.
pub fn pass_duration(elapsed: Duration) {
    histogram!(PASS_DURATION).record(elapsed.as_secs_f64());
}

/// Counts a failed API call by verb (`get`, `patch`, `delete`, `create`).
pub fn api_error(verb: &'static str) {
    counter!(API_ERRORS, "verb" => verb).increment(1);
}

/// Counts a request sent to the API server by verb (`get`, `list`, `watch`, `create`, …) and
/// resource (`pods`, `trainingjobs/status`, …).
pub fn api_request(verb: &'static str, resource: String) {
    counter!(API_REQUESTS, "verb" => verb, "resource" => resource).increment(1);
}

/// Counts a bind by result (`bound`, `moot`, `failed`, `not_sent`, `unknown`: cut off in flight).
pub fn bind(result: &'static str) {
    counter!(BINDS, "result" => result).increment(1);
}

/// Records the time from the watch first showing a pod unbound to its binding.
pub fn bind_latency(latency: Duration) {
    histogram!(BIND_LATENCY).record(latency.as_secs_f64());
}

/// Sets the scheduler role's gauges: reservations held, pods it cannot place.
pub fn scheduling(reservations: usize, unschedulable: usize) {
    gauge!(RESERVATIONS).set(reservations as f64);
    gauge!(UNSCHEDULABLE_PODS).set(unschedulable as f64);
}

/// Counts a gang whose room was released after waiting past `--gang-timeout`.
pub fn gang_timeout() {
    counter!(GANG_TIMEOUTS).increment(1);
}

/// Counts a scheduling stage cut short (`deadline`, `lease_lost`, `shutdown`).
pub fn scheduling_cut(why: &'static str) {
    counter!(SCHEDULING_CUTS, "why" => why).increment(1);
}

/// Counts a job write stage (`rescales`, `sizing`) stopped at `--write-deadline`.
pub fn write_stage_cut(stage: &'static str) {
    counter!(WRITE_STAGE_CUTS, "stage" => stage).increment(1);
}

/// Counts a rescale by result (`True`, `False`, `Unknown`).
pub fn rescale(result: &'static str) {
    counter!(RESCALES, "result" => result).increment(1);
}

/// Counts a write of a job's sizing conditions by result (`True`; `False` refused: conflict or
/// gone; `Unknown`).
pub fn sizing_write(result: &'static str) {
    counter!(SIZING_WRITES, "result" => result).increment(1);
}

/// Counts watch restarts (relists) of a kind.
pub fn watch_restart(kind: &'static str) {
    counter!(WATCH_RESTARTS, "kind" => kind).increment(1);
}

/// Counts watch stream errors of a kind (each is followed by a backoff and a retry).
pub fn watch_error(kind: &'static str) {
    counter!(WATCH_ERRORS, "kind" => kind).increment(1);
}

/// Whether this replica holds the lease.
pub fn leader(is_leader: bool) {
    gauge!(LEADER).set(if is_leader { 1.0 } else { 0.0 });
}

/// Whether the caches are synced.
pub fn ready(is_ready: bool) {
    gauge!(READY).set(if is_ready { 1.0 } else { 0.0 });
}

/// Per watch cache (`resource`): `trainscale_cache_synced` 1 once listed and not failing, else
/// 0; `trainscale_cache_failing_seconds{resource, reason}` how long its current run of errors
/// lasts (only while failing; `reason` is the API server's Status reason, e.g. `Forbidden`).
pub fn caches(report: &SyncReport, now: Instant) {
    for (resource, cache) in report.states() {
        let healthy = cache.synced && cache.failing.is_none();
        gauge!(CACHE_SYNCED, "resource" => resource.clone()).set(if healthy { 1.0 } else { 0.0 });
        if let Some((since, reason)) = &cache.failing {
            let short = reason
                .split(':')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            gauge!(CACHE_FAILING, "resource" => resource, "reason" => short)
                .set(now.saturating_duration_since(*since).as_secs_f64());
        }
    }
}

/// Cluster-wide gauges: jobs by phase and free resources on schedulable nodes.
pub fn observe_state(state: &ClusterState) {
    let phases = [
        TrainingJobPhase::None,
        TrainingJobPhase::Creating,
        TrainingJobPhase::Running,
        TrainingJobPhase::Scaling,
        TrainingJobPhase::Succeed,
        TrainingJobPhase::Failed,
        TrainingJobPhase::Timeout,
    ];
    let mut counts = [0u64; 7];
    for (_, _, info) in state.jobs() {
        if let Some(i) = phases.iter().position(|p| *p == info.phase) {
            counts[i] += 1;
        }
    }
    for (phase, count) in phases.iter().zip(counts) {
        let label = match phase.as_str() {
            "" => "Pending",
            other => other,
        };
        gauge!(JOBS, "phase" => label).set(count as f64);
    }
    gauge!(JOBS, "phase" => "Invalid").set(state.invalid_jobs().count() as f64);
    gauge!(JOBS, "phase" => "LeftAlone").set(state.left_alone_jobs().count() as f64);

    let free = free_resources(state);
    gauge!(FREE_CPU).set(free.cpu_milli as f64);
    gauge!(FREE_MEMORY).set(free.memory as f64);
    gauge!(FREE_GPU).set(free.gpu as f64);
}

/// Jobs not planned because of errors (malformed objects included), by kind.
pub fn skipped_jobs(counts: &std::collections::BTreeMap<JobKind, usize>) {
    for (kind, count) in counts {
        gauge!(SKIPPED_JOBS, "kind" => kind.as_str()).set(*count as f64);
    }
}

/// Free resources summed over schedulable nodes, never negative per node.
pub fn free_resources(state: &ClusterState) -> Resources {
    state
        .nodes()
        .filter(|(_, n)| n.schedulable())
        .map(|(_, n)| n.free())
        .fold(Resources::ZERO, |acc, f| {
            acc + Resources::new(f.cpu_milli.max(0), f.memory.max(0), f.gpu.max(0))
        })
}

/// Per-job trainer gauges from a plan, and the planned jobs per reason (every reason, 0 when
/// none: a bounded set of series).
pub fn observe_plan(plan: &ScalePlan) {
    for reason in Reason::ALL {
        let count = plan.jobs.iter().filter(|j| j.reason == reason).count();
        gauge!(PLANNED_JOBS, "reason" => reason.as_str()).set(count as f64);
    }
    for job in &plan.jobs {
        let labels = [
            ("kind", std::sync::Arc::from(job.key.kind.as_str())),
            ("namespace", job.key.namespace.clone()),
            ("job", job.key.name.clone()),
        ];
        gauge!(TRAINERS_CURRENT, &labels).set(f64::from(job.current));
        gauge!(TRAINERS_TARGET, &labels).set(f64::from(job.target));
    }
}

/// Per pass: jobs whose progress report gave no estimate, by reason, and jobs planned with one.
pub fn progress(ignored: &[crate::cluster::IgnoredProgress], estimated: usize) {
    for reason in crate::api::progress::Ignored::REASONS {
        let n = ignored.iter().filter(|i| i.why.reason() == reason).count();
        gauge!(PROGRESS_IGNORED, "reason" => reason).set(n as f64);
    }
    gauge!(PROGRESS_ESTIMATED).set(estimated as f64);
}
