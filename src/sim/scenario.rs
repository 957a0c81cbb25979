//! Scenario files: the cluster, the trace, the policies and the knobs of one simulation (YAML).
//!
//! Every key is checked: an unknown key, a value of the wrong type or one out of range is an error
//! naming the key. Paths are relative to the scenario file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::SimError;
use crate::api::priority::PriorityClasses;
use crate::api::{Quantity, Resources};
use crate::planner::Policy;

/// A node pool: `count` identical nodes named `<name>-000`, `<name>-001`, ...
#[derive(Debug, Clone, PartialEq)]
pub struct NodePool {
    pub name: String,
    pub count: u32,
    pub allocatable: Resources,
}

/// Which trace to replay and how.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpec {
    /// Resolved path of the trace CSV.
    pub path: PathBuf,
    /// Only the first `limit_jobs` rows (after `skip_jobs`).
    pub limit_jobs: Option<usize>,
    /// Rows skipped at the start of the trace.
    pub skip_jobs: usize,
    /// Submit times are multiplied by this (below 1 compresses arrivals, raising the load).
    pub time_scale: f64,
    /// Jobs of many GPUs rerun as workers of several GPUs each.
    pub multi_gpu_workers: Option<MultiGpuWorkers>,
    /// Some jobs rerun as CPU-only jobs.
    pub cpu_only: Option<CpuOnly>,
}

/// `trace.multi_gpu_workers`: a job of `min_gpus` GPUs or more (`req_workers ×
/// gpus_per_worker`) runs as workers of `per_worker_gpus[d % len]` GPUs, `d` being its 0-based
/// data row in the file, when that divides its GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiGpuWorkers {
    pub min_gpus: i64,
    pub per_worker_gpus: Vec<i64>,
}

/// `trace.cpu_only`: every job whose 0-based data row `d` has `d % every == every - 1`, and that
/// `multi_gpu_workers` left as it was, runs with workers of `cpus` cores, `memory_mib` MiB and no
/// GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuOnly {
    pub every: usize,
    pub cpus: i64,
    pub memory_mib: i64,
}

/// Who binds trainer pods to nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    /// Pods bind where the plan placed them (first fit by name when that no longer fits); jobs
    /// below min bind as gangs when `gang_scheduling` is on.
    Trainscale,
    /// A model of kube-scheduler's default profile: the plan's placements are ignored, pods bind
    /// one at a time on the best-scoring node, with no gangs.
    KubeScheduler,
}

impl SchedulerKind {
    /// The scenario spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerKind::Trainscale => "trainscale",
            SchedulerKind::KubeScheduler => "kube-scheduler",
        }
    }
}

/// Which speedup model a job's progress follows.
#[derive(Debug, Clone, PartialEq)]
pub enum SpeedupSpec {
    /// Per-application curves from a `pollux-speedup.csv` table at the given GPUs per node.
    Pollux { path: PathBuf, gpus_per_node: u32 },
    /// `speedup(n) = n`.
    Linear,
    /// Amdahl's law with serial fraction `p`: `1 / (p + (1 - p) / n)`.
    Amdahl(f64),
    /// Pollux's throughput model from a `pollux-throughput-params.csv` table; sees placement.
    PolluxThroughput { path: PathBuf },
}

/// A node failure: `count` nodes of `node_pool` fail at `at_s` and come back `down_for_s` later
/// (never, when absent). Which nodes is drawn from the scenario's seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub at_s: f64,
    pub node_pool: String,
    pub count: u32,
    pub down_for_s: Option<f64>,
}

/// `queues`: Kueue queues the trace's jobs submit to, by virtual cluster (`vc`). Each is one
/// ClusterQueue (GPU quota `gpus`; CPU and memory quota the cluster's, so only GPUs bind) and one
/// LocalQueue of the same name.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSet {
    /// Every ClusterQueue's cohort (they borrow each other's unused quota); none: no borrowing.
    pub cohort: Option<String>,
    pub queues: Vec<QueueSpec>,
}

/// One queue of [`QueueSet`].
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    /// The ClusterQueue's and the LocalQueue's name.
    pub name: String,
    /// The trace VCs whose jobs it takes.
    pub vcs: Vec<String>,
    /// It also takes every VC no queue names (`"*"` in `vcs`).
    pub catch_all: bool,
    /// GPU nominal quota.
    pub gpus: i64,
    /// GPUs it may borrow beyond `gpus` from its cohort; none: no limit.
    pub borrowing_limit: Option<i64>,
}

impl QueueSet {
    /// The index of the queue taking the jobs of `vc`: the one naming it, else the catch-all.
    pub fn queue_of(&self, vc: &str) -> Option<usize> {
        self.queues
            .iter()
            .position(|q| q.vcs.iter().any(|v| v == vc))
            .or_else(|| self.queues.iter().position(|q| q.catch_all))
    }

