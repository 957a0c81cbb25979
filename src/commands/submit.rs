//! `trainscale submit`: a TrainingJob from a few flags, the Rust counterpart of the PaddleJob
//! Python SDK (seed 004). Prints the manifest (`--dry-run`, the default) or creates it (`--apply`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CephFSVolumeSource, LocalObjectReference, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use kube::api::{Api, PostParams};

use super::flags;
use crate::api::names::{printable, quoted};
use crate::api::validate::validate_training_job;
use crate::api::{
    Annotations, Framework, PserverSpec, Quantity, TrainerSpec, TrainingJob, TrainingJobSpec,
};

/// Trainer count when neither `--trainers` nor `--min/--max-trainers` is given (the SDK's).
pub const DEFAULT_TRAINERS: i32 = 3;

/// How `submit` prints the manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ManifestFormat {
    #[default]
    Yaml,
    Json,
}

/// The flags of `trainscale submit`.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct SubmitArgs {
    /// The TrainingJob's name.
    #[arg(long, value_parser = flags::Escaped(flags::training_job_name))]
    pub job_name: String,
    /// The trainer's entry point, split as a shell would (e.g. "python train.py --lr 0.1").
    #[arg(long)]
    pub entry_point: String,
    /// Memory of each trainer and pserver (a quantity: 1G, 512Mi, ...).
    #[arg(long)]
    pub memory: String,
    /// CPUs of each trainer and pserver (a quantity: 2, 500m, ...).
    #[arg(long)]
    pub cpu: String,
    /// GPUs of each trainer.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// The runtime image.
    #[arg(long)]
    pub image: String,
    /// Parameter servers; 0 makes an nccl2 (collective) job without pservers.
    #[arg(long, default_value_t = 2)]
    pub pservers: i32,
    /// A fixed trainer count (default 3); conflicts with --min-trainers/--max-trainers.
    #[arg(long)]
    pub trainers: Option<i32>,
    /// Elastic trainers: the minimum (needs --max-trainers; makes the job fault tolerant).
    #[arg(long)]
    pub min_trainers: Option<i32>,
    /// Elastic trainers: the maximum (needs --min-trainers).
    #[arg(long)]
    pub max_trainers: Option<i32>,
    /// The namespace.
    #[arg(long, default_value = "default", value_parser = flags::Escaped(flags::namespace))]
    pub namespace: String,
    /// The trainer package path in the image (the SDK's trainer_package_path).
    #[arg(long)]
    pub workspace: Option<String>,
    /// Training passes.
    #[arg(long)]
    pub passes: Option<i32>,
    /// Wall-clock limit in seconds (the job ends with Timeout after it).
    #[arg(long)]
    pub walltime: Option<i64>,
    /// Ceph monitors, comma separated (host:port); adds a CephFS volume.
    #[arg(long, value_delimiter = ',')]
    pub cephfs_monitors: Vec<String>,
    /// Ceph user [default: admin].
    #[arg(long)]
    pub cephfs_user: Option<String>,
    /// Kubernetes Secret with the Ceph key [default: cephfs-secret].
    #[arg(long)]
    pub cephfs_secret: Option<String>,
    /// Where CephFS is mounted in every pod [default: /mnt/cephfs].
    #[arg(long)]
    pub cephfs_mount_path: Option<String>,
    /// The CephFS path to mount [default: /].
    #[arg(long)]
    pub cephfs_path: Option<String>,
    /// The scheduler of every pod (e.g. volcano).
    #[arg(long, value_parser = flags::Escaped(flags::scheduler_name))]
    pub scheduler_name: Option<String>,
    /// The PodGroup every pod joins.
    #[arg(long, value_parser = flags::Escaped(flags::pod_group))]
    pub pod_group: Option<String>,
    /// Print the manifest without creating it (the default).
    #[arg(long, conflicts_with = "apply")]
    pub dry_run: bool,
    /// Create the TrainingJob with the current kubeconfig.
    #[arg(long)]
    pub apply: bool,
    /// Manifest format for --dry-run.
    #[arg(long, value_enum, default_value = "yaml")]
    pub output: ManifestFormat,
}

/// A refused flag or combination, naming the flag (or the TrainingJob field).
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("{flag}: {problem}")]
    Flag { flag: &'static str, problem: String },
    /// The job name is refused only with the trainer count given (the trainer pods' hostnames):
    /// a usage error as the name flag's own.
    #[error(
        "invalid value {} for '--job-name <JOB_NAME>': {problem}",
        quoted(name)
    )]
    JobName { name: String, problem: String },
    #[error("the TrainingJob would be invalid: {0}")]
    Invalid(String),
    #[error("serializing the manifest: {0}")]
    Serialize(String),
    #[error("creating the TrainingJob: {0}")]
    Kube(#[from] kube::Error),
}

