//! `trainscale run`: flags, logging, the Kubernetes client, signals; the daemon itself lives in
//! `crate::daemon`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use super::flags;
use super::live::load_config;
use crate::api::JobKind;
use crate::daemon::{self, DaemonConfig};
use crate::operator::{OperatorConfig, PodGroupMode};
use crate::planner::Policy;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Flags of `trainscale run`; each has an environment fallback.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Planning policy.
    #[arg(
        long,
        env = "TRAINSCALE_POLICY",
        value_parser = flags::policy(),
        default_value = "fulfillment"
    )]
    pub policy: Policy,
    /// `edl` policy: the load above which jobs are scaled down, in (0, 1].
    #[arg(long, env = "TRAINSCALE_MAX_LOAD_DESIRED", default_value = "0.97", allow_negative_numbers = true, value_parser = flags::max_load_desired)]
    pub max_load_desired: f64,
    /// `goodput` policy: a job grows only by trainers that each add at least this relative
    /// speedup (`s(n+1)/s(n) − 1`), in [0, 1); 0 lets jobs grow to max-instance.
    #[arg(long, env = "TRAINSCALE_MIN_MARGINAL_SPEEDUP", default_value = "0", allow_negative_numbers = true, value_parser = flags::min_marginal_speedup)]
    pub min_marginal_speedup: f64,
    /// A job's progress report (`trainscale.io/progress`) not updated for longer than this is
    /// ignored, with a warning (e.g. 10m), 1s..7d.
    #[arg(long, env = "TRAINSCALE_PROGRESS_STALE_AFTER", default_value = "10m", value_parser = flags::progress_stale_after)]
    pub progress_stale_after: Duration,
    /// `progress` policy: a job grows only by trainers that each add at least this much speed in
    /// units of one trainer's (`s(n+1) − s(n)`), in [0, 1].
    #[arg(long, env = "TRAINSCALE_PROGRESS_MIN_MARGINAL_SPEEDUP", default_value = "0.9", value_parser = flags::progress_min_marginal_speedup)]
    pub progress_min_marginal_speedup: f64,
    /// `progress` policy: room no job takes at `--progress-min-marginal-speedup` goes to jobs at
    /// their useful size by trainers that add at least this much speed each on average, in
    /// [0, 1] (at or above `--progress-min-marginal-speedup`: none).
    #[arg(long, env = "TRAINSCALE_PROGRESS_SPARE_MIN_MARGINAL_SPEEDUP", default_value = "0.8", value_parser = flags::progress_min_marginal_speedup)]
    pub progress_spare_min_marginal_speedup: f64,
    /// `progress` policy: how long a job may stay at or below min before it goes first (e.g. 4h).
    #[arg(long, env = "TRAINSCALE_STARVATION_BOUND", default_value = "4h", value_parser = flags::starvation_bound)]
    pub starvation_bound: Duration,
    /// Period of the unconditional pass (e.g. 30s, 2m), above zero, at most 24h.
    #[arg(long, env = "TRAINSCALE_INTERVAL", default_value = "30s", value_parser = flags::interval)]
    pub interval: Duration,
    /// Delay from a cluster change to the pass it triggers (e.g. 2s, 500ms), above zero, at most
    /// 1h.
    #[arg(long, env = "TRAINSCALE_DEBOUNCE", default_value = "2s", value_parser = flags::debounce)]
    pub debounce: Duration,
    /// Minimum time between two rescales of one job, at most 7 days.
    #[arg(long, env = "TRAINSCALE_COOLDOWN", default_value = "60s", value_parser = flags::cooldown)]
    pub cooldown: Duration,
    /// Bind the pending pods whose `spec.schedulerName` is this name to the planned nodes (the
    /// operator names it on the pods of jobs that name no scheduler); "" turns the scheduler
    /// role off.
    #[arg(long, env = "TRAINSCALE_SCHEDULER_NAME", default_value = "trainscale", value_parser = flags::Escaped(flags::scheduler_name))]
    pub scheduler_name: String,
    /// How long room planned for a trainer pod not created yet stays held (e.g. 60s), 1s..1h.
    #[arg(long, env = "TRAINSCALE_RESERVATION_TTL", default_value = "60s", value_parser = flags::reservation_ttl)]
    pub reservation_ttl: Duration,
    /// How long a gang (a job below its min-instance) may wait to bind whole before its held
    /// room is released for one reservation TTL (e.g. 10m); 0s: no limit; at most 24h.
    #[arg(long, env = "TRAINSCALE_GANG_TIMEOUT", default_value = "10m", value_parser = flags::gang_timeout)]
    pub gang_timeout: Duration,
    /// Upper bound on one pass's scheduling writes (binds, unschedulable reports, Events); what
    /// is left waits for the next pass. 100ms..10m.
    #[arg(long, env = "TRAINSCALE_SCHEDULING_DEADLINE", default_value = "5s", value_parser = flags::scheduling_deadline)]
    pub scheduling_deadline: Duration,
    /// How long each of one pass's job write stages (rescales, then sizing conditions) may start
    /// writes; the jobs left wait for the next pass, which plans them again. 1s..1h.
    #[arg(long, env = "TRAINSCALE_WRITE_DEADLINE", default_value = "30s", value_parser = flags::write_deadline)]
    pub write_deadline: Duration,
    /// Watch Pods, Jobs and TrainingJobs in this namespace only (Nodes are cluster-wide).
    #[arg(long, env = "TRAINSCALE_NAMESPACE", value_parser = flags::Escaped(flags::namespace))]
    pub namespace: Option<String>,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "TRAINSCALE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the /metrics, /healthz and /readyz port.
    #[arg(long, env = "TRAINSCALE_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Act only while holding the Lease (run several replicas safely).
    #[arg(long, env = "TRAINSCALE_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "TRAINSCALE_LEASE_NAME",
        default_value = "trainscale-leader",
        value_parser = flags::Escaped(flags::object_name)
    )]
    pub lease_name: String,
    /// Namespace of the leader Lease; default: the pod's namespace, else the kubeconfig's.
    #[arg(long, env = "POD_NAMESPACE", value_parser = flags::Escaped(flags::namespace))]
    pub lease_namespace: Option<String>,
    /// Compute and log plans without writing anything.
    #[arg(long, env = "TRAINSCALE_DRY_RUN", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub dry_run: bool,
    /// Log format; the level comes from RUST_LOG (default info).
    #[arg(
        long,
        env = "TRAINSCALE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Run the operator (create TrainingJobs' master/pserver ReplicaSets, trainer Job, ConfigMap,
    /// PodGroup; follow their phase) beside the autoscaler, on the leader only.
    #[arg(long, env = "TRAINSCALE_OPERATOR", num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = clap::ArgAction::Set)]
    pub operator: bool,
    /// The job kinds to size, comma-separated: trainingjob, paddlejob, pytorchtrainingjob,
    /// pytorchjob, job (batch/v1 Jobs that opt in by annotation), jobset. Default: trainingjob,
    /// paddlejob and job, plus each other kind whose CRD the API server serves (looked up at start
    /// and again every minute while absent).
    #[arg(long, env = "TRAINSCALE_KINDS", value_delimiter = ',', num_args = 1.., value_parser = flags::job_kind)]
    pub kinds: Option<Vec<JobKind>>,
    /// Without --kinds: how often a job kind whose CRD is not served is looked up again (e.g.
    /// 60s), 1s..1h.
    #[arg(long, env = "TRAINSCALE_DISCOVERY_INTERVAL", default_value = "60s", value_parser = flags::discovery_interval)]
    pub discovery_interval: Duration,
    #[command(flatten)]
    pub operator_config: OperatorArgs,
}