    /// Checks that every VC of a trace has a queue: `vcs` yields each job's VC and trace row;
    /// `path` is the scenario file (for the message).
    pub fn check_trace<'a>(
        &self,
        path: &Path,
        vcs: impl IntoIterator<Item = (&'a str, usize)>,
    ) -> Result<(), SimError> {
        if self.queues.iter().any(|q| q.catch_all) {
            return Ok(());
        }
        let mut missing: BTreeMap<&str, usize> = BTreeMap::new();
        for (vc, row) in vcs {
            if self.queue_of(vc).is_none() {
                missing.entry(vc).or_insert(row);
            }
        }
        match missing.iter().next() {
            None => Ok(()),
            Some((vc, row)) => Err(SimError::key(
                path,
                "queues.queues",
                format!(
                    "the trace's VC {vc:?} (first at row {row}) is in no queue, and so are {} \
                     other VC(s); name them in a queue's `vcs` or add a queue with vcs [\"*\"]",
                    missing.len() - 1
                ),
            )),
        }
    }
}

/// `value` when it lies in `[low, high]`; else the message a scenario key gets for it.
fn within<T: PartialOrd + std::fmt::Display>(value: T, low: T, high: T) -> Result<T, String> {
    if low <= value && value <= high {
        Ok(value)
    } else {
        Err(format!("{value} is not in [{low}, {high}]"))
    }
}

/// Whether `name` is a DNS label (Kueue's queue and cohort names): 1 to 63 lowercase letters,
/// digits and `-`, starting and ending with a letter or digit.
fn dns_label(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && edge(name.chars().next())
        && edge(name.chars().last())
}

/// A loaded, checked scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    /// The file it came from (for messages).
    pub path: PathBuf,
    pub node_pools: Vec<NodePool>,
    pub trace: TraceSpec,
    pub policies: Vec<Policy>,
    /// Who binds pods; each policy runs once per scheduler.
    pub schedulers: Vec<SchedulerKind>,
    pub max_load_desired: f64,
    pub interval_s: f64,
    pub rescale_cost_s: f64,
    pub cooldown_s: i64,
    /// `goodput`: the least relative speedup a trainer must add for a job to grow by it.
    pub min_marginal_speedup: f64,
    /// `progress`: the least marginal speedup `s(n+1) − s(n)` (in one trainer's speed) a
    /// trainer must add for a job to grow by it.
    pub progress_min_marginal_speedup: f64,
    /// `progress`: the least average marginal speedup of trainers given room no job takes at
    /// `progress_min_marginal_speedup`.
    pub progress_spare_min_marginal_speedup: f64,
    /// `progress`: seconds a job may stay at or below min before it goes first.
    pub starvation_bound_s: i64,
    /// How jobs report their progress (read by `progress`).
    pub progress: ProgressReports,
    pub speedup: SpeedupSpec,
    pub seed: u64,
    pub faults: Vec<Fault>,
    /// Simulated time after which the run stops, jobs still running reported unfinished.
    pub horizon_s: Option<f64>,
    /// Bind a job below its min all or nothing (the PodGroup the operator creates); default true.
    pub gang_scheduling: bool,
    /// The PriorityClasses of the simulated cluster, by name.
    pub priority_classes: PriorityClasses,
    /// The `priority` string of jobs of each trace virtual cluster (`vc`): an integer or the name
    /// of one of `priority_classes`; jobs of other VCs have none (0).
    pub vc_priorities: BTreeMap<String, String>,
    /// Kueue queues by VC; none: no Kueue (jobs are not queued).
    pub queues: Option<QueueSet>,
}

/// How the simulated jobs report their progress: which do, how far off their estimated totals
/// are, how often they report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressReports {
    /// Share of the jobs that report, each chosen with this probability from the scenario's
    /// seed (`progress_share`, default 1).
    pub share: f64,
    /// A reporting job's estimated total work is its true work times `exp(σ·z)`, `z` standard
    /// normal drawn from the seed (`progress_sigma`, default 0: exact).
    pub sigma: f64,
    /// Seconds between a job's reports (`progress_interval_s`, default every tick).
    pub interval_s: f64,
}

/// A number or a string in YAML (`cpu: 96` as well as `cpu: "500m"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum QuantityText {
    Int(i64),
    Float(f64),
    Text(String),
}

