//! The operator's command-line configuration, flattened into `trainscale run`.

/// Which PodGroup kind the operator creates for each TrainingJob.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodGroupMode {
    /// `scheduling.volcano.sh/v1beta1` PodGroup.
    Volcano,
    /// `scheduling.x-k8s.io/v1alpha1` PodGroup (scheduler-plugins Coscheduling).
    SchedulerPlugins,
    /// No PodGroup.
    #[default]
    None,
}

/// How the operator creates and finishes TrainingJobs.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct OperatorConfig {
    /// Create a PodGroup for each TrainingJob (gang = master + pserver min + trainer min).
    #[arg(long = "podgroups", env = "TRAINSCALE_PODGROUPS", value_enum, default_value_t = PodGroupMode::None)]
    pub podgroups: PodGroupMode,
    /// Label trainer Jobs for Kueue (queue from the TrainingJob's `kueue.x-k8s.io/queue-name`
    /// label) and mark them elastic.
    #[arg(long, env = "TRAINSCALE_KUEUE", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub kueue: bool,
    /// Fail a job once a pserver container has restarted this many times (0: no limit).
    #[arg(
        long = "restart-limit",
        env = "TRAINSCALE_RESTART_LIMIT",
        default_value_t = 5,
        allow_negative_numbers = true,
        value_parser = crate::commands::flags::Escaped(crate::commands::flags::restart_limit)
    )]
    pub restart_limit: i32,
    /// Release the pods of finished jobs (scale master/pservers to 0, delete trainer pods).
    #[arg(long, env = "TRAINSCALE_AUTOCLEAN", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub autoclean: bool,
    /// Name trainscale schedules as (`run --scheduler-name`): put on the pods of jobs that name
    /// no scheduler of their own. `None`: pods keep the default scheduler.
    #[arg(skip)]
    pub scheduler_name: Option<String>,
}

impl Default for OperatorConfig {
    fn default() -> Self {
        OperatorConfig {
            podgroups: PodGroupMode::None,
            kueue: false,
            restart_limit: 5,
            autoclean: false,
            scheduler_name: None,
        }
    }
}
