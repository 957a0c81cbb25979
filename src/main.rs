//! The `trainscale` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use trainscale::commands::{self, OutputFormat};
use trainscale::planner::{PlannerConfig, Policy};

/// Elastic scheduler and autoscaler for PaddlePaddle TrainingJobs on Kubernetes.
#[derive(Parser)]
#[command(name = "trainscale", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the TrainingJob CustomResourceDefinition (YAML).
    Crd,
    /// Run the in-cluster scheduler/autoscaler daemon.
    Run(commands::run::RunArgs),
    /// Check TrainingJob manifests; exit 1 if any object is invalid.
    Validate {
        /// Manifest files: YAML or JSON, one or many documents, or a List.
        #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
    },
    /// Show the free resources and trainer counts derived from a cluster dump.
    State {
        /// A List as printed by `kubectl get nodes,pods,jobs,trainingjobs -A -o json`.
        #[arg(long)]
        snapshot: PathBuf,
        #[arg(long, value_enum, default_value = "table")]
        output: OutputFormat,
    },
    /// Build a TrainingJob from flags: print it (--dry-run, default) or create it (--apply).
    Submit(Box<commands::submit::SubmitArgs>),
    /// Run one planning pass on a cluster dump and print the plan (changes nothing).
    Plan {
        /// A List as printed by `kubectl get nodes,pods,jobs,trainingjobs -A -o json`.
        #[arg(long)]
        snapshot: PathBuf,
        #[arg(long, value_enum, default_value = "fulfillment")]
        policy: Policy,
        /// `edl` only: load above which jobs are scaled down.
        #[arg(long, default_value_t = 0.97)]
        max_load_desired: f64,
        /// Time left between two rescales of one job (`fulfillment`), e.g. `60s`, `2m`.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        cooldown: std::time::Duration,
        /// The time the pass runs at (RFC 3339; default: now), for cooldowns.
        #[arg(long)]
        now: Option<String>,
        #[arg(long, value_enum, default_value = "table")]
        output: OutputFormat,
    },
    /// Replay a job trace in simulated time under each policy; write a summary, a time series
    /// and plots, and print the policies side by side.
    Simulate {
        /// Scenario file (YAML).
        #[arg(default_value = commands::simulate::DEFAULT_SCENARIO)]
        scenario: PathBuf,
        /// Output directory [default: simulations/out/<scenario name>].
        #[arg(long)]
        output: Option<PathBuf>,
        /// Policies to run, instead of the scenario's list.
        #[arg(long, value_enum, value_delimiter = ',', num_args = 1..)]
        policies: Vec<Policy>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Crd => {
            print!(
                "{}",
                commands::crd::crd_yaml().context("serializing the CRD")?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => commands::run::run(args),
        Command::Validate { files } => {
            let outcome = commands::validate::validate_files(&files);
            print!("{}", outcome.render());
            Ok(if outcome.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::State { snapshot, output } => {
            let (text, warnings) = commands::state::state_report(&snapshot, output)?;
            for w in warnings {
                eprintln!("warning: skipped {w}");
            }
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Submit(args) => {
            let job = commands::submit::build_training_job(&args)?;
            if args.apply {
                let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
                let created = runtime.block_on(async {
                    let client = kube::Client::try_default()
                        .await
                        .context("loading the kubeconfig")?;
                    Ok::<_, anyhow::Error>(commands::submit::apply(client, &job).await?)
                })?;
                println!(
                    "trainingjob.paddlepaddle.org/{} created",
                    kube::ResourceExt::name_any(&created)
                );
            } else {
                print!("{}", commands::submit::render(&job, args.output)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan {
            snapshot,
            policy,
            max_load_desired,
            cooldown,
            now,
            output,
        } => {
            anyhow::ensure!(
                max_load_desired > 0.0 && max_load_desired <= 1.0,
                "--max-load-desired must be in (0, 1], got {max_load_desired}"
            );
            let now = match now {
                Some(text) => humantime::parse_rfc3339(&text)
                    .with_context(|| format!("--now {text:?} is not an RFC 3339 time"))?,
                None => std::time::SystemTime::now(),
            };
            let now = now
                .duration_since(std::time::UNIX_EPOCH)
                .context("--now is before 1970")?
                .as_secs() as i64;
            let config = PlannerConfig {
                policy,
                max_load_desired,
                now,
                cooldown_s: cooldown.as_secs() as i64,
                ..PlannerConfig::default()
            };
            let (text, warnings) = commands::plan::plan_snapshot(&snapshot, &config, output)?;
            for w in warnings {
                eprintln!("warning: skipped {w}");
            }
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Simulate {
            scenario,
            output,
            policies,
        } => {
            let outcome =
                commands::simulate::simulate(&scenario, output.as_deref(), &policies, true)?;
            print!("{}", outcome.table);
            eprintln!(
                "simulated in {:.1} s; results in {}",
                outcome.elapsed_s,
                outcome.output_dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