/// `--podgroups`: which PodGroup kind the operator creates for each TrainingJob.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodGroupFlag {
    /// `scheduling.volcano.sh/v1beta1` PodGroup.
    Volcano,
    /// `scheduling.x-k8s.io/v1alpha1` PodGroup (scheduler-plugins Coscheduling).
    SchedulerPlugins,
    /// No PodGroup.
    #[default]
    None,
}

impl From<PodGroupFlag> for PodGroupMode {
    fn from(flag: PodGroupFlag) -> Self {
        match flag {
            PodGroupFlag::Volcano => PodGroupMode::Volcano,
            PodGroupFlag::SchedulerPlugins => PodGroupMode::SchedulerPlugins,
            PodGroupFlag::None => PodGroupMode::None,
        }
    }
}

/// The operator's flags of `trainscale run` (its [`OperatorConfig`]).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct OperatorArgs {
    /// Create a PodGroup for each TrainingJob (gang = master + pserver min + trainer min).
    #[arg(long = "podgroups", env = "TRAINSCALE_PODGROUPS", value_enum, default_value_t = PodGroupFlag::None)]
    pub podgroups: PodGroupFlag,
    /// Label trainer Jobs for Kueue (queue from the TrainingJob's `kueue.x-k8s.io/queue-name`
    /// label) and mark them elastic.
    #[arg(long, env = "TRAINSCALE_KUEUE", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub kueue: bool,
    /// Fail a job once a pserver container has restarted this many times (0: no limit).
    #[arg(
        long = "restart-limit",
        env = "TRAINSCALE_RESTART_LIMIT",
        default_value_t = OperatorConfig::default().restart_limit,
        allow_negative_numbers = true,
        value_parser = flags::Escaped(flags::restart_limit)
    )]
    pub restart_limit: i32,
    /// Release the pods of finished jobs (scale master/pservers to 0, delete trainer pods).
    #[arg(long, env = "TRAINSCALE_AUTOCLEAN", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub autoclean: bool,
}

