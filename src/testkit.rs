//! Generated clusters for benches and property tests: deterministic from a seed, no I/O.

use crate::api::speedup::SpeedupCurve;
use crate::api::{JobKey, Quantity, Resources, TrainingJobPhase};
use crate::cluster::{ClusterState, JobInfo, NodeId, NodeInfo, PodInfo, PodPhase, Role};
use crate::planner::ScalePlan;

use std::collections::HashMap;
use std::sync::Arc;

pub mod dump;
pub mod kueue;

/// The shape of a generated cluster.
#[derive(Debug, Clone, Copy)]
pub struct ClusterShape {
    pub nodes: usize,
    pub jobs: usize,
    /// At most this many trainer pods bound per job at the start (each job draws a count in
    /// `0..=min(cap, max)`; what does not fit stays pending).
    pub bound_per_job: usize,
    /// Other (non-trainer) pods per node.
    pub other_pods_per_node: usize,
    pub seed: u64,
    /// Nodes carry zone labels and every tenth a `NoSchedule` taint; every job has a trainer
    /// class, one in five with a zone selector or the taint's toleration (see [`constrain`]).
    pub constrained: bool,
}

impl ClusterShape {
    /// The cluster `benches/planner.rs` plans on, with `nodes` nodes and `jobs` jobs.
    pub fn planner_bench(nodes: usize, jobs: usize) -> Self {
        ClusterShape {
            nodes,
            jobs,
            bound_per_job: 40,
            other_pods_per_node: 2,
            seed: 42,
            constrained: false,
        }
    }

    /// [`ClusterShape::planner_bench`] with node taints, labels and job selectors (see
    /// [`constrain`]).
    pub fn constrained_bench(nodes: usize, jobs: usize) -> Self {
        ClusterShape {
            constrained: true,
            ..Self::planner_bench(nodes, jobs)
        }
    }
}

/// The planner benchmark's steady state: one job in this many finished, as many arrived.
pub const PLANNER_BENCH_CHURN: usize = 20;

/// A small deterministic generator (SplitMix64), enough for test data.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

const GIB: i64 = 1 << 30;

/// Builds a cluster: 3 of 4 nodes have 8 GPUs (96 cores, 768 GiB), the rest are CPU nodes
/// (64 cores, 256 GiB); half the jobs want 1–2 GPUs per trainer (8–12 cores, 32–64 GiB), half
/// 2–16 cores and 4–32 GiB. Jobs are elastic with min 1–8 and max min+4..min+31 and ask for
/// max(bound, min) trainers; bound trainers are placed first-fit, so some jobs start below min,
/// some at max, most in between, and all at max would not fit: the pass has to choose.
pub fn generate(shape: ClusterShape) -> ClusterState {
    let mut rng = SplitMix::new(shape.seed);
    let mut state = ClusterState::new();
    let mut free = Vec::with_capacity(shape.nodes);
    for n in 0..shape.nodes {
        let gpu_node = n % 4 != 3;
        let alloc = if gpu_node {
            Resources::new(96_000, 768 * GIB, 8)
        } else {
            Resources::new(64_000, 256 * GIB, 0)
        };
        let name = node_name(n);
        state.set_node(
            &name,
            Some(NodeInfo {
                allocatable: alloc,
                schedulable: true,
            }),
        );
        let mut left = alloc;
        for p in 0..shape.other_pods_per_node {
            let req = Resources::new(100 + rng.below(400) as i64, GIB / 4, 0);
            state.set_pod(
                ("kube-system".into(), format!("daemon-{n}-{p}")),
                Some(PodInfo {
                    node: Some(name.clone()),
                    phase: PodPhase::Running,
                    requests: req,
                    terminating: false,
                    owner: None,
                    created: 0,
                    index: None,
                    extended: Default::default(),
                    priority: 0,
                    claim: None,
                }),
            );
            left -= req;
        }
        free.push(left);
    }
    let mut cursor = 0usize;
    // Two jobs in three declare a speedup curve (read by `goodput` only; drawn by index, so the
    // random draws, and every other policy's plans, stay as they were).
    let curves: Vec<Arc<SpeedupCurve>> = ["amdahl:0.9", "1:1,2:1.9,4:3.5,8:6.1,16:10"]
        .iter()
        .filter_map(|c| SpeedupCurve::parse(c).ok().map(Arc::new))
        .collect();
    for j in 0..shape.jobs {
        let key = JobKey::new(format!("team-{}", j % 50), format!("job-{j:05}"));
        // Half the jobs train on GPUs (mostly 1 per trainer), half on CPUs.
        let trainer = if j % 2 == 0 {
            Resources::new(
                1000 * (8 + rng.below(5) as i64),
                GIB * (32 + rng.below(33) as i64),
                1 + i64::from(rng.below(5) == 0),
            )
        } else {
            Resources::new(
                1000 * (2 + rng.below(15) as i64),
                GIB * (4 + rng.below(29) as i64),
                0,
            )
        };
        let min = 1 + rng.below(8) as i32;
        let max = min + 4 + rng.below(28) as i32;
        let bound = shape
            .bound_per_job
            .min(min as usize + rng.below(3) as usize);
        let mut placed = 0;
        for t in 0..bound {
            // First fit from a moving cursor keeps generation linear.
            let mut tries = 0;
            while tries < 8 && !trainer.fits_in(&free[cursor % shape.nodes.max(1)]) {
                cursor += 1;
                tries += 1;
            }
            let n = cursor % shape.nodes.max(1);
            if shape.nodes == 0 || !trainer.fits_in(&free[n]) {
                break;
            }
            free[n] -= trainer;
            state.set_pod(
                (
                    key.namespace.to_string(),
                    format!("{}-trainer-{t}", key.name),
                ),
                Some(PodInfo {
                    node: Some(node_name(n)),
                    phase: PodPhase::Running,
                    requests: trainer,
                    terminating: false,
                    owner: Some((key.clone(), Role::Trainer)),
                    created: j as i64,
                    index: Some(t as u32),
                    extended: Default::default(),
                    priority: 0,
                    claim: None,
                }),
            );
            placed += 1;
        }
        let current = placed.max(min);
        state.set_trainer_job(key.clone(), Some(Some(current)));
        state.set_training_job(
            key,
            Some(JobInfo {
                stored_parallelism: Some(current),
                speedup: curves.get(j % 3).cloned(),
                ..job_info(min, max, trainer, j as i64)
            }),
        );
    }
    if shape.constrained {
        constrain(&mut state);
    }
    state
}

