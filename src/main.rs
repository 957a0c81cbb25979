//! The `trainscale` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use trainscale::commands::{self, OutputFormat};
use trainscale::planner::Policy;

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
