//! Generated clusters for benches and property tests: deterministic from a seed, no I/O.

use crate::api::{JobKey, Quantity, Resources, TrainingJobPhase};
use crate::cluster::{ClusterState, JobInfo, NodeInfo, PodInfo, PodPhase, Role};

/// The shape of a generated cluster.
#[derive(Debug, Clone, Copy)]
pub struct ClusterShape {
    pub nodes: usize,
    pub jobs: usize,
    /// Trainer pods bound per job at the start (capped by min and room).
    pub bound_per_job: usize,
    /// Other (non-trainer) pods per node.
    pub other_pods_per_node: usize,
    pub seed: u64,
}

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
/// (64 cores, 256 GiB); half the jobs want 1–2 GPUs per trainer. Trainers are bound first-fit so
/// the cluster is busy but not full; jobs are elastic with min 1–4 and max min+1..min+16.
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
                }),
            );
            left -= req;
        }
        free.push(left);
    }
    let mut cursor = 0usize;
    for j in 0..shape.jobs {
        let key = JobKey::new(format!("team-{}", j % 50), format!("job-{j:05}"));
        let gpu = if j % 2 == 0 {
            1 + rng.below(2) as i64
        } else {
            0
        };
        let trainer = Resources::new(
            1000 * (1 + rng.below(8) as i64),
            GIB * (2 + rng.below(30) as i64),
            gpu,
        );
        let min = 1 + rng.below(4) as i32;
        let max = min + 1 + rng.below(16) as i32;
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
                (key.namespace.clone(), format!("{}-trainer-{t}", key.name)),
                Some(PodInfo {
                    node: Some(node_name(n)),
                    phase: PodPhase::Running,
                    requests: trainer,
                    terminating: false,
                    owner: Some((key.clone(), Role::Trainer)),
                    created: j as i64,
                }),
            );
            placed += 1;
        }
        let current = placed.max(min);
        state.set_trainer_job(key.clone(), Some(Some(current)));
        state.set_training_job(
            key,
            Some(JobInfo {
                min,
                max,
                trainer,
                exact: [
                    Quantity::from_units(trainer.gpu),
                    Quantity::from_milli(trainer.cpu_milli),
                    Quantity::from_units(trainer.memory),
                ],
                priority: 0,
                created: j as i64,
                phase: TrainingJobPhase::Running,
                stored_parallelism: Some(current),
                last_scale: None,
            }),
        );
    }
    state
}

/// The name of generated node `n`.
pub fn node_name(n: usize) -> String {
    format!("node-{n:05}")
}