fn flag(flag: &'static str, problem: impl Into<String>) -> SubmitError {
    SubmitError::Flag {
        flag,
        problem: problem.into(),
    }
}

fn quantity(name: &'static str, text: &str) -> Result<KubeQuantity, SubmitError> {
    let q = Quantity::parse(text.trim()).map_err(|e| flag(name, e.to_string()))?;
    if q == Quantity::ZERO {
        return Err(flag(name, "must be more than zero"));
    }
    Ok(KubeQuantity(text.trim().to_string()))
}

/// (min, max) trainers from the flags.
fn trainer_range(args: &SubmitArgs) -> Result<(i32, i32), SubmitError> {
    let (min, max) = match (args.trainers, args.min_trainers, args.max_trainers) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(flag(
                "--trainers",
                "cannot be combined with --min-trainers/--max-trainers",
            ));
        }
        (Some(n), None, None) => (n, n),
        (None, Some(min), Some(max)) => (min, max),
        (None, Some(_), None) => {
            return Err(flag("--max-trainers", "is needed with --min-trainers"));
        }
        (None, None, Some(_)) => {
            return Err(flag("--min-trainers", "is needed with --max-trainers"));
        }
        (None, None, None) => (DEFAULT_TRAINERS, DEFAULT_TRAINERS),
    };
    let min_flag = if args.trainers.is_some() {
        "--trainers"
    } else {
        "--min-trainers"
    };
    if min < 1 {
        return Err(flag(min_flag, format!("must be at least 1, got {min}")));
    }
    if min > max {
        return Err(flag(
            "--min-trainers",
            format!("{min} is greater than --max-trainers {max}"),
        ));
    }
    Ok((min, max))
}

