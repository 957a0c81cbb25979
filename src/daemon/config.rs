//! The daemon's settings, as the `run` command parses them.

use std::net::SocketAddr;
use std::time::Duration;

use crate::api::JobKind;
use crate::operator::OperatorConfig;
use crate::planner::Policy;

/// Everything `trainscale run` is configured with, besides the Kubernetes client.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    pub policy: Policy,
    pub max_load_desired: f64,
    /// `goodput`: the least relative speedup a trainer must add for a job to grow by it.
    pub min_marginal_speedup: f64,
    /// A progress report not updated for longer is ignored (`progress` policy).
    pub progress_stale_after: Duration,
    /// `progress` policy: the least marginal speedup `s(n+1) − s(n)` a trainer must add.
    pub progress_min_marginal_speedup: f64,
    /// `progress` policy: the least average marginal speedup of trainers given room no job
    /// takes at `progress_min_marginal_speedup`.
    pub progress_spare_min_marginal_speedup: f64,
    /// `progress` policy: how long a job may stay at or below min before it goes first.
    pub starvation_bound: Duration,
    /// Period of the unconditional pass.
    pub interval: Duration,
    /// Delay from the first change seen to the pass it triggers.
    pub debounce: Duration,
    /// Minimum time between two rescales of one job.
    pub cooldown: Duration,
    /// Restrict the namespaced kinds to one namespace.
    pub namespace: Option<String>,
    pub metrics_addr: SocketAddr,
    pub leader_elect: bool,
    pub lease_name: String,
    /// Namespace of the Lease; the pod's own namespace in a cluster.
    pub lease_namespace: String,
    /// Holder identity; the pod name in a cluster.
    pub identity: String,
    pub dry_run: bool,
    /// Upper bound on one job's writes (patch, retries, status, event).
    pub apply_timeout: Duration,
    /// How long each of a pass's job write stages (rescales, then sizing conditions) may start
    /// writes; the jobs left wait for the next pass.
    pub write_deadline: Duration,
    /// Bind the pending pods naming this scheduler to the planned nodes; `None`: size only.
    pub scheduler_name: Option<String>,
    /// How long room planned for a trainer pod not created yet stays held.
    pub reservation_ttl: Duration,
    /// How long a gang (a job below its min-instance) may wait to bind whole before its room is
    /// released for one `reservation_ttl`; zero: no limit.
    pub gang_timeout: Duration,
    /// Upper bound on one pass's scheduling writes (binds, unschedulable reports, Events).
    pub scheduling_deadline: Duration,
    /// Run the operator (creating and finishing TrainingJobs' objects) beside the autoscaler,
    /// only while leader; `None`: autoscaler only. Not started under `dry_run`.
    pub operator: Option<OperatorConfig>,
    /// The job kinds to size (`--kinds`); `None`: TrainingJob and PaddleJob plus each other kind
    /// whose CRD the API server serves (discovery at start, looked up again while absent).
    pub kinds: Option<Vec<JobKind>>,
    /// How often a kind whose CRD is not served is looked up again (without `kinds`).
    pub discovery_interval: Duration,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            policy: Policy::Fulfillment,
            max_load_desired: 0.97,
            min_marginal_speedup: 0.0,
            progress_stale_after: Duration::from_secs(600),
            progress_min_marginal_speedup: crate::planner::progress::DEFAULT_MIN_MARGINAL_SPEEDUP,
            progress_spare_min_marginal_speedup:
                crate::planner::progress::DEFAULT_SPARE_MIN_MARGINAL_SPEEDUP,
            starvation_bound: Duration::from_secs(
                crate::planner::progress::DEFAULT_STARVATION_BOUND_S as u64,
            ),
            interval: Duration::from_secs(30),
            debounce: Duration::from_secs(2),
            cooldown: Duration::from_secs(60),
            namespace: None,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            leader_elect: false,
            lease_name: "trainscale-leader".to_string(),
            lease_namespace: "default".to_string(),
            identity: "trainscale".to_string(),
            dry_run: false,
            apply_timeout: Duration::from_secs(30),
            write_deadline: Duration::from_secs(30),
            scheduler_name: Some("trainscale".to_string()),
            reservation_ttl: Duration::from_secs(60),
            gang_timeout: Duration::from_secs(600),
            scheduling_deadline: Duration::from_secs(5),
            operator: None,
            kinds: None,
            discovery_interval: crate::daemon::watch::DISCOVERY_RECHECK,
        }
    }
}

/// Reservation TTLs a position may stay reserved for a pod that does not come before it is no
/// longer reserved.
pub const UNFILLED_RESERVATIONS: u32 = 3;

/// Parses durations written like `30s`, `500ms`, `2m`, `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration like 30s, 500ms or 2m: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}
