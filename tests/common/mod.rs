//! Helpers shared by the planner tests: build small states and apply a plan the way the
//! kube-scheduler and the Job controller would.

#![allow(dead_code)]

use trainscale::api::{JobKey, Quantity, Resources, TrainingJobPhase};
use trainscale::cluster::{ClusterState, JobInfo, NodeInfo, PodInfo, PodPhase, Role};
use trainscale::planner::ScalePlan;

pub const GIB: i64 = 1 << 30;

pub fn add_node(state: &mut ClusterState, name: &str, cpu_milli: i64, mem_gib: i64, gpu: i64) {
    state.set_node(
        name,
        Some(NodeInfo {
            allocatable: Resources::new(cpu_milli, mem_gib * GIB, gpu),
            schedulable: true,
        }),
    );
}

pub fn job_info(min: i32, max: i32, trainer: Resources) -> JobInfo {
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
        created: 0,
        phase: TrainingJobPhase::Running,
        stored_parallelism: None,
        last_scale: None,
    }
}

/// Adds a job with `bound` trainers on the given nodes and `current` as its parallelism; the
/// trainers not bound are pending pods.
pub fn add_job(
    state: &mut ClusterState,
    name: &str,
    info: JobInfo,
    current: i32,
    bound_on: &[&str],
) {
    let key = JobKey::new("ns", name);
    let trainer = info.trainer;
    state.set_training_job(key.clone(), Some(info));
    state.set_trainer_job(key.clone(), Some(Some(current)));
    for (i, node) in bound_on.iter().enumerate() {
        add_trainer_pod(state, &key, &format!("{name}-b{i}"), Some(node), trainer);
    }
    for i in bound_on.len()..current.max(0) as usize {
        add_trainer_pod(state, &key, &format!("{name}-p{i}"), None, trainer);
    }
}

pub fn add_trainer_pod(
    state: &mut ClusterState,
    key: &JobKey,
    pod: &str,
    node: Option<&str>,
    trainer: Resources,
) {
    state.set_pod(
        (key.namespace.clone(), pod.to_string()),
        Some(PodInfo {
            node: node.map(str::to_string),
            phase: if node.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            },
            requests: trainer,
            terminating: false,
            owner: Some((key.clone(), Role::Trainer)),
            created: 0,
        }),
    );
}

/// Applies a plan: every trainer pod of a planned job is rebuilt from the plan, bound trainers
/// kept minus removals, placements bound where named, parallelism set to the target.
pub fn apply_plan(state: &mut ClusterState, plan: &ScalePlan) {
    for job in &plan.jobs {
        let Some(slot) = state.job(&job.key) else {
            continue;
        };
        let Some(info) = slot.info.clone() else {
            continue;
        };
        let mut bound: Vec<(String, u32)> = slot
            .trainers
            .bound_by_node
            .iter()
            .map(|(id, n)| (state.node(*id).unwrap().name.clone(), *n))
            .collect();
        for r in &job.removals {
            if let Some(node) = &r.node {
                let entry = bound.iter_mut().find(|(n, _)| n == node).unwrap();
                entry.1 -= r.trainers;
            }
        }
        // Drop every trainer pod of the job, then recreate the planned ones.
        let pods: Vec<(String, String)> = state
            .pods()
            .filter(|(_, p)| matches!(&p.owner, Some((k, Role::Trainer)) if *k == job.key))
            .map(|(k, _)| k.clone())
            .collect();
        for (ns, name) in pods {
            state.delete_pod(&ns, &name);
        }
        let mut i = 0;
        let mut add = |state: &mut ClusterState, node: Option<&str>| {
            add_trainer_pod(
                state,
                &job.key,
                &format!("{}-t{i}", job.key.name),
                node,
                info.trainer,
            );
            i += 1;
        };
        for (node, n) in &bound {
            for _ in 0..*n {
                add(state, Some(node));
            }
        }
        for p in &job.placements {
            for _ in 0..p.trainers {
                add(state, Some(&p.node));
            }
        }
        let placed: i32 = bound.iter().map(|(_, n)| *n as i32).sum::<i32>()
            + job
                .placements
                .iter()
                .map(|p| p.trainers as i32)
                .sum::<i32>();
        for _ in placed..job.target {
            add(state, None);
        }
        state.set_trainer_job(job.key.clone(), Some(Some(job.target)));
    }
}
