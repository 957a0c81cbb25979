//! Property tests: a plan's removals are exactly what the Job controller removes.
//!
//! trainscale resizes a job only by lowering or raising its Indexed trainer Job's `parallelism`
//! (= `completions`); the controller then removes every pod whose completion index is at or above
//! the new value, bound or pending, and nothing else. For random jobs (bound, pending and missing
//! indexes in any order, over-committed nodes, parallelism above max, gangs that need room) and
//! every policy, each plan that shrinks a job must name exactly those pods: the pending ones as
//! one count, the bound ones per node.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use trainscale::api::{JobKey, Resources};
use trainscale::cluster::ClusterState;
use trainscale::planner::{PlannerConfig, Policy, plan};
use trainscale::testkit::trainer_pod;

/// What one completion index of a job is.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A pod bound to node `n`.
    Bound(usize),
    /// A pod not bound yet.
    Pending,
    /// No pod (the controller has yet to create it).
    Missing,
}

#[derive(Debug, Clone)]
struct Job {
    trainer: Resources,
    min: i32,
    max: i32,
    /// Index `i` of the trainer Job; the parallelism is the length.
    slots: Vec<Slot>,
    /// A pod left over at an index at or above parallelism (still running, being removed).
    stray: Option<usize>,
}

#[derive(Debug, Clone)]
struct Spec {
    nodes: Vec<Resources>,
    jobs: Vec<Job>,
}

fn spec() -> impl Strategy<Value = Spec> {
    let node =
        (2i64..=16, 8i64..=64, 0i64..=4).prop_map(|(c, m, g)| Resources::new(c * 1000, m * GIB, g));
    let slot = prop_oneof![
        4 => (0usize..4).prop_map(Slot::Bound),
        1 => Just(Slot::Pending),
        1 => Just(Slot::Missing),
    ];
    let job = (
        (1i64..=4, 1i64..=8, 0i64..=1),
        1i32..=4,
        0i32..=4,
        proptest::collection::vec(slot, 0..=9),
        proptest::option::of(0usize..4),
    )
        .prop_map(|((c, m, g), min, extra, slots, stray)| Job {
            trainer: Resources::new(c * 1000, m * GIB, g),
            min,
            max: min + extra,
            slots,
            stray,
        });
    (
        proptest::collection::vec(node, 1..=4),
        proptest::collection::vec(job, 1..=5),
    )
        .prop_map(|(nodes, jobs)| Spec { nodes, jobs })
}

fn node_name(i: usize) -> String {
    format!("n{i}")
}

fn key(j: usize) -> JobKey {
    JobKey::new("ns", format!("j{j}"))
}

/// The cluster of `spec`; bound pods are placed as listed, whatever they overcommit.
fn build(spec: &Spec) -> ClusterState {
    let mut s = ClusterState::new();
    for (i, r) in spec.nodes.iter().enumerate() {
        add_node(&mut s, &node_name(i), r.cpu_milli, r.memory / GIB, r.gpu);
    }
    let node = |n: usize| node_name(n % spec.nodes.len());
    for (j, job) in spec.jobs.iter().enumerate() {
        let key = key(j);
        s.set_training_job(key.clone(), Some(job_info(job.min, job.max, job.trainer)));
        s.set_trainer_job(key.clone(), Some(Some(job.slots.len() as i32)));
        for (index, slot) in job.slots.iter().enumerate() {
            let bound = match slot {
                Slot::Bound(n) => Some(node(*n)),
                Slot::Pending => None,
                Slot::Missing => continue,
            };
            s.set_pod(
                ("ns".to_string(), format!("j{j}-{index}")),
                Some(trainer_pod(&key, bound, job.trainer, Some(index as u32))),
            );
        }
        if let Some(n) = job.stray {
            let index = job.slots.len();
            s.set_pod(
                ("ns".to_string(), format!("j{j}-{index}-stray")),
                Some(trainer_pod(
                    &key,
                    Some(node(n)),
                    job.trainer,
                    Some(index as u32),
                )),
            );
        }
    }
    s
}

/// The controller's removals when `job`'s parallelism goes to `target`: pending and missing
/// indexes at or above it (they cost nothing), and bound ones by node name.
fn controller_removes(spec: &Spec, job: &Job, target: i32) -> (u32, BTreeMap<String, u32>) {
    let mut pending = 0;
    let mut bound = BTreeMap::new();
    for slot in job.slots.iter().skip(target.max(0) as usize) {
        match slot {
            Slot::Bound(n) => *bound.entry(node_name(n % spec.nodes.len())).or_insert(0) += 1,
            Slot::Pending | Slot::Missing => pending += 1,
        }
    }
    (pending, bound)
}

fn configs() -> Vec<PlannerConfig> {
    let fulfillment = |bulk| PlannerConfig {
        bulk_min_trainers: bulk,
        ..PlannerConfig::default()
    };
    vec![
        fulfillment(256),
        fulfillment(1),
        PlannerConfig {
            policy: Policy::Edl,
            ..PlannerConfig::default()
        },
        PlannerConfig {
            policy: Policy::Static,
            ..PlannerConfig::default()
        },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn plan_removals_are_what_the_job_controller_removes(spec in spec()) {
        let state = build(&spec);
        for config in configs() {
            let plan = plan(&state, &config);
            for (j, job) in spec.jobs.iter().enumerate() {
                let Some(p) = plan.job(&key(j)) else {
                    prop_assert!(false, "{:?}: job j{} has no plan", config.policy, j);
                    continue;
                };
                let named = p.named(&state);
                let mut pending = 0;
                let mut bound = BTreeMap::new();
                for r in &named.removals {
                    match r.node {
                        Some(node) => *bound.entry(node.to_string()).or_insert(0) += r.trainers,
                        None => pending += r.trainers,
                    }
                }
                if p.target >= p.current {
                    prop_assert_eq!(
                        (pending, bound.len()),
                        (0, 0),
                        "{:?} j{}: nothing goes when growing", config.policy, j
                    );
                    continue;
                }
                prop_assert_eq!(
                    (pending, bound),
                    controller_removes(&spec, job, p.target),
                    "{:?} j{}: {} -> {}", config.policy, j, p.current, p.target
                );
                // What stays bound below the target plus what is placed is at most the target.
                let kept_bound = job
                    .slots
                    .iter()
                    .take(p.target as usize)
                    .filter(|s| matches!(s, Slot::Bound(_)))
                    .count() as u32;
                let placed: u32 = p.placements.iter().map(|c| c.trainers).sum();
                prop_assert!(
                    kept_bound + placed <= p.target as u32,
                    "{:?} j{}: {} bound kept + {} placed > target {}",
                    config.policy, j, kept_bound, placed, p.target
                );
            }
        }
    }
}
