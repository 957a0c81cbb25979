//! The `trainscale` command line: argument parsing and dispatch only.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use trainscale::commands;

/// mimalloc rather than glibc's malloc: a long-running daemon's heap fragments with watch churn,
/// and on such a heap glibc spent ~10% of a large planning pass consolidating and unlinking free
/// chunks for the pass's per-job lists (docs/planner.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Run(Box<commands::run::RunArgs>),
    /// Check job manifests (every kind); exit 1 if any object is invalid.
    Validate(commands::validate::ValidateArgs),
    /// Show the free resources and trainer counts derived from a cluster dump.
    State(commands::state::StateArgs),
    /// Build a TrainingJob from flags: print it (--dry-run, default) or create it (--apply).
    Submit(Box<commands::submit::SubmitArgs>),
    /// Run one planning pass on a cluster dump and print the plan (changes nothing).
    Plan(commands::plan::PlanArgs),
    /// Say why one job is at its size, who is ahead of it and what room would let it grow.
    Explain(commands::explain::ExplainArgs),
    /// Report a job's progress (from its training container): write the
    /// `trainscale.io/progress` annotation the `progress` policy reads.
    Progress(commands::progress::ProgressArgs),
    /// Replay a job trace in simulated time under each policy; write a summary, a time series
    /// and plots, and print the policies side by side.
    Simulate(commands::simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `run` sets up its own logging (text or JSON, from its flags).
    if !matches!(cli.command, Command::Run(_)) {
        commands::init_cli_logging();
    }
    let result = match cli.command {
        Command::Crd => commands::crd::run(),
        Command::Run(args) => commands::run::run(*args),
        Command::Validate(args) => Ok(commands::validate::run(args)),
        Command::State(args) => commands::state::run(args),
        Command::Submit(args) => commands::submit::run(&args),
        Command::Plan(args) => commands::plan::run(args),
        Command::Explain(args) => commands::explain::run(args),
        Command::Simulate(args) => commands::simulate::run(args),
        Command::Progress(args) => commands::progress::run(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::FAILURE
    })
}