impl OperatorArgs {
    /// The operator's configuration from these flags and `run --scheduler-name` (empty: none).
    pub fn config(self, scheduler_name: &str) -> OperatorConfig {
        OperatorConfig {
            podgroups: self.podgroups.into(),
            kueue: self.kueue,
            restart_limit: self.restart_limit,
            autoclean: self.autoclean,
            scheduler_name: Some(scheduler_name.to_string()).filter(|n| !n.is_empty()),
        }
    }
}

/// Exit code when no Kubernetes configuration can be found.
pub const EXIT_NO_CONFIG: u8 = 2;

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format);
    // The watch futures over deep Kubernetes types (a TrainingJob embeds a Job and ReplicaSets)
    // overflowed tokio's default 2 MiB worker stack in unoptimized builds.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(8 * 1024 * 1024)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> anyhow::Result<ExitCode> {
    let kube_config = match load_config(args.kubeconfig.as_ref()).await {
        Ok(c) => c,
        Err(message) => {
            eprintln!("error: {message}");
            return Ok(ExitCode::from(EXIT_NO_CONFIG));
        }
    };
    let lease_namespace = args
        .lease_namespace
        .clone()
        .unwrap_or_else(|| kube_config.default_namespace.clone());
    let identity = identity();
    let client = kube::client::ClientBuilder::try_from(kube_config)
        .context("building the Kubernetes client")?
        .with_layer(&daemon::requests::CountRequestsLayer)
        .with_layer(&daemon::requests::UserAgentLayer::new(&identity))
        .build();
    let config = DaemonConfig {
        policy: args.policy,
        max_load_desired: args.max_load_desired,
        min_marginal_speedup: args.min_marginal_speedup,
        progress_stale_after: args.progress_stale_after,
        progress_min_marginal_speedup: args.progress_min_marginal_speedup,
        progress_spare_min_marginal_speedup: args.progress_spare_min_marginal_speedup,
        starvation_bound: args.starvation_bound,
        interval: args.interval,
        debounce: args.debounce,
        cooldown: args.cooldown,
        namespace: args.namespace,
        metrics_addr: args.metrics_addr,
        leader_elect: args.leader_elect,
        lease_name: args.lease_name,
        lease_namespace,
        identity,
        dry_run: args.dry_run,
        scheduler_name: Some(args.scheduler_name.clone()).filter(|n| !n.is_empty()),
        reservation_ttl: args.reservation_ttl,
        gang_timeout: args.gang_timeout,
        scheduling_deadline: args.scheduling_deadline,
        write_deadline: args.write_deadline,
        discovery_interval: args.discovery_interval,
        kinds: args.kinds.map(|mut kinds| {
            kinds.sort();
            kinds.dedup();
            kinds
        }),
        operator: args
            .operator
            .then(|| args.operator_config.config(&args.scheduler_name)),
        ..DaemonConfig::default()
    };
    let handle = daemon::metrics::install(config.interval * 3).context("installing metrics")?;
    tracing::info!(policy = config.policy.as_str(), interval = ?config.interval, debounce = ?config.debounce, namespace = ?config.namespace, leader_elect = config.leader_elect, scheduler_name = ?config.scheduler_name, dry_run = config.dry_run, operator = config.operator.is_some(), "starting");
    daemon::run(client, config, Some(handle), shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// This replica's Lease identity: the pod name when set, else the host name and process id.
fn identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .map(|name| format!("{name}-{}", std::process::id()))
        .unwrap_or_else(|_| format!("trainscale-{}", std::process::id()))
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        operator: OperatorArgs,
    }

    #[test]
    fn operator_flags_fill_the_operator_config() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).unwrap().operator;
        assert_eq!(parse(&["x"]).config(""), OperatorConfig::default());
        let args = [
            "x",
            "--podgroups",
            "scheduler-plugins",
            "--kueue",
            "--restart-limit",
            "3",
        ];
        assert_eq!(
            parse(&args).config("trainscale"),
            OperatorConfig {
                podgroups: PodGroupMode::SchedulerPlugins,
                kueue: true,
                restart_limit: 3,
                autoclean: false,
                scheduler_name: Some("trainscale".into()),
            }
        );
        assert_eq!(
            parse(&["x", "--podgroups", "volcano"]).config("").podgroups,
            PodGroupMode::Volcano
        );
    }
}
