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
        let interval_s = raw.interval_s.unwrap_or(60.0);
        if !(1.0..=86_400.0).contains(&interval_s) {
            return Err(err(
                "interval_s",
                format!("{interval_s} is not in [1, 86400]"),
            ));
        }
        let rescale_cost_s = raw.rescale_cost_s.unwrap_or(30.0);
        if !(0.0..=86_400.0).contains(&rescale_cost_s) {
            return Err(err(
                "rescale_cost_s",
                format!("{rescale_cost_s} is not in [0, 86400]"),
            ));
        }
        let cooldown_s = raw.cooldown_s.unwrap_or(0);
        if !(0..=86_400 * 7).contains(&cooldown_s) {
            return Err(err(
                "cooldown_s",
                format!("{cooldown_s} is not in [0, 604800]"),
            ));
        }
        let min_marginal_speedup = raw.min_marginal_speedup.unwrap_or(0.0);
        if !(0.0..1.0).contains(&min_marginal_speedup) {
            return Err(err(
                "min_marginal_speedup",
                format!("{min_marginal_speedup} is not in [0, 1)"),
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
            if !(i64::from(i32::MIN)..=1_000_000_000).contains(&c.value) {
                return Err(err(
                    &key("value"),
                    format!("{} is not in [-2147483648, 1000000000]", c.value),
                ));
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
            speedup,
            seed: raw.seed.unwrap_or(0),
            faults,
            horizon_s: raw.horizon_s,
            gang_scheduling: raw.gang_scheduling.unwrap_or(true),
            priority_classes,
            vc_priorities: raw.vc_priorities,
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
        assert_eq!(s.policies.len(), 4);
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
}