impl QuantityText {
    fn text(&self) -> String {
        match self {
            QuantityText::Int(i) => i.to_string(),
            QuantityText::Float(f) => f.to_string(),
            QuantityText::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    cluster: RawCluster,
    trace: RawTrace,
    policies: Option<Vec<String>>,
    schedulers: Option<Vec<String>>,
    max_load_desired: Option<f64>,
    interval_s: Option<f64>,
    rescale_cost_s: Option<f64>,
    cooldown_s: Option<i64>,
    min_marginal_speedup: Option<f64>,
    progress_min_marginal_speedup: Option<f64>,
    progress_spare_min_marginal_speedup: Option<f64>,
    starvation_bound_s: Option<i64>,
    progress_share: Option<f64>,
    progress_sigma: Option<f64>,
    progress_interval_s: Option<f64>,
    speedup: Option<RawSpeedup>,
    seed: Option<u64>,
    #[serde(default)]
    faults: Vec<RawFault>,
    horizon_s: Option<f64>,
    gang_scheduling: Option<bool>,
    #[serde(default)]
    priority_classes: Vec<RawPriorityClass>,
    #[serde(default)]
    vc_priorities: BTreeMap<String, String>,
    queues: Option<RawQueues>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueues {
    cohort: Option<String>,
    queues: Vec<RawQueue>,
}

/// A VC name: a string; anything else (YAML reads `103959` as a number) is named in the error.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawVc {
    Text(String),
    Other(serde_json::Value),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueue {
    name: String,
    vcs: Vec<RawVc>,
    gpus: i64,
    borrowing_limit: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPriorityClass {
    name: String,
    value: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    node_pools: Vec<RawPool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: String,
    count: i64,
    cpu: QuantityText,
    memory: QuantityText,
    #[serde(default)]
    gpus: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrace {
    path: String,
    format: String,
    limit_jobs: Option<i64>,
    skip_jobs: Option<i64>,
    time_scale: Option<f64>,
    multi_gpu_workers: Option<RawMultiGpuWorkers>,
    cpu_only: Option<RawCpuOnly>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMultiGpuWorkers {
    min_gpus: i64,
    per_worker_gpus: Vec<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCpuOnly {
    every: i64,
    cpus: i64,
    memory_mib: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpeedup {
    model: String,
    path: Option<String>,
    gpus_per_node: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at_s: f64,
    node_pool: String,
    count: i64,
    down_for_s: Option<f64>,
}

/// Checks the `queues` section: names are DNS labels and unique, a VC is in one queue at most,
/// one queue at most takes `"*"`, quotas are not negative, a borrowing limit needs a cohort.
fn read_queues(
    raw: RawQueues,
    err: &dyn Fn(&str, String) -> SimError,
) -> Result<QueueSet, SimError> {
    if let Some(c) = &raw.cohort
        && !dns_label(c)
    {
        return Err(err(
            "queues.cohort",
            format!("{c:?} is not a DNS label (lowercase letters, digits and '-', at most 63)"),
        ));
    }
    if raw.queues.is_empty() {
        return Err(err("queues.queues", "needs at least one queue".into()));
    }
    // Where each VC (and "*") was first named.
    let mut named: BTreeMap<&str, String> = BTreeMap::new();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut queues = Vec::with_capacity(raw.queues.len());
    for (i, q) in raw.queues.iter().enumerate() {
        let key = |k: &str| format!("queues.queues[{i}].{k}");
        if !dns_label(&q.name) {
            return Err(err(
                &key("name"),
                format!(
                    "{:?} is not a DNS label (lowercase letters, digits and '-', at most 63)",
                    q.name
                ),
            ));
        }
        if let Some(first) = names.insert(&q.name, i) {
            return Err(err(
                &key("name"),
                format!("{:?} is also the name of queues.queues[{first}]", q.name),
            ));
        }
        if q.vcs.is_empty() {
            return Err(err(&key("vcs"), "needs at least one VC (or \"*\")".into()));
        }
        let mut vcs = Vec::with_capacity(q.vcs.len());
        for (j, vc) in q.vcs.iter().enumerate() {
            let at = format!("queues.queues[{i}].vcs[{j}]");
            let vc = match vc {
                RawVc::Text(vc) => vc.as_str(),
                RawVc::Other(v) => {
                    return Err(err(
                        &at,
                        format!(
                            "{v} is not a string: quote VC names YAML reads as numbers \
                             (\"103959\", \"6214e9\")"
                        ),
                    ));
                }
            };
            vcs.push(vc);
            if vc.is_empty() {
                return Err(err(&at, "a VC must not be empty".into()));
            }
            if let Some(first) = named.insert(vc, at.clone()) {
                return Err(err(&at, format!("VC {vc:?} is already in {first}")));
            }
        }
        if !(0..=1_000_000).contains(&q.gpus) {
            return Err(err(
                &key("gpus"),
                format!("{} is not in 0..=1000000", q.gpus),
            ));
        }
        if let Some(b) = q.borrowing_limit {
            if !(0..=1_000_000).contains(&b) {
                return Err(err(
                    &key("borrowing_limit"),
                    format!("{b} is not in 0..=1000000"),
                ));
            }
            if raw.cohort.is_none() {
                return Err(err(
                    &key("borrowing_limit"),
                    "a queue borrows only within a cohort: set queues.cohort".into(),
                ));
            }
        }
        queues.push(QueueSpec {
            name: q.name.clone(),
            vcs: vcs
                .iter()
                .filter(|v| **v != "*")
                .map(|v| v.to_string())
                .collect(),
            catch_all: vcs.contains(&"*"),
            gpus: q.gpus,
            borrowing_limit: q.borrowing_limit,
        });
    }
    Ok(QueueSet {
        cohort: raw.cohort,
        queues,
    })
}

/// Checks a scenario name, which names its output directory: `[a-z0-9._-]`, not empty, not
/// starting with `.` (so neither `.` nor `..`), without `..`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "{name:?} must be lowercase letters, digits, '.', '_' and '-'"
        ));
    }
    if name.starts_with('.') || name.contains("..") {
        return Err(format!("{name:?} must not start with '.' nor contain '..'"));
    }
    Ok(())
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".to_string());
        Scenario::parse(&text, path, base, &stem)
    }

    /// Checks scenario text; `path` names it in errors, `base` resolves relative paths,
    /// `default_name` is used when the scenario has no `name`.
    pub fn parse(
        text: &str,
        path: &Path,
        base: &Path,
        default_name: &str,
    ) -> Result<Scenario, SimError> {
        let value: serde_json::Value =
            serde_saphyr::from_str(text).map_err(|e| SimError::Yaml {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let raw: RawScenario = serde_path_to_error::deserialize(&value).map_err(|e| {
            let key = e.path().to_string();
            let key = if key == "." {
                "(top level)".to_string()
            } else {
                key
            };
            SimError::key(path, key, e.into_inner().to_string())
        })?;
        let err = |key: &str, message: String| SimError::key(path, key, message);

        let name = match raw.name {
            Some(n) => {
                check_name(&n).map_err(|m| err("name", m))?;
                n
            }
            None => {
                check_name(default_name)
                    .map_err(|m| err("name", format!("{m} (taken from the file name)")))?;
                default_name.to_string()
            }
        };

        // Cluster.
        if raw.cluster.node_pools.is_empty() {
            return Err(err("cluster.node_pools", "needs at least one pool".into()));
        }
        let mut pool_names = BTreeSet::new();
        let mut node_pools = Vec::new();
        for (i, p) in raw.cluster.node_pools.iter().enumerate() {
            let key = |k: &str| format!("cluster.node_pools[{i}].{k}");
            if p.name.is_empty()
                || !p
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(err(
                    &key("name"),
                    format!("{:?} must be lowercase letters, digits and '-'", p.name),
                ));
            }
            if !pool_names.insert(p.name.clone()) {
                return Err(err(
                    &key("name"),
                    format!("pool {:?} is listed twice", p.name),
                ));
            }
            if !(1..=100_000).contains(&p.count) {
                return Err(err(
                    &key("count"),
                    format!("{} is not in 1..=100000", p.count),
                ));
            }
            if !(0..=1024).contains(&p.gpus) {
                return Err(err(&key("gpus"), format!("{} is not in 0..=1024", p.gpus)));
            }
            let quantity = |k: &str, q: &QuantityText| -> Result<Quantity, SimError> {
                let q = Quantity::parse(&q.text()).map_err(|e| err(&key(k), e.to_string()))?;
                if q == Quantity::ZERO {
                    return Err(err(&key(k), "must be above zero".into()));
                }
                Ok(q)
            };
            let cpu = quantity("cpu", &p.cpu)?;
            let memory = quantity("memory", &p.memory)?;
            node_pools.push(NodePool {
                name: p.name.clone(),
                count: p.count as u32,
                allocatable: Resources::new(cpu.milli_ceil(), memory.value_ceil(), p.gpus),
            });
        }

        // Trace.
        if raw.trace.format != "philly-pollux" {
            return Err(err(
                "trace.format",
                format!(
                    "{:?} is not a known format (known: philly-pollux)",
                    raw.trace.format
                ),
            ));
        }
        let limit_jobs = match raw.trace.limit_jobs {
            Some(n) if n < 1 => return Err(err("trace.limit_jobs", format!("{n} is below 1"))),
            n => n.map(|n| n as usize),
        };
        let skip_jobs = match raw.trace.skip_jobs {
            Some(n) if n < 0 => return Err(err("trace.skip_jobs", format!("{n} is negative"))),
            n => n.unwrap_or(0) as usize,
        };
        let time_scale = raw.trace.time_scale.unwrap_or(1.0);
        if !(time_scale > 0.0 && time_scale <= 1000.0) {
            return Err(err(
                "trace.time_scale",
                format!("{time_scale} is not in (0, 1000]"),
            ));
        }
        let multi_gpu_workers = match raw.trace.multi_gpu_workers {
            None => None,
            Some(m) => {
                let key = |k: &str| format!("trace.multi_gpu_workers.{k}");
                if !(1..=1_000_000).contains(&m.min_gpus) {
                    return Err(err(
                        &key("min_gpus"),
                        format!("{} is not in 1..=1000000", m.min_gpus),
                    ));
                }
                if m.per_worker_gpus.is_empty() {
                    return Err(err(
                        &key("per_worker_gpus"),
                        "needs at least one size".into(),
                    ));
                }
                for (i, g) in m.per_worker_gpus.iter().enumerate() {
                    if !(1..=1024).contains(g) {
                        return Err(err(
                            &format!("trace.multi_gpu_workers.per_worker_gpus[{i}]"),
                            format!("{g} is not in 1..=1024"),
                        ));
                    }
                }
                Some(MultiGpuWorkers {
                    min_gpus: m.min_gpus,
                    per_worker_gpus: m.per_worker_gpus,
                })
            }
        };
        let cpu_only = match raw.trace.cpu_only {
            None => None,
            Some(c) => {
                let key = |k: &str| format!("trace.cpu_only.{k}");
                if !(1..=1_000_000).contains(&c.every) {
                    return Err(err(
                        &key("every"),
                        format!("{} is not in 1..=1000000", c.every),
                    ));
                }
                if !(1..=100_000).contains(&c.cpus) {
                    return Err(err(
                        &key("cpus"),
                        format!("{} is not in 1..=100000", c.cpus),
                    ));
                }
                if !(0..=1 << 40).contains(&c.memory_mib) {
                    return Err(err(
                        &key("memory_mib"),
                        format!("{} is not in 0..=1099511627776", c.memory_mib),
                    ));
                }
                Some(CpuOnly {
                    every: c.every as usize,
                    cpus: c.cpus,
                    memory_mib: c.memory_mib,
                })
            }
        };
        let trace = TraceSpec {
            path: base.join(&raw.trace.path),
            limit_jobs,
            skip_jobs,
            time_scale,
            multi_gpu_workers,
            cpu_only,
        };

        // Policies.
        let policies = match raw.policies {
            None => vec![
                Policy::Fulfillment,
                Policy::Goodput,
                Policy::Progress,
                Policy::Edl,
                Policy::Static,
            ],
            Some(list) => {
                if list.is_empty() {
                    return Err(err("policies", "needs at least one policy".into()));
                }
                let mut out = Vec::new();
                for (i, p) in list.iter().enumerate() {
                    let policy: Policy =
                        p.parse().map_err(|e| err(&format!("policies[{i}]"), e))?;
                    if out.contains(&policy) {
                        return Err(err(
                            &format!("policies[{i}]"),
                            format!("{p:?} is listed twice"),
                        ));
                    }
                    out.push(policy);
                }
                out
            }
        };

        // Schedulers.
        let schedulers = match raw.schedulers {
            None => vec![SchedulerKind::Trainscale],
            Some(list) => {
                if list.is_empty() {
                    return Err(err("schedulers", "needs at least one scheduler".into()));
                }
                let mut out = Vec::new();
                for (i, name) in list.iter().enumerate() {
                    let key = format!("schedulers[{i}]");
                    let kind = match name.as_str() {
                        "trainscale" => SchedulerKind::Trainscale,
                        "kube-scheduler" => SchedulerKind::KubeScheduler,
                        other => {
                            return Err(err(
                                &key,
                                format!(
                                    "{other:?} is not a known scheduler (trainscale, kube-scheduler)"
                                ),
                            ));
                        }
                    };
                    if out.contains(&kind) {
                        return Err(err(&key, format!("{name:?} is listed twice")));
                    }
                    out.push(kind);
                }
                out
            }
        };

        let max_load_desired = raw.max_load_desired.unwrap_or(0.97);
        if !(max_load_desired > 0.0 && max_load_desired <= 1.0) {
            return Err(err(
                "max_load_desired",
                format!("{max_load_desired} is not in (0, 1]"),
            ));
        }
        let interval_s = within(raw.interval_s.unwrap_or(60.0), 1.0, 86_400.0)
            .map_err(|m| err("interval_s", m))?;
        let rescale_cost_s = within(raw.rescale_cost_s.unwrap_or(30.0), 0.0, 86_400.0)
            .map_err(|m| err("rescale_cost_s", m))?;
        let cooldown_s =
            within(raw.cooldown_s.unwrap_or(0), 0, 86_400 * 7).map_err(|m| err("cooldown_s", m))?;
        let min_marginal_speedup = raw.min_marginal_speedup.unwrap_or(0.0);
        if !(0.0..1.0).contains(&min_marginal_speedup) {
            return Err(err(
                "min_marginal_speedup",
                format!("{min_marginal_speedup} is not in [0, 1)"),
            ));
        }
        let progress_min_marginal_speedup = within(
            raw.progress_min_marginal_speedup
                .unwrap_or(crate::planner::progress::DEFAULT_MIN_MARGINAL_SPEEDUP),
            0.0,
            1.0,
        )
        .map_err(|m| err("progress_min_marginal_speedup", m))?;
        let progress_spare_min_marginal_speedup = within(
            raw.progress_spare_min_marginal_speedup
                .unwrap_or(crate::planner::progress::DEFAULT_SPARE_MIN_MARGINAL_SPEEDUP),
            0.0,
            1.0,
        )
        .map_err(|m| err("progress_spare_min_marginal_speedup", m))?;
        let starvation_bound_s = within(
            raw.starvation_bound_s
                .unwrap_or(crate::planner::progress::DEFAULT_STARVATION_BOUND_S),
            1,
            86_400 * 7,
        )
        .map_err(|m| err("starvation_bound_s", m))?;
        let progress = ProgressReports {
            share: raw.progress_share.unwrap_or(1.0),
            sigma: raw.progress_sigma.unwrap_or(0.0),
            interval_s: raw.progress_interval_s.unwrap_or(interval_s),
        };
        within(progress.share, 0.0, 1.0).map_err(|m| err("progress_share", m))?;
        within(progress.sigma, 0.0, 3.0).map_err(|m| err("progress_sigma", m))?;
        if !(progress.interval_s > 0.0 && progress.interval_s.is_finite()) {
            return Err(err(
                "progress_interval_s",
                format!("{} is not above zero", progress.interval_s),
            ));
        }
        if let Some(h) = raw.horizon_s
            && !(h > 0.0 && h.is_finite())
        {
            return Err(err("horizon_s", format!("{h} is not above zero")));
        }

        // Speedup.
        let max_gpus = node_pools
            .iter()
            .map(|p| p.allocatable.gpu)
            .max()
            .unwrap_or(0);
        let speedup = match raw.speedup {
            None => SpeedupSpec::Linear,
            Some(s) => {
                if s.gpus_per_node.is_some() && s.model != "pollux" {
                    return Err(err(
                        "speedup.gpus_per_node",
                        "only the pollux model takes it".into(),
                    ));
                }
                if s.path.is_some() && s.model != "pollux" && s.model != "pollux-throughput" {
                    return Err(err(
                        "speedup.path",
                        "only the pollux and pollux-throughput models take a path".into(),
                    ));
                }
                match s.model.as_str() {
                    "linear" => SpeedupSpec::Linear,
                    "pollux-throughput" => {
                        let Some(p) = s.path else {
                            return Err(err(
                                "speedup.path",
                                "the pollux-throughput model needs a path".into(),
                            ));
                        };
                        SpeedupSpec::PolluxThroughput { path: base.join(p) }
                    }
                    "pollux" => {
                        let Some(p) = s.path else {
                            return Err(err(
                                "speedup.path",
                                "the pollux model needs a path".into(),
                            ));
                        };
                        let gpn = s.gpus_per_node.unwrap_or(max_gpus.max(1));
                        if !(1..=1024).contains(&gpn) {
                            return Err(err(
                                "speedup.gpus_per_node",
                                format!("{gpn} is not in 1..=1024"),
                            ));
                        }
                        SpeedupSpec::Pollux {
                            path: base.join(p),
                            gpus_per_node: gpn as u32,
                        }
                    }
                    m => match m.strip_prefix("amdahl:").map(str::parse::<f64>) {
                        Some(Ok(p)) if (0.0..=1.0).contains(&p) => SpeedupSpec::Amdahl(p),
                        Some(_) => {
                            return Err(err(
                                "speedup.model",
                                format!("{m:?}: the serial fraction of amdahl:P must be in [0, 1]"),
                            ));
                        }
                        None => {
                            return Err(err(
                                "speedup.model",
                                format!(
                                    "{m:?} is not a known model (pollux, pollux-throughput, linear, amdahl:P)"
                                ),
                            ));
                        }
                    },
                }
            }
        };

        // Faults.
        let mut faults = Vec::new();
        for (i, f) in raw.faults.iter().enumerate() {
            let key = |k: &str| format!("faults[{i}].{k}");
            let Some(pool) = node_pools.iter().find(|p| p.name == f.node_pool) else {
                return Err(err(
                    &key("node_pool"),
                    format!("no node pool named {:?}", f.node_pool),
                ));
            };
            if !(f.at_s >= 0.0 && f.at_s.is_finite()) {
                return Err(err(&key("at_s"), format!("{} is negative", f.at_s)));
            }
            if !(1..=i64::from(pool.count)).contains(&f.count) {
                return Err(err(
                    &key("count"),
                    format!("{} is not in 1..={} (the pool's size)", f.count, pool.count),
                ));
            }
            if let Some(d) = f.down_for_s
                && !(d > 0.0 && d.is_finite())
            {
                return Err(err(&key("down_for_s"), format!("{d} is not above zero")));
            }
            faults.push(Fault {
                at_s: f.at_s,
                node_pool: f.node_pool.clone(),
                count: f.count as u32,
                down_for_s: f.down_for_s,
            });
        }

        // Priorities: classes as the API server admits them, VC priorities resolving to one.
        let mut priority_classes = PriorityClasses::new();
        for (i, c) in raw.priority_classes.iter().enumerate() {
            let key = |k: &str| format!("priority_classes[{i}].{k}");
            if c.name.is_empty() {
                return Err(err(&key("name"), "must not be empty".into()));
            }
            // User-defined PriorityClasses are limited to 1e9 (higher values are the system's).
            within(
                c.value,
                i64::from(i32::MIN),
                i64::from(crate::api::priority::HIGHEST_USER_DEFINABLE_PRIORITY),
            )
            .map_err(|m| err(&key("value"), m))?;
            // `system-` names are the built-in classes' (known without being listed).
            if let Some((_, text)) =
                crate::api::priority::priority_class_problems(&c.name, c.value as i32, false, None)
                    .into_iter()
                    .next()
            {
                return Err(err(&key("name"), text));
            }
            if priority_classes
                .insert(c.name.clone(), c.value as i32)
                .is_some()
            {
                return Err(err(
                    &key("name"),
                    format!("class {:?} is listed twice", c.name),
                ));
            }
        }
        for (vc, text) in &raw.vc_priorities {
            let resolved = crate::api::priority::resolve_priority(text, &priority_classes);
            if let Some(warning) = resolved.warning {
                return Err(err(&format!("vc_priorities.{vc}"), warning));
            }
        }

        let queues = raw
            .queues
            .map(|q| read_queues(q, &|key: &str, message| err(key, message)))
            .transpose()?;

        Ok(Scenario {
            name,
            path: path.to_path_buf(),
            node_pools,
            trace,
            policies,
            schedulers,
            max_load_desired,
            interval_s,
            rescale_cost_s,
            cooldown_s,
            min_marginal_speedup,
            progress_min_marginal_speedup,
            progress_spare_min_marginal_speedup,
            starvation_bound_s,
            progress,
            speedup,
            seed: raw.seed.unwrap_or(0),
            faults,
            horizon_s: raw.horizon_s,
            gang_scheduling: raw.gang_scheduling.unwrap_or(true),
            priority_classes,
            vc_priorities: raw.vc_priorities,
            queues,
        })
    }

    /// GPUs of the whole cluster.
    pub fn total_gpus(&self) -> i64 {
        self.node_pools
            .iter()
            .map(|p| p.allocatable.gpu.saturating_mul(i64::from(p.count)))
            .fold(0, i64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
cluster:
  node_pools:
    - {name: gpu, count: 2, cpu: 96, memory: 768Gi, gpus: 8}
trace: {path: traces/t.csv, format: philly-pollux, limit_jobs: 10}
speedup: {model: 'amdahl:0.05'}
faults:
  - {at_s: 100, node_pool: gpu, count: 1, down_for_s: 600}
";

    fn parse(text: &str) -> Result<Scenario, SimError> {
        Scenario::parse(text, Path::new("s.yaml"), Path::new("/base"), "s")
    }

    #[test]
    fn reads_a_scenario_with_defaults() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.name, "s");
        assert_eq!(
            s.node_pools[0].allocatable,
            Resources::new(96_000, 768 << 30, 8)
        );
        assert_eq!(s.trace.path, Path::new("/base/traces/t.csv"));
        assert_eq!(s.policies.len(), 5);
        assert_eq!(s.min_marginal_speedup, 0.0);
        assert_eq!(s.schedulers, vec![SchedulerKind::Trainscale]);
        assert_eq!(s.trace.multi_gpu_workers, None);
        assert_eq!(s.interval_s, 60.0);
        assert_eq!(s.rescale_cost_s, 30.0);
        assert_eq!(s.max_load_desired, 0.97);
        assert_eq!(s.speedup, SpeedupSpec::Amdahl(0.05));
        assert_eq!(s.faults[0].down_for_s, Some(600.0));
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse(&GOOD.replace("gpus: 8", "gpu: 8"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cluster.node_pools[0]") && e.contains("gpu"),
            "{e}"
        );
        let e = parse(&format!("{GOOD}bogus: 1\n")).unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn out_of_range_values_are_named() {
        let cases = [
            ("count: 2", "count: 0", "cluster.node_pools[0].count"),
            (
                "memory: 768Gi",
                "memory: lots",
                "cluster.node_pools[0].memory",
            ),
            ("limit_jobs: 10", "limit_jobs: 0", "trace.limit_jobs"),
            ("format: philly-pollux", "format: csv", "trace.format"),
            ("'amdahl:0.05'", "'amdahl:2'", "speedup.model"),
            ("node_pool: gpu", "node_pool: cpu", "faults[0].node_pool"),
            (
                "limit_jobs: 10}",
                "limit_jobs: 10, multi_gpu_workers: {min_gpus: 8, per_worker_gpus: [4, 0]}}",
                "trace.multi_gpu_workers.per_worker_gpus[1]",
            ),
            (
                "limit_jobs: 10}",
                "limit_jobs: 10, multi_gpu_workers: {min_gpus: 8, per_worker_gpus: []}}",
                "trace.multi_gpu_workers.per_worker_gpus",
            ),
            (
                "limit_jobs: 10}",
                "limit_jobs: 10, cpu_only: {every: 0, cpus: 8, memory_mib: 1024}}",
                "trace.cpu_only.every",
            ),
            (
                "limit_jobs: 10}",
                "limit_jobs: 10, cpu_only: {every: 3, cpus: 8}}",
                "trace.cpu_only",
            ),
            ("count: 1,", "count: 3,", "faults[0].count"),
        ];
        for (from, to, key) in cases {
            let text = GOOD.replace(from, to);
            assert_ne!(text, GOOD, "{from}");
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{key}: {e}");
        }
        let e = parse(&format!("{GOOD}interval_s: 0\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `interval_s`"), "{e}");
        let e = parse(&format!("{GOOD}policies: [fulfillment, fifo]\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `policies[1]`"), "{e}");
        for (list, key) in [
            ("[trainscale, kube]", "schedulers[1]"),
            ("[kube-scheduler, kube-scheduler]", "schedulers[1]"),
            ("[]", "schedulers"),
        ] {
            let e = parse(&format!("{GOOD}schedulers: {list}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("key `{key}`")), "{list}: {e}");
        }
        let e = parse(&format!("{GOOD}scheduler: trainscale\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("scheduler") && e.contains("schedulers"), "{e}");
    }

    #[test]
    fn reads_schedulers_and_trace_reshaping() {
        let s = parse(&format!(
            "{}schedulers: [kube-scheduler, trainscale]\n",
            GOOD.replace(
                "limit_jobs: 10}",
                "limit_jobs: 10, multi_gpu_workers: {min_gpus: 8, per_worker_gpus: [4, 8]}, \
                 cpu_only: {every: 5, cpus: 16, memory_mib: 65536}}"
            )
            .replace(
                "{model: 'amdahl:0.05'}",
                "{model: pollux-throughput, path: p.csv}"
            )
        ))
        .unwrap();
        assert_eq!(
            s.schedulers,
            vec![SchedulerKind::KubeScheduler, SchedulerKind::Trainscale]
        );
        assert_eq!(
            s.trace.multi_gpu_workers,
            Some(MultiGpuWorkers {
                min_gpus: 8,
                per_worker_gpus: vec![4, 8]
            })
        );
        assert_eq!(
            s.trace.cpu_only,
            Some(CpuOnly {
                every: 5,
                cpus: 16,
                memory_mib: 65536
            })
        );
        assert_eq!(
            s.speedup,
            SpeedupSpec::PolluxThroughput {
                path: PathBuf::from("/base/p.csv")
            }
        );
        let e = parse(&GOOD.replace("{model: 'amdahl:0.05'}", "{model: pollux-throughput}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `speedup.path`"), "{e}");
    }

    const QUEUES: &str = "queues:
  cohort: philly
  queues:
    - {name: team-a, vcs: [ee9e8c], gpus: 8}
    - {name: team-b, vcs: [b436b2, 6c71a0], gpus: 4, borrowing_limit: 2}
    - {name: rest, vcs: ['*'], gpus: 4}
";

    #[test]
    fn reads_queues_and_finds_each_vc_its_queue() {
        assert_eq!(parse(GOOD).unwrap().queues, None);
        let s = parse(&format!("{GOOD}{QUEUES}")).unwrap();
        let q = s.queues.unwrap();
        assert_eq!(q.cohort.as_deref(), Some("philly"));
        assert_eq!(
            q.queues[1],
            QueueSpec {
                name: "team-b".into(),
                vcs: vec!["b436b2".into(), "6c71a0".into()],
                catch_all: false,
                gpus: 4,
                borrowing_limit: Some(2),
            }
        );
        assert!(q.queues[2].catch_all && q.queues[2].vcs.is_empty());
        assert_eq!(q.queue_of("ee9e8c"), Some(0));
        assert_eq!(q.queue_of("6c71a0"), Some(1));
        assert_eq!(q.queue_of("103959"), Some(2));
        assert_eq!(q.queue_of(""), Some(2));
        // With a catch-all, every trace VC has a queue.
        q.check_trace(Path::new("s.yaml"), [("zzz", 2)]).unwrap();
    }

    #[test]
    fn bad_queues_are_named() {
        let cases = [
            // A VC in two queues.
            (
                "vcs: [b436b2, 6c71a0]",
                "vcs: [b436b2, ee9e8c]",
                "queues.queues[1].vcs[1]",
            ),
            // Two catch-alls.
            (
                "vcs: [b436b2, 6c71a0]",
                "vcs: [b436b2, '*']",
                "queues.queues[2].vcs[0]",
            ),
            // Negative quotas.
            ("gpus: 8}", "gpus: -8}", "queues.queues[0].gpus"),
            (
                "borrowing_limit: 2",
                "borrowing_limit: -1",
                "queues.queues[1].borrowing_limit",
            ),
            // Borrowing without a cohort.
            ("  cohort: philly\n", "", "queues.queues[1].borrowing_limit"),
            ("cohort: philly", "cohort: Philly", "queues.cohort"),
            ("name: rest", "name: team-a", "queues.queues[2].name"),
            ("name: rest", "name: Rest_1", "queues.queues[2].name"),
            ("vcs: ['*']", "vcs: []", "queues.queues[2].vcs"),
            (
                "gpus: 4}",
                "gpus: 4, lending_limit: 1}",
                "queues.queues[2].lending_limit",
            ),
            ("vcs: [ee9e8c]", "vcs: [103959]", "queues.queues[0].vcs[0]"),
        ];
        for (from, to, key) in cases {
            let text = format!("{GOOD}{}", QUEUES.replacen(from, to, 1));
            assert_ne!(text, format!("{GOOD}{QUEUES}"), "{from}");
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{key}: {e}");
        }
        let e = parse(&format!("{GOOD}queues: {{queues: []}}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key `queues.queues`"), "{e}");
    }

    #[test]
    fn a_trace_vc_without_a_queue_needs_a_catch_all() {
        let text = format!("{GOOD}{QUEUES}").replace("vcs: ['*']", "vcs: ['103959']");
        let q = parse(&text).unwrap().queues.unwrap();
        q.check_trace(Path::new("s.yaml"), [("ee9e8c", 2), ("103959", 3)])
            .unwrap();
        let e = q
            .check_trace(
                Path::new("s.yaml"),
                [("ee9e8c", 2), ("zz1", 3), ("zz2", 4), ("zz1", 5)],
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `queues.queues`")
                && e.contains("\"zz1\" (first at row 3)")
                && e.contains("1 other VC"),
            "{e}"
        );
    }
}