/// The taint [`constrain`] puts on every tenth node.
const BENCH_TAINT: (&str, &str) = ("dedicated", "inference");

/// Gives the nodes zone labels `z0`..`z3` (node `n` in zone `n % 4`) and every tenth node a
/// `dedicated=inference:NoSchedule` taint, and every job a trainer class: one in ten selects a
/// zone, one in ten tolerates the taint, the rest have no constraints (and so avoid tainted
/// nodes). Bound trainers stay where they are, as after a taint added to a running node.
pub fn constrain(state: &mut ClusterState) {
    use crate::cluster::filters::{
        NodeTraits, PodConstraints, Taint, TaintEffect, Toleration, TolerationEffect,
        TolerationOperator,
    };
    use std::sync::Arc;
    let names: Vec<String> = state.nodes().map(|(_, n)| n.name.to_string()).collect();
    for (n, name) in names.iter().enumerate() {
        let mut traits = NodeTraits {
            name: name.clone(),
            ready: true,
            ..NodeTraits::default()
        };
        traits
            .labels
            .insert("zone".to_string(), format!("z{}", n % 4));
        if n % 10 == 9 {
            traits.taints.push(Taint {
                key: BENCH_TAINT.0.to_string(),
                value: BENCH_TAINT.1.to_string(),
                effect: TaintEffect::NoSchedule,
            });
        }
        state.set_node_traits(name, traits);
    }
    let keys: Vec<JobKey> = state.jobs().map(|(k, _, _)| k.clone()).collect();
    for (j, key) in keys.iter().enumerate() {
        let mut c = PodConstraints::default();
        match j % 10 {
            3 => {
                c.node_selector
                    .insert("zone".to_string(), format!("z{}", j % 4));
            }
            7 => c.tolerations.push(Toleration {
                key: Some(BENCH_TAINT.0.to_string()),
                operator: TolerationOperator::Equal,
                value: Some(BENCH_TAINT.1.to_string()),
                effect: Some(TolerationEffect::NoSchedule),
            }),
            _ => {}
        }
        state.set_trainer_class(key, Some(Arc::new(c)));
    }
}

/// The name of generated node `n`.
pub fn node_name(n: usize) -> String {
    format!("node-{n:05}")
}

/// Applies a plan as the Job controller and kube-scheduler would: every trainer pod of a planned
/// job is rebuilt from the plan with its completion index (positions below the target kept where
/// they were, the rest bound where the placements say, else pending) and its parallelism set to
/// the target. `plan` must have been made from `state` (and no longer borrow it: see
/// [`ScalePlan::into_owned`]).
pub fn apply_plan(state: &mut ClusterState, plan: &ScalePlan<'_>) {
    let mut pods_of = trainer_pods_by_job(state);
    for job in &plan.jobs {
        let Some(slot) = state.job(&job.key) else {
            continue;
        };
        let Some(info) = slot.info.clone() else {
            continue;
        };
        // Names before the pods go: deleting them may free the ids of nodes with no Node object.
        let name = |id: NodeId| state.node(id).map(|node| node.name.to_string());
        let kept: Vec<Option<String>> = slot
            .controller_positions(state.size_cap())
            .into_iter()
            .take(job.target.max(0) as usize)
            .map(|position| position.and_then(name))
            .collect();
        let mut placements: Vec<String> = job
            .placements
            .iter()
            .filter_map(|p| Some((name(p.node)?, p.trainers)))
            .flat_map(|(node, n)| std::iter::repeat_n(node, n as usize))
            .collect();
        placements.reverse();
        for (ns, name) in pods_of.remove(&job.key).unwrap_or_default() {
            state.delete_pod(&ns, &name);
        }
        for index in 0..job.target.max(0) as usize {
            let node = match kept.get(index) {
                Some(Some(node)) => Some(node.clone()),
                _ => placements.pop(),
            };
            state.set_pod(
                (
                    job.key.namespace.to_string(),
                    format!("{}-{index}", job.key.name),
                ),
                Some(trainer_pod(
                    &job.key,
                    node,
                    info.trainer,
                    Some(index as u32),
                )),
            );
        }
        state.set_trainer_job(job.key.clone().into_owned(), Some(Some(job.target)));
    }
}

