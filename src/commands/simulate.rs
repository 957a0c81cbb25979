//! `trainscale simulate`: run a scenario's policies, write the results, print the table.

use std::io::IsTerminal;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::flags;
use crate::planner::Policy;
use crate::sim::report::{self, Summary};
use crate::sim::{self, Scenario, SimError, plot};

/// The scenario run when none is named.
pub const DEFAULT_SCENARIO: &str = "simulations/default.yaml";

/// Where results go when no output directory is given: `<root>/<scenario name>/`.
pub const DEFAULT_OUTPUT_ROOT: &str = "simulations/out";

/// `root/<scenario name>`, refusing a name that is not one plain path component (the name is
/// checked on load; this keeps the results under `root` whatever built the scenario).
pub fn output_dir(root: &Path, scenario: &Scenario) -> Result<PathBuf, SimError> {
    let mut parts = Path::new(&scenario.name).components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(part)), None)
            if sim::scenario::check_name(&scenario.name).is_ok() =>
        {
            Ok(root.join(part))
        }
        _ => Err(SimError::key(
            &scenario.path,
            "name",
            format!("{:?} is not a plain directory name", scenario.name),
        )),
    }
}

/// What a simulation produced.
#[derive(Debug)]
pub struct SimulateOutcome {
    pub summary: Summary,
    /// The side-by-side table.
    pub table: String,
    pub output_dir: PathBuf,
    /// Wall time of the runs (all policies and schedulers), seconds.
    pub elapsed_s: f64,
    /// Trace jobs that can never run on the scenario's cluster, one line each (see
    /// [`sim::never_run`]).
    pub warnings: Vec<String>,
}

/// Runs `scenario` with `policies` (the scenario's own list when empty) and writes its results to
/// `output` (default [`DEFAULT_OUTPUT_ROOT`]`/<scenario name>/`). `progress` shows a bar on stderr.
pub fn simulate(
    scenario: &Path,
    output: Option<&Path>,
    policies: &[Policy],
    progress: bool,
) -> Result<SimulateOutcome, SimError> {
    let mut scenario = Scenario::load(scenario)?;
    if !policies.is_empty() {
        scenario.policies = policies.to_vec();
    }
    let dir = match output {
        Some(dir) => dir.to_path_buf(),
        None => output_dir(Path::new(DEFAULT_OUTPUT_ROOT), &scenario)?,
    };
    let (jobs, speedup) = sim::load_inputs(&scenario)?;
    let warnings: Vec<String> = sim::never_run(&scenario, &jobs)
        .into_iter()
        .map(|(job, why)| {
            format!(
                "{}: row {}: job {} never runs: {why}",
                scenario.trace.path.display(),
                job.row,
                job.id
            )
        })
        .collect();
    tracing::info!(
        scenario = %scenario.name,
        jobs = jobs.len(),
        gpus = scenario.total_gpus(),
        "simulating"
    );
    let bar = (progress && std::io::stderr().is_terminal()).then(|| {
        let runs = scenario.policies.len() * scenario.schedulers.len();
        let bar = ProgressBar::new((jobs.len() * runs) as u64);
        if let Ok(style) =
            ProgressStyle::with_template("{msg:12} [{bar:40}] {pos}/{len} jobs done ({elapsed})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    });
    let started = Instant::now();
    let runs = sim::run_policies(
        &scenario,
        &jobs,
        &speedup,
        &scenario.policies,
        &mut |policy: Policy, _done, _total| {
            if let Some(bar) = &bar {
                bar.set_message(policy.as_str());
                bar.inc(1);
            }
        },
    );
    let elapsed_s = started.elapsed().as_secs_f64();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let summary = Summary::of(&scenario.name, &runs);
    report::write_all(&dir, &summary, &runs)?;
    plot::write_all(&dir, &scenario.name, &runs)?;
    let table = report::table(&summary, &runs);
    Ok(SimulateOutcome {
        summary,
        table,
        output_dir: dir,
        elapsed_s,
        warnings,
    })
}

/// Arguments of `trainscale simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (YAML).
    #[arg(default_value = DEFAULT_SCENARIO)]
    pub scenario: PathBuf,
    /// Output directory [default: simulations/out/<scenario name>].
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Policies to run, instead of the scenario's list.
    #[arg(long, value_parser = flags::policy(), value_delimiter = ',', num_args = 1..)]
    pub policies: Vec<Policy>,
}

/// `trainscale simulate`: the table on stdout, where the results went on stderr.
pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let outcome = simulate(&args.scenario, args.output.as_deref(), &args.policies, true)?;
    // A few name the rows; the rest are counted.
    const SHOWN: usize = 10;
    for warning in outcome.warnings.iter().take(SHOWN) {
        eprintln!("warning: {warning}");
    }
    if outcome.warnings.len() > SHOWN {
        eprintln!(
            "warning: {} more trace jobs never run on this cluster",
            outcome.warnings.len() - SHOWN
        );
    }
    print!("{}", outcome.table);
    eprintln!(
        "simulated in {:.1} s; results in {}",
        outcome.elapsed_s,
        outcome.output_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