fn cephfs(args: &SubmitArgs) -> Result<Option<(Volume, VolumeMount)>, SubmitError> {
    let monitors: Vec<String> = args
        .cephfs_monitors
        .iter()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    if monitors.is_empty() {
        for (name, given) in [
            ("--cephfs-user", args.cephfs_user.is_some()),
            ("--cephfs-secret", args.cephfs_secret.is_some()),
            ("--cephfs-mount-path", args.cephfs_mount_path.is_some()),
            ("--cephfs-path", args.cephfs_path.is_some()),
        ] {
            if given {
                return Err(flag(name, "needs --cephfs-monitors"));
            }
        }
        return Ok(None);
    }
    let mount_path = args.cephfs_mount_path.as_deref().unwrap_or("/mnt/cephfs");
    if !mount_path.starts_with('/') {
        return Err(flag("--cephfs-mount-path", "must be an absolute path"));
    }
    let volume = Volume {
        name: "cephfs".to_string(),
        cephfs: Some(CephFSVolumeSource {
            monitors,
            path: Some(args.cephfs_path.clone().unwrap_or_else(|| "/".to_string())),
            user: Some(
                args.cephfs_user
                    .clone()
                    .unwrap_or_else(|| "admin".to_string()),
            ),
            secret_ref: Some(LocalObjectReference {
                name: args
                    .cephfs_secret
                    .clone()
                    .unwrap_or_else(|| "cephfs-secret".to_string()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: "cephfs".to_string(),
        mount_path: mount_path.to_string(),
        ..Default::default()
    };
    Ok(Some((volume, mount)))
}

fn non_empty(v: &Option<String>) -> String {
    v.as_deref().map(str::trim).unwrap_or_default().to_string()
}

/// The TrainingJob the flags describe, validated.
pub fn build_training_job(args: &SubmitArgs) -> Result<TrainingJob, SubmitError> {
    if args.job_name.trim().is_empty() {
        return Err(flag("--job-name", "must not be empty"));
    }
    if args.image.trim().is_empty() {
        return Err(flag("--image", "must not be empty"));
    }
    match shell_words::split(&args.entry_point) {
        Ok(words) if words.is_empty() => return Err(flag("--entry-point", "must not be empty")),
        Ok(_) => {}
        Err(e) => return Err(flag("--entry-point", format!("cannot be split: {e}"))),
    }
    let cpu = quantity("--cpu", &args.cpu)?;
    let memory = quantity("--memory", &args.memory)?;
    let (min, max) = trainer_range(args)?;
    if args.pservers < 0 {
        return Err(flag(
            "--pservers",
            format!("must not be negative, got {}", args.pservers),
        ));
    }
    if matches!(args.walltime, Some(w) if w <= 0) {
        return Err(flag("--walltime", "must be more than zero"));
    }
    if matches!(args.passes, Some(p) if p <= 0) {
        return Err(flag("--passes", "must be more than zero"));
    }
    let base = BTreeMap::from([("cpu".to_string(), cpu), ("memory".to_string(), memory)]);
    let pserver_resources = ResourceRequirements {
        requests: Some(base.clone()),
        limits: Some(base.clone()),
        ..Default::default()
    };
    let mut trainer_limits = base.clone();
    if args.gpu > 0 {
        trainer_limits.insert(
            "nvidia.com/gpu".to_string(),
            KubeQuantity(args.gpu.to_string()),
        );
    }
    let trainer_resources = ResourceRequirements {
        requests: Some(base),
        limits: Some(trainer_limits),
        ..Default::default()
    };
    let (volumes, volume_mounts) = match cephfs(args)? {
        Some((v, m)) => (vec![v], vec![m]),
        None => (Vec::new(), Vec::new()),
    };
    let spec = TrainingJobSpec {
        image: args.image.trim().to_string(),
        fault_tolerant: min < max,
        passes: args.passes.unwrap_or(0),
        volumes,
        volume_mounts,
        annotations: Annotations {
            walltime: args.walltime.unwrap_or(0),
            ..Default::default()
        },
        frame_work: (args.pservers == 0).then(|| Framework {
            name: "paddle".to_string(),
            job_type: "nccl2".to_string(),
        }),
        pserver: if args.pservers > 0 {
            PserverSpec {
                min_instance: args.pservers,
                max_instance: args.pservers,
                resources: pserver_resources,
                ..Default::default()
            }
        } else {
            PserverSpec::default()
        },
        trainer: TrainerSpec {
            entrypoint: args.entry_point.trim().to_string(),
            workspace: non_empty(&args.workspace),
            min_instance: min,
            max_instance: max,
            resources: trainer_resources,
            ..Default::default()
        },
        scheduler_name: non_empty(&args.scheduler_name),
        pod_group_name: non_empty(&args.pod_group),
        ..Default::default()
    };
    let mut job = TrainingJob::new(args.job_name.trim(), spec);
    job.metadata.namespace = Some(args.namespace.trim().to_string());
    let problems = validate_training_job(&job);
    // `--job-name` passed its own check: a name problem left is the trainers' hostnames.
    if let Some(e) = problems.iter().find(|e| e.field == "metadata.name") {
        return Err(SubmitError::JobName {
            name: args.job_name.trim().to_string(),
            problem: format!("{} (trainer count up to {max})", e.problem),
        });
    }
    if !problems.is_empty() {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(SubmitError::Invalid(text.join("; ")));
    }
    Ok(job)
}

/// The manifest text of a job.
pub fn render(job: &TrainingJob, format: ManifestFormat) -> Result<String, SubmitError> {
    match format {
        ManifestFormat::Yaml => {
            serde_saphyr::to_string(job).map_err(|e| SubmitError::Serialize(e.to_string()))
        }
        ManifestFormat::Json => serde_json::to_string_pretty(job)
            .map(|s| s + "\n")
            .map_err(|e| SubmitError::Serialize(e.to_string())),
    }
}

/// Creates the job with a client (from the current kubeconfig at the binary's edge).
pub async fn apply(client: kube::Client, job: &TrainingJob) -> Result<TrainingJob, SubmitError> {
    let ns = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let api: Api<TrainingJob> = Api::namespaced(client, &ns);
    Ok(api.create(&PostParams::default(), job).await?)
}

/// `trainscale submit`: prints the manifest, or creates it with the current kubeconfig. A job
/// name refused for the trainer count exits 2, as a name refused by its flag does.
pub fn run(args: &SubmitArgs) -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context;
    let job = match build_training_job(args) {
        Err(e @ SubmitError::JobName { .. }) => {
            let usage = clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{}\n", printable(&e.to_string())),
            );
            let _ = usage.print();
            return Ok(std::process::ExitCode::from(
                u8::try_from(usage.exit_code()).unwrap_or(2),
            ));
        }
        built => built?,
    };
    if args.apply {
        let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
        let created = runtime.block_on(async {
            let client = kube::Client::try_default()
                .await
                .context("loading the kubeconfig")?;
            Ok::<_, anyhow::Error>(apply(client, &job).await?)
        })?;
        println!(
            "trainingjob.paddlepaddle.org/{} created",
            kube::ResourceExt::name_any(&created)
        );
    } else {
        print!("{}", render(&job, args.output)?);
    }
    Ok(std::process::ExitCode::SUCCESS)
}
