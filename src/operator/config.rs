//! The operator's configuration (the flags of `trainscale run` fill it, see
//! `commands::run::OperatorArgs`).

/// Which PodGroup kind the operator creates for each TrainingJob.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfig {
    /// The PodGroup created for each TrainingJob (gang = master + pserver min + trainer min).
    pub podgroups: PodGroupMode,
    /// Label trainer Jobs for Kueue (queue from the TrainingJob's `kueue.x-k8s.io/queue-name`
    /// label) and mark them elastic.
    pub kueue: bool,
    /// Fail a job once a pserver container has restarted this many times (0: no limit).
    pub restart_limit: i32,
    /// Release the pods of finished jobs (scale master/pservers to 0, delete trainer pods).
    pub autoclean: bool,
    /// Name trainscale schedules as (`run --scheduler-name`): put on the pods of jobs that name
    /// no scheduler of their own. `None`: pods keep the default scheduler.
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
