//! The `trainscale` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use trainscale::commands::{self, OutputFormat};

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
    }
}