/// Trainer pods (namespace, name) of every job.
fn trainer_pods_by_job(state: &ClusterState) -> HashMap<JobKey, Vec<(String, String)>> {
    let mut pods: HashMap<JobKey, Vec<(String, String)>> = HashMap::new();
    for (key, pod) in state.pods() {
        if let Some((job, Role::Trainer)) = &pod.owner {
            pods.entry(job.clone()).or_default().push(key.clone());
        }
    }
    for list in pods.values_mut() {
        list.sort();
    }
    pods
}

/// Adds one trainer pod of `key`, bound to `node` (Running) or pending, without a completion
/// index (as a NonIndexed Job's pod).
pub fn add_trainer(
    state: &mut ClusterState,
    key: &JobKey,
    pod: &str,
    node: Option<&str>,
    trainer: Resources,
) {
    state.set_pod(
        (key.namespace.to_string(), pod.to_string()),
        Some(trainer_pod(key, node.map(str::to_string), trainer, None)),
    );
}

/// A trainer pod of `key`: bound to `node` (Running) or pending, with completion index `index`.
pub fn trainer_pod(
    key: &JobKey,
    node: Option<String>,
    trainer: Resources,
    index: Option<u32>,
) -> PodInfo {
    PodInfo {
        phase: if node.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        },
        node,
        requests: trainer,
        terminating: false,
        owner: Some((key.clone(), Role::Trainer)),
        created: 0,
        index,
        extended: Default::default(),
        priority: 0,
        claim: None,
    }
}

/// A cluster as a pass finds it in steady operation: [`generate`]d, settled by one applied
/// `fulfillment` pass, then one job in `churn` finished (its pods gone) and as many new jobs
/// arrived, asking for their min with every trainer pending.
pub fn steady(shape: ClusterShape, churn: usize) -> ClusterState {
    steady_under(
        shape,
        churn,
        &crate::planner::PlannerConfig::default(),
        |_| {},
    )
}

/// [`steady`], settled by a pass of `config` instead, with `amend` applied to the generated
/// state before it is settled and again once the new jobs arrived (e.g. to give every job a
/// progress estimate).
pub fn steady_under(
    shape: ClusterShape,
    churn: usize,
    config: &crate::planner::PlannerConfig,
    amend: impl Fn(&mut ClusterState),
) -> ClusterState {
    let mut state = generate(shape);
    amend(&mut state);
    let settled = crate::planner::plan(&state, config).into_owned();
    apply_plan(&mut state, &settled);
    let mut rng = SplitMix::new(shape.seed ^ 0x5eed);
    let keys: Vec<JobKey> = state.jobs().map(|(k, _, _)| k.clone()).collect();
    let mut pods_of = trainer_pods_by_job(&state);
    for key in keys.iter().step_by(churn.max(1)) {
        for (ns, name) in pods_of.remove(key).unwrap_or_default() {
            state.delete_pod(&ns, &name);
        }
        state.set_trainer_job(key.clone(), None);
        state.set_training_job(key.clone(), None);
    }
    let arrivals = keys.len() / churn.max(1);
    for a in 0..arrivals {
        let key = JobKey::new("arrivals", format!("new-{a:05}"));
        let trainer = Resources::new(1000 * (8 + rng.below(5) as i64), GIB * 40, 1);
        let min = 1 + rng.below(4) as i32;
        let info = job_info(
            min,
            min + 8 + rng.below(16) as i32,
            trainer,
            shape.jobs as i64 + a as i64,
        );
        state.set_training_job(key.clone(), Some(info));
        state.set_trainer_job(key.clone(), Some(Some(min)));
        if shape.constrained {
            let class = crate::cluster::filters::PodConstraints::default();
            state.set_trainer_class(&key, Some(std::sync::Arc::new(class)));
        }
        for t in 0..min {
            add_trainer(&mut state, &key, &format!("new-{a:05}-{t}"), None, trainer);
        }
    }
    amend(&mut state);
    state
}

/// A Running job's parsed TrainingJob (no stored parallelism, priority 0, never rescaled).
pub fn job_info(min: i32, max: i32, trainer: Resources, created: i64) -> JobInfo {
    JobInfo {
        min,
        max,
        trainer,
        exact: [
            Quantity::from_units(trainer.gpu),
            Quantity::from_milli(trainer.cpu_milli),
            Quantity::from_units(trainer.memory),
        ],
        priority: 0,
        priority_class: None,
        created,
        phase: TrainingJobPhase::Running,
        stored_parallelism: None,
        last_scale: None,
        speedup: None,
        progress: None,
    }
}
